"""A damaged model directory (a truncated model.safetensors, a config.json whose sizes disagree with the weights) ends
every command that loads it in one error naming the file and what was expected, exit 2, no traceback (issue 51,
item 6): embed, similarity, neighbours query, export and pretrain --init-from (``common.model_files_named``)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from elmo_hf import DEFAULT_MODEL_DIR
from elmo_hf_cli import main


def truncate_weights(model_dir) -> str:
    weights = model_dir / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)
    return f"{weights} is damaged or truncated"


def shrink_the_config(model_dir) -> str:
    config = json.loads((model_dir / "config.json").read_text())
    config["lstm_cell_size"] //= 2
    (model_dir / "config.json").write_text(json.dumps(config))
    return f"the sizes that {model_dir / 'config.json'} gives disagree with the tensors in {model_dir / 'model.safetensors'}"


DAMAGES = [truncate_weights, shrink_the_config]


@pytest.fixture(scope="module")
def index_of_a_model(tmp_path_factory):
    """An index whose corpus was embedded with a copy of the shipped model (the index records that directory)."""
    root = tmp_path_factory.mktemp("index")
    model = root / "model"
    shutil.copytree(DEFAULT_MODEL_DIR, model)
    (root / "corpus.txt").write_text("We saw the play .\nThe play was long .\n")
    assert main(["embed", str(root / "corpus.txt"), "--output", str(root / "vectors"), "--model", str(model), "--no-progress", "--workers", "1"]) == 0
    assert main(["neighbours", "build", str(root / "vectors"), "--output", str(root / "index"), "--no-progress"]) == 0
    return root


def commands(tmp_path, model_dir):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("We saw the play .\n")
    return {
        "embed": ["embed", str(corpus), "--output", str(tmp_path / "out"), "--model", str(model_dir), "--no-progress"],
        "similarity": ["similarity", "--model", str(model_dir), "--word", "play", "a play .", "the play ."],
        "export": ["export", "--model", str(model_dir), "--output", str(tmp_path / "hdf5")],
        "pretrain": [
            "pretrain", "--corpus", str(corpus), "--output", str(tmp_path / "pretrained"), "--init-from", str(model_dir),
            "--max-steps", "1", "--no-progress",
        ],
    }


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("command", ["embed", "similarity", "export", "pretrain"])
def test_a_damaged_model_is_named_with_what_was_expected(tmp_path, capsys, damage, command):
    model_dir = tmp_path / "model"
    shutil.copytree(DEFAULT_MODEL_DIR, model_dir)
    expected = damage(model_dir)
    code = main(commands(tmp_path, model_dir)[command])
    stderr = capsys.readouterr().err
    assert code == 2, stderr
    assert "Traceback" not in stderr
    error = stderr.strip().splitlines()[-1]
    assert error.startswith("error: ") and expected in error, error
    assert ("expected a complete safetensors file" if damage is truncate_weights else "expected the config.json saved with these weights") in error


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_model_of_an_index_is_named(tmp_path, capsys, index_of_a_model, damage):
    model_dir = tmp_path / "model"
    shutil.copytree(index_of_a_model / "model", model_dir)
    expected = damage(model_dir)
    code = main(["neighbours", "query", str(index_of_a_model / "index"), "--model", str(model_dir), "--sentence", "A play .", "--word", "play"])
    stderr = capsys.readouterr().err
    assert code == 2, stderr
    assert "Traceback" not in stderr and expected in stderr.strip().splitlines()[-1], stderr
