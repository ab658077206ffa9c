"""benchmarks/contention.py: a tiny run of the whole script (no timing is asserted)."""

import os

import pytest

from . import load_benchmark


@pytest.mark.slow  # four `elmo-hf embed` processes: about 25 s on 2 idle cores, minutes on busy ones
def test_every_setting_is_measured_idle_and_beside_a_busy_process(tmp_path, capsys):
    script = load_benchmark("contention")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"sentence {index} of the bank , with words .\n" for index in range(30)), encoding="utf-8")
    report = script.main(["--input", str(corpus), "--lines", "20", "--busy", "0", "1", "--settings", "default", "one-thread", "--rounds", "1"])
    capsys.readouterr()
    for setting in ("default", "one-thread"):
        entry = report["settings"][setting]
        assert len(entry["busy_0"]["words_per_second"]) == len(entry["busy_1"]["words_per_second"]) == 1
        assert entry["busy_0"]["median"] > 0 and entry["busy_1"]["cpu_seconds"][0] > 0
        assert set(entry["ratio_to_idle"]) == {"busy_1"}
    assert report["idle_vs_one_thread"]["one-thread"] == 1.0


def test_worker_settings_add_their_arguments(monkeypatch, tmp_path):
    script = load_benchmark("contention")
    commands = []

    class Finished:
        returncode = 0

        def __init__(self, command, **kwargs):
            commands.append(command)

        def communicate(self):
            return "this run: 10 words in 1.0 s = 1,234 words/s", ""

    monkeypatch.setattr(script.subprocess, "Popen", Finished)
    assert script.embed_once(tmp_path / "c.txt", None, "workers-2", tmp_path)["words_per_second"] == 1234
    assert commands[-1][-2:] == ["--workers", "2"]
    script.embed_once(tmp_path / "c.txt", None, "default", tmp_path)
    assert "--workers" not in commands[-1] and "--threads" not in commands[-1]  # the command's own default
    for setting in ("one-process", "spinning", "passive"):  # one process at torch's threads, as before workers
        script.embed_once(tmp_path / "c.txt", None, setting, tmp_path)
        assert commands[-1][-2:] == ["--workers", "1"]
    assert script.setting_environment("spinning")["OMP_WAIT_POLICY"] == ""  # set, so the command leaves it alone


def test_a_setting_only_changes_the_thread_variables(monkeypatch):
    script = load_benchmark("contention")
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.setenv("ELMO_HF_SOMETHING", "kept")
    default, passive = script.setting_environment("default"), script.setting_environment("passive")
    assert "OMP_NUM_THREADS" not in default and default["ELMO_HF_SOMETHING"] == "kept"
    assert passive["OMP_WAIT_POLICY"] == "PASSIVE" and "OMP_NUM_THREADS" not in passive


def test_ratios_compare_medians_to_the_same_settings_idle_median():
    script = load_benchmark("contention")

    def runs(*speeds):
        return [{"words_per_second": speed, "wall_seconds": 1.0, "cpu_seconds": 1.0} for speed in speeds]

    report = script.summarize({
        "default": {0: runs(1000, 3000, 2000), 2: runs(100, 300)},
        "one-thread": {0: runs(1600), 2: runs(800)},
    })
    assert report["settings"]["default"]["busy_0"]["median"] == 2000
    assert report["settings"]["default"]["ratio_to_idle"] == {"busy_2": 0.1}
    assert report["settings"]["one-thread"]["ratio_to_idle"] == {"busy_2": 0.5}
    assert report["idle_vs_one_thread"] == {"default": 1.25, "one-thread": 1.0}
    assert "idle_vs_one_core" not in report  # not measured

    # Round by round: each round's pair, then their median.
    report = script.summarize({"default": {0: runs(3000, 1000, 2400)}, "one-thread": {0: runs(2000, 1000, 1200)}})
    assert report["idle_vs_one_thread"]["default"] == 2.0  # the medians: 2400 / 1200
    assert report["idle_vs_one_thread_by_round"]["default"] == {"ratios": [1.5, 1.0, 2.0], "median": 1.5}

    report = script.summarize({"default": {0: runs(3600)}, "one-core": {0: runs(2000)}})
    assert report["idle_vs_one_core"] == {"default": 1.8, "one-core": 1.0} and "idle_vs_one_thread" not in report


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs CPU affinity, 2 cores")
def test_the_one_core_setting_runs_its_command_on_one_core_only(monkeypatch, tmp_path):
    """Only ``one-core``'s command starts on one core (a child inherits the affinity it is started with), and this
    process has all its cores back afterwards."""
    script = load_benchmark("contention")
    cores = os.sched_getaffinity(0)
    started_on = []

    class Finished:
        returncode = 0

        def __init__(self, command, **kwargs):
            started_on.append(os.sched_getaffinity(0))

        def communicate(self):
            return "= 1 words/s", ""

    monkeypatch.setattr(script.subprocess, "Popen", Finished)
    script.embed_once(tmp_path / "c.txt", None, "default", tmp_path)
    script.embed_once(tmp_path / "c.txt", None, "one-core", tmp_path)
    assert started_on == [cores, {min(cores)}] and os.sched_getaffinity(0) == cores
    assert script.setting_environment("one-core")["OMP_NUM_THREADS"] == "1"


def test_joined_rows_are_long_enough_and_read_the_input_again_as_needed(tmp_path):
    script = load_benchmark("contention")
    source = tmp_path / "lines.txt"
    source.write_text("one two\n\nthree four five\nsix\n", encoding="utf-8")
    rows = script.joined_rows(source, 5, 10, tmp_path / "rows.txt").read_text(encoding="utf-8").splitlines()
    assert rows == ["one two three four five", "six one two", "three four five", "six one two", "three four five"]
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(ValueError, match="blank.txt has no non-empty line"):
        script.joined_rows(blank, 1, 10, tmp_path / "out.txt")
