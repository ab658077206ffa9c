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

This package lives beside ``elmo_hf``, the library it calls; ``--help`` of every command answers without torch
(docs/design/architecture.md, "Start-up"), and the library checks the values and holds the defaults.

Exit codes: 0 success, 2 a problem with the input, the options or the output directory (the message says which),
130 interrupted (Ctrl-C), 143 terminated (SIGTERM, handled as Ctrl-C is), 1 a verification that found problems or
an embedding worker process that died.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from typing import NoReturn

from elmo_hf.runtime.parallelism import wait_passively
from elmo_hf.runtime.process_tuning import tuned_command_process

from . import convert, embed, neighbours, pretrain, probe, similarity
from .arguments import SuggestingArgumentParser
from .common import EXIT_INTERRUPTED, EXIT_USAGE_ERROR, ctrl_c_ends_the_exit, exit_code_after_interrupt, sigterm_as_ctrl_c

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
    """The ``elmo-hf`` executable and ``python -m elmo_hf_cli``: ``main`` in a process of its own, tuned as a
    short-lived one (``tuned_command_process``), SIGTERM handled as Ctrl-C is, and a Ctrl-C in the exit ending it by
    SIGINT. Call ``main`` to run a command inside a program of your own: it changes none of these."""
    sigterm_as_ctrl_c()
    with tuned_command_process():
        code = main()
        ctrl_c_ends_the_exit()
    sys.exit(code)


__all__ = ["build_parser", "command_line", "installed_version", "main"]
