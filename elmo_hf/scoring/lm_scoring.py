"""Scoring text with a pre-trained ELMo biLM: sentence perplexity, next / previous words, in-context substitutes.

``ELMoLanguageModelScorer`` wraps an [`ELMoForPreTraining`] (its shared word softmax), its [`ELMoTokenizer`] and its
[`ELMoWordVocabulary`]. Every sentence is read as ``<S> w1 ... wn </S>`` from the initial LSTM state, at the positions
of ``ELMoModel(..., keep_sentence_boundaries=True)`` (0 = ``<S>``, i = word i, n + 1 = ``</S>``), in eval mode under
``torch.inference_mode()``. What each score means, with worked examples: docs/guide/pretraining.md, "LM scoring".
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..modeling_elmo import IGNORE_INDEX
from ..modeling_elmo_pretraining import ELMoForPreTraining
from ..tokenization_elmo import ELMoTokenizer
from ..validation_elmo import check_int
from ..corpus.vocabulary import (
    BOS_WORD_ID,
    EOS_WORD_ID,
    UNK_WORD_ID,
    VOCABULARY_FILE_NAME,
    ELMoWordVocabulary,
    check_sentence_words,
    sentence_bilm_labels,
)

# Largest (rows x vocabulary) block of logits made at once: a large vocabulary never needs batch x positions x V.
SOFTMAX_BLOCK_ELEMENTS = 2**24
# Read in place of an empty context: the forward LM at <S> and the backward LM at </S> never read it.
_PLACEHOLDER_WORD = "."


class _PerplexitiesFromTotals:
    """The perplexities of a result holding summed `forward_negative_log_likelihood`,
    `backward_negative_log_likelihood` and `num_predictions` (per direction)."""

    forward_negative_log_likelihood: float
    backward_negative_log_likelihood: float
    num_predictions: int

    @property
    def forward_perplexity(self) -> float:
        """exp(forward NLL / predictions)."""
        return math.exp(self.forward_negative_log_likelihood / self.num_predictions)

    @property
    def backward_perplexity(self) -> float:
        """exp(backward NLL / predictions)."""
        return math.exp(self.backward_negative_log_likelihood / self.num_predictions)

    @property
    def perplexity(self) -> float:
        """Joint perplexity, exp of the mean of the two directions' mean NLL (bilm-tf's figure, as
        `perplexity_from_totals` reports it); with the same count in both directions, the geometric mean of
        `forward_perplexity` and `backward_perplexity`."""
        mean_nll = (self.forward_negative_log_likelihood + self.backward_negative_log_likelihood) / 2
        return math.exp(mean_nll / self.num_predictions)


@dataclass(frozen=True)
class SentenceScore(_PerplexitiesFromTotals):
    r"""
    Language-model scores of one sentence of n words (natural logarithms).

    Each direction makes n + 1 predictions: forward ``<S> -> w1, ..., wn -> </S>``, backward
    ``</S> -> wn, ..., w1 -> <S>``. Words outside the vocabulary are scored as ``<UNK>``, which makes the perplexity
    optimistic: check ``num_unknown_words``.

    Args:
        words (`tuple[str, ...]`): the sentence's words, as read by the model.
        forward_negative_log_likelihood (`float`): summed NLL of the n + 1 forward predictions.
        backward_negative_log_likelihood (`float`): summed NLL of the n + 1 backward predictions.
        num_predictions (`int`): predictions per direction, n + 1.
        forward_prediction_nlls (`tuple[float, ...]`): NLL of each forward prediction, in sentence order of the
            targets w1, ..., wn, `</S>` (n + 1 values).
        backward_prediction_nlls (`tuple[float, ...]`): NLL of each backward prediction, in sentence order of the
            targets `<S>`, w1, ..., wn (n + 1 values).
        unknown_word_positions (`tuple[int, ...]`): 0-based positions of the words scored as `<UNK>`.
    """

    words: tuple[str, ...]
    forward_negative_log_likelihood: float
    backward_negative_log_likelihood: float
    num_predictions: int
    forward_prediction_nlls: tuple[float, ...]
    backward_prediction_nlls: tuple[float, ...]
    unknown_word_positions: tuple[int, ...]

    @property
    def num_unknown_words(self) -> int:
        """Words scored as `<UNK>` (each is a target of both directions)."""
        return len(self.unknown_word_positions)


@dataclass(frozen=True)
class CorpusScore(_PerplexitiesFromTotals):
    r"""
    Scores of a list of sentences and their exact totals (summed NLL / summed count, not a mean of sentence
    perplexities). Unknown words are scored as `<UNK>` (see [`SentenceScore`]), as bilm-tf's evaluation does.

    Args:
        sentences (`tuple[SentenceScore, ...]`): one score per input sentence, in input order.
        forward_negative_log_likelihood (`float`): summed forward NLL of every sentence.
        backward_negative_log_likelihood (`float`): summed backward NLL of every sentence.
        num_predictions (`int`): predictions per direction, the sum of (n + 1) over sentences.
        num_unknown_words (`int`): words scored as `<UNK>`.
    """

    sentences: tuple[SentenceScore, ...]
    forward_negative_log_likelihood: float
    backward_negative_log_likelihood: float
    num_predictions: int
    num_unknown_words: int


@dataclass(frozen=True)
class WordPrediction:
    """One word of a one-direction top-k: `probability` under the full softmax (not renormalised after special
    tokens are excluded from the list)."""

    word: str
    word_id: int
    probability: float
    log_probability: float


@dataclass(frozen=True)
class LexicalSubstitute:
    """One in-context substitute: `probability` is the combined (product-of-experts) probability, renormalised over
    the vocabulary's words; `forward_probability` / `backward_probability` are each direction's own softmax
    probability of the word at that position."""

    word: str
    word_id: int
    probability: float
    forward_probability: float
    backward_probability: float


class ELMoLanguageModelScorer:
    r"""
    Scores text with the forward and backward language models of an [`ELMoForPreTraining`].

    Sentences and contexts are a `str` (split by the tokenizer's `word_splitter`) or a list of words. Each call runs
    in eval mode (the previous mode restored after it) under `torch.inference_mode()` on the model's device: the top
    layers of `model.elmo(..., keep_sentence_boundaries=True)` through `model.softmax`, as
    `ELMoForPreTraining.forward` computes them in eval mode.

    Args: the model with its word softmax, the tokenizer it was trained with, and the softmax's words
    (`len(vocabulary) == config.word_vocab_size`).

    ```python
    scorer = ELMoLanguageModelScorer.from_pretrained("models/my-elmo")  # as the pretraining CLI saves
    scorer.score(["The cat sat on the mat .", ["a", "pre-split", "sentence"]]).perplexity
    scorer.next_words("The cat", k=3)                      # [WordPrediction(word='sat', probability=...), ...]
    scorer.substitutes("The cat sat on the mat .", position=2, k=3)   # [LexicalSubstitute(...), ...]
    ```
    """

    def __init__(self, model: ELMoForPreTraining, tokenizer: ELMoTokenizer, vocabulary: ELMoWordVocabulary):
        softmax = getattr(model, "softmax", None)
        if not isinstance(softmax, nn.Linear) or not isinstance(getattr(model, "elmo", None), nn.Module):
            raise TypeError(
                "model must be an ELMoForPreTraining (an ELMo with its word softmax `model.softmax`), got "
                f"{type(model).__name__}, which has no LM head: load the pre-trained checkpoint with "
                "ELMoForPreTraining.from_pretrained."
            )
        config = model.config
        vocab_size = getattr(config, "word_vocab_size", None)
        if not isinstance(vocab_size, int) or vocab_size < 3 or softmax.out_features != vocab_size:
            raise ValueError(
                f"model.config.word_vocab_size must be the size of the model's softmax (>= 3), got {vocab_size!r} "
                f"for a softmax of {softmax.out_features} words."
            )
        if not isinstance(tokenizer, ELMoTokenizer):
            raise TypeError(f"tokenizer must be an ELMoTokenizer, got {type(tokenizer).__name__}")
        mismatch = tokenizer.mismatch_with(config)  # its characters per word, character scheme and boundary rows
        if mismatch is not None:
            raise ValueError(f"the tokenizer does not fit the model: {mismatch}")
        if not isinstance(vocabulary, ELMoWordVocabulary):
            raise TypeError(f"vocabulary must be an ELMoWordVocabulary, got {type(vocabulary).__name__}")
        if len(vocabulary) != vocab_size:
            raise ValueError(
                f"the vocabulary has {len(vocabulary)} words but the model's softmax has config.word_vocab_size = "
                f"{vocab_size}: use the vocabulary the model was trained with."
            )
        self.model = model
        self.tokenizer = tokenizer
        self.vocabulary = vocabulary

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str | torch.device | None = None) -> "ELMoLanguageModelScorer":
        """Load the model, tokenizer and vocabulary from one directory (as the pretraining CLI saves them) onto
        ``device`` (default: CPU). ``FileNotFoundError`` names the missing files; a checkpoint without a trained
        softmax (saved from `ELMoModel`) is a ``ValueError``."""
        directory = Path(directory)
        if not directory.is_dir():
            raise FileNotFoundError(
                f"{directory} is not a directory: expected one written by model.save_pretrained, "
                "tokenizer.save_pretrained and vocabulary.save"
            )
        expected = (
            ("config.json", "model.save_pretrained(directory)"),
            ("tokenizer_config.json", "tokenizer.save_pretrained(directory)"),
            (VOCABULARY_FILE_NAME, "vocabulary.save(directory), the LM heads' word vocabulary"),
        )
        missing = [f"{name} (written by {writer})" for name, writer in expected if not (directory / name).is_file()]
        if missing:
            raise FileNotFoundError(
                f"{directory} lacks {'; '.join(missing)}. LM scoring needs the pre-trained model, its tokenizer and "
                "its word vocabulary saved in one directory."
            )
        model, loading_info = ELMoForPreTraining.from_pretrained(directory, output_loading_info=True)
        missing_weights = sorted(loading_info.get("missing_keys", ()))
        if missing_weights:
            raise ValueError(
                f"{directory} holds no trained weights for {missing_weights}: LM scoring needs a checkpoint saved "
                "from ELMoForPreTraining (with its word softmax)."
            )
        if device is not None:
            model = model.to(device)
        return cls(model, ELMoTokenizer.from_pretrained(directory), ELMoWordVocabulary.load(directory))

    def _words(self, sentence: Any, where: str, allow_empty: bool = False) -> list[str]:
        """The words of a `str` (split by the tokenizer) or a list of words, checked; `where` names the input."""
        if isinstance(sentence, str):
            words = self.tokenizer.tokenize(sentence)
            where = f"{where} ({sentence[:40]!r} split by the {self.tokenizer.word_splitter!r} splitter)"
        else:
            words = sentence
        words = check_sentence_words(words, where)
        if not words and not allow_empty:
            raise ValueError(f"{where} has no words: a sentence needs at least one word to be scored")
        return words

    @contextlib.contextmanager
    def _evaluating(self) -> Iterator[None]:
        """Eval mode and inference mode for the duration of a call; every module's mode is restored afterwards."""
        modes = [(module, module.training) for module in self.model.modules()]
        self.model.eval()
        try:
            with torch.inference_mode():
                yield
        finally:
            for module, training in modes:
                module.training = training

    def _top_layers(self, sentences: Sequence[Sequence[str]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Top forward and backward layers, (B, T + 2, P) each, at positions `<S> w1 .. wn </S>` (then padding)."""
        encoding = self.tokenizer(list(sentences), is_split_into_words=True, padding=True, return_tensors="pt")
        device = self.model.softmax.weight.device
        output = self.model.elmo(
            encoding["input_ids"].to(device),
            attention_mask=encoding["attention_mask"].to(device),
            keep_sentence_boundaries=True,
        )
        forward_hidden, backward_hidden = output.last_hidden_state.chunk(2, dim=-1)  # (B, T + 2, P) each
        return forward_hidden, backward_hidden

    def _log_probabilities(self, hidden: torch.Tensor) -> torch.Tensor:
        """(V,) float64 log-softmax of the word softmax at one position's hidden state (P,)."""
        return torch.log_softmax(self.model.softmax(hidden).double(), dim=-1)

    def _target_log_probabilities(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """(N,) log p(target) for hidden states (N, P), the logits made a block of rows at a time."""
        rows_per_block = max(1, SOFTMAX_BLOCK_ELEMENTS // self.model.softmax.out_features)
        pieces = []
        for start in range(0, hidden.shape[0], rows_per_block):
            logits = self.model.softmax(hidden[start : start + rows_per_block]).float()  # (rows, V)
            log_probabilities = torch.log_softmax(logits, dim=-1)
            pieces.append(log_probabilities.gather(1, targets[start : start + rows_per_block, None]).squeeze(1))
        return torch.cat(pieces) if pieces else hidden.new_zeros(0)

    def score(self, sentences: Sequence[str | Sequence[str]], batch_size: int = 32) -> CorpusScore:
        """[`CorpusScore`]: forward, backward and joint perplexity of every sentence (a `str` or a list of words, at
        least one word) in input order, and exact totals. Sentences are grouped by length, ``batch_size`` a model
        call; the scores do not depend on the grouping."""
        if isinstance(sentences, str) or not isinstance(sentences, Sequence):
            raise TypeError(
                "sentences must be a list of sentences (each a str or a list of words), got "
                f"{type(sentences).__name__}; for one sentence use score_sentence"
            )
        if not sentences:
            raise ValueError("sentences is empty: give at least one sentence to score")
        check_int("batch_size", batch_size, 1, hint="sentences per model call")
        all_words = [self._words(sentence, f"sentence {index}") for index, sentence in enumerate(sentences)]
        by_length = sorted(range(len(all_words)), key=lambda index: len(all_words[index]))
        scores: list[SentenceScore | None] = [None] * len(all_words)
        with self._evaluating():
            for start in range(0, len(by_length), batch_size):
                indices = by_length[start : start + batch_size]
                for index, score in zip(indices, self._score_batch([all_words[index] for index in indices])):
                    scores[index] = score
        return CorpusScore(
            sentences=tuple(scores),
            forward_negative_log_likelihood=math.fsum(score.forward_negative_log_likelihood for score in scores),
            backward_negative_log_likelihood=math.fsum(score.backward_negative_log_likelihood for score in scores),
            num_predictions=sum(score.num_predictions for score in scores),
            num_unknown_words=sum(score.num_unknown_words for score in scores),
        )

    def score_sentence(self, sentence: str | Sequence[str]) -> SentenceScore:
        """[`SentenceScore`] of one sentence (a `str` or a list of words); see `score`."""
        return self.score([sentence], batch_size=1).sentences[0]

    def _score_batch(self, sentences: list[list[str]]) -> list[SentenceScore]:
        forward_hidden, backward_hidden = self._top_layers(sentences)  # (B, T + 2, P) each
        num_positions = forward_hidden.shape[1]
        word_ids = [self.vocabulary.encode(words) for words in sentences]
        # bilm-tf's targets: <S> -> w1 .. wn -> </S> forward, </S> -> wn .. w1 -> <S> backward (-100 elsewhere).
        next_word_labels = torch.full((len(sentences), num_positions), IGNORE_INDEX, dtype=torch.long)
        previous_word_labels = torch.full_like(next_word_labels, IGNORE_INDEX)
        for row, ids in enumerate(word_ids):
            next_ids, previous_ids = sentence_bilm_labels(ids, label_boundary_positions=True)  # n + 2 each
            next_word_labels[row, : len(next_ids)] = torch.tensor(next_ids)
            previous_word_labels[row, : len(previous_ids)] = torch.tensor(previous_ids)
        counts = [len(ids) + 1 for ids in word_ids]
        nlls = {}
        for direction, hidden, labels in (
            ("forward", forward_hidden, next_word_labels),
            ("backward", backward_hidden, previous_word_labels),
        ):
            labels = labels.to(hidden.device)
            is_predicted = labels != IGNORE_INDEX  # (B, T + 2); row-major order keeps each sentence's targets in order
            log_probabilities = self._target_log_probabilities(hidden[is_predicted], labels[is_predicted])
            nlls[direction] = (-log_probabilities).double().cpu().split(counts)
        scores = []
        for row, words in enumerate(sentences):
            forward_nlls, backward_nlls = nlls["forward"][row], nlls["backward"][row]
            unknown = tuple(position for position, word_id in enumerate(word_ids[row]) if word_id == UNK_WORD_ID)
            scores.append(SentenceScore(
                tuple(words), float(forward_nlls.sum()), float(backward_nlls.sum()), counts[row],
                tuple(forward_nlls.tolist()), tuple(backward_nlls.tolist()), unknown,
            ))
        return scores

    def next_words(
        self,
        context: str | Sequence[str],
        k: int = 10,
        exclude_unknown: bool = True,
        exclude_end_of_sentence: bool = False,
    ) -> list[WordPrediction]:
        """
        The k most likely words after `context` at the start of a sentence: the forward LM after reading
        `<S> context`. An empty context gives the likeliest first words of a sentence.

        `<S>` (never a forward target) is always left out; `<UNK>` is left out unless `exclude_unknown=False`;
        `</S>` ("the sentence ends here") is kept unless `exclude_end_of_sentence=True`. Probabilities are those
        of the full softmax; fewer than k words come back when the vocabulary has fewer candidates.
        """
        return self._one_direction(context, k, False, exclude_unknown, exclude_end_of_sentence)

    def previous_words(
        self,
        context: str | Sequence[str],
        k: int = 10,
        exclude_unknown: bool = True,
        exclude_begin_of_sentence: bool = False,
    ) -> list[WordPrediction]:
        """
        The k most likely words before `context` at the end of a sentence: the backward LM after reading
        `</S> wn .. w1` (what precedes the context's first word). An empty context gives the likeliest last words.

        `</S>` (never a backward target) is always left out; `<UNK>` is left out unless `exclude_unknown=False`;
        `<S>` ("the context starts the sentence") is kept unless `exclude_begin_of_sentence=True`. Probabilities are
        those of the full softmax.
        """
        return self._one_direction(context, k, True, exclude_unknown, exclude_begin_of_sentence)

    def _one_direction(
        self, context: Any, k: int, backward: bool, exclude_unknown: bool, exclude_boundary: bool
    ) -> list[WordPrediction]:
        """``next_words`` (``backward`` False) or ``previous_words``: one LM's top k after reading the context."""
        check_int("k", k, 1, hint="how many words to return")
        words = self._words(context, "context", allow_empty=True)
        with self._evaluating():
            forward_hidden, backward_hidden = self._top_layers([words or [_PLACEHOLDER_WORD]])
            # Forward: position len(words) has read <S> w1 .. wn (<S> alone for an empty context). Backward: position
            # 1 (w1) has read </S> wn .. w1; for an empty context, position 2 (</S> after the placeholder).
            hidden = backward_hidden[0, 1 if words else 2] if backward else forward_hidden[0, len(words)]
            log_probabilities = self._log_probabilities(hidden)
        never_predicted, boundary = (EOS_WORD_ID, BOS_WORD_ID) if backward else (BOS_WORD_ID, EOS_WORD_ID)
        excluded = {never_predicted} | ({UNK_WORD_ID} if exclude_unknown else set()) | ({boundary} if exclude_boundary else set())
        top = _top_ids(log_probabilities, k, excluded)
        return [
            WordPrediction(self.vocabulary.id_to_word(word_id), word_id, math.exp(log_probability), log_probability)
            for word_id, log_probability in zip(top, log_probabilities[top].tolist())
        ]

    def substitutes(
        self,
        sentence: str | Sequence[str],
        position: int,
        k: int = 10,
        exclude_original: bool = True,
        exclude_unknown: bool = True,
    ) -> list[LexicalSubstitute]:
        """
        Words that fit at `position` of `sentence`, predicted by both LMs from the rest of the sentence.

        The forward LM has read `<S> w1 .. w(i-1)` and the backward LM `</S> wn .. w(i+1)`; neither reads the word
        at `position`, so it does not influence the result. Their distributions are combined as a product of
        experts, log p(w) = log p_fwd(w) + log p_bwd(w) - log Z, normalised over the vocabulary's words (every id
        but `<S>` and `</S>`, which cannot fill a word position; `<UNK>` included). `position` is 0-based;
        `exclude_original` leaves out the word there (its id: `<UNK>` for an unknown word), `exclude_unknown` `<UNK>`.
        The k most probable first (probabilities not renormalised after exclusions).
        """
        check_int("k", k, 1, hint="how many words to return")
        words = self._words(sentence, "sentence")
        hint = f"the index of a word of this {len(words)}-word sentence {' '.join(words)[:60]!r}"
        check_int("position", position, 0, len(words), hint=hint)
        with self._evaluating():
            forward_hidden, backward_hidden = self._top_layers([words])
            # Word `position` sits at position + 1 (after <S>): forward from position, backward from position + 2.
            forward_log_probabilities = self._log_probabilities(forward_hidden[0, position])
            backward_log_probabilities = self._log_probabilities(backward_hidden[0, position + 2])
        joint = forward_log_probabilities + backward_log_probabilities
        joint[[BOS_WORD_ID, EOS_WORD_ID]] = -math.inf
        combined = joint - torch.logsumexp(joint, dim=0)
        excluded = {BOS_WORD_ID, EOS_WORD_ID}
        if exclude_unknown:
            excluded.add(UNK_WORD_ID)
        if exclude_original:
            excluded.add(self.vocabulary.word_to_id(words[position]))
        return [
            LexicalSubstitute(
                word=self.vocabulary.id_to_word(word_id),
                word_id=word_id,
                probability=math.exp(float(combined[word_id])),
                forward_probability=math.exp(float(forward_log_probabilities[word_id])),
                backward_probability=math.exp(float(backward_log_probabilities[word_id])),
            )
            for word_id in _top_ids(combined, k, excluded)
        ]


def _top_ids(scores: torch.Tensor, k: int, excluded: set[int]) -> list[int]:
    """The ids of the ``k`` highest ``scores`` (V,), best first, none of ``excluded`` (fewer when fewer are left)."""
    candidates = scores.clone()
    candidates[sorted(excluded)] = -math.inf
    return torch.topk(candidates, min(k, len(candidates) - len(excluded))).indices.tolist()


__all__ = ["CorpusScore", "ELMoLanguageModelScorer", "LexicalSubstitute", "SentenceScore", "WordPrediction"]
