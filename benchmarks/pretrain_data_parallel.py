"""On CPUs, does data-parallel pre-training help? `elmo-hf pretrain` as one process with all the threads, as one
process with one thread, and as several `torchrun` processes (gloo) sharing the same cores, on the same global batch.

    python benchmarks/pretrain_data_parallel.py --corpus data/corpora/tinyshakespeare.txt [--config small]
        [--batch-size 32] [--window-size 20] [--steps 30] [--cores 2] [--processes 2] [--repeats 2]

Each layout trains `--steps` windowed steps from scratch (no periodic evaluation); the layouts alternate, `--repeats`
times. Figures come from each run's report: `train_runtime_seconds` (Trainer's training loop, start-up and the
final evaluation excluded) and `tokens_seen` (predictions per direction), so words/s = tokens_seen /
train_runtime. `ratios`: the data-parallel layout's best words/s over each one-process layout's. Start-up (imports,
reading the corpus, process group) is reported separately as the wall time of the whole command.

Prints one JSON object; check `load_average` (figures from a busy machine are not comparable).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def pretrain_command(arguments: argparse.Namespace, output: Path, threads: int) -> list[str]:
    return [
        "-m", "elmo_hf_cli", "pretrain", "--corpus", *arguments.corpus, "--output", str(output), "--config",
        arguments.config, "--batch-size", str(arguments.batch_size), "--window-size", str(arguments.window_size),
        "--max-steps", str(arguments.steps), "--eval-steps", "0", "--save-steps", str(arguments.steps + 1),
        "--train-eval-sentences", "20", "--threads", str(threads), "--no-progress",
    ]


def run_layout(arguments: argparse.Namespace, processes: int, threads: int, directory: Path) -> dict:
    """One training run of `processes` processes of `threads` threads each."""
    output = directory / f"p{processes}-{time.monotonic_ns()}"
    command = pretrain_command(arguments, output, threads)
    if processes == 1:
        command = [sys.executable, *command]
    else:
        launcher = ["--nproc-per-node", str(processes), "--master-addr", "127.0.0.1", "--master-port", str(free_port())]
        command = [sys.executable, "-m", "torch.distributed.run", *launcher, *command]
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY_ROOT), "OMP_NUM_THREADS": str(threads)}
    start = time.monotonic()
    subprocess.run(command, cwd=REPOSITORY_ROOT, env=environment, check=True, capture_output=True)
    wall = time.monotonic() - start
    report = json.loads((output / "pretraining_report.json").read_text(encoding="utf-8"))
    return {
        "processes": processes,
        "threads_per_process": threads,
        "words_per_second": report["tokens_seen"] / report["train_runtime_seconds"],
        "train_runtime_seconds": report["train_runtime_seconds"],
        "command_wall_seconds": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", nargs="+", required=True)
    parser.add_argument("--config", default="small")
    parser.add_argument("--batch-size", type=int, default=32, help="global rows per batch")
    parser.add_argument("--window-size", type=int, default=20)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--cores", type=int, default=os.cpu_count(), help="threads in all, split over the processes")
    parser.add_argument("--processes", type=int, default=2, help="processes of the data-parallel layout")
    parser.add_argument("--repeats", type=int, default=2)
    arguments = parser.parse_args()

    layouts = [(1, arguments.cores), (1, 1), (arguments.processes, max(1, arguments.cores // arguments.processes))]
    runs = []
    with tempfile.TemporaryDirectory(prefix="pretrain-data-parallel-") as directory:
        for _ in range(arguments.repeats):
            for processes, threads in layouts:
                runs.append(run_layout(arguments, processes, threads, Path(directory)))
    best = {
        f"{processes} x {threads} threads": max(
            run["words_per_second"] for run in runs if (run["processes"], run["threads_per_process"]) == (processes, threads)
        )
        for processes, threads in layouts
    }
    names = list(best)
    print(json.dumps({
        "config": arguments.config,
        "batch_size": arguments.batch_size,
        "window_size": arguments.window_size,
        "steps": arguments.steps,
        "cores": arguments.cores,
        "load_average": os.getloadavg(),
        "runs": runs,
        "best_words_per_second": best,
        "ratios": {f"{names[2]} / {name}": best[names[2]] / best[name] for name in names[:2]},
    }, indent=2))


if __name__ == "__main__":
    main()
