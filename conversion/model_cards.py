"""``python -m conversion.model_cards --options-dir tests/fixtures/pretrained-options --output model_cards``:
regenerate the model cards of the four released models (``elmo_hf.conversion.model_cards``) in the repository's
``model_cards/``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from elmo_hf.conversion.model_cards import write_released_model_cards


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Regenerate the model cards of the released ELMo models.")
    parser.add_argument("--options-dir", type=Path, default=Path("tests/fixtures/pretrained-options"))
    parser.add_argument("--output", type=Path, default=Path("model_cards"), help="default: ./model_cards (the repository's)")
    args = parser.parse_args(argv)
    for path in write_released_model_cards(args.options_dir, args.output):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
