"""The corpus a command reads: ``CorpusSource`` (one input in one of ``formats.INPUT_FORMATS``, read by its format's
``CorpusReader``, streaming) and ``corpus_sources`` (the inputs of several paths: files, saved datasets, directories
of shards such as the 1B Word Benchmark's, glob patterns), for `elmo-hf embed` and `elmo-hf pretrain` alike. A row
that cannot be read is an ``InvalidRowError`` the caller raises or skips; any other reader error is a
``CorpusError`` naming the input, its format and the row. Lines are read by ``lines.read_lines``; the names of the
lower modules a caller needs are imported from here too.
"""

from __future__ import annotations

import glob
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from .format_readers import (
    CONLLU_COLUMNS, CONLLU_WORDS_COLUMN, DEFAULT_TEXT_COLUMN, JSON_COLUMNS_BYTES, CorpusReader, conllu_features,
    read_conllu_sentences,
)
from .formats import INPUT_FORMATS, format_of_extension, known_extensions, reader_class
from .lines import (
    LINE_ENDINGS_PROBE_BYTES, MAX_LINE_BYTES, UTF8_BYTE_ORDER_MARK, CorpusError, InvalidRowError, check_line_endings,
    count_lines, read_lines, read_text_lines,
)

# The format of a directory that is not a folder of shards.
SAVED_DATASET_FORMAT = "dataset"


def infer_input_format(path: Path) -> str:
    """The input format from the path: a directory is a saved dataset, files go by extension."""
    if path.is_dir():
        return SAVED_DATASET_FORMAT
    input_format = format_of_extension(path.suffix)
    if input_format is None:
        raise CorpusError(
            f"cannot tell the format of {path} from its extension {path.suffix!r}: expected one of "
            f"{known_extensions()} or a saved dataset directory; pass --input-format {{{','.join(INPUT_FORMATS)}}}"
        )
    return input_format


# The files `Dataset.save_to_disk` writes beside its data: a directory holding one is a saved dataset (or DatasetDict).
SAVED_DATASET_FILES = ("state.json", "dataset_dict.json")
GLOB_CHARACTERS = "*?["


def is_saved_dataset(path: Path) -> bool:
    """Whether ``path`` is a directory written by `Dataset.save_to_disk` (or `DatasetDict.save_to_disk`)."""
    return path.is_dir() and any((path / name).is_file() for name in SAVED_DATASET_FILES)


def sentence_column(text_column: str = DEFAULT_TEXT_COLUMN, words_column: str | None = None) -> str:
    """The column a row's sentence is read from: the column of pre-split words when one is named, else the text
    column."""
    return words_column or text_column


def corpus_sources(paths: str | Path | Sequence[str | Path], input_format: str | None = None) -> list["CorpusSource"]:
    """The corpus files of ``paths``, in order, opened: a file; a saved dataset; a directory of shards (its files
    that are not hidden, in name order); or a glob pattern (the files it matches in name order). ``input_format`` is
    every file's format; without it each file's extension tells, and a shard whose extension names no format is
    text (``news.en-00001-of-00100``). Raises `CorpusError` naming the path: one that does not exist, a pattern
    that matches no file, an empty directory of shards, a format that cannot be told."""
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not paths:
        raise CorpusError("no corpus given: expected at least one file, directory of shards or glob pattern")
    sources: list[CorpusSource] = []
    for path in map(Path, paths):
        if not path.exists() and any(character in str(path) for character in GLOB_CHARACTERS):
            matches = sorted(Path(match) for match in glob.glob(str(path)) if Path(match).is_file())
            if not matches:
                raise CorpusError(f"the corpus pattern {path} matches no file")
            sources.extend(_open_shard(match, input_format) for match in matches)
        elif path.is_dir() and input_format != SAVED_DATASET_FORMAT and not is_saved_dataset(path):
            shards = sorted(entry for entry in path.iterdir() if entry.is_file() and not entry.name.startswith("."))
            if not shards:
                raise CorpusError(
                    f"the corpus directory {path} holds no file: expected shards (text, one sentence per line, or any "
                    "format elmo-hf reads) or a directory written by Dataset.save_to_disk"
                )
            sources.extend(_open_shard(shard, input_format) for shard in shards)
        else:
            sources.append(CorpusSource.open(path, input_format))
    return sources


def _open_shard(path: Path, input_format: str | None) -> "CorpusSource":
    """A shard of a directory or pattern: its extension tells its format, text when it names none."""
    return CorpusSource.open(path, input_format or format_of_extension(path.suffix) or "txt")


@dataclass(frozen=True)
class CorpusSource:
    """A corpus on disk in one of ``INPUT_FORMATS``, read by that format's reader (``reader``)."""

    path: Path
    input_format: str

    @classmethod
    def open(cls, path: str | Path, input_format: str | None = None) -> "CorpusSource":
        """The input at ``path``, its format given or told by ``infer_input_format``; ``CorpusError`` naming it for
        a path that does not exist, an unknown format, a file given as a directory format (or the reverse), and
        what its reader refuses before any row is read (``CorpusReader.check``: a text file's lone ``\\r`` ends)."""
        path = Path(path)
        if not path.exists():
            raise CorpusError(f"input {path} does not exist")
        input_format = input_format or infer_input_format(path)
        if input_format not in INPUT_FORMATS:
            raise CorpusError(f"input format must be one of {list(INPUT_FORMATS)}, got {input_format!r}")
        source = cls(path, input_format)
        if source.reader.reads_directories != path.is_dir():
            raise CorpusError(f"input {path} given as {input_format!r} must be {source.reader.expected_input}")
        source.reader.check()
        return source

    @cached_property
    def reader(self) -> CorpusReader:
        """The reader of this input: its format's class (``formats.reader_class``), made for its path."""
        return reader_class(self.input_format)(self.path, self.input_format)

    @property
    def default_columns(self) -> tuple[str | None, str | None]:
        """``(text_column, words_column)`` holding the sentences when the caller names neither (the reader's)."""
        return self.reader.default_columns

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
        """How errors name a row (the reader's; the 0-based row for a format no longer registered)."""
        if self.input_format not in INPUT_FORMATS:
            return f"{self.path} row {input_row}"
        return self.reader.row_name(input_row)

    def features(self):
        """The input's columns and their types (`datasets.Features`): ``CorpusReader.features``."""
        return self.reader.features()

    def column_names(self, look_for: str | None = None) -> list[str] | None:
        """The input's column names, read without `datasets` (``CorpusReader.column_names``); None where they cannot
        be read so (a file that is not what its format says): reading the rows then says what is wrong."""
        try:
            return self.reader.column_names(look_for)
        except (OSError, ValueError):  # ValueError: not UTF-8, not JSON, not Parquet (pyarrow's ArrowInvalid)
            return None

    def check_column(self, column: str, columns: Iterable[str] | None = None) -> None:
        """Raise ``CorpusError`` unless the input has ``column``. ``columns``: the input's (its `datasets` features);
        by default ``column_names``, and nothing is refused where those cannot be read."""
        columns = self.column_names(look_for=column) if columns is None else list(columns)
        if columns is not None and column not in columns:
            raise CorpusError(
                f"input {self.path} has no column {column!r}; its columns are {columns} (choose one with "
                "--text-column or --words-column)"
            )

    def num_rows(self) -> int | None:
        """Number of rows when it is cheap to know (``CorpusReader.num_rows``)."""
        return self.reader.num_rows()

    def num_characters(self, at_most: int) -> int | None:
        """The rows' characters counted up to ``at_most`` where cheap (``CorpusReader.num_characters``)."""
        return self.reader.num_characters(at_most)

    def rows(self, start: int = 0) -> Iterator[tuple[int, dict[str, Any] | InvalidRowError]]:
        """``(input_row, record)`` for every row from ``start`` on, in order. An error of the reader other than a
        ``CorpusError`` is one, naming the input, its format and the first row not read."""
        next_row = start
        try:
            for input_row, record in self.reader.rows(start):
                yield input_row, record
                next_row = input_row + 1
        except (ValueError, TypeError, OSError, UnicodeDecodeError) as error:
            if isinstance(error, (InvalidRowError, CorpusError)):
                raise
            raise CorpusError(f"cannot read {self.path} as {self.input_format} after row {next_row}: {error}") from error


__all__ = [
    "CONLLU_COLUMNS", "CONLLU_WORDS_COLUMN", "DEFAULT_TEXT_COLUMN", "INPUT_FORMATS", "JSON_COLUMNS_BYTES",
    "LINE_ENDINGS_PROBE_BYTES", "MAX_LINE_BYTES", "UTF8_BYTE_ORDER_MARK", "CorpusError", "CorpusSource", "InvalidRowError",
    "check_line_endings", "conllu_features", "corpus_sources", "count_lines", "infer_input_format", "is_saved_dataset",
    "read_conllu_sentences", "read_lines", "read_text_lines", "sentence_column",
]
