"""benchmarks/worker_startup.py: a tiny run of the whole script (no timing is asserted)."""

import pytest

from . import load_benchmark


@pytest.mark.slow  # spawns workers: each imports torch and transformers (seconds)
def test_both_start_methods_are_timed_and_give_the_bytes_of_one_thread(converted_fixture_dir, capsys):
    script = load_benchmark("worker_startup")
    report = script.main(["--model", str(converted_fixture_dir), "--workers", "2", "--rounds", "1"])
    capsys.readouterr()
    assert len(report["seconds_until_ready"]["fork"]) == len(report["seconds_until_ready"]["spawn"]) == 1
    assert report["median"]["fork"] > 0 and report["same_bytes_as_one_thread"]
