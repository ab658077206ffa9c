"""The fast inference path of ELMo: the computation of ``modeling_elmo.py``, reorganised for speed.

``modeling_elmo.py`` is the definition (the *reference path*). This module computes the same vectors (float32 max abs
difference <= 1e-4 on the original shape, tested; usually about 1e-6) and is chosen by the small dispatchers in
``ELMoCharacterEmbeddings.forward`` and ``ELMoEncoder.forward`` whenever no gradients are needed. Nothing here changes
*what* is computed, only the order and the amount of redundant work.

This module knows no model class: it works on tensors, on the token-layer function it is handed, and on the LSTM
weights the encoder prepares with ``PreparedLstmWeights.prepare`` and keeps in its ``fast_path_weights`` attribute.

Token layer (``fast_character_embeddings``)
    * every distinct word of the batch goes through the CNN once (``<S>``, ``</S>``, all-zero padding rows and
      repeated words cost one row each);
    * each word's 50 character slots are trimmed to (start of its constant tail) + widest filter width, rounded up
      to 8: every convolution window that reads a real character is kept, plus one window made only of padding, so
      the max-pool sees the same windows (equal up to float32 rounding: a convolution of another width may sum in
      another order; tested at 1 and 2 threads). Words of equal slot count run together; a word's vector depends on
      the word alone, never on the batch it came in (tested bit for bit);
    * an optional cache of token vectors (``ELMoModel.cache_token_embeddings``: a known vocabulary, and optionally
      every word met up to a size) replaces the CNN for the words it holds; bulk embedding turns it on.

biLM (``fast_encoder_forward``)
    * the batch is packed time-major with rows sorted by length, like ``PackedSequence``: step t works on the rows
      that are still running, one contiguous block, so padding costs nothing and no masking is needed;
    * the input projections are one matmul per direction for a block of consecutive steps (a few MB of gate inputs,
      which stay in cache);
    * one direction runs all its steps, then the other (its weights stay in cache); per step: one recurrent matmul
      added into that step's gate inputs, the nonlinearities and the cell update in place, one output projection
      copied into the output buffer, which is also the next step's recurrent state;
    * the candidate gate's weights are doubled (exact), so one sigmoid serves all four gates: tanh(g) = 2 sigmoid(2g)
      - 1; on CPU tanh of the cell is computed the same way (``TANH_BY_SIGMOID_DEVICES``: torch's tanh is ~9x slower
      than its sigmoid there);
    * small layers on CPU (``FUSED_GATES_MAX_INNER_SIZE``) instead compute each step's gates in one pre-packed matmul
      over [x_t; h_{t-1}] with the sigmoid inside it (about 1.1x the words/s of the shipped model);
    * on CPU in float32 the LSTM weights are pre-packed once for oneDNN (``torch.ops.mkldnn``, when this torch build
      has it), which is what makes the small per-step matmuls fast;
    * reduced precision (bfloat16 / float16 weights, e.g. ``model.to(torch.bfloat16)``): matmuls run in that dtype,
      while the gate pre-activations, the nonlinearities and the cell state stay in float32.

Matmul and convolution shapes are rounded up to a few sizes (extra rows and slots are computed and dropped), because
oneDNN keeps memory for every shape it has seen: without it, memory grew steadily over long runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from transformers.utils import logging

logger = logging.get_logger(__name__)

INFERENCE_PATHS = ("auto", "fast", "reference")
FAST_PATH_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
FAST_PATH_DEVICE_TYPES = ("cpu", "cuda")


# ----------------------------------------------------------------------------------------------------------------------
# Dispatch
# ----------------------------------------------------------------------------------------------------------------------


def fast_path_unavailable_reason(module: nn.Module, inputs: Sequence[torch.Tensor], active_dropout: float = 0.0) -> str | None:
    """Why the fast path cannot run ``module`` on ``inputs`` now, or None when it can. ``active_dropout``: the
    probability of the module's training-mode dropout (the fast path has none)."""
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
    return None


def use_fast_path(
    module: nn.Module, inputs: Sequence[torch.Tensor], inference_path: str, active_dropout: float = 0.0
) -> bool:
    """The dispatcher's decision for one call of ``module`` on ``inputs``:

    ``inference_path="reference"``: never; ``"fast"``: always (raises when it cannot run); ``"auto"``: whenever it can,
    otherwise the reference path, with the reason logged once.
    """
    if inference_path == "reference":
        return False
    reason = fast_path_unavailable_reason(module, inputs, active_dropout)
    if reason is None:
        return True
    if inference_path == "fast":
        raise RuntimeError(f"{type(module).__name__}: the fast inference path was requested but cannot run: {reason}.")
    message = f"{type(module).__name__}: using the reference path because {reason}."
    # Training is expected to run the reference path: say so quietly; anything else deserves a warning.
    if module.training:
        logger.info_once(message)
    else:
        logger.warning_once(message)
    return False


def parameter_key(module: nn.Module) -> tuple:
    """Changes whenever a parameter of ``module`` is replaced, moved, cast or modified in place (the key of the
    fast path's derived data: cached token vectors, prepared LSTM weights)."""
    return tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in module.parameters())


# ----------------------------------------------------------------------------------------------------------------------
# Token layer
# ----------------------------------------------------------------------------------------------------------------------


def needed_character_slots(character_ids: torch.LongTensor, widest_filter: int) -> int:
    """How many leading character slots give the same max-pooled CNN features as all of them. (N, C) -> int.

    A row ends in a constant tail (the padding character after a word's end-of-word mark; all zeros for a padding
    token). Every window that starts inside the tail sees the same characters, so keeping the slots before the tail
    plus ``widest_filter`` more keeps every distinct window of every filter: all the windows touching a non-tail
    character, and at least one window made only of tail characters. (One slot fewer, ``longest word + 2 + widest -
    1``, drops that all-padding window of the widest filter for the longest word and changes the output.)
    """
    num_slots = character_ids.shape[-1]
    if character_ids.numel() == 0:
        return min(num_slots, widest_filter)
    return min(num_slots, int(constant_tail_starts(character_ids).max()) + widest_filter)


def constant_tail_starts(character_ids: torch.LongTensor) -> torch.LongTensor:
    """The slots before each row's constant tail (``needed_character_slots``). (N, C) -> (N,)"""
    num_slots = character_ids.shape[-1]
    if num_slots == 0:
        return character_ids.new_zeros(len(character_ids))
    differs_from_last = character_ids != character_ids[:, -1:]  # (N, C)
    positions = torch.arange(1, num_slots + 1, device=character_ids.device)
    return (differs_from_last * positions).amax(dim=1)


# The CNN's input shape is rounded up (rows padded with padding words to a power of two from CNN_MIN_ROWS to
# CNN_ROW_MULTIPLE and to a multiple of it above, more character slots kept): oneDNN keeps memory for every convolution
# shape it has seen, so unrounded shapes made the peak RSS of a long run grow steadily (~10 MB per 1000 sentences); a
# few shapes keep it flat, and powers of two keep a single sentence cheap (21 words -> 32 rows, not 64). Extra slots
# only repeat windows the max-pool has already seen (the same windows); extra rows are dropped. Below 16 rows the CPU
# kernels sum in another order (matrix-vector code for one row, other blocking up to 8 rows of the original shape at
# one thread), so a word's last bits would depend on how many words came with it; from 16 rows on they do not.
CNN_MIN_ROWS = 16
CNN_ROW_MULTIPLE = 64
CNN_SLOT_MULTIPLE = 8


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def cnn_rows(num_rows: int) -> int:
    """Rows the CNN runs on for ``num_rows`` words: CNN_MIN_ROWS, 2 * CNN_MIN_ROWS, ..., CNN_ROW_MULTIPLE, then
    multiples of it."""
    if num_rows >= CNN_ROW_MULTIPLE:
        return _round_up(num_rows, CNN_ROW_MULTIPLE)
    return max(CNN_MIN_ROWS, 1 << max(num_rows - 1, 0).bit_length())


# The token layer as the fast path receives it: (N, C) character ids -> (N, P) token vectors, the reference
# computation (``ELMoCharacterEmbeddings.reference_forward``).
TokenLayer = Callable[[torch.LongTensor], torch.Tensor]


def word_slot_counts(character_ids: torch.LongTensor, widest_filter: int) -> torch.LongTensor:
    """The character slots each row needs on its own (``needed_character_slots`` of that row alone), rounded up to a
    multiple of ``CNN_SLOT_MULTIPLE``, at most C. (N, C) -> (N,)"""
    needed = constant_tail_starts(character_ids) + widest_filter
    rounded = torch.div(needed + CNN_SLOT_MULTIPLE - 1, CNN_SLOT_MULTIPLE, rounding_mode="floor") * CNN_SLOT_MULTIPLE
    return rounded.clamp(max=character_ids.shape[-1])


def token_layer_on_rows(token_layer: TokenLayer, character_ids: torch.LongTensor, widest_filter: int) -> torch.Tensor:
    """``token_layer`` on each row trimmed to its own slots (``word_slot_counts``), rows of equal slot count in one
    call, padded to ``cnn_rows``: equal to the token layer on all slots up to float32 rounding. (N, C) -> (N, P).

    A row's vector depends on that row alone, not on the others computed with it: the CNN and the highway matmuls
    compute every row the same way whatever the row count (tested bit for bit on CPU at 1 and 2 threads). That is
    what lets ``TokenEmbeddingCache`` keep vectors across batches without changing a single bit of the output."""
    slot_counts = word_slot_counts(character_ids, widest_filter)  # (N,)
    vectors = None
    for slots in sorted(set(slot_counts.tolist())):
        selected = (slot_counts == slots).nonzero().squeeze(1)  # (n,)
        rows = character_ids.new_zeros(cnn_rows(len(selected)), slots)
        rows[: len(selected)] = character_ids[selected, :slots]
        computed = token_layer(rows)[: len(selected)]  # (n, P)
        if vectors is None:
            vectors = computed.new_empty(len(character_ids), computed.shape[-1])
        vectors[selected] = computed
    if vectors is None:  # no rows: the layer's output width from a single padding row
        vectors = token_layer(character_ids.new_zeros(1, min(character_ids.shape[-1], widest_filter)))[:0]
    return vectors


def distinct_rows(rows: torch.LongTensor) -> tuple[torch.LongTensor, torch.LongTensor]:
    """The distinct rows of ``rows`` and, for each row, the index of its distinct row: (N, C) -> (U, C), (N,).
    On CPU through NumPy on the rows' bytes (about 10x faster than ``torch.unique(dim=0)``); the order of the distinct
    rows is unspecified."""
    if rows.device.type != "cpu":
        return torch.unique(rows, dim=0, return_inverse=True)
    return _distinct_by_key(rows, _row_bytes(rows, wide=rows.numel() > 0 and int(rows.max()) > INT16_MAX))


def _distinct_by_key(rows: torch.Tensor, keys: np.ndarray) -> tuple[torch.Tensor, torch.LongTensor]:
    """The rows of distinct ``keys`` (one NumPy key per row, ``_bytes_per_row``) and each row's index among them:
    (N, ...), (N,) -> (U, ...), (N,)."""
    _, first_index, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return rows[torch.from_numpy(first_index)], torch.from_numpy(inverse.reshape(-1))


# Ids up to this fit in the int16 keys of rows; larger ones (the word ids of a big word vocabulary) need int32 keys.
INT16_MAX = 2**15 - 1


def _row_bytes(rows: torch.LongTensor, wide: bool = False) -> np.ndarray:
    """One fixed-size bytes value per row of ids: int16 ids (ids <= INT16_MAX), or int32 with ``wide``. (N, C) ->
    (N,) void"""
    return _bytes_per_row(rows.cpu().to(torch.int32 if wide else torch.int16).numpy())


def _bytes_per_row(array: np.ndarray) -> np.ndarray:
    """(N, C) -> (N,) void: each row's bytes as one value (for ``np.unique`` and dictionary keys)."""
    array = np.ascontiguousarray(array)
    return array.view(np.dtype((np.void, array.dtype.itemsize * max(array.shape[1], 1)))).reshape(-1)


def distinct_vectors(vectors: torch.Tensor) -> tuple[torch.Tensor, torch.LongTensor]:
    """The distinct rows of ``vectors``, bit for bit (0.0 and -0.0 differ, a NaN equals the same NaN), and for each
    row the index of its distinct row: (N, H) -> (U, H), (N,). The order of the distinct rows is unspecified. On CPU
    through NumPy on the rows' bytes, elsewhere ``torch.unique`` of the bits."""
    bits = vectors.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[vectors.element_size()])
    if vectors.device.type != "cpu":
        distinct_bits, inverse = torch.unique(bits, dim=0, return_inverse=True)
        return distinct_bits.view(vectors.dtype), inverse
    return _distinct_by_key(vectors, _bytes_per_row(bits.numpy()))


# The largest id of the byte scheme (the padding character, 261): the default of the probes' id range.
BYTE_SCHEME_LARGEST_ID = 261


def is_batch_invariant(
    token_layer: TokenLayer, widest_filter: int, num_slots: int, device: torch.device, largest_id: int = BYTE_SCHEME_LARGEST_ID
) -> bool:
    """Whether ``token_layer_on_rows`` gives each word the same bits alone as among others on ``device``: probe words
    of every slot count, computed together (several times over, past ``CNN_ROW_MULTIPLE`` rows) and one by one. The
    CPU kernels measured here pass; others (a GPU library choosing its algorithm by row count) may not. The probes'
    ids are at most ``largest_id``, the largest id every slot of the token layer's rows accepts."""
    generator = torch.Generator().manual_seed(0)
    probes = torch.randint(1, min(256, largest_id), (2 * num_slots, num_slots), generator=generator)
    lengths = torch.arange(len(probes)) % num_slots  # every tail start, so every slot count
    probes[torch.arange(num_slots) >= lengths[:, None]] = largest_id  # a constant tail, like the padding after a word
    probes = probes.to(device)
    together = token_layer_on_rows(token_layer, probes.repeat(3, 1), widest_filter)
    if not torch.equal(together, together[: len(probes)].repeat(3, 1)):
        return False
    return all(
        torch.equal(token_layer_on_rows(token_layer, probes[index : index + 1], widest_filter)[0], together[index])
        for index in range(0, len(probes), 7)
    )


def _keeps_normal_tensors(method: Callable) -> Callable:
    """``method`` run outside inference mode and without gradients: the cache's own tensors stay normal ones even when
    it is filled inside `torch.inference_mode()`, as the embedder runs the model (an inference tensor cannot be updated
    in place outside inference mode, so a cache grown there would fail the model's next call under
    `torch.no_grad()`). `no_grad` goes inside: leaving inference mode turns gradients back on."""
    return torch.inference_mode(False)(torch.no_grad()(method))


class TokenEmbeddingCache:
    """Token-layer vectors of words, looked up by their character-id rows: a vocabulary given up front and, while
    fewer than ``max_words`` are held, every word the model meets (first come, first kept; nothing is evicted).

    The vectors are computed by ``token_layer_on_rows``. The cache grows only where that gives a word the same bits
    whatever batch it came in (``is_batch_invariant``, probed on the device at each refresh), so a hit returns exactly
    what a miss would compute and the output does not depend on what was met before. ``refresh`` recomputes every
    vector when the token layer's ``parameter_key`` changed (weights modified in place, moved by ``.to()``, reloaded).
    ``largest_id``: the largest id any slot of a row may hold (above ``INT16_MAX`` the rows get int32 keys, e.g. the
    word ids of a big word vocabulary); ``probe_largest_id``: the largest id every slot accepts (the probe's range).
    """

    def __init__(
        self,
        character_ids: torch.LongTensor,
        max_words: int | None = None,
        largest_id: int = BYTE_SCHEME_LARGEST_ID,
        probe_largest_id: int = BYTE_SCHEME_LARGEST_ID,
    ):
        rows, _ = distinct_rows(character_ids.cpu())  # (V, C)
        self.max_words = max(len(rows), max_words or 0)
        self.probe_largest_id = probe_largest_id
        self.wide_keys = largest_id > INT16_MAX
        self._rows = [rows]  # chunks of (n, C) character ids, in the order of `vectors`
        self.row_of = {key.tobytes(): index for index, key in enumerate(_row_bytes(rows, self.wide_keys))}
        self._vectors: torch.Tensor | None = None  # (capacity, P); rows [0, len(self)) are filled
        self.parameter_key: tuple | None = None
        self.grows = False  # set by `refresh`

    def __len__(self) -> int:
        return len(self.row_of)

    @property
    def vectors(self) -> torch.Tensor:
        """(len(self), P) token vectors, row i for the i-th cached word."""
        return self._vectors[: len(self)]

    @_keeps_normal_tensors
    def refresh(
        self, token_layer: TokenLayer, widest_filter: int, key: tuple, device: torch.device, batch_size: int = 4096
    ) -> None:
        """(Re)compute the vectors with ``token_layer`` on ``device`` unless they were computed under ``key``."""
        if key == self.parameter_key:
            return
        rows = torch.cat(self._rows)
        self._rows = [rows]
        vectors = torch.cat(
            [token_layer_on_rows(token_layer, chunk.to(device), widest_filter) for chunk in rows.split(batch_size)]
        )
        self._vectors = vectors.new_empty(max(len(vectors), min(self.max_words, 2 * len(vectors) + 1024)), vectors.shape[1])
        self._vectors[: len(vectors)] = vectors
        self.parameter_key = key
        self.grows = self.max_words > len(self) and is_batch_invariant(
            token_layer, widest_filter, rows.shape[1], device, self.probe_largest_id
        )
        if self.max_words > len(self) and not self.grows:
            logger.warning_once(
                f"The token-layer cache keeps only its {len(self)} given words on {device}: there the character CNN "
                "computes a word's last bits differently by batch, so a growing cache would change outputs."
            )

    def lookup(self, character_ids: torch.LongTensor) -> torch.LongTensor:
        """Row index of each word in ``vectors``, -1 for words not in the cache. (N, C) -> (N,)"""
        indices = [self.row_of.get(key.tobytes(), -1) for key in _row_bytes(character_ids, self.wide_keys)]
        return torch.tensor(indices, dtype=torch.long, device=character_ids.device)

    @_keeps_normal_tensors
    def add(self, character_ids: torch.LongTensor, vectors: torch.Tensor) -> None:
        """Keep the vectors (N, P) of words (N, C) not cached yet, as many as ``max_words`` leaves room for; they must
        come from ``token_layer_on_rows`` under the current ``parameter_key``."""
        room = self.max_words - len(self)
        if room <= 0 or not self.grows:
            return
        keys = [key.tobytes() for key in _row_bytes(character_ids, self.wide_keys)]
        new = [index for index, key in enumerate(keys) if key not in self.row_of][:room]
        if not new:
            return
        start, end = len(self), len(self) + len(new)
        if end > len(self._vectors):
            grown = self._vectors.new_empty(min(self.max_words, max(end, 2 * len(self._vectors))), self._vectors.shape[1])
            grown[:start] = self._vectors[:start]
            self._vectors = grown
        selected = torch.tensor(new, dtype=torch.long, device=character_ids.device)
        self._vectors[start:end] = vectors[selected].to(self._vectors.dtype)
        self._rows.append(character_ids[selected].cpu())
        for offset, index in enumerate(new):
            self.row_of[keys[index]] = start + offset


def fast_character_embeddings(
    character_ids: torch.LongTensor, token_layer: TokenLayer, widest_filter: int, cache: TokenEmbeddingCache | None
) -> torch.Tensor:
    """What ``token_layer`` computes on (..., C) character ids -> (..., P) token vectors, with each distinct word
    computed once and cached words (``cache``, already refreshed) looked up; words missing from a cache with room
    are added to it."""
    leading_shape, num_slots = character_ids.shape[:-1], character_ids.shape[-1]
    # Each distinct word once: boundaries, padding rows and repeated words cost one CNN row each.
    words, word_of_row = distinct_rows(character_ids.reshape(-1, num_slots))  # (U, C), (N,)
    if cache is None:
        vectors = token_layer_on_rows(token_layer, words, widest_filter)  # (U, P)
    else:
        cached_row = cache.lookup(words)  # (U,)
        is_cached = cached_row >= 0
        vectors = cache.vectors.new_empty(words.shape[0], cache.vectors.shape[1])
        vectors[is_cached] = cache.vectors[cached_row[is_cached]]
        if not bool(is_cached.all()):
            missing = words[~is_cached]
            computed = token_layer_on_rows(token_layer, missing, widest_filter)
            vectors[~is_cached] = computed.to(vectors.dtype)
            cache.add(missing, computed)
    return vectors[word_of_row].reshape(*leading_shape, vectors.shape[-1])


# ----------------------------------------------------------------------------------------------------------------------
# biLM
# ----------------------------------------------------------------------------------------------------------------------


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
    the bias and the activation are applied inside the matmul: the small per-step matmuls of the LSTM (batch x 512 @
    512 x 16384 for the original model) then skip re-packing the whole weight on every call, which makes them about
    twice as fast at batch 32. Otherwise a plain matmul on the weight itself, then the activation in place. (oneDNN's
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
    """One direction of one biLM layer as the fast path reads it (``ELMoLstmLayer.fast_path_weights``)."""

    input_weight: torch.Tensor  # (4D, P_in), gate blocks (input, forget, candidate, output)
    recurrent_weight: torch.Tensor  # (4D, P)
    projection_weight: torch.Tensor | None  # (P, D); None when P == D
    gate_bias: torch.Tensor  # (4D,) float32: the only bias, TF's run-time forget bias already added
    cell_clip: float | None
    projection_clip: float | None


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


# Device types on which the first layer's input projection (the two-matmul form's) is computed once per distinct
# input vector and gathered to the positions, instead of once per position: the first layer reads the token layer's
# vectors, and a batch's words repeat (at the bulk word budget on tinyshakespeare about 30% of them are distinct). A
# row's product does not depend on the rows computed with it (at least MATMUL_ROW_MULTIPLE rows), so the outputs keep
# their bits (on the CPUs measured here). ``benchmarks/gates_forms.py --compare first-layer-inputs --shape original``
# on 2 cores (AVX2), words/s distinct / every position, best and median of 3 rounds: 1.09 / 1.14 at the bulk word
# budget, 1.07 / 1.08 at 32 sentences, 1.06 / 1.06 at 8; on a Zen 5 core (AVX-512, 1 thread, 1,000 lines), with the
# products gathered per step: 1.10 / 1.10, 1.06 / 1.07, 1.02 / 1.06 (gathered per block of steps, as before: 1.10 /
# 1.11, 1.04 / 1.03, 1.05 / 1.05). Not measured on a GPU. (The one-matmul form has no input
# projection of its own; a trial that split its first layer's matmul to gather the input half measured 1.05-1.09 at
# the word budget but 0.92-0.94 at 32 sentences, and changes the last bits: not adopted.)
DISTINCT_FIRST_LAYER_INPUTS_DEVICES = ("cpu",)

# The pre-packed CPU path computes each step's gates in one matmul over [x_t; h_{t-1}] with the sigmoid inside it
# (``_LayerWeights.gates``) when that matmul's inner size P_in + P is at most this; above it, a block of steps' input
# projections in one matmul plus one recurrent matmul per step. ``benchmarks/gates_forms.py`` on 2 cores (AVX2), words/s
# of one matmul / two matmuls: P_in + P = 256 (the shipped model, the released small shape) 1.08-1.15 at the bulk
# word budget, 1.10-1.19 at 32 sentences, 0.94-0.99 at 8; 512 (medium) 1.08-1.10 at the budget but 0.85 at 32;
# 1024 (original) 0.92 at 32, 0.79-0.85 at 8. Each step re-reads the input weights, and the gate passes saved are a
# smaller share of a larger layer's step. Re-measured once the two-matmul form also had one sigmoid for all gates
# (Zen 5, 1 thread, median of 3): 256: 1.00 at the word budget, 1.11 at 32 sentences, 1.06 at 8: kept.
FUSED_GATES_MAX_INNER_SIZE = 256


class PreparedLstmWeights:
    """The biLM's LSTM weights ready for the fast loop, derived from the parameters identified by ``key``.

    With ``pre_pack`` (honoured on CPU in float32 where oneDNN is available) the weights are pre-packed copies: 80% of
    the parameters of the original shape (302 MB next to the model's 374 MB) for about 1.5x the speed at batch 32; for
    small layers each step's gates then come from one matmul with the sigmoid inside it (``FUSED_GATES_MAX_INNER_SIZE``).
    Derived data, never saved: a deep copy or a pickle of the model holds none and prepares its own on first use.
    """

    def __init__(self, layers: Sequence[tuple[LstmDirectionWeights, LstmDirectionWeights]], key: tuple, pre_pack: bool):
        first = layers[0][0].input_weight
        self.key = key
        self.compute_dtype = first.dtype
        self.pre_packed = pre_pack and first.device.type == "cpu" and first.dtype == torch.float32 and onednn_available()
        self.layers = [self._prepare_layer(directions, self.pre_packed) for directions in layers]

    @staticmethod
    def _prepare_layer(directions: tuple[LstmDirectionWeights, ...], pre_pack: bool) -> _LayerWeights:
        inner_size = directions[0].input_weight.shape[1] + directions[0].recurrent_weight.shape[1]
        fused = pre_pack and inner_size <= FUSED_GATES_MAX_INNER_SIZE
        directions = tuple(_candidate_doubled(d) for d in directions)
        # Unfused, the gate bias goes into the pre-packed recurrent matmul (free there) or else into the input projection.
        return _LayerWeights(
            cell_size=directions[0].recurrent_weight.shape[0] // 4,
            gates=[Matmul(*_sigmoid_gates_weights(d), pre_pack=True, activation="sigmoid") for d in directions]
            if fused
            else None,
            input_projection=None
            if fused
            else [Matmul(d.input_weight, None if pre_pack else d.gate_bias, pre_pack) for d in directions],
            recurrent=None
            if fused
            else [Matmul(d.recurrent_weight, d.gate_bias if pre_pack else None, pre_pack) for d in directions],
            projection=None
            if directions[0].projection_weight is None
            else [Matmul(d.projection_weight, None, pre_pack) for d in directions],
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


# The input projection's row count is rounded up to a multiple of this (the extra rows are computed and ignored):
# oneDNN keeps memory for every matmul shape it has seen, and rounding keeps the shapes to a few dozen (the per-step
# matmuls have at most batch-size many), so memory stays flat over a long run (peak RSS grew ~5 MB per 1000
# sentences with arbitrary row counts).
MATMUL_ROW_MULTIPLE = 16


def _rows_rounded_up(matrix: torch.Tensor, first_row: int, end_row: int) -> torch.Tensor:
    """``matrix[first_row:end_row]`` extended to a multiple of ``MATMUL_ROW_MULTIPLE`` rows with the rows that follow
    it (a view), or with zeros past the end of ``matrix`` (a copy). (rows, H) -> (rounded rows, H)"""
    end = first_row + _round_up(end_row - first_row, MATMUL_ROW_MULTIPLE)
    if end <= matrix.shape[0]:
        return matrix[first_row:end]
    rows = matrix.new_zeros(end - first_row, matrix.shape[1])
    rows[: matrix.shape[0] - first_row] = matrix[first_row:]
    return rows


# Device types on which the fast path computes tanh of the cell as 2 sigmoid(2c) - 1 (four passes) instead of with
# torch.tanh (one). On CPU this torch's tanh is about 9x slower than its sigmoid: 2.2 ns against 0.23 ns per float32
# on a Zen 5 core (AVX-512, torch 2.13.0), where it took 14% of the shipped model's biLM time; the identity's four
# passes take 0.4 ns in all. Its error is at most 2.4e-7 (two float32 epsilons) absolute, against the reference
# path's torch.tanh; tanh(c) is bounded by 1, so the error is absolute where it matters. Not measured on a GPU, where
# the step's cost is the number of kernel launches: torch.tanh stays there.
TANH_BY_SIGMOID_DEVICES = ("cpu",)


def tanh_into(values: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out = tanh(values)`` (float32, same shape), the faster way on this device (``TANH_BY_SIGMOID_DEVICES``)."""
    if values.device.type not in TANH_BY_SIGMOID_DEVICES:
        return torch.tanh(values, out=out)
    return torch.mul(values, 2.0, out=out).sigmoid_().mul_(2.0).sub_(1.0)


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
        share_first_step: every row of the first step has the same input and state (``_first_step_is_shared``):
            compute it for one row and copy it.
        distinct_inputs: ``distinct_vectors(inputs)``, (U, P_in) and (N,): the two-matmul form then projects each
            distinct input once and gathers the products (the one-matmul form ignores it).
    """
    compute_dtype = inputs.dtype
    cell_size, input_size = weights.cell_size, inputs.shape[-1]
    cell_output = torch.empty_like(cell)  # (B, D) buffer for o * tanh(c)
    step_starts, step_rows = packing.step_starts, list(packing.step_rows)
    # 0. Sentences that all start alike (the same boundary token from the same initial state: every call without a
    #    carried state) have the same first step: it is computed for one row and copied to the others.
    first_step_rows = step_rows[0] if step_rows else 0
    if share_first_step:
        step_rows[0] = 1
    gates_matmul = None if weights.gates is None else weights.gates[direction]
    if gates_matmul is not None:
        # Each step's rows of [x_t; h_{t-1}] side by side, the input for the one gates matmul; h is filled per step.
        inputs_and_hidden = inputs.new_empty(inputs.shape[0], input_size + hidden.shape[-1])  # (N, P_in + P)
        inputs_and_hidden[:, :input_size] = inputs
        blocks = [(0, len(step_rows))]
    else:
        input_projection, recurrent = weights.input_projection[direction], weights.recurrent[direction]
        max_block_rows = max(1, GATE_INPUT_BLOCK_BYTES // (4 * cell_size * 4))
        # A shared first step is a block of its own, so that its copied rows are not projected.
        first_blocked_step = 1 if share_first_step else 0
        blocks = [(0, 1)] if share_first_step else []
        blocks += [
            (first_blocked_step + first, first_blocked_step + end)
            for first, end in _step_blocks(step_starts[first_blocked_step:], step_rows[first_blocked_step:], max_block_rows)
        ]
    projection = None if weights.projection is None else weights.projection[direction]
    if gates_matmul is None and distinct_inputs is not None:
        distinct, row_of_distinct = distinct_inputs  # (U, P_in), (N,)
        distinct_gate_inputs = input_projection(_rows_rounded_up(distinct, 0, len(distinct))).float()  # (U rounded up, 4D)
        step_gate_buffer = distinct_gate_inputs.new_empty(hidden.shape[0], distinct_gate_inputs.shape[1])  # (B, 4D)
    previous_start = None
    for first_step, end_step in blocks:
        first_row = step_starts[first_step]
        if gates_matmul is None and distinct_inputs is None:
            # 1. Input projections of the block's positions in one matmul, float32 gate pre-activations (from distinct
            #    inputs they are gathered per step, below).
            end_row = step_starts[end_step - 1] + step_rows[end_step - 1]
            gate_inputs = input_projection(_rows_rounded_up(inputs, first_row, end_row)).float()  # (rows rounded up, 4D)
        for start, rows in zip(step_starts[first_step:end_step], step_rows[first_step:end_step]):
            previous = hidden[:rows] if previous_start is None else outputs[previous_start : previous_start + rows]  # (n, P)
            # 2. Gates of the rows still running, from x_t and h_{t-1}.
            if gates_matmul is not None:
                step_inputs = inputs_and_hidden[start : start + rows]  # (n, P_in + P)
                step_inputs[:, input_size:] = previous
                gates = gates_matmul(step_inputs)  # (n, 4D): sigmoid of (i, f, 2g, o)
                input_gate, forget_gate, candidate, output_gate = gates.chunk(4, dim=1)  # (n, D) each, PyTorch order
            else:
                if distinct_inputs is None:
                    step_gate_inputs = gate_inputs[start - first_row : start - first_row + rows]  # (n, 4D)
                else:  # gathered into one reused buffer, which stays in cache (a block's gathered rows did not)
                    step_gate_inputs = torch.index_select(
                        distinct_gate_inputs, 0, row_of_distinct[start : start + rows], out=step_gate_buffer[:rows]
                    )  # (n, 4D)
                gates = recurrent.add_into(step_gate_inputs, previous).sigmoid_()  # (n, 4D): sigmoid of (i, f, 2g, o)
                input_gate, forget_gate, candidate, output_gate = gates.chunk(4, dim=1)  # (n, D) each, PyTorch order
            candidate.mul_(2.0).sub_(1.0)  # tanh(g) = 2 sigmoid(2g) - 1 (the forget gate's +1.0 is in the gate bias)
            # 3. New cell, clipped; rows that ended keep theirs untouched (they are outside [:rows]).
            step_cell = cell[:rows]
            step_cell.mul_(forget_gate).addcmul_(input_gate, candidate)
            if weights.cell_clip is not None:
                step_cell.clamp_(-weights.cell_clip, weights.cell_clip)
            # 4. Output o * tanh(c), projected and clipped, written into its packed rows.
            step_output = tanh_into(step_cell, cell_output[:rows]).mul_(output_gate)  # (n, D)
            target = outputs[start : start + rows]  # (n, P)
            if projection is None:
                target.copy_(step_output)
            else:
                target.copy_(projection(step_output.to(compute_dtype)))
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
    "INFERENCE_PATHS",
    "LstmDirectionWeights",
    "Matmul",
    "PackedBatch",
    "PreparedLstmWeights",
    "TokenEmbeddingCache",
    "cnn_rows",
    "distinct_rows",
    "distinct_vectors",
    "fast_character_embeddings",
    "fast_encoder_forward",
    "fast_path_unavailable_reason",
    "is_batch_invariant",
    "needed_character_slots",
    "onednn_available",
    "parameter_key",
    "token_layer_on_rows",
    "use_fast_path",
    "word_slot_counts",
]
