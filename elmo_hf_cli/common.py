"""What every command shares: exit codes, how errors are reported, Ctrl-C and SIGTERM (why: docs/design/interrupts.md)."""

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
    """The block in which a command loads the model ``model`` (a directory or a Hub repo id): the two failures of a
    damaged model directory that safetensors (``SafetensorError``: truncated, unreadable) and transformers (a
    ``RuntimeError`` about ``ignore_mismatched_sizes``: config.json's sizes disagree with the weights) report without
    naming a file become a ``ModelFilesError`` naming it (exit 2, no traceback). Anything else passes through."""
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
    """``EXIT_INTERRUPTED`` (``EXIT_TERMINATED`` where SIGTERM made the interrupt: ``sigterm_as_ctrl_c``), and make
    sure the interpreter will exit with it rather than kill itself with SIGINT."""
    exec("None")  # resets CPython's _Py_UnhandledKeyboardInterrupt: docs/design/interrupts.md
    return EXIT_TERMINATED if _terminated else EXIT_INTERRUPTED


_terminated = False


def sigterm_as_ctrl_c() -> None:
    """From here on SIGTERM does what Ctrl-C (SIGINT) does at that moment (it runs SIGINT's current handler), and the
    run exits ``EXIT_TERMINATED`` (143). For the ``elmo-hf`` process only (``command_line``)."""

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
    """The block in which a command imports the libraries it runs on (torch, transformers, datasets): a Ctrl-C inside
    it is held and raised as ``KeyboardInterrupt`` once they are in (``elmo_hf.storage.interrupts.sigint_deferred``);
    in the ``elmo-hf`` process the collector makes no collection during it
    (``elmo_hf.runtime.process_tuning.imports_without_collection``). Why: docs/design/interrupts.md."""
    from elmo_hf.runtime.process_tuning import imports_without_collection
    from elmo_hf.storage.interrupts import sigint_deferred

    with sigint_deferred(), imports_without_collection():
        yield


def ctrl_c_ends_the_exit() -> None:
    """From here on a Ctrl-C kills the process at once by SIGINT, stdout and stderr flushed first: for the exit of a
    process whose command has returned, its files complete and closed."""
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
