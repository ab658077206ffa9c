"""The README's quick start in a fresh clone and a fresh virtual environment, run beside the rest of the test run.

The environment is made as the README says, ``python -m venv .venv`` run by the interpreter running the tests, so
its ``bin/python`` is a link, as on a user's Linux machine (``venv.EnvBuilder`` in this process made copies). Then
the README's two blocks run verbatim, the test block over the whole default suite, as a user runs it (it ran six
files before). A process that misses the venv falls back to that interpreter's own packages, so such a bug (the doc
runner's link to the venv's ``python``, issue 50) fails here only where that interpreter lacks the project's
packages: with this project's interpreter, which has the ``test`` extra, it passed (docs/design/testing.md).

Installing torch and the `test` extra and running the suite in the clone takes minutes, so ``tests/conftest.py``
starts `QuickStartRun` when the run begins, when the fresh-clone test (``FRESH_CLONE_TEST``) is among the selected
tests, and orders that test last: it only waits for the results. The work runs in a process of its own (``python -m
tests.fresh_clone FOLDER``), in a session of its own, never on a thread of the test process: tests fork that
process, and a fork beside a busy thread can inherit a lock that thread holds. What the test checks:
``tests/test_fresh_clone.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

import psutil

if __package__:
    from .doc_blocks import marked_block
else:  # python tests/fresh_clone.py
    from doc_blocks import marked_block

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
# The test that waits for this run (tests/test_fresh_clone.py); tests/conftest.py starts the run when it is selected.
FRESH_CLONE_TEST = "tests/test_fresh_clone.py::test_the_quick_start_runs_verbatim_in_a_fresh_clone_and_venv"
# Variables of the session that runs the tests which must not reach the clone: they would point it at this checkout
# (PYTHONPATH), at another environment (VIRTUAL_ENV, PYTHONHOME) or change what pytest runs (PYTEST_ADDOPTS, CI).
# PYTHONDONTWRITEBYTECODE (set on this project's machines) would make every interpreter of the clone compile every
# module it imports from source, since pip does not compile them there either (`activated_environment`).
NOT_INHERITED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTEST_ADDOPTS", "CI", "PYTHONDONTWRITEBYTECODE")
# Hang bounds, not expectations. A block: the test block installs the `test` extra and runs the whole default suite,
# beside the other `slow` tests in CI (10 minutes on the 2-core Zen 5 of 2026-11-28 under a load of 6-7; the 2-core
# Zen 3 takes about twice as long), so 20 minutes was too close. The whole quick start: its two blocks (the clone and
# its venv take seconds), the 60 minutes it always had, so CI's `.ci/run` stays well within 90 even when one hangs.
BLOCK_TIMEOUT_S = 1800
QUICK_START_TIMEOUT_S = 2 * BLOCK_TIMEOUT_S
RESULT_FILE = "quick-start.json"
PID_FILE = "quick-start.pid"


def runs_in_the_clone(item) -> bool:
    """Whether the README's test command (``python -m pytest``: the default run, ``-m 'not slow'`` in
    ``pyproject.toml``'s addopts) runs ``item`` in the clone in full: not `slow`, and not `gpu` either, since the
    clone's torch is the CPU wheel the quick start installs and a `gpu` test can only skip there. While the
    fresh-clone test runs, ``tests/conftest.py`` leaves these to the clone; the fresh-clone test itself is `slow`, so
    the clone's run never starts another (no recursion)."""
    return item.get_closest_marker("slow") is None and item.get_closest_marker("gpu") is None


def working_tree_files() -> list[str]:
    """Tracked files and untracked ones git does not ignore: what a clean clone plus the current changes holds."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPOSITORY_ROOT, capture_output=True,
        text=True, check=True,
    )
    return [name for name in listed.stdout.splitlines() if (REPOSITORY_ROOT / name).is_file()]


def make_clone(folder: Path) -> Path:
    """The working tree as a git checkout of its own, ``folder/elmo-hf``, alone in ``folder``."""
    clone = folder / "elmo-hf"
    for name in working_tree_files():
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPOSITORY_ROOT / name, clone / name)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@localhost", "-C", str(clone)]
    for command in (["init", "--quiet"], ["add", "--all"], ["commit", "--quiet", "--message", "clone"]):
        subprocess.run([*git, *command], check=True, capture_output=True)
    return clone


def outside_environment() -> dict:
    """This process's variables less those that must not reach the clone (``NOT_INHERITED``)."""
    return {name: value for name, value in os.environ.items() if name not in NOT_INHERITED}


def make_virtual_environment(clone: Path) -> Path:
    """``python -m venv .venv`` in the clone, run by the interpreter running the tests, as the README says: pip by
    ensurepip, no system site packages, and ``bin/python`` a link to this interpreter (Linux's default)."""
    made = subprocess.run(
        [sys.executable, "-m", "venv", ".venv"], cwd=clone, env=outside_environment(), capture_output=True, text=True,
    )
    if made.returncode != 0:
        raise RuntimeError(f"python -m venv .venv exited {made.returncode}:\n{made.stdout[-3000:]}\n{made.stderr[-3000:]}")
    return clone / ".venv"


def activated_environment(environment_dir: Path) -> dict:
    """The variables of a shell in which ``. .venv/bin/activate`` ran after `make_virtual_environment`. pip keeps
    this machine's configuration; ``PIP_RETRIES=0`` only makes an unreachable index (the quick start names PyTorch's
    CPU index, which an offline machine cannot reach) fail at once instead of after five retries, and torch then comes
    from the configured find-links or pip's cache. ``PIP_COMPILE=0`` (pip's
    ``--no-compile``) skips byte-compiling the ~18,000 modules the installs bring: about half of their CPU time
    (175 -> 82 CPU-seconds on the 2-core Zen 3 of 2026-11-26), for modules most of which nothing here imports; the
    clone's interpreters compile the ones they import on first use (about 20 CPU-seconds once)."""
    variables = outside_environment()
    variables.update(
        VIRTUAL_ENV=str(environment_dir),
        PATH=f"{environment_dir / 'bin'}{os.pathsep}{os.environ['PATH']}",
        PIP_RETRIES="0",
        PIP_NO_INPUT="1",
        PIP_COMPILE="0",
    )
    return variables


def run_block(clone: Path, marker: str, variables: dict) -> dict:
    """The README block marked ``marker``, verbatim, with ``bash -euo pipefail`` in the clone."""
    code = marked_block(clone / "README.md", marker).code
    try:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", code], cwd=clone, env=variables, capture_output=True, text=True,
            timeout=BLOCK_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as expired:
        return {"returncode": None, "stdout": str(expired.stdout or ""), "stderr": f"timed out after {BLOCK_TIMEOUT_S} s"}
    return {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def quick_start(folder: Path) -> dict:
    """Clone, venv, the main job, then the test block (the whole default suite); what each left. The test block's
    pytest gets only ``-p no:cacheprovider`` (no ``.pytest_cache`` in the clone) and a JUnit report to read the
    counts from: it selects what a user's run selects."""
    result: dict = {"main_job": None, "tests": None, "report": str(folder / "suite.xml"), "error": None}
    try:
        clone = make_clone(folder)
        variables = activated_environment(make_virtual_environment(clone))
        result.update(clone=str(clone), variables=variables)
        result["main_job"] = run_block(clone, "quickstart-main", variables)
        if result["main_job"]["returncode"] == 0:
            reported = {**variables, "PYTEST_ADDOPTS": f"-p no:cacheprovider --junitxml={result['report']}"}
            result["tests"] = run_block(clone, "quickstart-test", reported)
    except Exception:  # reported by the test, with the rest
        result["error"] = traceback.format_exc()
    return result


class QuickStartRun:
    """``python -m tests.fresh_clone FOLDER`` in a session of its own: `start`, then `wait` for its result. Under
    pytest-xdist the controller starts it and a worker waits for it: a `QuickStartRun` of the same folder that was
    not started here follows the process by the pid it wrote there."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.process: subprocess.Popen | None = None

    def start(self) -> "QuickStartRun":
        with open(self.folder / "quick-start.stderr", "w") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.fresh_clone", str(self.folder)], cwd=REPOSITORY_ROOT,
                start_new_session=True, stdout=subprocess.DEVNULL, stderr=stderr,
            )
        (self.folder / PID_FILE).write_text(str(self.process.pid))
        return self

    def wait(self, timeout: float) -> dict:
        try:
            if self.process is not None:
                self.process.wait(timeout)
            else:
                self._wait_for_the_process_started_elsewhere(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise TimeoutError(f"the fresh-clone quick start did not finish in {timeout:.0f} s") from None
        result_file = self.folder / RESULT_FILE
        if not result_file.is_file():
            stderr = (self.folder / "quick-start.stderr").read_text()[-3000:]
            exit_code = "" if self.process is None else f" {self.process.returncode}"
            raise RuntimeError(f"the fresh-clone quick start exited{exit_code} without a result:\n{stderr}")
        return json.loads(result_file.read_text())

    def _wait_for_the_process_started_elsewhere(self, timeout: float) -> None:
        """Until the result is written or the process (a child of another process) has ended, at most ``timeout``."""
        pid = int((self.folder / PID_FILE).read_text())
        deadline = time.monotonic() + timeout
        while not (self.folder / RESULT_FILE).is_file():
            try:
                if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                    return
            except psutil.NoSuchProcess:
                return
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(pid), timeout)
            time.sleep(1.0)

    def stop(self) -> None:
        """Kill it and every process it started (the end of the test run, Ctrl-C): nothing goes on in the background.
        Only the process that started it stops it."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


if __name__ == "__main__":
    work_folder = Path(sys.argv[1])
    outcome = quick_start(work_folder)
    (work_folder / f"{RESULT_FILE}.tmp").write_text(json.dumps(outcome))
    (work_folder / f"{RESULT_FILE}.tmp").replace(work_folder / RESULT_FILE)
