"""``transformers.Trainer`` for ELMo pre-training: bilm-tf's LSTM state carried from window to window outside the
model (``CarriedLstmState``), data-parallel steps equal to one-process steps, and checkpoints recorded complete so a
resumed run continues exactly. Why and how: docs/design/pretraining-trainer.md."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate.data_loader import prepare_data_loader
from safetensors import safe_open
from safetensors.torch import save_file
from torch.utils.data import DataLoader
from transformers import Trainer, TrainerState
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, TrainOutput, rotate_checkpoints

from ..modeling_elmo import IGNORE_INDEX, LstmState
from .data import WindowedBiLMStream, rows_of_rank

logger = logging.getLogger(__name__)

CARRIED_STATE_FILE_NAME = "carried_lstm_state.safetensors"
CHECKPOINT_COMPLETE_FILE_NAME = "checkpoint_complete.json"
CHECKPOINT_IN_PROGRESS_FILE_NAME = "checkpoint_in_progress"
TRAIN_STREAM, EVAL_STREAM = "train", "eval"


class CarriedLstmState:
    """The LSTM state carried between the windows of each stream (``"train"``, ``"eval"``).

    ``state_for(stream, window, num_rows)`` gives the state window ``window`` starts from: None (the model's initial
    state) at window 0, otherwise the state ``keep`` stored after window ``window - 1``. A window out of order, or with
    another number of rows, raises ``ValueError``; a window > 0 with no stored state (a run resumed from a checkpoint
    that has none) starts from the initial state with a warning.
    """

    def __init__(self):
        self._streams: dict[str, tuple[int, LstmState]] = {}  # stream -> (next window, state after the previous one)

    def state_for(self, stream: str, window: int, num_rows: int) -> LstmState | None:
        if window == 0:
            self._streams.pop(stream, None)
            return None
        if stream not in self._streams:
            logger.warning(
                "window %d of the %s stream arrives without a carried LSTM state; it starts from the initial state "
                "(a run resumed from a checkpoint saved without its carried state)",
                window,
                stream,
            )
            return None
        expected_window, state = self._streams[stream]
        if window != expected_window:
            raise ValueError(
                f"window_index {window} does not follow window {expected_window - 1} ({stream} stream): windowed "
                "batches must arrive in order (dataloader_num_workers=0, no shuffling), or call reset()."
            )
        if state[0].shape[2] != num_rows:
            raise ValueError(f"This window has {num_rows} rows but the carried state has {state[0].shape[2]}.")
        return state

    def get(self, stream: str) -> tuple[int, LstmState] | None:
        """``(next window, state after the previous one)`` of ``stream``, or None."""
        return self._streams.get(stream)

    def keep(self, stream: str, window: int, state: LstmState) -> None:
        """Store the state after window ``window``; detached: the next window does not backpropagate into it."""
        self._streams[stream] = (window + 1, (state[0].detach(), state[1].detach()))

    def reset(self, stream: str | None = None) -> None:
        """Forget the state of ``stream`` (of every stream by default)."""
        if stream is None:
            self._streams.clear()
        else:
            self._streams.pop(stream, None)

    def save(self, stream: str, path: Path, carried: tuple[int, LstmState] | None = None) -> None:
        """Write ``stream``'s state (or ``carried``, e.g. every process's rows gathered), if any, to a safetensors
        file: ``hidden`` (L, 2, rows, P), ``cell`` (L, 2, rows, D)."""
        carried = carried if carried is not None else self._streams.get(stream)
        if carried is None:
            return
        next_window, (hidden, cell) = carried
        tensors = {"hidden": hidden.contiguous().cpu(), "cell": cell.contiguous().cpu()}
        save_file(tensors, str(path), metadata={"stream": stream, "next_window": str(next_window)})

    def load(self, stream: str, path: Path, device: torch.device, rows: range | None = None) -> None:
        """Restore ``stream``'s state from a file written by ``save``: its ``rows`` (default: all of them)."""
        with safe_open(str(path), framework="pt") as file:  # on the CPU: safetensors refuses a multi-CPU run's "cpu:0"
            metadata = file.metadata()
            hidden, cell = (file.get_tensor(name).to(device) for name in ("hidden", "cell"))
        if rows is not None:
            if rows.stop > hidden.shape[2]:
                raise ValueError(
                    f"{path} holds the carried LSTM state of {hidden.shape[2]} rows, but this process reads rows "
                    f"{rows.start} .. {rows.stop - 1} of the batch: resume with the batch size of the run that saved it"
                )
            hidden, cell = hidden[:, :, rows.start : rows.stop].contiguous(), cell[:, :, rows.start : rows.stop].contiguous()
        self._streams[stream] = (int(metadata["next_window"]), (hidden, cell))


# Complete checkpoints: docs/design/pretraining-trainer.md, "Complete checkpoints".
def _checkpoint_step(path: Path) -> int | None:
    match = re.fullmatch(rf"{PREFIX_CHECKPOINT_DIR}-(\d+)", path.name)
    return int(match.group(1)) if match and path.is_dir() else None


def checkpoints_of(output_dir: str | Path) -> list[Path]:
    """The ``checkpoint-N`` folders of ``output_dir``, oldest (smallest N) first."""
    if not Path(output_dir).is_dir():
        return []
    found = [(step, path) for path in Path(output_dir).iterdir() if (step := _checkpoint_step(path)) is not None]
    return [path for _, path in sorted(found)]


def checkpoint_problem(checkpoint: str | Path) -> str | None:
    """None when ``checkpoint`` can be resumed from; otherwise why not, in words. A checkpoint is complete when its
    ``checkpoint_complete.json`` is there and every file it lists has the size written. A folder without that record
    is incomplete if it is marked ``checkpoint_in_progress`` or has no ``trainer_state.json``; a folder with neither
    mark but a ``trainer_state.json`` was written before checkpoints were marked, and is taken as it is."""
    checkpoint = Path(checkpoint)
    record_path = checkpoint / CHECKPOINT_COMPLETE_FILE_NAME
    try:
        if record_path.is_file():
            record = json.loads(record_path.read_text(encoding="utf-8"))
            for name, size in record["files"].items():
                path = checkpoint / name
                if not path.is_file():
                    return f"{name}, which {CHECKPOINT_COMPLETE_FILE_NAME} lists, is missing"
                if path.stat().st_size != size:
                    return f"{name} holds {path.stat().st_size} bytes, but {size} were written"
            return None
        if (checkpoint / CHECKPOINT_IN_PROGRESS_FILE_NAME).exists():
            return "the run stopped while writing it (it is marked in progress)"
        if not (checkpoint / TRAINER_STATE_NAME).is_file():
            return f"the run stopped while writing it (it has no {TRAINER_STATE_NAME})"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        return f"its {CHECKPOINT_COMPLETE_FILE_NAME} cannot be read ({error})"
    return None


def latest_complete_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest checkpoint of ``output_dir`` that ``checkpoint_problem`` finds complete, or None."""
    return next((path for path in reversed(checkpoints_of(output_dir)) if checkpoint_problem(path) is None), None)


def _begin_checkpoint(checkpoint: Path) -> None:
    """Mark ``checkpoint`` in progress (an earlier record of it goes: its files are about to be written again)."""
    checkpoint.mkdir(parents=True, exist_ok=True)
    (checkpoint / CHECKPOINT_COMPLETE_FILE_NAME).unlink(missing_ok=True)
    (checkpoint / CHECKPOINT_IN_PROGRESS_FILE_NAME).touch()


def _complete_checkpoint(checkpoint: Path, global_step: int, num_processes: int) -> None:
    """Record ``checkpoint`` as complete: every file it holds, with its size, once each is synced to disk (a machine
    that goes down must not leave a record of files it never wrote), in ``checkpoint_complete.json``, written whole
    (a temporary file renamed); then the in-progress mark goes."""
    files = {}
    for path in sorted(checkpoint.rglob("*")):
        name = path.relative_to(checkpoint).as_posix()
        if path.is_file() and name not in (CHECKPOINT_IN_PROGRESS_FILE_NAME, CHECKPOINT_COMPLETE_FILE_NAME):
            _sync(path)
            files[name] = path.stat().st_size
    record = {"global_step": global_step, "num_processes": num_processes, "files": files}
    temporary = checkpoint / f".{CHECKPOINT_COMPLETE_FILE_NAME}.tmp"
    temporary.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    _sync(temporary)
    os.replace(temporary, checkpoint / CHECKPOINT_COMPLETE_FILE_NAME)
    _sync(checkpoint)
    (checkpoint / CHECKPOINT_IN_PROGRESS_FILE_NAME).unlink(missing_ok=True)


def _sync(path: Path) -> None:
    """fsync a file or a folder (where the system allows a folder to be opened)."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def negative_sampling_seed(seed: int, step: int, micro_batch: int) -> int:
    """The seed of the sampled softmax's negatives for micro-batch ``micro_batch`` of optimizer step ``step``
    (numpy's ``SeedSequence`` of the three: the same in every process and in every run with ``seed``)."""
    return int(np.random.SeedSequence([seed, step, micro_batch]).generate_state(1, dtype=np.uint64)[0])


class ELMoPreTrainingTrainer(Trainer):
    """``transformers.Trainer`` for ``ELMoForPreTraining`` that carries the LSTM state between windowed batches
    (``carried_state``) and whose data-parallel steps equal one-process steps (docs/design/pretraining-trainer.md).
    With several processes, give each ``WindowedBiLMStream(..., rank=args.process_index, world_size=args.world_size)``
    and ``per_device_train_batch_size = num_rows // world_size``, and freeze the biLM's scalar mixes, which the loss
    does not read, or DDP waits for their gradients. ``before_checkpoint(folder)``, if given, is called in the main
    process before a checkpoint folder is created (every process waits for it); ``after_checkpoint()`` in every
    process once the checkpoint is complete."""

    # compute_loss divides by the step's prediction counts (all micro-batches, all processes): Trainer must not
    # divide again by the gradient accumulation steps.
    loss_is_scaled_for_ga = True

    def __init__(
        self,
        *args,
        before_checkpoint: Callable[[Path], None] | None = None,
        after_checkpoint: Callable[[], None] | None = None,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.before_checkpoint, self.after_checkpoint = before_checkpoint, after_checkpoint
        self.carried_state = CarriedLstmState()
        self._sampling_step = (-1, 0)  # (optimizer step, micro-batches drawn in it)

    # ---- data ----
    def get_train_dataloader(self) -> DataLoader:
        """A windowed stream is this process's own rows: its data loader goes through accelerate as if alone (device
        placement, ``set_epoch``) so that it is neither re-sharded nor dispatched from the main process."""
        if not isinstance(self.train_dataset, WindowedBiLMStream):
            return super().get_train_dataloader()
        stream = self._checked_stream(self.train_dataset, self._train_batch_size, "training")
        loader = self._stream_loader(stream)
        return prepare_data_loader(
            loader, self.args.device, num_processes=1, process_index=0, put_on_device=True, dispatch_batches=False
        )

    def get_eval_dataloader(self, eval_dataset=None) -> DataLoader:
        """A windowed stream: this process's rows. Per sentence: every batch of world_size times the per-device
        size, in every process (``prediction_step`` takes this process's share). Plain data loaders: accelerate's
        ``gather_for_metrics`` would cut the per-batch sums of a last batch to the samples left over."""
        dataset = self.eval_dataset if eval_dataset is None else eval_dataset
        if isinstance(dataset, str):
            dataset = self.eval_dataset[dataset]
        if isinstance(dataset, WindowedBiLMStream):
            return self._stream_loader(self._checked_stream(dataset, self.args.eval_batch_size, "evaluation"))
        if dataset is not None:
            return DataLoader(
                dataset, batch_size=self.args.eval_batch_size * self.args.world_size, collate_fn=self.data_collator,
                num_workers=0, pin_memory=self.args.dataloader_pin_memory,
            )
        return super().get_eval_dataloader(eval_dataset)

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        """Per sentence with several processes, every process reads the whole evaluation batch and evaluates its own
        share of its rows (``numpy.array_split``; a share may be empty): the gathered sums are the batch's, once."""
        if self.args.world_size == 1 or "backward_input_ids" in inputs:
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)
        batch_size = len(inputs["input_ids"])
        rows = np.array_split(np.arange(batch_size), self.args.world_size)[self.args.process_index]
        labels = tuple(inputs[name].detach() for name in self.label_names)  # the same shape in every process
        if len(rows) == 0:
            device = self.args.device
            nothing = (torch.zeros(2, device=device), torch.zeros(2, dtype=torch.long, device=device))
            return torch.zeros((), device=device), nothing, labels
        share = {key: value[rows[0] : rows[-1] + 1] for key, value in inputs.items()}
        loss, sums, _ = super().prediction_step(model, share, prediction_loss_only, ignore_keys)
        return loss, sums, labels

    def _stream_loader(self, stream: WindowedBiLMStream) -> DataLoader:
        return DataLoader(
            stream, batch_size=len(stream.rows), collate_fn=self.data_collator, num_workers=0,
            pin_memory=self.args.dataloader_pin_memory,
        )

    def _checked_stream(self, stream: WindowedBiLMStream, batch_size: int, what: str) -> WindowedBiLMStream:
        """``ValueError`` unless ``stream`` holds this process's rows and one batch of them is ``batch_size``."""
        rank, world_size = self.args.process_index, self.args.world_size
        try:
            expected = rows_of_rank(stream.num_rows, rank, world_size)
        except ValueError:  # num_rows does not split over the processes: no rows are right
            expected = None
        if stream.rows != expected:
            raise ValueError(
                f"the {what} stream reads rows {stream.rows.start} .. {stream.rows.stop - 1} of its {stream.num_rows}, "
                f"but this is process {rank} of {world_size}: build it with WindowedBiLMStream(..., rank={rank}, "
                f"world_size={world_size}) (num_rows must be a multiple of {world_size})"
            )
        if batch_size != len(stream.rows):
            raise ValueError(
                f"the {what} batch size per device is {batch_size}, but the {what} stream gives this process "
                f"{len(stream.rows)} rows per batch ({stream.num_rows} rows over {world_size} process(es)): set "
                f"per_device_{'train' if what == 'training' else 'eval'}_batch_size={len(stream.rows)}"
            )
        return stream

    # ---- loss ----
    def get_batch_samples(self, epoch_iterator, num_batches: int, device: torch.device):
        """The step's micro-batches and their prediction counts ``[forward, backward]`` summed over the micro-batches
        and over all processes (``compute_loss`` divides by them)."""
        batch_samples, _ = super().get_batch_samples(epoch_iterator, num_batches, device)
        counts = torch.zeros(2, dtype=torch.long, device=device)
        for batch in batch_samples:
            for direction, name in enumerate(("next_word_labels", "previous_word_labels")):
                counts[direction] += (batch[name] != IGNORE_INDEX).sum().to(device)
        if self.args.world_size > 1:
            counts = self.accelerator.reduce(counts, reduction="sum")
        return batch_samples, counts

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ):
        """The batch's bilm-tf loss; in training, with the step's global prediction counts (``num_items_in_batch``
        from ``get_batch_samples``), ``world_size * mean over directions (NLL sum / count)``."""
        extra: dict[str, Any] = {}
        if model.training:
            extra["negative_sampling_generator"] = self._negative_sampling_generator()
        windowed = "backward_input_ids" in inputs
        if windowed:
            stream = TRAIN_STREAM if model.training else EVAL_STREAM
            window_index = inputs.get("window_index")
            if window_index is None:
                raise ValueError("windowed batches need window_index (as WindowedBiLMStream yields) to carry the state")
            window, num_rows = int(window_index[0]), int(window_index.shape[0])
            extra.update(lstm_state=self.carried_state.state_for(stream, window, num_rows), return_lstm_state=True)
        outputs = model(**inputs, **extra)
        if windowed:
            self.carried_state.keep(stream, window, outputs.lstm_state)
        loss = outputs.loss
        if model.training and isinstance(num_items_in_batch, torch.Tensor) and num_items_in_batch.shape == (2,):
            global_counts = num_items_in_batch.to(outputs.negative_log_likelihood.device).clamp(min=1)
            loss = (outputs.negative_log_likelihood / global_counts).sum() * (self.accelerator.num_processes / 2)
        return (loss, outputs) if return_outputs else loss

    def _negative_sampling_generator(self) -> torch.Generator:
        """A generator for this micro-batch's sampled-softmax negatives, seeded by ``negative_sampling_seed``."""
        step, drawn = self._sampling_step
        drawn = drawn + 1 if step == self.state.global_step else 0
        self._sampling_step = (self.state.global_step, drawn)
        generator = torch.Generator(device=self.args.device)
        generator.manual_seed(negative_sampling_seed(self.args.seed, self.state.global_step, drawn))
        return generator

    # ---- checkpoints and resuming ----
    def _save_checkpoint(self, model, trial):
        """Trainer's checkpoint, the carried state, then (every process's part written) the record that makes it
        complete; only then are older checkpoints beyond ``save_total_limit`` deleted."""
        checkpoint = Path(self._get_output_dir(trial=trial)) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        if self.args.should_save and self.before_checkpoint is not None:
            self.before_checkpoint(checkpoint)
        if self.args.world_size > 1:  # no process writes into the folder before the main process has recorded it
            self.accelerator.wait_for_everyone()
        if self.args.should_save:
            _begin_checkpoint(checkpoint)
        save_total_limit, self.args.save_total_limit = self.args.save_total_limit, None  # Trainer rotates before
        try:  # the carried state and the record are written: rotated below instead
            super()._save_checkpoint(model, trial)
        finally:
            self.args.save_total_limit = save_total_limit
        carried = self.carried_state.get(TRAIN_STREAM)
        if self.args.world_size > 1 and isinstance(self.train_dataset, WindowedBiLMStream):
            carried = self._gathered(carried)
        if self.args.should_save:
            self.carried_state.save(TRAIN_STREAM, checkpoint / CARRIED_STATE_FILE_NAME, carried)
        self.accelerator.wait_for_everyone()  # every process's files (rng_state_{rank}.pth) are written
        if self.args.should_save:
            _complete_checkpoint(checkpoint, self.state.global_step, self.args.world_size)
            rotate_checkpoints(str(checkpoint.parent), save_total_limit, self.state.best_model_checkpoint, use_mtime=False)
        if self.after_checkpoint is not None:
            self.after_checkpoint()

    def _gathered(self, carried: tuple[int, LstmState] | None) -> tuple[int, LstmState] | None:
        """Every process's rows of the state, in rank order: (L, 2, num_rows, ...) each. The processes run the same
        windows in lockstep, so either all of them carry a state or none does."""
        if carried is None:
            return None
        next_window, state = carried
        gather = self.accelerator.gather  # concatenates along dim 0: move the rows there and back
        hidden, cell = (gather(tensor.movedim(2, 0).contiguous()).movedim(0, 2) for tensor in state)
        return next_window, (hidden, cell)

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs):
        """``Trainer.train``. Resuming (``True``: from ``latest_complete_checkpoint``; a path must be a complete
        checkpoint, or ``ValueError`` says what is wrong with it): the main process deletes the incomplete checkpoints
        after it, the training stream's carried state is restored (this process's rows of it), and a checkpoint that
        already holds the last step is loaded without training."""
        checkpoint = resume_from_checkpoint
        if checkpoint is True:
            checkpoint = latest_complete_checkpoint(self.args.output_dir)
            if checkpoint is None:
                raise ValueError(f"{self.args.output_dir} holds no complete checkpoint to resume from")
        if not checkpoint:
            return super().train(resume_from_checkpoint=None, **kwargs)
        checkpoint = Path(checkpoint)
        problem = checkpoint_problem(checkpoint)
        if problem is not None:
            raise ValueError(f"cannot resume from {checkpoint}: {problem}")
        if self.args.should_save:
            self._delete_incomplete_checkpoints_after(checkpoint)
        state_file = checkpoint / CARRIED_STATE_FILE_NAME
        if state_file.is_file():
            rows = self.train_dataset.rows if isinstance(self.train_dataset, WindowedBiLMStream) else None
            self.carried_state.load(TRAIN_STREAM, state_file, self.args.device, rows)
        state = TrainerState.load_from_json(str(checkpoint / TRAINER_STATE_NAME))
        max_steps = self._max_steps()
        if state.global_step >= max_steps:
            logger.warning(
                "%s holds step %d, and this training ends at step %d: nothing is left to train (its weights and "
                "state are loaded)", checkpoint, state.global_step, max_steps,
            )
            self._load_from_checkpoint(str(checkpoint))
            self.state = state
            return TrainOutput(state.global_step, 0.0, {})
        return super().train(resume_from_checkpoint=str(checkpoint), **kwargs)

    def _delete_incomplete_checkpoints_after(self, checkpoint: Path) -> None:
        step = _checkpoint_step(checkpoint)
        if step is None:  # not a checkpoint-N folder: none comes after it
            return
        for later in checkpoints_of(checkpoint.parent):
            problem = checkpoint_problem(later)
            if _checkpoint_step(later) > step and problem is not None:
                logger.warning("deleting %s, which is incomplete (%s); resuming from %s", later, problem, checkpoint.name)
                shutil.rmtree(later)

    def _max_steps(self) -> int:
        """The optimizer steps this training runs to, as Trainer counts them."""
        if self.args.max_steps > 0:
            return self.args.max_steps
        return self.set_initial_training_values(self.args, self.get_train_dataloader())[-1]


__all__ = [
    "CARRIED_STATE_FILE_NAME", "CHECKPOINT_COMPLETE_FILE_NAME", "CHECKPOINT_IN_PROGRESS_FILE_NAME", "CarriedLstmState",
    "ELMoPreTrainingTrainer", "checkpoint_problem", "checkpoints_of", "latest_complete_checkpoint",
    "negative_sampling_seed",
]
