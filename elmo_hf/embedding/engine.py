"""The embedding engine: one task runner for the stages of every shard, split -> embed -> write, with the files put in
place in shard order (docs/design/embedding.md, "The engine").

A shard is a ``ShardTask`` (its rows, a temporary file beside its place, its name) of three stages: ``split`` (words,
windows, model batches, character ids), ``embed`` (the model) and ``write`` (Parquet into the temporary file, its
sha256). ``ShardRunner.run`` hands each task to its executor and moves the written files into place strictly in
shard order, recording each (``record(entry)``: the manifest) before the next. ``StagesHere`` (one process) runs the
stages of consecutive shards on three threads; ``StagesInWorkers`` runs each task whole in a worker process
(``workers.EmbeddingWorkerPool``), or here while no worker is up and none is busy. The same tasks give the same
bytes either way.

On an error or Ctrl-C the runner stops reading, puts what is finished in place in order up to the first gap and
removes every other task's temporary file: what is in place is recorded, nothing else of the run's stays.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
from datasets import Features, Value

from ..corpus.readers import CorpusSource, InvalidRowError
from ..storage.files import fill_temporary, move_into_place, sha256_of_file, temporary_path_beside
from ..storage.interrupts import sigint_deferred
from .embedder import ELMoEmbedder, PreparedSentences
from .parquet import INPUT_ROW_COLUMN, shard_table, write_parquet
from ..runtime.parallelism import torch_threads
from .workers import EmbeddingWorkerPool

# Skipped rows are counted exactly; only the first ones are listed with their reason.
MAX_LISTED_SKIPPED_ROWS = 100

Rows = list[tuple[int, "dict | InvalidRowError"]]


# ----------------------------------------------------------------------------------------------------------------------
# The rows of each shard
# ----------------------------------------------------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------------------------------------------------
# One shard's stages
# ----------------------------------------------------------------------------------------------------------------------


@dataclass
class SplitShard:
    """One shard's rows split into words and prepared for the model (``ShardTask.split``)."""

    rows: Rows
    kept_rows: list[tuple[int, dict]]
    skipped: list[dict[str, Any]]
    sentences: PreparedSentences
    truncated_words: int = 0  # words cut to the model's character slots


@dataclass
class WrittenShard:
    """What a ``ShardTask`` did: the shard's manifest entry, or the invalid row that stopped it (``invalid``, with
    ``entry`` None); and the busy seconds of each stage it ran (``read``: splitting, ``model``, ``write``)."""

    entry: dict[str, Any] | None
    invalid: InvalidRowError | None
    seconds: dict[str, float] = field(default_factory=dict)


def split_rows(rows: Rows, embedder: ELMoEmbedder, source: CorpusSource) -> tuple[list, list, list, int]:
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
    path: Path, shard: SplitShard, vectors: list[np.ndarray], embedder: ELMoEmbedder, features: Features
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


def shard_entry(shard: SplitShard, name: str, path: Path) -> dict[str, Any]:
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


def timed(seconds: dict[str, float], stage: str, work: Callable, *arguments) -> Any:
    """``work(*arguments)``, its busy seconds added to ``seconds[stage]`` (also when it fails)."""
    started = time.perf_counter()
    try:
        return work(*arguments)
    finally:
        seconds[stage] = seconds.get(stage, 0.0) + time.perf_counter() - started


@dataclass
class ShardTask:
    """One shard: its ``rows``, the ``temporary`` file the runner made beside its place for ``write`` to fill, and
    the ``name`` it gets there. Picklable: a worker process runs it whole (``__call__``); one process runs its stages
    on three threads (``StagesHere``)."""

    rows: Rows
    source: CorpusSource  # names an invalid row
    features: Features
    temporary: Path
    name: str

    def split(self, embedder: ELMoEmbedder) -> SplitShard:
        """The rows split into words (an invalid row raises or is skipped, as the embedder says) and the model
        batches prepared."""
        kept_rows, sentences, skipped, truncated = split_rows(self.rows, embedder, self.source)
        return SplitShard(self.rows, kept_rows, skipped, embedder.prepare(sentences), truncated)

    def embed(self, embedder: ELMoEmbedder, shard: SplitShard, on_progress=None) -> list[np.ndarray]:
        """The vectors of the shard's sentences (the model's stage)."""
        return embedder.embed_prepared(shard.sentences, on_progress)

    def write(self, embedder: ELMoEmbedder, shard: SplitShard, vectors: list[np.ndarray]) -> dict[str, Any]:
        """Fill the temporary file with the shard's Parquet file (``move_into_place`` later flushes and renames it);
        its manifest entry."""
        fill_temporary(
            self.temporary, self.temporary.with_name(self.name),
            lambda path: write_shard_file(path, shard, vectors, embedder, self.features),
        )
        return shard_entry(shard, self.name, self.temporary)

    def __call__(self, embedder: ELMoEmbedder) -> WrittenShard:
        """The three stages in a row (a worker's way); an invalid row is the outcome, not an error."""
        seconds: dict[str, float] = {}
        try:
            shard = timed(seconds, "read", self.split, embedder)
        except InvalidRowError as error:  # the runner stops after the shards before this one, as for a read error
            return WrittenShard(None, error, seconds)
        vectors = timed(seconds, "model", self.embed, embedder, shard)
        return WrittenShard(timed(seconds, "write", self.write, embedder, shard, vectors), None, seconds)


def describe_shard(name: str, rows: Rows) -> str:
    """How errors name a shard: ``shard-00003.parquet (input rows 60-79)``."""
    return name if not rows else f"{name} (input rows {rows[0][0]}-{rows[-1][0]})"


# ----------------------------------------------------------------------------------------------------------------------
# The two ways to run the stages
# ----------------------------------------------------------------------------------------------------------------------


class StagesHere:
    """The stages in this process, pipelined: ``split`` on a reading thread, ``embed`` on the calling thread,
    ``write`` on a writing thread. Holds at most two tasks being split (the next one is split while one is embedded)
    and one written shard waiting: about three shards in memory."""

    def __init__(self, embedder: ELMoEmbedder, on_progress):
        self.embedder = embedder
        self.on_progress = on_progress
        self.splitting: deque[tuple[int, ShardTask, Future]] = deque()
        self.writing: deque[tuple[int, Future]] = deque()
        self.reader = self.writer = None

    def begin(self) -> None:
        self.reader = ThreadPoolExecutor(1, thread_name_prefix="elmo-hf-read")
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="elmo-hf-write")

    def has_room(self) -> bool:
        return len(self.splitting) < 2

    @property
    def busy(self) -> bool:
        return bool(self.splitting or self.writing)

    def submit(self, index: int, task: ShardTask) -> None:
        seconds: dict[str, float] = {}
        self.splitting.append((index, task, self.reader.submit(self._split, task, seconds)))

    def _split(self, task: ShardTask, seconds: dict[str, float]) -> tuple[SplitShard | InvalidRowError, dict]:
        try:
            return timed(seconds, "read", task.split, self.embedder), seconds
        except InvalidRowError as error:
            return error, seconds

    def wait(self) -> list[tuple[int, WrittenShard]]:
        """Embed the next split shard here and hand it to the writing thread; the shards written meanwhile, in
        order (waiting for the oldest when two wait, or when nothing is left to embed)."""
        finished = []
        if self.writing and self.writing[0][1].done() and self.writing[0][1].exception() is not None:
            self.writing.popleft()[1].result()  # a failed write, kept for this call by the last one: raised
        if self.splitting:
            index, task, splitting = self.splitting.popleft()
            shard, seconds = splitting.result()
            if isinstance(shard, InvalidRowError):
                finished.append((index, WrittenShard(None, shard, seconds)))
            else:
                vectors = timed(seconds, "model", task.embed, self.embedder, shard, self.on_progress)
                self.writing.append((index, self.writer.submit(self._write, task, shard, vectors, seconds)))
        while self.writing and (self.writing[0][1].done() or len(self.writing) > 1 or not self.splitting):
            if finished and self.writing[0][1].exception() is not None:
                break  # the shards written before it go in place first; the next call raises its error
            index, writing = self.writing.popleft()
            finished.append((index, writing.result()))
        return finished

    def _write(self, task: ShardTask, shard: SplitShard, vectors: list[np.ndarray], seconds: dict) -> WrittenShard:
        return WrittenShard(timed(seconds, "write", task.write, self.embedder, shard, vectors), None, seconds)

    def drop_from(self, index: int) -> None:
        """Split no further task from ``index`` on (the run stops before it)."""
        self.splitting = deque(item for item in self.splitting if item[0] < index)

    def settle(self) -> list[tuple[int, WrittenShard]]:
        """After a failure: nothing more is split or embedded; the shards being written finish, and those written
        are returned in order up to the first that failed."""
        self.splitting.clear()
        finished, in_order = [], True
        while self.writing:
            index, writing = self.writing.popleft()
            in_order = in_order and writing.exception() is None
            if in_order:
                finished.append((index, writing.result()))
        return finished

    def stop(self) -> None:
        for threads in (self.reader, self.writer):
            if threads is not None:
                threads.shutdown(wait=True, cancel_futures=True)


class StagesInWorkers:
    """Each task whole in a worker of ``pool`` (one that is up and holds fewer than its tasks), or in this process
    while no worker is up and none is busy (``run_here``): a worker slow to start (or one that never does) does not
    hold the run."""

    def __init__(self, pool: EmbeddingWorkerPool, embedder: ELMoEmbedder, on_progress):
        self.pool = pool
        self.embedder = embedder
        self.on_progress = on_progress
        self.done_here: list[tuple[int, WrittenShard]] = []

    def begin(self) -> None:
        pass

    def has_room(self) -> bool:
        self.pool.collect_ready()
        return self.pool.has_idle_worker() or not self.busy

    @property
    def busy(self) -> bool:
        return bool(self.pool.busy or self.done_here)

    def submit(self, index: int, task: ShardTask) -> None:
        if self.pool.has_idle_worker():
            self.pool.submit(index, task, describe_shard(task.name, task.rows))
        else:  # no worker is up yet and none is embedding: run it here rather than wait
            self.done_here.append((index, self.counted(self.run_here(task))))

    def run_here(self, task: ShardTask) -> WrittenShard:
        """``task`` in this process, at the workers' torch threads (so the bytes are the same as a worker's)."""
        with torch_threads(self.pool.threads):
            return task(self.embedder)

    def wait(self) -> list[tuple[int, WrittenShard]]:
        """The task this process ran, else the next one a worker finished ([] when a worker came up instead)."""
        if self.done_here:
            return [self.done_here.pop()]
        result = self.pool.wait()
        return [] if result is None else [(result[0], self.counted(result[1]))]

    def counted(self, written: WrittenShard) -> WrittenShard:
        """``written``, its shard counted in the progress (a worker reports no progress while it runs)."""
        if self.on_progress is not None and written.entry is not None:
            self.on_progress(written.entry["rows"], written.entry["words"])
        return written

    def drop_from(self, index: int) -> None:
        pass  # what the workers hold is dropped when the run stops

    def settle(self) -> list[tuple[int, WrittenShard]]:
        """After a failure: the workers are stopped at once, first (a worker still writing would fill, or recreate,
        its temporary file); what they finished is not kept."""
        self.pool.terminate()
        return []

    def stop(self) -> None:
        pass  # the pool outlives a run (the driver closes it)


# ----------------------------------------------------------------------------------------------------------------------
# The runner
# ----------------------------------------------------------------------------------------------------------------------


class ShardRunner:
    """Runs the shards of ``source`` with ``embedder``: in this process (``StagesHere``) or, given a ``pool``, in its
    workers (``StagesInWorkers``). ``run`` writes shards from chunks of rows, ``write`` one shard. Each stage's busy
    seconds add up in ``stage_seconds``; ``on_progress(sentences, words)`` counts the work as it is done."""

    def __init__(
        self, source: CorpusSource, embedder: ELMoEmbedder, on_progress=None, pool: EmbeddingWorkerPool | None = None
    ):
        self.source = source
        self.embedder = embedder
        self.stage_seconds: dict[str, float] = defaultdict(float)
        self.features = self._output_features(source, embedder)
        if pool is None:
            self.stages: StagesHere | StagesInWorkers = StagesHere(embedder, on_progress)
        else:
            self.stages = StagesInWorkers(pool, embedder, on_progress)
        # Called with a shard's file name and size just before it is moved into place (``embed_corpus``: the output's
        # in-flight record), so that a kill before the manifest lists it leaves it proven the run's.
        self.before_in_place: Callable[[str, int], None] = lambda name, size: None

    @staticmethod
    def _output_features(source: CorpusSource, embedder: ELMoEmbedder) -> Features:
        """The shards' columns: ``input_row``, the input's columns, the embedder's; a clash or a missing sentence
        column is refused."""
        input_features = source.features()
        clashes = sorted({INPUT_ROW_COLUMN, *embedder.features} & set(input_features))
        if clashes:
            raise ValueError(
                f"input {source.path} has column(s) {clashes} that the output would write; rename them or pick "
                "another --output-column"
            )
        source.check_column(embedder.input_column, input_features)
        return Features({INPUT_ROW_COLUMN: Value("int64"), **input_features, **embedder.features})

    def run(self, shards: Iterable[tuple[Path, Rows]], record: Callable[[dict], None]) -> None:
        """Write each shard (its path, named by the caller: ``EMBED_SHARDS``, and its rows), putting the files in
        place in order; ``record(entry)`` is called for each, in order, once its file is in place."""
        run = _Run(self, iter(shards), record)
        self.stages.begin()
        try:
            run.until_done()
        except BaseException:
            try:
                for index, written in self.stages.settle():
                    run.finished(index, written)
            finally:
                run.remove_temporary_files()
            raise
        finally:
            self.stages.stop()

    def write(self, rows: Rows, path: Path) -> dict[str, Any]:
        """The shard of ``rows`` written to ``path`` atomically (a damaged shard redone); its manifest entry."""
        entries: list[dict] = []
        self.run([(path, rows)], entries.append)
        return entries[0]


class _Run:
    """The state of one ``ShardRunner.run``: what is read, in flight (a temporary file made, not in place yet),
    written and waiting for the shards before it, and where the run stops."""

    def __init__(self, runner: ShardRunner, shards: Iterator[tuple[Path, Rows]], record: Callable[[dict], None]):
        self.runner, self.stages, self.shards, self.record = runner, runner.stages, shards, record
        self.in_flight: dict[int, ShardTask] = {}
        self.paths: dict[int, Path] = {}
        self.written: dict[int, dict[str, Any]] = {}
        self.next_read = self.next_in_place = 0
        self.read_ahead: tuple[Path, Rows] | None = None
        self.exhausted = False
        self.stop_error: Exception | None = None  # raised once the shards before ``stop_index`` are in place
        self.stop_index: int | None = None

    def until_done(self) -> None:
        while self.stop_index is None or self.next_in_place < self.stop_index:
            while self.stages.has_room() and (shard := self.take()) is not None:
                self.start(*shard)
            if self.read_ahead is None:
                self.read_ahead = self.read()  # read the next shard while the stages work
            if not self.stages.busy:
                break  # nothing left (or stopped)
            for index, written in self.stages.wait():
                self.finished(index, written)
        if self.stop_error is not None:
            raise self.stop_error

    def stop_before(self, index: int, error: Exception) -> None:
        if self.stop_index is None or index < self.stop_index:
            self.stop_error, self.stop_index = error, index
        self.exhausted, self.read_ahead = True, None
        self.stages.drop_from(index)

    def read(self) -> tuple[Path, Rows] | None:
        try:
            shard = None if self.exhausted else next(self.shards, None)
        except Exception as error:  # stop reading, finish the shards before it
            self.stop_before(self.next_read, error)
            return None
        self.exhausted = shard is None
        return shard

    def take(self) -> tuple[Path, Rows] | None:
        shard, self.read_ahead = (self.read_ahead, None) if self.read_ahead is not None else (self.read(), None)
        return shard

    def start(self, path: Path, rows: Rows) -> None:
        index = self.next_read
        with sigint_deferred():  # its temporary file is made here and listed for removal together
            temporary = temporary_path_beside(path)
            self.in_flight[index] = ShardTask(rows, self.runner.source, self.runner.features, temporary, path.name)
        self.paths[index] = path
        self.next_read += 1
        self.stages.submit(index, self.in_flight[index])

    def finished(self, index: int, written: WrittenShard) -> None:
        for stage, seconds in written.seconds.items():
            self.runner.stage_seconds[stage] += seconds
        if written.invalid is not None:
            self.stop_before(index, written.invalid)
            return
        self.written[index] = written.entry
        while self.next_in_place in self.written:
            with sigint_deferred():  # a Ctrl-C between the move and the record would leave a file nothing lists
                task, entry = self.in_flight[self.next_in_place], self.written.pop(self.next_in_place)
                self.runner.before_in_place(task.name, entry["bytes"])
                move_into_place(task.temporary, self.paths[self.next_in_place])
                del self.in_flight[self.next_in_place]  # in place: no longer a temporary file to remove on a failure
                self.record(entry)
                self.next_in_place += 1

    def remove_temporary_files(self) -> None:
        for task in self.in_flight.values():
            task.temporary.unlink(missing_ok=True)


__all__ = [
    "MAX_LISTED_SKIPPED_ROWS", "ShardRunner", "ShardTask", "SplitShard", "StagesHere", "StagesInWorkers", "WrittenShard",
    "input_characters", "shards_of_rows", "split_rows", "write_shard_file",
]
