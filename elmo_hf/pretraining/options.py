"""What a pre-training run is told and what it reports: `PretrainingOptions` (validated on construction), the
architecture presets, the optimizers and the files a run writes, `PretrainingReport`, and the run's errors. The run
itself is `run.py`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..choices_elmo import LR_SCHEDULERS, OPTIMIZERS, REGIMES
from ..validation_elmo import ELMoHFError, check_choice, check_int, check_number
from ..word_splitters_elmo import DEFAULT_WORD_SPLITTER, WORD_SPLITTERS, build_word_splitter

# Architectures by name; every other field keeps ELMoConfig's default. word_vocab_size comes from the vocabulary.
CONFIG_PRESETS: dict[str, dict[str, Any]] = {
    # For smoke tests and CI.
    "tiny": dict(
        char_embedding_dim=8, char_cnn_filters=[[1, 16], [2, 16], [3, 32]], num_highway_layers=1, projection_dim=32,
        lstm_cell_size=64, num_lstm_layers=2, cell_clip=3.0, projection_clip=3.0, use_skip_connections=True,
        lm_dropout=0.0,
    ),
    # The demo model: the released models' shape (char CNN -> highway -> projection, 2 projected LSTM layers with
    # clipping and a skip connection), scaled down to train on a CPU.
    "small": dict(
        char_embedding_dim=16, char_cnn_filters=[[1, 32], [2, 32], [3, 64], [4, 128], [5, 128], [6, 128]],
        num_highway_layers=1, projection_dim=128, lstm_cell_size=512, num_lstm_layers=2, cell_clip=3.0,
        projection_clip=3.0, use_skip_connections=True, lm_dropout=0.1,
    ),
}
DEFAULT_CONFIG = "small"  # the architecture of a new model when no config is given

PRETRAINING_OPTIONS_FILE_NAME = "pretraining_options.json"
REPORT_FILE_NAME = "pretraining_report.json"
HDF5_DIRECTORY_NAME = "hdf5"
CHECKPOINT_PREFIX = "checkpoint-"
# Options a resumed run may change: how long and how often, not what is trained.
OPTIONS_CHANGEABLE_ON_RESUME = frozenset({
    "output_dir", "max_steps", "epochs", "save_steps", "save_total_limit", "eval_steps", "logging_steps",
    "max_time_minutes", "export_hdf5", "progress", "resume", "overwrite", "handle_interrupt", "num_threads",
    "dataset_cache_dir",
})


class PretrainingError(ELMoHFError):
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
    Everything `pretrain` needs (the command line's options: docs/guide/pretraining.md). Paths may be `str` or `Path`.

    Args:
        corpus (`list`): training files of any format elmo-hf reads (one sentence per line for text), directories of
            shards (read in name order) or glob patterns.
        output_dir: where the model, tokenizer, vocabulary, checkpoints and report go: empty or absent unless `resume`
            (continue from its latest checkpoint) or `overwrite` (delete an earlier pre-training run there).
        config (`str`, *optional*): `"tiny"`, `"small"` (`CONFIG_PRESETS`; the default), or a JSON file of `ELMoConfig`
            fields or an original `options.json` (`dropout`, `n_negative_samples_batch` -> `lm_dropout`,
            `softmax_num_samples`). Not with `init_from`.
        held_out (`list`, *optional*), held_out_fraction (`float`, defaults to 0.05): held-out files, else a seeded
            random fraction of the corpus sentences.
        word_splitter (`str`, *optional*): how text lines become words (`ELMoTokenizer`'s splitters; `"kiwi"` /
            `"mecab"` need their extra); defaults to what an `init_from` tokenizer records, else `"moses"`.
        max_characters_per_token (`int`, *optional*): a new model's character slots per word (a word keeps `N - 2`
            UTF-8 bytes); defaults to the config's; at least the widest filter; not with `init_from`.
        text_column / words_column (`str`, *optional*): the column of raw sentences / lists of words in structured
            corpora; by default `text`, and the words of CoNLL-U files.
        min_count (`int`, defaults to 2), max_vocab_size (`int`, *optional*, `<S>`, `</S>`, `<UNK>` included): the LM
            softmax's vocabulary; other words are `<UNK>`.
        regime (`str`, defaults to `"windowed"`): bilm-tf's windows of `window_size` positions with the LSTM state
            carried, or `"sentence"` (each sentence from the initial state).
        window_size (`int`, defaults to 20), batch_size (`int`, defaults to 32): rows (or sentences) per batch; under
            `torchrun` the global batch, split evenly over the processes.
        max_steps (`int`, *optional*), epochs (`float`, defaults to 1.0): optimizer steps, else epochs.
        optimizer (`str`, defaults to `"adam"`): `"adam"` (AdamW, no weight decay) or `"adagrad"` (bilm-tf's);
            learning_rate (`float`, *optional*) defaults to 5e-3 / 0.2.
        lr_scheduler (`str`, defaults to `"linear"`), warmup_ratio (`float`, defaults to 0.02), max_grad_norm
            (`float`, defaults to 10.0, bilm-tf's `all_clip_norm_val`).
        softmax_samples (`int`, *optional*; 0: full softmax), dropout (`float`, *optional*): default to the config's.
        save_steps (`int`, defaults to 500), save_total_limit (`int`, defaults to 2): checkpoints.
        eval_steps (`int`, defaults to 500; 0: only at the end), logging_steps (`int`, defaults to 50).
        train_eval_sentences (`int`, defaults to 2000): the seeded sample of training sentences the report scores.
        seed (`int`, defaults to 0): initialisation, held-out split, sentence order, dropout.
        max_time_minutes (`float`, *optional*): stop (checkpoint, final evaluation and save) after this wall time.
        export_hdf5 (`bool`): also write `output_dir/hdf5/` with the converter (the `convert` extra).
        progress (`bool`, defaults to `True`): `Trainer`'s progress bar (`False`: its logs as lines).
        handle_interrupt (`bool`, defaults to `True`): the first Ctrl-C finishes the step, saves a checkpoint and
            raises `PretrainingInterrupted`; a second one stops at once.
        num_threads (`int`, *optional*): `torch.set_num_threads` for the run (restored afterwards).
        dataset_cache_dir (*optional*): `datasets` cache for the loaded sentences.
        init_from (*optional*), init_vocab (*optional*), add_words (`bool`): continue pre-training a model
            (`initial_model.py`): its architecture and vocabulary are kept, the corpus gives the counts; `init_vocab`
            is a TF checkpoint's vocabulary file; `add_words` appends the corpus words it lacks.
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


__all__ = [
    "CHECKPOINT_PREFIX", "CONFIG_PRESETS", "DEFAULT_CONFIG", "HDF5_DIRECTORY_NAME", "LR_SCHEDULERS", "OPTIMIZERS",
    "OPTIONS_CHANGEABLE_ON_RESUME", "PRETRAINING_OPTIONS_FILE_NAME", "PretrainingError", "PretrainingInterrupted",
    "PretrainingOptions", "PretrainingReport", "REGIMES", "REPORT_FILE_NAME",
]
