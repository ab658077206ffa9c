"""ELMo pre-training: the biLM objective of Peters et al. (2018), section 3.1.

``ELMoForPreTraining`` is ``ELMoModel`` plus one word-level softmax shared by the two directions: the forward LM
predicts the next word from the top forward LSTM layer, the backward LM the previous word from the top backward
layer, and the loss is the mean of the two directions' mean negative log-likelihoods (bilm-tf's joint loss). The
token layer (character CNN) is shared too; the LSTM stacks are separate.

Two regimes, chosen by the batch (see docs/guide/pretraining.md and docs/design/pretraining-data.md):

- **Per sentence** (``DataCollatorForBiLM``): ``input_ids`` (B, T, 50) are sentences; the model adds ``<S>`` /
  ``</S>`` and predicts ``next_word_labels`` / ``previous_word_labels`` of shape (B, T) (word positions only) or
  (B, T + 2) (the collator's ``label_boundary_positions=True``: also ``<S>`` -> w1 and ``</S>`` -> wn, as bilm-tf).
- **Windows with state carried across batches** (``WindowedBiLMStream``, the original's regime): the batch also has
  ``backward_input_ids`` (bilm-tf's reversed stream, read left to right by the backward stack), ``window_index`` and
  ``row_index``. Nothing is added around the windows (the stream holds the boundaries). The model keeps no state
  between calls: the caller passes the previous window's ``lstm_state`` and asks for the next one
  (``return_lstm_state=True``); ``elmo_hf.pretraining.trainer.ELMoPreTrainingTrainer`` does this for ``Trainer``.

Training with ``config.softmax_num_samples > 0`` uses a sampled softmax (``sampled_softmax_negative_log_likelihood``);
in eval mode the full softmax always runs, so the reported per-direction perplexity is exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F
from transformers import initialization as init
from transformers.utils import ModelOutput, logging

from .configuration_elmo import ELMoConfig
from .modeling_elmo import IGNORE_INDEX, ELMoModel, ELMoPreTrainedModel, LstmState
from .validation_elmo import check_forward_arguments

logger = logging.get_logger(__name__)


@dataclass
class ELMoForPreTrainingOutput(ModelOutput):
    r"""
    Outputs of [`ELMoForPreTraining`]. T' is the number of positions predicted from (T words, T + 2 with boundary
    labels, or the window length).

    Args:
        loss (`torch.FloatTensor` of shape `()`, returned when labels are given):
            bilm-tf's joint loss: the mean of the forward and the backward mean negative log-likelihoods (sampled
            softmax in training when `config.softmax_num_samples > 0`, otherwise exact).
        negative_log_likelihood (`torch.FloatTensor` of shape `(2,)`, returned when labels are given):
            Summed negative log-likelihood of the batch's predictions, `[forward, backward]`, from the same softmax
            as `loss`. Summed over batches and divided by `num_predictions` it gives the exact per-direction mean
            NLL of a dataset; exp of that is its perplexity (see `perplexity_from_totals`).
        num_predictions (`torch.LongTensor` of shape `(2,)`, returned when labels are given):
            Number of labels that are not -100, `[forward, backward]`.
        forward_logits (`torch.FloatTensor` of shape `(batch, T', word_vocab_size)`, with `return_logits=True`):
            Full-softmax logits of the next word at each position.
        backward_logits (`torch.FloatTensor` of shape `(batch, T', word_vocab_size)`, with `return_logits=True`):
            Full-softmax logits of the previous word (aligned with `backward_input_ids` in the windowed regime).
        lstm_state (`tuple(torch.FloatTensor)`, with `return_lstm_state=True`):
            `(hidden, cell)` after the batch, as in [`ELMoModelOutput`].
    """

    loss: torch.FloatTensor | None = None
    negative_log_likelihood: torch.FloatTensor | None = None
    num_predictions: torch.LongTensor | None = None
    forward_logits: torch.FloatTensor | None = None
    backward_logits: torch.FloatTensor | None = None
    lstm_state: LstmState | None = None


def log_uniform_log_probabilities(word_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """log P(id) of the log-uniform (Zipfian) distribution over ids ``0 .. vocab_size - 1``:
    ``P(k) = (log(k + 2) - log(k + 1)) / log(vocab_size + 1)``, TF's default candidate sampler, a good proposal when
    ids are frequency ranks (as ``ELMoWordVocabulary`` makes them)."""
    return _log_uniform_probabilities(word_ids, vocab_size).log().to(torch.float32)


def _log_uniform_probabilities(word_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """P(id) of the log-uniform distribution, in float64, shaped like ``word_ids``."""
    return torch.log1p(1.0 / (word_ids.to(torch.float64) + 1.0)) / math.log(vocab_size + 1)


def _log_uniform_draws(count: int, vocab_size: int, device: torch.device, generator: torch.Generator | None) -> torch.Tensor:
    """``count`` independent log-uniform draws (inverse CDF, as TF's ``LogUniformSampler::Sample``), shape (count,)."""
    uniform = torch.rand(count, device=device, dtype=torch.float64, generator=generator)
    ids = torch.floor(torch.exp(uniform * math.log(vocab_size + 1))).long() - 1
    return ids.clamp_(0, vocab_size - 1)


class DistinctLogUniformSample(NamedTuple):
    """``ids`` (S,): distinct word ids in the order first drawn; ``num_tries``: the draws it took to find them."""

    ids: torch.LongTensor
    num_tries: int


def sample_distinct_log_uniform(
    num_samples: int, vocab_size: int, device: torch.device, generator: torch.Generator | None = None
) -> DistinctLogUniformSample:
    """``num_samples`` DISTINCT ids from the log-uniform distribution, as TF's ``log_uniform_candidate_sampler(unique=
    True)`` (the default sampler of ``tf.nn.sampled_softmax_loss``, so bilm-tf's): ids are drawn one after another
    and repeats skipped until ``num_samples`` distinct ids are found; ``num_tries`` counts every draw made up to the
    last new id, repeats included. Vectorised: the draws come in blocks (of ``2 * num_samples``, then doubling the
    total), and the first occurrences are kept in draw order, so the result is what one-by-one drawing from the same
    stream of draws would give. Deterministic for a given ``generator`` (on ``device``; default: torch's global
    generator). Costs one device sync per block on an accelerator. Needs ``1 <= num_samples <= vocab_size``."""
    if not 1 <= num_samples <= vocab_size:
        raise ValueError(f"num_samples must be in [1, vocab_size={vocab_size}] to draw distinct ids, got {num_samples}.")
    draws = _log_uniform_draws(2 * num_samples, vocab_size, device, generator)
    while True:
        positions = torch.arange(draws.numel(), device=device)
        first_position = torch.full((vocab_size,), draws.numel(), device=device, dtype=torch.long)
        first_position.scatter_reduce_(0, draws, positions, reduce="amin")
        is_first = first_position[draws] == positions  # (draws,): the draw is its id's first occurrence
        new_ids_so_far = is_first.cumsum(0)
        if int(new_ids_so_far[-1]) >= num_samples:
            num_tries = int(torch.searchsorted(new_ids_so_far, num_samples)) + 1
            return DistinctLogUniformSample(draws[:num_tries][is_first[:num_tries]], num_tries)
        draws = torch.cat([draws, _log_uniform_draws(draws.numel(), vocab_size, device, generator)])


def log_expected_counts(word_ids: torch.Tensor, vocab_size: int, num_samples: int, num_tries: int) -> torch.Tensor:
    """log of the expected number of times each id of ``word_ids`` appears in a ``sample_distinct_log_uniform`` of
    ``num_samples`` ids that took ``num_tries`` draws, as TF computes it: ``1 - (1 - P(id)) ** num_tries`` (the
    chance the id is among ``num_tries`` draws; stably ``-expm1(num_tries * log1p(-P))``), or ``num_samples * P(id)``
    when no draw was repeated (``num_tries == num_samples``, TF's shortcut). Float64 inside, float32 out (TF: float32
    throughout). Shape of ``word_ids``."""
    probabilities = _log_uniform_probabilities(word_ids, vocab_size)
    if num_tries == num_samples:
        expected = probabilities * num_samples
    else:
        expected = -torch.expm1(num_tries * torch.log1p(-probabilities))
    return expected.log().to(torch.float32)


def sampled_softmax_negative_log_likelihood(
    hidden: torch.Tensor,
    targets: torch.LongTensor,
    softmax: nn.Linear,
    num_samples: int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Sampled-softmax NLL (Jean et al. 2015), as TF's ``sampled_softmax_loss`` with its defaults (bilm-tf's call):
    the target against ``num_samples`` distinct negatives drawn once for the batch (``sample_distinct_log_uniform``),
    every logit, the target's included, corrected by ``-log(expected count)`` (``log_expected_counts``), and
    accidental hits (a negative equal to the target) removed.

    Args:
        hidden: (N, P) top-layer outputs.
        targets: (N,) word ids.
        softmax: the shared ``nn.Linear(P, V)``.
        num_samples: distinct negatives per batch, ``1 <= num_samples <= V``.
        generator: draws the negatives (default: torch's global generator).

    Returns:
        (N,) negative log-likelihood of each target among itself and the negatives.
    """
    vocab_size = softmax.out_features
    negatives, num_tries = sample_distinct_log_uniform(num_samples, vocab_size, hidden.device, generator)  # (S,)
    target_logits = (hidden * softmax.weight[targets]).sum(dim=-1) + softmax.bias[targets]  # (N,)
    target_logits = target_logits - log_expected_counts(targets, vocab_size, num_samples, num_tries)
    negative_logits = hidden @ softmax.weight[negatives].T + softmax.bias[negatives]  # (N, S)
    negative_logits = negative_logits - log_expected_counts(negatives, vocab_size, num_samples, num_tries)
    accidental_hits = negatives.unsqueeze(0) == targets.unsqueeze(1)  # (N, S)
    negative_logits = negative_logits.masked_fill(accidental_hits, torch.finfo(negative_logits.dtype).min)
    logits = torch.cat([target_logits.unsqueeze(1), negative_logits], dim=1)  # (N, 1 + S)
    return -torch.log_softmax(logits, dim=-1)[:, 0]


def perplexity_from_totals(negative_log_likelihood: torch.Tensor, num_predictions: torch.Tensor) -> dict[str, float]:
    """Exact perplexities from summed outputs: ``negative_log_likelihood`` and ``num_predictions`` of shape (2,)
    (or (N, 2), summed over N batches). Returns forward / backward perplexity, their mean NLL, and ``perplexity``
    = exp of the mean of the two directions' mean NLL (what bilm-tf reports)."""
    totals = torch.as_tensor(negative_log_likelihood, dtype=torch.float64).reshape(-1, 2).sum(dim=0)
    counts = torch.as_tensor(num_predictions, dtype=torch.float64).reshape(-1, 2).sum(dim=0)
    if (counts == 0).any():
        raise ValueError(f"perplexity needs at least one prediction per direction, got counts {counts.tolist()}.")
    mean_nll = totals / counts
    return {
        "forward_perplexity": math.exp(mean_nll[0]),
        "backward_perplexity": math.exp(mean_nll[1]),
        "forward_nll": float(mean_nll[0]),
        "backward_nll": float(mean_nll[1]),
        "perplexity": math.exp(float(mean_nll.mean())),
        "num_forward_predictions": int(counts[0]),
        "num_backward_predictions": int(counts[1]),
    }


def bilm_perplexity_metrics(eval_prediction) -> dict[str, float]:
    """``compute_metrics`` for ``Trainer``: exact per-direction perplexities over the whole evaluation set.

    ``Trainer`` concatenates each batch's non-loss outputs, ``negative_log_likelihood`` and ``num_predictions``
    (2 values each), into the predictions; this sums them. (``Trainer``'s own ``eval_loss`` is a mean of batch
    means, not the dataset's NLL.)"""
    predictions = eval_prediction.predictions
    if not isinstance(predictions, (tuple, list)) or len(predictions) != 2:
        raise ValueError(
            "bilm_perplexity_metrics expects the model's (negative_log_likelihood, num_predictions) outputs as "
            f"predictions; got {type(predictions).__name__} of length {len(predictions) if isinstance(predictions, (tuple, list)) else 'n/a'}."
        )
    return perplexity_from_totals(torch.as_tensor(predictions[0]), torch.as_tensor(predictions[1]))


class ELMoForPreTraining(ELMoPreTrainedModel):
    """ELMo with its forward and backward language-model heads (one shared softmax over ``config.word_vocab_size``
    words). See the module docstring for the two training regimes."""

    # The loss is a mean per direction computed here; Trainer must not pass `num_items_in_batch` to forward.
    accepts_loss_kwargs = False

    def __init__(self, config: ELMoConfig):
        super().__init__(config)
        if config.word_vocab_size < 3:
            raise ValueError(
                "ELMoForPreTraining needs config.word_vocab_size >= 3 (<S>, </S>, <UNK> and the words: "
                f"len(ELMoWordVocabulary)), got {config.word_vocab_size}."
            )
        self.elmo = ELMoModel(config)
        # bilm-tf's dropout on the top LSTM output before the softmax (training only).
        self.output_dropout = nn.Dropout(config.lm_dropout)
        self.softmax = nn.Linear(config.projection_dim, config.word_vocab_size)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if module is self.softmax:
            # bilm-tf's softmax initialisation.
            init.normal_(module.weight, std=1.0 / math.sqrt(self.config.projection_dim))
            init.zeros_(module.bias)

    def get_output_embeddings(self) -> nn.Linear:
        return self.softmax

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        next_word_labels: torch.LongTensor | None = None,
        previous_word_labels: torch.LongTensor | None = None,
        backward_input_ids: torch.LongTensor | None = None,
        window_index: torch.LongTensor | None = None,
        row_index: torch.LongTensor | None = None,
        lstm_state: LstmState | None = None,
        return_lstm_state: bool = False,
        return_logits: bool = False,
        return_dict: bool | None = None,
        negative_sampling_generator: torch.Generator | None = None,
        **kwargs,
    ) -> ELMoForPreTrainingOutput | tuple:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch, T, max_characters_per_token)`):
                Per sentence: the sentences' character ids, as from [`ELMoTokenizer`]. Windowed: the forward
                stream's tokens (boundaries included).
            attention_mask (`torch.Tensor` of shape `(batch, T)`, *optional*): 1 at real tokens, 0 at (right) padding.
            next_word_labels (`torch.LongTensor` of shape `(batch, T)` or `(batch, T + 2)`, *optional*):
                Word id the forward LM must predict at each position, -100 where nothing is predicted. Per sentence,
                T + 2 columns mean boundary positions are predicted too (`label_boundary_positions=True`).
            previous_word_labels (`torch.LongTensor`, same shape as `next_word_labels`, *optional*):
                Word id the backward LM must predict (aligned with `backward_input_ids` in the windowed regime).
            backward_input_ids (`torch.LongTensor` of shape `(batch, T, max_characters_per_token)`, *optional*):
                Windowed regime: the backward stream, read left to right by the backward stack. Its presence selects
                the windowed regime.
            window_index, row_index (`torch.LongTensor` of shape `(batch,)`, *optional*):
                Windowed regime, checks only: the batch's window number in the epoch (same in every row; a window
                after the first should come with the previous window's `lstm_state`, else a warning says so once),
                and `0 .. batch - 1` (batches are not split or shuffled).
            lstm_state (`tuple(torch.FloatTensor)`, *optional*):
                Initial state `(hidden (L, 2, S, P), cell (L, 2, S, D))`, as for [`ELMoModel`]; in the windowed
                regime, the previous window's `lstm_state` output.
            return_lstm_state, return_logits (`bool`, default `False`): return the state after the batch; the
                full-softmax logits of both directions (batch x T' x vocabulary: large).
            negative_sampling_generator (`torch.Generator`, *optional*):
                The generator (on the model's device) of the sampled softmax's negatives, forward direction first
                (default: torch's global one). `ELMoPreTrainingTrainer` seeds one from (seed, step), so that every
                process of a data-parallel run draws the negatives one process would for the whole batch.
        """
        check_forward_arguments("ELMoForPreTraining", kwargs)
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        if backward_input_ids is None and (window_index is not None or row_index is not None):
            raise ValueError("window_index / row_index belong to the windowed regime, which needs backward_input_ids.")
        forward_hidden, backward_hidden, final_state = (
            self._sentence_top_layer(input_ids, attention_mask, next_word_labels, previous_word_labels, lstm_state, return_lstm_state)
            if backward_input_ids is None  # the windowed regime is selected by its backward stream
            else self._window_top_layer(input_ids, backward_input_ids, attention_mask, window_index, row_index, lstm_state)
        )
        output = ELMoForPreTrainingOutput(lstm_state=final_state if return_lstm_state else None)
        if return_logits:
            output.forward_logits = self.softmax(forward_hidden)
            output.backward_logits = self.softmax(backward_hidden)
        if next_word_labels is not None or previous_word_labels is not None:
            self._add_loss(output, (forward_hidden, backward_hidden), (next_word_labels, previous_word_labels), negative_sampling_generator)
        return output if return_dict else output.to_tuple()

    def _add_loss(
        self,
        output: ELMoForPreTrainingOutput,
        hidden: tuple[torch.Tensor, torch.Tensor],
        labels: tuple[torch.LongTensor | None, torch.LongTensor | None],
        negative_sampling_generator: torch.Generator | None,
    ) -> None:
        """Set `output`'s per-direction summed NLL (2,), prediction counts (2,) and `loss` from the top layer's
        `hidden` states of both directions and their `labels` (next words, previous words)."""
        if labels[0] is None or labels[1] is None:
            raise ValueError("Pass both next_word_labels and previous_word_labels (the loss joins both directions).")
        nll_sums, counts = [], []
        for direction, direction_hidden, direction_labels in zip(("forward", "backward"), hidden, labels):
            nll_sum, count = self._direction_negative_log_likelihood(
                direction, direction_hidden, direction_labels, negative_sampling_generator
            )
            nll_sums.append(nll_sum)
            counts.append(count)
        output.negative_log_likelihood = torch.stack(nll_sums)  # (2,)
        output.num_predictions = torch.tensor(counts, device=output.negative_log_likelihood.device)  # (2,)
        # bilm-tf: 0.5 * (forward mean NLL + backward mean NLL).
        output.loss = (output.negative_log_likelihood / output.num_predictions.clamp(min=1)).mean()

    def _sentence_top_layer(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None,
        next_word_labels: torch.LongTensor | None,
        previous_word_labels: torch.LongTensor | None,
        lstm_state: LstmState | None,
        return_lstm_state: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, LstmState | None]:
        """Per-sentence regime: top forward and backward layers (B, T', P) each, T' = T or T + 2 (boundary labels)."""
        num_words = input_ids.shape[1] if isinstance(input_ids, torch.Tensor) and input_ids.dim() == 3 else None
        label_width = next(
            (labels.shape[1] for labels in (next_word_labels, previous_word_labels) if isinstance(labels, torch.Tensor) and labels.dim() == 2),
            num_words,
        )
        if num_words is not None and label_width not in (num_words, num_words + 2):
            raise ValueError(
                f"next_word_labels / previous_word_labels must have shape (batch, {num_words}) (word positions) or "
                f"(batch, {num_words + 2}) (with the <S> / </S> positions), got width {label_width}."
            )
        elmo_output = self.elmo(
            input_ids,
            attention_mask=attention_mask,
            lstm_state=lstm_state,
            return_lstm_state=return_lstm_state,
            keep_sentence_boundaries=label_width == (num_words or 0) + 2,
        )
        top_layer = self.output_dropout(elmo_output.last_hidden_state)  # (B, T', 2P)
        forward_hidden, backward_hidden = top_layer.chunk(2, dim=-1)
        return forward_hidden, backward_hidden, elmo_output.lstm_state

    def _window_top_layer(
        self,
        input_ids: torch.LongTensor,
        backward_input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None,
        window_index: torch.LongTensor | None,
        row_index: torch.LongTensor | None,
        lstm_state: LstmState | None,
    ) -> tuple[torch.Tensor, torch.Tensor, LstmState]:
        """Windowed regime: top forward layer (B, W, P) over ``input_ids``, top backward layer (B, W, P) over
        ``backward_input_ids`` in its reading order, and the state after the window."""
        window = self._validated_window_index(window_index, row_index, input_ids.shape[0] if isinstance(input_ids, torch.Tensor) else 0)
        if window is not None and window > 0 and lstm_state is None:
            logger.warning_once(
                f"ELMoForPreTraining: window {window} comes without lstm_state and starts from the initial state. To "
                "carry the state from window to window as bilm-tf does, pass the previous window's lstm_state "
                "(return_lstm_state=True), or train with elmo_hf.pretraining.trainer.ELMoPreTrainingTrainer."
            )
        elmo_output = self.elmo(
            input_ids,
            attention_mask=attention_mask,
            backward_input_ids=backward_input_ids,
            lstm_state=lstm_state,
            return_lstm_state=True,
        )
        top_layer = self.output_dropout(elmo_output.last_hidden_state)  # (B, W, 2P)
        forward_hidden, backward_hidden = top_layer.chunk(2, dim=-1)
        return forward_hidden, backward_hidden, elmo_output.lstm_state

    @staticmethod
    def _validated_window_index(
        window_index: torch.Tensor | None, row_index: torch.Tensor | None, batch_size: int
    ) -> int | None:
        if row_index is not None:
            expected = torch.arange(batch_size, device=row_index.device)
            if row_index.shape != (batch_size,) or not torch.equal(row_index.long(), expected):
                raise ValueError(
                    f"row_index must be 0 .. {batch_size - 1} (one batch of WindowedBiLMStream, rows in order), got "
                    f"{row_index.tolist()}: use batch size = the stream's num_rows and dataloader_num_workers=0."
                )
        if window_index is None:
            return None
        if window_index.shape != (batch_size,) or (window_index != window_index[0]).any():
            raise ValueError(f"window_index must hold one window number for all {batch_size} rows, got {window_index.tolist()}.")
        return int(window_index[0])

    def _direction_negative_log_likelihood(
        self, direction: str, hidden: torch.Tensor, labels: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, int]:
        """Summed NLL of one direction's labelled positions (sampled softmax in training when configured)."""
        name = "next_word_labels" if direction == "forward" else "previous_word_labels"
        if not isinstance(labels, torch.Tensor) or labels.shape != hidden.shape[:2]:
            found = tuple(labels.shape) if isinstance(labels, torch.Tensor) else type(labels).__name__
            raise ValueError(f"{name} must have shape {tuple(hidden.shape[:2])} (batch, positions), got {found}.")
        if labels.dtype.is_floating_point or labels.dtype == torch.bool:
            raise ValueError(f"{name} must hold integer word ids, got dtype {labels.dtype}.")
        is_predicted = labels != IGNORE_INDEX  # (B, T')
        targets = labels[is_predicted]  # (N,)
        vocab_size = self.config.word_vocab_size
        if targets.numel() and (targets.min() < 0 or targets.max() >= vocab_size):
            raise ValueError(
                f"{name} must be word ids in [0, {vocab_size}) or -100, got values in [{int(targets.min())}, {int(targets.max())}]."
            )
        selected = hidden[is_predicted]  # (N, P)
        num_samples = self.config.softmax_num_samples
        if self.training and 0 < num_samples < vocab_size:
            nll = sampled_softmax_negative_log_likelihood(selected, targets, self.softmax, num_samples, generator).sum()
        else:
            nll = F.cross_entropy(self.softmax(selected), targets, reduction="sum")
        return nll, int(targets.numel())


__all__ = [
    "ELMoForPreTraining",
    "ELMoForPreTrainingOutput",
    "bilm_perplexity_metrics",
    "perplexity_from_totals",
    "sample_distinct_log_uniform",
    "sampled_softmax_negative_log_likelihood",
]
