"""Atomic writes (elmo_hf.storage.files): a failed write leaves the old file and no temporary, and names the file; the
two steps apart (fill in one process, move into place in another) do the same; a Ctrl-C leaves no temporary file."""

from __future__ import annotations

import errno
import os
import signal

import pytest

from elmo_hf.storage import files as files_module
from elmo_hf.storage.files import (
    TEMPORARY_SUFFIX, fill_temporary, move_into_place, sha256_of_file, temporary_file_beside, temporary_path_beside,
    write_atomically,
)


def test_a_failed_write_keeps_the_old_file_leaves_no_temporary_and_names_the_file(tmp_path):
    target = tmp_path / "shard-00000.parquet"
    write_atomically(target, lambda temporary: temporary.write_bytes(b"first"))

    def disk_full(temporary):
        temporary.write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match=r"cannot write .*shard-00000.parquet: No space left on device") as failure:
        write_atomically(target, disk_full)
    assert failure.value.errno == errno.ENOSPC
    assert target.read_bytes() == b"first" and [path.name for path in tmp_path.iterdir()] == [target.name]
    with pytest.raises(KeyboardInterrupt):
        write_atomically(target, lambda temporary: (_ for _ in ()).throw(KeyboardInterrupt))
    assert [path.name for path in tmp_path.iterdir()] == [target.name]


def test_temporary_names_are_unique_per_call_hidden_and_marked(tmp_path):
    target = tmp_path / "manifest.json"
    first, second = temporary_path_beside(target), temporary_path_beside(target)
    assert first != second and first.exists() and second.exists()
    assert all(path.name.startswith(".manifest.json.") and path.name.endswith(TEMPORARY_SUFFIX) for path in (first, second))
    target.write_bytes(b"abc")
    assert sha256_of_file(target) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_a_file_written_atomically_gets_the_mode_of_any_new_file(tmp_path):
    """0666 less the umask, as `open` gives: mkstemp's 0600 made shards, manifests and markers owner-only."""
    import os
    import stat

    previous = os.umask(0o022)
    try:
        write_atomically(tmp_path / "shared.json", lambda temporary: temporary.write_text("{}"))
        (tmp_path / "plain.json").write_text("{}")
        os.umask(0o027)
        write_atomically(tmp_path / "group.json", lambda temporary: temporary.write_text("{}"))
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "shared.json").stat().st_mode) == stat.S_IMODE((tmp_path / "plain.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "group.json").stat().st_mode) == 0o640


def test_filling_and_moving_apart_put_the_file_in_place_and_a_failure_of_either_leaves_no_temporary(tmp_path):
    target = tmp_path / "shard-00001.parquet"
    temporary = temporary_path_beside(target)
    fill_temporary(temporary, target, lambda path: path.write_bytes(b"vectors"))
    assert not target.exists() and temporary.read_bytes() == b"vectors"  # filled, not in place yet
    move_into_place(temporary, target)
    assert target.read_bytes() == b"vectors" and [path.name for path in tmp_path.iterdir()] == [target.name]

    def disk_full(path):
        path.write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    temporary = temporary_path_beside(target)
    with pytest.raises(OSError, match=r"cannot write .*shard-00001.parquet: No space left on device"):
        fill_temporary(temporary, target, disk_full)
    assert [path.name for path in tmp_path.iterdir()] == [target.name] and target.read_bytes() == b"vectors"

    blocked = tmp_path / "shard-00002.parquet"
    (blocked / "inside").mkdir(parents=True)  # a non-empty directory where the file goes: the rename fails
    temporary = temporary_path_beside(blocked)
    fill_temporary(temporary, blocked, lambda path: path.write_bytes(b"more"))
    with pytest.raises(OSError, match=r"cannot write .*shard-00002.parquet"):
        move_into_place(temporary, blocked)
    assert sorted(path.name for path in tmp_path.iterdir()) == [target.name, blocked.name]


def test_the_file_is_flushed_to_disk_by_the_move_before_its_rename(tmp_path, monkeypatch):
    """A worker that fills a shard never waits on the disk; the process that moves it flushes it first, then renames it
    (a crash after the rename finds the whole file), then flushes the directory."""
    from elmo_hf.storage import files as files_module

    events = []
    original_fsync, original_replace = os.fsync, os.replace
    monkeypatch.setattr(files_module.os, "fsync", lambda fd: events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))) or original_fsync(fd))
    monkeypatch.setattr(files_module.os, "replace", lambda source, target: events.append(("replace", str(source))) or original_replace(source, target))
    target = tmp_path / "shard-00001.parquet"
    temporary = temporary_path_beside(target)
    fill_temporary(temporary, target, lambda path: path.write_bytes(b"vectors"))
    assert events == []
    move_into_place(temporary, target)
    assert events == [("fsync", str(temporary)), ("replace", str(temporary)), ("fsync", str(tmp_path))]


def test_a_temporary_file_for_a_block_is_removed_when_the_block_fails(tmp_path):
    with pytest.raises(ValueError, match="no more"):
        with temporary_file_beside(tmp_path / "out.bin") as temporary:
            temporary.write_bytes(b"half")
            raise ValueError("no more")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.usefixtures("ctrl_c_as_from_a_terminal")
def test_a_ctrl_c_while_the_temporary_file_is_made_leaves_nothing(tmp_path, monkeypatch):
    """The Ctrl-C lands right after the file exists, before the caller holds its name: it waits until the name is
    held, so the cleanup finds the file (without the wait the file stays, named by no one)."""
    made = []

    def made_then_ctrl_c(path):
        made.append(original(path))
        signal.raise_signal(signal.SIGINT)
        return made[-1]

    original = files_module.temporary_path_beside
    monkeypatch.setattr(files_module, "temporary_path_beside", made_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        write_atomically(tmp_path / "manifest.json", lambda temporary: temporary.write_text("{}"))
    assert len(made) == 1 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("failure", [OSError(5, "Input/output error"), ValueError("bad table"), KeyboardInterrupt()])
def test_a_failed_fill_removes_its_temporary_file(tmp_path, failure):
    """Whatever stops the writer (an OSError, another error, Ctrl-C), the temporary file it was filling is gone."""
    target = tmp_path / "shard-00003.parquet"
    temporary = temporary_path_beside(target)

    def fails(path):
        path.write_bytes(b"half")
        raise failure

    with pytest.raises(type(failure)):
        fill_temporary(temporary, target, fails)
    assert list(tmp_path.iterdir()) == []
