"""The small demo model shipped in elmo_hf/default_model: loads offline, embeds, is an LM better than unigram, and
its card states what it is, its corpus, license and perplexity."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from transformers import AutoModel, AutoModelForPreTraining

from elmo_hf import ELMoForPreTraining, ELMoModel, ELMoTokenizer
from elmo_hf import DEFAULT_MODEL_DIR
from elmo_hf.embedding.embedder import ELMoEmbedder
from elmo_hf.corpus.vocabulary import ELMoWordVocabulary

REPORT = json.loads((Path(DEFAULT_MODEL_DIR) / "pretraining_report.json").read_text(encoding="utf-8"))
EWT_TEST = json.loads((Path(DEFAULT_MODEL_DIR) / "ewt_test_perplexity.json").read_text(encoding="utf-8"))


def test_loads_offline_in_a_fresh_process_and_embeds(tmp_path):
    script = (
        "import torch\n"
        "from elmo_hf import DEFAULT_MODEL_DIR\n"
        "from elmo_hf import ELMoModel, ELMoTokenizer\n"
        "model = ELMoModel.from_pretrained(DEFAULT_MODEL_DIR)\n"
        "assert next(model.parameters()).dtype == torch.float32\n"
        "tokenizer = ELMoTokenizer.from_pretrained(DEFAULT_MODEL_DIR)\n"
        "encoding = tokenizer(['The play was good .'], return_tensors='pt')\n"
        "with torch.inference_mode():\n"
        "    vectors = model(**encoding).elmo_representations[0]\n"
        "assert vectors.shape == (1, 5, model.config.output_dim) and torch.isfinite(vectors).all()\n"
        "print('ok')\n"
    )
    environment = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "empty-hf-home"), TRANSFORMERS_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
    # The pre-training checkpoint's softmax is dropped silently by the biLM (no load report).
    assert "UNEXPECTED" not in result.stderr


def test_auto_classes_load_the_biLM_and_the_language_model():
    biLM = AutoModel.from_pretrained(DEFAULT_MODEL_DIR)
    language_model = AutoModelForPreTraining.from_pretrained(DEFAULT_MODEL_DIR)
    assert isinstance(biLM, ELMoModel) and isinstance(language_model, ELMoForPreTraining)
    vocabulary = ELMoWordVocabulary.load(DEFAULT_MODEL_DIR)
    assert language_model.config.word_vocab_size == len(vocabulary) == REPORT["vocabulary_size"]
    for name, parameter in biLM.state_dict().items():
        assert torch.equal(parameter, language_model.elmo.state_dict()[name]), name


def test_it_is_small_and_stored_as_float16():
    from safetensors import safe_open

    size = (Path(DEFAULT_MODEL_DIR) / "model.safetensors").stat().st_size
    assert size < 10 * 2**20, f"the shipped model should stay a few MB, it is {size / 2**20:.1f} MiB"
    with safe_open(str(Path(DEFAULT_MODEL_DIR) / "model.safetensors"), framework="pt") as weights:
        assert {weights.get_slice(name).get_dtype() for name in weights.keys()} == {"F16"}


def test_embeds_with_the_default_embedder_and_vectors_depend_on_context():
    embedder = ELMoEmbedder(ELMoModel.from_pretrained(DEFAULT_MODEL_DIR), ELMoTokenizer.from_pretrained(DEFAULT_MODEL_DIR), representation="top")
    words = embedder.embed_words([["I", "saw", "the", "play", "."], ["Let", "us", "play", "a", "game", "."], ["I", "saw", "the", "play", "."]])
    first, second, same = (torch.as_tensor(vectors) for vectors in words)
    play_first, play_second, play_same = first[3], second[2], same[3]
    assert torch.equal(play_first, play_same)
    cosine = torch.nn.functional.cosine_similarity(play_first, play_second, dim=0)
    assert cosine < 0.999  # the same word, another context: another vector


def test_it_is_a_better_language_model_than_the_unigram_baseline():
    held_out, unigram = REPORT["held_out"], REPORT["held_out_unigram"]
    for direction in ("forward", "backward"):
        assert held_out[f"{direction}_perplexity"] < 0.5 * unigram[f"{direction}_perplexity"], direction
    # float16 storage changes the unseen-test perplexity by less than 1%.
    trained, shipped = EWT_TEST["trained_float32"], EWT_TEST["shipped_float16"]
    assert shipped["perplexity"] == pytest.approx(trained["perplexity"], rel=0.01)


def test_card_states_what_it_is_its_corpus_license_and_perplexity():
    card = ModelCard.load(Path(DEFAULT_MODEL_DIR) / "README.md")
    assert card.data.license == "cc-by-sa-4.0"
    text = " ".join(card.text.split())  # line breaks do not matter
    assert "small demonstration model" in text and "converted original ELMo weights" in text
    assert "tinyshakespeare" in text and "English Web Treebank" in text and "CC BY-SA 4.0" in text
    assert "**test** split was never used for pre-training" in text
    shipped = EWT_TEST["shipped_float16"]
    assert f"{shipped['forward_perplexity']:.1f}" in text and f"{shipped['backward_perplexity']:.1f}" in text
    assert f"{REPORT['held_out']['forward_perplexity']:.1f}" in text


def test_the_tokenizer_ships_with_it():
    tokenizer = ELMoTokenizer.from_pretrained(DEFAULT_MODEL_DIR)
    assert tokenizer.tokenize("Don't stop.") == ["Don", "'t", "stop", "."]
