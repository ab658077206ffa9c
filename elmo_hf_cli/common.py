"""What every command shares: exit codes and how errors are reported."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
from collections.abc import Iterator
from typing import NoReturn

from .arguments import library_module

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


def libraries_imported_whole():
    """The block in which a command imports the libraries it runs on (torch, transformers, datasets: most of its
    start-up), as a context manager: a Ctrl-C inside it is held and raised as ``KeyboardInterrupt`` when the block
    ends, once they are in (``storage.interrupts.sigint_deferred``, read without running ``elmo_hf/__init__.py``,
    which imports transformers: ``arguments.library_module``).

    Raised inside those imports, a KeyboardInterrupt does not always come out as one. Sending SIGINT at random
    moments of ``elmo-hf embed``'s start-up and of ``import torch, transformers.modeling_utils`` (Python 3.11, torch
    2.13, about 1,300 runs) gave, besides exit 130: a ``RuntimeError`` traceback (CPython 3.11 wraps an exception
    raised in ``__set_name__`` while a class is built: datasets' ``DownloadConfig``), a ``RecursionError`` (numpy,
    interrupted importing a submodule from its module ``__getattr__``, tried again and again) and twice an abort
    inside ``import torch`` (``terminate called after throwing an instance of 'pybind11::error_already_set'``)."""
    return library_module("storage.interrupts").sigint_deferred()


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


# glibc's malloc serves a block above its mmap threshold (128 KiB at first) with fresh pages from the kernel and
# gives them back when it is freed, and it returns free memory above its trim threshold at the top of the heap. The
# model's temporary tensors (a step's gates, a batch's vectors) are such blocks, allocated and freed thousands of
# times a second: every one of them page-faulted again. These are the values glibc's own adaptive threshold stops
# at on 64-bit (mmap 32 MiB, trim twice that), set from the start: blocks up to 32 MiB are reused from the heap.
COMMAND_MALLOC_MMAP_THRESHOLD = 32 * 1024 * 1024
COMMAND_MALLOC_TRIM_THRESHOLD = 2 * COMMAND_MALLOC_MMAP_THRESHOLD
_MALLOPT_TRIM_THRESHOLD, _MALLOPT_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h: M_TRIM_THRESHOLD, M_MMAP_THRESHOLD


def user_set_malloc_options() -> bool:
    """Whether the environment sets either threshold already (``glibc.malloc.mmap_threshold`` or
    ``glibc.malloc.trim_threshold`` in ``GLIBC_TUNABLES``, or ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_``):
    then the command leaves malloc as the user set it."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    return any(f"glibc.malloc.{name}_threshold=" in tunables for name in ("mmap", "trim")) or any(
        f"MALLOC_{name}_THRESHOLD_" in os.environ for name in ("MMAP", "TRIM")
    )


# The same thresholds as glibc tunables, for the processes the command starts.
COMMAND_MALLOC_TUNABLES = (
    f"glibc.malloc.mmap_threshold={COMMAND_MALLOC_MMAP_THRESHOLD}:glibc.malloc.trim_threshold={COMMAND_MALLOC_TRIM_THRESHOLD}"
)


def reuse_freed_memory() -> bool:
    """Have glibc's malloc keep freed blocks of up to ``COMMAND_MALLOC_MMAP_THRESHOLD`` for reuse in this process
    (the ``elmo-hf`` process only, never a library caller's; its forked embedding workers inherit it; for the
    processes it spawns: ``thresholds_for_started_processes``). Returns whether it was set: not where the C library is
    not glibc, or where the user set a threshold already (``user_set_malloc_options``).

    Measured on the README main job (docs/results/embed-throughput.md, "Page faults"): the two embedding workers
    took 690,000-780,000 page faults and 1.4-2.3 s of system time for tinyshakespeare; with these thresholds 210,000
    and 0.6-0.7 s, and 6-11% more words/s, with the same peak memory. A library caller gets the same with
    ``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=67108864``
    (``COMMAND_MALLOC_TUNABLES``) in its environment."""
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc" or user_set_malloc_options():
        return False
    libc = ctypes.CDLL(None)
    return bool(
        libc.mallopt(_MALLOPT_MMAP_THRESHOLD, COMMAND_MALLOC_MMAP_THRESHOLD)
        and libc.mallopt(_MALLOPT_TRIM_THRESHOLD, COMMAND_MALLOC_TRIM_THRESHOLD)
    )


def thresholds_for_started_processes() -> None:
    """Add ``COMMAND_MALLOC_TUNABLES`` to this process's ``GLIBC_TUNABLES`` (after what the user set there), which
    glibc reads as a spawned process starts: the ``elmo-hf`` process's spawned embedding workers (``--workers N
    --threads M``) and a local Ray's workers reuse freed memory as the process does (``reuse_freed_memory``). Two
    spawned workers at 2 threads on the main job: 1.0 million page faults and 3.6 s of system time without, 0.52-0.54
    million and 2.8 s with, and 4% more words/s (2-core Zen 5)."""
    os.environ["GLIBC_TUNABLES"] = ":".join(filter(None, [os.environ.get("GLIBC_TUNABLES"), COMMAND_MALLOC_TUNABLES]))


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
    "COMMAND_GC_THRESHOLDS", "COMMAND_MALLOC_MMAP_THRESHOLD", "COMMAND_MALLOC_TRIM_THRESHOLD", "COMMAND_MALLOC_TUNABLES", "DEFAULT_MODEL_NOTE",
    "EXIT_FAILED_CHECK", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_TERMINATED", "EXIT_USAGE_ERROR", "ModelFilesError", "collect_garbage_as_a_short_lived_process",
    "ctrl_c_ends_the_exit", "exit_code_after_interrupt", "exit_without_a_final_collection", "libraries_imported_whole",
    "model_files_named", "quiet_progress_bars", "report_error", "reuse_freed_memory", "set_torch_threads", "sigterm_as_ctrl_c", "thresholds_for_started_processes", "user_set_malloc_options",
    "wait_passively",
]
