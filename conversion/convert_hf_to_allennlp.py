"""``python -m conversion.convert_hf_to_allennlp --model DIR --output DIR ...``: an elmo-hf directory back to the
original layout (``options.json`` + ``weights.hdf5``). The same flags as ``elmo-hf export``, which it runs; the
export is ``elmo_hf.conversion.convert_hf_to_allennlp``."""

from __future__ import annotations

import sys

from . import run_elmo_hf


def main(argv: list[str] | None = None) -> int:
    return run_elmo_hf("export", argv)


if __name__ == "__main__":
    sys.exit(main())
