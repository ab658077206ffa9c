"""Ctrl-C at random moments of real command runs, and what each run leaves: the check that found the start-up and exit
failures fixed in `elmo_hf_cli.common` and the abort of `embed --verify` (docs/results/measurements.md).

    python scripts/ctrl_c_stress.py start-up [--runs 100] [--between 0.15 3.6] [--seed 0]
    python scripts/ctrl_c_stress.py workers  [--runs 30]  [--between 0.3 6.0]
    python scripts/ctrl_c_stress.py pretrain [--runs 30]  [--between 0.3 4.5]

Each run starts a fresh ``python -m elmo_hf_cli`` process (the code on this interpreter's path) and sends SIGINT after
a random delay, uniform in ``--between``:

- ``start-up``: a one-sentence ``elmo-hf embed`` (about 3 s on 2 cores, most of it imports), SIGINT to the process as
  a terminal sends it. Good outcomes: interrupted (exit 130, "interrupted", nothing left or the finished shards kept
  and said so), finished (0), ended by SIGINT in the exit after the report (``common.ctrl_c_ends_the_exit``).
- ``workers``: the README's main job on 8,000 lines with the default worker processes, SIGINT to the whole process
  group; then ``--resume`` where anything was kept: every shard must equal an uninterrupted run's (sha256), and
  ``elmo-hf embed --verify`` must pass.
- ``pretrain``: a tiny ``elmo-hf pretrain`` (40 steps); then ``--resume`` from the checkpoint it names, or a new run
  where none was saved: it must end with 40 steps, and leave no temporary file.

A traceback, an ignored exception, an abort or another exit code is bad. Prints a line per run, then the outcomes'
counts as JSON; exits 1 if any run was bad. The earliest moments (the interpreter starting and importing the CLI,
about 0.1 s) are left out of the default range: no code of ours runs there yet.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
TINYSHAKESPEARE = REPOSITORY_ROOT / "data" / "corpora" / "tinyshakespeare.txt"
COMMAND = [sys.executable, "-m", "elmo_hf_cli"]
BAD_WORDS = ("Traceback", "Exception ignored", "terminate called", "Fatal Python error")
DEFAULT_RANGES = {"start-up": (0.15, 3.6), "workers": (0.3, 6.0), "pretrain": (0.3, 4.5)}
PRETRAIN_STEPS = 40


def interrupted_run(arguments: list[str], seconds: float, cwd: Path, whole_group: bool) -> subprocess.CompletedProcess:
    """``elmo-hf ARGUMENTS`` in ``cwd``, sent SIGINT after ``seconds``: to the process as from a terminal (SIGINT at
    its default action, which a shell's background job would not have), or to its whole process group."""
    process = subprocess.Popen(
        [*COMMAND, *arguments], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"}, start_new_session=whole_group,
        preexec_fn=None if whole_group else (lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)),
    )
    time.sleep(seconds)
    if whole_group:
        os.killpg(process.pid, signal.SIGINT)
    else:
        process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=600)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def command(arguments: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*COMMAND, *arguments], cwd=cwd, capture_output=True, text=True, timeout=600)


def outcome_of(result: subprocess.CompletedProcess, finished_text: str) -> tuple[str, list[str]]:
    """How the interrupted run ended, and what is wrong with it."""
    problems = [word for word in BAD_WORDS if word in result.stderr]
    if result.returncode == 130 and "interrupted" in result.stderr:
        outcome = "interrupted"
    elif result.returncode == 0 and finished_text in result.stdout:
        outcome = "finished"
    elif result.returncode == -signal.SIGINT and finished_text in result.stdout:
        outcome = "ended in the exit"
    else:
        outcome = f"exit {result.returncode}"
        problems.append(outcome)
    if problems:
        problems.append(f"stderr: {result.stderr[-2000:]}")
    return outcome, problems


def shard_hashes(output: Path) -> list[tuple[str, str]]:
    return [(shard["file"], shard["sha256"]) for shard in json.loads((output / "manifest.json").read_text())["shards"]]


def start_up_run(seconds: float, work: Path, _reference=None) -> tuple[str, list[str]]:
    """One interrupted one-sentence embed in ``work`` (an empty directory); also the slow test
    ``tests/cli/test_startup.py::test_ctrl_c_at_moments_spread_over_a_whole_run_never_gives_a_traceback``."""
    (work / "corpus.txt").write_text("a sentence .\n")
    result = interrupted_run(["embed", "corpus.txt", "--output", "out"], seconds, work, whole_group=False)
    outcome, problems = outcome_of(result, "embedded 1 sentence (3 words)")
    left = sorted(path.name for path in work.iterdir())
    if outcome == "interrupted":
        if left != ["corpus.txt"] and (left != ["corpus.txt", "out"] or "kept" not in result.stderr):
            problems.append(f"left {left}, and the message names no kept output")
    elif left != ["corpus.txt", "out"]:
        problems.append(f"finished, leaving {left}")
    return outcome, problems


def workers_reference(work: Path) -> list[tuple[str, str]]:
    with open(TINYSHAKESPEARE, encoding="utf-8") as text:
        (work / "corpus.txt").write_text("".join(islice(text, 8000)), encoding="utf-8")
    result = command(["embed", "corpus.txt", "--output", "reference", "--no-progress"], work)
    if result.returncode != 0:
        raise SystemExit(f"the uninterrupted run failed:\n{result.stderr[-3000:]}")
    return shard_hashes(work / "reference")


def workers_run(seconds: float, work: Path, reference) -> tuple[str, list[str]]:
    shutil.rmtree(work / "out", ignore_errors=True)
    arguments = ["embed", "corpus.txt", "--output", "out", "--no-progress"]
    result = interrupted_run(arguments, seconds, work, whole_group=True)
    outcome, problems = outcome_of(result, "embedded 8,000 sentences")
    if (work / "out").exists():
        resumed = command([*arguments, "--resume"], work)
        if resumed.returncode != 0:
            problems.append(f"--resume exited {resumed.returncode}: {resumed.stderr[-500:]}")
        elif shard_hashes(work / "out") != reference:
            problems.append("the resumed shards differ from the uninterrupted run's")
        verified = command(["embed", "--verify", "out"], work)
        if verified.returncode != 0:
            problems.append(f"--verify exited {verified.returncode}: {verified.stderr[-500:]}")
    return outcome, problems


def pretrain_reference(work: Path) -> None:
    with open(TINYSHAKESPEARE, encoding="utf-8") as text:
        (work / "corpus.txt").write_text("".join(islice(text, 1200)), encoding="utf-8")


def pretrain_arguments(output: str) -> list[str]:
    return [
        "pretrain", "--corpus", "corpus.txt", "--output", output, "--config", "tiny", "--batch-size", "8",
        "--window-size", "10", "--held-out-fraction", "0.1", "--train-eval-sentences", "200", "--logging-steps", "5",
        "--threads", "1", "--no-progress", "--max-steps", str(PRETRAIN_STEPS), "--save-steps", "100", "--eval-steps", "0",
    ]


def pretrain_run(seconds: float, work: Path, _reference) -> tuple[str, list[str]]:
    shutil.rmtree(work / "out", ignore_errors=True)
    result = interrupted_run(pretrain_arguments("out"), seconds, work, whole_group=False)
    outcome, problems = outcome_of(result, "report:")
    if outcome == "interrupted":
        if "the latest checkpoint is" in result.stderr:
            again = command([*pretrain_arguments("out"), "--resume"], work)
        else:
            again = command([*pretrain_arguments("out"), *(["--overwrite"] if (work / "out").exists() else [])], work)
        if again.returncode != 0:
            problems.append(f"the run after it exited {again.returncode}: {again.stderr[-500:]}")
            return outcome, problems
    report = work / "out" / "pretraining_report.json"
    if not report.is_file() or json.loads(report.read_text())["steps"] != PRETRAIN_STEPS:
        problems.append(f"no report of {PRETRAIN_STEPS} steps")
    left = [path.name for path in (work / "out").rglob("*") if ".tmp" in path.name]
    if left:
        problems.append(f"temporary files left: {left}")
    return outcome, problems


MODES = {
    "start-up": (None, start_up_run),
    "workers": (workers_reference, workers_run),
    "pretrain": (pretrain_reference, pretrain_run),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=list(MODES))
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--between", type=float, nargs=2, metavar=("FIRST", "LAST"), help="seconds (default: by mode)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    first, last = args.between or DEFAULT_RANGES[args.mode]
    prepare, run = MODES[args.mode]
    generator = random.Random(args.seed)
    counts: collections.Counter = collections.Counter()
    with tempfile.TemporaryDirectory(prefix="ctrl-c-stress-") as temporary:
        shared = Path(temporary)
        reference = prepare(shared) if prepare else None
        for number in range(args.runs):
            seconds = round(generator.uniform(first, last), 3)
            work = shared if prepare else shared / f"run-{number}"
            work.mkdir(exist_ok=True)
            outcome, problems = run(seconds, work, reference)
            counts["bad" if problems else outcome] += 1
            print(f"{number:4d} {seconds:6.3f} s  {outcome}" + (f"  BAD: {problems}" if problems else ""), flush=True)
    print(json.dumps({"mode": args.mode, "runs": args.runs, "between": [first, last], "outcomes": counts}))
    return 1 if counts["bad"] else 0


if __name__ == "__main__":
    sys.exit(main())
