"""One policy for every directory elmo-hf writes (``embed``, ``pretrain``, ``convert``, ``export``, the Ray engine).

**Ownership.** A new output directory gets an ownership marker before anything else (``.elmo-hf-output.json``: format,
version, the kind of output, the elmo-hf version, the creation time). ``overwrite`` deletes only a directory that is
provably this tool's output of the same kind: a valid marker of that kind, and nothing inside but entries that kind
writes. It never deletes the current directory or one of its parents, the home directory, ``/``, an input of the run
or a directory holding one, or a path that is a symbolic link. Otherwise it refuses and says what is there.

**Locking.** A writing run holds a lock for its whole duration: an ``flock`` on a file beside the output directory,
``.<name>.elmo-hf.lock``, which holds the pid, host, start time and command of its holder. The kernel (on NFS the
lock server) gives the flock to exactly one run and takes it back when that run dies, so taking over the lock of a
crashed run has exactly one winner whatever the timing (``OutputLock``). A second run is refused with the holder's
details. A lock file left by a run that is provably gone (same host, and that pid is not running or is another
process than the one that took the lock) is taken over with a warning; one naming a live holder or another host is
reported with the command to remove it. Release removes the lock file only if it is still the file this run holds.
So the folder that holds the output must take new files and support file locks: where only a mounted volume is
writable (``/output`` on a read-only root), write into a folder inside it (``--output /output/run1``); otherwise
the run is refused naming that folder and the reason.

**Failure.** Temporary files are unique per process and call and never outlive a failure (``files.write_atomically``).
A directory that a run created (or found empty) and that holds nothing worth keeping when the run fails is removed
again, with any parent directories the run created. Outputs worth keeping (finished shards, checkpoints) stay, so the
run can be resumed.

Commands describe their output with an ``OutputKind`` (the names it writes) and open it with ``open_output_directory``
(written in place, resumable) or ``staged_output_directory`` (written beside and renamed into place at the end, so
the directory appears only complete).
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import json
import logging
import os
import secrets
import shutil
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .files import TEMPORARY_SUFFIX

logger = logging.getLogger(__name__)

MARKER_NAME = ".elmo-hf-output.json"
MARKER_FORMAT = "elmo-hf-output"
MARKER_VERSION = 1
LOCK_SUFFIX = ".elmo-hf.lock"
STAGING_SUFFIX = ".staging"


class OutputDirectoryError(ValueError):
    """An output directory that a run must not write, delete or resume; the message says what is there and why."""


@dataclass(frozen=True)
class OutputKind:
    """A kind of output: ``name`` (recorded in the marker), ``description`` (for messages, e.g. "an elmo-hf embedding
    output") and the glob patterns of the top-level entries it writes (the marker and temporary files aside)."""

    name: str
    description: str
    entries: tuple[str, ...]

    def foreign_entries(self, directory: Path) -> list[str]:
        """Names in ``directory`` that this kind does not write."""
        return sorted(
            entry.name
            for entry in directory.iterdir()
            if entry.name != MARKER_NAME
            and not entry.name.endswith(TEMPORARY_SUFFIX)
            and not any(fnmatch.fnmatchcase(entry.name, pattern) for pattern in self.entries)
        )


@dataclass
class OutputDirectory:
    """An output directory opened for writing. ``resumed``: it already held an output of its kind (``resume=True``)."""

    path: Path
    kind: OutputKind
    resumed: bool


# ----------------------------------------------------------------------------------------------------------------------
# The marker
# ----------------------------------------------------------------------------------------------------------------------


def read_marker(directory: Path) -> dict[str, Any] | None:
    """The ownership marker of ``directory`` if it has a valid one, else None."""
    try:
        marker = json.loads((directory / MARKER_NAME).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(marker, dict) or marker.get("format") != MARKER_FORMAT or marker.get("version") != MARKER_VERSION:
        return None
    return marker


def write_marker(directory: Path, kind: OutputKind) -> None:
    from .. import __version__

    marker = {
        "format": MARKER_FORMAT,
        "version": MARKER_VERSION,
        "kind": kind.name,
        "elmo_hf_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (directory / MARKER_NAME).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")


# ----------------------------------------------------------------------------------------------------------------------
# What may be deleted
# ----------------------------------------------------------------------------------------------------------------------


def protection_of(path: Path, inputs: Iterable[str | Path] = ()) -> str | None:
    """Why ``path`` may never be deleted, or None: it is the current directory or one of its parents, the home
    directory, ``/``, an input of the run or a directory holding one."""
    resolved, cwd = path.resolve(), Path.cwd().resolve()
    if resolved == Path(resolved.anchor):
        return "the root directory"
    if resolved == cwd:
        return "the current directory"
    if resolved in cwd.parents:
        return "a parent of the current directory"
    if resolved == Path.home().resolve():
        return "the home directory"
    for input_path in inputs:
        input_path = Path(input_path).resolve()
        if resolved == input_path or resolved in input_path.parents:
            return f"an input of this run or a directory holding one ({input_path})"
    return None


def check_deletable(path: Path, kind: OutputKind, inputs: Iterable[str | Path] = ()) -> None:
    """Raise ``OutputDirectoryError`` unless ``path`` is provably an output of ``kind`` that may be deleted."""
    if path.is_symlink():
        raise OutputDirectoryError(
            f"output {path} is a symbolic link (to {os.readlink(path)}); it is not deleted through the link: remove "
            "the link or pass the directory itself"
        )
    protection = protection_of(path, inputs)
    if protection is not None:
        raise OutputDirectoryError(f"output {path} is {protection}: it is never deleted; choose another --output")
    marker = read_marker(path)
    if marker is None:
        raise OutputDirectoryError(
            f"output {path} is not {kind.description}: it has no elmo-hf ownership marker ({MARKER_NAME}), so it is "
            f"not deleted. It holds: {describe_entries(path)}. Choose another --output"
        )
    if marker.get("kind") != kind.name:
        raise OutputDirectoryError(
            f"output {path} holds an elmo-hf output of another kind ({marker.get('kind')!r}), not {kind.description}; "
            "it is not deleted: choose another --output"
        )
    foreign = kind.foreign_entries(path)
    if foreign:
        raise OutputDirectoryError(
            f"output {path} is {kind.description} but also holds what elmo-hf does not write: {', '.join(foreign[:10])}"
            f"{' ...' if len(foreign) > 10 else ''}; it is not deleted. Move those away or choose another --output"
        )


def describe_entries(directory: Path, limit: int = 10) -> str:
    names = sorted(entry.name + ("/" if entry.is_dir() else "") for entry in directory.iterdir())
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


# ----------------------------------------------------------------------------------------------------------------------
# The lock
# ----------------------------------------------------------------------------------------------------------------------


def lock_path_of(directory: Path) -> Path:
    return directory.parent / f".{directory.name}{LOCK_SUFFIX}"


def _process_start_ticks(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (Linux ``/proc``), None where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22 of the file; fields 1-2 are pid and (command)


def _pid_is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # running, as another user
        return True
    return True


def _holder_is_gone(holder: dict[str, Any]) -> bool:
    """Whether the process that took a lock provably no longer runs (it ran on this host)."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    pid = holder["pid"]
    if not _pid_is_running(pid):
        return True
    recorded, current = holder.get("process_start"), _process_start_ticks(pid)
    return recorded is not None and current is not None and recorded != current  # the pid was reused


class OutputLock:
    """The exclusive lock of one output directory (see the module docstring).

    Held as an ``flock`` on the lock file, so the kernel (or, on NFS, the lock server: Linux emulates ``flock`` there
    with a whole-file POSIX lock) decides who holds it: exactly one open file at a time, and the lock goes when its
    holder dies, however it dies. Taking over a lock left by a dead run is therefore a plain ``flock`` that succeeds
    for exactly one of any number of runs starting together; no staleness check decides who wins. The file's content
    (pid, host, start time, command) is only for messages, and as a second guard: a lock file naming a holder that
    is not provably gone (another host, or a live process of this one) is refused even when its ``flock`` is free,
    since a file system may not share ``flock`` between hosts. Release unlinks the file only if the name still
    points to the file this lock holds (same device and inode, checked while holding it), so it never removes a lock
    another run took after this one's file was removed by hand."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.path = lock_path_of(directory)
        self.holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "process_start": _process_start_ticks(os.getpid()),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(sys.argv),
        }
        self.held = False
        self._descriptor: int | None = None

    def acquire(self) -> None:
        while True:
            descriptor = self._open()
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(descriptor)
                raise OutputDirectoryError(self._refusal(self._read_holder())) from None
            except OSError as error:  # ENOLCK, EOPNOTSUPP: a file system without locks
                os.close(descriptor)
                raise OutputDirectoryError(
                    f"cannot lock output {self.directory}: its folder {self.path.parent} does not support file locks "
                    f"({error.strerror}); choose another --output"
                ) from None
            if self._is_at_path(descriptor):
                break
            os.close(descriptor)  # the file was released (unlinked) between our open and our flock: open it again
        try:
            self._take(descriptor)
        except BaseException:
            os.close(descriptor)
            raise
        self._descriptor, self.held = descriptor, True

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as error:  # a read-only file system, no permission, a full disk
            raise OutputDirectoryError(
                f"cannot write output {self.directory}: its folder {self.path.parent} does not take new files "
                f"({error.strerror}); choose another --output"
            ) from None

    def _is_at_path(self, descriptor: int) -> bool:
        try:
            at_path = os.stat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(descriptor)
        return (held.st_dev, held.st_ino) == (at_path.st_dev, at_path.st_ino)

    def _take(self, descriptor: int) -> None:
        """Holding the flock: check what the file says about an earlier holder, then write ours into it."""
        with open(descriptor, "rb", closefd=False) as file:
            content = file.read()
        if content.strip():
            holder = self._parse(content)
            if holder is not None and not _holder_is_gone(holder):
                raise OutputDirectoryError(self._refusal(holder))
            logger.warning(
                "taking over the lock of %s left by %s, which is no longer running", self.directory,
                f"pid {holder.get('pid')} (started {holder.get('started')})" if holder is not None
                else "a run whose lock file cannot be read",
            )
        data = (json.dumps(self.holder) + "\n").encode("utf-8")
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, data, 0)
        os.fsync(descriptor)

    @staticmethod
    def _parse(content: bytes) -> dict[str, Any] | None:
        try:
            holder = json.loads(content.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        return holder if isinstance(holder, dict) else None

    def _read_holder(self) -> dict[str, Any] | None:
        try:
            return self._parse(self.path.read_bytes())
        except OSError:
            return None

    def _refusal(self, holder: dict[str, Any] | None) -> str:
        if holder is None:
            who = "another elmo-hf run (its lock file cannot be read)"
        else:
            who = (
                f"another elmo-hf run: pid {holder.get('pid')} on host {holder.get('host')}, started "
                f"{holder.get('started')}, `{holder.get('command')}`"
            )
        return (
            f"output {self.directory} is locked by {who}. Wait for it to finish; if it is not running any more (e.g. "
            f"its machine went down), remove the lock with: rm {self.path}"
        )

    def release(self) -> None:
        """Remove the lock file if it is still the one this lock holds, then let go of the flock."""
        descriptor, self._descriptor, self.held = self._descriptor, None, False
        if descriptor is None:
            return
        try:
            if self._is_at_path(descriptor):
                self.path.unlink(missing_ok=True)
        finally:
            os.close(descriptor)


# ----------------------------------------------------------------------------------------------------------------------
# Opening an output directory
# ----------------------------------------------------------------------------------------------------------------------


def _make_directory(path: Path) -> Path | None:
    """Create ``path`` and missing parents; return the top-most directory created (None if ``path`` existed)."""
    missing = [directory for directory in (path, *path.parents) if not directory.exists()]
    path.mkdir(parents=True, exist_ok=True)
    return missing[-1] if missing else None


def _remove_directory_contents(path: Path) -> None:
    for entry in path.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[Path | None]:
    """Hold ``path``'s lock; yields the top-most parent directory created for the lock (None if all existed). If the
    block raises and ``path`` is gone (not kept), that parent directory is removed again."""
    try:
        created_parent = _make_directory(path.parent)
    except OSError as error:
        raise OutputDirectoryError(
            f"cannot write output {path}: cannot create its folder {path.parent} ({error.strerror}); choose another --output"
        ) from None
    lock = OutputLock(path)
    try:
        lock.acquire()
        try:
            yield created_parent
        finally:
            lock.release()
    except BaseException:
        if created_parent is not None and not path.exists():
            shutil.rmtree(created_parent, ignore_errors=True)
        raise


@contextlib.contextmanager
def open_output_directory(
    path: str | Path,
    kind: OutputKind,
    *,
    resume: bool = False,
    overwrite: bool = False,
    inputs: Iterable[str | Path] = (),
    worth_keeping: Callable[[Path], bool] = lambda path: False,
    describe_existing: Callable[[Path], str] | None = None,
    resumable: bool = True,
) -> Iterator[OutputDirectory]:
    """Open ``path`` for a run that writes ``kind`` in place, holding its lock (see the module docstring).

    - Neither ``resume`` nor ``overwrite``: ``path`` must be absent or empty.
    - ``resume``: an existing ``path`` must be an output of ``kind`` without foreign entries; it is continued
      (``resumed=True``). An absent or empty ``path`` starts a new output.
    - ``overwrite``: an existing non-empty ``path`` must be deletable (``check_deletable``); it is deleted first.

    If the block raises, a directory this run created or found empty is removed again (with the parents it created)
    unless ``worth_keeping(path)``. ``describe_existing(path)`` words what an existing output of this kind holds, for
    the message refusing to write over it (which mentions --resume only when the command is ``resumable``).
    """
    if resume and overwrite:
        raise ValueError("pass either resume or overwrite, not both")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputDirectoryError(f"output {path} exists and is not a directory")
    with _locked(path):
        existing = path.is_dir() and any(path.iterdir())
        resumed = False
        if existing and overwrite:
            check_deletable(path, kind, inputs)
            shutil.rmtree(path)
        elif existing and resume:
            _check_resumable(path, kind)
            resumed = True
        elif existing:
            raise OutputDirectoryError(_existing_output_message(path, kind, describe_existing, resumable))
        created = not path.exists()
        path.mkdir(exist_ok=True)
        if not resumed:
            write_marker(path, kind)
        try:
            yield OutputDirectory(path, kind, resumed)
        except BaseException:
            if not resumed and not worth_keeping(path):
                shutil.rmtree(path, ignore_errors=True) if created else _remove_directory_contents(path)
            raise


def _check_resumable(path: Path, kind: OutputKind) -> None:
    marker = read_marker(path)
    if marker is None or marker.get("kind") != kind.name:
        found = "no elmo-hf ownership marker" if marker is None else f"an elmo-hf output of kind {marker.get('kind')!r}"
        raise OutputDirectoryError(
            f"cannot resume {path}: it is not {kind.description} ({found}; it holds: {describe_entries(path)})"
        )
    foreign = kind.foreign_entries(path)
    if foreign:
        raise OutputDirectoryError(
            f"cannot resume {path}: it also holds what elmo-hf does not write ({', '.join(foreign[:10])}); move those "
            "away first"
        )


def _existing_output_message(
    path: Path, kind: OutputKind, describe_existing: Callable[[Path], str] | None, resumable: bool
) -> str:
    marker = read_marker(path)
    if marker is not None and marker.get("kind") == kind.name:
        what = describe_existing(path) if describe_existing is not None else kind.description
        options = "--resume to continue it or --overwrite to start over" if resumable else "--overwrite to replace it"
        return f"output {path} already holds {what}; pass {options}"
    return (
        f"output {path} exists and is not empty, and it is not {kind.description} (it holds: {describe_entries(path)}); "
        "it is neither resumed nor overwritten: choose another --output"
    )


@contextlib.contextmanager
def staged_output_directory(
    path: str | Path, kind: OutputKind, *, overwrite: bool = False, inputs: Iterable[str | Path] = ()
) -> Iterator[Path]:
    """Yield an empty staging directory beside ``path`` to write ``kind`` into, holding ``path``'s lock. When the
    block succeeds the staging directory replaces ``path`` (an existing ``path`` only with ``overwrite`` and if
    deletable); when it raises, the staging directory and any parents this run created are removed and ``path`` is
    left as it was."""
    path = Path(path)
    with _locked(path):
        if path.exists() and not path.is_dir():
            raise OutputDirectoryError(f"output {path} exists and is not a directory")
        if path.exists() and not overwrite:
            raise OutputDirectoryError(f"output {path} already exists; pass --overwrite to replace it")
        if path.exists():
            check_deletable(path, kind, inputs)
        staging = make_staging_directory(path)
        try:
            write_marker(staging, kind)
            yield staging
            if path.exists():
                shutil.rmtree(path)
            staging.rename(path)
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # gone already after the rename


def make_staging_directory(path: Path) -> Path:
    """A new, empty folder beside ``path`` named ``.<name>.<random><STAGING_SUFFIX>``, with the mode any new folder
    gets (0777 less the umask; `tempfile.mkdtemp` would make it owner-only, and the output would stay so)."""
    while True:
        staging = path.parent / f".{path.name}.{secrets.token_hex(4)}{STAGING_SUFFIX}"
        try:
            staging.mkdir()
            return staging
        except FileExistsError:
            continue


__all__ = [
    "MARKER_NAME",
    "OutputDirectory",
    "OutputDirectoryError",
    "OutputKind",
    "OutputLock",
    "check_deletable",
    "open_output_directory",
    "protection_of",
    "read_marker",
    "staged_output_directory",
]
