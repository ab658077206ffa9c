"""The ``elmo-hf`` command line: parse, call the library, report.

    elmo-hf --version
    elmo-hf embed corpus.txt --output vectors/ [--model DIR_OR_REPO] [--resume]
    elmo-hf embed --verify vectors/
    elmo-hf convert --options options.json --weights weights.hdf5 --output elmo/ [--verify REFERENCE_DIR]
    elmo-hf export --model elmo/ --output elmo-hdf5/
    elmo-hf pretrain --corpus corpus.txt --output elmo-small/ [--config tiny|small|FILE] [--max-steps N] [--resume]
    elmo-hf similarity --model DIR --word bank "I sat on the bank ." "The bank raised rates ."
    elmo-hf neighbours build vectors/ --output vectors-index/ [--index flat|ivf|ivfpq]
    elmo-hf neighbours query vectors-index/ --sentence "We saw the play ." --word play [--same-word] [--static 10]
    elmo-hf probe MODEL --corpus train.conllu [--test test.conllu] [--column upos] [--output probe/]

This package lives beside ``elmo_hf`` rather than inside it: importing ``elmo_hf`` registers the ELMo classes with
transformers, which imports torch (seconds), and ``--help`` of every command answers without any of that. Each
command module imports the library only when it runs; the values the library accepts (representations, poolings,
optimizers, ...) are checked by the library itself, which names the allowed ones in its error.

Exit codes: 0 success, 2 a problem with the input, the options or the output directory (the message says which),
130 interrupted (Ctrl-C), 143 terminated (SIGTERM: handled as Ctrl-C is, ``common.sigterm_as_ctrl_c``), 1 a verification that found problems or an embedding worker process that died.

Threads: ``main`` sets ``OMP_WAIT_POLICY=PASSIVE`` (unless the environment sets it) before any command imports torch,
so that idle OpenMP threads sleep instead of spinning on a shared machine (``common.wait_passively``); the CPU-heavy
commands take ``--threads``.

Process: ``elmo-hf`` and ``python -m elmo_hf_cli`` run ``command_line``, which is ``main`` plus the garbage-collector
settings of a short-lived process (``common.collect_garbage_as_a_short_lived_process``,
``common.exit_without_a_final_collection``) and glibc malloc thresholds under which freed tensors' memory is reused
instead of page-faulted in again (``common.reuse_freed_memory``), also in the processes it spawns
(``common.thresholds_for_started_processes``).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from typing import NoReturn

from . import convert, embed, neighbours, pretrain, probe, similarity
from .arguments import SuggestingArgumentParser
from .common import (
    EXIT_INTERRUPTED, EXIT_USAGE_ERROR, collect_garbage_as_a_short_lived_process, ctrl_c_ends_the_exit, exit_code_after_interrupt,
    exit_without_a_final_collection, reuse_freed_memory, sigterm_as_ctrl_c, thresholds_for_started_processes, wait_passively,
)

COMMANDS = (embed, convert, pretrain, similarity, neighbours, probe)


def build_parser() -> argparse.ArgumentParser:
    parser = SuggestingArgumentParser(prog="elmo-hf", description="ELMo contextual word representations.")
    parser.add_argument("--version", action="version", version=f"elmo-hf {installed_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parsers(commands)
    return parser


def installed_version() -> str:
    """The installed distribution's version (``elmo_hf.__version__``, recorded at install time): imports nothing."""
    try:
        return importlib.metadata.version("elmo-hf")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed: run from a source tree)"


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit code (argument errors, ``--help`` and ``--version`` too: argparse's exit
    becomes the return value). Ctrl-C at any point (start-up included) exits 130 without a traceback; commands that
    can resume say how."""
    wait_passively()  # before any command imports torch
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as exit:  # argparse printed the usage and the error, or the help or version
            return exit.code if isinstance(exit.code, int) else EXIT_USAGE_ERROR
        code = args.run(args)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    return exit_code_after_interrupt() if code == EXIT_INTERRUPTED else code


def command_line() -> NoReturn:
    """The ``elmo-hf`` executable and ``python -m elmo_hf_cli``: ``main`` in a process of its own, which collects
    garbage as a short-lived process does (``common.collect_garbage_as_a_short_lived_process``), reuses freed memory
    (``common.reuse_freed_memory``, in the processes it spawns too), ends by SIGINT at once on a Ctrl-C once the command has returned
    (``common.ctrl_c_ends_the_exit``) and exits without the interpreter's final search for cycles
    (``common.exit_without_a_final_collection``). Call ``main`` to run a command inside a program of your own: it
    changes none of them. SIGTERM is handled as Ctrl-C is and exits 143 (``common.sigterm_as_ctrl_c``)."""
    sigterm_as_ctrl_c()
    collect_garbage_as_a_short_lived_process()
    if reuse_freed_memory():
        thresholds_for_started_processes()
    code = main()
    ctrl_c_ends_the_exit()
    exit_without_a_final_collection(code)


__all__ = ["build_parser", "command_line", "installed_version", "main"]
