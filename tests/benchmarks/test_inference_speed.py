"""benchmarks/inference_speed.py: its FLOP count, its AllenNLP-style baseline, and a tiny run of the whole script."""

import json

import pytest
import torch

from elmo_hf import ELMoConfig

from . import load_benchmark
from ..helpers import SENTENCES, random_model


@pytest.fixture(scope="module")
def speed_script():
    return load_benchmark("inference_speed")


def test_flop_count_of_the_original_shape_is_the_issues_204_mflop(speed_script):
    flops = speed_script.flop_per_position(ELMoConfig())
    assert round(flops["bilstm"] / 1e6, 1) == 151.0
    assert round(flops["char_cnn"] / 1e6, 1) == 17.6
    assert round(flops["highway"] / 1e6, 1) == 33.6
    assert round(flops["token_projection"] / 1e6, 1) == 2.1
    assert round(flops["total"] / 1e6, 1) == 204.3
    assert flops["total"] == sum(value for name, value in flops.items() if name != "total")


def test_allennlp_style_baseline_computes_the_reference_vectors(speed_script, tokenizer):
    model = random_model()
    inputs = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    model.set_inference_path("reference")
    with torch.no_grad():
        expected = model(**inputs, keep_sentence_boundaries=True).hidden_states
        actual = speed_script.allennlp_style_forward(model, inputs["input_ids"], inputs["attention_mask"])
    model.set_inference_path("auto")
    for a, b in zip(actual, expected):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_the_script_runs_and_reports_json(speed_script, capsys):
    report = speed_script.main(
        ["--shapes", "small", "--batch-sizes", "2", "--dtypes", "float32", "--min-seconds", "0", "--words", "4", "--profile", "--threads", "1"]
    )
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(report))
    small = report["shapes"]["small"]
    assert [(row["path"], row["batch_size"]) for row in small["results"]] == [("allennlp-style", 2), ("reference", 2), ("fast", 2)]
    assert all(row["words_per_second"] > 0 and 0 < row["fraction_of_limit"] and 0 < row["utilization"] for row in small["results"])
    assert small["equality"]["fast_vs_reference_max_abs_diff"] <= 1e-4
    assert small["equality"]["allennlp_style_vs_reference_max_abs_diff"] <= 1e-4
    assert report["matmul"]["float32"]["limit_gflops"] > 0
    assert abs(sum(small["fast_float32_profile_batch_2"].values()) - 1.0) < 0.01


@pytest.mark.slow  # 20 s: the bfloat16 matmul limit is measured on large shapes, emulated on CPUs without AMX
def test_each_dtype_is_measured_against_its_own_limit(speed_script, capsys):
    """bfloat16 work divided by the float32 limit gave a "fraction of the limit" above 2 on a GPU."""
    report = speed_script.main(
        ["--shapes", "small", "--batch-sizes", "1", "--dtypes", "float32", "bfloat16", "--paths", "fast", "--min-seconds", "0", "--words", "2", "--threads", "1"]
    )
    capsys.readouterr()
    flops = report["shapes"]["small"]["flop_per_position"]["total"]
    for row in report["shapes"]["small"]["results"]:
        limit = report["matmul"][row["dtype"]]["limit_gflops"] * 1e9
        # The report's figures are rounded (words/s to 0.1, the limit to 0.1 GFLOP/s): recomputing from them is only
        # close; a wrong dtype's limit would be off by a factor (2.2 on a GPU).
        assert row["fraction_of_limit"] == pytest.approx(row["words_per_second"] * flops / limit, rel=0.02, abs=2e-3), row
