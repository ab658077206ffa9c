"""What every command shares: exit codes and how errors are reported."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator

EXIT_OK = 0
EXIT_FAILED_CHECK = 1
EXIT_USAGE_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143  # 128 + SIGTERM: see sigterm_as_ctrl_c

DEFAULT_MODEL_NOTE = (
    "note: no --model given, using elmo-hf's default model: a small demonstration ELMo pre-trained on about 265k "
    "words of Shakespeare and English web text, shipped in the package so that this works offline. For real vectors "
    "convert a released ELMo (elmo-hf convert --help) and pass --model"
)


def report_error(error: BaseException) -> int:
    """Print ``error: ...`` (the library's message names the input and what was expected) and return exit code 2."""
    print(f"error: {error}", file=sys.stderr)
    return EXIT_USAGE_ERROR


class ModelFilesError(ValueError):
    """A model directory whose files cannot make the model: a damaged weights file, a config.json whose sizes
    disagree with the weights (``model_files_named``)."""


@contextlib.contextmanager
def model_files_named(model: str) -> Iterator[None]:
    """The block in which a command loads the model ``model`` (a directory or a Hub repo id) with ``from_pretrained``:
    the two failures of a damaged model directory that transformers and safetensors report without naming a file
    become a ``ModelFilesError`` that names the file and what was expected (``report_error``: exit 2, no traceback).

    - safetensors' ``SafetensorError`` ("incomplete metadata, file not fully covered": a truncated copy, an
      interrupted download; "header too large", ...): the weights file cannot be read;
    - transformers' ``RuntimeError`` "You set `ignore_mismatched_sizes` to `False`": a tensor of the weights has
      other sizes than the model that config.json describes (its load report, printed above, lists each one).

    Every command that loads a model does so inside this block: embed, similarity, neighbours query, export and
    pretrain --init-from. Anything else passes through unchanged."""
    try:
        yield
    except Exception as error:
        weights, config = os.path.join(model, "model.safetensors"), os.path.join(model, "config.json")
        if type(error).__name__ == "SafetensorError":
            raise ModelFilesError(
                f"the weights of the model {model} cannot be read: {weights} is damaged or truncated ({error}); "
                "expected a complete safetensors file, as save_pretrained writes it (copy or download it again)"
            ) from None
        if isinstance(error, RuntimeError) and "ignore_mismatched_sizes" in str(error):
            raise ModelFilesError(
                f"the model {model} does not fit its weights: the sizes that {config} gives disagree with the tensors "
                f"in {weights} (the load report above lists each one); expected the config.json saved with these weights"
            ) from None
        raise


def exit_code_after_interrupt() -> int:
    """``EXIT_INTERRUPTED`` (``EXIT_TERMINATED`` where SIGTERM made the interrupt: ``sigterm_as_ctrl_c``), and make sure the interpreter will exit with it rather than kill itself with SIGINT.

    CPython 3.11 remembers a KeyboardInterrupt that escaped code it ran from a string (``exec(str)``, as
    ``dataclasses`` does for every class it builds, so any import can be inside one) and, once a ``python -m``
    interpreter has finished, kills the process with SIGINT even when the program caught the interrupt: Ctrl-C about
    4 s into ``python -m elmo_hf_cli embed`` (transformers' configuration module importing) ended with -2, not 130. Each
    run of code from a string resets that flag first, so running an empty one after catching the interrupt
    clears it."""
    exec("None")  # resets CPython's _Py_UnhandledKeyboardInterrupt (see above)
    return EXIT_TERMINATED if _terminated else EXIT_INTERRUPTED


_terminated = False


def sigterm_as_ctrl_c() -> None:
    """From here on SIGTERM does what Ctrl-C (SIGINT) does at that moment: it runs SIGINT's current handler (Python's
    KeyboardInterrupt, a block that holds the interrupt until it ends, ``pretrain``'s stop at the next step, or
    nothing while SIGINT is ignored). For the ``elmo-hf`` process only (``command_line``): a command stopped by
    ``kill``, ``timeout``, systemd, Slurm or Kubernetes leaves its output as after a Ctrl-C: finished shards and
    checkpoints kept and listed, nothing half-made, its lock released, ``--resume`` continues. Without it, SIGTERM's
    default action ended the process at once and left only the output's marker and lock (issue 51).

    Such a run then exits ``EXIT_TERMINATED`` (143), not 130 (``exit_code_after_interrupt``): 128 + 15 is what a
    shell, a supervisor or a batch scheduler reports for a process that SIGTERM ended, so it can tell a stop it
    asked for from a user's Ctrl-C; what is left in the output is the same."""

    def on_sigterm(signum, frame) -> None:
        global _terminated
        _terminated = True
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        elif handler != signal.SIG_IGN:  # SIG_DFL (or one not set from Python): SIGTERM's own default action
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)


@contextlib.contextmanager
def libraries_imported_whole() -> Iterator[None]:
    """The block in which a command imports the libraries it runs on (torch, transformers, datasets: most of its
    start-up), as a context manager: a Ctrl-C inside it is held and raised as ``KeyboardInterrupt`` when the block
    ends, once they are in (``elmo_hf.storage.interrupts.sigint_deferred``, which imports nothing heavy).

    Raised inside those imports, a KeyboardInterrupt does not always come out as one. Sending SIGINT at random
    moments of ``elmo-hf embed``'s start-up and of ``import torch, transformers.modeling_utils`` (Python 3.11, torch
    2.13, about 1,300 runs) gave, besides exit 130: a ``RuntimeError`` traceback (CPython 3.11 wraps an exception
    raised in ``__set_name__`` while a class is built: datasets' ``DownloadConfig``), a ``RecursionError`` (numpy,
    interrupted importing a submodule from its module ``__getattr__``, tried again and again) and twice an abort
    inside ``import torch`` (``terminate called after throwing an instance of 'pybind11::error_already_set'``).

    In the ``elmo-hf`` process the collector makes no collection during the block
    (``elmo_hf.runtime.process_tuning.imports_without_collection``)."""
    from elmo_hf.runtime.process_tuning import imports_without_collection
    from elmo_hf.storage.interrupts import sigint_deferred

    with sigint_deferred(), imports_without_collection():
        yield


def ctrl_c_ends_the_exit() -> None:
    """From here on a Ctrl-C kills the process at once by SIGINT, the signal's default action; stdout and stderr are
    flushed first, so the command's report is out. For the end of a process whose command has returned: its files are
    complete and closed, what is left is the interpreter's exit (about 0.16 s after a one-sentence ``elmo-hf embed``).

    Without it, a Ctrl-C in the first 20 ms of that exit landed in one of the 16 ``atexit`` callbacks (torch's,
    datasets', logging's, ...): Python printed "Exception ignored in atexit callback" with a traceback, skipped the
    rest of that callback and exited 0. Later in the exit CPython has put the default action back itself, so there a
    Ctrl-C already ended the process by SIGINT, as it now does throughout (a shell reports 130 and stops a loop of
    commands, which it does not for a normal exit with 130)."""
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def quiet_progress_bars() -> None:
    """No progress bars from transformers, datasets or huggingface_hub (loading weights, reading data)."""
    import datasets
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    datasets.disable_progress_bars()
    disable_progress_bars()


__all__ = [
    "DEFAULT_MODEL_NOTE", "EXIT_FAILED_CHECK", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_TERMINATED", "EXIT_USAGE_ERROR",
    "ModelFilesError", "ctrl_c_ends_the_exit", "exit_code_after_interrupt", "libraries_imported_whole", "model_files_named",
    "quiet_progress_bars", "report_error", "sigterm_as_ctrl_c",
]
