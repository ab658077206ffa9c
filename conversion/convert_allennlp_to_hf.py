"""Convert an original ELMo (bilm-tf / AllenNLP ``options.json`` + ``weights.hdf5``) to a Hugging Face directory.

    python -m conversion.convert_allennlp_to_hf \\
        --options elmo_2x1024_128_2048cnn_1xhighway_options.json \\
        --weights elmo_2x1024_128_2048cnn_1xhighway_weights.hdf5 \\
        --output elmo-small [--verify REFERENCE_DIR] [--overwrite] [--push-to-hub REPO_ID [--private] [--revision REV]]

The output directory holds ``config.json``, ``model.safetensors``, the tokenizer files, the module files (remote
code), a model card (``README.md``) and the original options as ``original_options.json``, and loads with
``AutoModel.from_pretrained`` / ``AutoTokenizer.from_pretrained``. The sha256 of the weight file is checked against
the known hashes of the released files. Any problem with the inputs raises
``ConversionError`` before anything is written; the directory appears only once the conversion (and the optional
verification) has succeeded.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from elmo_hf import ELMoConfig, ELMoModel, ELMoTokenizer

from .hdf5_layout import ARCHITECTURE_DATASET_PATTERN, ConversionError, model_state_not_in_hdf5, weight_mappings
from .model_cards import ORIGINAL_OPTIONS_FILE_NAME, check_known_hash, conversion_card, conversion_command, sha256_of
from .output_directory import check_output_directory, staged_output_directory
from .reference_outputs import DEFAULT_TOLERANCE, ReferenceComparison, compare_with_reference_outputs

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
    pushed_to: str | None = None


def read_options(options_file: Path) -> ELMoConfig:
    """options.json -> ELMoConfig (training-only keys ignored)."""
    if not options_file.is_file():
        raise ConversionError(f"options file not found: {options_file}")
    try:
        options = json.loads(options_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConversionError(f"{options_file} is not valid JSON: {error}") from error
    try:
        return ELMoConfig.from_options_dict(options)
    except ValueError as error:
        raise ConversionError(f"{options_file}: {error}") from error


def list_datasets(weights: h5py.File) -> list[str]:
    names: list[str] = []
    weights.visititems(lambda name, item: names.append(name) if isinstance(item, h5py.Dataset) else None)
    return names


def read_dataset(weights: h5py.File, name: str, expected_shape: tuple[int, ...], weight_file: Path) -> np.ndarray:
    """One dataset as float32, checked against the shape options.json implies."""
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
    return dataset[...]


def read_state_dict(weight_file: Path, config: ELMoConfig) -> tuple[dict[str, torch.Tensor], list[str]]:
    """weights.hdf5 -> (model state dict, names of datasets the model does not use)."""
    if not weight_file.is_file():
        raise ConversionError(f"weight file not found: {weight_file}")
    if not h5py.is_hdf5(weight_file):
        raise ConversionError(f"{weight_file} is not an HDF5 file (expected the original ELMo weights.hdf5).")
    state: dict[str, np.ndarray] = {}
    with h5py.File(weight_file, "r") as weights:
        mappings = weight_mappings(config)
        for mapping in mappings:
            array = read_dataset(weights, mapping.hdf5_name, mapping.hdf5_shape, weight_file)
            state.update(zip(mapping.parameter_names, mapping.to_model(array)))
        used = {mapping.hdf5_name for mapping in mappings}
        unused = [name for name in list_datasets(weights) if name not in used]
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


def push_directory_to_hub(
    directory: Path, repo_id: str, private: bool = False, revision: str | None = None, token: str | None = None
) -> str:
    """Create the repo (and branch) if needed and upload the directory in one commit; returns the commit URL."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True)
    if revision is not None:
        api.create_branch(repo_id, branch=revision, exist_ok=True)
    commit = api.upload_folder(
        repo_id=repo_id, folder_path=directory, revision=revision, commit_message=f"Convert ELMo with elmo-hf ({directory.name})"
    )
    return str(commit.commit_url)


def convert_allennlp_to_hf(
    options_file: str | Path,
    weight_file: str | Path,
    output_dir: str | Path,
    overwrite: bool = False,
    verify_dir: str | Path | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    push_to_hub: str | None = None,
    private: bool = False,
    revision: str | None = None,
    token: str | None = None,
    command: str | None = None,
) -> ConversionReport:
    """Convert, optionally verify against reference outputs, write ``output_dir`` (atomically), optionally push it
    to the Hub repo ``push_to_hub``."""
    options_file, weight_file, output_dir = Path(options_file), Path(weight_file), Path(output_dir)
    verify_dir = Path(verify_dir) if verify_dir is not None else None
    check_output_directory(output_dir, overwrite)
    config = read_options(options_file)
    state_dict, unused = read_state_dict(weight_file, config)
    weights_hash_message = check_known_hash(weight_file, sha256_of(weight_file))
    model = build_model(config, state_dict)
    tokenizer = ELMoTokenizer(max_characters_per_token=config.max_characters_per_token)
    comparisons = []
    if verify_dir is not None:
        comparisons = compare_with_reference_outputs(model, tokenizer, verify_dir)
        failed = [comparison for comparison in comparisons if comparison.max_abs_difference > tolerance]
        if failed:
            raise ConversionError(
                "verification failed, nothing written: "
                + "; ".join(f"{c.name}: max |actual - expected| = {c.max_abs_difference:.3g} > {tolerance:g}" for c in failed)
            )
    command = command or conversion_command(options_file, weight_file, output_dir, push_to_hub)
    card = conversion_card(
        config,
        model.num_parameters(),
        options_file,
        weight_file,
        push_to_hub or output_dir.name,
        weights_hash_message,
        comparisons,
        verify_dir,
        command,
    )
    with staged_output_directory(output_dir) as staging_dir:
        model.save_pretrained(staging_dir)
        tokenizer.save_pretrained(staging_dir)
        (staging_dir / "README.md").write_text(card, encoding="utf-8")
        shutil.copyfile(options_file, staging_dir / ORIGINAL_OPTIONS_FILE_NAME)
    report = ConversionReport(output_dir, config, model.num_parameters(), unused, comparisons, weights_hash_message)
    if push_to_hub is not None:
        report.pushed_to = push_directory_to_hub(output_dir, push_to_hub, private, revision, token)
    return report


def print_report(report: ConversionReport, tolerance: float) -> None:
    config = report.config
    print(
        f"Converted ELMo: {config.num_lstm_layers} layers, cell {config.lstm_cell_size}, projection "
        f"{config.projection_dim}, {len(config.char_cnn_filters)} filters ({config.char_cnn_output_dim}), "
        f"{config.num_highway_layers} highway; {report.num_parameters:,} parameters -> {report.output_dir}"
    )
    print(f"  weights: {report.weights_hash_message}")
    for name in report.unused_datasets:
        print(f"  unused dataset (not part of the biLM, not converted): {name}")
    for comparison in report.comparisons:
        status = "ok" if comparison.max_abs_difference <= tolerance else "FAIL"
        print(
            f"  verify {comparison.name}: max |actual - expected| = {comparison.max_abs_difference:.3g} "
            f"(tolerance {tolerance:g}) {status}\n"
            f"      actual   {np.array2string(comparison.actual_sample, precision=6)}\n"
            f"      expected {np.array2string(comparison.expected_sample, precision=6)}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--options", required=True, type=Path, help="the original options.json")
    parser.add_argument("--weights", required=True, type=Path, help="the original weights.hdf5")
    parser.add_argument("--output", required=True, type=Path, help="directory to write (must not exist)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    parser.add_argument(
        "--verify",
        type=Path,
        metavar="DIR",
        help="reference outputs of the original code (sentences.json + lm_embeddings_K.hdf5, optionally vocab_test.txt + "
        "elmo_token_embeddings.hdf5, as in AllenNLP's test fixture); fail unless the converted model matches",
    )
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE, help="max abs difference for --verify")
    parser.add_argument("--push-to-hub", metavar="REPO_ID", help="upload the converted directory to this Hub repo (token: HF_TOKEN or `hf auth login`)")
    parser.add_argument("--private", action="store_true", help="create the Hub repo as private")
    parser.add_argument("--revision", help="push to this branch (created if missing) instead of main")
    args = parser.parse_args(argv)
    if (args.private or args.revision) and not args.push_to_hub:
        parser.error("--private and --revision only apply with --push-to-hub")
    command = shlex.join(["python", "-m", "conversion.convert_allennlp_to_hf", *(sys.argv[1:] if argv is None else argv)])
    try:
        report = convert_allennlp_to_hf(
            args.options,
            args.weights,
            args.output,
            args.overwrite,
            args.verify,
            args.tolerance,
            push_to_hub=args.push_to_hub,
            private=args.private,
            revision=args.revision,
            command=command,
        )
    except ConversionError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # huggingface_hub's HTTP errors are OSErrors; the directory is already written
        print(f"error: converted to {args.output}, but the push to the Hub failed: {error}", file=sys.stderr)
        return 1
    print_report(report, args.tolerance)
    if report.pushed_to:
        print(f"  pushed: {report.pushed_to}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["ConversionError", "ConversionReport", "convert_allennlp_to_hf", "read_options", "read_state_dict", "main"]
