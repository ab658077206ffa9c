"""Arrow and Parquet for the embedding outputs, the one home of their columns and conversions: the shards of
``elmo-hf embed``, the Ray engine's files and what ``elmo_hf.search`` reads back.

``vectors_array`` builds a vectors column straight from NumPy (datasets' ``Array2D``/``Array3D`` or plain nested
lists), ``per_word_vectors_of_column`` reads one back, ``shard_table`` is a shard's table with the bytes
``Dataset.from_dict`` would give, ``write_parquet`` writes it, ``non_finite_values`` counts NaN and infinite values
in a written file.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Collection, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from datasets import Features

# The column of each row's 0-based place in the input (a text file's line - 1), first in every shard.
INPUT_ROW_COLUMN = "input_row"

def vectors_array(vectors: Sequence[np.ndarray], arrow_type: pa.DataType) -> pa.Array:
    """Arrow array of type ``arrow_type`` (a datasets ``Array2D``/``Array3D`` extension type, or nested list types)
    holding one array per row, straight from the NumPy buffers: for a datasets type what datasets' own conversion
    gives, faster (docs/design/embedding.md, "The staged pipeline"); the Ray engine's plain fixed-size layout too.

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
    typed conversion, which encodes any feature (docs/results/embed-throughput.md, "Less work outside the model")."""
    from datasets.arrow_writer import OptimizedTypedSequence

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
    almost never repeat, so a dictionary is built and thrown away (faster and smaller; snappy kept: figures in
    docs/design/embedding.md, "The staged pipeline")."""
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


def non_finite_values(path: Path) -> tuple[int, int] | None:
    """How many NaN or infinite values the floating-point columns of the Parquet file ``path`` hold, in its stored
    dtype (a float16 overflow is infinite there), and the first row with one; None when all are finite."""
    # On this thread, not Arrow's pool: a pool thread still releasing the vectors' extension type at exit aborted
    # `--verify` (docs/design/embedding.md, "Output directory and resume").
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


__all__ = [
    "INPUT_ROW_COLUMN", "non_finite_values", "per_word_vectors_of_column", "shard_table", "vectors_array", "write_parquet",
]
