"""``python -m conversion.convert_hf_to_allennlp --model DIR --output DIR ...``: an elmo-hf directory back to the
original layout (``options.json`` + ``weights.hdf5``). The same flags as ``elmo-hf export``, which it runs; the
export is ``elmo_hf.conversion.convert_hf_to_allennlp``."""

from __future__ import annotations

import sys

from elmo_hf_cli import main as elmo_hf_main


def main(argv: list[str] | None = None) -> int:
    return elmo_hf_main(["export", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
