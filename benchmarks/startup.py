"""Start-up: how long a user waits for ``import elmo_hf`` and for the first vector of a one-sentence ``elmo-hf embed``,
beside what torch's and transformers' own imports cost (the floor the package stands on).

    python benchmarks/startup.py [--rounds 5] [--warm-up 1] [--cases import-elmo_hf embed-one-sentence ...] [--model DIR]
        [--baseline OTHER_CHECKOUT] [--steps N]

Every case is a fresh ``python`` process, timed from start to exit (wall seconds): a one-sentence embed has written
its vector, its shard and its manifest when it exits, so its wall time bounds the time to its first vector. The cases
run interleaved, one of each per round, so that a machine whose speed drifts shifts every case alike; ``--warm-up``
rounds run first and are not counted (the first run after a while reads the libraries from disk). The processes get
this checkout first on ``PYTHONPATH``: ``python -m elmo_hf_cli`` runs what ``elmo-hf`` runs, from here. With
``--baseline`` another checkout (an older commit, e.g. a ``git worktree``) runs the cases that import elmo-hf too,
interleaved with this one's, as ``CASE@baseline``: on a busy machine the ratio of the two is the figure to trust.

Cases (``CASES``): ``python`` (an empty interpreter), ``import-torch``, ``import-transformers`` (its lazy top level),
``transformers-config-and-auto`` (what elmo_hf's config and tokenizer need from transformers: the config and tokenizer
bases and AutoConfig / AutoTokenizer; it imports torch), ``transformers-model`` (``PreTrainedModel``: what every model
needs, torch._dynamo and torch.distributed included), ``datasets`` (beside torch and transformers: the embed path
writes its shards with it), ``embed-libraries`` (what a one-sentence embed cannot do without: torch, transformers'
modeling code and datasets, in a plain interpreter), ``import-elmo_hf`` (the package alone: lazy, it imports none
of its modules), ``elmo_hf-config-and-auto`` (the config and the tokenizer, registered with AutoConfig / AutoTokenizer: what ``import
elmo_hf`` did before it was lazy), ``cli-help`` (``elmo-hf --help``) and ``embed-one-sentence`` (the
default model unless ``--model``, progress bars on, as a user runs it).

Prints one JSON object: per case the command, the runs' wall and CPU seconds (user + system: what a busy machine
inflates least), their medians and, where the issue sets one (``TARGETS``, on the wall median), the target and whether
the median meets it; ``differences`` subtracts medians to show what each layer adds (``elmo_hf`` over what it needs
from transformers; the embed over ``import elmo_hf``, over the libraries it imports and over the floor of torch and
transformers' configuration); ``difference_targets`` holds the ones the issue sets a target for
(``DIFFERENCE_TARGETS``, on the wall difference); ``baseline_over_this`` divides each baseline median (wall and CPU)
by this checkout's; check ``cpus`` and ``load_average``.

``--steps N`` also runs a one-sentence embed N times in one process each, as the command runs it
(``tuned_command_process``, the libraries imported in ``imports_without_collection``), one library at a time
(``STEPS``) and then the command itself: ``steps`` holds each step's median wall and CPU seconds (what torch,
transformers' configuration, its modeling code, datasets and elmo-hf's own part each cost in the embed; interpreter
start and exit not included).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
ONE_SENTENCE = "The bank raised its rates , and we sat on the river bank .\n"

# Case -> the arguments after `python` ("{corpus}" and "{output}" are filled in per run).
CASES = {
    "python": ["-c", "pass"],
    "import-torch": ["-c", "import torch"],
    "import-transformers": ["-c", "import transformers"],
    "transformers-config-and-auto": [
        "-c", "from transformers import AutoConfig, AutoTokenizer, PretrainedConfig, PreTrainedTokenizerBase",
    ],
    "transformers-model": ["-c", "from transformers import PreTrainedModel"],
    "datasets": ["-c", "import torch, transformers, datasets"],
    "embed-libraries": ["-c", "import torch, datasets\nfrom transformers import PreTrainedModel"],
    "import-elmo_hf": ["-c", "import elmo_hf"],
    "elmo_hf-config-and-auto": [
        "-c", "import elmo_hf\nfrom elmo_hf import ELMoConfig, ELMoTokenizer\nfrom transformers import AutoConfig, AutoTokenizer",
    ],
    "cli-help": ["-m", "elmo_hf_cli", "--help"],
    "embed-one-sentence": ["-m", "elmo_hf_cli", "embed", "{corpus}", "--output", "{output}"],
}
DEFAULT_CASES = list(CASES)
ELMO_HF_CASES = ("import-elmo_hf", "elmo_hf-config-and-auto", "cli-help", "embed-one-sentence")  # the ones --baseline runs twice
BASELINE_SUFFIX = "@baseline"
# Issue 28, deliverable 3: seconds, on the machine that runs the code.
TARGETS = {"import-elmo_hf": 2.5, "elmo_hf-config-and-auto": 2.5, "embed-one-sentence": 4.0}
# (name, minuend, subtrahend): what one layer adds over the one below it.
DIFFERENCES = (
    ("transformers over torch", "transformers-config-and-auto", "import-torch"),
    ("elmo_hf over what it needs from transformers", "elmo_hf-config-and-auto", "transformers-config-and-auto"),
    ("PreTrainedModel over what elmo_hf needs from transformers", "transformers-model", "transformers-config-and-auto"),
    ("embed over import elmo_hf", "embed-one-sentence", "import-elmo_hf"),
    ("embed over the libraries it imports", "embed-one-sentence", "embed-libraries"),
    ("embed over the floor", "embed-one-sentence", "transformers-config-and-auto"),
)
# Issue 55, deliverable 3: seconds over the floor of torch and transformers' configuration, on the machine that runs
# the code (the wall difference of medians).
DIFFERENCE_TARGETS = {"elmo_hf over what it needs from transformers": 0.5, "embed over the floor": 1.5}


# (step, the code that makes it): the embed's imports, one library at a time, in the order the command meets them.
STEPS = (
    ("import torch", "import torch"),
    ("transformers' configuration and Auto classes", CASES["transformers-config-and-auto"][1]),
    ("transformers' modeling code (PreTrainedModel)", "from transformers import PreTrainedModel"),
    ("datasets", "import datasets"),
    ("elmo_hf_cli and its parser", "from elmo_hf_cli import build_parser; build_parser()"),
    ("elmo_hf's embed driver and its modules", "import elmo_hf.embedding.driver, elmo_hf.embedding.workers"),
)
COMMAND_STEP = "the command (load the model, embed, write; the rest of elmo_hf's modules)"
STEPS_PROGRAM = """
import json, os, sys, time
from elmo_hf.runtime.process_tuning import imports_without_collection, tuned_command_process

marks = [(time.perf_counter(), time.process_time())]
with tuned_command_process():
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as elmo_hf_cli.main sets it, before torch
    with imports_without_collection():
        for _, code in STEPS:
            exec(code)
            marks.append((time.perf_counter(), time.process_time()))
    from elmo_hf_cli import main
    assert main(ARGUMENTS) == 0
    marks.append((time.perf_counter(), time.process_time()))
steps = [[wall - last_wall, cpu - last_cpu] for (wall, cpu), (last_wall, last_cpu) in zip(marks[1:], marks)]
print("STEPS" + json.dumps(steps))
"""


def steps_of_one_embed(rounds: int, corpus: Path, work: Path, model: str | None) -> dict:
    """Median wall and CPU seconds of each of ``STEPS`` and of the command, over ``rounds`` processes."""
    names = [name for name, _ in STEPS] + [COMMAND_STEP]
    measured: list[list[list[float]]] = []
    for round_index in range(rounds):
        arguments = ["embed", str(corpus), "--output", str(work / f"steps-{round_index}"), "--no-progress"]
        arguments += ["--model", model] if model else []
        program = f"STEPS = {STEPS!r}\nARGUMENTS = {arguments!r}\n" + STEPS_PROGRAM
        result = subprocess.run(
            [sys.executable, "-c", program], env=case_environment(REPOSITORY_ROOT), cwd=work, capture_output=True, text=True
        )
        if result.returncode != 0:
            raise RuntimeError(f"the step-by-step embed exited {result.returncode}:\n{result.stderr[-3000:]}")
        measured.append(json.loads(result.stdout.split("STEPS")[1]))
    return {
        name: {
            measure: round(statistics.median(run[index][column] for run in measured), 3)
            for column, measure in enumerate(("wall", "cpu"))
        }
        for index, name in enumerate(names)
    }


def case_environment(checkout: Path) -> dict:
    """This environment with ``checkout`` first on PYTHONPATH."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(checkout), environment.get("PYTHONPATH")]))
    return environment


def case_command(case: str, corpus: Path, output: Path, model: str | None) -> list[str]:
    """The command of ``case`` (a ``CASES`` name, with or without ``BASELINE_SUFFIX``)."""
    name = case.removesuffix(BASELINE_SUFFIX)
    command = [sys.executable] + [part.format(corpus=corpus, output=output) for part in CASES[name]]
    if name == "embed-one-sentence" and model:
        command += ["--model", model]
    return command


def cases_to_run(cases: list[str], baseline: Path | None) -> list[str]:
    """``cases``, each of ``ELMO_HF_CASES`` followed by its baseline run when there is a baseline checkout."""
    if baseline is None:
        return list(cases)
    return [name for case in cases for name in ([case, case + BASELINE_SUFFIX] if case in ELMO_HF_CASES else [case])]


def run_once(command: list[str], environment: dict, work_dir: Path) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, its children included) of one process, run in ``work_dir`` (not
    in a checkout, whose package ``python -c`` would import first whatever PYTHONPATH says); a failure raises with
    its stderr."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    result = subprocess.run(command, env=environment, cwd=work_dir, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {result.returncode}:\n{result.stderr[-3000:]}")
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def summarize(runs: dict[str, list[tuple[float, float]]], commands: dict[str, list[str]]) -> dict:
    """Per case its runs, medians and target; the differences of medians (DIFFERENCES) where both cases ran."""
    cases = {}
    for case, measured in runs.items():
        walls, cpus = [wall for wall, _ in measured], [cpu for _, cpu in measured]
        entry = {
            "command": " ".join(commands[case]), "wall_seconds": [round(wall, 3) for wall in walls],
            "median": round(statistics.median(walls), 3), "cpu_seconds": [round(cpu, 3) for cpu in cpus],
            "median_cpu": round(statistics.median(cpus), 3),
        }
        if case in TARGETS:
            entry["target"] = TARGETS[case]
            entry["meets_target"] = entry["median"] <= TARGETS[case]
        cases[case] = entry
    differences = {
        name: {measure: round(cases[minuend][key] - cases[subtrahend][key], 3) for measure, key in (("wall", "median"), ("cpu", "median_cpu"))}
        for name, minuend, subtrahend in DIFFERENCES if minuend in cases and subtrahend in cases
    }
    report = {"cases": cases, "differences": differences}
    difference_targets = {
        name: {"target": target, "meets_target": differences[name]["wall"] <= target}
        for name, target in DIFFERENCE_TARGETS.items() if name in differences
    }
    if difference_targets:
        report["difference_targets"] = difference_targets
    baseline_ratios = {
        f"{case} ({measure})": round(cases[case + BASELINE_SUFFIX][measure] / cases[case][measure], 3)
        for case in cases if case + BASELINE_SUFFIX in cases for measure in ("median", "median_cpu")
    }
    if baseline_ratios:
        report["baseline_over_this"] = baseline_ratios
    return report


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed runs of each case (default 5)")
    parser.add_argument("--warm-up", type=int, default=1, help="untimed rounds first (default 1)")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=DEFAULT_CASES)
    parser.add_argument("--model", help="a model directory or repo id for the embed (default: the model shipped in the package)")
    parser.add_argument("--baseline", type=Path, help="another checkout of elmo-hf to time the cases that import it against")
    parser.add_argument("--steps", type=int, default=0, help="also time the embed step by step in this many processes (default 0)")
    args = parser.parse_args(argv)

    environments = {False: case_environment(REPOSITORY_ROOT)}
    if args.baseline is not None:
        environments[True] = case_environment(args.baseline.resolve())
    cases = cases_to_run(args.cases, args.baseline)
    runs: dict[str, list[tuple[float, float]]] = {case: [] for case in cases}
    commands: dict[str, list[str]] = {}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as work:
        corpus = Path(work) / "one-sentence.txt"
        corpus.write_text(ONE_SENTENCE, encoding="utf-8")
        for round_index in range(args.warm_up + args.rounds):
            for case in cases:
                output = Path(work) / f"out-{round_index}-{case}"  # a fresh directory each run, inside this temporary one
                commands[case] = case_command(case, corpus, Path(work) / "out", args.model)
                measured = run_once(case_command(case, corpus, output, args.model), environments[case.endswith(BASELINE_SUFFIX)], Path(work))
                if round_index >= args.warm_up:
                    runs[case].append(measured)
        steps = steps_of_one_embed(args.steps, corpus, Path(work), args.model) if args.steps else None
    report = {
        "rounds": args.rounds, "warm_up": args.warm_up, "model": args.model or "shipped", "python": sys.version.split()[0],
        "checkout": str(REPOSITORY_ROOT), "baseline": None if args.baseline is None else str(args.baseline.resolve()),
        "cpus": os.cpu_count(), "load_average_before": [round(value, 2) for value in load_before],
        "load_average_after": [round(value, 2) for value in os.getloadavg()],
        **summarize(runs, commands),
    }
    if steps is not None:
        report["steps"] = steps
    print(json.dumps(report, indent=2))
    print_summary(report)
    return report


def print_summary(report: dict) -> None:
    """The report's medians, differences and steps, one line each, on stderr."""
    for case, entry in report["cases"].items():
        verdict = f"   target {entry['target']:.1f} s: {'met' if entry['meets_target'] else 'NOT met'}" if "target" in entry else ""
        print(f"{case:30s} median {entry['median']:6.2f} s wall, {entry['median_cpu']:6.2f} s CPU{verdict}", file=sys.stderr)
    for name, difference in report["differences"].items():
        target = report.get("difference_targets", {}).get(name)
        verdict = f"   target {target['target']:.1f} s: {'met' if target['meets_target'] else 'NOT met'}" if target else ""
        print(f"{name:50s} {difference['wall']:6.2f} s wall, {difference['cpu']:6.2f} s CPU{verdict}", file=sys.stderr)
    for name, step in report.get("steps", {}).items():
        print(f"step: {name:70s} {step['wall']:6.2f} s wall, {step['cpu']:6.2f} s CPU", file=sys.stderr)


if __name__ == "__main__":
    main()
