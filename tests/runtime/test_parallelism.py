"""elmo_hf/runtime/parallelism.py: the one home of the thread and process policy (the worker count and start method
are tested with the workers, tests/embedding/test_workers.py; the passive waits with the command, tests/cli/test_threads.py)."""

from __future__ import annotations

import ast
import os

import pytest
import torch

from elmo_hf.runtime import parallelism
from elmo_hf.runtime.parallelism import (
    EmbeddingProcesses, command_line_embedding, ray_actor_threads, set_torch_threads, set_worker_threads, torch_threads,
)

from ..conftest import REPOSITORY_ROOT


@pytest.mark.parametrize(
    ("workers", "threads", "expected"),
    [
        (None, None, EmbeddingProcesses(None, None, None)),  # the library's defaults: default_workers(), 1 thread each
        (3, None, EmbeddingProcesses(3, None, None)),
        (None, 3, EmbeddingProcesses(1, None, 3)),  # --threads alone: one process at that many threads
        (1, 2, EmbeddingProcesses(1, None, 2)),
        (4, 2, EmbeddingProcesses(4, 2, None)),  # with --workers N: each worker's threads
    ],
)
def test_the_command_reads_workers_and_threads_as_documented(workers, threads, expected):
    assert command_line_embedding(workers, threads) == expected


def test_a_block_at_some_threads_gives_the_previous_count_back_even_after_an_error():
    previous = torch.get_num_threads()
    other = 1 if previous != 1 else 2
    with torch_threads(other):
        assert torch.get_num_threads() == other
    assert torch.get_num_threads() == previous
    with pytest.raises(RuntimeError, match="inside"):
        with torch_threads(other):
            raise RuntimeError("inside")
    assert torch.get_num_threads() == previous
    with torch_threads(None):
        assert torch.get_num_threads() == previous


def test_threads_below_one_are_refused_naming_the_option():
    with pytest.raises(ValueError, match="--threads must be >= 1, got 0"):
        set_torch_threads(0, "--threads")
    with pytest.raises(ValueError, match="threads must be >= 1, got -1"):
        with torch_threads(-1):
            pass


def test_a_ray_actor_runs_one_thread_per_whole_cpu_and_at_least_one():
    assert [ray_actor_threads(cpus) for cpus in (0.5, 1, 2.7, 4)] == [1, 1, 2, 4]


def test_a_spawned_worker_limits_openmp_before_torch_and_a_forked_one_leaves_the_environment(monkeypatch):
    previous = torch.get_num_threads()
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    try:
        set_worker_threads(1, spawned=False)
        assert "OMP_NUM_THREADS" not in os.environ and torch.get_num_threads() == 1
        set_worker_threads(2, spawned=True)
        assert os.environ["OMP_NUM_THREADS"] == "2" and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(previous)


# What only parallelism.py may call or name: setting torch's threads, reading the cores, the start methods, the
# OpenMP variables. Read with `ast` in every module of the two packages (docstrings do not count).
POLICY_CALLS = {"set_num_threads", "set_num_interop_threads", "sched_getaffinity", "cpu_count", "get_all_start_methods"}
POLICY_NAMES = {"OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS"}


def policy_decisions(source: str) -> list[str]:
    """The calls and names of ``POLICY_CALLS`` / ``POLICY_NAMES`` in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in POLICY_CALLS:
            found.append(node.func.attr)
        elif isinstance(node, ast.Constant) and node.value in POLICY_NAMES:
            found.append(node.value)
    return found


def test_threads_and_processes_are_decided_in_parallelism_only():
    assert policy_decisions("import torch\ntorch.set_num_threads(2)\nenv['OMP_NUM_THREADS'] = '1'") == [
        "set_num_threads", "OMP_NUM_THREADS",
    ]  # the check can fail
    owner = os.path.realpath(parallelism.__file__)
    elsewhere = {}
    for package in ("elmo_hf", "elmo_hf_cli"):
        for path in sorted((REPOSITORY_ROOT / package).rglob("*.py")):
            if os.path.realpath(path) != owner and (found := policy_decisions(path.read_text(encoding="utf-8"))):
                elsewhere[str(path.relative_to(REPOSITORY_ROOT))] = found
    assert elsewhere == {}
