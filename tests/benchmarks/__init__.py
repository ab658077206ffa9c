"""Tests of the scripts in benchmarks/ (which are not a package): `load_benchmark` imports one by name."""

import importlib.util
from types import ModuleType

from ..conftest import REPOSITORY_ROOT


def load_benchmark(name: str) -> ModuleType:
    """The module ``benchmarks/<name>.py``, executed once per call."""
    spec = importlib.util.spec_from_file_location(name, REPOSITORY_ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
