"""What a run proves it wrote: the ownership marker and its record of files; deletion by record only
(docs/design/architecture.md, "Output directories").

The marker (``.elmo-hf-output.json``) is created first, with ``O_EXCL | O_NOFOLLOW``. It lists every file the run
wrote with its size (``files``), the files a run is about to put under their final names (``in_flight``:
``OutputDirectory.record_in_flight``, ``put_in_place``) and the token in the names of the run's temporary files
(``temporaries``). ``check_deletable`` (``--overwrite``), ``remove_unlisted`` (a resume) and
``remove_what_the_run_wrote`` (after a failure) delete only what one of these records, or the kind's own (the
embedding manifest), proves (``proof``); names prove nothing. ``protection_of`` names what is never deleted.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
import os
import re
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..validation_elmo import OUTPUT_MARKER_NAME, ELMoHFError
from .files import TEMPORARY_SUFFIX, write_atomically

logger = logging.getLogger(__name__)

MARKER_NAME = OUTPUT_MARKER_NAME
MARKER_FORMAT = "elmo-hf-output"
MARKER_VERSION = 1
# The marker's record of the token in the names of the temporary files runs make in the output, and of the files a
# run is about to put under their final names.
TEMPORARIES_KEY = "temporaries"
IN_FLIGHT_KEY = "in_flight"
# The name of the hidden folder ``OutputDirectory.put_in_place`` writes into (and its random part after).
WRITING_PREFIX = ".writing."


class OutputDirectoryError(ELMoHFError):
    """An output directory that a run must not write, delete or resume; the message says what is there and why."""


def beside(directory: Path, suffix: str) -> Path:
    """The hidden file or folder ``.<name><suffix>`` beside ``directory``: its lock, its replacement's journal."""
    return directory.parent / f".{directory.name}{suffix}"


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
    in_flight: dict[str, int | None] = field(default_factory=dict)
    _in_flight_lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self) -> None:
        marker = marker_at(self.path / MARKER_NAME)
        if marker is None:
            return
        files = {name: size for name, size in files_in(self.path).items() if name not in self.unrecorded_at_start}
        if self.kind.own_record is not None:  # a kind that records each file it writes: only what a record proves
            proven = proof(marker, self.kind.own_record(self.path))
            files = {name: size for name, size in files.items() if proven(name, size)}
        rewrite_marker(self.path / MARKER_NAME, files=dict(sorted(files.items())), **{IN_FLIGHT_KEY: None})

    def record_in_flight(self, name: str, size: int | None) -> None:
        """Record in the marker, before it exists there, that the file ``name`` (relative; ``size`` bytes) is about to
        be put in place by this run, or (``name`` ending in ``/``, ``size`` None) that this run is about to create that
        folder: a kill before the kind's own record lists it leaves it proven the run's (``--resume`` and
        ``--overwrite`` then know it). Thread-safe; ``settled(name)`` drops it from the next write."""
        with self._in_flight_lock:
            self.in_flight[name] = size
            rewrite_marker(self.path / MARKER_NAME, **{IN_FLIGHT_KEY: dict(self.in_flight)})

    def settled(self, name: str) -> None:
        """``name`` is listed by the kind's own record now (or gone): the next in-flight record leaves it out."""
        with self._in_flight_lock:
            self.in_flight.pop(name, None)

    def put_in_place(self, write: Callable[[Path], Any]) -> None:
        """``write(folder)`` into a new hidden folder of the output (recorded in flight before it exists), then record
        every file it wrote in flight, with its size, and move each to the same relative path in the output
        (replacing the run's earlier file of that name): for files whose names the writer chooses
        (``save_pretrained``), so that a kill at any instant leaves only files a record proves the run's."""
        name = f"{WRITING_PREFIX}{secrets.token_hex(8)}"
        self.record_in_flight(f"{name}/", None)
        folder = self.path / name
        folder.mkdir()
        try:
            write(folder)
            written = files_in(folder)
            with self._in_flight_lock:
                self.in_flight.update(written)
                rewrite_marker(self.path / MARKER_NAME, **{IN_FLIGHT_KEY: dict(self.in_flight)})
            for relative in written:
                (self.path / relative).parent.mkdir(parents=True, exist_ok=True)
                os.replace(folder / relative, self.path / relative)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            self.settled(f"{name}/")

    def carry_in_flight(self) -> None:
        """A resumed output: keep the in-flight record a killed run left (its files stay proven until this run's next
        ``record()`` lists them), less the folders of its unfinished ``put_in_place``, deleted (the record proves them
        its own)."""
        marker = marker_at(self.path / MARKER_NAME) or {}
        carried = {
            name: size for name, size in _dict_field(marker, IN_FLIGHT_KEY).items()
            if isinstance(name, str) and (size is None or isinstance(size, int))
        }
        for name in [name for name in carried if name.startswith(WRITING_PREFIX) and name.endswith("/")]:
            folder = self.path / name
            if folder.is_dir() and not folder.is_symlink() and "/" not in name[:-1]:
                shutil.rmtree(folder)
            del carried[name]
        with self._in_flight_lock:
            self.in_flight = {**carried, **self.in_flight}
            rewrite_marker(self.path / MARKER_NAME, **{IN_FLIGHT_KEY: dict(self.in_flight) or None})


def read_marker(directory: Path) -> dict[str, Any] | None:
    """The ownership marker of ``directory`` if it has a valid one, else None."""
    return marker_at(directory / MARKER_NAME)


def marker_at(path: Path) -> dict[str, Any] | None:
    """The ownership marker in the file ``path`` if it is a valid one, else None."""
    try:
        marker = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(marker, dict) or marker.get("format") != MARKER_FORMAT or marker.get("version") != MARKER_VERSION:
        return None
    return marker


def write_marker(
    path: Path,
    kind: OutputKind,
    run: str | None = None,
    files: dict[str, int] | None = None,
    temporaries: str | None = None,
) -> None:
    """Write the new ownership marker file ``path`` (``<output>/MARKER_NAME``); ``run`` (the token of a staged output
    or of an in-place --overwrite) tells a later run which side of an interrupted replacement holds the new output;
    ``files``: the record so far (``{}`` for an in-place output, so that a killed run's files are proven by its kind's
    own record)."""
    from .. import __version__

    marker = {
        "format": MARKER_FORMAT, "version": MARKER_VERSION, "kind": kind.name, "elmo_hf_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    optional = {"run": run, "files": files, TEMPORARIES_KEY: temporaries}
    marker.update({name: value for name, value in optional.items() if value is not None})
    # A new file in a folder just made or found empty: never through a link, never over a file planted meanwhile.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        descriptor = os.open(path, flags, 0o666)
    except FileExistsError:
        raise OutputDirectoryError(
            f"{path} appeared while the run was making its new output there; it is not overwritten"
        ) from None
    with open(descriptor, "w", encoding="utf-8") as file:
        file.write(json.dumps(marker, indent=2) + "\n")


def rewrite_marker(path: Path, **fields: Any) -> None:
    """Rewrite the marker file ``path`` (atomically) with ``fields`` changed (a value None drops the field); ``files``
    is the record of what was written (relative path -> size), which drops the in-flight record with it."""
    marker = marker_at(path)
    if marker is None:
        raise OutputDirectoryError(f"{path.parent} has no elmo-hf ownership marker to record its files in")
    for name, value in fields.items():
        marker.pop(name, None) if value is None else marker.__setitem__(name, value)
    content = json.dumps(marker, indent=2) + "\n"
    write_atomically(path, lambda temporary: temporary.write_text(content, encoding="utf-8"))


def files_in(directory: Path) -> dict[str, int]:
    """Every file (and symbolic link) under ``directory``, by relative path, with its size; the marker aside.
    Temporary files are listed too: a ``.draft.tmp`` is a user's file until a record proves it elmo-hf's."""
    found = {}
    for folder, folders, files in os.walk(directory):
        for name in files + [name for name in folders if os.path.islink(os.path.join(folder, name))]:
            path = os.path.join(folder, name)
            relative = Path(os.path.relpath(path, directory)).as_posix()
            if relative != MARKER_NAME:
                found[relative] = os.lstat(path).st_size
    return found


def _recorded_temporary_name(token: str) -> re.Pattern:
    """The names ``files.temporary_path_beside`` gives in a directory that records ``token``."""
    return re.compile(r"\..+\." + re.escape(token) + r"\.[A-Za-z0-9_]{8}" + re.escape(TEMPORARY_SUFFIX))


def _dict_field(marker: dict[str, Any], name: str) -> dict:
    return marker.get(name) if isinstance(marker.get(name), dict) else {}


def proof(marker: dict[str, Any], own: dict[str, int]) -> Callable[[str, int], bool]:
    """Whether a file (relative path, size) of an output is proven elmo-hf's by a record: the ``marker``'s list of
    written files, the kind's ``own`` record (both with that size), the in-flight record (a file about to appear
    under its final name, with that size, or anything in a folder recorded before the run created it), or a
    temporary file named with the token the marker records. Names alone prove nothing."""
    files, in_flight = _dict_field(marker, "files"), _dict_field(marker, IN_FLIGHT_KEY)
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


def _proof_in(directory: Path, kind: OutputKind) -> Callable[[str, int], bool]:
    own = kind.own_record(directory) if kind.own_record is not None else {}
    return proof(read_marker(directory) or {}, own)


def unproven_files(directory: Path, kind: OutputKind) -> list[str] | None:
    """The files under ``directory`` that no record proves elmo-hf wrote (``proof``); None when the marker keeps no
    list (an older elmo-hf wrote it)."""
    marker = read_marker(directory)
    if marker is None or not isinstance(marker.get("files"), dict):
        return None
    proven = _proof_in(directory, kind)
    return sorted(name for name, size in files_in(directory).items() if not proven(name, size))


def unrecorded_files(directory: Path, kind: OutputKind, listed: Iterable[str] = ()) -> list[str]:
    """The files under ``directory`` that a resumed run must neither delete nor keep unlisted: under no top-level
    name of ``listed`` (the names the run itself checks and rewrites) and proven by no record (``proof``; an older
    marker's missing list counts as empty)."""
    listed = set(listed)
    proven = _proof_in(directory, kind)
    return sorted(
        name for name, size in files_in(directory).items() if name.split("/", 1)[0] not in listed and not proven(name, size)
    )


def _remove_empty_folders_under(directory: Path, keep: Iterable[str] = ()) -> None:
    """Remove the folders under ``directory`` (outside the top-level names ``keep``) that hold nothing, deepest first."""
    keep = set(keep)
    for folder, _, _ in sorted(os.walk(directory), key=lambda walked: -len(walked[0])):
        relative = Path(folder).relative_to(directory)
        if relative.parts and relative.parts[0] not in keep and not os.path.islink(folder):
            with contextlib.suppress(OSError):  # not empty: a folder is removed only once nothing is left in it
                os.rmdir(folder)


def remove_unlisted(directory: Path, kind: OutputKind, listed: Iterable[str]) -> list[str]:
    """Delete every file under ``directory`` outside the top-level names ``listed`` (and the marker), each proven the
    run's by a record (``proof``), and the folders they leave empty; returns what was deleted. If any is proven by
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
    _remove_empty_folders_under(directory, keep=listed)
    return removed


def remove_what_the_run_wrote(path: Path, kind: OutputKind, created: bool) -> None:
    """After a failed new run (nothing worth keeping): delete what a record proves the run's (``proof``), the marker
    last, and ``path`` itself if the run created it and nothing is left; a file no record lists is kept, named."""
    with contextlib.suppress(OSError):
        kept = unrecorded_files(path, kind)
        for name in files_in(path):
            if name not in kept:
                os.unlink(path / name)
        _remove_empty_folders_under(path)
        if kept:
            logger.warning(
                "the run failed; deleted what it wrote in %s but kept what no elmo-hf record lists: %s",
                path, ", ".join(kept[:10]),
            )
            return
        (path / MARKER_NAME).unlink(missing_ok=True)
        if created:
            path.rmdir()


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


__all__ = [
    "MARKER_NAME", "OutputDirectory", "OutputDirectoryError", "OutputKind", "beside", "check_deletable",
    "describe_entries", "files_in", "proof", "protection_of", "marker_at", "read_marker", "remove_unlisted",
    "remove_what_the_run_wrote", "rewrite_marker", "unproven_files", "unrecorded_files", "write_marker",
]
