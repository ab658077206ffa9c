"""benchmarks/compiled_step.py: the step it times is the fast path's arithmetic, and a tiny run of the script."""

import json

import pytest
import torch

from . import load_benchmark


@pytest.fixture(scope="module")
def step_script():
    return load_benchmark("compiled_step")


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")  # torch's own, harmless
def test_the_timed_step_is_an_lstm_step_with_clips(step_script):
    """Against torch's projected LSTM (gate order i, f, g, o; output W_hr (o * tanh c)) for one step from a given
    state, in a range where the clips do nothing; then the clips bound cell and output."""
    torch.manual_seed(0)
    rows, projection_dim, cell_size = 3, 4, 6
    lstm = torch.nn.LSTM(1, cell_size, proj_size=projection_dim, bias=False)
    previous, cell = torch.randn(rows, projection_dim), torch.randn(rows, cell_size)
    gate_inputs = torch.zeros(rows, 4 * cell_size)  # the input's share, zero here as the LSTM gets a zero input
    output, new_cell = step_script.lstm_step(
        gate_inputs, previous, cell, lstm.weight_hh_l0.T.contiguous(), lstm.weight_hr_l0.T.contiguous()
    )
    with torch.no_grad():
        expected_output, (_, expected_cell) = lstm(torch.zeros(1, rows, 1), (previous[None], cell[None]))
    torch.testing.assert_close(new_cell, expected_cell[0])
    torch.testing.assert_close(output, expected_output[0])
    large_output, large_cell = step_script.lstm_step(
        gate_inputs + 100, previous, cell * 100, lstm.weight_hh_l0.T.contiguous() * 100, lstm.weight_hr_l0.T.contiguous() * 100
    )
    assert large_cell.abs().max() == step_script.CLIP and large_output.abs().max() <= step_script.CLIP


@pytest.mark.slow  # torch.compile needs a C++ compiler and seconds to compile
def test_the_script_runs_and_reports_json(step_script, capsys):
    assert step_script.main(["--rows", "4", "--steps", "3", "--threads", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    (run,) = report["runs"]
    assert run["rows"] == 4 and run["max_abs_difference"] < 1e-5 and run["speedup"] > 0
