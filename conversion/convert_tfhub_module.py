"""``python -m conversion.convert_tfhub_module MODULE --output DIR ...``: an ELMo TF-Hub module in the TF1 Hub
format (its directory, its ``.tar.gz`` or a download folder holding one version folder) to a Hugging Face directory,
as ``elmo-hf convert --tfhub MODULE`` (same flags; the module may come first without ``--tfhub``). The conversion is
``elmo_hf.conversion.convert_tfhub_module``."""

from __future__ import annotations

import sys

from . import run_elmo_hf


def main(argv: list[str] | None = None) -> int:
    return run_elmo_hf("convert", argv, first_argument_flag="--tfhub")


if __name__ == "__main__":
    sys.exit(main())
