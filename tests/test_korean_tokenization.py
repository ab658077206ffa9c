"""Korean text: the "kiwi" and "mecab" word splitters (surface morphemes, recorded in the tokenizer config, picklable,
a clear error without their extra), truncated words (counted, warned about once), and models whose words have other
than 50 character slots."""

from __future__ import annotations

import logging
import pickle
import sys

import pytest
import torch
from datasets.fingerprint import Hasher
from transformers import AutoTokenizer

from elmo_hf import ELMoConfig, ELMoModel, ELMoTokenizer
from elmo_hf.corpus.sentences import load_sentences
from elmo_hf.modeling_elmo import add_sentence_boundaries
from elmo_hf.tokenization_elmo import MORPHEME_ANALYSERS, build_word_splitter, surface_words, word_to_character_ids

from .conftest import installed_package
from .helpers import random_model, tiny_config

SPLITTERS = tuple(MORPHEME_ANALYSERS)  # ("kiwi", "mecab")
TEXT = "  한국은행에 갔습니다. 대한민국은 민주공화국이다 😀 I don't\u00a0know "


@pytest.fixture(scope="module", params=SPLITTERS)
def korean_tokenizer(request) -> ELMoTokenizer:
    installed_package(MORPHEME_ANALYSERS[request.param][0])
    return ELMoTokenizer(word_splitter=request.param)


def test_particles_and_endings_are_words_of_their_own(korean_tokenizer):
    words = korean_tokenizer.tokenize("한국은행에 갔습니다. 대한민국은 민주공화국이다.")
    assert words[:6] == ["한국", "은행", "에", "갔", "습니다", "."]  # 갔 = 가 + 았: one surface, one word
    assert words[6:8] == ["대한민국", "은"]
    assert words[-3:] == ["이", "다", "."]


def test_words_are_surfaces_with_offsets_and_no_character_is_lost(korean_tokenizer):
    pieces = korean_tokenizer.split_words(TEXT)
    assert all(TEXT[start:end] == word and word and not any(c.isspace() for c in word) for word, (start, end) in pieces)
    assert [start for _, (start, _) in pieces] == sorted(start for _, (start, _) in pieces)
    assert "".join(word for word, _ in pieces) == "".join(TEXT.split())
    assert korean_tokenizer.tokenize(TEXT) == korean_tokenizer.tokenize(TEXT)  # deterministic


def test_surface_words_merges_overlapping_morphemes_and_keeps_uncovered_text():
    text = "했다 x y"
    # Kiwi: 하 and 었 both point at 했; an inserted morpheme has an empty span; "x y" is covered by nothing.
    assert surface_words(text, [(0, 1), (0, 1), (1, 2), (2, 2)]) == [("했", (0, 1)), ("다", (1, 2)), ("x", (3, 4)), ("y", (5, 6))]


def test_splitter_is_recorded_in_the_tokenizer_config_and_reloaded(korean_tokenizer, tmp_path):
    korean_tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert reloaded.word_splitter == korean_tokenizer.word_splitter
    assert reloaded.tokenize("은행에 갔다") == ["은행", "에", "갔", "다"]


def test_tokenizer_pickles_and_hashes_the_same_before_and_after_use(korean_tokenizer):
    """datasets.map fingerprints its function by pickling it: the analyser is not part of the state."""
    fresh = ELMoTokenizer(word_splitter=korean_tokenizer.word_splitter, max_characters_per_token=5)
    before = Hasher.hash(fresh)
    fresh(["대한민국은 민주공화국이다"])  # creates the analyser, cuts a word and warns
    assert Hasher.hash(fresh) == before
    assert pickle.loads(pickle.dumps(fresh)).tokenize("은행에") == ["은행", "에"]


def test_load_sentences_splits_a_corpus_into_morphemes(tmp_path):
    installed_package("kiwipiepy")
    corpus = tmp_path / "ko.txt"
    corpus.write_text("은행에 갔다\n\n대한민국은 민주공화국이다\n", encoding="utf-8")
    assert load_sentences(corpus, "kiwi", cache_dir=tmp_path / "cache")["words"] == [
        ["은행", "에", "갔", "다"], ["대한민국", "은", "민주", "공화국", "이", "다"],
    ]


@pytest.mark.parametrize("name", SPLITTERS)
def test_a_missing_analyser_is_an_import_error_naming_the_extra(name, monkeypatch):
    module, package, extra = MORPHEME_ANALYSERS[name]
    monkeypatch.setitem(sys.modules, module, None)  # `import module` now fails, as when it is not installed
    for make in (lambda: ELMoTokenizer(word_splitter=name), lambda: build_word_splitter(name)):
        with pytest.raises(ImportError, match=rf"pip install 'elmo-hf\[{extra}\]'.*{package}"):
            make()
    from elmo_hf.pretraining.run import PretrainingError, PretrainingOptions

    with pytest.raises(PretrainingError, match=rf"elmo-hf\[{extra}\]"):
        PretrainingOptions(corpus=["corpus.txt"], output_dir="out", word_splitter=name)


# ---------------------------------------------------------------------------------------------------------------
# Truncated words
# ---------------------------------------------------------------------------------------------------------------
def test_truncated_words_are_counted_in_utf8_bytes():
    tokenizer = ELMoTokenizer(max_characters_per_token=11)  # 9 bytes: 3 Hangul syllables
    words = ["민주공", "민주공화", "abcdefghi", "abcdefghij", "<S>", "😀😀", "😀😀😀", "민주공화"]
    assert [tokenizer.is_truncated_word(word) for word in words] == [False, True, False, True, False, False, True, True]
    assert tokenizer.truncated_word_count(words) == 4
    assert tokenizer.truncated_words(words) == ["민주공화", "abcdefghij", "😀😀😀", "민주공화"]  # in order, repeats kept
    assert ELMoTokenizer().truncated_word_count(["가" * 16, "가" * 17]) == 1  # 50 slots hold 16 syllables


def test_the_tokenizer_warns_once_with_a_count(caplog):
    tokenizer = ELMoTokenizer(max_characters_per_token=8, word_splitter="whitespace")
    with caplog.at_level(logging.WARNING, logger="elmo_hf"):
        tokenizer(["민주공화국 가 대한민국", "민주공화국"])
        tokenizer("헌법재판소")
        tokenizer.batch_character_ids([["헌법재판소"]])
    warnings = [record.getMessage() for record in caplog.records if "max_characters_per_token" in record.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].startswith("3 word(s) of this input are longer than max_characters_per_token=8")
    assert "'민주공화국' (15 bytes)" in warnings[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="elmo_hf"):
        ELMoTokenizer(max_characters_per_token=8).batch_character_ids([["헌법재판소"]])  # another tokenizer warns again
    assert "1 word(s) of this input" in caplog.text


# ---------------------------------------------------------------------------------------------------------------
# Models with other than 50 character slots
# ---------------------------------------------------------------------------------------------------------------
def test_a_model_with_20_slots_runs_with_boundaries_and_token_cache():
    config = tiny_config(max_characters_per_token=20)
    model = random_model(config)
    tokenizer = ELMoTokenizer(max_characters_per_token=20, word_splitter="whitespace")
    batch = tokenizer(["대한민국 은 민주 공화국 이 다", "헌법"], padding=True, return_tensors="pt")
    with torch.no_grad():
        reference = model(**batch).last_hidden_state
        model.cache_token_embeddings(["대한민국", "헌법"], max_words=100)
        cached = model(**batch).last_hidden_state
    assert reference.shape == (2, 6, 16) and torch.equal(reference, cached)
    with_boundaries, _ = add_sentence_boundaries(batch["input_ids"], batch["attention_mask"].bool())
    assert with_boundaries[0, 0].tolist() == word_to_character_ids("<S>", 20)
    assert with_boundaries[1, 2].tolist() == word_to_character_ids("</S>", 20)
    assert isinstance(ELMoConfig.from_dict(config.to_dict()), ELMoConfig)
    assert isinstance(ELMoModel(config), ELMoModel)
