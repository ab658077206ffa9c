"""benchmarks/embed_throughput.py: a tiny run of the whole script (no timing is asserted)."""

import os
import platform
import threading

import pytest
import torch

from elmo_hf.embedding.embedder import ELMoEmbedder
from elmo_hf.runtime.process_tuning import user_set_malloc_options

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
    as_the_command = platform.libc_ver()[0] == "glibc" and not user_set_malloc_options()
    assert report["malloc"] == ("the elmo-hf command's thresholds" if as_the_command else "glibc defaults")


def test_the_model_alone_in_processes_covers_every_word_once(tmp_path, converted_fixture_dir):
    """The ceiling's processes get every shard once between them, whatever their count (more than the shards too)."""
    script = load_benchmark("embed_throughput")
    embedder = ELMoEmbedder.from_pretrained(converted_fixture_dir)
    sentences = [f"sentence {index} of the bank , with words .".split() for index in range(25)] + [[]]
    shards = script.prepared_shards(embedder, sentences, 10)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for processes in (1, 2, 4):
            run = script.model_alone_in_processes(embedder, shards, processes, token_cache_words=1000)
            assert run["processes"] == processes and run["words"] == 25 * 9 and run["words_per_second"] > 0
    finally:
        torch.set_num_threads(threads)


def fake_commands(monkeypatch, script, speeds: dict[int, list[int]]) -> list[dict]:
    """Replace the command runs of ``--workers`` by ``speeds[count]`` in turn; returns what each call was given."""
    calls, left = [], {count: iter(values) for count, values in speeds.items()}

    def embed_command(corpus, work_dir, arguments, environment):
        workers = int(arguments[arguments.index("--workers") + 1])
        cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        calls.append({"arguments": arguments, "environment": environment, "cores": cores, "corpus": corpus})
        return {"words_per_second": next(left[workers]), "words": 360, "wall_seconds": 1.0}

    monkeypatch.setattr(script, "embed_command", embed_command)
    return calls


def test_worker_scaling_runs_the_command_and_is_the_median_of_each_rounds_ratio(tmp_path, converted_fixture_dir, capsys, monkeypatch):
    script = load_benchmark("embed_throughput")
    calls = fake_commands(monkeypatch, script, {1: [1000, 1100, 900], 2: [1800, 2090, 1530]})
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"sentence {index} of the bank , with words .\n" for index in range(40)), encoding="utf-8")
    report = script.main([
        "--model", str(converted_fixture_dir), "--input", str(corpus), "--shard-size", "10", "--threads", "1", "--workers", "1", "2",
        "--rounds", "3", "--glibc-malloc-defaults", "--max-words-per-batch", "512",
    ])
    capsys.readouterr()
    workers = report["workers"]
    assert report["malloc"] == "glibc defaults"
    # Each run is the command with this run's model and options, the workers at one thread, thread variables unset.
    assert [call["arguments"][-4:] for call in calls] == [["--workers", str(count), "--threads", "1"] for count in (1, 2, 2, 1, 1, 2)]
    options = calls[0]["arguments"]
    for flag, value in (("--model", str(converted_fixture_dir)), ("--shard-size", "10"), ("--max-words-per-batch", "512"),
                        ("--token-cache-words", "50000"), ("--device", "cpu")):
        assert options[options.index(flag) + 1] == value, flag
    assert all("OMP_NUM_THREADS" not in call["environment"] for call in calls)
    assert set(workers["end_to_end"]) == set(workers["scaling"]) == {"1", "2"} and workers["scaling"]["1"] == 1.0
    assert workers["words_per_second_by_round"] == {"1": [1000, 1100, 900], "2": [1800, 2090, 1530]}
    assert workers["scaling_by_round"] == {"1": [1.0] * 3, "2": [1.8, 1.9, 1.7]} and workers["scaling"]["2"] == 1.8
    # The ceiling: the same model batches in 1 and 2 independent processes, in the same rounds.
    alone_speeds, alone_ratios = workers["model_alone_words_per_second_by_round"], workers["model_alone_scaling_by_round"]
    assert len(alone_speeds["1"]) == len(alone_speeds["2"]) == len(alone_ratios["2"]) == 3 and alone_ratios["1"] == [1.0] * 3
    for one, two, ratio in zip(alone_speeds["1"], alone_speeds["2"], alone_ratios["2"]):
        assert ratio == round(two / one, 3) and one > 0
    assert workers["model_alone_scaling"]["2"] == sorted(alone_ratios["2"])[1]
    with pytest.raises(SystemExit):
        script.main(["--model", str(converted_fixture_dir), "--input", str(corpus), "--workers", "1", "2", "--rounds", "0"])
    assert "--rounds must be at least 1, got 0" in capsys.readouterr().err


@pytest.mark.slow  # two `elmo-hf embed` processes: about 8 s on 2 idle cores
def test_worker_scaling_reads_the_commands_own_words_and_speed(tmp_path, converted_fixture_dir, capsys):
    script = load_benchmark("embed_throughput")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"sentence {index} of the bank , with words .\n" for index in range(40)), encoding="utf-8")
    report = script.main([
        "--model", str(converted_fixture_dir), "--input", str(corpus), "--shard-size", "10", "--threads", "1", "--workers", "1", "2",
    ])
    capsys.readouterr()
    runs = report["workers"]["end_to_end"]
    assert runs["1"]["words"] == runs["2"]["words"] == report["end_to_end"]["words"] == 40 * 9
    assert runs["1"]["words_per_second"] > 0 and runs["2"]["words_per_second"] > 0


def test_core_per_worker_runs_each_count_on_as_many_cores_and_gives_them_back(tmp_path, converted_fixture_dir, capsys, monkeypatch):
    script = load_benchmark("embed_throughput")
    cores = sorted(os.sched_getaffinity(0))
    seen = []
    with script.running_on(cores[:1]):
        thread = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
        thread.start()
        thread.join()
        assert os.sched_getaffinity(0) == {cores[0]}
    assert seen == [{cores[0]}] and sorted(os.sched_getaffinity(0)) == cores  # its threads inherit it; given back
    with pytest.raises(SystemExit):
        script.main(["--model", str(converted_fixture_dir), "--workers", str(len(cores) + 1), "--core-per-worker"])
    assert "workers need as many cores" in capsys.readouterr().err
    counts = [1, 2][: len(cores)]
    calls = fake_commands(monkeypatch, script, {1: [1000], 2: [1900]})
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"sentence {index} of the bank , with words .\n" for index in range(20)), encoding="utf-8")
    report = script.main([
        "--model", str(converted_fixture_dir), "--input", str(corpus), "--shard-size", "10", "--threads", "1",
        "--workers", *map(str, counts), "--core-per-worker",
    ])
    capsys.readouterr()
    assert report["workers"]["core_per_worker"] is True and sorted(os.sched_getaffinity(0)) == cores
    assert [call["cores"] for call in calls] == [set(cores[:count]) for count in counts]  # each command on N cores
