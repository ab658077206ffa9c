"""The output-directory policy (elmo_hf.storage.output_directory, ownership.py, replacement.py): ownership marker, what
overwrite may delete, cleanup after a failure, staged outputs, a kill at every step of a replacement (the lock:
test_lock.py)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from elmo_hf.storage.output_directory import (
    MARKER_NAME,
    OutputDirectoryError,
    OutputKind,
    OutputLock,
    check_deletable,
    check_output_directory,
    lock_path_of,
    open_output_directory,
    read_marker,
    staged_output_directory,
)

from ..helpers import run_in_forked_child

KIND = OutputKind(name="test-output", description="an elmo-hf test output", entries=("part-*.txt", "summary.json"))
OTHER_KIND = OutputKind(name="other-output", description="another output", entries=("part-*.txt",))


def make_output(path, kind=KIND):
    with open_output_directory(path, kind) as output:
        (output.path / "part-0.txt").write_text("ours")
    return path


def test_a_new_output_gets_its_marker_first_and_its_lock_is_released(tmp_path):
    output_dir = make_output(tmp_path / "out")
    marker = read_marker(output_dir)
    assert marker["kind"] == KIND.name and marker["format"] == "elmo-hf-output"
    assert not lock_path_of(output_dir).exists()
    assert sorted(path.name for path in output_dir.iterdir()) == [MARKER_NAME, "part-0.txt"]


def test_overwrite_deletes_only_its_own_kind_with_nothing_foreign_inside(tmp_path):
    output_dir = make_output(tmp_path / "out")
    with open_output_directory(output_dir, KIND, overwrite=True) as output:
        assert not (output.path / "part-0.txt").exists()  # the earlier output is gone
    (output_dir / "notes.txt").write_text("mine")
    with pytest.raises(OutputDirectoryError, match=r"holds files no elmo-hf run recorded writing .*: notes.txt; .*nothing "
                       "was deleted and these are kept"):
        with open_output_directory(output_dir, KIND, overwrite=True):
            pass
    assert (output_dir / "notes.txt").read_text() == "mine"
    with pytest.raises(OutputDirectoryError, match="of another kind .'test-output'."):
        check_deletable(output_dir, OTHER_KIND)

    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "manifest.json").write_text("{}")  # a file name is no proof of ownership
    with pytest.raises(OutputDirectoryError, match=r"is not an elmo-hf test output: it has no elmo-hf ownership marker.*manifest.json"):
        with open_output_directory(stranger, KIND, overwrite=True):
            pass
    assert (stranger / "manifest.json").exists()


def test_overwrite_deletes_by_the_record_of_what_was_written_never_by_name(tmp_path):
    """A file named like the kind's own (``part-9.txt`` matches ``part-*.txt``), one inside a folder the kind
    writes, or one of its own files changed by hand: none is in a run's record with that size, so nothing is
    deleted and the message names each."""
    output_dir = tmp_path / "out"
    with open_output_directory(output_dir, KIND) as output:
        (output.path / "part-0.txt").write_text("ours")
        (output.path / "part-1.txt").mkdir()
        (output.path / "part-1.txt" / "inner.txt").write_text("ours too")
    assert read_marker(output_dir)["files"] == {"part-0.txt": 4, "part-1.txt/inner.txt": 8}
    for mine, content in [("part-9.txt", "my analysis"), ("part-1.txt/MY_NOTES.txt", "mine"), ("part-0.txt", "edited!")]:
        before = (output_dir / mine).read_text() if (output_dir / mine).exists() else None
        (output_dir / mine).write_text(content)
        with pytest.raises(OutputDirectoryError, match=f"recorded writing \\(or changed since\\): {mine}; .*these are kept"):
            with open_output_directory(output_dir, KIND, overwrite=True):
                pass
        assert (output_dir / mine).read_text() == content and (output_dir / "part-1.txt" / "inner.txt").exists()
        (output_dir / mine).unlink() if before is None else (output_dir / mine).write_text(before)
    with staged_output_directory(output_dir, KIND, overwrite=True) as staging:  # all its own again: replaced
        (staging / "part-2.txt").write_text("new")
    assert sorted(read_marker(output_dir)["files"]) == ["part-2.txt"]

    legacy = make_output(tmp_path / "legacy")
    marker = read_marker(legacy)
    del marker["files"]
    (legacy / MARKER_NAME).write_text(json.dumps(marker))
    with pytest.raises(OutputDirectoryError, match="kept no list of the files it wrote.*nothing was deleted"):
        check_deletable(legacy, KIND)


def test_overwrite_never_deletes_the_working_directory_its_parents_home_root_or_an_input(tmp_path, monkeypatch):
    output_dir = tmp_path / "out"
    with open_output_directory(output_dir, KIND) as output:
        (output.path / "part-1.txt").write_text("input")
    inner = output_dir / "part-1.txt"
    monkeypatch.chdir(output_dir)
    with pytest.raises(OutputDirectoryError, match="is the current directory: it is never deleted"):
        check_deletable(output_dir, KIND)
    with pytest.raises(OutputDirectoryError, match="is a parent of the current directory"):
        check_deletable(tmp_path, KIND)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OutputDirectoryError, match="an input of this run or a directory holding one"):
        check_deletable(output_dir, KIND, inputs=[inner])
    monkeypatch.setenv("HOME", str(output_dir))
    with pytest.raises(OutputDirectoryError, match="the home directory"):
        check_deletable(output_dir, KIND)
    monkeypatch.delenv("HOME")
    with pytest.raises(OutputDirectoryError, match="is the root directory"):
        check_deletable(Path("/"), KIND)
    link = tmp_path / "link"
    link.symlink_to(output_dir)
    with pytest.raises(OutputDirectoryError, match="symbolic link"):
        check_deletable(link, KIND)
    check_deletable(output_dir, KIND)  # none of those: it may go


def test_an_existing_output_is_refused_without_resume_or_overwrite_and_a_file_is_never_an_output(tmp_path):
    output_dir = make_output(tmp_path / "out")
    with pytest.raises(OutputDirectoryError, match="already holds an elmo-hf test output; pass --resume .* or --overwrite"):
        with open_output_directory(output_dir, KIND):
            pass
    with open_output_directory(output_dir, KIND, resume=True) as output:
        assert output.resumed
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputDirectoryError, match="exists and is not a directory"):
        with open_output_directory(tmp_path / "file", KIND, overwrite=True):
            pass
    empty = tmp_path / "empty"
    empty.mkdir()
    with open_output_directory(empty, KIND) as output:  # an empty directory is claimed
        assert not output.resumed and (empty / MARKER_NAME).exists()


def test_a_folder_that_takes_no_new_files_is_named_with_the_reason(tmp_path, monkeypatch):
    """A read-only file system (or no permission, a full disk) where the lock or the output's folder would go. Made
    with a monkeypatch: tests often run as root, for whom a read-only mode bit changes nothing."""
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    real_open = os.open
    monkeypatch.setattr(os, "open", lambda path, *args: read_only() if str(path).endswith(".lock") else real_open(path, *args))
    with pytest.raises(OutputDirectoryError, match=f"cannot write output {tmp_path / 'out'}: its folder {tmp_path} does not "
                       "take new files \\(Read-only file system\\)"):
        with open_output_directory(tmp_path / "out", KIND):
            pass
    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(OutputDirectoryError, match=f"cannot create its folder {tmp_path / 'new'} \\(Read-only file system\\)"):
        with staged_output_directory(tmp_path / "new" / "out", KIND):
            pass
    assert sorted(tmp_path.iterdir()) == []


def test_a_failed_run_leaves_nothing_it_created_unless_it_is_worth_keeping(tmp_path):
    target = tmp_path / "new" / "parents" / "out"
    with pytest.raises(RuntimeError):
        with open_output_directory(target, KIND):
            (target / "part-0.txt").write_text("half")
            raise RuntimeError("failed")
    assert not (tmp_path / "new").exists()  # the output and the parents this run made

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(KeyboardInterrupt):
        with open_output_directory(empty, KIND):
            (empty / "part-0.txt").write_text("half")
            raise KeyboardInterrupt
    assert empty.is_dir() and not any(empty.iterdir())  # found empty, left empty

    kept = tmp_path / "kept"
    with pytest.raises(RuntimeError):
        with open_output_directory(kept, KIND, worth_keeping=lambda path: (path / "part-0.txt").exists()):
            (kept / "part-0.txt").write_text("finished")
            raise RuntimeError("failed later")
    assert (kept / "part-0.txt").read_text() == "finished" and not lock_path_of(kept).exists()

    resumed = make_output(tmp_path / "resumed")
    with pytest.raises(RuntimeError):
        with open_output_directory(resumed, KIND, resume=True):
            raise RuntimeError("failed")
    assert (resumed / "part-0.txt").exists()  # an existing output is never removed


def test_staged_output_gets_the_mode_of_any_new_folder(tmp_path):
    """Not mkdtemp's owner-only 0700: a converted model or an index others may read gets 0777 less the umask."""
    previous = os.umask(0o022)
    try:
        with staged_output_directory(tmp_path / "converted", KIND) as staging:
            (staging / "part-0.txt").write_text("done")
        os.umask(0o027)
        with staged_output_directory(tmp_path / "group-only", KIND):
            pass
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "converted").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "group-only").stat().st_mode) == 0o750


def test_staged_output_appears_only_complete(tmp_path):
    target = tmp_path / "a" / "converted"
    with pytest.raises(RuntimeError):
        with staged_output_directory(target, KIND) as staging:
            (staging / "part-0.txt").write_text("half")
            assert not target.exists()
            raise RuntimeError("failed")
    assert not (tmp_path / "a").exists()
    with staged_output_directory(target, KIND) as staging:
        (staging / "part-0.txt").write_text("done")
    assert (target / "part-0.txt").read_text() == "done" and read_marker(target)["kind"] == KIND.name
    assert sorted(path.name for path in target.parent.iterdir()) == ["converted"]  # no staging or lock left
    with pytest.raises(OutputDirectoryError, match="already exists; pass --overwrite"):
        with staged_output_directory(target, KIND):
            pass
    with staged_output_directory(target, KIND, overwrite=True) as staging:
        (staging / "part-1.txt").write_text("again")
    assert sorted(path.name for path in target.iterdir()) == [MARKER_NAME, "part-1.txt"]
    (target / "mine.txt").write_text("x")
    with pytest.raises(OutputDirectoryError, match="mine.txt"):
        with staged_output_directory(target, KIND, overwrite=True):
            pass
    assert (target / "mine.txt").exists()


# ----------------------------------------------------------------------------------------------------------------------
# Killed while replacing an output
# ----------------------------------------------------------------------------------------------------------------------


def tree_of(directory):
    """Every file under ``directory`` (the marker aside) with its sha256; None when ``directory`` is absent."""
    import hashlib

    if not directory.exists():
        return None
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*")) if path.is_file() and path.name != MARKER_NAME
    }


def _steps():
    """Each step a test may kill a run at: ``(owner, function, "before" or "after", its n-th call)``. The product has
    no crash points of its own; the child patches the function it calls at that step (``replacement.py``'s three
    disk-changing steps, the marker, the record)."""
    from elmo_hf.storage import output_directory, replacement
    from elmo_hf.storage.ownership import OutputDirectory

    return {
        "staging-written": (replacement, "write_journal", "before", 1),  # the staged output complete, no journal yet
        "journal-written": (replacement, "write_journal", "after", 1),
        "moved-aside": (replacement, "move", "after", 1),  # staged: the old output aside, the new one not in place
        "set-aside": (replacement, "move", "after", 1),  # in place: the old output aside
        "swapped": (replacement, "move", "after", 2),  # staged: the new output in place
        "new-complete": (replacement, "write_journal", "after", 2),  # in place: the journal says the new one is complete
        "new-marker-written": (output_directory, "write_marker", "after", 1),
        "recorded": (OutputDirectory, "record", "after", None),  # recorded:<n>, after the n-th record of the files
        "shard-recorded": (OutputDirectory, "settled", "after", None),  # shard-recorded:<n>: the manifest lists n shards
        "remove-old": (replacement, "delete_file", "after", None),  # remove-old:<n>: n files of the old output deleted
    }


def kill_at(step):
    """In this (child) process: SIGKILL it at ``step`` (a key of ``_steps()``, ``name:<n>`` for a counted one;
    ``"never"``: the work kills itself)."""
    import signal

    if step == "never":
        return
    name, _, count = step.partition(":")
    owner, function, when, nth = _steps()[name]
    nth = int(count) if nth is None else nth
    original, calls = getattr(owner, function), []

    def killed_there(*args, **kwargs):
        calls.append(None)
        if when == "before" and len(calls) == nth:
            os.kill(os.getpid(), signal.SIGKILL)
        result = original(*args, **kwargs)
        if when == "after" and len(calls) == nth:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(owner, function, killed_there)


def run_killed_at(step, work):
    """Run ``work()`` in a forked child killed (SIGKILL) at ``step`` (``kill_at``); return whether it was killed."""
    def killed_work():
        kill_at(step)
        work()

    status = run_in_forked_child(killed_work)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9


OLD_FILES = {f"part-{index}.txt": f"old {index}" for index in range(5)}
NEW_FILES = {"part-0.txt": "new 0", "part-1.txt": "new 1", "summary.json": "{}"}


def write_files(directory, files):
    for name, content in files.items():
        (directory / name).write_text(content)


def replace_with_new(target):
    with staged_output_directory(target, KIND, overwrite=True) as staging:
        write_files(staging, NEW_FILES)


SWAP_STEPS = ["staging-written", "journal-written", "moved-aside", "swapped", *(f"remove-old:{n}" for n in range(1, 7))]


@pytest.mark.parametrize("step", SWAP_STEPS)
def test_a_staged_output_killed_at_any_step_of_its_swap_is_whole_old_or_whole_new(tmp_path, step):
    """10 instants (every step of the swap, and after each file of the old output deleted): the target holds the
    whole old or the whole new output (or, between the two renames, nothing, the old output whole aside), and the
    next run names what it finished or deleted and leaves no hidden folder behind."""
    from elmo_hf.storage.output_directory import recover_interrupted_replacement

    target = tmp_path / "converted"
    with staged_output_directory(target, KIND) as staging:
        write_files(staging, OLD_FILES)
    old, new = tree_of(target), {name: __import__("hashlib").sha256(text.encode()).hexdigest() for name, text in NEW_FILES.items()}
    assert run_killed_at(step, lambda: replace_with_new(target)), f"the run never reached {step}"
    found = tree_of(target)
    if step == "moved-aside":  # two renames: between them the target is absent and the old output whole aside
        assert found is None and tree_of(next(tmp_path.glob(".converted.*.replaced"))) == old
    else:
        assert found in (old, new) and read_marker(target) is not None, f"killed at {step}: a mix {found}"
    leftovers = sorted(path.name for path in tmp_path.iterdir() if path.name.startswith(".converted."))

    lock = OutputLock(lock_path_of(target))
    lock.acquire()
    try:
        messages = recover_interrupted_replacement(target)
    finally:
        lock.release()
    after = tree_of(target)
    if step == "staging-written":  # killed before the journal: the old output stays, the staging folder is deleted
        assert after == old and any("unfinished staging folder" in message for message in messages)
    else:  # the journal was written with a complete new output: the replacement is finished
        assert after == new and any("killed while replacing" in message for message in messages)
    named = " ".join(messages)
    assert all(str(tmp_path / name) in named for name in leftovers if not name.endswith((".lock", ".swap")))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["converted"]  # no hidden folder, journal or lock left


def sha256_of_files(files):
    import hashlib

    return {name: hashlib.sha256(text.encode()).hexdigest() for name, text in files.items()}


def overwrite_in_place(target, mode="overwrite", fail=None, keep=lambda path: False):
    """The new output written in place, file by file, each recorded (``recorded:<n>`` steps) as a long run records
    after each checkpoint; ``mode``: "overwrite", "resume" or "" (neither)."""
    flags = {"overwrite": mode == "overwrite", "resume": mode == "resume"}
    with open_output_directory(target, KIND, worth_keeping=keep, **flags) as output:
        for name, content in NEW_FILES.items():
            (output.path / name).write_text(content)
            output.record()
            if fail == name:
                raise RuntimeError("failed")


def replaced_folders(parent):
    return sorted(parent.glob(".out.*.replaced"))


def assert_never_a_mix(target, old, new, step):
    """The target holds the whole old output, nothing, or only the new run's own files; until the new output is
    complete (the journal says so), the whole old output is at the target or at the journal's ``replaced``."""
    from elmo_hf.storage.output_directory import journal_path_of

    found = tree_of(target)
    if found == old:
        return
    assert found is None or all(new.get(name) == digest for name, digest in found.items()), f"{step}: a mix {found}"
    if not journal_path_of(target).exists():  # no replacement under way: the new output is complete
        assert found == new, f"{step}: {found}"
        return
    journal = json.loads(journal_path_of(target).read_text())
    if not journal.get("new_complete"):
        assert tree_of(target.parent / journal["replaced"]) == old, f"{step}: the old output is not whole aside"


IN_PLACE_STEPS = [
    "journal-written", "set-aside", "new-marker-written", "recorded:1", "recorded:2", "recorded:3", "recorded:4",
    "new-complete", *(f"remove-old:{n}" for n in range(1, 6)),
]


@pytest.mark.parametrize("then", ["resume", "", "overwrite"])
def test_an_output_overwritten_in_place_is_never_lost_before_the_new_one_is_complete(tmp_path, then, caplog):
    """``open_output_directory(overwrite=True)`` (embed, pretrain): killed at every step, before, during and after
    the new run, the target is never a mix and the whole old output exists until the new one is complete. The next
    run then: continues the new run (--resume) and deletes the old one when complete; is refused naming both
    (neither flag); starts the new run over, the old one still aside (--overwrite)."""
    target = tmp_path / "out"
    with open_output_directory(target, KIND) as output:
        write_files(output.path, OLD_FILES)
    old, new = tree_of(target), sha256_of_files(NEW_FILES)
    for step in IN_PLACE_STEPS:
        for entry in tmp_path.iterdir():  # a fresh start: the old output only
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        with open_output_directory(target, KIND) as output:
            write_files(output.path, OLD_FILES)
        assert run_killed_at(step, lambda: overwrite_in_place(target)), f"the run never reached {step}"
        assert_never_a_mix(target, old, new, step)
        aside = replaced_folders(tmp_path)
        before = step in ("journal-written", "set-aside")  # nothing of the new run yet: the old is (put back) at the target
        after = step == "new-complete" or step.startswith("remove-old")  # the new output was complete
        caplog.clear()
        if then == "":
            with pytest.raises(OutputDirectoryError) as refused:
                overwrite_in_place(target, mode="")
            if before or after:
                assert "already holds" in str(refused.value)
            else:
                assert f"{target} holds the unfinished output of a run that replaced it" in str(refused.value)
                assert f"kept whole at {aside[0]}" in str(refused.value) and "--resume" in str(refused.value)
                assert tree_of(aside[0]) == old
            assert_never_a_mix(target, old, new, step)
            continue
        overwrite_in_place(target, mode=then)
        expected = {**old, **new} if before and then == "resume" else new  # --resume of the old output put back
        assert tree_of(target) == expected, step
        assert sorted(path.name for path in tmp_path.iterdir()) == ["out"], step  # no .replaced, journal, lock
        assert all(str(path) in caplog.text for path in aside), step  # the old output's deletion is named


def test_an_in_place_overwrite_that_fails_puts_the_old_output_back_or_keeps_both(tmp_path, caplog):
    target = tmp_path / "out"
    with open_output_directory(target, KIND) as output:
        write_files(output.path, OLD_FILES)
    old, new = tree_of(target), sha256_of_files(NEW_FILES)

    # Nothing worth keeping: the new run's files are deleted (by its record) and the old output is put back.
    with pytest.raises(RuntimeError):
        overwrite_in_place(target, fail="part-1.txt")
    assert tree_of(target) == old and sorted(path.name for path in tmp_path.iterdir()) == ["out"]
    assert "deleted what it wrote and put the previous output back" in caplog.text

    # Worth keeping (a checkpoint, a finished shard): both are kept, and the message says how to go on.
    caplog.clear()
    with pytest.raises(RuntimeError):
        overwrite_in_place(target, fail="part-0.txt", keep=lambda path: (path / "part-0.txt").exists())
    aside = replaced_folders(tmp_path)
    assert tree_of(aside[0]) == old and tree_of(target) == {"part-0.txt": new["part-0.txt"]}
    assert f"previous output is kept whole at {aside[0]}" in caplog.text and "--resume" in caplog.text
    with pytest.raises(OutputDirectoryError, match="holds the unfinished output of a run that replaced it"):
        with staged_output_directory(target, KIND, overwrite=True):
            pass
    # A resumed run that fails with nothing worth keeping puts the old output back too.
    with pytest.raises(RuntimeError):
        overwrite_in_place(target, mode="resume", fail="part-0.txt")
    assert tree_of(target) == old and sorted(path.name for path in tmp_path.iterdir()) == ["out"]

    # Kept both, then --resume completes: the old output is deleted, and the message says so.
    with pytest.raises(RuntimeError):
        overwrite_in_place(target, fail="part-0.txt", keep=lambda path: True)
    caplog.clear()
    overwrite_in_place(target, mode="resume")
    assert tree_of(target) == new and sorted(path.name for path in tmp_path.iterdir()) == ["out"]
    assert "is complete: deleted the previous output" in caplog.text

    # Going back instead: delete the unfinished new output; the next run puts the old one back.
    with pytest.raises(RuntimeError):
        overwrite_in_place(target, fail="part-0.txt", keep=lambda path: True)
    shutil.rmtree(target)
    with pytest.raises(OutputDirectoryError, match="already holds"):
        overwrite_in_place(target, mode="")
    assert tree_of(target) == new and sorted(path.name for path in tmp_path.iterdir()) == ["out"]


def test_the_next_run_deletes_only_its_own_unfinished_staging_folders(tmp_path):
    """`out`'s run deletes `.out.<8 hex>.staging` left unfinished, never the staging folder of `out.v2`
    (`.out.v2.<hex>.staging`), which another run may be writing under its own lock."""
    from elmo_hf.storage.output_directory import recover_interrupted_replacement

    own, other = tmp_path / ".out.0123abcd.staging", tmp_path / ".out.v2.0123abcd.staging"
    for folder in (own, other):
        folder.mkdir()
        (folder / MARKER_NAME).write_text(json.dumps({"format": "elmo-hf-output", "version": 1, "kind": KIND.name}))
    messages = recover_interrupted_replacement(tmp_path / "out")
    assert not own.exists() and other.exists() and messages == [
        f"deleted {own}, an unfinished staging folder left by an earlier run that was killed or failed"
    ]


def test_the_check_before_the_lock_refuses_what_opening_refuses_and_writes_nothing(tmp_path):
    """`check_output_directory` answers as `open_output_directory` would, with the same messages, taking no lock and
    writing nothing; where a lock file or a replacement's journal is there it leaves the answer to the locked run."""
    assert check_output_directory(tmp_path / "new", KIND) == "new" and not (tmp_path / "new").exists()
    output_dir = make_output(tmp_path / "out")
    before = sorted(path.name for path in tmp_path.iterdir())
    assert check_output_directory(output_dir, KIND, resume=True) == "resume"
    assert check_output_directory(output_dir, KIND, overwrite=True) == "overwrite"
    (output_dir / "notes.txt").write_text("mine")
    for options in ({}, {"overwrite": True}, {"resume": True}):
        with pytest.raises(OutputDirectoryError) as early:
            check_output_directory(output_dir, KIND, **options)
        with pytest.raises(OutputDirectoryError) as opening:
            with open_output_directory(output_dir, KIND, **options):
                pass
        assert str(early.value) == str(opening.value)
    with pytest.raises(OutputDirectoryError, match=r"it is not an elmo-hf test output \(an elmo-hf output of kind 'other-output'"):
        check_output_directory(make_output(tmp_path / "other", OTHER_KIND), KIND, resume=True)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([*before, "other"])
    lock_path_of(output_dir).write_text("")
    assert check_output_directory(output_dir, KIND) is None


# ----------------------------------------------------------------------------------------------------------------------
# Issue 51: nothing is written through a planted link, and nothing is deleted that no record lists
# ----------------------------------------------------------------------------------------------------------------------


def test_overwrite_keeps_a_users_dot_tmp_file(tmp_path):
    """Issue 51, item 2: names starting with `.` and ending in `.tmp` were never counted as unrecorded, so
    `OUT/.draft.tmp` was deleted with the old output."""
    output_dir = make_output(tmp_path / "out")
    (output_dir / ".draft.tmp").write_text("the user's draft")
    with pytest.raises(OutputDirectoryError, match=r"files no elmo-hf run recorded writing .*: \.draft\.tmp;"):
        with open_output_directory(output_dir, KIND, overwrite=True):
            pass
    assert (output_dir / ".draft.tmp").read_text() == "the user's draft"
    (output_dir / ".draft.tmp").unlink()
    with open_output_directory(output_dir, KIND, overwrite=True):
        pass


def test_overwrite_keeps_a_link_named_like_the_kinds_own_and_what_it_points_to(tmp_path):
    """A link planted as ``part-9.txt`` (the kind's own pattern) is in no record: refused, named, and neither the link
    nor its target is touched."""
    output_dir = make_output(tmp_path / "out")
    target = tmp_path / "elsewhere.txt"
    target.write_text("the user's file")
    (output_dir / "part-9.txt").symlink_to(target)
    with pytest.raises(OutputDirectoryError, match=r"part-9\.txt"):
        with open_output_directory(output_dir, KIND, overwrite=True):
            pass
    assert (output_dir / "part-9.txt").is_symlink() and target.read_text() == "the user's file"


def test_the_marker_is_never_written_through_a_link_or_over_a_file_planted_under_its_name(tmp_path):
    """The marker is created with O_EXCL | O_NOFOLLOW in a folder just made or found empty: a link (or a file) planted
    under its name meanwhile is refused and neither it nor the link's target is written."""
    from elmo_hf.storage.ownership import write_marker

    victim = tmp_path / "precious.txt"
    victim.write_text("the user's data")
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / MARKER_NAME).symlink_to(victim)
    with pytest.raises(OutputDirectoryError, match="appeared while the run was making its new output there"):
        write_marker(folder / MARKER_NAME, KIND)
    assert victim.read_text() == "the user's data" and (folder / MARKER_NAME).is_symlink()
    (folder / MARKER_NAME).unlink()
    (folder / MARKER_NAME).write_text("theirs")
    with pytest.raises(OutputDirectoryError, match="it is not overwritten"):
        write_marker(folder / MARKER_NAME, KIND)
    assert (folder / MARKER_NAME).read_text() == "theirs"


def test_a_temporary_file_a_killed_run_left_is_proven_its_own_by_the_recorded_token(tmp_path):
    from elmo_hf.storage.files import temporary_path_beside

    output_dir = tmp_path / "out"
    with open_output_directory(output_dir, KIND) as output:
        (output.path / "part-0.txt").write_text("ours")
        ours = temporary_path_beside(output.path / "part-1.txt")  # as a kill would leave it
    token = read_marker(output_dir)["temporaries"]
    assert token in ours.name and ours.name.startswith(".part-1.txt.")
    assert temporary_path_beside(output_dir / "x").name.count(".") == 3  # outside an open output: no token
    (output_dir / "x").unlink(missing_ok=True)
    for leftover in output_dir.glob(".x.*.tmp"):
        leftover.unlink()
    with open_output_directory(output_dir, KIND, overwrite=True):  # proven: the old output goes, with it
        pass
    assert not ours.exists()


def _own_record(directory):
    try:
        return {**json.loads((directory / "record.json").read_text()), "record.json": (directory / "record.json").stat().st_size}
    except FileNotFoundError:
        return {}


# A kind that records each file it writes (as the embedding manifest does), in record.json.
RECORDING_KIND = OutputKind(name="recording", description="a recording output", entries=("part-*.txt", "record.json"), own_record=_own_record)


def write_recorded(directory, name, text):
    (directory / name).write_text(text)
    record = {**_own_record(directory), name: len(text.encode())}
    record.pop("record.json", None)
    (directory / "record.json").write_text(json.dumps(record))


def test_a_failed_overwrite_keeps_both_when_the_new_output_holds_a_file_no_record_lists(tmp_path, caplog):
    """A failed in-place --overwrite puts the old output back only when the new one is provably the run's own: a
    user's file put there during the run keeps both (never deleted)."""
    output_dir = tmp_path / "out"
    with open_output_directory(output_dir, RECORDING_KIND):
        write_recorded(output_dir, "part-0.txt", "ours")
    with pytest.raises(RuntimeError):
        with open_output_directory(output_dir, RECORDING_KIND, overwrite=True):
            write_recorded(output_dir, "part-0.txt", "new")
            (output_dir / "notes.txt").write_text("written by the user during the run")
            raise RuntimeError("failed")
    assert (output_dir / "notes.txt").read_text() == "written by the user during the run"
    assert "it holds files no run recorded (notes.txt)" in caplog.text
    assert [sorted(tree_of(path)) for path in tmp_path.glob(".out.*.replaced")] == [["part-0.txt", "record.json"]]


def test_a_failed_run_removes_only_empty_parent_folders_it_created(tmp_path):
    """The folders made for the output go again after a failure, but never a file someone put in them meanwhile."""
    target = tmp_path / "new" / "parents" / "out"
    with pytest.raises(RuntimeError):
        with open_output_directory(target, KIND):
            (tmp_path / "new" / "theirs.txt").write_text("not the run's")
            raise RuntimeError("failed")
    assert (tmp_path / "new" / "theirs.txt").read_text() == "not the run's"
    assert not (tmp_path / "new" / "parents").exists()

    kept = tmp_path / "made" / "out"
    with pytest.raises(RuntimeError):
        with open_output_directory(kept, KIND, worth_keeping=lambda path: True):
            (kept / "part-0.txt").write_text("finished")
            raise RuntimeError("failed later")
    assert (kept / "part-0.txt").read_text() == "finished"  # kept, and so is the folder made for it

    existing = tmp_path / "existing-empty"
    existing.mkdir()
    with pytest.raises(RuntimeError):
        with open_output_directory(existing / "out", KIND):
            raise RuntimeError("failed")
    assert existing.is_dir() and not any(existing.iterdir())  # not made by the run: stays, though empty


def test_put_in_place_killed_between_its_moves_leaves_only_proven_files_and_a_resume_clears_its_folder(tmp_path):
    """``OutputDirectory.put_in_place`` (files whose names the writer chooses): killed after the first of three
    files is moved to its final name, every file left (the moved one, the rest in the hidden folder) is proven the
    run's by the in-flight record; a resume keeps that record (the moved file stays proven, so --overwrite later
    deletes it), deletes the unfinished folder, and its next record lists the moved file."""
    from elmo_hf.storage import ownership

    output_dir = tmp_path / "out"
    with open_output_directory(output_dir, RECORDING_KIND):
        write_recorded(output_dir, "part-0.txt", "ours")

    def write_three(folder):
        for name in ("a.json", "b.json", "c.json"):
            (folder / name).write_text(name)

    def killed_after_the_first_move():
        original = os.replace

        def replace(source, destination, *args, **kwargs):
            original(source, destination, *args, **kwargs)
            if Path(destination).name == "a.json":
                os.kill(os.getpid(), 9)

        ownership.os.replace = replace
        with open_output_directory(output_dir, RECORDING_KIND, resume=True) as output:
            output.put_in_place(write_three)

    status = run_in_forked_child(killed_after_the_first_move)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9, status
    left = sorted(ownership.files_in(output_dir))
    assert "a.json" in left and any(name.startswith(ownership.WRITING_PREFIX) for name in left), left
    assert ownership.unproven_files(output_dir, RECORDING_KIND) == []
    with open_output_directory(output_dir, RECORDING_KIND, resume=True) as output:
        assert not list(output_dir.glob(f"{ownership.WRITING_PREFIX}*"))
        assert ownership.unproven_files(output_dir, RECORDING_KIND) == []  # the killed run's in-flight record kept
    assert sorted(ownership.files_in(output_dir)) == ["a.json", "part-0.txt", "record.json"]
    assert ownership.read_marker(output_dir)["files"]["a.json"] == len("a.json")
    with open_output_directory(output_dir, RECORDING_KIND, overwrite=True):
        pass
    assert sorted(ownership.files_in(output_dir)) == []
