"""``python -m conversion.convert_tf_checkpoint CHECKPOINT --vocab vocab.txt --output DIR ...``: a bilm-tf
TensorFlow checkpoint to an ``ELMoForPreTraining`` directory, as ``elmo-hf convert --checkpoint CHECKPOINT`` (same
flags; the checkpoint may come first without ``--checkpoint``). The conversion is
``elmo_hf.conversion.convert_tf_checkpoint``."""

from __future__ import annotations

import sys

from elmo_hf_cli import main as elmo_hf_main


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if arguments and not arguments[0].startswith("-"):
        arguments = ["--checkpoint", *arguments]
    return elmo_hf_main(["convert", *arguments])


if __name__ == "__main__":
    sys.exit(main())
