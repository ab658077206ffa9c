"""What every command shares: exit codes and how errors are reported."""

from __future__ import annotations

import gc
import os
import sys
from typing import NoReturn

EXIT_OK = 0
EXIT_FAILED_CHECK = 1
EXIT_USAGE_ERROR = 2
EXIT_INTERRUPTED = 130

DEFAULT_MODEL_NOTE = (
    "note: no --model given, using elmo-hf's default model: a small demonstration ELMo pre-trained on about 265k "
    "words of Shakespeare and English web text, shipped in the package so that this works offline. For real vectors "
    "convert a released ELMo (elmo-hf convert --help) and pass --model"
)


def report_error(error: BaseException) -> int:
    """Print ``error: ...`` (the library's message names the input and what was expected) and return exit code 2."""
    print(f"error: {error}", file=sys.stderr)
    return EXIT_USAGE_ERROR


def exit_code_after_interrupt() -> int:
    """``EXIT_INTERRUPTED``, and make sure the interpreter will exit with it rather than kill itself with SIGINT.

    CPython 3.11 remembers a KeyboardInterrupt that escaped code it ran from a string (``exec(str)``, as
    ``dataclasses`` does for every class it builds, so any import can be inside one) and, once a ``python -m``
    interpreter has finished, kills the process with SIGINT even when the program caught the interrupt: Ctrl-C about
    4 s into ``python -m elmo_hf_cli embed`` (transformers' configuration module importing) ended with -2, not 130. Each
    run of code from a string resets that flag first, so running an empty one after catching the interrupt
    clears it."""
    exec("None")  # resets CPython's _Py_UnhandledKeyboardInterrupt (see above)
    return EXIT_INTERRUPTED


def wait_passively() -> None:
    """Idle OpenMP threads sleep instead of spinning (``OMP_WAIT_POLICY=PASSIVE``) unless the user chose otherwise.

    Must run before torch is first imported: OpenMP reads it once, when torch loads it. Beside other busy processes,
    spinning threads made every small op of the LSTM's recurrence wait for a partner thread the scheduler had taken
    away: the main job at 2 threads fell to 0.10x of its idle speed (issue 28's table); with passive waits it ran as
    fast as one thread. Idle, the choice is measured by ``benchmarks/contention.py`` (docs/results/)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


# A command is a short-lived process that, before its first useful step, imports torch, transformers and datasets:
# about 430,000 objects that live until it exits. With Python's default thresholds (700, 10, 10) the collector walks
# all of them again each time the heap has grown by a quarter (7 full collections during a one-sentence embed) and
# once more while the interpreter shuts down. Collections of the young generation every 10,000 new objects instead
# of 700 leave no full collection in the start-up and still find every cycle a long run makes.
COMMAND_GC_THRESHOLDS = (10_000, 10, 10)


def collect_garbage_as_a_short_lived_process() -> None:
    """Set the collector's thresholds to ``COMMAND_GC_THRESHOLDS`` (the ``elmo-hf`` process only, never a library
    caller's). Measured on a one-sentence ``elmo-hf embed`` (docs/results/embed-throughput.md, start-up)."""
    gc.set_threshold(*COMMAND_GC_THRESHOLDS)


def exit_without_a_final_collection(code: int) -> NoReturn:
    """Exit the process with ``code``, every object alive now frozen out of the collector's sight (``gc.freeze``).

    The interpreter's shutdown still runs the ``atexit`` handlers, flushes stdout and stderr and frees every object
    whose last reference goes; it no longer searches the 430,000 objects of torch, transformers and datasets for
    cycles, which took 2.4 s of a 2.8 s exit on a 2-core Zen 3. Only for the end of a process: a frozen object is
    never collected. Every file a command writes is closed (and synced) before its ``run`` returns."""
    gc.freeze()
    sys.exit(code)


def set_torch_threads(threads: int | None) -> None:
    """``torch.set_num_threads(threads)`` when given (a ``ValueError`` below 1); None keeps torch's default."""
    if threads is None:
        return
    if threads < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")
    import torch

    torch.set_num_threads(threads)


def quiet_progress_bars() -> None:
    """No progress bars from transformers, datasets or huggingface_hub (loading weights, reading data)."""
    import datasets
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    datasets.disable_progress_bars()
    disable_progress_bars()


__all__ = [
    "COMMAND_GC_THRESHOLDS", "DEFAULT_MODEL_NOTE", "EXIT_FAILED_CHECK", "EXIT_INTERRUPTED", "EXIT_OK",
    "EXIT_USAGE_ERROR", "collect_garbage_as_a_short_lived_process", "exit_without_a_final_collection",
    "quiet_progress_bars", "report_error", "set_torch_threads", "wait_passively",
]
