"""Sentence vectors: `pool_words` (the one pooling of the package) against hand computations with padding, and
`ELMoModelOutput.sentence_vectors` against each sentence run alone."""

import math

import pytest
import torch

from elmo_hf.pooling_elmo import pool_words, pooled_size

from .helpers import SENTENCES, random_model


@pytest.fixture(scope="module")
def model():
    return random_model().eval()


def padded_features():
    """Two sentences of 3 and 1 words padded to 4, plus one without words; padding holds NaN and huge values that
    must never leak into a pooled vector."""
    features = torch.tensor(
        [
            [[1.0, -2.0], [3.0, 5.0], [-4.0, 0.5], [math.nan, 1e9]],
            [[2.0, -7.0], [1e9, math.nan], [1e9, 1e9], [-1e9, -1e9]],
            [[math.nan, 1e9], [1e9, 1e9], [1e9, 1e9], [1e9, 1e9]],
        ]
    )  # (B=3, T=4, D=2)
    word_mask = torch.tensor([[True, True, True, False], [True, False, False, False], [False] * 4])
    return features, word_mask


@pytest.mark.parametrize(
    "pooling, expected",
    [
        ("mean", [[0.0, 3.5 / 3], [2.0, -7.0], [0.0, 0.0]]),
        ("max", [[3.0, 5.0], [2.0, -7.0], [0.0, 0.0]]),
        ("mean_max", [[0.0, 3.5 / 3, 3.0, 5.0], [2.0, -7.0, 2.0, -7.0], [0.0] * 4]),
        ("first_last", [[1.0, -2.0, -4.0, 0.5], [2.0, -7.0, 2.0, -7.0], [0.0] * 4]),
    ],
)
def test_pool_words_against_hand_computations(pooling, expected):
    features, word_mask = padded_features()
    pooled = pool_words(features, word_mask, pooling)
    assert pooled.shape == (3, pooled_size(2, pooling))
    assert not pooled.isnan().any()
    torch.testing.assert_close(pooled, torch.tensor(expected), rtol=0, atol=1e-6)


def test_pool_words_keeps_leading_axes_and_handles_an_empty_batch():
    features = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)  # (B, T, L + 1, D)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    pooled = pool_words(features, mask, "mean_max")
    assert pooled.shape == (2, 4, 10)
    torch.testing.assert_close(pooled[0, :, :5], features[0, :2].mean(dim=0))
    torch.testing.assert_close(pooled[1, :, 5:], features[1, 2])
    assert pool_words(torch.zeros(2, 0, 5), torch.zeros(2, 0, dtype=torch.bool), "first_last").shape == (2, 10)
    with pytest.raises(ValueError, match="pooling must be one of"):
        pool_words(features, mask, "median")


@pytest.mark.parametrize("keep_boundaries", [False, True])
@pytest.mark.parametrize("pooling", ["mean", "max", "mean_max", "first_last"])
def test_sentence_vectors_of_a_padded_batch_equal_each_sentence_alone(model, tokenizer, pooling, keep_boundaries):
    """Pooling uses the real words only: padding and the kept <S>/</S> never count."""
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.inference_mode():
        pooled = model(**batch, keep_sentence_boundaries=keep_boundaries).sentence_vectors(pooling)
        for row, words in enumerate(SENTENCES):
            alone = model(**tokenizer([words], is_split_into_words=True, return_tensors="pt"))
            mix = alone.elmo_representations[0][0]  # (T, 2P), every position a word
            by_hand = {
                "mean": mix.mean(dim=0),
                "max": mix.max(dim=0).values,
                "mean_max": torch.cat([mix.mean(dim=0), mix.max(dim=0).values]),
                "first_last": torch.cat([mix[0], mix[-1]]),
            }[pooling]
            torch.testing.assert_close(pooled[row], by_hand, rtol=0, atol=1e-6)


def test_sentence_vectors_of_every_representation(model, tokenizer):
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.inference_mode():
        output = model(**batch)
    layers = model.config.num_representation_layers
    assert output.sentence_vectors("mean", "all").shape == (len(SENTENCES), layers, 16)
    for layer in range(layers):
        torch.testing.assert_close(output.sentence_vectors("max", layer), output.sentence_vectors("max", "all")[:, layer])
    torch.testing.assert_close(output.sentence_vectors("mean", "top"), output.sentence_vectors("mean", layers - 1))
    with pytest.raises(ValueError, match=r"representation must be one of .* or a layer index in \[0, 3\)"):
        output.sentence_vectors("mean", 3)
    with pytest.raises(ValueError, match="mix_index"):
        output.sentence_vectors("mean", "mix", mix_index=1)
    with pytest.raises(ValueError, match="pooling must be one of"):
        output.sentence_vectors("sum")


def test_first_last_takes_the_first_and_last_true_position_of_any_mask():
    features = torch.arange(5, dtype=torch.float32).reshape(1, 5, 1)  # word t has the vector [t]
    mask = torch.tensor([[False, True, False, True, False]])  # e.g. a caller's mask with a gap
    torch.testing.assert_close(pool_words(features, mask, "first_last"), torch.tensor([[1.0, 3.0]]))


def test_the_mean_of_half_precision_vectors_accumulates_in_float32():
    features = torch.full((1, 4096, 1), 1.0 + 2**-7, dtype=torch.bfloat16)  # bf16 sums of 4096 of these lose bits
    pooled = pool_words(features, torch.ones(1, 4096, dtype=torch.bool), "mean")
    assert pooled.dtype == torch.bfloat16 and pooled.item() == 1.0 + 2**-7
