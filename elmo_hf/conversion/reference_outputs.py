"""Compare a converted model with outputs computed by the original code (``--verify``), laid out as AllenNLP's ELMo
test fixture and produced statefully: the comparison threads ``lstm_state`` from one batch to the next as the original
did. The layout: docs/design/conversion.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import torch

from ..modeling_elmo import ELMoModel
from ..tokenization_elmo import ELMoTokenizer
from ..validation_elmo import largest, max_abs_difference
from .shared import ConversionError

# Independent float32 reimplementations agree with the original to about 1.5e-6.
DEFAULT_TOLERANCE = 5e-6


@dataclass
class ReferenceComparison:
    """One comparison with the original's outputs; ``max_abs_difference`` is NaN when either side has a NaN."""

    name: str
    max_abs_difference: float
    actual_sample: np.ndarray
    expected_sample: np.ndarray


def read_reference_sentences(reference_dir: Path) -> list[list[list[str]]]:
    """sentences.json -> K lists of N sentences, each a list of words."""
    sentences_file = reference_dir / "sentences.json"
    if not sentences_file.is_file():
        raise ConversionError(f"reference directory {reference_dir} has no sentences.json.")
    groups = json.loads(sentences_file.read_text(encoding="utf-8"))
    if not groups or not all(isinstance(group, list) and len(group) == len(groups[0]) for group in groups):
        raise ConversionError(f"{sentences_file}: expected a list of equally long lists of sentences.")
    return [[sentence.split() for sentence in group] for group in groups]


def compare_top_layer_stateful(model: ELMoModel, tokenizer: ELMoTokenizer, reference_dir: Path) -> list[ReferenceComparison]:
    """One comparison per batch i, state threaded across batches exactly as the original produced the file."""
    groups = read_reference_sentences(reference_dir)
    expected_files = []
    for group_index in range(len(groups)):
        path = reference_dir / f"lm_embeddings_{group_index}.hdf5"
        if not path.is_file():
            raise ConversionError(f"reference directory {reference_dir} has no {path.name} (sentences.json has {len(groups)} lists).")
        expected_files.append(h5py.File(path, "r"))
    comparisons, state = [], None
    try:
        for batch_index in range(len(groups[0])):
            batch = [group[batch_index] for group in groups]
            inputs = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")
            with torch.no_grad():
                output = model(**inputs, lstm_state=state, return_lstm_state=True)
            state = output.lstm_state
            differences, actual_sample, expected_sample = [], None, None
            for row, expected_file in enumerate(expected_files):
                expected = expected_file[str(batch_index)][...]  # (2, words, P)
                expected = np.concatenate([expected[0], expected[1]], axis=-1)  # (words, 2P)
                actual = output.last_hidden_state[row, : len(batch[row])].numpy()
                if actual.shape != expected.shape:
                    raise ConversionError(
                        f"{expected_file.filename} dataset {batch_index!r}: expected shape {expected.shape} but the model "
                        f"produced {actual.shape} for the sentence of {len(batch[row])} words."
                    )
                differences.append(max_abs_difference(actual, expected))
                if actual_sample is None:
                    actual_sample, expected_sample = actual[0, :4], expected[0, :4]
            comparisons.append(ReferenceComparison(f"top layer, batch {batch_index}", largest(differences), actual_sample, expected_sample))
    finally:
        for expected_file in expected_files:
            expected_file.close()
    return comparisons


def compare_token_layer(model: ELMoModel, tokenizer: ELMoTokenizer, reference_dir: Path) -> list[ReferenceComparison]:
    """The context-free token layer of every word of vocab_test.txt (skipped when the files are absent)."""
    vocabulary_file, embeddings_file = reference_dir / "vocab_test.txt", reference_dir / "elmo_token_embeddings.hdf5"
    if not (vocabulary_file.is_file() and embeddings_file.is_file()):
        return []
    words = vocabulary_file.read_text(encoding="utf-8").splitlines()
    with h5py.File(embeddings_file, "r") as embeddings:
        expected = embeddings["embedding"][...]
    if expected.shape[0] != len(words):
        raise ConversionError(f"{embeddings_file}: {expected.shape[0]} rows for the {len(words)} words of {vocabulary_file.name}.")
    character_ids = tokenizer([words], is_split_into_words=True, return_tensors="pt")["input_ids"][0]  # (words, C)
    with torch.no_grad():
        actual = model.char_embeddings(character_ids).numpy()
    return [ReferenceComparison("token layer", max_abs_difference(actual, expected), actual[0, :4], expected[0, :4])]


def compare_with_reference_outputs(model: ELMoModel, tokenizer: ELMoTokenizer, reference_dir: Path) -> list[ReferenceComparison]:
    if not reference_dir.is_dir():
        raise ConversionError(f"reference directory not found: {reference_dir}")
    return compare_top_layer_stateful(model, tokenizer, reference_dir) + compare_token_layer(model, tokenizer, reference_dir)


__all__ = ["DEFAULT_TOLERANCE", "ReferenceComparison", "compare_with_reference_outputs"]
