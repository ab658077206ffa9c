"""``python -m conversion.convert_tf_checkpoint CHECKPOINT --vocab vocab.txt --output DIR ...``: a bilm-tf
TensorFlow checkpoint to an ``ELMoForPreTraining`` directory, as ``elmo-hf convert --checkpoint CHECKPOINT`` (same
flags; the checkpoint may come first without ``--checkpoint``). The conversion is
``elmo_hf.conversion.convert_tf_checkpoint``."""

from __future__ import annotations

import sys

from . import run_elmo_hf


def main(argv: list[str] | None = None) -> int:
    return run_elmo_hf("convert", argv, first_argument_flag="--checkpoint")


if __name__ == "__main__":
    sys.exit(main())
