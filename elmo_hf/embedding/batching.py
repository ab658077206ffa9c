"""How bulk embedding cuts sentences into windows and groups them into model batches (CPU work that touches no
model): ``split_into_windows``, ``length_grouped_batches`` and the device's default budgets, and the prepared
batches ``ELMoEmbedder.prepare`` makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

# Padded words per model batch when neither batch_size nor max_words_per_batch is given, by device type: the CPU's
# budget is the fastest one measured; CUDA's is not measured yet (docs/design/embedding.md, "Batching, grouping and
# order").
DEFAULT_WORDS_PER_BATCH = {"cpu": 4096, "cuda": 16384}
# Fewest windows a model batch of the device's budget takes before the word budget closes it (up to
# MIN_BATCH_SIZE_WORDS_FACTOR x the budget; length_grouped_batches), by device type: long windows would otherwise run
# each LSTM step on a few rows (docs/results/embed-throughput.md, "Rows per step"). CUDA: not measured, no floor.
DEFAULT_MIN_BATCH_SIZE = {"cpu": 128, "cuda": 0}
# How far past max_words_per_batch a batch of fewer than min_batch_size windows may grow (larger was slower again:
# docs/design/embedding.md, "Batching, grouping and order").
MIN_BATCH_SIZE_WORDS_FACTOR = 4


@dataclass(frozen=True)
class SentencePiece:
    """A window of one sentence that runs through the model as a sentence of its own.

    Words ``[start, end)`` of sentence ``sentence`` are run; words ``[core_start, core_end)`` of them keep their
    vectors (indices into the whole sentence).
    """

    sentence: int
    start: int
    end: int
    core_start: int
    core_end: int

    @property
    def num_words(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class PreparedBatch:
    """One model batch: its pieces and their character ids ``input_ids`` (B, T, C) and ``attention_mask`` (B, T)."""

    pieces: list[SentencePiece]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor


@dataclass(frozen=True)
class PreparedSentences:
    """Sentences (lists of words) cut into pieces and grouped into model batches: `ELMoEmbedder.prepare`."""

    sentences: Sequence[Sequence[str]]
    pieces: list[SentencePiece]
    batches: list[PreparedBatch]



def split_into_windows(num_words: int, max_window_words: int, window_context: int) -> list[tuple[int, int, int, int]]:
    """Windows ``(start, end, core_start, core_end)`` covering ``num_words`` words: the cores tile ``[0, num_words)``
    exactly, each window adds up to ``window_context`` words on each side and is at most ``max_window_words`` long."""
    if num_words <= max_window_words:
        return [(0, num_words, 0, num_words)]
    core_size = max_window_words - 2 * window_context
    windows = []
    for core_start in range(0, num_words, core_size):
        core_end = min(core_start + core_size, num_words)
        windows.append((max(0, core_start - window_context), min(num_words, core_end + window_context), core_start, core_end))
    return windows


def length_grouped_batches(
    lengths: Sequence[int], batch_size: int | None, max_words_per_batch: int | None, min_batch_size: int = 0
) -> list[list[int]]:
    """Indices into ``lengths`` grouped into batches of similar length, longest first.

    A batch holds at most ``batch_size`` items and at most ``max_words_per_batch`` padded words (items x longest
    item), except that a batch of fewer than ``min_batch_size`` items goes on up to ``MIN_BATCH_SIZE_WORDS_FACTOR``
    x ``max_words_per_batch`` padded words (so that long items do not run a few rows at a time); an item longer than
    the word budget gets a batch of its own.
    """
    order = sorted(range(len(lengths)), key=lambda index: -lengths[index])  # stable: ties keep input order
    batches: list[list[int]] = []
    for index in order:
        if batches:
            current = batches[-1]
            padded_words = (len(current) + 1) * lengths[current[0]]
            fits_count = batch_size is None or len(current) < batch_size
            fits_words = max_words_per_batch is None or padded_words <= max_words_per_batch or (
                len(current) < min_batch_size and padded_words <= MIN_BATCH_SIZE_WORDS_FACTOR * max_words_per_batch
            )
            if fits_count and fits_words:
                current.append(index)
                continue
        batches.append([index])
    return batches



__all__ = [
    "DEFAULT_MIN_BATCH_SIZE", "DEFAULT_WORDS_PER_BATCH", "MIN_BATCH_SIZE_WORDS_FACTOR", "PreparedBatch", "PreparedSentences",
    "SentencePiece", "length_grouped_batches", "split_into_windows",
]
