"""Peak memory of pre-training data on a small and a 20x larger corpus: it must not grow with the corpus.

    python benchmarks/pretrain_memory.py [--words 1000000 20000000] [--what vocabulary stream pretrain] [--steps 5]

Each corpus is generated once (seeded, so every run reads the same bytes) into a temporary directory as shards named
like the 1B Word Benchmark's (``news.en-000NN-of-000MM``, text, one sentence of whitespace-separated words per
line): words drawn from a fixed Zipf-Mandelbrot distribution over ``--types`` word types (so the distinct words, and
with them the vocabulary, saturate: what grows is the corpus), sentence lengths uniform in 1..40.

Each measurement is a fresh process (``--measure``); its peak RSS is the kernel's (``wait4``'s ``ru_maxrss``: every
resident page, file-backed ones included). What is measured:

- ``vocabulary``: ``ELMoWordVocabulary.from_corpus(shards)``: counting streamed over the shards.
- ``stream``: the library path: the vocabulary as above, then ``WindowedBiLMStream`` over ``stream_sentences(shards)``
  (its tokens in a file without a name) and ``--steps`` training steps of the ``tiny`` model, batch 32 x 20.
- ``pretrain``: the command users run, ``elmo-hf pretrain --corpus SHARDS --config tiny --max-steps STEPS`` (windowed,
  a small held-out file, ``--max-vocab-size 10000``): sentences into a `datasets` cache, vocabulary, windowed
  stream, Trainer steps, the final evaluation, report.

Beside the kernel's peak, a sampler polls ``/proc/PID/status`` of the measured processes every 0.1 s for the largest
anonymous (RssAnon: the process's own objects and arrays) and file-backed (RssFile: mapped libraries and files, such
as a memory-mapped `datasets` Arrow cache, pages the kernel may drop under pressure) resident memory.

Prints one JSON object: every run's peak RSS (MB), sampled peaks and seconds, and per measurement the ratio of the
largest corpus's peak to the smallest's (the target: <= 1.2).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
MEASUREMENTS = ("vocabulary", "stream", "pretrain")
NUM_SHARDS = 10
BATCH_ROWS, WINDOW = 32, 20
# The softmax of `pretrain`, fixed (as bilm-tf's n_tokens_vocab): its full-softmax evaluation holds (rows, window,
# vocabulary) logits, memory that follows the vocabulary, which the smaller corpus has not seen all of.
PRETRAIN_VOCABULARY_SIZE = 10_000


# ----------------------------------------------------------------------------------------------------------------------
# The corpus
# ----------------------------------------------------------------------------------------------------------------------
def word_of_rank(rank: int) -> str:
    """A distinct lower-case spelling for each rank (base 26, at least two letters)."""
    letters = []
    rank += 26
    while rank:
        rank, digit = divmod(rank, 26)
        letters.append(chr(ord("a") + digit))
    return "".join(reversed(letters))


def write_corpus(directory: Path, num_words: int, num_types: int, seed: int = 0) -> Path:
    """``num_words`` Zipf-Mandelbrot words (p(rank) ~ 1 / (rank + 2.7)) in sentences of 1..40 words, in NUM_SHARDS
    text shards; the same seed gives the same bytes."""
    import numpy as np

    directory.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    cumulative = np.cumsum(1.0 / (np.arange(num_types) + 2.7))
    cumulative /= cumulative[-1]
    spellings = np.array([word_of_rank(rank) for rank in range(num_types)], dtype=object)
    words_per_shard = -(-num_words // NUM_SHARDS)
    written = 0
    for shard in range(NUM_SHARDS):
        count = min(words_per_shard, num_words - written)
        with open(directory / f"news.en-{shard + 1:05d}-of-{NUM_SHARDS:05d}", "w", encoding="utf-8") as file:
            while count > 0:
                chunk = min(count, 1 << 20)
                words = spellings[np.searchsorted(cumulative, rng.random(chunk), side="right")]
                lengths = rng.integers(1, 41, size=chunk // 20 + 2)
                ends = np.minimum(np.cumsum(lengths), chunk)
                starts = np.append(0, ends[:-1])
                file.write("".join(" ".join(words[start:end]) + "\n" for start, end in zip(starts, ends) if end > start))
                count -= chunk
                written += chunk
    return directory


# ----------------------------------------------------------------------------------------------------------------------
# One measurement, in its own process
# ----------------------------------------------------------------------------------------------------------------------
def measure_vocabulary(corpus: Path, work: Path, steps: int) -> dict:
    from elmo_hf.corpus.vocabulary import ELMoWordVocabulary

    vocabulary = ELMoWordVocabulary.from_corpus(corpus, "whitespace", min_count=1)
    return {"vocabulary_size": len(vocabulary), "words": sum(vocabulary.counts) - 2 * vocabulary.counts[0]}


def measure_stream(corpus: Path, work: Path, steps: int) -> dict:
    import torch

    from elmo_hf import ELMoConfig
    from elmo_hf.corpus.sentences import stream_sentences
    from elmo_hf.corpus.vocabulary import ELMoWordVocabulary
    from elmo_hf.modeling_elmo_pretraining import ELMoForPreTraining
    from elmo_hf.pretraining.data import WindowedBiLMStream
    from elmo_hf.pretraining.options import CONFIG_PRESETS

    torch.set_num_threads(1)
    vocabulary = ELMoWordVocabulary.from_corpus(corpus, "whitespace", min_count=1)
    stream = WindowedBiLMStream(
        stream_sentences(corpus, "whitespace"), vocabulary, num_rows=BATCH_ROWS, window_size=WINDOW, token_directory=work
    )
    torch.manual_seed(0)
    model = ELMoForPreTraining(ELMoConfig(**CONFIG_PRESETS["tiny"], word_vocab_size=len(vocabulary), softmax_num_samples=64))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for step, batch in zip(range(steps), stream.batches()):
        loss = model(**{key: value for key, value in batch.items() if key not in ("window_index", "row_index")}).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(round(float(loss), 4))
    return {"num_positions": stream.num_positions, "num_batches": stream.num_batches, "losses": losses}


def measure_pretrain(corpus: Path, work: Path, steps: int) -> dict:
    held_out = work / "held_out.txt"
    held_out.write_text("".join(f"{line}\n" for line in (corpus / sorted(os.listdir(corpus))[0]).read_text().splitlines()[:50]))
    command = [
        sys.executable, "-m", "elmo_hf_cli", "pretrain", "--corpus", str(corpus), "--held-out", str(held_out),
        "--output", str(work / "run"), "--config", "tiny", "--word-splitter", "whitespace", "--max-steps", str(steps),
        "--batch-size", str(BATCH_ROWS), "--window-size", str(WINDOW), "--eval-steps", "0", "--save-steps", str(steps),
        "--train-eval-sentences", "50", "--softmax-samples", "64", "--max-vocab-size", str(PRETRAIN_VOCABULARY_SIZE),
        "--threads", "1", "--no-progress",
    ]
    subprocess.run(command, check=True, cwd=REPOSITORY_ROOT, stdout=subprocess.DEVNULL, env={**os.environ, "HF_DATASETS_CACHE": str(work / "datasets")})
    report = json.loads((work / "run" / "pretraining_report.json").read_text())
    return {"steps": report["steps"], "vocabulary_size": report["vocabulary_size"], "num_train_sentences": report["num_train_sentences"]}


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (Linux /proc)."""
    pids, index = [pid], 0
    while index < len(pids):
        try:
            for task in os.listdir(f"/proc/{pids[index]}/task"):
                pids += [int(child) for child in Path(f"/proc/{pids[index]}/task/{task}/children").read_text().split()]
        except OSError:
            pass
        index += 1
    return pids


class ResidentSampler(threading.Thread):
    """Polls /proc/PID/status of a process tree every 0.1 s: the largest RssAnon (memory of its own: Python
    objects, arrays) and RssFile (pages of mapped files: libraries, memory-mapped Arrow files) any of them had. The
    kernel may drop file pages under pressure, not anonymous ones; the peak RSS (ru_maxrss) counts both."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peaks, self.done = pid, {"RssAnon": 0, "RssFile": 0}, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.1):
            for pid in process_tree(self.pid):
                try:
                    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
                except OSError:
                    continue
                for line in lines:
                    key, _, value = line.partition(":")
                    if key in self.peaks:
                        self.peaks[key] = max(self.peaks[key], int(value.split()[0]))


def run_measurement(what: str, corpus: Path, work: Path, steps: int) -> dict:
    """Run ``--measure what`` in a fresh process (and, for ``pretrain``, its CLI child): peak RSS in MB, seconds."""
    work.mkdir(parents=True)
    command = [sys.executable, __file__, "--measure", what, "--corpus", str(corpus), "--work", str(work), "--steps", str(steps)]
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPOSITORY_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sampler = ResidentSampler(process.pid)
    sampler.start()
    _, status, usage = os.wait4(process.pid, 0)
    sampler.done.set()
    sampler.join()
    seconds = time.perf_counter() - start
    stdout, stderr = process.stdout.read().decode(), process.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{stdout}\n{stderr}")
    result = json.loads(stdout.strip().splitlines()[-1])
    # ru_maxrss (KiB on Linux) of the measured process; for `pretrain` the CLI is its child, whose peak is in RUSAGE_CHILDREN
    peak_kib = result.pop("child_peak_kib", None) if what == "pretrain" else usage.ru_maxrss
    return {
        "peak_rss_mb": round(peak_kib / 1024, 1),
        "sampled_peak_anonymous_mb": round(sampler.peaks["RssAnon"] / 1024, 1),
        "sampled_peak_file_backed_mb": round(sampler.peaks["RssFile"] / 1024, 1),
        "seconds": round(seconds, 1),
        **result,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--words", type=int, nargs="+", default=[1_000_000, 20_000_000], help="corpus sizes (default 1M and 20M)")
    parser.add_argument("--what", nargs="+", choices=MEASUREMENTS, default=list(MEASUREMENTS), help="what to measure (default: all)")
    parser.add_argument("--types", type=int, default=50_000, help="word types of the generator (default 50,000)")
    parser.add_argument("--steps", type=int, default=5, help="training steps of the tiny model (default 5)")
    parser.add_argument("--work-dir", type=Path, help="where corpora and outputs go (default: a temporary directory, removed)")
    parser.add_argument("--measure", choices=MEASUREMENTS, help=argparse.SUPPRESS)  # a child: one measurement
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        result = {"vocabulary": measure_vocabulary, "stream": measure_stream, "pretrain": measure_pretrain}[args.measure](
            args.corpus, args.work, args.steps
        )
        if args.measure == "pretrain":
            import resource

            result["child_peak_kib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        print(json.dumps(result))
        return 0

    with tempfile.TemporaryDirectory(dir=args.work_dir) as work:
        work_dir = Path(work)
        runs: dict[str, dict[str, dict]] = {what: {} for what in args.what}
        corpus_seconds = {}
        for num_words in args.words:
            start = time.perf_counter()
            corpus = write_corpus(work_dir / f"corpus-{num_words}", num_words, args.types)
            corpus_seconds[num_words] = round(time.perf_counter() - start, 1)
            corpus_mb = sum(file.stat().st_size for file in corpus.iterdir()) / 2**20
            for what in args.what:
                runs[what][f"{num_words:,} words"] = {"corpus_mb": round(corpus_mb, 1), **run_measurement(what, corpus, work_dir / f"{what}-{num_words}", args.steps)}
        smallest, largest = f"{min(args.words):,} words", f"{max(args.words):,} words"
        report = {
            "cpu_threads": os.cpu_count(),
            "word_types": args.types,
            "steps": args.steps,
            "corpus_generation_seconds": corpus_seconds,
            "runs": runs,
            "peak_rss_ratio_largest_to_smallest": {
                what: round(runs[what][largest]["peak_rss_mb"] / runs[what][smallest]["peak_rss_mb"], 3) for what in args.what
            },
            "sampled_peak_anonymous_ratio_largest_to_smallest": {
                what: round(runs[what][largest]["sampled_peak_anonymous_mb"] / runs[what][smallest]["sampled_peak_anonymous_mb"], 3)
                for what in args.what
            },
        }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
