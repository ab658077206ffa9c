"""Bulk embedding: ELMo vectors for whole corpora, on top of 🤗 `datasets`.

[`ELMoEmbedder`] is a callable for `Dataset.map(batched=True)` (and `IterableDataset.map`): it takes a batch of rows
with a text column (raw sentences) or a words column (pre-split sentences) and returns the new columns

- `elmo` (name configurable): per-word vectors `(words, D)` (`(words, L + 1, D)` for all layers), or with a
  `pooling` one sentence vector `(D,)` (`(L + 1, D)`; `2D` wide for `"mean_max"` and `"first_last"`) pooled over the
  sentence's real words only (`pooling_elmo.pool_words`, the one pooling of the package);
- `num_words`: the number of words of the sentence;
- `words` (raw-text input only): the words the vectors belong to, as the tokenizer split them.

[`embed_dataset`] does the `map` with the right output features. Inside each map batch, sentences are grouped by
length into model batches (by a sentence count and/or a padded-word budget) and the rows come back in their
original order. Everything runs under `torch.inference_mode()`.

Input rules (every one of them tested):

- An empty or whitespace-only text is a sentence with zero words: its per-word vectors have shape `(0, D)`, its
  pooled vector is all zeros, `num_words` is 0. It never reaches the model.
- A text that is `None` or not a string (or a words value that is not a list of strings) raises a `ValueError` naming
  the row; with `on_invalid="skip"` such rows are dropped instead and a warning names them.
- A sentence longer than `max_window_words` is cut into windows so memory stays bounded: its words are split into
  consecutive cores of `max_window_words - 2 * window_context` words, each core is run with up to `window_context`
  words of context on each side (a window is at most `max_window_words` words, run like a sentence of its own, with
  `<S>`/`</S>`), and every word takes its vectors from the window whose core holds it. Every word gets exactly one
  vector; sentences up to `max_window_words` words are run whole.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch
from datasets import Array2D, Array3D, Dataset, Features, IterableDataset, List, Value

from .. import DEFAULT_MODEL_DIR
from ..choices_elmo import COMPUTE_DTYPES, OUTPUT_POOLINGS, STORAGE_DTYPES
from ..corpus.readers import DEFAULT_TEXT_COLUMN, InvalidRowError, sentence_column
from ..modeling_elmo import ELMoModel
from ..pooling_elmo import check_representation, pool_words, pooled_size
from ..tokenization_elmo import ELMoTokenizer
from ..validation_elmo import ELMoHFError, check_bool, check_choice, check_int, is_int
from .batching import (
    DEFAULT_MIN_BATCH_SIZE, DEFAULT_WORDS_PER_BATCH, PreparedBatch, PreparedSentences, SentencePiece, length_grouped_batches,
    split_into_windows,
)
from .loading import checked_device, emulated_compute_dtype, model_compute_dtype, model_vocabulary_words, placed_model
from .manifest import embedding_request

logger = logging.getLogger(__name__)


ON_INVALID_CHOICES = ("raise", "skip")

# Distinct words whose token-layer vectors a bulk run keeps (ELMoModel.cache_token_embeddings): a corpus's common
# words at bounded memory (docs/design/embedding.md, "The token-layer cache").
DEFAULT_TOKEN_CACHE_WORDS = 50_000

# on_progress(sentences finished, words embedded), called after every model batch.
ProgressCallback = Callable[[int, int], None]

NUM_WORDS_COLUMN = "num_words"
WORDS_COLUMN = "words"


class NonFiniteVectorsError(ELMoHFError):
    """The model returned NaN or infinite vectors; the message names the sentence."""


class ELMoEmbedder:
    r"""
    ELMo vectors for batches of sentences; an instance is the function of `Dataset.map(batched=True)`.

    Args:
        model ([`ELMoModel`]): the biLM. It is put in eval mode (and moved to `device` when given).
        tokenizer ([`ELMoTokenizer`], *optional*): splits raw text into words and builds character ids; defaults to
            `ELMoTokenizer()` with `max_characters_per_token` from the model's config.
        representation (`str` or `int`, defaults to `"mix"`): `"mix"` the scalar mix `mix_index`
            (`elmo_representations`), `"top"` the top biLSTM layer, `"average"` the plain mean of the L + 1 layers,
            `"all"` every layer stacked `(words, L + 1, D)`, or an int j for layer j alone (0 = token layer).
        mix_index (`int`, defaults to 0): which scalar mix, with `representation="mix"`.
        pooling (`str`, defaults to `"none"`): `"none"` per-word vectors; otherwise one vector per sentence over its
            real words (zeros for a sentence with no words): `"mean"`, `"max"`, `"mean_max"` (both concatenated) or
            `"first_last"` (the first and last word's vectors concatenated), as `ELMoModelOutput.sentence_vectors`.
        dtype (`str`, defaults to `"float32"`): storage dtype of the vectors, `"float32"` or `"float16"`; the model
            always computes in its own dtype and pooling is done in float32 before the cast.
        batch_size (`int`, *optional*): most sentences (windows) per model batch; `None` for no limit.
        max_words_per_batch (`int`, *optional*): most padded words per model batch (sentences x longest sentence).
            When neither is given, the device's budget (`DEFAULT_WORDS_PER_BATCH`: 4096 words on CPU).
        min_batch_size (`int`, *optional*): a batch of fewer windows than this may grow past `max_words_per_batch`,
            up to `MIN_BATCH_SIZE_WORDS_FACTOR` (4) times it, so that long windows do not run a few rows per LSTM step.
            By default the device's floor (`DEFAULT_MIN_BATCH_SIZE`: 128 on CPU) with the device's word budget, and 0
            (no floor: `max_words_per_batch` is a hard limit) when `batch_size` or `max_words_per_batch` is given.
        token_cache_words (`int`, defaults to 50,000): keep the token-layer vectors of up to this many distinct words
            met (`ELMoModel.cache_token_embeddings(max_words=...)`), so a repeated word skips the character CNN; the
            output is unchanged bit for bit. 0 turns it off; a cache the model already has is left as it is.
        max_window_words (`int`, defaults to 256) and window_context (`int`, defaults to 32): longer sentences are
            run in windows (see the module docstring); needs `max_window_words > 2 * window_context`.
        text_column (`str`, defaults to `"text"`): column of raw sentences, used when `words_column` is not set.
        words_column (`str`, *optional*): column of pre-split sentences (lists of words); no `words` column is added.
        output_column (`str`, defaults to `"elmo"`): name of the vectors column.
        on_invalid (`str`, defaults to `"raise"`): `"raise"` on a `None`/non-string text, `"skip"` to drop the row.
        check_finite (`bool`, defaults to `True`): raise `NonFiniteVectorsError` naming the sentence when the model
            returns NaN or infinite vectors (a damaged model or a dtype overflow) instead of storing them.
        device (`str` or `torch.device`, *optional*): where the model runs, e.g. `"cuda"`.
        allow_tf32 (`bool`, defaults to `False`): let a float32 model on CUDA use TF32 (`ELMoModel.allow_tf32`):
            faster on Ampere and later GPUs, about 1e-2 off in the top layer of the original shape. Off, float32 is
            float32 on every device.
        compute_dtype (`str`, *optional*): cast the model's weights to this dtype (`COMPUTE_DTYPES`) and compute in
            it; by default the model's own. bfloat16 / float16 are not exact (per-word cosine >= 0.999 to float32)
            and pay off only where the hardware has them: a GPU, or for bfloat16 a CPU with AMX or AVX512-BF16. On
            other CPUs torch emulates them, far slower than float32, and a warning says so
            (`emulated_compute_dtype`). `"int8"` (CPU only) keeps the float32 weights and runs the LSTM matmuls
            and the token layer's convolutions and highways in int8 on quantized copies, per-vector cosine >= 0.999
            to float32 (docs/results/int8.md).
            The vectors are stored as `dtype` whatever this is.

    Example:

    ```python
    >>> embedder = ELMoEmbedder.from_pretrained("models/elmo-fixture", pooling="mean")
    >>> dataset = embed_dataset(Dataset.from_dict({"text": ["The bank raised rates .", ""]}), embedder)
    >>> dataset.with_format("numpy")[0]["elmo"].shape, dataset[1]["num_words"]
    ((32,), 0)
    ```
    """

    def __init__(
        self,
        model: ELMoModel,
        tokenizer: ELMoTokenizer | None = None,
        *,
        representation: str | int = "mix",
        mix_index: int = 0,
        pooling: str = "none",
        dtype: str = "float32",
        batch_size: int | None = None,
        max_words_per_batch: int | None = None,
        min_batch_size: int | None = None,
        token_cache_words: int = DEFAULT_TOKEN_CACHE_WORDS,
        max_window_words: int = 256,
        window_context: int = 32,
        text_column: str = DEFAULT_TEXT_COLUMN,
        words_column: str | None = None,
        output_column: str = "elmo",
        on_invalid: str = "raise",
        check_finite: bool = True,
        device: str | torch.device | None = None,
        allow_tf32: bool = False,
        compute_dtype: str | None = None,
    ):
        config = model.config
        batch_size, max_words_per_batch, max_window_words, window_context = self._check_options(
            config, representation, mix_index, pooling, dtype, batch_size, max_words_per_batch, max_window_words,
            window_context, on_invalid,
        )
        token_cache_words = check_int("token_cache_words", token_cache_words, 0)
        min_batch_size = check_int("min_batch_size", min_batch_size, 0, allow_none=True)
        self.allow_tf32 = check_bool("allow_tf32", allow_tf32)
        self.model = self._placed_model(model, device, compute_dtype)
        self.compute_dtype = model_compute_dtype(self.model)
        self.model.allow_tf32 = self.allow_tf32
        if batch_size is None and max_words_per_batch is None:
            max_words_per_batch = DEFAULT_WORDS_PER_BATCH.get(self.model.device.type, DEFAULT_WORDS_PER_BATCH["cpu"])
            if min_batch_size is None:
                min_batch_size = DEFAULT_MIN_BATCH_SIZE.get(self.model.device.type, 0)
        if token_cache_words and self.model.char_embeddings.token_embedding_cache is None:
            self.model.cache_token_embeddings(max_words=token_cache_words)
        self.tokenizer = self._fitting_tokenizer(tokenizer, config)
        self.representation = representation
        self.mix_index = mix_index
        self.pooling = pooling
        self.dtype = dtype
        self.batch_size = batch_size
        self.max_words_per_batch = max_words_per_batch
        self.min_batch_size = min_batch_size or 0
        self.max_window_words = max_window_words
        self.window_context = window_context
        self.text_column = text_column
        self.words_column = words_column
        self.output_column = output_column
        self.on_invalid = on_invalid
        self.check_finite = check_bool("check_finite", check_finite)
        # What from_pretrained was asked for (manifest.embedding_request), recorded by embed_corpus; None when the
        # embedder was made from a model object.
        self.request: dict[str, Any] | None = None

    @staticmethod
    def _placed_model(model: ELMoModel, device, compute_dtype: str | None) -> ELMoModel:
        """``placed_model``, with a warning where the compute dtype is emulated (far slower than float32)."""
        model = placed_model(model, device, compute_dtype)
        if compute_dtype is not None and emulated_compute_dtype(model.device, model.dtype):
            logger.warning(
                "compute_dtype=%s: this CPU has no hardware %s matmuls, so torch emulates them, far slower than "
                "float32; float32 is faster here, and exact",
                compute_dtype, compute_dtype,
            )
        return model

    @staticmethod
    def _fitting_tokenizer(tokenizer: ELMoTokenizer | None, config) -> ELMoTokenizer:
        """``tokenizer`` (default: ``ELMoTokenizer`` at the model's character slots), refused unless it fits the
        model."""
        tokenizer = tokenizer or ELMoTokenizer(max_characters_per_token=config.max_characters_per_token)
        if tokenizer.max_characters_per_token != config.max_characters_per_token:
            raise ValueError(
                f"tokenizer.max_characters_per_token is {tokenizer.max_characters_per_token} but the model "
                f"expects {config.max_characters_per_token}"
            )
        mismatch = tokenizer.mismatch_with(config)  # e.g. a model with a character vocabulary of its own
        if mismatch is not None:
            raise ValueError(f"The tokenizer does not fit the model: {mismatch}.")
        return tokenizer

    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str | Path,
        *,
        revision: str | None = None,
        device: str | torch.device | None = None,
        prefill_token_cache: bool | None = None,
        **options,
    ) -> "ELMoEmbedder":
        """Load model and tokenizer from a directory or Hub repo id; ``options`` are the constructor's. The device is
        checked before anything is loaded.

        ``prefill_token_cache``: put the first ``token_cache_words`` words of the model's ``vocab.txt`` (its training
        vocabulary, most frequent first; pre-training outputs and converted NLPL archives have one) into the
        token-layer cache up front. By default only off the CPU: a GPU computes them fast, and where the GPU's kernels
        keep the cache from growing exactly (``ELMoModel.cache_token_embeddings``) these are the words it keeps; on the
        CPU the cache keeps every word met, exactly, and filling it up front would cost seconds
        (docs/design/embedding.md, "The token-layer cache")."""
        request = embedding_request(name_or_path, revision, device, options)
        if device is not None:
            device = checked_device(device)
        if prefill_token_cache is not None:
            check_bool("prefill_token_cache", prefill_token_cache)
        name_or_path = str(name_or_path)
        model = ELMoModel.from_pretrained(name_or_path, revision=revision)
        tokenizer = ELMoTokenizer.from_pretrained(name_or_path, revision=revision)
        cache_words = options.get("token_cache_words", DEFAULT_TOKEN_CACHE_WORDS)
        if prefill_token_cache is None:
            prefill_token_cache = device is not None and device.type != "cpu"
        if prefill_token_cache and is_int(cache_words) and cache_words > 0:
            words = model_vocabulary_words(name_or_path, revision=revision, max_words=cache_words)
            if words:  # computed where, and in the dtype, the model will run
                model = placed_model(model, device, options.get("compute_dtype"))
                model.cache_token_embeddings(words, max_words=cache_words)
        embedder = cls(model, tokenizer, device=device, **options)
        embedder.request = request
        return embedder

    @staticmethod
    def _check_options(
        config, representation, mix_index, pooling, dtype, batch_size, max_words_per_batch, max_window_words,
        window_context, on_invalid,
    ) -> tuple[int | None, int | None, int, int]:
        """Refuse an option out of range; ``(batch_size, max_words_per_batch, max_window_words, window_context)`` as
        Python ints (a NumPy int is taken as the int it is: the manifest records these options as JSON)."""
        check_representation(representation, config.num_representation_layers, config.num_output_representations, mix_index)
        check_choice("pooling", pooling, OUTPUT_POOLINGS)
        check_choice("dtype", dtype, STORAGE_DTYPES)
        check_choice("on_invalid", on_invalid, ON_INVALID_CHOICES)
        batch_size = check_int("batch_size", batch_size, 1, allow_none=True)
        max_words_per_batch = check_int("max_words_per_batch", max_words_per_batch, 1, allow_none=True)
        window_context = check_int("window_context", window_context, 0)
        max_window_words = check_int(
            "max_window_words", max_window_words, 2 * window_context + 1,
            hint=f"larger than 2 * window_context = {2 * window_context}: each window needs at least one word of its own",
        )
        return batch_size, max_words_per_batch, max_window_words, window_context

    def options(self) -> dict[str, Any]:
        """Every option that changes the output (batching too: it changes the last bits), as plain JSON values."""
        return {
            "representation": self.representation,
            "mix_index": self.mix_index,
            "pooling": self.pooling,
            "dtype": self.dtype,
            "batch_size": self.batch_size,
            "max_words_per_batch": self.max_words_per_batch,
            "min_batch_size": self.min_batch_size,
            "max_window_words": self.max_window_words,
            "window_context": self.window_context,
            "text_column": self.text_column,
            "words_column": self.words_column,
            "output_column": self.output_column,
            "on_invalid": self.on_invalid,
            "allow_tf32": self.allow_tf32,
            "compute_dtype": self.compute_dtype,
            "tokenizer": {"word_splitter": self.tokenizer.word_splitter, "unicode_errors": self.tokenizer.unicode_errors},
        }

    # ------------------------------------------------------------------ output schema

    @property
    def vector_size(self) -> int:
        return self.model.config.output_dim

    @property
    def input_column(self) -> str:
        return sentence_column(self.text_column, self.words_column)

    @property
    def pooled(self) -> bool:
        """Whether a row gets one sentence vector (any `pooling` but `"none"`) rather than per-word vectors."""
        return self.pooling != "none"

    @property
    def features(self) -> Features:
        """The `datasets` features of the columns this embedder adds."""
        shape = self.vector_shape
        if self.pooled:
            vectors = Array2D(shape, self.dtype) if len(shape) == 2 else List(Value(self.dtype), length=shape[0])
        else:
            vectors = (Array3D if len(shape) == 2 else Array2D)((None, *shape), self.dtype)
        features = {self.output_column: vectors, NUM_WORDS_COLUMN: Value("int32")}
        if self.words_column is None:
            features[WORDS_COLUMN] = List(Value("string"))
        return Features(features)

    # ------------------------------------------------------------------ the datasets.map function

    def __call__(self, batch: dict[str, list], indices: Sequence[int] | None = None) -> dict[str, list]:
        """Embed one `map` batch. ``indices`` (from `with_indices=True`) name rows in errors and warnings.

        With ``on_invalid="skip"`` the returned batch holds only the valid rows, with every input column (map must
        then be called with ``remove_columns`` = all input columns, as `embed_dataset` does)."""
        if self.input_column not in batch:
            raise KeyError(f"column {self.input_column!r} not found; the batch has columns {sorted(batch)}")
        values = batch[self.input_column]
        row_names = [f"row {index}" for index in indices] if indices is not None else [f"row {index} of this batch" for index in range(len(values))]
        sentences, valid = self.sentences_from_column(values, row_names)
        output = self.embed_sentences(sentences)
        if self.on_invalid == "skip":
            # Always hand the input columns back (map removes them in this mode), without the skipped rows.
            skipped = [name for name, keep in zip(row_names, valid) if not keep]
            if skipped:
                logger.warning("Skipped %d row(s) with invalid %r: %s", len(skipped), self.input_column, ", ".join(skipped[:20]))
            kept_input = {column: [value for value, keep in zip(column_values, valid) if keep] for column, column_values in batch.items()}
            return {**kept_input, **output}
        return output

    def sentences_from_column(self, values: Sequence[Any], row_names: Sequence[str]) -> tuple[list[list[str]], list[bool]]:
        """Words of every valid row and, per row, whether it was valid. Invalid rows raise `InvalidRowError` unless
        ``on_invalid="skip"``."""
        sentences, valid = [], []
        for value, row_name in zip(values, row_names):
            try:
                words = self.words_of(value)
            except InvalidRowError as error:
                if self.on_invalid == "raise":
                    raise InvalidRowError(f"{row_name}: {error} (pass on_invalid='skip' to drop such rows)") from None
                valid.append(False)
                continue
            sentences.append(words)
            valid.append(True)
        return sentences, valid

    def words_of(self, value: Any) -> list[str]:
        """The words of one text (or words) value; raises `InvalidRowError` for a value that cannot be embedded."""
        if self.words_column is None:
            if not isinstance(value, str):
                raise InvalidRowError(f"{self.text_column!r} is {value!r:.60} of type {type(value).__name__}; expected a string")
            try:
                return self.tokenizer.tokenize(value)
            except ValueError as error:  # e.g. a lone surrogate
                raise InvalidRowError(f"{self.text_column!r} cannot be tokenised: {error}") from None
        if not isinstance(value, (list, tuple)) or not all(isinstance(word, str) and word for word in value):
            raise InvalidRowError(
                f"{self.words_column!r} is {value!r:.60}; expected a list of non-empty strings (the words of a sentence)"
            )
        return list(value)

    # ------------------------------------------------------------------ the core

    def embed_sentences(self, sentences: Sequence[Sequence[str]], on_progress: ProgressCallback | None = None) -> dict[str, list]:
        """The new columns for ``sentences`` (lists of words), named as in `features`: vectors, word counts and (for
        raw text) the words, each a list with one entry per sentence."""
        return self.output_columns(sentences, self.embed_words(sentences, on_progress))

    def output_columns(self, sentences: Sequence[Sequence[str]], vectors: list[np.ndarray]) -> dict[str, list]:
        """The new columns, named as in `features`, from ``sentences`` and their ``vectors`` (`embed_words`)."""
        columns = {self.output_column: vectors, NUM_WORDS_COLUMN: [len(words) for words in sentences]}
        if self.words_column is None:
            columns[WORDS_COLUMN] = [list(words) for words in sentences]
        return columns

    def embed_words(self, sentences: Sequence[Sequence[str]], on_progress: ProgressCallback | None = None) -> list[np.ndarray]:
        """One numpy array per sentence: `(words, D)`, `(words, L + 1, D)` for all layers, or pooled `(D,)` /
        `(L + 1, D)`; in the order of ``sentences``, in the storage dtype (unpooled: views of one array per call; keep
        a copy of the few you keep). ``on_progress(sentences, words)`` is called after every model batch with the
        sentences it finished and the words it embedded."""
        return self.embed_prepared(self.prepare(sentences), on_progress)

    def prepare(self, sentences: Sequence[Sequence[str]]) -> "PreparedSentences":
        """Everything before the model, on the CPU: windows, length-grouped model batches and their character ids
        (in pinned memory when the model is on a GPU). Touches neither the model nor any state, so a pipeline runs it
        on another thread ahead of the device."""
        pieces = [
            SentencePiece(sentence_index, *window)
            for sentence_index, words in enumerate(sentences)
            if words
            for window in split_into_windows(len(words), self.max_window_words, self.window_context)
        ]
        pin = self.model.device.type == "cuda"
        batches = []
        for indices in length_grouped_batches(
            [piece.num_words for piece in pieces], self.batch_size, self.max_words_per_batch, self.min_batch_size
        ):
            batch_pieces = [pieces[index] for index in indices]
            input_ids, attention_mask = self.tokenizer.batch_character_ids(
                [sentences[piece.sentence][piece.start : piece.end] for piece in batch_pieces]
            )
            input_ids, attention_mask = torch.from_numpy(input_ids), torch.from_numpy(attention_mask)
            if pin:
                input_ids, attention_mask = input_ids.pin_memory(), attention_mask.pin_memory()
            batches.append(PreparedBatch(batch_pieces, input_ids, attention_mask))
        return PreparedSentences(sentences, pieces, batches)

    def embed_prepared(self, prepared: "PreparedSentences", on_progress: ProgressCallback | None = None) -> list[np.ndarray]:
        """`embed_words` on what `prepare` made. On a GPU the next batch is computed while the last one is copied
        back (non-blocking, into pinned memory) and stored."""
        sentences = prepared.sentences
        # One buffer for every word, each sentence a view of its rows: one allocation instead of one per sentence.
        first_word = np.cumsum([0] + [len(words) for words in sentences])  # (S + 1,)
        all_words = np.zeros((first_word[-1], *self.word_vector_shape), dtype=np.float32)  # (words, *word_vector_shape)
        pieces_left = Counter(piece.sentence for piece in prepared.pieces)
        if on_progress is not None:
            on_progress(len(sentences) - len(pieces_left), 0)  # sentences without words are done already

        def store(batch: PreparedBatch, vectors: torch.Tensor, copied: torch.cuda.Event | None) -> None:
            if copied is not None:
                copied.synchronize()
            vectors = vectors.numpy()  # (B, T, *vector_shape) float32
            self._check_finite(vectors, batch, sentences)
            finished = 0
            for row, piece in enumerate(batch.pieces):
                core = slice(piece.core_start - piece.start, piece.core_end - piece.start)
                sentence_start = first_word[piece.sentence]
                all_words[sentence_start + piece.core_start : sentence_start + piece.core_end] = vectors[row, core]
                pieces_left[piece.sentence] -= 1
                finished += pieces_left[piece.sentence] == 0
            if on_progress is not None:
                on_progress(finished, sum(piece.core_end - piece.core_start for piece in batch.pieces))

        in_flight = None
        with torch.inference_mode():
            for batch in prepared.batches:
                copy = self._copy_to_host(self._run_model(batch))
                if in_flight is not None:
                    store(*in_flight)
                in_flight = (batch, *copy)
            if in_flight is not None:
                store(*in_flight)
        # Values past float16's range are refused above unless check_finite is off: then they are stored as inf, as
        # asked, without numpy's overflow warning.
        with np.errstate(over="ignore"):
            if not self.pooled:  # one conversion of the buffer, then a view per sentence
                all_words = all_words.astype(self.dtype, copy=False)
            per_sentence = [all_words[start:end] for start, end in zip(first_word[:-1], first_word[1:])]
            if self.pooled:
                return [self._pool_sentence(vectors).astype(self.dtype, copy=False) for vectors in per_sentence]
            return per_sentence

    def _pool_sentence(self, vectors: np.ndarray) -> np.ndarray:
        """One sentence's word vectors `(words, *word_vector_shape)` pooled, in float32: `(*vector_shape)`."""
        words = torch.from_numpy(vectors).unsqueeze(0)  # (1, words, *word_vector_shape)
        return pool_words(words, torch.ones(1, len(vectors), dtype=torch.bool), self.pooling)[0].numpy()

    @property
    def word_vector_shape(self) -> tuple[int, ...]:
        """Shape of one word's vector: `(D,)`, or `(L + 1, D)` for all layers."""
        if self.representation == "all":
            return (self.model.config.num_representation_layers, self.vector_size)
        return (self.vector_size,)

    @property
    def vector_shape(self) -> tuple[int, ...]:
        """Shape of one stored vector: a word's (`word_vector_shape`), or a sentence's when pooled, whose last
        axis is twice as wide for `"mean_max"` and `"first_last"`."""
        if not self.pooled:
            return self.word_vector_shape
        *leading, size = self.word_vector_shape
        return (*leading, pooled_size(size, self.pooling))

    def _run_model(self, batch: "PreparedBatch") -> torch.Tensor:
        """The selected representation of one model batch, float32 on the model's device. (B, T, *vector_shape)"""
        device = self.model.device
        output = self.model(
            input_ids=batch.input_ids.to(device, non_blocking=True),
            attention_mask=batch.attention_mask.to(device, non_blocking=True),
        )
        return output.word_vectors(self.representation, self.mix_index).float()

    @staticmethod
    def _copy_to_host(vectors: torch.Tensor) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        """``vectors`` on the CPU, and for a GPU tensor the event after which the non-blocking copy is complete."""
        if vectors.device.type != "cuda":
            return vectors.cpu(), None
        host = torch.empty(vectors.shape, dtype=vectors.dtype, pin_memory=True)
        host.copy_(vectors, non_blocking=True)
        copied = torch.cuda.Event()
        copied.record()
        return host, copied

    def _check_finite(self, vectors: np.ndarray, batch: "PreparedBatch", sentences: Sequence[Sequence[str]]) -> None:
        """``NonFiniteVectorsError`` naming the first sentence of ``batch`` with a vector that is NaN or infinite in
        the stored dtype: a float16 output checks the vectors cast to float16, where anything beyond 65,504 becomes
        infinite (pooled vectors are means or maxima of these words, so they stay within the same bound)."""
        if not self.check_finite:
            return
        with np.errstate(over="ignore"):
            stored = vectors if self.dtype == "float32" else vectors.astype(self.dtype)
        finite_rows = np.isfinite(stored.reshape(len(stored), -1)).all(axis=1)
        if finite_rows.all():
            return
        row = int(np.flatnonzero(~finite_rows)[0])
        piece = batch.pieces[row]
        overflow = self.dtype != "float32" and np.isfinite(vectors[row]).all()
        largest = float(np.abs(vectors[row]).max()) if overflow else None
        raise NonFiniteVectorsError(
            f"the model returned {'vectors too large for ' + self.dtype if overflow else 'NaN or infinite vectors'} "
            f"for the sentence {' '.join(sentences[piece.sentence][piece.start : piece.end])[:80]!r} "
            f"(representation {self.representation!r}"
            + (f": |value| up to {largest:,.0f}, {self.dtype} holds at most {float(np.finfo(self.dtype).max):,.0f}, "
               "so it would be stored as infinite; store float32" if overflow else "")
            + "): a damaged model or a dtype overflow (pass check_finite=False / --allow-non-finite to store them "
            "anyway)"
        )



def embed_dataset(
    dataset: Dataset | IterableDataset,
    embedder: ELMoEmbedder,
    *,
    map_batch_size: int = 1000,
    **map_kwargs,
) -> Dataset | IterableDataset:
    """Add the embedder's columns to ``dataset`` with `map(batched=True)`.

    ``map_batch_size`` rows are grouped by length at a time (a larger value groups better and holds more vectors in
    memory). ``map_kwargs`` go to `map` (e.g. `cache_file_name`, `num_proc`; with `num_proc > 1` on CPU call
    `torch.set_num_threads(1)` first, see docs/design/embedding.md). Rows keep their order; with `on_invalid="skip"` invalid
    rows are dropped.
    """
    if dataset.features is None:
        # A streamed dataset (e.g. load_dataset("text", streaming=True)) does not know its columns until it reads a
        # row; datasets' own interleave/concatenate resolve them the same way.
        dataset = dataset._resolve_features()
    column_names = list(dataset.column_names)
    if embedder.input_column not in column_names:
        raise KeyError(f"column {embedder.input_column!r} not found in the dataset; it has {column_names}")
    clashes = sorted(set(embedder.features) & set(column_names))
    if clashes:
        raise ValueError(
            f"the dataset already has column(s) {clashes} that the embedder would write; rename them or set "
            "output_column="
        )
    features = Features({**dataset.features, **embedder.features})
    remove_columns = column_names if embedder.on_invalid == "skip" else None
    return dataset.map(
        embedder,
        batched=True,
        batch_size=map_batch_size,
        with_indices=True,
        features=features,
        remove_columns=remove_columns,
        **map_kwargs,
    )


def embed_texts(embedder: ELMoEmbedder, texts: Iterable[str]) -> list[np.ndarray]:
    """Vectors for ``texts`` (raw sentences, or lists of words when the embedder has a ``words_column``) without a
    dataset, one array per text in order. An invalid text always raises, naming its position."""
    sentences = []
    for index, text in enumerate(texts):
        try:
            sentences.append(embedder.words_of(text))
        except InvalidRowError as error:
            raise InvalidRowError(f"texts[{index}]: {error}") from None
    return embedder.embed_words(sentences)


__all__ = [
    "COMPUTE_DTYPES",
    "DEFAULT_MODEL_DIR",
    "ELMoEmbedder",
    "InvalidRowError",
    "NonFiniteVectorsError",
    "checked_device",
    "embed_dataset",
    "embed_texts",
    "emulated_compute_dtype",
    "model_vocabulary_words",
    "placed_model",
]
