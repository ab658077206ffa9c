"""Convert an original ELMo (bilm-tf / AllenNLP ``options.json`` + ``weights.hdf5``) to a Hugging Face directory.

    elmo-hf convert --options elmo_2x1024_128_2048cnn_1xhighway_options.json \\
        --weights elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5 \\
        --output elmo-small [--verify REFERENCE_DIR] [--overwrite] [--push-to-hub REPO_ID [--private] [--revision REV]]

(the script ``python -m conversion.convert_allennlp_to_hf`` takes the same flags.) The output directory holds ``config.json``,
``model.safetensors``, the tokenizer files, the module files (remote code), a model card (``README.md``) and the
original options as ``original_options.json``, and loads with ``AutoModel.from_pretrained`` /
``AutoTokenizer.from_pretrained``. The sha256 of the weight file is checked against the known hashes of the released
files, and weights that are NaN or infinite are refused unless explicitly allowed. Any problem with the inputs raises
``ConversionError`` before anything is written; the directory appears only once the conversion (and the optional
verification) has succeeded, under elmo-hf's output policy (``elmo_hf.storage``: locked while written, replaced by
``--overwrite`` only if it is an earlier conversion).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..configuration_elmo import ELMoConfig
from ..corpus.vocabulary import VOCABULARY_FILE_NAME
from ..modeling_elmo import ELMoModel
from ..storage.files import sha256_of_file
from ..storage.output_directory import staged_output_directory
from ..tokenization_elmo import ELMoTokenizer
from ..validation_elmo import is_close
from .hdf5_layout import ARCHITECTURE_DATASET_PATTERN, model_state_not_in_hdf5, weight_mappings
from .model_cards import check_known_hash, conversion_card, conversion_command
from .reference_outputs import DEFAULT_TOLERANCE, ReferenceComparison, compare_with_reference_outputs
from .shared import (
    CONVERTED_MODEL_OUTPUT,
    MODEL_CARD_FILE_NAME,
    ORIGINAL_OPTIONS_FILE_NAME,
    ConversionError,
    VerificationError,
    push_directory_to_hub,
    read_options,
)

try:
    import h5py
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError("The converter needs h5py: pip install 'elmo-hf[convert]'.") from error


@dataclass
class ConversionReport:
    output_dir: Path
    config: ELMoConfig
    num_parameters: int
    unused_datasets: list[str] = field(default_factory=list)
    comparisons: list[ReferenceComparison] = field(default_factory=list)
    weights_hash_message: str = ""
    tolerance: float = DEFAULT_TOLERANCE
    pushed_to: str | None = None


def list_datasets(weights: h5py.File) -> list[str]:
    names: list[str] = []
    weights.visititems(lambda name, item: names.append(name) if isinstance(item, h5py.Dataset) else None)
    return names


def read_dataset(
    weights: h5py.File, name: str, expected_shape: tuple[int, ...], weight_file: Path, allow_non_finite: bool = False
) -> np.ndarray:
    """One dataset as float32, checked against the shape options.json implies and, unless ``allow_non_finite``,
    refused when it holds NaN or infinite values."""
    if name not in weights or not isinstance(weights[name], h5py.Dataset):
        raise ConversionError(f"{weight_file}: missing dataset {name!r} (expected shape {expected_shape} from options.json).")
    dataset = weights[name]
    if tuple(dataset.shape) != expected_shape:
        raise ConversionError(
            f"{weight_file} does not match options.json: dataset {name!r} has shape {tuple(dataset.shape)}, "
            f"expected {expected_shape}."
        )
    if dataset.dtype != np.float32:
        raise ConversionError(f"{weight_file}: dataset {name!r} has dtype {dataset.dtype}, expected float32.")
    array = dataset[...]
    non_finite = int(np.count_nonzero(~np.isfinite(array)))
    if non_finite and not allow_non_finite:
        raise ConversionError(
            f"{weight_file}: dataset {name!r} holds {non_finite:,} NaN or infinite value(s) of {array.size:,}: a damaged "
            "or diverged model. Pass --allow-non-finite to convert it anyway."
        )
    return array


def read_state_dict(
    weight_file: Path, config: ELMoConfig, allow_non_finite: bool = False
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """weights.hdf5 -> (model state dict, names of datasets the model does not use)."""
    if not weight_file.is_file():
        raise ConversionError(f"weight file not found: {weight_file}")
    if not h5py.is_hdf5(weight_file):
        raise ConversionError(f"{weight_file} is not an HDF5 file (expected the original ELMo weights.hdf5).")
    state: dict[str, np.ndarray] = {}
    mappings = weight_mappings(config)
    try:
        with h5py.File(weight_file, "r") as weights:
            for mapping in mappings:
                array = read_dataset(weights, mapping.hdf5_name, mapping.hdf5_shape, weight_file, allow_non_finite)
                state.update(zip(mapping.parameter_names, mapping.to_model(array)))
            used = {mapping.hdf5_name for mapping in mappings}
            unused = [name for name in list_datasets(weights) if name not in used]
    except OSError as error:  # h5py reports truncated or damaged files as OSError
        raise ConversionError(f"{weight_file} cannot be read as HDF5 (truncated or damaged?): {error}") from None
    mismatched = [name for name in unused if ARCHITECTURE_DATASET_PATTERN.match(name)]
    if mismatched:
        raise ConversionError(
            f"{weight_file} does not match options.json: it holds biLM dataset(s) the options do not describe: "
            f"{mismatched} (check n_highway, n_layers, filters and projection_dim)."
        )
    state.update(model_state_not_in_hdf5(config))
    return {name: torch.from_numpy(np.ascontiguousarray(array)) for name, array in state.items()}, unused


def build_model(config: ELMoConfig, state_dict: dict[str, torch.Tensor]) -> ELMoModel:
    model = ELMoModel(config)
    model.load_state_dict(state_dict, strict=True)
    return model.eval()


def verified_comparisons(model: ELMoModel, tokenizer: ELMoTokenizer, verify_dir: Path, tolerance: float) -> list:
    """The model's outputs compared with the reference outputs in ``verify_dir``; ``VerificationError`` naming each
    output further than ``tolerance`` from its reference (so nothing is written)."""
    comparisons = compare_with_reference_outputs(model, tokenizer, verify_dir)
    failed = [comparison for comparison in comparisons if not is_close(comparison.max_abs_difference, tolerance)]
    if failed:
        raise VerificationError(
            "verification failed, nothing written: "
            + "; ".join(f"{c.name}: max |actual - expected| = {c.max_abs_difference:.3g} > {tolerance:g}" for c in failed)
        )
    return comparisons


def convert_allennlp_to_hf(
    options_file: str | Path,
    weight_file: str | Path,
    output_dir: str | Path,
    overwrite: bool = False,
    verify_dir: str | Path | None = None,
    tolerance: float | None = None,
    push_to_hub: str | None = None,
    private: bool = False,
    revision: str | None = None,
    token: str | None = None,
    allow_non_finite: bool = False,
    vocabulary_file: str | Path | None = None,
    archive: str | Path | None = None,
) -> ConversionReport:
    """Convert, optionally verify against reference outputs, write ``output_dir`` (atomically), optionally push it
    to the Hub repo ``push_to_hub``. ``vocabulary_file`` (a word list, most frequent first) is copied into the output
    as ``vocab.txt``; ``archive`` names the file the inputs were extracted from (``nlpl_zip``), for the model card
    and the output policy. Raises ``ConversionError`` (nothing written) or ``HubPushError`` (written, not pushed)."""
    options_file, weight_file, output_dir = Path(options_file), Path(weight_file), Path(output_dir)
    verify_dir = Path(verify_dir) if verify_dir is not None else None
    archive = Path(archive) if archive is not None else None
    tolerance = DEFAULT_TOLERANCE if tolerance is None else tolerance
    inputs = [options_file, weight_file] + [path for path in (verify_dir, archive) if path is not None]
    with staged_output_directory(output_dir, CONVERTED_MODEL_OUTPUT, overwrite=overwrite, inputs=inputs) as staging_dir:
        config = read_options(options_file)
        state_dict, unused = read_state_dict(weight_file, config, allow_non_finite)
        weights_hash_message = check_known_hash(weight_file, sha256_of_file(weight_file))
        model = build_model(config, state_dict)
        tokenizer = ELMoTokenizer(max_characters_per_token=config.max_characters_per_token)
        comparisons = [] if verify_dir is None else verified_comparisons(model, tokenizer, verify_dir, tolerance)
        card = conversion_card(
            config,
            model.num_parameters(),
            options_file,
            weight_file,
            push_to_hub or output_dir.name,
            weights_hash_message,
            comparisons,
            verify_dir,
            conversion_command(options_file, weight_file, output_dir, push_to_hub, verify_dir, archive),
            archive,
        )
        model.save_pretrained(staging_dir)
        tokenizer.save_pretrained(staging_dir)
        (staging_dir / MODEL_CARD_FILE_NAME).write_text(card, encoding="utf-8")
        shutil.copyfile(options_file, staging_dir / ORIGINAL_OPTIONS_FILE_NAME)
        if vocabulary_file is not None:
            shutil.copyfile(vocabulary_file, staging_dir / VOCABULARY_FILE_NAME)
    report = ConversionReport(output_dir, config, model.num_parameters(), unused, comparisons, weights_hash_message, tolerance)
    if push_to_hub is not None:
        report.pushed_to = push_directory_to_hub(output_dir, push_to_hub, private, revision, token)
    return report


def print_report(report: ConversionReport) -> None:
    config, tolerance = report.config, report.tolerance
    print(
        f"Converted ELMo: {config.num_lstm_layers} layers, cell {config.lstm_cell_size}, projection "
        f"{config.projection_dim}, {len(config.char_cnn_filters)} filters ({config.char_cnn_output_dim}), "
        f"{config.num_highway_layers} highway; {report.num_parameters:,} parameters -> {report.output_dir}"
    )
    print(f"  weights: {report.weights_hash_message}")
    for name in report.unused_datasets:
        print(f"  unused dataset (not part of the biLM, not converted): {name}")
    for comparison in report.comparisons:
        status = "ok" if is_close(comparison.max_abs_difference, tolerance) else "FAIL"
        print(
            f"  verify {comparison.name}: max |actual - expected| = {comparison.max_abs_difference:.3g} "
            f"(tolerance {tolerance:g}) {status}\n"
            f"      actual   {np.array2string(comparison.actual_sample, precision=6)}\n"
            f"      expected {np.array2string(comparison.expected_sample, precision=6)}"
        )


__all__ = ["ConversionReport", "convert_allennlp_to_hf", "print_report", "read_state_dict"]
