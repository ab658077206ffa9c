"""int8 against float32 in one run: speed on the original shape, the error per vector, and a downstream probe.

    python benchmarks/int8_speed.py [--batch-sizes 32 128] [--threads 2] [--rounds 3] [--min-seconds 2]
        [--error-sentences 128] [--probe-train 400] [--probe-test 400] [--skip-probe] [--shape original]

1. Speed: the original shape (or ``--shape``; random weights at a trained model's scale, ``inference_speed.random_model``) on windows
   of real words (UD English-EWT test, ``--words`` per sentence), float32 and int8 (``compute_dtype="int8"``) timed
   alternately, ``--rounds`` times each, so that a load that comes and goes hits both. Prints words/s per setting
   (median of the rounds) and the int8 / float32 ratio (median of the per-round ratios), per batch size.
2. Error: per-vector cosine of int8 to float32 (median and minimum, every layer) over the first
   ``--error-sentences`` sentences of UD English-EWT test, for that shape and for the AllenNLP fixture
   converted from its real-format HDF5 (tests/fixtures/allennlp-elmo, trained weights).
3. Downstream: the layer probes of ``elmo-hf probe`` (UPOS, ``elmo_hf.probing``) with the shipped model, trained on
   the first ``--probe-train`` sentences of UD English-EWT dev and scored on the first ``--probe-test`` of test, in
   float32 and int8: accuracy per layer and of the mix, and the difference in points (the bar: within 0.3).

Prints one JSON object with the command; check ``load_average`` in it: other processes change the speed figures.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.nn import functional as F

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY_ROOT))

from benchmarks.inference_speed import SHAPES, cpu_description, random_model, time_calls, word_windows  # noqa: E402
from elmo_hf import DEFAULT_MODEL_DIR, ELMoConfig, ELMoModel, ELMoTokenizer  # noqa: E402
from elmo_hf.embedding.loading import placed_model  # noqa: E402

EWT = REPOSITORY_ROOT / "data" / "corpora" / "ud-english-ewt"
FIXTURE = REPOSITORY_ROOT / "tests" / "fixtures" / "allennlp-elmo"
SETTINGS = ("float32", "int8")


def int8_copy(model: ELMoModel) -> ELMoModel:
    """A second model with the same float32 weights, computing in int8."""
    return placed_model(copy.deepcopy(model), None, "int8")


def alternate_speed(models: dict[str, ELMoModel], batch_size: int, args) -> dict:
    """words/s of each setting, timed alternately ``args.rounds`` times on one batch of ``batch_size`` windows."""
    inputs = ELMoTokenizer()(word_windows(batch_size, args.words), is_split_into_words=True, padding=True, return_tensors="pt")
    words = batch_size * args.words
    rounds = {name: [] for name in models}
    with torch.inference_mode():
        for model in models.values():
            model(**inputs)  # warm-up: weights prepared (pre-packed, quantized), buffers allocated
        for _ in range(args.rounds):
            for name, model in models.items():
                seconds = statistics.median(time_calls(lambda: model(**inputs), torch.device("cpu"), args.min_seconds, warm_up=False))
                rounds[name].append(words / seconds)
    ratios = [int8 / float32 for int8, float32 in zip(rounds["int8"], rounds["float32"])]
    return {
        "batch_size": batch_size,
        "words_per_second": {name: round(statistics.median(values), 1) for name, values in rounds.items()},
        "words_per_second_per_round": {name: [round(value, 1) for value in values] for name, values in rounds.items()},
        "int8_over_float32": round(statistics.median(ratios), 3),
        "int8_over_float32_per_round": [round(ratio, 3) for ratio in ratios],
    }


def ewt_sentences(path: Path, count: int) -> list[list[str]]:
    """The first ``count`` sentences of a CoNLL-U file, as words (multi-word token lines and empty nodes skipped)."""
    sentences, words = [], []
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 10 and fields[0].isdigit():
                words.append(fields[1])
            elif not line.strip() and words:
                sentences.append(words)
                words = []
                if len(sentences) == count:
                    break
    return sentences


def layer_cosines(models: dict[str, ELMoModel], sentences: list[list[str]], batch_size: int = 32) -> list[dict]:
    """Per layer: median and minimum over every word of the per-vector cosine of int8 to float32."""
    tokenizer = ELMoTokenizer()
    per_layer: list[list[torch.Tensor]] = []
    with torch.inference_mode():
        for start in range(0, len(sentences), batch_size):
            inputs = tokenizer(sentences[start : start + batch_size], is_split_into_words=True, padding=True, return_tensors="pt")
            expected, actual = (models[name](**inputs) for name in SETTINGS)
            for layer, (first, second) in enumerate(zip(expected.hidden_states, actual.hidden_states)):
                if layer == len(per_layer):
                    per_layer.append([])
                per_layer[layer].append(F.cosine_similarity(second[expected.mask], first[expected.mask], dim=-1))
    return [
        {"layer": layer, "median_cosine": round(float(torch.cat(c).median()), 6), "min_cosine": round(float(torch.cat(c).min()), 6)}
        for layer, c in enumerate(per_layer)
    ]


def converted_fixture() -> ELMoModel:
    """The AllenNLP fixture's real-format weights, converted (needs h5py: the convert extra)."""
    from elmo_hf.conversion.convert_allennlp_to_hf import convert_allennlp_to_hf

    directory = Path(tempfile.mkdtemp(prefix="int8-speed-")) / "fixture"
    convert_allennlp_to_hf(FIXTURE / "options.json", FIXTURE / "lm_weights.hdf5", directory)
    return ELMoModel.from_pretrained(directory).eval()


def probe_difference(args) -> dict:
    """The UPOS layer probes of the shipped model, float32 and int8, and their accuracy difference in points."""
    from elmo_hf.probing.layer_probe import ProbeOptions, probe_layers
    from elmo_hf.probing.tagged_corpus import tagged_sentences

    train = tagged_sentences(EWT / "en_ewt-ud-dev.conllu", limit=args.probe_train)
    test = tagged_sentences(EWT / "en_ewt-ud-test.conllu", limit=args.probe_test)
    model = ELMoModel.from_pretrained(DEFAULT_MODEL_DIR).eval()
    reports = {}
    for name, setting in (("float32", model), ("int8", int8_copy(model))):
        report = probe_layers(setting, ELMoTokenizer(), train, test, ProbeOptions(seed=0))
        reports[name] = {**{layer["name"]: layer["accuracy"] for layer in report.layers}, "mix": report.mix["accuracy"]}
    points = {name: round(100 * (reports["int8"][name] - reports["float32"][name]), 3) for name in reports["float32"]}
    return {
        "model": "the shipped model (elmo_hf/default_model)",
        "train": f"{len(train.words)} sentences of en_ewt-ud-dev",
        "test": f"{len(test.words)} sentences of en_ewt-ud-test ({sum(map(len, test.words))} words)",
        "accuracy": reports,
        "int8_minus_float32_points": points,
        "largest_difference_points": max(abs(value) for value in points.values()),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[32, 128])
    parser.add_argument("--shape", default="original", choices=sorted(SHAPES), help="the released shape timed (default: original)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="alternations of float32 and int8 per batch size")
    parser.add_argument("--min-seconds", type=float, default=2.0, help="timed seconds per setting and round (at least 1 call)")
    parser.add_argument("--words", type=int, default=20, help="words per sentence of the speed batches")
    parser.add_argument("--error-sentences", type=int, default=128, help="UD English-EWT test sentences for the cosines")
    parser.add_argument("--probe-train", type=int, default=400, help="UD English-EWT dev sentences the probes train on")
    parser.add_argument("--probe-test", type=int, default=400, help="UD English-EWT test sentences the probes are scored on")
    parser.add_argument("--skip-probe", action="store_true", help="no downstream probe")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    report = {
        "command": " ".join(["python", "benchmarks/int8_speed.py", *(argv if argv is not None else sys.argv[1:])]),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": cpu_description(),
        "quantized_engine": torch.backends.quantized.engine,
        "load_average_before": os.getloadavg(),
    }
    started = time.perf_counter()
    float32_model = random_model(ELMoConfig(**SHAPES[args.shape]))
    models = {"float32": float32_model, "int8": int8_copy(float32_model)}
    report["shape"] = args.shape
    report["speed"] = [alternate_speed(models, batch_size, args) for batch_size in args.batch_sizes]
    sentences = ewt_sentences(EWT / "en_ewt-ud-test.conllu", args.error_sentences)
    report["error_sentences"] = f"the first {len(sentences)} sentences of en_ewt-ud-test ({sum(map(len, sentences))} words)"
    report["shape_cosines"] = layer_cosines(models, sentences)
    del models, float32_model
    fixture = converted_fixture()
    report["converted_fixture_cosines"] = layer_cosines({"float32": fixture, "int8": int8_copy(fixture)}, sentences)
    if not args.skip_probe:
        report["probe"] = probe_difference(args)
    report["load_average_after"] = os.getloadavg()
    report["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
