"""What a pre-training run starts from: its architecture (a preset, a config file or ``options.json``), its corpus's
sentences and held-out split, and the unigram baseline its report compares with. ``run.py`` runs the steps.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from datasets import Dataset
from transformers import TrainingArguments

from ..configuration_elmo import ELMoConfig, pretraining_fields_from_options
from ..corpus.readers import CorpusError
from ..corpus.sentences import load_sentences
from ..corpus.vocabulary import BOS_WORD_ID, EOS_WORD_ID, ELMoWordVocabulary
from ..tokenization_elmo import ELMoTokenizer
from ..word_splitters_elmo import DEFAULT_WORD_SPLITTER
from .data import WindowedBiLMStream
from .initial_model import InitialModel
from .options import CONFIG_PRESETS, PretrainingError, PretrainingOptions

logger = logging.getLogger(__name__)


# Configuration -------------------------------------------------------------------------------------------------------
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


# Data ----------------------------------------------------------------------------------------------------------------
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
    sentences: Dataset,
    vocabulary: ELMoWordVocabulary,
    options: PretrainingOptions,
    config: ELMoConfig,
    what: str,
    args: TrainingArguments,
):
    """The evaluation dataset of `sentences` in the run's regime: every prediction exactly once (windowed: this
    process's rows of the stream)."""
    if options.regime == "sentence":
        return sentences
    return windowed_stream(sentences, vocabulary, options, config, what, args, training=False)


def windowed_stream(
    sentences: Dataset,
    vocabulary: ELMoWordVocabulary,
    options: PretrainingOptions,
    config: ELMoConfig,
    what: str,
    args: TrainingArguments,
    training: bool,
    token_directory: str | Path | None = None,
) -> WindowedBiLMStream:
    """This process's rows of the run's windowed stream of `sentences`: shuffled per epoch, the remainder dropped
    (`training`), or in corpus order with every position once; `PretrainingError` naming `what` if it cannot be."""
    try:
        return WindowedBiLMStream(
            sentences, vocabulary, num_rows=options.batch_size, window_size=options.window_size, shuffle=training,
            seed=options.seed, remainder="drop" if training else "pad", progress=training and options.progress,
            max_characters_per_token=config.max_characters_per_token, token_directory=token_directory,
            rank=args.process_index, world_size=args.world_size,
        )
    except ValueError as error:
        raise PretrainingError(f"{what}: {error}") from None


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
