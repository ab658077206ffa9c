"""Continuing pre-training from a converted model: elmo-hf pretrain --init-from (elmo_hf/pretraining/initial_model.py)."""

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch

from elmo_hf.conversion.convert_allennlp_to_hf import convert_allennlp_to_hf
from elmo_hf.conversion.convert_tf_checkpoint import convert_tf_checkpoint
from elmo_hf import ELMoForPreTraining, ELMoTokenizer
from elmo_hf.pretraining import ELMoLanguageModelScorer, ELMoWordVocabulary, PretrainingError, PretrainingOptions, pretrain
from elmo_hf.pretraining.initial_model import InitialModelError, grow_softmax, load_initial_model
from elmo_hf.pretraining.run import load_training_sentences, split_held_out, with_initial_word_splitter
from elmo_hf.corpus.vocabulary import UNK_WORD_ID
from elmo_hf_cli import main as cli_main

from ..conftest import TINYSHAKESPEARE

CHECKPOINT = Path(__file__).resolve().parents[1] / "fixtures" / "tf-checkpoint" / "two-layer"
FAST = dict(word_splitter="whitespace", max_steps=2, save_steps=100, logging_steps=1, train_eval_sentences=4, progress=False, num_threads=1)


@pytest.fixture(scope="module")
def new_corpus(tmp_path_factory) -> Path:
    """Lines the fixture model never saw (it was trained on the first 60 lines)."""
    lines = TINYSHAKESPEARE.read_text(encoding="utf-8").splitlines()[200:240]
    path = tmp_path_factory.mktemp("corpus") / "new.txt"
    path.write_text("\n".join(line for line in lines if line.strip()) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def converted_dir(tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("converted") / "elmo"
    convert_tf_checkpoint(CHECKPOINT, CHECKPOINT / "vocab.txt", output)
    return output


def test_counted_on_keeps_every_id_and_adds_corpus_words_by_count():
    vocabulary = ELMoWordVocabulary.from_sentences([["a", "b", "a"], ["c", "a"]])
    counted = vocabulary.counted_on([["a", "x", "x", "y", "<UNK>"], ["b", "z"]])
    assert counted.words == vocabulary.words and counted.counts == (2, 2, 5, 1, 1, 0)  # <UNK>: x, x, y, z and <UNK>
    grown = vocabulary.counted_on([["a", "x", "x", "y", "<UNK>"], ["b", "z"]], add_words=True, max_size=8)
    assert grown.words == (*vocabulary.words, "x", "y") and grown.counts == (2, 2, 2, 1, 1, 0, 2, 1)  # y before z: ties by word
    assert vocabulary.counted_on([["a", "x", "x", "y"]], add_words=True, min_count=2).words[-1] == "x"


def test_added_softmax_rows_start_as_unk_and_old_rows_are_unchanged():
    generator = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(6, 4, generator=generator), torch.randn(6, generator=generator)
    new_weight, new_bias = grow_softmax(weight, bias, [3, 1])
    assert torch.equal(new_weight[:6], weight) and torch.equal(new_bias[:6], bias)
    assert torch.equal(new_weight[6:], weight[UNK_WORD_ID].expand(2, -1))
    # The added words share <UNK>'s probability by count, in every context.
    hidden = torch.randn(5, 4, generator=generator)
    logits = hidden @ new_weight.T + new_bias
    unk, added = logits[:, UNK_WORD_ID].exp(), logits[:, 6:].exp()
    assert torch.allclose(added.sum(dim=1), unk, rtol=1e-5) and torch.allclose(added[:, 0] / added[:, 1], torch.tensor(3.0), rtol=1e-5)


def test_a_converted_model_continues_from_its_weights_with_its_vocabulary(converted_dir, new_corpus, tmp_path):
    options = PretrainingOptions(
        corpus=[new_corpus], output_dir=tmp_path / "run", init_from=converted_dir, regime="sentence", batch_size=8,
        eval_steps=100, held_out_fraction=0.1, **FAST,
    )
    report = pretrain(options)
    # Step 0's held-out perplexity is the converted model's own (as the LM scorer computes it).
    held_out = split_held_out(load_training_sentences(options.corpus, options), options.held_out_fraction, options.seed)[1]
    initial = ELMoLanguageModelScorer.from_pretrained(converted_dir).score(list(held_out["words"]))
    assert abs(report.held_out_initial["forward_nll"] - initial.forward_negative_log_likelihood / initial.num_predictions) <= 1e-6
    assert abs(report.held_out_initial["backward_nll"] - initial.backward_negative_log_likelihood / initial.num_predictions) <= 1e-6
    assert report.initialised_from == str(converted_dir) and report.added_words == 0 and report.steps == 2
    vocabulary = ELMoWordVocabulary.load(tmp_path / "run")
    assert vocabulary.words == ELMoWordVocabulary.load(converted_dir).words
    assert vocabulary.counts[0] == report.num_train_sentences  # <S>: the new corpus's training sentences
    trained = ELMoForPreTraining.from_pretrained(tmp_path / "run")
    assert trained.config.num_lstm_layers == 2 and trained.config.projection_dim == 4  # the initial architecture
    assert "initial model (step 0)" in report.describe()


def test_a_tf_checkpoint_continues_with_added_words(new_corpus, tmp_path, capsys):
    status = cli_main(
        ["pretrain", "--corpus", str(new_corpus), "--output", str(tmp_path / "run"), "--init-from", str(CHECKPOINT),
         "--init-vocab", str(CHECKPOINT / "vocab.txt"), "--add-words", "--min-count", "2", "--word-splitter", "whitespace",
         "--max-steps", "2", "--batch-size", "4", "--window-size", "5", "--eval-steps", "0", "--train-eval-sentences", "4",
         "--threads", "1", "--no-progress"]
    )
    assert status == 0, capsys.readouterr().err
    report = json.loads((tmp_path / "run" / "pretraining_report.json").read_text())
    initial_words = load_initial_model(CHECKPOINT, CHECKPOINT / "vocab.txt", with_weights=False).vocabulary.words
    vocabulary = ELMoWordVocabulary.load(tmp_path / "run")
    assert vocabulary.words[: len(initial_words)] == initial_words and report["added_words"] == len(vocabulary) - 30 > 0
    added_counts = vocabulary.counts[30:]
    assert min(added_counts) >= 2 and list(added_counts) == sorted(added_counts, reverse=True)
    assert ELMoForPreTraining.from_pretrained(tmp_path / "run").softmax.out_features == len(vocabulary)


def test_a_continued_run_splits_words_as_the_initial_model_did(converted_dir, new_corpus, tmp_path, caplog):
    initial = tmp_path / "initial"
    shutil.copytree(converted_dir, initial)
    tokenizer_config = json.loads((initial / "tokenizer_config.json").read_text(encoding="utf-8"))
    (initial / "tokenizer_config.json").write_text(json.dumps({**tokenizer_config, "word_splitter": "whitespace"}))
    not_named = {name: value for name, value in FAST.items() if name != "word_splitter"}
    options = PretrainingOptions(
        corpus=[new_corpus], output_dir=tmp_path / "run", init_from=initial, regime="sentence", batch_size=8,
        eval_steps=0, **not_named,
    )
    pretrain(options)
    assert ELMoTokenizer.from_pretrained(tmp_path / "run").word_splitter == "whitespace"
    # Naming another splitter is the user's choice, said out loud.
    named = PretrainingOptions(corpus=[new_corpus], output_dir=tmp_path / "other", init_from=initial, **{**FAST, "word_splitter": "ptb"})
    with caplog.at_level(logging.WARNING):
        assert with_initial_word_splitter(named, load_initial_model(initial, with_weights=False)).word_splitter == "ptb"
    assert "records 'whitespace'" in caplog.text
    # A TF checkpoint records none: the default splitter.
    from_checkpoint = PretrainingOptions(
        corpus=[new_corpus], output_dir=tmp_path / "tf", init_from=CHECKPOINT, init_vocab=CHECKPOINT / "vocab.txt"
    )
    assert with_initial_word_splitter(from_checkpoint, load_initial_model(CHECKPOINT, CHECKPOINT / "vocab.txt", with_weights=False)).word_splitter == "moses"


def test_what_cannot_be_continued_is_refused(converted_dir, new_corpus, tmp_path):
    def options(**changes):
        return PretrainingOptions(corpus=[new_corpus], output_dir=tmp_path / "run", **{**FAST, **changes})

    with pytest.raises(PretrainingError, match="init_vocab and add_words apply to a run with init_from"):
        options(add_words=True)
    with pytest.raises(PretrainingError, match="config .tiny. and init_from exclude each other"):
        options(init_from=converted_dir, config="tiny")
    with pytest.raises(PretrainingError, match="config .small. and init_from exclude each other"):
        options(init_from=converted_dir, config="small")  # the default, named: refused too
    with pytest.raises(PretrainingError, match="needs the vocabulary file it was trained with: --init-vocab FILE"):
        pretrain(options(init_from=CHECKPOINT))
    # A conversion of the released HDF5 layout has no softmax to continue from.
    hdf5_model = tmp_path / "hdf5-model"
    convert_allennlp_to_hf(CHECKPOINT / "options.json", CHECKPOINT / "weights.hdf5", hdf5_model)
    with pytest.raises(InitialModelError, match="has no word softmax"):
        load_initial_model(hdf5_model)
    with pytest.raises(PretrainingError, match="has no word softmax"):
        pretrain(options(init_from=hdf5_model))
    assert not (tmp_path / "run").exists()


def test_a_model_the_data_pipeline_cannot_feed_is_refused_before_reading_the_corpus(new_corpus, tmp_path):
    """An ELMoForManyLangs conversion (Unicode characters, word ids): the pre-training data are byte ids."""
    from elmo_hf.conversion.convert_elmoformanylangs import convert_elmoformanylangs

    converted = tmp_path / "manylangs"
    convert_elmoformanylangs(Path(__file__).resolve().parents[1] / "fixtures" / "elmoformanylangs" / "with-words", converted)
    options = PretrainingOptions(corpus=[new_corpus], output_dir=tmp_path / "run", config=str(converted / "config.json"), **FAST)
    with pytest.raises(PretrainingError, match="'unicode_characters' characters with a word-embedding input .* cannot be pre-trained"):
        pretrain(options)
    assert not (tmp_path / "run").exists()
