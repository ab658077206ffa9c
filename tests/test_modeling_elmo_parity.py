"""Parity with outputs computed by the original TensorFlow code (tests/fixtures/allennlp-elmo, see its README).

Computed here directly with h5py, independently of conversion/reference_outputs.py, so a bug there cannot hide a bug
in the model. Both inference paths are held to the original: the reference path (the definition) and the fast path.
Every comparison treats NaN as a failure (Python's max() would skip it).
"""

import copy
import json

import h5py
import numpy as np
import pytest
import torch

from benchmarks.gates_forms import GATES_FORMS, lstm_gates_in
from elmo_hf.validation_elmo import is_close, largest, max_abs_difference

TOLERANCE = 5e-6


def top_layer_differences(model, tokenizer, fixture_dir) -> list[float]:
    """Max |actual - expected| of the top layer for each of the 30 sentences, state threaded as the original did."""
    groups = json.loads((fixture_dir / "sentences.json").read_text())
    assert len(groups) == 3 and all(len(group) == 10 for group in groups)
    expected_files = [h5py.File(fixture_dir / f"lm_embeddings_{k}.hdf5", "r") for k in range(3)]
    state, differences = None, []
    try:
        for batch_index in range(10):
            batch = [group[batch_index].split() for group in groups]
            inputs = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")
            with torch.no_grad():
                output = model(**inputs, lstm_state=state, return_lstm_state=True)
            state = output.lstm_state
            for row, expected_file in enumerate(expected_files):
                expected = expected_file[str(batch_index)][...]  # (2, words, 16): forward, backward
                actual = output.last_hidden_state[row, : len(batch[row])].numpy()
                differences.append(largest([max_abs_difference(actual[:, :16], expected[0]), max_abs_difference(actual[:, 16:], expected[1])]))
    finally:
        for expected_file in expected_files:
            expected_file.close()
    return differences


@pytest.mark.parametrize("path", ["reference", *(f"fast, gates in {form}" for form in GATES_FORMS)])
def test_top_layer_of_all_ten_batches_with_state_threaded(fixture_model, tokenizer, allennlp_fixture_dir, path):
    """Both inference paths, the fast one with either form of its LSTM gates (tests/helpers.lstm_gates_in)."""
    fixture_model.set_inference_path(path.split(",")[0])
    try:
        with lstm_gates_in(fixture_model, path.partition("gates in ")[2] or GATES_FORMS[0]):
            differences = top_layer_differences(fixture_model, tokenizer, allennlp_fixture_dir)
    finally:
        fixture_model.set_inference_path("auto")
    assert len(differences) == 30
    assert is_close(largest(differences), TOLERANCE), differences


def test_a_nan_anywhere_fails_the_parity_check(fixture_model, tokenizer, allennlp_fixture_dir):
    """A NaN in one LSTM weight makes most outputs NaN: the check must fail, not skip them."""
    broken = copy.deepcopy(fixture_model)
    with torch.no_grad():
        broken.encoder.forward_layers[1].state_to_gates.weight[0, 0] = float("nan")
    differences = top_layer_differences(broken, tokenizer, allennlp_fixture_dir)
    assert any(np.isnan(differences)) and not is_close(largest(differences), TOLERANCE)
    assert not is_close(largest([0.0] + differences), TOLERANCE)  # a NaN after a finite value is not skipped either


def test_only_the_first_batch_matches_without_state(fixture_model, tokenizer, allennlp_fixture_dir):
    """The fixture really is stateful: a fresh zero-state run matches batch 0 but not batch 1."""
    groups = json.loads((allennlp_fixture_dir / "sentences.json").read_text())
    with h5py.File(allennlp_fixture_dir / "lm_embeddings_0.hdf5", "r") as expected_file:
        for batch_index, should_match in ((0, True), (1, False)):
            inputs = tokenizer([groups[0][batch_index].split()], is_split_into_words=True, return_tensors="pt")
            with torch.no_grad():
                actual = fixture_model(**inputs).last_hidden_state[0].numpy()
            expected = np.concatenate(list(expected_file[str(batch_index)][...]), axis=-1)
            assert is_close(max_abs_difference(actual, expected), TOLERANCE) == should_match


def test_token_layer_of_the_vocabulary(fixture_model, tokenizer, allennlp_fixture_dir):
    words = (allennlp_fixture_dir / "vocab_test.txt").read_text().splitlines()
    assert len(words) == 458 and {"<S>", "</S>", "<UNK>"} <= set(words)
    with h5py.File(allennlp_fixture_dir / "elmo_token_embeddings.hdf5", "r") as embeddings:
        expected = embeddings["embedding"][...]
    character_ids = tokenizer([words], is_split_into_words=True, return_tensors="pt")["input_ids"][0]
    with torch.no_grad():
        actual = fixture_model.char_embeddings(character_ids).numpy()
    assert is_close(max_abs_difference(actual, expected), TOLERANCE)

    # The literal <S> / </S> rows equal the vectors of the boundaries the model adds by itself.
    inputs = tokenizer([["some", "words"]], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        token_layer = fixture_model(**inputs, keep_sentence_boundaries=True).hidden_states[0][0, :, :16].numpy()
    assert is_close(max_abs_difference(token_layer[0], expected[words.index("<S>")]), TOLERANCE)
    assert is_close(max_abs_difference(token_layer[3], expected[words.index("</S>")]), TOLERANCE)
