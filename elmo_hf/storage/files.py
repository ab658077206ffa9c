"""Writing files so that a crash never leaves a half-written one under its final name.

``write_atomically(path, write)``: ``write`` fills a new temporary file beside ``path``, which is flushed and renamed
over ``path`` (the directory entry flushed too); on failure it is removed and the error names ``path``. The same
steps apart, for a file filled in one process and put in place by another (the embedding workers' shards):
``temporary_path_beside`` (the creator, which removes it if the run fails), ``fill_temporary`` (the writer) and
``move_into_place`` (which flushes and renames). ``temporary_file_beside`` removes the file when its block fails,
Ctrl-C included (``interrupts.sigint_deferred``).
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .interrupts import sigint_deferred

TEMPORARY_SUFFIX = ".tmp"
# Directories (absolute paths) whose output records a token for the temporary files made in them (at any depth): an
# open output directory (``output_directory.open_output_directory``) registers its own while it is open, so that a
# temporary file a killed run left there is proven that output's by its name, the token and the record.
RECORDED_TOKENS: dict[str, str] = {}


def temporary_path_beside(path: Path) -> Path:
    """A new, empty file ``.<name>.<random>.tmp`` beside ``path`` (``.<name>.<token>.<random>.tmp`` under a directory
    in ``RECORDED_TOKENS``), created exclusively (no other writer can take the name, nor a link planted under it) with
    the mode any new file gets (0666 less the umask), which the file keeps once renamed into place."""
    folder, token = os.path.abspath(path.parent), None
    while RECORDED_TOKENS and token is None and folder != os.path.dirname(folder):
        token, folder = RECORDED_TOKENS.get(folder), os.path.dirname(folder)
    prefix = f".{path.name}." if token is None else f".{path.name}.{token}."
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        name = path.parent / f"{prefix}{secrets.token_hex(4)}{TEMPORARY_SUFFIX}"
        try:
            os.close(os.open(name, flags, 0o666))
            return name
        except FileExistsError:
            continue


def write_atomically(path: Path, write: Callable[[Path], Any]) -> None:
    """``write(temporary)`` writes the file's content to a temporary path beside ``path``; see the module docstring."""
    with temporary_file_beside(path) as temporary:
        fill_temporary(temporary, path, write)
        move_into_place(temporary, path)


@contextmanager
def temporary_file_beside(path: Path) -> Iterator[Path]:
    """A new temporary file beside ``path`` (``temporary_path_beside``) for the block to fill and move into place; if
    the block raises (Ctrl-C included, even one that comes while the file is being made), the file is removed."""
    temporary = None
    try:
        with sigint_deferred():  # made and named here together: a Ctrl-C between the two would leave it unremoved
            temporary = temporary_path_beside(path)
        yield temporary
    except BaseException:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        raise


def fill_temporary(temporary: Path, path: Path, write: Callable[[Path], Any]) -> None:
    """``write(temporary)`` fills ``temporary`` (from ``temporary_path_beside(path)``) with what becomes ``path``
    (``move_into_place`` flushes it to disk, so that a process that only writes never waits on the disk). On failure
    ``temporary`` is removed and the error propagates (an ``OSError`` names ``path``)."""
    try:
        write(temporary)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise _naming(path, error) from error
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def move_into_place(temporary: Path, path: Path) -> None:
    """Flush the filled ``temporary`` to disk, rename it over ``path`` and flush the directory entry; on failure
    ``temporary`` is removed (an ``OSError`` names ``path``). The flush is here, not in ``fill_temporary``, so that
    an embedding worker that fills a shard never waits on the disk (docs/design/embedding.md)."""
    try:
        with open(temporary, "rb+") as file:
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise _naming(path, error) from error
    fsync_parent_of(path)


def _naming(path: Path, error: OSError) -> OSError:
    """A full disk, a quota, a file size limit: say which file could not be written."""
    return OSError(error.errno, f"cannot write {path}: {error.strerror or error}")


def fsync_parent_of(path: Path) -> None:
    """Flush the entries of the folder holding ``path`` (its rename or creation) to disk."""
    descriptor = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def sha256_of_file(path: Path) -> str:
    """Hex sha256 of a file's bytes, read 1 MiB at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


__all__ = [
    "RECORDED_TOKENS", "TEMPORARY_SUFFIX", "fill_temporary", "fsync_parent_of", "move_into_place", "sha256_of_file",
    "temporary_file_beside", "temporary_path_beside", "write_atomically",
]
