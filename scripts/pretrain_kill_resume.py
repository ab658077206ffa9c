"""A two-process ``torchrun`` pre-training killed (SIGKILL) at chosen moments and resumed, against one run straight
through: the check behind issue 51, item 5 (docs/results/measurements.md).

    python scripts/pretrain_kill_resume.py [--corpus data/corpora/tinyshakespeare.txt] [--work DIR]
        [--max-steps 20] [--save-steps 10] [--kill group:checkpoint-10/trainer_state.json:0.5 ...]

The runs: the issue's (``--config tiny``, global batch 32, ``--optimizer adagrad --lr-scheduler constant``, seed 0,
``--threads 1``, one thread per process), a 1-process run (the tolerance data parallelism has: float rounding), the
2-process run straight through, then one 2-process run per ``--kill`` and the same command with ``--resume``. A kill is
``WHO:FILE:DELAY``: once FILE (under the output directory) exists, wait DELAY seconds and send SIGKILL to ``group``
(the launch's process group, as ``kill -9 -PGID`` of the issue; torchrun starts its workers in sessions of their
own, so this reaches the agent only) or ``all`` (the agent and every worker). Prints one JSON line per run: the
steps of the report, the checkpoints left, the checkpoint resumed from, the held-out perplexity and the largest
weight difference to the run straight through (NaN counts as a difference). Exits 1 if a resumed run differs
from it, ends at another step, or leaves other checkpoints.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from scripts.process_kills import kill  # the repository root is on the path only from here

DEFAULT_KILLS = [
    "group:checkpoint-10/trainer_state.json:0.5",  # the issue's: the workers live on
    "all:checkpoint-10/trainer_state.json:0.5",  # after checkpoint-10, in the next steps
    "all:checkpoint-20/trainer_state.json:0",  # while checkpoint-20 is written, before its carried state
    "all:checkpoint-20/model.safetensors:0",  # early in checkpoint-20
    "all:checkpoint-10/trainer_state.json:0",  # while the first checkpoint is written: nothing to resume
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch(corpus: str, output: Path, processes: int, max_steps: int, save_steps: int, *extra: str) -> subprocess.Popen:
    arguments = [
        "pretrain", "--corpus", corpus, "--output", str(output), "--config", "tiny", "--batch-size", "32",
        "--max-steps", str(max_steps), "--save-steps", str(save_steps), "--optimizer", "adagrad",
        "--lr-scheduler", "constant", "--seed", "0", "--threads", "1", "--eval-steps", "0", "--no-progress", *extra,
    ]
    launcher = ["-m", "torch.distributed.run", "--nproc-per-node", str(processes), "--master-addr", "127.0.0.1",
                "--master-port", str(free_port())]
    environment = {key: value for key, value in os.environ.items() if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    environment.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    log = open(f"{output}.log", "a")  # noqa: SIM115 (the child writes it)
    return subprocess.Popen(
        [sys.executable, *launcher, "-m", "elmo_hf_cli", *arguments], cwd=ROOT, env=environment, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True,
    )


def largest_difference(output: Path, reference: Path) -> float:
    ours, theirs = load_file(str(output / "model.safetensors")), load_file(str(reference / "model.safetensors"))
    worst = 0.0
    for name, value in theirs.items():
        difference = (ours[name] - value).abs()
        if torch.isnan(difference).any():
            return math.nan
        worst = max(worst, difference.max().item())
    return worst


def outcome(output: Path, reference: Path | None) -> dict:
    report = json.loads((output / "pretraining_report.json").read_text(encoding="utf-8"))
    return {
        "steps": f"{report['steps']} of {report['max_steps']}",
        "checkpoints": sorted(path.name for path in output.glob("checkpoint-*")),
        "resumed_from": report["resumed_from"],
        "held_out_perplexity": round(report["held_out"]["perplexity"], 2),
        "max_abs_weight_difference": largest_difference(output, reference) if reference is not None else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", default=str(ROOT / "data" / "corpora" / "tinyshakespeare.txt"))
    parser.add_argument("--work", type=Path, default=None, help="folder for the runs (default: a new temporary one)")
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--save-steps", type=int, default=10)
    parser.add_argument("--kill", nargs="+", default=DEFAULT_KILLS, metavar="WHO:FILE:DELAY")
    options = parser.parse_args()
    work = options.work or Path(tempfile.mkdtemp(prefix="pretrain-kill-resume-"))
    work.mkdir(parents=True, exist_ok=True)
    steps = (options.max_steps, options.save_steps)

    straight = work / "two-processes"
    for processes, output in ((2, straight), (1, work / "one-process")):
        if launch(options.corpus, output, processes, *steps).wait() != 0:
            sys.exit(f"the run straight through failed: {output}.log")
        print(json.dumps({"run": output.name, **outcome(output, straight)}), flush=True)

    bad = 0
    for number, spec in enumerate(options.kill):
        who, file, delay = spec.split(":")
        output = work / f"killed-{number}"
        process = launch(options.corpus, output, 2, *steps)
        while not (output / file).exists():
            if process.poll() is not None:
                sys.exit(f"{spec}: the run ended before {file} appeared ({output}.log)")
            time.sleep(0.002)
        time.sleep(float(delay))
        kill(process, who)
        time.sleep(1.0)  # the workers of a "group" kill, if they outlive the agent, show it in what follows
        left = sorted(path.name for path in output.glob("checkpoint-*"))
        code = launch(options.corpus, output, 2, *steps, "--resume").wait()
        result = {"run": f"kill {spec}", "checkpoints_at_kill": left, "resume_exit": code}
        if code == 0:
            result.update(outcome(output, straight))
            expected = sorted(path.name for path in straight.glob("checkpoint-*"))
            bad += result["max_abs_weight_difference"] != 0 or result["checkpoints"] != expected or (
                result["steps"] != f"{options.max_steps} of {options.max_steps}"
            )
        else:
            result["error"] = next(
                (line for line in Path(f"{output}.log").read_text().splitlines()[::-1] if line.startswith("error:")), ""
            )
        print(json.dumps(result), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
