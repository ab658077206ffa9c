"""benchmarks/gpu_session.py: the one-call GPU session, checked on the CPU (no figure is asserted)."""

import json
import os
from pathlib import Path

import pytest

from . import load_benchmark


def test_a_session_records_each_step_and_the_targets_even_when_a_step_fails(tmp_path, capsys):
    script = load_benchmark("gpu_session")
    results = script.main(["--out", str(tmp_path), "--device", "cpu", "--steps", "environment"])
    capsys.readouterr()
    assert json.loads((tmp_path / "results.json").read_text()) == results
    assert results["steps"]["environment"]["report"]["torch"]
    assert set(results["targets"]) == set(script.TARGETS)
    assert all(target["measured"] is None for target in results["targets"].values())
    assert "== environment: done" in (tmp_path / "session.log").read_text()

    failing = script.Session(tmp_path / "failing", budget_seconds=60)
    failing.step("inference", lambda: failing.command(["python", "-c", "import sys; sys.exit(3)"]))
    assert failing.results["steps"]["inference"]["error"].startswith("RuntimeError: -c exited with 3")
    spent = script.Session(tmp_path / "spent", budget_seconds=0)
    spent.step("tests", lambda: pytest.fail("a step past the budget must not run"))
    assert spent.results["steps"]["tests"]["error"].startswith("not run")


def test_targets_read_the_figures_where_the_steps_put_them():
    script = load_benchmark("gpu_session")
    rows = [{"dtype": "bfloat16", "batch_size": size, "words_per_second": 1000.0 * size} for size in (32, 1024)]
    steps = {
        "embed": {"report": {"original_float16": {"end_to_end": {"words_per_second": 123.0}, "ratio": 0.7}}},
        "inference": {"report": {"shapes": {"original": {"results": rows}}}},
        "side-by-side": {"report": {"allennlp float32": {32: 10.0, 512: 40.0}, "elmo-hf float32": {32: 100.0, 512: 80.0}}},
        "training": {"report": {"float32": {"shapes": {"original": {"words_per_second": 5.0}}},
                                "bfloat16": {"shapes": {"original": {"words_per_second": 9.0}}}}},
    }
    measured = {name: target["measured"] for name, target in script.targets(steps).items()}
    assert measured == {
        "embed_original_float16_words_per_second": 123.0,
        "embed_original_float16_ratio": 0.7,
        "model_alone_bfloat16_batch_32": 32000.0,
        "model_alone_bfloat16_batch_1024": 1024000.0,
        "users_loop_over_allennlp": {32: 10.0, 512: 2.0},
        "pretraining_original_words_per_second": 9.0,
    }


@pytest.mark.slow
def test_the_whole_session_runs_on_a_cpu(tmp_path, capsys):
    """Every step end to end at tiny sizes (with AllenNLP where ``ELMO_HF_ALLENNLP_SITE`` names its unpacked site)."""
    script = load_benchmark("gpu_session")
    allennlp_site = os.environ.get("ELMO_HF_ALLENNLP_SITE")
    argv = ["--out", str(tmp_path), "--device", "cpu", "--quick"] + (["--allennlp-site", allennlp_site] if allennlp_site else [])
    results = script.main(argv)
    capsys.readouterr()
    errors = {name: step["error"] for name, step in results["steps"].items() if "error" in step}
    anchors_beside = script.SIDE_BY_SIDE.is_file()
    if not anchors_beside:  # a plain clone: only the comparison with the anchors cannot run, and says why
        missing = errors.pop("side-by-side", "")
        assert missing.startswith("FileNotFoundError: ") and "../shared/anchors" in missing, (missing, errors)
    assert not errors, (errors, Path(tmp_path / "session.log").read_text()[-3000:])
    assert results["steps"]["tests"]["report"]["exit_code"] in (0, 5)  # 5: every gpu test skipped or none collected
    embed = results["steps"]["embed"]["report"]
    assert set(embed) == {"original_float16", "original_float16_bfloat16_compute", "shipped_model"}
    assert results["targets"]["embed_original_float16_ratio"]["measured"] > 0
    if anchors_beside:
        side = results["steps"]["side-by-side"]["report"]
        assert side["elmo-hf float32"] and side["elmo-hf bfloat16"]
        if allennlp_site:
            assert side["top_layer_max_abs_difference_float32"] < 1e-4
    training = results["steps"]["training"]["report"]["tiny_float32"]["shapes"]["tiny"]
    assert training["words_per_second"] > 0 and training["flops_per_word"] > training["flops_per_word_3_to_10_letters"] > 0
