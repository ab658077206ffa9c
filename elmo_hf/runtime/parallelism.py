"""The one home of elmo-hf's thread and process policy: how many cores a job has, how many embedding workers it
starts, how they start, and how many torch threads each process runs. The command line, the embedding workers and
driver, the Ray engine and pre-training call these functions; none decides threads or processes itself. The rules and
the measurements behind them: docs/design/architecture.md ("Where to change the thread policy"),
docs/design/embedding.md ("Threads and worker processes"), docs/results/embed-throughput.md ("Workers and threads").

torch is imported only inside the functions that set its threads: the command line reads this module before torch.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any, NamedTuple


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), at most ``OMP_NUM_THREADS`` when that is set: the usual
    way a user or a batch scheduler says how many cores a job gets."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        limit = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        limit = 0
    return max(1, min(cores, limit) if limit > 0 else cores)


def default_workers(
    device: Any = "cpu",
    rows: int | None = None,
    shard_size: int = 1000,
    *,
    characters: int | None = None,
    shard_characters: int = 0,
) -> int:
    """How many one-thread worker processes ``embed_corpus`` uses when none is given: one per usable core, at most one
    per shard of the input (counted by ``shard_size`` rows and, where ``characters`` is known, ``shard_characters``;
    ``rows`` None: no limit), and 1 for a model off the CPU (one process drives a GPU best)."""
    import torch

    if torch.device("cpu" if device is None else device).type != "cpu":
        return 1
    cores = usable_cores()
    if rows is not None:
        shards = -(-rows // shard_size)
        if characters is not None and shard_characters:
            shards = max(shards, -(-characters // shard_characters))
        cores = min(cores, max(1, shards))
    return cores


def start_method(threads: int) -> str:
    """How an embedding worker of ``threads`` torch threads starts: ``fork`` for one thread where the platform has it
    (up at once, sharing the loaded model; a forked multi-threaded OpenMP child may hang), else ``spawn``."""
    import multiprocessing  # here: the command line reads this module before --help answers

    return "fork" if threads == 1 and "fork" in multiprocessing.get_all_start_methods() else "spawn"


def wait_passively() -> None:
    """Idle OpenMP threads sleep instead of spinning (``OMP_WAIT_POLICY=PASSIVE``) unless the environment chose
    otherwise: for the ``elmo-hf`` command only, before torch loads OpenMP (docs/design/embedding.md)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def set_torch_threads(threads: int | None, name: str = "threads") -> None:
    """``torch.set_num_threads(threads)`` when given (a ``ValueError`` naming ``name`` below 1); None keeps torch's
    count."""
    if threads is None:
        return
    if threads < 1:
        raise ValueError(f"{name} must be >= 1, got {threads}")
    import torch

    torch.set_num_threads(threads)


@contextlib.contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """A block run at ``threads`` torch threads (None: the count it has), the previous count restored after it."""
    import torch

    previous = torch.get_num_threads()
    set_torch_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def set_worker_threads(threads: int, spawned: bool) -> None:
    """An embedding worker's torch threads, set as the worker starts. A ``spawned`` one (a fresh interpreter) sets
    ``OMP_NUM_THREADS`` first, before torch loads OpenMP; a forked one has torch loaded already."""
    if spawned:
        os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch

    torch.set_num_threads(threads)


def ray_actor_threads(cpus_per_worker: float) -> int:
    """The torch threads of a Ray actor holding ``cpus_per_worker`` CPUs: one per whole CPU, at least one."""
    return max(1, int(cpus_per_worker))


class EmbeddingProcesses(NamedTuple):
    """What ``elmo-hf embed --workers W --threads T`` runs: ``workers``, each worker's torch threads and this
    process's (None: the library's defaults)."""

    workers: int | None
    worker_threads: int | None
    process_threads: int | None


def command_line_embedding(workers: int | None, threads: int | None) -> EmbeddingProcesses:
    """The command's reading of ``--workers`` and ``--threads``: ``--threads`` alone means one process at that many
    threads; with ``--workers N`` (N > 1) it is each worker's count; with neither, the library's defaults."""
    if threads is None:
        return EmbeddingProcesses(workers, None, None)
    workers = 1 if workers is None else workers
    if workers > 1:
        return EmbeddingProcesses(workers, threads, None)
    return EmbeddingProcesses(workers, None, threads)


__all__ = [
    "EmbeddingProcesses", "command_line_embedding", "default_workers", "ray_actor_threads", "set_torch_threads",
    "set_worker_threads", "start_method", "torch_threads", "usable_cores", "wait_passively",
]
