"""Convert a bilm-tf TensorFlow checkpoint (``model.ckpt-N`` + ``options.json`` + the vocabulary) to an
``ELMoForPreTraining`` directory, the biLM and its word softmax (``elmo-hf convert --checkpoint DIR --vocab FILE``).
Each variable is renamed to its ``dump_weights`` HDF5 name (``hdf5_name_of_variable``) and mapped with the one layout
table, so a checkpoint and its dump give the same biLM. What is read, reordered and refused:
docs/design/conversion.md.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..configuration_elmo import ELMoConfig, pretraining_fields_from_options
from ..corpus.vocabulary import SPECIAL_WORDS, ELMoWordVocabulary, vocabulary_file_words
from ..modeling_elmo_pretraining import ELMoForPreTraining
from ..storage.output_directory import staged_output_directory
from ..tokenization_elmo import ELMoTokenizer
from .hdf5_layout import ARCHITECTURE_DATASET_PATTERN, model_state_not_in_hdf5, weight_mappings
from .model_cards import conversion_command, render_model_card
from .shared import (
    ALLENNLP_OPTIONS_FILE_NAME, CONVERTED_MODEL_OUTPUT, ORIGINAL_OPTIONS_FILE_NAME, ConversionError, ConversionReport,
    check_finite, model_from_state, push_directory_to_hub, read_options, write_converted,
)
from .tf_checkpoint import TFCheckpoint

MODEL_SCOPE = "lm/"  # bilm-tf builds its LanguageModel under tf.variable_scope('lm')
SOFTMAX_PARAMETERS = {"lm/softmax/W": "softmax.weight", "lm/softmax/b": "softmax.bias"}
WORD_EMBEDDING_VARIABLE = "lm/embedding"  # bilm-tf's word-input model (no char_cnn), which elmo-hf does not run


# ---- names: checkpoint variable -> HDF5 dataset -----------------------------------------------------------------------


def dump_weights_name(variable: str) -> str:
    """bilm-tf's ``dump_weights`` rule (``_get_outname`` in bilm/training.py): the HDF5 dataset a checkpoint variable
    is written to. TF >= 1.2 names LSTM variables ``rnn/multi_rnn_cell/cell_j/lstm_cell/{kernel, bias,
    projection/kernel}``; the released files keep TF 1.0's ``RNN/MultiRNNCell/CellJ/LSTMCell/{W_0, B, W_P_0}``, and
    older checkpoints, already named so, pass through unchanged."""
    name = re.sub(":0$", "", variable)
    # bilm-tf calls name.lstrip('lm/'), which strips characters, not a prefix; for every variable under lm/ the
    # result is the same as removing the prefix.
    name = name.removeprefix(MODEL_SCOPE)
    name = re.sub("/rnn/", "/RNN/", name)
    name = re.sub("/multi_rnn_cell/", "/MultiRNNCell/", name)
    name = re.sub("/cell_", "/Cell", name)
    name = re.sub("/lstm_cell/", "/LSTMCell/", name)
    if "/RNN/" in name:
        if "projection" in name:
            name = re.sub("projection/kernel", "W_P_0", name)
        else:
            name = re.sub("/kernel", "/W_0", name)
            name = re.sub("/bias", "/B", name)
    return name


def hdf5_name_of_variable(variable: str) -> str:
    """The dataset name of ``hdf5_layout`` for a checkpoint variable: ``dump_weights_name``, plus one step: with
    ``n_layers: 1`` bilm-tf's graph has no MultiRNNCell (``RNN_k/rnn/lstm_cell/...``) and its dump says
    ``RNN_k/RNN/LSTMCell/...``, which neither bilm-tf's nor AllenNLP's loader reads; that is layer 0, stored as
    ``RNN_k/RNN/MultiRNNCell/Cell0/LSTMCell/...`` by every loadable file."""
    return re.sub(r"^(RNN_\d+/RNN)/LSTMCell/", r"\1/MultiRNNCell/Cell0/LSTMCell/", dump_weights_name(variable))


def is_optimizer_slot(name: str, names: set[str]) -> bool:
    """An optimizer's slot (``lm/char_embed/Adagrad``, ``.../Adam_1``): named after another variable of the
    checkpoint."""
    return "/" in name and name.rsplit("/", 1)[0] in names


# ---- options and vocabulary -------------------------------------------------------------------------------------------


def options_file_of(checkpoint_prefix: Path, options_file: str | Path | None) -> Path:
    """The given options file, or bilm-tf's ``options.json`` beside the checkpoint."""
    if options_file is not None:
        return Path(options_file)
    beside = checkpoint_prefix.parent / ALLENNLP_OPTIONS_FILE_NAME
    if not beside.is_file():
        raise ConversionError(
            f"no {ALLENNLP_OPTIONS_FILE_NAME} beside the checkpoint {checkpoint_prefix} (bilm-tf's train() writes it into the "
            "save directory): give it with --options."
        )
    return beside


def read_checkpoint_options(options_file: Path) -> tuple[dict, ELMoConfig]:
    """(the options as written, the biLM's config with the training settings of ``pretraining_fields_from_options``).
    Refuses the bilm-tf models elmo-hf does not run."""
    config = read_options(options_file)
    options = json.loads(options_file.read_text(encoding="utf-8"))
    if not options.get("bidirectional", False):
        raise ConversionError(
            f"{options_file}: bidirectional is not true: bilm-tf trained a forward-only LM (no backward LSTM RNN_1); "
            "elmo-hf's models are biLMs."
        )
    for name, value in pretraining_fields_from_options(options).items():
        setattr(config, name, value)
    return options, config


def read_bilm_tf_vocabulary(vocab_file: Path) -> tuple[ELMoWordVocabulary, list[int]]:
    """(the vocabulary with <S>, </S>, <UNK> at ids 0, 1, 2; for each of its ids the bilm-tf id, i.e. the line
    order of the file). bilm-tf strips each line, skips ``!!!MAXTERMID`` and finds the special tokens anywhere."""
    vocab_file = Path(vocab_file)
    try:
        words = [word for _, word in vocabulary_file_words(vocab_file)]
    except (FileNotFoundError, ValueError) as error:
        raise ConversionError(f"vocabulary: {error}") from None
    missing = [special for special in SPECIAL_WORDS if special not in words]
    if missing:
        raise ConversionError(f"{vocab_file} lacks the special token(s) {missing}: a bilm-tf vocabulary holds <S>, </S> and <UNK>.")
    specials = [words.index(special) for special in SPECIAL_WORDS]
    order = specials + [index for index in range(len(words)) if index not in set(specials)]
    try:
        return ELMoWordVocabulary([words[index] for index in order]), order
    except ValueError as error:
        raise ConversionError(f"{vocab_file}: {error}") from None


# ---- the model --------------------------------------------------------------------------------------------------------


@dataclass
class CheckpointModel:
    """A bilm-tf checkpoint read into elmo-hf: the model (eval mode), its vocabulary and what was left out."""

    model: ELMoForPreTraining
    vocabulary: ELMoWordVocabulary
    checkpoint_prefix: Path
    options_file: Path
    vocab_file: Path
    reordered_special_tokens: bool
    optimizer_slots: list[str] = field(default_factory=list)
    bookkeeping: list[str] = field(default_factory=list)
    unused_variables: list[str] = field(default_factory=list)


def read_variable(checkpoint: TFCheckpoint, name: str, shape: tuple[int, ...], why: str, allow_non_finite: bool) -> np.ndarray:
    """One float32 variable of the expected shape, finite unless allowed."""
    if name not in checkpoint.entries:
        raise ConversionError(f"checkpoint {checkpoint.prefix}: missing variable {name!r} (expected shape {shape}, {why}).")
    entry = checkpoint.entries[name]
    if entry.shape != shape:
        raise ConversionError(
            f"checkpoint {checkpoint.prefix} does not match options.json: variable {name!r} has shape {entry.shape}, "
            f"expected {shape} ({why})."
        )
    if entry.dtype != np.float32:
        raise ConversionError(f"checkpoint {checkpoint.prefix}: variable {name!r} has dtype {entry.dtype}, expected float32.")
    array = checkpoint.read(name)
    check_finite(array, f"checkpoint {checkpoint.prefix}: variable {name!r}", allow_non_finite)
    return array


def classify_variables(checkpoint: TFCheckpoint, used: set[str]) -> tuple[list[str], list[str], list[str]]:
    """(optimizer slots, bookkeeping outside lm/, other unused variables); refuses biLM variables options.json does
    not describe and bilm-tf's word-input embedding."""
    names = set(checkpoint.entries)
    slots, bookkeeping, unused = [], [], []
    for name in sorted(names - used):
        if is_optimizer_slot(name, names):
            slots.append(name)
        elif not name.startswith(MODEL_SCOPE):
            bookkeeping.append(name)
        else:
            unused.append(name)
    if WORD_EMBEDDING_VARIABLE in unused:
        raise ConversionError(
            f"checkpoint {checkpoint.prefix} holds {WORD_EMBEDDING_VARIABLE!r}: bilm-tf's word-input LM; elmo-hf's "
            "models read characters (options.json with char_cnn)."
        )
    mismatched = [name for name in unused if ARCHITECTURE_DATASET_PATTERN.match(hdf5_name_of_variable(name))]
    if mismatched:
        raise ConversionError(
            f"checkpoint {checkpoint.prefix} does not match options.json: it holds biLM variable(s) the options do not "
            f"describe: {mismatched} (check n_highway, n_layers, filters and projection_dim)."
        )
    return slots, bookkeeping, unused


def load_tf_checkpoint(
    checkpoint: str | Path,
    vocab_file: str | Path,
    options_file: str | Path | None = None,
    allow_non_finite: bool = False,
) -> CheckpointModel:
    """Read a bilm-tf checkpoint (save directory, prefix or one of its files), its ``options.json`` (default: beside
    it) and its vocabulary file into an ``ELMoForPreTraining`` in eval mode. Raises ``ConversionError``."""
    reader = TFCheckpoint(checkpoint)
    options_file = options_file_of(reader.prefix, options_file)
    options, config = read_checkpoint_options(options_file)
    vocabulary, bilm_tf_ids = read_bilm_tf_vocabulary(Path(vocab_file))

    variable_of_dataset = {hdf5_name_of_variable(name): name for name in reader.entries if name.startswith(MODEL_SCOPE)}
    state: dict[str, np.ndarray] = {}
    used = set()
    for mapping in weight_mappings(config):
        variable = variable_of_dataset.get(mapping.hdf5_name, MODEL_SCOPE + mapping.hdf5_name)
        array = read_variable(reader, variable, mapping.hdf5_shape, f"HDF5 dataset {mapping.hdf5_name}", allow_non_finite)
        state.update(zip(mapping.parameter_names, mapping.to_model(array)))
        used.add(variable)
    state.update(model_state_not_in_hdf5(config))

    softmax_rows = reader.entries["lm/softmax/b"].shape[0] if "lm/softmax/b" in reader.entries else None
    check_vocabulary_size(options_file, options, Path(vocab_file), len(vocabulary), softmax_rows, reader.prefix)
    config.word_vocab_size = len(vocabulary)
    config.architectures = [ELMoForPreTraining.__name__]
    weight = read_variable(reader, "lm/softmax/W", (len(vocabulary), config.projection_dim), "the LM softmax", allow_non_finite)
    bias = read_variable(reader, "lm/softmax/b", (len(vocabulary),), "the LM softmax", allow_non_finite)
    used.update(SOFTMAX_PARAMETERS)
    slots, bookkeeping, unused = classify_variables(reader, used)

    model_state = {f"elmo.{name}": array for name, array in state.items()}
    model_state["softmax.weight"], model_state["softmax.bias"] = weight[bilm_tf_ids], bias[bilm_tf_ids]
    return CheckpointModel(
        model_from_state(ELMoForPreTraining, config, model_state), vocabulary, reader.prefix, options_file, Path(vocab_file), bilm_tf_ids[:3] != [0, 1, 2],
        slots, bookkeeping, unused,
    )


def check_vocabulary_size(
    options_file: Path, options: dict, vocab_file: Path, vocabulary_size: int, softmax_rows: int | None, prefix: Path
) -> None:
    """The softmax has one row per vocabulary word, and options.json's n_tokens_vocab says how many."""
    if softmax_rows is None:
        raise ConversionError(f"checkpoint {prefix}: missing variable 'lm/softmax/b' (the LM softmax): not a bilm-tf training checkpoint?")
    declared = options.get("n_tokens_vocab")
    if declared is not None and declared != softmax_rows:
        raise ConversionError(
            f"{options_file} does not match the checkpoint: n_tokens_vocab is {declared}, the softmax has {softmax_rows} rows."
        )
    if vocabulary_size != softmax_rows:
        raise ConversionError(
            f"{vocab_file} has {vocabulary_size:,} words (bilm-tf's count: !!!MAXTERMID skipped) but the checkpoint's "
            f"softmax has {softmax_rows:,} rows: use the vocabulary file the model was trained with."
        )


# ---- the directory ----------------------------------------------------------------------------------------------------


@dataclass
class CheckpointConversionReport(ConversionReport):
    vocabulary_size: int
    reordered_special_tokens: bool
    checkpoint_prefix: Path
    optimizer_slots: list[str]
    bookkeeping: list[str]
    unused_variables: list[str]

    def describe(self) -> list[str]:
        config = self.config
        lines = [
            f"Converted bilm-tf checkpoint {self.checkpoint_prefix.name}: {config.num_lstm_layers} layers, cell "
            f"{config.lstm_cell_size}, projection {config.projection_dim}, softmax over {self.vocabulary_size:,} words; "
            f"{self.num_parameters:,} parameters -> {self.output_dir}"
        ]
        if self.reordered_special_tokens:
            lines.append("  vocabulary: <S>, </S>, <UNK> moved to ids 0, 1, 2 (softmax rows reordered the same way)")
        if self.optimizer_slots:
            lines.append(f"  not converted: {len(self.optimizer_slots)} optimizer slot(s) (e.g. {self.optimizer_slots[0]})")
        return lines + [f"  not converted (not part of the biLM or its softmax): {name}" for name in self.bookkeeping + self.unused_variables]


def checkpoint_card(converted: CheckpointModel, repo_id: str, command: str) -> str:
    config = converted.model.config
    provenance = "\n".join(
        [
            "Converted from a bilm-tf TensorFlow training checkpoint, with its word softmax:",
            "",
            f"- checkpoint: `{converted.checkpoint_prefix.name}`",
            f"- options: `{converted.options_file.name}` (kept as `{ORIGINAL_OPTIONS_FILE_NAME}`)",
            f"- vocabulary: `{converted.vocab_file.name}` ({len(converted.vocabulary):,} words, `vocab.txt`)",
        ]
    )
    parity = (
        "The biLM variables are copied exactly and mapped with the same layout table as the original HDF5 files: "
        "elmo-hf's tests check, on checkpoints written by bilm-tf itself, that converting a checkpoint and converting "
        "its `dump_weights` HDF5 file give identical models, and that the converted softmax reproduces bilm-tf's own "
        "test-mode loss. Score text with `elmo_hf.scoring.ELMoLanguageModelScorer`; continue pre-training with "
        "`elmo-hf pretrain --init-from`."
    )
    return render_model_card(
        config, converted.model.elmo.num_parameters(), repo_id, f"ELMo biLM with its LM softmax ({repo_id})",
        "An ELMo language model converted from a bilm-tf TensorFlow checkpoint, softmax included "
        "(`AutoModelForPreTraining`; `AutoModel` loads the biLM alone).",
        provenance, command, parity,
    )


def convert_tf_checkpoint(
    checkpoint: str | Path,
    vocab_file: str | Path,
    output_dir: str | Path,
    options_file: str | Path | None = None,
    overwrite: bool = False,
    allow_non_finite: bool = False,
    push_to_hub: str | None = None,
    private: bool = False,
    revision: str | None = None,
    token: str | None = None,
) -> CheckpointConversionReport:
    """Convert a bilm-tf checkpoint into ``output_dir`` (written beside it and renamed into place, under elmo-hf's
    output policy): ``config.json`` + ``model.safetensors`` (``ELMoForPreTraining``), the tokenizer, ``vocab.txt``,
    ``original_options.json`` and a model card; optionally push it to the Hub repo ``push_to_hub``, as the other
    converters do. Raises ``ConversionError`` (nothing written) or ``HubPushError``."""
    output_dir = Path(output_dir)
    inputs = [Path(checkpoint), Path(vocab_file)] + ([Path(options_file)] if options_file is not None else [])
    with staged_output_directory(output_dir, CONVERTED_MODEL_OUTPUT, overwrite=overwrite, inputs=inputs) as staging_dir:
        converted = load_tf_checkpoint(checkpoint, vocab_file, options_file, allow_non_finite)
        model = converted.model
        sources = ["--checkpoint", converted.checkpoint_prefix.name, "--vocab", converted.vocab_file.name]
        card = checkpoint_card(converted, push_to_hub or output_dir.name, conversion_command(sources, output_dir, push_to_hub))
        tokenizer = ELMoTokenizer(max_characters_per_token=model.config.max_characters_per_token)
        write_converted(staging_dir, model, tokenizer, card, {ORIGINAL_OPTIONS_FILE_NAME: converted.options_file})
        converted.vocabulary.save(staging_dir)
    report = CheckpointConversionReport(
        output_dir, model.config, model.num_parameters(), len(converted.vocabulary), converted.reordered_special_tokens,
        converted.checkpoint_prefix, converted.optimizer_slots, converted.bookkeeping, converted.unused_variables,
    )
    if push_to_hub is not None:
        report.pushed_to = push_directory_to_hub(output_dir, push_to_hub, private, revision, token)
    return report


__all__ = [
    "CheckpointConversionReport", "CheckpointModel", "convert_tf_checkpoint", "dump_weights_name",
    "hdf5_name_of_variable", "load_tf_checkpoint", "read_bilm_tf_vocabulary",
]
