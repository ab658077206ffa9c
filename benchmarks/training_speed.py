"""Training steps of ELMoForPreTraining alone (no data pipeline, no Trainer): words/s, FLOPs per word, the fraction of
a matmul limit; on CUDA or the CPU (issue 30's scale plan).

    python benchmarks/training_speed.py [--device cuda] [--shapes original] [--batch-size 128] [--steps 20]
        [--vocabulary-size 793471] [--softmax-samples 8192] [--tf32] [--bfloat16]

One step is bilm-tf's: a batch of ``--batch-size`` rows x 20 positions in the windowed regime (the LSTM state of the
previous step carried in, detached), forward, sampled-softmax loss, backward, global gradient clipping, bilm-tf's
Adagrad (``pretraining.run.bilm_tf_adagrad``). The characters are random words of 3-10 letters; the labels random
word ids. words/s counts one prediction per direction per position; it is timed over ``--steps`` steps after
``--warmup-steps`` (CUDA synchronised before each clock read). FLOPs per word: torch's FlopCounterMode on one step
(forward + backward; the optimizer's element-wise work is not counted). The matmul limit is the rate of a
``--gemm-size``-cubed matmul in the same dtype and TF32 setting on the same device. Prints JSON.

Shapes: ``small`` (the preset), ``proportional`` (the original's ratios at a quarter of its width) and ``original``
(tests/fixtures/pretrained-options/elmo_2x4096_512_2048cnn_2xhighway_options.json), as in
``benchmarks/pretrain_side_by_side.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY_ROOT))
WINDOW = 20  # bilm-tf's unroll_steps

# Architectures (ELMoConfig fields, a preset name, or an options.json path under the repository).
SHAPES = {
    "tiny": "preset",
    "small": "preset",
    # The original's ratios (cell 8 x projection, CNN filters 4 x projection with the same widths, 2 highway layers)
    # at a quarter of its width.
    "proportional": dict(
        char_embedding_dim=16,
        char_cnn_filters=[[1, 8], [2, 8], [3, 16], [4, 32], [5, 64], [6, 128], [7, 256]],
        num_highway_layers=2,
        projection_dim=128,
        lstm_cell_size=1024,
        num_lstm_layers=2,
        cell_clip=3.0,
        projection_clip=3.0,
        use_skip_connections=True,
    ),
    "original": "tests/fixtures/pretrained-options/elmo_2x4096_512_2048cnn_2xhighway_options.json",
}


def shape_config(name: str):
    """The ``ELMoConfig`` of a shape (training fields at their defaults)."""
    from elmo_hf import ELMoConfig
    from elmo_hf.pretraining.options import CONFIG_PRESETS
    from elmo_hf.pretraining.run import load_pretraining_config

    spec = SHAPES[name]
    if spec == "preset":
        return ELMoConfig(**CONFIG_PRESETS[name])
    if isinstance(spec, str):
        return load_pretraining_config(REPOSITORY_ROOT / spec)
    return ELMoConfig(**spec)


def pretraining_model(config, vocabulary_size: int, softmax_samples: int, dropout: float, device: str = "cpu"):
    from elmo_hf.modeling_elmo_pretraining import ELMoForPreTraining

    config = type(config).from_dict(
        {**config.to_dict(), "word_vocab_size": vocabulary_size, "softmax_num_samples": softmax_samples, "lm_dropout": dropout}
    )
    return ELMoForPreTraining(config).to(device).train()


def random_batch(
    config, batch_size: int, vocabulary_size: int, device: str, seed: int = 0, word_lengths: tuple[int, int] = (3, 10)
) -> dict:
    """A windowed batch of random words (``word_lengths`` letters, between the begin- and end-of-word marks) and
    labels."""
    import torch

    from elmo_hf.characters_elmo import word_to_character_ids

    generator = torch.Generator().manual_seed(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"

    def characters() -> torch.Tensor:
        lengths = torch.randint(word_lengths[0], word_lengths[1] + 1, (batch_size * WINDOW,), generator=generator).tolist()
        indices = torch.randint(0, 26, (sum(lengths),), generator=generator).tolist()
        words, start = [], 0
        for length in lengths:
            words.append("".join(letters[index] for index in indices[start : start + length]))
            start += length
        ids = [word_to_character_ids(word, config.max_characters_per_token) for word in words]
        return torch.tensor(ids, dtype=torch.long).reshape(batch_size, WINDOW, -1)

    def labels() -> torch.Tensor:
        return torch.randint(0, vocabulary_size, (batch_size, WINDOW), generator=generator)

    batch = {
        "input_ids": characters(), "backward_input_ids": characters(), "next_word_labels": labels(),
        "previous_word_labels": labels(),
    }
    return {name: tensor.to(device) for name, tensor in batch.items()}


def training_step_flops(config, vocabulary_size: int, softmax_samples: int, batch_size: int = 2) -> dict:
    """FLOPs of one training step (forward + backward of the loss) per word, counted by torch's FlopCounterMode on
    ``batch_size`` rows x 20 random words on the CPU (matmuls and convolutions; per word the count does not depend on
    the batch, nor, with a sampled softmax, on the vocabulary size). Counted on the reference path: the model's
    arithmetic, not the training path's reorganisation of it (which skips repeated words and pads the CNN's rows to a
    few shapes, so its count would depend on the batch). ``flops_per_word``: words filling every character slot, the
    arithmetic bilm-tf always does (its CNN convolves all 50 slots); ``flops_per_word_3_to_10_letters``: words of 3-10
    letters with the character slots cut after the longest word's (elmo-hf's training cuts each word's own, and
    computes a repeated word once: it does at most this)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from elmo_hf.token_cache_elmo import needed_character_slots

    model = pretraining_model(config, vocabulary_size, softmax_samples, dropout=0.0)
    model.elmo.set_inference_path("reference")
    widest_filter = model.elmo.char_embeddings.widest_filter
    full_word = config.max_characters_per_token - 2
    report = {"parameters": sum(parameter.numel() for parameter in model.parameters())}

    def counted(work) -> int:
        counter = FlopCounterMode(display=False)
        with counter:
            work()
        model.zero_grad(set_to_none=True)
        return counter.get_total_flops()

    def token_layer_flops(rows: torch.Tensor) -> int:
        return counted(lambda: model.elmo.char_embeddings.reference_forward(rows).sum().backward())

    for name, lengths in (("flops_per_word", (full_word, full_word)), ("flops_per_word_3_to_10_letters", (3, 10))):
        batch = random_batch(config, batch_size, vocabulary_size, "cpu", word_lengths=lengths)
        total = counted(lambda: model(**batch).loss.backward())
        if name != "flops_per_word":  # the token layer's share on the slots the words need instead of all of them
            rows = torch.cat([batch["input_ids"], batch["backward_input_ids"]]).flatten(0, 1)
            slots = needed_character_slots(rows, widest_filter)
            total += token_layer_flops(rows[:, :slots]) - token_layer_flops(rows)
        report[name] = total / (batch_size * WINDOW)
    return report


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def matmul_limit(device: str, size: int, dtype_name: str = "float32", seconds: float = 2.0, threads: int | None = None) -> float:
    """GFLOP/s of a ``size``-cubed matmul (best of repeated runs) on ``device`` in ``dtype_name``, with ``threads``
    CPU threads (default: as set)."""
    import torch

    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        dtype = getattr(torch, dtype_name)
        a, b = (torch.randn(size, size, device=device).to(dtype) for _ in range(2))
        torch.mm(a, b)
        synchronize(device)
        best, deadline = float("inf"), time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            for _ in range(10 if device.startswith("cuda") else 1):
                torch.mm(a, b)
            synchronize(device)
            best = min(best, (time.perf_counter() - started) / (10 if device.startswith("cuda") else 1))
        return 2 * size**3 / best / 1e9
    finally:
        torch.set_num_threads(previous)


def time_training(
    config, device: str, batch_size: int, vocabulary_size: int, softmax_samples: int, steps: int, warmup_steps: int,
    bfloat16: bool,
) -> dict:
    """Seconds per step and words/s of bilm-tf's training step (see the module docstring)."""
    import torch

    from elmo_hf.pretraining.run import bilm_tf_adagrad

    torch.manual_seed(0)
    model = pretraining_model(config, vocabulary_size, softmax_samples, dropout=0.1, device=device)
    optimizer_class, optimizer_arguments = bilm_tf_adagrad(0.2, WINDOW)
    optimizer = optimizer_class(model.parameters(), **optimizer_arguments)
    batches = [random_batch(config, batch_size, vocabulary_size, device, seed) for seed in range(2)]
    autocast = torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16) if bfloat16 else contextlib.nullcontext()
    state = None

    def step(batch: dict) -> float:
        nonlocal state
        with autocast:
            output = model(**batch, lstm_state=state, return_lstm_state=True)
        state = tuple(tensor.detach() for tensor in output.lstm_state)
        output.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0 / WINDOW)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return output.loss.detach()

    for index in range(warmup_steps):
        step(batches[index % 2])
    synchronize(device)
    started = time.perf_counter()
    for index in range(steps):
        loss = step(batches[index % 2])
    synchronize(device)
    seconds = (time.perf_counter() - started) / steps
    report = {"seconds_per_step": seconds, "words_per_second": batch_size * WINDOW / seconds, "last_loss": float(loss)}
    if device.startswith("cuda"):
        report["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return report


def main(argv: list[str] | None = None) -> dict:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=["original"])
    parser.add_argument("--batch-size", type=int, default=128, help="rows per step (bilm-tf: 128 per GPU)")
    parser.add_argument("--vocabulary-size", type=int, default=793_471, help="the 1B Word Benchmark vocabulary")
    parser.add_argument("--softmax-samples", type=int, default=8192, help="bilm-tf's n_negative_samples_batch")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup-steps", type=int, default=3)
    parser.add_argument("--threads", type=int, help="CPU threads (torch.set_num_threads)")
    parser.add_argument("--tf32", action="store_true", help="allow TF32 matmuls and convolutions on CUDA")
    parser.add_argument("--bfloat16", action="store_true", help="autocast the forward pass to bfloat16")
    parser.add_argument("--gemm-size", type=int, default=8192)
    parser.add_argument("--no-flops", action="store_true", help="skip the FLOP count (it runs a step on the CPU)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    limit_dtype = "bfloat16" if args.bfloat16 else "float32"
    report: dict = {
        "device": torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu",
        "settings": {key: value for key, value in vars(args).items()},
        "matmul_gflops": matmul_limit(args.device, args.gemm_size, limit_dtype),
        "shapes": {},
    }
    for shape in args.shapes:
        config = shape_config(shape)
        entry = time_training(
            config, args.device, args.batch_size, args.vocabulary_size, args.softmax_samples, args.steps,
            args.warmup_steps, args.bfloat16,
        )
        if not args.no_flops:
            entry.update(training_step_flops(config, min(args.vocabulary_size, 2 * args.softmax_samples + 1), args.softmax_samples))
            entry["achieved_gflops"] = entry["words_per_second"] * entry["flops_per_word"] / 1e9
            entry["fraction_of_matmul_limit"] = entry["achieved_gflops"] / report["matmul_gflops"]
        report["shapes"][shape] = entry
        print(f"{shape}: {json.dumps(entry)}", file=sys.stderr, flush=True)
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
