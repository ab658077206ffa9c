"""Run the code blocks of a Markdown file, in order, as a reader would: the engine of `tests/test_documentation.py`.

Which blocks run: ``python`` blocks, and ``bash`` / ``sh`` blocks with ``bash -euo pipefail``; every other language
(``text``, ``json``, ``console``, ``toml``, ...) is shown, not run; a fence without a language is an error (say
``text``). Blocks are read by `tests/doc_blocks.py`; their directives are HTML comments directly above the fence:

    <!-- docs-test: replace "--epochs 5" "--max-steps 4" -->     run a cheaper form of the block (OLD must occur)
    <!-- docs-test: fixture-nlpl-zip 223.zip -->                  put the fixture as an NLPL archive at PATH
    <!-- docs-test: excerpt data/corpora/tinyshakespeare.txt 500 -->   run on the file's first 500 lines instead
    <!-- docs-test: excerpt data/corpora/tinyshakespeare.txt 500 corpus.txt -->   corpus.txt: those lines
    <!-- docs-test: skip -->                                      only the two quick-start blocks and `pip install`

Any other ``docs-test:`` comment is an error, and so is a ``skip`` anywhere else, so a block cannot silently stop
being run. Arguments are split as a shell splits them (quotes keep spaces). No directive supplies a model: a block
uses one that an earlier block of the same file made from the clone (the converted test fixture) or the shipped one,
so that the blocks run as pasted.

How they run: in a fresh working directory holding links to the repository's ``data/``, ``tests/``, ``scripts/``
and ``conversion/`` (so repo-relative paths work, as from the clone's root), one Markdown file alone or several in
order in the same directory, as a reader working through them; a file's Python blocks share one process and one
namespace (a later block uses the names of an earlier one; each file starts a new one), its shell blocks run in
between, in file order; the first failing block stops the run. Python tracebacks point at the Markdown file's own
lines.

Start-up: importing torch, transformers and elmo_hf takes 5-10 s on 2 cores, and the documentation runs the
``elmo-hf`` command about thirty times. So the runner is a small fork server (`serve`): one process imports all of
that once, then forks a child per request; the ``elmo-hf`` on the blocks' ``PATH`` is a stdlib-only client that
hands its argv, working directory, environment and standard streams to the server and exits with the child's code.
The child runs the installed console script's entry point (``elmo-hf`` in the package metadata), as the real
command does, so a renamed flag or command fails as it would for a user. What this does not cover (the console
script's own start-up, ``--help`` without torch) is tested in ``tests/cli/``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

try:
    from .doc_blocks import CodeBlock, code_blocks
except ImportError:  # run as a script (the server): tests/ is sys.path[0]
    from doc_blocks import CodeBlock, code_blocks

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
LINKED_FOLDERS = ("data", "tests", "scripts", "conversion")
RUN_LANGUAGES = ("python", "bash", "sh")
SHOWN_LANGUAGES = ("text", "json", "console", "toml", "yaml", "markdown", "diff")
QUICKSTART_MARKERS = ("quickstart-main", "quickstart-test")
DIRECTIVE_PREFIX = "docs-test:"
PIP_INSTALL = re.compile(r"pip install [^;&|<>`$()]+")  # nothing chained
PIP_LINE = re.compile(r"(^\s*|[;&|(]\s*)(python3? -m )?pip3? install\b", re.MULTILINE)
BLOCK_TIMEOUT_S = 300


class DirectiveError(ValueError):
    """A block whose directives are wrong: unknown, malformed, a skip where none is allowed, a stale replace."""


@dataclass(frozen=True)
class BlockPlan:
    block: CodeBlock
    run: bool  # False for shown languages and skipped blocks
    code: str  # the block's code after its replace directives
    fixture_zips: tuple[str, ...] = field(default=())
    excerpts: tuple[tuple[str, str, int], ...] = field(default=())  # (source, excerpt file, lines)
    skipped: bool = False


def is_pip_install_only(code: str) -> bool:
    lines = [line.split("#", 1)[0].strip() for line in code.splitlines()]
    lines = [line for line in lines if line]
    return bool(lines) and all(PIP_INSTALL.fullmatch(line) for line in lines)


def plan_block(block: CodeBlock) -> BlockPlan:
    """What the test does with ``block``; a `DirectiveError` naming its file:line if its directives are wrong."""
    language = block.language.lower()
    if not language:
        raise DirectiveError(f"{block.where}: a code block without a language; name one (text if it is not code)")
    code, zips, excerpts, skipped = block.code, [], [], False
    for marker in block.markers:
        if not marker.startswith(DIRECTIVE_PREFIX):
            if marker.replace("_", "-").replace(" ", "-").lower().startswith("docs-test"):
                raise DirectiveError(
                    f"{block.where}: malformed directive <!-- {marker} -->; write <!-- docs-test: ... -->"
                )
            continue
        try:
            kind, *arguments = shlex.split(marker[len(DIRECTIVE_PREFIX) :])
        except ValueError as error:  # an unbalanced quote; shlex.split("") gives [] and fails the unpacking
            raise DirectiveError(f"{block.where}: cannot read <!-- {marker} -->: {error}") from None
        if kind == "replace" and len(arguments) == 2:
            old, new = arguments
            if old not in code:
                raise DirectiveError(f"{block.where}: replace {old!r}: the block no longer contains it")
            code = code.replace(old, new)
        elif kind == "excerpt" and len(arguments) in (2, 3) and arguments[1].isdigit():
            source, lines = arguments[0], int(arguments[1])
            named = arguments[2] if len(arguments) == 3 else source  # the path the block reads
            if named not in code:
                raise DirectiveError(f"{block.where}: excerpt to {named!r}: the block no longer contains it")
            excerpt = named if len(arguments) == 3 else f"{Path(source).stem}.first-{lines}-lines{Path(source).suffix}"
            code = code.replace(source, excerpt)
            excerpts.append((source, excerpt, lines))
        elif kind == "fixture-nlpl-zip" and len(arguments) == 1:
            zips.append(arguments[0])
        elif kind == "skip" and not arguments:
            if not (set(QUICKSTART_MARKERS) & set(block.markers) or is_pip_install_only(block.code)):
                raise DirectiveError(
                    f"{block.where}: skip is allowed only on the quick-start blocks and blocks of `pip install` lines"
                )
            skipped = True
        else:
            raise DirectiveError(
                f"{block.where}: unknown directive <!-- {marker} -->; known: replace OLD NEW, excerpt PATH LINES [AS], "
                "fixture-nlpl-zip PATH, skip"
            )
    runnable = language in RUN_LANGUAGES
    if runnable and not skipped and PIP_LINE.search(block.code):
        raise DirectiveError(
            f"{block.where}: `pip install` in a block that runs; put the pip lines in a block of their own, marked "
            "<!-- docs-test: skip --> (the test never installs anything)"
        )
    if not runnable and (zips or code != block.code or skipped):
        raise DirectiveError(f"{block.where}: directives on a {language} block, which is not run")
    return BlockPlan(block, runnable and not skipped, code, tuple(zips), tuple(excerpts), skipped)


def plan_markdown(path: Path) -> list[BlockPlan]:
    return [plan_block(block) for block in code_blocks(path)]


def prepare_workdir(workdir: Path) -> Path:
    """A fresh directory with links to the repository folders that documented commands name by relative path."""
    workdir.mkdir(parents=True, exist_ok=False)
    for name in LINKED_FOLDERS:
        if (REPOSITORY_ROOT / name).exists():
            (workdir / name).symlink_to(REPOSITORY_ROOT / name, target_is_directory=True)
    return workdir


# --- running one Markdown file (in a child of the server) ------------------------------------------------------


def write_nlpl_zip(path: Path) -> None:
    """The AllenNLP fixture laid out as an NLPL vector repository entry (as `tests/conversion/test_nlpl_zip.py`)."""
    from tests.conversion.test_nlpl_zip import fixture_members, write_zip

    path.parent.mkdir(parents=True, exist_ok=True)
    write_zip(path, fixture_members(REPOSITORY_ROOT / "tests" / "fixtures" / "allennlp-elmo"))


def run_python_block(plan: BlockPlan, namespace: dict, log_path: Path) -> bool:
    """Exec the block in ``namespace`` with file descriptors 1 and 2 sent to ``log_path``; line numbers in a traceback
    are the Markdown file's."""
    source = "\n" * plan.block.line + plan.code
    with open(log_path, "wb") as log:
        sys.stdout.flush(), sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        os.dup2(log.fileno(), 1), os.dup2(log.fileno(), 2)
        try:
            exec(compile(source, str(plan.block.path.resolve()), "exec"), namespace)
            return True
        except BaseException:  # noqa: BLE001 - SystemExit too: the report says which block did it
            traceback.print_exc()
            return False
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])


def run_shell_block(plan: BlockPlan, log_path: Path) -> bool:
    with open(log_path, "wb") as log:
        try:
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", plan.code],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, timeout=BLOCK_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            log.write(f"\n[docs-test: timed out after {BLOCK_TIMEOUT_S} s]\n".encode())
            return False
    if done.returncode != 0:
        with open(log_path, "ab") as log:
            log.write(f"\n[docs-test: exit status {done.returncode}]\n".encode())
    return done.returncode == 0


def run_block(plan: BlockPlan, namespace: dict, log_path: Path) -> dict:
    """Prepare what ``plan``'s directives name, run it; its report entry."""
    for target in plan.fixture_zips:
        write_nlpl_zip(Path(target))
    for source, excerpt, lines in plan.excerpts:
        with open(source, encoding="utf-8") as text:
            Path(excerpt).write_text("".join(line for _, line in zip(range(lines), text)), encoding="utf-8")
    start = time.perf_counter()
    if plan.block.language == "python":
        ok = run_python_block(plan, namespace, log_path)
    else:
        ok = run_shell_block(plan, log_path)
    return {"status": "ok" if ok else "failed", "seconds": round(time.perf_counter() - start, 2), "log": str(log_path)}


def run_markdown(workdir: str, report: str, *markdowns: str) -> int:
    """Run every runnable block of each of ``markdowns``, in order, in ``workdir`` (the current directory), appending
    one JSON line per block to ``report``; stops at the first failure. Returns 0 if all ran, 1 otherwise."""
    os.chdir(workdir)
    logs = Path(report).with_suffix(".logs")
    logs.mkdir()
    number = 0
    for markdown in markdowns:
        namespace = {"__name__": "__main__"}  # a new Python session per file
        for plan in plan_markdown(Path(markdown)):
            entry = {"where": plan.block.where, "language": plan.block.language, "code": plan.code}
            if plan.run:
                entry.update(run_block(plan, namespace, logs / f"block-{number}.log"))
            else:
                entry["status"] = "skipped" if plan.skipped else "shown"
            number += 1
            with open(report, "a", encoding="utf-8") as out:
                out.write(json.dumps(entry) + "\n")
            if entry["status"] == "failed":
                return 1
    return 0


# --- the fork server and its client ----------------------------------------------------------------------------

# Imported by the server before it forks: a start-up cost paid once. Only a speed-up: a module missing here (moved,
# renamed) is imported by the child that needs it, and its import error, if any, fails that block.
PRELOADED = (
    "torch", "transformers", "datasets", "pyarrow.parquet", "elmo_hf.configuration_elmo", "elmo_hf.tokenization_elmo",
    "elmo_hf.embedding.driver", "elmo_hf.pretraining",
    "elmo_hf.search", "elmo_hf.corpus", "tests.helpers", "elmo_hf.conversion.convert_allennlp_to_hf",
)

CLIENT = '''#!{python} -S
"""elmo-hf for the documentation test: runs the command in a child of the test's fork server ({runner})."""
import json, os, socket, sys
connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
connection.connect({socket_path!r})
request = {{"kind": "cli", "argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}}
socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2])
reply = connection.recv(64)
sys.exit(int(reply) if reply else "elmo-hf (documentation test): the server's child ended without an exit status")
'''


def console_script_main():
    from importlib.metadata import entry_points

    found = list(entry_points(group="console_scripts", name="elmo-hf"))
    if len(found) != 1:
        raise RuntimeError(f"expected one installed elmo-hf console script, found {len(found)}: pip install -e .")
    return found[0].load()


def exit_status(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def handle(request: dict) -> int:
    """Run one request in a forked child whose standard streams, directory and environment are the client's."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if request["kind"] == "cli":
        sys.argv = ["elmo-hf", *request["argv"]]
        try:
            return exit_status(console_script_main()())
        except SystemExit as stop:
            return exit_status(stop.code)
    if request["kind"] == "markdown":
        return run_markdown(*request["argv"])
    raise ValueError(f"unknown request kind {request['kind']!r}")


def serve(socket_path: str) -> None:
    """Import everything once, then fork one child per request until killed. The socket appears at ``socket_path``
    only when the server accepts connections."""
    sys.path.insert(0, str(REPOSITORY_ROOT))
    import importlib

    for module in PRELOADED:
        try:
            importlib.import_module(module)
        except ImportError as error:
            print(f"not preloaded: {module} ({error})", file=sys.stderr, flush=True)
    console_script_main()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(socket_path + ".starting")
    listener.listen(16)
    os.rename(socket_path + ".starting", socket_path)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    parent = os.getppid()
    listener.settimeout(2)
    while True:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            if os.getppid() != parent:  # the test run is gone (killed): so is the server
                return
            continue
        connection.settimeout(None)
        message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        sys.stdout.flush(), sys.stderr.flush()
        if os.fork() == 0:
            status = 1
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # subprocess.run must be able to wait
                listener.close()
                for target, fd in zip((0, 1, 2), fds):
                    os.dup2(fd, target)
                    os.close(fd)
                status = handle(json.loads(message))
            except BaseException:  # noqa: BLE001 - reported on the client's stderr, the child always answers
                traceback.print_exc()
            finally:
                sys.stdout.flush(), sys.stderr.flush()
                connection.sendall(str(status).encode())
                os._exit(0)
        connection.close()
        for fd in fds:
            os.close(fd)


INTERPRETER_SHIM = '#!/bin/sh\n# the interpreter running the tests ({runner})\nexec {python} "$@"\n'
INTERPRETER_NAMES = ("python", "python3")


def write_interpreter_shims(folder: Path, interpreter: str) -> None:
    """``python`` and ``python3`` in ``folder``: scripts that exec ``interpreter`` by its own path, so that the
    blocks' ``python`` is the one running the tests, with its packages. Not links: an interpreter of a
    ``python -m venv`` environment is itself a link, and called through a link in another folder it looks for its
    ``pyvenv.cfg`` beside that link, finds none and runs without the environment's packages."""
    for name in INTERPRETER_NAMES:
        shim = folder / name
        shim.write_text(INTERPRETER_SHIM.format(runner=__file__, python=shlex.quote(interpreter)))
        shim.chmod(0o755)


class DocsServer:
    """The fork server as a subprocess of the test session, with the ``bin`` folder its clients live in."""

    def __init__(self, root: Path, env: dict[str, str]):
        self.root = root
        self.socket_path = str(root / "server.sock")
        if len(self.socket_path) > 100:  # AF_UNIX paths are at most 107 bytes
            self.socket_path = os.path.join(tempfile.mkdtemp(prefix="elmo-docs-"), "server.sock")
        self.bin = root / "bin"
        self.bin.mkdir()
        client = self.bin / "elmo-hf"
        client.write_text(CLIENT.format(python=sys.executable, runner=__file__, socket_path=self.socket_path))
        client.chmod(0o755)
        write_interpreter_shims(self.bin, sys.executable)
        self.env = {**env, "PATH": f"{self.bin}{os.pathsep}{env.get('PATH', '')}"}
        self.log = open(root / "server.log", "wb")
        self.process = subprocess.Popen(
            [sys.executable, __file__, "serve", self.socket_path],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True,
        )
        deadline = time.monotonic() + 180
        while not os.path.exists(self.socket_path):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the documentation fork server did not start:\n{self.server_log()}")
            time.sleep(0.1)

    def server_log(self) -> str:
        return (self.root / "server.log").read_text(errors="replace")[-4000:]

    def request(self, kind: str, argv: list[str], cwd: Path, output: Path, timeout: float) -> int:
        """Run a request with stdout and stderr in ``output``; its exit status (1 if the child died without one)."""
        with open(output, "ab") as out, open(os.devnull, "rb") as nothing:
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            connection.settimeout(timeout)
            with connection:
                connection.connect(self.socket_path)
                request = {"kind": kind, "argv": argv, "cwd": str(cwd), "env": self.env}
                streams = [nothing.fileno(), out.fileno(), out.fileno()]
                socket.send_fds(connection, [json.dumps(request).encode()], streams)
                reply = connection.recv(64)
        return int(reply) if reply else 1

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)  # the server and every child it forked (its own session)
            self.process.wait()
        self.log.close()
        for path in (self.socket_path, self.socket_path + ".starting"):
            if os.path.exists(path):
                os.unlink(path)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"] and len(sys.argv) == 3:
        serve(sys.argv[2])
    else:
        sys.exit("usage: python tests/doc_runner.py serve SOCKET   (started by tests/test_documentation.py)")
