"""elmo-hf models as sentence-transformers modules: encode equals elmo-hf's pooling, save/load round trip."""

import importlib
import sys

import numpy as np
import pytest
import torch

from elmo_hf import ELMoModel

import sentence_transformers  # the test extra installs it: a missing one fails here, loudly

from elmo_hf.integrations.sentence_transformers import ELMoForSentenceTransformers, elmo_sentence_transformer

TEXTS = ["The bank raised its interest rates .", "We sat on the river bank .", "Hi", ""]


def elmo_sentence_vectors(model, tokenizer, texts, pooling, representation="mix"):
    with torch.inference_mode():
        output = model(**tokenizer(texts, padding=True, return_tensors="pt"))
    return output.sentence_vectors(pooling, representation).numpy()


@pytest.mark.parametrize("pooling", ["mean", "max", "mean_max", "first_last"])
def test_encode_equals_elmo_hf_pooling(fixture_model, tokenizer, pooling):
    model = elmo_sentence_transformer(model=fixture_model, tokenizer=tokenizer, pooling=pooling, device="cpu")
    encoded = model.encode(TEXTS[:3], batch_size=2)  # two batches, padded differently from the reference's
    expected = elmo_sentence_vectors(fixture_model, tokenizer, TEXTS[:3], pooling)
    assert encoded.shape == expected.shape == (3, 64 if pooling in ("mean_max", "first_last") else 32)
    assert np.isfinite(encoded).all()
    np.testing.assert_allclose(encoded, expected, rtol=0, atol=1e-6)
    assert model.get_embedding_dimension() == encoded.shape[1]


def test_mean_pooling_of_a_text_without_words_is_zero(fixture_model, tokenizer):
    model = elmo_sentence_transformer(model=fixture_model, tokenizer=tokenizer, pooling="mean", device="cpu")
    np.testing.assert_array_equal(model.encode([""])[0], np.zeros(32, np.float32))


def test_save_and_load_round_trip(fixture_model, tokenizer, tmp_path):
    model = elmo_sentence_transformer(
        model=fixture_model, tokenizer=tokenizer, pooling="mean_max", representation="top", device="cpu"
    )
    model.save(str(tmp_path / "st"))
    # sentence-transformers 6 asks for trust_remote_code for any module class outside its own package.
    loaded = sentence_transformers.SentenceTransformer(str(tmp_path / "st"), device="cpu", trust_remote_code=True)
    assert isinstance(loaded[0], ELMoForSentenceTransformers) and loaded[0].representation == "top"
    np.testing.assert_array_equal(loaded.encode(TEXTS), model.encode(TEXTS))
    np.testing.assert_allclose(
        loaded.encode(TEXTS[:2]), elmo_sentence_vectors(fixture_model, tokenizer, TEXTS[:2], "mean_max", "top"), atol=1e-6
    )
    # The root is an ordinary ELMo directory too.
    reloaded = ELMoModel.from_pretrained(tmp_path / "st")
    assert all(torch.equal(a, b) for a, b in zip(reloaded.state_dict().values(), fixture_model.state_dict().values()))


def test_bad_options_and_inputs_are_refused(fixture_model, tokenizer):
    with pytest.raises(ValueError, match="pooling must be one of"):
        elmo_sentence_transformer(model=fixture_model, tokenizer=tokenizer, pooling="sum")
    with pytest.raises(ValueError, match='representation "all"'):
        ELMoForSentenceTransformers(model=fixture_model, tokenizer=tokenizer, representation="all")
    with pytest.raises(ValueError, match=r"layer index in \[0, 3\)"):
        ELMoForSentenceTransformers(model=fixture_model, tokenizer=tokenizer, representation=7)
    with pytest.raises(ValueError, match="model_name_or_path or a loaded model"):
        ELMoForSentenceTransformers()
    module = ELMoForSentenceTransformers(model=fixture_model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match=r"inputs\[1\] is int"):
        module.preprocess(["fine .", 3])


def test_a_missing_extra_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    monkeypatch.delitem(sys.modules, "elmo_hf.integrations.sentence_transformers")
    with pytest.raises(ImportError, match=r"pip install 'elmo-hf\[sentence-transformers\]'"):
        importlib.import_module("elmo_hf.integrations.sentence_transformers")


def test_a_prompts_words_are_left_out_when_pooling_excludes_the_prompt(fixture_model, tokenizer):
    model = elmo_sentence_transformer(model=fixture_model, tokenizer=tokenizer, pooling="mean", device="cpu")
    model[1].include_prompt = False
    encoded = model.encode(["The bank raised its interest rates ."], prompt="query : ")
    with torch.inference_mode():
        output = fixture_model(**tokenizer(["query : The bank raised its interest rates ."], return_tensors="pt"))
    expected = output.elmo_representations[0][0, 2:].mean(dim=0)  # the two prompt words left out
    np.testing.assert_allclose(encoded[0], expected.numpy(), rtol=0, atol=1e-6)


def test_an_in_memory_model_needs_its_tokenizer(tokenizer):
    from elmo_hf import ELMoConfig

    model = ELMoModel(ELMoConfig(projection_dim=4, lstm_cell_size=8, char_cnn_filters=[[1, 4]], num_highway_layers=0))
    with pytest.raises(ValueError, match="pass its tokenizer="):
        ELMoForSentenceTransformers(model=model)
