"""`kill -9` of a command and everything it started, at a chosen moment: the one home of it for
``scripts/random_kills.py`` and ``scripts/pretrain_kill_resume.py``.

A command is started as the leader of a process group of its own (``start_new_session``), as a shell job would be.
``torchrun`` starts its workers in sessions of their own, so a kill of the launch's group alone reaches the agent
only (``who="group"``, the issue 51 reproduction); ``who="all"`` also kills every process the command started, in
whatever group it lives.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def descendants(pid: int) -> list[int]:
    """Every process started by ``pid``, children first, read from ``/proc`` (Linux)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = [int(child) for child in (task / "children").read_text().split()]
        except OSError:  # the task ended while we read
            continue
        for child in children:
            found += [child, *descendants(child)]
    return found


def _sigkill(send, target: int) -> None:
    try:
        send(target, signal.SIGKILL)
    except ProcessLookupError:
        pass


def kill(process: subprocess.Popen, who: str = "all") -> list[int]:
    """SIGKILL ``process``'s group (``who="group"``), or its group and every process it started with their groups
    (``"all"``); reap it. Returns the processes it started that were left alive (for ``"group"``)."""
    started = descendants(process.pid)
    if who == "all":
        for pid in started:
            try:
                _sigkill(os.killpg, os.getpgid(pid))
            except ProcessLookupError:
                pass
            _sigkill(os.kill, pid)
    _sigkill(os.killpg, process.pid)
    process.wait()
    return [pid for pid in started if who != "all" and Path(f"/proc/{pid}").exists()]


def wait_for_exit(pids: list[int], seconds: float) -> list[int]:
    """Wait up to ``seconds`` for ``pids`` (not our children) to end; SIGKILL and return those still alive then."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids):
        time.sleep(0.05)
    alive = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    for pid in alive:
        _sigkill(os.kill, pid)
    return alive


def kill_when(process: subprocess.Popen, ready, delay: float, who: str = "all") -> bool:
    """Once ``ready()`` is true, wait ``delay`` seconds and kill ``process`` (see ``kill``). Returns False, killing
    nothing, if the process ended first."""
    while not ready():
        if process.poll() is not None:
            return False
        time.sleep(0.002)
    deadline = time.monotonic() + delay
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        time.sleep(0.002)
    if process.poll() is not None:
        return False
    left = kill(process, who)
    wait_for_exit(left, 30.0)
    return True
