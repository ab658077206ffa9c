"""``python -m conversion.convert_allennlp_to_hf --options OPTIONS --weights WEIGHTS --output DIR ...``: an original
ELMo (bilm-tf / AllenNLP ``options.json`` + ``weights.hdf5``) to a Hugging Face directory. The same flags as
``elmo-hf convert``, which it runs; the conversion is ``elmo_hf.conversion.convert_allennlp_to_hf``."""

from __future__ import annotations

import sys

from . import run_elmo_hf


def main(argv: list[str] | None = None) -> int:
    return run_elmo_hf("convert", argv)


if __name__ == "__main__":
    sys.exit(main())
