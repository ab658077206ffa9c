"""Export an ELMo Hugging Face directory back to the original layout (``options.json`` + ``weights.hdf5``, and
``vocab.txt`` when the directory has one): every dataset bit for bit (``elmo-hf export``). State the original format
cannot hold is reported, not written (docs/design/conversion.md).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import torch

from ..corpus.vocabulary import VOCABULARY_FILE_NAME  # bilm-tf's word vocabulary, as pretrain writes it
from ..modeling_elmo import ELMoModel
from ..storage.output_directory import OutputKind, staged_output_directory
from .hdf5_layout import model_state_not_in_hdf5, weight_mappings
from .shared import ALLENNLP_OPTIONS_FILE_NAME, ConversionError

WEIGHTS_FILE_NAME = "weights.hdf5"

HDF5_EXPORT_OUTPUT = OutputKind(
    name="hdf5-export",
    description="an elmo-hf export in the original layout",
    entries=(ALLENNLP_OPTIONS_FILE_NAME, WEIGHTS_FILE_NAME, VOCABULARY_FILE_NAME),
)


def load_model(model_dir: Path) -> ELMoModel:
    if not (model_dir / "config.json").is_file():
        raise ConversionError(f"{model_dir} is not an ELMo Hugging Face directory (no config.json).")
    return ELMoModel.from_pretrained(model_dir, dtype=torch.float32).eval()


def state_as_numpy(model: ELMoModel) -> dict[str, np.ndarray]:
    return {name: tensor.detach().cpu().numpy() for name, tensor in model.state_dict().items()}


def state_not_exported(model: ELMoModel) -> list[str]:
    """Names of model state that differs from what a freshly converted model holds and that the file cannot store."""
    state = state_as_numpy(model)
    return [
        name
        for name, default in model_state_not_in_hdf5(model.config).items()
        if not np.array_equal(state[name], default)
    ]


def write_weights(model: ELMoModel, weight_file: Path) -> None:
    state = state_as_numpy(model)
    with h5py.File(weight_file, "w") as weights:
        for mapping in weight_mappings(model.config):
            array = mapping.to_hdf5(*(state[name] for name in mapping.parameter_names))
            if array.shape != mapping.hdf5_shape:  # a bug in the layout table, never a user error
                raise AssertionError(f"{mapping.hdf5_name}: produced {array.shape}, layout says {mapping.hdf5_shape}")
            weights.create_dataset(mapping.hdf5_name, data=array.astype(np.float32, copy=False))


def convert_hf_to_allennlp(model_dir: str | Path, output_dir: str | Path, overwrite: bool = False) -> list[str]:
    """Write ``options.json``, ``weights.hdf5`` (and the model directory's ``vocab.txt``, if any) into ``output_dir``,
    atomically; returns the names of state not exported."""
    model_dir, output_dir = Path(model_dir), Path(output_dir)
    with staged_output_directory(output_dir, HDF5_EXPORT_OUTPUT, overwrite=overwrite, inputs=[model_dir]) as staging_dir:
        model = load_model(model_dir)
        try:
            options = model.config.to_options_dict()
        except ValueError as error:  # e.g. an ELMoForManyLangs conversion: a character vocabulary, a word embedding
            raise ConversionError(f"{model_dir}: {error}") from None
        (staging_dir / ALLENNLP_OPTIONS_FILE_NAME).write_text(json.dumps(options, indent=2) + "\n", encoding="utf-8")
        write_weights(model, staging_dir / WEIGHTS_FILE_NAME)
        if (model_dir / VOCABULARY_FILE_NAME).is_file():
            shutil.copyfile(model_dir / VOCABULARY_FILE_NAME, staging_dir / VOCABULARY_FILE_NAME)
    return state_not_exported(model)


__all__ = ["HDF5_EXPORT_OUTPUT", "WEIGHTS_FILE_NAME", "convert_hf_to_allennlp"]
