"""Convert an original ELMo (bilm-tf / AllenNLP ``options.json`` + ``weights.hdf5``) to a Hugging Face directory
(``elmo-hf convert --options ... --weights ...``): every dataset checked against the shape ``options.json`` implies,
the sha256 checked against the released files', the directory written only once everything (``--verify`` included)
succeeded. The format and what is refused: docs/design/conversion.md.
"""

from __future__ import annotations

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
    CONVERTED_MODEL_OUTPUT, ORIGINAL_OPTIONS_FILE_NAME, ConversionError, ConversionReport, VerificationError,
    check_finite, model_from_state, push_directory_to_hub, read_options, write_converted,
)

try:
    import h5py
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError("The converter needs h5py: pip install 'elmo-hf[convert]'.") from error


@dataclass
class HDF5ConversionReport(ConversionReport):
    unused_datasets: list[str] = field(default_factory=list)
    comparisons: list[ReferenceComparison] = field(default_factory=list)
    weights_hash_message: str = ""
    tolerance: float = DEFAULT_TOLERANCE
    vocabulary_kept: bool = False

    def describe(self) -> list[str]:
        lines = [f"Converted ELMo: {self.architecture()}; {self.num_parameters:,} parameters -> {self.output_dir}"]
        lines.append(f"  weights: {self.weights_hash_message}")
        lines += [f"  unused dataset (not part of the biLM, not converted): {name}" for name in self.unused_datasets]
        for comparison in self.comparisons:
            status = "ok" if is_close(comparison.max_abs_difference, self.tolerance) else "FAIL"
            lines.append(
                f"  verify {comparison.name}: max |actual - expected| = {comparison.max_abs_difference:.3g} "
                f"(tolerance {self.tolerance:g}) {status}\n"
                f"      actual   {np.array2string(comparison.actual_sample, precision=6)}\n"
                f"      expected {np.array2string(comparison.expected_sample, precision=6)}"
            )
        if self.vocabulary_kept:
            lines.append("  vocab.txt kept from the archive (elmo-hf embed pre-fills its token-layer cache with these words)")
        return lines


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
    check_finite(array, f"{weight_file}: dataset {name!r}", allow_non_finite)
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
) -> HDF5ConversionReport:
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
        model = model_from_state(ELMoModel, config, state_dict)
        tokenizer = ELMoTokenizer(max_characters_per_token=config.max_characters_per_token)
        comparisons = [] if verify_dir is None else verified_comparisons(model, tokenizer, verify_dir, tolerance)
        sources = ["--zip", archive.name] if archive is not None else ["--options", options_file.name, "--weights", weight_file.name]
        card = conversion_card(
            config, model.num_parameters(), options_file, weight_file, push_to_hub or output_dir.name,
            weights_hash_message, comparisons, verify_dir, conversion_command(sources, output_dir, push_to_hub, verify_dir),
            archive,
        )
        copies = {ORIGINAL_OPTIONS_FILE_NAME: options_file, VOCABULARY_FILE_NAME: vocabulary_file}
        write_converted(staging_dir, model, tokenizer, card, copies)
    report = HDF5ConversionReport(
        output_dir, config, model.num_parameters(), unused_datasets=unused, comparisons=comparisons,
        weights_hash_message=weights_hash_message, tolerance=tolerance, vocabulary_kept=vocabulary_file is not None,
    )
    if push_to_hub is not None:
        report.pushed_to = push_directory_to_hub(output_dir, push_to_hub, private, revision, token)
    return report


__all__ = ["HDF5ConversionReport", "convert_allennlp_to_hf", "read_state_dict"]
