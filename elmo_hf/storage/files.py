"""Writing files so that a crash never leaves a half-written one under its final name.

``write_atomically(path, write)``: ``write`` fills a temporary file beside ``path`` (a name unique to this process and
call, so two writers never share one), which is flushed to disk and renamed over ``path``; the directory entry is
flushed too. After a crash ``path`` is either complete or absent / its old self. If ``write`` fails (a full disk, an
exception), the temporary file is removed and the error propagates (an ``OSError`` naming ``path``).

The same two steps apart, for a file filled in one process and put in place by another (the embedding workers write
shards that the main process renames in order): ``temporary_path_beside`` (the creator knows the name, and removes
it if the run fails), ``fill_temporary`` (the writer) and ``move_into_place`` (the one that decides the order: it
flushes the file to disk, then renames it).
``temporary_file_beside`` is the creation for a block that fills and moves the file itself: a failure in the block,
Ctrl-C included, removes it. A Ctrl-C never lands between a temporary file's creation and the name its cleanup holds
(``interrupts.sigint_deferred``): a caller that keeps one past a block creates it in such a block too.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .interrupts import sigint_deferred

TEMPORARY_SUFFIX = ".tmp"
# Directories (absolute paths) whose output records a token for the temporary files made in them: open output
# directories (``output_directory.open_output_directory``) register theirs, so that a temporary file a killed run
# left there is proven that output's by its name, the token, and the record (never by its name alone).
_RECORDED_TOKENS: dict[str, str] = {}


@contextmanager
def temporary_names_recorded(directory: Path, token: str) -> Iterator[None]:
    """While the block runs, temporary files made under ``directory`` (at any depth) are named
    ``.<name>.<token>.<random>.tmp``; the caller has recorded ``token`` in the directory's record first."""
    key = os.path.abspath(directory)
    _RECORDED_TOKENS[key] = token
    try:
        yield
    finally:
        _RECORDED_TOKENS.pop(key, None)


def _recorded_token(directory: Path) -> str | None:
    if not _RECORDED_TOKENS:
        return None
    folder = os.path.abspath(directory)
    while True:
        if folder in _RECORDED_TOKENS:
            return _RECORDED_TOKENS[folder]
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def temporary_path_beside(path: Path) -> Path:
    """A new, empty file ``.<name>.<random>.tmp`` beside ``path`` (created, so no other writer can take the name;
    ``.<name>.<token>.<random>.tmp`` in a directory that records a token: ``temporary_names_recorded``), with the
    mode any new file gets (0666 less the umask: 0644 under umask 022; ``mkstemp`` makes it 0600, and the file
    renamed into place would stay so)."""
    token = _recorded_token(path.parent)
    prefix = f".{path.name}." if token is None else f".{path.name}.{token}."
    descriptor, name = tempfile.mkstemp(prefix=prefix, suffix=TEMPORARY_SUFFIX, dir=path.parent)
    try:
        os.fchmod(descriptor, 0o666 & ~current_umask())
    finally:
        os.close(descriptor)
    return Path(name)


def current_umask() -> int:
    """The process's umask, read without changing it where Linux shows it (``/proc/self/status``)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore at once
    os.umask(mask)
    return mask


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
    ``temporary`` is removed (an ``OSError`` names ``path``). The file's flush is here, not in ``fill_temporary``:
    the embedding workers fill shards that the main process moves, and waited 3-4 ms a shard on the disk (a local
    ext4 disk; more on a network file system) with their core idle."""
    try:
        with open(temporary, "rb+") as file:
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise _naming(path, error) from error
    fsync_directory(path.parent)


def _naming(path: Path, error: OSError) -> OSError:
    """A full disk, a quota, a file size limit: say which file could not be written."""
    return OSError(error.errno, f"cannot write {path}: {error.strerror or error}")


def fsync_directory(directory: Path) -> None:
    """Flush a directory's entries (a rename or a new file in it) to disk."""
    descriptor = os.open(directory, os.O_RDONLY)
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
    "TEMPORARY_SUFFIX", "fill_temporary", "fsync_directory", "move_into_place", "sha256_of_file", "temporary_file_beside",
    "temporary_names_recorded", "temporary_path_beside", "write_atomically",
]
