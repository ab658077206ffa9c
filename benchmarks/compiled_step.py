"""Is an LSTM step of the fast path bound by per-operation overhead? One step eager vs the same step torch.compile'd.

    python benchmarks/compiled_step.py [--shape default original] [--rows 32 128 512] [--threads 2] [--device cpu]
        [--steps 400]

Issue 13's point 3 asks for a recurrence without per-step Python overhead, chosen by measurement among CUDA graphs,
a fused kernel, ``torch.compile`` or a compiled loop. This script measures the ceiling of fusing one step: the step
of ``fast_recurrence_elmo._run_layer`` (state matmul added to the precomputed gate inputs, the gates, the clipped cell, the
projected and clipped output) written as one function, run eagerly and through ``torch.compile`` (inductor,
``dynamic=True``: one compilation for every row count), on the layer shapes of the shipped default model (P 128,
D 512) or the original (P 512, D 4096). For each row count (sentences still running at that step) it reports
microseconds per step, ``speedup`` = eager / compiled, the first call's compile time, the max abs difference
(NaN-aware) and the step's FLOP rate. A speedup near 1 with a FLOP rate near the machine's matmul rate means the
step is compute-bound: fusing saves nothing there.

Prints one JSON object; check ``load_average``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from elmo_hf.validation_elmo import max_abs_difference  # noqa: E402

SHAPES = {"default": (128, 512), "original": (512, 4096)}  # (projection P, cell D)
CLIP = 3.0


def lstm_step(gate_inputs, previous, cell, state_to_gates, projection):
    """One step of one direction: (n, 4D) gate inputs, (n, P) previous output, (n, D) cell -> output, cell."""
    gates = torch.addmm(gate_inputs, previous, state_to_gates)  # (n, 4D)
    input_gate, forget_gate, candidate, output_gate = gates.chunk(4, dim=1)
    cell = (torch.sigmoid(forget_gate) * cell + torch.sigmoid(input_gate) * torch.tanh(candidate)).clamp(-CLIP, CLIP)
    output = (torch.tanh(cell) * torch.sigmoid(output_gate)) @ projection  # (n, P)
    return output.clamp(-CLIP, CLIP), cell


def seconds_per_step(step, arguments, steps: int, synchronize) -> float:
    for _ in range(10):
        step(*arguments)
    synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step(*arguments)
    synchronize()
    return (time.perf_counter() - start) / steps


def measure(shape: str, rows: int, steps: int, device: torch.device, compiled) -> dict:
    projection_dim, cell_size = SHAPES[shape]
    generator = torch.Generator().manual_seed(rows)
    weights = [
        torch.randn(projection_dim, 4 * cell_size, generator=generator) * 0.05,
        torch.randn(cell_size, projection_dim, generator=generator) * 0.05,
    ]
    state = [
        torch.randn(rows, 4 * cell_size, generator=generator),
        torch.randn(rows, projection_dim, generator=generator),
        torch.randn(rows, cell_size, generator=generator),
    ]
    arguments = [tensor.to(device) for tensor in (*state, *weights)]
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    start = time.perf_counter()
    compiled(*arguments)
    synchronize()
    first_call = time.perf_counter() - start
    expected, actual = lstm_step(*arguments), compiled(*arguments)
    difference = max(max_abs_difference(a, b) for a, b in zip(expected, actual))
    eager = seconds_per_step(lstm_step, arguments, steps, synchronize)
    fused = seconds_per_step(compiled, arguments, steps, synchronize)
    flop = 2 * rows * (projection_dim * 4 * cell_size + cell_size * projection_dim)
    return {
        "shape": shape, "rows": rows,
        "eager_us_per_step": round(eager * 1e6, 1), "compiled_us_per_step": round(fused * 1e6, 1),
        "speedup": round(eager / fused, 3), "first_call_seconds": round(first_call, 2),
        "max_abs_difference": difference if math.isfinite(difference) else str(difference),
        "eager_gflop_per_s": round(flop / eager / 1e9, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", nargs="+", choices=sorted(SHAPES), default=["default"])
    parser.add_argument("--rows", nargs="+", type=int, default=[32, 128, 512])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    compiled = torch.compile(lstm_step, dynamic=True)
    runs = [measure(shape, rows, args.steps, torch.device(args.device), compiled) for shape in args.shape for rows in args.rows]
    print(json.dumps({
        "torch": torch.__version__, "device": args.device, "threads": args.threads,
        "load_average": os.getloadavg()[0], "runs": runs,
    }, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
