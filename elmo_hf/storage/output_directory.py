"""One policy for every directory elmo-hf writes (``embed``, ``pretrain``, ``convert``, ``export``, the Ray engine).

**Ownership.** A new output directory gets an ownership marker before anything else (``.elmo-hf-output.json``: format,
version, the kind of output, the elmo-hf version, the creation time), and the marker records every file the run
wrote, with its size (``files``: written when a staged output is complete, when an in-place run ends and after each
checkpoint; the embedding manifest adds each shard as it is finished). ``overwrite`` deletes only a directory that
is provably this tool's output of the same kind: a valid marker of that kind, and no file inside that a record does
not list with that size. Names prove nothing: a ``my_finetune.py`` in a converted model or a ``notes.txt`` in a
checkpoint folder is not in a record, so the directory is not deleted and the message names what is kept. It never
deletes the current directory or one of its parents, the home directory, ``/``, an input of the run or a directory
holding one, or a path that is a symbolic link. Otherwise it refuses and says what is there.

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

**Records, not names.** An in-place output's marker also records a token (``temporaries``): while a run has it open,
every temporary file made in it is named ``.<name>.<token>.<random>.tmp`` (``files.temporary_names_recorded``), so one
a killed run left is proven that output's, and a user's ``.draft.tmp`` is not. A run that is about to put a file under
its final name records it first (``OutputDirectory.record_in_flight``: name and size, or a folder it is about to
make), so a kill before the kind's own record lists it cannot orphan it. ``--overwrite``, a resume
(``remove_unlisted``) and the clean-up after a failure delete only what one of these records proves; anything else
is refused (or kept) with its name.

**Failure.** Temporary files are unique per process and call and never outlive a failure (``files.write_atomically``).
A directory that a run created (or found empty) and that holds nothing worth keeping when the run fails is removed
again (for a kind that records every file it writes, only what a record proves; a file no record lists stays, named),
with any parent directories the run created while they are empty. Outputs worth keeping (finished shards,
checkpoints) stay, so the run can be resumed. The lock file is never opened through a symbolic link, must be a
regular file of one link, and content that is not an elmo-hf lock is refused, never overwritten.

Commands describe their output with an ``OutputKind`` (the names it writes) and open it with ``open_output_directory``
(written in place, resumable) or ``staged_output_directory`` (written beside and renamed into place at the end, so
the directory appears only complete).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import fnmatch
import glob
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..validation_elmo import OUTPUT_MARKER_NAME, ELMoHFError
from .files import TEMPORARY_SUFFIX, temporary_names_recorded

logger = logging.getLogger(__name__)

MARKER_NAME = OUTPUT_MARKER_NAME
# The marker's record of the token in the names of the temporary files runs make in the output
# (``files.temporary_names_recorded``), and of the files a run is about to put under their final names.
TEMPORARIES_KEY = "temporaries"
IN_FLIGHT_KEY = "in_flight"
MARKER_FORMAT = "elmo-hf-output"
MARKER_VERSION = 1
LOCK_SUFFIX = ".elmo-hf.lock"
STAGING_SUFFIX = ".staging"


class OutputDirectoryError(ELMoHFError):
    """An output directory that a run must not write, delete or resume; the message says what is there and why."""


@dataclass(frozen=True)
class OutputKind:
    """A kind of output: ``name`` (recorded in the marker), ``description`` (for messages, e.g. "an elmo-hf embedding
    output") and the glob patterns of the top-level entries it writes (the marker and temporary files aside)."""

    name: str
    description: str
    entries: tuple[str, ...]
    # The files (relative path -> size) that the kind's own record lists as written, besides the marker's record:
    # the embedding manifest lists each shard as it is finished, so a killed run's shards are proven its own.
    own_record: Callable[[Path], dict[str, int]] | None = None

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
    """An output directory opened for writing. ``resumed``: it already held an output of its kind (``resume=True``).

    ``record()`` writes into the marker every file the directory now holds (with its size), except those that were
    there unrecorded when the run started: what this run (and the earlier runs recorded) wrote, the list that
    ``--overwrite`` later deletes by. It runs when the block ends (success or failure); a long run calls it after
    each checkpoint so that a killed run's files are recorded up to its last one."""

    path: Path
    kind: OutputKind
    resumed: bool
    unrecorded_at_start: frozenset[str] = frozenset()
    records: int = 0
    in_flight: dict[str, int | None] = field(default_factory=dict)
    _in_flight_lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self) -> None:
        if read_marker(self.path) is None:
            return
        files = {name: size for name, size in files_in(self.path).items() if name not in self.unrecorded_at_start}
        if self.kind.own_record is not None:  # a kind that records each file it writes: only what a record proves
            proven = _proof(self.path, self.kind)
            files = {name: size for name, size in files.items() if proven(name, size)}
        record_files(self.path, files)
        self.records += 1
        _crash_point(f"recorded:{self.records}")

    def record_in_flight(self, name: str, size: int | None) -> None:
        """Record in the marker, before it exists there, that the file ``name`` (relative; ``size`` bytes) is about to
        be put in place by this run, or (``name`` ending in ``/``, ``size`` None) that this run is about to create that
        folder: a kill before the kind's own record lists it leaves it proven the run's (``--resume`` and
        ``--overwrite`` then know it). Thread-safe; ``settled(name)`` drops it from the next write."""
        with self._in_flight_lock:
            self.in_flight[name] = size
            _rewrite_marker(self.path, **{IN_FLIGHT_KEY: dict(self.in_flight)})

    def settled(self, name: str) -> None:
        """``name`` is listed by the kind's own record now (or gone): the next in-flight record leaves it out."""
        with self._in_flight_lock:
            self.in_flight.pop(name, None)


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


def write_marker(
    directory: Path, kind: OutputKind, run: str | None = None, files: dict[str, int] | None = None,
    temporaries: str | None = None,
) -> None:
    """Write ``directory``'s ownership marker; ``run`` (the token of a staged output or of an in-place --overwrite)
    tells a later run which side of an interrupted replacement holds the new output; ``files``: the record so far
    (``{}`` for an in-place output, so that a killed run's files are proven by its kind's own record)."""
    from .. import __version__

    marker = {
        "format": MARKER_FORMAT,
        "version": MARKER_VERSION,
        "kind": kind.name,
        "elmo_hf_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    if run is not None:
        marker["run"] = run
    if files is not None:
        marker["files"] = files
    if temporaries is not None:
        marker[TEMPORARIES_KEY] = temporaries
    # A new file in a folder just made or found empty: never through a link, never over a file planted meanwhile.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        descriptor = os.open(directory / MARKER_NAME, flags, 0o666)
    except FileExistsError:
        raise OutputDirectoryError(
            f"{directory / MARKER_NAME} appeared while the run was making its new output there; it is not overwritten"
        ) from None
    with open(descriptor, "w", encoding="utf-8") as file:
        file.write(json.dumps(marker, indent=2) + "\n")


def _rewrite_marker(directory: Path, **fields: Any) -> None:
    """Rewrite ``directory``'s marker (atomically) with ``fields`` changed (a value None drops the field)."""
    from .files import write_atomically

    marker = read_marker(directory)
    if marker is None:
        raise OutputDirectoryError(f"{directory} has no elmo-hf ownership marker to record its files in")
    for name, value in fields.items():
        marker.pop(name, None) if value is None else marker.__setitem__(name, value)
    content = json.dumps(marker, indent=2) + "\n"
    write_atomically(directory / MARKER_NAME, lambda temporary: temporary.write_text(content, encoding="utf-8"))


def record_files(directory: Path, files: dict[str, int]) -> None:
    """Rewrite ``directory``'s marker (atomically) with ``files``, what was written (relative path -> size); the
    in-flight record (``OutputDirectory.record_in_flight``) is dropped: what it named is in ``files`` now or gone."""
    _rewrite_marker(directory, files=dict(sorted(files.items())), **{IN_FLIGHT_KEY: None})


def files_in(directory: Path) -> dict[str, int]:
    """Every file (and symbolic link) under ``directory``, by relative path, with its size; the marker aside.
    Temporary files are listed too: a ``.draft.tmp`` is a user's file until a record proves it elmo-hf's."""
    found = {}
    for folder, folders, files in os.walk(directory):
        for name in files + [name for name in folders if os.path.islink(os.path.join(folder, name))]:
            path = os.path.join(folder, name)
            relative = Path(os.path.relpath(path, directory)).as_posix()
            if relative == MARKER_NAME:
                continue
            found[relative] = os.lstat(path).st_size
    return found


def _recorded_temporary_name(token: str) -> re.Pattern:
    """The names ``files.temporary_path_beside`` gives in a directory that records ``token``."""
    return re.compile(r"\..+\." + re.escape(token) + r"\.[A-Za-z0-9_]{8}" + re.escape(TEMPORARY_SUFFIX))


def _proof(directory: Path, kind: OutputKind) -> Callable[[str, int], bool]:
    """Whether a file (relative path, size) under ``directory`` is proven elmo-hf's by a record: the marker's list of
    written files, the kind's own record (both with that size), the in-flight record (a file about to appear under
    its final name, with that size, or anything in a folder recorded before the run created it), or a temporary
    file named with the token the marker records. Names alone prove nothing."""
    marker = read_marker(directory) or {}
    files = marker.get("files") if isinstance(marker.get("files"), dict) else {}
    in_flight = marker.get(IN_FLIGHT_KEY) if isinstance(marker.get(IN_FLIGHT_KEY), dict) else {}
    own = kind.own_record(directory) if kind.own_record is not None else {}
    token = marker.get(TEMPORARIES_KEY)
    temporary = _recorded_temporary_name(token) if isinstance(token, str) and token else None
    folders = tuple(name for name, size in in_flight.items() if name.endswith("/") and size is None)

    def proven(name: str, size: int) -> bool:
        return (
            files.get(name) == size or own.get(name) == size or in_flight.get(name) == size
            or (bool(folders) and name.startswith(folders))
            or (temporary is not None and temporary.fullmatch(name.rsplit("/", 1)[-1]) is not None)
        )

    return proven


def unproven_files(directory: Path, kind: OutputKind) -> list[str] | None:
    """The files under ``directory`` that no record proves elmo-hf wrote (``_proof``); None when the marker keeps no
    list (an older elmo-hf wrote it)."""
    marker = read_marker(directory)
    if marker is None or not isinstance(marker.get("files"), dict):
        return None
    proven = _proof(directory, kind)
    return sorted(name for name, size in files_in(directory).items() if not proven(name, size))


def unrecorded_files(directory: Path, kind: OutputKind, listed: Iterable[str] = ()) -> list[str]:
    """The files under ``directory`` that a resumed run must neither delete nor keep unlisted: under no top-level
    name of ``listed`` (the names the run itself checks and rewrites) and proven by no record (``_proof``; an older
    marker's missing list counts as empty)."""
    listed = set(listed)
    proven = _proof(directory, kind)
    return sorted(
        name for name, size in files_in(directory).items() if name.split("/", 1)[0] not in listed and not proven(name, size)
    )


def remove_unlisted(directory: Path, kind: OutputKind, listed: Iterable[str]) -> list[str]:
    """Delete every file under ``directory`` outside the top-level names ``listed`` (and the marker), each proven the
    run's by a record (``_proof``), and the folders they leave empty; returns what was deleted. If any is proven by
    none, nothing is deleted and ``OutputDirectoryError`` names them."""
    listed = {*listed, MARKER_NAME}
    unrecorded = unrecorded_files(directory, kind, listed)
    if unrecorded:
        raise OutputDirectoryError(
            f"cannot resume {directory}: it also holds what elmo-hf does not write ({', '.join(unrecorded[:10])}"
            f"{' ...' if len(unrecorded) > 10 else ''}); move those away first (a run deletes only what a record "
            "proves its own: nothing was deleted)"
        )
    removed = sorted(name for name in files_in(directory) if name.split("/", 1)[0] not in listed)
    for name in removed:
        os.unlink(directory / name)
    for entry in directory.iterdir():
        if entry.name not in listed and entry.is_dir() and not entry.is_symlink():
            for folder, _, _ in sorted(os.walk(entry), key=lambda walked: -len(walked[0])):
                with contextlib.suppress(OSError):  # not empty: a folder is removed only once nothing is left in it
                    os.rmdir(folder)
    return removed


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
    """Raise ``OutputDirectoryError`` unless ``path`` is provably an output of ``kind`` that may be deleted: every
    file in it is listed, with its size, in the record of the runs that wrote it (the marker's ``files``, or the
    kind's own record); never judged by names."""
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
    unproven = unproven_files(path, kind)
    if unproven is None:
        raise OutputDirectoryError(
            f"output {path} is {kind.description} written by an older elmo-hf that kept no list of the files it "
            f"wrote ({MARKER_NAME} has no \"files\"), so --overwrite cannot prove what is its own; nothing was "
            "deleted. Delete it yourself or choose another --output"
        )
    if unproven:
        raise OutputDirectoryError(
            f"output {path} is {kind.description} but also holds files no elmo-hf run recorded writing (or changed "
            f"since): {', '.join(unproven[:10])}{' ...' if len(unproven) > 10 else ''}; --overwrite deletes only what "
            "a run's record lists, so nothing was deleted and these are kept. Move them away or choose another --output"
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
        """The lock file, created (``O_EXCL``) or opened as it is; never through a symbolic link (``O_NOFOLLOW``), and
        only a regular file of one link: what a run would otherwise truncate and write is never another file."""
        flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            try:
                descriptor = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                descriptor = os.open(self.path, flags)
        except FileNotFoundError:  # removed between the two opens (released): create it again
            return self._open()
        except OSError as error:
            if error.errno == errno.ELOOP or self.path.is_symlink():
                raise OutputDirectoryError(
                    f"cannot lock output {self.directory}: its lock file {self.path} is a symbolic link (to "
                    f"{os.readlink(self.path)}), which elmo-hf never makes; it is not followed. Remove the link"
                ) from None
            # a read-only file system, no permission, a full disk
            raise OutputDirectoryError(
                f"cannot write output {self.directory}: its folder {self.path.parent} does not take new files "
                f"({error.strerror}); choose another --output"
            ) from None
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode) or status.st_nlink != 1:
            os.close(descriptor)
            what = "not a regular file" if not stat.S_ISREG(status.st_mode) else f"a file with {status.st_nlink} links"
            raise OutputDirectoryError(
                f"cannot lock output {self.directory}: its lock file {self.path} is {what}, which elmo-hf never makes; "
                "it is not written. Remove it"
            )
        return descriptor

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
            if holder is None:  # elmo-hf writes its holder whole (truncate, then one write): not a lock of ours
                raise OutputDirectoryError(
                    f"cannot lock output {self.directory}: {self.path} holds something other than an elmo-hf lock "
                    f"({len(content):,} bytes that are not its JSON); it is not overwritten. Look at it and remove it"
                )
            if not _holder_is_gone(holder):
                raise OutputDirectoryError(self._refusal(holder))
            logger.warning(
                "taking over the lock of %s left by %s, which is no longer running", self.directory,
                f"pid {holder.get('pid')} (started {holder.get('started')})",
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
        return holder if isinstance(holder, dict) and "pid" in holder and "host" in holder else None

    def _read_holder(self) -> dict[str, Any] | None:
        try:
            descriptor = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        with open(descriptor, "rb") as file:
            return self._parse(file.read(1 << 16))

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


def _remove_what_the_run_wrote(path: Path, kind: OutputKind, created: bool) -> None:
    """After a failed new run (nothing worth keeping): delete what a record proves the run's (``_proof``), the marker
    last, and ``path`` itself if the run created it and nothing is left; a file no record lists is kept, named."""
    with contextlib.suppress(OSError):
        kept = unrecorded_files(path, kind)
        for name in files_in(path):
            if name not in kept:
                os.unlink(path / name)
        for folder, _, _ in sorted(os.walk(path), key=lambda walked: -len(walked[0])):
            if Path(folder) != path:
                with contextlib.suppress(OSError):  # a folder holding a kept file stays
                    os.rmdir(folder)
        if kept:
            logger.warning(
                "the run failed; deleted what it wrote in %s but kept what no elmo-hf record lists: %s",
                path, ", ".join(kept[:10]),
            )
            return
        (path / MARKER_NAME).unlink(missing_ok=True)
        if created:
            path.rmdir()


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
            recover_interrupted_replacement(path)
            yield created_parent
        finally:
            lock.release()
    except BaseException:
        if created_parent is not None and not path.exists():
            _remove_empty_folders(path.parent, created_parent)
        raise


def _remove_empty_folders(folder: Path, top: Path) -> None:
    """Remove ``folder`` and its parents up to ``top`` (folders a run created), each only while it is empty: a file
    someone put there meanwhile stays, with the folders that hold it."""
    while True:
        try:
            folder.rmdir()
        except OSError:
            return
        if folder == top or folder.parent == folder:
            return
        folder = folder.parent


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
    resumable: bool | Callable[[Path], bool] = True,
) -> Iterator[OutputDirectory]:
    """Open ``path`` for a run that writes ``kind`` in place, holding its lock (see the module docstring).

    - Neither ``resume`` nor ``overwrite``: ``path`` must be absent or empty.
    - ``resume``: an existing ``path`` must be an output of ``kind`` without foreign entries; it is continued
      (``resumed=True``). An absent or empty ``path`` starts a new output.
    - ``overwrite``: an existing non-empty ``path`` must be deletable (``check_deletable``); it is set aside whole
      (``.<name>.<token>.replaced``, named in a journal) and deleted only when this run completes (see "An in-place
      --overwrite" below).

    If the block raises, a directory this run created or found empty is removed again (with the parents it created)
    unless ``worth_keeping(path)``. ``describe_existing(path)`` words what an existing output of this kind holds, for
    the message refusing to write over it (which mentions --resume only when the command is ``resumable``, or
``resumable(path)`` says the existing output can be continued).
    """
    path = _checked_path(path, resume, overwrite)
    with _locked(path):
        replacing = _unfinished_in_place_replacement(path)
        resumed = False
        if replacing is not None:  # an earlier --overwrite of this output was killed: its old output is kept aside
            if resume:
                _check_resumable(path, kind)
                resumed = True
            elif overwrite:  # start the new output over; the old one stays aside, the last complete output
                check_deletable(path, kind, inputs)
                _discard(path)
                logger.warning(
                    "deleted the unfinished output that an earlier --overwrite run (killed) left at %s (by its record); "
                    "the previous output stays whole at %s until this run completes", path, replacing.replaced,
                )
            else:
                raise OutputDirectoryError(_unfinished_replacement_message(path, replacing, resumable))
        else:
            opening = _opening(path, kind, resume, overwrite, inputs, describe_existing, resumable)
            if opening == "overwrite":
                replacing = _set_aside(path)
            resumed = opening == "resume"
        created = not path.exists()
        path.mkdir(exist_ok=True)
        if not resumed:
            token = secrets.token_hex(8)
            write_marker(path, kind, run=replacing.run if replacing is not None else None, files={}, temporaries=token)
            _crash_point("new-marker-written")
        else:
            token = (read_marker(path) or {}).get(TEMPORARIES_KEY)
            if not (isinstance(token, str) and token):  # an output of an elmo-hf that named no token yet
                token = secrets.token_hex(8)
                _rewrite_marker(path, **{TEMPORARIES_KEY: token})
        unrecorded = frozenset(unproven_files(path, kind) or ()) if resumed else frozenset()
        output = OutputDirectory(path, kind, resumed, unrecorded)
        try:
            with temporary_names_recorded(path, token):
                yield output
        except BaseException:
            keep = worth_keeping(path)
            if replacing is not None:
                with contextlib.suppress(OSError):  # the run's own error (a full disk, say) is the one to report
                    output.record()
                _after_a_failed_replacement(path, kind, replacing, keep)
            elif not resumed and not keep and kind.own_record is not None:  # a kind that records every file it writes
                _remove_what_the_run_wrote(path, kind, created)
            elif not resumed and not keep:  # a folder this run created or found empty, and held locked since
                shutil.rmtree(path, ignore_errors=True) if created else _remove_directory_contents(path)
            else:
                with contextlib.suppress(OSError):
                    output.record()
            raise
        output.record()
        if replacing is not None:
            _finish_in_place_replacement(path, replacing)


def _checked_path(path: str | Path, resume: bool, overwrite: bool) -> Path:
    if resume and overwrite:
        raise ValueError("pass either resume or overwrite, not both")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputDirectoryError(f"output {path} exists and is not a directory")
    return path


def _opening(
    path: Path, kind: OutputKind, resume: bool, overwrite: bool, inputs: Iterable[str | Path],
    describe_existing: Callable[[Path], str] | None, resumable: bool | Callable[[Path], bool],
) -> str:
    """How a run writing ``kind`` in place opens ``path`` (no replacement of it left unfinished): ``"new"`` (absent or
    empty), ``"resume"`` or ``"overwrite"`` an existing output; raises ``OutputDirectoryError`` where it must not."""
    if not (path.is_dir() and any(path.iterdir())):
        return "new"
    if overwrite:
        check_deletable(path, kind, inputs)
        return "overwrite"
    if resume:
        _check_resumable(path, kind)
        return "resume"
    raise OutputDirectoryError(_existing_output_message(path, kind, describe_existing, resumable))


def check_output_directory(
    path: str | Path,
    kind: OutputKind,
    *,
    resume: bool = False,
    overwrite: bool = False,
    inputs: Iterable[str | Path] = (),
    describe_existing: Callable[[Path], str] | None = None,
    resumable: bool | Callable[[Path], bool] = True,
) -> str | None:
    """Refuse now what ``open_output_directory`` (same arguments) would refuse, reading only: no lock taken, nothing
    written. For a command to answer before its slow start (importing torch, loading a model); the run checks again
    under the lock. Returns how the run would open ``path`` (``"new"``, ``"resume"``, ``"overwrite"``), or None where
    that is settled under the lock only: a lock file (another run, or one that died) or the journal of an unfinished
    replacement is there."""
    path = _checked_path(path, resume, overwrite)
    if lock_path_of(path).exists() or journal_path_of(path).exists():
        return None
    return _opening(path, kind, resume, overwrite, inputs, describe_existing, resumable)


def _check_resumable(path: Path, kind: OutputKind) -> None:
    marker = read_marker(path)
    if marker is None or marker.get("kind") != kind.name:
        found = "no elmo-hf ownership marker" if marker is None else f"an elmo-hf output of kind {marker.get('kind')!r}"
        raise OutputDirectoryError(
            f"cannot resume {path}: it is not {kind.description} ({found}; it holds: {describe_entries(path)})"
        )
    if kind.own_record is not None:  # by record: what the kind's record lists, or a record proves written
        for entry in sorted(path.iterdir()):
            if entry.is_symlink():  # elmo-hf writes no links; deleting one (or through one) proves nothing
                raise OutputDirectoryError(
                    f"cannot resume {path}: {entry} is a symbolic link (to {os.readlink(entry)}), which elmo-hf does "
                    "not write; replace it with the file itself or move it away"
                )
        foreign = unrecorded_files(path, kind, kind.own_record(path))
    else:
        foreign = kind.foreign_entries(path)
    if foreign:
        raise OutputDirectoryError(
            f"cannot resume {path}: it also holds what elmo-hf does not write ({', '.join(foreign[:10])}); move those "
            "away first"
        )


def _existing_output_message(
    path: Path, kind: OutputKind, describe_existing: Callable[[Path], str] | None, resumable: bool | Callable[[Path], bool]
) -> str:
    marker = read_marker(path)
    if marker is not None and marker.get("kind") == kind.name:
        resumable = resumable(path) if callable(resumable) else resumable
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
    deletable) by ``_replace``, so a kill at any instant leaves the whole old or the whole new output at ``path``;
    when it raises, the staging directory and any parents this run created are removed and ``path`` is left as it
    was."""
    path = Path(path)
    with _locked(path):
        if path.exists() and not path.is_dir():
            raise OutputDirectoryError(f"output {path} exists and is not a directory")
        replacing = _unfinished_in_place_replacement(path)
        if replacing is not None:
            raise OutputDirectoryError(_unfinished_replacement_message(path, replacing, False))
        if path.exists() and not overwrite:
            raise OutputDirectoryError(f"output {path} already exists; pass --overwrite to replace it")
        if path.exists():
            check_deletable(path, kind, inputs)
        staging = make_staging_directory(path)
        try:
            write_marker(staging, kind, run=_token_of(staging))
            yield staging
            record_files(staging, files_in(staging))
            _crash_point("staging-written")
            _replace(path, staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # gone already after the swap


# ----------------------------------------------------------------------------------------------------------------------
# Replacing an output: a journal, then renames, so that a kill at any instant loses nothing and mixes nothing
# ----------------------------------------------------------------------------------------------------------------------
#
# ``_replace(path, staging)`` puts the complete output in ``staging`` in place of ``path`` (an in-place output
# written again with --overwrite keeps its old output aside until the new run completes: see ``_set_aside`` below):
#   1. the journal ``.<name>.elmo-hf.swap`` is written atomically: the staging folder (complete by now), the name the
#      old output will have (``.<name>.<token>.replaced``) and the run's token (also in the staging folder's marker);
#   2. the old output goes aside and the new one into place: one ``renameat2(RENAME_EXCHANGE)`` where the kernel and
#      file system have it (``path`` is never absent, it holds the whole old or the whole new output), else two
#      renames (old to ``.replaced``, staging to ``path``; between them ``path`` is absent and the old output is
#      whole under its recorded name);
#   3. the old output is deleted under its recorded name, then the journal.
# A run that finds the journal (``recover_interrupted_replacement``, under the lock, before anything else) finishes
# the replacement: the new output is complete, so it is put in place if it is not, and the old one is deleted. A
# staging folder without a journal was not finished: it is deleted. Each is logged, naming the folder.

SWAP_JOURNAL_SUFFIX = ".elmo-hf.swap"
REPLACED_SUFFIX = ".replaced"
CRASH_ENVIRONMENT_VARIABLE = "ELMO_HF_TEST_CRASH_AT"  # tests only: "<step>" or "remove-old:<n>", see _crash_point


def journal_path_of(directory: Path) -> Path:
    return directory.parent / f".{directory.name}{SWAP_JOURNAL_SUFFIX}"


def _token_of(staging: Path) -> str:
    return staging.name[len(staging.name) - len(STAGING_SUFFIX) - 8 : -len(STAGING_SUFFIX)]


def _crash_point(step: str) -> None:
    """Tests kill the process here (SIGKILL, nothing cleaned up) when ``ELMO_HF_TEST_CRASH_AT`` names ``step``."""
    if os.environ.get(CRASH_ENVIRONMENT_VARIABLE) == step:
        os.kill(os.getpid(), signal.SIGKILL)


crash_point = _crash_point  # for the commands' own steps (embed: "shard-recorded:<n>")


def _replace(path: Path, staging: Path | None) -> None:
    from .files import fsync_directory, write_atomically

    token = _token_of(staging) if staging is not None else secrets.token_hex(4)
    replaced = path.parent / f".{path.name}.{token}{REPLACED_SUFFIX}"
    journal = {
        "target": path.name,
        "staging": staging.name if staging is not None else None,
        "replaced": replaced.name,
        "run": token,
        "pid": os.getpid(),
        "command": " ".join(sys.argv),
    }
    if staging is not None:
        fsync_directory(staging)
    content = json.dumps(journal, indent=2) + "\n"
    write_atomically(journal_path_of(path), lambda temporary: temporary.write_text(content, encoding="utf-8"))
    _crash_point("journal-written")
    _swap_in(path, staging, replaced)
    _crash_point("swapped")
    _remove_tree(replaced)
    journal_path_of(path).unlink()
    fsync_directory(path.parent)


# An in-place --overwrite (embed, pretrain, the Ray engine: written in place so that a killed run can be resumed)
# keeps the old output, whole, until the new one is complete:
#   1. the journal is written (``in_place``: no staging folder; the old output's name aside; the run's token, which
#      the new output's marker carries too), then the old output is renamed aside (``.<name>.<token>.replaced``);
#   2. the new run grows at ``path``; its marker (``run``: the token) and record say whose files these are;
#   3. when the run completes, the journal is marked ``new_complete``, the old output deleted, then the journal.
# A run that fails (an error, Ctrl-C) with nothing worth keeping at ``path`` moves its own files away (proven by
# its record) and puts the old output back; with work worth keeping it keeps both and says how to go on. A kill
# leaves the journal: the next run of this output (under its lock) continues the new run with --resume, starts it
# over with --overwrite (the old output still aside), and is refused otherwise, naming both (see _recover_in_place
# for what it settles by itself). So ``path`` holds the whole old output, nothing, or only the new run's own files,
# and the whole old output exists, at ``path`` or under the journal's name, until the new one is complete.


@dataclass(frozen=True)
class _InPlaceReplacement:
    run: str  # the token in the journal and in the new output's marker
    replaced: Path  # where the old output is kept, whole, until the new one is complete


def _read_journal(path: Path) -> dict[str, Any] | None:
    try:
        journal = json.loads(journal_path_of(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return journal if isinstance(journal, dict) else None


def _unfinished_in_place_replacement(path: Path) -> _InPlaceReplacement | None:
    """The in-place --overwrite of ``path`` that a killed run left unfinished (its old output aside), if any."""
    journal = _read_journal(path)
    if journal is None or not journal.get("in_place") or journal.get("new_complete"):
        return None
    return _InPlaceReplacement(str(journal["run"]), path.parent / str(journal["replaced"]))


def _write_journal(path: Path, journal: dict[str, Any]) -> None:
    from .files import write_atomically

    content = json.dumps(journal, indent=2) + "\n"
    write_atomically(journal_path_of(path), lambda temporary: temporary.write_text(content, encoding="utf-8"))


def _set_aside(path: Path) -> _InPlaceReplacement:
    """Step 1 of an in-place --overwrite: the journal, then the old output renamed aside, whole."""
    from .files import fsync_directory

    token = secrets.token_hex(4)
    replacing = _InPlaceReplacement(token, path.parent / f".{path.name}.{token}{REPLACED_SUFFIX}")
    _write_journal(path, {
        "target": path.name, "staging": None, "in_place": True, "replaced": replacing.replaced.name, "run": token,
        "new_complete": False, "pid": os.getpid(), "command": " ".join(sys.argv),
    })
    _crash_point("journal-written")
    os.rename(path, replacing.replaced)
    fsync_directory(path.parent)
    _crash_point("set-aside")
    logger.warning(
        "--overwrite: the previous output of %s is kept whole at %s until this run completes, then deleted",
        path, replacing.replaced,
    )
    return replacing


def _discard(path: Path) -> None:
    """Delete the new run's unfinished output at ``path`` (the caller proved it its own): renamed first to an
    unfinished staging folder's name, so that a kill leaves ``path`` absent (the next run puts the old output back)
    and a folder the next run deletes, never part of it at ``path``."""
    from .files import fsync_directory

    discarded = make_staging_directory(path)
    os.rename(path, discarded)  # replaces the empty folder just made
    fsync_directory(path.parent)
    _crash_point("discarded")
    _remove_tree(discarded)


def _after_a_failed_replacement(path: Path, kind: OutputKind, replacing: _InPlaceReplacement, keep: bool) -> None:
    """A run replacing ``path`` in place failed (an error or Ctrl-C, not a kill): put the old output back if the new
    one holds nothing worth keeping and is provably the run's own, else keep both and say how to go on."""
    from .files import fsync_directory

    journal_path = journal_path_of(path)
    unproven = unproven_files(path, kind) if path.is_dir() else []
    if not keep and unproven == [] and replacing.replaced.is_dir():
        if path.exists():
            _discard(path)
        os.rename(replacing.replaced, path)
        fsync_directory(path.parent)
        _crash_point("put-back")
        journal_path.unlink(missing_ok=True)
        logger.warning(
            "the run failed before its new output of %s held anything worth keeping: deleted what it wrote and put "
            "the previous output back (from %s)", path, replacing.replaced,
        )
        return
    why = "its unfinished output is kept" if keep else f"it holds files no run recorded ({', '.join((unproven or [])[:10])})"
    logger.warning(
        "the run failed while replacing %s (--overwrite); %s, and the previous output is kept whole at %s. Run the "
        "same command with --resume to finish the new output (%s is deleted when it completes), or to go back to the "
        "previous output delete %s (rm -r %s): the next run of this output puts %s back",
        path, why, replacing.replaced, replacing.replaced, path, path, replacing.replaced,
    )


def _finish_in_place_replacement(path: Path, replacing: _InPlaceReplacement) -> None:
    """Step 3: the new output is complete; the old one is deleted, then the journal."""
    from .files import fsync_directory

    journal = _read_journal(path) or {}
    _write_journal(path, {**journal, "new_complete": True})
    _crash_point("new-complete")
    _remove_tree(replacing.replaced)
    journal_path_of(path).unlink()
    fsync_directory(path.parent)
    logger.warning("the new output at %s is complete: deleted the previous output (kept at %s until now)", path, replacing.replaced)


def _unfinished_replacement_message(
    path: Path, replacing: _InPlaceReplacement, resumable: bool | Callable[[Path], bool]
) -> str:
    resumable = resumable(path) if callable(resumable) else resumable
    go_on = (
        f"run that command again with --resume to finish it ({replacing.replaced} is deleted when it completes), or "
        "with --overwrite to start it over" if resumable else "run that command again with --overwrite to start it over"
    )
    return (
        f"output {path} holds the unfinished output of a run that replaced it (--overwrite) and was killed; the "
        f"previous output is kept whole at {replacing.replaced}. To go on, {go_on} (the previous output stays aside "
        f"until the new one is complete); to go back to the previous output, delete {path} (rm -r {path}): the next "
        f"run of this output puts {replacing.replaced} back"
    )


def _swap_in(path: Path, staging: Path | None, replaced: Path) -> None:
    from .files import fsync_directory

    if staging is None:
        os.rename(path, replaced)
    elif path.exists() and _exchange(staging, path):
        _crash_point("exchanged")
        os.rename(staging, replaced)  # the old output, now under the staging name
    else:
        if path.exists():
            os.rename(path, replaced)
            _crash_point("moved-aside")
        os.rename(staging, path)
    fsync_directory(path.parent)


_RENAME_EXCHANGE = 2


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where the platform, kernel or file
    system cannot (then the caller uses two renames)."""
    if os.environ.get("ELMO_HF_TEST_NO_RENAME_EXCHANGE") or not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):  # glibc before 2.28, musl
        return False
    at_current_directory = -100
    result = renameat2(at_current_directory, os.fsencode(first), at_current_directory, os.fsencode(second), _RENAME_EXCHANGE)
    if result == 0:
        return True
    error = ctypes.get_errno()
    if error in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(error, f"cannot swap {first} and {second}: {os.strerror(error)}")


def _remove_tree(path: Path) -> None:
    """Delete ``path`` bottom-up, its marker last, so that a folder whose deletion was killed still says whose it
    is (a test may kill the run after any number of deletions)."""
    if not path.exists():
        return
    removed = 0
    for directory, folders, files in os.walk(path, topdown=False):  # the top folder, and so the marker, comes last
        for name in sorted(files, key=lambda name: name == MARKER_NAME):
            os.unlink(os.path.join(directory, name))
            removed += 1
            _crash_point(f"remove-old:{removed}")
        for name in folders:
            folder = os.path.join(directory, name)
            os.unlink(folder) if os.path.islink(folder) else os.rmdir(folder)
    os.rmdir(path)


def recover_interrupted_replacement(path: Path) -> list[str]:
    """Finish a replacement of ``path`` that a killed run left (its journal), and delete staging folders an earlier
    run left unfinished; returns (and logs) what was done, naming each folder. Call it holding ``path``'s lock."""
    done = []
    journal_path = journal_path_of(path)
    known: set[str] = set()
    if journal_path.exists():
        try:
            journal = json.loads(journal_path.read_text(encoding="utf-8"))
            staging_name, replaced_name = journal["staging"], journal["replaced"]
            journal["run"]  # a journal without its run is as unreadable as one without its folders
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
            raise OutputDirectoryError(
                f"output {path}: the journal of an interrupted replacement, {journal_path}, cannot be read; look at "
                f"{path} and the hidden folders beside it named .{path.name}.*, keep the one you want, then remove "
                f"{journal_path}"
            ) from None
        replaced = path.parent / replaced_name
        staging = path.parent / staging_name if staging_name else None
        known = {replaced_name, staging_name or ""}
        who = f"pid {journal.get('pid')}, `{journal.get('command')}`"
        if journal.get("in_place"):
            done += _recover_in_place(path, journal_path, journal, replaced, who)
        else:
            done += _recover_staged(path, journal_path, journal, staging, replaced, who)
    # Exactly .<name>.<8 hex digits>.staging: the staging folder of "out.v2" (.out.v2.<hex>.staging), which another
    # run may be writing under its own lock, is not one of this output's.
    own_staging = re.compile(re.escape(f".{path.name}.") + r"[0-9a-f]{8}" + re.escape(STAGING_SUFFIX))
    for leftover in sorted(path.parent.glob(f".{glob.escape(path.name)}.*{STAGING_SUFFIX}")):
        if leftover.name in known or not own_staging.fullmatch(leftover.name) or not leftover.is_dir() or leftover.is_symlink():
            continue
        if any(leftover.iterdir()) and read_marker(leftover) is None:
            logger.warning("left %s alone: it looks like a staging folder but holds no elmo-hf marker", leftover)
            continue
        shutil.rmtree(leftover)
        done.append(f"deleted {leftover}, an unfinished staging folder left by an earlier run that was killed or failed")
    for message in done:
        logger.warning("%s", message)
    return done


def _recover_staged(path: Path, journal_path: Path, journal: dict, staging: Path | None, replaced: Path, who: str) -> list[str]:
    """Finish a staged replacement (or, from an older elmo-hf, the deletion of an in-place output's old one)."""
    done = []
    run = journal["run"]
    new_in_place = staging is None or (read_marker(path) or {}).get("run") == run
    if not new_in_place and staging is not None and (read_marker(staging) or {}).get("run") == run:
        _swap_in(path, staging, replaced)
        done.append(
            f"an earlier run ({who}) was killed while replacing {path}; its new output ({staging}) was complete, "
            "so it is now in place"
        )
    elif not new_in_place and not path.exists() and replaced.is_dir():
        os.rename(replaced, path)
        done.append(f"an earlier run ({who}) was killed while replacing {path}; the previous output was put back")
    elif staging is None:
        done.append(f"an earlier run ({who}) was killed while deleting the previous output of {path} (--overwrite)")
    else:
        done.append(f"an earlier run ({who}) was killed while replacing {path}; its new output was in place")
    for leftover in (staging, replaced):
        if leftover is not None and leftover.exists():
            _remove_tree(leftover)
            done.append(f"deleted {leftover}, the previous output of {path} that it had set aside")
    journal_path.unlink()
    return done


def _recover_in_place(path: Path, journal_path: Path, journal: dict, replaced: Path, who: str) -> list[str]:
    """What a kill left of an in-place --overwrite: finished where the new output was complete (the old one deleted),
    the journal dropped where the old output was never set aside, the old output put back where the new run left
    nothing at the target; otherwise (the new run's unfinished output at the target, the old one aside) it is left
    for ``open_output_directory`` to continue (--resume), start over (--overwrite) or refuse."""
    from .files import fsync_directory

    if journal.get("new_complete"):
        _remove_tree(replaced)
        message = (
            f"an earlier run ({who}) was killed after its new output at {path} was complete; deleted {replaced}, the "
            "previous output it had kept aside"
        )
    elif not replaced.exists():
        message = (
            f"an earlier run ({who}) was killed while replacing {path} (--overwrite) before it set the previous output "
            f"aside ({replaced} does not exist): {path} is as that run left it"
        )
    elif not path.exists() or (path.is_dir() and not path.is_symlink() and not any(path.iterdir())):
        if path.exists():
            path.rmdir()
        os.rename(replaced, path)
        fsync_directory(path.parent)
        message = (
            f"an earlier run ({who}) was killed while replacing {path} (--overwrite) before its new output held "
            f"anything; the previous output was put back from {replaced}"
        )
    else:
        return []
    journal_path.unlink()
    return [message]


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
    "check_output_directory",
    "open_output_directory",
    "protection_of",
    "read_marker",
    "record_files",
    "recover_interrupted_replacement",
    "remove_unlisted",
    "staged_output_directory",
    "unrecorded_files",
]
