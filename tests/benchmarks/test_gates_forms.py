"""benchmarks/gates_forms.py: tiny runs of the whole script (no timing is asserted), and its form switches."""

import pytest

from benchmarks.gates_forms import (
    BOUNDARY_STEPS_FORMS,
    FIRST_LAYER_INPUTS_FORMS,
    GATES_FORMS,
    boundary_steps_in,
    first_layer_inputs_in,
    lstm_gates_in,
)
from elmo_hf import fast_recurrence_elmo

from ..helpers import random_model
from . import load_benchmark


def test_both_forms_run_alternately_on_the_same_batches(tmp_path, converted_fixture_dir, capsys):
    script = load_benchmark("gates_forms")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"sentence {index} of the bank , with words .\n" for index in range(30)), encoding="utf-8")
    report = script.main(
        ["--model", str(converted_fixture_dir), "--input", str(corpus), "--rounds", "1", "--batch-sizes", "0", "4", "--threads", "1"]
    )
    capsys.readouterr()
    assert report["default_form"] == GATES_FORMS[0]  # the fixture's layers are small
    assert [result["batch_size"] for result in report["results"]] == ["word budget 4096", 4]
    for result in report["results"]:
        assert all(len(result["words_per_second"][form]) == 1 for form in GATES_FORMS)
        assert result["ratio"]["of"] == "one matmul / two matmuls" and result["ratio"]["best"] > 0


@pytest.mark.parametrize("comparison, forms", [("boundary-steps", BOUNDARY_STEPS_FORMS), ("first-layer-inputs", FIRST_LAYER_INPUTS_FORMS)])
def test_each_comparison_runs_its_two_forms(tmp_path, converted_fixture_dir, capsys, comparison, forms):
    script = load_benchmark("gates_forms")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"sentence {index} of the bank .\n" for index in range(12)), encoding="utf-8")
    report = script.main(
        ["--compare", comparison, "--model", str(converted_fixture_dir), "--input", str(corpus), "--rounds", "1", "--batch-sizes", "4", "--threads", "1"]
    )
    capsys.readouterr()
    (result,) = report["results"]
    assert result["ratio"]["of"] == f"{forms[0]} / {forms[1]}"
    assert all(len(result["words_per_second"][form]) == 1 for form in forms)


def test_the_first_layer_inputs_switch_holds_inside_and_is_undone_after():
    with first_layer_inputs_in(random_model(), "every position"):
        assert fast_recurrence_elmo.DISTINCT_FIRST_LAYER_INPUTS_DEVICES == ()
    assert fast_recurrence_elmo.DISTINCT_FIRST_LAYER_INPUTS_DEVICES == ("cpu",)


def test_the_boundary_steps_switch_holds_inside_and_is_undone_after():
    model = random_model()
    with boundary_steps_in(model, "every step"):
        assert model.encoder.skip_boundary_steps is False
    assert model.encoder.skip_boundary_steps is True


@pytest.mark.parametrize("form", GATES_FORMS)
def test_the_form_switch_holds_inside_and_is_undone_after(form):
    model = random_model()
    default = model.encoder.prepared_fast_path_weights()
    if not default.pre_packed:
        pytest.skip("this torch build has no oneDNN pre-packing")
    with lstm_gates_in(model, form):
        prepared = model.encoder.prepared_fast_path_weights()
        assert all((layer.gates is not None) == (form == "one matmul") for layer in prepared.layers)
    assert model.encoder.fast_path_weights is None
    assert fast_recurrence_elmo.FUSED_GATES_MAX_INNER_SIZE == 256
