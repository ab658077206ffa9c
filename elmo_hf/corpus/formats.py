"""The table of input formats (``INPUT_FORMATS``): one row per format, read by the local engine, the Ray engine,
``pretrain`` and the command line's ``--input-format`` choices and help, so a new format is one ``CorpusReader``
class and one row (here, or ``register_input_format``). Standard library only: the command line reads the names
before torch is imported, and a reader class is imported when a corpus is read."""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class InputFormat:
    """One row of ``INPUT_FORMATS``: the ``name`` ``--input-format`` takes, a ``description`` for the help, the
    lower-case ``extensions`` (with the dot) that tell it, and its ``reader``: a ``CorpusReader`` subclass, or
    ``"module:Class"`` naming one in this package (imported when first used)."""

    name: str
    description: str
    extensions: tuple[str, ...]
    reader: str | type


# In the order --input-format lists them.
INPUT_FORMATS: dict[str, InputFormat] = {
    row.name: row
    for row in (
        InputFormat("txt", "a text file, one sentence per line (UTF-8)", (".txt", ".text"), "format_readers:TextReader"),
        InputFormat("jsonl", "JSON lines, one object per row", (".jsonl", ".json"), "format_readers:JsonLinesReader"),
        InputFormat("csv", "CSV with a header row", (".csv",), "format_readers:CsvReader"),
        InputFormat("tsv", "tab-separated values with a header row, no quoting", (".tsv",), "format_readers:TsvReader"),
        InputFormat("parquet", "a Parquet file", (".parquet",), "format_readers:ParquetReader"),
        InputFormat("dataset", "a directory written by Dataset.save_to_disk", (), "format_readers:SavedDatasetReader"),
        InputFormat("conllu", "a CoNLL-U treebank, one row per sentence (its words)", (".conllu",), "format_readers:ConlluReader"),
    )
}


def register_input_format(name: str, reader: type, description: str, extensions: tuple[str, ...] = ()) -> InputFormat:
    """Add a format of your own to ``INPUT_FORMATS``: ``reader`` is a ``format_readers.CorpusReader`` subclass
    (write ``rows``; the other methods have defaults). Every engine and the command line then read it by ``name``
    (and by ``extensions``). Raises ``ValueError`` for a name or extension that is taken, or an extension without
    its dot. Remove it again with ``INPUT_FORMATS.pop(name)``.

    Example::

        register_input_format("tabbed", TabbedReader, "one tab-separated row per line", (".tab",))
    """
    if name in INPUT_FORMATS:
        raise ValueError(f"input format {name!r} is registered already (by {INPUT_FORMATS[name].reader})")
    for extension in extensions:
        if not extension.startswith(".") or extension != extension.lower():
            raise ValueError(f"extension {extension!r} of {name!r}: expected a lower-case extension with its dot, e.g. '.tab'")
        taken = format_of_extension(extension)
        if taken is not None:
            raise ValueError(f"extension {extension!r} tells {taken!r} already")
    row = InputFormat(name, description, tuple(extensions), reader)
    INPUT_FORMATS[name] = row
    return row


def format_of_extension(extension: str) -> str | None:
    """The name of the format a file extension (``".jsonl"``, any case) tells, or None."""
    extension = extension.lower()
    return next((row.name for row in INPUT_FORMATS.values() if extension in row.extensions), None)


def known_extensions() -> list[str]:
    """Every extension that tells a format, sorted."""
    return sorted(extension for row in INPUT_FORMATS.values() for extension in row.extensions)


def reader_class(name: str) -> type:
    """The reader class of the format ``name`` (imported now if its row names it by module). Raises ``ValueError``
    naming the formats for a name that is no row."""
    row = INPUT_FORMATS.get(name)
    if row is None:
        raise ValueError(f"input format must be one of {list(INPUT_FORMATS)}, got {name!r}")
    if not isinstance(row.reader, str):
        return row.reader
    module, _, class_name = row.reader.partition(":")
    return getattr(importlib.import_module(f".{module}", __package__), class_name)


def formats_help() -> str:
    """The formats for the command line's help: ``txt (a text file, ...; .txt, .text), ...``."""
    described = []
    for row in INPUT_FORMATS.values():
        extensions = f"; {', '.join(row.extensions)}" if row.extensions else ""
        described.append(f"{row.name} ({row.description}{extensions})")
    return ", ".join(described)


__all__ = ["INPUT_FORMATS", "InputFormat", "format_of_extension", "formats_help", "known_extensions", "reader_class", "register_input_format"]
