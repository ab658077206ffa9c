"""Build the offline default model shipped in ``elmo_hf/default_model/``: AllenNLP's test ELMo (the shared fixture),
converted and verified against the outputs the original TensorFlow code computed.

    python -m conversion.build_default_model [--fixture ../shared/fixtures/allennlp-elmo]

It is what ``elmo-hf embed`` uses when no ``--model`` is given, so the main job runs on a machine with no network.
It is a 0.1M-parameter test model whose vectors carry little meaning; the converted released weights are what to
use for quality. Only the checkpoint files are shipped (no copies of the modeling code: the installed package is the
code).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from .convert_allennlp_to_hf import convert_allennlp_to_hf
from .hdf5_layout import ConversionError

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_FIXTURE_DIR = REPOSITORY_ROOT.parent / "shared" / "fixtures" / "allennlp-elmo"
DEFAULT_OUTPUT_DIR = REPOSITORY_ROOT / "elmo_hf" / "default_model"
SHIPPED_FILES = ("config.json", "model.safetensors", "tokenizer_config.json", "original_options.json")

CARD_NOTE = """
## This is elmo-hf's offline default model: a test model

elmo-hf ships this checkpoint inside the package so that `elmo-hf embed` and the examples run with no network. It is
the tiny ELMo that AllenNLP's test suite uses (Apache-2.0), trained on very little text: its vectors carry little
meaning. For real work convert the released ELMo weights (see the elmo-hf README) and pass `--model`.
"""


def build_default_model(fixture_dir: Path, output_dir: Path = DEFAULT_OUTPUT_DIR) -> Path:
    """Convert and verify the fixture, then replace ``output_dir`` with its checkpoint files and model card."""
    command = f"python -m conversion.build_default_model --fixture {os.path.relpath(fixture_dir, REPOSITORY_ROOT)}"
    with tempfile.TemporaryDirectory() as staging:
        converted = Path(staging) / "converted"
        convert_allennlp_to_hf(
            fixture_dir / "options.json", fixture_dir / "lm_weights.hdf5", converted, verify_dir=fixture_dir, command=command
        )
        shipped = Path(staging) / "shipped"
        shipped.mkdir()
        for name in SHIPPED_FILES:
            shutil.copy2(converted / name, shipped / name)
        card = (converted / "README.md").read_text(encoding="utf-8")
        (shipped / "README.md").write_text(card.rstrip("\n") + "\n" + CARD_NOTE, encoding="utf-8")
        if output_dir.exists():
            shutil.rmtree(output_dir)
        shutil.copytree(shipped, output_dir)
    return output_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixture", type=Path, default=DEFAULT_FIXTURE_DIR, help="the allennlp-elmo fixture directory")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT_DIR, help="where to write (default: the package)")
    args = parser.parse_args(argv)
    try:
        output = build_default_model(args.fixture, args.output)
    except (ConversionError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
