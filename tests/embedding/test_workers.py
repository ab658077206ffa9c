"""`embed_corpus(workers=N)` / `elmo-hf embed --workers N`: byte-identical to one process at one thread, shards in
input order, a worker's error or death fails the run naming the worker and the shard (no hang), Ctrl-C and a dead
worker leave a run that `--resume` completes byte-identically."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from elmo_hf.corpus.readers import CorpusSource
from elmo_hf.embedding.embedder import ELMoEmbedder
from elmo_hf.embedding.driver import embed_corpus
from elmo_hf.embedding.workers import EmbeddingWorkerError, EmbeddingWorkerPool, EmbedSentences
from elmo_hf.runtime.parallelism import default_workers, start_method

from ..conftest import REPOSITORY_ROOT
from .test_shards import listed_and_alone, run_embed, shard_hashes, synthetic_sentences, wait_for_shards, write_lines

CORPUS_LINES = 600
SHARD_SIZE = 20


@pytest.fixture(scope="module")
def model_dir(converted_fixture_dir) -> Path:
    return converted_fixture_dir


def corpus_lines() -> list[str]:
    # Long lines first: the first shard takes longest, so later shards finish before it and must wait their turn.
    long_lines = [" ".join(["the bank raised rates quickly ,"] * 12)] * SHARD_SIZE
    return long_lines + synthetic_sentences(CORPUS_LINES - SHARD_SIZE, seed=3)


@pytest.fixture(scope="module")
def one_thread_run(tmp_path_factory, model_dir):
    """The reference: one process at one thread (the CLI's arguments, the output directory)."""
    directory = tmp_path_factory.mktemp("one-thread")
    corpus = write_lines(directory / "corpus.txt", corpus_lines())
    common = [corpus, "--model", model_dir, "--shard-size", str(SHARD_SIZE)]
    assert run_embed(*common, "--output", directory / "out", "--threads", "1", "--workers", "1") == 0
    return common, directory / "out"


def manifest_of(output_dir: Path) -> dict:
    return json.loads((output_dir / "manifest.json").read_text())


def assert_same_output(output_dir: Path, reference_dir: Path) -> None:
    assert shard_hashes(output_dir) == shard_hashes(reference_dir)
    output, reference = manifest_of(output_dir), manifest_of(reference_dir)
    for part in ("shards", "totals", "options", "model", "complete", "format", "version"):
        assert output[part] == reference[part], part


def test_default_is_one_worker_per_usable_core_and_shard_on_the_cpu(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert default_workers("cpu") == 4 and default_workers(None, rows=None) == 4
    assert default_workers("cpu", rows=2500, shard_size=1000) == 3  # 3 shards
    assert default_workers("cpu", rows=1000, shard_size=1000) == 1 and default_workers("cpu", rows=0) == 1
    assert default_workers("cuda") == 1 and default_workers("cuda:1", rows=10**6) == 1
    # A few long rows: counted by their characters too, when shards are cut by characters.
    assert default_workers("cpu", rows=370, shard_size=1000, characters=1_117_562, shard_characters=200_000) == 4
    assert default_workers("cpu", rows=370, shard_size=1000, characters=300_000, shard_characters=200_000) == 2
    assert default_workers("cpu", rows=370, shard_size=1000, characters=1_117_562, shard_characters=0) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's (or the scheduler's) limit on cores
    assert default_workers("cpu") == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "not a number")
    assert default_workers("cpu") == 4


def test_one_thread_workers_fork_and_others_spawn():
    assert start_method(1) == "fork" and start_method(2) == "spawn"


def test_the_library_and_the_command_choose_the_same_default(tmp_path, one_thread_run, monkeypatch):
    """No --workers: embed_corpus's default_workers(), here 2 (two usable cores, 30 shards), same bytes."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    started = []
    original = EmbeddingWorkerPool.__init__
    monkeypatch.setattr(EmbeddingWorkerPool, "__init__", lambda self, *args: started.append(args[1]) or original(self, *args))
    common, reference_dir = one_thread_run
    assert run_embed(*common, "--output", tmp_path / "out") == 0
    assert started == [2]
    assert_same_output(tmp_path / "out", reference_dir)


def test_workers_give_the_bytes_of_one_thread_in_input_order(tmp_path, one_thread_run):
    common, reference_dir = one_thread_run
    assert run_embed(*common, "--output", tmp_path / "out", "--workers", "2") == 0
    assert_same_output(tmp_path / "out", reference_dir)
    rows = [row for path in sorted((tmp_path / "out").glob("shard-*.parquet")) for row in pq.read_table(path)["input_row"].to_pylist()]
    assert rows == list(range(CORPUS_LINES))
    assert run_embed("--verify", tmp_path / "out") == 0


def test_the_default_counts_a_text_files_shards_by_its_characters_not_its_bytes(tmp_path, model_dir, monkeypatch):
    """Three rows of 300 Hangul syllables are one shard of 900 characters at --shard-characters 1000 (2,703 bytes
    would have said 3 shards): one process, no worker forked for nothing."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    pools = []
    monkeypatch.setattr(
        "elmo_hf.embedding.driver.EmbeddingWorkerPool", lambda embedder, workers, threads: pools.append(workers)
    )
    corpus = write_lines(tmp_path / "corpus.txt", ["한" * 300, "국" * 300, "어" * 300])
    embedder = ELMoEmbedder.from_pretrained(model_dir)
    summary = embed_corpus(
        CorpusSource.open(corpus), embedder, tmp_path / "out", model_name="m", shard_characters=1000, progress=False
    )
    assert pools == [] and summary.shards == 1


def test_invalid_worker_counts_are_refused(tmp_path, model_dir):
    corpus = write_lines(tmp_path / "corpus.txt", ["one ."])
    embedder = ELMoEmbedder.from_pretrained(model_dir)
    for workers in (0, True, 1.5):
        with pytest.raises(ValueError, match="workers must be an int >= 1"):
            embed_corpus(CorpusSource.open(corpus), embedder, tmp_path / "out", model_name="m", workers=workers, progress=False)
    with pytest.raises(ValueError, match="worker_threads must be an int >= 1"):
        embed_corpus(CorpusSource.open(corpus), embedder, tmp_path / "out", model_name="m", workers=2, worker_threads=0, progress=False)
    assert not (tmp_path / "out").exists()


def test_counts_given_as_numpy_ints_are_taken_as_ints(tmp_path, model_dir):
    """A count read from a NumPy array or a config loaded with NumPy works as the same Python int would, and the
    manifest records plain ints (JSON cannot hold a NumPy int)."""
    corpus = write_lines(tmp_path / "corpus.txt", ["one .", "two words .", "three ."])
    embedder = ELMoEmbedder.from_pretrained(model_dir)
    summary = embed_corpus(
        CorpusSource.open(corpus), embedder, tmp_path / "out", model_name="m", shard_size=np.int64(2),
        shard_characters=np.int32(0), workers=np.int64(2), worker_threads=np.int64(1), progress=False,
    )
    assert summary.shards == 2
    options = json.loads((tmp_path / "out" / "manifest.json").read_text())["options"]
    assert (options["shard_size"], options["shard_characters"]) == (2, 0)


def test_workers_refuse_a_model_off_the_cpu(tmp_path, model_dir):
    corpus = write_lines(tmp_path / "corpus.txt", ["one ."])
    embedder = ELMoEmbedder.from_pretrained(model_dir)
    embedder.model.to("meta")  # stands for a GPU here: anything but the CPU
    with pytest.raises(ValueError, match="workers > 1 run on the CPU only"):
        embed_corpus(CorpusSource.open(corpus), embedder, tmp_path / "out", model_name="m", workers=2, progress=False)
    with pytest.raises(ValueError, match="workers > 1 run on the CPU only"):
        EmbeddingWorkerPool(embedder, 2)
    assert not (tmp_path / "out").exists()


def test_a_worker_that_outlives_the_main_process_exits(tmp_path, model_dir):
    """The main process killed: its workers see their pipe closed and end (no orphan keeps a core)."""
    code = (
        "import os, sys, time\n"
        "from elmo_hf.embedding.embedder import ELMoEmbedder\n"
        "from elmo_hf.embedding.workers import EmbeddingWorkerPool\n"
        "if __name__ == '__main__':\n"
        f"    pool = EmbeddingWorkerPool(ELMoEmbedder.from_pretrained({str(model_dir)!r}), 2)\n"
        "    print(' '.join(str(worker.process.pid) for worker in pool.workers), flush=True)\n"
        "    time.sleep(600)\n"
    )
    script = tmp_path / "main.py"
    script.write_text(code)
    process = subprocess.Popen([sys.executable, str(script)], cwd=REPOSITORY_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(pid) for pid in process.stdout.readline().split()]
        assert len(pids) == 2
    finally:
        process.kill()
        process.wait()
    deadline = time.monotonic() + 30
    while any(running(pid) for pid in pids):
        assert time.monotonic() < deadline, f"workers {pids} outlived their main process"
        time.sleep(0.1)


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (a zombie has ended; its parent has not reaped it yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class PoisonedEmbedder(ELMoEmbedder):
    """Fails on a sentence holding the word ``poison`` (in the worker: this class is pickled and imported there),
    once ``wait_for`` exists (or after a minute), if it is set."""

    wait_for: Path | None = None

    def embed_prepared(self, prepared, on_progress=None):
        if any("poison" in words for words in prepared.sentences):
            if self.wait_for is not None:
                wait_for_file(self.wait_for)
            raise ValueError("poisoned sentence")
        return super().embed_prepared(prepared, on_progress)


def test_a_workers_error_stops_the_run_and_keeps_the_shards_before_it(tmp_path, model_dir):
    lines = synthetic_sentences(100, seed=4)
    lines[65] = "a poison word"
    corpus = write_lines(tmp_path / "corpus.txt", lines)
    embedder = PoisonedEmbedder.from_pretrained(model_dir)
    # The error comes once the shard before it is written: without that, a worker the scheduler left behind on a busy
    # machine could still hold shard 0 when shard 6 fails, and nothing would be kept (the run drops what is in the
    # workers).
    embedder.wait_for = tmp_path / "out" / "shard-00005.parquet"
    with pytest.raises(ValueError, match="poisoned sentence") as raised:
        embed_corpus(CorpusSource.open(corpus), embedder, tmp_path / "out", model_name="m", shard_size=10, workers=2, progress=False)
    assert "in embedding worker" in "".join(raised.value.__notes__) and "shard-00006.parquet (input rows 60-69)" in "".join(raised.value.__notes__)
    listed = [entry["file"] for entry in manifest_of(tmp_path / "out")["shards"]]
    assert listed == [f"shard-0000{index}.parquet" for index in range(6)]
    assert sorted(path.name for path in (tmp_path / "out").glob("shard-*")) == listed
    # The shards given to the other worker after it (their temporary files made) are gone with the run.
    assert not [path.name for path in (tmp_path / "out").iterdir() if path.name.endswith(".tmp")]


def test_a_failed_run_stops_its_workers_before_it_removes_their_temporary_files(tmp_path, model_dir, monkeypatch):
    """The order matters (``engine.ShardRunner``): a worker still running when its shard's temporary file
    is removed would write (or recreate) it, a file that nothing lists. Removing the pool's ``terminate()`` from that
    path survived every other test: the pool's own exit kills the workers a few milliseconds later."""
    events: list[str] = []
    main_pid = os.getpid()
    original_terminate, original_unlink = EmbeddingWorkerPool.terminate, Path.unlink

    def terminate(self):
        events.append("terminate")
        original_terminate(self)

    def unlink(self, missing_ok=False):
        if os.getpid() == main_pid and self.name.endswith(".tmp"):
            events.append("unlink")
        original_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(EmbeddingWorkerPool, "terminate", terminate)
    monkeypatch.setattr(Path, "unlink", unlink)
    lines = synthetic_sentences(100, seed=4)
    lines[65] = "a poison word"
    corpus = write_lines(tmp_path / "corpus.txt", lines)
    embedder = PoisonedEmbedder.from_pretrained(model_dir)
    embedder.wait_for = tmp_path / "out" / "shard-00005.parquet"
    with pytest.raises(ValueError, match="poisoned sentence"):
        embed_corpus(CorpusSource.open(corpus), embedder, tmp_path / "out", model_name="m", shard_size=10, workers=2, progress=False)
    assert "unlink" in events and events.index("terminate") < events.index("unlink"), events
    assert not [path.name for path in (tmp_path / "out").iterdir() if path.name.endswith(".tmp")]


def test_an_invalid_row_read_ahead_stops_the_run_after_the_shards_before_it(tmp_path, model_dir, capsys):
    lines = synthetic_sentences(30, seed=7) + ["bad \udcff line"] + synthetic_sentences(9, seed=8)
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes("".join(f"{line}\n" for line in lines).encode("utf-8", "surrogateescape"))
    assert run_embed(corpus, "--model", model_dir, "--output", tmp_path / "out", "--shard-size", "10", "--workers", "2") == 2
    assert "line 31" in capsys.readouterr().err
    assert [entry["file"] for entry in manifest_of(tmp_path / "out")["shards"]] == [f"shard-0000{index}.parquet" for index in range(3)]


def test_spawned_workers_write_the_bytes_of_one_thread_in_input_order(tmp_path, one_thread_run, model_dir, monkeypatch):
    """Workers at 2 threads are spawned (a fresh interpreter receives the pickled embedder) and take whole shards to
    split, embed and write, as forked ones do. Should no worker be up when this process would run a shard itself, it
    waits for one first, so that the workers get the rest (on a busy machine they may be up before the first shard:
    then they get all)."""
    from elmo_hf.embedding.engine import StagesInWorkers

    common, reference_dir = one_thread_run
    here, original = [], StagesInWorkers.run_here

    def run_here_once_a_worker_is_up(writer, task):
        here.append(task.name)
        while writer.pool.starting == writer.pool.size:
            writer.pool.wait()  # None: a worker came up
        return original(writer, task)

    monkeypatch.setattr(StagesInWorkers, "run_here", run_here_once_a_worker_is_up)
    embedder = ELMoEmbedder.from_pretrained(model_dir)
    summary = embed_corpus(
        CorpusSource.open(common[0]), embedder, tmp_path / "out", model_name=str(model_dir), shard_size=SHARD_SIZE,
        workers=2, worker_threads=2, progress=False,
    )
    assert start_method(2) == "spawn" and len(here) <= 1 < summary.shards  # the workers wrote the others
    assert_same_output(tmp_path / "out", reference_dir)


def test_a_spawned_worker_that_cannot_load_the_embedder_is_named(tmp_path, model_dir):
    class Unpicklable(ELMoEmbedder):  # a local class cannot be imported in the worker
        pass

    embedder = Unpicklable.__new__(Unpicklable)
    embedder.__dict__.update(ELMoEmbedder.from_pretrained(model_dir).__dict__)
    with pytest.raises(Exception, match="Unpicklable|local object"):
        with EmbeddingWorkerPool(embedder, 2, threads=2) as pool:  # 2 threads: spawned
            pool.wait()


def in_forked_workers(monkeypatch, action) -> None:
    """Run ``action()`` in forked workers where they set their threads (they inherit this patch), not here."""
    main_pid = os.getpid()
    import torch

    original = torch.set_num_threads

    def set_num_threads(threads):
        if os.getpid() != main_pid:
            action()
        original(threads)

    monkeypatch.setattr(torch, "set_num_threads", set_num_threads)


def test_workers_forked_after_the_model_ran_at_two_threads_give_the_bytes_of_one_thread(model_dir):
    """libgomp's pool is not copied by fork: the workers (one thread) must neither hang nor change a bit."""
    import numpy as np
    import torch

    embedder = ELMoEmbedder.from_pretrained(model_dir)
    sentences = [line.split() for line in corpus_lines()[:60]]
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        embedder.embed_words(sentences)  # the main process's OpenMP pool runs before the fork
        with EmbeddingWorkerPool(embedder, 2) as pool:
            assert pool.start_method == "fork"
            vectors, _ = pool.run(EmbedSentences(sentences), "test sentences")
        torch.set_num_threads(1)
        expected = embedder.embed_words(sentences)
    finally:
        torch.set_num_threads(threads)
    assert len(vectors) == len(expected) and all(np.array_equal(got, want) for got, want in zip(vectors, expected))


def test_a_forked_worker_that_dies_while_starting_is_named(model_dir, monkeypatch):
    in_forked_workers(monkeypatch, lambda: os._exit(3))
    with EmbeddingWorkerPool(ELMoEmbedder.from_pretrained(model_dir), 2) as pool:
        with pytest.raises(EmbeddingWorkerError, match=r"embedding worker [01] \(pid \d+\) died \(exit code 3\) while starting"):
            pool.wait()


def wait_for_file(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_noting_workers_that_come_up_leaves_the_others_results_waiting(model_dir, monkeypatch):
    import multiprocessing

    in_forked_workers(monkeypatch, lambda: multiprocessing.current_process().name.endswith("-1") and time.sleep(600))
    with EmbeddingWorkerPool(ELMoEmbedder.from_pretrained(model_dir), 2) as pool:
        while not pool.has_idle_worker():
            pool.wait()
        pool.submit("the task", EmbedSentences([["a", "sentence", "."]]), "a test sentence")  # to worker 0: worker 1 is still starting
        while not pool.workers[0].connection.poll():  # its answer is waiting
            time.sleep(0.01)
        pool.collect_ready()
        assert pool.busy == 1 and pool.starting == 1
        task, (vectors, _) = pool.next_result()
    assert task == "the task" and len(vectors) == 1


@dataclass
class WaitForFile:
    """A worker's work: wait until ``path`` exists (the test decides when the worker is done), return ``label``."""

    path: Path
    label: str
    payload: bytes = b""

    def __call__(self, embedder) -> str:
        wait_for_file(self.path, timeout=600)
        return self.label


def test_a_task_larger_than_the_pipe_holds_is_handed_over_while_the_worker_is_busy(tmp_path, model_dir):
    """The main process's send of a worker's next task returns while the worker is still on its current one, however
    large the task: a send that waited for the worker held every other worker's next shard back (two workers on
    shards of long lines did the work of about 1.2 cores)."""
    release = tmp_path / "release"
    with EmbeddingWorkerPool(ELMoEmbedder.from_pretrained(model_dir), 1) as pool:
        while not pool.has_idle_worker():
            pool.wait()
        pool.submit("busy", WaitForFile(release, "busy"), "the task the worker is on")
        large = WaitForFile(release, "large", payload=os.urandom(4 * 1024 * 1024))  # far more than a pipe holds
        handing_over = threading.Thread(target=pool.submit, args=("large", large, "a large task"))
        handing_over.start()
        handing_over.join(timeout=30)
        handed_over = not handing_over.is_alive()
        release.touch()  # lets the worker finish (and, on a failure, the send)
        handing_over.join()
        assert handed_over, "the send of the next task waited for the worker to finish its current one"
        assert [pool.next_result(), pool.next_result()] == [("busy", "busy"), ("large", "large")]


def refuse_to_be_unpickled():
    raise LookupError("this task cannot be read here")


class UnreadableInTheWorker:
    """Pickles, but unpickling it raises (as a task whose class a spawned worker cannot import would)."""

    def __reduce__(self):
        return refuse_to_be_unpickled, ()


def test_a_task_a_worker_cannot_unpickle_fails_with_its_error_naming_the_worker_and_the_task(model_dir):
    with EmbeddingWorkerPool(ELMoEmbedder.from_pretrained(model_dir), 1) as pool:
        while not pool.has_idle_worker():
            pool.wait()
        pool.submit(0, UnreadableInTheWorker(), "shard 0 (rows 0-19)")
        with pytest.raises(LookupError, match="this task cannot be read here") as raised:
            pool.next_result()
    assert any(re.match(r"in embedding worker 0 \(pid \d+\) on shard 0 \(rows 0-19\):", note) for note in raised.value.__notes__)
    assert "in refuse_to_be_unpickled" in "".join(raised.value.__notes__)  # the worker's traceback comes with it


def count_calls_here(monkeypatch, embedder) -> list[int]:
    """The number of shards this process embeds itself (a forked worker's calls count in its own copy)."""
    calls = [0]
    original = embedder.embed_prepared

    def embed_prepared(prepared, on_progress=None):
        calls[0] += 1
        return original(prepared, on_progress)

    monkeypatch.setattr(embedder, "embed_prepared", embed_prepared)
    return calls


def test_workers_slow_to_start_leave_the_first_shards_to_the_main_process_in_order(tmp_path, one_thread_run, model_dir, monkeypatch):
    common, reference_dir = one_thread_run
    in_forked_workers(monkeypatch, lambda: wait_for_file(tmp_path / "out" / "shard-00002.parquet"))  # 3 shards written
    embedder = ELMoEmbedder.from_pretrained(model_dir)
    calls = count_calls_here(monkeypatch, embedder)
    summary = embed_corpus(
        CorpusSource.open(common[0]), embedder, tmp_path / "out", model_name=str(model_dir), shard_size=SHARD_SIZE,
        workers=2, progress=False,
    )
    assert 3 <= calls[0] < summary.shards  # both the main process and the workers embedded shards
    assert_same_output(tmp_path / "out", reference_dir)


def test_the_workers_write_the_shards_they_embed(tmp_path, one_thread_run, model_dir, monkeypatch):
    """Each shard's file is written where it was embedded: by a worker (its vectors never come back through a pipe),
    or here for the shards this process embedded while no worker was up."""
    from elmo_hf.embedding import engine as engine_module

    common, reference_dir = one_thread_run
    writers = tmp_path / "writers"
    original = engine_module.write_shard_file

    def write_shard_file(*args, **kwargs):  # inherited by the forked workers
        with open(writers, "a") as log:
            log.write(f"{os.getpid()}\n")
        return original(*args, **kwargs)

    monkeypatch.setattr(engine_module, "write_shard_file", write_shard_file)
    embedder = ELMoEmbedder.from_pretrained(model_dir)
    calls = count_calls_here(monkeypatch, embedder)
    summary = embed_corpus(
        CorpusSource.open(common[0]), embedder, tmp_path / "out", model_name=str(model_dir), shard_size=SHARD_SIZE,
        workers=2, progress=False,
    )
    pids = writers.read_text().split()
    assert len(pids) == summary.shards and pids.count(str(os.getpid())) == calls[0] < summary.shards
    assert summary.stage_seconds["write"] > 0
    assert_same_output(tmp_path / "out", reference_dir)


def test_workers_that_never_start_do_not_stop_the_run(tmp_path, one_thread_run, model_dir, monkeypatch):
    """Decided: a worker alive but silent never gets a shard; the main process embeds them all and the run ends (the
    workers are killed CLOSE_TIMEOUT_SECONDS after it). A worker that dies fails the run instead (tests above)."""
    common, reference_dir = one_thread_run
    in_forked_workers(monkeypatch, lambda: time.sleep(600))
    embedder = ELMoEmbedder.from_pretrained(model_dir)
    calls = count_calls_here(monkeypatch, embedder)
    summary = embed_corpus(
        CorpusSource.open(common[0]), embedder, tmp_path / "out", model_name=str(model_dir), shard_size=SHARD_SIZE,
        workers=2, progress=False,
    )
    assert calls[0] == summary.shards == CORPUS_LINES // SHARD_SIZE
    assert_same_output(tmp_path / "out", reference_dir)


def cli_in_own_group(*args) -> subprocess.Popen:
    """``elmo-hf embed`` in a process group of its own (so that a Ctrl-C can go to the whole group, as a terminal
    sends it), with SIGINT at its default (see tests/embedding/test_shards.py)."""
    return subprocess.Popen(
        [sys.executable, "-m", "elmo_hf_cli", "embed", *map(str, args), "--no-progress"],
        cwd=REPOSITORY_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def worker_pids(parent: int) -> list[int]:
    """The pids of ``parent``'s embedding workers (its children, forked or spawned, not a resource tracker)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == parent and "resource_tracker" not in command:
            pids.append(int(entry.name))
    return sorted(pids)


@pytest.mark.parametrize("interruption", ["worker-killed", "ctrl-c", "sigterm", "sigterm-to-the-group"])
def test_a_dead_worker_or_ctrl_c_stops_the_run_and_resume_completes_it_byte_identically(tmp_path, one_thread_run, interruption):
    """SIGTERM (``kill PID``, or to the whole group as systemd sends it) is handled as Ctrl-C is, exit 143
    (``elmo_hf_cli.common.sigterm_as_ctrl_c``); it used to end the process at once, leaving the marker and the lock."""
    common, reference_dir = one_thread_run
    output_dir = tmp_path / "out"
    process = cli_in_own_group(*common, "--output", output_dir, "--workers", "2")
    try:
        wait_for_shards(process, output_dir, count=2)
        if interruption == "worker-killed":
            workers = worker_pids(process.pid)
            assert len(workers) == 2, workers
            os.kill(workers[0], signal.SIGKILL)
        elif interruption == "sigterm":
            os.kill(process.pid, signal.SIGTERM)
        elif interruption == "sigterm-to-the-group":
            os.killpg(process.pid, signal.SIGTERM)
        else:
            os.killpg(process.pid, signal.SIGINT)
        started = time.monotonic()
        _, stderr = process.communicate(timeout=60)  # no hang
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert time.monotonic() - started < 60
    if interruption == "worker-killed":
        assert process.returncode == 1, stderr[-2000:]
        assert f"embedding worker 0 (pid {workers[0]}) died (killed by SIGKILL) while embedding shard-" in stderr
        assert "run the same command with --resume to continue" in stderr and "Traceback" not in stderr
    else:
        assert process.returncode == (130 if interruption == "ctrl-c" else 143), stderr[-2000:]
        assert "finished shard(s) are kept" in stderr and "Traceback" not in stderr
    assert not worker_pids(process.pid)
    manifest = manifest_of(output_dir)
    assert not manifest["complete"] and 2 <= len(manifest["shards"]) < CORPUS_LINES // SHARD_SIZE
    listed_and_alone(output_dir)  # no shard out of order and no temporary file: what a worker was writing went

    assert run_embed(*common, "--output", output_dir, "--resume", "--workers", "2") == 0
    assert_same_output(output_dir, reference_dir)


@pytest.mark.usefixtures("ctrl_c_as_from_a_terminal")
@pytest.mark.parametrize("workers", [1, 2])
def test_a_ctrl_c_while_a_shard_is_recorded_waits_until_the_manifest_lists_it(tmp_path, model_dir, monkeypatch, workers):
    """A Ctrl-C that lands after a shard's file is in place and before the manifest lists it is raised once the
    manifest is written: no finished file is left that no manifest lists (seen on CI with --workers 2), and one
    process does not list the next shard in its place."""
    from tqdm.auto import tqdm

    corpus = write_lines(tmp_path / "corpus.txt", synthetic_sentences(100, seed=5))
    original, records = tqdm.update, []

    def update(self, n=1):  # a shard's record begins by counting its skipped rows (0 here; sentences are counted > 0)
        if n == 0:
            records.append(n)
            if len(records) == 3:
                signal.raise_signal(signal.SIGINT)
        return original(self, n)

    monkeypatch.setattr(tqdm, "update", update)
    with pytest.raises(KeyboardInterrupt):
        embed_corpus(
            CorpusSource.open(corpus), ELMoEmbedder.from_pretrained(model_dir), tmp_path / "out", model_name="m",
            shard_size=10, workers=workers, progress=False,
        )
    listed = listed_and_alone(tmp_path / "out")
    # One process also records the shard its writing thread holds (engine.StagesHere); the workers drop theirs.
    assert listed == [f"shard-0000{index}.parquet" for index in range(len(listed))] and 3 <= len(listed) <= 4


@pytest.mark.usefixtures("ctrl_c_as_from_a_terminal")
def test_a_ctrl_c_while_a_shards_temporary_file_is_made_leaves_no_temporary_file(tmp_path, model_dir, monkeypatch):
    """The main process makes each shard's temporary file before a worker fills it: a Ctrl-C right after one is made
    waits until the run holds its name, so the run's cleanup removes it (the output, with a shard recorded, stays)."""
    from elmo_hf.embedding import engine as engine_module

    corpus = write_lines(tmp_path / "corpus.txt", synthetic_sentences(100, seed=6))
    original, made = engine_module.temporary_path_beside, []

    def made_then_ctrl_c(path):  # the first temporary file made once a shard is recorded
        made.append(original(path))
        if (path.parent / "manifest.json").exists():
            signal.raise_signal(signal.SIGINT)
        return made[-1]

    monkeypatch.setattr(engine_module, "temporary_path_beside", made_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        embed_corpus(
            CorpusSource.open(corpus), ELMoEmbedder.from_pretrained(model_dir), tmp_path / "out", model_name="m",
            shard_size=10, workers=2, progress=False,
        )
    assert listed_and_alone(tmp_path / "out") and not [path for path in made if path.exists()]
