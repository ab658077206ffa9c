"""How big the library is and how far one value travels through it: the figures issue 52 asks for, counted the
same way before and after a redesign.

    python scripts/structure_report.py sizes            # files over 600 lines, functions over 60, core vs the rest
    python scripts/structure_report.py route embed      # places `elmo-hf embed`'s output directory passes through
    python scripts/structure_report.py route pretrain   # places `elmo-hf pretrain`'s options object passes through

Run it from a checkout (or with ``PYTHONPATH`` pointing at one): it reads that checkout's ``elmo_hf`` and
``elmo_hf_cli``.

``sizes`` reads the source with ``ast``. Its line counts come three ways: as written; as ``ruff format
--line-length 120`` lays the same files out (so that packing arguments onto fewer lines, or spreading them, neither
gains nor loses: compare two trees by this count); and that layout's code alone (no docstrings, comments or blank
lines). The last two need ``ruff`` on the ``PATH`` and are left out without it. The model core is the flat ``*_elmo.py`` files that define the model
(configuration, modeling, fast paths, tokenizer and its character and word splitting); the task heads, the
pre-training model, choices and validation, and every subpackage are "the rest".

``route`` runs the command once, in this process (one worker, a tiny corpus in a temporary folder), and watches
every call into ``elmo_hf`` or ``elmo_hf_cli``: a place is a function (file and qualified name) whose arguments,
when it is called, hold the traced value itself, or an object whose attributes hold it. The embed route follows the
``--output`` directory (as a string or a path); the pretrain route the command's options (the parsed arguments and
the ``PretrainingOptions`` made of them). It counts
what runs, not what the code could do: a branch this run does not take is not counted.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

CORE_EXCLUDED = {"choices_elmo.py", "validation_elmo.py", "modeling_elmo_downstream.py", "modeling_elmo_pretraining.py"}
FILE_LIMIT, MODEL_FILE_LIMIT, FUNCTION_LIMIT = 600, 900, 60


def library_files(root: Path) -> list[Path]:
    return sorted([*root.glob("elmo_hf/**/*.py"), *root.glob("elmo_hf_cli/*.py")])


def is_core(path: Path, root: Path) -> bool:
    relative = path.relative_to(root)
    return relative.parent == Path("elmo_hf") and path.name.endswith("_elmo.py") and path.name not in CORE_EXCLUDED


def long_functions(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > FUNCTION_LIMIT:
                found.append((f"{node.name}:{node.lineno}", length))
    return found


def docstring_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def code_lines(source: str) -> int:
    """Lines that are neither blank, nor a comment, nor part of a docstring."""
    documented = docstring_lines(ast.parse(source))
    return sum(
        1 for number, line in enumerate(source.splitlines(), start=1)
        if line.strip() and not line.strip().startswith("#") and number not in documented
    )


def formatted_counts(root: Path) -> dict[str, int] | None:
    """Core and rest lines, and their code lines, of the library as ``ruff format --line-length 120`` lays it out."""
    ruff = shutil.which("ruff")
    if ruff is None:
        return None
    counts = {"core": 0, "rest": 0, "core code": 0, "rest code": 0}
    with tempfile.TemporaryDirectory() as temporary:
        copies = []
        for path in library_files(root):
            copy = Path(temporary) / path.relative_to(root)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, copy)
            copies.append((path, copy))
        subprocess.run([ruff, "format", "--quiet", "--no-cache", "--line-length", "120", temporary], check=True)
        for path, copy in copies:
            source = copy.read_text(encoding="utf-8")
            part = "core" if is_core(path, root) else "rest"
            counts[part] += len(source.splitlines())
            counts[f"{part} code"] += code_lines(source)
    return counts


def sizes(root: Path) -> None:
    core = rest = 0
    over_limit, functions = [], []
    for path in library_files(root):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        relative = path.relative_to(root)
        if is_core(path, root):
            core += lines
        else:
            rest += lines
        limit = MODEL_FILE_LIMIT if relative == Path("elmo_hf/modeling_elmo.py") else FILE_LIMIT
        if lines > limit:
            over_limit.append((str(relative), lines))
        functions += [(f"{relative}:{name}", length) for name, length in long_functions(path)]
    print(f"library lines: {core + rest} (model core {core}, the rest {rest})")
    formatted = formatted_counts(root)
    if formatted is None:
        print("ruff is not on the PATH: the formatted counts are left out")
    else:
        print(f"as ruff format lays them out: model core {formatted['core']}, the rest {formatted['rest']}")
        print(f"  of which code (no docstrings, comments, blank lines): model core {formatted['core code']}, "
              f"the rest {formatted['rest code']}")
    print(f"files over their limit ({FILE_LIMIT}; modeling_elmo.py {MODEL_FILE_LIMIT}): {len(over_limit)}")
    for name, lines in sorted(over_limit, key=lambda item: -item[1]):
        print(f"  {lines:5d}  {name}")
    print(f"functions over {FUNCTION_LIMIT} lines: {len(functions)}")
    for name, length in sorted(functions, key=lambda item: -item[1]):
        print(f"  {length:5d}  {name}")


class RouteWatcher:
    """A profile function that records the places whose call arguments hold the traced value."""

    def __init__(self, roots: list[Path], holds):
        self.roots = [str(root) + os.sep for root in roots]
        self.holds = holds
        self.places: Counter[tuple[str, str]] = Counter()

    def __call__(self, frame, event, argument):
        if event != "call":
            return
        file_name = frame.f_code.co_filename
        root = next((root for root in self.roots if file_name.startswith(root)), None)
        if root is None:
            return
        code = frame.f_code
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        if any(self._holds(frame.f_locals.get(name)) for name in names):
            self.places[(file_name[len(root):], code.co_qualname)] += 1

    def _holds(self, value) -> bool:
        if self.holds(value):
            return True
        attributes = getattr(value, "__dict__", None)
        return isinstance(attributes, dict) and any(self.holds(inner) for inner in list(attributes.values()))


def traced(command: list[str], holds) -> RouteWatcher:
    import elmo_hf_cli

    package_roots = [Path(elmo_hf_cli.__file__).resolve().parent.parent / name for name in ("elmo_hf", "elmo_hf_cli")]
    watcher = RouteWatcher(package_roots, holds)
    sys.setprofile(watcher)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = elmo_hf_cli.main(command)
    finally:
        sys.setprofile(None)
    if code not in (0, None):
        raise SystemExit(f"{' '.join(command)} exited {code}")
    return watcher


def corpus(folder: Path) -> Path:
    path = folder / "corpus.txt"
    sentences = ["The cat sat on the mat .", "A bank raised its rates .", "We sat on the bank of the river ."]
    path.write_text("\n".join(sentences * 40) + "\n", encoding="utf-8")
    return path


def options_class() -> type:
    from elmo_hf.pretraining.options import PretrainingOptions

    return PretrainingOptions


def route(kind: str) -> None:
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        text = corpus(folder)
        output = folder / "out"
        if kind == "embed":
            wanted = {str(output), str(output.resolve())}
            command = ["embed", str(text), "--output", str(output), "--workers", "1", "--shard-size", "40"]
            watcher = traced(command, lambda value: isinstance(value, (str, os.PathLike)) and os.fspath(value) in wanted)
        else:
            command = ["pretrain", "--corpus", str(text), "--output", str(output), "--config", "tiny",
                       "--max-steps", "2", "--threads", "1"]
            watcher = traced(command, lambda value: isinstance(value, (argparse.Namespace, options_class())))
    files = Counter(file for file, _ in watcher.places)
    print(f"{kind}: {len(watcher.places)} places in {len(files)} files")
    for (file, name), calls in sorted(watcher.places.items()):
        print(f"  {file}:{name}  ({calls} call{'s' if calls > 1 else ''})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="what", required=True)
    commands.add_parser("sizes", help="file and function sizes, model core vs the rest")
    route_parser = commands.add_parser("route", help="the places one value of a command passes through")
    route_parser.add_argument("kind", choices=("embed", "pretrain"))
    arguments = parser.parse_args()
    if arguments.what == "sizes":
        import elmo_hf_cli

        sizes(Path(elmo_hf_cli.__file__).resolve().parent.parent)
    else:
        route(arguments.kind)


if __name__ == "__main__":
    main()
