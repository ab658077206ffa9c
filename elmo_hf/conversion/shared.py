"""What every converter shares: its errors, the names of the files it writes, the kind of output directory it
writes, reading ``options.json``, the checks every weight goes through, writing the converted directory, its report
and pushing it to the Hub. The steps of a conversion and its sources: docs/design/conversion.md."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..configuration_elmo import ELMoConfig
from ..corpus.vocabulary import VOCABULARY_FILE_NAME
from ..storage.output_directory import MARKER_NAME, OutputKind
from ..characters_elmo import CHARACTER_VOCABULARY_FILE_NAME
from ..validation_elmo import ELMoHFError

ALLENNLP_OPTIONS_FILE_NAME = "options.json"  # the original format's options (bilm-tf / AllenNLP), beside weights.hdf5
ORIGINAL_OPTIONS_FILE_NAME = "original_options.json"  # the input options.json, kept next to converted weights
MODEL_CARD_FILE_NAME = "README.md"  # the Hub's model card, written by every converter
# An ELMoForManyLangs model's network configuration, kept next to its converted weights.
ORIGINAL_ELMOFORMANYLANGS_CONFIG_FILE_NAME = "original_elmoformanylangs_config.json"


class ConversionError(ELMoHFError):
    """Bad converter input: the message names the file, dataset or option and what was expected."""


class VerificationError(ConversionError):
    """The converted model does not reproduce the reference outputs (``--verify``); nothing was written."""


class HubPushError(ELMoHFError, OSError):
    """The conversion was written, but uploading it to the Hub failed."""


# What every converter (HDF5, NLPL zip, TF checkpoint, ELMoForManyLangs) may write, so that --overwrite of one
# converter's output by another is never refused for a file elmo-hf wrote.
CONVERTED_MODEL_OUTPUT = OutputKind(
    name="converted-model",
    description="an elmo-hf converted model",
    # vocab.txt: the LM softmax's words, written by convert_tf_checkpoint (a bilm-tf checkpoint has a softmax), or
    # the training vocabulary of an NLPL archive (nlpl_zip), which pre-fills the embedder's token-layer cache.
    # character_vocabulary.json and the ELMoForManyLangs configuration: convert_elmoformanylangs.
    entries=(
        "config.json", "model.safetensors", "tokenizer_config.json", "*.py", MODEL_CARD_FILE_NAME, ORIGINAL_OPTIONS_FILE_NAME,
        VOCABULARY_FILE_NAME, CHARACTER_VOCABULARY_FILE_NAME, ORIGINAL_ELMOFORMANYLANGS_CONFIG_FILE_NAME,
    ),
)


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


def check_finite(array: np.ndarray, where: str, allow_non_finite: bool) -> None:
    """``ConversionError`` naming ``where`` (the file and the array in it) when ``array`` holds NaN or infinite
    values, unless ``allow_non_finite``."""
    non_finite = int(np.count_nonzero(~np.isfinite(array)))
    if non_finite and not allow_non_finite:
        raise ConversionError(
            f"{where} holds {non_finite:,} NaN or infinite value(s) of {array.size:,}: a damaged or diverged model. "
            "Pass --allow-non-finite to convert it anyway."
        )


def model_from_state(model_class, config: ELMoConfig, state: dict) -> torch.nn.Module:
    """``model_class(config)`` holding ``state`` (NumPy arrays or tensors, every parameter: loaded strictly), in eval
    mode."""
    model = model_class(config)
    tensors = {
        name: value if isinstance(value, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(value))
        for name, value in state.items()
    }
    model.load_state_dict(tensors, strict=True)
    return model.eval()


def write_converted(staging_dir: Path, model, tokenizer, card: str, copies: dict[str, Path | None] | None = None) -> None:
    """The converted directory: the model, its tokenizer, the model card, and each input of ``copies`` (output name ->
    input file, skipped when None) copied as it is."""
    model.save_pretrained(staging_dir)
    tokenizer.save_pretrained(staging_dir)
    (staging_dir / MODEL_CARD_FILE_NAME).write_text(card, encoding="utf-8")
    for name, source in (copies or {}).items():
        if source is not None:
            shutil.copyfile(source, staging_dir / name)


@dataclass
class ConversionReport:
    """What a conversion wrote and found; each source adds its findings and says them in ``describe()``, which
    ``elmo-hf convert`` prints."""

    output_dir: Path
    config: ELMoConfig
    num_parameters: int
    pushed_to: str | None = field(default=None, kw_only=True)

    def describe(self) -> list[str]:
        raise NotImplementedError

    def architecture(self) -> str:
        """The network in one phrase: layers, cell, projection, filters, highway."""
        config = self.config
        return (
            f"{config.num_lstm_layers} layers, cell {config.lstm_cell_size}, projection {config.projection_dim}, "
            f"{len(config.char_cnn_filters)} filters ({config.char_cnn_output_dim}), {config.num_highway_layers} highway"
        )


def push_directory_to_hub(
    directory: Path, repo_id: str, private: bool = False, revision: str | None = None, token: str | None = None
) -> str:
    """Create the repo (and branch) if needed and upload the directory in one commit (without elmo-hf's local
    ownership marker); returns the commit URL. Failures raise ``HubPushError`` naming the repository."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        if revision is not None:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        commit = api.upload_folder(
            repo_id=repo_id, folder_path=directory, revision=revision, ignore_patterns=[MARKER_NAME],
            commit_message=f"Convert ELMo with elmo-hf ({directory.name})",
        )
    except OSError as error:  # huggingface_hub's HTTP errors are OSErrors
        raise HubPushError(f"converted to {directory}, but the push to the Hub repository {repo_id} failed: {error}") from error
    return str(commit.commit_url)


__all__ = [
    "ALLENNLP_OPTIONS_FILE_NAME", "CONVERTED_MODEL_OUTPUT", "ConversionError", "ConversionReport", "HubPushError",
    "MODEL_CARD_FILE_NAME", "ORIGINAL_ELMOFORMANYLANGS_CONFIG_FILE_NAME", "ORIGINAL_OPTIONS_FILE_NAME",
    "VerificationError", "check_finite", "model_from_state", "push_directory_to_hub", "read_options", "write_converted",
]
