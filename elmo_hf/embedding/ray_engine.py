"""Bulk embedding on Ray Data, to scale past one machine (`pip install "elmo-hf[ray]"`; `elmo-hf embed --engine ray`;
docs/design/embedding.md, "Ray engine").

Ray Data reads the input (the formats whose reader reads a whole file, ``ray_input_formats``; each file by one task,
parsed by the datasets engine's rules in ``file_table``), `map_batches` runs a pool of actors that each load the
model once (`num_workers` replicas, `gpus_per_worker` GPUs each) and run the same ``ELMoEmbedder`` as the datasets
engine, and the vectors are written as Parquet files ``part-NNNNNN-<write id>.parquet`` (``shard_names.RAY_PARTS``),
in input order, as plain Arrow lists readable without Ray or `datasets`. The actor pool is checked against the
cluster before anything starts (``check_actor_pool_fits``); reads and writes reserve no CPU; a Ray started for the job
runs its workers at niceness 0 (``ray_for_the_job``). The output directory follows elmo-hf's output policy
(``elmo_hf.storage``). There is no `--resume` (a failed job is rerun with `overwrite=True`).
"""

from __future__ import annotations

import math
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..corpus.formats import INPUT_FORMATS, format_of_extension, known_extensions, reader_class
from ..runtime.parallelism import ray_actor_threads, set_torch_threads
from ..storage.output_directory import OutputKind, open_output_directory
from ..validation_elmo import check_int, check_number
from .embedder import NUM_WORDS_COLUMN, ELMoEmbedder
from .manifest import EmbeddingRunSummary
from .parquet import INPUT_ROW_COLUMN, vectors_array
from .shard_names import RAY_PARTS

# Reading and writing reserve no CPU, so they run next to actors that hold every CPU (see the module docstring).
IO_TASK_CPUS = 0

# The variable Ray's raylet reads its workers' niceness from (Ray's default: 15). A Ray that elmo-hf starts gets 0.
RAY_WORKER_NICENESS_VARIABLE = "RAY_worker_niceness"

RAY_EMBEDDINGS_OUTPUT = OutputKind(
    name="ray-embeddings", description="an elmo-hf Ray embedding output", entries=(RAY_PARTS.pattern,)
)


def _import_ray():
    try:
        import ray
        import ray.data
    except ImportError as error:
        raise ImportError('the Ray engine needs Ray Data: pip install "elmo-hf[ray]"') from error
    return ray


def vectors_to_arrow(vectors: list[np.ndarray], vector_shape: tuple[int, ...], pooled: bool, dtype: str) -> pa.Array:
    """Per-sentence arrays as an Arrow column: per-word `(words, *vector_shape)` -> ``list<fixed_size_list...>``,
    pooled `vector_shape` -> ``fixed_size_list...``, one fixed-size level per dimension of ``vector_shape``
    (built by the one conversion, ``parquet.vectors_array``)."""
    arrow_type = pa.from_numpy_dtype(np.dtype(dtype))
    for size in reversed(vector_shape):
        arrow_type = pa.list_(arrow_type, size)
    return vectors_array(vectors, arrow_type if pooled else pa.list_(arrow_type))


class RayEmbeddingActor:
    """One model replica in Ray's actor pool: loads the model once, embeds batches of rows (Arrow tables)."""

    def __init__(self, model_name: str, revision: str | None, device: str | None, num_threads: int | None, options: dict[str, Any]):
        set_torch_threads(num_threads or None)
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
                array = vectors_to_arrow(column, embedder.vector_shape, embedder.pooled, embedder.dtype)
            elif name == NUM_WORDS_COLUMN:
                array = pa.array(column, pa.int32())
            else:
                array = pa.array(column, pa.list_(pa.string()))
            batch = batch.append_column(name, array)
        return batch


def _read(ray, paths: list[str], input_format: str, concurrency: int):
    """Each input file read whole by one task and parsed by the datasets engine's rules into one table with its
    ``input_row`` (the row's place in its file): not ``ray.data.read_text``, which splits with ``str.splitlines``
    (at U+2028, U+0085, VT, FF and a lone CR too), nor Ray's JSON / CSV / Parquet readers, which do not number rows
    (and Ray's CSV reader would drop blank lines)."""
    files = ray.data.read_binary_files(paths, num_cpus=IO_TASK_CPUS, concurrency=concurrency)
    # The reader class travels with the task, so a format registered in this process is read in Ray's workers too.
    return files.map_batches(
        file_table, fn_kwargs={"input_format": input_format, "reader": reader_class(input_format)}, batch_size=1,
        batch_format="pyarrow", num_cpus=IO_TASK_CPUS, concurrency=concurrency,
    )


def ray_input_formats() -> list[str]:
    """The formats of ``INPUT_FORMATS`` whose reader reads a whole file for Ray (``CorpusReader.table_of_file``)."""
    return [name for name in INPUT_FORMATS if reader_class(name).table_of_file is not None]


def file_table(files: pa.Table, input_format: str, reader: type | None = None) -> pa.Table:
    """The rows of the files in ``files`` (a ``bytes`` column: whole files), parsed by the reader of ``input_format``
    (``reader``: that class, default: the table's), with an ``input_row`` column counting each file's rows from 0,
    as the datasets engine numbers them."""
    reader = reader or reader_class(input_format)
    tables = []
    for data in files.column("bytes").to_pylist():
        table = reader.table_of_file(data)
        tables.append(table.append_column(INPUT_ROW_COLUMN, pa.array(np.arange(table.num_rows, dtype=np.int64))))
    return pa.concat_tables(tables) if tables else pa.table({INPUT_ROW_COLUMN: pa.array([], pa.int64())})


def text_file_rows(file: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of one text file read whole (``{"bytes": ...}``) by the text reader's ``table_of_file`` (the datasets
    engine's rule, ``read_lines``); ``input_row`` is the line's 0-based place in its file."""
    texts = reader_class("txt").table_of_file(file["bytes"]).column("text").to_pylist()
    return [{"text": text, INPUT_ROW_COLUMN: row} for row, text in enumerate(texts)]


def check_actor_pool_fits(nodes: list[dict[str, float]], num_workers: int, cpus_per_worker: float, gpus_per_worker: float) -> None:
    """Raise ``ValueError`` naming the numbers unless ``num_workers`` actors of ``cpus_per_worker`` CPUs and
    ``gpus_per_worker`` GPUs fit on ``nodes`` (each node's ``{"CPU": ..., "GPU": ...}`` resources)."""
    def actors_on(node: dict[str, float]) -> int:
        fits = [math.floor(node.get("CPU", 0) / cpus_per_worker + 1e-9)] if cpus_per_worker > 0 else []
        fits += [math.floor(node.get("GPU", 0) / gpus_per_worker + 1e-9)] if gpus_per_worker > 0 else []
        return min(fits) if fits else num_workers

    capacity = sum(actors_on(node) for node in nodes)
    if capacity < num_workers:
        described = ", ".join(f"{node.get('CPU', 0):g} CPU / {node.get('GPU', 0):g} GPU" for node in nodes)
        raise ValueError(
            f"the Ray cluster cannot hold --ray-workers {num_workers} actors of {cpus_per_worker:g} CPU and "
            f"{gpus_per_worker:g} GPU each: its {len(nodes)} node(s) ({described}) hold {capacity}; the job would wait "
            "forever. Use fewer workers, fewer CPUs or GPUs per worker, or a larger cluster"
        )


def infer_ray_input_format(paths: list[str]) -> str:
    formats = {format_of_extension(Path(path).suffix) for path in paths}
    if len(formats) != 1 or None in formats:
        raise ValueError(
            f"cannot tell the input format of {paths} from the extensions (expected one of {known_extensions()}, all "
            "alike); pass input_format / --input-format"
        )
    return formats.pop()


@contextmanager
def ray_for_the_job(ray, address: str | None):
    """Ray connected for one job, and disconnected after it if it was connected here.

    Which Ray: the one already initialised in this process (left as it is); else ``ray.init(address)``, which joins
    the cluster at ``address`` or, with none, the one named by ``RAY_ADDRESS`` or the last ``ray start`` on this
    machine, and otherwise starts a local Ray for the job (``address="local"``: always a new local Ray).

    A local Ray started here runs its workers at niceness 0, like the rest of the user's processes, unless
    ``RAY_worker_niceness`` is set in the environment: at Ray's default (15) the actors get almost no CPU beside any
    other work on the same cores (docs/design/embedding.md, "Ray engine"). The variable is read by the raylet that ``ray.init`` spawns, so it is set
    only while ``ray.init`` runs; it changes nothing on a cluster that is already running (configure that one with
    ``RAY_worker_niceness=0`` at ``ray start``).
    """
    if ray.is_initialized():
        yield
        return
    set_here = RAY_WORKER_NICENESS_VARIABLE not in os.environ
    if set_here:
        os.environ[RAY_WORKER_NICENESS_VARIABLE] = "0"
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    finally:
        if set_here:
            del os.environ[RAY_WORKER_NICENESS_VARIABLE]
    try:
        yield
    finally:
        ray.shutdown()


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

    ``address``: an existing cluster (``"auto"``, ``"HEAD_IP:6379"``, ``"ray://head:10001"``); default: Ray's own
    choice, as [`ray_for_the_job`] describes (a local Ray started for the job, at normal priority, when there is no
    other). ``rows_per_batch`` input rows go to an actor at a time (the embedder groups them by length).
    ``embedder_options`` are [`ELMoEmbedder`]'s (representation, pooling, dtype, batch_size, ...).
    """
    ray = _import_ray()
    paths = [str(path) for path in ([input_paths] if isinstance(input_paths, (str, Path)) else input_paths)]
    input_format = input_format or infer_ray_input_format(paths)
    if input_format not in ray_input_formats():
        raise ValueError(f"the Ray engine reads {ray_input_formats()}, got {input_format!r} (for a saved dataset, use the datasets engine)")
    check_int("num_workers", num_workers, 1)
    check_number("gpus_per_worker", gpus_per_worker, 0)
    check_number("cpus_per_worker", cpus_per_worker, 0, minimum_inclusive=False)
    # Checks the options (and that the model loads) here, before any Ray work starts.
    probe = ELMoEmbedder.from_pretrained(model_name, revision=revision, **embedder_options)
    del probe

    with ray_for_the_job(ray, address):
        nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
        check_actor_pool_fits(nodes, num_workers, cpus_per_worker, gpus_per_worker)
        with open_output_directory(
            output_dir, RAY_EMBEDDINGS_OUTPUT, overwrite=overwrite, inputs=paths, resumable=False
        ) as output:
            start_time = time.perf_counter()
            _run_job(ray, paths, input_format, output.path, len(nodes), model_name, revision, num_workers,
                     gpus_per_worker, cpus_per_worker, rows_per_batch, embedder_options)
            seconds = time.perf_counter() - start_time
    files = RAY_PARTS.in_directory(Path(output_dir))
    sentences = sum(pq.ParquetFile(file).metadata.num_rows for file in files)
    words = sum(int(pa.compute.sum(pq.read_table(file, columns=[NUM_WORDS_COLUMN])[NUM_WORDS_COLUMN]).as_py() or 0) for file in files)
    return EmbeddingRunSummary(Path(output_dir), sentences, words, 0, len(files), seconds, words)


def _run_job(
    ray,
    paths,
    input_format,
    output_dir: Path,
    num_nodes: int,
    model_name,
    revision,
    num_workers,
    gpus_per_worker,
    cpus_per_worker,
    rows_per_batch,
    embedder_options,
) -> None:
    ray.data.DataContext.get_current().execution_options.preserve_order = True
    dataset = _read(ray, paths, input_format, concurrency=num_nodes).map_batches(
        RayEmbeddingActor,
        fn_constructor_kwargs={
            "model_name": model_name,
            "revision": revision,
            "device": "cuda" if gpus_per_worker > 0 else None,
            "num_threads": ray_actor_threads(cpus_per_worker),
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
        """part-NNNNNN-<write id>.parquet by write task: with preserve_order, file (name) order is input order."""

        def get_filename_for_task(self, write_uuid: str, task_index: int) -> str:
            return RAY_PARTS.name(task_index, write_uuid)

    # APPEND: Ray deletes nothing (OVERWRITE would empty the directory, elmo-hf's ownership marker included); the
    # directory holds only the marker, as open_output_directory made it.
    dataset.write_parquet(
        str(output_dir), filename_provider=OrderedParquetNames(file_format="parquet"), mode=ray.data.SaveMode.APPEND,
        ray_remote_args={"num_cpus": IO_TASK_CPUS}, concurrency=num_nodes,
    )


__all__ = [
    "RAY_EMBEDDINGS_OUTPUT", "RAY_WORKER_NICENESS_VARIABLE", "RayEmbeddingActor", "check_actor_pool_fits", "embed_with_ray",
    "file_table", "ray_for_the_job", "ray_input_formats", "text_file_rows", "vectors_to_arrow",
]
