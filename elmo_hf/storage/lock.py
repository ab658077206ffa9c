"""One writer per output directory: an ``flock`` on ``.<name>.elmo-hf.lock`` beside it, held for the whole run
(docs/design/architecture.md, "Output directories").

The kernel gives the flock to exactly one open file and takes it back when its holder dies, so exactly one of several
runs takes over a crashed run's lock (with a warning). The file holds the holder's pid, host, start time and command
for messages; one naming another host is refused even with its flock free. It is opened with ``O_NOFOLLOW`` and must
be a regular file of one link holding an elmo-hf lock, else it is refused and never written. Release unlinks it only
while the name still points to the file this lock holds.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Any

from .ownership import OutputDirectoryError, beside

logger = logging.getLogger(__name__)

LOCK_SUFFIX = ".elmo-hf.lock"


def lock_path_of(directory: Path) -> Path:
    return beside(directory, LOCK_SUFFIX)


def _holder_is_gone(holder: dict[str, Any]) -> bool:
    """Whether the run named in a lock file whose flock was free is provably gone: it ran on this host, where the
    kernel would not have let go of its flock while it lived."""
    return holder.get("host") == socket.gethostname()


class OutputLock:
    """The exclusive lock file ``path`` (``lock_path_of``) of one output directory (see the module docstring)."""

    def __init__(self, path: Path):
        self.path = path
        self.holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": " ".join(sys.argv),
        }
        self.held = False
        self._descriptor: int | None = None

    @property
    def directory(self) -> Path:
        """The output directory this lock guards (``lock_path_of``'s argument), for messages."""
        return self.path.parent / self.path.name[1 : -len(LOCK_SUFFIX)]

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
        """The lock file, created or opened as it is; never through a symbolic link (``O_NOFOLLOW`` fails on a link
        even with ``O_CREAT``), and only a regular file of one link: what a run writes is never another file."""
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            descriptor = os.open(self.path, flags, 0o666)
        except OSError as error:
            if self.path.is_symlink():
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


__all__ = ["LOCK_SUFFIX", "OutputLock", "lock_path_of"]
