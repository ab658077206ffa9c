"""Inference speed of ELMo, measured against this machine's own matmul throughput in the same run.

    python benchmarks/inference_speed.py [--shapes small original] [--batch-sizes 1 8 32 128]
        [--dtypes float32 bfloat16] [--paths allennlp-style reference fast] [--threads 2] [--device cpu]
        [--words 20] [--min-seconds 2] [--profile] [--no-pre-pack]

For each model shape (random weights at a trained model's scale), path, dtype and batch size it runs batches of
real text (UD English-EWT test, cut into windows of ``--words`` words, so no padding) and reports words/s (boundary
positions not counted as words) and the milliseconds per batch (for batch size 1: single-sentence latency).

Paths: ``reference`` is modeling_elmo.py's per-step loop (the definition), ``fast`` is the fast route
(elmo_hf/token_cache_elmo.py and fast_recurrence_elmo.py), and ``allennlp-style`` is a re-implementation, written
for this benchmark, of the loop of AllenNLP's ``_ElmoBiLm`` (sort by length, per direction and per step: input
projection, state projection, cell, with the full-batch state cloned every step; character CNN over all 50 slots),
the popular PyTorch ELMo, which cannot be installed next to torch 2.

The same run measures the matmul throughput (``F.linear``) of shapes the model uses: the input projection of a whole
batch ((1024 x 512) @ (512 x 16384)), the highway ((1024 x 2048) @ (2048 x 2048)), a square 2048 matmul, and the LSTM
step (B x 512) @ (512 x 16384) for each batch size (plain, and pre-packed for oneDNN as the fast path does). The
``limit`` of a dtype is the best of the three large shapes. ``fraction_of_limit`` = words/s x FLOP per word / the limit
of the dtype the path ran in, with FLOP per word from ``flop_per_position`` (the nominal count: all 50 character slots, every word through
the CNN; the fast path does less token-layer work, the two boundary positions per sentence are extra work not counted).
``utilization`` = FLOP the path really executed (``executed_flop``) per second / the limit of the dtype it ran in.

Prints one JSON object. Check ``load_average`` in it: other processes on the machine change the figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.nn import functional as F

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY_ROOT))

from elmo_hf import ELMoConfig, ELMoModel, ELMoTokenizer, fast_recurrence_elmo, token_cache_elmo  # noqa: E402
from elmo_hf.modeling_elmo import FORGET_GATE_BIAS, add_sentence_boundaries  # noqa: E402

CORPUS = REPOSITORY_ROOT / "data" / "corpora" / "ud-english-ewt" / "en_ewt-ud-test.conllu"

SHAPES = {
    # elmo_2x1024_128_2048cnn_1xhighway (13.6M parameters)
    "small": dict(projection_dim=128, lstm_cell_size=1024, num_highway_layers=1),
    # elmo_2x2048_256_2048cnn_1xhighway (28.0M parameters)
    "medium": dict(projection_dim=256, lstm_cell_size=2048, num_highway_layers=1),
    # elmo_2x4096_512_2048cnn_2xhighway (93.6M parameters), ELMoConfig's defaults
    "original": dict(),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


# ----------------------------------------------------------------------------------------------------------------------
# FLOP count
# ----------------------------------------------------------------------------------------------------------------------


def flop_per_position(config: ELMoConfig, num_slots: int | None = None) -> dict[str, int]:
    """Multiply-add FLOP (2 per multiply-add) of the matmuls and convolutions for one position of one sentence.

    Elementwise work (gates, highway mixing, max-pool) is not counted. With the original shape: char CNN 17.6M,
    highway 33.6M, token projection 2.1M, biLSTM 151.0M, total 204.3M: the issue's "about 204 MFLOP per word".
    """
    num_slots = num_slots or config.max_characters_per_token
    filters_total = config.char_cnn_output_dim
    char_cnn = sum(
        2 * (num_slots - width + 1) * width * config.char_embedding_dim * count for width, count in config.char_cnn_filters
    )
    highway = config.num_highway_layers * 2 * (2 * filters_total * filters_total)
    token_projection = 2 * filters_total * config.projection_dim if filters_total != config.projection_dim else 0
    projection, cell = config.projection_dim, config.lstm_cell_size
    per_direction = 2 * projection * 4 * cell + 2 * projection * 4 * cell  # input and recurrent matmuls
    if projection < cell:
        per_direction += 2 * cell * projection  # output projection
    lstm = config.num_lstm_layers * 2 * per_direction
    return {
        "char_cnn": char_cnn,
        "highway": highway,
        "token_projection": token_projection,
        "bilstm": lstm,
        "total": char_cnn + highway + token_projection + lstm,
    }


def executed_flop(config: ELMoConfig, path: str, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> int:
    """FLOP a path really computes for one batch (same counting as ``flop_per_position``): the reference path and
    the AllenNLP-style loop run the token layer on every padded position over 50 slots, the fast path on each distinct
    word once over the trimmed slots; the LSTMs of the fast path and of the AllenNLP-style loop skip padding."""
    character_ids, position_mask = add_sentence_boundaries(input_ids, attention_mask.bool())
    nominal = flop_per_position(config)
    token_layer = ("char_cnn", "highway", "token_projection")
    real_positions, padded_positions = int(position_mask.sum()), position_mask.numel()
    lstm = nominal["bilstm"] * (padded_positions if path == "reference" else real_positions)
    if path != "fast":
        return lstm + padded_positions * sum(nominal[part] for part in token_layer)
    words = torch.unique(character_ids.reshape(-1, character_ids.shape[-1]), dim=0)
    widest_filter = max(width for width, _ in config.char_cnn_filters)
    trimmed = flop_per_position(config, num_slots=token_cache_elmo.needed_character_slots(words, widest_filter))
    return lstm + words.shape[0] * sum(trimmed[part] for part in token_layer)


# ----------------------------------------------------------------------------------------------------------------------
# Models and data
# ----------------------------------------------------------------------------------------------------------------------


def random_model(config: ELMoConfig, seed: int = 0) -> ELMoModel:
    """Random weights at a trained model's scale (std x sqrt(fan_in) = 1, char embedding std 0.5, biases 0.1)."""
    model = ELMoModel(config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.startswith("scalar_mixes"):
                continue
            if name.endswith("embedding.weight"):
                std = 0.5
            elif parameter.dim() == 1:
                std = 0.1
            else:
                std = 1.0 / math.sqrt(parameter[0].numel())
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)
        model.char_embeddings.embedding.weight[0].zero_()
    return model.eval()


def word_windows(num_sentences: int, words_per_sentence: int) -> list[list[str]]:
    """Consecutive windows of real words (UD English-EWT test), or synthetic words when the corpus is missing."""
    if CORPUS.exists():
        words = [line.split("\t")[1] for line in CORPUS.read_text(encoding="utf-8").splitlines() if line[:1].isdigit()]
    else:
        words = [f"word{index % 997}" for index in range(num_sentences * words_per_sentence)]
    needed = num_sentences * words_per_sentence
    words = (words * (needed // len(words) + 1))[:needed]
    return [words[index : index + words_per_sentence] for index in range(0, needed, words_per_sentence)]


# ----------------------------------------------------------------------------------------------------------------------
# The AllenNLP-style baseline (benchmark only)
# ----------------------------------------------------------------------------------------------------------------------


def allennlp_style_layer(layer, inputs: torch.Tensor, lengths: list[int], go_forward: bool) -> torch.Tensor:
    """One direction of one layer the way AllenNLP's LstmCellWithProjection runs it: rows sorted longest first,
    backward read from the end of the padded tensor, per-step input and state projections, full-batch state cloned
    and updated every step. (B, T, P_in) -> (B, T, P)."""
    batch_size, total_steps, _ = inputs.shape
    cell_size = layer.cell_size
    outputs = inputs.new_zeros(batch_size, total_steps, layer.output_size)
    full_memory = inputs.new_zeros(batch_size, cell_size)
    full_state = inputs.new_zeros(batch_size, layer.output_size)
    state_bias = layer.input_to_gates.bias.clone()
    state_bias[cell_size : 2 * cell_size] += FORGET_GATE_BIAS
    current = batch_size - 1 if go_forward else 0
    for step in range(total_steps):
        index = step if go_forward else total_steps - step - 1
        if go_forward:
            while lengths[current] <= index:
                current -= 1
        else:
            while current < len(lengths) - 1 and lengths[current + 1] > index:
                current += 1
        previous_memory = full_memory[: current + 1].clone()
        previous_state = full_state[: current + 1].clone()
        projected_input = F.linear(inputs[: current + 1, index], layer.input_to_gates.weight)
        projected_state = F.linear(previous_state, layer.state_to_gates.weight, state_bias)
        gates = projected_input + projected_state
        input_gate = torch.sigmoid(gates[:, :cell_size])
        forget_gate = torch.sigmoid(gates[:, cell_size : 2 * cell_size])
        memory_init = torch.tanh(gates[:, 2 * cell_size : 3 * cell_size])
        output_gate = torch.sigmoid(gates[:, 3 * cell_size :])
        memory = input_gate * memory_init + forget_gate * previous_memory
        if layer.cell_clip is not None:
            memory = torch.clamp(memory, -layer.cell_clip, layer.cell_clip)
        timestep_output = output_gate * torch.tanh(memory)
        if layer.state_projection is not None:
            timestep_output = layer.state_projection(timestep_output)
        if layer.projection_clip is not None:
            timestep_output = torch.clamp(timestep_output, -layer.projection_clip, layer.projection_clip)
        full_memory = full_memory.clone()
        full_state = full_state.clone()
        full_memory[: current + 1] = memory
        full_state[: current + 1] = timestep_output
        outputs[: current + 1, index] = timestep_output
    return outputs


def allennlp_style_forward(model: ELMoModel, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[torch.Tensor]:
    """Token layer over all 50 slots, boundaries, sort by length, both stacks per layer, unsort. Returns the L + 1
    layers (B, T + 2, 2P) with boundaries, like AllenNLP's ``_ElmoBiLm`` (zero initial state)."""
    character_ids, position_mask = add_sentence_boundaries(input_ids, attention_mask.bool())
    token_embeddings = model.char_embeddings.reference_forward(character_ids) * position_mask.unsqueeze(-1)
    lengths = position_mask.sum(dim=1)
    sorted_lengths, order = torch.sort(lengths, descending=True)
    restore = torch.argsort(order)
    lengths_list = sorted_lengths.tolist()
    forward_input = backward_input = token_embeddings[order]
    layers = [torch.cat([token_embeddings, token_embeddings], dim=-1)]
    encoder = model.encoder
    for index, (forward_layer, backward_layer) in enumerate(zip(encoder.forward_layers, encoder.backward_layers)):
        forward_output = allennlp_style_layer(forward_layer, forward_input, lengths_list, go_forward=True)
        backward_output = allennlp_style_layer(backward_layer, backward_input, lengths_list, go_forward=False)
        if encoder.use_skip_connections and index > 0:
            forward_output = forward_output + forward_input
            backward_output = backward_output + backward_input
        layers.append(torch.cat([forward_output, backward_output], dim=-1)[restore])
        forward_input, backward_input = forward_output, backward_output
    return layers


# ----------------------------------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------------------------------


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(function, device: torch.device, min_seconds: float, min_calls: int = 1, warm_up: bool = True) -> list[float]:
    """Seconds per call: a warm-up call (first-call costs: weight pre-packing, allocations), then calls until both
    ``min_calls`` and ``min_seconds`` are reached."""
    if warm_up:
        function()
        synchronize(device)
    times, started = [], time.perf_counter()
    while len(times) < min_calls or time.perf_counter() - started < min_seconds:
        begin = time.perf_counter()
        function()
        synchronize(device)
        times.append(time.perf_counter() - begin)
    return times


def matmul_gflops(rows: int, inner: int, columns: int, dtype: torch.dtype, device: torch.device, min_seconds: float, pre_pack: bool = False) -> float:
    """GFLOP/s of ``F.linear`` (rows x inner) @ (inner x columns), or of the fast path's pre-packed oneDNN matmul."""
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(rows, inner, generator=generator).to(device=device, dtype=dtype)
    weight = (torch.randn(columns, inner, generator=generator) / math.sqrt(inner)).to(device=device, dtype=dtype)
    if pre_pack:
        matmul = fast_recurrence_elmo.Matmul(weight, None, pre_pack=True)
        function = lambda: matmul(inputs)  # noqa: E731
    else:
        function = lambda: F.linear(inputs, weight)  # noqa: E731
    with torch.inference_mode():
        seconds = statistics.median(time_calls(function, device, min_seconds, min_calls=3))
    return 2 * rows * inner * columns / seconds / 1e9


def measure_matmuls(dtypes: list[str], batch_sizes: list[int], device: torch.device, min_seconds: float) -> dict:
    results = {}
    for dtype_name in dtypes:
        dtype = DTYPES[dtype_name]
        large = {
            "input_projection_1024x512x16384": matmul_gflops(1024, 512, 16384, dtype, device, min_seconds),
            "highway_1024x2048x2048": matmul_gflops(1024, 2048, 2048, dtype, device, min_seconds),
            "square_2048": matmul_gflops(2048, 2048, 2048, dtype, device, min_seconds),
        }
        steps = {f"lstm_step_{size}x512x16384": matmul_gflops(size, 512, 16384, dtype, device, min_seconds) for size in batch_sizes}
        if device.type == "cpu" and dtype == torch.float32 and fast_recurrence_elmo.onednn_available():
            steps.update(
                {
                    f"lstm_step_{size}x512x16384_prepacked": matmul_gflops(size, 512, 16384, dtype, device, min_seconds, pre_pack=True)
                    for size in batch_sizes
                }
            )
        results[dtype_name] = {"limit_gflops": max(large.values()), "large_gflops": large, "step_gflops": steps}
    return results


def profile_fast_path(model: ELMoModel, inputs: dict, batch_size: int) -> dict[str, float]:
    """Share of the fast path's CPU time (torch.profiler, self time) per part of the computation. Matmuls are told
    apart by their input shape: rows <= batch size are per-step matmuls, (rows, D) inputs the output projection."""
    from torch.profiler import ProfilerActivity, profile

    cell_size = model.config.lstm_cell_size
    matmul_ops = ("mkldnn::_linear_pointwise", "aten::mm", "aten::addmm", "aten::addmm_")
    elementwise = {
        "gate_nonlinearities (sigmoid, tanh)": ("aten::sigmoid_", "aten::tanh_", "aten::tanh", "aten::sigmoid"),
        "cell_update_clipping_adds (mul, addcmul, clamp, add)": ("aten::mul_", "aten::addcmul_", "aten::clamp_", "aten::add_"),
        "char_cnn (convolution, max-pool)": ("aten::mkldnn_convolution", "aten::max"),
        "packing_copies_dedup (copy, index, unique)": (
            "aten::copy_", "aten::index_select", "aten::index_copy_", "aten::unique_dim", "aten::index", "aten::cat", "aten::stack",
        ),
    }
    with torch.inference_mode():
        model(**inputs)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiler:
            model(**inputs)
    shares: dict[str, float] = {}
    total = 0.0
    for event in profiler.key_averages(group_by_input_shape=True):
        total += event.self_cpu_time_total
        if event.key in matmul_ops:
            shape = next((s for s in event.input_shapes if len(s) == 2), [0, 0])
            if shape[1] == cell_size:
                part = "lstm_output_projection_per_step"
            elif shape[0] <= batch_size:
                part = "lstm_recurrent_matmul_per_step"
            else:
                part = "input_projections_highway_token_projection"
        else:
            part = next((name for name, ops in elementwise.items() if event.key in ops), "other")
        shares[part] = shares.get(part, 0.0) + event.self_cpu_time_total
    return {name: round(time_spent / total, 3) for name, time_spent in sorted(shares.items(), key=lambda item: -item[1])}


def benchmark_shape(shape: str, args, device: torch.device, limits: dict) -> dict:
    config = ELMoConfig(**SHAPES[shape])
    flops = flop_per_position(config)
    tokenizer = ELMoTokenizer()
    float32_model = random_model(config).to(device)
    models = {name: float32_model if name == "float32" else random_model(config).to(device, DTYPES[name]) for name in args.dtypes}
    rows, equality = [], {}
    for dtype_name, model in models.items():
        for path in args.paths:
            if path != "fast" and dtype_name != "float32":
                continue  # the reference and the AllenNLP-style loop are float32 baselines
            for batch_size in args.batch_sizes:
                inputs = tokenizer(word_windows(batch_size, args.words), is_split_into_words=True, padding=True, return_tensors="pt")
                inputs = {key: value.to(device) for key, value in inputs.items()}
                if path == "allennlp-style":
                    function = lambda: allennlp_style_forward(model, inputs["input_ids"], inputs["attention_mask"])  # noqa: E731
                else:
                    model.set_inference_path(path, pre_pack=not args.no_pre_pack)
                    function = lambda: model(**inputs)  # noqa: E731
                # Batch sizes run in increasing order: the previous batch size warmed this model and path up.
                with torch.inference_mode():
                    seconds = statistics.median(
                        time_calls(function, device, args.min_seconds, warm_up=batch_size == args.batch_sizes[0])
                    )
                words_per_second = batch_size * args.words / seconds
                executed = executed_flop(config, path, inputs["input_ids"].cpu(), inputs["attention_mask"].cpu())
                rows.append(
                    {
                        "path": path,
                        "dtype": dtype_name,
                        "batch_size": batch_size,
                        "words_per_second": round(words_per_second, 1),
                        "ms_per_batch": round(seconds * 1e3, 2),
                        # Against the limit of the dtype it ran in: dividing bfloat16 work by the float32 limit
                        # gave "fractions" above 2 on a GPU.
                        "fraction_of_limit": round(words_per_second * flops["total"] / (limits[dtype_name]["limit_gflops"] * 1e9), 3),
                        "executed_gflop_per_batch": round(executed / 1e9, 2),
                        "utilization": round(executed / seconds / (limits[dtype_name]["limit_gflops"] * 1e9), 3),
                    }
                )
                print(json.dumps({"shape": shape, **rows[-1]}), file=sys.stderr, flush=True)
        model.set_inference_path("auto")
    # How far the paths are from each other on one batch (float32; low precision: per-word cosine to float32).
    inputs = tokenizer(word_windows(8, args.words), is_split_into_words=True, padding=True, return_tensors="pt")
    inputs = {key: value.to(device) for key, value in inputs.items()}
    with torch.inference_mode():
        float32_model.set_inference_path("reference")
        reference = float32_model(**inputs, keep_sentence_boundaries=True).hidden_states
        float32_model.set_inference_path("fast", pre_pack=not args.no_pre_pack)
        fast = float32_model(**inputs, keep_sentence_boundaries=True).hidden_states
        float32_model.set_inference_path("auto")
        equality["fast_vs_reference_max_abs_diff"] = max(float((a - b).abs().max()) for a, b in zip(reference, fast))
        if "allennlp-style" in args.paths:
            baseline = allennlp_style_forward(float32_model, inputs["input_ids"], inputs["attention_mask"])
            equality["allennlp_style_vs_reference_max_abs_diff"] = max(float((a - b).abs().max()) for a, b in zip(reference, baseline))
        for dtype_name, model in models.items():
            if dtype_name != "float32":
                low = model(**inputs, keep_sentence_boundaries=True)
                mask = low.mask
                cosines = torch.cat(
                    [F.cosine_similarity(a[mask].float(), b[mask], dim=-1) for a, b in zip(low.hidden_states, reference)]
                )
                equality[f"{dtype_name}_min_cosine_per_word"] = round(float(cosines.min()), 6)
    result = {"flop_per_position": flops, "results": rows, "equality": equality}
    if args.profile and "fast" in args.paths and device.type == "cpu":
        batch_size = 32 if 32 in args.batch_sizes else args.batch_sizes[-1]
        inputs = tokenizer(word_windows(batch_size, args.words), is_split_into_words=True, padding=True, return_tensors="pt")
        result[f"fast_float32_profile_batch_{batch_size}"] = profile_fast_path(
            float32_model, {k: v.to(device) for k, v in inputs.items()}, batch_size
        )
    return result


def cpu_description() -> dict:
    description = {"processor": platform.processor() or platform.machine()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                description["model_name"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    capability = getattr(torch.backends.cpu, "get_cpu_capability", lambda: None)()
    description["torch_cpu_capability"] = capability
    for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        check = getattr(torch.cpu, name, None)
        if check is not None:
            description[name.strip("_").replace("is_", "")] = bool(check())
    return description


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["small", "original"], choices=sorted(SHAPES))
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8, 32, 128], help="in increasing order")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=sorted(DTYPES))
    parser.add_argument("--paths", nargs="+", default=["allennlp-style", "reference", "fast"], choices=["allennlp-style", "reference", "fast"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--words", type=int, default=20, help="words per sentence (plus the two boundaries)")
    parser.add_argument("--min-seconds", type=float, default=3.0, help="timed seconds per measurement (at least 1 call)")
    parser.add_argument("--profile", action="store_true", help="profile the float32 fast path at batch 32 (CPU only)")
    parser.add_argument("--no-pre-pack", action="store_true", help="plain matmuls in the fast path (no oneDNN pre-packing)")
    args = parser.parse_args(argv)
    args.batch_sizes = sorted(args.batch_sizes)

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    report = {
        "command": " ".join(["python", "benchmarks/inference_speed.py", *(argv if argv is not None else sys.argv[1:])]),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_description(),
        "pre_pack": not args.no_pre_pack,
        "words_per_sentence": args.words,
        "load_average_before": os.getloadavg(),
    }
    started = time.perf_counter()
    report["matmul"] = measure_matmuls(args.dtypes, args.batch_sizes, device, min_seconds=min(args.min_seconds, 1.0))
    report["shapes"] = {shape: benchmark_shape(shape, args, device, report["matmul"]) for shape in args.shapes}
    report["load_average_after"] = os.getloadavg()
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
