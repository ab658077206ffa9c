"""Mutations of the reliability code (issue 51, item 7), each with the tests that must fail with it: a mutation
that passes its tests "survived", and the behaviour it breaks is untested.

    python scripts/mutation_check.py [--only N ...] [--baseline]
    python scripts/mutation_check.py --try FILE ORIGINAL MUTATED TEST [TEST ...]

For each mutation the working tree is copied to a temporary folder (the real files are never edited), the exact
original text (found once in FILE) is replaced by the mutated text there, and the named tests run in the copy with
``PYTHONPATH`` pointing at it. Killed: a test failed (pytest exit 1); survived: all passed; error: anything else (the
text was not found once, a test id does not exist). ``--baseline`` first runs every named test on the unchanged copy
(they must pass). Prints a line per mutation and the counts as JSON; exits 1 unless every mutation was killed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutation:
    what: str
    file: str
    original: str
    mutated: str
    tests: tuple[str, ...]


OD = "elmo_hf/storage/output_directory.py"
LOCK = "elmo_hf/storage/lock.py"
REPLACEMENT = "elmo_hf/storage/replacement.py"
T_LOCK = "tests/storage/test_lock.py"
T_OD = "tests/storage/test_output_directory.py"
ENGINE = "elmo_hf/embedding/engine.py"
MANIFEST = "elmo_hf/embedding/manifest.py"
T_SHARDS = "tests/embedding/test_shards.py"
MUTATIONS = [
    # -- the eight the issue named ------------------------------------------------------------------------------------
    Mutation(
        "the lock's re-check that the file it locked is still the one at its path, replaced by True", LOCK,
        "            if self._is_at_path(descriptor):\n                break",
        "            if True:\n                break",
        (f"{T_LOCK}::test_a_lock_file_released_between_its_open_and_its_flock_is_opened_again",),
    ),
    Mutation(
        "`unproven == []` dropped before deleting the new output of a failed --overwrite", REPLACEMENT,
        "    if not keep and unproven == [] and replacing.replaced.is_dir():",
        "    if not keep and replacing.replaced.is_dir():",
        (f"{T_OD}::test_a_failed_overwrite_keeps_both_when_the_new_output_holds_a_file_no_record_lists",),
    ),
    Mutation(
        "fill_temporary's removal of the temporary file on failure removed", "elmo_hf/storage/files.py",
        "    except OSError as error:\n        temporary.unlink(missing_ok=True)\n        raise _naming(path, error) from error\n"
        "    except BaseException:\n        temporary.unlink(missing_ok=True)\n        raise\n",
        "    except OSError as error:\n        raise _naming(path, error) from error\n    except BaseException:\n        raise\n",
        ("tests/storage/test_files.py::test_a_failed_fill_removes_its_temporary_file",),
    ),
    Mutation(
        "the manifest's own record: the check that a listed file is at the output's top level (no `/`) dropped",
        "elmo_hf/embedding/manifest.py",
        'listed = {shard["file"]: shard["bytes"] for shard in data["shards"] if "/" not in shard["file"]}',
        'listed = {shard["file"]: shard["bytes"] for shard in data["shards"]}',
        (f"{T_SHARDS}::test_a_manifest_entry_outside_the_output_top_level_proves_nothing",),
    ),
    Mutation(
        "the created-parent check before removing the folders around a failed run's output loosened", OD,
        "        if created_parent is not None and not path.exists():",
        "        if not path.exists():",
        (f"{T_OD}::test_a_failed_run_removes_only_empty_parent_folders_it_created",),
    ),
    Mutation(
        "pool.terminate() removed before a failed pipelined run removes its workers' temporary files", ENGINE,
        "        self.pool.terminate()\n        return []\n",
        "        return []\n",
        ("tests/embedding/test_workers.py::test_a_failed_run_stops_its_workers_before_it_removes_their_temporary_files",),
    ),
    Mutation(
        "a changed --seed accepted on a pre-training resume", "elmo_hf/pretraining/options.py",
        '    "output_dir", "max_steps",', '    "output_dir", "seed", "max_steps",',
        ("tests/pretraining/test_run.py::test_ctrl_c_saves_a_checkpoint_and_resume_continues",),
    ),
    Mutation(
        "the JSON lines reader's byte order mark fallback disabled", "elmo_hf/corpus/format_readers.py",
        "                if line_number == 0 and line.startswith(UTF8_BYTE_ORDER_MARK):",
        "                if False:",
        ("tests/corpus/test_readers.py::test_a_json_lines_file_read_line_by_line_after_pyarrow_refused_it_skips_its_byte_order_mark",),
    ),
    # -- found surviving since, each with the test written for it -------------------------------------------------------
    Mutation(
        "a library resume of another input: embed_corpus's own input check dropped (the CLI checks before loading)",
        MANIFEST, '    check_same_run(output_dir, "input", previous.input, fresh.input)\n', "",
        (f"{T_SHARDS}::test_a_library_resume_refuses_a_changed_input",),
    ),
    Mutation(
        "a resume with changed model weights: the run's sha256 check of the weights dropped", MANIFEST,
        '    check_same_run(output_dir, "model weights", {"sha256": previous.model["sha256"]}, {"sha256": fresh.model["sha256"]})\n',
        "",
        (f"{T_SHARDS}::test_resume_refuses_a_model_whose_weights_changed_since",),
    ),
    Mutation(
        "--verify passes an unfinished output (the manifest's `complete` not read)", MANIFEST,
        '    problems = [] if manifest.complete else [f"the run is not complete',
        '    problems = [] if True else [f"the run is not complete',
        (f"{T_SHARDS}::test_verify_fails_an_unfinished_output_one_without_a_manifest_and_a_file_embed_does_not_write",),
    ),
    Mutation(
        "--verify passes an output killed before its first shard (no manifest)", MANIFEST,
        '        return [f"{output_dir} has no {MANIFEST_NAME}: the run never finished a shard"]', "        return []",
        (f"{T_SHARDS}::test_verify_fails_an_unfinished_output_one_without_a_manifest_and_a_file_embed_does_not_write",),
    ),
    Mutation(
        "--verify passes an output holding a file embed does not write", MANIFEST,
        '    problems += [f"{name} is not written by elmo-hf embed" for name in EMBEDDINGS_OUTPUT.foreign_entries(output_dir)]\n',
        "",
        (f"{T_SHARDS}::test_verify_fails_an_unfinished_output_one_without_a_manifest_and_a_file_embed_does_not_write",),
    ),
]


def copy_of_the_tree(destination: Path) -> Path:
    ignored = shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", "*.pyc", ".benchmarks")
    shutil.copytree(ROOT, destination, ignore=ignored, symlinks=True)
    return destination


def apply(tree: Path, mutation: Mutation) -> str | None:
    """Apply ``mutation`` to ``tree``; the reason it cannot be applied, or None."""
    path = tree / mutation.file
    text = path.read_text(encoding="utf-8")
    found = text.count(mutation.original)
    if found != 1:
        return f"the original text is found {found} times in {mutation.file}"
    path.write_text(text.replace(mutation.original, mutation.mutated), encoding="utf-8")
    return None


def run_tests(tree: Path, tests: tuple[str, ...]) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-m", "pytest", *tests, "-x", "-q", "-p", "no:cacheprovider", "-n", "0",
               "-m", "slow or not slow"]
    return subprocess.run(command, cwd=tree, env=environment, capture_output=True, text=True, timeout=1800, check=False)


def check(mutation: Mutation, baseline: bool) -> tuple[str, str]:
    """(outcome, detail): killed, survived, or error."""
    with tempfile.TemporaryDirectory(prefix="mutation-") as temporary:
        tree = copy_of_the_tree(Path(temporary) / "tree")
        if baseline and (result := run_tests(tree, mutation.tests)).returncode != 0:
            return "error", "the tests fail without the mutation: " + result.stdout.strip().splitlines()[-1]
        if (reason := apply(tree, mutation)) is not None:
            return "error", reason
        result = run_tests(tree, mutation.tests)
    last = (result.stdout.strip().splitlines() or [""])[-1]
    if result.returncode == 1:
        failed = [line.split(" ")[1] for line in result.stdout.splitlines() if line.startswith("FAILED ")]
        return "killed", f"by {', '.join(failed) or last}"
    if result.returncode == 0:
        return "survived", last
    return "error", f"pytest exit {result.returncode}: {last} {result.stderr[-500:]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", type=int, nargs="+", help="numbers of the mutations to check (from 1)")
    parser.add_argument("--baseline", action="store_true", help="first check that the named tests pass unchanged")
    parser.add_argument("--try", dest="attempt", nargs="+", metavar="FILE ORIGINAL MUTATED TEST",
                        help="check one mutation given here instead of the list")
    options = parser.parse_args()
    if options.attempt:
        file, original, mutated, *tests = options.attempt
        chosen = [(0, Mutation("given", file, original, mutated, tuple(tests)))]
    else:
        chosen = [(number, mutation) for number, mutation in enumerate(MUTATIONS, 1)
                  if not options.only or number in options.only]
    counts = {"killed": 0, "survived": 0, "error": 0}
    for number, mutation in chosen:
        outcome, detail = check(mutation, options.baseline)
        counts[outcome] += 1
        print(f"{number:2d} {outcome:8s} {mutation.what} ({mutation.file}): {detail}", flush=True)
    print(json.dumps({"mutations": len(chosen), **counts}))
    return 0 if counts["killed"] == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
