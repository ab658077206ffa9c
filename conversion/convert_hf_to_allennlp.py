"""Export an ELMo Hugging Face directory back to the original layout (``options.json`` + ``weights.hdf5``), usable by
bilm-tf and AllenNLP.

    python -m conversion.convert_hf_to_allennlp --model elmo-small --output elmo-small-original [--overwrite]

HDF5 -> HF -> HDF5 is bit-exact: every dataset is written back with the same shape, dtype and bytes. State the
original format cannot hold (a stored warm initial LSTM state, trained scalar-mix weights) is reported, not written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import h5py
import numpy as np
import torch

from elmo_hf import ELMoModel

from .hdf5_layout import ConversionError, model_state_not_in_hdf5, weight_mappings
from .output_directory import check_output_directory, staged_output_directory

OPTIONS_FILE_NAME = "options.json"
WEIGHTS_FILE_NAME = "weights.hdf5"


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
    """Write ``options.json`` and ``weights.hdf5`` into ``output_dir``; returns the names of state not exported."""
    model_dir, output_dir = Path(model_dir), Path(output_dir)
    check_output_directory(output_dir, overwrite)
    model = load_model(model_dir)
    with staged_output_directory(output_dir) as staging_dir:
        (staging_dir / OPTIONS_FILE_NAME).write_text(json.dumps(model.config.to_options_dict(), indent=2) + "\n", encoding="utf-8")
        write_weights(model, staging_dir / WEIGHTS_FILE_NAME)
    return state_not_exported(model)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, type=Path, help="an ELMo Hugging Face directory (config.json + weights)")
    parser.add_argument("--output", required=True, type=Path, help="directory to write options.json and weights.hdf5 into")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    args = parser.parse_args(argv)
    try:
        not_exported = convert_hf_to_allennlp(args.model, args.output, args.overwrite)
    except ConversionError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"Wrote {args.output / OPTIONS_FILE_NAME} and {args.output / WEIGHTS_FILE_NAME}")
    for name in not_exported:
        print(f"  not exported (the original format has no place for it): {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["convert_hf_to_allennlp", "main"]
