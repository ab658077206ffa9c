"""``python -m conversion.convert_elmoformanylangs DIR --output OUT ...``: an ELMoForManyLangs model directory to a
Hugging Face directory, as ``elmo-hf convert --elmoformanylangs DIR`` (same flags; the directory may come first
without ``--elmoformanylangs``). The conversion is ``elmo_hf.conversion.convert_elmoformanylangs``."""

from __future__ import annotations

import sys

from elmo_hf_cli import main as elmo_hf_main


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if arguments and not arguments[0].startswith("-"):
        arguments = ["--elmoformanylangs", *arguments]
    return elmo_hf_main(["convert", *arguments])


if __name__ == "__main__":
    sys.exit(main())
