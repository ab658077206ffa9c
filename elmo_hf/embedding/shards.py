"""Embed a corpus into a directory of Parquet shards plus a manifest, resumably: the engine of `elmo-hf embed`.

Output directory layout::

    OUT/.elmo-hf-output.json  ownership marker (elmo_hf.storage.output_directory)
    OUT/shard-00000.parquet   the input's first rows (shard_size of them, fewer where they hold more than
                              shard_characters characters), in input order
    OUT/shard-00001.parquet   ...
    OUT/manifest.json         input identity, model fingerprint, options, one entry per finished shard (its rows,
                              words, skipped rows, words cut to the model's character slots, bytes, sha256) and
                              their totals
    OUT/dataset/              only with output_format="dataset": the shards as a `save_to_disk` directory

The directory follows elmo-hf's output policy (``elmo_hf.storage``): a run holds its lock, ``overwrite`` deletes only
an embedding output, and a run that fails before its first shard leaves nothing behind.

Nothing is lost: a shard is written to a temporary name, flushed and renamed, and only then listed in the manifest
(itself replaced atomically), with its size and sha256; just before a shard gets its name, the output's marker
records it in flight (name and size), so a kill between the rename and the manifest's update leaves it proven the
run's. ``resume=True`` trusts nothing it has not checked: it deletes what the manifest does not list only where a
record proves it the run's (the in-flight record, the marker's list of written files, temporary files named with the
output's recorded token) and refuses, naming them, files no record lists; it verifies every listed shard (size and
sha256) and redoes any that is missing or damaged, then continues after the last one. A shard's content depends only on its input rows, so the result is
byte-identical to an uninterrupted run. ``verify_embedding_output`` checks a finished output the same way. The
manifest, and the checks that need no model, live in ``manifest.py``.

Each shard has the columns ``input_row`` (0-based row of the input; line - 1 for text files), the input's columns,
then the embedder's (``words``, ``num_words``, vectors). Load them with
``datasets.load_dataset("parquet", data_files=sorted(glob("OUT/shard-*.parquet")), split="train")``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import time
from collections import defaultdict, deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Collection, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from datasets import Dataset, Features, Value
from datasets.arrow_writer import OptimizedTypedSequence

from ..corpus.readers import CorpusSource, InvalidRowError
from ..runtime.parallelism import default_workers, torch_threads, usable_cores
from ..storage.files import (
    fill_temporary, move_into_place, sha256_of_file, temporary_file_beside, temporary_path_beside,
)
from ..storage.interrupts import sigint_deferred
from ..storage.output_directory import (
    MARKER_NAME, OutputDirectoryError, open_output_directory, read_marker, remove_unlisted,
)
from ..validation_elmo import check_int
from .embedder import ELMoEmbedder, PreparedSentences
from .manifest import (
    DEFAULT_OUTPUT_FORMAT, DEFAULT_SHARD_CHARACTERS, DEFAULT_SHARD_SIZE, EMBEDDINGS_OUTPUT, MANIFEST_NAME,
    SAVED_DATASET_CACHE_DIR, SAVED_DATASET_DIR, EmbeddingRunSummary, Manifest, check_same_run, checked_run_options,
    complete_summary, describe_run, has_finished_shards, plural, shard_problem, with_options_of_older_runs,
)
from .workers import EmbeddingWorkerError, EmbeddingWorkerPool

logger = logging.getLogger(__name__)

INPUT_ROW_COLUMN = "input_row"
# Skipped rows are counted exactly; only the first ones are listed with their reason.
MAX_LISTED_SKIPPED_ROWS = 100
PROGRESS_REFRESH_SECONDS = 0.5


class EmbeddingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped ``embed_corpus``; ``shards`` finished shards are kept in ``output_dir`` (none: nothing was kept)."""

    def __init__(self, output_dir: Path, shards: int):
        self.output_dir = output_dir
        self.shards = shards
        super().__init__(f"embedding interrupted with {shards} finished shard(s) in {output_dir}")


def shard_file_name(index: int) -> str:
    return f"shard-{index:05d}.parquet"


def model_fingerprint(model: torch.nn.Module) -> str:
    """sha256 over the model's parameters and buffers (names, dtypes, shapes, bytes): a resumed run must use the same
    weights."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


# ----------------------------------------------------------------------------------------------------------------------
# Checking what is on disk
# ----------------------------------------------------------------------------------------------------------------------


def non_finite_values(path: Path) -> tuple[int, int] | None:
    """How many NaN or infinite values the floating-point columns of the Parquet file ``path`` hold, in its stored
    dtype (a float16 overflow is infinite there), and the first row with one; None when all are finite."""
    # On this thread, not Arrow's pool: `elmo-hf embed --verify` ends with this read, and a pool thread still releasing
    # the vectors' Python extension type (datasets' Array2D) as the interpreter finalized aborted the process
    # ("terminate called without an active exception": 2-4 of 30 runs beside other work, 0 of 60 this way).
    table = pq.ParquetFile(path).read(use_threads=False)
    count, first_row = 0, None
    for column in table.columns:
        for chunk_start, chunk in zip(np.cumsum([0, *(len(chunk) for chunk in column.chunks)]), column.chunks):
            array, rows = chunk, np.arange(len(chunk))
            while True:
                if isinstance(array.type, pa.ExtensionType):
                    array = array.storage
                elif pa.types.is_list(array.type) or pa.types.is_large_list(array.type) or pa.types.is_fixed_size_list(array.type):
                    lengths = array.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
                    rows, array = np.repeat(rows, lengths), array.flatten()
                else:
                    break
            if not pa.types.is_floating(array.type):
                break
            bad = ~np.isfinite(array.to_numpy(zero_copy_only=False).astype(np.float32, copy=False))
            if bad.any():
                count += int(bad.sum())
                row = int(chunk_start + rows[np.flatnonzero(bad)[0]])
                first_row = row if first_row is None else min(first_row, row)
    return None if count == 0 else (count, first_row)


def verify_embedding_output(output_dir: str | Path) -> list[str]:
    """Every problem with a finished ``elmo-hf embed`` output: the marker, the manifest, each shard (size, sha256,
    rows) and files the manifest does not list. An empty list means the output is complete and intact."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return [f"{output_dir} is not a directory"]
    marker = read_marker(output_dir)
    if marker is None or marker.get("kind") != EMBEDDINGS_OUTPUT.name:
        return [f"{output_dir} is not {EMBEDDINGS_OUTPUT.description} (no valid {MARKER_NAME})"]
    try:
        manifest = Manifest.in_directory(output_dir)
    except OutputDirectoryError as error:
        return [str(error)]
    if manifest is None:
        return [f"{output_dir} has no {MANIFEST_NAME}: the run never finished a shard"]
    problems = [] if manifest.complete else [f"the run is not complete ({manifest.rows_done:,} input rows done): resume it"]
    shard_problems = {entry["file"]: shard_problem(output_dir, entry) for entry in manifest.shards}
    problems += [problem for problem in shard_problems.values() if problem]
    problems += [
        f"{name} holds {count:,} NaN or infinite value(s), the first in its row {row} (stored by a run with "
        "--allow-non-finite, or damaged)"
        for name, problem in shard_problems.items()
        if problem is None and (found := non_finite_values(output_dir / name)) is not None
        for count, row in [found]
    ]
    listed = {entry["file"] for entry in manifest.shards}
    problems += [
        f"{path.name} is not listed in the manifest"
        for path in sorted(output_dir.glob("shard-*.parquet"))
        if path.name not in listed
    ]
    problems += [f"{name} is not written by elmo-hf embed" for name in EMBEDDINGS_OUTPUT.foreign_entries(output_dir)]
    expected_first_row = 0
    for entry in manifest.shards:
        if entry["first_row"] != expected_first_row:
            problems.append(f"{entry['file']} starts at input row {entry['first_row']}, expected {expected_first_row}")
        expected_first_row = entry["first_row"] + entry["input_rows"]
    return problems


# ----------------------------------------------------------------------------------------------------------------------
# Writing shards
# ----------------------------------------------------------------------------------------------------------------------


def vectors_array(vectors: Sequence[np.ndarray], arrow_type: pa.DataType) -> pa.Array:
    """Arrow array of type ``arrow_type`` (a datasets ``Array2D``/``Array3D`` extension type, or nested list types)
    holding one array per row, straight from the NumPy buffers: for a datasets type what datasets' own conversion
    gives (5x faster); the Ray engine's plain fixed-size layout too.

    Every level of nesting is a list (variable length) or a fixed-size list, as ``arrow_type`` says; row i holds
    ``vectors[i]`` (n_i, *trailing) with the same trailing shape in every row, cast to the leaf type."""
    storage_type = arrow_type.storage_type if isinstance(arrow_type, pa.ExtensionType) else arrow_type
    level_types = [storage_type]
    while pa.types.is_list(level_types[-1]) or pa.types.is_fixed_size_list(level_types[-1]):
        level_types.append(level_types[-1].value_type)
    list_types, leaf_type = level_types[:-1], level_types[-1]
    trailing = vectors[0].shape[1:] if len(vectors) else (0,) * (len(list_types) - 1)
    lengths = [np.array([len(row) for row in vectors], dtype=np.int64)]  # per level, outermost first
    for size in trailing:
        lengths.append(np.full(int(lengths[-1].sum()), size, dtype=np.int64))
    leaf_dtype = leaf_type.to_pandas_dtype()
    flat = np.concatenate([row.reshape(-1) for row in vectors]) if len(vectors) else np.zeros(0, leaf_dtype)
    array = pa.array(flat.astype(leaf_dtype, copy=False), type=leaf_type)
    for list_type, level_lengths in zip(reversed(list_types), reversed(lengths)):
        if pa.types.is_fixed_size_list(list_type):
            array = pa.FixedSizeListArray.from_arrays(array, type=list_type)
        else:
            offsets = np.concatenate([[0], np.cumsum(level_lengths)]).astype(np.int32)
            array = pa.ListArray.from_arrays(pa.array(offsets), array, type=list_type)
    if isinstance(arrow_type, pa.ExtensionType):
        return pa.ExtensionArray.from_storage(arrow_type, array)
    return array


def per_word_vectors_of_column(column: pa.Array | pa.ChunkedArray, vector_shape: tuple[int, ...]) -> np.ndarray:
    """The per-word vectors of a vectors column, all rows concatenated: ``(words, *vector_shape)`` float32.

    The inverse of `vectors_array` for per-word vectors. The column is what it wrote: a datasets ``Array2D``/``Array3D`` extension array (when
    `datasets` is imported) or its storage, nested lists (``list<list<float>>``, or fixed-size lists); slices are
    honoured."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    parts = []
    for chunk in chunks:
        array = chunk.storage if isinstance(chunk, pa.ExtensionArray) else chunk
        while pa.types.is_list(array.type) or pa.types.is_large_list(array.type) or pa.types.is_fixed_size_list(array.type):
            array = array.flatten()
        parts.append(array.to_numpy(zero_copy_only=False).reshape(-1, *vector_shape))
    if not parts:
        return np.zeros((0, *vector_shape), np.float32)
    return np.concatenate(parts).astype(np.float32, copy=False)


def shard_table(
    columns: dict[str, list], features: Features, vectors_column: str, typed_columns: Collection[str] = ()
) -> pa.Table:
    """What ``Dataset.from_dict(columns, features=features).data.table`` holds (its Parquet bytes are the same,
    tested), without a Dataset, whose fingerprint pickles the whole table: the vectors straight from NumPy
    (``vectors_array``); ``typed_columns``, whose values already are what their features hold (the row numbers,
    word counts and words the writer makes), straight through ``pa.array``; the input's columns through datasets' own
    typed conversion, which encodes any feature (1.8 ms of a shard's 4.6 went to the writer's own three columns)."""
    schema = features.arrow_schema

    def array(name: str) -> pa.Array:
        if name == vectors_column:
            return vectors_array(columns[name], schema.field(name).type)
        if name in typed_columns:
            return pa.array(columns[name], type=schema.field(name).type)
        return pa.array(OptimizedTypedSequence(features.encode_column(columns[name], name), type=features[name], col=name))

    return pa.Table.from_arrays([array(name) for name in features], schema=schema)


def write_parquet(table: pa.Table, path: Path, vectors_column: str) -> None:
    """``table`` as Parquet, every column dictionary-encoded (pyarrow's default) but the vectors: floats of a model
    almost never repeat, so a dictionary is built and thrown away. Measured on a shard of the shipped model's vectors
    (1000 sentences, 6.4 MB): 51 ms and 6.72 MB with a dictionary, 23 ms and 6.16 MB without (zstd level 1: 29 ms and
    5.30 MB; snappy, pyarrow's default, kept)."""
    dictionary_columns = [
        path for field in table.schema if field.name != vectors_column for path in _parquet_leaf_paths(field.name, field.type)
    ]
    pq.write_table(table, path, use_dictionary=dictionary_columns)


def _parquet_leaf_paths(name: str, arrow_type: pa.DataType) -> list[str]:
    """The Parquet column paths under one Arrow field (``words`` -> ``words.list.element``): what pyarrow's
    per-column options are keyed by."""
    if isinstance(arrow_type, pa.ExtensionType):
        return _parquet_leaf_paths(name, arrow_type.storage_type)
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return _parquet_leaf_paths(f"{name}.list.element", arrow_type.value_type)
    if pa.types.is_struct(arrow_type):
        return [path for child in arrow_type for path in _parquet_leaf_paths(f"{name}.{child.name}", child.type)]
    if pa.types.is_map(arrow_type):
        return _parquet_leaf_paths(f"{name}.key_value.key", arrow_type.key_type) + _parquet_leaf_paths(
            f"{name}.key_value.value", arrow_type.item_type
        )
    return [name]


@dataclass
class PreparedShard:
    """One shard's rows read and split into words, ready for the model (``ShardWriter.prepare``)."""

    rows: list[tuple[int, dict | InvalidRowError]]
    kept_rows: list[tuple[int, dict]]
    skipped: list[dict[str, Any]]
    sentences: PreparedSentences
    truncated_words: int = 0  # words cut to the model's character slots


class ShardWriter:
    """Turns one shard's rows into a Parquet file in three stages: ``prepare`` (split the words, group and encode the
    model batches; CPU only), ``embed`` (the model) and ``finish`` (the typed table, the Parquet file written
    atomically, its sha256). ``write`` runs them in a row; ``embed_corpus`` runs them as a pipeline
    (``write_shards_pipelined``). Each stage adds its busy time to ``stage_seconds``."""

    def __init__(self, source: CorpusSource, embedder: ELMoEmbedder, on_progress: Callable[[int, int], None] | None):
        self.source = source
        self.embedder = embedder
        self.on_progress = on_progress
        self.stage_seconds: dict[str, float] = defaultdict(float)
        self.input_features = source.features()
        reserved = {INPUT_ROW_COLUMN, *embedder.features}
        clashes = sorted(reserved & set(self.input_features))
        if clashes:
            raise ValueError(
                f"input {source.path} has column(s) {clashes} that the output would write; rename them or pick "
                "another --output-column"
            )
        source.check_column(embedder.input_column, self.input_features)
        self.features = Features({INPUT_ROW_COLUMN: Value("int64"), **self.input_features, **embedder.features})
        # Called with a shard's file name and size just before it is moved into place (``embed_corpus``: the output's
        # in-flight record), so that a kill before the manifest lists it leaves it proven the run's.
        self.before_in_place: Callable[[str, int], None] = lambda name, size: None

    def write(self, rows: list[tuple[int, dict | InvalidRowError]], path: Path) -> dict[str, Any]:
        """Embed ``rows`` and write them to ``path`` atomically; return the manifest entry."""
        shard = self.prepare(rows)
        return self.finish(shard, self.embed(shard), path)

    def prepare(self, rows: list[tuple[int, dict | InvalidRowError]]) -> PreparedShard:
        """Split each row into words (invalid rows raise or are skipped, as the embedder says) and prepare the model
        batches."""
        started = time.perf_counter()
        kept_rows, sentences, skipped, truncated = split_rows(rows, self.embedder, self.source)
        shard = PreparedShard(rows, kept_rows, skipped, self.embedder.prepare(sentences), truncated)
        self.stage_seconds["read"] += time.perf_counter() - started
        return shard

    def embed(self, shard: PreparedShard) -> list[np.ndarray]:
        """The vectors of the shard's sentences (the model's stage)."""
        started = time.perf_counter()
        vectors = self.embedder.embed_prepared(shard.sentences, self.on_progress)
        self.stage_seconds["model"] += time.perf_counter() - started
        return vectors

    def finish(self, shard: PreparedShard, vectors: list[np.ndarray], path: Path) -> dict[str, Any]:
        """Write the shard's table to ``path`` atomically; return its manifest entry."""
        started = time.perf_counter()
        with temporary_file_beside(path) as temporary:  # removed if a step fails, e.g. hashing it after it was filled
            entry = write_shard_temporary(shard, vectors, self.embedder, self.features, temporary, path.name)
            self.before_in_place(path.name, entry["bytes"])
            move_into_place(temporary, path)
        self.stage_seconds["write"] += time.perf_counter() - started
        return entry


def split_rows(
    rows: list[tuple[int, dict | InvalidRowError]], embedder: ELMoEmbedder, source: CorpusSource
) -> tuple[list, list, list, int]:
    """``(kept_rows, sentences, skipped, truncated_words)``: each row split into words (``embedder.words_of``); an
    invalid row raises ``InvalidRowError`` naming it (``source.row_name``) or is skipped, as the embedder says."""
    kept_rows, sentences, skipped = [], [], []
    for input_row, record in rows:
        try:
            if isinstance(record, InvalidRowError):
                raise record
            sentences.append(embedder.words_of(record[embedder.input_column]))
            kept_rows.append((input_row, record))
        except InvalidRowError as error:
            if embedder.on_invalid == "raise":
                raise InvalidRowError(f"{source.row_name(input_row)}: {error} (pass --skip-invalid to skip such rows)") from None
            skipped.append({"row": input_row, "reason": str(error)})
    truncated = sum(embedder.tokenizer.truncated_word_count(words) for words in sentences)
    return kept_rows, sentences, skipped, truncated


def write_shard_file(
    path: Path, shard: PreparedShard, vectors: list[np.ndarray], embedder: ELMoEmbedder, features: Features
) -> None:
    """The shard's Parquet file at ``path``: its input rows' numbers and columns, then the embedder's columns."""
    kept_rows = shard.kept_rows
    input_columns = [name for name in features if name != INPUT_ROW_COLUMN and name not in embedder.features]
    columns = {
        INPUT_ROW_COLUMN: [input_row for input_row, _ in kept_rows],
        **{name: [record[name] for _, record in kept_rows] for name in input_columns},
        **embedder.output_columns(shard.sentences.sentences, vectors),
    }
    own_columns = [INPUT_ROW_COLUMN, *embedder.features]
    write_parquet(shard_table(columns, features, embedder.output_column, own_columns), path, embedder.output_column)


def shard_entry(shard: PreparedShard, name: str, path: Path) -> dict[str, Any]:
    """The manifest entry of ``shard``, whose file (to be named ``name``) is at ``path``: its rows, words, skipped
    rows, cut words, bytes and sha256."""
    return {
        "file": name,
        "first_row": shard.rows[0][0] if shard.rows else 0,
        "input_rows": len(shard.rows),
        "rows": len(shard.kept_rows),
        "words": sum(len(words) for words in shard.sentences.sentences),
        "skipped_rows": len(shard.skipped),
        "skipped": shard.skipped[:MAX_LISTED_SKIPPED_ROWS],
        "truncated_words": shard.truncated_words,
        "bytes": path.stat().st_size,
        "sha256": sha256_of_file(path),
    }


def write_shard_temporary(
    shard: PreparedShard, vectors: list[np.ndarray], embedder: ELMoEmbedder, features: Features, temporary: Path, name: str
) -> dict[str, Any]:
    """Fill ``temporary`` (from ``temporary_path_beside``) with the shard's file, to be moved to ``name`` beside it
    (``move_into_place`` flushes it to disk and renames it); return its manifest entry."""
    fill_temporary(
        temporary, temporary.with_name(name), lambda path: write_shard_file(path, shard, vectors, embedder, features)
    )
    return shard_entry(shard, name, temporary)


@dataclass
class WrittenShard:
    """What ``ShardFileTask`` did: the shard's manifest entry, or the invalid row that stopped it (``invalid``, with
    ``entry`` None); and the busy seconds of each stage it ran (``read``: splitting, ``model``, ``write``)."""

    entry: dict[str, Any] | None
    invalid: InvalidRowError | None
    seconds: dict[str, float]


@dataclass
class ShardFileTask:
    """A whole shard where a worker of ``EmbeddingWorkerPool`` runs it (or the main process, while no worker is up):
    its rows split into words, embedded, and its file written into ``temporary``, a file the main process created
    beside the shard's final place and moves there in shard order (``move_into_place``). So the main process only
    reads rows and puts files in place (splitting the words there held two one-thread workers back by about 4%,
    docs/results/embed-throughput.md), vectors never cross a pipe, and N workers write N shards at once (with one
    writing thread in the main process, 8 or more workers were bound by it). Picklable; returns a ``WrittenShard``."""

    rows: list[tuple[int, dict | InvalidRowError]]
    source: CorpusSource  # names an invalid row
    features: Features
    temporary: Path
    name: str

    def __call__(self, embedder: ELMoEmbedder) -> WrittenShard:
        started = time.perf_counter()
        try:
            kept_rows, sentences, skipped, truncated = split_rows(self.rows, embedder, self.source)
        except InvalidRowError as error:  # the driver stops after the shards before this one, as a read error
            return WrittenShard(None, error, {"read": time.perf_counter() - started})
        split = time.perf_counter()
        vectors = embedder.embed_words(sentences) if sentences else []
        embedded = time.perf_counter()
        shard = PreparedShard(self.rows, kept_rows, skipped, PreparedSentences(sentences, [], []), truncated)
        entry = write_shard_temporary(shard, vectors, embedder, self.features, self.temporary, self.name)
        seconds = {"read": split - started, "model": embedded - split, "write": time.perf_counter() - embedded}
        return WrittenShard(entry, None, seconds)


def _record_first(writing: deque[Future], record: Callable[[dict], None]) -> None:
    """Record the first shard of ``writing`` once written; if writing it failed, it stays first (for the cleanup).
    A Ctrl-C waits until it is recorded: taken off ``writing`` and not listed yet, nothing would remove its file."""
    entry = writing[0].result()
    with sigint_deferred():
        writing.popleft()
        record(entry)


def _settle_after_a_failure(writing: deque[Future], record: Callable[[dict], None], output_dir: Path) -> None:
    """After a failure: the shards still being written are recorded up to the first one that failed; the written
    ones after it are removed (a resume writes them again, in order)."""
    in_order = True
    while writing:
        future = writing.popleft()
        in_order = in_order and future.exception() is None
        if in_order:
            record(future.result())
        elif future.exception() is None:
            (output_dir / future.result()["file"]).unlink(missing_ok=True)


def write_shards_pipelined(
    chunks: Iterable[list], writer: ShardWriter, output_dir: Path, first_index: int, record: Callable[[dict], None]
) -> None:
    """Shards ``first_index``, ``first_index + 1``, ... from ``chunks`` of rows: while the model embeds shard k (on
    this thread), shard k + 1 is read and prepared on a reading thread and shard k - 1 written and hashed on a
    writing thread. ``record(entry)`` is called on this thread for each written shard, in order.

    On any error or Ctrl-C the shard being read is abandoned and the shards being written are finished and recorded,
    in order up to the first that failed (a finished shard is never lost, the manifest never has a gap; a shard
    finished after a failed one is removed) before the error goes on."""
    chunk_iterator = iter(chunks)

    def read_next() -> PreparedShard | None:
        rows = next(chunk_iterator, None)
        return None if rows is None else writer.prepare(rows)

    reader = ThreadPoolExecutor(1, thread_name_prefix="elmo-hf-read")
    writer_thread = ThreadPoolExecutor(1, thread_name_prefix="elmo-hf-write")
    writing: deque[Future] = deque()
    try:
        reading = reader.submit(read_next)
        index = first_index
        while (shard := reading.result()) is not None:
            reading = reader.submit(read_next)
            vectors = writer.embed(shard)
            writing.append(writer_thread.submit(writer.finish, shard, vectors, output_dir / shard_file_name(index)))
            index += 1
            while writing and (writing[0].done() or len(writing) > 1):  # at most one shard waits to be written
                _record_first(writing, record)
        while writing:
            _record_first(writing, record)
    except BaseException:
        _settle_after_a_failure(writing, record, output_dir)
        raise
    finally:
        reader.shutdown(wait=True, cancel_futures=True)
        writer_thread.shutdown(wait=True)


# ----------------------------------------------------------------------------------------------------------------------
# Data-parallel workers (embed_corpus(workers=N)): the main process reads and puts files in place; workers embed, write
# ----------------------------------------------------------------------------------------------------------------------


class WorkerShardWriter(ShardWriter):
    """A ``ShardWriter`` whose shards run whole in an ``EmbeddingWorkerPool``'s workers (``ShardFileTask``: split,
    embedded, written), or here while no worker is up (``run_here``); ``write_shards_with_workers`` keeps every worker
    busy, ``write`` (redoing a damaged shard on resume) runs one."""

    def __init__(self, source: CorpusSource, embedder: ELMoEmbedder, on_progress, pool: EmbeddingWorkerPool):
        super().__init__(source, embedder, on_progress)
        self.pool = pool

    def file_task(self, rows: list[tuple[int, dict | InvalidRowError]], path: Path) -> ShardFileTask:
        """The shard of ``rows`` as a task, with a new temporary file beside ``path`` for it to fill (the caller moves
        it into place, or removes it if the run fails)."""
        return ShardFileTask(rows, self.source, self.features, temporary_path_beside(path), path.name)

    def write(self, rows: list[tuple[int, dict | InvalidRowError]], path: Path) -> dict[str, Any]:
        """The shard of ``rows`` written to ``path`` atomically by a worker (here while none is up); its entry."""
        with temporary_file_beside(path) as temporary:
            task = ShardFileTask(rows, self.source, self.features, temporary, path.name)
            self.pool.collect_ready()
            if self.pool.has_idle_worker():
                written = self.pool.run(task, _describe_rows(None, rows))
            else:
                written = self.run_here(task)
            self.count(written)
            if written.invalid is not None:
                raise written.invalid
            self.before_in_place(path.name, written.entry["bytes"])
            move_into_place(temporary, path)
        return written.entry

    def run_here(self, task: ShardFileTask) -> WrittenShard:
        """``task`` in this process, at the workers' torch threads (so the bytes are the same as a worker's), while no
        worker is up: a worker slow to start (or one that never does) does not hold the run."""
        with torch_threads(self.pool.threads):
            return task(self.embedder)

    def count(self, written: WrittenShard) -> None:
        """Count a shard that a worker (or this process) ran: each stage's busy time, summed over the workers, and
        the progress."""
        for stage, seconds in written.seconds.items():
            self.stage_seconds[stage] += seconds
        if self.on_progress is not None and written.entry is not None:
            self.on_progress(written.entry["rows"], written.entry["words"])


def _describe_rows(index: int | None, rows: list[tuple[int, Any]]) -> str:
    """How errors name a shard: ``shard-00003.parquet (input rows 60-79)``."""
    name = "a shard" if index is None else shard_file_name(index)
    if not rows:
        return name
    return f"{name} (input rows {rows[0][0]}-{rows[-1][0]})"


def write_shards_with_workers(
    chunks: Iterable[list], writer: WorkerShardWriter, output_dir: Path, first_index: int, record: Callable[[dict], None]
) -> None:
    """``write_shards_pipelined`` with the shards spread over ``writer.pool``'s worker processes: this thread reads
    each shard's rows (one shard ahead of the idle workers) and gives them to the next idle worker that is up (workers
    take shards as they come up and as they finish, so a slow one takes fewer); the worker splits, embeds and writes
    the shard into a temporary file beside its place (``ShardFileTask``). This thread moves the written files into
    place strictly in shard order (a shard that finished early waits for the ones before it) and calls
    ``record(entry)`` for each, in order. While no worker is up and none is embedding, this thread runs the next shard
    itself (``WorkerShardWriter.run_here``). Each worker holds up to two shards (the one it embeds and the next, which
    it has read already: handing it over never waits for the worker).

    A read error, or an invalid row in a shard (``InvalidRowError``, unless the embedder skips such rows), stops the
    reading and is raised once the shards before it are in place. On any other error (a worker's own, a worker that
    died: ``EmbeddingWorkerError``) or Ctrl-C, the workers are stopped at once. Either way the temporary files of every
    shard not in place are removed: the shards in place are recorded, in order, without a gap; nothing else of the
    run's stays."""
    chunk_iterator = iter(chunks)
    pool = writer.pool
    in_flight: dict[int, ShardFileTask] = {}  # given to a worker (or run here), not in place yet
    written: dict[int, dict[str, Any]] = {}  # manifest entries of shards written, waiting for the ones before them
    next_read, next_in_place = first_index, first_index
    read_ahead: list | None = None  # the next shard's rows, read while the workers embed
    exhausted = False
    stop_error: Exception | None = None  # raised once the shards before ``stop_index`` are in place
    stop_index: int | None = None

    def stop_before(index: int, error: Exception) -> None:
        nonlocal exhausted, read_ahead, stop_error, stop_index
        if stop_index is None or index < stop_index:
            stop_error, stop_index = error, index
        exhausted, read_ahead = True, None

    def read_next() -> list | None:
        nonlocal exhausted
        try:
            rows = None if exhausted else next(chunk_iterator, None)
        except Exception as error:  # stop reading, finish the shards before it
            stop_before(next_read, error)
            return None
        exhausted = rows is None
        return rows

    def start(rows: list) -> int:
        nonlocal next_read
        with sigint_deferred():  # its temporary file is made here and listed for removal together
            in_flight[next_read] = writer.file_task(rows, output_dir / shard_file_name(next_read))
        next_read += 1
        return next_read - 1

    def finished(index: int, result: WrittenShard) -> None:
        nonlocal next_in_place
        writer.count(result)
        if result.invalid is not None:
            stop_before(index, result.invalid)
            return
        written[index] = result.entry
        while next_in_place in written:
            with sigint_deferred():  # a Ctrl-C between the move and the record would leave a file nothing lists
                task = in_flight[next_in_place]
                writer.before_in_place(task.name, written[next_in_place]["bytes"])
                move_into_place(task.temporary, output_dir / task.name)
                del in_flight[next_in_place]  # in place: no longer a temporary file to remove on a failure
                record(written.pop(next_in_place))
                next_in_place += 1

    try:
        while stop_index is None or next_in_place < stop_index:
            pool.collect_ready()
            while pool.has_idle_worker() and (read_ahead is not None or not exhausted):
                rows = read_ahead if read_ahead is not None else read_next()
                read_ahead = None
                if rows is None:
                    break
                index = start(rows)
                pool.submit(index, in_flight[index], _describe_rows(index, rows))
            if read_ahead is None and not exhausted:
                read_ahead = read_next()  # no worker is free: read the next shard meanwhile
            if not pool.busy:
                if read_ahead is None:  # nothing left (or stopped)
                    break
                # No worker is up yet and none is embedding: run the next shard here rather than wait.
                rows, read_ahead = read_ahead, None
                index = start(rows)
                finished(index, writer.run_here(in_flight[index]))
                continue
            result = pool.wait()
            if result is not None:  # None: a worker came up
                finished(*result)
        if stop_error is not None:
            raise stop_error
    except BaseException:
        pool.terminate()  # first: a worker still writing would fill (or recreate) its temporary file
        for task in in_flight.values():
            task.temporary.unlink(missing_ok=True)
        raise


def _continue_from(output_dir: Path, fresh: Manifest) -> Manifest:
    """The manifest of an existing run to resume: it must have the same input, weights and options; files it does not
    list are removed where a record proves them the run's (a shard renamed after the last manifest update, temporary
    files, a saved dataset begun), else the resume is refused naming them (``remove_unlisted``)."""
    previous = Manifest.in_directory(output_dir)
    if previous is None:
        previous = fresh  # killed before the first shard was listed
    # Options a manifest written before they existed lacks: it ran as their value says, and the continued manifest
    # then says so.
    previous.options = with_options_of_older_runs(previous.options)
    # The model's name is informational (a path may be spelled differently); its weights must be the same. Options
    # come before the weights: another compute_dtype changes the weights' fingerprint too, and is the better name.
    check_same_run(output_dir, "input", previous.input, fresh.input)
    check_same_run(output_dir, "options", previous.options, fresh.options)
    check_same_run(output_dir, "model weights", {"sha256": previous.model["sha256"]}, {"sha256": fresh.model["sha256"]})
    listed = previous.entries()
    for path in output_dir.iterdir():
        if path.is_symlink():  # elmo-hf writes no links; deleting one (or through one) proves nothing
            raise OutputDirectoryError(
                f"cannot resume {output_dir}: {path} is a symbolic link (to {os.readlink(path)}), which elmo-hf does "
                "not write; replace it with the file itself or move it away"
            )
    # By record only: a shard renamed just before a kill (the in-flight record), temporary files named with the
    # output's recorded token, files an earlier run recorded; anything else stops the resume, named, and nothing goes.
    for name in remove_unlisted(output_dir, EMBEDDINGS_OUTPUT, listed):
        logger.info("resume: deleted %s, written by an earlier run of this output and not listed in its manifest", name)
    return previous


def _redo_damaged_shards(output_dir: Path, manifest: Manifest, source: CorpusSource, writer: ShardWriter) -> int:
    """Rewrite every listed shard that is missing or does not match its manifest entry; returns how many."""
    redone = 0
    for index, entry in enumerate(manifest.shards):
        problem = shard_problem(output_dir, entry)
        if problem is None:
            continue
        logger.warning("resume: %s; redoing input rows %d-%d", problem, entry["first_row"], entry["first_row"] + entry["input_rows"] - 1)
        rows = list(islice(source.rows(start=entry["first_row"]), entry["input_rows"]))
        new_entry = writer.write(rows, output_dir / entry["file"])
        if new_entry["sha256"] != entry["sha256"]:
            logger.warning("%s was redone with other bytes than first recorded (other threads or hardware?)", entry["file"])
        manifest.shards[index] = new_entry
        manifest.write(output_dir / MANIFEST_NAME)
        redone += 1
    return redone


def embed_corpus(
    source: CorpusSource,
    embedder: ELMoEmbedder,
    output_dir: str | Path,
    *,
    model_name: str,
    shard_size: int = DEFAULT_SHARD_SIZE,
    shard_characters: int = DEFAULT_SHARD_CHARACTERS,
    output_format: str = DEFAULT_OUTPUT_FORMAT,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    workers: int | None = None,
    worker_threads: int = 1,
) -> EmbeddingRunSummary:
    """Embed every row of ``source`` into ``output_dir`` (see the module docstring). ``model_name`` is recorded in
    the manifest; the weights themselves are fingerprinted, and an embedder made by ``ELMoEmbedder.from_pretrained``
    adds what it was asked for (``embedder.request``), so that ``manifest.check_before_loading`` can tell an output
    already complete before a resumed run loads its model. Ctrl-C raises ``EmbeddingInterrupted``.

    A shard holds ``shard_size`` rows, fewer where they hold more than ``shard_characters`` characters of input (0: no
    limit; ``DEFAULT_SHARD_CHARACTERS``), so that long rows still make shards that workers share and memory holds.

    ``workers`` (default ``default_workers(...)``: one per usable core, at most one per shard, 1
    for a model off the CPU): with N > 1, N processes (``worker_threads`` torch threads each) embed whole shards in
    parallel and write their files, each with a copy of ``embedder``, while this process reads and puts the files in
    place in order (and embeds while no worker is up yet); the output is byte-identical to a one-process run at ``worker_threads`` threads (CPU only: a model on a GPU
    is refused). A worker that dies raises ``EmbeddingWorkerError`` naming it and its shard; the finished shards stay,
    for ``resume``. With ``workers=1`` the model runs in this process at torch's threads."""
    from tqdm.auto import tqdm

    run_options = checked_run_options(shard_size, shard_characters, output_format)
    shard_size, shard_characters = run_options["shard_size"], run_options["shard_characters"]
    num_rows = source.num_rows()  # a text file's lines are counted once: here, for the workers and the progress bar
    if workers is None:
        # Characters matter only up to a shard per usable core: no more is read.
        characters = source.num_characters(at_most=usable_cores() * shard_characters) if shard_characters else None
        workers = default_workers(
            embedder.model.device, num_rows, shard_size, characters=characters, shard_characters=shard_characters
        )
    workers = check_int("workers", workers, 1)
    worker_threads = check_int("worker_threads", worker_threads, 1)
    if workers > 1 and embedder.model.device.type != "cpu":
        raise ValueError(
            f"workers > 1 run on the CPU only (the model is on {embedder.model.device}): one process drives a GPU best; "
            "for several GPUs use --engine ray with --ray-gpus-per-worker"
        )
    output_dir = Path(output_dir)
    fresh = Manifest(
        input=source.identity(),
        model={
            "name": model_name, "sha256": model_fingerprint(embedder.model),
            "max_characters_per_token": embedder.tokenizer.max_characters_per_token,
        },
        options={**embedder.options(), **run_options},
        request=embedder.request,
    )
    manifest = fresh
    start_time = time.perf_counter()
    words_this_run = 0
    try:
        with ExitStack() as stack:
            # The workers start before the output directory's lock is taken: forked, they would hold copies of it (an
            # flock belongs to the open file, which a fork shares). They hold and write nothing of the directory, so
            # they are stopped after it is released.
            pool = stack.enter_context(EmbeddingWorkerPool(embedder, workers, worker_threads)) if workers > 1 else None
            output = stack.enter_context(open_output_directory(
                output_dir, EMBEDDINGS_OUTPUT, resume=resume, overwrite=overwrite, inputs=[source.path],
                worth_keeping=has_finished_shards, describe_existing=describe_run,
            ))
            bar = None
            last_refresh = time.monotonic()

            def on_progress(sentences: int, words: int) -> None:
                nonlocal words_this_run, last_refresh
                words_this_run += words
                if bar is not None:
                    rate = words_this_run / max(time.perf_counter() - start_time, 1e-9)
                    bar.set_postfix_str(f"{rate:,.0f} words/s", refresh=False)
                    if sentences:
                        bar.update(sentences)
                    elif time.monotonic() - last_refresh >= PROGRESS_REFRESH_SECONDS:
                        # A long sentence runs in many model batches before it counts: show its words/s meanwhile,
                        # at most twice a second (in a log file every redraw is another line).
                        bar.refresh()
                        last_refresh = time.monotonic()

            if pool is not None:
                writer = WorkerShardWriter(source, embedder, on_progress, pool)
            else:
                writer = ShardWriter(source, embedder, on_progress)
            writer.before_in_place = output.record_in_flight
            redone = 0
            if output.resumed:
                manifest = _continue_from(output_dir, fresh)
                redone = _redo_damaged_shards(output_dir, manifest, source, writer)
                words_this_run = 0  # the rate covers new shards only
            resumed_from_row = manifest.rows_done
            if manifest.complete and redone and output_format == "dataset":
                _record_saved_dataset_in_flight(output)
                _write_saved_dataset(output_dir, manifest)
            if manifest.complete:
                return complete_summary(output_dir, manifest, embedder.tokenizer.max_characters_per_token, redone)
            bar = tqdm(
                total=num_rows, initial=resumed_from_row, unit=" sentences", disable=not progress,
                dynamic_ncols=True, mininterval=PROGRESS_REFRESH_SECONDS,
            )
            start_time = time.perf_counter()
            try:

                def record(entry: dict[str, Any]) -> None:
                    bar.update(entry["skipped_rows"])
                    manifest.shards.append(entry)
                    manifest.write(output_dir / MANIFEST_NAME)
                    output.settled(entry["file"])  # listed now: the next in-flight record leaves it out

                write_shards = write_shards_pipelined if pool is None else write_shards_with_workers
                write_shards(
                    shards_of_rows(source.rows(start=resumed_from_row), shard_size, shard_characters, embedder.input_column),
                    writer, output_dir, len(manifest.shards), record,
                )
                if not manifest.shards:  # an empty input still gives a loadable (empty) output with the full schema
                    manifest.shards.append(writer.write([], output_dir / shard_file_name(0)))
                if output_format == "dataset":
                    _record_saved_dataset_in_flight(output)
                    _write_saved_dataset(output_dir, manifest)
                manifest.complete = True
                manifest.write(output_dir / MANIFEST_NAME)
                finished_time = time.perf_counter()  # before the workers are stopped: their exit is not the run's
            finally:
                bar.close()
    except KeyboardInterrupt:
        raise EmbeddingInterrupted(output_dir, len(manifest.shards) if output_dir.exists() else 0) from None
    totals = manifest.totals()
    return EmbeddingRunSummary(
        output_dir, totals["sentences"], totals["words"], totals["skipped_rows"], len(manifest.shards),
        finished_time - start_time, words_this_run, resumed_from_row, redone_shards=redone,
        stage_seconds=dict(writer.stage_seconds), truncated_words=totals["truncated_words"],
        max_characters_per_token=embedder.tokenizer.max_characters_per_token,
    )


def input_characters(record: dict | InvalidRowError, column: str) -> int:
    """The characters of a row's input: its text, or its words with one separator each; 0 for a row without a valid
    input (it is named where it is split into words)."""
    value = record.get(column) if isinstance(record, dict) else None
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (list, tuple)):
        return sum(len(word) + 1 for word in value if isinstance(word, str))
    return 0


def shards_of_rows(
    rows: Iterable[tuple[int, dict | InvalidRowError]], shard_size: int, shard_characters: int, column: str
) -> Iterator[list]:
    """``rows`` in consecutive shards of at most ``shard_size`` rows and at most ``shard_characters`` characters of
    their ``column`` (``input_characters``; 0: no limit). A row longer than that gets a shard of its own."""
    shard: list = []
    characters = 0
    for row in rows:
        size = input_characters(row[1], column)
        if shard and (len(shard) == shard_size or (shard_characters and characters + size > shard_characters)):
            yield shard
            shard, characters = [], 0
        shard.append(row)
        characters += size
    if shard:
        yield shard


def _record_saved_dataset_in_flight(output) -> None:
    """The saved dataset's folder and datasets' cache, recorded before they are made: a run killed while it writes
    them leaves them proven its own (datasets names the files inside)."""
    for folder in (SAVED_DATASET_DIR, SAVED_DATASET_CACHE_DIR):
        output.record_in_flight(f"{folder}/", None)


def _write_saved_dataset(output_dir: Path, manifest: Manifest) -> None:
    """Copy the shards into ``OUT/dataset`` (`save_to_disk` layout), through a cache inside OUT that is removed."""
    cache_dir = output_dir / SAVED_DATASET_CACHE_DIR
    target = output_dir / SAVED_DATASET_DIR
    for leftover in (cache_dir, target):
        if leftover.exists():
            shutil.rmtree(leftover)
    files = [str(output_dir / shard["file"]) for shard in manifest.shards]
    if manifest.totals()["sentences"] == 0:
        # datasets 5.2 cannot read a Parquet file without rows ("BatchSize must be greater than 0"), and saves an
        # empty dataset without any data file unless told to write one shard.
        Dataset(pq.read_table(files[0])).save_to_disk(str(target), num_shards=1)
        return
    dataset = Dataset.from_parquet(files, cache_dir=str(cache_dir))
    dataset.save_to_disk(str(target))
    del dataset
    if cache_dir.exists():
        shutil.rmtree(cache_dir)


__all__ = [
    "EMBEDDINGS_OUTPUT",
    "EmbeddingInterrupted",
    "EmbeddingRunSummary",
    "EmbeddingWorkerError",
    "MANIFEST_NAME",
    "Manifest",
    "embed_corpus",
    "has_finished_shards",
    "model_fingerprint",
    "shard_table",
    "per_word_vectors_of_column",
    "plural",
    "shard_problem",
    "vectors_array",
    "verify_embedding_output",
    "write_parquet",
    "write_shards_pipelined",
    "write_shards_with_workers",
]
