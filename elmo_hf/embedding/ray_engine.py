"""Bulk embedding on Ray Data, to scale past one machine (`pip install "elmo-hf[ray]"`; `elmo-hf embed --engine ray`).

The input is read by Ray Data (text, JSON lines, CSV or Parquet; files or directories, local or any filesystem
pyarrow reaches), `map_batches` runs a pool of actors that each load the model once (`num_workers` replicas,
`gpus_per_worker` GPUs each), and the vectors are written as Parquet files ``part-NNNNNN.parquet``, in input order.
Each actor runs the same [`ELMoEmbedder`] as the datasets path, so the vectors are the same.

Differences from the datasets engine, by design: Ray retries failed tasks itself and there is no `--resume` (a
failed job is rerun with `overwrite=True`); there is no `input_row` column (Ray does not number rows; keep an id
column in JSON lines / CSV / Parquet input to join on); undecodable bytes in a text file stop the job with Ray's
error. Vectors are stored as plain Arrow lists (``list<fixed_size_list<float, D>>``), so the files read anywhere
without Ray or `datasets`.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..corpus.readers import EXTENSION_FORMATS
from .embedder import NUM_WORDS_COLUMN, ELMoEmbedder
from .shards import EmbeddingRunSummary, OutputDirectoryError

RAY_INPUT_FORMATS = ("txt", "jsonl", "csv", "parquet")


def _import_ray():
    try:
        import ray
        import ray.data
    except ImportError as error:
        raise ImportError('the Ray engine needs Ray Data: pip install "elmo-hf[ray]"') from error
    return ray


def vectors_to_arrow(vectors: list[np.ndarray], vector_shape: tuple[int, ...], pooled: bool, dtype: str) -> pa.Array:
    """Per-sentence arrays as an Arrow column: per-word `(words, *vector_shape)` -> ``list<fixed_size_list...>``,
    pooled `vector_shape` -> ``fixed_size_list...``, one fixed-size level per dimension of ``vector_shape``."""
    flat = np.concatenate([array.reshape(-1) for array in vectors]) if vectors else np.zeros(0, dtype)
    values: pa.Array = pa.array(flat.astype(dtype, copy=False))
    for size in reversed(vector_shape):
        values = pa.FixedSizeListArray.from_arrays(values, size)
    if pooled:
        return values
    offsets = np.concatenate([[0], np.cumsum([len(array) for array in vectors], dtype=np.int64)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), values)


class RayEmbeddingActor:
    """One model replica in Ray's actor pool: loads the model once, embeds batches of rows (Arrow tables)."""

    def __init__(self, model_name: str, revision: str | None, device: str | None, num_threads: int | None, options: dict[str, Any]):
        import torch

        if num_threads:
            torch.set_num_threads(num_threads)
        self.embedder = ELMoEmbedder.from_pretrained(model_name, revision=revision, device=device, **options)

    def __call__(self, batch: pa.Table) -> pa.Table:
        embedder = self.embedder
        rows = batch.to_pydict()
        values = rows[embedder.input_column]
        row_names = [f"the row with {embedder.input_column}={value!r:.60}" for value in values]
        sentences, valid = embedder.sentences_from_column(values, row_names)
        if not all(valid):
            batch = batch.filter(pa.array(valid))
        new_columns = embedder.embed_sentences(sentences)
        for name, column in new_columns.items():
            if name == embedder.output_column:
                array = vectors_to_arrow(column, embedder.vector_shape, embedder.pooling == "mean", embedder.dtype)
            elif name == NUM_WORDS_COLUMN:
                array = pa.array(column, pa.int32())
            else:
                array = pa.array(column, pa.list_(pa.string()))
            batch = batch.append_column(name, array)
        return batch


def _read(ray, paths: list[str], input_format: str):
    if input_format == "txt":
        # Empty lines are sentences with zero words, as in the datasets engine (Ray drops them by default).
        return ray.data.read_text(paths, drop_empty_lines=False)
    if input_format == "jsonl":
        return ray.data.read_json(paths, lines=True)
    if input_format == "csv":
        return ray.data.read_csv(paths)
    return ray.data.read_parquet(paths)


def infer_ray_input_format(paths: list[str]) -> str:
    formats = {EXTENSION_FORMATS.get(Path(path).suffix.lower()) for path in paths}
    if len(formats) != 1 or None in formats:
        raise ValueError(
            f"cannot tell the input format of {paths} from the extensions (expected one of {sorted(EXTENSION_FORMATS)}, all "
            "alike); pass input_format / --input-format"
        )
    return formats.pop()


def embed_with_ray(
    input_paths: str | list[str],
    output_dir: str | Path,
    *,
    model_name: str,
    revision: str | None = None,
    input_format: str | None = None,
    overwrite: bool = False,
    address: str | None = None,
    num_workers: int = 1,
    gpus_per_worker: float = 0,
    cpus_per_worker: float = 1,
    rows_per_batch: int = 1000,
    **embedder_options,
) -> EmbeddingRunSummary:
    """Embed ``input_paths`` on Ray Data into ``output_dir`` (see the module docstring).

    ``address``: an existing cluster (``"auto"``, ``"ray://head:10001"``); default: a Ray already initialised in
    this process, else a local one. ``rows_per_batch`` input rows go to an actor at a time (the embedder groups them
    by length). ``embedder_options`` are [`ELMoEmbedder`]'s (representation, pooling, dtype, batch_size, ...).
    """
    ray = _import_ray()
    paths = [str(path) for path in ([input_paths] if isinstance(input_paths, (str, Path)) else input_paths)]
    input_format = input_format or infer_ray_input_format(paths)
    if input_format not in RAY_INPUT_FORMATS:
        raise ValueError(f"the Ray engine reads {list(RAY_INPUT_FORMATS)}, got {input_format!r} (for a saved dataset, use the datasets engine)")
    if num_workers < 1 or gpus_per_worker < 0:
        raise ValueError(f"num_workers must be >= 1 and gpus_per_worker >= 0, got {num_workers} and {gpus_per_worker}")
    output_dir = Path(output_dir)
    _prepare_ray_output(output_dir, overwrite)
    # Checks the options (and that the model loads) here, before any Ray work starts.
    probe = ELMoEmbedder.from_pretrained(model_name, revision=revision, **embedder_options)
    del probe

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    start_time = time.perf_counter()
    dataset = _read(ray, paths, input_format).map_batches(
        RayEmbeddingActor,
        fn_constructor_kwargs={
            "model_name": model_name,
            "revision": revision,
            "device": "cuda" if gpus_per_worker > 0 else None,
            "num_threads": max(1, int(cpus_per_worker)),
            "options": embedder_options,
        },
        batch_size=rows_per_batch,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=num_workers),
        num_gpus=gpus_per_worker,
        num_cpus=cpus_per_worker,
    )
    from ray.data.datasource import FilenameProvider

    class OrderedParquetNames(FilenameProvider):
        """part-NNNNNN.parquet by write task: with preserve_order, file order is input order."""

        def get_filename_for_task(self, write_uuid: str, task_index: int) -> str:
            return f"part-{task_index:06d}.parquet"

    # OVERWRITE: the directory was checked to hold only an earlier Ray output (or nothing); Ray needs the mode to
    # accept file names without its write id.
    dataset.write_parquet(
        str(output_dir), filename_provider=OrderedParquetNames(file_format="parquet"), mode=ray.data.SaveMode.OVERWRITE
    )
    seconds = time.perf_counter() - start_time
    files = sorted(output_dir.glob("part-*.parquet"))
    sentences = sum(pq.ParquetFile(file).metadata.num_rows for file in files)
    words = sum(int(pa.compute.sum(pq.read_table(file, columns=[NUM_WORDS_COLUMN])[NUM_WORDS_COLUMN]).as_py() or 0) for file in files)
    return EmbeddingRunSummary(output_dir, sentences, words, 0, len(files), seconds, words)


def _prepare_ray_output(output_dir: Path, overwrite: bool) -> None:
    if output_dir.exists() and any(output_dir.iterdir()):
        if not overwrite:
            raise OutputDirectoryError(f"output {output_dir} is not empty; pass --overwrite to replace it (the Ray engine does not resume)")
        if not all(path.name.startswith("part-") and path.suffix == ".parquet" for path in output_dir.iterdir()):
            raise OutputDirectoryError(
                f"output {output_dir} holds files that the Ray engine did not write; it is not overwritten, choose another --output"
            )
        shutil.rmtree(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)


__all__ = ["RayEmbeddingActor", "embed_with_ray", "vectors_to_arrow"]
