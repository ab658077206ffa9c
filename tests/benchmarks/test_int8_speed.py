"""benchmarks/int8_speed.py: a tiny run of the whole script (speed alternated, cosines, the probe difference)."""

import json

from . import load_benchmark


def test_the_script_runs_and_reports_json(capsys):
    script = load_benchmark("int8_speed")
    report = script.main(
        [
            "--shape", "small", "--batch-sizes", "2", "--rounds", "2", "--min-seconds", "0", "--words", "4", "--threads", "1",
            "--error-sentences", "6", "--probe-train", "12", "--probe-test", "12",
        ]
    )
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(report))
    assert report["command"].startswith("python benchmarks/int8_speed.py --shape small")
    (speed,) = report["speed"]
    assert speed["batch_size"] == 2 and len(speed["int8_over_float32_per_round"]) == 2 and speed["int8_over_float32"] > 0
    assert set(speed["words_per_second"]) == {"float32", "int8"}
    for cosines in (report["shape_cosines"], report["converted_fixture_cosines"]):
        assert [row["layer"] for row in cosines] == [0, 1, 2]
        assert all(0.99 <= row["min_cosine"] <= row["median_cosine"] for row in cosines)
        assert any(row["min_cosine"] < 1.0 for row in cosines[1:])  # int8 really ran
    probe = report["probe"]
    assert set(probe["int8_minus_float32_points"]) == set(probe["accuracy"]["float32"]) and "mix" in probe["accuracy"]["int8"]
    assert probe["largest_difference_points"] == max(abs(value) for value in probe["int8_minus_float32_points"].values())
