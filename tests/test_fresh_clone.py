"""A fresh clone is the whole project: the README's two quick-start blocks, verbatim, in a copy of the repository
with nothing beside it (no ``../shared``) and a virtual environment made as the README says, ``python -m venv .venv``
by the interpreter that runs the tests (its ``bin/python`` a link, as on a user's Linux machine), activated as a
user activates one.

The main job must exit 0 and write its manifest, with the clone's code. The test block, ``python -m pytest``, runs
the whole default suite there, as a user runs it, not a subset: the README's command had failed in a user's venv
(the doc runner's link to the venv's interpreter found no ``pyvenv.cfg``, issue 50), and its first whole run here
found 4 failures that only a machine without ``PYTHONDONTWRITEBYTECODE`` shows. It must end with no failure, no error, at least
``MINIMUM_TESTS`` tests, and no skip but the CUDA ones (the clone's torch is the CPU wheel): a data file, package
or server the clone lacks fails this test instead of skipping quietly. When this test is selected, the
tests that command runs do not run a second time in the run itself (``tests/conftest.py``): their failures are this
test's. The run starts in a process of its own when the test run begins (``tests/fresh_clone.py``); this test,
ordered last, waits for it and checks what it left.

It is ``slow`` (pip installing torch and the ``test`` extra into the new environment, then the default suite again):
CI runs it with the rest of ``pytest -m slow`` (``.ci/run``), beside the other slow tests. Being ``slow``, it is not
in the clone's own default run: that run starts no fresh clone of its own.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
import xml.etree.ElementTree as ElementTree

import pytest

from .fresh_clone import FRESH_CLONE_TEST, QUICK_START_TIMEOUT_S
from .helpers import requires_cuda

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
# The default suite held 1,108 to 1,130 tests (14 of them CUDA skips) when the fresh-clone test began running it whole
# (2026-11-28); far fewer means the clone's run lost some (a module that fails to collect is one error, not its tests).
MINIMUM_TESTS = 1000


@pytest.mark.slow
def test_the_quick_start_runs_verbatim_in_a_fresh_clone_and_venv(fresh_clone_quick_start):
    run = fresh_clone_quick_start.wait(timeout=QUICK_START_TIMEOUT_S)
    assert run["error"] is None, run["error"]
    clone = Path(run["clone"])
    assert sorted(path.name for path in clone.parent.iterdir() if path.suffix not in (".xml", ".json", ".stderr", ".pid")) == ["elmo-hf"]
    interpreter = clone / ".venv" / "bin" / "python"
    assert interpreter.is_symlink() and (clone / ".venv" / "pyvenv.cfg").is_file(), interpreter  # as `python -m venv`

    main_job = run["main_job"]
    assert main_job["returncode"] == 0, f"{main_job['stdout'][-3000:]}\n{main_job['stderr'][-5000:]}"
    assert re.search(r"embedded [\d,]+ sentences \([\d,]+ words", main_job["stdout"]), main_job["stdout"][-2000:]
    assert (clone / "embeddings" / "tinyshakespeare" / "manifest.json").is_file()
    located = subprocess.run(
        ["python", "-c", "import elmo_hf; print(elmo_hf.__file__)"], cwd="/", env=run["variables"],
        capture_output=True, text=True, check=True,
    )
    assert located.stdout.startswith(str(clone / "elmo_hf")), located.stdout  # the clone's code, from its venv

    tests = run["tests"]
    assert tests["returncode"] == 0, f"{tests['stdout'][-5000:]}\n{tests['stderr'][-3000:]}"
    suite = ElementTree.parse(run["report"]).getroot().find("testsuite")
    counts = {name: int(suite.get(name)) for name in ("tests", "failures", "errors", "skipped")}
    assert counts["tests"] >= MINIMUM_TESTS and counts["failures"] == counts["errors"] == 0, counts
    skips = {f"{case.get('classname')}.{case.get('name')}": case.find("skipped").get("message") for case in
             suite.iter("testcase") if case.find("skipped") is not None}
    assert len(skips) == counts["skipped"], counts
    assert all(message == requires_cuda.kwargs["reason"] for message in skips.values()), skips
    fresh_clone_test = FRESH_CLONE_TEST.split("::")[-1]
    assert not any(case.get("name") == fresh_clone_test for case in suite.iter("testcase"))  # it is `slow`


def collected(*arguments: str) -> set[str]:
    """The node ids ``python -m pytest --collect-only ARGUMENTS`` selects in this repository (pyproject's addopts,
    then ``arguments``, then ``tests/conftest.py``)."""
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider", *arguments],
        cwd=REPOSITORY_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert listed.returncode == 0, listed.stdout[-3000:] + listed.stderr[-3000:]
    return {line for line in listed.stdout.splitlines() if "::" in line}


def test_the_tests_of_the_readme_command_run_once_here_or_in_the_clone():
    """On a module with default, ``slow`` and ``gpu`` tests: the default run (the README's command, in the clone too)
    runs its default and ``gpu`` tests here, not the fresh-clone test (so the clone starts no clone); a run that
    selects the fresh-clone test keeps here exactly the ``slow`` and ``gpu`` ones (the clone's CPU torch can only
    skip a ``gpu`` test) and leaves the rest to the clone. ``tests/conftest.py`` decides after ``-m`` and
    ``--deselect`` (its hook runs last): before, the default run, which deselects the fresh-clone test, dropped the
    tests that test would have run."""
    mixed, fresh_clone = "tests/test_fast_elmo.py", FRESH_CLONE_TEST.split("::")[0]
    assert fresh_clone == Path(__file__).relative_to(REPOSITORY_ROOT).as_posix()
    default_run = collected(mixed, fresh_clone)
    beside_the_clone = collected("-m", "slow or not slow", mixed, fresh_clone)
    assert FRESH_CLONE_TEST not in default_run and FRESH_CLONE_TEST in beside_the_clone
    slow_or_gpu = collected("-m", "slow or gpu", "--deselect", FRESH_CLONE_TEST, mixed, fresh_clone)  # -m alone
    assert beside_the_clone == slow_or_gpu | {FRESH_CLONE_TEST}
    assert default_run - beside_the_clone, "the default run lost the tests the clone would have run"
    assert default_run & beside_the_clone, "the gpu tests left for the clone, which can only skip them"
