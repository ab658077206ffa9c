"""Embed a corpus into a directory of Parquet shards plus a manifest, resumably: ``embed_corpus``, what `elmo-hf embed`
calls (docs/design/embedding.md, "Output directory and resume").

Output directory layout::

    OUT/.elmo-hf-output.json  ownership marker (elmo_hf.storage)
    OUT/shard-00000.parquet   the input's first rows (shard_size of them, fewer where they hold more than
                              shard_characters characters), in input order (names: shard_names.EMBED_SHARDS)
    OUT/manifest.json         input identity, model fingerprint, options, one entry per finished shard (its rows,
                              words, skipped rows, cut words, bytes, sha256) and their totals
    OUT/dataset/              only with output_format="dataset": the shards as a `save_to_disk` directory

A shard is written to a temporary name, flushed and renamed (recorded in flight in the marker just before), then
listed in the manifest. ``resume=True`` trusts nothing it has not checked (``manifest.continue_from``): it deletes
only what a record proves the run's, verifies every listed shard and redoes a damaged one, then continues after the
last; the result is byte-identical to an uninterrupted run. Each shard has the columns ``input_row``, the input's
columns, then the embedder's; load them with ``datasets.load_dataset("parquet", data_files=...)``.
"""

from __future__ import annotations

import logging
import shutil
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Iterator

import pyarrow.parquet as pq
from datasets import Dataset

from ..corpus.readers import CorpusSource
from ..storage.output_directory import OutputDirectory, open_output_directory
from ..validation_elmo import check_int
from .embedder import ELMoEmbedder
from .engine import ShardRunner, shards_of_rows
from .shard_names import EMBED_SHARDS
from .manifest import (
    DEFAULT_OUTPUT_FORMAT, DEFAULT_SHARD_CHARACTERS, DEFAULT_SHARD_SIZE, EMBEDDINGS_OUTPUT, MANIFEST_NAME,
    SAVED_DATASET_CACHE_DIR, SAVED_DATASET_DIR, EmbeddingRunSummary, Manifest, checked_run_options, complete_summary,
    continue_from, describe_run, has_finished_shards, model_fingerprint, shard_problem,
)
from ..runtime.parallelism import default_workers, usable_cores
from .workers import EmbeddingWorkerPool

logger = logging.getLogger(__name__)

PROGRESS_REFRESH_SECONDS = 0.5


class EmbeddingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped ``embed_corpus``; ``shards`` finished shards are kept in ``output_dir`` (none: nothing was kept)."""

    def __init__(self, output_dir: Path, shards: int):
        self.output_dir = output_dir
        self.shards = shards
        super().__init__(f"embedding interrupted with {shards} finished shard(s) in {output_dir}")


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
    run_options = checked_run_options(shard_size, shard_characters, output_format)
    num_rows = source.num_rows()  # a text file's lines are counted once: here, for the workers and the progress bar
    workers, worker_threads = _worker_counts(source, embedder, num_rows, run_options, workers, worker_threads)
    fresh = Manifest(
        input=source.identity(),
        model={
            "name": model_name, "sha256": model_fingerprint(embedder.model),
            "max_characters_per_token": embedder.tokenizer.max_characters_per_token,
        },
        options={**embedder.options(), **run_options},
        request=embedder.request,
    )
    run = _CorpusRun(source, embedder, fresh, run_options, num_rows, progress)
    try:
        with ExitStack() as stack:
            # The workers start before the output directory's lock is taken: forked, they would hold copies of it (an
            # flock belongs to the open file, which a fork shares). They hold and write nothing of the directory, so
            # they are stopped after it is released.
            pool = stack.enter_context(EmbeddingWorkerPool(embedder, workers, worker_threads)) if workers > 1 else None
            run.output = stack.enter_context(open_output_directory(
                output_dir, EMBEDDINGS_OUTPUT, resume=resume, overwrite=overwrite, inputs=[source.path],
                worth_keeping=has_finished_shards, describe_existing=describe_run,
            ))
            return run.in_output(pool)
    except KeyboardInterrupt:
        raise EmbeddingInterrupted(Path(output_dir), len(run.manifest.shards) if Path(output_dir).exists() else 0) from None


def _worker_counts(
    source: CorpusSource, embedder: ELMoEmbedder, num_rows: int | None, run_options: dict, workers, worker_threads
) -> tuple[int, int]:
    """``(workers, worker_threads)`` checked, the workers by ``default_workers`` when not given."""
    shard_size, shard_characters = run_options["shard_size"], run_options["shard_characters"]
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
    return workers, worker_threads


@dataclass
class _Progress:
    """The run's progress bar and the words it embedded (``__call__(sentences, words)`` after each model batch or
    shard): its words/s from ``start_time``."""

    bar: Any = None
    words: int = 0
    start_time: float = field(default_factory=time.perf_counter)
    last_refresh: float = field(default_factory=time.monotonic)

    def open(self, total: int | None, initial: int, enabled: bool) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(
            total=total, initial=initial, unit=" sentences", disable=not enabled, dynamic_ncols=True,
            mininterval=PROGRESS_REFRESH_SECONDS,
        )
        self.start_time = time.perf_counter()

    def __call__(self, sentences: int, words: int) -> None:
        self.words += words
        if self.bar is None:
            return
        rate = self.words / max(time.perf_counter() - self.start_time, 1e-9)
        self.bar.set_postfix_str(f"{rate:,.0f} words/s", refresh=False)
        if sentences:
            self.bar.update(sentences)
        elif time.monotonic() - self.last_refresh >= PROGRESS_REFRESH_SECONDS:
            # A long sentence runs in many model batches before it counts: show its words/s meanwhile, at most twice
            # a second (in a log file every redraw is another line).
            self.bar.refresh()
            self.last_refresh = time.monotonic()


@dataclass
class _CorpusRun:
    """One ``embed_corpus`` run inside its open ``output`` directory: ``manifest`` is the fresh one, or once resumed
    the run's own."""

    source: CorpusSource
    embedder: ELMoEmbedder
    manifest: Manifest
    run_options: dict[str, Any]
    num_rows: int | None
    show_progress: bool
    progress: _Progress = field(default_factory=_Progress)
    output: OutputDirectory | None = None

    @property
    def output_dir(self) -> Path:
        return self.output.path

    def in_output(self, pool: EmbeddingWorkerPool | None) -> EmbeddingRunSummary:
        """Resume (redoing damaged shards) or start, write the shards after the last one listed, complete the run."""
        runner = ShardRunner(self.source, self.embedder, self.progress, pool)
        runner.before_in_place = self.output.record_in_flight
        redone = 0
        if self.output.resumed:
            self.manifest = continue_from(self.output_dir, self.manifest)
            redone = self._redo_damaged_shards(runner)
            self.progress.words = 0  # the rate covers new shards only
        resumed_from_row = self.manifest.rows_done
        if self.manifest.complete:
            if redone and self.run_options["output_format"] == "dataset":
                self._write_saved_dataset()
            return complete_summary(self.output_dir, self.manifest, self.embedder.tokenizer.max_characters_per_token, redone)
        self.progress.open(self.num_rows, resumed_from_row, self.show_progress)
        try:
            runner.run(self._shards(resumed_from_row), self._record)
            if self.run_options["output_format"] == "dataset":
                self._write_saved_dataset()
            self.manifest.complete = True
            self.manifest.write(self.output_dir / MANIFEST_NAME)
            # Before the workers are stopped: their exit is not the run's.
            seconds = time.perf_counter() - self.progress.start_time
        finally:
            self.progress.bar.close()
        totals = self.manifest.totals()
        return EmbeddingRunSummary(
            self.output_dir, totals["sentences"], totals["words"], totals["skipped_rows"], len(self.manifest.shards),
            seconds, self.progress.words, resumed_from_row, redone_shards=redone,
            stage_seconds=dict(runner.stage_seconds), truncated_words=totals["truncated_words"],
            max_characters_per_token=self.embedder.tokenizer.max_characters_per_token,
        )

    def _shards(self, start_row: int) -> Iterator[tuple[Path, list]]:
        """The path of each shard to write (``EMBED_SHARDS``, after those listed) and the input's rows it holds, from
        ``start_row``; an empty input still gives one (empty) shard, so that the output loads, with the full schema."""
        shard_size, shard_characters = self.run_options["shard_size"], self.run_options["shard_characters"]
        chunks = shards_of_rows(self.source.rows(start=start_row), shard_size, shard_characters, self.embedder.input_column)
        first = len(self.manifest.shards)
        none = True
        for index, chunk in enumerate(chunks, first):
            none = False
            yield self.output.path / EMBED_SHARDS.name(index), chunk
        if none and not self.manifest.shards:
            yield self.output.path / EMBED_SHARDS.name(first), []

    def _record(self, entry: dict[str, Any]) -> None:
        self.progress.bar.update(entry["skipped_rows"])
        self.manifest.shards.append(entry)
        self.manifest.write(self.output_dir / MANIFEST_NAME)
        self.output.settled(entry["file"])  # listed now: the next in-flight record leaves it out

    def _redo_damaged_shards(self, runner: ShardRunner) -> int:
        """Rewrite every listed shard that is missing or does not match its manifest entry; returns how many."""
        redone = 0
        for index, entry in enumerate(self.manifest.shards):
            problem = shard_problem(self.output_dir, entry)
            if problem is None:
                continue
            logger.warning("resume: %s; redoing input rows %d-%d", problem, entry["first_row"], entry["first_row"] + entry["input_rows"] - 1)
            rows = list(islice(self.source.rows(start=entry["first_row"]), entry["input_rows"]))
            new_entry = runner.write(rows, self.output_dir / entry["file"])
            if new_entry["sha256"] != entry["sha256"]:
                logger.warning("%s was redone with other bytes than first recorded (other threads or hardware?)", entry["file"])
            self.manifest.shards[index] = new_entry
            self.manifest.write(self.output_dir / MANIFEST_NAME)
            redone += 1
        return redone

    def _write_saved_dataset(self) -> None:
        """Copy the shards into ``OUT/dataset`` (`save_to_disk` layout), through a cache inside OUT that is removed.
        Both folders are recorded in flight before they are made: a run killed while it writes them leaves them
        proven its own (datasets names the files inside)."""
        for folder in (SAVED_DATASET_DIR, SAVED_DATASET_CACHE_DIR):
            self.output.record_in_flight(f"{folder}/", None)
        cache_dir = self.output_dir / SAVED_DATASET_CACHE_DIR
        target = self.output_dir / SAVED_DATASET_DIR
        for leftover in (cache_dir, target):
            if leftover.exists():
                shutil.rmtree(leftover)
        files = [str(self.output_dir / shard["file"]) for shard in self.manifest.shards]
        if self.manifest.totals()["sentences"] == 0:
            # datasets 5.2 cannot read a Parquet file without rows ("BatchSize must be greater than 0"), and saves an
            # empty dataset without any data file unless told to write one shard.
            Dataset(pq.read_table(files[0])).save_to_disk(str(target), num_shards=1)
            return
        dataset = Dataset.from_parquet(files, cache_dir=str(cache_dir))
        dataset.save_to_disk(str(target))
        del dataset
        if cache_dir.exists():
            shutil.rmtree(cache_dir)


__all__ = ["EmbeddingInterrupted", "PROGRESS_REFRESH_SECONDS", "embed_corpus"]
