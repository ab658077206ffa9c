"""Embed a corpus into a directory of Parquet shards plus a manifest, resumably: the engine of `elmo-hf embed`.

Output directory layout::

    OUT/shard-00000.parquet   rows [0, shard_size) of the input, in input order
    OUT/shard-00001.parquet   ...
    OUT/manifest.json         input identity, model fingerprint, options, one entry per finished shard
    OUT/dataset/              only with output_format="dataset": the shards as a `save_to_disk` directory

Nothing is lost: a shard is written to a temporary name, flushed and renamed, and only then listed in the manifest
(itself replaced atomically). After an interruption at any point (Ctrl-C, SIGKILL, power loss), ``resume=True``
drops whatever is not in the manifest, skips the input rows the manifest covers and goes on; a shard's content
depends only on its input rows, so the result is byte-identical to an uninterrupted run.

Each shard has the columns ``input_row`` (0-based row of the input; line - 1 for text files), the input's columns,
then the embedder's (``words``, ``num_words``, vectors). Load them with
``datasets.load_dataset("parquet", data_files=sorted(glob("OUT/shard-*.parquet")), split="train")``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pyarrow.parquet as pq
import torch
from datasets import Dataset, Features, Value

from ..corpus.readers import CorpusSource, InvalidRowError
from .embedder import ELMoEmbedder

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "elmo-hf-embeddings"
MANIFEST_VERSION = 1
INPUT_ROW_COLUMN = "input_row"
OUTPUT_FORMATS = ("parquet", "dataset")
SAVED_DATASET_DIR = "dataset"
# Skipped rows are counted exactly; only the first ones are listed with their reason.
MAX_LISTED_SKIPPED_ROWS = 100


class OutputDirectoryError(FileExistsError):
    """The output directory holds something this run must not overwrite or cannot resume."""


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


@dataclass
class EmbeddingRunSummary:
    """What a run did. Counts cover the whole output (resumed shards included); ``seconds`` and the rates cover
    this run only."""

    output_dir: Path
    sentences: int
    words: int
    skipped_rows: int
    shards: int
    seconds: float
    words_this_run: int
    resumed_from_row: int = 0
    already_complete: bool = False

    @property
    def words_per_second(self) -> float:
        return self.words_this_run / self.seconds if self.seconds > 0 else 0.0

    def describe(self) -> str:
        resumed = f", resumed at input row {self.resumed_from_row:,}" if self.resumed_from_row else ""
        skipped = f", {self.skipped_rows:,} invalid rows skipped" if self.skipped_rows else ""
        if self.already_complete:
            return f"{self.output_dir} is already complete: {self.sentences:,} sentences, {self.words:,} words{skipped}"
        return (
            f"embedded {self.sentences:,} sentences ({self.words:,} words{skipped}) into {self.shards} shard(s) in "
            f"{self.output_dir}; this run: {self.words_this_run:,} words in {self.seconds:.1f} s = "
            f"{self.words_per_second:,.0f} words/s{resumed}"
        )


@dataclass
class Manifest:
    """The record of a run, rewritten atomically after every shard."""

    input: dict[str, Any]
    model: dict[str, Any]
    options: dict[str, Any]
    shards: list[dict[str, Any]] = field(default_factory=list)
    complete: bool = False

    @property
    def rows_done(self) -> int:
        return sum(shard["input_rows"] for shard in self.shards)

    def totals(self) -> dict[str, int]:
        return {
            "sentences": sum(shard["rows"] for shard in self.shards),
            "words": sum(shard["words"] for shard in self.shards),
            "skipped_rows": sum(shard["skipped_rows"] for shard in self.shards),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MANIFEST_FORMAT,
            "version": MANIFEST_VERSION,
            "input": self.input,
            "model": self.model,
            "options": self.options,
            "complete": self.complete,
            "totals": self.totals(),
            "shards": self.shards,
        }

    @classmethod
    def read(cls, path: Path) -> "Manifest":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            raise OutputDirectoryError(f"cannot read the manifest {path}: {error}") from error
        if data.get("format") != MANIFEST_FORMAT or data.get("version") != MANIFEST_VERSION:
            raise OutputDirectoryError(
                f"{path} is not an elmo-hf embedding manifest (version {MANIFEST_VERSION}): format "
                f"{data.get('format')!r}, version {data.get('version')!r}"
            )
        return cls(data["input"], data["model"], data["options"], data["shards"], data["complete"])

    def write(self, path: Path) -> None:
        content = (json.dumps(self.to_json(), indent=2) + "\n").encode("utf-8")
        write_atomically(path, lambda temporary: temporary.write_bytes(content))


def write_atomically(path: Path, write: Callable[[Path], Any]) -> None:
    """``write(temporary)`` writes the file under a temporary name beside ``path``; it is then flushed to disk and
    renamed to ``path``, and the directory entry flushed: after a crash ``path`` is either complete or absent/old."""
    temporary = path.with_name(f".{path.name}.tmp")
    write(temporary)
    with open(temporary, "rb+") as file:
        os.fsync(file.fileno())
    os.replace(temporary, path)
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _sha256_of_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def prepare_output_directory(output_dir: Path, manifest: Manifest, resume: bool, overwrite: bool) -> Manifest:
    """The manifest to continue from (a fresh one unless resuming). Refuses to touch what it should not."""
    if output_dir.exists() and not output_dir.is_dir():
        raise OutputDirectoryError(f"output {output_dir} exists and is not a directory")
    manifest_path = output_dir / MANIFEST_NAME
    existing = sorted(output_dir.iterdir()) if output_dir.exists() else []
    if existing and not manifest_path.exists():
        raise OutputDirectoryError(
            f"output {output_dir} is not empty and holds no {MANIFEST_NAME}: it is not an elmo-hf embedding output, so "
            "it is neither resumed nor overwritten; choose another --output"
        )
    if existing and overwrite:
        shutil.rmtree(output_dir)
        existing = []
    if existing and not resume:
        previous = Manifest.read(manifest_path)
        state = "complete" if previous.complete else f"interrupted after {previous.rows_done:,} input rows"
        raise OutputDirectoryError(
            f"output {output_dir} already holds an embedding run ({state}); pass --resume to continue it or "
            "--overwrite to start over"
        )
    output_dir.mkdir(parents=True, exist_ok=True)
    if not existing:
        return manifest
    previous = Manifest.read(manifest_path)
    # The model's name is informational (a path may be spelled differently); its weights must be the same.
    for what, was, now in (
        ("input", previous.input, manifest.input),
        ("model weights", {"sha256": previous.model["sha256"]}, {"sha256": manifest.model["sha256"]}),
        ("options", previous.options, manifest.options),
    ):
        differences = {name: (was.get(name), value) for name, value in now.items() if was.get(name) != value}
        if differences:
            raise OutputDirectoryError(
                f"cannot resume {output_dir}: it was started with different {what} ({_describe_differences(differences)}); "
                "rerun with the same input, model and options, or pass --overwrite to start over"
            )
    _remove_unlisted_files(output_dir, previous)
    return previous


def _describe_differences(differences: dict[str, tuple[Any, Any]]) -> str:
    return "; ".join(f"{name}: was {was!r}, now {now!r}" for name, (was, now) in differences.items())


def _remove_unlisted_files(output_dir: Path, manifest: Manifest) -> None:
    """Shards written after the last manifest update (and temporary files) are redone from scratch."""
    listed = {shard["file"] for shard in manifest.shards} | {MANIFEST_NAME}
    for path in output_dir.iterdir():
        if path.name not in listed:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    for shard in manifest.shards:
        if not (output_dir / shard["file"]).exists():
            raise OutputDirectoryError(
                f"{output_dir / shard['file']} is listed in the manifest but missing; the output is damaged: pass "
                "--overwrite to start over"
            )


class ShardWriter:
    """Turns one shard's rows into a Parquet file: the embedding itself and the typed table."""

    def __init__(self, source: CorpusSource, embedder: ELMoEmbedder, on_progress: Callable[[int, int], None] | None):
        self.source = source
        self.embedder = embedder
        self.on_progress = on_progress
        self.input_features = source.features()
        reserved = {INPUT_ROW_COLUMN, *embedder.features}
        clashes = sorted(reserved & set(self.input_features))
        if clashes:
            raise ValueError(
                f"input {source.path} has column(s) {clashes} that the output would write; rename them or pick "
                "another --output-column"
            )
        if embedder.input_column not in self.input_features:
            raise ValueError(
                f"input {source.path} has no column {embedder.input_column!r}; its columns are "
                f"{list(self.input_features)} (choose one with --text-column or --words-column)"
            )
        self.features = Features({INPUT_ROW_COLUMN: Value("int64"), **self.input_features, **embedder.features})

    def write(self, rows: list[tuple[int, dict | InvalidRowError]], path: Path) -> dict[str, Any]:
        """Embed ``rows`` and write them to ``path`` atomically; return the manifest entry (without the file name)."""
        kept_rows, sentences, skipped = [], [], []
        for input_row, record in rows:
            try:
                if isinstance(record, InvalidRowError):
                    raise record
                sentences.append(self.embedder.words_of(record[self.embedder.input_column]))
                kept_rows.append((input_row, record))
            except InvalidRowError as error:
                message = f"{self.source.row_name(input_row)}: {error}"
                if self.embedder.on_invalid == "raise":
                    raise InvalidRowError(f"{message} (pass --skip-invalid to skip such rows)") from None
                skipped.append({"row": input_row, "reason": str(error)})
        columns = {
            INPUT_ROW_COLUMN: [input_row for input_row, _ in kept_rows],
            **{name: [record[name] for _, record in kept_rows] for name in self.input_features},
        }
        columns.update(self.embedder.embed_sentences(sentences, self.on_progress))
        table = Dataset.from_dict(columns, features=self.features).data.table
        write_atomically(path, lambda temporary: pq.write_table(table, temporary))
        return {
            "first_row": rows[0][0] if rows else 0,
            "input_rows": len(rows),
            "rows": len(kept_rows),
            "words": sum(len(words) for words in sentences),
            "skipped_rows": len(skipped),
            "skipped": skipped[:MAX_LISTED_SKIPPED_ROWS],
            "sha256": _sha256_of_file(path),
        }


def embed_corpus(
    source: CorpusSource,
    embedder: ELMoEmbedder,
    output_dir: str | Path,
    *,
    model_name: str,
    shard_size: int = 1000,
    output_format: str = "parquet",
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
) -> EmbeddingRunSummary:
    """Embed every row of ``source`` into ``output_dir`` (see the module docstring). ``model_name`` is recorded in
    the manifest; the weights themselves are fingerprinted."""
    from tqdm.auto import tqdm

    if not isinstance(shard_size, int) or shard_size < 1:
        raise ValueError(f"shard_size must be a positive int, got {shard_size!r}")
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output_format must be one of {list(OUTPUT_FORMATS)}, got {output_format!r}")
    if resume and overwrite:
        raise ValueError("pass either resume or overwrite, not both")
    output_dir = Path(output_dir)
    fresh = Manifest(
        input=source.identity(),
        model={"name": model_name, "sha256": model_fingerprint(embedder.model)},
        options={**embedder.options(), "shard_size": shard_size, "output_format": output_format},
    )
    manifest = prepare_output_directory(output_dir, fresh, resume, overwrite)
    resumed_from_row = manifest.rows_done
    if manifest.complete:
        totals = manifest.totals()
        return EmbeddingRunSummary(output_dir, totals["sentences"], totals["words"], totals["skipped_rows"], len(manifest.shards), 0.0, 0, resumed_from_row, already_complete=True)

    num_rows = source.num_rows()
    bar = tqdm(total=num_rows, initial=resumed_from_row, unit=" sentences", disable=not progress, dynamic_ncols=True)
    start_time = time.perf_counter()
    words_this_run = 0

    def on_progress(sentences: int, words: int) -> None:
        nonlocal words_this_run
        words_this_run += words
        bar.update(sentences)
        bar.set_postfix_str(f"{words_this_run / max(time.perf_counter() - start_time, 1e-9):,.0f} words/s", refresh=False)

    writer = ShardWriter(source, embedder, on_progress)
    try:
        for rows in _chunks(source.rows(start=resumed_from_row), shard_size):
            name = shard_file_name(len(manifest.shards))
            entry = writer.write(rows, output_dir / name)
            bar.update(entry["skipped_rows"])
            manifest.shards.append({"file": name, **entry})
            manifest.write(output_dir / MANIFEST_NAME)
        if not manifest.shards:  # an empty input still gives a loadable (empty) output with the full schema
            manifest.shards.append({"file": shard_file_name(0), **writer.write([], output_dir / shard_file_name(0))})
        if output_format == "dataset":
            _write_saved_dataset(output_dir, manifest)
        manifest.complete = True
        manifest.write(output_dir / MANIFEST_NAME)
    finally:
        bar.close()
    totals = manifest.totals()
    return EmbeddingRunSummary(
        output_dir, totals["sentences"], totals["words"], totals["skipped_rows"], len(manifest.shards),
        time.perf_counter() - start_time, words_this_run, resumed_from_row,
    )


def _chunks(rows, size: int):
    chunk = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _write_saved_dataset(output_dir: Path, manifest: Manifest) -> None:
    """Copy the shards into ``OUT/dataset`` (`save_to_disk` layout), through a cache inside OUT that is removed."""
    cache_dir = output_dir / ".cache"
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


__all__ = ["EmbeddingRunSummary", "MANIFEST_NAME", "Manifest", "OutputDirectoryError", "embed_corpus", "model_fingerprint"]
