"""The conversion scripts a user runs from a checkout (``python -m conversion.<script> ...``), each a thin entry
point to the ``elmo-hf`` command, which calls the library (``elmo_hf.conversion``). Nothing in ``elmo_hf`` imports
this folder, and the wheel does not ship it, as transformers' ``convert_*.py`` scripts are never imported by the
library."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def run_elmo_hf(command: str, argv: Sequence[str] | None, first_argument_flag: str | None = None) -> int:
    """``elmo-hf COMMAND ARGUMENTS`` (``argv``, or the script's own arguments); a first argument that is not a flag
    is given ``first_argument_flag`` (``DIR`` -> ``--elmoformanylangs DIR``)."""
    from elmo_hf_cli import main

    arguments = list(sys.argv[1:] if argv is None else argv)
    if first_argument_flag is not None and arguments and not arguments[0].startswith("-"):
        arguments = [first_argument_flag, *arguments]
    return main([command, *arguments])
