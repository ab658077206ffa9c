"""The token layer's fast path: each distinct word once, on its own character slots, and the token-vector cache.

``modeling_elmo.ELMoCharacterEmbeddings.reference_forward`` is the definition; this module computes the same vectors
(equal up to float32 rounding; tested in ``tests/test_fast_elmo.py``) and knows no model class: it is handed the
token layer's ``reference_forward`` (the function to run on the rows it selects). ``recurrence_elmo.select_route``
decides when it runs: the fast route with the cache, the training route without it (differentiable: the gradient of
a repeated word is summed before the CNN, by the gather's backward).

* every distinct word of the batch goes through the CNN once (``<S>``, ``</S>``, all-zero padding rows and repeated
  words cost one row each);
* each word's character slots are trimmed to (start of its constant tail) + widest filter width, rounded up to 8:
  every convolution window that reads a real character is kept, plus one window made only of padding, so the max-pool
  sees the same windows (docs/design/numerics.md, "Character slots"). Words of equal slot count run together; a
  word's vector depends on the word alone, never on the batch it came in (tested bit for bit);
* an optional cache of token vectors (``ELMoModel.cache_token_embeddings``: a known vocabulary, and optionally every
  word met up to a size) replaces the CNN for the words it holds; bulk embedding turns it on.

Convolution shapes are rounded up to a few sizes (extra rows and slots are computed and dropped), because oneDNN
keeps memory for every shape it has seen (docs/design/embedding.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import torch
from transformers.utils import logging

from .characters_elmo import word_to_character_ids
from .configuration_elmo import ELMoConfig
from .validation_elmo import check_int

logger = logging.get_logger(__name__)


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


# The CNN's input shape is rounded up (rows to a power of two from CNN_MIN_ROWS to CNN_ROW_MULTIPLE, then multiples of
# it; slots to CNN_SLOT_MULTIPLE) so that oneDNN's memory stays flat and a word's bits never depend on its batch; why
# these values: docs/results/fast-path-constants.md.
CNN_MIN_ROWS = 16
CNN_ROW_MULTIPLE = 64
CNN_SLOT_MULTIPLE = 8


def round_up(value: int, multiple: int) -> int:
    """The smallest multiple of ``multiple`` that is at least ``value``."""
    return -(-value // multiple) * multiple


def cnn_rows(num_rows: int) -> int:
    """Rows the CNN runs on for ``num_rows`` words: CNN_MIN_ROWS, 2 * CNN_MIN_ROWS, ..., CNN_ROW_MULTIPLE, then
    multiples of it."""
    if num_rows >= CNN_ROW_MULTIPLE:
        return round_up(num_rows, CNN_ROW_MULTIPLE)
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
    On CPU through NumPy on the rows' bytes (faster than ``torch.unique(dim=0)``, docs/results/fast-path-constants.md);
    the order of the distinct rows is unspecified."""
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



def token_cache_for_words(
    config: ELMoConfig,
    words: Iterable[str],
    max_words: int | None,
    token_layer: TokenLayer,
    widest_filter: int,
    probe_largest_id: int,
    key: tuple,
    device: torch.device,
) -> TokenEmbeddingCache:
    """``ELMoModel.cache_token_embeddings``' cache: ``words`` (UTF-8 byte scheme) and the config's sentence boundary
    rows, computed by ``token_layer`` on ``device`` under ``key``; with ``max_words``, room to grow."""
    check_int("max_words", max_words, 1, allow_none=True)
    words = list(words)
    if words and config.character_vocabulary != "utf8_bytes":
        raise ValueError(
            "cache_token_embeddings(words) maps words with the UTF-8 byte scheme, but this model's words become ids "
            "through its tokenizer's character vocabulary: call cache_token_embeddings(max_words=...) instead, and "
            "the cache keeps the words the model meets."
        )
    num_slots = config.max_characters_per_token
    rows = [word_to_character_ids(word, num_slots) for word in words] + list(config.sentence_boundary_rows)
    cache = TokenEmbeddingCache(
        torch.tensor(rows, dtype=torch.long),
        max_words=max_words,
        largest_id=config.largest_input_id,
        probe_largest_id=probe_largest_id,
    )
    cache.refresh(token_layer, widest_filter, key, device)
    return cache

__all__ = [
    "BYTE_SCHEME_LARGEST_ID",
    "INT16_MAX",
    "TokenEmbeddingCache",
    "cnn_rows",
    "distinct_rows",
    "distinct_vectors",
    "fast_character_embeddings",
    "is_batch_invariant",
    "needed_character_slots",
    "round_up",
    "token_cache_for_words",
    "token_layer_on_rows",
    "word_slot_counts",
]
