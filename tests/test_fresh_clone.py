"""A fresh clone is the whole project: the README's two quick-start blocks, verbatim, in a copy of the repository
with nothing beside it (no ``../shared``) and a fresh virtual environment made by the interpreter that runs the
tests, without system site packages, activated as a user activates one.

The main job must exit 0 and write its manifest, with the clone's code. The test block runs a representative subset
of the suite, ``fresh_clone.SUBSET`` (the whole suite would run this test again and double the default run's time),
chosen because each of its files reads data that used to come from ``../shared`` (the original's parity fixture,
the released options, the real corpora) or runs the commands end to end (every block of the README and the guides
among them). It must end with no failure, no error and no skip at all. When this test is selected, those files run
only there, not a second time in the run itself (``tests/conftest.py``): their failures are this test's. The run
starts in a process of its own when the test run begins (``tests/fresh_clone.py``); this test, ordered last, waits
for it and checks what it left.

It is ``slow`` (about 240 CPU-seconds, most of them pip installing the ``test`` extra into the new environment): CI runs
it with the rest of ``pytest -m slow`` (``.ci/run``); in the default run the files of the subset run in the run itself.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
import xml.etree.ElementTree as ElementTree

import pytest

from .fresh_clone import BLOCK_TIMEOUT_S, FRESH_CLONE_TEST, SUBSET


@pytest.mark.slow
def test_the_quick_start_runs_verbatim_in_a_fresh_clone_and_venv(fresh_clone_quick_start):
    run = fresh_clone_quick_start.wait(timeout=3 * BLOCK_TIMEOUT_S)
    assert run["error"] is None, run["error"]
    clone = Path(run["clone"])
    assert sorted(path.name for path in clone.parent.iterdir() if path.suffix not in (".xml", ".json", ".stderr", ".pid")) == ["elmo-hf"]

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
    assert counts["tests"] >= 40 and counts["failures"] == counts["errors"] == 0, counts
    skipped = [case.get("name") for case in suite.iter("testcase") if case.find("skipped") is not None]
    assert counts["skipped"] == 0 and not skipped, skipped


def test_a_run_that_leaves_the_fresh_clone_test_out_runs_the_subset_itself():
    """The subset leaves the run only for a fresh-clone test that runs: the default run's ``-m 'not slow'`` (and any
    ``--deselect``) decide first, then ``tests/conftest.py`` (its hook runs last). Before, the default run would have
    dropped every parity test along with the deselected fresh-clone test."""
    repository = Path(__file__).resolve().parents[1]
    parity, fresh_clone = "tests/test_modeling_elmo_parity.py", FRESH_CLONE_TEST.split("::")[0]
    assert parity in SUBSET and fresh_clone == Path(__file__).relative_to(repository).as_posix()
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider", parity, fresh_clone],
        cwd=repository, capture_output=True, text=True, timeout=300,
    )
    assert listed.returncode == 0, listed.stdout[-3000:] + listed.stderr[-3000:]
    collected = [line for line in listed.stdout.splitlines() if "::" in line]
    assert any(line.startswith(parity) for line in collected), listed.stdout[-3000:]
    assert not any(FRESH_CLONE_TEST in line for line in collected)
