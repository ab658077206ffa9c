"""The stock feature-extraction pipeline serves ELMo: one vector (the top layer) per input word, in batches too;
`ELMoFeatureExtractionPipeline` adds ELMo's representations (the scalar mix by default, as everywhere in elmo-hf)
and sentence pooling."""

import numpy as np
import pytest
import torch
from transformers import pipeline

from elmo_hf import ELMoModel, ELMoTokenizer
from elmo_hf.integrations.pipeline import ELMoFeatureExtractionPipeline


def test_feature_extraction_pipeline_gives_one_vector_per_word(converted_fixture_dir):
    extractor = pipeline("feature-extraction", model=str(converted_fixture_dir), tokenizer=str(converted_fixture_dir))
    model = ELMoModel.from_pretrained(converted_fixture_dir).eval()
    tokenizer = ELMoTokenizer.from_pretrained(converted_fixture_dir)
    texts = ["The bank raised its rates .", "I don't know, said the banker."]

    single = np.array(extractor(texts[0]))
    assert single.shape == (1, 6, 32)  # (1, words, 2P)
    batch = extractor(texts)
    assert [np.array(vectors).shape for vectors in batch] == [(1, 6, 32), (1, 9, 32)]
    for text, vectors in zip(texts, batch):
        with torch.no_grad():
            expected = model(**tokenizer(text, return_tensors="pt")).last_hidden_state.numpy()
        np.testing.assert_allclose(np.array(vectors), expected, rtol=0, atol=1e-6)


def test_batched_pipeline_splits_every_output_by_row(converted_fixture_dir):
    """batch_size >= 2 makes the pipeline split each output by batch row (it used to fail on the tuple of mixes)."""
    extractor = pipeline("feature-extraction", model=str(converted_fixture_dir), tokenizer=str(converted_fixture_dir))
    texts = ["The bank raised its rates .", "Hi .", "I don't know, said the banker.", "One more ."]
    batched = extractor(texts, batch_size=3)
    one_by_one = [np.array(extractor(text)) for text in texts]
    for got, expected in zip(batched, one_by_one):
        # Rows of a batch come padded to its longest sentence (as for every text model): zeros after the words.
        got, words = np.array(got), expected.shape[1]
        np.testing.assert_allclose(got[:, :words], expected, rtol=0, atol=1e-5)
        assert not got[:, words:].any()


def test_the_default_model_directory_works_as_model_and_tokenizer():
    from elmo_hf import DEFAULT_MODEL_DIR

    extractor = pipeline("feature-extraction", model=DEFAULT_MODEL_DIR, tokenizer=DEFAULT_MODEL_DIR)
    assert np.array(extractor("a short sentence .")).shape == (1, 4, 256)


@pytest.fixture(scope="module")
def elmo_extractor(converted_fixture_dir):
    return pipeline("feature-extraction", model=str(converted_fixture_dir), pipeline_class=ELMoFeatureExtractionPipeline)


@pytest.mark.parametrize("pooling", ["mean", "max", "mean_max", "first_last"])
def test_pooled_pipeline_equals_sentence_vectors_in_padded_batches(elmo_extractor, fixture_model, converted_fixture_dir, pooling):
    extractor, model = elmo_extractor, fixture_model
    tokenizer = ELMoTokenizer.from_pretrained(converted_fixture_dir)  # the pipeline's, as saved with the model
    texts = ["The bank raised its rates .", "Hi .", "I don't know, said the banker."]
    pooled = extractor(texts, batch_size=3, pooling=pooling, representation="mix")  # rows padded to the longest
    for text, vector in zip(texts, pooled):
        with torch.no_grad():
            expected = model(**tokenizer(text, return_tensors="pt")).sentence_vectors(pooling, "mix")
        np.testing.assert_allclose(np.array(vector), expected.numpy(), rtol=0, atol=1e-6)
    assert np.array(pooled[0]).shape == (1, 64 if pooling in ("mean_max", "first_last") else 32)


def test_elmo_pipeline_defaults_to_the_mix_as_every_entry_point_and_takes_every_representation(
    elmo_extractor, fixture_model, converted_fixture_dir
):
    """The default representation is the model's own (`word_vectors()`, the scalar mix), as for the embedder and
    `elmo-hf embed`; "top" is what the stock pipeline returns (the output's first field)."""
    extractor = elmo_extractor
    stock = pipeline("feature-extraction", model=str(converted_fixture_dir))
    tokenizer = ELMoTokenizer.from_pretrained(converted_fixture_dir)
    text = "The bank raised its rates ."
    with torch.no_grad():
        output = fixture_model(**tokenizer(text, return_tensors="pt"))
    np.testing.assert_allclose(np.array(extractor(text)), output.word_vectors().numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.array(extractor(text, pooling="mean")), output.sentence_vectors().numpy(), rtol=0, atol=1e-6)
    assert not np.allclose(np.array(extractor(text)), np.array(stock(text)), atol=1e-3)  # the mix is not the top layer
    np.testing.assert_array_equal(np.array(extractor(text, representation="top")), np.array(stock(text)))
    assert extractor(text, representation="all", return_tensors=True).shape == (1, 6, 3, 32)
    assert extractor(text, representation=0, pooling="mean", return_tensors=True).shape == (1, 32)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"pooling": "sum"}, "pooling must be one of"),
        ({"representation": "bottom"}, "representation must be one of"),
        ({"representation": "mix", "mix_index": 4}, "mix_index"),
    ],
)
def test_elmo_pipeline_refuses_bad_options_before_running(elmo_extractor, options, message):
    with pytest.raises(ValueError, match=message):
        elmo_extractor("Hi .", **options)


def test_options_given_when_the_pipeline_is_built_hold_unless_a_call_names_them(converted_fixture_dir):
    extractor = pipeline(
        "feature-extraction", model=str(converted_fixture_dir), pipeline_class=ELMoFeatureExtractionPipeline,
        pooling="mean", representation="mix",
    )
    text = "The bank raised its rates ."
    assert extractor(text, return_tensors=True).shape == (1, 32)  # pooled, as built
    np.testing.assert_array_equal(
        np.array(extractor(text, representation="top")), np.array(extractor(text, representation="top", pooling="mean"))
    )
    assert extractor(text, pooling="none", return_tensors=True).shape == (1, 6, 32)
    with pytest.raises(ValueError, match="mix_index"):
        extractor(text, mix_index=3)  # checked against the built representation="mix"
