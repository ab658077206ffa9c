"""The README's quick start in a fresh clone and a fresh virtual environment, run beside the rest of the test run.

Installing torch and the `test` extra into a new environment takes a minute or two of mostly waiting (pip's reads
and unpacking), so ``tests/conftest.py`` starts `QuickStartRun` on a thread when the run begins, when
``tests/test_fresh_clone.py`` is among the selected tests, and orders that test last: by then the run has usually
finished and the test only reads its results. What it checks, and why the subset: ``tests/test_fresh_clone.py``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import venv
from dataclasses import dataclass
from pathlib import Path

from .doc_blocks import marked_block

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
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
NOT_INHERITED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTEST_ADDOPTS", "ELMO_HF_SHARED_DIR", "CI")
BLOCK_TIMEOUT_S = 1200


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
    five retries, and torch then comes from the configured find-links or pip's cache."""
    venv.EnvBuilder(with_pip=True).create(environment_dir)
    variables = {name: value for name, value in os.environ.items() if name not in NOT_INHERITED}
    variables.update(
        VIRTUAL_ENV=str(environment_dir),
        PATH=f"{environment_dir / 'bin'}{os.pathsep}{os.environ['PATH']}",
        PIP_RETRIES="0",
        PIP_NO_INPUT="1",
    )
    return variables


@dataclass
class BlockResult:
    returncode: int
    stdout: str
    stderr: str


class QuickStartRun:
    """Clone, venv, the main job, then the test block on ``SUBSET`` (results in `main_job`, `tests`, `report`)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.clone: Path | None = None
        self.variables: dict = {}
        self.main_job: BlockResult | None = None
        self.tests: BlockResult | None = None
        self.report = folder / "subset.xml"
        self.error: BaseException | None = None
        self._process: subprocess.Popen | None = None
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="fresh-clone quick start", daemon=True)

    def start(self) -> "QuickStartRun":
        self._thread.start()
        return self

    def wait(self, timeout: float) -> None:
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.stop()
            raise TimeoutError(f"the fresh-clone quick start did not finish in {timeout:.0f} s")
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        """Kill a block still running (the end of the test run, Ctrl-C): nothing is left behind in the background."""
        self._stopped = True
        if self._process is not None and self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGKILL)

    def _run(self) -> None:
        try:
            self.clone = make_clone(self.folder)
            self.variables = activated_environment(self.clone / ".venv")
            self.main_job = self._block("quickstart-main", self.variables)
            if self.main_job.returncode == 0:
                selected = {**self.variables, "PYTEST_ADDOPTS": f"-p no:cacheprovider --junitxml={self.report} {' '.join(SUBSET)}"}
                self.tests = self._block("quickstart-test", selected)
        except BaseException as error:  # reported by wait(), in the test
            self.error = error

    def _block(self, marker: str, variables: dict) -> BlockResult:
        if self._stopped:
            raise RuntimeError("stopped before the block ran")
        code = marked_block(self.clone / "README.md", marker).code
        self._process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", code], cwd=self.clone, env=variables, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )
        try:
            stdout, stderr = self._process.communicate(timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.stop()
            stdout, stderr = self._process.communicate()
        return BlockResult(self._process.returncode, stdout, stderr)
