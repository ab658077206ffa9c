"""Every GPU measurement issue 13 asks for, in one command that fits one call of a borrowed GPU machine.

    python benchmarks/gpu_session.py --out DIR [--device cuda] [--allennlp-site DIR] [--budget-seconds 560]
        [--steps environment tests inference embed side-by-side training] [--quick]

Writes two files, whatever happens: ``DIR/results.json`` (rewritten after every step, so a run cut short still says
what it measured) and ``DIR/session.log`` (every command line and its output). The steps, in order:

- ``environment``: torch, CUDA, the device's name and memory, ``nvidia-smi -L``.
- ``tests``: ``python -m pytest -m gpu`` (TF32 off by default and exact against float64, fast vs reference on the
  device, the pipeline's equality with the datasets engine).
- ``inference``: ``benchmarks/inference_speed.py`` on the device, fast path, float32 and bfloat16, batch 32 / 256 /
  1024 of 20-word sentences (the model alone).
- ``embed``: ``benchmarks/embed_throughput.py`` on the device (end to end against the model alone, same lines), the
  original shape with random weights storing float16 vectors, in float32 and in bfloat16; and the shipped model.
- ``side-by-side``: ``../shared/anchors/bench_side_by_side.py``, real AllenNLP 2.10.1 (with ``--allennlp-site``)
  and elmo-hf (float32, bfloat16) on the same weights, UD EWT test in file order, batch 32 / 128 / 512, and the
  largest difference of their top layers.
- ``training``: ``benchmarks/training_speed.py`` (issue 30's scale plan): bilm-tf's training step (128 rows x 20,
  sampled softmax of 8,192 over 793,471 words, Adagrad) at the original shape in float32 (TF32 off), with TF32 and
  with bfloat16 autocast, and at the original's proportions at a quarter of its width: words/s, FLOPs per word and the
  fraction of the device's matmul rate.

``results.json["targets"]`` then sets each of issue 13's CUDA targets beside the figure that answers it (None where a
step did not run). The original shape's random weights (``inference_speed.random_model``, seed 0) are written once,
in the Hugging Face layout and exported to ``options.json`` + ``weights.hdf5`` for AllenNLP, in a temporary directory.
Shared data comes from ``../shared`` (a link on a machine where it lies elsewhere). ``--quick``: the small shape, a
few lines and batches, so the whole session runs on a CPU in about a minute (the test suite does that; the figures
then mean nothing). Preparing a GPU machine and the one call to make: ``docs/results/embed-throughput.md``, "GPU".
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY_ROOT))
SIDE_BY_SIDE = REPOSITORY_ROOT.parent / "shared" / "anchors" / "bench_side_by_side.py"
STEPS = ("environment", "tests", "inference", "embed", "side-by-side", "training")

# Issue 13's CUDA targets (H100): (what, the threshold, where results.json has the figure).
TARGETS = {
    "embed_original_float16_words_per_second": ">= 100,000 words/s end to end (original shape, vectors stored as float16)",
    "embed_original_float16_ratio": ">= 0.6 of the model alone",
    "model_alone_bfloat16_batch_32": ">= 100,000 words/s",
    "model_alone_bfloat16_batch_1024": ">= 800,000 words/s",
    "users_loop_over_allennlp": ">= 10x AllenNLP's words/s on the same GPU, at every batch size",
    # Issue 30: no threshold; the scale plan (docs/results/pretrain-side-by-side.md) divides 8 billion words by it.
    "pretraining_original_words_per_second": "training words/s at the original shape (best of float32, TF32, bfloat16)",
}


class Session:
    """The run's two output files and its time budget; ``step`` runs one step and records its report or error."""

    def __init__(self, out: Path, budget_seconds: float):
        out.mkdir(parents=True, exist_ok=True)
        self.results_path, self.log_path = out / "results.json", out / "session.log"
        self.log_path.write_text("", encoding="utf-8")
        self.deadline = time.monotonic() + budget_seconds
        self.results: dict[str, Any] = {"command": " ".join(["python", *sys.argv]), "steps": {}}
        self.save()

    def save(self) -> None:
        self.results_path.write_text(json.dumps(self.results, indent=1), encoding="utf-8")

    def log(self, text: str) -> None:
        with self.log_path.open("a", encoding="utf-8") as log:
            log.write(text if text.endswith("\n") else text + "\n")

    def seconds_left(self) -> float:
        return self.deadline - time.monotonic()

    def step(self, name: str, run: Callable[[], Any]) -> None:
        started = time.perf_counter()
        if self.seconds_left() < 10:
            self.results["steps"][name] = {"error": "not run: the session's time budget was spent"}
        else:
            try:
                self.results["steps"][name] = {"report": run()}
            except Exception as error:  # a failed step is recorded; the next one still runs
                self.results["steps"][name] = {"error": f"{type(error).__name__}: {error}"}
        self.results["steps"][name]["seconds"] = round(time.perf_counter() - started, 1)
        self.log(f"== {name}: {self.results['steps'][name].get('error', 'done')}")
        self.save()

    def command(self, argv: list[str], json_output: bool = True, python_path: Path | None = None) -> Any:
        """Run ``argv`` (``python`` means this interpreter) in the repository root, which goes on PYTHONPATH after
        ``python_path`` and before what is there already, within the time left, its output appended to the log;
        return its stdout parsed as JSON (``json_output``) or ``{"exit_code", "last_lines"}``."""
        argv = [sys.executable if part == "python" else part for part in argv]
        paths = [python_path, REPOSITORY_ROOT, os.environ.get("PYTHONPATH")]
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(str(path) for path in paths if path)}
        self.log(f"$ {' '.join(argv)}")
        result = subprocess.run(
            argv, cwd=REPOSITORY_ROOT, env=environment, capture_output=True, text=True, timeout=max(1.0, self.seconds_left() - 5)
        )
        self.log(result.stdout + result.stderr)
        if not json_output:
            return {"exit_code": result.returncode, "last_lines": (result.stdout + result.stderr).strip().splitlines()[-3:]}
        if result.returncode != 0:
            raise RuntimeError(f"{argv[1]} exited with {result.returncode}: {result.stderr.strip().splitlines()[-1:]}")
        return json.loads(result.stdout[result.stdout.index("{") :])


# The packages whose versions decide whether the session can run at all (a machine may carry older ones).
PACKAGES = ("transformers", "tokenizers", "safetensors", "datasets", "pyarrow", "h5py", "numpy")


def environment(device: str) -> dict:
    import torch

    report = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0], "cpus": os.cpu_count()}
    report["packages"] = {name: installed_version(name) for name in PACKAGES}
    if device.startswith("cuda") and torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(device)
        report.update(device=properties.name, memory_gib=round(properties.total_memory / 2**30, 1))
    if shutil.which("nvidia-smi"):
        report["nvidia_smi"] = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.strip()
    return report


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def write_original_shape(work: Path, quick: bool) -> tuple[Path, Path]:
    """Random weights of the original shape (the small one with ``quick``) in both layouts: (HF dir, AllenNLP dir)."""
    from benchmarks.inference_speed import SHAPES, random_model
    from elmo_hf.conversion.convert_hf_to_allennlp import convert_hf_to_allennlp
    from elmo_hf import DEFAULT_MODEL_DIR, ELMoConfig, ELMoTokenizer

    hf_dir, allennlp_dir = work / "hf", work / "allennlp"
    random_model(ELMoConfig(**SHAPES["small" if quick else "original"])).save_pretrained(hf_dir)
    ELMoTokenizer.from_pretrained(DEFAULT_MODEL_DIR).save_pretrained(hf_dir)
    convert_hf_to_allennlp(hf_dir, allennlp_dir)
    return hf_dir, allennlp_dir


def run_tests(session: Session) -> dict:
    return session.command(["python", "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider"], json_output=False)


def run_inference(session: Session, device: str, quick: bool) -> dict:
    sizes = ["--shapes", "small", "--batch-sizes", "2", "--dtypes", "float32", "--min-seconds", "0.05", "--threads", "1"]
    full = ["--shapes", "small", "original", "--batch-sizes", "32", "256", "1024", "--dtypes", "float32", "bfloat16"]
    return session.command(
        ["python", "benchmarks/inference_speed.py", "--device", device, "--paths", "fast", *(sizes if quick else full)]
    )


def run_embed(session: Session, device: str, hf_dir: Path, quick: bool) -> dict:
    lines = ["--lines", "60", "--shard-size", "20", "--threads", "1"] if quick else ["--lines", "40000"]
    # The corpus is embed_throughput's default, tinyshakespeare.
    common = ["python", "benchmarks/embed_throughput.py", "--device", device, *lines]
    runs = {
        "original_float16": [*common, "--model", str(hf_dir), "--dtype", "float16"],
        "original_float16_bfloat16_compute": [*common, "--model", str(hf_dir), "--dtype", "float16", "--compute-dtype", "bfloat16"],
        "shipped_model": common,
    }
    return {name: session.command(argv) for name, argv in runs.items()}


def run_side_by_side(session: Session, device: str, hf_dir: Path, allennlp_dir: Path, allennlp_site: Path | None, work: Path, quick: bool) -> dict:
    import numpy as np

    from benchmarks.inference_speed import CORPUS as EWT_TEST

    if not SIDE_BY_SIDE.is_file():  # an anchor comparison: the one step a plain clone cannot run
        raise FileNotFoundError(f"{SIDE_BY_SIDE} is not there: this step needs ../shared/anchors beside the clone")
    sizes = ["--batch-sizes", "4", "--limit", "12"] if quick else ["--batch-sizes", "32", "128", "512"]
    runs = {"elmo-hf float32": ("elmo-hf", hf_dir, "float32"), "elmo-hf bfloat16": ("elmo-hf", hf_dir, "bfloat16")}
    if allennlp_site is not None:
        runs["allennlp float32"] = ("allennlp", allennlp_dir, "float32")
    report = {}
    for name, (implementation, model_dir, dtype) in runs.items():
        out = work / f"{name.replace(' ', '-')}.json"
        argv = ["python", str(SIDE_BY_SIDE), implementation, str(model_dir), str(EWT_TEST), device, str(out), "--dtype", dtype, *sizes]
        session.command(argv, json_output=False, python_path=allennlp_site if implementation == "allennlp" else None)
        report[name] = {row["batch_size"]: row["words_per_s"] for row in json.loads(out.read_text())}
    if allennlp_site is not None:
        ours, theirs = (np.load(work / f"{name}.npy") for name in ("elmo-hf-float32", "allennlp-float32"))
        report["top_layer_max_abs_difference_float32"] = float(np.abs(ours - theirs).max()) if ours.shape == theirs.shape else None
    return report


def run_training(session: Session, device: str, quick: bool) -> dict:
    common = ["python", "benchmarks/training_speed.py", "--device", device]
    if quick:
        sizes = ["--shapes", "tiny", "--batch-size", "2", "--vocabulary-size", "500", "--softmax-samples", "64", "--steps", "2",
                 "--warmup-steps", "1", "--gemm-size", "256", "--threads", "1"]
        return {"tiny_float32": session.command([*common, *sizes])}
    shapes = ["--shapes", "original", "--steps", "20"]
    return {
        "float32": session.command([*common, "--shapes", "original", "proportional", "--steps", "20"]),
        "tf32": session.command([*common, *shapes, "--tf32", "--no-flops"]),
        "bfloat16": session.command([*common, *shapes, "--bfloat16", "--no-flops"]),
    }


def targets(steps: dict) -> dict:
    """Each CUDA target of issue 13 beside its measured figure (None where the step did not run)."""

    def report(step: str) -> dict:
        return steps.get(step, {}).get("report") or {}

    embed = report("embed").get("original_float16") or {}
    fast = (report("inference").get("shapes") or {}).get("original", {})
    side = report("side-by-side")

    def model_alone_bfloat16(batch_size: int) -> float | None:
        rows = [row for row in fast.get("results", []) if row.get("dtype") == "bfloat16" and row.get("batch_size") == batch_size]
        return rows[0].get("words_per_second") if rows else None

    allennlp, ours = side.get("allennlp float32") or {}, side.get("elmo-hf float32") or {}
    training = [
        run["shapes"]["original"]["words_per_second"] for run in report("training").values()
        if isinstance(run, dict) and "original" in run.get("shapes", {})
    ]
    return {
        name: {"target": target, "measured": measured}
        for (name, target), measured in zip(
            TARGETS.items(),
            (
                (embed.get("end_to_end") or {}).get("words_per_second"),
                embed.get("ratio"),
                model_alone_bfloat16(32),
                model_alone_bfloat16(1024),
                {size: round(ours[size] / allennlp[size], 2) for size in allennlp if size in ours} or None,
                max(training) if training else None,
            ),
        )
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for results.json and session.log")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--allennlp-site", type=Path, help="unpacked AllenNLP 2.10.1 + ../shared/anchors/allennlp/sitecustomize.py")
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS))
    parser.add_argument("--budget-seconds", type=float, default=560.0, help="stop starting steps after this long")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that the session runs, measures nothing")
    args = parser.parse_args(argv)

    session = Session(args.out, args.budget_seconds)
    with tempfile.TemporaryDirectory(prefix="elmo-hf-gpu-session-") as work_dir:
        work = Path(work_dir)
        needs_models = {"embed", "side-by-side"} & set(args.steps)
        models: tuple[Path, Path] | None = None
        if needs_models:
            session.step("models", lambda: [str(path) for path in write_original_shape(work, args.quick)])
            models = tuple(Path(path) for path in session.results["steps"]["models"].get("report") or ()) or None
        for name in args.steps:
            if name in needs_models and models is None:
                session.results["steps"][name] = {"error": "not run: the models could not be written"}
                continue
            session.step(
                name,
                {
                    "environment": lambda: environment(args.device),
                    "tests": lambda: run_tests(session),
                    "inference": lambda: run_inference(session, args.device, args.quick),
                    "embed": lambda: run_embed(session, args.device, models[0], args.quick),
                    "side-by-side": lambda: run_side_by_side(
                        session, args.device, *models, args.allennlp_site, work, args.quick
                    ),
                    "training": lambda: run_training(session, args.device, args.quick),
                }[name],
            )
        session.results["targets"] = targets(session.results["steps"])
        session.save()
    print(json.dumps(session.results["targets"], indent=1))
    return session.results


if __name__ == "__main__":
    main()
