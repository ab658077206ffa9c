"""How long each test module took, so that a run starts with the longest ones.

Under pytest-xdist (``--dist loadscope``) each worker takes a whole module at a time, in the order of the run; a long
module handed out last keeps one worker busy while the other has nothing left. pytest-xdist's own order (largest
number of tests first) put ``tests/test_install.py`` (2 tests, 40-48 s) at the very end, and the two workers
finished 19-26 s apart. So ``tests/conftest.py`` orders the modules by their seconds in ``module_durations.json``,
longest first (`run_order`), and ``pyproject.toml`` turns xdist's reordering off (``--no-loadscope-reorder``, xdist
3.8). The figures only decide an order: a stale or missing one makes a run slower, never wrong. A module that is not
in the file runs after those that are, in collection order.

Refresh the file after adding or reshaping a long module (it runs the given tests, ``python -m pytest``'s default run
without arguments, and keeps the figures of modules that run did not include)::

    python -m tests.module_durations [PYTEST ARGUMENTS]
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]  # node ids are relative to it
DURATIONS_FILE = Path(__file__).with_name("module_durations.json")


def module_of(node_id: str) -> str:
    """``tests/a/test_b.py::test_c[x]`` -> ``tests/a/test_b.py``."""
    return node_id.split("::", 1)[0]


def expected_seconds(path: Path = DURATIONS_FILE) -> dict[str, float]:
    """Module -> the seconds it took when the file was last refreshed; empty when there is no file."""
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))["seconds"]


def run_order(items: list, seconds: dict[str, float], last_node_id: str | None = None) -> list:
    """``items`` (anything with a ``nodeid``) module by module, the longest module first (``seconds``; unknown ones
    after the known, in their first item's order); a module's items keep their order. The module of ``last_node_id``
    goes last and that item last in it (the fresh-clone test waits for work started beside the whole run)."""
    first_index: dict[str, int] = {}
    for index, item in enumerate(items):
        first_index.setdefault(module_of(item.nodeid), index)
    last_module = None if last_node_id is None else module_of(last_node_id)

    def key(item) -> tuple:
        module = module_of(item.nodeid)
        known = module in seconds  # a new module (0 s so far) goes after the known ones that took 0 s too
        return (module == last_module, not known, -seconds.get(module, 0.0), first_index[module], item.nodeid == last_node_id)

    return sorted(items, key=key)


class DurationRecorder:
    """A pytest plugin that adds up each module's setup, call and teardown seconds (under pytest-xdist the
    controller receives every worker's reports, so one recorder sees the whole run)."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[module_of(report.nodeid)] += report.duration


def merged(previous: dict[str, float], measured: dict[str, float]) -> dict[str, float]:
    """The measured figures over the previous ones (rounded to 0.1 s), modules that still exist only, longest first."""
    figures = {**previous, **{module: round(value, 1) for module, value in measured.items()}}
    existing = {module: value for module, value in figures.items() if (REPOSITORY_ROOT / module).is_file()}
    return dict(sorted(existing.items(), key=lambda entry: (-entry[1], entry[0])))


def refresh(pytest_arguments: list[str]) -> int:
    """Run pytest with ``pytest_arguments`` and write the merged figures; pytest's exit code. The file is written when
    the run completed, failed tests included (their seconds still order a run), not when it was interrupted or
    could not start."""
    import pytest

    recorder = DurationRecorder()
    exit_code = pytest.main(pytest_arguments, plugins=[recorder])
    if exit_code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        print(f"not written: pytest exited {int(exit_code)} ({exit_code.name})", file=sys.stderr)
        return int(exit_code)
    figures = merged(expected_seconds(), recorder.seconds)
    DURATIONS_FILE.write_text(json.dumps({"seconds": figures}, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(figures)} modules' seconds to {DURATIONS_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(refresh(sys.argv[1:]))
