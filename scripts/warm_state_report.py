"""How far are deterministic vectors from the original's stateful ones? Prints JSON.

The original carries LSTM state across batches, so after a few batches its vectors come from a "warm" state. On
AllenNLP's fixture (expected outputs made that way, batches 0..9) this compares, for batches 1..9 (after warm-up):
- zero state: each batch run from the all-zero initial state (the converted model's default);
- warm state: each batch run from a fixed warm initial state computed by ``compute_warm_initial_state`` on
  held-out text (UD English-EWT dev sentences, never seen by the fixture run), 3 sentences per batch as in the
  fixture run.

    python scripts/warm_state_report.py --model models/elmo-fixture [--fixture tests/fixtures/allennlp-elmo] \
        [--held-out data/corpora/ud-english-ewt/en_ewt-ud-dev.conllu] [--warm-up-sentences 300]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import h5py
import numpy as np
import torch

from elmo_hf import ELMoModel, ELMoTokenizer

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]


def read_conllu_words(path: Path, limit: int) -> list[list[str]]:
    """The word forms of the first ``limit`` sentences of a CoNLL-U file (multi-word token lines skipped)."""
    sentences, words = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            if words:
                sentences.append(words)
                words = []
                if len(sentences) == limit:
                    break
        elif not line.startswith("#"):
            columns = line.split("\t")
            if columns[0].isdigit():
                words.append(columns[1])
    return sentences


def distances(model, tokenizer, fixture_dir: Path, batch_indices) -> dict[str, float]:
    groups = json.loads((fixture_dir / "sentences.json").read_text())
    absolute, cosines = [], []
    for batch_index in batch_indices:
        batch = [group[batch_index].split() for group in groups]
        with torch.no_grad():
            top = model(**tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")).last_hidden_state
        for row in range(len(groups)):
            with h5py.File(fixture_dir / f"lm_embeddings_{row}.hdf5", "r") as expected_file:
                expected = np.concatenate(list(expected_file[str(batch_index)][...]), axis=-1)
            actual = top[row, : len(batch[row])].numpy()
            absolute.append(np.abs(actual - expected))
            cosines.append(
                (actual * expected).sum(-1) / (np.linalg.norm(actual, axis=-1) * np.linalg.norm(expected, axis=-1))
            )
    absolute, cosines = np.concatenate(absolute), np.concatenate(cosines)
    return {
        "max_abs_diff": float(absolute.max()),
        "mean_abs_diff": float(absolute.mean()),
        "mean_cosine": float(cosines.mean()),
        "min_cosine": float(cosines.min()),
    }


def warm_state_report(model_dir: Path, fixture_dir: Path, held_out_conllu: Path, warm_up_sentences: int = 300) -> dict:
    model = ELMoModel.from_pretrained(model_dir).eval()
    tokenizer = ELMoTokenizer.from_pretrained(model_dir)
    after_warm_up = range(1, 10)
    report = {"zero_state": distances(model, tokenizer, fixture_dir, after_warm_up)}

    held_out = read_conllu_words(held_out_conllu, warm_up_sentences)
    batches = [
        tokenizer(held_out[start : start + 3], is_split_into_words=True, padding=True, return_tensors="pt")
        for start in range(0, len(held_out) - 2, 3)
    ]
    model.set_initial_lstm_state(*model.compute_warm_initial_state(batches))
    report["warm_state"] = distances(model, tokenizer, fixture_dir, after_warm_up)
    report["warm_state"]["warm_up_sentences"] = len(held_out)
    report["batches_compared"] = list(after_warm_up)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True, help="the converted fixture model")
    parser.add_argument("--fixture", type=Path, default=REPOSITORY_ROOT / "tests" / "fixtures" / "allennlp-elmo")
    parser.add_argument("--held-out", type=Path, default=REPOSITORY_ROOT / "data" / "corpora" / "ud-english-ewt" / "en_ewt-ud-dev.conllu")
    parser.add_argument("--warm-up-sentences", type=int, default=300)
    args = parser.parse_args()
    print(json.dumps(warm_state_report(args.model, args.fixture, args.held_out, args.warm_up_sentences), indent=2))


if __name__ == "__main__":
    main()
