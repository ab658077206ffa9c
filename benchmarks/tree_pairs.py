"""The same benchmark in two checkouts, alternately: the ratio of one of its figures, pair by pair, and the median.

    git worktree add /tmp/tree-before <commit>
    python benchmarks/tree_pairs.py --before /tmp/tree-before --pairs 6 \
        --field settings.default.busy_0.median -- benchmarks/contention.py --busy 0 --settings default --rounds 1

Each run is ``python BENCHMARK ARGS`` started in its checkout with ``PYTHONPATH`` set to it (so it imports that
checkout's ``elmo_hf``); the benchmark prints one JSON object, and ``--field`` names the figure in it (dots between
keys). The order alternates (before first in odd pairs, after first in even ones) so that a machine that slows down
or speeds up during the run weighs on both sides alike. Prints each pair's figures and after/before, then the median
ratio; a ratio above 1 means the current checkout's figure is larger.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CURRENT = Path(__file__).resolve().parent.parent


def figure(checkout: Path, command: list[str], field: str) -> float:
    environment = {**os.environ, "PYTHONPATH": str(checkout)}
    result = subprocess.run([sys.executable, *command], cwd=checkout, env=environment, capture_output=True, text=True, check=True)
    value = json.loads(result.stdout)
    for key in field.split("."):
        value = value[key]
    return float(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout (a git worktree)")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--field", required=True, help="the figure in the benchmark's JSON, keys joined by dots")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- BENCHMARK [ARGS]: a path relative to each checkout")
    arguments = parser.parse_args()
    command = arguments.command[1:] if arguments.command[:1] == ["--"] else arguments.command
    ratios = []
    for pair in range(arguments.pairs):
        order = [("before", arguments.before), ("after", CURRENT)]
        figures = {name: figure(checkout, command, arguments.field) for name, checkout in (order if pair % 2 == 0 else order[::-1])}
        ratios.append(figures["after"] / figures["before"])
        print(f"pair {pair + 1}: before {figures['before']:g}, after {figures['after']:g}, after/before {ratios[-1]:.3f}", flush=True)
    print(json.dumps({"pairs": arguments.pairs, "ratios": [round(ratio, 3) for ratio in ratios], "median": round(statistics.median(ratios), 3)}))


if __name__ == "__main__":
    main()
