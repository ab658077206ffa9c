"""Shared test fixtures.

Every file a test reads lives in the repository: the original's parity fixture and the released options under
``tests/fixtures/``, the sample corpora under ``data/corpora/`` (each with its source and licence beside it). A
plain clone runs every test; nothing reads ``../shared``.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from elmo_hf.runtime.process_tuning import collect_garbage_as_a_short_lived_process

# Every test process imports torch, transformers' modeling code and datasets (600,000 objects by the end of the
# collection) and each full collection walked them all: 20-38 of them, 9-19 s per xdist worker, and 2-3 s more for
# each process's exit. The command's thresholds from the start, everything alive after the collection frozen, and
# frozen again at the end (`pytest_collection_finish`, `pytest_unconfigure`).
collect_garbage_as_a_short_lived_process()

# Before torch loads OpenMP: its idle threads sleep instead of spinning. With another process on one of the two cores
# (the fresh-clone quick start below runs beside the tests; a user's machine is rarely idle), spinning threads make
# every small op wait for a partner the scheduler took away (issue 28 measured this run at 17:46 minutes beside two
# busy processes, against about 5 idle). Set OMP_WAIT_POLICY yourself to measure the other policy.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# torch and elmo_hf are imported by the fixtures that use them: pytest-xdist's controller, which runs no test, loads
# this file before it starts the workers, and importing the model classes there kept them waiting 8-10 s.
if TYPE_CHECKING:
    from elmo_hf import ELMoModel, ELMoTokenizer

from .fresh_clone import FRESH_CLONE_TEST, QuickStartRun, runs_in_the_clone  # noqa: E402
from .module_durations import expected_seconds, run_order  # noqa: E402

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
FIXTURES_DIR = REPOSITORY_ROOT / "tests" / "fixtures"
CORPORA_DIR = REPOSITORY_ROOT / "data" / "corpora"
TINYSHAKESPEARE = CORPORA_DIR / "tinyshakespeare.txt"
EWT_DEV = CORPORA_DIR / "ud-english-ewt" / "en_ewt-ud-dev.conllu"
EWT_TEST = CORPORA_DIR / "ud-english-ewt" / "en_ewt-ud-test.conllu"


def fresh_clone_selected(node_ids) -> bool:
    return any(node_id == FRESH_CLONE_TEST for node_id in node_ids)


@pytest.hookimpl(trylast=True)  # after `-m` and `--deselect` have removed what this run leaves out
def pytest_collection_modifyitems(config, items):
    """The longest modules run first (`module_durations.run_order`), and the fresh-clone test's module last, that
    test last in it: it waits for the quick start started beside the rest of the run. When it is selected, the tests
    the README's test command runs in the clone (`fresh_clone.runs_in_the_clone`: the default run's, less `gpu`) do
    not run a second time here: the fresh-clone test fails with their failures. ``pytest -m slow`` (CI) selects none
    of them anyway; ``pytest -m 'slow or not slow'`` runs them once, in the clone. Without the fresh-clone test (the
    default run, or a run that deselects it) they run here as usual."""
    selected = fresh_clone_selected(item.nodeid for item in items)
    items[:] = run_order(items, expected_seconds(), last_node_id=FRESH_CLONE_TEST if selected else None)
    if not selected:
        return
    in_the_clone = [item for item in items if runs_in_the_clone(item)]
    if in_the_clone:
        config.hook.pytest_deselected(items=in_the_clone)
        deselected = set(in_the_clone)
        items[:] = [item for item in items if item not in deselected]


def pytest_collection_finish(session):
    """The imported modules and the collected tests live for the whole run: out of every later collection's walk."""
    gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """The last hook of a test process: its exit need not search 600,000 objects for cycles."""
    gc.freeze()


def pytest_configure(config):
    """Under pytest-xdist the controller, which runs no test, starts the quick start (`FreshCloneController`)."""
    distributing = config.pluginmanager.hasplugin("xdist") and config.getoption("dist", "no") != "no"
    if distributing and not hasattr(config, "workerinput"):
        config.pluginmanager.register(FreshCloneController(config), "fresh-clone-controller")


def controller_quick_start_folder(basetemp: Path) -> Path:
    """Where the controller's quick start works: beside the workers' own base folders (``<basetemp>/popen-gwN``)."""
    return basetemp / "fresh-clone"


class FreshCloneController:
    """The quick start under pytest-xdist: started by the controller as soon as a worker reports a collection that
    holds the fresh-clone test (one run, whichever worker gets the test), stopped when the whole run ends; the test
    waits for its result in `controller_quick_start_folder`."""

    def __init__(self, config):
        self.config = config
        self.run: QuickStartRun | None = None

    def pytest_xdist_node_collection_finished(self, node, ids):
        if self.run is None and fresh_clone_selected(ids):
            folder = controller_quick_start_folder(self.config._tmp_path_factory.getbasetemp())
            folder.mkdir()
            self.run = QuickStartRun(folder).start()

    def pytest_sessionfinish(self, session):
        if self.run is not None:
            self.run.stop()


@pytest.fixture(scope="session", autouse=True)
def fresh_clone_quick_start(request, tmp_path_factory):
    """The README's quick start in a fresh clone and venv (``tests/fresh_clone.py``), started as the run begins when
    the fresh-clone test is selected, stopped (its processes killed) when the run ends. Under pytest-xdist the
    controller started it (`FreshCloneController`) and a worker only waits for its result."""
    if not fresh_clone_selected(item.nodeid for item in request.session.items):
        yield None
        return
    if hasattr(request.config, "workerinput"):
        yield QuickStartRun(controller_quick_start_folder(tmp_path_factory.getbasetemp().parent))
        return
    run = QuickStartRun(tmp_path_factory.mktemp("alone")).start()
    yield run
    run.stop()


def installed_package(module: str) -> Path:
    """The folder of an installed package of the `test` extra (kiwipiepy, konlpy's data, ...), found without importing
    it; fails under CI and skips elsewhere when it is missing."""
    spec = importlib.util.find_spec(module)
    if spec is None:
        message = f"{module} is not installed (it is in the test extra: pip install -e '.[test]')"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin).parent


@pytest.fixture(autouse=True)
def _torch_threads_as_the_run_started():
    """Every test starts with the run's torch thread count (2 on the CI machine, 1 under ``OMP_NUM_THREADS=1``): a
    script a test drives with ``--threads`` sets torch's count for the whole process."""
    import torch

    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@pytest.fixture
def ctrl_c_as_from_a_terminal():
    """SIGINT handled by Python's own handler (``KeyboardInterrupt``) for the test, as in a terminal, and the run's
    handler back after it: a test run started in the background by a script or ``nohup`` inherits SIGINT ignored,
    and a Ctrl-C that a test raises in its own process would then be dropped (tests that send SIGINT to a child set
    the child's handler with ``preexec_fn`` instead)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="session")
def allennlp_fixture_dir() -> Path:
    return FIXTURES_DIR / "allennlp-elmo"


@pytest.fixture(scope="session")
def pretrained_options_dir() -> Path:
    return FIXTURES_DIR / "pretrained-options"


@pytest.fixture(scope="session")
def converted_fixture_dir(allennlp_fixture_dir, tmp_path_factory) -> Path:
    """The AllenNLP fixture converted to a Hugging Face directory, once per session."""
    from elmo_hf.conversion.convert_allennlp_to_hf import convert_allennlp_to_hf

    output_dir = tmp_path_factory.mktemp("converted") / "elmo-fixture"
    convert_allennlp_to_hf(allennlp_fixture_dir / "options.json", allennlp_fixture_dir / "lm_weights.hdf5", output_dir)
    return output_dir


@pytest.fixture(scope="session")
def fixture_model(converted_fixture_dir) -> ELMoModel:
    from elmo_hf import ELMoModel

    return ELMoModel.from_pretrained(converted_fixture_dir).eval()


@pytest.fixture(scope="session")
def tokenizer() -> ELMoTokenizer:
    from elmo_hf import ELMoTokenizer

    return ELMoTokenizer(word_splitter="whitespace")
