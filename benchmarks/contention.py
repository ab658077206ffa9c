"""The README's main job idle and beside busy processes: how much of its speed a shared machine leaves it.

    python benchmarks/contention.py [--input FILE] [--lines 8000] [--row-characters 0] [--busy 0 1 2]
        [--settings default one-thread workers-2] [--rounds 2] [--model DIR]

For each round, for each number of busy processes (bounded CPU loops this script starts and stops itself), each
setting runs ``elmo-hf embed`` on the first ``--lines`` lines of the input (with ``--row-characters N``: on that many
rows of at least N characters, the input's lines joined, as in a corpus of paragraphs), in a fresh process, as a user
runs it.
Settings are environments, some with extra command-line arguments: ``default`` (none of the variables below: what a
user gets, i.e. ``default_workers()`` one-thread processes, one per usable core, and the passive waits the command sets
itself since issue 28), ``one-process`` (``--workers 1``: one process at torch's own thread count with passive waits,
the default before workers were), ``one-thread`` (``OMP_NUM_THREADS=1``: one process, one thread), ``passive`` (``OMP_WAIT_POLICY=PASSIVE`` set
explicitly), ``spinning`` (``OMP_WAIT_POLICY`` set but empty, so that the command leaves it alone and libgomp keeps
its own default, spinning before it sleeps: the command before issue 28; libgomp prints a warning about the empty
value), ``workers-2`` (``--workers 2``: two processes of one thread each), ``workers-2-threads-2`` (``--workers 2
--threads 2``: oversubscribed on 2 cores, for comparison), ``one-core`` (``one-thread`` with the process held to one
core by CPU affinity, Linux: its reading and writing threads cannot use a second core, so default / one-core is the
throughput per core as cores are added; ``one-thread`` uses about 1.08 cores). Runs alternate within a round so that a
machine whose speed drifts shifts every setting alike.

Prints one JSON object: per setting and busy count the words/s each run reported (the command's own figure: from the
first shard read to the manifest complete, so the workers' start-up counts; importing and loading the model do not), the median, the process's wall and CPU seconds, and ``ratio_to_idle`` (median loaded /
median idle of the same setting; a fair share beside two busy processes on two cores is 0.5); ``idle_vs_one_thread``
(and ``idle_vs_one_core``, when measured) compares each setting idle with ``one-thread`` (``one-core``) idle, and
``idle_vs_one_thread_by_round`` (``idle_vs_one_core_by_round``) each round's ratio and their median: on a VM whose
speed drifts between rounds, the pairs of a round are the steadier figure. Check ``cpus`` and
``load_average_before``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY_ROOT))

from benchmarks.cpu_affinity import running_on  # noqa: E402

DEFAULT_INPUT = REPOSITORY_ROOT / "data" / "corpora" / "tinyshakespeare.txt"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "MKL_NUM_THREADS")
SETTINGS = {
    "default": {},
    "one-thread": {"OMP_NUM_THREADS": "1"},
    "one-process": {},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "spinning": {"OMP_WAIT_POLICY": ""},  # with --workers 1 (below): the command before issue 28
    "workers-2": {},
    "workers-2-threads-2": {},
    "one-core": {"OMP_NUM_THREADS": "1"},  # and pinned to one core (PINNED_SETTINGS)
    "int8": {},  # the default with --compute-dtype int8 (issue 55)
}
# Settings whose process runs on one core only (the first it may use), by CPU affinity.
PINNED_SETTINGS = ("one-core",)
# Command-line arguments a setting adds to `elmo-hf embed`.
SETTING_ARGUMENTS = {
    "one-process": ["--workers", "1"],
    "workers-2": ["--workers", "2"],
    "workers-2-threads-2": ["--workers", "2", "--threads", "2"],
    "spinning": ["--workers", "1"],
    "passive": ["--workers", "1"],
    "int8": ["--compute-dtype", "int8"],
}
BUSY_LOOP_LIMIT_S = 1800  # a busy process ends by itself after this long, whatever happens to this script
WORDS_PER_SECOND = re.compile(r"= ([\d,]+) words/s")
WORDS_THIS_RUN = re.compile(r"this run: ([\d,]+) words in")


def start_busy_processes(count: int) -> list[subprocess.Popen]:
    """``count`` processes spinning one core each, for at most BUSY_LOOP_LIMIT_S seconds."""
    loop = f"import time\nend = time.monotonic() + {BUSY_LOOP_LIMIT_S}\nwhile time.monotonic() < end:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(count)]


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.kill()
        process.wait()


def setting_environment(setting: str) -> dict:
    environment = {name: value for name, value in os.environ.items() if name not in THREAD_VARIABLES}
    environment.update(SETTINGS[setting])
    return environment


def embed_once(corpus: Path, model: str | None, setting: str, work_dir: Path) -> dict:
    """One ``elmo-hf embed`` process in ``setting``: the words/s it reports and its wall seconds (start-up included)."""
    arguments = (["--model", model] if model else []) + SETTING_ARGUMENTS.get(setting, [])
    with running_on(sorted(os.sched_getaffinity(0))[:1] if setting in PINNED_SETTINGS else None):  # the child inherits it
        return embed_command(corpus, work_dir, arguments, setting_environment(setting))


def embed_command(corpus: Path, work_dir: Path, arguments: list[str], environment: dict) -> dict:
    """``elmo-hf embed corpus`` into ``work_dir/out`` (overwritten) with ``arguments``, in a fresh process with
    ``environment``, as a user runs it: the words/s and words of the run it reports (``words`` None where it reports
    none) and its wall seconds, start-up included. Shared with ``embed_throughput.py --workers``."""
    command = ["elmo-hf", "embed", str(corpus), "--output", str(work_dir / "out"), "--overwrite", "--no-progress", *arguments]
    started = time.perf_counter()
    process = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = process.communicate()
    wall = time.perf_counter() - started
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {process.returncode}:\n{stderr[-3000:]}")
    found = WORDS_PER_SECOND.search(stdout)
    if not found:
        raise RuntimeError(f"no words/s in the output of {' '.join(command)}:\n{stdout[-2000:]}")
    words = WORDS_THIS_RUN.search(stdout)
    return {
        "words_per_second": int(found[1].replace(",", "")),
        "words": int(words[1].replace(",", "")) if words else None,
        "wall_seconds": round(wall, 2),
    }


def first_lines(source: Path, lines: int, target: Path) -> Path:
    with open(source, encoding="utf-8") as text:
        target.write_text("".join(islice(text, lines)), encoding="utf-8")
    return target


def joined_rows(source: Path, rows: int, characters: int, target: Path) -> Path:
    """``rows`` rows of at least ``characters`` characters each: consecutive non-empty lines of ``source`` joined by
    spaces, ``source`` read again from its start as often as needed. Paragraph-like rows, whose shards are larger than
    a pipe holds at the default shard size (1,000 rows of 300 characters pickle to about 335 KB)."""
    lines = [line for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{source} has no non-empty line to join into rows")
    joined, row, length, index = [], [], 0, 0
    while len(joined) < rows:
        line = lines[index % len(lines)]
        index += 1
        row.append(line)
        length += len(line) + 1
        if length > characters:
            joined.append(" ".join(row))
            row, length = [], 0
    target.write_text("\n".join(joined) + "\n", encoding="utf-8")
    return target


def summarize(runs: dict[str, dict[int, list[dict]]]) -> dict:
    """Medians per setting and busy count, each loaded median over the same setting's idle one, each setting's idle
    median over one-thread's."""
    report: dict = {"settings": {}}
    for setting, by_busy in runs.items():
        entry = {}
        for busy, measured in sorted(by_busy.items()):
            speeds = [run["words_per_second"] for run in measured]
            entry[f"busy_{busy}"] = {
                "words_per_second": speeds,
                "median": statistics.median(speeds),
                "wall_seconds": [run["wall_seconds"] for run in measured],
                "cpu_seconds": [run["cpu_seconds"] for run in measured],
            }
        if "busy_0" in entry:
            idle = entry["busy_0"]["median"]
            entry["ratio_to_idle"] = {name: round(value["median"] / idle, 3) for name, value in entry.items() if name != "busy_0"}
        report["settings"][setting] = entry
    idle = {setting: entry["busy_0"] for setting, entry in report["settings"].items() if "busy_0" in entry}
    for baseline in ("one-thread", "one-core"):
        baseline_runs = idle.get(baseline)
        if not baseline_runs:
            continue
        name = f"idle_vs_{baseline.replace('-', '_')}"
        report[name] = {setting: round(runs["median"] / baseline_runs["median"], 3) for setting, runs in idle.items()}
        # Each round's pair (runs alternate within a round): steadier than the ratio of medians where the machine's
        # speed drifts between rounds.
        by_round = {
            setting: [round(speed / base, 3) for speed, base in zip(runs["words_per_second"], baseline_runs["words_per_second"])]
            for setting, runs in idle.items()
        }
        report[f"{name}_by_round"] = {
            setting: {"ratios": ratios, "median": statistics.median(ratios)} for setting, ratios in by_round.items()
        }
    return report


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--lines", type=int, default=8000)
    parser.add_argument(
        "--row-characters", type=int, default=0,
        help="rows of at least this many characters (the input's lines joined; --lines counts these rows); 0: the lines as they are",
    )
    parser.add_argument("--busy", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=["default", "one-process", "one-thread", "spinning"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--model", help="a model directory or repo id (default: the model shipped in the package)")
    args = parser.parse_args(argv)

    runs: dict[str, dict[int, list[dict]]] = {setting: {busy: [] for busy in args.busy} for setting in args.settings}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as work:
        corpus = Path(work) / "corpus.txt"
        if args.row_characters:
            joined_rows(args.input, args.lines, args.row_characters, corpus)
        else:
            first_lines(args.input, args.lines, corpus)
        for _ in range(args.rounds):
            for busy in args.busy:
                busy_processes = start_busy_processes(busy)
                try:
                    for setting in args.settings:
                        # The busy processes are reaped after the loop: the children's usage here is the embed's.
                        before = resource.getrusage(resource.RUSAGE_CHILDREN)
                        run = embed_once(corpus, args.model, setting, Path(work))
                        after = resource.getrusage(resource.RUSAGE_CHILDREN)
                        run["cpu_seconds"] = round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2)
                        runs[setting][busy].append(run)
                finally:
                    stop(busy_processes)
    report = {
        "input": str(args.input), "lines": args.lines, "row_characters": args.row_characters, "rounds": args.rounds, "model": args.model or "shipped",
        "cpus": os.cpu_count(), "load_average_before": [round(value, 2) for value in load_before],
        **summarize(runs),
    }
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
