"""Replacing an output so that a kill at any instant loses nothing and mixes nothing: a journal, renames, recovery
(docs/design/architecture.md, "Output directories").

**Staged** (``replace_with_staging``): the complete staging folder ``.<name>.<token>.staging`` beside the target,
the journal ``.<name>.elmo-hf.swap`` written, the old output renamed to ``.<name>.<token>.replaced``, the staging
folder into place, then the old output deleted (its marker last) and the journal. **In place** (``set_aside``,
``finish_in_place_replacement``, ``after_a_failed_replacement``): the journal (``in_place``) written and the old
output renamed aside; the new run grows at the target and the old output is deleted once the journal says the new
one is complete, or put back after a failure that left nothing worth keeping. **Recovery**
(``recover_interrupted_replacement``, under the lock, before anything else) finishes or undoes what a killed run
left and deletes staging folders no journal names, logging each.

Every step that changes the disk goes through one of three functions, ``write_journal``, ``move`` and
``delete_file``: tests kill a run between any two steps by patching one of them in a child process.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import re
import secrets
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .files import fsync_parent_of, write_atomically
from .ownership import MARKER_NAME, OutputDirectoryError, OutputKind, beside, read_marker, unproven_files

logger = logging.getLogger(__name__)

SWAP_JOURNAL_SUFFIX = ".elmo-hf.swap"
STAGING_SUFFIX = ".staging"
REPLACED_SUFFIX = ".replaced"


def journal_path_of(directory: Path) -> Path:
    return beside(directory, SWAP_JOURNAL_SUFFIX)


def make_staging_directory(path: Path) -> Path:
    """A new, empty folder beside ``path`` named ``.<name>.<8 hex digits><STAGING_SUFFIX>``, with the mode any new
    folder gets (0777 less the umask; `tempfile.mkdtemp` would make it owner-only, and the output would stay so)."""
    while True:
        staging = path.parent / f".{path.name}.{secrets.token_hex(4)}{STAGING_SUFFIX}"
        try:
            staging.mkdir()
            return staging
        except FileExistsError:
            continue


def token_of(staging: Path) -> str:
    return staging.name[len(staging.name) - len(STAGING_SUFFIX) - 8 : -len(STAGING_SUFFIX)]


def _replaced_path(path: Path, token: str) -> Path:
    return path.parent / f".{path.name}.{token}{REPLACED_SUFFIX}"


# ----------------------------------------------------------------------------------------------------------------------
# The three steps that change the disk
# ----------------------------------------------------------------------------------------------------------------------


def write_journal(path: Path, journal: dict[str, Any]) -> None:
    """Write (atomically) the journal of replacing ``path``."""
    content = json.dumps({**journal, "pid": os.getpid(), "command": " ".join(sys.argv)}, indent=2) + "\n"
    write_atomically(journal_path_of(path), lambda temporary: temporary.write_text(content, encoding="utf-8"))


def move(source: Path, destination: Path) -> None:
    """Rename ``source`` to ``destination`` (an absent path, or an empty folder), durably."""
    os.rename(source, destination)
    fsync_parent_of(destination)


def delete_file(path: str) -> None:
    os.unlink(path)


def remove_tree(path: Path) -> None:
    """Delete ``path`` bottom-up, its marker last, so that a folder whose deletion was killed still says whose it
    is."""
    if not path.exists():
        return
    for directory, folders, files in os.walk(path, topdown=False):  # the top folder, and so the marker, comes last
        for name in sorted(files, key=lambda name: name == MARKER_NAME):
            delete_file(os.path.join(directory, name))
        for name in folders:
            folder = os.path.join(directory, name)
            os.unlink(folder) if os.path.islink(folder) else os.rmdir(folder)
    os.rmdir(path)


# ----------------------------------------------------------------------------------------------------------------------
# Staged
# ----------------------------------------------------------------------------------------------------------------------


def replace_with_staging(path: Path, staging: Path) -> None:
    """Put the complete output in ``staging`` in place of ``path`` (absent, or an output ``check_deletable`` passed)."""
    token = token_of(staging)
    replaced = _replaced_path(path, token)
    fsync_parent_of(staging / MARKER_NAME)  # the staging folder's own entries
    write_journal(path, {"target": path.name, "staging": staging.name, "replaced": replaced.name, "run": token})
    _swap_in(path, staging, replaced)
    remove_tree(replaced)
    journal_path_of(path).unlink()
    fsync_parent_of(path)


def _swap_in(path: Path, staging: Path, replaced: Path) -> None:
    if path.exists():
        move(path, replaced)
    move(staging, path)


# ----------------------------------------------------------------------------------------------------------------------
# In place
# ----------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InPlaceReplacement:
    run: str  # the token in the journal and in the new output's marker
    replaced: Path  # where the old output is kept, whole, until the new one is complete


def _read_journal(journal_path: Path) -> dict[str, Any] | None:
    try:
        journal = json.loads(journal_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return journal if isinstance(journal, dict) else None


def unfinished_in_place_replacement(journal_path: Path) -> InPlaceReplacement | None:
    """The in-place --overwrite that a killed run left unfinished (its old output aside), if its journal
    (``journal_path_of(output)``) says so."""
    journal = _read_journal(journal_path)
    if journal is None or not journal.get("in_place") or journal.get("new_complete"):
        return None
    return InPlaceReplacement(str(journal["run"]), journal_path.parent / str(journal["replaced"]))


def set_aside(path: Path) -> InPlaceReplacement:
    """Step 1 of an in-place --overwrite: the journal, then the old output renamed aside, whole."""
    token = secrets.token_hex(4)
    replacing = InPlaceReplacement(token, _replaced_path(path, token))
    write_journal(path, {
        "target": path.name, "staging": None, "in_place": True, "replaced": replacing.replaced.name, "run": token,
        "new_complete": False,
    })
    move(path, replacing.replaced)
    logger.warning(
        "--overwrite: the previous output of %s is kept whole at %s until this run completes, then deleted",
        path, replacing.replaced,
    )
    return replacing


def discard(path: Path) -> None:
    """Delete the new run's unfinished output at ``path`` (the caller proved it its own): renamed first to an
    unfinished staging folder's name, so that a kill leaves ``path`` absent (the next run puts the old output back)
    and a folder the next run deletes, never part of it at ``path``."""
    discarded = make_staging_directory(path)
    move(path, discarded)  # replaces the empty folder just made
    remove_tree(discarded)


def after_a_failed_replacement(path: Path, kind: OutputKind, replacing: InPlaceReplacement, keep: bool) -> None:
    """A run replacing ``path`` in place failed (an error or Ctrl-C, not a kill): put the old output back if the new
    one holds nothing worth keeping and is provably the run's own, else keep both and say how to go on."""
    unproven = unproven_files(path, kind) if path.is_dir() else []
    if not keep and unproven == [] and replacing.replaced.is_dir():
        if path.exists():
            discard(path)
        move(replacing.replaced, path)
        journal_path_of(path).unlink(missing_ok=True)
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


def finish_in_place_replacement(path: Path, replacing: InPlaceReplacement) -> None:
    """Step 3: the new output is complete; the old one is deleted, then the journal."""
    write_journal(path, {**(_read_journal(journal_path_of(path)) or {}), "new_complete": True})
    remove_tree(replacing.replaced)
    journal_path_of(path).unlink()
    fsync_parent_of(path)
    logger.warning("the new output at %s is complete: deleted the previous output (kept at %s until now)", path, replacing.replaced)


def unfinished_replacement_message(path: Path, replacing: InPlaceReplacement, resumable: bool) -> str:
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


# ----------------------------------------------------------------------------------------------------------------------
# Recovery after a kill
# ----------------------------------------------------------------------------------------------------------------------


def recover_interrupted_replacement(path: Path) -> list[str]:
    """Finish a replacement of ``path`` that a killed run left (its journal), and delete staging folders an earlier
    run left unfinished (those no journal names); returns (and logs) what was done, naming each folder. Call it
    holding ``path``'s lock."""
    done, known = [], set()
    if beside(path, SWAP_JOURNAL_SUFFIX).exists():
        journal = _readable_journal(path)
        replaced = path.parent / journal["replaced"]
        staging = path.parent / journal["staging"] if journal["staging"] else None
        known = {journal["replaced"], journal["staging"] or ""}
        who = f"pid {journal.get('pid')}, `{journal.get('command')}`"
        if journal.get("in_place"):
            done += _recover_in_place(path, journal, replaced, who)
        else:
            done += _recover_staged(path, journal, staging, replaced, who)
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


def _readable_journal(path: Path) -> dict[str, Any]:
    journal = _read_journal(journal_path_of(path))
    if journal is None or not all(name in journal for name in ("staging", "replaced", "run")):
        journal_path = journal_path_of(path)
        raise OutputDirectoryError(
            f"output {path}: the journal of an interrupted replacement, {journal_path}, cannot be read; look at "
            f"{path} and the hidden folders beside it named .{path.name}.*, keep the one you want, then remove "
            f"{journal_path}"
        )
    return journal


def _recover_staged(path: Path, journal: dict, staging: Path | None, replaced: Path, who: str) -> list[str]:
    """Finish a staged replacement (or, from an older elmo-hf, the deletion of an in-place output's old one)."""
    run = journal["run"]
    new_in_place = staging is None or (read_marker(path) or {}).get("run") == run
    if not new_in_place and staging is not None and (read_marker(staging) or {}).get("run") == run:
        _swap_in(path, staging, replaced)
        done = [(
            f"an earlier run ({who}) was killed while replacing {path}; its new output ({staging}) was complete, "
            "so it is now in place"
        )]
    elif not new_in_place and not path.exists() and replaced.is_dir():
        move(replaced, path)
        done = [f"an earlier run ({who}) was killed while replacing {path}; the previous output was put back"]
    elif staging is None:
        done = [f"an earlier run ({who}) was killed while deleting the previous output of {path} (--overwrite)"]
    else:
        done = [f"an earlier run ({who}) was killed while replacing {path}; its new output was in place"]
    for leftover in (staging, replaced):
        if leftover is not None and leftover.exists():
            remove_tree(leftover)
            done.append(f"deleted {leftover}, the previous output of {path} that it had set aside")
    journal_path_of(path).unlink()
    return done


def _recover_in_place(path: Path, journal: dict, replaced: Path, who: str) -> list[str]:
    """What a kill left of an in-place --overwrite: finished where the new output was complete (the old one deleted),
    the journal dropped where the old output was never set aside, the old output put back where the new run left
    nothing at the target; otherwise (the new run's unfinished output at the target, the old one aside) it is left
    for the opening run to continue (--resume), start over (--overwrite) or refuse."""
    if journal.get("new_complete"):
        remove_tree(replaced)
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
        move(replaced, path)  # over the empty folder, if any
        message = (
            f"an earlier run ({who}) was killed while replacing {path} (--overwrite) before its new output held "
            f"anything; the previous output was put back from {replaced}"
        )
    else:
        return []
    journal_path_of(path).unlink()
    return [message]


__all__ = [
    "InPlaceReplacement", "after_a_failed_replacement", "finish_in_place_replacement", "journal_path_of",
    "make_staging_directory", "recover_interrupted_replacement", "replace_with_staging", "set_aside",
    "unfinished_in_place_replacement", "unfinished_replacement_message",
]
