"""Training loop pieces for ELMo pre-training: bilm-tf's LSTM state carried from window to window, outside the model.

In bilm-tf's regime (``WindowedBiLMStream``) row b of window k + 1 continues row b of window k, so each window starts
from the LSTM state the previous one ended in. ``ELMoForPreTraining`` keeps no state between calls (calling it twice on
one batch gives the same output); the state lives here:

- ``CarriedLstmState``: the state each stream ("train", "eval") is in, handed out for the next window and checked:
  windows must come in order, a stream restarts at window 0, batches must not be split.
- ``ELMoPreTrainingTrainer``: ``transformers.Trainer`` that passes that state into every windowed batch
  (``compute_loss``), keeps the detached state that comes out (truncated backpropagation through time), saves the
  training stream's state in every checkpoint (``carried_lstm_state.safetensors``) and restores it on resume, so a
  resumed run continues exactly where the interrupted one was. Per-sentence batches carry nothing.

**Several processes** (``torchrun``; DDP through accelerate). One optimizer step equals the one-process step on the
same global batch:

- Data: each process reads its own rows of the global batch (``WindowedBiLMStream(rank=, world_size=)``) from a data
  loader of its own; accelerate is not let re-shard or dispatch it (``get_train_dataloader``). Per-sentence batches
  are sharded by Trainer (accelerate's ``BatchSamplerShard``: process r takes batch r of each group of world_size
  consecutive batches of the seeded order, so the global batch is the one-process batch).
- Loss: DDP averages the processes' gradients, and a process's mean NLL would weight its tokens by its own count;
  ``get_batch_samples`` therefore counts the step's predictions per direction over ALL processes (one small
  all-reduce per step), and ``compute_loss`` returns ``world_size * mean over directions (process NLL sum /
  global count)``: averaged by DDP, exactly the global batch's bilm-tf loss, whatever the padding.
- Sampled softmax: the negatives come from a generator seeded from (seed, step, micro-batch), the same in every
  process and in a one-process run (bilm-tf draws one sample set per batch and direction). Dropout masks come from
  each process's torch generator and differ from a one-process run's.
- Checkpoints: the carried state of every process is gathered, in rank order, into one
  ``carried_lstm_state.safetensors`` holding the state of all ``num_rows`` rows (the layout of a one-process run);
  each process resumes from its own rows of it, so a run may resume with another number of processes that divides
  ``num_rows``.
- Evaluation: windowed, each process evaluates its own rows of the evaluation stream; per sentence, every process
  reads every batch and evaluates its own share of the batch's sentences (``prediction_step``). Trainer gathers the
  sums: every prediction counts once, and more processes evaluate faster.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate.data_loader import prepare_data_loader
from safetensors.torch import load_file, save_file
from torch.utils.data import DataLoader
from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from ..modeling_elmo import IGNORE_INDEX, LstmState
from .data import WindowedBiLMStream, rows_of_rank

logger = logging.getLogger(__name__)

CARRIED_STATE_FILE_NAME = "carried_lstm_state.safetensors"
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
        """Write ``stream``'s state (if any; ``carried``: a ``get``-shaped state to write instead, e.g. every
        process's rows gathered) to a safetensors file: ``hidden`` (L, 2, rows, P), ``cell`` (L, 2, rows, D)."""
        carried = carried if carried is not None else self._streams.get(stream)
        if carried is None:
            return
        next_window, (hidden, cell) = carried
        tensors = {"hidden": hidden.contiguous().cpu(), "cell": cell.contiguous().cpu()}
        save_file(tensors, str(path), metadata={"stream": stream, "next_window": str(next_window)})

    def load(self, stream: str, path: Path, device: torch.device, rows: range | None = None) -> None:
        """Restore ``stream``'s state from a file written by ``save``: its ``rows`` (default: all of them; a
        process of a data-parallel run takes its own block of the global batch's rows)."""
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as file:
            metadata = file.metadata()
        tensors = load_file(str(path))  # on the CPU (safetensors refuses torch's "cpu:0" of a multi-CPU run)
        hidden, cell = tensors["hidden"].to(device), tensors["cell"].to(device)
        if rows is not None:
            if rows.stop > hidden.shape[2]:
                raise ValueError(
                    f"{path} holds the carried LSTM state of {hidden.shape[2]} rows, but this process reads rows "
                    f"{rows.start} .. {rows.stop - 1} of the batch: resume with the batch size of the run that saved it"
                )
            hidden, cell = hidden[:, :, rows.start : rows.stop].contiguous(), cell[:, :, rows.start : rows.stop].contiguous()
        self._streams[stream] = (int(metadata["next_window"]), (hidden, cell))


class _SaveCarriedState(TrainerCallback):
    """Writes the training stream's carried state into each checkpoint folder Trainer has just saved: with several
    processes, every process's rows gathered in rank order (every process takes part; the main one writes)."""

    def __init__(self, trainer: ELMoPreTrainingTrainer):
        self.trainer = trainer

    def on_save(self, args, state, control, **kwargs):
        carried = self.trainer.carried_state.get(TRAIN_STREAM)
        if args.world_size > 1 and isinstance(self.trainer.train_dataset, WindowedBiLMStream):
            carried = self._gathered(carried)
        checkpoint = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if args.should_save and checkpoint.is_dir():
            self.trainer.carried_state.save(TRAIN_STREAM, checkpoint / CARRIED_STATE_FILE_NAME, carried)
        return control

    def _gathered(self, carried: tuple[int, LstmState] | None) -> tuple[int, LstmState] | None:
        """Every process's rows of the state, in rank order: (L, 2, num_rows, ...) each. The processes run the same
        windows in lockstep, so either all of them carry a state or none does."""
        if carried is None:
            return None
        next_window, state = carried
        gather = self.trainer.accelerator.gather  # concatenates along dim 0: move the rows there and back
        hidden, cell = (gather(tensor.movedim(2, 0).contiguous()).movedim(0, 2) for tensor in state)
        return next_window, (hidden, cell)


def negative_sampling_seed(seed: int, step: int, micro_batch: int) -> int:
    """The seed of the sampled softmax's negatives for micro-batch ``micro_batch`` of optimizer step ``step``
    (numpy's ``SeedSequence`` of the three: the same in every process and in every run with ``seed``)."""
    return int(np.random.SeedSequence([seed, step, micro_batch]).generate_state(1, dtype=np.uint64)[0])


class ELMoPreTrainingTrainer(Trainer):
    """``transformers.Trainer`` for ``ELMoForPreTraining`` that carries the LSTM state between windowed batches, and
    whose data-parallel steps equal one-process steps on the same global batch (see the module docstring). Use it
    like ``Trainer``; ``carried_state`` holds the state. With several processes, give each its own
    ``WindowedBiLMStream(..., rank=args.process_index, world_size=args.world_size)`` and
    ``per_device_train_batch_size = num_rows // world_size``, and freeze the biLM's scalar mixes, which the loss does
    not read (``model.elmo.scalar_mixes.requires_grad_(False)``, as ``elmo-hf pretrain`` does), or DDP waits for their
    gradients (otherwise: ``ddp_find_unused_parameters=True``)."""

    # compute_loss divides by the step's prediction counts (all micro-batches, all processes): Trainer must not
    # divide again by the gradient accumulation steps.
    loss_is_scaled_for_ga = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.carried_state = CarriedLstmState()
        self.add_callback(_SaveCarriedState(self))
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
        """A windowed stream: this process's rows. Per sentence: every batch of the whole set, of world_size times
        the per-device batch size, in every process (``prediction_step`` evaluates this process's share). Both as plain data loaders, so that accelerate's ``gather_for_metrics`` drops nothing from the
        per-batch sums the model outputs: it takes them for samples and cuts the last batch's to the number of
        samples left over (a last batch of one sentence lost its backward sums)."""
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
        from ``get_batch_samples``), ``world_size * mean over directions (NLL sum / count)`` (module docstring)."""
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

    # ---- resuming ----
    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs):
        """``Trainer.train``; when resuming, the training stream's carried state is restored from the checkpoint
        (this process's rows of it)."""
        checkpoint = resume_from_checkpoint
        if checkpoint is True:
            checkpoint = get_last_checkpoint(self.args.output_dir)
        if checkpoint:
            state_file = Path(checkpoint) / CARRIED_STATE_FILE_NAME
            if state_file.is_file():
                rows = self.train_dataset.rows if isinstance(self.train_dataset, WindowedBiLMStream) else None
                self.carried_state.load(TRAIN_STREAM, state_file, self.args.device, rows)
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)


__all__ = ["CARRIED_STATE_FILE_NAME", "CarriedLstmState", "ELMoPreTrainingTrainer", "negative_sampling_seed"]
