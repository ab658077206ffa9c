"""Two forms of the fast path's recurrence, timed against each other in one process.

    python benchmarks/gates_forms.py [--compare gates|boundary-steps|first-layer-inputs] [--model DIR | --shape small|medium|original]
        [--input FILE] [--lines 4000] [--batch-sizes 0 32 8] [--rounds 4] [--threads 2]

``--compare gates`` (default), the CPU's two forms of an LSTM step's gates. "one matmul": each step's gates from one
pre-packed matmul over [x_t; h_{t-1}] with the sigmoid inside it; "two matmuls": a block of steps' input projections
in one matmul, then one recurrent matmul per step and the nonlinearities apart
(``elmo_hf.fast_recurrence_elmo.FUSED_GATES_MAX_INNER_SIZE`` picks one by the layer's size).

``--compare boundary-steps``: "skipped", the default (the first step all sentences share computed once, each
direction's last step, at a boundary the output drops, skipped), against "every step"
(``set_inference_path(..., skip_boundary_steps=False)``).

``--compare first-layer-inputs``: "distinct", the CPU default (the two-matmul form projects each distinct input vector
of the first layer once, ``fast_recurrence_elmo.DISTINCT_FIRST_LAYER_INPUTS_DEVICES``), against "every position". Only layers in
the two-matmul form differ: use ``--shape original`` or ``medium``.

For each batch size (0: the embedder's word budget for the device) the model alone runs on the embedder's batches of
the same lines (``embed_throughput.model_alone``), the two forms alternating round by round, so that a machine whose
speed drifts favours neither; a first round of each is not counted (oneDNN builds kernels for every new shape).
Prints one JSON object: words/s per form and round, and the best and median ratio first form / second.
``--shape`` builds random weights at a trained model's scale (``inference_speed.random_model``), with the shipped
model's tokenizer.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

import torch

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY_ROOT))

from benchmarks.embed_throughput import DEFAULT_INPUT, model_alone  # noqa: E402
from benchmarks.inference_speed import SHAPES, random_model  # noqa: E402
from elmo_hf import DEFAULT_MODEL_DIR, ELMoConfig, ELMoModel, ELMoTokenizer, fast_recurrence_elmo  # noqa: E402
from elmo_hf.embedding.embedder import ELMoEmbedder  # noqa: E402

# The two ways the pre-packed CPU fast path computes an LSTM step's gates.
GATES_FORMS = ("one matmul", "two matmuls")


@contextlib.contextmanager
def lstm_gates_in(model: ELMoModel, form: str) -> Iterator[None]:
    """Within the block, ``model``'s pre-packed fast path computes each step's gates in ``form`` (``GATES_FORMS``)
    whatever the layer size; the prepared weights are made again on entry and dropped on exit. Raises if the fast
    path ran pre-packed in the other form."""
    limit = {"one matmul": 10**9, "two matmuls": 0}[form]
    saved = fast_recurrence_elmo.FUSED_GATES_MAX_INNER_SIZE
    fast_recurrence_elmo.FUSED_GATES_MAX_INNER_SIZE = limit
    model.encoder.fast_path_weights = None  # prepared again under the limit
    try:
        yield
        prepared = model.encoder.fast_path_weights
        if prepared is not None and prepared.pre_packed:
            if any((layer.gates is not None) != (form == "one matmul") for layer in prepared.layers):
                raise AssertionError(f"the fast path did not run with its gates in {form}")
    finally:
        fast_recurrence_elmo.FUSED_GATES_MAX_INNER_SIZE = saved
        model.encoder.fast_path_weights = None


# The boundary steps' switch (ELMoModel.set_inference_path), its default first.
BOUNDARY_STEPS_FORMS = ("skipped", "every step")


@contextlib.contextmanager
def boundary_steps_in(model: ELMoModel, form: str) -> Iterator[None]:
    """Within the block, ``model``'s fast path skips the boundary steps or computes every step
    (``BOUNDARY_STEPS_FORMS``); the default afterwards."""
    model.set_inference_path("auto", skip_boundary_steps=form == BOUNDARY_STEPS_FORMS[0])
    try:
        yield
    finally:
        model.set_inference_path("auto")


# The first layer's input projection on CPU (fast_recurrence_elmo.DISTINCT_FIRST_LAYER_INPUTS_DEVICES), its default first.
FIRST_LAYER_INPUTS_FORMS = ("distinct", "every position")


@contextlib.contextmanager
def first_layer_inputs_in(model: ELMoModel, form: str) -> Iterator[None]:
    """Within the block, the two-matmul form projects the first layer's distinct input vectors once, or every
    position's (``FIRST_LAYER_INPUTS_FORMS``); the default afterwards. (The one-matmul form has no separate input
    projection: the same either way.)"""
    saved = fast_recurrence_elmo.DISTINCT_FIRST_LAYER_INPUTS_DEVICES
    fast_recurrence_elmo.DISTINCT_FIRST_LAYER_INPUTS_DEVICES = ("cpu", "cuda") if form == FIRST_LAYER_INPUTS_FORMS[0] else ()
    try:
        yield
    finally:
        fast_recurrence_elmo.DISTINCT_FIRST_LAYER_INPUTS_DEVICES = saved


# What --compare picks: the two forms, the first the one the ratios divide, and the switch into each.
COMPARISONS = {
    "gates": (GATES_FORMS, lstm_gates_in),
    "boundary-steps": (BOUNDARY_STEPS_FORMS, boundary_steps_in),
    "first-layer-inputs": (FIRST_LAYER_INPUTS_FORMS, first_layer_inputs_in),
}


def load_model(args: argparse.Namespace) -> tuple[ELMoModel, ELMoTokenizer]:
    tokenizer = ELMoTokenizer.from_pretrained(args.model or DEFAULT_MODEL_DIR)
    if args.shape:
        return random_model(ELMoConfig(**SHAPES[args.shape])), tokenizer
    return ELMoModel.from_pretrained(args.model or DEFAULT_MODEL_DIR), tokenizer


def compare(
    model: ELMoModel, tokenizer: ELMoTokenizer, texts: list[str], batch_size: int, rounds: int, comparison: str = "gates"
) -> dict:
    forms, form_switch = COMPARISONS[comparison]
    embedder = ELMoEmbedder(model, tokenizer, batch_size=batch_size or None)
    sentences = [embedder.words_of(text) for text in texts]
    words_per_second = {form: [] for form in forms}
    for round_index in range(-1, rounds):  # round -1 is not counted: oneDNN builds its kernels for each new shape
        for form in forms:
            with form_switch(model, form):
                result = model_alone(embedder, sentences, shard_size=1000, token_cache_words=50_000)
            if round_index >= 0:
                words_per_second[form].append(result["words_per_second"])
    first, second = (words_per_second[form] for form in forms)
    return {
        "batch_size": batch_size or f"word budget {embedder.max_words_per_batch}",
        "words_per_second": words_per_second,
        "ratio": {
            "of": f"{forms[0]} / {forms[1]}",
            "best": round(max(first) / max(second), 3),
            "median": round(statistics.median(first) / statistics.median(second), 3),
        },
    }


def run(args: argparse.Namespace) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args)
    with open(args.input, encoding="utf-8") as lines:
        texts = [line.rstrip("\n") for line in islice(lines, args.lines)]
    lstm = model.encoder.forward_layers[0]
    prepared = model.encoder.prepared_fast_path_weights()  # the form the fast path picks for this model, unswitched
    return {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "model": args.shape or str(args.model or DEFAULT_MODEL_DIR),
        "inner_size": lstm.input_to_gates.in_features + lstm.state_to_gates.in_features,
        "default_form": GATES_FORMS[0] if prepared.layers[0].gates is not None else GATES_FORMS[1],
        "input": f"{args.input} (first {len(texts):,} lines)",
        "compare": args.compare,
        "results": [compare(model, tokenizer, texts, batch_size, args.rounds, args.compare) for batch_size in args.batch_sizes],
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", choices=sorted(COMPARISONS), default="gates", help="which two forms (default gates)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--model", help="model directory (default: the shipped demo model)")
    source.add_argument("--shape", choices=sorted(SHAPES), help="random weights of a released shape")
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT, help="text file, one sentence per line")
    parser.add_argument("--lines", type=int, default=4000, help="first lines of --input (default 4000)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[0, 32], help="0: the word budget (default 0 32)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    report = run(parser.parse_args(argv))
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
