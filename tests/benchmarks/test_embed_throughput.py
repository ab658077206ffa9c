"""benchmarks/embed_throughput.py: a tiny run of the whole script (no timing is asserted)."""

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


def test_worker_scaling_is_reported_over_one_worker(tmp_path, converted_fixture_dir, capsys):
    script = load_benchmark("embed_throughput")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"sentence {index} of the bank , with words .\n" for index in range(40)), encoding="utf-8")
    report = script.main([
        "--model", str(converted_fixture_dir), "--input", str(corpus), "--shard-size", "10", "--threads", "1", "--workers", "1", "2",
    ])
    capsys.readouterr()
    workers = report["workers"]
    assert set(workers["end_to_end"]) == set(workers["scaling"]) == {"1", "2"} and workers["scaling"]["1"] == 1.0
    assert workers["end_to_end"]["2"]["words"] == workers["end_to_end"]["1"]["words"] == 40 * 9
