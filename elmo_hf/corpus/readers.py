"""Streaming readers for the corpora `elmo-hf embed` takes: a text file (one sentence per line), JSON lines, CSV,
Parquet, or a directory written by `Dataset.save_to_disk`.

Every reader yields ``(input_row, record)`` from a given row on, never holding the corpus in memory. ``record`` is a
dict of column values, or an `InvalidRowError` for a row that cannot be read (a text-file line that is not UTF-8);
the caller decides whether that raises or is skipped. Text files are read here (so errors name the line); the other
formats are streamed by `datasets`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pyarrow.parquet as pq
from datasets import Dataset, DatasetDict, Features, IterableDataset, Value, load_dataset, load_from_disk


INPUT_FORMATS = ("txt", "jsonl", "csv", "parquet", "dataset")
# File extension -> input format (the Ray engine reads the same files).
EXTENSION_FORMATS = {".txt": "txt", ".text": "txt", ".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv", ".parquet": "parquet"}
_DATASETS_BUILDERS = {"jsonl": "json", "csv": "csv", "parquet": "parquet"}
_READ_BATCH_ROWS = 1000


class CorpusError(ValueError):
    """The input corpus cannot be read as the format it claims to be."""


class InvalidRowError(ValueError):
    """A row whose text (or words) cannot be read or embedded; the message names the row."""


def infer_input_format(path: Path) -> str:
    """The input format from the path: a directory is a saved dataset, files go by extension."""
    if path.is_dir():
        return "dataset"
    input_format = EXTENSION_FORMATS.get(path.suffix.lower())
    if input_format is None:
        raise CorpusError(
            f"cannot tell the format of {path} from its extension {path.suffix!r}: expected one of "
            f"{sorted(EXTENSION_FORMATS)} or a saved dataset directory; pass --input-format {{{','.join(INPUT_FORMATS)}}}"
        )
    return input_format


@dataclass(frozen=True)
class CorpusSource:
    """A corpus on disk in one of `INPUT_FORMATS`."""

    path: Path
    input_format: str

    @classmethod
    def open(cls, path: str | Path, input_format: str | None = None) -> "CorpusSource":
        path = Path(path)
        if not path.exists():
            raise CorpusError(f"input {path} does not exist")
        input_format = input_format or infer_input_format(path)
        if input_format not in INPUT_FORMATS:
            raise CorpusError(f"input format must be one of {list(INPUT_FORMATS)}, got {input_format!r}")
        if (input_format == "dataset") != path.is_dir():
            expected = "a directory written by Dataset.save_to_disk" if input_format == "dataset" else "a file"
            raise CorpusError(f"input {path} given as {input_format!r} must be {expected}")
        return cls(path, input_format)

    def identity(self) -> dict:
        """What a resumed run checks to be sure it reads the same input: path, format, size and modification time."""
        files = sorted(self.path.rglob("*")) if self.path.is_dir() else [self.path]
        stats = [file.stat() for file in files if file.is_file()]
        return {
            "path": str(self.path.resolve()),
            "format": self.input_format,
            "size": sum(stat.st_size for stat in stats),
            "mtime_ns": max((stat.st_mtime_ns for stat in stats), default=0),
        }

    def row_name(self, input_row: int) -> str:
        """How errors name a row: the line for text files, the 0-based row otherwise."""
        return f"{self.path} line {input_row + 1}" if self.input_format == "txt" else f"{self.path} row {input_row}"

    def features(self) -> Features:
        """The input's columns and their types (read from the first rows where the format does not store them)."""
        if self.input_format == "txt":
            return Features({"text": Value("string")})
        if self.input_format == "dataset":
            return self._saved_dataset().features
        try:
            return self._streamed()._resolve_features().features
        except (ValueError, TypeError, OSError, UnicodeDecodeError) as error:
            raise CorpusError(f"cannot read {self.path} as {self.input_format}: {error}") from error

    def num_rows(self) -> int | None:
        """Number of rows when it is cheap to know (text files are counted by newlines; JSON lines and CSV are not)."""
        if self.input_format == "txt":
            return _count_lines(self.path)
        if self.input_format == "parquet":
            return pq.ParquetFile(self.path).metadata.num_rows
        if self.input_format == "dataset":
            return len(self._saved_dataset())
        return None

    def rows(self, start: int = 0) -> Iterator[tuple[int, dict | InvalidRowError]]:
        """``(input_row, record)`` for every row from ``start`` on, in order."""
        if self.input_format == "txt":
            yield from self._text_lines(start)
            return
        input_row = start
        try:
            for batch in self._batches(start):
                columns = list(batch)
                for values in zip(*batch.values()):
                    yield input_row, dict(zip(columns, values))
                    input_row += 1
        except (ValueError, TypeError, OSError, UnicodeDecodeError) as error:
            if isinstance(error, (InvalidRowError, CorpusError)):
                raise
            raise CorpusError(f"cannot read {self.path} as {self.input_format} after row {input_row}: {error}") from error

    def _batches(self, start: int) -> Iterator[dict[str, list]]:
        if self.input_format == "dataset":
            dataset = self._saved_dataset()
            return dataset.select(range(start, len(dataset))).iter(batch_size=_READ_BATCH_ROWS)
        return self._streamed().skip(start).iter(batch_size=_READ_BATCH_ROWS)

    def _streamed(self) -> IterableDataset:
        # CSV: an empty field, "NA" or "null" is text (an empty sentence, the word "NA"), not a missing value.
        options = {"keep_default_na": False} if self.input_format == "csv" else {}
        return load_dataset(
            _DATASETS_BUILDERS[self.input_format], data_files=str(self.path), split="train", streaming=True, **options
        )

    def _text_lines(self, start: int) -> Iterator[tuple[int, dict | InvalidRowError]]:
        with open(self.path, "rb") as file:
            for input_row, line in enumerate(file):
                if input_row < start:
                    continue
                # A trailing "\n" (or "\r\n") ends the line; a last line without one is a row too.
                line = line[:-1] if line.endswith(b"\n") else line
                line = line[:-1] if line.endswith(b"\r") else line
                try:
                    yield input_row, {"text": line.decode("utf-8")}
                except UnicodeDecodeError as error:
                    yield input_row, InvalidRowError(
                        f"not valid UTF-8 ({error.reason}: byte 0x{line[error.start]:02x} at byte offset {error.start} of the line)"
                    )

    def _saved_dataset(self) -> Dataset:
        dataset = load_from_disk(str(self.path))
        if isinstance(dataset, DatasetDict):
            raise CorpusError(
                f"{self.path} holds a DatasetDict with splits {list(dataset)}; pass one split's directory, e.g. "
                f"{self.path / next(iter(dataset))}"
            )
        return dataset


def _count_lines(path: Path) -> int:
    count, last = 0, b"\n"
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


__all__ = ["CorpusError", "CorpusSource", "EXTENSION_FORMATS", "INPUT_FORMATS", "InvalidRowError", "infer_input_format"]
