"""What every converter shares: its errors, the names of the files it writes, the kind of output directory it
writes, reading ``options.json`` and pushing a converted directory to the Hub."""

from __future__ import annotations

import json
from pathlib import Path

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
    "ALLENNLP_OPTIONS_FILE_NAME",
    "CONVERTED_MODEL_OUTPUT",
    "ConversionError",
    "HubPushError",
    "MODEL_CARD_FILE_NAME",
    "ORIGINAL_ELMOFORMANYLANGS_CONFIG_FILE_NAME",
    "ORIGINAL_OPTIONS_FILE_NAME",
    "VerificationError",
    "push_directory_to_hub",
    "read_options",
]
