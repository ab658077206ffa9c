"""CPU affinity for the benchmarks that measure throughput per core (Linux: ``os.sched_setaffinity``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def running_on(cores: list[int] | None) -> Iterator[None]:
    """This thread (and the threads and processes it starts) on ``cores`` only, for the block; None: unchanged."""
    if cores is None:
        yield
        return
    if not hasattr(os, "sched_setaffinity"):
        raise RuntimeError("running on chosen cores needs CPU affinity (os.sched_setaffinity: Linux)")
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
