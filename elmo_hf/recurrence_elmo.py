"""The biLM's recurrence: how each LSTM layer direction is computed, and the one selector that picks the way.

The definition is ``modeling_elmo.ELMoLstmLayer.reference_forward`` (TF's LSTMCell with a projection and clipping;
gates in PyTorch's order, TF's run-time forget bias):

    gates = x_t W_x + b + h_{t-1} W_h                                       # (B, 4D): input, forget, candidate, output
    c_t = clip(sigmoid(f + forget_gate_bias) * c_{t-1} + sigmoid(i) * tanh(g), cell_clip)
    h_t = clip((sigmoid(o) * tanh(c_t)) W_P, projection_clip)               # (B, P): output and recurrent state

Three implementations compute it, all tested against the definition on every architecture variant:

* ``"reference"``: ``ELMoLstmLayer.reference_forward`` in ``ELMoEncoder.reference_forward``'s loop, the definition;
* ``"fast"``: ``fast_recurrence_elmo.fast_encoder_forward``, inference only: the whole biLM over packed batches,
  pre-packed weights, each step's work in place (tests/test_fast_elmo.py);
* ``"training"``: ``lstm_window_forward`` (this module), while gradients are recorded on windows that are real at
  every step (pre-training): the same loop as one autograd node with a hand-written backward
  (tests/test_fast_training_elmo.py).

``select_route`` is the one place that chooses among them, for the biLM (``ELMoEncoder.forward``) and for the token
layer (``ELMoCharacterEmbeddings.forward``, whose fast and training routes are ``token_cache_elmo.py``'s, with and
without the cache); ``ELMoModel.set_inference_path`` gives it the user's choice.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from transformers.utils import logging

from .int8_elmo import int8_unavailable_reason

logger = logging.get_logger(__name__)

INFERENCE_PATHS = ("auto", "fast", "reference")
FAST_PATH_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
FAST_PATH_DEVICE_TYPES = ("cpu", "cuda")


# ----------------------------------------------------------------------------------------------------------------------
# The selector
# ----------------------------------------------------------------------------------------------------------------------


def select_route(
    inference_path: str,
    module: nn.Module,
    inputs: Sequence[torch.Tensor],
    active_dropout: float = 0.0,
    lengths: torch.LongTensor | None = None,
) -> str:
    """How ``module`` (the token layer, or the biLM with ``lengths``) computes this call on ``inputs``: ``"fast"``,
    ``"training"`` or ``"reference"`` (the module docstring).

    ``inference_path="reference"``: always the reference route; ``"fast"``: always the fast one (raises
    ``RuntimeError`` when it cannot run); ``"auto"``: the fast route whenever it can run, otherwise (saying why once
    in the log) the training route while gradients are recorded (for the biLM only on windows without padding:
    ``training_window_unavailable_reason``), else the reference route.

    Args:
        inputs: the call's tensors; for the biLM the first is the first layer's input (batch, time, P).
        active_dropout: the probability of the module's training-mode dropout (the fast route has none).
        lengths: (batch,) real positions per row, for the biLM.
    """
    if inference_path == "reference":
        return "reference"
    reason = fast_path_unavailable_reason(module, inputs, active_dropout)
    if reason is None:
        return "fast"
    if inference_path == "fast":
        raise RuntimeError(f"{type(module).__name__}: the fast inference path was requested but cannot run: {reason}.")
    message = f"{type(module).__name__}: using the reference path because {reason}."
    # Training is expected to run without the fast route: say so quietly; anything else deserves a warning.
    if module.training:
        logger.info_once(message)
    else:
        logger.warning_once(message)
    if not torch.is_grad_enabled():
        return "reference"
    if lengths is not None and training_window_unavailable_reason(module, inputs[0], lengths) is not None:
        return "reference"
    return "training"


def fast_path_unavailable_reason(module: nn.Module, inputs: Sequence[torch.Tensor], active_dropout: float = 0.0) -> str | None:
    """Why the fast route cannot run ``module`` on ``inputs`` now, or None when it can. ``active_dropout``: the
    probability of the module's training-mode dropout (the fast route has none)."""
    parameter = next(module.parameters())
    if torch.is_grad_enabled() and (
        any(p.requires_grad for p in module.parameters()) or any(t.requires_grad for t in inputs)
    ):
        return "gradients are being recorded (the fast path is inference-only: use torch.no_grad() or torch.inference_mode())"
    if module.training and active_dropout > 0:
        return "training-mode dropout is active (call model.eval() for inference)"
    if parameter.device.type not in FAST_PATH_DEVICE_TYPES:
        return f"it supports devices {FAST_PATH_DEVICE_TYPES}, not {parameter.device.type!r}"
    if parameter.dtype not in FAST_PATH_DTYPES:
        return f"it supports dtypes {FAST_PATH_DTYPES}, not {parameter.dtype}"
    if getattr(module, "int8_matmuls", False):  # the biLM's int8 kernels (ELMoModel.set_inference_path(int8=True))
        return int8_unavailable_reason(parameter.device, parameter.dtype)
    return None


def training_window_unavailable_reason(module: nn.Module, inputs: torch.Tensor, lengths: torch.LongTensor) -> str | None:
    """Why ``lstm_window_forward`` cannot run the LSTM layers of ``module`` on ``inputs`` (batch, time, I) now, or
    None when it can: gradients recorded, float32 without autocast, every row real at every step."""
    if not torch.is_grad_enabled():
        return "no gradients are recorded"
    if inputs.dtype != torch.float32 or any(weight.dtype != torch.float32 for weight in module.parameters()):
        return f"it computes in float32 only, not {inputs.dtype}"
    if torch.is_autocast_enabled(inputs.device.type):
        return "autocast is on (it computes in float32 only)"
    if inputs.shape[1] == 0 or not bool((lengths >= inputs.shape[1]).all()):
        return "some rows end before the last step (padding)"
    return None


def parameter_key(module: nn.Module) -> tuple:
    """Changes whenever a parameter of ``module`` is replaced, moved, cast or modified in place (the key of the
    fast routes' derived data: cached token vectors, prepared LSTM weights)."""
    return tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in module.parameters())


def without_final_steps(
    layer_outputs: list[torch.Tensor], lengths: torch.LongTensor, backward_reading_order: bool = False
) -> list[torch.Tensor]:
    """``layer_outputs`` (L tensors (batch, time, 2P)) with zeros at each direction's last read position: the forward
    half at position ``length - 1`` (</S>), the backward half at position 0 (<S>), or at ``length - 1`` when its
    outputs stay in its own reading order (``backward_token_embeddings``). What the fast route leaves there when it
    skips those steps; rows of length 0 are unchanged."""
    time, half = layer_outputs[0].shape[1], layer_outputs[0].shape[2] // 2
    positions = torch.arange(time, device=lengths.device).unsqueeze(0)  # (1, T)
    forward_last = positions == (lengths - 1).unsqueeze(1)  # (B, T)
    backward_last = forward_last if backward_reading_order else (positions == 0) & (lengths > 0).unsqueeze(1)
    dropped = torch.cat(
        [forward_last.unsqueeze(-1).expand(-1, -1, half), backward_last.unsqueeze(-1).expand(-1, -1, half)], dim=-1
    )  # (B, T, 2P)
    return [output.masked_fill(dropped, 0.0) for output in layer_outputs]


# ----------------------------------------------------------------------------------------------------------------------
# What the fast and the training routes share
# ----------------------------------------------------------------------------------------------------------------------


# Device types on which tanh is computed as 2 sigmoid(2x) - 1 (four passes) instead of with torch.tanh (one): faster
# on CPU, at most 2.4e-7 off (docs/design/numerics.md; figures in docs/results/fast-path-constants.md).
TANH_BY_SIGMOID_DEVICES = ("cpu",)


def tanh_into(values: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out = tanh(values)`` (float32, same shape), the faster way on this device (``TANH_BY_SIGMOID_DEVICES``)."""
    if values.device.type not in TANH_BY_SIGMOID_DEVICES:
        return torch.tanh(values, out=out)
    return torch.mul(values, 2.0, out=out).sigmoid_().mul_(2.0).sub_(1.0)


# ----------------------------------------------------------------------------------------------------------------------
# The training route: one layer direction over a window, with a hand-written backward
# ----------------------------------------------------------------------------------------------------------------------
# One autograd node per layer direction: the forward keeps each step's gates, cell and output; the backward runs the
# recurrence in reverse with one small matmul per step for the state's gradient (and one for the projection's), and
# computes the weight gradients of all steps at once as two large matmuls. The reference path's autograd graph instead
# holds about fifteen nodes per step and accumulates each weight gradient step by step.


def lstm_window_forward(
    gate_inputs: torch.Tensor,
    initial_state: tuple[torch.Tensor, torch.Tensor],
    recurrent_weight: torch.Tensor,
    projection_weight: torch.Tensor | None,
    forget_gate_bias: float,
    cell_clip: float | None,
    projection_clip: float | None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """``ELMoLstmLayer.reference_forward`` on rows real at every step, from its gate inputs on.

    Args:
        gate_inputs: (batch, time, 4D), every step's ``input_to_gates(inputs)``, gates in PyTorch's order (input,
            forget, candidate, output).
        initial_state: (hidden (batch, P), cell (batch, D)).
        recurrent_weight: (4D, P), ``state_to_gates.weight``; projection_weight: (P, D) or None (P == D).
        forget_gate_bias, cell_clip, projection_clip: as in ``ELMoLstmLayer``.

    Returns:
        outputs (batch, time, P) and the state after the last step (hidden (batch, P), cell (batch, D)).
    """
    hidden, cell = initial_state
    outputs, final_hidden, final_cell = _LstmWindow.apply(
        gate_inputs, hidden, cell, recurrent_weight, projection_weight, forget_gate_bias, cell_clip, projection_clip
    )
    return outputs, (final_hidden, final_cell)


class _LstmWindow(torch.autograd.Function):
    """One layer direction over a window: forward step by step without a graph, backward by hand (see above).

    Saved for the backward, time-major: the activated gates (T, B, 4D), the cell before its clip, tanh of the clipped
    cell and the unprojected output o * tanh(c) (T, B, D) each, the projection before its clip and the outputs
    (T, B, P) each: about 8 x (B x D) floats per step.
    """

    @staticmethod
    def forward(ctx, gate_inputs, hidden, cell, recurrent_weight, projection_weight, forget_gate_bias, cell_clip, projection_clip):
        batch, time, four_cells = gate_inputs.shape
        cells = four_cells // 4
        initial_hidden, initial_cell = hidden, cell
        gates = gate_inputs.transpose(0, 1).contiguous()  # (T, B, 4D), each step's pre-activations, then activations
        # TF's run-time forget bias, added to every step's forget block at once (the reference adds it step by step).
        gates[:, :, cells : 2 * cells] += forget_gate_bias
        cells_before_clip = gates.new_empty(time, batch, cells)
        tanh_cells = gates.new_empty(time, batch, cells)
        unprojected = gates.new_empty(time, batch, cells)
        projected = gates.new_empty(time, batch, hidden.shape[1]) if projection_weight is not None else None
        outputs = gates.new_empty(time, batch, hidden.shape[1])
        for step in range(time):
            # (out= rather than addmm_: FLOP counters see it.)
            step_gates = torch.addmm(gates[step], hidden, recurrent_weight.t(), out=gates[step])  # (B, 4D)
            step_gates[:, : 2 * cells].sigmoid_()  # input, forget
            candidate_gate = step_gates[:, 2 * cells : 3 * cells]
            tanh_into(candidate_gate, candidate_gate)  # in place (TANH_BY_SIGMOID_DEVICES)
            step_gates[:, 3 * cells :].sigmoid_()  # output
            input_gate, forget_gate, candidate, output_gate = step_gates.chunk(4, dim=1)
            cell = torch.mul(forget_gate, cell, out=cells_before_clip[step]).addcmul_(input_gate, candidate)
            if cell_clip is not None:
                cell = cell.clamp(-cell_clip, cell_clip)
            tanh_into(cell, tanh_cells[step])
            hidden = torch.mul(output_gate, tanh_cells[step], out=unprojected[step])  # (B, D)
            if projection_weight is not None:
                hidden = torch.mm(hidden, projection_weight.t(), out=projected[step])  # (B, P)
            if projection_clip is not None:
                hidden = torch.clamp(hidden, -projection_clip, projection_clip, out=outputs[step])
            else:
                hidden = outputs[step].copy_(hidden)
        ctx.clips = (cell_clip, projection_clip)
        ctx.save_for_backward(
            gates, cells_before_clip, tanh_cells, unprojected, projected, outputs, initial_hidden, initial_cell,
            recurrent_weight, projection_weight,
        )
        # The final state as tensors of their own (not views of the saved buffers).
        return outputs.transpose(0, 1), hidden.clone(), cell.clone()

    @staticmethod
    def backward(ctx, grad_outputs, grad_final_hidden, grad_final_cell):
        (
            gates, cells_before_clip, tanh_cells, unprojected, projected, outputs, initial_hidden, initial_cell,
            recurrent_weight, projection_weight,
        ) = ctx.saved_tensors
        cell_clip, projection_clip = ctx.clips
        time = gates.shape[0]
        grad_outputs = grad_outputs.transpose(0, 1)  # (T, B, P)
        grad_gates = torch.empty_like(gates)  # (T, B, 4D)
        grad_projected = torch.empty_like(outputs) if projection_weight is not None else None  # (T, B, P)
        # The clamps' gradient masks and the previous cells, for all steps at once.
        before_projection_clip = projected if projection_weight is not None else unprojected
        projection_mask = within(before_projection_clip, projection_clip) if projection_clip is not None else None
        cell_mask = within(cells_before_clip, cell_clip) if cell_clip is not None else None
        previous_cells = torch.cat([initial_cell.unsqueeze(0), clipped(cells_before_clip[:-1], cell_clip)])  # (T, B, D)
        grad_hidden, grad_cell = grad_final_hidden, grad_final_cell  # into the state after `step`
        for step in reversed(range(time)):
            grad_output = grad_outputs[step] + grad_hidden  # (B, P)
            if projection_mask is not None:
                grad_output = grad_output * projection_mask[step]
            if projection_weight is not None:
                grad_projected[step] = grad_output
                grad_unprojected = grad_output @ projection_weight  # (B, D)
            else:
                grad_unprojected = grad_output
            input_gate, forget_gate, candidate, output_gate = gates[step].chunk(4, dim=1)
            grad_step_gates = grad_gates[step].chunk(4, dim=1)
            torch.ops.aten.sigmoid_backward.grad_input(grad_unprojected * tanh_cells[step], output_gate, grad_input=grad_step_gates[3])
            grad_cell = grad_cell + torch.ops.aten.tanh_backward.default(grad_unprojected * output_gate, tanh_cells[step])
            if cell_mask is not None:
                grad_cell = grad_cell * cell_mask[step]
            previous_cell = previous_cells[step]
            torch.ops.aten.sigmoid_backward.grad_input(grad_cell * candidate, input_gate, grad_input=grad_step_gates[0])
            torch.ops.aten.sigmoid_backward.grad_input(grad_cell * previous_cell, forget_gate, grad_input=grad_step_gates[1])
            torch.ops.aten.tanh_backward.grad_input(grad_cell * input_gate, candidate, grad_input=grad_step_gates[2])
            grad_cell = grad_cell * forget_gate
            grad_hidden = grad_gates[step] @ recurrent_weight  # (B, P)
        # The weight gradients of all steps at once: (T x B) rows each.
        previous_outputs = torch.cat([initial_hidden.unsqueeze(0), outputs[:-1]])  # (T, B, P)
        grad_recurrent_weight = grad_gates.flatten(0, 1).t() @ previous_outputs.flatten(0, 1)  # (4D, P)
        grad_projection_weight = (
            grad_projected.flatten(0, 1).t() @ unprojected.flatten(0, 1) if projection_weight is not None else None
        )  # (P, D)
        return (
            grad_gates.transpose(0, 1), grad_hidden, grad_cell, grad_recurrent_weight, grad_projection_weight,
            None, None, None,
        )


def within(values: torch.Tensor, clip: float) -> torch.Tensor:
    """1.0 where ``-clip <= values <= clip``, else 0.0: the gradient mask of ``values.clamp(-clip, clip)``."""
    return ((values >= -clip) & (values <= clip)).to(values.dtype)


def clipped(values: torch.Tensor, clip: float | None) -> torch.Tensor:
    return values if clip is None else values.clamp(-clip, clip)


__all__ = [
    "FAST_PATH_DEVICE_TYPES",
    "FAST_PATH_DTYPES",
    "INFERENCE_PATHS",
    "TANH_BY_SIGMOID_DEVICES",
    "fast_path_unavailable_reason",
    "lstm_window_forward",
    "parameter_key",
    "select_route",
    "tanh_into",
    "training_window_unavailable_reason",
    "without_final_steps",
]
