"""The fast route of the biLM: ``ELMoEncoder.reference_forward`` reorganised for inference speed.

``modeling_elmo.py`` is the definition and ``recurrence_elmo.select_route`` chooses this route whenever no gradients
are needed. It computes the same vectors (float32 max abs difference <= 1e-4 on the original shape, tested in
tests/test_fast_elmo.py; usually about 1e-6, docs/design/numerics.md). Nothing here changes *what* is computed, only
the order and the amount of redundant work. It works on tensors and on the LSTM weights the encoder prepares
(``PreparedLstmWeights``, from each layer's parameters read by ``LstmDirectionWeights.of_layer``) and keeps in its
``fast_path_weights`` attribute.

* the batch is packed time-major with rows sorted by length, like ``PackedSequence``: step t works on the rows that
  are still running, one contiguous block, so padding costs nothing and no masking is needed;
* the input projections are one matmul per direction for a block of consecutive steps (a few MB of gate inputs,
  which stay in cache);
* one direction runs all its steps, then the other (its weights stay in cache); per step: one recurrent matmul added
  into that step's gate inputs, the nonlinearities and the cell update in place, one output projection copied into
  the output buffer, which is also the next step's recurrent state;
* the candidate gate's weights are doubled (exact), so one sigmoid serves all four gates: tanh(g) = 2 sigmoid(2g) - 1;
  on CPU tanh of the cell is computed the same way (``recurrence_elmo.TANH_BY_SIGMOID_DEVICES``);
* small layers on CPU (``FUSED_GATES_MAX_INNER_SIZE``) instead compute each step's gates in one pre-packed matmul
  over [x_t; h_{t-1}] with the sigmoid inside it;
* on CPU in float32 the LSTM weights are pre-packed once for oneDNN (``torch.ops.mkldnn``, when this torch build has
  it), which is what makes the small per-step matmuls fast;
* reduced precision (bfloat16 / float16 weights, e.g. ``model.to(torch.bfloat16)``): matmuls run in that dtype,
  while the gate pre-activations, the nonlinearities and the cell state stay in float32;
* int8 (``int8=True``, CPU, float32 weights): the same loop with ``int8_elmo.Int8Matmul`` for each matmul.

Matmul shapes are rounded up to a few sizes (extra rows are computed and dropped), because oneDNN keeps memory for
every shape it has seen (docs/design/embedding.md). Why each constant has its value: docs/results/fast-path-constants.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .int8_elmo import Int8Matmul
from .recurrence_elmo import tanh_into
from .token_cache_elmo import distinct_vectors, round_up


@dataclass
class PackedBatch:
    """A right-padded (batch, time) layout packed time-major over real positions, rows sorted longest first.

    Packed row ``step_starts[t] + r`` holds position t of the r-th longest sentence; step t has ``step_rows[t]``
    rows, a contiguous block, and the rows of step t are the first rows of step t - 1.
    """

    order: torch.LongTensor  # (B,) batch row of the r-th longest sentence
    step_starts: list[int]  # (steps,) first packed row of each step
    step_rows: list[int]  # (steps,) rows still running at each step (non-increasing)
    forward_index: torch.LongTensor  # (N,) flat index b * time + t of each packed row in the padded batch
    backward_index: torch.LongTensor  # (N,) same for the sentence read backwards: b * time + (length - 1 - t)
    last_row: torch.LongTensor  # (B,) packed row of each sorted sentence's last step (0 for empty sentences)
    is_empty: torch.BoolTensor  # (B,) sorted sentences of length 0

    @classmethod
    def build(cls, lengths: torch.LongTensor, time: int, skip_final_step: bool = False) -> "PackedBatch":
        """The layout of sentences of ``lengths`` (B,) in a (B, ``time``) batch. With ``skip_final_step`` each
        direction reads one position fewer: the forward direction stops before each sentence's last position, the
        backward one before its first (``last_row`` and ``is_empty`` then describe the shortened reads)."""
        device = lengths.device
        read_lengths = (lengths - 1).clamp(min=0) if skip_final_step else lengths  # (B,) positions each direction reads
        sorted_lengths, order = torch.sort(read_lengths, descending=True, stable=True)  # (B,), (B,)
        num_steps = int(sorted_lengths[0]) if lengths.numel() else 0
        steps = torch.arange(num_steps, device=device)
        is_real = steps.unsqueeze(1) < sorted_lengths.unsqueeze(0)  # (steps, B), time-major
        step_rows = is_real.sum(dim=1)  # (steps,)
        step_starts = torch.cumsum(step_rows, dim=0) - step_rows
        step_of_row = steps.unsqueeze(1).expand_as(is_real)[is_real]  # (N,) packed order: time-major
        sorted_row = torch.arange(lengths.numel(), device=device).unsqueeze(0).expand_as(is_real)[is_real]  # (N,)
        batch_row = order[sorted_row]
        length = lengths[batch_row]  # the backward direction starts at the last position even when it skips one
        # Empty sentences point at packed row 0; `is_empty` makes sure it is never used.
        last_row = torch.zeros_like(sorted_lengths)
        if num_steps:
            last_step = (sorted_lengths - 1).clamp(min=0)
            last_row = torch.where(sorted_lengths > 0, step_starts[last_step] + torch.arange(lengths.numel(), device=device), 0)
        return cls(
            order=order,
            step_starts=step_starts.tolist(),
            step_rows=step_rows.tolist(),
            forward_index=batch_row * time + step_of_row,
            backward_index=batch_row * time + (length - 1 - step_of_row),
            last_row=last_row,
            is_empty=sorted_lengths == 0,
        )

    def pack(self, padded: torch.Tensor, backward_padded: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, H) -> (2, N, H): the forward and the backward (each sentence reversed) packed sequences. With
        ``backward_padded`` (B, T, H), the backward sequence is that tensor read left to right instead."""
        flat = padded.reshape(-1, padded.shape[-1])
        if backward_padded is None:
            backward = flat.index_select(0, self.backward_index)
        else:
            backward = backward_padded.reshape(-1, padded.shape[-1]).index_select(0, self.forward_index)
        return torch.stack([flat.index_select(0, self.forward_index), backward])

    def unpack(self, packed: torch.Tensor, batch_size: int, time: int, backward_reading_order: bool = False) -> torch.Tensor:
        """(2, N, H) -> (B, T, 2H) ``[forward; backward]``, both aligned with the input positions, zero at padding
        (the backward half in its own left-to-right reading order with ``backward_reading_order``)."""
        padded = packed.new_zeros(batch_size * time, 2, packed.shape[-1])
        padded[:, 0].index_copy_(0, self.forward_index, packed[0])
        padded[:, 1].index_copy_(0, self.forward_index if backward_reading_order else self.backward_index, packed[1])
        return padded.reshape(batch_size, time, 2 * packed.shape[-1])

    def sort(self, state: torch.Tensor) -> torch.Tensor:
        """(2, B, H) in batch order -> (2, B, H) longest first (a copy)."""
        return state.index_select(1, self.order)

    def unsort(self, state: torch.Tensor) -> torch.Tensor:
        """(2, B, H) longest first -> (2, B, H) in batch order."""
        return torch.empty_like(state).index_copy_(1, self.order, state)


def onednn_available() -> bool:
    """Whether this torch build can pre-pack linear weights for oneDNN (the CPU fast path's per-step matmuls)."""
    return hasattr(torch.ops, "mkldnn") and hasattr(torch.ops.mkldnn, "_reorder_linear_weight") and hasattr(
        torch.ops.mkldnn, "_linear_pointwise"
    ) and torch.backends.mkldnn.is_available()


class Matmul:
    """``activation(x @ weight.T (+ bias))`` for one weight matrix (out_features, in_features), the fastest way this
    device offers; ``activation`` is ``"none"`` or ``"sigmoid"``.

    With ``pre_pack`` (CPU, float32, oneDNN) the weight is pre-packed once into oneDNN's blocked layout (a copy), and
    the bias and the activation are applied inside the matmul: the small per-step matmuls of the LSTM then skip
    re-packing the whole weight on every call (docs/results/fast-path-constants.md). Otherwise a plain matmul on the weight itself, then the activation in place. (oneDNN's
    sigmoid keeps NaN as NaN; its clip, ``hardtanh``, turns NaN into a number, so clips stay ``clamp_``.)
    """

    ACTIVATIONS = ("none", "sigmoid")

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, pre_pack: bool, activation: str = "none"):
        if activation not in self.ACTIVATIONS:
            raise ValueError(f"activation must be one of {self.ACTIVATIONS}, got {activation!r}.")
        self.bias, self.activation = bias, activation
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, None) if pre_pack else None
        self.weight = None if pre_pack else weight  # the packed copy is all a pre-packed matmul reads

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return torch.ops.mkldnn._linear_pointwise(inputs, self.packed, self.bias, self.activation, [], "")
        outputs = self._product(inputs)
        return outputs.sigmoid_() if self.activation == "sigmoid" else outputs

    def _product(self, inputs: torch.Tensor) -> torch.Tensor:
        """``x @ weight.T (+ bias)``, without the activation."""
        if self.packed is not None:
            return torch.ops.mkldnn._linear_pointwise(inputs, self.packed, self.bias, "none", [], "")
        if self.bias is None:
            return inputs @ self.weight.T
        if self.bias.dtype == inputs.dtype:
            return torch.addmm(self.bias, inputs, self.weight.T)
        return torch.add(self.bias, inputs @ self.weight.T)  # float32 gate bias + low-precision product: float32

    def add_into(self, target: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        """``target += inputs @ weight.T (+ bias)``, in place (a matmul without an activation)."""
        if self.activation != "none":
            raise ValueError(f"add_into adds the product before any activation; this matmul has {self.activation!r}.")
        if self.packed is None and self.bias is None and target.dtype == inputs.dtype:
            return target.addmm_(inputs, self.weight.T)
        # (oneDNN's fused "add" post-op measured slower than this separate add.)
        return target.add_(self._product(inputs))


@dataclass(frozen=True)
class LstmDirectionWeights:
    """One direction of one biLM layer as the fast path reads it (``of_layer``)."""

    input_weight: torch.Tensor  # (4D, P_in), gate blocks (input, forget, candidate, output)
    recurrent_weight: torch.Tensor  # (4D, P)
    projection_weight: torch.Tensor | None  # (P, D); None when P == D
    gate_bias: torch.Tensor  # (4D,) float32: the only bias, TF's run-time forget bias already added
    cell_clip: float | None
    projection_clip: float | None

    @classmethod
    def of_layer(cls, layer: torch.nn.Module) -> "LstmDirectionWeights":
        """An ``ELMoLstmLayer``'s weights (detached), with the gate bias the fast route computes with in float32: the
        stored bias plus the layer's run-time forget bias (``layer.forget_gate_bias``, TF's +1.0 where the config has
        it) on the forget block, as the reference adds it at every step."""
        gate_bias = layer.input_to_gates.bias.detach().float().clone()  # (4D,), blocks (input, forget, candidate, output)
        gate_bias[layer.cell_size : 2 * layer.cell_size] += layer.forget_gate_bias
        return cls(
            input_weight=layer.input_to_gates.weight.detach(),
            recurrent_weight=layer.state_to_gates.weight.detach(),
            projection_weight=None if layer.state_projection is None else layer.state_projection.weight.detach(),
            gate_bias=gate_bias,
            cell_clip=layer.cell_clip,
            projection_clip=layer.projection_clip,
        )


@dataclass
class _LayerWeights:
    """One biLM layer, both directions (index 0 forward, 1 backward), ready for the fast loop: either ``gates`` (small
    layers on the pre-packed CPU path, ``FUSED_GATES_MAX_INNER_SIZE``) or ``input_projection`` + ``recurrent``. In
    both forms the candidate's rows are doubled (``_candidate_doubled``): the gate pre-activations are (i, f, 2g, o)."""

    cell_size: int
    gates: list[Matmul] | None  # [x_t; h_{t-1}] (n, P_in + P) -> (n, 4D) sigmoids, see _sigmoid_gates_weights
    input_projection: list[Matmul] | None  # x (n, P_in) -> (n, 4D), with the gate bias
    recurrent: list[Matmul] | None  # h (n, P) -> (n, 4D)
    projection: list[Matmul] | None  # o * tanh(c) (n, D) -> (n, P); None when P == D
    cell_clip: float | None
    projection_clip: float | None


def _candidate_doubled(direction: LstmDirectionWeights) -> LstmDirectionWeights:
    """``direction`` with the candidate gate's rows of both weights and of the bias doubled, so that one sigmoid over
    all four gates' pre-activations serves the candidate too: tanh(g) = 2 sigmoid(2g) - 1. Doubling is exact in
    floating point, so the pre-activation 2g is exactly twice the reference path's g. (On every device: on a GPU the
    step launches as many kernels as with sigmoid, tanh, sigmoid on slices; not timed there.)"""
    doubling = torch.ones_like(direction.gate_bias)  # (4D,) float32
    doubling.view(4, -1)[2] = 2.0  # gate blocks (input, forget, candidate, output)
    rows = doubling.unsqueeze(1).to(direction.input_weight.dtype)
    return dataclasses.replace(
        direction,
        input_weight=direction.input_weight * rows,
        recurrent_weight=direction.recurrent_weight * rows,
        gate_bias=direction.gate_bias * doubling,
    )


def _sigmoid_gates_weights(direction: LstmDirectionWeights) -> tuple[torch.Tensor, torch.Tensor]:
    """The weight [W_x | W_h] (4D, P_in + P) and bias (4D,) of ``_LayerWeights.gates`` from a direction whose
    candidate is already doubled (``_candidate_doubled``): both gates' inputs in one matmul."""
    return torch.cat([direction.input_weight, direction.recurrent_weight], dim=1), direction.gate_bias


# Device types on which the first layer's input projection (the two-matmul form's) runs once per distinct input
# vector, gathered to the positions: a batch's words repeat, and a row's product keeps its bits (why and figures:
# docs/results/fast-path-constants.md).
DISTINCT_FIRST_LAYER_INPUTS_DEVICES = ("cpu",)

# The pre-packed CPU path computes each step's gates in one matmul over [x_t; h_{t-1}] with the sigmoid inside it
# (``_LayerWeights.gates``) when that matmul's inner size P_in + P is at most this; above it, a block of steps' input
# projections in one matmul plus one recurrent matmul per step (faster there: docs/results/fast-path-constants.md).
FUSED_GATES_MAX_INNER_SIZE = 256


class PreparedLstmWeights:
    """The biLM's LSTM weights ready for the fast loop, derived from the parameters identified by ``key``.

    With ``int8`` every matmul is an ``Int8Matmul`` over a per-channel quantized copy (``int8_elmo.py``).
    With ``pre_pack`` (honoured on CPU in float32 where oneDNN is available) the weights are pre-packed copies, most of
    the model's size again for a faster loop (docs/results/fast-path-constants.md); for small layers each step's gates then come from one matmul with the sigmoid inside it (``FUSED_GATES_MAX_INNER_SIZE``).
    Derived data, never saved: a deep copy or a pickle of the model holds none and prepares its own on first use.
    """

    def __init__(
        self, layers: Sequence[tuple[LstmDirectionWeights, LstmDirectionWeights]], key: tuple, pre_pack: bool, int8: bool = False
    ):
        first = layers[0][0].input_weight
        self.key = key
        self.compute_dtype = first.dtype
        self.int8 = int8
        self.pre_packed = int8 or (pre_pack and first.device.type == "cpu" and first.dtype == torch.float32 and onednn_available())
        self.layers = [self._prepare_layer(directions, self.pre_packed, int8) for directions in layers]

    @staticmethod
    def _prepare_layer(directions: tuple[LstmDirectionWeights, ...], pre_pack: bool, int8: bool) -> _LayerWeights:
        inner_size = directions[0].input_weight.shape[1] + directions[0].recurrent_weight.shape[1]
        fused = pre_pack and inner_size <= FUSED_GATES_MAX_INNER_SIZE
        directions = tuple(_candidate_doubled(d) for d in directions)

        def matmul(weight: torch.Tensor, bias: torch.Tensor | None, activation: str = "none") -> Matmul | Int8Matmul:
            return Int8Matmul(weight, bias, activation) if int8 else Matmul(weight, bias, pre_pack, activation)

        # Unfused, the gate bias goes into the pre-packed recurrent matmul (free there) or else into the input projection.
        return _LayerWeights(
            cell_size=directions[0].recurrent_weight.shape[0] // 4,
            gates=[matmul(*_sigmoid_gates_weights(d), activation="sigmoid") for d in directions] if fused else None,
            input_projection=None if fused else [matmul(d.input_weight, None if pre_pack else d.gate_bias) for d in directions],
            recurrent=None if fused else [matmul(d.recurrent_weight, d.gate_bias if pre_pack else None) for d in directions],
            projection=None
            if directions[0].projection_weight is None
            else [matmul(d.projection_weight, None) for d in directions],
            cell_clip=directions[0].cell_clip,
            projection_clip=directions[0].projection_clip,
        )

    def __reduce__(self):
        # Pre-packed oneDNN tensors can be neither deep-copied nor pickled; the copy prepares its own weights.
        return _no_prepared_weights, ()


def _no_prepared_weights() -> None:
    return None


# Gate inputs are computed for a block of consecutive steps at a time, at most this many bytes per direction (but at
# least one step): large enough for an efficient matmul, small enough to stay in the last-level cache and for the
# allocator to recycle the buffer without fresh page faults on every call.
GATE_INPUT_BLOCK_BYTES = 16 * 2**20


def _step_blocks(step_starts: list[int], step_rows: list[int], max_rows: int) -> list[tuple[int, int]]:
    """Split the steps into consecutive blocks [first_step, end_step) of at most ``max_rows`` packed rows (or one
    step, when a single step is larger)."""
    blocks, first = [], 0
    for step in range(1, len(step_rows) + 1):
        if step == len(step_rows) or step_starts[step] + step_rows[step] - step_starts[first] > max_rows:
            blocks.append((first, step))
            first = step
    return blocks


# The input projection's row count is rounded up to a multiple of this (the extra rows are computed and ignored), so
# that oneDNN keeps memory for a few dozen shapes only (docs/results/fast-path-constants.md).
MATMUL_ROW_MULTIPLE = 16


def _rows_rounded_up(matrix: torch.Tensor, first_row: int, end_row: int) -> torch.Tensor:
    """``matrix[first_row:end_row]`` extended to a multiple of ``MATMUL_ROW_MULTIPLE`` rows with the rows that follow
    it (a view), or with zeros past the end of ``matrix`` (a copy). (rows, H) -> (rounded rows, H)"""
    end = first_row + round_up(end_row - first_row, MATMUL_ROW_MULTIPLE)
    if end <= matrix.shape[0]:
        return matrix[first_row:end]
    rows = matrix.new_zeros(end - first_row, matrix.shape[1])
    rows[: matrix.shape[0] - first_row] = matrix[first_row:]
    return rows


def _first_step_is_shared(packing: PackedBatch, inputs: torch.Tensor, hidden_state: torch.Tensor, cell_state: torch.Tensor) -> bool:
    """Whether every sentence's first step is the same in every layer: the first layer's first inputs and every
    layer's initial state equal those of the first sentence (bit for bit; a NaN never equals). Deeper layers then read
    equal first inputs too, since the first step's outputs are copies. One host sync for the whole check.

    Args:
        inputs: (2, N, P_in) the first layer's packed inputs.
        hidden_state: (L, 2, B, P) and ``cell_state`` (L, 2, B, D), in batch order.
    """
    rows = packing.step_rows[0] if packing.step_rows else 0
    if rows < 2:
        return False
    first_sentences = packing.order[:rows]  # (n,) batch rows of the sentences of the first step
    alike = [
        (tensor == tensor[..., :1, :]).all()
        for tensor in (inputs[:, :rows], hidden_state.index_select(2, first_sentences), cell_state.index_select(2, first_sentences))
    ]
    return bool(torch.stack(alike).all())


class _GateSource:
    """Where one direction's gate activations come from, step by step (steps 1 and 2 of ``_run_direction``): in the
    one-matmul form each step's [x_t; h_{t-1}] goes through one matmul with the sigmoid inside it; in the two-matmul
    form the input projections of a block of steps are one matmul (or, with ``distinct_inputs``, each distinct input's
    is computed once and gathered per step), and each step adds one recurrent matmul into them."""

    def __init__(
        self,
        weights: _LayerWeights,
        direction: int,
        inputs: torch.Tensor,
        hidden: torch.Tensor,
        step_starts: list[int],
        step_rows: list[int],
        share_first_step: bool,
        distinct_inputs: tuple[torch.Tensor, torch.LongTensor] | None,
    ):
        """Arguments as ``_run_direction``'s (``step_rows`` with a shared first step's rows already set to 1)."""
        self.inputs, self.input_size, self.first_row = inputs, inputs.shape[-1], 0
        self.gates_matmul = None if weights.gates is None else weights.gates[direction]
        self.distinct_inputs = None if self.gates_matmul is not None else distinct_inputs
        if self.gates_matmul is not None:
            # Each step's rows of [x_t; h_{t-1}] side by side, the input for the one gates matmul; h is filled per step.
            self.inputs_and_hidden = inputs.new_empty(inputs.shape[0], self.input_size + hidden.shape[-1])  # (N, P_in + P)
            self.inputs_and_hidden[:, : self.input_size] = inputs
            self.blocks = [(0, len(step_rows))]
            return
        self.input_projection, self.recurrent = weights.input_projection[direction], weights.recurrent[direction]
        max_block_rows = max(1, GATE_INPUT_BLOCK_BYTES // (4 * weights.cell_size * 4))
        # A shared first step is a block of its own, so that its copied rows are not projected.
        first_blocked_step = 1 if share_first_step else 0
        self.blocks = [(0, 1)] if share_first_step else []
        self.blocks += [
            (first_blocked_step + first, first_blocked_step + end)
            for first, end in _step_blocks(step_starts[first_blocked_step:], step_rows[first_blocked_step:], max_block_rows)
        ]
        if self.distinct_inputs is not None:
            distinct, self.row_of_distinct = self.distinct_inputs  # (U, P_in), (N,)
            self.distinct_gate_inputs = self.input_projection(_rows_rounded_up(distinct, 0, len(distinct))).float()  # (U rounded up, 4D)
            self.step_gate_buffer = self.distinct_gate_inputs.new_empty(hidden.shape[0], self.distinct_gate_inputs.shape[1])  # (B, 4D)

    def start_block(self, first_row: int, end_row: int) -> None:
        """1. Input projections of the block's packed rows [first_row, end_row) in one matmul, float32 gate
        pre-activations (from distinct inputs they are gathered per step instead)."""
        self.first_row = first_row
        if self.gates_matmul is None and self.distinct_inputs is None:
            self.gate_inputs = self.input_projection(_rows_rounded_up(self.inputs, first_row, end_row)).float()  # (rows rounded up, 4D)

    def step(self, start: int, rows: int, previous: torch.Tensor) -> torch.Tensor:
        """2. Gates of the ``rows`` rows still running at the step starting at packed row ``start``, from x_t and
        ``previous`` h_{t-1} (n, P): (n, 4D), the sigmoid of (i, f, 2g, o) in PyTorch's order."""
        if self.gates_matmul is not None:
            step_inputs = self.inputs_and_hidden[start : start + rows]  # (n, P_in + P)
            step_inputs[:, self.input_size :] = previous
            return self.gates_matmul(step_inputs)
        if self.distinct_inputs is None:
            step_gate_inputs = self.gate_inputs[start - self.first_row : start - self.first_row + rows]  # (n, 4D)
        else:  # gathered into one reused buffer, which stays in cache (a block's gathered rows did not)
            step_gate_inputs = torch.index_select(
                self.distinct_gate_inputs, 0, self.row_of_distinct[start : start + rows], out=self.step_gate_buffer[:rows]
            )  # (n, 4D)
        return self.recurrent.add_into(step_gate_inputs, previous).sigmoid_()


def _run_direction(
    weights: _LayerWeights,
    direction: int,
    inputs: torch.Tensor,
    packing: PackedBatch,
    hidden: torch.Tensor,
    cell: torch.Tensor,
    outputs: torch.Tensor,
    share_first_step: bool,
    distinct_inputs: tuple[torch.Tensor, torch.LongTensor] | None = None,
) -> None:
    """One direction of one layer over packed inputs, all steps.

    Args:
        direction: 0 forward, 1 backward (which weights of ``weights``).
        inputs: (N, P_in) packed inputs, in the compute dtype.
        hidden: (B, P) initial output, in the compute dtype, sentences sorted longest first.
        cell: (B, D) float32 initial cell, sorted; updated in place to the final cell.
        outputs: (N, P) packed outputs, written in place; also the recurrent state.
        share_first_step: every row of the first step has the same input and state (``_first_step_is_shared``).
        distinct_inputs: ``distinct_vectors(inputs)``, (U, P_in) and (N,), for ``_GateSource``.
    """
    cell_output = torch.empty_like(cell)  # (B, D) buffer for o * tanh(c)
    step_starts, step_rows = packing.step_starts, list(packing.step_rows)
    # 0. Sentences that all start alike (the same boundary token from the same initial state: every call without a
    #    carried state) have the same first step: it is computed for one row and copied to the others.
    first_step_rows = step_rows[0] if step_rows else 0
    if share_first_step:
        step_rows[0] = 1
    source = _GateSource(weights, direction, inputs, hidden, step_starts, step_rows, share_first_step, distinct_inputs)
    projection = None if weights.projection is None else weights.projection[direction]
    previous_start = None
    for first_step, end_step in source.blocks:
        source.start_block(step_starts[first_step], step_starts[end_step - 1] + step_rows[end_step - 1])
        for start, rows in zip(step_starts[first_step:end_step], step_rows[first_step:end_step]):
            previous = hidden[:rows] if previous_start is None else outputs[previous_start : previous_start + rows]  # (n, P)
            input_gate, forget_gate, candidate, output_gate = source.step(start, rows, previous).chunk(4, dim=1)  # (n, D) each
            candidate.mul_(2.0).sub_(1.0)  # tanh(g) = 2 sigmoid(2g) - 1 (the forget gate's +1.0 is in the gate bias)
            # 3. New cell, clipped; rows that ended keep theirs untouched (they are outside [:rows]).
            step_cell = cell[:rows]
            step_cell.mul_(forget_gate).addcmul_(input_gate, candidate)
            if weights.cell_clip is not None:
                step_cell.clamp_(-weights.cell_clip, weights.cell_clip)
            # 4. Output o * tanh(c), projected and clipped, written into its packed rows.
            step_output = tanh_into(step_cell, cell_output[:rows]).mul_(output_gate)  # (n, D)
            target = outputs[start : start + rows]  # (n, P)
            target.copy_(step_output if projection is None else projection(step_output.to(inputs.dtype)))
            if weights.projection_clip is not None:
                target.clamp_(-weights.projection_clip, weights.projection_clip)
            if share_first_step and previous_start is None:
                outputs[1:first_step_rows] = target  # (1, P) broadcast to the other sentences' first rows
                cell[1:first_step_rows] = step_cell
            previous_start = start


def _run_layer(
    weights: _LayerWeights,
    inputs: torch.Tensor,
    packing: PackedBatch,
    hidden: torch.Tensor,
    cell: torch.Tensor,
    share_first_step: bool,
    project_distinct_inputs: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Both directions of one layer over packed inputs, one after the other (each all its steps: its weights stay in
    cache).

    Args:
        inputs: (2, N, P_in) packed forward and backward inputs, in the compute dtype.
        hidden: (2, B, P) and ``cell`` (2, B, D): initial state, sentences sorted longest first.
        project_distinct_inputs: in the two-matmul form, project each distinct input vector once (CPU tensors).

    Returns:
        outputs (2, N, P) packed, and the final hidden (2, B, P) and cell (2, B, D) states, sorted.
    """
    outputs = inputs.new_empty(2, inputs.shape[1], hidden.shape[-1])  # (2, N, P), also the recurrent state
    cell = cell.float().clone()  # (2, B, D), float32 whatever the compute dtype
    hidden = hidden.to(inputs.dtype)
    for direction in range(2):
        distinct_inputs = distinct_vectors(inputs[direction]) if project_distinct_inputs and weights.gates is None else None
        _run_direction(
            weights,
            direction,
            inputs[direction],
            packing,
            hidden[direction],
            cell[direction],
            outputs[direction],
            share_first_step,
            distinct_inputs,
        )
    # The final hidden state is the output of each sentence's last step (the initial one for empty sentences).
    if outputs.shape[1]:
        hidden = torch.where(packing.is_empty.view(1, -1, 1), hidden, outputs.index_select(1, packing.last_row))
    return outputs, hidden, cell


def fast_encoder_forward(
    weights: PreparedLstmWeights,
    token_embeddings: torch.Tensor,
    lengths: torch.LongTensor,
    state: tuple[torch.Tensor, torch.Tensor],
    use_skip_connections: bool,
    backward_token_embeddings: torch.Tensor | None = None,
    needs_final_step: bool = True,
    share_first_step: bool = True,
) -> tuple[list[torch.Tensor], tuple[torch.Tensor, torch.Tensor] | None]:
    """Same contract as ``ELMoEncoder.reference_forward`` (see there for shapes), except that with
    ``needs_final_step=False`` each direction skips the last position it reads (the forward direction's </S>, the
    backward one's <S>, which ``ELMoModel`` drops): those outputs are zero and no state is returned (None). With
    ``share_first_step`` a first step whose rows all have the same input and state is computed for one row."""
    batch_size, time, _ = token_embeddings.shape
    hidden_state, cell_state = state  # (L, 2, B, P), (L, 2, B, D)
    compute_dtype = weights.compute_dtype
    packing = PackedBatch.build(lengths, time, skip_final_step=not needs_final_step)
    backward_reading_order = backward_token_embeddings is not None
    if backward_reading_order:
        backward_token_embeddings = backward_token_embeddings.to(compute_dtype)
    layer_inputs = packing.pack(token_embeddings.to(compute_dtype), backward_token_embeddings)  # (2, N, P)
    share_first_step = share_first_step and _first_step_is_shared(packing, layer_inputs, hidden_state, cell_state)
    layer_outputs, final_hidden, final_cell = [], [], []
    for layer_index, layer_weights in enumerate(weights.layers):
        outputs, hidden, cell = _run_layer(
            layer_weights,
            layer_inputs,
            packing,
            packing.sort(hidden_state[layer_index]),
            packing.sort(cell_state[layer_index]),
            share_first_step,
            # The first layer reads token vectors, which repeat with the words.
            project_distinct_inputs=layer_index == 0 and layer_inputs.device.type in DISTINCT_FIRST_LAYER_INPUTS_DEVICES,
        )
        # Residual from the second layer on, added to the output only (never to the recurrent state).
        if use_skip_connections and layer_index > 0:
            outputs += layer_inputs
        layer_outputs.append(packing.unpack(outputs, batch_size, time, backward_reading_order))
        if needs_final_step:  # otherwise the state after a shortened read, which nobody gets
            final_hidden.append(packing.unsort(hidden))
            final_cell.append(packing.unsort(cell))
        layer_inputs = outputs
    if not needs_final_step:
        return layer_outputs, None
    return layer_outputs, (torch.stack(final_hidden), torch.stack(final_cell))


__all__ = [
    "LstmDirectionWeights",
    "Matmul",
    "PackedBatch",
    "PreparedLstmWeights",
    "fast_encoder_forward",
    "onednn_available",
]
