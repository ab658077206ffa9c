"""The bulk-embedding library API (elmo_hf.embedding): datasets.map path vs direct model calls, order, options,
bad input, windows."""

from __future__ import annotations

import copy
import json
import logging
import warnings

import numpy as np
import pytest
import torch
from datasets import Array2D, Array3D, Dataset, IterableDataset, List, Value

from elmo_hf.embedding.batching import DEFAULT_MIN_BATCH_SIZE, MIN_BATCH_SIZE_WORDS_FACTOR, length_grouped_batches, split_into_windows
from elmo_hf.embedding.embedder import ELMoEmbedder, InvalidRowError, NonFiniteVectorsError, embed_dataset, embed_texts
from elmo_hf.embedding.loading import emulated_compute_dtype
from elmo_hf.validation_elmo import max_abs_difference

# Lengths deliberately out of order so that length grouping reorders them inside a map batch.
TEXTS = [
    "The bank raised its interest rates again this year .",
    "Hi .",
    "We sat on the river bank and watched the boats go by in the evening light .",
    "",
    "She took the money to the bank .",
    "   ",
    "Rates fell .",
    "A very long sentence that keeps going , with commas , clauses , and more words than any other sentence here .",
]


def direct_vectors(model, tokenizer, words: list[str]) -> tuple:
    """The model run on one sentence alone: (mix 0, top, hidden_states) as numpy, shape (words, ...)."""
    encoding = tokenizer(words, is_split_into_words=True, return_tensors="pt")
    with torch.inference_mode():
        output = model(**encoding)
    return (
        output.elmo_representations[0][0].numpy(),
        output.last_hidden_state[0].numpy(),
        torch.stack(output.hidden_states, dim=2)[0].numpy(),
    )


@pytest.fixture(scope="module")
def embedder(fixture_model, tokenizer):
    return ELMoEmbedder(fixture_model, tokenizer, batch_size=3)


def test_map_equals_direct_model_calls_and_keeps_row_order(embedder, fixture_model, tokenizer):
    dataset = embed_dataset(Dataset.from_dict({"text": TEXTS, "id": list(range(len(TEXTS)))}), embedder, map_batch_size=5)

    assert dataset.features["elmo"] == Array2D((None, 32), "float32")
    assert dataset.features["num_words"] == Value("int32")
    assert dataset["id"][:] == list(range(len(TEXTS)))
    rows = dataset.with_format("numpy", columns=["elmo"])
    for index, text in enumerate(TEXTS):
        words = text.split()
        assert dataset[index]["words"] == words
        assert dataset[index]["num_words"] == len(words)
        vectors = rows[index]["elmo"]
        assert vectors.shape == (len(words), 32)
        if words:
            expected = direct_vectors(fixture_model, tokenizer, words)[0]
            np.testing.assert_allclose(vectors, expected, rtol=0, atol=1e-6)


def test_iterable_dataset_and_words_column(fixture_model, tokenizer):
    words = [text.split() for text in TEXTS if text.strip()]
    streamed = Dataset.from_dict({"tokens": words}).to_iterable_dataset()
    embedder = ELMoEmbedder(fixture_model, tokenizer, words_column="tokens", pooling="mean", batch_size=2)
    result = embed_dataset(streamed, embedder, map_batch_size=4)

    assert isinstance(result, IterableDataset)
    assert "words" not in result.features  # the input already holds the words
    for row, sentence in zip(result, words):
        expected = direct_vectors(fixture_model, tokenizer, sentence)[0].mean(axis=0)
        np.testing.assert_allclose(np.asarray(row["elmo"]), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "representation, select",
    [
        ("top", lambda mix, top, layers: top),
        ("average", lambda mix, top, layers: layers.mean(axis=1)),
        ("all", lambda mix, top, layers: layers),
        (0, lambda mix, top, layers: layers[:, 0]),
        (2, lambda mix, top, layers: layers[:, 2]),
    ],
)
def test_representations(fixture_model, tokenizer, representation, select):
    embedder = ELMoEmbedder(fixture_model, tokenizer, representation=representation)
    sentence = TEXTS[2].split()
    (vectors,) = embedder.embed_words([sentence])
    np.testing.assert_allclose(vectors, select(*direct_vectors(fixture_model, tokenizer, sentence)), rtol=0, atol=1e-6)


def test_feature_types_and_formats(fixture_model, tokenizer):
    dataset = Dataset.from_dict({"text": TEXTS[:3]})
    all_layers = embed_dataset(dataset, ELMoEmbedder(fixture_model, tokenizer, representation="all", dtype="float16"))
    assert all_layers.features["elmo"] == Array3D((None, 3, 32), "float16")
    # Stored as float16 (datasets' numpy formatter hands floats back as float32).
    assert all_layers.data.table.schema.field("elmo").type.storage_type.value_type.value_type.value_type == "halffloat"
    pooled = embed_dataset(dataset, ELMoEmbedder(fixture_model, tokenizer, pooling="mean"))
    assert pooled.features["elmo"] == List(Value("float32"), length=32)
    as_torch = pooled.with_format("torch")["elmo"][:]
    assert isinstance(as_torch, torch.Tensor) and as_torch.shape == (3, 32)
    pooled_all = ELMoEmbedder(fixture_model, tokenizer, pooling="mean", representation="all")
    assert pooled_all.features["elmo"] == Array2D((3, 32), "float32")


@pytest.mark.parametrize("pooling", ["mean", "max", "mean_max", "first_last"])
def test_every_pooling_equals_the_model_outputs_sentence_vectors(fixture_model, tokenizer, pooling):
    """The embedder pools each whole sentence (after windowing) with the model's own pool_words."""
    texts = [TEXTS[0], "", TEXTS[1]]
    embedder = ELMoEmbedder(fixture_model, tokenizer, pooling=pooling, representation="average", batch_size=2)
    width = 64 if pooling in ("mean_max", "first_last") else 32
    assert embedder.vector_shape == (width,) and embedder.features["elmo"] == List(Value("float32"), length=width)
    vectors = embed_texts(embedder, texts)
    np.testing.assert_array_equal(vectors[1], np.zeros(width, np.float32))
    for text, got in zip(texts[::2], vectors[::2]):
        with torch.inference_mode():
            expected = fixture_model(**tokenizer([text], return_tensors="pt")).sentence_vectors(pooling, "average")[0]
        np.testing.assert_allclose(got, expected.numpy(), rtol=0, atol=1e-6)
    stored = embed_dataset(Dataset.from_dict({"text": texts}), embedder).with_format("numpy")["elmo"]
    np.testing.assert_array_equal(np.stack(stored), np.stack(vectors))


def test_float16_storage_is_the_float32_vectors_cast(fixture_model, tokenizer):
    sentence = [TEXTS[0].split()]
    (full,) = ELMoEmbedder(fixture_model, tokenizer).embed_words(sentence)
    (half,) = ELMoEmbedder(fixture_model, tokenizer, dtype="float16").embed_words(sentence)
    assert half.dtype == np.float16
    np.testing.assert_array_equal(half, full.astype(np.float16))


def test_empty_and_whitespace_texts_give_zero_words(embedder, fixture_model, tokenizer):
    vectors = embed_texts(embedder, ["", "  \t ", "Hi ."])
    assert [v.shape for v in vectors] == [(0, 32), (0, 32), (2, 32)]
    pooled = embed_texts(ELMoEmbedder(fixture_model, tokenizer, pooling="mean"), ["", "Hi ."])
    np.testing.assert_array_equal(pooled[0], np.zeros(32, np.float32))


@pytest.mark.parametrize("bad_value", [None, 17, b"bytes", ["a", "list"]])
def test_invalid_text_raises_naming_the_row(embedder, bad_value):
    dataset = Dataset.from_dict({"text": ["fine .", "also fine .", "ok ."]})
    with pytest.raises(InvalidRowError, match=r"row 1: 'text' is .* expected a string"):
        embedder({"text": ["fine .", bad_value]}, indices=[0, 1])
    with pytest.raises(InvalidRowError, match=r"texts\[1\]"):
        embed_texts(embedder, ["fine .", bad_value])
    del dataset


def test_invalid_rows_in_a_dataset_raise_with_their_index(embedder):
    dataset = Dataset.from_dict({"text": ["fine ."] * 7 + [None]})
    with pytest.raises(InvalidRowError, match=r"row 7: 'text' is None"):
        embed_dataset(dataset, embedder, map_batch_size=3)


def test_lone_surrogate_is_an_invalid_row(embedder):
    with pytest.raises(InvalidRowError, match="row 0: 'text' cannot be tokenised"):
        embedder({"text": ["bad \ud800 text"]}, indices=[0])


def test_skip_drops_invalid_rows_and_keeps_other_columns_aligned(fixture_model, tokenizer, caplog):
    dataset = Dataset.from_dict({"text": ["one .", None, "two words .", None, ""], "id": [0, 1, 2, 3, 4]})
    embedder = ELMoEmbedder(fixture_model, tokenizer, on_invalid="skip")
    with caplog.at_level(logging.WARNING, logger="elmo_hf.embedding"):
        result = embed_dataset(dataset, embedder)
    assert result["id"][:] == [0, 2, 4]
    assert result["num_words"][:] == [2, 3, 0]
    assert "Skipped 2 row(s)" in caplog.text and "row 1, row 3" in caplog.text
    # A map batch without invalid rows keeps its other columns too.
    all_valid = embed_dataset(Dataset.from_dict({"text": ["one .", "two ."], "id": [5, 6]}), embedder)
    assert all_valid["id"][:] == [5, 6] and all_valid["text"][:] == ["one .", "two ."]


def test_invalid_words_column_values(fixture_model, tokenizer):
    embedder = ELMoEmbedder(fixture_model, tokenizer, words_column="tokens")
    with pytest.raises(InvalidRowError, match=r"row 0: 'tokens' is 'a b'; expected a list of non-empty strings"):
        embedder({"tokens": ["a b"]}, indices=[0])
    with pytest.raises(InvalidRowError, match="expected a list of non-empty strings"):
        embedder({"tokens": [["a", ""]]}, indices=[0])


def test_column_clash_and_missing_column_are_refused(embedder):
    with pytest.raises(ValueError, match=r"already has column\(s\) \['words'\]"):
        embed_dataset(Dataset.from_dict({"text": ["a ."], "words": [["a"]]}), embedder)
    with pytest.raises(KeyError, match="column 'text' not found"):
        embed_dataset(Dataset.from_dict({"sentence": ["a ."]}), embedder)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"representation": "best"}, "representation must be one of"),
        ({"representation": 3}, r"layer index in \[0, 3\)"),
        ({"mix_index": 1}, r"mix_index must be an int in \[0, 1\)"),
        ({"pooling": "median"}, "pooling must be one of"),
        ({"dtype": "bfloat16"}, "dtype must be one of"),
        ({"batch_size": 0}, r"batch_size must be None or an int >= 1"),
        ({"token_cache_words": -1}, r"token_cache_words must be an int >= 0"),
        ({"max_window_words": 64, "window_context": 32}, r"max_window_words must be an int >= 65 \(larger than 2 \* window_context = 64"),
        ({"on_invalid": "ignore"}, "on_invalid must be one of"),
        ({"compute_dtype": "float64"}, "compute_dtype must be one of"),
    ],
)
def test_bad_options(fixture_model, options, message):
    with pytest.raises(ValueError, match=message):
        ELMoEmbedder(fixture_model, **options)


@pytest.mark.parametrize("num_words", [0, 1, 5, 9, 10, 11, 23, 100])
@pytest.mark.parametrize("max_window_words, window_context", [(10, 0), (10, 2), (10, 4), (7, 3)])
def test_windows_tile_every_word_exactly_once(num_words, max_window_words, window_context):
    windows = split_into_windows(num_words, max_window_words, window_context)
    covered = [word for _, _, core_start, core_end in windows for word in range(core_start, core_end)]
    assert covered == list(range(num_words))
    for start, end, core_start, core_end in windows:
        assert end - start <= max_window_words
        assert start <= core_start < core_end <= end or num_words == 0
        assert core_start - start == min(window_context, core_start) or num_words <= max_window_words
        assert end - core_end == min(window_context, num_words - core_end) or num_words <= max_window_words


def test_long_sentence_runs_in_windows_and_loses_no_word(fixture_model, tokenizer):
    sentence = (TEXTS[7].split() * 3)[:50]  # 50 words
    embedder = ELMoEmbedder(fixture_model, tokenizer, max_window_words=16, window_context=4, batch_size=2)
    (vectors,) = embedder.embed_words([sentence])
    assert vectors.shape == (50, 32)
    for start, end, core_start, core_end in split_into_windows(50, 16, 4):
        expected = direct_vectors(fixture_model, tokenizer, sentence[start:end])[0]
        np.testing.assert_allclose(vectors[core_start:core_end], expected[core_start - start : core_end - start], rtol=0, atol=1e-6)
    # Pooling averages over all 50 words, across windows.
    (pooled,) = ELMoEmbedder(fixture_model, tokenizer, max_window_words=16, window_context=4, pooling="mean").embed_words([sentence])
    np.testing.assert_allclose(pooled, vectors.mean(axis=0), rtol=0, atol=1e-6)


def test_length_grouped_batches_respect_limits_and_cover_everything():
    lengths = [5, 1, 9, 3, 3, 7, 2, 8, 1, 4]
    for batch_size, budget, floor in [(3, None, 0), (None, 12, 0), (2, 16, 0), (4, 1, 0), (None, 12, 3), (2, 12, 5), (None, None, 4)]:
        batches = length_grouped_batches(lengths, batch_size, budget, floor)
        assert sorted(index for batch in batches for index in batch) == list(range(len(lengths)))
        for batch in batches:
            padded_words = len(batch) * max(lengths[i] for i in batch)
            assert batch_size is None or len(batch) <= batch_size
            assert budget is None or len(batch) == 1 or padded_words <= budget or (
                len(batch) <= floor and padded_words <= MIN_BATCH_SIZE_WORDS_FACTOR * budget
            )
            assert lengths[batch[0]] == max(lengths[i] for i in batch)


def test_a_batch_floor_takes_long_windows_past_the_word_budget_and_leaves_short_ones():
    """With the CPU's defaults (4096 words, at least 128 windows up to 4 x 4096): 256-word windows run 64 at a time,
    not 16; 60-word windows 128 at a time, not 68; 8-word windows 512 at a time, as without the floor."""
    def sizes(lengths, floor):
        return sorted({len(batch) for batch in length_grouped_batches(lengths, None, 4096, floor)}, reverse=True)

    assert sizes([256] * 200, 0) == [16, 8] and sizes([256] * 200, 128) == [64, 8]
    assert sizes([60] * 300, 0) == [68, 28] and sizes([60] * 300, 128) == [128, 44]
    assert sizes([8] * 1200, 0) == sizes([8] * 1200, 128) == [512, 176]
    assert length_grouped_batches([9000, 3], None, 4096, 128) == [[0], [1]]  # two are past 4 x the budget
    assert [len(batch) for batch in length_grouped_batches([256] * 200, 40, 4096, 128)] == [40] * 5  # batch_size holds


def test_the_batch_floor_defaults_with_the_devices_budget_only_and_changes_vectors_within_float_rounding(fixture_model, tokenizer):
    assert ELMoEmbedder(fixture_model, tokenizer).options()["min_batch_size"] == DEFAULT_MIN_BATCH_SIZE["cpu"] == 128
    assert ELMoEmbedder(fixture_model, tokenizer, max_words_per_batch=2048).min_batch_size == 0  # a hard limit
    assert ELMoEmbedder(fixture_model, tokenizer, batch_size=8).min_batch_size == 0
    assert ELMoEmbedder(fixture_model, tokenizer, max_words_per_batch=2048, min_batch_size=16).options()["min_batch_size"] == 16
    with pytest.raises(ValueError, match="min_batch_size"):
        ELMoEmbedder(fixture_model, tokenizer, min_batch_size=-1)
    sentences = [[f"w{(row * 7 + index) % 23}" for index in range(40)] for row in range(12)]
    floor = ELMoEmbedder(fixture_model, tokenizer, max_words_per_batch=80, min_batch_size=8)
    no_floor = ELMoEmbedder(fixture_model, tokenizer, max_words_per_batch=80, min_batch_size=0)
    assert [len(batch.pieces) for batch in floor.prepare(sentences).batches] == [8, 4]
    assert [len(batch.pieces) for batch in no_floor.prepare(sentences).batches] == [2] * 6
    for with_floor, without in zip(floor.embed_words(sentences), no_floor.embed_words(sentences)):
        assert max_abs_difference(with_floor, without) <= 1e-6


def test_default_batches_are_the_devices_word_budget_and_the_token_cache_changes_no_bit(converted_fixture_dir):
    from elmo_hf import ELMoModel
    from elmo_hf.embedding.batching import DEFAULT_WORDS_PER_BATCH

    cached = ELMoEmbedder(ELMoModel.from_pretrained(converted_fixture_dir), token_cache_words=40)
    assert (cached.batch_size, cached.max_words_per_batch) == (None, DEFAULT_WORDS_PER_BATCH["cpu"])
    assert cached.options()["max_words_per_batch"] == DEFAULT_WORDS_PER_BATCH["cpu"]
    uncached = ELMoEmbedder(ELMoModel.from_pretrained(converted_fixture_dir), token_cache_words=0)
    assert uncached.model.char_embeddings.token_embedding_cache is None
    texts = TEXTS * 3 + [" ".join(f"w{index}" for index in range(30))]  # more distinct words than the cache holds
    for first, second in [(texts, texts[::-1]), (texts[::-1], texts)]:
        for with_cache, without in zip(embed_texts(cached, first) + embed_texts(cached, second), embed_texts(uncached, first) + embed_texts(uncached, second)):
            assert np.array_equal(with_cache, without)
    assert len(cached.model.char_embeddings.token_embedding_cache) == 40
    # A cache the model already has is the user's: left as it is.
    model = ELMoModel.from_pretrained(converted_fixture_dir)
    model.cache_token_embeddings(["bank"])
    assert len(ELMoEmbedder(model).model.char_embeddings.token_embedding_cache) == 3


def test_progress_callback_counts_sentences_and_words(embedder):
    calls = []
    embedder.embed_words([["a"], [], ["b", "c"], ["d", "e", "f"]], on_progress=lambda s, w: calls.append((s, w)))
    assert sum(s for s, _ in calls) == 4 and sum(w for _, w in calls) == 6


def test_a_long_sentence_reports_its_words_before_it_is_finished(fixture_model, tokenizer):
    """A 200-word line in windows of 16 runs in many model batches: progress comes after each, not only at its end."""
    embedder = ELMoEmbedder(fixture_model, tokenizer, batch_size=2, max_window_words=16, window_context=2)
    calls = []
    embedder.embed_words([["word"] * 200], on_progress=lambda sentences, words: calls.append((sentences, words)))
    unfinished = [words for sentences, words in calls if sentences == 0 and words > 0]
    assert len(unfinished) >= 5 and sum(words for _, words in calls) == 200 and calls[-1][0] == 1


def test_from_pretrained_and_device(converted_fixture_dir):
    embedder = ELMoEmbedder.from_pretrained(str(converted_fixture_dir), device="cpu", representation="top")
    assert embedder.model.device.type == "cpu" and not embedder.model.training
    assert embed_texts(embedder, ["Hello there ."])[0].shape == (3, 32)


@pytest.mark.parametrize("compute_dtype", ["bfloat16", "float16"])
def test_reduced_precision_compute_is_close_to_float32_recorded_and_warned_where_emulated(converted_fixture_dir, caplog, compute_dtype):
    exact = ELMoEmbedder.from_pretrained(converted_fixture_dir)
    assert exact.options()["compute_dtype"] == "float32"
    with caplog.at_level(logging.WARNING, logger="elmo_hf.embedding.embedder"):
        reduced = ELMoEmbedder.from_pretrained(converted_fixture_dir, compute_dtype=compute_dtype)
    assert reduced.model.dtype == getattr(torch, compute_dtype) and reduced.options()["compute_dtype"] == compute_dtype
    assert ("torch emulates them" in caplog.text) == emulated_compute_dtype(reduced.model.device, reduced.model.dtype)
    expected, actual = np.concatenate(embed_texts(exact, TEXTS)), np.concatenate(embed_texts(reduced, TEXTS))
    assert actual.dtype == np.float32 and actual.shape == expected.shape  # stored as `dtype`, whatever it computed in
    cosines = (actual * expected).sum(-1) / np.linalg.norm(actual, axis=-1) / np.linalg.norm(expected, axis=-1)
    assert 0.999 <= cosines.min() and cosines.max() <= 1 + 1e-6 and not np.array_equal(actual, expected)


def test_emulated_compute_dtypes_follow_the_cpus_instructions(monkeypatch):
    cpu, bfloat16, float16 = torch.device("cpu"), torch.bfloat16, torch.float16
    for name in ("_is_amx_tile_supported", "_is_avx512_bf16_supported", "_is_amx_fp16_supported"):
        monkeypatch.setattr(torch.cpu, name, lambda: False)
    assert emulated_compute_dtype(cpu, bfloat16) and emulated_compute_dtype(cpu, float16)
    assert not emulated_compute_dtype(cpu, torch.float32) and not emulated_compute_dtype(torch.device("cuda"), bfloat16)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    assert not emulated_compute_dtype(cpu, bfloat16) and emulated_compute_dtype(cpu, float16)
    monkeypatch.setattr(torch.cpu, "_is_amx_fp16_supported", lambda: True)
    assert not emulated_compute_dtype(cpu, float16)


def test_counts_given_as_numpy_ints_are_recorded_as_ints(fixture_model, tokenizer):
    """A count from a NumPy array or config is taken as the int it is: the options an embedding run records in its
    manifest (JSON, which cannot hold a NumPy int) are plain ints."""
    counts = {
        "batch_size": np.int64(8), "max_words_per_batch": np.int32(512), "min_batch_size": np.int64(4),
        "max_window_words": np.int64(128), "window_context": np.int64(16), "token_cache_words": np.int64(100),
    }
    options = ELMoEmbedder(fixture_model, tokenizer, **counts).options()
    recorded = {name: options[name] for name in counts if name in options}
    assert recorded == {name: int(value) for name, value in counts.items() if name in options}
    assert all(type(value) is int for value in recorded.values()), recorded
    json.dumps(options)


def test_a_device_this_torch_cannot_use_is_refused_before_loading(converted_fixture_dir):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match=r"device 'cuda'.*(built without CUDA|no such CUDA device)"):
        ELMoEmbedder.from_pretrained(converted_fixture_dir, device="cuda")
    with pytest.raises(ValueError, match="is not a torch device name"):
        ELMoEmbedder.from_pretrained(converted_fixture_dir, device="gpu0")


def test_non_finite_vectors_are_refused_naming_the_sentence(fixture_model, tokenizer):
    broken = copy.deepcopy(fixture_model)
    with torch.no_grad():
        broken.encoder.backward_layers[0].state_to_gates.weight[0, 0] = float("nan")
    with pytest.raises(NonFiniteVectorsError, match=r"NaN or infinite vectors for the sentence 'The bank raised rates \.'"):
        embed_texts(ELMoEmbedder(broken, tokenizer), ["The bank raised rates ."])
    vectors = embed_texts(ELMoEmbedder(broken, tokenizer, check_finite=False), ["The bank raised rates ."])
    assert np.isnan(vectors[0]).any()


def test_float16_overflow_is_refused_naming_the_sentence(fixture_model, tokenizer):
    """The finite check looks at the stored dtype: vectors beyond 65,504 are finite in float32 but infinite in
    float16, so a float16 output refuses them (it used to store inf and exit 0)."""
    loud = copy.deepcopy(fixture_model)
    with torch.no_grad():
        loud.scalar_mixes[0].gamma.fill_(1e7)
    (vectors,) = embed_texts(ELMoEmbedder(loud, tokenizer), ["The bank raised rates ."])
    assert np.isfinite(vectors).all() and np.abs(vectors).max() > 65504
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the check casts to float16 without numpy's overflow warning
        with pytest.raises(NonFiniteVectorsError, match=r"vectors too large for float16 for the sentence 'The bank raised rates \.' "
                           r"\(representation 'mix': \|value\| up to .*float16 holds at most 65,504"):
            embed_texts(ELMoEmbedder(loud, tokenizer, dtype="float16"), ["The bank raised rates ."])


def test_a_non_finite_vector_in_any_row_of_a_batch_is_found(fixture_model, tokenizer):
    """Only sentences with a 'Z' get NaN (its character embedding is NaN); each position in a batch of three."""
    broken = copy.deepcopy(fixture_model)
    with torch.no_grad():
        broken.char_embeddings.embedding.weight[ord("Z") + 1] = float("nan")  # the +1 shift of every character id
    for position in range(3):
        texts = ["a b .", "c d .", "e f ."]
        texts[position] = "Zebra crossing ."
        with pytest.raises(NonFiniteVectorsError, match="for the sentence 'Zebra crossing .'"):
            embed_texts(ELMoEmbedder(broken, tokenizer, batch_size=3), texts)
