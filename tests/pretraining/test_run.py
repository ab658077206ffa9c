"""`elmo-hf pretrain`: end to end on a slice of tinyshakespeare with the tiny config (loss falls, held-out perplexity
beats the untrained model's), the report (per-direction perplexities, unigram baseline, Trainer's
`bilm_perplexity_metrics` equal to a hand-written evaluation), Auto-class loading, HDF5 export -> convert back
bit-exact, Ctrl-C -> checkpoint -> --resume, the per-sentence regime, and refusals."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys

import pytest
import torch
from transformers import AutoModel, AutoModelForPreTraining, AutoTokenizer

from elmo_hf.conversion.convert_allennlp_to_hf import convert_allennlp_to_hf
from elmo_hf import ELMoConfig, ELMoForPreTraining, ELMoModel, ELMoTokenizer
from elmo_hf_cli import main
from elmo_hf_cli.common import EXIT_INTERRUPTED, EXIT_USAGE_ERROR
from elmo_hf.pretraining.data import WindowedBiLMStream
from elmo_hf.modeling_elmo_pretraining import perplexity_from_totals
from elmo_hf.pretraining.run import (
    CONFIG_PRESETS,
    PRETRAINING_OPTIONS_FILE_NAME,
    REPORT_FILE_NAME,
    PretrainingError,
    load_pretraining_config,
    split_held_out,
    unigram_perplexity,
)
from elmo_hf.storage.output_directory import MARKER_NAME
from elmo_hf.corpus.sentences import load_sentences
from elmo_hf.corpus.vocabulary import ELMoWordVocabulary

from ..conftest import REPOSITORY_ROOT, TINYSHAKESPEARE
from ..helpers import run_in_forked_child, tiny_options, torch_threads

ROWS, WINDOW, STEPS = 8, 10, 40
DIRECTIONS = ("forward", "backward")


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The runs use --threads 1; so do the hand-written evaluations."""
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The first 1,200 lines of tinyshakespeare (about 950 sentences, 8k words)."""
    lines = TINYSHAKESPEARE.read_text(encoding="utf-8").splitlines()[:1200]
    path = tmp_path_factory.mktemp("corpus") / "shakespeare-slice.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def pretrain_args(corpus, output, *extra) -> list[str]:
    return [
        "pretrain", "--corpus", str(corpus), "--output", str(output), "--config", "tiny", "--batch-size", str(ROWS),
        "--window-size", str(WINDOW), "--held-out-fraction", "0.1", "--train-eval-sentences", "200",
        "--logging-steps", "5", "--threads", "1", "--no-progress", *map(str, extra),
    ]


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    """One full run: 40 steps, checkpoints and held-out evaluation every 20, HDF5 export."""
    output = tmp_path_factory.mktemp("runs") / "elmo-tiny"
    code = main(pretrain_args(corpus, output, "--max-steps", STEPS, "--save-steps", 20, "--eval-steps", 20, "--export-hdf5"))
    assert code == 0
    return output, json.loads((output / REPORT_FILE_NAME).read_text())


def test_report_has_exact_per_direction_perplexities_and_unigram_baseline(trained):
    output, report = trained
    assert report["steps"] == STEPS and report["max_steps"] == STEPS
    assert report["tokens_seen"] == STEPS * ROWS * WINDOW  # full windows: every position is a prediction per direction
    assert report["config"]["word_vocab_size"] == report["vocabulary_size"]
    for name in ("held_out", "held_out_unigram", "train_sample", "train_sample_unigram", "held_out_initial"):
        for direction in DIRECTIONS:
            value = report[name][f"{direction}_perplexity"]
            assert math.isfinite(value) and value > 1, (name, direction, value)
    # Exactly n + 1 predictions per sentence and direction, the same for the model and the unigram baseline.
    for name in ("held_out", "train_sample"):
        for direction in DIRECTIONS:
            assert report[name][f"num_{direction}_predictions"] == report[f"{name}_unigram"][f"num_{direction}_predictions"]
    # Training helps: the trained model beats the untrained one (step-0 evaluation) in both directions.
    for direction in DIRECTIONS:
        assert report["held_out"][f"{direction}_perplexity"] < report["held_out_initial"][f"{direction}_perplexity"] / 2
    assert [step for step, _ in report["eval_history"]] == [0, 20, 40]
    assert report["num_parameters"] == report["num_bilm_parameters"] + (CONFIG_PRESETS["tiny"]["projection_dim"] + 1) * report["vocabulary_size"]


def test_training_loss_decreases(trained):
    output, report = trained
    state = json.loads((output / "trainer_state.json").read_text())
    losses = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    assert len(losses) >= 8
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.5, losses
    assert [loss for _, loss in report["loss_history"]] == losses


def test_trainer_perplexity_equals_a_hand_written_evaluation(trained, corpus):
    """The report's held-out numbers come from Trainer.evaluate + bilm_perplexity_metrics (batch outputs concatenated
    by Trainer); recompute them with a plain loop over the same padded stream."""
    output, report = trained
    model = ELMoForPreTraining.from_pretrained(output).eval()
    vocabulary = ELMoWordVocabulary.load(output)
    _, held_out = split_held_out(load_sentences([corpus], "moses"), 0.1, seed=0)
    assert len(held_out) == report["num_held_out_sentences"]
    stream = WindowedBiLMStream(held_out, vocabulary, num_rows=ROWS, window_size=WINDOW, shuffle=False, remainder="pad")
    totals, counts = torch.zeros(2, dtype=torch.float64), torch.zeros(2, dtype=torch.long)
    state = None  # carried from window to window, as bilm-tf does
    with torch.no_grad():
        for batch in stream.batches():
            result = model(**batch, lstm_state=state, return_lstm_state=True)
            state = result.lstm_state
            totals += result.negative_log_likelihood.double()
            counts += result.num_predictions
    expected = perplexity_from_totals(totals, counts)
    for direction in DIRECTIONS:
        assert report["held_out"][f"num_{direction}_predictions"] == expected[f"num_{direction}_predictions"]
        assert report["held_out"][f"{direction}_perplexity"] == pytest.approx(expected[f"{direction}_perplexity"], rel=1e-4)
    assert report["held_out_unigram"] == unigram_perplexity(vocabulary, held_out)


def test_output_loads_with_auto_classes(trained):
    output, report = trained
    pretraining_model = AutoModelForPreTraining.from_pretrained(output)
    assert isinstance(pretraining_model, ELMoForPreTraining)
    bilm = AutoModel.from_pretrained(output)
    assert isinstance(bilm, ELMoModel)
    for name, tensor in bilm.state_dict().items():
        assert torch.equal(tensor, pretraining_model.elmo.state_dict()[name]), name
    tokenizer = AutoTokenizer.from_pretrained(output)
    assert isinstance(tokenizer, ELMoTokenizer)
    vocabulary = ELMoWordVocabulary.load(output)
    assert vocabulary.counts is not None and len(vocabulary) == pretraining_model.config.word_vocab_size
    assert (output / PRETRAINING_OPTIONS_FILE_NAME).is_file() and (output / "checkpoint-40").is_dir()


def test_hdf5_export_converts_back_bit_exact(trained, tmp_path):
    """The issue's proof: HF -> options.json + weights.hdf5 -> HF gives every biLM parameter back bit for bit (the LM
    softmax is not part of the original weight file; scalar mixes are not trained by pre-training)."""
    output, report = trained
    hdf5_dir = output / "hdf5"
    assert report["hdf5_dir"] == str(hdf5_dir)
    assert sorted(path.name for path in hdf5_dir.iterdir()) == [MARKER_NAME, "options.json", "vocab.txt", "weights.hdf5"]
    converted_dir = convert_allennlp_to_hf(hdf5_dir / "options.json", hdf5_dir / "weights.hdf5", tmp_path / "back").output_dir
    converted = ELMoModel.from_pretrained(converted_dir).state_dict()
    original = AutoModel.from_pretrained(output).state_dict()
    assert set(converted) == set(original)
    compared = [name for name in original if not name.startswith("scalar_mixes.")]
    assert [name for name in original if name not in compared] == ["scalar_mixes.0.scalar_weights", "scalar_mixes.0.gamma"]
    for name in compared:
        assert original[name].dtype == converted[name].dtype and torch.equal(original[name], converted[name]), name


def test_ctrl_c_saves_a_checkpoint_and_resume_continues(corpus, tmp_path, monkeypatch, capsys):
    output = tmp_path / "interrupted"
    calls = {"train": 0}
    original_forward = ELMoForPreTraining.forward

    def forward_then_ctrl_c(self, *args, **kwargs):
        if self.training:
            calls["train"] += 1
            if calls["train"] == 3:
                os.kill(os.getpid(), signal.SIGINT)  # as if the user pressed Ctrl-C during step 3
        return original_forward(self, *args, **kwargs)

    monkeypatch.setattr(ELMoForPreTraining, "forward", forward_then_ctrl_c)
    handler_before = signal.getsignal(signal.SIGINT)
    arguments = pretrain_args(corpus, output, "--max-steps", 12, "--save-steps", 100, "--eval-steps", 0)
    assert main(arguments) == EXIT_INTERRUPTED
    error = capsys.readouterr().err
    assert "--resume" in error and "checkpoint-3" in error
    assert (output / "checkpoint-3").is_dir() and not (output / REPORT_FILE_NAME).exists()
    assert signal.getsignal(signal.SIGINT) is handler_before  # the run's Ctrl-C handler is removed again
    monkeypatch.setattr(ELMoForPreTraining, "forward", original_forward)

    # Resuming with other options is refused, naming them.
    assert main([*pretrain_args(corpus, output, "--max-steps", 12), "--batch-size", "4", "--resume"]) == EXIT_USAGE_ERROR
    assert "batch_size: was 8, now 4" in capsys.readouterr().err
    # The seed decides the held-out split and the sentence order: a resume with another one would train on other data.
    assert main([*arguments, "--seed", "7", "--resume"]) == EXIT_USAGE_ERROR
    assert "seed: was 0, now 7" in capsys.readouterr().err

    assert main([*arguments, "--resume"]) == 0
    report = json.loads((output / REPORT_FILE_NAME).read_text())
    assert report["resumed_from"] == "checkpoint-3" and report["steps"] == 12
    state = json.loads((output / "trainer_state.json").read_text())
    assert state["global_step"] == 12 and max(entry["step"] for entry in state["log_history"] if "loss" in entry) > 3
    assert (output / "model.safetensors").is_file() and (output / "checkpoint-12").is_dir()


@pytest.mark.parametrize("signal_number, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_real_ctrl_c_in_a_subprocess_exits_130_after_saving_a_checkpoint(corpus, tmp_path, signal_number, code):
    """SIGTERM is handled as Ctrl-C is (a checkpoint at the step boundary), exit 143 (``common.sigterm_as_ctrl_c``)."""
    output = tmp_path / "sigint"
    command = [sys.executable, "-m", "elmo_hf_cli", *pretrain_args(corpus, output, "--max-steps", 100_000, "--eval-steps", 0)]
    process = subprocess.Popen(
        command, cwd=REPOSITORY_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        for line in process.stdout:  # Trainer prints each log; the first loss means training is under way
            if "'loss'" in line:
                break
        process.send_signal(signal_number)
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == code, stderr[-2000:]
    checkpoints = sorted(output.glob("checkpoint-*"))
    assert len(checkpoints) == 1 and f"the latest checkpoint is {checkpoints[0]}" in stderr and "--resume" in stderr
    assert (checkpoints[0] / "model.safetensors").is_file() and (checkpoints[0] / "optimizer.pt").is_file()


def test_sentence_regime_runs_end_to_end(corpus, tmp_path):
    output = tmp_path / "per-sentence"
    assert main(pretrain_args(corpus, output, "--regime", "sentence", "--max-steps", 6, "--eval-steps", 3)) == 0
    report = json.loads((output / REPORT_FILE_NAME).read_text())
    assert report["regime"] == "sentence" and report["steps"] == 6
    for direction in DIRECTIONS:  # label_boundary_positions: n + 1 predictions per sentence, as the unigram baseline
        assert report["held_out"][f"num_{direction}_predictions"] == report["held_out_unigram"][f"num_{direction}_predictions"]
        assert math.isfinite(report["held_out"][f"{direction}_perplexity"])


def test_refusals(corpus, tmp_path, capsys):
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "notes.txt").write_text("mine")
    assert main(pretrain_args(corpus, existing, "--max-steps", 2)) == EXIT_USAGE_ERROR
    assert f"output {existing} exists and is not empty" in capsys.readouterr().err
    assert main(pretrain_args(corpus, existing, "--max-steps", 2, "--overwrite")) == EXIT_USAGE_ERROR
    assert "deletes nothing else (--overwrite included)" in capsys.readouterr().err and (existing / "notes.txt").is_file()

    assert main(pretrain_args(corpus, tmp_path / "fresh", "--max-steps", 2, "--resume")) == EXIT_USAGE_ERROR
    assert f"{tmp_path / 'fresh'} holds no checkpoint" in capsys.readouterr().err

    for config, message in (
        ("huge", "neither a preset"),
        (tmp_path / "broken.json", "is not valid JSON"),
        (tmp_path / "bad-field.json", "projection_dim"),
    ):
        (tmp_path / "broken.json").write_text("{not json")
        (tmp_path / "bad-field.json").write_text(json.dumps({"projection_dim": -1}))
        arguments = pretrain_args(corpus, tmp_path / "out", "--max-steps", 2)
        arguments[arguments.index("tiny")] = str(config)
        assert main(arguments) == EXIT_USAGE_ERROR
        assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_export_without_the_conversion_package_says_what_to_run_before_training(corpus, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "elmo_hf.conversion.convert_hf_to_allennlp", None)  # as if not importable
    assert main(pretrain_args(corpus, tmp_path / "out", "--max-steps", 2, "--export-hdf5")) == EXIT_USAGE_ERROR
    error = capsys.readouterr().err
    assert "elmo-hf export --model DIR --output DIR/hdf5" in error
    assert "pip install 'elmo-hf[convert]'" in error and not (tmp_path / "out").exists()


def test_config_files_config_json_and_original_options_json(tmp_path):
    ELMoConfig(**CONFIG_PRESETS["tiny"], word_vocab_size=50).save_pretrained(tmp_path / "model")
    config = load_pretraining_config(tmp_path / "model" / "config.json")
    assert config.projection_dim == CONFIG_PRESETS["tiny"]["projection_dim"]

    options = {**tiny_options(), "dropout": 0.1, "n_negative_samples_batch": 16, "n_tokens_vocab": 100}
    (tmp_path / "options.json").write_text(json.dumps(options))
    config = load_pretraining_config(tmp_path / "options.json")
    assert (config.projection_dim, config.lm_dropout, config.softmax_num_samples) == (8, 0.1, 16)
    with pytest.raises(PretrainingError, match="model_type"):
        (tmp_path / "bert.json").write_text(json.dumps({"model_type": "bert"}))
        load_pretraining_config(tmp_path / "bert.json")


def test_unigram_baseline_by_hand():
    # Training counts: 2 sentences, words a a b, one rare word -> <UNK>: <S>=2 </S>=2 <UNK>=1 a=2 b=1.
    vocabulary = ELMoWordVocabulary.from_sentences([["a", "a", "b"], ["c"]], min_count=1, max_size=5)
    assert vocabulary.words == ("<S>", "</S>", "<UNK>", "a", "b") and vocabulary.counts == (2, 2, 1, 2, 1)
    result = unigram_perplexity(vocabulary, [["a", "z"]])  # forward targets a <UNK> </S>; backward a <UNK> <S>
    # Forward classes exclude <S>: total 6; backward exclude </S>: total 6.
    forward = -(math.log(2 / 6) + math.log(1 / 6) + math.log(2 / 6)) / 3
    assert result["forward_perplexity"] == pytest.approx(math.exp(forward))
    assert result["backward_perplexity"] == pytest.approx(math.exp(forward))
    assert result["num_forward_predictions"] == 3 and result["forward_smoothing"] == "none"
    # No <UNK> in training and an unknown held-out word: add-one smoothing instead of an infinite perplexity.
    smoothed = unigram_perplexity(ELMoWordVocabulary.from_sentences([["a", "b"]]), [["z"]])
    assert smoothed["forward_smoothing"] == "add-one" and math.isfinite(smoothed["forward_perplexity"])


@pytest.mark.parametrize("content", [b"", b"\n  \n\n"])
def test_a_corpus_without_words_is_named_and_leaves_nothing_behind(tmp_path, content, capsys):
    corpus = tmp_path / "empty.txt"
    corpus.write_bytes(content)
    assert main(pretrain_args(corpus, tmp_path / "new" / "out", "--max-steps", 2)) == EXIT_USAGE_ERROR
    assert f"{corpus}: no sentence with at least one word" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["empty.txt"]  # no output, no parent, no lock


def test_structured_corpora_train_like_text(tmp_path, corpus):
    """pretrain reads every format embed reads: the same sentences as JSON lines give the same vocabulary."""
    lines = [line for line in corpus.read_text(encoding="utf-8").splitlines()]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"sentence": line}) + "\n" for line in lines), encoding="utf-8")
    arguments = pretrain_args(tmp_path / "corpus.jsonl", tmp_path / "json-run", "--max-steps", 1, "--eval-steps", 0, "--text-column", "sentence")
    assert main(arguments) == 0
    assert main(pretrain_args(corpus, tmp_path / "text-run", "--max-steps", 1, "--eval-steps", 0)) == 0
    assert ELMoWordVocabulary.load(tmp_path / "json-run") == ELMoWordVocabulary.load(tmp_path / "text-run")


def test_a_directory_of_shards_trains_like_its_text_and_a_bad_shard_is_named(tmp_path, corpus, capsys):
    """--corpus DIR reads the 1B Word Benchmark's layout (shards without an extension, in name order): the same
    sentences as one file give the same vocabulary and report; the run's directory holds only what it records."""
    lines = corpus.read_text(encoding="utf-8").splitlines()
    shards = tmp_path / "training-monolingual.tokenized.shuffled"
    shards.mkdir()
    for index, start in enumerate(range(0, len(lines), 500)):
        (shards / f"news.en-{index + 1:05d}-of-00003").write_text("".join(f"{line}\n" for line in lines[start : start + 500]), encoding="utf-8")
    assert main(pretrain_args(shards, tmp_path / "shard-run", "--max-steps", 1, "--eval-steps", 0)) == 0
    assert main(pretrain_args(corpus, tmp_path / "text-run", "--max-steps", 1, "--eval-steps", 0)) == 0
    assert ELMoWordVocabulary.load(tmp_path / "shard-run") == ELMoWordVocabulary.load(tmp_path / "text-run")
    reports = [json.loads((tmp_path / run / REPORT_FILE_NAME).read_text()) for run in ("shard-run", "text-run")]
    assert reports[0]["held_out"] == reports[1]["held_out"] and reports[0]["num_train_sentences"] == reports[1]["num_train_sentences"]
    recorded = json.loads((tmp_path / "shard-run" / MARKER_NAME).read_text())["files"]
    on_disk = {str(path.relative_to(tmp_path / "shard-run")) for path in (tmp_path / "shard-run").rglob("*") if path.is_file()}
    assert on_disk - {MARKER_NAME} == set(recorded)  # no token file, no temporary file left

    (shards / "news.en-00002-of-00003").write_bytes(b"fine words\nbad \xff byte\n")
    capsys.readouterr()
    assert main(pretrain_args(shards, tmp_path / "bad-run", "--max-steps", 1)) == EXIT_USAGE_ERROR
    assert "news.en-00002-of-00003 line 2: not valid UTF-8" in capsys.readouterr().err
    assert not (tmp_path / "bad-run").exists()


def test_overwrite_keeps_what_no_run_recorded_even_inside_its_own_folders(corpus, tmp_path, capsys):
    """Names prove nothing: `my_analysis.py` matches `*.py`, `checkpoint-best-by-hand/` matches `checkpoint-*`, but
    no run's record lists them, so --overwrite deletes nothing and names each."""
    output = tmp_path / "run"
    assert main(pretrain_args(corpus, output, "--max-steps", 2, "--save-steps", 1)) == 0
    for mine in ["my_analysis.py", "checkpoint-best-by-hand/MY_NOTES.txt", "checkpoint-1/MY_NOTES.txt"]:
        (output / mine).parent.mkdir(exist_ok=True)
        (output / mine).write_text("mine")
        assert main(pretrain_args(corpus, output, "--max-steps", 2, "--overwrite")) == EXIT_USAGE_ERROR
        assert f"recorded writing (or changed since): {mine}; " in capsys.readouterr().err
        assert (output / mine).read_text() == "mine"
        (output / mine).unlink()
    (output / "checkpoint-best-by-hand").rmdir()
    assert main(pretrain_args(corpus, output, "--max-steps", 2, "--overwrite")) == 0


def test_a_run_killed_before_its_first_checkpoint_is_started_again_with_overwrite(corpus, tmp_path, capsys):
    """Killed (SIGKILL) as training starts: a plain run and --resume both point to --overwrite (they used to send
    the user from one to the other), and --overwrite deletes what the killed run recorded and starts again."""
    import os
    import signal

    from elmo_hf.pretraining.trainer import ELMoPreTrainingTrainer

    output = tmp_path / "run"

    def killed_before_training():
        ELMoPreTrainingTrainer.train = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
        main(pretrain_args(corpus, output, "--max-steps", 2))

    status = run_in_forked_child(killed_before_training)
    assert os.WIFSIGNALED(status), status
    assert (output / PRETRAINING_OPTIONS_FILE_NAME).is_file() and not list(output.glob("checkpoint-*"))
    capsys.readouterr()
    assert main(pretrain_args(corpus, output, "--max-steps", 2)) == EXIT_USAGE_ERROR
    error = capsys.readouterr().err
    assert "stopped before its first checkpoint (nothing to resume); pass --overwrite to replace it" in error
    assert main(pretrain_args(corpus, output, "--max-steps", 2, "--resume")) == EXIT_USAGE_ERROR
    assert "start it again with --overwrite" in capsys.readouterr().err
    assert main(pretrain_args(corpus, output, "--max-steps", 2, "--overwrite")) == 0


def test_overwrite_keeps_the_previous_run_whole_until_the_new_one_completes(corpus, tmp_path, capsys, caplog):
    """`pretrain --overwrite` (in place): killed after its first checkpoint, the previous run is whole aside and a
    plain run is refused naming both; --resume completes the new run and only then deletes the previous one. An
    --overwrite that succeeds deletes the previous run at its end and says so."""
    import os

    from ..storage.test_output_directory import run_killed_at, tree_of

    output = tmp_path / "run"
    assert main(pretrain_args(corpus, output, "--max-steps", 1)) == 0
    old = tree_of(output)
    new_run = ["--max-steps", 2, "--save-steps", 1]
    # recorded:1 after the first files, recorded:2 after checkpoint-1
    assert run_killed_at("recorded:2", lambda: main(pretrain_args(corpus, output, *new_run, "--overwrite")))
    aside = sorted(tmp_path.glob(".run.*.replaced"))
    assert [tree_of(path) for path in aside] == [old] and (output / "checkpoint-1").is_dir()
    capsys.readouterr()
    assert main(pretrain_args(corpus, output, *new_run)) == EXIT_USAGE_ERROR
    error = capsys.readouterr().err
    assert f"{output} holds the unfinished output of a run that replaced it" in error and str(aside[0]) in error
    caplog.clear()
    assert main(pretrain_args(corpus, output, *new_run, "--resume")) == 0
    assert f"is complete: deleted the previous output (kept at {aside[0]}" in caplog.text
    assert sorted(os.listdir(tmp_path)) == ["run"] and (output / REPORT_FILE_NAME).is_file()

    caplog.clear()
    assert main(pretrain_args(corpus, output, "--max-steps", 1, "--overwrite")) == 0
    assert "is complete: deleted the previous output" in caplog.text and sorted(os.listdir(tmp_path)) == ["run"]


def test_every_pretrain_option_reaches_a_field_of_the_options():
    """`elmo-hf pretrain` passes each option given to the `PretrainingOptions` field of its name (two renamed): an
    option without a field would be dropped without a word."""
    import argparse
    import dataclasses

    from elmo_hf_cli import build_parser
    from elmo_hf.pretraining.options import PretrainingOptions
    from elmo_hf_cli.pretrain import RENAMED_OPTIONS

    (commands,) = [action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)]
    destinations = {action.dest for action in commands.choices["pretrain"]._actions} - {"help", "no_progress"}
    fields = {field.name for field in dataclasses.fields(PretrainingOptions)}
    assert {RENAMED_OPTIONS.get(name, name) for name in destinations} <= fields
    assert len(destinations) == 37  # every option of the command line's table before it was read by name
