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
