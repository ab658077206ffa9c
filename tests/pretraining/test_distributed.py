"""Data-parallel pre-training (torch.distributed through Trainer/accelerate): the row split of the windowed stream,
the carried state of every process in one checkpoint file, and real `torchrun` launches on loopback (gloo):

- a 2-process run's losses and weights equal a 1-process run's with the same global batch and streams;
- a 2-process run stopped at a checkpoint (launched as two "nodes": two torchrun agents, c10d rendezvous on
  127.0.0.1) and resumed ends bit-identical to an uninterrupted 2-process run, and the two-node run writes its output
  once (the main process's record lists every file);
- a 2-process launch killed (SIGKILL, every process) while writing a checkpoint resumes from the last complete one
  and ends bit-identical to the uninterrupted run; a run resumed at its last step trains no further step;
- a `kill -9` of the launch's process group stops its workers too (torchrun starts them in sessions of their own).

Each launch has a timeout, so a hang fails the test instead of blocking the run."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from elmo_hf import bilm_perplexity_metrics
from elmo_hf.corpus.vocabulary import ELMoWordVocabulary
from elmo_hf.modeling_elmo_pretraining import perplexity_from_totals
from elmo_hf.pretraining.data import DataCollatorForBiLM, WindowedBiLMStream, rows_of_rank
from elmo_hf.pretraining.run import REPORT_FILE_NAME
from elmo_hf.pretraining.trainer import (
    CARRIED_STATE_FILE_NAME,
    CarriedLstmState,
    ELMoPreTrainingTrainer,
    negative_sampling_seed,
)
from elmo_hf.storage.output_directory import MARKER_NAME
from elmo_hf_cli import main

from ..conftest import REPOSITORY_ROOT, TINYSHAKESPEARE
from ..helpers import TOY_SENTENCES, pretraining_model, torch_threads, trainer_arguments

LAUNCH_TIMEOUT_SECONDS = 240
SENTENCES = [line.split() for line in TINYSHAKESPEARE.read_text(encoding="utf-8").splitlines()[:300] if line.split()]


# ----------------------------------------------------------------------------------------------------------------
# The row split
# ----------------------------------------------------------------------------------------------------------------
def test_rows_of_rank_are_contiguous_blocks_covering_the_batch():
    assert [rows_of_rank(8, rank, 4) for rank in range(4)] == [range(0, 2), range(2, 4), range(4, 6), range(6, 8)]
    assert rows_of_rank(8, 0, 1) == range(8)


def test_rows_of_rank_refuses_an_uneven_split_naming_both_numbers():
    with pytest.raises(ValueError, match=r"the batch's 6 rows .* do not split evenly over 4 processes: use a multiple of 4 \(e\.g\. 4\)"):
        rows_of_rank(6, 0, 4)
    with pytest.raises(ValueError, match=r"rank must be in \[0, 2\) for world_size=2, got 2"):
        rows_of_rank(4, 2, 2)
    vocabulary = ELMoWordVocabulary.from_sentences(SENTENCES, min_count=1)
    with pytest.raises(ValueError, match="the batch's 5 rows"):
        WindowedBiLMStream(SENTENCES, vocabulary, num_rows=5, window_size=4, rank=1, world_size=2)


@pytest.mark.parametrize("remainder", ["drop", "pad"])
def test_the_processes_batches_side_by_side_are_the_one_process_batches(remainder):
    vocabulary = ELMoWordVocabulary.from_sentences(SENTENCES, min_count=2)
    common = dict(num_rows=6, window_size=7, seed=3, remainder=remainder)
    whole = WindowedBiLMStream(SENTENCES, vocabulary, **common)
    parts = [WindowedBiLMStream(SENTENCES, vocabulary, **common, rank=rank, world_size=3) for rank in range(3)]
    assert [part.rows for part in parts] == [range(0, 2), range(2, 4), range(4, 6)]
    assert {part.num_batches for part in parts} == {whole.num_batches} and len(parts[0]) == whole.num_batches * 2
    for epoch in (0, 1):
        for batch, *part_batches in zip(whole.batches(epoch), *(part.batches(epoch) for part in parts), strict=True):
            for key, value in batch.items():
                joined = torch.cat([part_batch[key] for part_batch in part_batches])
                if key == "row_index":  # each process numbers its own rows
                    assert torch.equal(joined, torch.arange(2).repeat(3))
                else:
                    assert torch.equal(joined, value), key
    # Iterating yields the process's rows batch-major, as a DataLoader with batch_size=len(rows) rebuilds them.
    first = next(iter(torch.utils.data.DataLoader(parts[1], batch_size=2)))
    assert torch.equal(first["input_ids"], next(parts[1].batches())["input_ids"])


def test_a_checkpoints_carried_state_gives_each_process_its_rows(tmp_path):
    """One file holds all rows (the one-process layout); a process loads its own block, whatever the number of
    processes; a batch larger than the file's is refused, naming both."""
    hidden, cell = torch.randn(2, 2, 6, 4), torch.randn(2, 2, 6, 5)
    saved = CarriedLstmState()
    saved.keep("train", 4, (hidden, cell))
    saved.save("train", tmp_path / CARRIED_STATE_FILE_NAME)
    for world_size in (1, 2, 3):
        for rank in range(world_size):
            rows = rows_of_rank(6, rank, world_size)
            loaded = CarriedLstmState()
            loaded.load("train", tmp_path / CARRIED_STATE_FILE_NAME, torch.device("cpu"), rows)
            next_window, (loaded_hidden, loaded_cell) = loaded.get("train")
            assert next_window == 5
            assert torch.equal(loaded_hidden, hidden[:, :, rows.start : rows.stop])
            assert torch.equal(loaded_cell, cell[:, :, rows.start : rows.stop])
    with pytest.raises(ValueError, match=r"holds the carried LSTM state of 6 rows, but this process reads rows 4 \.\. 7"):
        CarriedLstmState().load("train", tmp_path / CARRIED_STATE_FILE_NAME, torch.device("cpu"), rows_of_rank(8, 1, 2))


def test_negative_sampling_seed_depends_on_seed_step_and_micro_batch_only():
    seeds = {negative_sampling_seed(seed, step, micro) for seed in (0, 1) for step in (0, 1, 2) for micro in (0, 1)}
    assert len(seeds) == 12 and negative_sampling_seed(5, 7, 0) == negative_sampling_seed(5, 7, 0)


def test_per_sentence_evaluation_counts_a_last_batch_of_one_sentence(tmp_path):
    """5 sentences in batches of 4: accelerate's gather_for_metrics used to cut the last batch's sums (taken for
    samples of a padded batch) to one value, and the metrics failed; the trainer's own loader keeps every sum."""
    from datasets import Dataset

    vocabulary = ELMoWordVocabulary.from_sentences(TOY_SENTENCES)
    sentences = Dataset.from_dict({"words": TOY_SENTENCES[:5]})
    collator = DataCollatorForBiLM(vocabulary, label_boundary_positions=True)
    model = pretraining_model(len(vocabulary)).eval()
    trainer = ELMoPreTrainingTrainer(
        model=model, args=trainer_arguments(tmp_path, per_device_eval_batch_size=4, remove_unused_columns=False),
        eval_dataset=sentences, data_collator=collator, compute_metrics=bilm_perplexity_metrics,
    )
    metrics = trainer.evaluate()
    with torch.no_grad():
        output = model(**collator([{"words": words} for words in TOY_SENTENCES[:5]]))
    expected = perplexity_from_totals(output.negative_log_likelihood, output.num_predictions)
    assert metrics["eval_num_forward_predictions"] == expected["num_forward_predictions"] == sum(len(s) + 1 for s in TOY_SENTENCES[:5])
    assert metrics["eval_perplexity"] == pytest.approx(expected["perplexity"], rel=1e-5)


def sampled_softmax_trainer(tmp_path, vocabulary) -> tuple[ELMoPreTrainingTrainer, dict[str, torch.Tensor]]:
    """A trainer over a model with a sampled softmax (4 negatives), and one per-sentence batch."""
    model = pretraining_model(len(vocabulary), softmax_num_samples=4).train()
    trainer = ELMoPreTrainingTrainer(model=model, args=trainer_arguments(tmp_path, remove_unused_columns=False))
    batch = DataCollatorForBiLM(vocabulary, label_boundary_positions=True)([{"words": words} for words in TOY_SENTENCES[:4]])
    return trainer, batch


def test_the_training_loss_divides_by_the_steps_prediction_counts_over_all_processes(tmp_path):
    """``num_items_in_batch`` = the step's counts [forward, backward] over all processes: a process whose batch holds
    half of them contributes half its own mean (DDP then averages the processes' gradients)."""
    vocabulary = ELMoWordVocabulary.from_sentences(TOY_SENTENCES)
    trainer, batch = sampled_softmax_trainer(tmp_path, vocabulary)
    own_counts = torch.stack([(batch[name] != -100).sum() for name in ("next_word_labels", "previous_word_labels")])
    own, half = (
        trainer.compute_loss(trainer.model, batch, num_items_in_batch=counts) for counts in (own_counts, own_counts * 2)
    )
    assert trainer._sampling_step == (0, 1)  # two micro-batches of step 0: negatives of seeds (0, 0, 0) and (0, 0, 1)
    generator = torch.Generator().manual_seed(negative_sampling_seed(trainer.args.seed, 0, 1))
    assert torch.allclose(half, trainer.model(**batch, negative_sampling_generator=generator).loss / 2)
    generator = torch.Generator().manual_seed(negative_sampling_seed(trainer.args.seed, 0, 0))
    assert torch.allclose(own, trainer.model(**batch, negative_sampling_generator=generator).loss)
    _, counts = trainer.get_batch_samples(iter([batch, batch]), 2, torch.device("cpu"))
    assert torch.equal(counts, own_counts * 2)


def test_the_negatives_depend_on_seed_and_step_not_on_the_global_generator(tmp_path):
    vocabulary = ELMoWordVocabulary.from_sentences(TOY_SENTENCES)
    trainer, batch = sampled_softmax_trainer(tmp_path, vocabulary)
    losses = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        trainer._sampling_step = (-1, 0)  # the first micro-batch of the step again
        losses.append(trainer.compute_loss(trainer.model, batch))
    assert torch.equal(losses[0], losses[1])
    trainer.state.global_step += 1
    assert not torch.equal(trainer.compute_loss(trainer.model, batch), losses[0])


# ----------------------------------------------------------------------------------------------------------------
# Real launches
# ----------------------------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch_environment() -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items() if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    environment.update(
        PYTHONPATH=str(REPOSITORY_ROOT), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1"
    )
    return environment


def torchrun(launcher: list[str], arguments: list[str]) -> subprocess.Popen:
    command = [sys.executable, "-m", "torch.distributed.run", *launcher, "-m", "elmo_hf_cli", *arguments]
    return subprocess.Popen(
        command, cwd=REPOSITORY_ROOT, env=launch_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )


def finished(*processes: subprocess.Popen) -> list[str]:
    """The processes' output after they all exit 0 within the timeout (killed and failed otherwise)."""
    outputs = []
    for process in processes:
        try:
            output, _ = process.communicate(timeout=LAUNCH_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            for each in processes:
                os.killpg(each.pid, 9)
            pytest.fail(f"a torchrun launch hung for {LAUNCH_TIMEOUT_SECONDS} s: {process.args}")
        assert process.returncode == 0, output[-4000:]
        outputs.append(output)
    return outputs


def pretrain_arguments(corpus: Path, output: Path, *extra) -> list[str]:
    """A tiny model, 4 global rows of 10 positions, sampled softmax (the negatives must agree across processes), no
    dropout (its masks differ between a 1- and a 2-process run), a constant learning rate (so that stopping at step
    2 and resuming to 4 is the same schedule as running to 4), bilm-tf's Adagrad (its step is about lr x gradient: Adam
    scales every element's step to about lr, so an element whose gradient is nearly all cancellation turns the
    rounding of the 2-process gradient sum into a visible weight difference)."""
    return [
        "pretrain", "--corpus", str(corpus), "--output", str(output), "--config", "tiny", "--batch-size", "4",
        "--window-size", "10", "--held-out-fraction", "0.1", "--train-eval-sentences", "40", "--softmax-samples", "20",
        "--dropout", "0", "--lr-scheduler", "constant", "--warmup-ratio", "0",
        "--optimizer", "adagrad", "--save-steps", "2", "--eval-steps", "0",
        "--logging-steps", "1", "--threads", "1", "--no-progress", *map(str, extra),
    ]


def weights(output: Path) -> dict[str, torch.Tensor]:
    return load_file(str(output / "model.safetensors"))


def report(output: Path) -> dict:
    return json.loads((output / REPORT_FILE_NAME).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "shakespeare-600.txt"
    path.write_text("\n".join(TINYSHAKESPEARE.read_text(encoding="utf-8").splitlines()[:600]) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def two_process_run(corpus, tmp_path_factory) -> Path:
    """4 steps, 2 processes on one machine, uninterrupted."""
    output = tmp_path_factory.mktemp("two") / "run"
    launcher = ["--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    finished(torchrun(launcher, pretrain_arguments(corpus, output, "--max-steps", 4)))
    return output


def test_two_processes_train_like_one_process_with_the_same_global_batch(corpus, tmp_path, two_process_run):
    one = tmp_path / "one"
    with torch_threads(1):
        assert main(pretrain_arguments(corpus, one, "--max-steps", 4)) == 0
    one_report, two_report = report(one), report(two_process_run)
    assert [step for step, _ in two_report["loss_history"]] == [1, 2, 3, 4]
    np.testing.assert_allclose(
        [loss for _, loss in two_report["loss_history"]], [loss for _, loss in one_report["loss_history"]], rtol=1e-5
    )
    assert two_report["tokens_seen"] == one_report["tokens_seen"] == 4 * 4 * 10
    one_weights, two_weights = weights(one), weights(two_process_run)
    assert one_weights.keys() == two_weights.keys()
    for name, value in one_weights.items():
        torch.testing.assert_close(two_weights[name], value, rtol=1e-4, atol=1e-5, msg=name)
    # The held-out evaluation (each process its own rows, sums gathered) covers every prediction once.
    for key in ("num_forward_predictions", "num_backward_predictions"):
        assert two_report["held_out"][key] == one_report["held_out"][key]
    assert two_report["held_out"]["perplexity"] == pytest.approx(one_report["held_out"]["perplexity"], rel=1e-4)


@pytest.mark.slow  # three torchrun launches, about 60 s on 2 cores; CI runs it (`.ci/run`)
def test_a_two_node_run_stopped_at_a_checkpoint_and_resumed_ends_bit_identical(corpus, tmp_path, two_process_run):
    """Steps 1-2 on two "nodes" (two torchrun agents, one process each, c10d rendezvous on loopback), then steps
    3-4 resumed by 2 processes on one machine: the weights equal the uninterrupted run's bit for bit."""
    output = tmp_path / "resumed"
    endpoint = f"127.0.0.1:{free_port()}"
    launcher = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "two-nodes"]
    node_outputs = finished(*(torchrun(launcher, pretrain_arguments(corpus, output, "--max-steps", 2)) for _ in range(2)))

    # Written once, by the main process: one report printed, every file recorded in the output's marker.
    assert sum("Pre-trained ELMo" in node_output for node_output in node_outputs) == 1
    marker = json.loads((output / MARKER_NAME).read_text(encoding="utf-8"))
    on_disk = {str(path.relative_to(output)) for path in output.rglob("*") if path.is_file() and path.name != MARKER_NAME}
    assert on_disk == set(marker["files"])
    assert {"model.safetensors", f"checkpoint-2/{CARRIED_STATE_FILE_NAME}", "checkpoint-2/rng_state_1.pth"} <= on_disk
    carried = load_file(str(output / "checkpoint-2" / CARRIED_STATE_FILE_NAME))
    assert carried["hidden"].shape[2] == 4  # both processes' rows, gathered

    launcher = ["--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    finished(torchrun(launcher, pretrain_arguments(corpus, output, "--max-steps", 4, "--resume")))
    assert report(output)["resumed_from"] == "checkpoint-2" and report(output)["steps"] == 4
    resumed, uninterrupted = weights(output), weights(two_process_run)
    assert resumed.keys() == uninterrupted.keys()
    for name, value in uninterrupted.items():
        assert torch.equal(resumed[name], value), name


# A torchrun worker running `elmo-hf pretrain` (argv: WHERE CHECKPOINT PRETRAIN-ARGUMENTS...) whose main process kills
# the whole launch with SIGKILL (its torchrun agent, every worker, itself: `kill -9` of all of it at one moment) when it
# is about to write CHECKPOINT's trainer_state.json ("trainer-state") or its carried LSTM state ("carried-state"). The
# workers live in sessions of their own (torchrun starts them so), so a kill of the agent's group alone leaves them
# running.
KILLED_WHILE_WRITING_A_CHECKPOINT = """
import os, signal, sys
from pathlib import Path
from elmo_hf.pretraining import trainer
from transformers.trainer_callback import TrainerState
where, checkpoint = sys.argv[1], sys.argv[2]
def kill_the_launch():
    agent = os.getppid()
    for pid in [agent, *map(int, Path(f"/proc/{agent}/task/{agent}/children").read_text().split())]:
        if pid != os.getpid():
            os.kill(pid, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
def killing_in(checkpoint_of, write):
    def write_or_kill(*args, **kwargs):
        if Path(checkpoint_of(*args, **kwargs)).parent.name == checkpoint:
            kill_the_launch()
        return write(*args, **kwargs)
    return write_or_kill
if where == "trainer-state":
    TrainerState.save_to_json = killing_in(lambda state, path: path, TrainerState.save_to_json)
else:
    trainer.CarriedLstmState.save = killing_in(lambda carried, stream, path, *rest: path, trainer.CarriedLstmState.save)
sys.argv = ["elmo-hf", *sys.argv[3:]]
from elmo_hf_cli import command_line
command_line()
"""


def checkpoints(output: Path) -> list[str]:
    return sorted(path.name for path in output.glob("checkpoint-*"))


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the launch's processes through /proc (Linux)")
@pytest.mark.parametrize("where", [pytest.param("trainer-state", marks=pytest.mark.slow), "carried-state"])
def test_a_two_process_run_killed_while_writing_a_checkpoint_resumes_from_the_last_complete_one(
    corpus, tmp_path, two_process_run, where
):
    """Checkpoints at every step; the whole launch is killed (SIGKILL) while checkpoint-3 is being written: before
    its trainer_state.json, or after it but before the carried LSTM state. ``--resume`` continues from checkpoint-2,
    the last complete one (not from the half-written checkpoint-3, which a kill after its trainer_state.json made look
    complete: resumed without the carried state, the weights differed), and ends bit-identical to the uninterrupted
    run: 4 steps of 4, checkpoints 3 and 4, no other."""
    script = tmp_path / "killed_while_writing_a_checkpoint.py"
    script.write_text(KILLED_WHILE_WRITING_A_CHECKPOINT, encoding="utf-8")
    output = tmp_path / "killed"
    arguments = pretrain_arguments(corpus, output, "--max-steps", 4, "--save-steps", 1)
    launcher = ["--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    command = [sys.executable, "-m", "torch.distributed.run", *launcher, str(script), where, "checkpoint-3", *arguments]
    killed = subprocess.Popen(
        command, cwd=REPOSITORY_ROOT, env=launch_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )
    try:
        killed_output, _ = killed.communicate(timeout=LAUNCH_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(killed.pid, 9)
        pytest.fail(f"the launch to be killed hung for {LAUNCH_TIMEOUT_SECONDS} s")
    assert killed.returncode == -9, killed_output[-4000:]
    assert {"checkpoint-2", "checkpoint-3"} <= set(checkpoints(output)), killed_output[-4000:]
    assert (output / "checkpoint-3" / "trainer_state.json").is_file() == (where == "carried-state")
    assert not (output / "checkpoint-3" / CARRIED_STATE_FILE_NAME).exists()

    launcher = ["--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    finished(torchrun(launcher, [*arguments, "--resume"]))
    resumed = report(output)
    assert (resumed["resumed_from"], resumed["steps"], resumed["max_steps"]) == ("checkpoint-2", 4, 4)
    assert checkpoints(output) == ["checkpoint-3", "checkpoint-4"]
    for name, value in weights(two_process_run).items():
        assert torch.equal(weights(output)[name], value), name


def running(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, killed and not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow  # two torchrun launches
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="finds the launch's processes through /proc (Linux)")
def test_a_kill_of_the_launchs_process_group_stops_its_workers_and_the_run_resumes_to_the_same_weights(
    corpus, tmp_path, two_process_run
):
    """The issue's reproduction: ``kill -9`` of the torchrun launch's process group once checkpoint-2's
    trainer_state.json is on disk. torchrun starts its workers in sessions of their own: they trained on, finished the
    run, and ``--resume`` then trained a step more ("steps 5 of 4", checkpoint-5, other weights). Now the workers die
    with their agent, and the run resumed from the last complete checkpoint (1 or 2: the kill may land while 2 is
    written) ends bit-identical to the uninterrupted one, at step 4 of 4."""
    output = tmp_path / "killed"
    arguments = pretrain_arguments(corpus, output, "--max-steps", 4, "--save-steps", 1)
    launcher = ["--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    launch = torchrun(launcher, arguments)
    deadline = time.monotonic() + LAUNCH_TIMEOUT_SECONDS
    while not (output / "checkpoint-2" / "trainer_state.json").exists():
        assert launch.poll() is None and time.monotonic() < deadline, "the launch ended before checkpoint-2"
        time.sleep(0.002)
    workers = [int(pid) for pid in Path(f"/proc/{launch.pid}/task/{launch.pid}/children").read_text().split()]
    os.killpg(launch.pid, 9)
    launch.communicate(timeout=LAUNCH_TIMEOUT_SECONDS)
    deadline = time.monotonic() + 20
    while any(map(running, workers)) and time.monotonic() < deadline:
        time.sleep(0.05)
    survivors = [pid for pid in workers if running(pid)]
    for pid in survivors:
        os.kill(pid, 9)
    assert len(workers) == 2 and not survivors, "the workers outlived their torchrun agent"
    assert not (output / REPORT_FILE_NAME).exists() and "checkpoint-4" not in checkpoints(output), "the run went on"

    finished(torchrun(launcher[:-1] + [str(free_port())], [*arguments, "--resume"]))
    resumed = report(output)
    assert resumed["resumed_from"] in ("checkpoint-1", "checkpoint-2"), resumed["resumed_from"]
    assert (resumed["steps"], resumed["max_steps"]) == (4, 4) and checkpoints(output) == ["checkpoint-3", "checkpoint-4"]
    for name, value in weights(two_process_run).items():
        assert torch.equal(weights(output)[name], value), name


def test_resuming_a_run_whose_last_checkpoint_is_its_last_step_trains_no_further_step(corpus, tmp_path, two_process_run):
    """A run killed after its last checkpoint (checkpoint-4 of 4), in its final evaluation: ``--resume`` evaluates,
    saves and reports without training (Trainer, resumed at max_steps, trained one step more: "steps 5 of 4", a
    checkpoint-5 and other weights). Also where the kill missed the workers, which finished the run by themselves."""
    output = tmp_path / "finished"
    shutil.copytree(two_process_run, output)
    for name in ("model.safetensors", REPORT_FILE_NAME):
        (output / name).unlink()
    with torch_threads(1):
        assert main(pretrain_arguments(corpus, output, "--max-steps", 4, "--resume")) == 0
    resumed = report(output)
    assert (resumed["resumed_from"], resumed["steps"], resumed["max_steps"]) == ("checkpoint-4", 4, 4)
    assert resumed["tokens_seen"] == 4 * 4 * 10 and [step for step, _ in resumed["loss_history"]] == [1, 2, 3, 4]
    assert checkpoints(output) == ["checkpoint-2", "checkpoint-4"]
    for name, value in weights(two_process_run).items():
        assert torch.equal(weights(output)[name], value), name
    assert resumed["held_out"]["perplexity"] == pytest.approx(report(two_process_run)["held_out"]["perplexity"], rel=1e-5)


@pytest.mark.slow
def test_two_processes_train_like_one_process_per_sentence(corpus, tmp_path):
    """The per-sentence regime: Trainer shards the seeded sentence order (process r takes batch r of each group of
    2), so the global batch is the one-process batch; losses, weights and the exact held-out perplexity agree."""
    per_sentence = ["--regime", "sentence", "--max-steps", 3, "--eval-steps", 2]
    one, two = tmp_path / "one", tmp_path / "two"
    with torch_threads(1):
        assert main(pretrain_arguments(corpus, one, *per_sentence)) == 0
    launcher = ["--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    finished(torchrun(launcher, pretrain_arguments(corpus, two, *per_sentence)))
    one_report, two_report = report(one), report(two)
    np.testing.assert_allclose(
        [loss for _, loss in two_report["loss_history"]], [loss for _, loss in one_report["loss_history"]], rtol=1e-5
    )
    for name, value in weights(one).items():
        torch.testing.assert_close(weights(two)[name], value, rtol=1e-4, atol=1e-5, msg=name)
    for part in ("held_out", "train_sample"):
        assert two_report[part]["num_forward_predictions"] == one_report[part]["num_forward_predictions"]
        assert two_report[part]["perplexity"] == pytest.approx(one_report[part]["perplexity"], rel=1e-4)


def launch_failure(arguments: list[str]) -> str:
    """The output of a 2-process launch that must fail (within the timeout: no process may wait for another)."""
    launcher = ["--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    process = torchrun(launcher, arguments)
    try:
        output, _ = process.communicate(timeout=LAUNCH_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, 9)
        pytest.fail(f"a failing torchrun launch hung for {LAUNCH_TIMEOUT_SECONDS} s")
    assert process.returncode != 0
    return output


@pytest.mark.slow
def test_refusals_and_a_time_limit_reach_every_process(corpus, tmp_path, two_process_run):
    """A batch that does not split over the processes is refused before anything is written; an output directory
    the main process refuses fails the others with its message; a time limit stops every process at the same step."""
    output = launch_failure(pretrain_arguments(corpus, tmp_path / "odd", "--batch-size", 5, "--max-steps", 2))
    assert output.count("error: --batch-size: the batch's 5 rows (num_rows, --batch-size) do not split evenly over 2 processes") == 2
    assert not (tmp_path / "odd").exists()

    output = launch_failure(pretrain_arguments(corpus, two_process_run, "--max-steps", 2))
    assert "error: the main process (rank 0) could not open the output directory: output" in output

    timed = tmp_path / "timed"
    launcher = ["--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    finished(torchrun(launcher, pretrain_arguments(corpus, timed, "--max-steps", 1000, "--max-time-minutes", 0.0001)))
    assert report(timed)["stopped_early"].startswith("time limit") and report(timed)["steps"] < 1000


@pytest.mark.slow
def test_a_two_process_checkpoint_resumes_in_one_process(corpus, tmp_path, two_process_run):
    """The checkpoint's carried state holds every row: one process resumes all four rows' streams, and ends where the
    uninterrupted 2-process run ends (float rounding apart: the gradient sums run in another order)."""
    output = tmp_path / "fewer"
    launcher = ["--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(free_port())]
    finished(torchrun(launcher, pretrain_arguments(corpus, output, "--max-steps", 2)))
    with torch_threads(1):
        assert main(pretrain_arguments(corpus, output, "--max-steps", 4, "--resume")) == 0
    assert report(output)["resumed_from"] == "checkpoint-2"
    for name, value in weights(two_process_run).items():
        torch.testing.assert_close(weights(output)[name], value, rtol=1e-4, atol=1e-5, msg=name)


def in_a_process_group(script: str, directory: Path, *arguments) -> subprocess.CompletedProcess:
    """``script`` run by a fresh interpreter as ``python -c script STORE *arguments``, STORE the ``init_method`` of a
    one-process group: a new file in ``directory`` (no port to take, so tests that run at once never race for one)."""
    store = directory / "process-group-store"
    return subprocess.run(
        [sys.executable, "-c", script, store.as_uri(), *map(str, arguments)],
        capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_SECONDS, env=launch_environment(),
    )


# `elmo-hf pretrain` in a process whose run joins a process group, as torchrun's ranks do through the Trainer (here a
# stand-in for the run joins one and then fails), or in a program that made a group of its own first.
PRETRAIN_IN_A_PROCESS_GROUP = (
    "import sys, torch.distributed as dist\n"
    "import elmo_hf.pretraining.run as run\n"
    "from elmo_hf import ELMoHFError\n"
    "join = lambda: dist.init_process_group('gloo', init_method=sys.argv[1], rank=0, world_size=1)\n"
    "def a_run_that_joins_then_fails(options):\n"
    "    join()\n"
    "    raise ELMoHFError('the run failed')\n"
    "if sys.argv[4] == 'callers-group':\n"
    "    join()\n"
    "else:\n"
    "    run.pretrain = a_run_that_joins_then_fails\n"
    "from elmo_hf_cli import main\n"
    "code = main(['pretrain', '--corpus', sys.argv[2], '--output', sys.argv[3], '--no-progress'])\n"
    "print('exit', code, 'joined', dist.is_initialized())\n"
)


@pytest.mark.parametrize("whose, still_joined", [("the-runs-group", "False"), ("callers-group", "True")])
def test_the_pretrain_command_leaves_the_group_its_run_joined_and_only_that(tmp_path, whose, still_joined):
    """Also when the run fails (a stand-in run; with the caller's group: an empty corpus). A group left to the
    interpreter's exit once killed a finished rank with SIGABRT (`elmo_hf_cli.pretrain.leave_the_process_group`); a
    group the program made before running the command is the program's, and stays."""
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    result = in_a_process_group(PRETRAIN_IN_A_PROCESS_GROUP, tmp_path, empty, tmp_path / "run", whose)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-4:] == ["exit", "2", "joined", still_joined], result.stdout[-2000:]


# A process in a gloo group whose only holder left is a DistributedDataParallel wrapper in a reference cycle, as the
# Trainer leaves it after a torchrun rank's run; the collector stays off, as in the command's exit. torch.distributed.nn
# is imported before the group exists, as the command's imports do: imported later, its functions' default arguments
# would hold the group for good.
LEAVE_A_GROUP_HELD_BY_A_CYCLE = (
    "import gc, os, sys, torch, torch.distributed as dist, torch.distributed.nn\n"
    "from torch.nn.parallel import DistributedDataParallel\n"
    "dist.init_process_group('gloo', init_method=sys.argv[1], rank=0, world_size=1)\n"
    "model = DistributedDataParallel(torch.nn.Linear(2, 2))\n"
    "model(torch.ones(3, 2)).sum().backward()\n"
    "model.cycle = [model]\n"
    "del model\n"
    "gc.disable()\n"
    "from elmo_hf_cli.pretrain import leave_the_process_group\n"
    "def gloo_threads():\n"
    "    names = (open(f'/proc/self/task/{task}/comm').read().strip() for task in os.listdir('/proc/self/task'))\n"
    "    return sorted(name for name in names if 'gloo' in name)\n"
    "print('before', gloo_threads())\n"
    "leave_the_process_group()\n"
    "print('after', gloo_threads())\n"
)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads through /proc (Linux)")
def test_leaving_the_process_group_joins_its_threads_although_a_reference_cycle_held_it(tmp_path):
    """The gloo threads of a group left alive into the interpreter's finalization aborted a rank that had finished
    (`elmo_hf_cli.pretrain.leave_the_process_group`): after leaving, none of them runs."""
    result = in_a_process_group(LEAVE_A_GROUP_HELD_BY_A_CYCLE, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    before, after = result.stdout.splitlines()[-2:]
    assert "pt_gloo_runloop" in before, result.stdout  # the check sees the group's threads
    assert after == "after []", result.stdout
