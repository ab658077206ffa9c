"""`scripts/random_kills.py`, the random-kill harness of issue 51: its quick run passes on this tree, and its checks
catch what they are there to catch (a mixed output, an old output lost, a user's file changed)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from scripts.random_kills import USER_LINKS, Setting, fingerprints, old_output_safe, plant, tree_of

from ..conftest import REPOSITORY_ROOT


def write_output(folder, files):
    folder.mkdir(parents=True)
    for name, content in files.items():
        (folder / name).write_text(content)
    (folder / ".elmo-hf-output.json").write_text("{}")  # the marker: left out of every comparison
    return folder


OLD = {"manifest.json": "old", "shard-00000.parquet": "old 0", "shard-00001.parquet": "old 1"}
NEW = {"manifest.json": "new", "shard-00000.parquet": "new 0"}


@pytest.fixture
def setting(tmp_path):
    reference = write_output(tmp_path / "reference", NEW)
    return Setting(tmp_path, lines=0, max_steps=0, save_steps=0, embed_reference=tree_of(reference),
                   embed_old=write_output(tmp_path / "old", OLD))


def test_the_old_output_at_the_target_or_whole_aside_passes_and_a_mix_or_a_loss_fails(setting, tmp_path):
    target = write_output(tmp_path / "runs" / "out", OLD)
    assert old_output_safe(setting, target) == []
    (target / "shard-00000.parquet").write_text("new 0")  # one new shard among the old ones, no journal
    assert old_output_safe(setting, target) != []

    target = write_output(tmp_path / "runs2" / "out", {"shard-00000.parquet": "new 0"})  # the new run, partway
    journal = target.parent / ".out.elmo-hf.swap"
    journal.write_text(json.dumps({"replaced": ".out.x.replaced"}))
    assert old_output_safe(setting, target) != []  # the old output is nowhere
    aside = write_output(target.parent / ".out.x.replaced", OLD)
    assert old_output_safe(setting, target) == []
    (aside / "shard-00001.parquet").unlink()
    assert old_output_safe(setting, target) != []  # the old output, not whole


def test_a_changed_user_file_or_link_changes_the_fingerprints(tmp_path):
    planted = plant(tmp_path, USER_LINKS)
    assert fingerprints(tmp_path, USER_LINKS) == planted
    (tmp_path / ".cache" / "mine.txt").write_text("overwritten")
    assert fingerprints(tmp_path, USER_LINKS) != planted
    plant_again = plant(tmp_path / "again", USER_LINKS)
    (tmp_path / "again" / "latest").unlink()
    (tmp_path / "again" / "latest").symlink_to("elsewhere")
    assert fingerprints(tmp_path / "again", USER_LINKS) != plant_again


@pytest.mark.slow  # six kill chains (embed, --overwrite, two-process torchrun pre-training): 2-3.5 min on 2 cores
def test_the_quick_random_kill_run_ends_every_chain_identical_with_the_users_files_untouched(tmp_path):
    result = subprocess.run(
        [sys.executable, "scripts/random_kills.py", "--quick", "--seed", "1", "--work", str(tmp_path)],
        cwd=REPOSITORY_ROOT, capture_output=True, text=True, timeout=600, check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    counts = json.loads(result.stdout.strip().splitlines()[-1])
    assert counts["chains"] == 6 and counts["kills"] >= 4, counts  # a run may end before its drawn moment
    assert counts["identical"] == counts["user_files_untouched"] == 6 and counts["failures"] == 0, counts
    assert all(counts[f"kills_{kind}"] <= 1 for kind in ("embed-w1", "embed-w2", "overwrite-w1", "overwrite-w2"))
