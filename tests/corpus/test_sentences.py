"""Corpora as datasets of sentences (elmo_hf.corpus.sentences): text split by the tokenizer's splitters, CoNLL-U
treebanks, structured files, any mix of them, and errors that name the file and row."""

from __future__ import annotations

import json
import re

import pytest

from elmo_hf.corpus.readers import CorpusError, read_conllu_sentences
from elmo_hf.corpus.sentences import load_conllu_sentences, load_sentences
from elmo_hf.corpus.vocabulary import ELMoWordVocabulary

from ..conftest import EWT_DEV, TINYSHAKESPEARE

CONLLU_SAMPLE = """\
# newdoc id = sample
# sent_id = s1
# text = I don't know.
1\tI\tI\tPRON\tPRP\t_\t4\tnsubj\t_\t_
2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdo\tdo\tAUX\tVBP\t_\t4\taux\t_\t_
3\tn't\tnot\tPART\tRB\t_\t4\tadvmod\t_\t_
4\tknow\tknow\tVERB\tVB\t_\t0\troot\t_\t_
4.1\tknow\tknow\tVERB\tVB\t_\t_\t_\t4:conj\tCopyOf=4
5\t.\t.\tPUNCT\t.\t_\t4\tpunct\t_\t_

# sent_id = s2
1\tYes\tyes\tINTJ\tUH\t_\t0\troot\t_\t_


1\tNo\tno\tINTJ\tUH\t_\t0\troot\t_\t_"""


def test_conllu_reader_skips_multiword_ranges_empty_nodes_and_comments(tmp_path):
    path = tmp_path / "sample.conllu"
    path.write_text(CONLLU_SAMPLE, encoding="utf-8")

    assert list(read_conllu_sentences(path)) == [
        {"sent_id": "s1", "words": ["I", "do", "n't", "know", "."], "upos": ["PRON", "AUX", "PART", "VERB", "PUNCT"]},
        {"sent_id": "s2", "words": ["Yes"], "upos": ["INTJ"]},
        {"sent_id": None, "words": ["No"], "upos": ["INTJ"]},
    ]
    dataset = load_conllu_sentences(path, cache_dir=tmp_path / "cache")
    assert dataset.column_names == ["sent_id", "words", "upos"] and dataset["words"][:] == [
        ["I", "do", "n't", "know", "."],
        ["Yes"],
        ["No"],
    ]

    path.write_text(CONLLU_SAMPLE.replace("5\t.\t.\tPUNCT", "6\t.\t.\tPUNCT"), encoding="utf-8")
    with pytest.raises(ValueError, match=r"sample.conllu line 10: expected word ID 5 .* got '6'"):
        list(read_conllu_sentences(path))
    path.write_text("1\tI\tI\tPRON\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 1: expected 10 tab-separated CoNLL-U fields, got 4"):
        list(read_conllu_sentences(path))


def test_conllu_reader_on_the_real_ud_dev_file(tmp_path):
    path = EWT_DEV
    text = path.read_text(encoding="utf-8")
    sent_ids = re.findall(r"^# sent_id = (.+)$", text, flags=re.MULTILINE)
    word_lines = re.findall(r"^\d+\t", text, flags=re.MULTILINE)  # syntactic words only: no 1-2, no 8.1

    dataset = load_conllu_sentences(path, cache_dir=tmp_path)

    assert len(dataset) == len(sent_ids) == 2001
    assert dataset["sent_id"][:] == sent_ids
    assert sum(len(words) for words in dataset["words"]) == len(word_lines)
    assert dataset[0]["words"] == ["From", "the", "AP", "comes", "this", "story", ":"]
    assert load_sentences(path, cache_dir=tmp_path)["words"][:] == dataset["words"][:]


def test_text_sentences_skip_empty_lines_and_agree_with_the_vocabulary_builder(tmp_path):
    path = tmp_path / "plays.txt"
    path.write_bytes(b"First Citizen:\r\nBefore we proceed any further, hear me speak.\n\n  \nAll:\nSpeak, speak.")

    dataset = load_sentences(path, cache_dir=tmp_path / "cache")

    assert dataset.column_names == ["words"]
    assert dataset["words"][:] == [
        ["First", "Citizen", ":"],
        ["Before", "we", "proceed", "any", "further", ",", "hear", "me", "speak", "."],
        ["All", ":"],
        ["Speak", ",", "speak", "."],
    ]
    assert ELMoWordVocabulary.from_text_files(path) == ELMoWordVocabulary.from_sentences(dataset["words"])
    assert load_sentences(path, word_splitter="whitespace", cache_dir=tmp_path / "cache")["words"][0] == [
        "First",
        "Citizen:",
    ]


def test_tinyshakespeare_is_one_sentence_per_non_empty_line(tmp_path):
    path = TINYSHAKESPEARE
    non_empty_lines = sum(1 for line in path.read_text(encoding="utf-8").split("\n") if line.strip())

    dataset = load_sentences(path, word_splitter="whitespace", cache_dir=tmp_path)

    assert len(dataset) == non_empty_lines
    assert dataset[0]["words"] == ["First", "Citizen:"]


def test_any_mix_of_formats_and_structured_columns(tmp_path):
    conllu, text, jsonl = tmp_path / "a.conllu", tmp_path / "b.txt", tmp_path / "c.jsonl"
    conllu.write_text(CONLLU_SAMPLE, encoding="utf-8")
    text.write_text("hello there .\n\n", encoding="utf-8")
    jsonl.write_text(json.dumps({"sentence": "from json ."}) + "\n", encoding="utf-8")
    mixed = load_sentences([conllu, text], cache_dir=tmp_path / "cache")
    assert mixed["words"][:] == [["I", "do", "n't", "know", "."], ["Yes"], ["No"], ["hello", "there", "."]]
    assert load_sentences(jsonl, text_column="sentence", cache_dir=tmp_path / "cache")["words"][:] == [["from", "json", "."]]
    (tmp_path / "d.jsonl").write_text(json.dumps({"tokens": ["pre", "split"]}) + "\n", encoding="utf-8")
    assert load_sentences(tmp_path / "d.jsonl", words_column="tokens", cache_dir=tmp_path / "cache")["words"][:] == [["pre", "split"]]


def test_loader_errors_name_the_file_and_row(tmp_path):
    text = tmp_path / "b.txt"
    text.write_bytes(b"fine\nbad \xff byte\n")
    with pytest.raises(CorpusError, match=r"b.txt line 2: not valid UTF-8"):
        load_sentences(text, cache_dir=tmp_path / "cache")
    with pytest.raises(CorpusError, match="missing.txt does not exist"):
        load_sentences(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="word_splitter must be one of"):
        load_sentences(text, word_splitter="spaces")
    (tmp_path / "e.jsonl").write_text(json.dumps({"text": None}) + "\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"e.jsonl row 0: 'text' must be a string, got None"):
        load_sentences(tmp_path / "e.jsonl", cache_dir=tmp_path / "cache")
    with pytest.raises(CorpusError, match=r"load_conllu_sentences reads .conllu files"):
        load_conllu_sentences(text)
