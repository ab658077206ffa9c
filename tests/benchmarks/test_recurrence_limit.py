"""benchmarks/recurrence_limit.py: its matmul-only replay makes the matmuls the biLM makes (same rows and widths at
every step), and a tiny run of the whole script reports what its docstring says. No timing is asserted."""

from collections import Counter

import pytest
import torch

from elmo_hf import ELMoConfig, fast_recurrence_elmo

from ..helpers import random_model
from . import load_benchmark


def matmul_calls(function) -> Counter:
    """(rows, inner size, output size) of every prepared matmul ``function`` runs."""
    calls = Counter()
    real_call, real_product = fast_recurrence_elmo.Matmul.__call__, fast_recurrence_elmo.Matmul._product

    def record(matmul, inputs):
        size = matmul.packed.shape[0] if matmul.packed is not None else matmul.weight.shape[0]
        calls[(inputs.shape[0], inputs.shape[1], size)] += 1

    def call(matmul, inputs):
        record(matmul, inputs)
        return real_call(matmul, inputs)

    def product(matmul, inputs):  # add_into's matmul (the two-matmul form's recurrent step)
        record(matmul, inputs)
        return real_product(matmul, inputs)

    fast_recurrence_elmo.Matmul.__call__, fast_recurrence_elmo.Matmul._product = call, product
    try:
        with torch.inference_mode():
            function()
    finally:
        fast_recurrence_elmo.Matmul.__call__, fast_recurrence_elmo.Matmul._product = real_call, real_product
    return calls


# One matmul per step for the gates (P_in + P <= FUSED_GATES_MAX_INNER_SIZE), and the two-matmul form above it.
CONFIGS = {
    "one-matmul": dict(projection_dim=64, lstm_cell_size=128),
    "two-matmul": dict(projection_dim=160, lstm_cell_size=192),
}


@pytest.mark.parametrize("form", sorted(CONFIGS))
def test_the_replay_makes_the_bilms_per_step_matmuls(form):
    script = load_benchmark("recurrence_limit")
    config = ELMoConfig(**CONFIGS[form], num_highway_layers=1, char_cnn_filters=[[1, 8], [2, 8]], num_characters=262)
    model = random_model(config)
    model.set_inference_path("fast")
    encoder = model.encoder
    assert (encoder.prepared_fast_path_weights().layers[0].gates is not None) == (form == "one-matmul")
    batch_size, time_steps = 6, 9
    token_embeddings = script.window_vectors(batch_size, time_steps, config.projection_dim)
    lengths = torch.full((batch_size,), time_steps)
    state = encoder.default_state(batch_size)
    bilm = matmul_calls(lambda: encoder(token_embeddings, lengths, state, needs_final_step=False))
    replay = matmul_calls(script.matmuls_alone(encoder, config, batch_size, time_steps))

    def per_step(calls):  # the input projections of blocks of steps are rounded up, gathered: compared by FLOP below
        return Counter({shape: count for shape, count in calls.items() if shape[0] <= batch_size})

    assert per_step(bilm) == per_step(replay) and sum(per_step(bilm).values()) > 0
    # Each layer and direction: a step per position but the skipped last one; the gates' (or the recurrent) matmul
    # and the output projection (P != D) at each.
    assert per_step(bilm).total() == 2 * config.num_lstm_layers * (time_steps - 1) * 2
    if form == "two-matmul":
        # The replay projects every row at once; the biLM each distinct first-layer input, in blocks rounded up to
        # 16 rows: the same matmul widths.
        rows = sum(script.step_rows(lengths, time_steps))
        widths = (config.projection_dim, 4 * config.lstm_cell_size)
        assert replay - per_step(replay) == Counter({(rows, *widths): 2 * config.num_lstm_layers})
        assert {shape[1:] for shape in bilm - per_step(bilm)} == {widths}


def test_the_script_reports_fractions_for_each_batch_size(capsys):
    script = load_benchmark("recurrence_limit")
    report = script.main(["--shapes", "shipped", "--batch-sizes", "2", "4", "--words", "3", "--rounds", "1", "--min-seconds", "0.01"])
    capsys.readouterr()
    assert report["threads"] == 1 and [row["batch_size"] for row in report["rows"]] == [2, 4]
    for row in report["rows"]:
        assert row["shape"] == "shipped" and len(row["fraction_per_round"]) == 1
        assert 0 < row["fraction_of_own_matmuls"] and 0 < row["fraction_of_best_prepacked"] and row["lstm_gflops"] > 0
