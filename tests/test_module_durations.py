"""The run's order: the longest test modules first (``tests/module_durations.py``), the fresh-clone test last."""

from __future__ import annotations

from dataclasses import dataclass

from .fresh_clone import FRESH_CLONE_TEST
from .module_durations import (
    DURATIONS_FILE,
    REPOSITORY_ROOT,
    DurationRecorder,
    expected_seconds,
    merged,
    module_of,
    run_order,
)


@dataclass(frozen=True)
class Item:
    nodeid: str


@dataclass(frozen=True)
class Report:
    nodeid: str
    duration: float


def node_ids(items) -> list[str]:
    return [item.nodeid for item in items]


def test_the_longest_module_runs_first_and_unknown_modules_after_the_known_in_collection_order():
    items = [Item(node) for node in (
        "tests/a.py::one", "tests/a.py::two", "tests/new_1.py::x", "tests/b.py::one", "tests/c.py::one",
        "tests/b.py::two", "tests/new_2.py::y",
    )]
    ordered = run_order(items, {"tests/a.py": 3.0, "tests/b.py": 40.0, "tests/c.py": 12.5})
    assert node_ids(ordered) == [
        "tests/b.py::one", "tests/b.py::two", "tests/c.py::one", "tests/a.py::one", "tests/a.py::two",
        "tests/new_1.py::x", "tests/new_2.py::y",
    ]


def test_a_new_module_goes_after_a_known_one_that_took_no_time():
    """A known module's 0 s and a new module's missing figure are not a tie: a run with a new test module once failed
    the check below because the new one came first."""
    items = [Item(node) for node in ("tests/new.py::x", "tests/quick.py::one", "tests/a.py::one")]
    ordered = run_order(items, {"tests/a.py": 3.0, "tests/quick.py": 0.0})
    assert node_ids(ordered) == ["tests/a.py::one", "tests/quick.py::one", "tests/new.py::x"]


def test_the_last_test_goes_last_with_its_module_whatever_the_module_took():
    items = [Item(node) for node in ("tests/f.py::waits", "tests/f.py::other", "tests/a.py::one", "tests/b.py::one")]
    ordered = run_order(items, {"tests/f.py": 100.0, "tests/a.py": 1.0}, last_node_id="tests/f.py::waits")
    assert node_ids(ordered) == ["tests/a.py::one", "tests/b.py::one", "tests/f.py::other", "tests/f.py::waits"]


def test_each_module_adds_up_its_setup_call_and_teardown_seconds():
    recorder = DurationRecorder()
    for node, seconds in (("tests/a.py::one", 1.5), ("tests/a.py::one", 2.0), ("tests/a.py::two[x]", 0.25),
                          ("tests/sub/b.py::C::one", 4.0)):
        recorder.pytest_runtest_logreport(Report(node, seconds))
    assert dict(recorder.seconds) == {"tests/a.py": 3.75, "tests/sub/b.py": 4.0}
    assert module_of("tests/sub/b.py::C::one[a::b]") == "tests/sub/b.py"


def test_a_refresh_overrides_what_it_measured_keeps_the_rest_and_forgets_modules_that_are_gone():
    this_module = "tests/test_module_durations.py"
    previous = {this_module: 1.0, "tests/test_install.py": 40.0, "tests/test_that_was_removed.py": 99.0}
    figures = merged(previous, {this_module: 123.456})
    assert figures == {this_module: 123.5, "tests/test_install.py": 40.0}
    assert list(figures) == [this_module, "tests/test_install.py"]  # longest first: the file reads as the order


def test_the_committed_figures_name_existing_modules_only():
    figures = expected_seconds()
    assert DURATIONS_FILE.is_file() and len(figures) > 20, DURATIONS_FILE
    missing = [module for module in figures if not (REPOSITORY_ROOT / module).is_file()]
    assert not missing, f"{missing}: renamed or removed? python -m tests.module_durations refreshes the file"
    assert all(isinstance(value, float) and value >= 0 for value in figures.values())


def test_this_run_follows_the_order_and_xdist_keeps_it(request):
    """pytest-xdist would sort the modules by their number of tests again without ``--no-loadscope-reorder``."""
    assert request.config.getoption("loadscopereorder") is False
    figures, selected = expected_seconds(), node_ids(request.session.items)
    first_seen = list(dict.fromkeys(module_of(node) for node in selected))
    if FRESH_CLONE_TEST in selected:
        assert selected[-1] == FRESH_CLONE_TEST and first_seen[-1] == module_of(FRESH_CLONE_TEST)
        first_seen.pop()  # its module goes last whatever it took; the rest follow the figures
    known = [module for module in first_seen if module in figures]
    assert known == sorted(known, key=lambda module: -figures[module])
    assert first_seen[: len(known)] == known  # the unknown ones after
