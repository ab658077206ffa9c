"""The lock of an output directory (elmo_hf.storage.lock): one writer, a crashed run's lock taken over by exactly one
run, nothing written through a planted link."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from elmo_hf.storage.lock import OutputLock, lock_path_of
from elmo_hf.storage.output_directory import OutputDirectoryError, open_output_directory

from .test_output_directory import KIND


def test_a_second_run_is_refused_naming_the_holder(tmp_path):
    output_dir = tmp_path / "out"
    with open_output_directory(output_dir, KIND):
        with pytest.raises(OutputDirectoryError) as refusal:
            with open_output_directory(output_dir, KIND, resume=True):
                pass
    message = str(refusal.value)
    assert f"pid {os.getpid()} on host {socket.gethostname()}" in message and f"rm {lock_path_of(output_dir)}" in message


def test_a_lock_left_by_a_dead_process_is_taken_over_and_any_other_is_reported(tmp_path, caplog):
    output_dir = tmp_path / "out"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = {"pid": int(dead.stdout), "host": socket.gethostname(), "process_start": None, "started": "then", "command": "x"}
    lock_path_of(output_dir).write_text(json.dumps(stale))
    with open_output_directory(output_dir, KIND):
        pass
    assert "taking over the lock" in caplog.text and not lock_path_of(output_dir).exists()

    lock_path_of(output_dir).write_text(json.dumps({**stale, "host": "another-machine"}))
    with pytest.raises(OutputDirectoryError, match="host another-machine.*rm "):
        with open_output_directory(output_dir, KIND, resume=True):
            pass
    lock_path_of(output_dir).write_text("garbage")  # not a lock elmo-hf writes (it writes its holder whole): kept
    with pytest.raises(OutputDirectoryError, match=r"holds something other than an elmo-hf lock .* not overwritten"):
        OutputLock(lock_path_of(output_dir)).acquire()
    assert lock_path_of(output_dir).read_text() == "garbage"


def _try_the_lock(directory, start, results, done):
    """One of the racing runs: a 50 ms pause inside the staleness check widens any window between checking a stale
    lock and taking it (the pause made the old check-then-unlink takeover give two holders in 5 of 5 trials)."""
    import time

    from elmo_hf.storage import lock as lock_module

    check = lock_module._holder_is_gone
    lock_module._holder_is_gone = lambda holder: (time.sleep(0.05), check(holder))[1]
    lock = OutputLock(lock_path_of(Path(directory)))
    start.wait()
    try:
        lock.acquire()
        results.put(True)
    except OutputDirectoryError:
        results.put(False)
    done.wait()  # every run has tried before the winner lets go
    lock.release()


def _stale_holder():
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return {"pid": int(dead.stdout), "host": socket.gethostname(), "process_start": None, "started": "then", "command": "x"}


@pytest.mark.parametrize("trials", [pytest.param(20, id="20-trials"), pytest.param(200, id="200-trials", marks=pytest.mark.slow)])
def test_a_stale_lock_is_taken_over_by_exactly_one_of_eight_runs_starting_together(tmp_path, trials):
    import multiprocessing

    context = multiprocessing.get_context("fork")
    stale = json.dumps(_stale_holder())
    for trial in range(trials):
        output_dir = tmp_path / f"out-{trial}"
        lock_path_of(output_dir).write_text(stale)
        start, done, results = context.Barrier(8), context.Barrier(8), context.Queue()
        runs = [context.Process(target=_try_the_lock, args=(str(output_dir), start, results, done)) for _ in range(8)]
        for run in runs:
            run.start()
        holders = sum(results.get(timeout=60) for _ in runs)
        for run in runs:
            run.join(timeout=60)
        assert holders == 1, f"trial {trial}: {holders} runs hold the lock"
        assert not lock_path_of(output_dir).exists()  # the winner released it


def test_release_never_removes_a_lock_another_run_holds(tmp_path):
    """The first run's lock file is removed by hand (as the refusal message suggests) and a second run takes a new
    one; when the first run ends it must leave the second run's lock alone."""
    output_dir = tmp_path / "out"
    first = OutputLock(lock_path_of(output_dir))
    first.acquire()
    lock_path_of(output_dir).unlink()
    second = OutputLock(lock_path_of(output_dir))
    second.acquire()
    first.release()
    assert json.loads(lock_path_of(output_dir).read_text())["pid"] == os.getpid()
    with pytest.raises(OutputDirectoryError, match="is locked by"):  # still held
        OutputLock(lock_path_of(output_dir)).acquire()
    second.release()
    assert not lock_path_of(output_dir).exists()


def test_a_lock_held_by_a_killed_run_is_free_at_once(tmp_path):
    """The kernel lets go of a dead run's flock: killed with SIGKILL, its lock is taken over without waiting."""
    output_dir = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from elmo_hf.storage.output_directory "
         "import OutputLock, lock_path_of; OutputLock(lock_path_of(Path(sys.argv[1]))).acquire(); print('held', flush=True); time.sleep(60)",
         str(output_dir)], stdout=subprocess.PIPE, text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(OutputDirectoryError, match=f"pid {holder.pid}"):
        OutputLock(lock_path_of(output_dir)).acquire()
    holder.kill()
    holder.wait()
    lock = OutputLock(lock_path_of(output_dir))
    lock.acquire()
    lock.release()


def test_a_reused_pid_is_not_its_old_holder(tmp_path):
    """Same host, a running pid (this one), its flock free: the kernel holds a live holder's flock, so the free flock
    proves the run that wrote this file gone (its pid may have been reused): taken over."""
    output_dir = tmp_path / "out"
    holder = OutputLock(lock_path_of(output_dir)).holder
    lock_path_of(output_dir).write_text(json.dumps({**holder, "process_start": "1"}))
    with open_output_directory(output_dir, KIND):
        pass


def test_a_lock_file_planted_as_a_link_or_hard_link_is_refused_and_its_target_untouched(tmp_path):
    """Issue 51, item 3: the lock was opened without O_NOFOLLOW and its unreadable content taken for a stale lock, so a
    link planted as `.OUT.elmo-hf.lock` made a run overwrite the link's target with JSON."""
    victim = tmp_path / "precious.txt"
    victim.write_text("the user's data")
    output_dir = tmp_path / "out"
    lock_path_of(output_dir).symlink_to(victim)
    with pytest.raises(OutputDirectoryError, match=r"lock file .*\.out\.elmo-hf\.lock is a symbolic link .*precious"):
        with open_output_directory(output_dir, KIND):
            pass
    assert victim.read_text() == "the user's data" and not output_dir.exists()
    lock_path_of(output_dir).unlink()
    os.link(victim, lock_path_of(output_dir))  # a hard link: the same file under the lock's name
    with pytest.raises(OutputDirectoryError, match="a file with 2 links"):
        with open_output_directory(output_dir, KIND):
            pass
    assert victim.read_text() == "the user's data"
    lock_path_of(output_dir).unlink()
    with open_output_directory(output_dir, KIND):
        assert not lock_path_of(output_dir).is_symlink() and os.stat(lock_path_of(output_dir)).st_nlink == 1


def test_a_lock_file_released_between_its_open_and_its_flock_is_opened_again(tmp_path, monkeypatch):
    """The re-check after the flock: a lock file unlinked (released by another run) between our open and our flock
    is not the lock at the path any more; holding it would let a third run take the path's new file too."""
    from elmo_hf.storage import lock as lock_module

    output_dir = tmp_path / "out"
    real_flock, calls = lock_module.fcntl.flock, []

    def released_first(descriptor, operation):
        if not calls and operation & lock_module.fcntl.LOCK_EX:
            lock_path_of(output_dir).unlink()  # the other run's release
        calls.append(operation)
        return real_flock(descriptor, operation)

    monkeypatch.setattr(lock_module.fcntl, "flock", released_first)
    lock = OutputLock(lock_path_of(output_dir))
    lock.acquire()
    try:
        held, at_path = os.fstat(lock._descriptor), os.stat(lock_path_of(output_dir))
        assert (held.st_dev, held.st_ino) == (at_path.st_dev, at_path.st_ino) and len(calls) == 2
    finally:
        lock.release()
