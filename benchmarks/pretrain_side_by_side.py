"""elmo-hf's pre-training against bilm-tf's own ``bilm.training.train``, side by side on this CPU (issue 30).

    python benchmarks/pretrain_side_by_side.py --bilm-python /tmp/tfenv/bin/python [--quick]
        [--shapes small proportional] [--threads 2] [--rounds 2] [--steps 120] [--warmup-steps 10]

The bilm-tf environment (TensorFlow is no dependency of elmo-hf; see scripts/make_tf_checkpoint_fixture.py):

    python -m venv /tmp/tfenv
    /tmp/tfenv/bin/pip install tensorflow-cpu==2.21.0 tf-keras==2.21.0 h5py bilm==0.1.post5

**Same inputs.** tinyshakespeare (non-empty lines, split on whitespace as bilm-tf splits its training files), a
seeded 5% of the lines held out; both files are written once and read by both implementations. The vocabulary
(``ELMoWordVocabulary.from_sentences`` on the training file, ``min_count`` 2) is written as ``vocab.txt`` and given
to bilm-tf; elmo-hf's run builds its own from the same file, checked identical. Same options: each shape's
``options.json`` (``ELMoConfig.to_options_dict``) plus bilm-tf's training keys; batch ``--batch-size`` rows x 20
(unroll / window) positions, the windowed regime (state carried from batch to batch), sampled softmax with
``--softmax-samples`` negatives, dropout 0.1, bilm-tf's Adagrad (lr 0.2, initial accumulator 1.0 on its
window-summed loss, global clip 10: elmo-hf's ``adagrad``, with ``--max-grad-norm 10 / 20``, see
``run.bilm_tf_adagrad``) and a constant rate; ``--steps`` optimizer steps each, so the same number of training words.

**Threads.** TensorFlow: ``intra_op_parallelism_threads = N``, ``inter_op_parallelism_threads = 1`` (bilm-tf's
``ConfigProto`` patched); torch: ``set_num_threads(N)``, ``set_num_interop_threads(1)``. Each run is its own process.

**Interleaved.** ``--rounds`` rounds of (bilm-tf, elmo-hf) per shape and thread count, so a machine busy with other
work slows both alike; the ratio is the median of the per-round ratios.

**Steady-state words/s.** Each implementation records the time at which each training step starts (bilm-tf: when
``train()`` asks its data for the next batch; elmo-hf: when ``Trainer`` calls ``compute_loss``). words/s is
``(k - 1) * batch * 20 / (t[last] - t[warmup])`` over the steps after ``--warmup-steps``: no imports, graph building,
variable initialisation, first (slow) steps, checkpoint saving or evaluation. A word = one prediction per direction.

**Held-out perplexity after the same words.** Three figures, all full softmax, no dropout, the LSTM state carried
through the held-out stream, exp of the mean of the two directions' mean NLL:

- ``elmo-hf``: the pre-training report's ``held_out["perplexity"]`` (every held-out prediction exactly once).
- ``bilm-tf (elmo-hf's evaluation)``: bilm-tf's checkpoint read by ``load_tf_checkpoint`` and evaluated by the same
  code as the report (``held_out_perplexity`` below, checked to reproduce the report's figure on elmo-hf's own model):
  the same quantity on the same predictions: this is the pair the 5% target compares.
- ``bilm-tf (its test())``: ``bilm.training.test`` (bin/run_test.py) with ``--batch-size`` rows: the same formula,
  but it drops the last incomplete batch (its rows stop when the first row runs out of sentences), so it scores a
  subset of the predictions.

**FLOPs.** ``torch.utils.flop_counter`` counts one training step (forward + backward of the loss; the optimizer's
element-wise work is not counted) of each shape; per word it is the same model arithmetic in both implementations.
The matmul limit is a large float32 matmul (``--gemm-size``) at 1 and 2 threads; the fraction of the limit is
words/s x FLOPs/word / that rate. ``--json-out`` writes everything; the figures are printed as they come.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
CORPUS = REPOSITORY_ROOT / "data" / "corpora" / "tinyshakespeare.txt"
WINDOW = 20  # bilm-tf's unroll_steps
DROPOUT = 0.1
LEARNING_RATE = 0.2  # bilm-tf's Adagrad
CLIP_NORM = 10.0  # bilm-tf's all_clip_norm_val, on its window-summed loss
MIN_COUNT = 2
HELD_OUT_FRACTION = 0.05

# Shapes (`small`, `proportional`, `original`) and the FLOP count: benchmarks/training_speed.py.
TRAINED_SHAPES = ("small", "proportional")
ORIGINAL_SOFTMAX_SAMPLES = 8192  # bilm-tf's n_negative_samples_batch


# ----------------------------------------------------------------------------------------------------------------
# Inputs shared by both implementations
# ----------------------------------------------------------------------------------------------------------------
def write_inputs(corpus: Path, work: Path, max_lines: int | None, seed: int = 0) -> dict:
    """train.txt, heldout.txt (whitespace-split lines) and vocab.txt in ``work``; returns their paths and sizes."""
    import numpy as np

    from elmo_hf.corpus.vocabulary import ELMoWordVocabulary

    lines = [" ".join(line.split()) for line in corpus.read_text(encoding="utf-8").splitlines()]
    lines = [line for line in lines if line and "<S>" not in line.split() and "</S>" not in line.split()]
    if max_lines is not None:
        lines = lines[:max_lines]
    held_out = np.zeros(len(lines), dtype=bool)
    held_out[np.random.default_rng(seed).permutation(len(lines))[: max(1, round(len(lines) * HELD_OUT_FRACTION))]] = True
    train = [line for line, out in zip(lines, held_out) if not out]
    test = [line for line, out in zip(lines, held_out) if out]
    paths = {"train": work / "train.txt", "held_out": work / "heldout.txt", "vocabulary": work / "vocab.txt"}
    paths["train"].write_text("".join(f"{line}\n" for line in train), encoding="utf-8")
    paths["held_out"].write_text("".join(f"{line}\n" for line in test), encoding="utf-8")
    vocabulary = ELMoWordVocabulary.from_sentences((line.split() for line in train), min_count=MIN_COUNT)
    vocabulary.save(work)
    return {
        **{name: str(path) for name, path in paths.items()},
        "train_sentences": len(train),
        "train_words": sum(len(line.split()) for line in train),
        "held_out_sentences": len(test),
        "held_out_words": sum(len(line.split()) for line in test),
        "vocabulary_size": len(vocabulary),
    }


def write_shape(name: str, work: Path, vocabulary_size: int, args) -> dict:
    """The shape's elmo-hf config.json and bilm-tf options.json (same architecture) in ``work/name``."""
    from benchmarks.training_speed import shape_config

    config = shape_config(name)
    config.lm_dropout = DROPOUT
    config.softmax_num_samples = args.softmax_samples
    directory = work / name
    directory.mkdir(parents=True, exist_ok=True)
    config.to_json_file(directory / "config.json")
    options = config.to_options_dict()
    options["char_cnn"]["n_characters"] = 261  # bilm-tf trains with 261 characters (262 only when exported)
    options.update(
        bidirectional=True, dropout=DROPOUT, all_clip_norm_val=CLIP_NORM, n_epochs=1,
        n_train_tokens=args.steps * args.batch_size * WINDOW, batch_size=args.batch_size, n_tokens_vocab=vocabulary_size,
        unroll_steps=WINDOW, n_negative_samples_batch=args.softmax_samples, learning_rate=LEARNING_RATE,
    )
    (directory / "options.json").write_text(json.dumps(options), encoding="utf-8")
    return {"config": str(directory / "config.json"), "options": str(directory / "options.json")}


def steady_words_per_second(step_starts: list[float], warmup: int, words_per_step: int) -> dict:
    """Words/s over the steps after ``warmup`` from the start time of each step (see the module docstring)."""
    if len(step_starts) < warmup + 2:
        raise ValueError(f"only {len(step_starts)} steps timed: need more than --warmup-steps {warmup} + 1")
    timed = step_starts[warmup:]
    seconds = timed[-1] - timed[0]
    return {"timed_steps": len(timed) - 1, "seconds": seconds, "words_per_second": (len(timed) - 1) * words_per_step / seconds}


# ----------------------------------------------------------------------------------------------------------------
# bilm-tf worker (runs in the TensorFlow venv: standard library, numpy, tensorflow and bilm only)
# ----------------------------------------------------------------------------------------------------------------
def bilm_tf_worker(job: dict) -> dict:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import contextlib
    import io
    import random

    import numpy as np
    import tensorflow

    tf = tensorflow.compat.v1
    tf.disable_v2_behavior()
    sys.modules["tensorflow"] = tf  # bilm-tf is TF 1 code
    real_config_proto = tf.ConfigProto

    def config_proto(**kwargs):  # bilm-tf's train() and test() make their sessions with ConfigProto(allow_soft_placement)
        return real_config_proto(
            intra_op_parallelism_threads=job["threads"], inter_op_parallelism_threads=1, **kwargs
        )

    tf.ConfigProto = config_proto
    from bilm.data import BidirectionalLMDataset, LMDataset
    from bilm.training import load_vocab, test, train

    def get_sentence(self):  # bilm-tf's, with the end of a test set as Python >= 3.7 needs it (PEP 479)
        while True:
            if self._i == self._nids:
                try:
                    self._ids = self._load_random_shard()
                except StopIteration:  # test mode: every shard read; ends the generator, as on Python 3.6
                    return
            sentence = self._ids[self._i]
            self._i += 1
            yield sentence

    LMDataset.get_sentence = get_sentence

    options = json.loads(Path(job["options"]).read_text(encoding="utf-8"))
    random.seed(job["seed"])
    np.random.seed(job["seed"])
    vocabulary = load_vocab(job["vocabulary"], options["char_cnn"]["max_characters_per_token"])
    data = BidirectionalLMDataset(job["train"], vocabulary, test=False, shuffle_on_load=True)
    step_starts: list[float] = []

    class TimedData:  # bilm-tf's data, noting when train() asks for each batch
        def iter_batches(self, batch_size, num_steps):
            for batch in data.iter_batches(batch_size, num_steps):
                step_starts.append(time.perf_counter())
                yield batch

    save_dir, log_dir = Path(job["work"]) / "save", Path(job["work"]) / "log"
    save_dir.mkdir(parents=True)
    log_dir.mkdir()
    started = time.perf_counter()
    with tf.Graph().as_default():
        tf.set_random_seed(job["seed"])
        with contextlib.redirect_stdout(io.StringIO()):
            train(options, TimedData(), 1, str(save_dir), str(log_dir))
    wall = time.perf_counter() - started
    checkpoint = tf.train.latest_checkpoint(str(save_dir))
    held_out = BidirectionalLMDataset(job["held_out"], vocabulary, test=True, shuffle_on_load=False)
    with tf.Graph().as_default(), contextlib.redirect_stdout(io.StringIO()):
        test_perplexity = float(test(options, checkpoint, held_out, batch_size=job["batch_size"]))
    return {
        "implementation": "bilm-tf", "tensorflow": tensorflow.__version__, "step_starts": step_starts,
        "training_wall_seconds": wall, "checkpoint": checkpoint, "test_perplexity": test_perplexity,
    }


# ----------------------------------------------------------------------------------------------------------------
# elmo-hf worker (runs in this environment)
# ----------------------------------------------------------------------------------------------------------------
def elmo_hf_worker(job: dict) -> dict:
    import torch

    torch.set_num_threads(job["threads"])
    torch.set_num_interop_threads(1)
    from elmo_hf.corpus.vocabulary import ELMoWordVocabulary
    from elmo_hf.pretraining import PretrainingOptions, pretrain
    from elmo_hf.pretraining.trainer import ELMoPreTrainingTrainer

    step_starts: list[float] = []
    compute_loss = ELMoPreTrainingTrainer.compute_loss

    def timed_compute_loss(self, model, inputs, *args, **kwargs):
        if model.training:
            step_starts.append(time.perf_counter())
        return compute_loss(self, model, inputs, *args, **kwargs)

    ELMoPreTrainingTrainer.compute_loss = timed_compute_loss
    output_dir = Path(job["work"]) / "output"
    started = time.perf_counter()
    report = pretrain(
        PretrainingOptions(
            corpus=[job["train"]], held_out=[job["held_out"]], output_dir=output_dir, config=job["config"],
            word_splitter="whitespace", min_count=MIN_COUNT, regime="windowed", window_size=WINDOW,
            batch_size=job["batch_size"], max_steps=job["steps"], optimizer="adagrad", learning_rate=LEARNING_RATE,
            lr_scheduler="constant", warmup_ratio=0.0, max_grad_norm=CLIP_NORM / WINDOW,
            softmax_samples=job["softmax_samples"], dropout=DROPOUT, save_steps=10**9, eval_steps=0,
            logging_steps=10**9, train_eval_sentences=200, seed=job["seed"], progress=False, handle_interrupt=False,
            num_threads=job["threads"],
        )
    )
    wall = time.perf_counter() - started
    if ELMoWordVocabulary.load(output_dir).words != ELMoWordVocabulary.load(job["vocabulary"]).words:
        raise RuntimeError("elmo-hf built another vocabulary than the one bilm-tf was given")
    return {
        "implementation": "elmo-hf", "torch": torch.__version__, "step_starts": step_starts, "run_wall_seconds": wall,
        "report_held_out": report.held_out, "model_dir": str(output_dir),
    }


def held_out_perplexity(model, held_out_file: str, vocabulary, batch_size: int) -> dict:
    """What the pre-training report computes (``run._evaluation_data`` + ``bilm_perplexity_metrics``): the held-out
    stream in windows (every prediction once, padded tail), state carried, eval mode, full softmax, summed NLL."""
    import torch

    from elmo_hf.modeling_elmo_pretraining import perplexity_from_totals
    from elmo_hf.pretraining.data import WindowedBiLMStream

    sentences = [line.split() for line in Path(held_out_file).read_text(encoding="utf-8").splitlines()]
    stream = WindowedBiLMStream(
        sentences, vocabulary, num_rows=batch_size, window_size=WINDOW, shuffle=False, remainder="pad",
        max_characters_per_token=model.config.max_characters_per_token,
    )
    model.eval()
    state, totals, counts = None, [], []
    with torch.inference_mode():
        for batch in stream.batches():
            output = model(**batch, lstm_state=state, return_lstm_state=True)
            state = output.lstm_state
            totals.append(output.negative_log_likelihood)
            counts.append(output.num_predictions)
    return perplexity_from_totals(torch.stack(totals), torch.stack(counts))


def evaluate_worker(job: dict) -> dict:
    """Held-out perplexity, by elmo-hf's evaluation, of bilm-tf's checkpoint and of elmo-hf's model."""
    import torch

    torch.set_num_threads(job["threads"])
    from elmo_hf.conversion.convert_tf_checkpoint import load_tf_checkpoint
    from elmo_hf.corpus.vocabulary import ELMoWordVocabulary
    from elmo_hf.modeling_elmo_pretraining import ELMoForPreTraining

    result = {}
    if job.get("checkpoint"):
        converted = load_tf_checkpoint(job["checkpoint"], job["vocabulary"])
        result["bilm_tf"] = held_out_perplexity(converted.model, job["held_out"], converted.vocabulary, job["batch_size"])
    if job.get("model_dir"):
        model = ELMoForPreTraining.from_pretrained(job["model_dir"])
        vocabulary = ELMoWordVocabulary.load(job["model_dir"])
        result["elmo_hf"] = held_out_perplexity(model, job["held_out"], vocabulary, job["batch_size"])
    return result


WORKERS = {"bilm-tf": bilm_tf_worker, "elmo-hf": elmo_hf_worker, "evaluate": evaluate_worker}


def run_worker(python: str, kind: str, job: dict, log) -> dict:
    """Run ``kind``'s worker in a fresh ``python`` process; its result is the JSON it writes to ``job["result"]``."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY_ROOT), os.environ.get("PYTHONPATH")]))}
    environment.update(OMP_NUM_THREADS=str(job["threads"]), MKL_NUM_THREADS=str(job["threads"]))
    if kind == "bilm-tf":
        environment.pop("PYTHONPATH")  # the TF venv must not see this environment's packages
    else:  # as `elmo-hf pretrain` runs (elmo_hf.runtime.parallelism.wait_passively), unless the environment chose
        environment.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    Path(job["work"]).mkdir(parents=True, exist_ok=True)
    job_file = Path(job["work"]) / "job.json"
    job_file.write_text(json.dumps(job), encoding="utf-8")
    completed = subprocess.run(
        [python, str(Path(__file__).resolve()), "--worker", kind, str(job_file)], env=environment, capture_output=True, text=True,
    )
    if completed.returncode != 0:
        log(completed.stdout[-3000:] + completed.stderr[-6000:])
        raise RuntimeError(f"the {kind} worker failed with exit code {completed.returncode}")
    return json.loads(Path(job["result"]).read_text(encoding="utf-8"))


# ----------------------------------------------------------------------------------------------------------------
# FLOPs and the matmul limit
# ----------------------------------------------------------------------------------------------------------------
# ----------------------------------------------------------------------------------------------------------------
# The benchmark
# ----------------------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bilm-python", help="python of the bilm-tf venv (without it only elmo-hf runs)")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--shapes", nargs="+", choices=TRAINED_SHAPES, default=list(TRAINED_SHAPES))
    parser.add_argument("--threads", nargs="+", type=int, default=[2])
    parser.add_argument("--rounds", type=int, default=2, help="interleaved (bilm-tf, elmo-hf) rounds per shape and thread count")
    parser.add_argument("--steps", type=int, default=80, help="optimizer steps per run (the same words for both)")
    parser.add_argument("--warmup-steps", type=int, default=10, help="steps left out of the words/s")
    parser.add_argument("--batch-size", type=int, default=32, help="rows per batch (x 20 positions)")
    parser.add_argument("--softmax-samples", type=int, default=1024, help="sampled softmax negatives (bilm-tf: n_negative_samples_batch)")
    parser.add_argument("--max-lines", type=int, help="use only the corpus's first lines")
    parser.add_argument("--gemm-size", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a short run (few steps, one round, `small` only)")
    parser.add_argument("--json-out", type=Path)
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        kind, job_file = args.worker
        job = json.loads(Path(job_file).read_text(encoding="utf-8"))
        Path(job["result"]).write_text(json.dumps(WORKERS[kind](job)), encoding="utf-8")
        return {}
    if args.quick:
        args.shapes, args.rounds, args.steps, args.warmup_steps = ["small"], 1, 40, 5
    sys.path.insert(0, str(REPOSITORY_ROOT))
    from benchmarks.training_speed import matmul_limit, shape_config, training_step_flops

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    results: dict = {"command": " ".join(["python", *sys.argv]), "settings": {k: str(v) for k, v in vars(args).items() if k != "worker"}}
    with tempfile.TemporaryDirectory(prefix="elmo-hf-pretrain-side-by-side-") as work_dir:
        work = Path(work_dir)
        inputs = results["inputs"] = write_inputs(args.corpus, work, args.max_lines, args.seed)
        log(f"inputs: {json.dumps(inputs)}")
        results["matmul_gflops"] = {threads: matmul_limit("cpu", args.gemm_size, threads=threads) for threads in sorted({1, 2, *args.threads})}
        log(f"float32 matmul {args.gemm_size}^3 GFLOP/s by threads: {results['matmul_gflops']}")
        words_per_step = args.batch_size * WINDOW
        results["shapes"] = {}
        for shape in args.shapes:
            files = write_shape(shape, work, inputs["vocabulary_size"], args)
            flops = training_step_flops(shape_config(shape), inputs["vocabulary_size"], args.softmax_samples)
            shape_results = results["shapes"][shape] = {"flops": flops, "threads": {}}
            log(f"{shape}: {flops['flops_per_word'] / 1e6:.1f} MFLOP per training word (forward + backward)")
            for threads in args.threads:
                rounds = []
                for round_index in range(args.rounds):
                    row = {}
                    for implementation in (["bilm-tf"] if args.bilm_python else []) + ["elmo-hf"]:
                        run_dir = work / "runs" / f"{shape}-{threads}-{round_index}-{implementation}"
                        job = {
                            **inputs, **files, "threads": threads, "steps": args.steps, "batch_size": args.batch_size,
                            "softmax_samples": args.softmax_samples, "seed": args.seed + round_index, "work": str(run_dir),
                            "result": str(run_dir / "result.json"),
                        }
                        python = args.bilm_python if implementation == "bilm-tf" else sys.executable
                        outcome = run_worker(python, implementation, job, log)
                        speed = steady_words_per_second(outcome.pop("step_starts"), args.warmup_steps, words_per_step)
                        row[implementation] = {**outcome, **speed}
                        log(f"  {shape}, {threads} thread(s), round {round_index + 1}: {implementation} "
                            f"{speed['words_per_second']:,.0f} words/s")
                    evaluation = run_worker(
                        sys.executable, "evaluate",
                        {**inputs, "threads": threads, "batch_size": args.batch_size, "work": str(work / "runs" / "eval"),
                         "result": str(work / "runs" / "eval" / "result.json"),
                         "checkpoint": (row.get("bilm-tf") or {}).get("checkpoint"), "model_dir": row["elmo-hf"]["model_dir"]},
                        log,
                    )
                    row["evaluation"] = evaluation
                    if "elmo_hf" in evaluation and abs(evaluation["elmo_hf"]["perplexity"] - row["elmo-hf"]["report_held_out"]["perplexity"]) > 1e-6 * evaluation["elmo_hf"]["perplexity"]:
                        raise RuntimeError("the benchmark's evaluation does not reproduce the report's held-out perplexity")
                    log("  held-out perplexity: elmo-hf {:.2f}{}".format(
                        row["elmo-hf"]["report_held_out"]["perplexity"],
                        f", bilm-tf {evaluation['bilm_tf']['perplexity']:.2f} (its test(): {row['bilm-tf']['test_perplexity']:.2f})"
                        if "bilm_tf" in evaluation else "",
                    ))
                    rounds.append(row)
                shape_results["threads"][threads] = summarise(rounds, flops["flops_per_word"], results["matmul_gflops"][threads])
                log(f"  {shape}, {threads} thread(s): {json.dumps(shape_results['threads'][threads]['summary'])}")
                shape_results["threads"][threads]["rounds"] = rounds
        original = shape_config("original")
        # per word the sampled softmax costs the same at any vocabulary size: count with 2 x the samples, not 793,471 rows
        results["original_shape_flops"] = training_step_flops(original, 2 * ORIGINAL_SOFTMAX_SAMPLES, ORIGINAL_SOFTMAX_SAMPLES)
        log(f"original shape: {results['original_shape_flops']['flops_per_word'] / 1e9:.3f} GFLOP per training word")
    print_table(results)
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return results


def summarise(rounds: list[dict], flops_per_word: float, matmul_gflops: float) -> dict:
    summary: dict = {}
    for implementation in ("bilm-tf", "elmo-hf"):
        speeds = [row[implementation]["words_per_second"] for row in rounds if implementation in row]
        if speeds:
            median = statistics.median(speeds)
            summary[implementation] = {
                "words_per_second": median, "per_round": speeds,
                "fraction_of_matmul_limit": median * flops_per_word / (matmul_gflops * 1e9),
            }
    summary["elmo-hf"]["held_out_perplexity"] = statistics.median(row["elmo-hf"]["report_held_out"]["perplexity"] for row in rounds)
    if "bilm-tf" in summary:
        summary["bilm-tf"]["held_out_perplexity"] = statistics.median(row["evaluation"]["bilm_tf"]["perplexity"] for row in rounds)
        summary["bilm-tf"]["test_perplexity"] = statistics.median(row["bilm-tf"]["test_perplexity"] for row in rounds)
        summary["speed_ratio"] = statistics.median(
            row["elmo-hf"]["words_per_second"] / row["bilm-tf"]["words_per_second"] for row in rounds
        )
        summary["perplexity_ratio"] = summary["elmo-hf"]["held_out_perplexity"] / summary["bilm-tf"]["held_out_perplexity"]
    return {"summary": summary}


def print_table(results: dict) -> None:
    print("| shape | threads | bilm-tf words/s | elmo-hf words/s | ratio | held-out ppl bilm-tf (its test()) | elmo-hf | "
          "ppl ratio | MFLOP/word | limit fraction bilm-tf / elmo-hf |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for shape, shape_results in results["shapes"].items():
        for threads, entry in shape_results["threads"].items():
            summary = entry["summary"]
            theirs, ours = summary.get("bilm-tf"), summary["elmo-hf"]
            print(
                f"| {shape} | {threads} | {theirs['words_per_second']:,.0f} | " if theirs else f"| {shape} | {threads} | - | ",
                end="",
            )
            print(
                f"{ours['words_per_second']:,.0f} | {summary.get('speed_ratio', float('nan')):.2f}x | "
                + (f"{theirs['held_out_perplexity']:.1f} ({theirs['test_perplexity']:.1f}) | " if theirs else "- | ")
                + f"{ours['held_out_perplexity']:.1f} | {summary.get('perplexity_ratio', float('nan')):.3f} | "
                f"{shape_results['flops']['flops_per_word'] / 1e6:.1f} | "
                + (f"{theirs['fraction_of_matmul_limit']:.1%} / " if theirs else "- / ")
                + f"{ours['fraction_of_matmul_limit']:.1%} |"
            )
    print(f"matmul limit (float32 GFLOP/s by threads): {results['matmul_gflops']}")
    print(f"original shape: {results['original_shape_flops']['flops_per_word'] / 1e9:.3f} GFLOP per training word")


if __name__ == "__main__":
    main()
