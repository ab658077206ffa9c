"""benchmarks/embed_throughput.py: a tiny run of the whole script (no timing is asserted)."""

import pytest

from . import load_benchmark


def test_end_to_end_and_model_alone_cover_the_same_words(tmp_path, converted_fixture_dir, capsys):
    script = load_benchmark("embed_throughput")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"sentence {index} of the bank , with words .\n" for index in range(45)) + "\n", encoding="utf-8")
    report = script.main(["--model", str(converted_fixture_dir), "--input", str(corpus), "--shard-size", "20", "--threads", "1"])
    capsys.readouterr()
    assert report["model_alone"]["words"] == report["end_to_end"]["words"] == 45 * 9
    assert report["end_to_end"]["shards"] == 3  # 46 lines (one empty) in shards of 20
    assert set(report["end_to_end"]["stage_seconds"]) == {"read", "model", "write"}
    assert report["ratio"] > 0 and report["options"]["max_words_per_batch"] == 4096


def test_worker_scaling_is_the_median_of_each_rounds_ratio_over_one_worker(tmp_path, converted_fixture_dir, capsys):
    script = load_benchmark("embed_throughput")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"sentence {index} of the bank , with words .\n" for index in range(40)), encoding="utf-8")
    report = script.main([
        "--model", str(converted_fixture_dir), "--input", str(corpus), "--shard-size", "10", "--threads", "1", "--workers", "1", "2",
        "--rounds", "3",
    ])
    capsys.readouterr()
    workers = report["workers"]
    assert set(workers["end_to_end"]) == set(workers["scaling"]) == {"1", "2"} and workers["scaling"]["1"] == 1.0
    assert workers["end_to_end"]["2"]["words"] == workers["end_to_end"]["1"]["words"] == 40 * 9
    speeds, ratios = workers["words_per_second_by_round"], workers["scaling_by_round"]
    assert workers["rounds"] == 3 and len(speeds["1"]) == len(speeds["2"]) == len(ratios["2"]) == 3 and ratios["1"] == [1.0] * 3
    for one, two, ratio in zip(speeds["1"], speeds["2"], ratios["2"]):  # each round's ratio is of that round's runs
        assert ratio == round(two / one, 3)
    assert workers["scaling"]["2"] == sorted(ratios["2"])[1]
    with pytest.raises(SystemExit):
        script.main(["--model", str(converted_fixture_dir), "--input", str(corpus), "--workers", "1", "2", "--rounds", "0"])
    assert "--rounds must be at least 1, got 0" in capsys.readouterr().err
