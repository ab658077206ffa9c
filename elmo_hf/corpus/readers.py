"""The one reader of corpora: every input format elmo-hf takes, for `elmo-hf embed` and `elmo-hf pretrain` alike.

Formats (``INPUT_FORMATS``, told by the extension or given): a text file (one sentence per line, UTF-8), JSON lines,
CSV, Parquet, a directory written by `Dataset.save_to_disk`, and CoNLL-U treebanks (one row per sentence: ``sent_id``,
``words``, ``upos``). ``CorpusSource.rows(start)`` yields ``(input_row, record)`` from a given row on, streaming,
never holding the corpus in memory; ``record`` is a dict of column values, or an ``InvalidRowError`` for a row that
cannot be read (a text line that is not UTF-8); the caller decides whether that raises or is skipped. Text and
CoNLL-U files are read here (so errors name the line); the other formats are streamed by `datasets`.

Corpora of several files (``corpus_sources``): a glob pattern stands for the files it matches, and a directory that
is not a saved dataset for its files: shards, as the 1B Word Benchmark ships its training data
(``training-monolingual.tokenized.shuffled/news.en-000NN-of-00100``), read in name order. A shard whose extension
names no format is text, one sentence per line.

Lines (``read_lines``): a line ends at ``"\\n"``; a ``"\\r\\n"`` ending loses its ``"\\r"`` too; a last line without
a line break is a line. This is the only line reader of the package (vocabulary files and CoNLL-U use it). A file
whose lines end in a lone ``"\r"`` (classic Mac OS, some spreadsheet exports) is refused, naming the file
(``check_line_endings``): read by that rule it would be one row. A row that holds a NUL byte or a lone ``"\r"`` is
read as it is, with a warning naming the file and the row (the first such row of each kind).
"""

from __future__ import annotations

import codecs
import glob
import logging
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..choices_elmo import INPUT_FORMATS
from ..validation_elmo import ELMoHFError

# File extension -> input format (the Ray engine reads the same files).
EXTENSION_FORMATS = {
    ".txt": "txt",
    ".text": "txt",
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".conllu": "conllu",
}
# The column each format's sentences are in when the caller names none, and whether it holds text or words.
DEFAULT_TEXT_COLUMN = "text"
CONLLU_WORDS_COLUMN = "words"
# The columns of a CoNLL-U file's rows (``read_conllu_sentences``, ``conllu_features``).
CONLLU_COLUMNS = ("sent_id", CONLLU_WORDS_COLUMN, "upos")
# How far into a JSON lines file ``CorpusSource.column_names`` looks for a column: at least the first chunk that
# `datasets` reads to tell the file's columns (its json builder's ``chunksize``, 10 MiB; tested), so that a column
# it would find is found.
JSON_COLUMNS_BYTES = 10 << 20
_DATASETS_BUILDERS = {"jsonl": "json", "csv": "csv", "parquet": "parquet"}
_READ_BATCH_ROWS = 1000
# How much of a text file ``check_line_endings`` reads to tell its line endings.
LINE_ENDINGS_PROBE_BYTES = 1 << 20
# The longest line ``read_lines`` reads as a row, in bytes (UTF-8, without its line break): 1 MiB, about 180,000
# English words, far past any sentence or paragraph. A longer line is an ``InvalidRowError`` naming this limit, read
# past in pieces of this size, never held whole: a file without line breaks ran minutes with memory rising before
# its first vector (figures: docs/results/measurements.md, "one text line").
MAX_LINE_BYTES = 1 << 20

logger = logging.getLogger(__name__)


class CorpusError(ELMoHFError):
    """The input corpus cannot be read as the format it claims to be."""


class InvalidRowError(ELMoHFError):
    """A row whose text (or words) cannot be read or embedded; the message names the row."""


# ----------------------------------------------------------------------------------------------------------------------
# Lines
# ----------------------------------------------------------------------------------------------------------------------


UTF8_BYTE_ORDER_MARK = b"\xef\xbb\xbf"


def check_line_endings(path: str | Path) -> None:
    """Raise ``CorpusError`` naming ``path`` when its lines end in a lone ``\r``: its first
    ``LINE_ENDINGS_PROBE_BYTES`` hold carriage returns that end no ``\r\n`` and not one ``\n``. Read by
    ``read_lines``'s rule (lines end at ``\n``), such a file would be one row, silently."""
    with open(path, "rb") as file:
        head = file.read(LINE_ENDINGS_PROBE_BYTES)
    lone = head.count(b"\r") - head.count(b"\r\n")
    if lone and b"\n" not in head:
        within = "" if len(head) < LINE_ENDINGS_PROBE_BYTES else f" in its first {LINE_ENDINGS_PROBE_BYTES:,} bytes"
        raise CorpusError(
            f"{path} ends its lines in a lone carriage return (\\r, {lone:,} of them{within}, and no \\n): read as "
            f"text it would be one row. Expected lines that end in \\n or \\r\\n; convert it first, e.g. "
            f"tr '\\r' '\\n' < {path} > converted.txt"
        )


def read_lines(path: str | Path, start: int = 0) -> Iterator[tuple[int, str | InvalidRowError]]:
    """``(row, line)`` for every line of a text file from 0-based row ``start`` on, without the line break; a line
    that is not UTF-8 comes as an ``InvalidRowError`` saying which byte is wrong. Lines end at ``\n`` only (a lone
    ``\r``, U+2028 or a form feed is inside a line), and a UTF-8 byte order mark opening the file is not text.
    A file whose lines end in a lone ``\r`` is refused (``check_line_endings``); the first row that holds a NUL byte
    and the first that holds a lone ``\r`` are read as they are, each with a warning that names the file and row."""
    check_line_endings(path)
    warned = set()
    with open(path, "rb") as file:
        for row, (line, line_bytes) in enumerate(_bounded_lines(file, MAX_LINE_BYTES + len(UTF8_BYTE_ORDER_MARK) + 2)):
            if row == 0 and line.startswith(UTF8_BYTE_ORDER_MARK):
                line, line_bytes = line[len(UTF8_BYTE_ORDER_MARK) :], line_bytes - len(UTF8_BYTE_ORDER_MARK)
            if row < start:
                continue
            if line_bytes - line.endswith(b"\n") - line.endswith(b"\r\n") > MAX_LINE_BYTES:
                yield row, InvalidRowError(
                    f"a line of {line_bytes:,} bytes, longer than the {MAX_LINE_BYTES:,} a row may hold "
                    "(elmo_hf.corpus.readers.MAX_LINE_BYTES): one sentence per line is expected (a line this long is "
                    "usually a file without line breaks)"
                )
                continue
            line = line[:-1] if line.endswith(b"\n") else line
            line = line[:-1] if line.endswith(b"\r") else line
            for byte, what in ((b"\0", "a NUL byte (\\0), which becomes part of its words: is it a text file?"), (b"\r", "a carriage return (\\r) that ends no line: it stays inside the row")):
                if byte in line and byte not in warned:
                    warned.add(byte)
                    logger.warning("%s row %d (line %d) holds %s (only the first such row is named)", path, row, row + 1, what)
            try:
                yield row, line.decode("utf-8")
            except UnicodeDecodeError as error:
                yield row, InvalidRowError(
                    f"not valid UTF-8 ({error.reason}: byte 0x{line[error.start]:02x} at byte offset {error.start} of the line)"
                )


def _bounded_lines(file, at_most: int) -> Iterator[tuple[bytes, int]]:
    """``(line, length)`` for each line of a binary file, its line break included: the line itself when it is at most
    ``at_most`` bytes, else its first ``at_most`` bytes (the rest read and dropped in pieces of that size, so memory
    stays bounded) and its whole length."""
    while line := file.readline(at_most):
        length = len(line)
        if length == at_most and not line.endswith(b"\n"):
            while piece := file.readline(at_most):
                length += len(piece)
                if piece.endswith(b"\n"):
                    break
            line = line[:0]  # too long: the caller refuses it by its length
        yield line, length


def read_text_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """``(line_number, line)`` for every line of a UTF-8 text file, 1-based; raises ``FileNotFoundError`` for a
    missing path and ``ValueError`` naming the file and line for bytes that are not UTF-8."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"text file {path} does not exist or is not a file")
    for row, line in read_lines(path):
        if isinstance(line, InvalidRowError):
            raise ValueError(f"{path} line {row + 1} is {line}")
        yield row + 1, line


def count_lines(path: Path) -> int:
    """Lines as ``read_lines`` counts them."""
    count, last = 0, b"\n"
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


# ----------------------------------------------------------------------------------------------------------------------
# CoNLL-U
# ----------------------------------------------------------------------------------------------------------------------


def read_conllu_sentences(path: str | Path) -> Iterator[dict[str, Any]]:
    """
    The sentences of a CoNLL-U file: ``{"sent_id": str | None, "words": [...], "upos": [...]}`` each.

    `words` is the FORM column (2) and `upos` the UPOS column (4) of the syntactic words: lines whose ID is a
    range (`1-2`, a multiword token such as "don't", whose parts `do` and `n't` follow as words) or a decimal
    (`8.1`, an empty node) are skipped, as are comment lines (`# ...`), except `# sent_id = ...`. Sentences end at
    an empty line (or at the end of the file).

    Raises:
        `ValueError` naming the file and line for a token line without 10 tab-separated fields or with an ID out
        of sequence; `FileNotFoundError` for a missing file.
    """
    path = Path(path)
    sent_id: str | None = None
    words: list[str] = []
    upos: list[str] = []
    for line_number, line in read_text_lines(path):
        if not line.strip():
            if words:
                yield dict(zip(CONLLU_COLUMNS, (sent_id, words, upos)))
            sent_id, words, upos = None, [], []
            continue
        if line.startswith("#"):
            key, separator, value = line[1:].partition("=")
            if separator and key.strip() == "sent_id":
                sent_id = value.strip()
            continue
        fields = line.split("\t")
        if len(fields) != 10:
            raise ValueError(f"{path} line {line_number}: expected 10 tab-separated CoNLL-U fields, got {len(fields)}")
        token_id = fields[0]
        if "-" in token_id or "." in token_id:  # multiword token range, empty node
            continue
        if not token_id.isdigit() or int(token_id) != len(words) + 1:
            raise ValueError(
                f"{path} line {line_number}: expected word ID {len(words) + 1} (IDs count 1, 2, ... in each sentence), "
                f"got {token_id!r}"
            )
        words.append(fields[1])
        upos.append(fields[3])
    if words:
        yield dict(zip(CONLLU_COLUMNS, (sent_id, words, upos)))


def conllu_features():
    """The `datasets` features of CoNLL-U rows (``CONLLU_COLUMNS``)."""
    from datasets import Features, List, Value

    return Features(dict(zip(CONLLU_COLUMNS, (Value("string"), List(Value("string")), List(Value("string"))))))


# ----------------------------------------------------------------------------------------------------------------------
# Corpora
# ----------------------------------------------------------------------------------------------------------------------


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
    """
    The corpus files of ``paths``, in order, opened: a file; a saved dataset; a directory of shards (its files that
    are not hidden, in name order); or a glob pattern (``shards/news.en-*``, the files it matches in name order).
    ``input_format`` is the format of every file; without it each file's extension tells, and a shard whose
    extension names no format is text (the 1B Word Benchmark's ``news.en-00001-of-00100``).

    Raises:
        `CorpusError` naming the path: a path that does not exist, a pattern that matches no file, an empty
        directory of shards, a format that cannot be told.
    """
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
        elif path.is_dir() and input_format != "dataset" and not is_saved_dataset(path):
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
    return CorpusSource.open(path, input_format or EXTENSION_FORMATS.get(path.suffix.lower(), "txt"))


@dataclass(frozen=True)
class CorpusSource:
    """A corpus on disk in one of ``INPUT_FORMATS``."""

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
        if input_format == "txt":
            check_line_endings(path)  # here too, so that the refusal comes before the model is loaded
        return cls(path, input_format)

    @property
    def default_columns(self) -> tuple[str | None, str | None]:
        """``(text_column, words_column)`` holding the sentences when the caller names neither: the words of a
        CoNLL-U file, the ``text`` column of everything else."""
        return (None, CONLLU_WORDS_COLUMN) if self.input_format == "conllu" else (DEFAULT_TEXT_COLUMN, None)

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
        """How errors name a row: the line for text files, the sentence for CoNLL-U, the 0-based row otherwise."""
        if self.input_format == "txt":
            return f"{self.path} line {input_row + 1}"
        if self.input_format == "conllu":
            return f"{self.path} sentence {input_row + 1}"
        return f"{self.path} row {input_row}"

    def features(self):
        """The input's columns and their types (`datasets.Features`; read from the first rows where the format does
        not store them)."""
        from datasets import Features, Value

        if self.input_format == "txt":
            return Features({DEFAULT_TEXT_COLUMN: Value("string")})
        if self.input_format == "conllu":
            return conllu_features()
        if self.input_format == "dataset":
            return self._saved_dataset().features
        try:
            return self._streamed()._resolve_features().features
        except (ValueError, TypeError, OSError, UnicodeDecodeError) as error:
            if self.input_format == "jsonl":  # a line pyarrow cannot parse: the valid lines of the start tell
                from datasets import Dataset

                records = [record for _, record in islice(self._json_lines(), _READ_BATCH_ROWS) if isinstance(record, dict)]
                if records:
                    return Dataset.from_list(records).features
            raise CorpusError(f"cannot read {self.path} as {self.input_format}: {error}") from error

    def column_names(self, look_for: str | None = None) -> list[str] | None:
        """The input's column names, read without `datasets` (which imports torch): a text file's ``text``, CoNLL-U's
        ``CONLLU_COLUMNS``, a Parquet file's schema, a CSV file's header, a saved dataset's recorded features, the
        keys of the JSON objects in a JSON lines file's first ``JSON_COLUMNS_BYTES`` (``look_for``: stop once that
        column is met). None where they cannot be read so (a file that is not what its format says, a DatasetDict):
        reading the rows then says what is wrong."""
        try:
            if self.input_format == "txt":
                return [DEFAULT_TEXT_COLUMN]
            if self.input_format == "conllu":
                return list(CONLLU_COLUMNS)
            if self.input_format == "parquet":
                import pyarrow.parquet as pq

                return list(pq.read_schema(self.path).names)
            if self.input_format == "csv":
                return self._csv_header()
            if self.input_format == "dataset":
                return self._saved_dataset_columns()
            return self._json_keys(look_for)
        except (OSError, ValueError):  # ValueError: not UTF-8, not JSON, not Parquet (pyarrow's ArrowInvalid)
            return None

    def _csv_header(self) -> list[str] | None:
        import csv

        with open(self.path, encoding="utf-8-sig", newline="") as file:
            return next(csv.reader(file), None)

    def _saved_dataset_columns(self) -> list[str] | None:
        import json

        info = json.loads((self.path / "dataset_info.json").read_text(encoding="utf-8"))
        features = info.get("features") if isinstance(info, dict) else None
        return list(features) if isinstance(features, dict) else None

    def _json_keys(self, look_for: str | None) -> list[str]:
        keys: dict[str, None] = {}  # in the order first met, as pyarrow orders a JSON file's columns
        for _, record in self._json_lines(max_bytes=JSON_COLUMNS_BYTES):
            if isinstance(record, dict):
                keys.update(dict.fromkeys(record))
            if look_for is not None and look_for in keys:
                break
        return list(keys)

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
        """Number of rows when it is cheap to know (text files are counted by newlines; JSON lines, CSV and CoNLL-U
        are not)."""
        if self.input_format == "txt":
            return count_lines(self.path)
        if self.input_format == "parquet":
            import pyarrow.parquet as pq

            return pq.ParquetFile(self.path).metadata.num_rows
        if self.input_format == "dataset":
            return len(self._saved_dataset())
        return None

    def num_characters(self, at_most: int) -> int | None:
        """A text file's characters, its lines' without their line ends (what ``embedding.engine.input_characters``
        counts), read only until ``at_most`` are counted (then ``at_most``: at least that many); None for the other
        formats. A file's bytes overcount UTF-8 text up to 3x (Hangul: 3 bytes a syllable)."""
        if self.input_format != "txt":
            return None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character split between reads is one
        count = 0
        with open(self.path, "rb") as file:
            while count < at_most and (chunk := file.read(1 << 20)):
                text = decoder.decode(chunk)
                count += len(text) - text.count("\n")
        return min(count, at_most)

    def rows(self, start: int = 0) -> Iterator[tuple[int, dict | InvalidRowError]]:
        """``(input_row, record)`` for every row from ``start`` on, in order."""
        if self.input_format == "txt":
            for row, line in read_lines(self.path, start):
                yield row, line if isinstance(line, InvalidRowError) else {DEFAULT_TEXT_COLUMN: line}
            return
        input_row = start
        try:
            if self.input_format == "conllu":
                for row, sentence in enumerate(read_conllu_sentences(self.path)):
                    if row >= start:
                        input_row = row
                        yield row, sentence
                return
            for batch in self._batches(start):
                columns = list(batch)
                for values in zip(*batch.values()):
                    yield input_row, dict(zip(columns, values))
                    input_row += 1
        except (ValueError, TypeError, OSError, UnicodeDecodeError) as error:
            if isinstance(error, (InvalidRowError, CorpusError)):
                raise
            if self.input_format != "jsonl":
                raise CorpusError(f"cannot read {self.path} as {self.input_format} after row {input_row}: {error}") from error
        else:
            return
        # pyarrow refuses a whole block of JSON lines for one bad line (e.g. a lone surrogate escape "\ud800"),
        # naming its row within the block: from the first row not read, each line is parsed alone, so a bad one is
        # one InvalidRowError with its row in the file (skipped with --skip-invalid) and the others are read.
        yield from self._json_lines(input_row)

    def _json_lines(self, start: int = 0, max_bytes: int | None = None) -> Iterator[tuple[int, dict | InvalidRowError]]:
        """``(input_row, record)`` for the JSON lines of the file parsed one by one (rows counted as pyarrow does:
        empty lines are not rows); with ``max_bytes``, only the lines that start within the file's first
        ``max_bytes``."""
        import json

        row = 0
        read = 0
        with open(self.path, "rb") as file:
            for line_number, line in enumerate(file):
                if max_bytes is not None and read >= max_bytes:
                    return
                read += len(line)
                if line_number == 0 and line.startswith(UTF8_BYTE_ORDER_MARK):
                    line = line[len(UTF8_BYTE_ORDER_MARK) :]
                if not line.strip():
                    continue
                if row >= start:
                    try:
                        record = json.loads(line.decode("utf-8"))
                        if not isinstance(record, dict):
                            raise ValueError(f"a JSON {type(record).__name__}, not an object")
                        json.dumps(record, ensure_ascii=False).encode("utf-8")  # a lone surrogate is no character
                    except UnicodeEncodeError as error:
                        record = InvalidRowError(
                            f"(line {line_number + 1}) holds the escape of a lone surrogate "
                            f"({error.object[error.start:error.end].encode('unicode_escape').decode()}), which is no "
                            "character"
                        )
                    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
                        record = InvalidRowError(f"(line {line_number + 1}) is not a valid JSON object: {error}")
                    yield row, record
                row += 1

    def _batches(self, start: int) -> Iterator[dict[str, list]]:
        if self.input_format == "dataset":
            dataset = self._saved_dataset()
            return dataset.select(range(start, len(dataset))).iter(batch_size=_READ_BATCH_ROWS)
        return self._streamed().skip(start).iter(batch_size=_READ_BATCH_ROWS)

    def _streamed(self):
        from datasets import load_dataset

        # CSV: an empty field, "NA" or "null" is text (an empty sentence, the word "NA"), not a missing value; an
        # empty or whitespace-only line is a row (an empty sentence, as an empty line of a text file), not skipped
        # unnumbered, so input_row stays the row's place in the file.
        options = {"keep_default_na": False, "skip_blank_lines": False} if self.input_format == "csv" else {}
        return load_dataset(
            _DATASETS_BUILDERS[self.input_format], data_files=str(self.path), split="train", streaming=True, **options
        )

    def _saved_dataset(self):
        from datasets import DatasetDict, load_from_disk

        dataset = load_from_disk(str(self.path))
        if isinstance(dataset, DatasetDict):
            raise CorpusError(
                f"{self.path} holds a DatasetDict with splits {list(dataset)}; pass one split's directory, e.g. "
                f"{self.path / next(iter(dataset))}"
            )
        return dataset


__all__ = [
    "CONLLU_COLUMNS",
    "CorpusError",
    "CorpusSource",
    "UTF8_BYTE_ORDER_MARK",
    "EXTENSION_FORMATS",
    "corpus_sources",
    "is_saved_dataset",
    "INPUT_FORMATS",
    "InvalidRowError",
    "count_lines",
    "infer_input_format",
    "read_conllu_sentences",
    "read_lines",
    "read_text_lines",
    "sentence_column",
]
