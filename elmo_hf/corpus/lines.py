"""Lines of text files, as every reader of the package reads them, and the errors every corpus reader raises.

A line ends at ``"\\n"``; a ``"\\r\\n"`` ending loses its ``"\\r"`` too; a last line without a line break is a line
(``read_lines``, the only line reader of the package: the text, TSV and CoNLL-U readers and vocabulary files use it).
A file whose lines end in a lone ``"\\r"`` (classic Mac OS, some spreadsheet exports) is refused, naming the file
(``check_line_endings``): read by that rule it would be one row. A row that holds a NUL byte or a lone ``"\\r"`` is read
as it is, with a warning naming the file and the row (the first such row of each kind). A line longer than
``MAX_LINE_BYTES`` is an ``InvalidRowError`` naming the limit, read past without being held.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

from ..validation_elmo import ELMoHFError

UTF8_BYTE_ORDER_MARK = b"\xef\xbb\xbf"
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
                    "(elmo_hf.corpus.lines.MAX_LINE_BYTES): one sentence per line is expected (a line this long is "
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


__all__ = [
    "LINE_ENDINGS_PROBE_BYTES", "MAX_LINE_BYTES", "UTF8_BYTE_ORDER_MARK", "CorpusError", "InvalidRowError", "check_line_endings",
    "count_lines", "read_lines", "read_text_lines",
]
