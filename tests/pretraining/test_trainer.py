"""pretraining/trainer.py: the LSTM state carried between windows by the training loop (one per stream), the
exact perplexity of a whole evaluation stream, and a resume that continues the carried state."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from elmo_hf import bilm_perplexity_metrics
from elmo_hf.modeling_elmo_pretraining import perplexity_from_totals
from elmo_hf.pretraining.data import WindowedBiLMStream
from elmo_hf.pretraining.trainer import (
    CARRIED_STATE_FILE_NAME,
    CHECKPOINT_COMPLETE_FILE_NAME,
    CHECKPOINT_IN_PROGRESS_FILE_NAME,
    CarriedLstmState,
    ELMoPreTrainingTrainer,
    checkpoint_problem,
    checkpoints_of,
    latest_complete_checkpoint,
)
from elmo_hf.corpus.vocabulary import ELMoWordVocabulary

from ..helpers import TOY_SENTENCES, pretraining_model, stream_totals, trainer_arguments


@pytest.fixture(scope="module")
def vocabulary() -> ELMoWordVocabulary:
    return ELMoWordVocabulary.from_sentences(TOY_SENTENCES)


def test_train_and_eval_streams_carry_separate_states(vocabulary):
    model = pretraining_model(len(vocabulary))
    stream = WindowedBiLMStream(TOY_SENTENCES * 3, vocabulary, num_rows=2, window_size=3, shuffle=False)
    batches = list(stream.batches())
    carried = CarriedLstmState()
    with torch.no_grad():
        carried.keep("train", 0, model.train()(**batches[0], return_lstm_state=True).lstm_state)
        eval_totals = stream_totals(model.eval(), stream, carried)  # a whole evaluation between two training windows
        model.train()(**batches[1], lstm_state=carried.state_for("train", 1, num_rows=2))  # still follows window 0
    fresh = pretraining_model(len(vocabulary)).eval()
    torch.testing.assert_close(eval_totals[0], stream_totals(fresh, stream)[0])


def test_trainer_trains_on_windows_and_evaluates_exact_perplexity(vocabulary, tmp_path):
    model = pretraining_model(len(vocabulary))
    train_stream = WindowedBiLMStream(TOY_SENTENCES * 4, vocabulary, num_rows=4, window_size=5, seed=0)
    eval_stream = WindowedBiLMStream(TOY_SENTENCES, vocabulary, num_rows=2, window_size=5, shuffle=False, remainder="pad")
    arguments = trainer_arguments(tmp_path, learning_rate=1e-2, max_steps=12, per_device_train_batch_size=4, per_device_eval_batch_size=2)
    trainer = ELMoPreTrainingTrainer(
        model=model, args=arguments, train_dataset=train_stream, eval_dataset=eval_stream, compute_metrics=bilm_perplexity_metrics
    )
    before = trainer.evaluate()
    trainer.train()
    after = trainer.evaluate()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert losses[-1] < losses[0]
    assert after["eval_perplexity"] < before["eval_perplexity"]
    # Trainer's metric is the exact perplexity of the whole evaluation stream.
    nll, counts = stream_totals(model.eval(), eval_stream)
    exact = perplexity_from_totals(nll, counts)
    assert after["eval_forward_perplexity"] == pytest.approx(exact["forward_perplexity"], rel=1e-5)
    assert after["eval_backward_perplexity"] == pytest.approx(exact["backward_perplexity"], rel=1e-5)
    assert after["eval_num_forward_predictions"] == sum(len(words) + 1 for words in TOY_SENTENCES)


def test_resuming_from_a_checkpoint_continues_the_carried_state_exactly(vocabulary, tmp_path):
    """A run stopped at a checkpoint and resumed ends with the same weights as one run straight through: the
    checkpoint records the carried LSTM state of the training stream, so the next window continues where it was."""
    stream = WindowedBiLMStream(TOY_SENTENCES * 6, vocabulary, num_rows=3, window_size=4, seed=0)
    assert stream.num_batches >= 6

    def run(output_dir, max_steps, resume=False):
        model = pretraining_model(len(vocabulary))
        arguments = trainer_arguments(
            output_dir, learning_rate=1e-2, max_steps=max_steps, per_device_train_batch_size=3, save_strategy="steps",
            save_steps=3, num_train_epochs=1, lr_scheduler_type="constant",
        )
        trainer = ELMoPreTrainingTrainer(model=model, args=arguments, train_dataset=stream)
        trainer.train(resume_from_checkpoint=True if resume else None)
        return model, trainer

    straight, _ = run(tmp_path / "straight", max_steps=6)
    run(tmp_path / "stopped", max_steps=3)
    checkpoint = tmp_path / "stopped" / "trainer" / "checkpoint-3"
    assert (checkpoint / CARRIED_STATE_FILE_NAME).is_file()
    resumed, trainer = run(tmp_path / "stopped", max_steps=6, resume=True)
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=name)
    # A file the checkpoint's record lists is missing: it is not resumed from.
    for later in (tmp_path / "stopped" / "trainer").glob("checkpoint-6"):
        shutil.rmtree(later)
    (checkpoint / CARRIED_STATE_FILE_NAME).unlink()
    assert checkpoint_problem(checkpoint) == f"{CARRIED_STATE_FILE_NAME}, which {CHECKPOINT_COMPLETE_FILE_NAME} lists, is missing"
    with pytest.raises(ValueError, match="holds no complete checkpoint to resume from"):
        run(tmp_path / "stopped", max_steps=6, resume=True)
    # Without the saved state (a checkpoint as written before checkpoints had a record), the resumed windows start
    # cold and the weights differ.
    (checkpoint / CHECKPOINT_COMPLETE_FILE_NAME).unlink()
    assert checkpoint_problem(checkpoint) is None
    cold, _ = run(tmp_path / "stopped", max_steps=6, resume=True)
    assert not torch.equal(cold.softmax.weight, straight.softmax.weight)


def test_only_a_complete_checkpoint_is_resumed_from_and_one_is_always_kept(vocabulary, tmp_path):
    """Each checkpoint gets its record (every file's size) once written whole; older ones beyond save_total_limit
    go only then. A checkpoint marked in progress, without trainer_state.json, or with a file of another size than
    recorded is not resumed from: the newest complete one is, the incomplete one after it is deleted, and the run
    ends as one straight through. A resume at the last step trains nothing."""
    stream = WindowedBiLMStream(TOY_SENTENCES * 6, vocabulary, num_rows=3, window_size=4, seed=0)

    def run(output_dir, resume=False, max_steps=4):
        model = pretraining_model(len(vocabulary))
        arguments = trainer_arguments(
            output_dir, learning_rate=1e-2, max_steps=max_steps, per_device_train_batch_size=3, save_strategy="steps",
            save_steps=1, save_total_limit=1, lr_scheduler_type="constant",
        )
        trainer = ELMoPreTrainingTrainer(model=model, args=arguments, train_dataset=stream)
        return model, trainer.train(resume_from_checkpoint=True if resume else None)

    straight, _ = run(tmp_path / "straight")
    run(tmp_path / "stopped", max_steps=3)
    checkpoints = tmp_path / "stopped" / "trainer"
    assert [path.name for path in checkpoints_of(checkpoints)] == ["checkpoint-3"]
    assert json.loads((checkpoints / "checkpoint-3" / CHECKPOINT_COMPLETE_FILE_NAME).read_text())["global_step"] == 3
    assert not (checkpoints / "checkpoint-3" / CHECKPOINT_IN_PROGRESS_FILE_NAME).exists()

    # checkpoint-4 as a kill while writing it leaves it, in three ways
    half = checkpoints / "checkpoint-4"
    shutil.copytree(checkpoints / "checkpoint-3", half)
    (half / CHECKPOINT_COMPLETE_FILE_NAME).unlink()
    (half / CHECKPOINT_IN_PROGRESS_FILE_NAME).touch()
    assert checkpoint_problem(half) == "the run stopped while writing it (it is marked in progress)"
    (half / CHECKPOINT_IN_PROGRESS_FILE_NAME).unlink()
    assert checkpoint_problem(half) is None  # as written before checkpoints had a record: taken as it is
    (half / "trainer_state.json").unlink()
    assert checkpoint_problem(half) == "the run stopped while writing it (it has no trainer_state.json)"
    shutil.copy(checkpoints / "checkpoint-3" / CHECKPOINT_COMPLETE_FILE_NAME, half)
    assert checkpoint_problem(half) == f"trainer_state.json, which {CHECKPOINT_COMPLETE_FILE_NAME} lists, is missing"
    shutil.copy(checkpoints / "checkpoint-3" / "trainer_state.json", half)
    size = (half / "optimizer.pt").stat().st_size
    with open(half / "optimizer.pt", "r+b") as file:
        file.truncate(size // 2)
    assert checkpoint_problem(half) == f"optimizer.pt holds {size // 2} bytes, but {size} were written"
    assert latest_complete_checkpoint(checkpoints) == checkpoints / "checkpoint-3"

    resumed, output = run(tmp_path / "stopped", resume=True)
    assert output.global_step == 4 and [path.name for path in checkpoints_of(checkpoints)] == ["checkpoint-4"]
    assert checkpoint_problem(checkpoints / "checkpoint-4") is None
    for (name, a), b in zip(straight.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=name)

    again, output = run(tmp_path / "stopped", resume=True)  # at the last step: loaded, not trained
    assert output.global_step == 4 and [path.name for path in checkpoints_of(checkpoints)] == ["checkpoint-4"]
    for (name, a), b in zip(straight.state_dict().items(), again.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=name)
