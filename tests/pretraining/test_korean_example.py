"""The Korean example of the README, end to end on the constitution that ships inside the konlpy wheel: pre-train a
tiny ELMo on Kiwi morphemes with 30 character slots, reload its tokenizer, embed sentences (the summary and manifest
count the words cut to the slots), score sentences, and serve it through the feature-extraction pipeline."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from transformers import AutoTokenizer, pipeline

from elmo_hf.scoring.lm_scoring import ELMoLanguageModelScorer
from elmo_hf.pretraining.run import PretrainingError, PretrainingOptions, load_pretraining_config, with_character_slots
from elmo_hf.corpus.vocabulary import ELMoWordVocabulary
from elmo_hf_cli import main

from ..conftest import installed_package
from ..helpers import torch_threads

SLOTS = 30  # as the Korean ELMo of the Korean embeddings book: 28 UTF-8 bytes, 9 Hangul syllables
LONG_WORD = "Verfassungsgerichtsbarkeitsgesetz"  # 33 bytes, one word for Kiwi (a Latin-script run): cut to 28


@pytest.fixture(scope="module")
def constitution(tmp_path_factory):
    """The first 200 lines of the Constitution of the Republic of Korea from konlpy's data (konlpy/data/corpus/kolaw),
    one line a sentence (the README's example trains on all of it and the bills)."""
    installed_package("kiwipiepy")
    text = (installed_package("konlpy") / "data" / "corpus" / "kolaw" / "constitution.txt").read_text(encoding="utf-8")
    path = tmp_path_factory.mktemp("corpus") / "constitution.txt"
    lines = [line.strip() for line in text.splitlines() if line.strip()][:200]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def pretrain_arguments(corpus, output, slots: int = SLOTS) -> list[str]:
    return [
        "pretrain", "--corpus", str(corpus), "--output", str(output), "--config", "tiny", "--word-splitter", "kiwi",
        "--max-characters-per-token", str(slots), "--min-count", "1", "--max-steps", "10", "--batch-size", "4",
        "--window-size", "10", "--held-out-fraction", "0.05", "--train-eval-sentences", "10", "--eval-steps", "0",
        "--logging-steps", "10", "--save-steps", "10", "--threads", "1", "--no-progress",
    ]


@pytest.fixture(scope="module")
def model_dir(constitution, tmp_path_factory):
    output = tmp_path_factory.mktemp("runs") / "elmo-ko"
    with torch_threads(1):
        assert main(pretrain_arguments(constitution, output)) == 0
    return output


def test_the_splitter_and_the_slots_are_recorded_and_honoured_after_reload(model_dir):
    saved = json.loads((model_dir / "tokenizer_config.json").read_text())
    assert (saved["word_splitter"], saved["max_characters_per_token"]) == ("kiwi", SLOTS)
    assert json.loads((model_dir / "config.json").read_text())["max_characters_per_token"] == SLOTS
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert tokenizer.tokenize("은행에 갔다") == ["은행", "에", "갔", "다"]
    vocabulary = ELMoWordVocabulary.load(model_dir)
    assert {"대한민국", "은", "헌법"} <= set(vocabulary.words)
    assert tokenizer.truncated_word_count(vocabulary.words) == 0  # 30 slots hold every word of the constitution


def test_embed_reports_the_words_cut_to_the_slots(model_dir, tmp_path, capsys):
    sentences = tmp_path / "sentences.txt"
    sentences.write_text(f"대한민국은 민주공화국이다.\n모든 국민은 법 앞에 평등하다.\n{LONG_WORD} 은행에 갔다\n", encoding="utf-8")
    assert main(["embed", str(sentences), "--model", str(model_dir), "--output", str(tmp_path / "out"), "--no-progress"]) == 0
    assert f"1 word cut to the model's {SLOTS} character slots" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["totals"]["truncated_words"] == 1 and manifest["shards"][0]["truncated_words"] == 1
    assert manifest["options"]["tokenizer"]["word_splitter"] == "kiwi"
    from datasets import load_dataset

    words = load_dataset("parquet", data_files=str(tmp_path / "out" / "shard-00000.parquet"), split="train")["words"]
    assert words[0] == ["대한민국", "은", "민주", "공화국", "이", "다", "."]
    assert words[2] == [LONG_WORD, "은행", "에", "갔", "다"]  # the words column shows the whole word


def test_sentences_are_scored_and_embedded_through_the_pipeline(model_dir):
    scorer = ELMoLanguageModelScorer.from_pretrained(model_dir)
    score = scorer.score(["대한민국의 주권은 국민에게 있다.", "모든 국민은 법 앞에 평등하다."])
    assert math.isfinite(score.perplexity) and score.perplexity > 1
    assert all(math.isfinite(sentence.perplexity) for sentence in score.sentences)
    extractor = pipeline("feature-extraction", model=str(model_dir), tokenizer=str(model_dir))
    assert np.array(extractor("대한민국은 민주공화국이다")).shape == (1, 6, 64)  # six morphemes, 2 x projection 32


def test_resume_keeps_the_character_slots_of_the_first_run(model_dir, constitution, capsys):
    assert main([*pretrain_arguments(constitution, model_dir, slots=20), "--resume"]) == 2
    assert "different options (max_characters_per_token: was 30, now 20)" in capsys.readouterr().err
    with pytest.raises(PretrainingError, match=r"--max-characters-per-token 4: .*must be >= the widest character filter \(6\)"):
        with_character_slots(load_pretraining_config("small"), 4)
    with pytest.raises(PretrainingError, match="init_from keeps the initial model's"):
        PretrainingOptions(corpus=[constitution], output_dir=model_dir, init_from=model_dir, max_characters_per_token=20)
