"""Peak memory and throughput of `elmo-hf embed` for a corpus and the same corpus 10x larger: memory must stay flat.

    python benchmarks/embed_memory.py [--model DIR] [--lines 2000] [--scales 1 10] [--representation all]

Each run is a fresh `elmo-hf embed` process; its peak RSS comes from the kernel (`wait4`), its words/s from the
manifest and the wall time. The corpus is `data/corpora/tinyshakespeare.txt` cycled to the wanted number of
lines (synthetic sentences when it is missing). Without `--model`, a random model of the released small shape
(2x1024_128, 13.6M parameters) is used. Prints one JSON object; `peak_rss_growth_mb` is the largest run's peak minus
the smallest's, to be compared with `vectors_mb_at_largest` (what holding the output in memory would cost).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPOSITORY_ROOT / "data" / "corpora" / "tinyshakespeare.txt"
SMALL_SHAPE_OPTIONS = REPOSITORY_ROOT / "tests" / "fixtures" / "pretrained-options" / "elmo_2x1024_128_2048cnn_1xhighway_options.json"


def corpus_lines(source: Path | None, count: int) -> list[str]:
    """``count`` lines cycled from ``source`` (empty lines kept), or synthetic sentences when it is missing."""
    if source is not None and source.exists():
        lines = source.read_text(encoding="utf-8").splitlines()
        return list(itertools.islice(itertools.cycle(lines), count))
    generator = random.Random(0)
    vocabulary = "the a of to and in bank river money rates we she it was sat took fell rose , . ;".split()
    return [" ".join(generator.choices(vocabulary, k=generator.randint(1, 20))) for _ in range(count)]


def build_random_model(config_kwargs: dict, directory: Path) -> Path:
    """Save a randomly initialised ELMo with ``config_kwargs`` (and its tokenizer) to ``directory``."""
    import torch
    from elmo_hf import ELMoConfig, ELMoModel, ELMoTokenizer

    torch.manual_seed(0)
    config = ELMoConfig(**config_kwargs)
    ELMoModel(config).save_pretrained(directory)
    ELMoTokenizer(max_characters_per_token=config.max_characters_per_token).save_pretrained(directory)
    return directory


def small_shape_model(directory: Path) -> Path:
    from elmo_hf import ELMoConfig

    if SMALL_SHAPE_OPTIONS.exists():
        config = ELMoConfig.from_options_dict(json.loads(SMALL_SHAPE_OPTIONS.read_text()))
        return build_random_model(config.to_dict() | {"architectures": None}, directory)
    return build_random_model({"lstm_cell_size": 1024, "projection_dim": 128}, directory)


def measure_run(model_dir: Path, corpus: Path, output_dir: Path, extra_args: list[str]) -> dict:
    """Run `elmo-hf embed` in a fresh process: peak RSS (MB), seconds, sentences, words, words/s."""
    command = [sys.executable, "-m", "elmo_hf_cli", "embed", str(corpus), "--model", str(model_dir), "--output", str(output_dir), "--no-progress", *extra_args]
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPOSITORY_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    stdout, stderr = process.stdout.read().decode(), process.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{stdout}\n{stderr}")
    totals = json.loads((output_dir / "manifest.json").read_text())["totals"]
    return {
        "sentences": totals["sentences"],
        "words": totals["words"],
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # ru_maxrss is in KiB on Linux
        "seconds": round(seconds, 2),
        "words_per_second": round(totals["words"] / seconds, 1),
    }


def run_benchmark(model_dir: Path, corpus: Path | None, lines: int, scales: list[int], extra_args: list[str], work_dir: Path) -> dict:
    from elmo_hf import ELMoConfig

    config = ELMoConfig.from_pretrained(model_dir)
    runs = {}
    for scale in scales:
        corpus_file = work_dir / f"corpus-{scale}x.txt"
        corpus_file.write_text("".join(f"{line}\n" for line in corpus_lines(corpus, lines * scale)), encoding="utf-8")
        runs[f"{scale}x"] = measure_run(model_dir, corpus_file, work_dir / f"out-{scale}x", extra_args)
    smallest, largest = runs[f"{min(scales)}x"], runs[f"{max(scales)}x"]
    layers = config.num_representation_layers if "all" in extra_args else 1
    return {
        "model": str(model_dir),
        "output_dim": config.output_dim,
        "embed_args": extra_args,
        "cpu_threads": os.cpu_count(),
        "runs": runs,
        "peak_rss_growth_mb": round(largest["peak_rss_mb"] - smallest["peak_rss_mb"], 1),
        "vectors_mb_at_largest": round(largest["words"] * layers * config.output_dim * 4 / 2**20, 1),
        "words_per_second_ratio_largest_to_smallest": round(largest["words_per_second"] / smallest["words_per_second"], 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="ELMo directory (default: random weights, released small shape)")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="text file cycled to the wanted size")
    parser.add_argument("--lines", type=int, default=2000, help="lines of the 1x corpus (default 2000)")
    parser.add_argument("--scales", type=int, nargs="+", default=[1, 10], help="corpus sizes in multiples of --lines")
    parser.add_argument("--representation", default="all", help="passed to elmo-hf embed (default all: the largest output)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        model_dir = args.model or small_shape_model(work_dir / "model")
        report = run_benchmark(model_dir, args.corpus, args.lines, args.scales, ["--representation", args.representation], work_dir)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
