"""The fast training path of ELMo: the computation of ``modeling_elmo.py`` with gradients, reorganised for speed.

``modeling_elmo.py`` is the definition (the *reference path*); ``fast_elmo.py`` is the inference-only fast path.
This module is what the model's LSTM layers run while gradients are recorded (pre-training, fine-tuning), chosen by
``ELMoLstmLayer.forward`` under ``inference_path="auto"``; ``"reference"`` turns it off. It computes the same outputs
and the same gradients up to float32 rounding (tested against the reference path on every architecture variant in
``tests/test_fast_training_elmo.py``). Nothing here changes *what* is computed, only the order and the amount of
repeated work.

Token layer
    Training runs ``fast_elmo.fast_character_embeddings`` without a cache (``ELMoCharacterEmbeddings.forward``): each
    distinct word of a batch once through the character CNN, on its own slots, rows padded to ``fast_elmo.cnn_rows``;
    it is differentiable, and the gradient of a repeated word is summed before the CNN (the gather's backward).

biLSTM (``lstm_window_forward``)
    One direction of one layer over rows that are real at every step (bilm-tf's training windows), as one autograd
    node with a backward written out by hand: the forward keeps each step's gates, cell and output; the backward runs
    the recurrence in reverse with one small matmul per step for the state's gradient (and one for the projection's),
    and computes the weight gradients of all steps at once as two large matmuls. The reference path's autograd graph
    instead holds about fifteen nodes per step, and accumulates each weight gradient step by step.
"""

from __future__ import annotations

import torch

from .fast_elmo import tanh_into


# ----------------------------------------------------------------------------------------------------------------------
# biLSTM
# ----------------------------------------------------------------------------------------------------------------------


def lstm_window_unavailable_reason(inputs: torch.Tensor, lengths: torch.LongTensor, weights: tuple[torch.Tensor, ...]) -> str | None:
    """Why ``lstm_window_forward`` cannot run one layer direction on ``inputs`` (batch, time, I) now, or None."""
    if not torch.is_grad_enabled():
        return "no gradients are recorded"
    if inputs.dtype != torch.float32 or any(weight.dtype != torch.float32 for weight in weights):
        return f"it computes in float32 only, not {inputs.dtype}"
    if torch.is_autocast_enabled(inputs.device.type):
        return "autocast is on (it computes in float32 only)"
    if inputs.shape[1] == 0 or not bool((lengths >= inputs.shape[1]).all()):
        return "some rows end before the last step (padding)"
    return None


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
    """One layer direction over a window: forward step by step without a graph, backward by hand (module docstring).

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
            tanh_into(candidate_gate, candidate_gate)  # in place (fast_elmo.TANH_BY_SIGMOID_DEVICES)
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
