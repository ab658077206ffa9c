"""The README's quick start in a fresh clone and a fresh virtual environment, run beside the rest of the test run.

Installing torch and the `test` extra into a new environment takes a minute or two of mostly waiting (pip's reads
and unpacking), so ``tests/conftest.py`` starts `QuickStartRun` when the run begins, when
the fresh-clone test (``FRESH_CLONE_TEST``) is among the selected tests, and orders that test last: by then the run has usually
finished and the test only reads its results. The work runs in a process of its own (``python -m
tests.fresh_clone FOLDER``), in a session of its own, never on a thread of the test process: tests fork that
process, and a fork beside a busy thread can inherit a lock that thread holds. What the test checks, and why the
subset: ``tests/test_fresh_clone.py``.
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
import venv
from pathlib import Path

import psutil

if __package__:
    from .doc_blocks import marked_block
else:  # python tests/fresh_clone.py
    from doc_blocks import marked_block

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
# The test that waits for this run (tests/test_fresh_clone.py); tests/conftest.py starts the run when it is selected.
FRESH_CLONE_TEST = "tests/test_fresh_clone.py::test_the_quick_start_runs_verbatim_in_a_fresh_clone_and_venv"
SUBSET = [
    "tests/test_modeling_elmo_parity.py",  # the original TF outputs, both inference paths (tests/fixtures/allennlp-elmo)
    "tests/test_modeling_elmo_warm_state.py",  # the fixture and EWT dev (data/corpora)
    "tests/test_configuration_elmo.py",  # the four released options (tests/fixtures/pretrained-options)
    "tests/corpus/test_sentences.py",  # tinyshakespeare and EWT dev read whole
    "tests/conversion/test_convert.py",  # elmo-hf convert --verify and export on the fixture, end to end
    "tests/test_documentation.py",  # every block of README.md and docs/guide/, in the clone with nothing beside it
]
# Variables of the session that runs the tests which must not reach the clone: they would point it at this checkout
# (PYTHONPATH), at another environment (VIRTUAL_ENV, PYTHONHOME) or change what pytest runs (PYTEST_ADDOPTS, CI).
# PYTHONDONTWRITEBYTECODE (set on this project's machines) would make every interpreter of the clone compile every
# module it imports from source, since pip does not compile them there either (`activated_environment`).
NOT_INHERITED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTEST_ADDOPTS", "CI", "PYTHONDONTWRITEBYTECODE")
BLOCK_TIMEOUT_S = 1200
RESULT_FILE = "quick-start.json"
PID_FILE = "quick-start.pid"


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


def activated_environment(environment_dir: Path) -> dict:
    """The variables of a shell in which ``python -m venv .venv && . .venv/bin/activate`` ran (this interpreter, no
    system site packages). pip keeps this machine's configuration; ``PIP_RETRIES=0`` only makes an unreachable index
    (the quick start names PyTorch's CPU index, which an offline machine cannot reach) fail at once instead of after
    five retries, and torch then comes from the configured find-links or pip's cache. ``PIP_COMPILE=0`` (pip's
    ``--no-compile``) skips byte-compiling the ~18,000 modules the installs bring: about half of their CPU time
    (175 -> 82 CPU-seconds on the 2-core Zen 3 of 2026-11-26), for modules most of which nothing here imports; the
    clone's interpreters compile the ones they import on first use (about 20 CPU-seconds once)."""
    venv.EnvBuilder(with_pip=True).create(environment_dir)
    variables = {name: value for name, value in os.environ.items() if name not in NOT_INHERITED}
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
    """Clone, venv, the main job, then the test block on ``SUBSET``; what each left."""
    result: dict = {"main_job": None, "tests": None, "report": str(folder / "subset.xml"), "error": None}
    try:
        clone = make_clone(folder)
        variables = activated_environment(clone / ".venv")
        result.update(clone=str(clone), variables=variables)
        result["main_job"] = run_block(clone, "quickstart-main", variables)
        if result["main_job"]["returncode"] == 0:
            selected = {**variables, "PYTEST_ADDOPTS": f"-p no:cacheprovider --junitxml={result['report']} {' '.join(SUBSET)}"}
            result["tests"] = run_block(clone, "quickstart-test", selected)
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
