"""The command's thread policy: passive OpenMP waits unless the user set them, before torch loads; --threads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from elmo_hf_cli import build_parser

from ..conftest import REPOSITORY_ROOT


def wait_policy_seen_by_a_command(environment: dict) -> dict:
    """What ``OMP_WAIT_POLICY`` a command runs with, and whether torch was loaded before the command set it."""
    code = (
        "import json, os, sys\n"
        "from elmo_hf_cli import main\n"
        "torch_before = 'torch' in sys.modules\n"
        "main(['embed', '--verify', 'no-such-output'])\n"
        "print(json.dumps({'policy': os.environ.get('OMP_WAIT_POLICY'), 'torch_before': torch_before}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPOSITORY_ROOT, env=environment
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_commands_wait_passively_unless_the_user_chose_otherwise():
    environment = {name: value for name, value in os.environ.items() if name != "OMP_WAIT_POLICY"}
    assert wait_policy_seen_by_a_command(environment) == {"policy": "PASSIVE", "torch_before": False}
    assert wait_policy_seen_by_a_command({**environment, "OMP_WAIT_POLICY": "ACTIVE"})["policy"] == "ACTIVE"


@pytest.mark.parametrize("command", [["embed", "x", "--output", "y"], ["similarity", "--model", "m", "--word", "w", "s"], ["neighbours", "query", "i", "--sentence", "s"]])
def test_cpu_heavy_commands_take_threads(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the inputs the arguments name exist (they are checked before torch)
    (tmp_path / "x").write_text("a sentence .\n")
    (tmp_path / "m").mkdir()
    (tmp_path / "i").mkdir()
    assert build_parser().parse_args([*command, "--threads", "3"]).threads == 3


def test_threads_below_one_are_refused(capsys, tmp_path, monkeypatch):
    from elmo_hf_cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()
    assert main(["similarity", "--model", "m", "--word", "w", "a", "b", "--threads", "0"]) == 2
    assert "--threads must be >= 1" in capsys.readouterr().err
