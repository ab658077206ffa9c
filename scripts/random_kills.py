"""`kill -9` at random moments of `elmo-hf embed` and of a two-process `torchrun` pre-training, each followed by the
documented recovery, against uninterrupted runs: the harness of issue 51's proof (docs/results/random-kills.md).

    python scripts/random_kills.py [--seed 0] [--kills 60] [--quick] [--work DIR] [--only KIND:CHAIN_SEED]

Chain kinds (taken in turn until ``--kills`` kills were made):

- ``embed-w1``, ``embed-w2``: a new ``embed`` with ``--workers 1`` / ``2``, then ``--resume``;
- ``overwrite-w1``, ``overwrite-w2``: ``embed --overwrite`` over a complete output made with other options, then
  ``--resume`` or ``--overwrite`` (drawn; ``--overwrite`` where the old output is still at the target, as the
  documentation says);
- ``pretrain-random``, ``pretrain-checkpoint``: the tiny two-process run of ``scripts/pretrain_kill_resume.py``
  (``--max-steps`` 20, ``--save-steps`` 10), killed at a random moment or 0-1.5 s after a checkpoint's file appears
  (the agent's group alone or every process, drawn), then ``--resume``, or what its refusal names.

Each chain draws from its own seed (printed; ``--only KIND:CHAIN_SEED`` replays one chain) 1 to 3 kills, each at a
moment uniform over the uninterrupted run's duration; a kill also hits the recovery runs. After the first kill, files
of the user's are put in the output (the recovery must refuse or keep them, and change nothing else), then moved
away. Checked: (a) the final output equals the uninterrupted run's (embed: the sha256 of every file but the marker,
manifest included; pretrain: max |dw| == 0, the same steps and checkpoints), and nothing else is left beside it;
(b) the user's files in and beside the output keep their sha256 (a link its target); (c) between the kills of an
``--overwrite``, the target holds the old output, or only the new run's own shards with the old output whole under
the journal's name, or the complete new output. Prints a line per chain and the counts as JSON; exits 1 on any
failure.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from scripts.pretrain_kill_resume import launch as launch_pretraining, largest_difference
from scripts.process_kills import kill_when

CORPUS = ROOT / "data" / "corpora" / "tinyshakespeare.txt"
MARKER = ".elmo-hf-output.json"
KINDS = ["embed-w1", "overwrite-w1", "pretrain-random", "embed-w2", "overwrite-w2", "pretrain-checkpoint"]
USER_FILES = {"notes.tmp": "my notes\n", ".draft.tmp": "a draft\n", "shard-0-mine.parquet": "mine\n",
              ".cache/mine.txt": "cached\n"}
USER_LINKS = {"latest": "out", "notes-link": "notes.tmp"}  # beside the output: a link to it, one to a user's file
INSIDE_LINK = ("link", "../notes.tmp")


@dataclass
class Setting:
    """What every chain of a harness run shares: the inputs, the uninterrupted runs and their durations."""

    work: Path
    lines: int
    max_steps: int
    save_steps: int
    durations: dict = field(default_factory=dict)
    embed_reference: dict | None = None
    embed_old: Path | None = None
    pretrain_reference: Path | None = None


def tree_of(directory: Path, leave_out=()) -> dict | None:
    """sha256 of every file under ``directory`` (the marker and ``leave_out`` aside); None where it is absent."""
    if not directory.is_dir():
        return None
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file() and not path.is_symlink() and path.name != MARKER and path.name not in leave_out
    }


def plant(folder: Path, links: dict) -> dict:
    """Write the user's files and links into ``folder``; return their fingerprints."""
    (folder / ".cache").mkdir(parents=True, exist_ok=True)
    for name, content in USER_FILES.items():
        (folder / name).write_text(content)
    for name, target in links.items():
        (folder / name).symlink_to(target)
    return fingerprints(folder, links)


def fingerprints(folder: Path, links: dict) -> dict:
    """sha256 of each user file in ``folder`` and the target of each link (None where one is missing)."""
    found = {}
    for name in USER_FILES:
        path = folder / name
        found[name] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else None
    for name in links:
        found[name] = str((folder / name).readlink()) if (folder / name).is_symlink() else None
    return found


def move_away(folder: Path) -> None:
    for name in [*USER_FILES, INSIDE_LINK[0]]:
        (folder / name).unlink(missing_ok=True)
    if (folder / ".cache").is_dir() and not any((folder / ".cache").iterdir()):
        (folder / ".cache").rmdir()


# -- the commands ---------------------------------------------------------------------------------------------------


def embed_arguments(setting: Setting, output: Path, workers: int, shard_size: int, *flags: str) -> list[str]:
    return [sys.executable, "-m", "elmo_hf_cli", "embed", str(setting.work / "corpus.txt"), "--output", str(output),
            "--no-progress", "--shard-size", str(shard_size), "--workers", str(workers), *flags]


def start_embed(arguments: list[str], log: Path) -> subprocess.Popen:
    with open(log, "a") as stream:
        return subprocess.Popen(arguments, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=stream,
                                stderr=subprocess.STDOUT, start_new_session=True)


def last_error(log: Path, since: int) -> str:
    text = log.read_text(errors="replace")[since:]
    return next((line for line in text.splitlines()[::-1] if line.startswith("error:")), "")


class Runner:
    """Starts the chain's command for a given set of flags and reports how it ended (a log per chain)."""

    def __init__(self, setting: Setting, kind: str, output: Path, log: Path):
        self.setting, self.kind, self.output, self.log = setting, kind, output, log

    def start(self, flags: tuple[str, ...]) -> tuple[subprocess.Popen, int]:
        since = self.log.stat().st_size if self.log.exists() else 0
        if self.kind.startswith("pretrain"):
            steps = (self.setting.max_steps, self.setting.save_steps)
            return launch_pretraining(str(self.setting.work / "corpus.txt"), self.output, 2, *steps, *flags), since
        workers = int(self.kind[-1])
        return start_embed(embed_arguments(self.setting, self.output, workers, 200, *flags), self.log), since

    def finish(self, flags: tuple[str, ...]) -> tuple[int, str]:
        process, since = self.start(flags)
        code = process.wait(timeout=900)
        return code, last_error(self.log, since)


# -- what each kind does after a kill -------------------------------------------------------------------------------


def journal_of(output: Path) -> Path:
    return output.parent / f".{output.name}.elmo-hf.swap"


def recovery(setting: Setting, kind: str, output: Path, choice: str) -> tuple[str, ...]:
    """The documented next command after a kill."""
    if kind.startswith("embed"):
        return ("--resume",)
    if kind.startswith("overwrite"):
        old_at_target = tree_of(output) == tree_of(setting.embed_old) and not journal_of(output).exists()
        return ("--overwrite",) if choice == "overwrite" or old_at_target else ("--resume",)
    return ("--resume",) if output.exists() else ()


def after_refusal(kind: str, error: str, flags: tuple[str, ...]) -> tuple[str, ...] | None:
    """The command a refusal's message names (None: a refusal the documentation does not lead to)."""
    if kind.startswith("overwrite") and "started with different options" in error:
        return ("--overwrite",)  # the old output was put back at the target
    if kind.startswith("pretrain") and "with --overwrite (instead of --resume)" in error:
        return ("--overwrite",)
    if kind.startswith("pretrain") and "run without --resume" in error:
        return ()
    return None


def moment(setting: Setting, kind: str, generator: random.Random, output: Path):
    """When to kill: (ready, delay, who, text)."""
    steps = [step for step in range(setting.save_steps, setting.max_steps + 1, setting.save_steps)
             if not (output / f"checkpoint-{step}").exists()]
    if kind == "pretrain-checkpoint" and steps:
        step = generator.choice(steps)
        name = generator.choice(["trainer_state.json", "model.safetensors"])
        delay, who = round(generator.uniform(0.0, 1.5), 3), generator.choice(["all", "group"])
        path = output / f"checkpoint-{step}" / name
        return path.exists, delay, who, f"{who} {delay}s after checkpoint-{step}/{name}"
    duration = setting.durations["pretrain" if kind.startswith("pretrain") else f"embed-{kind.split('-')[1]}"]
    seconds = round(generator.uniform(0.05, duration), 3)
    return (lambda: True), seconds, "all", f"all at {seconds}s"


# -- the checks -----------------------------------------------------------------------------------------------------


def old_output_safe(setting: Setting, output: Path) -> list[str]:
    """(c): the target holds the old output, or only the new run's own shards with the old output whole under the
    journal's name, or (once the journal says so, or without one) the complete new output."""
    old, new, found = tree_of(setting.embed_old), setting.embed_reference, tree_of(output)
    if found == old:
        return []
    shards = {name: digest for name, digest in (found or {}).items()
              if name != "manifest.json" and not (name.startswith(".shard-") and name.endswith(".tmp"))}
    mixed = sorted(name for name, digest in shards.items() if new.get(name) != digest)
    if mixed:
        return [f"the target holds files of neither run: {mixed}"]
    journal = journal_of(output)
    record = json.loads(journal.read_text()) if journal.exists() else None
    if record is None or record.get("new_complete"):
        return [] if found == new else ["the target holds neither output whole, and no journal names the old one"]
    aside = output.parent / record["replaced"]
    return [] if tree_of(aside) == old else [f"the old output is not whole at {aside.name}"]


def between_kills(setting: Setting, kind: str, output: Path) -> list[str]:
    if kind.startswith("overwrite"):
        return old_output_safe(setting, output)
    if kind.startswith("embed"):
        found = tree_of(output) or {}
        return [f"{name} differs from the uninterrupted run's" for name, digest in found.items()
                if re.fullmatch(r"shard-\d{5}\.parquet", name) and setting.embed_reference.get(name) != digest]
    return []


def user_files_inside(runner: Runner, flags: tuple[str, ...], output: Path) -> tuple[list[str], int | None]:
    """(b) inside: with the user's files put in the killed run's output, the recovery refuses or keeps them, and a
    refusal changes nothing; then the user moves them away. Returns the problems and the recovery's exit code."""
    if not output.is_dir():
        return [], None
    leave_out = {Path(name).name for name in USER_FILES}
    before = tree_of(output, leave_out)
    planted = plant(output, dict([INSIDE_LINK]))
    code, error = runner.finish(flags)
    problems = []
    if fingerprints(output, dict([INSIDE_LINK])) != planted:
        problems.append(f"{' '.join(flags)} changed the user's files inside the output ({error})")
    if code != 0 and tree_of(output, leave_out) != before:
        problems.append(f"{' '.join(flags)} refused ({error}) but changed the output")
    refused = code == 2 or (runner.kind.startswith("pretrain") and code == 1 and error)  # torchrun's exit: 1
    if code != 0 and not refused:
        problems.append(f"{' '.join(flags)} with the user's files inside: exit {code} {error}")
    move_away(output)
    return problems, code


def final_output(setting: Setting, kind: str, output: Path) -> list[str]:
    """(a): the output equals the uninterrupted run's."""
    if not kind.startswith("pretrain"):
        return [] if tree_of(output) == setting.embed_reference else ["the output differs from the uninterrupted run's"]
    report_path = output / "pretraining_report.json"
    if not report_path.is_file():
        return ["no pretraining_report.json"]
    report = json.loads(report_path.read_text())
    checkpoints = [sorted(path.name for path in folder.glob("checkpoint-*"))
                   for folder in (output, setting.pretrain_reference)]
    difference = largest_difference(output, setting.pretrain_reference)
    problems = [] if difference == 0 else [f"max |dw| {difference} to the uninterrupted run"]
    if report["steps"] != setting.max_steps:
        problems.append(f"steps {report['steps']} of {setting.max_steps}")
    return problems + ([] if checkpoints[0] == checkpoints[1] else [f"checkpoints {checkpoints[0]}"])


def left_beside(folder: Path) -> list[str]:
    """Anything beside the output but the output, the chain's log and the user's files (a journal, a lock, a
    `.replaced` or staging folder)."""
    expected = {"out", "out.log", *(Path(name).parts[0] for name in USER_FILES), *USER_LINKS}
    extra = sorted({path.name for path in folder.iterdir()} - expected)
    return extra + sorted(f".cache/{path.name}" for path in (folder / ".cache").iterdir() if path.name != "mine.txt")


# -- a chain --------------------------------------------------------------------------------------------------------


@dataclass
class Chain:
    kind: str
    seed: int
    kills: int = 0
    moments: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    old_output_checks: int = 0
    inside_exit: int | None = None  # the recovery's exit with the user's files put inside the output
    done: bool = False
    choice: str = "resume"  # after a kill of an --overwrite: continue it, or start it over
    identical: bool = False
    user_files_untouched: bool = False


def kill_run(setting: Setting, chain: Chain, runner: Runner, flags, generator) -> tuple[str, ...] | None:
    """One run of the chain, killed at its drawn moment; returns the next command's flags (None: stop here)."""
    ready, delay, who, text = moment(setting, chain.kind, generator, runner.output)
    process, since = runner.start(flags)
    command = " ".join(flags) or "new run"
    if not kill_when(process, ready, delay, who):
        code, error = process.returncode, last_error(runner.log, since)
        chain.moments.append(f"{command}: ended ({code}) before {text}")
        chain.done = code == 0
        following = None if chain.done else after_refusal(chain.kind, error, flags)
        if not chain.done and following is None:
            chain.problems.append(f"{command}: exit {code} {error}")
        return following
    chain.kills += 1
    chain.moments.append(f"{command}: killed {text}")
    found = between_kills(setting, chain.kind, runner.output)
    chain.old_output_checks += chain.kind.startswith("overwrite")
    chain.problems += [f"after kill {chain.kills}: {problem}" for problem in found]
    following = recovery(setting, chain.kind, runner.output, chain.choice)
    if chain.kills == 1:
        problems, chain.inside_exit = user_files_inside(runner, following, runner.output)
        chain.problems += problems
        chain.done = chain.inside_exit == 0
    return following


def run_chain(setting: Setting, kind: str, seed: int, most_kills: int) -> Chain:
    generator, chain = random.Random(seed), Chain(kind, seed)
    chain.choice = generator.choice(["resume", "overwrite"])
    folder = setting.work / "chains" / f"{kind}-{seed}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    output, planned = folder / "out", generator.randint(1, most_kills)
    if kind.startswith("overwrite"):
        shutil.copytree(setting.embed_old, output)
    beside = plant(folder, USER_LINKS)
    runner = Runner(setting, kind, output, folder / "out.log")
    flags: tuple[str, ...] | None = ("--overwrite",) if kind.startswith("overwrite") else ()
    for _ in range(planned + 4):
        if chain.kills >= planned or chain.done or flags is None:
            break
        flags = kill_run(setting, chain, runner, flags, generator)
    for _ in range(3):  # the documented recovery, to the end
        if chain.done or flags is None:
            break
        code, error = runner.finish(flags)
        chain.done, flags = code == 0, (None if code == 0 else after_refusal(kind, error, flags))
        if not chain.done and flags is None:
            chain.problems.append(f"the recovery exited {code}: {error}")
    problems = final_output(setting, kind, output) if chain.done else ["the recovery never completed the run"]
    chain.identical = not problems
    chain.problems += problems
    chain.problems += [f"left beside the output: {name}" for name in left_beside(folder)]
    chain.user_files_untouched = fingerprints(folder, USER_LINKS) == beside and not any(
        "changed the user's files" in problem for problem in chain.problems)
    if fingerprints(folder, USER_LINKS) != beside:
        chain.problems.append(f"the user's files beside the output changed: {fingerprints(folder, USER_LINKS)}")
    if not chain.problems:
        shutil.rmtree(folder)
    return chain


# -- the uninterrupted runs and the main loop -----------------------------------------------------------------------


def timed(process: subprocess.Popen, what: str) -> float:
    start = time.monotonic()
    if process.wait(timeout=900) != 0:
        raise SystemExit(f"the uninterrupted {what} failed; see {process.args}")
    return time.monotonic() - start


def prepare(setting: Setting) -> None:
    with open(CORPUS, encoding="utf-8") as text:
        (setting.work / "corpus.txt").write_text("".join(islice(text, setting.lines)), encoding="utf-8")
    reference, old = setting.work / "reference" / "out", setting.work / "old" / "out"
    for folder in (reference.parent, old.parent):
        folder.mkdir(parents=True, exist_ok=True)
    for workers in (1, 2):  # one reference: both must give the same bytes
        output = reference.with_name(f"out-w{workers}")
        launched = start_embed(embed_arguments(setting, output, workers, 200), reference.parent / "log")
        setting.durations[f"embed-w{workers}"] = timed(launched, f"embed --workers {workers}")
    if tree_of(reference.with_name("out-w1")) != tree_of(reference.with_name("out-w2")):
        raise SystemExit("the uninterrupted runs with 1 and 2 workers differ")
    timed(start_embed(embed_arguments(setting, old, 1, 300), old.parent / "log"), "embed (the old output)")
    setting.embed_reference, setting.embed_old = tree_of(reference.with_name("out-w1")), old
    setting.pretrain_reference = setting.work / "reference-pretrain" / "out"
    setting.pretrain_reference.parent.mkdir(exist_ok=True)
    steps = (setting.max_steps, setting.save_steps)
    launched = launch_pretraining(str(setting.work / "corpus.txt"), setting.pretrain_reference, 2, *steps)
    setting.durations["pretrain"] = timed(launched, "pre-training")
    print(json.dumps({"uninterrupted_seconds": {key: round(value, 1) for key, value in setting.durations.items()}}),
          flush=True)


def report_line(number: int, chain: Chain) -> str:
    state = "ok" if not chain.problems else f"FAILED: {chain.problems}"
    return (f"{number:3d} {chain.kind:20s} seed {chain.seed:10d} kills {chain.kills} "
            f"[{'; '.join(chain.moments)}] {state}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kills", type=int, default=60, help="run chains until this many kills (default 60)")
    parser.add_argument("--quick", action="store_true", help="one chain of each kind, one kill each, small runs")
    parser.add_argument("--work", type=Path, help="folder for the runs (default: a new temporary one, deleted)")
    parser.add_argument("--only", metavar="KIND:CHAIN_SEED", help="replay one chain")
    options = parser.parse_args()
    quick = options.quick
    work = options.work or Path(tempfile.mkdtemp(prefix="random-kills-"))
    work.mkdir(parents=True, exist_ok=True)
    setting = Setting(work, lines=600 if quick else 8000, max_steps=6 if quick else 20, save_steps=3 if quick else 10)
    prepare(setting)
    master = random.Random(options.seed)
    chains = [(kind, int(seed)) for kind, seed in [options.only.split(":")]] if options.only else []
    counts, failures = collections.Counter(), []
    while chains or not options.only and (counts["kills"] < (0 if quick else options.kills)
                                          or counts["chains"] < len(KINDS)):
        kind, seed = chains.pop() if chains else (KINDS[counts["chains"] % len(KINDS)], master.getrandbits(32))
        chain = run_chain(setting, kind, seed, 1 if quick else 3)
        counts.update(chains=1, kills=chain.kills, identical=chain.identical,
                      user_files_untouched=chain.user_files_untouched, old_output_checks=chain.old_output_checks,
                      refused_with_user_files_inside=chain.inside_exit not in (None, 0), **{f"kills_{kind}": chain.kills})
        print(report_line(counts["chains"], chain), flush=True)
        if chain.problems:
            failures.append({"kind": kind, "seed": seed, "replay": f"--only {kind}:{seed}" + " --quick" * quick,
                             "problems": chain.problems})
    print(json.dumps({"seed": options.seed, "quick": quick, **counts, "failures": len(failures),
                      "failed_chains": failures}))
    if not options.work and not failures:
        shutil.rmtree(work)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
