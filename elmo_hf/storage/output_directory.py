"""One policy for every directory elmo-hf writes (docs/design/architecture.md, "Output directories"):
``open_output_directory`` (written in place, resumable), ``staged_output_directory`` (written beside and renamed
into place at the end) and ``check_output_directory`` (what opening would refuse, answered before a slow start),
from three pieces: ``ownership.py`` (the marker and its record), ``lock.py`` (one writer) and ``replacement.py``
(journal, renames, recovery after a kill). The output directory is named once, to one of these; the run then
works with the ``OutputDirectory`` handle and the names of its files.

Opening in place holds the lock for the whole block, after finishing what a killed run left: without ``resume`` or
``overwrite`` the directory must be absent or empty; ``resume`` continues an output of the kind without foreign
entries (``resumed=True``); ``overwrite`` sets a deletable output aside whole and deletes it when the run completes.
If the block raises, a directory the run created (or found empty) that holds nothing ``worth_keeping(path)`` is
removed again (for a kind that records every file it writes, only what a record proves), with the parent folders
the run created. ``describe_existing(path)`` words an existing output of the kind in the refusal, which mentions
--resume only when the command is ``resumable`` (or ``resumable(path)``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from .files import RECORDED_TOKENS
from .lock import LOCK_SUFFIX, OutputLock, lock_path_of
from .ownership import (
    MARKER_NAME, TEMPORARIES_KEY, OutputDirectory, OutputDirectoryError, OutputKind, beside, check_deletable,
    describe_entries, files_in, marker_at, read_marker, remove_unlisted, remove_what_the_run_wrote, rewrite_marker,
    unproven_files, unrecorded_files, write_marker,
)
from .replacement import (
    SWAP_JOURNAL_SUFFIX, InPlaceReplacement, after_a_failed_replacement, discard, finish_in_place_replacement,
    journal_path_of, make_staging_directory, recover_interrupted_replacement, replace_with_staging, set_aside, token_of,
    unfinished_in_place_replacement, unfinished_replacement_message,
)

logger = logging.getLogger(__name__)

Resumable = bool | Callable[[Path], bool]


def _make_directory(path: Path) -> Path | None:
    """Create ``path`` and missing parents; return the top-most directory created (None if ``path`` existed)."""
    missing = [directory for directory in (path, *path.parents) if not directory.exists()]
    path.mkdir(parents=True, exist_ok=True)
    return missing[-1] if missing else None


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


def _check_flags(resume: bool, overwrite: bool) -> None:
    if resume and overwrite:
        raise ValueError("pass either resume or overwrite, not both")


def check_output_directory(
    path: str | Path,
    kind: OutputKind,
    *,
    resume: bool = False,
    overwrite: bool = False,
    inputs: Iterable[str | Path] = (),
    describe_existing: Callable[[Path], str] | None = None,
    resumable: Resumable = True,
    locked: bool = False,
) -> str | None:
    """How a run writing ``kind`` in place opens ``path`` (``open_output_directory``, same arguments): ``"new"``
    (absent or empty), ``"resume"`` or ``"overwrite"`` an existing output; raises ``OutputDirectoryError`` where it
    must not. Reads only. Unless ``locked`` (the run, holding the lock, with no replacement left unfinished), it is
    for a command to answer before its slow start (importing torch, loading a model), and returns None where the
    answer is settled under the lock only: a lock file (another run, or one that died) or the journal of an
    unfinished replacement is there."""
    _check_flags(resume, overwrite)
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputDirectoryError(f"output {path} exists and is not a directory")
    if not locked and (beside(path, LOCK_SUFFIX).exists() or beside(path, SWAP_JOURNAL_SUFFIX).exists()):
        return None
    if not (path.is_dir() and any(path.iterdir())):
        return "new"
    if overwrite:
        check_deletable(path, kind, inputs)
        return "overwrite"
    if resume:
        _check_resumable(path, kind)
        return "resume"
    raise OutputDirectoryError(_existing_output_message(path, kind, describe_existing, resumable))


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
                    f"cannot resume {path}: {entry} is a symbolic link (to {entry.readlink()}), which elmo-hf does "
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


def _is_resumable(path: Path, resumable: Resumable) -> bool:
    return resumable(path) if callable(resumable) else resumable


def _existing_output_message(
    path: Path, kind: OutputKind, describe_existing: Callable[[Path], str] | None, resumable: Resumable
) -> str:
    marker = read_marker(path)
    if marker is not None and marker.get("kind") == kind.name:
        what = describe_existing(path) if describe_existing is not None else kind.description
        options = (
            "--resume to continue it or --overwrite to start over" if _is_resumable(path, resumable)
            else "--overwrite to replace it"
        )
        return f"output {path} already holds {what}; pass {options}"
    return (
        f"output {path} exists and is not empty, and it is not {kind.description} (it holds: {describe_entries(path)}); "
        "it is neither resumed nor overwritten: choose another --output"
    )


def _continue_or_restart(
    path: Path,
    kind: OutputKind,
    replacing: InPlaceReplacement,
    resume: bool,
    overwrite: bool,
    inputs: Iterable[str | Path],
    resumable: Resumable,
) -> bool:
    """An earlier --overwrite of ``path`` was killed, its old output kept aside: continue the new output (``resume``;
    returns True), start it over (``overwrite``; the old output stays aside) or refuse."""
    if resume:
        _check_resumable(path, kind)
        return True
    if not overwrite:
        raise OutputDirectoryError(unfinished_replacement_message(path, replacing, _is_resumable(path, resumable)))
    check_deletable(path, kind, inputs)
    discard(path)
    logger.warning(
        "deleted the unfinished output that an earlier --overwrite run (killed) left at %s (by its record); the "
        "previous output stays whole at %s until this run completes", path, replacing.replaced,
    )
    return False


def _claim(marker: Path, kind: OutputKind, resumed: bool, run: str | None) -> str:
    """Write the ``marker`` file of a new output, or read the token of the output resumed: the token that names the
    run's temporary files."""
    if not resumed:
        token = secrets.token_hex(8)
        write_marker(marker, kind, run=run, files={}, temporaries=token)
        return token
    token = (marker_at(marker) or {}).get(TEMPORARIES_KEY)
    if not (isinstance(token, str) and token):  # an output of an elmo-hf that named no token yet
        token = secrets.token_hex(8)
        rewrite_marker(marker, **{TEMPORARIES_KEY: token})
    return token


def _after_a_failure(output: OutputDirectory, replacing: InPlaceReplacement | None, created: bool, keep: bool) -> None:
    """The run's block raised: put back, remove or record what it wrote (see the module docstring)."""
    path, kind = output.path, output.kind
    if replacing is not None:
        with contextlib.suppress(OSError):  # the run's own error (a full disk, say) is the one to report
            output.record()
        after_a_failed_replacement(path, kind, replacing, keep)
    elif not output.resumed and not keep and kind.own_record is not None:  # a kind that records every file it writes
        remove_what_the_run_wrote(path, kind, created)
    elif not output.resumed and not keep:  # a folder this run created or found empty, and held locked since
        shutil.rmtree(path, ignore_errors=True) if created else _remove_directory_contents(path)
    else:
        with contextlib.suppress(OSError):
            output.record()


def _remove_directory_contents(path: Path) -> None:
    for entry in path.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold ``path``'s lock, after finishing what a killed run left (``recover_interrupted_replacement``). If the
    block raises and ``path`` is gone (not kept), the parent folders made for the lock are removed again."""
    try:
        created_parent = _make_directory(path.parent)
    except OSError as error:
        raise OutputDirectoryError(
            f"cannot write output {path}: cannot create its folder {path.parent} ({error.strerror}); choose another --output"
        ) from None
    lock = OutputLock(beside(path, LOCK_SUFFIX))
    try:
        lock.acquire()
        try:
            recover_interrupted_replacement(path)
            yield
        finally:
            lock.release()
    except BaseException:
        if created_parent is not None and not path.exists():
            _remove_empty_folders(path.parent, created_parent)
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
    resumable: Resumable = True,
) -> Iterator[OutputDirectory]:
    """Open ``path`` for a run that writes ``kind`` in place, holding its lock (see the module docstring)."""
    _check_flags(resume, overwrite)
    path = Path(path)
    with _locked(path):
        replacing = unfinished_in_place_replacement(beside(path, SWAP_JOURNAL_SUFFIX))
        if replacing is not None:  # an earlier --overwrite of this output was killed: its old output is kept aside
            resumed = _continue_or_restart(path, kind, replacing, resume, overwrite, inputs, resumable)
        else:
            opening = check_output_directory(
                path, kind, resume=resume, overwrite=overwrite, inputs=inputs, describe_existing=describe_existing,
                resumable=resumable, locked=True,
            )
            replacing = set_aside(path) if opening == "overwrite" else None
            resumed = opening == "resume"
        created = not path.exists()
        path.mkdir(exist_ok=True)
        token = _claim(path / MARKER_NAME, kind, resumed, replacing.run if replacing is not None else None)
        unrecorded = frozenset(unproven_files(path, kind) or ()) if resumed else frozenset()
        output = OutputDirectory(path, kind, resumed, unrecorded)
        if resumed:
            output.carry_in_flight()
        RECORDED_TOKENS[os.path.abspath(path)] = token
        try:
            yield output
        except BaseException:
            _after_a_failure(output, replacing, created, worth_keeping(path))
            raise
        finally:
            RECORDED_TOKENS.pop(os.path.abspath(path), None)
        output.record()
        if replacing is not None:
            finish_in_place_replacement(path, replacing)


@contextlib.contextmanager
def staged_output_directory(
    path: str | Path, kind: OutputKind, *, overwrite: bool = False, inputs: Iterable[str | Path] = ()
) -> Iterator[Path]:
    """Yield an empty staging directory beside ``path`` to write ``kind`` into, holding ``path``'s lock. When the
    block succeeds the staging directory replaces ``path`` (an existing ``path`` only with ``overwrite`` and if
    deletable: ``replacement.replace_with_staging``), so a kill at any instant leaves the whole old output, or the
    whole new one, at ``path`` or under the journal's names; when it raises, the staging directory and any parents
    this run created are removed and ``path`` is left as it was."""
    path = Path(path)
    with _locked(path):
        if path.exists() and not path.is_dir():
            raise OutputDirectoryError(f"output {path} exists and is not a directory")
        replacing = unfinished_in_place_replacement(beside(path, SWAP_JOURNAL_SUFFIX))
        if replacing is not None:
            raise OutputDirectoryError(unfinished_replacement_message(path, replacing, False))
        if path.exists() and not overwrite:
            raise OutputDirectoryError(f"output {path} already exists; pass --overwrite to replace it")
        if path.exists():
            check_deletable(path, kind, inputs)
        staging = make_staging_directory(path)
        try:
            write_marker(staging / MARKER_NAME, kind, run=token_of(staging))
            yield staging
            rewrite_marker(staging / MARKER_NAME, files=dict(sorted(files_in(staging).items())))
            replace_with_staging(path, staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # gone already after the swap


__all__ = [
    "MARKER_NAME", "OutputDirectory", "OutputDirectoryError", "OutputKind", "OutputLock", "check_deletable",
    "check_output_directory", "describe_entries", "journal_path_of", "lock_path_of", "open_output_directory",
    "read_marker", "recover_interrupted_replacement", "remove_unlisted", "staged_output_directory",
]
