"""How near its own matmuls does the fast path's biLM run? The LSTM alone against the same matmuls alone.

    python benchmarks/recurrence_limit.py [--shapes shipped original] [--batch-sizes 8 32 128] [--words 20]
        [--threads 1] [--rounds 3] [--min-seconds 1]

Issue 28's deliverable 4 measures the recurrence against its step-matmul limit. For each shape and batch size this
runs the biLM of the fast path (``ELMoEncoder.forward`` as ``ELMoModel`` calls it: boundary steps skipped, the first
step shared) on a batch of B windows of ``--words`` words plus the two boundaries (no padding), on token vectors
made once before the clock starts, and then the matmuls that run did, alone: the same prepared (pre-packed) weights,
the same row count at every step and direction, the same input projections, without the gate nonlinearities, the
cell update, the clips and the copies. ``fraction_of_own_matmuls`` = matmul-only seconds / biLM seconds: 1.0 would
be a recurrence that costs nothing beyond its matmuls. ``lstm_gflops`` is the biLM's matmul FLOP per second, and
``fraction_of_best_prepacked`` divides it by the best pre-packed matmul this run measured (the step shape of the
largest batch size, and the input projection's shape), the issue's second measure for the original shape.

The two measurements alternate, ``--rounds`` times; medians are reported. Prints one JSON object; check
``load_average`` in it (other processes change the figures). ``shipped`` is the model in the package (P 128, D
512: one matmul per step for the gates), ``original`` the released 2x4096_512 shape with random weights (an input
projection per block of steps and a recurrent matmul per step).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY_ROOT))

from benchmarks.inference_speed import flop_per_position, matmul_gflops, random_model, time_calls  # noqa: E402
from elmo_hf import DEFAULT_MODEL_DIR, ELMoConfig, ELMoModel  # noqa: E402
from elmo_hf.fast_recurrence_elmo import PackedBatch  # noqa: E402

CPU = torch.device("cpu")


def model_of(shape: str) -> ELMoModel:
    """The model of ``shape`` in eval mode on the fast path (its biLM weights pre-packed on first use): the shipped
    one, or the original shape with random weights at a trained model's scale."""
    model = ELMoModel.from_pretrained(DEFAULT_MODEL_DIR) if shape == "shipped" else random_model(ELMoConfig())
    model.eval().set_inference_path("fast")
    return model


def step_rows(lengths: torch.LongTensor, time_steps: int) -> list[int]:
    """Rows of each step as the fast path runs them: boundary steps skipped, the shared first step on one row."""
    rows = list(PackedBatch.build(lengths, time_steps, skip_final_step=True).step_rows)
    if rows and rows[0] > 1:
        rows[0] = 1
    return rows


def window_vectors(batch_size: int, time_steps: int, size: int) -> torch.Tensor:
    """Token vectors (B, T, size) of windows: every row starts with the same <S> and ends with the same </S> (so the
    first step is shared, as in a real batch), random words between."""
    vectors = torch.randn(batch_size, time_steps, size, generator=torch.Generator().manual_seed(1)) * 0.5
    vectors[:, 0], vectors[:, -1] = vectors[0, 0], vectors[0, -1]
    return vectors


def matmuls_alone(encoder, config: ELMoConfig, batch_size: int, time_steps: int) -> callable:
    """A function that runs the matmuls of one biLM call on these shapes, and nothing else."""
    weights = encoder.prepared_fast_path_weights()
    rows = step_rows(torch.full((batch_size,), time_steps), time_steps)
    projection, cell = config.projection_dim, config.lstm_cell_size
    step_inputs = torch.zeros(batch_size, 2 * projection)  # [x_t; h_{t-1}], the one-matmul form's input
    layer_inputs, hidden, cell_output = torch.zeros(sum(rows), projection), torch.zeros(batch_size, projection), torch.zeros(batch_size, cell)

    def run() -> None:
        for layer in weights.layers:
            for direction in range(2):
                if layer.gates is None:
                    layer.input_projection[direction](layer_inputs)
                for count in rows:
                    if layer.gates is not None:
                        layer.gates[direction](step_inputs[:count])
                    else:
                        layer.recurrent[direction](hidden[:count])
                    if layer.projection is not None:
                        layer.projection[direction](cell_output[:count])

    return run


def median_seconds(function, min_seconds: float) -> float:
    """Median seconds per call over at least ``min_seconds``, after one warm-up call."""
    return statistics.median(time_calls(function, CPU, min_seconds))


def measure(shape: str, batch_sizes: list[int], words: int, rounds: int, min_seconds: float) -> list[dict]:
    model = model_of(shape)
    encoder, config = model.encoder, model.config
    input_size = config.projection_dim
    time_steps = words + 2
    rows = []
    for batch_size in batch_sizes:
        token_embeddings = window_vectors(batch_size, time_steps, input_size)
        lengths = torch.full((batch_size,), time_steps)
        state = encoder.default_state(batch_size)
        bilm = lambda: encoder(token_embeddings, lengths, state, needs_final_step=False)  # noqa: E731
        matmuls = matmuls_alone(encoder, config, batch_size, time_steps)
        bilm_seconds, matmul_seconds = [], []
        with torch.inference_mode():
            for _ in range(rounds):
                bilm_seconds.append(median_seconds(bilm, min_seconds))
                matmul_seconds.append(median_seconds(matmuls, min_seconds))
        positions = sum(step_rows(lengths, time_steps))
        bilm_median, matmul_median = statistics.median(bilm_seconds), statistics.median(matmul_seconds)
        rows.append(
            {
                "shape": shape,
                "batch_size": batch_size,
                "words_per_second": round(batch_size * words / bilm_median, 1),
                "bilm_ms": round(bilm_median * 1e3, 3),
                "matmuls_alone_ms": round(matmul_median * 1e3, 3),
                "fraction_of_own_matmuls": round(matmul_median / bilm_median, 3),
                "fraction_per_round": [round(m / b, 3) for m, b in zip(matmul_seconds, bilm_seconds)],
                # positions per direction x the biLM's matmul FLOP per position of both directions, all layers
                "lstm_gflops": round(positions * flop_per_position(config)["bilstm"] / bilm_median / 1e9, 2),
            }
        )
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["shipped", "original"], choices=["shipped", "original"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[8, 32, 128])
    parser.add_argument("--words", type=int, default=20, help="words per window (plus the two boundaries)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-seconds", type=float, default=1.0, help="timed seconds per measurement")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = {
        "threads": args.threads,
        "torch": torch.__version__,
        "load_average": list(os.getloadavg()),
        "rows": [row for shape in args.shapes for row in measure(shape, args.batch_sizes, args.words, args.rounds, args.min_seconds)],
    }
    largest = max(args.batch_sizes)
    best = {
        f"step_{largest}x512x16384": matmul_gflops(largest, 512, 16384, torch.float32, CPU, args.min_seconds, pre_pack=True),
        "input_projection_1024x512x16384": matmul_gflops(1024, 512, 16384, torch.float32, CPU, args.min_seconds, pre_pack=True),
    }
    results["best_prepacked_gflops"] = {name: round(value, 1) for name, value in best.items()}
    for row in results["rows"]:
        row["fraction_of_best_prepacked"] = round(row["lstm_gflops"] / max(best.values()), 3)
    results["load_average_after"] = list(os.getloadavg())
    print(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
