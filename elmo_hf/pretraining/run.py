"""Pre-train an ELMo biLM on text: the library behind ``elmo-hf pretrain``.

    from elmo_hf.pretraining import PretrainingOptions, pretrain

    report = pretrain(PretrainingOptions(corpus=["tinyshakespeare.txt"], output_dir="elmo-shakespeare", config="small"))
    print(report.describe())

Steps (docs/guide/pretraining.md, "Pre-training (elmo-hf pretrain)"):

1. Sentences from text files (one sentence per line, split by the tokenizer's word splitter) and/or ``.conllu``
   files; the held-out sentences are the ``held_out`` files or a seeded random ``held_out_fraction`` of the corpus.
2. The word vocabulary of the LM softmax is built from the TRAINING sentences only (``min_count``,
   ``max_vocab_size``) and saved as ``vocab.txt`` + ``vocab_counts.tsv``.
3. ``transformers.Trainer`` trains [`ELMoForPreTraining`] in bilm-tf's regime (``"windowed"``: fixed windows over
   one token stream per batch row, LSTM state carried between batches) or per sentence (``"sentence"``), with
   periodic checkpoints, evaluation of the exact held-out perplexity (``bilm_perplexity_metrics``) and resumption.
4. The final model, tokenizer, vocabulary and a report (``pretraining_report.json``: exact train / held-out
   perplexity per direction against the unigram baseline of the vocabulary counts) are written to the output
   directory; optionally the biLM is exported to the original ``options.json`` + ``weights.hdf5``.
"""

from __future__ import annotations

import json
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from datasets import Dataset
from transformers import TrainerCallback, TrainingArguments, default_data_collator, set_seed
from transformers.trainer_utils import get_last_checkpoint
from transformers.utils import logging as transformers_logging

from ..configuration_elmo import ELMoConfig
from ..corpus.readers import CorpusError
from ..corpus.sentences import load_sentences
from ..modeling_elmo_pretraining import ELMoForPreTraining, bilm_perplexity_metrics
from ..storage.output_directory import OutputKind, open_output_directory
from ..tokenization_elmo import DEFAULT_WORD_SPLITTER, WORD_SPLITTERS, ELMoTokenizer, build_word_splitter
from ..validation_elmo import check_choice, check_int, check_number
from .data import DataCollatorForBiLM, WindowedBiLMStream
from .initial_model import InitialModel, InitialModelError, initial_state_for, load_initial_model
from .trainer import ELMoPreTrainingTrainer
from .vocabulary import BOS_WORD_ID, COUNTS_FILE_NAME, EOS_WORD_ID, VOCABULARY_FILE_NAME, ELMoWordVocabulary

logger = logging.getLogger(__name__)

# Architectures by name; every other field keeps ELMoConfig's default. word_vocab_size comes from the vocabulary.
CONFIG_PRESETS: dict[str, dict[str, Any]] = {
    # Seconds per hundred steps on two CPU cores: for smoke tests and CI.
    "tiny": dict(
        char_embedding_dim=8,
        char_cnn_filters=[[1, 16], [2, 16], [3, 32]],
        num_highway_layers=1,
        projection_dim=32,
        lstm_cell_size=64,
        num_lstm_layers=2,
        cell_clip=3.0,
        projection_clip=3.0,
        use_skip_connections=True,
        lm_dropout=0.0,
    ),
    # The demo model: the released models' shape (char CNN -> highway -> projection, 2 projected LSTM layers with
    # clipping and a skip connection), scaled down to train on a CPU.
    "small": dict(
        char_embedding_dim=16,
        char_cnn_filters=[[1, 32], [2, 32], [3, 64], [4, 128], [5, 128], [6, 128]],
        num_highway_layers=1,
        projection_dim=128,
        lstm_cell_size=512,
        num_lstm_layers=2,
        cell_clip=3.0,
        projection_clip=3.0,
        use_skip_connections=True,
        lm_dropout=0.1,
    ),
}
DEFAULT_CONFIG = "small"  # the architecture of a new model when no config is given
REGIMES = ("windowed", "sentence")
# Optimizer name -> (transformers `optim`, default learning rate). See docs/pretraining.md for the comparison.
OPTIMIZERS: dict[str, tuple[str, float]] = {"adam": ("adamw_torch", 5e-3), "adagrad": ("adagrad", 0.2)}
LR_SCHEDULERS = ("linear", "constant", "cosine")

OPTIONS_FILE_NAME = "pretraining_options.json"
REPORT_FILE_NAME = "pretraining_report.json"
HDF5_DIRECTORY_NAME = "hdf5"
CHECKPOINT_PREFIX = "checkpoint-"
# Options a resumed run may change: how long and how often, not what is trained.
OPTIONS_CHANGEABLE_ON_RESUME = frozenset(
    {
        "output_dir",
        "max_steps",
        "epochs",
        "save_steps",
        "save_total_limit",
        "eval_steps",
        "logging_steps",
        "max_time_minutes",
        "export_hdf5",
        "progress",
        "resume",
        "overwrite",
        "handle_interrupt",
        "num_threads",
        "dataset_cache_dir",
    }
)


class PretrainingError(ValueError):
    """A problem with the options, the inputs or the output directory, found before training starts."""


class PretrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped training after the step in progress; a checkpoint was saved (``checkpoint``) to resume from."""

    def __init__(self, output_dir: Path, checkpoint: Path | None):
        self.output_dir = output_dir
        self.checkpoint = checkpoint
        where = f"checkpoint {checkpoint.name} saved" if checkpoint is not None else "no checkpoint saved yet"
        super().__init__(f"pre-training interrupted ({where} in {output_dir})")


@dataclass
class PretrainingOptions:
    r"""
    Everything `pretrain` needs. Paths may be `str` or `Path`.

    Args:
        corpus (`list`): training files: text (one sentence per line) and/or `.conllu`.
        output_dir: where the model, tokenizer, vocabulary, checkpoints and report go. It must be empty or absent
            unless `resume` (continue from its latest checkpoint) or `overwrite` (delete an earlier pre-training run
            there; a directory without `pretraining_options.json` is never deleted).
        config (`str`, *optional*): `"tiny"`, `"small"` (`CONFIG_PRESETS`; the default), or a JSON file:
            `ELMoConfig` fields (a `config.json`) or an original `options.json` (its training keys `dropout` and
            `n_negative_samples_batch` become `lm_dropout` and `softmax_num_samples`). Not with `init_from`.
        held_out (`list`, *optional*): held-out files; without them `held_out_fraction` of the corpus sentences
            (seeded random sample) is held out.
        held_out_fraction (`float`, defaults to 0.05).
        word_splitter (`str`, *optional*): how text lines become words (`ELMoTokenizer`'s splitters; `"kiwi"` /
            `"mecab"` for Korean morphemes need their extra). Saved in the tokenizer config. Defaults to the splitter
            an `init_from` directory's tokenizer records (another one is warned about), else `"moses"`.
        max_characters_per_token (`int`, *optional*): character slots of a new model's words (begin- and end-of-word
            included, so a word keeps `N - 2` UTF-8 bytes; a Hangul syllable takes 3); defaults to the config's (50
            for the presets). At least the widest character filter; a resumed run must keep it; not with
            `init_from` (the initial model keeps its slots).
        text_column / words_column (`str`, *optional*): the column of raw sentences / lists of words in structured
            corpora (JSON lines, CSV, Parquet, saved datasets); by default `text`, and the words of CoNLL-U files.
        min_count (`int`, defaults to 2), max_vocab_size (`int`, *optional*): vocabulary of the LM softmax; rarer
            words are `<UNK>`. `max_vocab_size` counts `<S>`, `</S>`, `<UNK>`.
        regime (`str`, defaults to `"windowed"`): `"windowed"` (bilm-tf: windows of `window_size` positions, LSTM
            state carried across batches) or `"sentence"` (each sentence from the initial state).
        window_size (`int`, defaults to 20), batch_size (`int`, defaults to 32): rows per batch (sentences per batch
            in the sentence regime).
        max_steps (`int`, *optional*): optimizer steps; without it, `epochs` epochs.
        epochs (`float`, defaults to 1.0).
        optimizer (`str`, defaults to `"adam"`): `"adam"` (AdamW, no weight decay) or `"adagrad"` (bilm-tf's).
        learning_rate (`float`, *optional*): defaults to 5e-3 (adam) or 0.2 (adagrad).
        lr_scheduler (`str`, defaults to `"linear"`): after the warm-up, `"linear"` decay to 0, `"constant"` or
            `"cosine"`.
        warmup_ratio (`float`, defaults to 0.02): linear warm-up over this fraction of the steps.
        max_grad_norm (`float`, defaults to 10.0): global gradient-norm clipping (bilm-tf's `all_clip_norm_val`).
        softmax_samples (`int`, *optional*): sampled softmax in training with this many negatives (0: full softmax);
            defaults to the config's `softmax_num_samples`.
        dropout (`float`, *optional*): `lm_dropout`; defaults to the config's.
        save_steps (`int`, defaults to 500), save_total_limit (`int`, defaults to 2): checkpoints.
        eval_steps (`int`, defaults to 500): held-out perplexity every this many steps and before the first (0: only
            at the end).
        logging_steps (`int`, defaults to 50).
        train_eval_sentences (`int`, defaults to 2000): size of the fixed (seeded) sample of training sentences
            whose perplexity the report gives.
        seed (`int`, defaults to 0): model initialisation, held-out split, sentence order, dropout.
        max_time_minutes (`float`, *optional*): stop (with a checkpoint, the final evaluation and save) after
            the first step past this wall time.
        export_hdf5 (`bool`): also write `output_dir/hdf5/` (`options.json`, `weights.hdf5`, `vocab.txt`) with the
            repository's `conversion` package.
        progress (`bool`, defaults to `True`): `Trainer`'s progress bar (`False`: its logs printed as lines).
        handle_interrupt (`bool`, defaults to `True`): the first Ctrl-C (SIGINT) finishes the step in progress,
            saves a checkpoint and raises `PretrainingInterrupted`; a second one stops at once.
        num_threads (`int`, *optional*): `torch.set_num_threads` for the run (process-wide, restored afterwards). On
            a CPU shared with other jobs, 1 thread can be many times faster than oversubscribed cores.
        dataset_cache_dir (*optional*): `datasets` cache for the loaded sentences.
        init_from (*optional*): continue pre-training this model instead of a new one (bilm-tf's `restart.py`): an
            `ELMoForPreTraining` directory with its `vocab.txt` (`elmo-hf convert --checkpoint`, an earlier run) or a
            bilm-tf TensorFlow checkpoint (save directory or `model.ckpt-N`, `options.json` beside it). Its
            architecture and vocabulary are kept (no `config`); the corpus gives the vocabulary's counts.
        init_vocab (*optional*): the vocabulary file of an `init_from` TF checkpoint (or one replacing a directory's).
        add_words (`bool`): with `init_from`, append the corpus words the model's vocabulary lacks (`min_count`,
            `max_vocab_size` apply to them); their softmax rows start as `<UNK>`'s (`initial_model.grow_softmax`).
    """

    corpus: Sequence[str | Path]
    output_dir: str | Path
    config: str | None = None
    held_out: Sequence[str | Path] | None = None
    held_out_fraction: float = 0.05
    word_splitter: str | None = None
    max_characters_per_token: int | None = None
    text_column: str | None = None
    words_column: str | None = None
    min_count: int = 2
    max_vocab_size: int | None = None
    regime: str = "windowed"
    window_size: int = 20
    batch_size: int = 32
    max_steps: int | None = None
    epochs: float = 1.0
    optimizer: str = "adam"
    learning_rate: float | None = None
    lr_scheduler: str = "linear"
    warmup_ratio: float = 0.02
    max_grad_norm: float = 10.0
    softmax_samples: int | None = None
    dropout: float | None = None
    save_steps: int = 500
    save_total_limit: int | None = 2
    eval_steps: int = 500
    logging_steps: int = 50
    train_eval_sentences: int = 2000
    seed: int = 0
    max_time_minutes: float | None = None
    resume: bool = False
    overwrite: bool = False
    export_hdf5: bool = False
    progress: bool = True
    handle_interrupt: bool = True
    num_threads: int | None = None
    dataset_cache_dir: str | Path | None = None
    init_from: str | Path | None = None
    init_vocab: str | Path | None = None
    add_words: bool = False

    def __post_init__(self) -> None:
        try:
            self._check()
        except ValueError as error:
            if isinstance(error, PretrainingError):
                raise
            raise PretrainingError(str(error)) from None

    def _check(self) -> None:
        if isinstance(self.corpus, (str, Path)):
            self.corpus = [self.corpus]
        # Absolute paths, so that --resume from another directory compares the same files.
        self.corpus = [str(Path(path).resolve()) for path in self.corpus]
        if not self.corpus:
            raise PretrainingError("corpus is empty: give at least one training file")
        if self.held_out is not None:
            held_out = [self.held_out] if isinstance(self.held_out, (str, Path)) else self.held_out
            self.held_out = [str(Path(path).resolve()) for path in held_out]
            if not self.held_out:
                raise PretrainingError("held_out is an empty list: give held-out files or None (held_out_fraction)")
        self.output_dir = str(self.output_dir)
        if self.init_from is not None and self.config is not None:
            raise PretrainingError(f"config ({self.config}) and init_from exclude each other: the architecture is the initial model's")
        if self.init_from is None:
            self.config = str(self.config) if self.config is not None else DEFAULT_CONFIG
        if self.resume and self.overwrite:
            raise PretrainingError("resume and overwrite exclude each other")
        if self.init_from is None and (self.init_vocab is not None or self.add_words):
            raise PretrainingError("init_vocab and add_words apply to a run with init_from (a model to continue)")
        if self.init_from is not None and self.max_characters_per_token is not None:
            raise PretrainingError(
                "max_characters_per_token chooses a new model's character slots; init_from keeps the initial model's"
            )
        if self.init_from is not None:
            self.init_from = str(Path(self.init_from).resolve())
        if self.init_vocab is not None:
            self.init_vocab = str(Path(self.init_vocab).resolve())
        if self.text_column is not None and self.words_column is not None:
            raise PretrainingError("give text_column or words_column, not both")
        check_number("held_out_fraction", self.held_out_fraction, 0.0, 1.0, minimum_inclusive=False, maximum_inclusive=False)
        if self.word_splitter is None and self.init_from is None:
            self.word_splitter = DEFAULT_WORD_SPLITTER
        if self.word_splitter is not None:  # None until the init_from model says which (with_initial_word_splitter)
            check_choice("word_splitter", self.word_splitter, WORD_SPLITTERS)
            try:
                build_word_splitter(self.word_splitter)  # a Korean analyser must be installed: say so before anything runs
            except ImportError as error:
                raise PretrainingError(str(error)) from None
        check_choice("regime", self.regime, REGIMES)
        check_choice("optimizer", self.optimizer, OPTIMIZERS)
        check_choice("lr_scheduler", self.lr_scheduler, LR_SCHEDULERS)
        for name, minimum in (
            ("min_count", 1), ("window_size", 1), ("batch_size", 1), ("save_steps", 1), ("eval_steps", 0),
            ("logging_steps", 1), ("train_eval_sentences", 1), ("seed", 0),
        ):
            check_int(name, getattr(self, name), minimum)
        for name, minimum in (
            ("max_vocab_size", 4), ("max_steps", 1), ("save_total_limit", 1), ("softmax_samples", 0), ("num_threads", 1),
            ("max_characters_per_token", 3),
        ):
            check_int(name, getattr(self, name), minimum, allow_none=True)
        for name in ("epochs", "learning_rate", "max_time_minutes"):
            check_number(name, getattr(self, name), 0.0, minimum_inclusive=False, allow_none=name != "epochs")
        check_number("max_grad_norm", self.max_grad_norm, 0.0, hint="0: no clipping")
        check_number("warmup_ratio", self.warmup_ratio, 0.0, 1.0, maximum_inclusive=False)
        check_number("dropout", self.dropout, 0.0, 1.0, maximum_inclusive=False, allow_none=True)

    @property
    def resolved_learning_rate(self) -> float:
        return self.learning_rate if self.learning_rate is not None else OPTIMIZERS[self.optimizer][1]

    def to_dict(self) -> dict[str, Any]:
        return {item.name: getattr(self, item.name) for item in fields(self)}


@dataclass
class PretrainingReport:
    """What a run produced. Perplexities are dicts as `perplexity_from_totals` returns them (forward / backward /
    mean, exact, full softmax, eval mode); `*_unigram` the unigram baseline over the same predictions."""

    output_dir: str
    regime: str
    steps: int
    max_steps: int
    epochs: float
    tokens_seen: int
    wall_time_seconds: float
    train_runtime_seconds: float
    steps_per_second: float
    num_parameters: int
    num_bilm_parameters: int
    vocabulary_size: int
    num_train_sentences: int
    num_held_out_sentences: int
    held_out: dict[str, float]
    held_out_unigram: dict[str, Any]
    train_sample: dict[str, float]
    train_sample_unigram: dict[str, Any]
    num_train_sample_sentences: int
    held_out_initial: dict[str, float] | None
    stopped_early: str | None
    resumed_from: str | None
    config: dict[str, Any]
    options: dict[str, Any]
    loss_history: list[list[float]] = field(default_factory=list)
    eval_history: list[list[float]] = field(default_factory=list)
    hdf5_dir: str | None = None
    learning_rate: float | None = None  # the peak learning rate used (the options may leave it to the default)
    initialised_from: str | None = None  # options.init_from: the model this run continued
    added_words: int = 0  # words appended to the initial model's vocabulary (options.add_words)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        def directions(metrics: dict[str, Any] | None) -> str:
            if not metrics:
                return "n/a"
            return (
                f"forward {metrics['forward_perplexity']:.2f}, backward {metrics['backward_perplexity']:.2f} "
                f"(mean {metrics['perplexity']:.2f})"
            )

        lines = [
            f"Pre-trained ELMo ({self.regime} regime) -> {self.output_dir}",
            f"  steps {self.steps:,} of {self.max_steps:,}, epochs {self.epochs:.2f}, tokens seen {self.tokens_seen:,}, "
            f"{self.wall_time_seconds:.0f} s this run ({self.steps_per_second:.2f} steps/s in training)",
            f"  {self.num_parameters:,} parameters ({self.num_bilm_parameters:,} biLM + softmax over "
            f"{self.vocabulary_size:,} words); {self.num_train_sentences:,} training / {self.num_held_out_sentences:,} "
            "held-out sentences",
            f"  held-out perplexity: {directions(self.held_out)}",
            f"    unigram baseline:  {directions(self.held_out_unigram)}",
        ]
        if self.initialised_from:
            lines.insert(1, f"  continued from {self.initialised_from} ({self.added_words:,} word(s) added to its vocabulary)")
        if self.held_out_initial:
            lines.append(f"    {'initial model' if self.initialised_from else 'untrained'} (step 0): {directions(self.held_out_initial)}")
        lines += [
            f"  train perplexity ({self.num_train_sample_sentences:,} sentences): {directions(self.train_sample)}",
            f"    unigram baseline:  {directions(self.train_sample_unigram)}",
        ]
        if self.stopped_early:
            lines.append(f"  stopped early: {self.stopped_early} (continue with --resume and the same options)")
        if self.hdf5_dir:
            lines.append(f"  original layout (options.json + weights.hdf5, biLM only): {self.hdf5_dir}")
        lines.append(f"  report: {Path(self.output_dir) / REPORT_FILE_NAME}")
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------------------------
def pretraining_fields_from_options(options: dict[str, Any]) -> dict[str, Any]:
    """The `ELMoConfig` fields set by the training keys of an original `options.json` (bilm-tf's): `dropout` ->
    `lm_dropout`, `n_negative_samples_batch` -> `softmax_num_samples` (unless `sample_softmax` is false)."""
    fields = {}
    if "dropout" in options:
        fields["lm_dropout"] = options["dropout"]
    if options.get("sample_softmax", True) and "n_negative_samples_batch" in options:
        fields["softmax_num_samples"] = options["n_negative_samples_batch"]
    return fields


def load_pretraining_config(spec: str | Path) -> ELMoConfig:
    """The architecture to pre-train: a `CONFIG_PRESETS` name, or a JSON file holding `ELMoConfig` fields (a
    `config.json`) or an original `options.json` (sections `lstm` and `char_cnn`; its training keys `dropout` and
    `n_negative_samples_batch` set `lm_dropout` and `softmax_num_samples`). Raises `PretrainingError`."""
    spec = str(spec)
    if spec in CONFIG_PRESETS:
        return ELMoConfig(**CONFIG_PRESETS[spec])
    path = Path(spec)
    if not path.is_file():
        raise PretrainingError(
            f"--config {spec!r} is neither a preset ({', '.join(CONFIG_PRESETS)}) nor an existing JSON file"
        )
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise PretrainingError(f"config file {path} is not valid JSON: {error}") from None
    if not isinstance(values, dict):
        raise PretrainingError(f"config file {path} must hold a JSON object, got {type(values).__name__}")
    try:
        if "lstm" in values and "char_cnn" in values:  # an original options.json
            return ELMoConfig.from_options_dict(values, **pretraining_fields_from_options(values))
        model_type = values.get("model_type", ELMoConfig.model_type)
        if model_type != ELMoConfig.model_type:
            raise ValueError(f"model_type is {model_type!r}, expected {ELMoConfig.model_type!r}")
        return ELMoConfig.from_dict(values)
    except (ValueError, TypeError) as error:
        raise PretrainingError(f"config file {path}: {error}") from None


def check_pretrainable(config: ELMoConfig, source: str) -> None:
    """`PretrainingError` unless the pre-training data can feed a model of ``config`` (from ``source``): the data
    pipeline writes the byte scheme's character ids, one row per word, so a model of Unicode characters or with a
    word-embedding input (an ELMoForManyLangs conversion) cannot be pre-trained here yet."""
    if config.character_vocabulary != "utf8_bytes" or config.word_embedding_dim:
        raise PretrainingError(
            f"{source}: a model of {config.character_vocabulary!r} characters"
            f"{' with a word-embedding input' if config.word_embedding_dim else ''} (an ELMoForManyLangs conversion) "
            "cannot be pre-trained by elmo-hf pretrain, which feeds UTF-8 byte ids (utf8_bytes) and no word ids"
        )


def with_character_slots(config: ELMoConfig, max_characters_per_token: int) -> ELMoConfig:
    """`config` with `max_characters_per_token` character slots per word, validated (`PretrainingError`: fewer
    slots than the widest character filter)."""
    try:
        return ELMoConfig.from_dict({**config.to_dict(), "max_characters_per_token": max_characters_per_token})
    except ValueError as error:
        raise PretrainingError(f"--max-characters-per-token {max_characters_per_token}: {error}") from None


def warn_about_truncated_words(tokenizer: ELMoTokenizer, vocabulary: ELMoWordVocabulary) -> int:
    """Log a warning naming how many words of the vocabulary are cut to the tokenizer's character slots (a long
    word's end is then invisible to the model), with examples; returns that count."""
    truncated = [word for word in vocabulary.words if tokenizer.is_truncated_word(word)]
    if truncated:
        logger.warning(
            "%d of the %d vocabulary words are longer than %d character slots hold (%d UTF-8 bytes; a Hangul syllable "
            "takes 3) and are cut, e.g. %s; give a new model more slots with --max-characters-per-token",
            len(truncated), len(vocabulary), tokenizer.max_characters_per_token, tokenizer.max_characters_per_token - 2,
            ", ".join(map(repr, truncated[:3])),
        )
    return len(truncated)


# ----------------------------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------------------------
def load_training_sentences(paths: Sequence[str | Path], options: PretrainingOptions) -> Dataset:
    """One `Dataset` with a `words` column from the corpus files ``paths`` (any format ``elmo_hf.corpus`` reads), in
    the order given; raises `PretrainingError` naming a file or row that cannot be read, or a corpus without words."""
    try:
        sentences = load_sentences(
            paths, options.word_splitter, text_column=options.text_column, words_column=options.words_column,
            cache_dir=options.dataset_cache_dir,
        )
    except (CorpusError, ValueError) as error:
        raise PretrainingError(str(error)) from None
    if len(sentences) == 0:
        raise PretrainingError(f"{', '.join(map(str, paths))}: no sentence with at least one word")
    return sentences


def split_held_out(sentences: Dataset, fraction: float, seed: int) -> tuple[Dataset, Dataset]:
    """(train, held-out): a seeded random `fraction` of the sentences (at least one) is held out; both parts keep
    corpus order."""
    num_held_out = max(1, round(len(sentences) * fraction))
    if num_held_out >= len(sentences):
        raise PretrainingError(
            f"the corpus has {len(sentences)} sentence(s): too few to hold out {fraction:g} of them and train on the rest"
        )
    held_out = np.zeros(len(sentences), dtype=bool)
    held_out[np.random.default_rng(seed).permutation(len(sentences))[:num_held_out]] = True
    return sentences.select(np.flatnonzero(~held_out)), sentences.select(np.flatnonzero(held_out))


def sample_sentences(sentences: Dataset, size: int, seed: int) -> Dataset:
    """A fixed seeded sample of `size` sentences (all of them if fewer), in corpus order."""
    if size >= len(sentences):
        return sentences
    chosen = np.sort(np.random.default_rng([seed, 1]).permutation(len(sentences))[:size])
    return sentences.select(chosen)


def unigram_perplexity(vocabulary: ELMoWordVocabulary, sentences: Dataset | Sequence[Sequence[str]]) -> dict[str, Any]:
    """Perplexity of the unigram model of `vocabulary.counts` (docs/design/pretraining-data.md) over the biLM's
    predictions of `sentences`: n + 1 per sentence of n words and direction (forward: w1 .. wn, `</S>`;
    backward: w1 .. wn, `<S>`), unknown words as `<UNK>`. Forward: `p(w) = count[w] / (sum(counts) -
    count[<S>])`; backward the same without `</S>`. A direction whose predictions include a class of count 0
    (`<UNK>` when the training data had no rare word) uses add-one smoothing instead (`smoothing` says which)."""
    if vocabulary.counts is None:
        raise ValueError("the unigram baseline needs a vocabulary with counts (vocab_counts.tsv)")
    column = sentences["words"] if isinstance(sentences, Dataset) else sentences
    target_counts = np.zeros(len(vocabulary), dtype=np.int64)
    num_sentences = 0
    for words in column:
        if words:
            np.add.at(target_counts, vocabulary.encode(words), 1)
            num_sentences += 1
    counts = np.asarray(vocabulary.counts, dtype=np.float64)
    result: dict[str, Any] = {}
    mean_nll = []
    for direction, excluded, boundary in (("forward", BOS_WORD_ID, EOS_WORD_ID), ("backward", EOS_WORD_ID, BOS_WORD_ID)):
        predicted = target_counts.copy()
        predicted[boundary] += num_sentences
        class_counts = counts.copy()
        class_counts[excluded] = 0.0
        smoothing = "none"
        if (class_counts[predicted > 0] == 0).any():
            smoothing = "add-one"
            class_counts = class_counts + 1.0
            class_counts[excluded] = 0.0
        probabilities = class_counts / class_counts.sum()
        used = predicted > 0
        nll = float(-(predicted[used] * np.log(probabilities[used])).sum() / predicted.sum())
        mean_nll.append(nll)
        result[f"{direction}_perplexity"] = math.exp(nll)
        result[f"{direction}_nll"] = nll
        result[f"num_{direction}_predictions"] = int(predicted.sum())
        result[f"{direction}_smoothing"] = smoothing
    result["perplexity"] = math.exp(sum(mean_nll) / 2)
    return result


def _evaluation_data(
    sentences: Dataset, vocabulary: ELMoWordVocabulary, options: PretrainingOptions, config: ELMoConfig, what: str
):
    """The evaluation dataset of `sentences` in the run's regime: every prediction exactly once."""
    if options.regime == "sentence":
        return sentences
    try:
        return WindowedBiLMStream(
            sentences, vocabulary, num_rows=options.batch_size, window_size=options.window_size, shuffle=False,
            remainder="pad", max_characters_per_token=config.max_characters_per_token,
        )
    except ValueError as error:
        raise PretrainingError(f"{what}: {error}") from None


# ----------------------------------------------------------------------------------------------------------------
# Output directory
# ----------------------------------------------------------------------------------------------------------------
PRETRAINING_OUTPUT = OutputKind(
    name="pretraining",
    description="an elmo-hf pre-training output",
    entries=(
        f"{CHECKPOINT_PREFIX}*", "config.json", "model.safetensors", "tokenizer_config.json", "*.py", VOCABULARY_FILE_NAME,
        COUNTS_FILE_NAME, OPTIONS_FILE_NAME, REPORT_FILE_NAME, "trainer_state.json", "training_args.bin", "runs",
        HDF5_DIRECTORY_NAME,
    ),
)


def _has_a_checkpoint(output_dir: Path) -> bool:
    """Worth keeping after a failure: a checkpoint to resume from."""
    return get_last_checkpoint(str(output_dir)) is not None


def _checkpoint_to_resume(output_dir: Path, options: PretrainingOptions) -> Path:
    """The latest checkpoint of a run to resume with the same options (those in OPTIONS_CHANGEABLE_ON_RESUME aside)."""
    checkpoint = get_last_checkpoint(str(output_dir))
    if checkpoint is None:
        raise PretrainingError(
            f"--resume: {output_dir} holds no checkpoint ({CHECKPOINT_PREFIX}N folder) to continue from: the run "
            "that made it stopped before its first checkpoint; start it again with --overwrite (instead of --resume)"
        )
    saved = json.loads((output_dir / OPTIONS_FILE_NAME).read_text(encoding="utf-8"))
    differences = {
        name: (saved.get(name), value)
        for name, value in options.to_dict().items()
        if name not in OPTIONS_CHANGEABLE_ON_RESUME and saved.get(name) != value
    }
    if differences:
        listed = "; ".join(f"{name}: was {was!r}, now {now!r}" for name, (was, now) in differences.items())
        raise PretrainingError(
            f"cannot resume {output_dir} with different options ({listed}); use the options of the first run "
            f"(saved in {output_dir / OPTIONS_FILE_NAME}) or --overwrite to start over"
        )
    return Path(checkpoint)


# ----------------------------------------------------------------------------------------------------------------
# HDF5 export (the repository's `conversion` package, imported only when asked for)
# ----------------------------------------------------------------------------------------------------------------
def with_initial_word_splitter(options: PretrainingOptions, initial: InitialModel) -> PretrainingOptions:
    """``options`` with the word splitter the initial model's tokenizer records (`InitialModel.word_splitter`; a TF
    checkpoint records none: `DEFAULT_WORD_SPLITTER`) unless the options name one; naming another is warned about
    (a converted checkpoint records the converter's default, not what bilm-tf's data was split with)."""
    recorded = initial.word_splitter
    if options.word_splitter is None:
        return replace(options, word_splitter=recorded or DEFAULT_WORD_SPLITTER)
    if recorded is not None and options.word_splitter != recorded:
        logger.warning(
            "word splitter %r: the tokenizer of %s records %r; the corpus is split with %r, and so is every text the "
            "continued model reads", options.word_splitter, initial.source, recorded, options.word_splitter,
        )
    return options


def _initial_model(options: PretrainingOptions, with_weights: bool) -> InitialModel:
    """`options.init_from` read by `initial_model.load_initial_model`; raises `PretrainingError`."""
    try:
        return load_initial_model(options.init_from, options.init_vocab, with_weights=with_weights)
    except InitialModelError as error:
        raise PretrainingError(str(error)) from None


def _hdf5_exporter():
    """`conversion.convert_hf_to_allennlp.convert_hf_to_allennlp`; raises `PretrainingError` saying what to install."""
    try:
        from conversion.convert_hf_to_allennlp import convert_hf_to_allennlp
    except ImportError as error:
        raise PretrainingError(
            f"--export-hdf5 needs the converter's extra ({error}): pip install 'elmo-hf[convert]'; or export later with "
            "elmo-hf export --model DIR --output DIR/hdf5"
        ) from None
    return convert_hf_to_allennlp


def export_hdf5(model_dir: str | Path, output_dir: str | Path | None = None, overwrite: bool = True) -> Path:
    """Write the biLM of a pre-training output directory in the original layout: `options.json` + `weights.hdf5` +
    the vocabulary's `vocab.txt` (via `conversion.convert_hf_to_allennlp`, which loads the `ELMoModel` part; the LM
    softmax has no place in that file). Default output: `model_dir/hdf5`."""
    model_dir = Path(model_dir)
    output_dir = Path(output_dir) if output_dir is not None else model_dir / HDF5_DIRECTORY_NAME
    convert_hf_to_allennlp = _hdf5_exporter()
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()  # loading ELMoModel from ELMoForPreTraining weights lists the softmax
    try:
        not_exported = convert_hf_to_allennlp(model_dir, output_dir, overwrite=overwrite)
    finally:
        transformers_logging.set_verbosity(verbosity)
    for name in not_exported:
        logger.info("not exported to HDF5 (the original format has no place for it): %s", name)
    return output_dir


# ----------------------------------------------------------------------------------------------------------------
# Trainer pieces
# ----------------------------------------------------------------------------------------------------------------
class _StopControl(TrainerCallback):
    """Stops training at a step boundary, with a checkpoint: on the first SIGINT (a second one interrupts at once)
    and past `max_time_seconds`."""

    def __init__(self, max_time_seconds: float | None, handle_interrupt: bool):
        self.max_time_seconds = max_time_seconds
        self.handle_interrupt = handle_interrupt and threading.current_thread() is threading.main_thread()
        self.stop_reason: str | None = None
        self._interrupted = False
        self._previous_handler = None
        self._start = time.monotonic()

    def _on_sigint(self, signum, frame) -> None:
        if self._interrupted:  # second Ctrl-C: stop now
            signal.signal(signal.SIGINT, self._previous_handler or signal.default_int_handler)
            raise KeyboardInterrupt
        self._interrupted = True
        print(
            "\nCtrl-C: finishing the current step and saving a checkpoint (press Ctrl-C again to stop at once) ...",
            file=sys.stderr,
            flush=True,
        )

    def on_train_begin(self, args, state, control, **kwargs):
        self._start = time.monotonic()
        if self.handle_interrupt:
            self._previous_handler = signal.signal(signal.SIGINT, self._on_sigint)

    def on_step_end(self, args, state, control, **kwargs):
        if self._interrupted:
            self.stop_reason = "interrupted"
        elif self.max_time_seconds is not None and time.monotonic() - self._start >= self.max_time_seconds:
            self.stop_reason = f"time limit ({self.max_time_seconds / 60:g} minutes)"
        if self.stop_reason is not None and state.global_step < state.max_steps:
            control.should_save = True
            control.should_training_stop = True
            if self._interrupted:
                control.should_evaluate = False
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self.restore()

    def restore(self) -> None:
        if self.handle_interrupt and self._previous_handler is not None:
            signal.signal(signal.SIGINT, self._previous_handler)
            self._previous_handler = None


def _training_arguments(options: PretrainingOptions, output_dir: Path, evaluate: bool) -> TrainingArguments:
    optimizer_name = OPTIMIZERS[options.optimizer][0]
    return TrainingArguments(
        output_dir=str(output_dir),
        max_steps=options.max_steps if options.max_steps is not None else -1,
        num_train_epochs=options.epochs,
        per_device_train_batch_size=options.batch_size,
        per_device_eval_batch_size=options.batch_size,
        optim=optimizer_name,
        learning_rate=options.resolved_learning_rate,
        lr_scheduler_type=options.lr_scheduler,
        warmup_steps=options.warmup_ratio,  # a float < 1 is a ratio of the total steps in transformers 5
        weight_decay=0.0,
        max_grad_norm=options.max_grad_norm,
        eval_strategy="steps" if evaluate else "no",
        eval_steps=options.eval_steps if evaluate else None,
        eval_on_start=evaluate,
        save_strategy="steps",
        save_steps=options.save_steps,
        save_total_limit=options.save_total_limit,
        logging_steps=options.logging_steps,
        logging_first_step=True,
        include_num_input_tokens_seen="non_padding",  # attention_mask sum: predictions per direction (windowed)
        dataloader_num_workers=0,  # the windowed stream's batches must arrive in order
        dataloader_pin_memory=torch.cuda.is_available(),
        remove_unused_columns=False,  # the sentence collator reads `words`
        report_to="none",
        disable_tqdm=not options.progress,
        seed=options.seed,
        data_seed=options.seed,
    )


def _perplexity_metrics(metrics: dict[str, float], prefix: str) -> dict[str, float]:
    keys = ("forward_perplexity", "backward_perplexity", "perplexity", "forward_nll", "backward_nll",
            "num_forward_predictions", "num_backward_predictions")
    return {key: metrics[f"{prefix}_{key}"] for key in keys}


def _log_history_curves(log_history: list[dict[str, Any]]) -> tuple[list[list[float]], list[list[float]], dict | None]:
    losses = [[entry["step"], entry["loss"]] for entry in log_history if "loss" in entry]
    evaluations = [entry for entry in log_history if "eval_perplexity" in entry]
    curve = [[entry["step"], entry["eval_perplexity"]] for entry in evaluations]
    initial = next((_perplexity_metrics(entry, "eval") for entry in evaluations if entry["step"] == 0), None)
    return losses, curve, initial


# ----------------------------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------------------------
def pretrain(options: PretrainingOptions) -> PretrainingReport:
    """Run `options` (see `PretrainingOptions` and the module docstring) and return the report, also written to
    `output_dir/pretraining_report.json`. Raises `PretrainingError` (bad options, inputs or output directory;
    nothing trained) and `PretrainingInterrupted` (Ctrl-C; a checkpoint was saved first)."""
    previous_num_threads = torch.get_num_threads()
    if options.num_threads is not None:
        torch.set_num_threads(options.num_threads)
    try:
        return _pretrain(options)
    finally:
        torch.set_num_threads(previous_num_threads)


def _pretrain(options: PretrainingOptions) -> PretrainingReport:
    start = time.monotonic()
    initial = _initial_model(options, with_weights=False) if options.init_from is not None else None
    if initial is not None:
        options = with_initial_word_splitter(options, initial)
    config = initial.config if initial is not None else load_pretraining_config(options.config)
    check_pretrainable(config, options.init_from or options.config)
    if options.max_characters_per_token is not None:
        config = with_character_slots(config, options.max_characters_per_token)
    if options.export_hdf5:
        _hdf5_exporter()  # fail before training, not after it
        try:
            config.to_options_dict()  # the original format must have a place for every option
        except ValueError as error:
            raise PretrainingError(f"--export-hdf5: {error}") from None
    inputs = [*options.corpus, *(options.held_out or [])]
    for path in inputs:
        if not Path(path).exists():
            raise PretrainingError(f"corpus file {path} does not exist")
    with open_output_directory(
        options.output_dir, PRETRAINING_OUTPUT, resume=options.resume, overwrite=options.overwrite,
        inputs=[*inputs, *(path for path in (options.init_from, options.init_vocab) if path is not None)],
        worth_keeping=_has_a_checkpoint, resumable=_has_a_checkpoint,
        describe_existing=lambda path: "a pre-training run" + (
            "" if _has_a_checkpoint(path) else " that stopped before its first checkpoint (nothing to resume)"
        ),
    ) as output:
        if options.resume and not output.resumed:
            raise PretrainingError(
                f"--resume: {output.path} holds no checkpoint ({CHECKPOINT_PREFIX}N folder) to continue from; run "
                "without --resume to start a new run"
            )
        checkpoint = _checkpoint_to_resume(output.path, options) if output.resumed else None
        return _train_and_report(options, config, output.path, checkpoint, start, initial, record=output.record)


class _RecordAfterEachCheckpoint(TrainerCallback):
    def __init__(self, record: Callable[[], None]):
        self.record = record

    def on_save(self, args, state, control, **kwargs):
        self.record()


def _train_and_report(
    options: PretrainingOptions,
    config: ELMoConfig,
    output_dir: Path,
    checkpoint: Path | None,
    start: float,
    initial_model: InitialModel | None = None,
    record: Callable[[], None] = lambda: None,
) -> PretrainingReport:
    """``record()`` writes what the run has written so far into the output's marker (after the first files and each
    checkpoint), so that --overwrite can later delete a killed run's files by that record."""
    # Data: sentences, held-out split, vocabulary from the training sentences only.
    sentences = load_training_sentences(options.corpus, options)
    if options.held_out:
        train_sentences = sentences
        held_out_sentences = load_training_sentences(options.held_out, options)
    else:
        train_sentences, held_out_sentences = split_held_out(sentences, options.held_out_fraction, options.seed)
    try:
        if initial_model is not None:  # the model's words keep their softmax rows; the corpus gives the counts
            vocabulary = initial_model.vocabulary.counted_on(
                train_sentences["words"], add_words=options.add_words, min_count=options.min_count, max_size=options.max_vocab_size
            )
        else:
            vocabulary = ELMoWordVocabulary.from_sentences(
                train_sentences["words"], min_count=options.min_count, max_size=options.max_vocab_size
            )
    except ValueError as error:
        raise PretrainingError(f"vocabulary: {error}") from None
    train_sample = sample_sentences(train_sentences, options.train_eval_sentences, options.seed)
    tokenizer = ELMoTokenizer(max_characters_per_token=config.max_characters_per_token, word_splitter=options.word_splitter)
    warn_about_truncated_words(tokenizer, vocabulary)

    if checkpoint is not None:
        saved_vocabulary = ELMoWordVocabulary.load(output_dir)
        if saved_vocabulary != vocabulary:
            raise PretrainingError(
                f"cannot resume {output_dir}: the corpus gives a different vocabulary ({len(vocabulary)} words) than "
                f"the one saved there ({len(saved_vocabulary)}): the corpus files changed"
            )
        config = ELMoConfig.from_pretrained(checkpoint)
    else:
        config.word_vocab_size = len(vocabulary)
        if options.softmax_samples is not None:
            config.softmax_num_samples = options.softmax_samples
        if options.dropout is not None:
            config.lm_dropout = options.dropout
        config.architectures = [ELMoForPreTraining.__name__]
        config.pad_token_id = tokenizer.pad_token_id  # what Trainer would align it to, with a warning
        vocabulary.save(output_dir)
        tokenizer.save_pretrained(output_dir)
        (output_dir / OPTIONS_FILE_NAME).write_text(json.dumps(options.to_dict(), indent=2) + "\n", encoding="utf-8")
        record()

    # Model and batches.
    set_seed(options.seed)
    model = ELMoForPreTraining(config)
    if initial_model is not None and checkpoint is None:
        model.load_state_dict(initial_state_for(_initial_model(options, with_weights=True), vocabulary))
    if options.regime == "windowed":
        try:
            train_data = WindowedBiLMStream(
                train_sentences, vocabulary, num_rows=options.batch_size, window_size=options.window_size,
                shuffle=True, seed=options.seed, remainder="drop", max_characters_per_token=config.max_characters_per_token,
            )
        except ValueError as error:
            raise PretrainingError(f"training data: {error}") from None
        collator = default_data_collator
    else:
        train_data = train_sentences
        collator = DataCollatorForBiLM(vocabulary, tokenizer, label_boundary_positions=True)
    held_out_data = _evaluation_data(held_out_sentences, vocabulary, options, config, "held-out data")
    train_sample_data = _evaluation_data(train_sample, vocabulary, options, config, "training sample")

    evaluate_periodically = options.eval_steps > 0
    stop_control = _StopControl(
        options.max_time_minutes * 60 if options.max_time_minutes is not None else None, options.handle_interrupt
    )
    trainer = ELMoPreTrainingTrainer(
        model=model,
        args=_training_arguments(options, output_dir, evaluate_periodically),
        train_dataset=train_data,
        eval_dataset=held_out_data if evaluate_periodically else None,
        data_collator=collator,
        processing_class=tokenizer,
        compute_metrics=bilm_perplexity_metrics,
        callbacks=[stop_control, _RecordAfterEachCheckpoint(record)],
    )
    try:
        train_output = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint is not None else None)
    finally:
        stop_control.restore()
    if stop_control.stop_reason == "interrupted":
        latest = get_last_checkpoint(str(output_dir))
        raise PretrainingInterrupted(output_dir, Path(latest) if latest else None)

    # Final evaluation (eval mode, full softmax, every prediction once), save, report.
    held_out_metrics = _perplexity_metrics(trainer.evaluate(held_out_data, metric_key_prefix="held_out"), "held_out")
    train_metrics = _perplexity_metrics(trainer.evaluate(train_sample_data, metric_key_prefix="train_sample"), "train_sample")
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    trainer.save_state()
    losses, eval_curve, initial = _log_history_curves(trainer.state.log_history)
    state = trainer.state
    report = PretrainingReport(
        learning_rate=options.resolved_learning_rate,
        initialised_from=options.init_from,
        added_words=len(vocabulary) - len(initial_model.vocabulary) if initial_model is not None else 0,
        output_dir=str(output_dir),
        regime=options.regime,
        steps=state.global_step,
        max_steps=state.max_steps,
        epochs=float(state.epoch or 0.0),
        tokens_seen=int(state.num_input_tokens_seen),
        wall_time_seconds=time.monotonic() - start,
        train_runtime_seconds=float(train_output.metrics.get("train_runtime", 0.0)),
        steps_per_second=float(train_output.metrics.get("train_steps_per_second", 0.0)),
        num_parameters=model.num_parameters(),
        num_bilm_parameters=model.elmo.num_parameters(),
        vocabulary_size=len(vocabulary),
        num_train_sentences=len(train_sentences),
        num_held_out_sentences=len(held_out_sentences),
        held_out=held_out_metrics,
        held_out_unigram=unigram_perplexity(vocabulary, held_out_sentences),
        train_sample=train_metrics,
        train_sample_unigram=unigram_perplexity(vocabulary, train_sample),
        num_train_sample_sentences=len(train_sample),
        held_out_initial=initial,
        stopped_early=stop_control.stop_reason,
        resumed_from=checkpoint.name if checkpoint is not None else None,
        config=config.to_diff_dict(),
        options=options.to_dict(),
        loss_history=losses,
        eval_history=eval_curve,
    )
    if options.export_hdf5:
        report.hdf5_dir = str(export_hdf5(output_dir))
    (output_dir / REPORT_FILE_NAME).write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    return report


__all__ = [
    "CONFIG_PRESETS",
    "OPTIMIZERS",
    "REGIMES",
    "PretrainingError",
    "PretrainingInterrupted",
    "PretrainingOptions",
    "PretrainingReport",
    "export_hdf5",
    "load_pretraining_config",
    "load_training_sentences",
    "pretraining_fields_from_options",
    "pretrain",
    "sample_sentences",
    "split_held_out",
    "unigram_perplexity",
    "warn_about_truncated_words",
    "with_character_slots",
]
