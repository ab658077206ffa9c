"""The model a pre-training run continues from (``elmo-hf pretrain --init-from``, bilm-tf's ``restart.py`` on a new
corpus): an ``ELMoForPreTraining`` directory with its ``vocab.txt``, or a bilm-tf TensorFlow checkpoint converted on
the fly (the ``convert`` extra; its vocabulary is ``init_vocab``). The run keeps the model's architecture and
vocabulary, the new corpus gives the counts, and added words' softmax rows start as ``<UNK>``'s (``grow_softmax``).
What a user sees: docs/guide/pretraining.md, "Continuing a model (`--init-from`)".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers.tokenization_utils_base import TOKENIZER_CONFIG_FILE

from ..configuration_elmo import ELMoConfig
from ..corpus.vocabulary import UNK_WORD_ID, ELMoWordVocabulary
from ..modeling_elmo_pretraining import ELMoForPreTraining
from ..validation_elmo import ELMoHFError

CONFIG_FILE_NAME = "config.json"


class InitialModelError(ELMoHFError):
    """``init_from`` cannot be read as a model with a word softmax; the message names the path and what was expected."""


@dataclass
class InitialModel:
    """The model a run starts from: its configuration, its vocabulary (the softmax rows' words, in order), the word
    splitter its tokenizer records (``None`` for a TF checkpoint, which records none) and, when loaded with weights,
    its ``ELMoForPreTraining`` state."""

    source: Path
    config: ELMoConfig
    vocabulary: ELMoWordVocabulary
    state_dict: dict[str, torch.Tensor] | None = None
    word_splitter: str | None = None


def load_initial_model(init_from: str | Path, init_vocab: str | Path | None = None, with_weights: bool = True) -> InitialModel:
    """Read ``init_from`` (the module docstring); ``init_vocab`` replaces a directory's ``vocab.txt`` and is
    required for a TF checkpoint. Without ``with_weights`` only the configuration and vocabulary are read (cheap).
    Raises ``InitialModelError``."""
    init_from = Path(init_from)
    if (init_from / CONFIG_FILE_NAME).is_file():
        return _from_directory(init_from, Path(init_vocab) if init_vocab is not None else None, with_weights)
    return _from_tf_checkpoint(init_from, init_vocab, with_weights)


def _from_directory(directory: Path, init_vocab: Path | None, with_weights: bool) -> InitialModel:
    expected = (
        "expected an ELMoForPreTraining directory with the vocab.txt of its softmax (elmo-hf convert --checkpoint, or "
        "an elmo-hf pretrain output)"
    )
    try:
        config = ELMoConfig.from_pretrained(directory)
        if config.word_vocab_size == 0:
            raise InitialModelError(
                f"--init-from {directory} has no word softmax (an ELMoModel, e.g. a conversion of weights.hdf5, which "
                f"holds none): {expected}."
            )
        vocabulary = ELMoWordVocabulary.load(init_vocab if init_vocab is not None else directory)
    except (OSError, ValueError) as error:
        if isinstance(error, InitialModelError):
            raise
        raise InitialModelError(f"--init-from {directory}: {error}") from None
    if config.word_vocab_size != len(vocabulary):
        raise InitialModelError(
            f"--init-from {directory} has a softmax of {config.word_vocab_size:,} words, but its vocabulary has "
            f"{len(vocabulary):,}: {expected}."
        )
    initial = InitialModel(directory, config, vocabulary, word_splitter=recorded_word_splitter(directory))
    if with_weights:
        try:
            model, loading_info = ELMoForPreTraining.from_pretrained(directory, output_loading_info=True)
        except (OSError, ValueError) as error:  # no weights file, a damaged one
            raise InitialModelError(f"--init-from {directory}: its weights cannot be loaded: {error}") from None
        missing = sorted(loading_info.get("missing_keys", ()))
        if missing:
            raise InitialModelError(f"--init-from {directory} holds no trained weights for {missing}.")
        initial.state_dict = model.state_dict()
    return initial


def recorded_word_splitter(directory: Path) -> str | None:
    """The ``word_splitter`` of the tokenizer saved in ``directory``, or ``None`` when it saved none."""
    tokenizer_config = directory / TOKENIZER_CONFIG_FILE
    if not tokenizer_config.is_file():
        return None
    try:
        return json.loads(tokenizer_config.read_text(encoding="utf-8")).get("word_splitter")
    except (OSError, ValueError) as error:
        raise InitialModelError(f"--init-from {directory}: {tokenizer_config.name} cannot be read: {error}") from None


def _from_tf_checkpoint(checkpoint: Path, init_vocab: str | Path | None, with_weights: bool) -> InitialModel:
    try:
        from ..conversion.convert_tf_checkpoint import (
            load_tf_checkpoint,
            options_file_of,
            read_bilm_tf_vocabulary,
            read_checkpoint_options,
        )
        from ..conversion.tf_checkpoint import checkpoint_prefix
    except ImportError as error:
        raise InitialModelError(
            f"--init-from {checkpoint} is not a model directory ({CONFIG_FILE_NAME} missing); reading it as a bilm-tf "
            f"TensorFlow checkpoint needs the converter ({error}): pip install 'elmo-hf[convert]'"
        ) from None
    if init_vocab is None:
        raise InitialModelError(
            f"--init-from {checkpoint} is not a model directory ({CONFIG_FILE_NAME} missing); as a bilm-tf TensorFlow "
            "checkpoint it needs the vocabulary file it was trained with: --init-vocab FILE"
        )
    try:
        if with_weights:
            converted = load_tf_checkpoint(checkpoint, init_vocab)
            return InitialModel(checkpoint, converted.model.config, converted.vocabulary, converted.model.state_dict())
        _, config = read_checkpoint_options(options_file_of(checkpoint_prefix(checkpoint), None))
        vocabulary, _ = read_bilm_tf_vocabulary(Path(init_vocab))
    except ValueError as error:  # ConversionError
        raise InitialModelError(f"--init-from {checkpoint}: {error}") from None
    config.word_vocab_size = len(vocabulary)
    return InitialModel(checkpoint, config, vocabulary)


def grow_softmax(
    weight: torch.Tensor, bias: torch.Tensor, added_counts: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The softmax ``weight`` (V, P) and ``bias`` (V,) with one row per added word appended, the old rows unchanged:
    ``<UNK>``'s output vector and ``<UNK>``'s bias plus ``log(count / sum(added_counts))``, so the added words share
    ``<UNK>``'s probability by count (docs/guide/pretraining.md, "Continuing a model")."""
    counts = torch.as_tensor(added_counts, dtype=torch.float64)
    if counts.numel() == 0:
        return weight, bias
    if (counts <= 0).any():
        raise ValueError(f"added words need counts > 0, got {counts.tolist()}")
    shares = torch.log(counts / counts.sum()).to(bias.dtype)
    new_weight = weight[UNK_WORD_ID].expand(len(counts), -1)
    return torch.cat([weight, new_weight]), torch.cat([bias, bias[UNK_WORD_ID] + shares])


def initial_state_for(initial: InitialModel, vocabulary: ELMoWordVocabulary) -> dict[str, torch.Tensor]:
    """The initial model's state for a run whose vocabulary is ``initial.vocabulary`` counted on the new corpus,
    possibly with words added (``ELMoWordVocabulary.counted_on``): the softmax grown by ``grow_softmax``."""
    old_size = len(initial.vocabulary)
    if vocabulary.words[:old_size] != initial.vocabulary.words:
        raise ValueError("the run's vocabulary must start with the initial model's words, in order")
    added_counts = vocabulary.counts[old_size:] if vocabulary.counts is not None else ()
    state = dict(initial.state_dict)
    state["softmax.weight"], state["softmax.bias"] = grow_softmax(state["softmax.weight"], state["softmax.bias"], added_counts)
    return state


__all__ = ["InitialModel", "InitialModelError", "grow_softmax", "initial_state_for", "load_initial_model"]
