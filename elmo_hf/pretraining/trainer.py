"""Training loop pieces for ELMo pre-training: bilm-tf's LSTM state carried from window to window, outside the model.

In bilm-tf's regime (``WindowedBiLMStream``) row b of window k + 1 continues row b of window k, so each window starts
from the LSTM state the previous one ended in. ``ELMoForPreTraining`` keeps no state between calls (calling it twice on
one batch gives the same output); the state lives here:

- ``CarriedLstmState``: the state each stream ("train", "eval") is in, handed out for the next window and checked:
  windows must come in order, a stream restarts at window 0, batches must not be split.
- ``ELMoPreTrainingTrainer``: ``transformers.Trainer`` that passes that state into every windowed batch
  (``compute_loss``), keeps the detached state that comes out (truncated backpropagation through time), saves the
  training stream's state in every checkpoint (``carried_lstm_state.safetensors``) and restores it on resume, so a
  resumed run continues exactly where the interrupted one was. Per-sentence batches pass through unchanged.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from ..modeling_elmo import LstmState

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

    def keep(self, stream: str, window: int, state: LstmState) -> None:
        """Store the state after window ``window``; detached: the next window does not backpropagate into it."""
        self._streams[stream] = (window + 1, (state[0].detach(), state[1].detach()))

    def reset(self, stream: str | None = None) -> None:
        """Forget the state of ``stream`` (of every stream by default)."""
        if stream is None:
            self._streams.clear()
        else:
            self._streams.pop(stream, None)

    def save(self, stream: str, path: Path) -> None:
        """Write ``stream``'s state (if any) to a safetensors file."""
        if stream not in self._streams:
            return
        next_window, (hidden, cell) = self._streams[stream]
        tensors = {"hidden": hidden.contiguous().cpu(), "cell": cell.contiguous().cpu()}
        save_file(tensors, str(path), metadata={"stream": stream, "next_window": str(next_window)})

    def load(self, stream: str, path: Path, device: torch.device) -> None:
        """Restore ``stream``'s state from a file written by ``save``."""
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as file:
            metadata = file.metadata()
        tensors = load_file(str(path), device=str(device))
        self._streams[stream] = (int(metadata["next_window"]), (tensors["hidden"], tensors["cell"]))


class _SaveCarriedState(TrainerCallback):
    """Writes the training stream's carried state into each checkpoint folder Trainer has just saved."""

    def __init__(self, carried_state: CarriedLstmState):
        self.carried_state = carried_state

    def on_save(self, args, state, control, **kwargs):
        checkpoint = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if args.should_save and checkpoint.is_dir():
            self.carried_state.save(TRAIN_STREAM, checkpoint / CARRIED_STATE_FILE_NAME)
        return control


class ELMoPreTrainingTrainer(Trainer):
    """``transformers.Trainer`` for ``ELMoForPreTraining`` that carries the LSTM state between windowed batches (see the
    module docstring). Use it like ``Trainer``; ``carried_state`` holds the state. Single process only for the windowed
    regime (a batch's rows must stay together with their state)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.carried_state = CarriedLstmState()
        self.add_callback(_SaveCarriedState(self.carried_state))

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ):
        if "backward_input_ids" not in inputs:  # per-sentence batches: nothing is carried
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if self.args.n_gpu > 1 or self.args.world_size > 1:
            raise ValueError(
                "the windowed regime carries each row's LSTM state to the next batch and runs in one process on one "
                f"device; this run has n_gpu={self.args.n_gpu}, world_size={self.args.world_size}"
            )
        stream = TRAIN_STREAM if model.training else EVAL_STREAM
        window_index = inputs.get("window_index")
        if window_index is None:
            raise ValueError("windowed batches need window_index (as WindowedBiLMStream yields) to carry the state")
        window, num_rows = int(window_index[0]), int(window_index.shape[0])
        state = self.carried_state.state_for(stream, window, num_rows)
        outputs = model(**inputs, lstm_state=state, return_lstm_state=True)
        self.carried_state.keep(stream, window, outputs.lstm_state)
        return (outputs.loss, outputs) if return_outputs else outputs.loss

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs):
        """``Trainer.train``; when resuming, the training stream's carried state is restored from the checkpoint."""
        checkpoint = resume_from_checkpoint
        if checkpoint is True:
            checkpoint = get_last_checkpoint(self.args.output_dir)
        if checkpoint:
            state_file = Path(checkpoint) / CARRIED_STATE_FILE_NAME
            if state_file.is_file():
                self.carried_state.load(TRAIN_STREAM, state_file, self.args.device)
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)


__all__ = ["CARRIED_STATE_FILE_NAME", "CarriedLstmState", "ELMoPreTrainingTrainer"]
