"""Training data for ELMo's biLM: per-sentence batches (``DataCollatorForBiLM``) and bilm-tf's windows with the LSTM
state carried across batches (``WindowedBiLMStream``), with forward and backward LM targets from an
``ELMoWordVocabulary``; -100 (``IGNORE_INDEX``) where there is nothing to predict. Design, worked examples and the
bilm-tf comparison: docs/design/pretraining-data.md.
"""

from __future__ import annotations

import logging
import os
import tempfile
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from datasets import Dataset, IterableDataset

from ..characters_elmo import BOS_TOKEN, EOS_TOKEN, MAX_CHARACTERS_PER_TOKEN, word_to_character_ids
from ..corpus.progress import CorpusProgress
from ..corpus.sentences import dataset_words
from ..corpus.vocabulary import BOS_WORD_ID, EOS_WORD_ID, ELMoWordVocabulary, check_sentence_words, sentence_bilm_labels
from ..modeling_elmo import IGNORE_INDEX
from ..storage.files import TEMPORARY_SUFFIX
from ..tokenization_elmo import ELMoTokenizer
from ..validation_elmo import check_choice, check_int

logger = logging.getLogger(__name__)
REMAINDER_CHOICES = ("drop", "pad")


# Per-sentence regime -------------------------------------------------------------------------------------------------
def _pad_rows(rows: Sequence[Sequence[int]], length: int) -> np.ndarray:
    padded = np.full((len(rows), length), IGNORE_INDEX, dtype=np.int64)
    for index, row in enumerate(rows):
        padded[index, : len(row)] = row
    return padded


@dataclass
class DataCollatorForBiLM:
    r"""
    Per-sentence biLM batches for `ELMoModel`-based pre-training (a `Trainer` `data_collator`; a worked example:
    docs/design/pretraining-data.md, "Per-sentence regime"). Takes features with a `words` list (or a raw `text`
    string, split by `tokenizer`) and returns:

    - `input_ids` (`(batch, T, max_characters_per_token)`): the words' character ids as `ELMoTokenizer` makes them
      (no `<S>`/`</S>`: the model adds them); `attention_mask` (`(batch, T)`): 1 for a word, 0 for padding.
    - `next_word_labels` / `previous_word_labels` (`(batch, T)`): the forward / backward LM target of each word
      position (the next word, `</S>` after the last; the previous word, `<S>` before the first); -100 at padding.

    T is the longest sentence (rounded up to `pad_to_multiple_of`); the labels are aligned with the WORD positions of
    `ELMoModel`'s output. `label_boundary_positions=True` adds bilm-tf's `<S> -> w1` and `</S> -> wn` targets: T + 2
    label columns aligned with `ELMoModel(..., keep_sentence_boundaries=True)` (`sentence_bilm_labels`). With
    `Trainer`, set `remove_unused_columns=False` so that the `words` column reaches the collator.

    Args:
        vocabulary ([`ELMoWordVocabulary`]): maps words to the LM heads' classes.
        tokenizer ([`ELMoTokenizer`], *optional*): makes the character ids and splits `text` features (needed for
            them); without it, `words` are encoded with the default 50 characters per word.
        label_boundary_positions (`bool`, *optional*, defaults to `False`): labels for `<S>`/`</S>` too, see above.
        pad_to_multiple_of (`int`, *optional*): round T up to a multiple of this.
        return_tensors (`str`, *optional*, defaults to `"pt"`): `"pt"` (torch) or `"np"` (NumPy).
    """

    vocabulary: ELMoWordVocabulary
    tokenizer: ELMoTokenizer | None = None
    label_boundary_positions: bool = False
    pad_to_multiple_of: int | None = None
    return_tensors: str = "pt"

    def __post_init__(self) -> None:
        if not isinstance(self.vocabulary, ELMoWordVocabulary):
            raise TypeError(f"vocabulary must be an ELMoWordVocabulary, got {type(self.vocabulary).__name__}")
        if self.tokenizer is not None and not isinstance(self.tokenizer, ELMoTokenizer):
            raise TypeError(f"tokenizer must be an ELMoTokenizer or None, got {type(self.tokenizer).__name__}")
        if self.return_tensors not in ("pt", "np"):
            raise ValueError(f"return_tensors must be 'pt' or 'np', got {self.return_tensors!r}")
        self._character_tokenizer = self.tokenizer if self.tokenizer is not None else ELMoTokenizer(word_splitter="whitespace")

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor | np.ndarray]:
        if not features:
            raise ValueError("DataCollatorForBiLM got no features: a batch needs at least one sentence")
        sentences = [self._words_of_feature(feature, index) for index, feature in enumerate(features)]
        encoding = self._character_tokenizer(
            sentences,
            is_split_into_words=True,
            padding=True,
            pad_to_multiple_of=self.pad_to_multiple_of,
            return_tensors="np",
        )
        num_positions = encoding["input_ids"].shape[1] + (2 if self.label_boundary_positions else 0)
        labels = [sentence_bilm_labels(self.vocabulary.encode(words), self.label_boundary_positions) for words in sentences]
        batch = {
            "input_ids": encoding["input_ids"],
            "attention_mask": encoding["attention_mask"],
            "next_word_labels": _pad_rows([next_word for next_word, _ in labels], num_positions),
            "previous_word_labels": _pad_rows([previous_word for _, previous_word in labels], num_positions),
        }
        if self.return_tensors == "pt":
            return {key: torch.from_numpy(np.ascontiguousarray(value, dtype=np.int64)) for key, value in batch.items()}
        return batch

    def _words_of_feature(self, feature: Mapping[str, Any], index: int) -> list[str]:
        if not isinstance(feature, Mapping):
            raise TypeError(f"feature {index} must be a dict with 'words' or 'text', got {type(feature).__name__}")
        if "words" in feature:
            return check_sentence_words(feature["words"], f"feature {index} 'words'")
        if "text" in feature:
            if self.tokenizer is None:
                raise ValueError(
                    f"feature {index} has 'text' but the collator has no tokenizer to split it: pass "
                    "tokenizer=ELMoTokenizer(word_splitter=...) or give 'words'"
                )
            text = feature["text"]
            if not isinstance(text, str):
                raise TypeError(f"feature {index} 'text' must be a str, got {type(text).__name__}")
            words = self.tokenizer.tokenize(text)
            return check_sentence_words(words, f"feature {index} 'text'")
        raise KeyError(
            f"feature {index} has neither 'words' nor 'text' (keys: {sorted(feature)}); with Trainer, set "
            "remove_unused_columns=False so that these columns reach the collator"
        )


# The original's regime: fixed windows over a stream per batch row, state carried across batches ----------------------
# Entries of the stream's token table: the padding token, the two boundaries, then every distinct corpus word.
_PADDING_ENTRY, _BOS_ENTRY, _EOS_ENTRY = 0, 1, 2
_TOKEN_DTYPE = np.dtype(np.int32)  # token-table entries on disk: 2**31 distinct words is room enough
_WRITE_CHUNK_TOKENS = 1 << 20  # entries gathered in memory before one write (4 MiB)
TOKEN_FILE_PREFIX = ".elmo-hf-windowed-tokens."


class _TokenFile:
    """The corpus's token-table entries (int32) in a temporary file that has no name (unlinked as it is created: it
    never outlives the process, and no output directory's record sees it), written in chunks, read with positional
    ``os.pread`` (never memory-mapped, so memory does not grow with the file; safe in a forked worker)."""

    def __init__(self, directory: str | Path | None):
        self._file = tempfile.TemporaryFile(dir=directory, prefix=TOKEN_FILE_PREFIX, suffix=TEMPORARY_SUFFIX)
        self._pending = array("i")  # C int: 4 bytes on every platform torch supports
        self.num_tokens = 0

    def append(self, entries: Sequence[int]) -> None:
        self._pending.extend(entries)
        self.num_tokens += len(entries)
        if len(self._pending) >= _WRITE_CHUNK_TOKENS:
            self._write_pending()

    def finish(self) -> None:
        """Write what is still in memory; reads may start."""
        self._write_pending()
        self._file.flush()

    def _write_pending(self) -> None:
        self._file.write(np.asarray(self._pending, dtype=_TOKEN_DTYPE).tobytes())
        self._pending = array("i")

    def read(self, start: int, length: int) -> np.ndarray:
        """(length,) int32 entries from entry `start` on."""
        data = os.pread(self._file.fileno(), length * _TOKEN_DTYPE.itemsize, start * _TOKEN_DTYPE.itemsize)
        if len(data) != length * _TOKEN_DTYPE.itemsize:
            raise OSError(f"the windowed stream's token file ended early: entries {start}..{start + length} asked, "
                          f"{len(data) // _TOKEN_DTYPE.itemsize} read")
        return np.frombuffer(data, dtype=_TOKEN_DTYPE)

    def close(self) -> None:
        self._file.close()


@dataclass(frozen=True)
class _Corpus:
    """The corpus on disk: each sentence wrapped as `<S> w1 ... wn </S>`, words as entries of a token table. Memory:
    the token table (O(distinct words)) and two numbers per sentence; the tokens themselves are in `tokens`."""

    tokens: _TokenFile  # (sum of n_s + 2,) token-table entries, sentences one after another
    sentence_starts: np.ndarray  # (num_sentences,) int64 offset of each sentence in tokens
    sentence_lengths: np.ndarray  # (num_sentences,) int64 n_s + 2
    token_words: list[str | None]  # token-table entry -> word: None (padding), <S>, </S>, then the corpus words


def _read_corpus(
    sentences: Iterable[Any], words_column: str, directory: str | Path | None = None, progress: bool = False
) -> _Corpus:
    """Read the corpus once, writing its tokens to a `_TokenFile` in ``directory`` (default: the system's
    temporary directory); ``progress``: a bar of the sentences read (of how many, when ``sentences`` has a length)."""
    token_words: list[str | None] = [None, BOS_TOKEN, EOS_TOKEN]  # entries _PADDING_ENTRY, _BOS_ENTRY, _EOS_ENTRY
    token_entries: dict[str, int] = {}  # corpus word -> its entry (never <S> / </S>: check_sentence_words refuses them)
    starts = array("q")
    tokens = _TokenFile(directory)
    try:
        with CorpusProgress("building the windowed stream", _length_of(sentences), enabled=progress) as bar:
            for index, sentence in enumerate(iterate_sentences(sentences, words_column)):
                words = check_sentence_words(sentence, f"sentence {index}")
                bar.update(1, len(words))
                if not words:
                    continue  # nothing to predict
                starts.append(tokens.num_tokens)
                wrapped = [_BOS_ENTRY]
                for word in words:
                    entry = token_entries.get(word)
                    if entry is None:
                        entry = token_entries[word] = len(token_words)
                        token_words.append(word)
                    wrapped.append(entry)
                wrapped.append(_EOS_ENTRY)
                tokens.append(wrapped)
        if not starts:
            raise ValueError("the corpus is empty: it has no sentence with at least one word")
        tokens.finish()
    except BaseException:
        tokens.close()
        raise
    sentence_starts = np.frombuffer(starts, dtype=np.int64).copy()
    sentence_lengths = np.diff(np.append(sentence_starts, tokens.num_tokens))
    return _Corpus(tokens, sentence_starts, sentence_lengths, token_words)


def _length_of(sentences: Any) -> int | None:
    try:
        return len(sentences)
    except TypeError:  # a generator, an IterableDataset
        return None


class _EpochPositions:
    """The N positions of an epoch read from the token file on demand: ``pairs(p)`` gives the left and right
    token-table entries at stream positions ``p`` (any shape). Memory: the sentence order and each sentence's start
    in the stream, (num_sentences,) int64 each; a lookup reads only the sentences it touches."""

    def __init__(self, corpus: _Corpus, order: np.ndarray):
        self._corpus = corpus
        self._order = order  # (S,) sentences in stream order
        positions_per_sentence = corpus.sentence_lengths[order] - 1  # n + 1 per sentence of n words
        self._position_starts = np.cumsum(positions_per_sentence) - positions_per_sentence  # (S,)

    def pairs(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(left tokens, right tokens) at ``positions``, each of its shape (one lookup reads the file once for both)."""
        flat = np.asarray(positions, dtype=np.int64).ravel()
        sentence = np.searchsorted(self._position_starts, flat, side="right") - 1  # (P,) in stream order
        needed, which = np.unique(sentence, return_inverse=True)
        starts = self._corpus.sentence_starts[self._order[needed]]  # (U,) in the token file
        lengths = self._corpus.sentence_lengths[self._order[needed]]
        buffer = self._read_sentences(starts, lengths)
        offsets = np.cumsum(lengths) - lengths  # (U,) where each needed sentence starts in buffer
        left_at = offsets[which] + flat - self._position_starts[sentence]
        return buffer[left_at].reshape(np.shape(positions)), buffer[left_at + 1].reshape(np.shape(positions))

    def _read_sentences(self, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The tokens of the sentences at ``starts`` (token file offsets) one after another: one read for each run
        of sentences that follow each other in the file (the whole lookup, in corpus order)."""
        run_breaks = np.flatnonzero(starts[1:] != starts[:-1] + lengths[:-1]) + 1
        run_firsts, run_ends = np.append(0, run_breaks), np.append(run_breaks, len(starts))
        return np.concatenate([
            self._corpus.tokens.read(int(starts[first]), int(starts[end - 1] + lengths[end - 1] - starts[first]))
            for first, end in zip(run_firsts, run_ends)
        ])


def iterate_sentences(sentences: Iterable[Any], words_column: str) -> Iterator[Any]:
    """The sentences of a `Dataset` (its `words_column`, read in batches), or of any iterable of word lists or of
    dict rows (`IterableDataset` included: its rows are dicts)."""
    if isinstance(sentences, Dataset):
        yield from dataset_words(sentences, words_column)  # its cache's pages do not stay resident
        return
    for index, sentence in enumerate(sentences):
        if isinstance(sentence, Mapping):
            if words_column not in sentence:
                raise ValueError(f"row {index} has no {words_column!r} column (columns: {sorted(sentence)})")
            sentence = sentence[words_column]
        yield sentence


class WindowedBiLMStream(torch.utils.data.IterableDataset):
    r"""
    The corpus as bilm-tf trains on it (docs/design/pretraining-data.md, "The original's regime"): one token stream
    per batch row, cut into consecutive windows of `window_size` positions; row b of batch k + 1 continues row b of
    batch k, so the model carries its LSTM state across batches. A *position* is a pair of consecutive tokens of one
    sentence `<S> w1 ... wn </S>` (n + 1 per sentence); the epoch's N positions (sentences in a seeded order per
    epoch) are split into `num_rows` contiguous rows (`numpy.array_split` sizes). The forward direction reads a row's
    positions in order (input the left token, label the right one); the backward direction the same positions in
    reverse (input the right token, label the left one), read left to right by the backward LSTM.

    `remainder="drop"` (bilm-tf) yields `num_batches = (N // num_rows) // window_size` full batches and drops the rest
    of every row (`num_dropped_positions`); `"pad"` (exact evaluation) yields every position once, the tail padded
    (`attention_mask` 0, labels -100). Iterating yields one example per (batch, row), batch-major, so a `DataLoader`
    with `batch_size=len(rows)` rebuilds the batches (`batches()` yields them directly). Each batch: `input_ids` and
    `backward_input_ids` (`(R, window_size, max_characters_per_token)`), `attention_mask`, `next_word_labels` and
    `previous_word_labels` (aligned with `backward_input_ids`) (`(R, window_size)`), `window_index` (`(R,)`, k: 0
    starts an epoch) and `row_index` (`(R,)`, 0 ... R - 1).

    With several processes the batch of `num_rows` rows is global and process `rank` yields only its block
    `rows_of_rank(num_rows, rank, world_size)` of R rows. With `Trainer` use `ELMoPreTrainingTrainer`
    (`dataloader_num_workers=0`: batches must come in order). Memory does not grow with the corpus (its tokens live
    in a nameless temporary file). Both: docs/design/pretraining-data.md.

    Args:
        sentences (`Iterable[list[str]]`, `datasets.Dataset` or `IterableDataset`): the corpus, read once at
            construction (a dataset's `words_column`). Sentences without words are skipped.
        vocabulary ([`ELMoWordVocabulary`]): maps target words to the LM classes (unknown -> `<UNK>`).
        num_rows (`int`): rows per batch (bilm-tf's `batch_size`).
        window_size (`int`, *optional*, defaults to 20): positions per window (bilm-tf's `unroll_steps`).
        shuffle (`bool`, *optional*, defaults to `True`): epoch e's order is `numpy.random.default_rng([seed, e])`'s
            permutation; `False` keeps corpus order.
        seed (`int`, *optional*, defaults to 0), remainder (`str`, *optional*, defaults to `"drop"`): see above.
        words_column (`str`, *optional*, defaults to `"words"`): the column of words in a dataset or in dict rows.
        max_characters_per_token (`int`, *optional*, defaults to 50), unicode_errors (`str`, *optional*, defaults
            to `"strict"`): as in `ELMoTokenizer`.
        token_directory (*optional*): where the token file lives (default: the system's temporary directory).
        progress (`bool`, *optional*, defaults to `False`): a progress bar of the corpus read at construction.
        rank (`int`, *optional*, defaults to 0), world_size (`int`, *optional*, defaults to 1): this process and the
            number sharing the batch; `num_rows` must be a multiple of `world_size`.
    """

    def __init__(
        self,
        sentences: Iterable[Sequence[str]] | Dataset | IterableDataset,
        vocabulary: ELMoWordVocabulary,
        num_rows: int,
        window_size: int = 20,
        shuffle: bool = True,
        seed: int = 0,
        remainder: str = "drop",
        words_column: str = "words",
        max_characters_per_token: int = MAX_CHARACTERS_PER_TOKEN,
        unicode_errors: str = "strict",
        token_directory: str | Path | None = None,
        progress: bool = False,
        rank: int = 0,
        world_size: int = 1,
    ):
        super().__init__()
        if not isinstance(vocabulary, ELMoWordVocabulary):
            raise TypeError(f"vocabulary must be an ELMoWordVocabulary, got {type(vocabulary).__name__}")
        check_int("num_rows", num_rows, 1)
        check_int("window_size", window_size, 1)
        check_int("seed", seed, 0)
        check_choice("remainder", remainder, REMAINDER_CHOICES)
        self.rows = rows_of_rank(num_rows, rank, world_size)
        self.vocabulary = vocabulary
        self.num_rows = num_rows
        self.window_size = window_size
        self.shuffle = shuffle
        self.seed = seed
        self.remainder = remainder
        self.epoch = 0

        self._corpus = _read_corpus(sentences, words_column, token_directory, progress)
        self._token_character_ids = self._build_token_character_ids(max_characters_per_token, unicode_errors)
        self._token_labels = self._build_token_labels()

        self.num_sentences = len(self._corpus.sentence_starts)
        self.num_positions = int(self._corpus.sentence_lengths.sum()) - self.num_sentences  # n + 1 per sentence
        self.row_lengths = self._row_lengths()
        self.num_batches = self._num_batches()
        self.num_dropped_positions = self.num_positions - sum(self._kept_row_lengths())
        logger.info(
            "WindowedBiLMStream: %d sentences, %d positions per direction, %d batches of %d rows x %d, %d positions "
            "dropped (remainder=%r)",
            self.num_sentences,
            self.num_positions,
            self.num_batches,
            num_rows,
            window_size,
            self.num_dropped_positions,
            remainder,
        )

    # ---- construction helpers ----
    def _build_token_character_ids(self, max_characters_per_token: int, unicode_errors: str) -> np.ndarray:
        """(token-table entries, max_characters_per_token) character ids; row 0 (padding) all zeros."""
        character_ids = np.zeros((len(self._corpus.token_words), max_characters_per_token), dtype=np.int64)
        for entry, word in enumerate(self._corpus.token_words):
            if word is not None:
                character_ids[entry] = word_to_character_ids(word, max_characters_per_token, unicode_errors)
        return character_ids

    def _build_token_labels(self) -> np.ndarray:
        """(token-table entries,) vocabulary ids; -100 for padding."""
        labels = np.empty(len(self._corpus.token_words), dtype=np.int64)
        labels[_PADDING_ENTRY] = IGNORE_INDEX
        labels[_BOS_ENTRY] = BOS_WORD_ID
        labels[_EOS_ENTRY] = EOS_WORD_ID
        for entry in range(_EOS_ENTRY + 1, len(labels)):
            labels[entry] = self.vocabulary.word_to_id(self._corpus.token_words[entry])
        return labels

    def _row_lengths(self) -> tuple[int, ...]:
        if self.num_positions < self.num_rows:
            raise ValueError(
                f"the corpus has {self.num_positions} positions (words + one per sentence), fewer than num_rows="
                f"{self.num_rows}: every row needs at least one"
            )
        base, extra = divmod(self.num_positions, self.num_rows)
        return tuple(base + (row < extra) for row in range(self.num_rows))

    def _num_batches(self) -> int:
        if self.remainder == "pad":
            return -(-max(self.row_lengths) // self.window_size)
        num_batches = min(self.row_lengths) // self.window_size
        if num_batches == 0:
            raise ValueError(
                f"no full window: the corpus has {self.num_positions} positions, {min(self.row_lengths)} per row with "
                f"num_rows={self.num_rows}, fewer than window_size={self.window_size}; use fewer rows, a smaller "
                "window or remainder='pad'"
            )
        return num_batches

    def _kept_row_lengths(self) -> list[int]:
        if self.remainder == "pad":
            return list(self.row_lengths)
        return [self.num_batches * self.window_size] * self.num_rows

    # ---- epochs ----
    def set_epoch(self, epoch: int) -> None:
        """Use the sentence order of `epoch` from now on (`Trainer`/accelerate call this before each epoch)."""
        self.epoch = check_int("epoch", epoch, 0)

    def sentence_order(self, epoch: int | None = None) -> np.ndarray:
        """Indices of the (non-empty) sentences in the order the stream of `epoch` (default: `self.epoch`) reads them."""
        epoch = self.epoch if epoch is None else epoch
        if not self.shuffle:
            return np.arange(self.num_sentences)
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_sentences)

    # ---- iteration ----
    def batches(self, epoch: int | None = None) -> Iterator[dict[str, torch.Tensor]]:
        """The batches of `epoch` (default: `self.epoch`) in order, as dicts of tensors (see the class docstring):
        this process's `rows` of each global batch, R = `len(self.rows)` of them."""
        # The epoch's positions (no position from one sentence's </S> to the next one's <S>), read as asked for.
        positions = _EpochPositions(self._corpus, self.sentence_order(epoch))
        row_lengths = np.asarray(self.row_lengths)
        row_starts = (np.cumsum(row_lengths) - row_lengths)[self.rows]  # (R,)
        kept_lengths = np.asarray(self._kept_row_lengths())[self.rows]  # (R,)
        for window_index in range(self.num_batches):
            step = window_index * self.window_size + np.arange(self.window_size)  # (W,) steps along a row
            is_real = step[None, :] < kept_lengths[:, None]  # (R, W)
            # Stream positions read at each step: forward from the row's start, backward from its (kept) end.
            forward = np.where(is_real, row_starts[:, None] + step[None, :], 0)  # (R, W)
            backward = np.where(is_real, row_starts[:, None] + kept_lengths[:, None] - 1 - step[None, :], 0)  # (R, W)
            forward_left, forward_right = positions.pairs(forward)  # (R, W) token-table entries each
            backward_left, backward_right = positions.pairs(backward)
            batch = {
                "input_ids": self._token_character_ids[np.where(is_real, forward_left, _PADDING_ENTRY)],
                "attention_mask": is_real.astype(np.int64),
                "next_word_labels": self._token_labels[np.where(is_real, forward_right, _PADDING_ENTRY)],
                "backward_input_ids": self._token_character_ids[np.where(is_real, backward_right, _PADDING_ENTRY)],
                "previous_word_labels": self._token_labels[np.where(is_real, backward_left, _PADDING_ENTRY)],
                "window_index": np.full(len(self.rows), window_index, dtype=np.int64),
                "row_index": np.arange(len(self.rows), dtype=np.int64),
            }
            yield {key: torch.from_numpy(value) for key, value in batch.items()}

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        worker = torch.utils.data.get_worker_info()
        if worker is not None and worker.num_workers > 1:
            raise RuntimeError(
                f"WindowedBiLMStream needs its batches in order for the LSTM state to carry over, but the DataLoader "
                f"has {worker.num_workers} workers: use num_workers=0 or 1 (Trainer: dataloader_num_workers=0)"
            )
        for batch in self.batches():
            for row in range(len(self.rows)):
                yield {key: value[row] for key, value in batch.items()}

    def __len__(self) -> int:
        """This process's examples per epoch (`num_batches * len(rows)`), the same for every epoch."""
        return self.num_batches * len(self.rows)

    def close(self) -> None:
        """Release the token file now (it is released when the stream is garbage-collected otherwise)."""
        self._corpus.tokens.close()


def rows_of_rank(num_rows: int, rank: int, world_size: int) -> range:
    """The contiguous block of a global batch's `num_rows` rows that process `rank` of `world_size` reads:
    `range(rank * n, (rank + 1) * n)`, n = `num_rows // world_size`. Raises `ValueError` unless `num_rows` is a
    multiple of `world_size` (each process gets the same number of rows, a data-parallel step's requirement)."""
    check_int("world_size", world_size, 1)
    check_int("rank", rank, 0)
    if rank >= world_size:
        raise ValueError(f"rank must be in [0, {world_size}) for world_size={world_size}, got {rank}")
    if num_rows % world_size:
        raise ValueError(
            f"the batch's {num_rows} rows (num_rows, --batch-size) do not split evenly over {world_size} processes: "
            f"use a multiple of {world_size} (e.g. {num_rows - num_rows % world_size or world_size})"
        )
    rows_per_rank = num_rows // world_size
    return range(rank * rows_per_rank, (rank + 1) * rows_per_rank)


__all__ = ["DataCollatorForBiLM", "WindowedBiLMStream", "rows_of_rank", "sentence_bilm_labels"]
