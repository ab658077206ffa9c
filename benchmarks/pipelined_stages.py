"""What the one-process engine's pipelining buys: ``elmo-hf embed --workers 1``'s stages on three threads
(``engine.StagesHere``: the next shard split and the last one written while this one is embedded) against the same
tasks run whole, one after another, on one thread (``SerialStages`` below).

    python benchmarks/pipelined_stages.py [--input FILE] [--lines 8000] [--shard-size 1000] [--threads 2]
        [--rounds 3] [--model DIR]

Each round runs both, alternating, in this process with the same embedder (its token-layer cache emptied before each
run) into a temporary directory: the engine's ``ShardRunner.run`` from the first shard to the last file in place,
without the manifest or the output directory's record. Prints one JSON object: words/s of each run, ``ratio``
(pipelined / serial) per round and its median, and whether both wrote the same bytes (they must). Check
``load_average``: other processes on the machine change the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY_ROOT))

from elmo_hf import DEFAULT_MODEL_DIR  # noqa: E402
from elmo_hf.corpus.readers import CorpusSource  # noqa: E402
from elmo_hf.embedding.embedder import DEFAULT_TOKEN_CACHE_WORDS, ELMoEmbedder  # noqa: E402
from elmo_hf.embedding.engine import ShardRunner, shards_of_rows  # noqa: E402
from elmo_hf.embedding.shard_names import EMBED_SHARDS  # noqa: E402

DEFAULT_INPUT = REPOSITORY_ROOT / "data" / "corpora" / "tinyshakespeare.txt"


class SerialStages:
    """The runner's executor interface, each task run whole here as it is submitted (no thread)."""

    def __init__(self, embedder: ELMoEmbedder):
        self.embedder, self.done = embedder, []

    def begin(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def has_room(self) -> bool:
        return not self.done

    @property
    def busy(self) -> bool:
        return bool(self.done)

    def submit(self, index, task) -> None:
        self.done.append((index, task(self.embedder)))

    def wait(self) -> list:
        return [self.done.pop()]

    def drop_from(self, index) -> None:
        pass

    def settle(self) -> list:
        return []


def timed_run(source: CorpusSource, embedder: ELMoEmbedder, shard_size: int, serial: bool) -> dict:
    """One run of the engine over ``source`` into a temporary directory: words/s and the shards' sha256."""
    embedder.model.cache_token_embeddings(None)
    embedder.model.cache_token_embeddings(max_words=DEFAULT_TOKEN_CACHE_WORDS)
    runner = ShardRunner(source, embedder)
    if serial:
        runner.stages = SerialStages(embedder)
    entries: list[dict] = []
    with tempfile.TemporaryDirectory() as directory:
        chunks = shards_of_rows(source.rows(start=0), shard_size, 0, embedder.input_column)
        started = time.perf_counter()
        runner.run(((Path(directory) / EMBED_SHARDS.name(index), rows) for index, rows in enumerate(chunks)), entries.append)
        seconds = time.perf_counter() - started
    words = sum(entry["words"] for entry in entries)
    return {"words_per_second": round(words / seconds), "seconds": round(seconds, 3), "sha256": [entry["sha256"] for entry in entries]}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--lines", type=int, default=8000)
    parser.add_argument("--shard-size", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default=str(DEFAULT_MODEL_DIR))
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as directory:
        corpus = Path(directory) / "corpus.txt"
        with open(args.input, encoding="utf-8") as lines:
            corpus.write_text("".join(line for _, line in zip(range(args.lines), lines)), encoding="utf-8")
        source, embedder = CorpusSource.open(corpus), ELMoEmbedder.from_pretrained(args.model)
        rounds = []
        for round_number in range(args.rounds):
            order = (False, True) if round_number % 2 == 0 else (True, False)
            runs = {("serial" if serial else "pipelined"): timed_run(source, embedder, args.shard_size, serial) for serial in order}
            rounds.append(runs)
    ratios = [runs["pipelined"]["words_per_second"] / runs["serial"]["words_per_second"] for runs in rounds]
    result = {
        "lines": args.lines, "threads": args.threads, "shard_size": args.shard_size, "load_average": os.getloadavg(),
        "runs": [{name: {k: v for k, v in run.items() if k != "sha256"} for name, run in runs.items()} for runs in rounds],
        "ratio_by_round": [round(ratio, 3) for ratio in ratios], "ratio": round(statistics.median(ratios), 3),
        "same_bytes": all(runs["pipelined"]["sha256"] == runs["serial"]["sha256"] for runs in rounds),
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
