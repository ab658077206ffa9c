"""Data-parallel embedding on the CPU: N worker processes, each with its own copy of the embedder at one thread.

``EmbeddingWorkerPool`` starts the workers (``spawn``: a forked child of a process that already ran torch's OpenMP
can deadlock), hands each one a shard's sentences at a time and returns their vectors. Each worker

- ignores SIGINT: Ctrl-C reaches the whole process group, and the main process decides (it stops the workers and
  keeps what is finished);
- sets its torch threads (default 1) before anything of torch runs, then unpickles the embedder it was given: the same
  weights, options and tokenizer, and a token-layer cache of its own (bit-invariant by design, so which worker embeds
  a shard changes no bit of its vectors);
- runs ``ELMoEmbedder.embed_words`` (windows, length-grouped batches, character ids, the model) on each shard and sends
  the vectors back, or the error it raised.

A worker that dies (killed, out of memory, a crash in native code) is seen through its process sentinel: the pool
raises ``EmbeddingWorkerError`` naming the worker, its pid, how it ended and the task it held; nothing waits forever.
``embed_corpus(workers=N)`` (``elmo-hf embed --workers N``) drives it; see docs/design/embedding.md.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any, Sequence

_WAITED_FOR = "embed"  # the task id of EmbeddingWorkerPool.embed (the driver's are shard indices)
# How long a worker that ended is waited for, to read its exit status.
STOP_TIMEOUT_SECONDS = 10.0
# A worker asked to stop has this long to exit by itself (an interpreter holding torch takes a moment to tear down;
# it holds nothing that needs it), then it is killed.
CLOSE_TIMEOUT_SECONDS = 2.0


class EmbeddingWorkerError(RuntimeError):
    """A worker process ended without answering: the message names the worker, its pid, how it ended and the task it
    was running."""


def default_workers() -> int:
    """How many worker processes ``elmo-hf embed`` and ``embed_corpus`` use when none is given.

    1, chosen by measurement (docs/results/embed-throughput.md, "Workers and threads": ``benchmarks/contention.py``
    idle and beside busy processes, and the README's main job): 2 workers embed 1.38x faster idle and 1.61x beside two
    busy processes than one process with passive waits, but each spends about 5 s starting (spawn, torch, the model)
    before its first shard, so the README's main job takes the same wall time and a small input a longer one. Worth
    passing ``workers`` for large corpora; the default can follow once worker start-up overlaps the main process's."""
    return 1


@dataclass
class _Worker:
    number: int
    process: multiprocessing.process.BaseProcess
    connection: Connection
    task: Any = None  # the task id it is running, None when idle
    description: str = ""  # how errors name that task

    def how_it_ended(self) -> str:
        code = self.process.exitcode
        if code is not None and code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"


def _worker_main(connection: Connection, threads: int) -> None:
    """A worker's life: set its threads, receive and load the embedder, then embed each task it receives until told
    to stop."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process handles Ctrl-C and stops the workers
    os.environ["OMP_NUM_THREADS"] = str(threads)  # before torch loads OpenMP (unpickling the embedder imports it)
    try:
        import torch

        torch.set_num_threads(threads)
        embedder = pickle.loads(connection.recv_bytes())
    except (EOFError, OSError):  # the main process is gone
        return
    except BaseException as error:  # e.g. the embedder's code cannot be imported here
        _send_error(connection, None, error)
        return
    connection.send(("ready", None))
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):  # the main process is gone
            return
        if message is None:
            return
        task, sentences = message
        started = time.perf_counter()
        try:
            try:
                vectors = embedder.embed_words(sentences)
            except BaseException as error:
                _send_error(connection, task, error)
                continue
            connection.send(("done", task, vectors, time.perf_counter() - started))
        except (BrokenPipeError, ConnectionResetError, EOFError):  # the main process is gone: nobody to answer
            return


def _send_error(connection: Connection, task: Any, error: BaseException) -> None:
    """Send ``error`` itself (so the caller sees the same exception type) with the worker's traceback; an error that
    cannot be pickled goes as a RuntimeError with its text."""
    details = traceback.format_exc()
    try:
        connection.send(("error", task, error, details))
    except Exception:
        connection.send(("error", task, RuntimeError(f"{type(error).__name__}: {error}"), details))


class EmbeddingWorkerPool:
    """``workers`` processes with a copy of ``embedder`` each, at ``threads`` torch threads. One task per worker at a
    time: ``submit`` to an idle worker, ``next_result`` for the next answer. A context manager: leaving it stops the
    workers (killing any that do not stop)."""

    def __init__(self, embedder, workers: int, threads: int = 1):
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an int >= 1, got {workers!r}")
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be an int >= 1, got {threads!r}")
        if embedder.model.device.type != "cpu":
            raise ValueError(
                f"workers > 1 run on the CPU only (the model is on {embedder.model.device}): one process drives a GPU "
                "best; for several GPUs use --engine ray with --ray-gpus-per-worker"
            )
        context = multiprocessing.get_context("spawn")
        payload = pickle.dumps(embedder)
        self.workers: list[_Worker] = []
        try:
            # Started with SIGINT ignored, which a new interpreter keeps: a Ctrl-C while a worker is still starting
            # does not kill it with a traceback (it ignores SIGINT from then on anyway).
            with _sigint_ignored():
                for number in range(workers):
                    parent, child = context.Pipe()
                    process = context.Process(
                        target=_worker_main, args=(child, threads), name=f"elmo-hf-embed-worker-{number}", daemon=True
                    )
                    process.start()
                    child.close()
                    self.workers.append(_Worker(number, process, parent))
            # The embedder goes through the pipe, not the process's arguments: a child that dies before reading its
            # arguments leaves multiprocessing's start() writing them forever; a pipe whose reader died fails instead.
            for worker in self.workers:
                worker.description = "start-up"
                try:
                    worker.connection.send_bytes(payload)
                except (BrokenPipeError, ConnectionResetError, EOFError):
                    raise self._died(worker) from None
            for worker in self.workers:  # a worker that cannot load the embedder fails the run now, naming why
                message = self._receive(worker)
                if message[0] != "ready":
                    self._answer(worker, message)
                worker.description = ""
        except BaseException:
            self.terminate()
            raise

    def __enter__(self) -> "EmbeddingWorkerPool":
        return self

    def __exit__(self, error_type, error, tb) -> None:
        if error_type is None:
            self.close()
        else:
            self.terminate()

    @property
    def size(self) -> int:
        return len(self.workers)

    def has_idle_worker(self) -> bool:
        return any(worker.task is None for worker in self.workers)

    @property
    def busy(self) -> int:
        return sum(worker.task is not None for worker in self.workers)

    def submit(self, task: Any, sentences: Sequence[Sequence[str]], description: str) -> None:
        """Give ``sentences`` (lists of words) to an idle worker; ``description`` names the task in errors."""
        worker = next(worker for worker in self.workers if worker.task is None)
        worker.task, worker.description = task, description
        try:
            worker.connection.send((task, [list(words) for words in sentences]))
        except (BrokenPipeError, ConnectionResetError, EOFError):
            raise self._died(worker) from None

    def next_result(self) -> tuple[Any, list, float]:
        """``(task, vectors, seconds)`` of the next task a worker finished. Raises the worker's own error (with its
        traceback as a note), or ``EmbeddingWorkerError`` when a worker ended without answering."""
        if not self.busy:
            raise RuntimeError("next_result() with no task running")
        while True:
            by_handle = {}
            for worker in self.workers:
                by_handle[worker.connection] = worker
                by_handle[worker.process.sentinel] = worker
            for handle in wait(list(by_handle)):
                worker = by_handle[handle]
                if worker.connection.poll():
                    return self._answer(worker, self._receive(worker))
                if handle == worker.process.sentinel:
                    raise self._died(worker)

    def _receive(self, worker: _Worker) -> tuple:
        """The next message of ``worker``, waiting for it; ``EmbeddingWorkerError`` if the worker ends first."""
        while not worker.connection.poll():
            if worker.process.sentinel in wait([worker.connection, worker.process.sentinel]) and not worker.connection.poll():
                raise self._died(worker)
        try:
            return worker.connection.recv()
        except (EOFError, OSError):
            raise self._died(worker) from None

    def embed(self, sentences: Sequence[Sequence[str]], description: str) -> tuple[list, float]:
        """The vectors of ``sentences`` from one worker, waiting for them (no other task may be running)."""
        self.submit(_WAITED_FOR, sentences, description)
        _, vectors, seconds = self.next_result()
        return vectors, seconds

    def _answer(self, worker: _Worker, message: tuple) -> tuple[Any, list, float]:
        kind, task, *rest = message
        if kind == "error":
            error, details = rest
            where = worker.description if task is not None else "start-up"
            error.add_note(f"in embedding worker {worker.number} (pid {worker.process.pid}) on {where}:\n{details}")
            raise error
        worker.task, worker.description = None, ""
        vectors, seconds = rest
        return task, vectors, seconds

    def _died(self, worker: _Worker) -> EmbeddingWorkerError:
        # Its pipe or sentinel closes as the process ends, a moment before it can be reaped with its exit status.
        worker.process.join(STOP_TIMEOUT_SECONDS)
        if worker.task is not None:
            doing = f"while embedding {worker.description}"
        else:
            doing = "while starting" if worker.description == "start-up" else "while idle"
        return EmbeddingWorkerError(
            f"embedding worker {worker.number} (pid {worker.process.pid}) died ({worker.how_it_ended()}) {doing}"
        )

    def close(self) -> None:
        """Ask every worker to stop; kill those that have not ended within ``CLOSE_TIMEOUT_SECONDS``."""
        for worker in self.workers:
            try:
                worker.connection.send(None)
            except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
                pass
        deadline = time.monotonic() + CLOSE_TIMEOUT_SECONDS
        for worker in self.workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
        self.terminate()

    def terminate(self) -> None:
        """Kill every worker still running and wait for them (no orphans, no zombies)."""
        for worker in self.workers:
            if worker.process.is_alive():
                worker.process.kill()
        for worker in self.workers:
            worker.process.join()
            worker.connection.close()
        self.workers = []


class _sigint_ignored:
    """SIGINT ignored inside the block (on the main thread; elsewhere a no-op), the previous handler restored after."""

    def __enter__(self) -> None:
        self.previous = None
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, signal.SIG_IGN)

    def __exit__(self, *exception) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


__all__ = ["EmbeddingWorkerError", "EmbeddingWorkerPool", "default_workers"]
