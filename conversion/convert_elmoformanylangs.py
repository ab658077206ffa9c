"""``python -m conversion.convert_elmoformanylangs DIR --output OUT ...``: an ELMoForManyLangs model directory to a
Hugging Face directory, as ``elmo-hf convert --elmoformanylangs DIR`` (same flags; the directory may come first
without ``--elmoformanylangs``). The conversion is ``elmo_hf.conversion.convert_elmoformanylangs``."""

from __future__ import annotations

import sys

from . import run_elmo_hf


def main(argv: list[str] | None = None) -> int:
    return run_elmo_hf("convert", argv, first_argument_flag="--elmoformanylangs")


if __name__ == "__main__":
    sys.exit(main())
