"""int8 matmuls for the fast route on CPU (``compute_dtype="int8"``): one more kernel choice of the fast route, not
a model of its own.

The model keeps its float32 parameters (they are what ``save_pretrained`` writes); the fast route's derived copy
(``fast_recurrence_elmo.PreparedLstmWeights``) holds each weight matrix quantized once, per output channel
(symmetric int8, one scale per row), pre-packed for torch's quantized CPU engine. Each call quantizes its input
dynamically (one scale and zero point per call, from the input's range; 7-bit, ``REDUCE_RANGE``), multiplies in
integers and returns float32. The token layer's highways (``Int8Highway``) quantize each input row on its own
(``RowwiseInt8Matmul``) and its convolutions read a character table quantized once (``Int8CharacterCnn``), so that a
word's vector does not depend on the other words of its call and the token cache stays exact. The cell's elementwise
work, the activations, the clips and the gate order stay the fast route's float32 ones. Which matmuls run in int8,
and the error against float32: docs/results/int8.md.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from .validation_elmo import ELMoHFError

# Quantized CPU engines that run ``torch.ops.quantized.linear_dynamic`` with per-channel int8 weights.
INT8_ENGINES = ("x86", "fbgemm", "onednn")

# Inputs quantized to 7 bits (0..127): fbgemm's AVX2 kernels add pairs of u8 x s8 products in int16, which 8-bit
# inputs can saturate; 7 bits cannot, on every CPU (the cost in accuracy: docs/results/int8.md).
REDUCE_RANGE = True


def quantized_engines() -> list[str]:
    """The quantized engines this torch build has (``torch.backends.quantized.supported_engines``)."""
    return list(torch.backends.quantized.supported_engines)


def int8_unavailable_reason(device: torch.device | str, dtype: torch.dtype = torch.float32) -> str | None:
    """Why int8 matmuls cannot run on ``device`` with this torch build for weights of ``dtype``, or None when they
    can."""
    device = torch.device(device)
    if device.type != "cpu":
        return (
            f"int8 runs on CPU only (torch's quantized CPU kernels), not on {str(device)!r}; on a GPU use "
            "compute_dtype bfloat16 or float16"
        )
    engines = quantized_engines()
    if not any(engine in engines for engine in INT8_ENGINES):
        return (
            f"this torch build ({torch.__version__}) has no quantized CPU engine for int8 matmuls (it has "
            f"{engines}; int8 needs one of {INT8_ENGINES})"
        )
    if dtype != torch.float32:
        return f"int8 quantizes float32 weights, and these are {dtype}: call model.float() first"
    return None


def finite_weight(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` detached, as float32; refused when it holds NaN or infinite values (int8 cannot hold them)."""
    weight = weight.detach().float()
    if not bool(torch.isfinite(weight).all()):
        raise ELMoHFError(
            f"compute_dtype int8: a weight matrix of shape {tuple(weight.shape)} holds NaN or infinite values, which "
            "int8 cannot represent; compute in float32 to see where they lead"
        )
    return weight


def symmetric_scales(values: torch.Tensor, dim: int, levels: float = 127.0) -> torch.Tensor:
    """One scale per slice of ``values`` along ``dim`` (kept, of size 1): max |v| / ``levels``, at least the smallest
    float32 so that an all-zero slice divides to zeros. NaN or infinite values give a NaN or infinite scale."""
    return (values.abs().amax(dim=dim, keepdim=True) / levels).clamp(min=torch.finfo(torch.float32).tiny)


def quantized_per_row(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` (out_features, in_features), float, as a per-channel qint8 tensor: row r scaled by max |w_r| / 127,
    zero point 0. Refuses a weight with NaN or infinite values (int8 cannot hold them)."""
    weight = finite_weight(weight)
    scales = symmetric_scales(weight, dim=1).squeeze(1).double()  # (out,)
    zero_points = torch.zeros(weight.shape[0], dtype=torch.long)
    with warnings.catch_warnings():
        # torch 2.13 marks its quantized tensor types deprecated (they move to torchao); they are the only way to
        # hand per-channel weights to its prepacked dynamic kernels, which this module exists to use.
        warnings.filterwarnings("ignore", message=r"torch\.quantize_per_tensor, torch\.quantize_per_channel", category=UserWarning)
        return torch.quantize_per_channel(weight, scales, zero_points, 0, torch.qint8)


class Int8Matmul:
    """``activation(x @ weight.T (+ bias))`` in int8, the interface of ``fast_recurrence_elmo.Matmul``: the weight
    (out_features, in_features) quantized per row and pre-packed once, the input (rows, in_features) quantized per
    call, the output (rows, out_features) float32. ``activation``: ``"none"`` or ``"sigmoid"``."""

    ACTIVATIONS = ("none", "sigmoid")

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, activation: str = "none"):
        if activation not in self.ACTIVATIONS:
            raise ValueError(f"activation must be one of {self.ACTIVATIONS}, got {activation!r}.")
        self.activation = activation
        bias = None if bias is None else bias.detach().float().contiguous()
        self.packed = torch.ops.quantized.linear_prepack(quantized_per_row(weight), bias)

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        outputs = self._product(inputs)
        return outputs.sigmoid_() if self.activation == "sigmoid" else outputs

    def _product(self, inputs: torch.Tensor) -> torch.Tensor:
        """``x @ weight.T (+ bias)`` (rows, out_features) float32, without the activation."""
        try:
            return torch.ops.quantized.linear_dynamic(inputs.float(), self.packed, REDUCE_RANGE)
        except RuntimeError as error:
            if bool(torch.isfinite(inputs).all()):
                raise
            raise ELMoHFError(
                "compute_dtype int8: a matmul's inputs hold NaN or infinite values, which int8 cannot quantize "
                f"({error}); compute in float32 to see where they come from"
            ) from None

    def add_into(self, target: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        """``target += inputs @ weight.T (+ bias)``, in place (a matmul without an activation)."""
        if self.activation != "none":
            raise ValueError(f"add_into adds the product before any activation; this matmul has {self.activation!r}.")
        return target.add_(self._product(inputs))


# The row-wise matmul's weights in 7 bits (-63..63): without VNNI, oneDNN adds u8 x s8 pairs in int16, which a full
# int8 weight can saturate (the input is shifted to u8); with 63 it cannot, so the sums are exact on every CPU
# (tested with ONEDNN_MAX_CPU_ISA=AVX2).
ROWWISE_WEIGHT_LEVELS = 63


def rowwise_int8_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight`` (out_features, in_features) quantized per output row in ``ROWWISE_WEIGHT_LEVELS``, laid out for
    ``torch._int_mm``: the integers (in_features, out_features) int8 and the scales (out_features,) float32."""
    weight = finite_weight(weight)
    scales = symmetric_scales(weight, dim=1, levels=ROWWISE_WEIGHT_LEVELS)  # (out, 1)
    return torch.round(weight / scales).to(torch.int8).t().contiguous(), scales.squeeze(1)


class RowwiseInt8Matmul:
    """``x @ weight.T + bias`` with the weight quantized per output row (``ROWWISE_WEIGHT_LEVELS``) and each input row
    on its own scale (symmetric int8), the products summed exactly in int32 (``torch._int_mm``): a row's result depends
    on that row alone, whatever else is in the call, so the token cache may keep it (``is_batch_invariant``).
    The weight (out_features, in_features); the input (rows, in_features) -> (rows, out_features) float32."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor):
        self.weight, self.weight_scales = rowwise_int8_weight(weight)  # (in, out) int8, (out,)
        self.bias = bias.detach().float()

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        scales = symmetric_scales(inputs, dim=1)  # (rows, 1)
        if not bool(torch.isfinite(scales).all()):
            raise ELMoHFError(
                "compute_dtype int8: a matmul's inputs hold NaN or infinite values, which int8 cannot quantize (a "
                "highway's); compute in float32 to see where they come from"
            )
        integers = torch.round(inputs / scales).to(torch.int8)  # (rows, in)
        return torch._int_mm(integers, self.weight).float().mul_(scales).mul_(self.weight_scales).add_(self.bias)


class Int8Highway:
    """A highway layer (``modeling_elmo.ELMoHighway``) with its gate and transform matmuls as one
    ``RowwiseInt8Matmul``, combined by the highway's own ``combine``. (rows, F) -> (rows, F)"""

    def __init__(self, highway: torch.nn.Module):
        self.size = highway.gate.out_features
        self.combine = highway.combine
        weights = torch.cat([highway.gate.weight, highway.transform.weight])  # (2F, F)
        self.matmul = RowwiseInt8Matmul(weights, torch.cat([highway.gate.bias, highway.transform.bias]))

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        both = self.matmul(hidden)  # (rows, 2F)
        return self.combine(both[:, : self.size], both[:, self.size :], hidden)


class Int8CharacterCnn:
    """The token layer's character CNN before its activation (``ELMoCharacterEmbeddings.reference_forward``: the
    character embedding, each convolution and its max over positions) with the products summed exactly in int32.

    The embedding table is quantized once, per column (E scales folded into the convolution weights), so a word's
    characters are int8 rows looked up, not quantized per call: each word's result depends on that word alone (the
    token cache may keep it). Each position's window of the widest filter W is one row of (W * E) int8; a filter of
    width w multiplies the first w * E columns of those rows by its (w * E, F_w) weight, quantized per filter like
    ``RowwiseInt8Matmul``'s (``torch._int_mm``, one call per filter). The max over the filter's own positions is
    taken on the integers (the filter's scale is positive, its bias the same at every position), then scaled.
    (N, C) character ids, C >= W -> (N, F) float32."""

    def __init__(self, token_layer: torch.nn.Module):
        table = finite_weight(token_layer.embedding.weight)  # (V, E)
        column_scales = symmetric_scales(table, dim=0).squeeze(0)  # (E,)
        self.character_codes = torch.round(table / column_scales).to(torch.int8)  # (V, E)
        self.filters, scales = [], []  # per filter: (width, its int8 weight (width * E, F_w)); its scales (F_w,)
        for convolution in token_layer.convolutions:
            weight = convolution.weight.detach().float().transpose(1, 2) * column_scales  # (F_w, width, E)
            integers, filter_scales = rowwise_int8_weight(weight.reshape(weight.shape[0], -1))
            self.filters.append((convolution.kernel_size[0], integers))
            scales.append(filter_scales)
        self.widest = max(width for width, _ in self.filters)
        self.weight_scales = torch.cat(scales)  # (F,)
        self.bias = torch.cat([convolution.bias.detach().float() for convolution in token_layer.convolutions])  # (F,)

    def __call__(self, character_ids: torch.LongTensor) -> torch.Tensor:
        words, slots = character_ids.shape
        codes = self.character_codes[character_ids]  # (N, C, E)
        codes = torch.nn.functional.pad(codes, (0, 0, 0, self.widest - 1))  # (N, C + W - 1, E): every position a window
        windows = codes.unfold(1, self.widest, 1).transpose(2, 3).reshape(words * slots, -1)  # (N * C, W * E)
        # A copy: for one word reshape returns a view of overlapping rows, which torch._int_mm multiplies wrongly.
        windows = windows.contiguous()
        size = codes.shape[-1]
        pooled = [
            torch._int_mm(windows[:, : width * size], weight).view(words, slots, -1)[:, : slots - width + 1].amax(dim=1)
            for width, weight in self.filters
        ]  # each (N, F_w) int32, exact
        return torch.cat(pooled, dim=1).float().mul_(self.weight_scales).add_(self.bias)  # (N, F)


@dataclass
class Int8TokenLayer:
    """What the token layer's fast route passes to ``reference_forward`` under int8, derived from ``key`` (its
    ``parameter_key``): the character CNN and the highways."""

    key: tuple
    character_cnn: Int8CharacterCnn
    highways: list[Int8Highway]


def int8_token_layer(token_layer: torch.nn.Module, key: tuple) -> Int8TokenLayer:
    """``token_layer``'s character CNN and highways in int8, quantized once per ``key`` (rebuilt when its weights
    change); kept in the layer's ``int8_prepared``, derived data like the fast route's weights."""
    prepared = token_layer.int8_prepared
    if prepared is None or prepared.key != key:
        highways = [Int8Highway(highway) for highway in token_layer.highways]
        prepared = token_layer.int8_prepared = Int8TokenLayer(key, Int8CharacterCnn(token_layer), highways)
    return prepared


__all__ = [
    "INT8_ENGINES",
    "REDUCE_RANGE",
    "ROWWISE_WEIGHT_LEVELS",
    "Int8CharacterCnn",
    "Int8Highway",
    "Int8Matmul",
    "Int8TokenLayer",
    "RowwiseInt8Matmul",
    "finite_weight",
    "int8_token_layer",
    "int8_unavailable_reason",
    "quantized_engines",
    "quantized_per_row",
    "rowwise_int8_weight",
    "symmetric_scales",
]
