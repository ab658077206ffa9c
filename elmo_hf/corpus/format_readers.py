"""One reader class per input format (``formats.INPUT_FORMATS`` names each in its row), all streaming: text, TSV and
CoNLL-U read here line by line (``lines.read_lines``, so errors name the line); JSON lines, CSV and Parquet streamed
by `datasets`' packaged builders; a saved dataset by ``load_from_disk``. A new format writes ``rows``."""

from __future__ import annotations

import codecs
import io
from collections.abc import Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

from .lines import UTF8_BYTE_ORDER_MARK, CorpusError, InvalidRowError, check_line_endings, count_lines, read_lines, read_text_lines

# The column each format's sentences are in when the caller names none, and whether it holds text or words.
DEFAULT_TEXT_COLUMN = "text"
CONLLU_WORDS_COLUMN = "words"
# The columns of a CoNLL-U file's rows (``read_conllu_sentences``, ``conllu_features``).
CONLLU_COLUMNS = ("sent_id", CONLLU_WORDS_COLUMN, "upos")
# How far into a JSON lines file ``JsonLinesReader.column_names`` looks for a column: at least the first chunk that
# `datasets` reads to tell the file's columns (its json builder's ``chunksize``, 10 MiB; tested), so that a column
# it would find is found.
JSON_COLUMNS_BYTES = 10 << 20
READ_BATCH_ROWS = 1000


class CorpusReader:
    """How one input format is read: one subclass per format, made for one input (``Reader(path, name)``, ``name``
    the format's name in ``INPUT_FORMATS``). A new format writes ``rows``; every other method has a default that
    the format overrides where it knows better.

    Class attributes: ``reads_directories`` (the input is a directory, not a file) and ``expected_input`` (what the
    refusal of the other kind says it must be); ``default_columns``, the ``(text_column, words_column)`` holding the
    sentences when the caller names neither; ``table_of_file``, a ``staticmethod(data: bytes) -> pyarrow.Table``
    giving the rows of one whole file for the Ray engine, or None where the Ray engine does not read the format.
    """

    reads_directories = False
    expected_input = "a file"
    default_columns: tuple[str | None, str | None] = (DEFAULT_TEXT_COLUMN, None)
    table_of_file = None

    def __init__(self, path: str | Path, name: str):
        self.path = Path(path)
        self.name = name

    def check(self) -> None:
        """Raise ``CorpusError`` naming the input for what is wrong before any row is read (the input is opened
        before a model loads, so the refusal comes first)."""

    def rows(self, start: int = 0) -> Iterator[tuple[int, dict[str, Any] | InvalidRowError]]:
        """``(input_row, record)`` for every row from 0-based ``start`` on, in order: ``record`` maps column names to
        values, or is an ``InvalidRowError`` for a row that cannot be read (the caller raises it or skips it)."""
        raise NotImplementedError(f"{type(self).__name__} must define rows(start)")

    def row_name(self, input_row: int) -> str:
        """How errors name a row."""
        return f"{self.path} row {input_row}"

    def column_names(self, look_for: str | None = None) -> list[str] | None:
        """The column names, read without `datasets` (which imports torch), for the checks made before a model
        loads; ``look_for``: a reader may stop once that column is met. None, or an ``OSError`` or ``ValueError``
        (``CorpusSource.column_names`` makes it None), where they cannot be read so: nothing is refused then, and
        reading the rows says what is wrong."""
        return None

    def features(self):
        """The columns and their types (`datasets.Features`), those of the first valid rows by default (string
        columns named by ``column_names`` for an input without one)."""
        return features_of_records(self.rows()) or string_features(self.column_names() or [])

    def num_rows(self) -> int | None:
        """The number of rows, where it is cheap to know; else None."""
        return None

    def num_characters(self, at_most: int) -> int | None:
        """The characters of the rows' text, counted up to ``at_most``, where it is cheap to know; else None."""
        return None


def features_of_records(rows: Iterator[tuple[int, Any]]):
    """The `datasets.Features` of the first ``READ_BATCH_ROWS`` valid rows of ``rows``, or None if none is valid."""
    from datasets import Dataset

    records = [record for _, record in islice(rows, READ_BATCH_ROWS) if isinstance(record, dict)]
    return Dataset.from_list(records).features if records else None


def string_features(columns: Sequence[str]):
    """`datasets.Features` of string ``columns``."""
    from datasets import Features, Value

    return Features({column: Value("string") for column in columns})


def records_of_batches(batches: Iterator[dict[str, list]], start: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(input_row, record)`` for the rows of column batches (`datasets`' ``iter``), numbered from ``start``."""
    input_row = start
    for batch in batches:
        columns = list(batch)
        for values in zip(*batch.values()):
            yield input_row, dict(zip(columns, values))
            input_row += 1


# Text, TSV -----------------------------------------------------------------------------------------------------------

def decoded_lines(data: bytes) -> list[str]:
    """The lines of one text file read whole, by ``read_lines``' rule: a line ends at ``\\n`` only (one ``\\r``
    before it is dropped), an empty line is a line, a UTF-8 byte order mark opening the file is not text. Raises
    ``ValueError`` naming the line for bytes that are not UTF-8."""
    data = bytes(data)
    if data.startswith(UTF8_BYTE_ORDER_MARK):
        data = data[len(UTF8_BYTE_ORDER_MARK) :]
    lines = data.split(b"\n")
    if lines[-1] == b"":  # the file ends with a line break (or is empty)
        lines.pop()
    texts = []
    for row, line in enumerate(lines):
        line = line[:-1] if line.endswith(b"\r") else line
        try:
            texts.append(line.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise ValueError(f"text line {row + 1} is not valid UTF-8 ({error.reason} at byte offset {error.start})") from None
    return texts


class LineFileReader(CorpusReader):
    """A format of text lines (``lines.read_lines``: its refusals, warnings and line limit), every column a string
    (``columns()``): a row is named by its line and counted by line breaks, ``header_lines`` left out."""

    header_lines = 0

    def columns(self) -> list[str]:
        raise NotImplementedError(f"{type(self).__name__} must define columns()")

    def row_name(self, input_row: int) -> str:
        return f"{self.path} line {input_row + 1 + self.header_lines}"

    def column_names(self, look_for: str | None = None) -> list[str]:
        return self.columns()

    def features(self):
        return string_features(self.columns())

    def num_rows(self) -> int:
        return max(count_lines(self.path) - self.header_lines, 0)


class TextReader(LineFileReader):
    """``txt``: one sentence per line, in a ``text`` column."""

    def check(self) -> None:
        check_line_endings(self.path)  # here too, so that the refusal comes before the model is loaded

    def rows(self, start: int = 0) -> Iterator[tuple[int, dict[str, Any] | InvalidRowError]]:
        for row, line in read_lines(self.path, start):
            yield row, line if isinstance(line, InvalidRowError) else {DEFAULT_TEXT_COLUMN: line}

    def columns(self) -> list[str]:
        return [DEFAULT_TEXT_COLUMN]

    def num_characters(self, at_most: int) -> int:
        """The lines' characters without their line ends (what ``embedding.engine.input_characters`` counts), read
        only until ``at_most`` are counted (then ``at_most``: at least that many). A file's bytes overcount UTF-8
        text up to 3x (Hangul: 3 bytes a syllable)."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")  # a character split between reads is one
        count = 0
        with open(self.path, "rb") as file:
            while count < at_most and (chunk := file.read(1 << 20)):
                text = decoder.decode(chunk)
                count += len(text) - text.count("\n")
        return min(count, at_most)

    @staticmethod
    def table_of_file(data: bytes):
        import pyarrow as pa

        return pa.table({DEFAULT_TEXT_COLUMN: pa.array(decoded_lines(data), pa.string())})


class TsvReader(LineFileReader):
    """``tsv``: tab-separated values, the first line naming the columns, every other line one row (IANA's
    text/tab-separated-values: no quoting and no escapes, so a field holds no tab and no line break; a quote is text).
    Lines are read as text files' are (``lines.read_lines``: its refusals, warnings and line limit); a row whose
    fields are not as many as the header's columns is an invalid row."""

    header_lines = 1

    def check(self) -> None:
        self.columns()

    def columns(self) -> list[str]:
        """The column names of the first line (``CorpusError`` for a file without one)."""
        first = next(read_lines(self.path), (0, ""))[1]
        return TsvReader.columns_of_header(first, str(self.path))

    @staticmethod
    def columns_of_header(line: str | InvalidRowError, path: str) -> list[str]:
        """The columns a header line names; ``CorpusError`` naming ``path`` for none, or for a name given twice."""
        if isinstance(line, InvalidRowError) or not line:
            reason = f"has a header line that is {line}" if line else "has no header line"
            raise CorpusError(f"{path} {reason}: a TSV file starts with a line of tab-separated column names")
        columns = line.split("\t")
        repeated = sorted({column for column in columns if columns.count(column) > 1})
        if repeated:
            raise CorpusError(f"{path}: its header names the column(s) {repeated} more than once")
        return columns

    def rows(self, start: int = 0) -> Iterator[tuple[int, dict[str, str] | InvalidRowError]]:
        columns = self.columns()
        for line_row, line in read_lines(self.path, start + 1):
            yield line_row - 1, self.record(columns, line)

    @staticmethod
    def record(columns: list[str], line: str | InvalidRowError) -> dict[str, str] | InvalidRowError:
        if isinstance(line, InvalidRowError):
            return line
        fields = line.split("\t")
        if len(fields) != len(columns):
            return InvalidRowError(f"has {len(fields)} tab-separated field(s) where the header names {len(columns)} column(s)")
        return dict(zip(columns, fields))

    @staticmethod
    def table_of_file(data: bytes):
        import pyarrow as pa

        lines = decoded_lines(data)
        columns = TsvReader.columns_of_header(lines[0] if lines else "", "a TSV file")
        records = [TsvReader.record(columns, line) for line in lines[1:]]
        for row, record in enumerate(records):
            if isinstance(record, InvalidRowError):
                raise ValueError(f"TSV line {row + 2} {record}")
        return pa.table({column: pa.array([record[column] for record in records], pa.string()) for column in columns})


# Formats `datasets` streams: JSON lines, CSV, Parquet; saved datasets ------------------------------------------------

class StreamedReader(CorpusReader):
    """A format `datasets` streams with its packaged builder ``builder`` (and ``builder_options``)."""

    builder = ""
    builder_options: dict[str, Any] = {}

    def rows(self, start: int = 0) -> Iterator[tuple[int, dict[str, Any]]]:
        return records_of_batches(self.streamed().skip(start).iter(batch_size=READ_BATCH_ROWS), start)

    def features(self):
        """Read from the first rows by `datasets`."""
        try:
            return self.streamed()._resolve_features().features
        except (ValueError, TypeError, OSError, UnicodeDecodeError) as error:
            raise CorpusError(f"cannot read {self.path} as {self.name}: {error}") from error

    def streamed(self):
        from datasets import load_dataset

        return load_dataset(self.builder, data_files=str(self.path), split="train", streaming=True, **self.builder_options)


class JsonLinesReader(StreamedReader):
    """``jsonl``: one JSON object per line. pyarrow refuses a whole block of lines for one bad line (e.g. a lone
    surrogate escape ``"\\ud800"``): from the first row not read, each line is then parsed alone, so a bad one is one
    ``InvalidRowError`` naming its line (skipped with --skip-invalid) and the others are read."""

    builder = "json"

    def rows(self, start: int = 0) -> Iterator[tuple[int, dict[str, Any] | InvalidRowError]]:
        input_row = start
        try:
            for input_row, record in super().rows(start):
                yield input_row, record
                input_row += 1
        except (ValueError, TypeError, OSError, UnicodeDecodeError) as error:
            if isinstance(error, (InvalidRowError, CorpusError)):
                raise
        else:
            return
        yield from self.json_lines(input_row)

    def features(self):
        """`datasets`' features; where pyarrow cannot parse a line, those of the valid lines of the start."""
        try:
            return super().features()
        except CorpusError:
            features = features_of_records(self.json_lines())
            if features is None:
                raise
            return features

    def column_names(self, look_for: str | None = None) -> list[str] | None:
        """The keys of the JSON objects in the first ``JSON_COLUMNS_BYTES``, in the order first met (as pyarrow
        orders a JSON file's columns); ``look_for``: stop once that column is met."""
        keys: dict[str, None] = {}
        for _, record in self.json_lines(max_bytes=JSON_COLUMNS_BYTES):
            if isinstance(record, dict):
                keys.update(dict.fromkeys(record))
            if look_for is not None and look_for in keys:
                break
        return list(keys)

    def json_lines(self, start: int = 0, max_bytes: int | None = None) -> Iterator[tuple[int, dict | InvalidRowError]]:
        """``(input_row, record)`` for the JSON lines of the file parsed one by one (rows counted as pyarrow does:
        empty lines are not rows); with ``max_bytes``, only the lines that start within the file's first
        ``max_bytes``."""
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
                    yield row, json_record(line, line_number)
                row += 1

    @staticmethod
    def table_of_file(data: bytes):
        import pyarrow as pa
        import pyarrow.json

        data = data[len(UTF8_BYTE_ORDER_MARK) :] if data.startswith(UTF8_BYTE_ORDER_MARK) else data
        return pyarrow.json.read_json(io.BytesIO(data)) if data.strip() else pa.table({})


def json_record(line: bytes, line_number: int) -> dict | InvalidRowError:
    """One JSON line parsed alone: its object, or an ``InvalidRowError`` naming the 0-based ``line_number`` + 1."""
    import json

    try:
        record = json.loads(line.decode("utf-8"))
        if not isinstance(record, dict):
            raise ValueError(f"a JSON {type(record).__name__}, not an object")
        json.dumps(record, ensure_ascii=False).encode("utf-8")  # a lone surrogate is no character
    except UnicodeEncodeError as error:
        return InvalidRowError(
            f"(line {line_number + 1}) holds the escape of a lone surrogate "
            f"({error.object[error.start:error.end].encode('unicode_escape').decode()}), which is no character"
        )
    except ValueError as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return InvalidRowError(f"(line {line_number + 1}) is not a valid JSON object: {error}")
    return record


class CsvReader(StreamedReader):
    """``csv``: comma-separated values with a header row. An empty field, "NA" or "null" is text (an empty sentence,
    the word "NA"), not a missing value; an empty or whitespace-only line is a row (an empty sentence, as an empty
    line of a text file), not skipped unnumbered, so input_row stays the row's place in the file."""

    builder = "csv"
    builder_options = {"keep_default_na": False, "skip_blank_lines": False}

    def column_names(self, look_for: str | None = None) -> list[str] | None:
        """The header row."""
        import csv

        with open(self.path, encoding="utf-8-sig", newline="") as file:
            return next(csv.reader(file), None)

    @staticmethod
    def table_of_file(data: bytes):
        import pandas
        import pyarrow as pa

        # The streamed rows' options (builder_options): empty fields and "NA" are text, blank lines are rows.
        frame = pandas.read_csv(io.BytesIO(data), keep_default_na=False, skip_blank_lines=False, encoding="utf-8-sig")
        return pa.Table.from_pandas(frame, preserve_index=False)


class ParquetReader(StreamedReader):
    """``parquet``: a Parquet file; its schema names the columns and its metadata counts the rows."""

    builder = "parquet"

    def column_names(self, look_for: str | None = None) -> list[str] | None:
        import pyarrow.parquet as pq

        return list(pq.read_schema(self.path).names)

    def num_rows(self) -> int:
        import pyarrow.parquet as pq

        return pq.ParquetFile(self.path).metadata.num_rows

    @staticmethod
    def table_of_file(data: bytes):
        import pyarrow.parquet as pq

        return pq.read_table(io.BytesIO(data))


class SavedDatasetReader(CorpusReader):
    """``dataset``: a directory written by `Dataset.save_to_disk` (one split: a DatasetDict is refused, naming its
    splits); its recorded features name the columns."""

    reads_directories = True
    expected_input = "a directory written by Dataset.save_to_disk"

    def rows(self, start: int = 0) -> Iterator[tuple[int, dict[str, Any]]]:
        dataset = self.dataset()
        return records_of_batches(dataset.select(range(start, len(dataset))).iter(batch_size=READ_BATCH_ROWS), start)

    def column_names(self, look_for: str | None = None) -> list[str] | None:
        import json

        info = json.loads((self.path / "dataset_info.json").read_text(encoding="utf-8"))
        features = info.get("features") if isinstance(info, dict) else None
        return list(features) if isinstance(features, dict) else None

    def features(self):
        return self.dataset().features

    def num_rows(self) -> int:
        return len(self.dataset())

    def dataset(self):
        from datasets import DatasetDict, load_from_disk

        dataset = load_from_disk(str(self.path))
        if isinstance(dataset, DatasetDict):
            raise CorpusError(
                f"{self.path} holds a DatasetDict with splits {list(dataset)}; pass one split's directory, e.g. "
                f"{self.path / next(iter(dataset))}"
            )
        return dataset


# CoNLL-U -------------------------------------------------------------------------------------------------------------

class ConlluReader(CorpusReader):
    """``conllu``: a CoNLL-U treebank, one row per sentence (``read_conllu_sentences``: ``sent_id``, ``words``,
    ``upos``), its sentences in ``words``; a row is named by its sentence."""

    default_columns = (None, CONLLU_WORDS_COLUMN)

    def rows(self, start: int = 0) -> Iterator[tuple[int, dict[str, Any]]]:
        for row, sentence in enumerate(read_conllu_sentences(self.path)):
            if row >= start:
                yield row, sentence

    def row_name(self, input_row: int) -> str:
        return f"{self.path} sentence {input_row + 1}"

    def column_names(self, look_for: str | None = None) -> list[str]:
        return list(CONLLU_COLUMNS)

    def features(self):
        return conllu_features()


# The ten fields of a CoNLL-U word line, by their names in the format's specification (lower case).
CONLLU_FIELDS = ("id", "form", "lemma", "upos", "xpos", "feats", "head", "deprel", "deps", "misc")


def read_conllu_sentences(path: str | Path, tag_columns: Sequence[str] = ("upos",)) -> Iterator[dict[str, Any]]:
    """
    The sentences of a CoNLL-U file: ``{"sent_id": str | None, "words": [...], "upos": [...]}`` each (with other
    ``tag_columns``, one list per named field of ``CONLLU_FIELDS`` instead of ``upos``).

    `words` is the FORM column (2) and `upos` the UPOS column (4) of the syntactic words: lines whose ID is a
    range (`1-2`, a multiword token such as "don't", whose parts `do` and `n't` follow as words) or a decimal
    (`8.1`, an empty node) are skipped, as are comment lines (`# ...`), except `# sent_id = ...`. Sentences end at
    an empty line (or at the end of the file).

    Raises:
        `ValueError` naming the file and line for a token line without 10 tab-separated fields or with an ID out
        of sequence, or naming an unknown column; `FileNotFoundError` for a missing file.
    """
    path = Path(path)
    unknown = [column for column in tag_columns if column not in CONLLU_FIELDS]
    if unknown:
        raise ValueError(f"{path}: CoNLL-U has no column {unknown[0]!r}; its columns are {', '.join(CONLLU_FIELDS)}")
    positions = [CONLLU_FIELDS.index(column) for column in tag_columns]
    sent_id: str | None = None
    words: list[str] = []
    tags: list[list[str]] = [[] for _ in positions]
    for line_number, line in read_text_lines(path):
        if not line.strip():
            if words:
                yield {"sent_id": sent_id, CONLLU_WORDS_COLUMN: words, **dict(zip(tag_columns, tags))}
            sent_id, words, tags = None, [], [[] for _ in positions]
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
        for column_tags, position in zip(tags, positions):
            column_tags.append(fields[position])
    if words:
        yield {"sent_id": sent_id, CONLLU_WORDS_COLUMN: words, **dict(zip(tag_columns, tags))}


def conllu_features():
    """The `datasets` features of CoNLL-U rows (``CONLLU_COLUMNS``)."""
    from datasets import Features, List, Value

    return Features(dict(zip(CONLLU_COLUMNS, (Value("string"), List(Value("string")), List(Value("string"))))))


__all__ = [
    "CONLLU_COLUMNS", "CONLLU_FIELDS", "CONLLU_WORDS_COLUMN", "DEFAULT_TEXT_COLUMN", "JSON_COLUMNS_BYTES", "ConlluReader", "CorpusReader",
    "CsvReader", "JsonLinesReader", "ParquetReader", "LineFileReader", "SavedDatasetReader", "StreamedReader", "TextReader", "TsvReader",
    "conllu_features", "decoded_lines", "features_of_records", "read_conllu_sentences", "records_of_batches", "string_features",
]
