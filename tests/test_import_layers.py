"""Every import of the package points down: the layers below are written once, here, and each module of `elmo_hf`
and `elmo_hf_cli` is read with `ast` (nothing is executed; imports inside functions count too). The walk fails on
an import of a higher layer from a lower one (the CLI and the repository's `conversion/` scripts included) and on
any cycle. The synthetic trees at the end show that both checks can fail."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

from .conftest import REPOSITORY_ROOT

# Lowest first. A module's layer is that of the longest prefix listed; every module of `elmo_hf` itself (the flat
# `*_elmo.py` files, which ship as remote code and import only each other, and the package's `__init__`) is layer 0.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("elmo_hf",),
    ("elmo_hf.corpus", "elmo_hf.runtime", "elmo_hf.storage"),
    ("elmo_hf.conversion",),
    ("elmo_hf.embedding", "elmo_hf.pretraining", "elmo_hf.scoring", "elmo_hf.search", "elmo_hf.integrations", "elmo_hf.probing"),
    ("elmo_hf_cli",),
    ("conversion",),  # the repository's conversion scripts: run by users, imported by nothing in the packages
)
PACKAGES = ("elmo_hf", "elmo_hf_cli")


def layer_of(module: str) -> int | None:
    """The index in LAYERS of ``module`` (a dotted name), or ``None`` for a module outside the repository."""
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for layer, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), layer)
    return None if best is None else best[1]


def package_sources(root: Path = REPOSITORY_ROOT) -> dict[str, str]:
    """Dotted module name -> source, for every .py file of PACKAGES (``pkg/__init__.py`` is ``pkg``)."""
    sources = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            sources[name] = path.read_text(encoding="utf-8")
    return sources


def imported_modules(module: str, source: str, is_package: bool, known: set[str]) -> set[str]:
    """The repository modules ``module`` imports anywhere in ``source`` (relative imports resolved; ``from x import
    y`` counts as ``x.y`` when that is a module, else as ``x``)."""
    base = module.split(".") if is_package else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = base[: len(base) - (node.level - 1)]
                target = ".".join(parent + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in known else target)
    return {name for name in found if layer_of(name) is not None}


def import_graph(sources: Mapping[str, str], packages: set[str] | None = None) -> dict[str, set[str]]:
    """module -> the repository modules it imports. ``packages``: the names that are packages (``__init__``)."""
    packages = {name for name in sources if any(other.startswith(name + ".") for other in sources)} if packages is None else packages
    known = set(sources)
    return {module: imported_modules(module, source, module in packages, known) - {module} for module, source in sources.items()}


def upward_imports(graph: Mapping[str, set[str]]) -> list[str]:
    """Each import of a higher layer from a lower one, as ``"importer (layer) -> imported (layer)"``."""
    found = []
    for module, imported in sorted(graph.items()):
        for target in sorted(imported):
            if layer_of(target) > layer_of(module):
                found.append(f"{module} ({layer_of(module)}) -> {target} ({layer_of(target)})")
    return found


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: one path per cycle found by a depth-first search (empty when there is none)."""
    found, state, path = [], {}, []  # state: 1 on the current path, 2 finished

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                found.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return found


# ----------------------------------------------------------------------------------------------------------------
# The package as it is
# ----------------------------------------------------------------------------------------------------------------


def test_every_module_of_the_packages_has_a_layer():
    sources = package_sources()
    assert len(sources) > 40 and all(layer_of(module) is not None for module in sources)
    assert {module for module in sources if layer_of(module) == LAYERS.index(("elmo_hf_cli",))} == {m for m in sources if m.startswith("elmo_hf_cli")}


def test_no_module_imports_a_higher_layer_the_cli_or_the_conversion_scripts():
    graph = import_graph(package_sources())
    assert sum(len(imported) for imported in graph.values()) > 100  # the walk sees the imports
    assert upward_imports(graph) == []


def test_the_imports_have_no_cycle():
    assert cycles(import_graph(package_sources())) == []


def test_the_remote_code_files_import_only_each_other():
    """What ``save_pretrained`` copies next to a checkpoint must load without the package's subpackages."""
    graph = import_graph(package_sources())
    flat = {module for module in graph if module.count(".") == 1 and module.endswith("_elmo")}
    assert {"elmo_hf.configuration_elmo", "elmo_hf.modeling_elmo", "elmo_hf.tokenization_elmo", "elmo_hf.characters_elmo"} <= flat
    for module in flat:
        assert graph[module] <= flat, (module, graph[module] - flat)


# ----------------------------------------------------------------------------------------------------------------
# The checks can fail
# ----------------------------------------------------------------------------------------------------------------


def test_a_synthetic_cycle_is_found():
    sources = {
        "elmo_hf.corpus": "",
        "elmo_hf.corpus.readers": "from .vocabulary import VOCABULARY_FILE_NAME\n",
        "elmo_hf.corpus.vocabulary": "def f():\n    from elmo_hf.corpus import readers\n",
        "elmo_hf.corpus.sentences": "from . import readers\n",
    }
    assert cycles(import_graph(sources)) == [["elmo_hf.corpus.readers", "elmo_hf.corpus.vocabulary", "elmo_hf.corpus.readers"]]


def test_synthetic_upward_imports_are_found():
    sources = {
        "elmo_hf": "",
        "elmo_hf.modeling_elmo": "from .corpus.readers import read_lines\n",  # a remote-code file reaching up
        "elmo_hf.corpus": "",
        "elmo_hf.corpus.readers": "",
        "elmo_hf.storage": "",
        "elmo_hf.storage.files": "def f():\n    import elmo_hf_cli\n",  # the CLI, lazily
        "elmo_hf.conversion": "",
        "elmo_hf.conversion.shared": "from ..pretraining.run import PRETRAINING_OPTIONS_FILE_NAME\n",
        "elmo_hf.pretraining": "",
        "elmo_hf.pretraining.run": "from ..conversion import shared\nfrom conversion.convert_allennlp_to_hf import main\n",
        "elmo_hf_cli": "from elmo_hf.pretraining import run\n",
    }
    assert upward_imports(import_graph(sources)) == [
        "elmo_hf.conversion.shared (2) -> elmo_hf.pretraining.run (3)",
        "elmo_hf.modeling_elmo (0) -> elmo_hf.corpus.readers (1)",
        "elmo_hf.pretraining.run (3) -> conversion.convert_allennlp_to_hf (5)",
        "elmo_hf.storage.files (1) -> elmo_hf_cli (4)",
    ]
