"""How long embedding workers take to come up, forked and spawned, and whether they give the bytes of one thread.

    python benchmarks/worker_startup.py [--model DIR] [--workers 2] [--rounds 3]

For each round and start method (``fork``: what one-thread workers use; ``spawn``: what workers of more threads use),
the main process runs the model once at torch's threads (so that its OpenMP pool has run, as in ``elmo-hf embed``),
starts an ``EmbeddingWorkerPool`` and times until every worker said it is ready; then one worker embeds 200
sentences, which must equal this process's vectors at one thread. Prints one JSON object: the seconds per method and
round, their medians, and ``spawn_over_fork``. Check ``load_average``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY_ROOT))

from elmo_hf import DEFAULT_MODEL_DIR  # noqa: E402
from elmo_hf.embedding import workers  # noqa: E402
from elmo_hf.embedding.embedder import ELMoEmbedder  # noqa: E402

SENTENCES = [("the quick brown fox jumps over the lazy dog ." * 3).split()] * 200


def time_start_up(embedder: ELMoEmbedder, method: str, count: int, expected: list[np.ndarray]) -> float:
    """Seconds from starting ``count`` workers with ``method`` until all are ready; checks one worker's bytes."""
    chosen = workers.start_method
    workers.start_method = lambda threads: method  # the pool asks this module-level function
    try:
        started = time.perf_counter()
        with workers.EmbeddingWorkerPool(embedder, count) as pool:
            while pool.starting:
                pool.wait()
            seconds = time.perf_counter() - started
            vectors, _ = pool.run(workers.EmbedSentences(SENTENCES), "benchmark sentences")
    finally:
        workers.start_method = chosen
    if not all(np.array_equal(got, want) for got, want in zip(vectors, expected)):
        raise AssertionError(f"{method}: a worker's vectors differ from this process's at one thread")
    return seconds


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL_DIR))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    embedder = ELMoEmbedder.from_pretrained(args.model)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    expected = embedder.embed_words(SENTENCES)
    torch.set_num_threads(threads)
    seconds: dict[str, list[float]] = {"fork": [], "spawn": []}
    for _ in range(args.rounds):
        for method in seconds:
            embedder.embed_words(SENTENCES[:20])  # the main process's OpenMP pool runs before each start
            seconds[method].append(round(time_start_up(embedder, method, args.workers, expected), 3))
    medians = {method: statistics.median(values) for method, values in seconds.items()}
    report = {
        "workers": args.workers, "main_process_threads": threads, "cpus": len(os.sched_getaffinity(0)),
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "seconds_until_ready": seconds, "median": medians,
        "spawn_over_fork": round(medians["spawn"] / medians["fork"], 1),
        "same_bytes_as_one_thread": True,
    }
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":  # the guard matters: spawned workers import this module
    main()
