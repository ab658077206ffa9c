"""Pre-train an ELMo biLM on text: ``pretrain``, the library behind ``elmo-hf pretrain``, in five named steps
(options -> data -> model -> train -> report; under ``torchrun`` only the main process writes). What a run is told
and reports is ``options.py``. The steps, and how several processes share them: docs/design/pretraining-trainer.md.

    report = pretrain(PretrainingOptions(corpus=["tinyshakespeare.txt"], output_dir="elmo-shakespeare", config="small"))
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import TrainerCallback, TrainingArguments, default_data_collator, set_seed
from transformers.trainer import TRAINER_STATE_NAME
from transformers.utils import logging as transformers_logging

from ..configuration_elmo import ELMoConfig
from ..corpus.progress import CorpusProgress
from ..corpus.readers import CorpusError, corpus_sources
from ..corpus.vocabulary import ELMoWordVocabulary
from ..modeling_elmo_pretraining import ELMoForPreTraining, bilm_perplexity_metrics
from ..runtime.parallelism import torch_threads
from ..tokenization_elmo import ELMoTokenizer
from .data import DataCollatorForBiLM, iterate_sentences, rows_of_rank
from .inputs import (
    _evaluation_data, check_pretrainable, load_pretraining_config, load_training_sentences, sample_sentences,
    split_held_out, unigram_perplexity, warn_about_truncated_words, with_character_slots, windowed_stream,
    with_initial_word_splitter,
)
from .initial_model import InitialModel, InitialModelError, initial_state_for, load_initial_model
from .options import (
    CONFIG_PRESETS, HDF5_DIRECTORY_NAME, OPTIMIZERS, PRETRAINING_OPTIONS_FILE_NAME, REGIMES, REPORT_FILE_NAME,
    PretrainingError, PretrainingInterrupted, PretrainingOptions, PretrainingReport,
)
from .output import RunOutput, output_directory
from .trainer import ELMoPreTrainingTrainer, latest_complete_checkpoint

logger = logging.getLogger(__name__)


# The HDF5 export (`elmo_hf.conversion`, imported only when asked for) ------------------------------------------
def _hdf5_exporter():
    """`elmo_hf.conversion.convert_hf_to_allennlp.convert_hf_to_allennlp`; raises `PretrainingError` saying what to
    install (h5py)."""
    try:
        from ..conversion.convert_hf_to_allennlp import convert_hf_to_allennlp
    except ImportError as error:
        raise PretrainingError(
            f"--export-hdf5 needs the converter's extra ({error}): pip install 'elmo-hf[convert]'; or export later with "
            "elmo-hf export --model DIR --output DIR/hdf5"
        ) from None
    return convert_hf_to_allennlp


def export_hdf5(model_dir: str | Path, output_dir: str | Path | None = None, overwrite: bool = True) -> Path:
    """Write the biLM of a pre-training output directory in the original layout: `options.json` + `weights.hdf5` +
    the vocabulary's `vocab.txt` (via `elmo_hf.conversion.convert_hf_to_allennlp`, which loads the `ELMoModel` part; the LM
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


# Trainer pieces ------------------------------------------------------------------------------------------------
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
        interrupted = self._interrupted
        timed_out = self.max_time_seconds is not None and time.monotonic() - self._start >= self.max_time_seconds
        if args.world_size > 1:  # every process stops at the same step, or the others wait for it forever
            interrupted, timed_out = _any_process(args, interrupted, timed_out)
            self._interrupted = self._interrupted or interrupted
        if interrupted:
            self.stop_reason = "interrupted"
        elif timed_out:
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


def _any_process(args: TrainingArguments, *flags: bool) -> list[bool]:
    """Each flag, true if it is true in any process (one all-reduce)."""
    import torch.distributed as dist

    values = torch.tensor([int(flag) for flag in flags], device=args.device)
    dist.all_reduce(values, op=dist.ReduceOp.MAX)
    return [bool(value) for value in values.tolist()]


def _training_arguments(options: PretrainingOptions, output_dir: Path, evaluate: bool) -> TrainingArguments:
    """The run's ``TrainingArguments`` (creating them starts the process group under ``torchrun``); the batch of
    ``options.batch_size`` rows or sentences is global: each process takes ``batch_size // world_size``."""
    args = _base_training_arguments(options, output_dir, evaluate)
    try:
        rows = rows_of_rank(options.batch_size, args.process_index, args.world_size)
    except ValueError as error:
        raise PretrainingError(f"--batch-size: {error}") from None
    args.per_device_train_batch_size = args.per_device_eval_batch_size = len(rows)
    return args


def _several_processes_without_accelerator() -> bool:
    """Launched by ``torchrun`` (``WORLD_SIZE`` > 1) on a machine without an accelerator: accelerate makes a
    multi-CPU (gloo) process group only when told ``use_cpu``; with CUDA it picks NCCL by itself."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.accelerator.is_available()


def _base_training_arguments(options: PretrainingOptions, output_dir: Path, evaluate: bool) -> TrainingArguments:
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
        ddp_find_unused_parameters=False,  # every parameter gets a gradient in both regimes
        use_cpu=_several_processes_without_accelerator(),
        remove_unused_columns=False,  # the sentence collator reads `words`
        report_to="none",
        disable_tqdm=not options.progress,
        seed=options.seed,
        data_seed=options.seed,
    )


def bilm_tf_adagrad(learning_rate: float, window_size: int) -> tuple[type[torch.optim.Optimizer], dict[str, float]]:
    """(optimizer class, its arguments) of bilm-tf's Adagrad on this run's loss. bilm-tf minimises the window's
    SUMMED loss (``total_loss * unroll_steps``) with ``AdagradOptimizer(lr, initial_accumulator_value=1.0)``; Adagrad's
    step ``lr * g / sqrt(a0 + sum g**2)`` is unchanged when ``g`` is scaled by ``W`` and ``a0`` by ``1 / W**2``, so on
    the mean loss trained here the accumulator starts at ``1 / window_size**2`` (torch's default, 0, makes the first
    steps ``lr``-sized for every weight). bilm-tf clips that ``W``-times gradient at ``all_clip_norm_val``: its 10 is
    ``max_grad_norm = 10 / window_size`` here."""
    return torch.optim.Adagrad, {"lr": learning_rate, "initial_accumulator_value": 1.0 / window_size**2, "eps": 1e-10}


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


# The run -------------------------------------------------------------------------------------------------------------
def pretrain(options: PretrainingOptions) -> PretrainingReport:
    """Run `options` (see `PretrainingOptions`) and return the report, also written to
    `output_dir/pretraining_report.json`. Raises `PretrainingError` (bad options, inputs or output directory;
    nothing trained) and `PretrainingInterrupted` (Ctrl-C; a checkpoint was saved first)."""
    with torch_threads(options.num_threads):
        return _pretrain(options)


def _pretrain(options: PretrainingOptions) -> PretrainingReport:
    """The run, one named step after another: options -> data -> model -> train -> report."""
    start = time.monotonic()
    options, config, initial = _resolve_options(options)
    args = _training_arguments(options, Path(options.output_dir), evaluate=options.eval_steps > 0)
    with output_directory(options, args) as output:
        setup = _RunSetup(options, config, initial, args, output, start)
        with args.main_process_first(desc="corpus and vocabulary"):
            data = _prepare_data(options, config, initial)
        model = _build_model(setup, data)
        training = _train(setup, model, data)
        return _report(setup, model, data, training)


@dataclass
class _RunSetup:
    """What every step after the first reads: the resolved options, the architecture (a resumed run's checkpoint's,
    once the model is built), the initial model, the ``TrainingArguments``, the opened output and the start time."""

    options: PretrainingOptions
    config: ELMoConfig
    initial: InitialModel | None
    args: TrainingArguments
    output: RunOutput
    start: float


# Step 1: options -------------------------------------------------------------------------------------------------
def _resolve_options(options: PretrainingOptions) -> tuple[PretrainingOptions, ELMoConfig, InitialModel | None]:
    """(the options with the initial model's word splitter, the architecture to train, the initial model). The
    initial model (``init_from``) is read once, here, with its weights unless the run resumes (a checkpoint has
    them); everything that can fail before training fails here (``PretrainingError``)."""
    initial = None
    if options.init_from is not None:
        try:
            initial = load_initial_model(options.init_from, options.init_vocab, with_weights=not options.resume)
        except InitialModelError as error:
            raise PretrainingError(str(error)) from None
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
    try:  # a missing file, an empty directory of shards, a pattern matching nothing fail here
        corpus_sources([*options.corpus, *(options.held_out or [])])
    except CorpusError as error:
        raise PretrainingError(str(error)) from None
    return options, config, initial


# Step 2: data ----------------------------------------------------------------------------------------------------
@dataclass
class _RunData:
    """The sentences (training, held-out, the training sample evaluated at the end), the word vocabulary counted on
    the training sentences only, and the tokenizer."""

    train: Dataset
    held_out: Dataset
    train_sample: Dataset
    vocabulary: ELMoWordVocabulary
    tokenizer: ELMoTokenizer


def _prepare_data(options: PretrainingOptions, config: ELMoConfig, initial: InitialModel | None) -> _RunData:
    sentences = load_training_sentences(options.corpus, options)
    if options.held_out:
        train_sentences = sentences
        held_out_sentences = load_training_sentences(options.held_out, options)
    else:
        train_sentences, held_out_sentences = split_held_out(sentences, options.held_out_fraction, options.seed)
    try:
        with CorpusProgress("counting the vocabulary", len(train_sentences), enabled=options.progress) as bar:
            words = _counted(iterate_sentences(train_sentences, "words"), bar)  # read in batches, never one list
            if initial is not None:  # the model's words keep their softmax rows; the corpus gives the counts
                vocabulary = initial.vocabulary.counted_on(
                    words, add_words=options.add_words, min_count=options.min_count, max_size=options.max_vocab_size
                )
            else:
                vocabulary = ELMoWordVocabulary.from_sentences(
                    words, min_count=options.min_count, max_size=options.max_vocab_size
                )
    except ValueError as error:
        raise PretrainingError(f"vocabulary: {error}") from None
    train_sample = sample_sentences(train_sentences, options.train_eval_sentences, options.seed)
    tokenizer = ELMoTokenizer(max_characters_per_token=config.max_characters_per_token, word_splitter=options.word_splitter)
    warn_about_truncated_words(tokenizer, vocabulary)
    return _RunData(train_sentences, held_out_sentences, train_sample, vocabulary, tokenizer)


def _counted(sentences: Iterator[list[str]], bar: CorpusProgress) -> Iterator[list[str]]:
    for words in sentences:
        bar.update(1, len(words))
        yield words


# Step 3: model ---------------------------------------------------------------------------------------------------
def _build_model(setup: _RunSetup, data: _RunData) -> ELMoForPreTraining:
    """The model (its config in ``setup.config``): a resumed run's from its checkpoint (its vocabulary must be the
    saved one); a new run's sized to the vocabulary, starting from the initial model's weights when there is one, with
    the vocabulary, tokenizer and options saved first (by the main process, each file recorded before it is there)."""
    options, config, initial, output = setup.options, setup.config, setup.initial, setup.output
    output_dir, checkpoint = output.path, output.checkpoint
    if checkpoint is not None:
        saved_vocabulary = ELMoWordVocabulary.load(output_dir)
        if saved_vocabulary != data.vocabulary:
            raise PretrainingError(
                f"cannot resume {output_dir}: the corpus gives a different vocabulary ({len(data.vocabulary)} words) "
                f"than the one saved there ({len(saved_vocabulary)}): the corpus files changed"
            )
        config = ELMoConfig.from_pretrained(checkpoint)
    else:
        config.word_vocab_size = len(data.vocabulary)
        if options.softmax_samples is not None:
            config.softmax_num_samples = options.softmax_samples
        if options.dropout is not None:
            config.lm_dropout = options.dropout
        config.architectures = [ELMoForPreTraining.__name__]
        config.pad_token_id = data.tokenizer.pad_token_id  # what Trainer would align it to, with a warning
        if setup.args.should_save:
            output.put_in_place(lambda folder: _save_vocabulary_tokenizer_and_options(options, data, folder))
            output.record()
    setup.config = config
    set_seed(options.seed)
    model = ELMoForPreTraining(config)
    if initial is not None and checkpoint is None:
        model.load_state_dict(initial_state_for(initial, data.vocabulary))
        initial.state_dict = None  # the model holds the weights now
    # The biLM loss does not read the scalar mix (a downstream task's weights); frozen, so that DDP does not wait for
    # gradients that never come (an optimizer skips them either way: one process trains exactly as before).
    model.elmo.scalar_mixes.requires_grad_(False)
    return model


def _save_vocabulary_tokenizer_and_options(options: PretrainingOptions, data: _RunData, folder: Path) -> None:
    data.vocabulary.save(folder)
    data.tokenizer.save_pretrained(folder)
    (folder / PRETRAINING_OPTIONS_FILE_NAME).write_text(json.dumps(options.to_dict(), indent=2) + "\n", encoding="utf-8")


# Step 4: train ---------------------------------------------------------------------------------------------------
@dataclass
class _Training:
    """What training and the final evaluation (eval mode, full softmax, every prediction once) leave."""

    state: Any  # transformers.TrainerState
    metrics: dict[str, float]  # train_runtime, train_steps_per_second, ...
    held_out: dict[str, float]
    train_sample: dict[str, float]
    stop_reason: str | None


def _train(setup: _RunSetup, model: ELMoForPreTraining, data: _RunData) -> _Training:
    """Train (or resume) with ``ELMoPreTrainingTrainer``, evaluate, save the model, tokenizer and trainer state
    (the main process; each checkpoint and file recorded before it is there). Raises ``PretrainingInterrupted``
    after a Ctrl-C (a checkpoint is saved first)."""
    options, config, args, output = setup.options, setup.config, setup.args, setup.output
    output_dir, checkpoint = output.path, output.checkpoint
    if options.regime == "windowed":
        train_data = windowed_stream(
            data.train, data.vocabulary, options, config, "training data", args, training=True, token_directory=output_dir
        )
        collator = default_data_collator
    else:
        train_data = data.train
        collator = DataCollatorForBiLM(data.vocabulary, data.tokenizer, label_boundary_positions=True)
    args.output_dir = str(output_dir)  # the directory as opened
    held_out_data = _evaluation_data(data.held_out, data.vocabulary, options, config, "held-out data", args)
    train_sample_data = _evaluation_data(data.train_sample, data.vocabulary, options, config, "training sample", args)

    evaluate_periodically = options.eval_steps > 0
    stop_control = _StopControl(
        options.max_time_minutes * 60 if options.max_time_minutes is not None else None, options.handle_interrupt
    )
    trainer = ELMoPreTrainingTrainer(
        model=model, args=args, train_dataset=train_data, eval_dataset=held_out_data if evaluate_periodically else None,
        data_collator=collator, processing_class=data.tokenizer, compute_metrics=bilm_perplexity_metrics,
        callbacks=[stop_control], before_checkpoint=output.before_checkpoint, after_checkpoint=output.record,
        optimizer_cls_and_kwargs=(
            bilm_tf_adagrad(options.resolved_learning_rate, options.window_size) if options.optimizer == "adagrad" else None
        ),
    )
    try:
        train_output = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint is not None else None)
    finally:
        stop_control.restore()
    if stop_control.stop_reason == "interrupted":
        raise PretrainingInterrupted(output_dir, latest_complete_checkpoint(output_dir))

    held_out_metrics = _perplexity_metrics(trainer.evaluate(held_out_data, metric_key_prefix="held_out"), "held_out")
    train_metrics = _perplexity_metrics(trainer.evaluate(train_sample_data, metric_key_prefix="train_sample"), "train_sample")
    if args.should_save:
        output.put_in_place(lambda folder: _save_model_tokenizer_and_state(model, data.tokenizer, trainer.state, folder))
    return _Training(trainer.state, train_output.metrics, held_out_metrics, train_metrics, stop_control.stop_reason)


def _save_model_tokenizer_and_state(model: ELMoForPreTraining, tokenizer: ELMoTokenizer, state: Any, folder: Path) -> None:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    state.save_to_json(str(folder / TRAINER_STATE_NAME))  # what Trainer.save_state writes


# Step 5: report --------------------------------------------------------------------------------------------------
def _report(setup: _RunSetup, model: ELMoForPreTraining, data: _RunData, training: _Training) -> PretrainingReport:
    """The report (``pretraining_report.json``), after the optional HDF5 export; both written by the main process
    (every process returns the report), each file recorded before it is there."""
    options, initial, output = setup.options, setup.initial, setup.output
    output_dir, checkpoint = output.path, output.checkpoint
    losses, eval_curve, initial_metrics = _log_history_curves(training.state.log_history)
    state = training.state
    report = PretrainingReport(
        learning_rate=options.resolved_learning_rate,
        initialised_from=options.init_from,
        added_words=len(data.vocabulary) - len(initial.vocabulary) if initial is not None else 0,
        output_dir=str(output_dir),
        regime=options.regime,
        steps=state.global_step,
        max_steps=state.max_steps,
        epochs=float(state.epoch or 0.0),
        tokens_seen=int(state.num_input_tokens_seen),
        wall_time_seconds=time.monotonic() - setup.start,
        train_runtime_seconds=float(training.metrics.get("train_runtime", 0.0)),
        steps_per_second=float(training.metrics.get("train_steps_per_second", 0.0)),
        num_parameters=model.num_parameters(),
        num_bilm_parameters=model.elmo.num_parameters(),
        vocabulary_size=len(data.vocabulary),
        num_train_sentences=len(data.train),
        num_held_out_sentences=len(data.held_out),
        held_out=training.held_out,
        held_out_unigram=unigram_perplexity(data.vocabulary, data.held_out),
        train_sample=training.train_sample,
        train_sample_unigram=unigram_perplexity(data.vocabulary, data.train_sample),
        num_train_sample_sentences=len(data.train_sample),
        held_out_initial=initial_metrics,
        stopped_early=training.stop_reason,
        resumed_from=checkpoint.name if checkpoint is not None else None,
        config=setup.config.to_diff_dict(),
        options=options.to_dict(),
        loss_history=losses,
        eval_history=eval_curve,
    )
    if not setup.args.should_save:
        return report
    if options.export_hdf5:
        output.put_in_place(lambda folder: export_hdf5(output_dir, folder / HDF5_DIRECTORY_NAME))
        report.hdf5_dir = str(output_dir / HDF5_DIRECTORY_NAME)
    content = json.dumps(report.to_dict(), indent=2) + "\n"
    output.put_in_place(lambda folder: (folder / REPORT_FILE_NAME).write_text(content, encoding="utf-8"))
    return report


__all__ = [
    "CONFIG_PRESETS", "OPTIMIZERS", "REGIMES", "PretrainingError", "PretrainingInterrupted", "PretrainingOptions",
    "PretrainingReport", "export_hdf5", "load_pretraining_config", "load_training_sentences", "pretrain",
    "sample_sentences", "split_held_out", "unigram_perplexity", "warn_about_truncated_words", "with_character_slots",
]
