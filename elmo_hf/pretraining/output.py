"""The output directory of ``elmo-hf pretrain``: how a run opens it (only the main process under ``torchrun``; the
others get its path and checkpoint by a broadcast), and how it records every file in the marker before writing it
(``RunOutput``), so that a run killed at any instant leaves only files a record lists and ``--resume`` and
``--overwrite`` go on without refusing the run's own. Why: docs/design/pretraining-trainer.md, "The output
directory".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import TrainingArguments

from ..corpus.vocabulary import COUNTS_FILE_NAME, VOCABULARY_FILE_NAME
from ..storage.output_directory import OutputDirectory, OutputKind, open_output_directory
from .options import (
    CHECKPOINT_PREFIX, HDF5_DIRECTORY_NAME, OPTIONS_CHANGEABLE_ON_RESUME, PRETRAINING_OPTIONS_FILE_NAME,
    REPORT_FILE_NAME, PretrainingError, PretrainingOptions,
)
from .trainer import checkpoint_problem, checkpoints_of, latest_complete_checkpoint


def _recorded_in_the_marker(directory: Path) -> dict[str, int]:
    """A pre-training output keeps no record of its own: every file it writes is in its marker (in flight first)."""
    return {}


PRETRAINING_OUTPUT = OutputKind(
    name="pretraining",
    description="an elmo-hf pre-training output",
    entries=(
        f"{CHECKPOINT_PREFIX}*", "config.json", "model.safetensors", "tokenizer_config.json", "*.py", VOCABULARY_FILE_NAME,
        COUNTS_FILE_NAME, PRETRAINING_OPTIONS_FILE_NAME, REPORT_FILE_NAME, "trainer_state.json", HDF5_DIRECTORY_NAME,
    ),
    own_record=_recorded_in_the_marker,
)


@dataclass
class RunOutput:
    """The output directory as one process of the run sees it: ``path``, the ``checkpoint`` to resume from (or
    None) and, in the main process, the ``OutputDirectory`` whose marker records what the run writes (None in the
    others: they never write there)."""

    path: Path
    checkpoint: Path | None
    opened: OutputDirectory | None = None

    def put_in_place(self, write: Callable[[Path], Any]) -> None:
        """Write final files (``write(folder)``, any names) into the output, each recorded before it appears there
        (``OutputDirectory.put_in_place``); nothing in the other processes."""
        if self.opened is not None:
            self.opened.put_in_place(write)

    def before_checkpoint(self, folder: Path) -> None:
        """Record the checkpoint ``folder`` in flight before it is created (the Trainer's ``before_checkpoint``)."""
        if self.opened is not None:
            self.opened.record_in_flight(f"{folder.relative_to(self.path).as_posix()}/", None)

    def record(self) -> None:
        """Write into the marker every file the run has written so far (after its first files and each checkpoint):
        the in-flight records are settled by it."""
        if self.opened is not None:
            self.opened.record()
            for name in list(self.opened.in_flight):
                self.opened.settled(name)


def has_a_checkpoint(output_dir: Path) -> bool:
    """Worth keeping after a failure: a complete checkpoint to resume from."""
    return latest_complete_checkpoint(output_dir) is not None


def checkpoint_to_resume(output_dir: Path, options: PretrainingOptions) -> Path:
    """The latest complete checkpoint of a run to resume with the same options (those in OPTIONS_CHANGEABLE_ON_RESUME
    aside); a checkpoint the run was killed while writing is never resumed from (``trainer.checkpoint_problem``)."""
    checkpoint = latest_complete_checkpoint(output_dir)
    if checkpoint is None:
        incomplete = "; ".join(f"{path.name}: {checkpoint_problem(path)}" for path in checkpoints_of(output_dir))
        raise PretrainingError(
            f"--resume: {output_dir} holds no {'complete ' if incomplete else ''}checkpoint ({CHECKPOINT_PREFIX}N "
            f"folder) to continue from{f' ({incomplete})' if incomplete else ''}: the run that made it stopped before "
            "its first checkpoint was complete; start it again with --overwrite (instead of --resume)"
        )
    saved = json.loads((output_dir / PRETRAINING_OPTIONS_FILE_NAME).read_text(encoding="utf-8"))
    differences = {
        name: (saved.get(name), value)
        for name, value in options.to_dict().items()
        if name not in OPTIONS_CHANGEABLE_ON_RESUME and saved.get(name) != value
    }
    if differences:
        listed = "; ".join(f"{name}: was {was!r}, now {now!r}" for name, (was, now) in differences.items())
        raise PretrainingError(
            f"cannot resume {output_dir} with different options ({listed}); use the options of the first run "
            f"(saved in {output_dir / PRETRAINING_OPTIONS_FILE_NAME}) or --overwrite to start over"
        )
    return checkpoint


@contextmanager
def output_directory(options: PretrainingOptions, args: TrainingArguments) -> Iterator[RunOutput]:
    """``_opened_output_directory`` in the main process; the other processes of a data-parallel run get the same
    directory and checkpoint from it (a broadcast) and a ``RunOutput`` that records nothing: they never write there.
    A failure to open it fails every process, with the main process's message."""
    if args.world_size == 1:
        with _opened_output_directory(options) as opened:
            yield opened
        return
    import torch.distributed as dist

    with ExitStack() as stack:
        shared: list[Any] = [None]
        if args.process_index == 0:
            try:
                output = stack.enter_context(_opened_output_directory(options))
                shared[0] = (str(output.path), str(output.checkpoint) if output.checkpoint is not None else None, None)
            except BaseException as error:
                dist.broadcast_object_list([(None, None, str(error))], src=0)
                raise
        dist.broadcast_object_list(shared, src=0)
        path, checkpoint_path, error = shared[0]
        if error is not None:
            raise PretrainingError(f"the main process (rank 0) could not open the output directory: {error}")
        if args.process_index != 0:
            output = RunOutput(Path(path), Path(checkpoint_path) if checkpoint_path else None)
        yield output


@contextmanager
def _opened_output_directory(options: PretrainingOptions) -> Iterator[RunOutput]:
    """The output directory opened under the output policy (with the checkpoint to resume from, if any), recording
    what the run writes (``RunOutput``), so that --overwrite and --resume later go by that record."""
    inputs = [*options.corpus, *(options.held_out or [])]
    with open_output_directory(
        options.output_dir, PRETRAINING_OUTPUT, resume=options.resume, overwrite=options.overwrite,
        inputs=[*inputs, *(path for path in (options.init_from, options.init_vocab) if path is not None)],
        worth_keeping=has_a_checkpoint, resumable=has_a_checkpoint,
        describe_existing=lambda path: "a pre-training run" + (
            "" if has_a_checkpoint(path) else " that stopped before its first checkpoint (nothing to resume)"
        ),
    ) as output:
        if options.resume and not output.resumed:
            raise PretrainingError(
                f"--resume: {output.path} holds no checkpoint ({CHECKPOINT_PREFIX}N folder) to continue from; run "
                "without --resume to start a new run"
            )
        yield RunOutput(output.path, checkpoint_to_resume(output.path, options) if output.resumed else None, output)


__all__ = ["PRETRAINING_OUTPUT", "RunOutput", "checkpoint_to_resume", "has_a_checkpoint", "output_directory"]
