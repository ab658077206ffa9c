"""What the ``elmo-hf`` command sets in its own process, behind one function (``tuned_command_process``): the
garbage collector's thresholds, no collection while a command imports its libraries (``imports_without_collection``)
and a frozen exit, and glibc malloc's thresholds, here and in the processes it spawns. Each piece is kept for a
measured gain (docs/results/embed-throughput.md, docs/results/startup.md); none applies to a program that calls the
library (it can set the same malloc thresholds with ``COMMAND_MALLOC_TUNABLES``: docs/guide/embedding.md).
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

# Young collections every 10,000 new objects: no full collection while a command imports torch, transformers and
# datasets, and a long run still finds its cycles (docs/results/embed-throughput.md#the-garbage-collector-2026-11-26).
COMMAND_GC_THRESHOLDS = (10_000, 10, 10)

# glibc's malloc keeps freed blocks up to this size for reuse instead of page-faulting them in again: the values its
# own adaptive threshold stops at on 64-bit (docs/results/embed-throughput.md#page-faults-2026-11-27).
COMMAND_MALLOC_MMAP_THRESHOLD = 32 * 1024 * 1024
COMMAND_MALLOC_TRIM_THRESHOLD = 2 * COMMAND_MALLOC_MMAP_THRESHOLD
_MALLOPT_TRIM_THRESHOLD, _MALLOPT_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h: M_TRIM_THRESHOLD, M_MMAP_THRESHOLD
# The same thresholds as glibc tunables, read by a process as it starts.
COMMAND_MALLOC_TUNABLES = (
    f"glibc.malloc.mmap_threshold={COMMAND_MALLOC_MMAP_THRESHOLD}:glibc.malloc.trim_threshold={COMMAND_MALLOC_TRIM_THRESHOLD}"
)


# Whether this process is running a command inside ``tuned_command_process``: only there does
# ``imports_without_collection`` pause the collector.
_in_tuned_command = False


@contextlib.contextmanager
def tuned_command_process() -> Iterator[None]:
    """The block that runs a command in the ``elmo-hf`` process, tuned as a short-lived one: the collector's
    thresholds and no collection while the command imports its libraries, glibc's malloc reusing freed blocks (here
    and in spawned processes), and at the end every object alive frozen out of the collector's sight, so the
    interpreter's exit does not search them for cycles."""
    global _in_tuned_command
    collect_garbage_as_a_short_lived_process()
    if reuse_freed_memory():
        thresholds_for_started_processes()
    _in_tuned_command = True
    try:
        yield
    finally:
        _in_tuned_command = False
    gc.freeze()  # the exit's search for cycles: docs/results/embed-throughput.md#the-garbage-collector-2026-11-26


@contextlib.contextmanager
def imports_without_collection() -> Iterator[None]:
    """The block in which a command imports its libraries (torch, transformers, datasets). Inside
    ``tuned_command_process`` the collector is paused for the block and everything alive after it is frozen: the
    modules, classes and functions the imports made live until the process ends, so no collection need walk them,
    and what the imports left unreachable stays with them (docs/results/startup.md). Elsewhere (``main`` inside a
    program, whose collector is its own) and where the collector is off already, the block runs as it is."""
    if not (_in_tuned_command and gc.isenabled()):
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def collect_garbage_as_a_short_lived_process() -> None:
    """Set the collector's thresholds to ``COMMAND_GC_THRESHOLDS`` (the command's process, and the test processes)."""
    gc.set_threshold(*COMMAND_GC_THRESHOLDS)


def user_set_malloc_options() -> bool:
    """Whether the environment sets either malloc threshold already (in ``GLIBC_TUNABLES`` or as
    ``MALLOC_*_THRESHOLD_``): then the command leaves malloc as the user set it."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    return any(f"glibc.malloc.{name}_threshold=" in tunables for name in ("mmap", "trim")) or any(
        f"MALLOC_{name}_THRESHOLD_" in os.environ for name in ("MMAP", "TRIM")
    )


def reuse_freed_memory() -> bool:
    """Have glibc's malloc keep freed blocks of up to ``COMMAND_MALLOC_MMAP_THRESHOLD`` for reuse in this process and
    its forked workers; both thresholds or neither (one alone is slower than none). Whether it was set: not off glibc,
    nor where the user set a threshold."""
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
    """Add ``COMMAND_MALLOC_TUNABLES`` to ``GLIBC_TUNABLES`` (after the user's), which glibc reads as a spawned process
    (an embedding worker, a local Ray's worker) starts."""
    os.environ["GLIBC_TUNABLES"] = ":".join(filter(None, [os.environ.get("GLIBC_TUNABLES"), COMMAND_MALLOC_TUNABLES]))


__all__ = [
    "COMMAND_GC_THRESHOLDS", "COMMAND_MALLOC_MMAP_THRESHOLD", "COMMAND_MALLOC_TRIM_THRESHOLD", "COMMAND_MALLOC_TUNABLES",
    "collect_garbage_as_a_short_lived_process", "imports_without_collection", "reuse_freed_memory",
    "thresholds_for_started_processes", "tuned_command_process", "user_set_malloc_options",
]
