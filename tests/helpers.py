"""Test helpers: small random models, and files in the original ELMo layout."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Iterator

import h5py
import numpy as np
import pytest
import torch

from elmo_hf.conversion.hdf5_layout import weight_mappings
from elmo_hf import ELMoConfig, ELMoForPreTraining, ELMoModel
from elmo_hf.pretraining.trainer import CarriedLstmState


# A test on a CUDA device: marked `gpu` (`pytest -m gpu`), skipped where there is none. `DEVICES` parametrizes a test
# over the CPU and CUDA.
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, requires_cuda])]


def write_random_original_model(options: dict, directory: Path, seed: int = 0, scale: float = 0.3) -> tuple[Path, Path]:
    """options.json + weights.hdf5 with random float32 weights of the shapes the options imply."""
    directory.mkdir(parents=True, exist_ok=True)
    options_file, weight_file = directory / "options.json", directory / "weights.hdf5"
    options_file.write_text(json.dumps(options))
    config = ELMoConfig.from_options_dict(options)
    generator = np.random.default_rng(seed)
    with h5py.File(weight_file, "w") as weights:
        for mapping in weight_mappings(config):
            weights.create_dataset(mapping.hdf5_name, data=(generator.standard_normal(mapping.hdf5_shape) * scale).astype(np.float32))
    return options_file, weight_file


def tiny_options(**lstm_or_cnn_changes) -> dict:
    options = {
        "lstm": {"cell_clip": 3, "use_skip_connections": True, "n_layers": 2, "proj_clip": 3, "projection_dim": 8, "dim": 16},
        "char_cnn": {
            "embedding": {"dim": 4},
            "filters": [[1, 4], [2, 8], [3, 8]],
            "n_highway": 2,
            "n_characters": 262,
            "max_characters_per_token": 50,
            "activation": "relu",
        },
    }
    for key, value in lstm_or_cnn_changes.items():
        section = "lstm" if key in options["lstm"] else "char_cnn"
        options[section][key] = value
    return options


def assert_hdf5_files_identical(first: Path, second: Path) -> None:
    """Same dataset names, shapes, dtypes and bytes."""
    with h5py.File(first, "r") as a, h5py.File(second, "r") as b:
        names_a, names_b = [], []
        a.visititems(lambda name, item: names_a.append(name) if isinstance(item, h5py.Dataset) else None)
        b.visititems(lambda name, item: names_b.append(name) if isinstance(item, h5py.Dataset) else None)
        assert sorted(names_a) == sorted(names_b)
        for name in names_a:
            assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
            assert a[name][...].tobytes() == b[name][...].tobytes(), name


@contextlib.contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """torch's intra-op threads set to `count` inside the block, restored after. Tiny models want one: a second
    thread buys nothing, and while another process holds one of two cores every op waits at OpenMP barriers (the
    Trainer tests took 22 s instead of 1.3 s)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def tiny_config(**overrides) -> ELMoConfig:
    """A small random architecture exercising every part (2 highway, projection, clipping, skip connections)."""
    values = dict(
        char_embedding_dim=4,
        char_cnn_filters=[[1, 4], [2, 8], [3, 8]],
        num_highway_layers=2,
        projection_dim=8,
        lstm_cell_size=16,
        num_lstm_layers=2,
        cell_clip=3.0,
        projection_clip=3.0,
        use_skip_connections=True,
    )
    values.update(overrides)
    return ELMoConfig(**values)


def random_model(config: ELMoConfig | None = None, seed: int = 0, std: float = 0.3) -> ELMoModel:
    """A model with weights large enough that gates, clipping and residuals all matter."""
    model = ELMoModel(config or tiny_config())
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.startswith("scalar_mixes"):
                continue
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)
        model.char_embeddings.embedding.weight[0].zero_()
    return model.eval()


SENTENCES = [
    "The bank raised its interest rates .".split(),
    "We sat on the bank of the river and watched the boats go by .".split(),
    "Hello".split(),
    "Ein Satz mit Umlauten : Größe , Übung .".split(),
]


# A repetitive toy corpus a tiny biLM learns in a few dozen steps (pre-training and LM-scoring tests).
TOY_SENTENCES = [
    sentence.split()
    for sentence in (
        "the cat sat on the mat",
        "the dog sat on the log",
        "a cat and a dog",
        "the mat is red",
        "a log is brown",
        "the red cat sat on a brown log",
    )
]


def trainer_arguments(tmp_path, **overrides):
    """`TrainingArguments` for a short, quiet, CPU-only `Trainer` run in a test (override anything)."""
    from transformers import TrainingArguments

    values = dict(
        output_dir=str(tmp_path / "trainer"),
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
    )
    values.update(overrides)
    return TrainingArguments(**values)


# Prepended to every script run by `run_without_elmo_hf`: with `python -S`, site-packages is put on sys.path by hand
# WITHOUT processing its .pth files, so the editable install of elmo_hf (a .pth entry) is invisible and elmo_hf
# truly cannot be imported. sys.argv[1] is the list of site-packages directories; the caller's arguments follow.
_WITHOUT_ELMO_HF_PREAMBLE = """\
import importlib.util, json, sys
sys.path.extend(json.loads(sys.argv[1]))
assert importlib.util.find_spec("elmo_hf") is None, "elmo_hf must not be importable here"
"""


def run_without_elmo_hf(script: str, tmp_path, *arguments: str):
    """Run ``script`` in a fresh interpreter that has this interpreter's packages but not elmo_hf (remote-code
    tests), offline, from a folder outside the repository; its arguments start at ``sys.argv[2]``. Returns the
    ``subprocess.CompletedProcess`` (text output captured)."""
    import json
    import os
    import site
    import subprocess
    import sys
    import sysconfig

    # Every site-packages directory of this interpreter (a venv with --system-site-packages has two).
    site_packages = sorted({*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    work_dir = tmp_path / "elsewhere"
    work_dir.mkdir(exist_ok=True)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HOME=str(tmp_path / "hf_home"), HF_HUB_OFFLINE="1")
    return subprocess.run(
        [sys.executable, "-S", "-c", _WITHOUT_ELMO_HF_PREAMBLE + script, json.dumps(site_packages), *arguments],
        cwd=work_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def pretraining_model(vocabulary_size: int, seed: int = 0, **overrides) -> ELMoForPreTraining:
    torch.manual_seed(seed)
    config = tiny_config(projection_dim=16, lstm_cell_size=32, word_vocab_size=vocabulary_size, **overrides)
    return ELMoForPreTraining(config)


def stream_totals(model, stream, carried: CarriedLstmState | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed NLL and counts of a whole stream, the LSTM state carried from window to window (in ``carried``, under
    the model's mode) as ELMoPreTrainingTrainer does."""
    carried = carried if carried is not None else CarriedLstmState()
    mode = "train" if model.training else "eval"
    nll, counts = torch.zeros(2, dtype=torch.float64), torch.zeros(2, dtype=torch.long)
    with torch.no_grad():
        for batch in stream.batches():
            state = carried.state_for(mode, int(batch["window_index"][0]), stream.num_rows)
            output = model(**batch, lstm_state=state, return_lstm_state=True)
            carried.keep(mode, int(batch["window_index"][0]), output.lstm_state)
            nll += output.negative_log_likelihood.double()
            counts += output.num_predictions
    return nll, counts


def run_in_forked_child(work) -> int:
    """``work()`` in a forked child of the test process (no interpreter start-up); its wait status. The child never
    returns into pytest (``os._exit(0)`` after ``work``). It runs torch on one thread: a forked child cannot use the
    parent's OpenMP thread pool (libgomp's threads are not copied, and its first parallel region waits for them
    forever), and one thread runs every op on the calling thread."""
    import os

    child = os.fork()
    if child == 0:
        try:
            torch.set_num_threads(1)
            work()
        finally:
            os._exit(0)
    return os.waitpid(child, 0)[1]
