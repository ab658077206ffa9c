"""`elmo-hf pretrain`'s output is deleted and trusted by record only (elmo_hf/pretraining/output.py): a file of the
user's named like the run's is refused by name on --resume, --overwrite and after a failure, and a run killed while it
writes a checkpoint or its final files leaves only what its record lists."""

from __future__ import annotations

import json
import os
import shutil
import signal

import pytest

from elmo_hf.pretraining.output import PRETRAINING_OUTPUT
from elmo_hf.pretraining.run import REPORT_FILE_NAME
from elmo_hf.storage.ownership import MARKER_NAME, unproven_files
from elmo_hf_cli import main
from elmo_hf_cli.common import EXIT_USAGE_ERROR

from ..helpers import run_in_forked_child
from .test_run import corpus, one_torch_thread, pretrain_args  # noqa: F401 (fixtures)

# A file of the user's for each name the run's own files take: a checkpoint folder, a checkpoint-like file, a folder.
USERS_FILES = ["checkpoint-99/notes.txt", "checkpoint-5", "runs/mine.txt"]
TWO_CHECKPOINTS = ["--max-steps", 2, "--save-steps", 1, "--eval-steps", 0]


def put_users_file(output, name):
    (output / name).parent.mkdir(parents=True, exist_ok=True)
    (output / name).write_text("mine")


@pytest.mark.parametrize("users_file", USERS_FILES)
def test_resume_and_overwrite_refuse_a_users_file_named_like_the_runs(corpus, tmp_path, capsys, users_file):
    """--resume used to take ``checkpoint-99/`` for an incomplete checkpoint of the run and delete it (and to trust
    anything named ``checkpoint-*`` or ``runs``); now both --resume and --overwrite name the file and keep it."""
    output = tmp_path / "run"
    assert main(pretrain_args(corpus, output, *TWO_CHECKPOINTS)) == 0
    put_users_file(output, users_file)
    capsys.readouterr()
    for flag in ("--resume", "--overwrite"):
        assert main(pretrain_args(corpus, output, *TWO_CHECKPOINTS, flag)) == EXIT_USAGE_ERROR, flag
        error = capsys.readouterr().err
        assert users_file in error and "move" in error.lower(), (flag, error)
        assert (output / users_file).read_text() == "mine"
    (output / users_file).unlink()
    (output / users_file).parent.rmdir() if "/" in users_file else None
    assert main(pretrain_args(corpus, output, *TWO_CHECKPOINTS, "--resume")) == 0


def test_a_failed_new_run_deletes_what_it_wrote_and_keeps_the_users_file(corpus, tmp_path, monkeypatch, caplog):
    """The clean-up after a failure used to delete the whole folder the run had created, with a file the user put in
    it meanwhile; now it deletes what the run's record lists and keeps the user's file, named."""
    from elmo_hf.pretraining.trainer import ELMoPreTrainingTrainer

    output = tmp_path / "run"

    def user_writes_then_the_disk_fills(self, *args, **kwargs):
        put_users_file(output, "checkpoint-99/notes.txt")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ELMoPreTrainingTrainer, "train", user_writes_then_the_disk_fills)
    assert main(pretrain_args(corpus, output, *TWO_CHECKPOINTS)) != 0
    assert (output / "checkpoint-99/notes.txt").read_text() == "mine"
    assert sorted(path.relative_to(output).as_posix() for path in output.rglob("*")) == [
        MARKER_NAME, "checkpoint-99", "checkpoint-99/notes.txt"  # the marker stays with what it does not list
    ]
    assert "kept what no elmo-hf record lists: checkpoint-99/notes.txt" in caplog.text


def _killed(step_owner, function, nth, when="before"):
    """Patch ``step_owner.function`` (in the forked child) to SIGKILL the process at its ``nth`` call."""
    original, calls = getattr(step_owner, function), []

    def killed_there(*args, **kwargs):
        calls.append(None)
        if when == "before" and len(calls) == nth:
            os.kill(os.getpid(), signal.SIGKILL)
        result = original(*args, **kwargs)
        if when == "after" and len(calls) == nth:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(step_owner, function, killed_there)


def _final_file_moved(name):
    """SIGKILL the child right after the run moves its final ``name`` into place."""
    import elmo_hf.storage.ownership as ownership

    original = ownership.os.replace

    def replace(source, destination, *args, **kwargs):
        original(source, destination, *args, **kwargs)
        if str(destination).endswith(f"/run/{name}"):
            os.kill(os.getpid(), signal.SIGKILL)

    ownership.os.replace = replace


def kill_with_checkpoint_2_half_written():
    from elmo_hf.pretraining import trainer

    _killed(trainer, "_complete_checkpoint", 2)  # checkpoint-2's files written, its record not


def kill_with_the_final_model_half_saved():
    _final_file_moved("model.safetensors")


@pytest.mark.parametrize("kill", [kill_with_checkpoint_2_half_written, kill_with_the_final_model_half_saved])
def test_a_run_killed_while_writing_is_resumed_and_overwritten_without_refusing_its_own_files(corpus, tmp_path, kill):
    """SIGKILL while a checkpoint folder is half written, or while the final files are being put in place: no record()
    has listed them yet, but the marker recorded them in flight before they existed, so --resume finishes the run and
    --overwrite (of a copy of the same killed output) starts again; neither refuses the run's own files."""
    output = tmp_path / "run"

    def killed_run():
        kill()
        main(pretrain_args(corpus, output, *TWO_CHECKPOINTS))

    status = run_in_forked_child(killed_run)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    assert not (output / REPORT_FILE_NAME).exists() and (output / "checkpoint-1").is_dir()
    assert unproven_files(output, PRETRAINING_OUTPUT) == []  # every file of the killed run is proven its own
    copy = tmp_path / "copy"
    shutil.copytree(output, copy, symlinks=True)

    assert main(pretrain_args(corpus, output, *TWO_CHECKPOINTS, "--resume")) == 0
    assert json.loads((output / REPORT_FILE_NAME).read_text())["steps"] == 2
    assert unproven_files(output, PRETRAINING_OUTPUT) == [] and not list(output.glob(".writing.*"))
    assert main(pretrain_args(corpus, copy, *TWO_CHECKPOINTS, "--overwrite")) == 0
    assert unproven_files(copy, PRETRAINING_OUTPUT) == [] and (copy / REPORT_FILE_NAME).is_file()
