"""End-to-end `elmo-hf embed` against the model alone, on the same sentences, batches and device, in one run.

    python benchmarks/embed_throughput.py [--model DIR] [--input FILE] [--lines 8000] [--device cpu]
        [--threads 2] [--batch-size N] [--max-words-per-batch N] [--token-cache-words N] [--dtype float16]
        [--representation mix] [--shard-size 1000] [--workers 1 2] [--rounds 3]

``model_alone``: the sentences cut into the embedder's own model batches (``ELMoEmbedder.prepare``, per shard, as a
run does), character ids made before the clock starts, then only the model's forward calls are timed.
``end_to_end``: ``embed_corpus`` on the same lines (reading, splitting, batching, the model, Arrow tables, Parquet,
sha256, manifest) into a temporary directory; start-up (loading the model, fingerprinting its weights) is reported
apart. ``ratio`` = end-to-end words/s / model-alone words/s. ``stage_seconds``: busy time of each pipeline stage
(read = split + batch + character ids, model, write = table + Parquet + sha256); they overlap, so their sum may exceed
the wall time. Both measurements start with an empty token-layer cache.

``workers`` (with ``--workers 1 2``): the command itself, ``elmo-hf embed --workers N --threads 1`` with this run's
model and options, in a fresh process per run as a user runs it (``contention.embed_command``; 1: one process at one
thread), and ``scaling``: words/s over the first count's (issue 28's target: >= 1.8 for 2 workers on 2 idle cores).
Run in this process instead, the two workers were forked from a process holding the whole corpus's batches and a
filled cache, and came out slower than the command's (1.47 against 1.77 on the whole corpus, docs/results/
embed-throughput.md). With ``--rounds N`` every count runs N times, alternating, and ``scaling`` is the median of the
rounds' ratios (``scaling_by_round``): on a VM whose speed swings by 10-20% from run to run, one pair of runs is not a
figure. The words/s are the command's own (its workers' start-up in, importing and loading the model out).
``model_alone_scaling`` is the ceiling to read ``scaling`` against: in the same rounds, the model-alone batches of the
shards dealt out in turn to as many forked processes (one thread, a token-layer cache each, as the workers), started
together, nothing else running: words/s over the slowest process's seconds, over one such process's. Independent
processes on a VM's vCPUs do not scale to the core count either; the gap between the two ratios is what the pipeline
(reading, pipes, writing) costs. One worker is one process whose reading and writing threads run beside its model on a
second core when there is one; ``--core-per-worker`` runs each count N on N cores only (CPU affinity, inherited by the
command and its workers), which is throughput per core as cores are added.

Memory: the process first sets the malloc thresholds the ``elmo-hf`` process sets (``reuse_freed_memory``; forked
processes inherit them), so the figures are the command's; ``--glibc-malloc-defaults`` keeps glibc's defaults, as in a
program that calls the library. The JSON's ``malloc`` says which. The ``--workers`` command runs set their own
thresholds, as the command always does, unless the environment sets them (``user_set_malloc_options``).

Words are the corpus's words; the two sentence-boundary positions the model adds per sentence are not counted.
Prints one JSON object; check ``load_average``: other processes on the machine change the figures.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

import torch

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY_ROOT))

from benchmarks.contention import embed_command, setting_environment  # noqa: E402
from benchmarks.cpu_affinity import running_on  # noqa: E402
from elmo_hf import DEFAULT_MODEL_DIR  # noqa: E402
from elmo_hf.corpus.readers import CorpusSource  # noqa: E402
from elmo_hf.embedding.embedder import ELMoEmbedder  # noqa: E402
from elmo_hf.embedding.driver import embed_corpus  # noqa: E402
from elmo_hf.embedding.manifest import model_fingerprint  # noqa: E402
from elmo_hf.runtime.process_tuning import reuse_freed_memory  # noqa: E402

DEFAULT_INPUT = REPOSITORY_ROOT / "data" / "corpora" / "tinyshakespeare.txt"


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fresh_token_cache(embedder: ELMoEmbedder, words: int) -> None:
    """Start from an empty token-layer cache (or none), as a new run does."""
    embedder.model.cache_token_embeddings(None)
    if words:
        embedder.model.cache_token_embeddings(max_words=words)


def prepared_shards(embedder: ELMoEmbedder, sentences: list[list[str]], shard_size: int) -> list:
    """``embedder.prepare`` of each shard of ``sentences``, as a run cuts them."""
    return [embedder.prepare(sentences[start : start + shard_size]) for start in range(0, len(sentences), shard_size)]


def model_alone(embedder: ELMoEmbedder, sentences: list[list[str]], shard_size: int, token_cache_words: int) -> dict:
    """Words/s of the model's forward calls alone on the embedder's batches of ``sentences``."""
    batches = [batch for shard in prepared_shards(embedder, sentences, shard_size) for batch in shard.batches]
    seconds = timed_model_calls(embedder, batches, token_cache_words)
    words = sum(len(words) for words in sentences)
    return {"words": words, "batches": len(batches), "seconds": round(seconds, 3), "words_per_second": round(words / seconds, 1)}


def timed_model_calls(embedder: ELMoEmbedder, batches: list, token_cache_words: int, at_start=None) -> float:
    """Seconds of the model's forward calls on ``batches`` (``PreparedBatch``, moved to the model's device first),
    after a warm-up call on the first (kernels, prepared weights) and from an empty token-layer cache; ``at_start()``
    is called just before the clock starts."""
    device = embedder.model.device
    inputs = [(batch.input_ids.to(device), batch.attention_mask.to(device)) for batch in batches]
    with torch.inference_mode():
        if inputs:
            embedder.model(input_ids=inputs[0][0], attention_mask=inputs[0][1])  # warm-up
        fresh_token_cache(embedder, token_cache_words)
        synchronize(device)
        if at_start is not None:
            at_start()
        started = time.perf_counter()
        for input_ids, attention_mask in inputs:
            embedder.model(input_ids=input_ids, attention_mask=attention_mask)
        synchronize(device)
        return time.perf_counter() - started


def end_to_end(embedder: ELMoEmbedder, corpus: Path, work_dir: Path, shard_size: int, token_cache_words: int) -> dict:
    """``embed_corpus`` in this process (one process: no workers), at this process's threads."""
    fresh_token_cache(embedder, token_cache_words)
    summary = embed_corpus(
        CorpusSource.open(corpus), embedder, work_dir / "out", model_name="benchmark", shard_size=shard_size,
        progress=False, workers=1, overwrite=True,
    )
    seconds = summary.seconds
    return {
        "words": summary.words,
        "shards": summary.shards,
        "seconds": round(seconds, 3),
        "words_per_second": round(summary.words_this_run / summary.seconds, 1),
        "stage_seconds": {stage: round(busy, 3) for stage, busy in summary.stage_seconds.items()},
        "stage_fraction_of_wall": {stage: round(busy / seconds, 3) for stage, busy in summary.stage_seconds.items()},
    }


def model_alone_in_processes(embedder: ELMoEmbedder, shards: list, processes: int, token_cache_words: int) -> dict:
    """The model's forward calls on ``shards`` (``prepared_shards``) dealt out in turn to ``processes`` forked
    processes at one thread, each with an empty token-layer cache of its own, started together at a barrier after a
    warm-up call: words/s of all words over the slowest process's seconds. The CPU embedding workers without the
    pipeline around them (call it at one torch thread: a forked child must not inherit a used OpenMP pool)."""
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(processes)
    children = []
    for number in range(processes):
        receiver, sender = context.Pipe(duplex=False)
        share = shards[number::processes]
        child = context.Process(target=_time_model_calls, args=(embedder, share, token_cache_words, barrier, sender), daemon=True)
        child.start()
        sender.close()
        children.append((child, receiver))
    results = []
    try:
        for child, receiver in children:
            try:
                results.append(receiver.recv())
            except EOFError:
                child.join()
                raise RuntimeError(
                    f"a model-alone process (pid {child.pid}) ended without answering, exit code {child.exitcode}"
                ) from None
    finally:
        for child, receiver in children:  # after a failure the others wait at the barrier: kill them
            if child.is_alive() and len(results) < processes:
                child.kill()
            child.join()
            receiver.close()
    words = sum(words for words, _ in results)
    slowest = max(seconds for _, seconds in results)
    return {
        "processes": processes, "words": words, "seconds": round(slowest, 3), "words_per_second": round(words / slowest, 1)
    }


def _time_model_calls(embedder: ELMoEmbedder, shards: list, token_cache_words: int, barrier, answer) -> None:
    """A child of ``model_alone_in_processes``: sends (words, seconds) of the model's calls on ``shards``."""
    torch.set_num_threads(1)
    batches = [batch for shard in shards for batch in shard.batches]
    seconds = timed_model_calls(embedder, batches, token_cache_words, at_start=barrier.wait)
    answer.send((sum(sum(len(words) for words in shard.sentences) for shard in shards), seconds))
    answer.close()


def run(args: argparse.Namespace) -> dict:
    malloc = "glibc defaults" if args.glibc_malloc_defaults or not reuse_freed_memory() else "the elmo-hf command's thresholds"
    if args.threads:
        torch.set_num_threads(args.threads)
    options = {
        name: value
        for name, value in (
            ("batch_size", args.batch_size),
            ("max_words_per_batch", args.max_words_per_batch),
            ("dtype", args.dtype),
            ("representation", args.representation),
            ("compute_dtype", args.compute_dtype),
        )
        if value is not None
    }
    started = time.perf_counter()
    embedder = ELMoEmbedder.from_pretrained(args.model, device=args.device, token_cache_words=args.token_cache_words, **options)
    loaded = time.perf_counter()
    model_fingerprint(embedder.model)
    fingerprinted = time.perf_counter()
    with open(args.input, encoding="utf-8") as lines:
        texts = [line.rstrip("\n") for line in islice(lines, args.lines)]
    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        corpus = work_dir / "corpus.txt"
        corpus.write_text("".join(f"{text}\n" for text in texts), encoding="utf-8")
        sentences = [embedder.words_of(text) for text in texts]
        alone = model_alone(embedder, sentences, args.shard_size, args.token_cache_words)
        whole = end_to_end(embedder, corpus, work_dir, args.shard_size, args.token_cache_words)
        scaling = worker_scaling(embedder, corpus, work_dir, sentences, args) if args.workers else None
    return {
        "device": str(embedder.model.device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "malloc": malloc,
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "model": str(args.model),
        "input": f"{args.input} (first {len(texts):,} lines)",
        "options": {**embedder.options(), "token_cache_words": args.token_cache_words, "shard_size": args.shard_size},
        "start_up_seconds": {"load_model": round(loaded - started, 3), "fingerprint": round(fingerprinted - loaded, 3)},
        "model_alone": alone,
        "end_to_end": whole,
        "ratio": round(whole["words_per_second"] / alone["words_per_second"], 3),
        **({"workers": scaling} if scaling else {}),
    }


def worker_scaling(
    embedder: ELMoEmbedder, corpus: Path, work_dir: Path, sentences: list[list[str]], args: argparse.Namespace
) -> dict:
    """The command (``elmo-hf embed --workers N --threads 1``, a fresh process each run) with each of ``args.workers``
    worker counts, for ``args.rounds`` rounds; each round runs every count in turn (odd rounds in reverse order, so
    that a machine whose speed drifts favours no count), each command run followed by ``model_alone_in_processes``
    with as many processes. ``scaling_by_round``: each count's words/s over the first count's in the same round;
    ``scaling``: their median (issue 28's target for 2 workers on 2 idle cores: >= 1.8);
    ``model_alone_scaling_by_round`` and ``model_alone_scaling``: the same for the model alone in independent
    processes. ``end_to_end``: the first round's runs. With ``args.core_per_worker`` each count N runs on N cores
    only (``running_on``), so that one worker's reading and writing threads do not borrow a second core: throughput
    per core as cores are added."""
    threads = torch.get_num_threads()
    shards = prepared_shards(embedder, sentences, args.shard_size)
    command_options, command_environment = command_arguments(args), setting_environment("default")
    cores = sorted(os.sched_getaffinity(0)) if args.core_per_worker else []  # Linux only: asked for, not by default
    rounds, alone_rounds = [], []
    torch.set_num_threads(1)  # the model-alone processes fork from here and must not inherit a used OpenMP pool
    try:
        for round_index in range(args.rounds):
            order = args.workers if round_index % 2 == 0 else list(reversed(args.workers))
            runs, alone = {}, {}
            for workers in order:
                with running_on(cores[:workers] if cores else None):
                    arguments = [*command_options, "--workers", str(workers), "--threads", "1"]
                    runs[workers] = embed_command(corpus, work_dir, arguments, command_environment)
                    alone[workers] = model_alone_in_processes(embedder, shards, workers, args.token_cache_words)
            rounds.append(runs)
            alone_rounds.append(alone)
    finally:
        torch.set_num_threads(threads)
    speeds, alone_speeds = speeds_by_round(rounds, args.workers), speeds_by_round(alone_rounds, args.workers)
    by_round, alone_by_round = ratios_by_round(speeds), ratios_by_round(alone_speeds)
    return {
        "threads_per_worker": 1,
        "core_per_worker": args.core_per_worker,
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "rounds": args.rounds,
        "end_to_end": {str(workers): run for workers, run in rounds[0].items()},
        "words_per_second_by_round": speeds,
        "scaling_by_round": by_round,
        "scaling": medians(by_round),
        "model_alone_words_per_second_by_round": alone_speeds,
        "model_alone_scaling_by_round": alone_by_round,
        "model_alone_scaling": medians(alone_by_round),
    }


def command_arguments(args: argparse.Namespace) -> list[str]:
    """The ``elmo-hf embed`` options that give the command this run's model, embedder options and shards."""
    options = (
        ("--model", args.model), ("--device", args.device), ("--shard-size", args.shard_size),
        ("--token-cache-words", args.token_cache_words), ("--batch-size", args.batch_size),
        ("--max-words-per-batch", args.max_words_per_batch), ("--dtype", args.dtype),
        ("--representation", args.representation), ("--compute-dtype", args.compute_dtype),
    )
    return [str(part) for flag, value in options if value is not None for part in (flag, value)]


def speeds_by_round(rounds: list[dict], counts: list[int]) -> dict[str, list[float]]:
    """Each count's words/s, round by round (``rounds``: one dict of runs by count per round)."""
    return {str(count): [runs[count]["words_per_second"] for runs in rounds] for count in counts}


def ratios_by_round(speeds: dict[str, list[float]]) -> dict[str, list[float]]:
    """Each count's words/s over the first count's (``speeds_by_round``), round by round."""
    first = next(iter(speeds.values()))
    return {count: [round(speed / one, 3) for speed, one in zip(counts, first)] for count, counts in speeds.items()}


def medians(by_round: dict[str, list[float]]) -> dict[str, float]:
    return {count: round(statistics.median(ratios), 3) for count, ratios in by_round.items()}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL_DIR), help="model directory (default: the shipped demo model)")
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT, help="text file, one sentence per line")
    parser.add_argument("--lines", type=int, default=8000, help="first lines of --input (default 8000)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--max-words-per-batch", type=int)
    parser.add_argument("--token-cache-words", type=int, default=50_000, help="0: no token-layer cache")
    parser.add_argument("--dtype", help="storage dtype of the vectors (float32, float16)")
    parser.add_argument("--representation")
    parser.add_argument("--compute-dtype", help="dtype the model runs in (float32, bfloat16, float16, int8; default: the model's)")
    parser.add_argument("--shard-size", type=int, default=1000)
    parser.add_argument(
        "--workers", type=int, nargs="+",
        help="also run end to end with each of these worker counts at one thread per worker and print the scaling "
        "over the first (e.g. --workers 1 2)",
    )
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="with --workers: run every worker count this many times, alternating, and print the median scaling (default 1)",
    )
    parser.add_argument(
        "--core-per-worker", action="store_true",
        help="with --workers: run each count N on N cores only (one worker, one core), as cores are added",
    )
    parser.add_argument(
        "--glibc-malloc-defaults", action="store_true",
        help="keep glibc's malloc thresholds (a library caller's process) instead of the elmo-hf command's",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.core_per_worker and max(args.workers or [0]) > len(cores := os.sched_getaffinity(0)):
        parser.error(f"--core-per-worker: {max(args.workers)} workers need as many cores; this process may use {len(cores)}")
    report = run(args)
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":  # the guard matters: --workers spawns processes that import this module
    main()
