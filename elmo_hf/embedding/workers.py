"""Data-parallel embedding on the CPU: N worker processes, each with its own copy of the embedder
(docs/design/embedding.md, "Threads and worker processes").

``EmbeddingWorkerPool`` starts the workers without waiting for them (``fork`` at one thread, which shares the loaded
embedder; ``spawn`` at more, which receives it pickled and sets its threads before torch loads OpenMP), hands each
worker that is up a task at a time and returns its result. A task is a picklable ``work(embedder) -> result``:
``EmbedSentences`` (vectors of some sentences) or the engine's ``ShardTask`` (a whole shard, its file written by the
worker). Each worker ignores SIGINT and SIGTERM (the main process decides what they do to a run), reads its tasks on
a thread of its own as they come, and sends back its result or the error it raised. A worker that dies is seen
through its process sentinel: ``EmbeddingWorkerError`` names it, its pid, how it ended and the task it held.
"""

from __future__ import annotations

import multiprocessing
import pickle
import queue
import signal
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Sequence

from ..runtime.parallelism import set_worker_threads, start_method
from ..storage.interrupts import sigint_ignored
from ..validation_elmo import check_int

_WAITED_FOR = "run"  # the task id of EmbeddingWorkerPool.run (the driver's are shard indices)
_UNREADABLE_TASK = "unreadable"  # the task id of the error answering a task a worker could not unpickle
# How long a worker that ended is waited for, to read its exit status.
STOP_TIMEOUT_SECONDS = 10.0
# A worker asked to stop has this long to exit by itself (an interpreter holding torch takes a moment to tear down;
# it holds nothing that needs it), then it is killed.
CLOSE_TIMEOUT_SECONDS = 2.0
# Tasks a worker holds at once: the one it embeds and the next, already received, so that it never waits for the
# main process to be scheduled between two shards (on a busy machine that wait left the workers idle).
TASKS_PER_WORKER = 2


class EmbeddingWorkerError(RuntimeError):
    """A worker process ended without answering: the message names the worker, its pid, how it ended and the task it
    was running."""


@dataclass
class _Worker:
    number: int
    process: multiprocessing.process.BaseProcess
    connection: Connection
    tasks: deque = field(default_factory=deque)  # (task id, how errors name it) of the tasks it holds, in order
    ready: bool = False  # it said it is ready (has its embedder, its threads set)

    def how_it_ended(self) -> str:
        code = self.process.exitcode
        if code is not None and code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"


def _worker_main(connection: Connection, threads: int, embedder: Any = None, inherited: Sequence[Connection] = ()) -> None:
    """A worker's life: set its threads, have its embedder (``embedder`` when forked; received and unpickled when
    spawned), say it is ready, then embed each task it receives until told to stop. ``inherited``: the main process's
    ends of the pipes, which a forked child holds copies of; closed, so that the main process's death ends the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process handles Ctrl-C and stops the workers
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # and SIGTERM, as Ctrl-C (elmo_hf_cli.common.sigterm_as_ctrl_c)
    for other in inherited:
        other.close()
    try:
        if embedder is None:
            payload = connection.recv_bytes()  # first: the main process's send returns as soon as this is read
        set_worker_threads(threads, spawned=embedder is None)  # before unpickling imports torch
        if embedder is None:
            embedder = pickle.loads(payload)
    except (EOFError, OSError):  # the main process is gone
        return
    except BaseException as error:  # e.g. the embedder's code cannot be imported here
        _send_error(connection, None, error)
        return
    try:
        connection.send(("ready", None))
    except (BrokenPipeError, ConnectionResetError, EOFError, OSError):  # the main process is gone (or gave up on it)
        return
    messages = _received_on_a_thread(connection)
    while True:
        message = messages.get()
        if isinstance(message, BaseException):  # a task that cannot be unpickled here: its error is the answer
            _send_error(connection, _UNREADABLE_TASK, message)
            return
        if message is None:  # told to stop, or the main process is gone
            return
        task, work = message
        try:
            try:
                result = work(embedder)
            except BaseException as error:
                _send_error(connection, task, error)
                continue
            connection.send(("done", task, result))
        except (BrokenPipeError, ConnectionResetError, EOFError):  # the main process is gone: nobody to answer
            return


def _received_on_a_thread(connection: Connection) -> queue.SimpleQueue:
    """The main process's messages to a worker, read from ``connection`` by a thread of the worker's own as they
    come, so that the main process's send of a task returns once it is across, however large the task and whatever
    the worker is doing: a task larger than the pipe holds kept the send waiting for the shard before, and the other
    workers idle (docs/results/embed-throughput.md, "Large shards"). Ends with None once told to stop or once the main
    process is gone, or with the error that unpickling a message raised (the worker answers its next task with it,
    then ends)."""
    messages: queue.SimpleQueue = queue.SimpleQueue()

    def receive() -> None:
        while True:
            try:
                message = connection.recv()
            except (EOFError, OSError):  # the main process is gone
                message = None
            except BaseException as error:
                message = error
            messages.put(message)
            if message is None or isinstance(message, BaseException):
                return

    threading.Thread(target=receive, name="elmo-hf-embed-receiver", daemon=True).start()
    return messages


@dataclass
class EmbedSentences:
    """A worker's work: the vectors of ``sentences`` (lists of words; ``ELMoEmbedder.embed_words``) and the seconds
    they took, ``(vectors, seconds)``."""

    sentences: list[list[str]]

    def __call__(self, embedder: Any) -> tuple[list, float]:
        started = time.perf_counter()
        vectors = embedder.embed_words(self.sentences)
        return vectors, time.perf_counter() - started


def _send_error(connection: Connection, task: Any, error: BaseException) -> None:
    """Send ``error`` itself (so the caller sees the same exception type) with its traceback in the worker; an error
    that cannot be pickled goes as a RuntimeError with its text."""
    details = "".join(traceback.format_exception(error))
    try:
        connection.send(("error", task, error, details))
    except Exception:
        connection.send(("error", task, RuntimeError(f"{type(error).__name__}: {error}"), details))


class EmbeddingWorkerPool:
    """``workers`` processes with a copy of ``embedder`` each, at ``threads`` torch threads, started without waiting
    for them: ``collect_ready`` (or ``wait``) notes those that came up. One task per worker at a time: ``submit`` to an
    idle worker that is up, ``wait`` / ``next_result`` for the next answer (or ``run`` for one). A context manager:
    leaving it stops the workers (killing any that do not stop)."""

    def __init__(self, embedder, workers: int, threads: int = 1):
        workers, threads = check_int("workers", workers, 1), check_int("threads", threads, 1)
        if embedder.model.device.type != "cpu":
            raise ValueError(
                f"workers > 1 run on the CPU only (the model is on {embedder.model.device}): one process drives a GPU "
                "best; for several GPUs use --engine ray with --ray-gpus-per-worker"
            )
        self.threads = threads
        self.start_method = start_method(threads)
        context = multiprocessing.get_context(self.start_method)
        forked = self.start_method == "fork"
        self.workers: list[_Worker] = []
        try:
            # Started with SIGINT ignored, which a child keeps: a Ctrl-C while a worker is still starting does not
            # kill it with a traceback (it ignores SIGINT from then on anyway).
            with sigint_ignored():
                for number in range(workers):
                    parent, child = context.Pipe()
                    # A forked child gets the embedder as it is (shared until written) and closes the main process's
                    # pipe ends it inherits; a spawned one gets it through the pipe, below.
                    inherited = [worker.connection for worker in self.workers] + [parent]
                    arguments = (child, threads, embedder, inherited) if forked else (child, threads)
                    process = context.Process(
                        target=_worker_main, args=arguments, name=f"elmo-hf-embed-worker-{number}", daemon=True
                    )
                    process.start()
                    child.close()
                    self.workers.append(_Worker(number, process, parent))
            if not forked:
                # The embedder goes through the pipe, not the process's arguments: a child that dies before reading
                # its arguments leaves multiprocessing's start() writing them forever; a pipe whose reader died fails.
                payload = pickle.dumps(embedder)
                for worker in self.workers:
                    try:
                        worker.connection.send_bytes(payload)
                    except (BrokenPipeError, ConnectionResetError, EOFError):
                        raise self._died(worker) from None
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
        """Whether a worker that is up can take a task (it holds fewer than ``TASKS_PER_WORKER``)."""
        return any(worker.ready and len(worker.tasks) < TASKS_PER_WORKER for worker in self.workers)

    @property
    def busy(self) -> int:
        """Tasks given to the workers and not answered yet."""
        return sum(len(worker.tasks) for worker in self.workers)

    @property
    def starting(self) -> int:
        """Workers that have not said they are ready yet."""
        return sum(not worker.ready for worker in self.workers)

    def collect_ready(self) -> None:
        """Note the workers that came up since, without waiting; a worker that failed or died while starting raises
        (its own error, or ``EmbeddingWorkerError``)."""
        while self.starting and self._wait_once(timeout=0, starting_only=True) is not None:
            pass

    def wait(self) -> tuple[Any, Any] | None:
        """The next event: ``(task, result)`` of a task a worker finished (what its work returned), or None when a
        worker came up.
        Raises the worker's own error (with its traceback as a note), or ``EmbeddingWorkerError`` when a worker ended
        without answering."""
        if not self.busy and not self.starting:
            raise RuntimeError("wait() with no task running and no worker starting")
        while True:
            event = self._wait_once(timeout=None)
            if event is not None:
                return None if event == "ready" else event

    def submit(self, task: Any, work: Callable[[Any], Any], description: str) -> None:
        """Give ``work`` (a picklable callable, ``work(embedder) -> result``, e.g. ``EmbedSentences``) to the worker
        that is up and holds the fewest tasks; ``task`` identifies its result, ``description`` names it in errors."""
        worker = min((worker for worker in self.workers if worker.ready), key=lambda worker: len(worker.tasks))
        if len(worker.tasks) >= TASKS_PER_WORKER:
            raise RuntimeError("submit() with no worker able to take a task")
        worker.tasks.append((task, description))
        try:
            worker.connection.send((task, work))
        except (BrokenPipeError, ConnectionResetError, EOFError):
            raise self._died(worker) from None

    def next_result(self) -> tuple[Any, Any]:
        """``(task, result)`` of the next task a worker finished (workers coming up meanwhile are noted), as
        ``wait``."""
        if not self.busy:
            raise RuntimeError("next_result() with no task running")
        while (result := self.wait()) is None:
            pass
        return result

    def _wait_once(self, timeout: float | None, starting_only: bool = False) -> tuple[Any, Any] | str | None:
        """One message or death: ``"ready"``, a finished task, or None when nothing came within ``timeout``.
        ``starting_only``: watch only the workers still starting (whose only message is "ready" or an error), so that
        no finished task is taken from the others."""
        by_handle = {}
        for worker in self.workers:
            if starting_only and worker.ready:
                continue
            by_handle[worker.connection] = worker
            by_handle[worker.process.sentinel] = worker
        for handle in wait(list(by_handle), timeout):
            worker = by_handle[handle]
            if worker.connection.poll():
                message = self._receive(worker)
                if message[0] == "ready":
                    worker.ready = True
                    return "ready"
                return self._answer(worker, message)
            if handle == worker.process.sentinel:
                raise self._died(worker)
        return None

    def _receive(self, worker: _Worker) -> tuple:
        """The next message of ``worker``, waiting for it; ``EmbeddingWorkerError`` if the worker ends first."""
        while not worker.connection.poll():
            if worker.process.sentinel in wait([worker.connection, worker.process.sentinel]) and not worker.connection.poll():
                raise self._died(worker)
        try:
            return worker.connection.recv()
        except (EOFError, OSError):
            raise self._died(worker) from None

    def run(self, work: Callable[[Any], Any], description: str) -> Any:
        """What ``work`` returns in one worker, waiting for one to be up and for the result (no other task may be
        running)."""
        while not self.has_idle_worker():
            self.wait()
        self.submit(_WAITED_FOR, work, description)
        return self.next_result()[1]

    def _answer(self, worker: _Worker, message: tuple) -> tuple[Any, Any]:
        kind, task, *rest = message
        if kind == "error":
            error, details = rest
            where = worker.tasks[0][1] if task is not None else "start-up"
            error.add_note(f"in embedding worker {worker.number} (pid {worker.process.pid}) on {where}:\n{details}")
            raise error
        worker.tasks.popleft()  # a worker answers its tasks in the order it got them
        return task, rest[0]

    def _died(self, worker: _Worker) -> EmbeddingWorkerError:
        # Its pipe or sentinel closes as the process ends, a moment before it can be reaped with its exit status.
        worker.process.join(STOP_TIMEOUT_SECONDS)
        if worker.tasks:
            doing = f"while embedding {worker.tasks[0][1]}"
        else:
            doing = "while idle" if worker.ready else "while starting"
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


__all__ = ["EmbedSentences", "EmbeddingWorkerError", "EmbeddingWorkerPool"]
