"""benchmarks/pipelined_stages.py: a tiny run of the whole script (no timing is asserted)."""

from . import load_benchmark


def test_the_pipelined_and_the_serial_stages_are_timed_and_write_the_same_bytes(converted_fixture_dir, capsys):
    script = load_benchmark("pipelined_stages")
    report = script.main(["--model", str(converted_fixture_dir), "--lines", "60", "--shard-size", "20", "--rounds", "2", "--threads", "1"])
    capsys.readouterr()
    assert len(report["ratio_by_round"]) == 2 and report["ratio"] > 0
    assert report["same_bytes"] and all(run["words_per_second"] > 0 for runs in report["runs"] for run in runs.values())
