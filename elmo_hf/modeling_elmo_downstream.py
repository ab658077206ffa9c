"""Downstream task heads on ELMo: the paper's stage 2 (Peters et al. 2018, section 3.3).

The biLM is pre-trained once; each task then freezes it and learns its own mix of the biLM's L + 1 layers,

    ELMo_k = gamma * sum_j softmax(w)_j h_{k,j}

(``ELMoScalarMix``, one ``w`` and ``gamma`` per mix), which is concatenated with a context-independent word vector
``x_k`` and fed to a task model. Dropout is applied to ELMo, and ``lambda * ||w||^2`` is added to the loss.
Optionally a second, independent mix is concatenated to the task model's output. Per word k, in the order the code
runs (config fields in brackets, see [`ELMoConfig`]):

1. The biLM (``ELMoModel``) computes ``hidden_states`` h_{k,0..L} (2P each). Frozen [``task_freeze_elmo``, default]:
   its parameters have ``requires_grad=False`` and it runs in eval mode under ``torch.no_grad()``, so its fast
   inference path is used. Without ELMo [``task_use_elmo=False``] only its character CNN runs.
2. ``x_k`` [``task_input_embeddings``]: the biLM's own token layer (P wide), or nothing.
3. ``ELMo_k^in = dropout(mix_in(h_k))`` [``task_mix_positions`` contains ``"input"``, ``task_mix_dropout``].
4. The task encoder [``task_encoder_layers``, ``task_encoder_hidden_size``, ``task_dropout``]: a bidirectional
   ``nn.LSTM`` over ``[x_k; ELMo_k^in]``, run on packed sequences so padding never reaches the backward direction,
   then dropout: ``r_k`` (2H). With 0 layers, ``r_k = [x_k; ELMo_k^in]``.
5. ``[r_k; dropout(mix_out(h_k))]`` [``task_mix_positions`` contains ``"output"``]: the word's features.
6. ``ELMoForTokenClassification``: a linear layer per word. ``ELMoForSequenceClassification``: the words' features
   pooled [``task_pooling``], then a linear layer. Sentence pairs [``task_sentence_pairs``]: each side runs steps 1-5
   on its own (as the paper's SNLI model reads each sentence with the biLM), is pooled to ``a`` and ``b``, and the
   linear layer reads ``[a; b; |a - b|; a * b]`` (``compare_pooled_pair``); with [``task_pair_attention``] ESIM's
   soft alignment between the sides' words comes first (``soft_align``, ``enhance_aligned``).

Loss: the task loss plus ``task_mix_l2 * sum over the head's mixes of ||w||^2``. The head's mixes are its own
(``task_encoder.scalar_mixes``), not the biLM's ``scalar_mixes``, which the heads never use (they stay frozen).

Both heads subclass [`ELMoTaskModel`], their shared block: the biLM as ``self.elmo`` (the base model prefix, so a
saved biLM loads into a head), frozen by default (``frozen_submodules``), and the task encoder (steps 1-5).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch import nn
from torch.nn import functional as F
from transformers import initialization as init
from transformers.modeling_outputs import SequenceClassifierOutput, TokenClassifierOutput

from .configuration_elmo import ELMoConfig
from .crf_elmo import ConditionalRandomField, allowed_transitions
from .modeling_elmo import IGNORE_INDEX, ELMoModel, ELMoPreTrainedModel, ELMoScalarMix
from .task_labels_elmo import checked_sequence_labels, checked_token_labels
from .pooling_elmo import pool_words, pooled_size



class ELMoTaskEncoder(nn.Module):
    """Steps 2-5 of the module docstring: the task model between the biLM's layers and the classifier.

    Owns the head's scalar mixes (``scalar_mixes["input"]`` / ``scalar_mixes["output"]``), their dropout and the
    bidirectional LSTM. ``output_size`` is the width of the per-word features it returns.
    """

    def __init__(self, config: ELMoConfig):
        super().__init__()
        num_layers = config.num_representation_layers
        mix_positions = config.task_mix_positions if config.task_use_elmo else []
        self.uses_token_layer = config.task_input_embeddings == "char_cnn"
        self.scalar_mixes = nn.ModuleDict(
            {position: ELMoScalarMix(num_layers, layer_norm=config.task_mix_layer_norm) for position in mix_positions}
        )
        self.mix_dropout = nn.Dropout(config.task_mix_dropout)
        # He et al. 2017's predicate indicator: 0/1 per word -> a learned vector (SRL), or None when off.
        predicate_size = config.task_predicate_embedding_dim
        self.predicate_embedding = nn.Embedding(2, predicate_size) if predicate_size > 0 else None

        encoder_input_size = (
            (config.projection_dim if self.uses_token_layer else 0)
            + (config.output_dim if "input" in self.scalar_mixes else 0)
            + predicate_size
        )
        if config.task_encoder_layers > 0:
            self.lstm = nn.LSTM(
                encoder_input_size,
                config.task_encoder_hidden_size,
                num_layers=config.task_encoder_layers,
                bidirectional=True,
                batch_first=True,
                dropout=config.task_dropout if config.task_encoder_layers > 1 else 0.0,
            )
            encoder_output_size = 2 * config.task_encoder_hidden_size
        else:
            self.lstm = None
            encoder_output_size = encoder_input_size
        self.dropout = nn.Dropout(config.task_dropout)
        self.output_size = encoder_output_size + (config.output_dim if "output" in self.scalar_mixes else 0)

    def forward(
        self,
        token_layer: torch.Tensor,
        layers: Sequence[torch.Tensor] | None,
        word_mask: torch.BoolTensor,
        predicate_mask: torch.LongTensor | None = None,
    ) -> torch.Tensor:
        """
        Args:
            token_layer: (batch, words, P) the biLM's token layer, zero at padding.
            layers: the biLM's L + 1 ``hidden_states`` (batch, words, 2P), or None without ELMo.
            word_mask: (batch, words) True at real words (right padding).
            predicate_mask: (batch, words) 0/1, 1 at the predicate; given exactly when ``predicate_embedding`` is.

        Returns:
            (batch, words, output_size) features, zero at padding positions.
        """
        mask = word_mask.unsqueeze(-1)  # (B, T, 1)
        encoder_inputs = [token_layer] if self.uses_token_layer else []  # x_k: (B, T, P)
        if "input" in self.scalar_mixes:
            encoder_inputs.append(self.mix_dropout(self.scalar_mixes["input"](layers, word_mask)) * mask)  # (B, T, 2P)
        if self.predicate_embedding is not None:
            encoder_inputs.append(self.predicate_embedding(predicate_mask) * mask)  # (B, T, task_predicate_embedding_dim)
        encoder_input = torch.cat(encoder_inputs, dim=-1)  # (B, T, Din)

        if self.lstm is None:
            features = encoder_input
        else:
            features = self.dropout(run_packed_lstm(self.lstm, encoder_input, word_mask))  # (B, T, 2H)

        if "output" in self.scalar_mixes:
            output_mix = self.mix_dropout(self.scalar_mixes["output"](layers, word_mask)) * mask  # (B, T, 2P)
            features = torch.cat([features, output_mix], dim=-1)
        return features * mask

    def mix_layer_weights(self) -> dict[str, dict[str, Any]]:
        """The learned mixes, readable: ``{"input": {"layer_weights": [softmax(w)_0, ..., softmax(w)_L], "gamma":
        gamma}, "output": {...}}``, one entry per position in ``task_mix_positions`` (none without ELMo). Layer 0 is
        the token layer, layer l the biLSTM's layer l; the weights add up to 1."""
        return {
            position: {"layer_weights": mix.layer_weights.detach().cpu().tolist(), "gamma": float(mix.gamma.detach())}
            for position, mix in self.scalar_mixes.items()
        }

    def mix_l2_penalty(self, l2: float) -> torch.Tensor:
        """``l2 * sum over the mixes of ||w||^2``, a scalar tensor (0 without mixes)."""
        squared_norms = [mix.scalar_weights.pow(2).sum() for mix in self.scalar_mixes.values()]
        if not squared_norms:
            return torch.zeros(())
        return l2 * torch.stack(squared_norms).sum()


def run_packed_lstm(lstm: nn.LSTM, inputs: torch.Tensor, word_mask: torch.BoolTensor) -> torch.Tensor:
    """A bidirectional, batch-first ``lstm`` over (B, T, Din) -> (B, T, 2H), each sentence read over its own words
    only (packed, so padding never reaches the backward direction), zero at padding."""
    batch_size, num_words, _ = inputs.shape
    if num_words == 0:
        return inputs.new_zeros(batch_size, 0, 2 * lstm.hidden_size)
    # pack_padded_sequence refuses empty sentences: they read one padding step, whose output is masked below.
    lengths = word_mask.sum(dim=1).clamp(min=1).cpu()
    packed = nn.utils.rnn.pack_padded_sequence(inputs, lengths, batch_first=True, enforce_sorted=False)
    outputs, _ = lstm(packed)
    outputs, _ = nn.utils.rnn.pad_packed_sequence(outputs, batch_first=True, total_length=num_words)
    return outputs * word_mask.unsqueeze(-1)


def run_bilm(
    elmo: ELMoModel, config: ELMoConfig, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None
) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, torch.BoolTensor]:
    """Step 1 of the module docstring: the biLM's token layer (batch, words, P), its L + 1 ``hidden_states``
    (batch, words, 2P) (None without ELMo: only the character CNN runs) and the word mask (batch, words)."""
    # A frozen biLM records no graph: its fast inference path runs and nothing of it is kept for backward.
    elmo_context = torch.no_grad() if config.task_freeze_elmo else contextlib.nullcontext()
    with elmo_context:
        if not config.task_use_elmo:
            token_layer, word_mask = elmo.token_layer(input_ids, attention_mask)
            return token_layer, None, word_mask
        output = elmo(input_ids, attention_mask=attention_mask, keep_sentence_boundaries=False, return_dict=True)
    token_layer = output.hidden_states[0][..., : config.projection_dim]  # layer 0 is [token; token]
    return token_layer, output.hidden_states, output.mask


class ELMoTaskModel(ELMoPreTrainedModel):
    """What the task heads share (these two, and ``ELMoForQuestionAnswering`` in its own file): steps 1-5 of the module
    docstring (the biLM ``self.elmo`` and the task encoder), the frozen biLM, and the mixes' penalty. A head adds its
    output layers and its loss, then calls ``post_init()`` and ``freeze_submodules()`` at the end of its ``__init__``."""

    def __init__(self, config: ELMoConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.elmo = ELMoModel(config)
        self.task_encoder = ELMoTaskEncoder(config)

    def frozen_submodules(self) -> list[nn.Module]:
        """Submodules that stay frozen: their parameters never require gradients (also after ``from_pretrained``, whose
        loaded parameters do) and they stay in eval mode whatever ``train()`` is given. The whole biLM
        (``task_freeze_elmo``, the paper's recipe), or else only its own ``scalar_mixes``, which the heads never use
        (they learn their own)."""
        return [self.elmo] if self.config.task_freeze_elmo else [self.elmo.scalar_mixes]

    def freeze_submodules(self) -> None:
        """Freeze ``frozen_submodules`` now: no gradients, eval mode."""
        for module in self.frozen_submodules():
            module.requires_grad_(False)
            module.eval()

    def train(self, mode: bool = True) -> "ELMoTaskModel":
        """``nn.Module.train``, except that ``frozen_submodules`` stay in eval mode (no dropout)."""
        super().train(mode)
        for module in self.frozen_submodules():
            module.eval()
        return self

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """``ELMoPreTrainedModel.from_pretrained``, then ``frozen_submodules`` frozen again: loading replaces
        parameters with ones that require gradients."""
        loaded = super().from_pretrained(*args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded  # (model, loading_info) with output_loading_info
        model.freeze_submodules()
        return loaded

    def word_features(
        self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None, predicate_mask: Any = None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, torch.BoolTensor]:
        """Steps 1-5: the words' features (batch, words, ``task_encoder.output_size``), the biLM's L + 1
        ``hidden_states`` (batch, words, 2P) (None without ELMo) and the word mask (batch, words). ``predicate_mask``
        (batch, words) of 0/1 is required with ``task_predicate_embedding_dim > 0`` and refused without."""
        token_layer, layers, word_mask = run_bilm(self.elmo, self.config, input_ids, attention_mask)
        predicate_mask = self._validated_predicate_mask(predicate_mask, word_mask)
        return self.task_encoder(token_layer, layers, word_mask, predicate_mask), layers, word_mask

    def _validated_predicate_mask(self, predicate_mask: Any, word_mask: torch.BoolTensor) -> torch.LongTensor | None:
        size = self.config.task_predicate_embedding_dim
        if size == 0:
            if predicate_mask is not None:
                raise ValueError(
                    "predicate_mask was given, but this model has no predicate indicator "
                    "(config.task_predicate_embedding_dim=0): leave it out, or build the head with "
                    "task_predicate_embedding_dim > 0."
                )
            return None
        if predicate_mask is None:
            raise ValueError(
                f"predicate_mask (batch, words) of 0/1 is required: this model embeds a predicate indicator "
                f"(config.task_predicate_embedding_dim={size}); 1 marks the predicate word of each sentence."
            )
        if not isinstance(predicate_mask, torch.Tensor) or predicate_mask.shape != word_mask.shape:
            shape = tuple(predicate_mask.shape) if isinstance(predicate_mask, torch.Tensor) else type(predicate_mask).__name__
            raise ValueError(f"predicate_mask must be a tensor of shape (batch, words) = {tuple(word_mask.shape)}, got {shape}.")
        if predicate_mask.is_floating_point() or predicate_mask.is_complex() or ((predicate_mask != 0) & (predicate_mask != 1)).any():
            raise ValueError(f"predicate_mask must hold 0 or 1 per word (integers or bools), got dtype {predicate_mask.dtype}, values {predicate_mask.unique().tolist()}.")
        return predicate_mask.to(device=word_mask.device, dtype=torch.long)

    def mix_layer_weights(self) -> dict[str, dict[str, Any]]:
        """The head's learned mixes (see ``ELMoTaskEncoder.mix_layer_weights``)."""
        return self.task_encoder.mix_layer_weights()

    def mix_l2_penalty(self) -> torch.Tensor:
        """``task_mix_l2 * sum over the head's mixes of ||w||^2``, the term added to the task loss."""
        return self.task_encoder.mix_l2_penalty(self.config.task_mix_l2)

    def _init_weights(self, module: nn.Module) -> None:
        """``ELMoPreTrainedModel._init_weights``; the predicate indicator's two vectors start at unit scale (as
        ``nn.Embedding``'s own default), so that it is heard next to ELMo from the first step."""
        super()._init_weights(module)
        if module is self.task_encoder.predicate_embedding:
            init.normal_(module.weight, std=1.0)


@dataclass
class ELMoTokenClassifierOutput(TokenClassifierOutput):
    """
    [`TokenClassifierOutput`] (`loss`, `logits` `(batch, words, num_labels)`, `hidden_states`, `attentions`), plus:

    Args:
        emissions (`torch.FloatTensor` of shape `(batch, words, num_labels)`, *optional*):
            With a CRF (`task_crf`): the classifier's per-word scores that the CRF reads; `logits` are then the CRF's
            max-marginals. None without a CRF (`logits` are those scores).
    """

    emissions: torch.FloatTensor | None = None


class ELMoForTokenClassification(ELMoTaskModel):
    """ELMo with a per-word classifier (POS tagging, NER, chunking...): the paper's task recipe, steps 1-6 of the
    module docstring. Build one from a saved biLM with ``ELMoForTokenClassification.from_pretrained(elmo_dir,
    num_labels=..., id2label=..., label2id=...)``: the biLM weights load, the head is initialised.

    With ``task_crf`` the per-word scores feed a linear-chain CRF (``self.crf``, the paper's NER tagger), optionally
    constrained to a tagging scheme (``task_crf_constraints``; the masks are derived from ``config.id2label`` whenever
    the model is built, so also at load). With ``task_predicate_embedding_dim`` a per-word ``predicate_mask`` is an
    input (SRL). ``decode`` returns the best tag path of each sentence."""

    def __init__(self, config: ELMoConfig):
        super().__init__(config)
        self.classifier = nn.Linear(self.task_encoder.output_size, config.num_labels)
        self.crf = ConditionalRandomField(config.num_labels, self._crf_constraints()) if config.task_crf else None
        self.post_init()
        self.freeze_submodules()

    def _crf_constraints(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """``allowed_transitions`` of ``config.id2label`` in ``task_crf_constraints``' scheme, or None."""
        scheme = self.config.task_crf_constraints
        if scheme is None:
            return None
        id2label = {int(index): label for index, label in self.config.id2label.items()}
        if sorted(id2label) != list(range(self.config.num_labels)):
            raise ValueError(
                f"task_crf_constraints={scheme!r} reads the tag names from config.id2label, which must name ids "
                f"0..{self.config.num_labels - 1}; got ids {sorted(id2label)}."
            )
        return allowed_transitions(id2label, scheme)

    def _init_weights(self, module: nn.Module) -> None:
        """``ELMoPreTrainedModel._init_weights``; a new CRF starts with no preference (zero transition scores), and
        its constraint masks, which are not saved, are derived from the config again (also at load)."""
        super()._init_weights(module)
        if isinstance(module, ConditionalRandomField):
            for parameter in (module.transitions, module.start_transitions, module.end_transitions):
                init.zeros_(parameter)
            masks = (module.allowed_start, module.allowed_transitions, module.allowed_end)
            constraints = self._crf_constraints() or tuple(torch.ones(mask.shape, dtype=torch.bool) for mask in masks)
            for mask, allowed in zip(masks, constraints):
                init.copy_(mask, allowed)

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        predicate_mask: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> ELMoTokenClassifierOutput | tuple:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch, words, max_characters_per_token)`):
                Character ids from [`ELMoTokenizer`], right-padded with all-zero rows.
            attention_mask (`torch.Tensor` of shape `(batch, words)`, *optional*):
                1 for words, 0 for padding. Derived from `input_ids` when omitted.
            labels (`torch.LongTensor` of shape `(batch, words)`, *optional*):
                Class ids in `[0, num_labels)`, -100 for words without a label and at every padding position (what
                `DataCollatorForTokenClassification` pads with). With a CRF a -100 word is left open (any tag).
            predicate_mask (`torch.LongTensor` of shape `(batch, words)`, *optional*):
                0/1 per word, 1 at the predicate: required with `task_predicate_embedding_dim > 0`, refused without.
            output_hidden_states (`bool`, *optional*):
                Also return the biLM's L + 1 layers as `hidden_states` (not available without ELMo).

        Returns:
            [`ELMoTokenClassifierOutput`]: `loss` (when `labels` are given: the task loss plus the mix penalty, see
            `mix_l2_penalty`; the task loss is the mean cross-entropy over the labelled words, or with a CRF the mean
            over sentences of its negative log-likelihood), `logits` `(batch, words, num_labels)` (with a CRF its
            max-marginals, whose per-word argmax is the Viterbi path; 0 at padding), `hidden_states`, `emissions`
            (with a CRF: the classifier's scores).
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        features, layers, word_mask = self.word_features(input_ids, attention_mask, predicate_mask)  # (B, T, size)
        emissions = self.classifier(features)  # (B, T, num_labels)
        logits = emissions if self.crf is None else self.crf.max_marginals(emissions, word_mask)

        loss = None
        if labels is not None:
            labels = checked_token_labels(labels, word_mask, self.num_labels, self.config.problem_type)
            loss = self._task_loss(emissions, labels, word_mask) + self.mix_l2_penalty()

        output = ELMoTokenClassifierOutput(
            loss=loss,
            logits=logits,
            hidden_states=layers if output_hidden_states else None,
            emissions=None if self.crf is None else emissions,
        )
        return output if return_dict else output.to_tuple()

    def _task_loss(self, emissions: torch.Tensor, labels: torch.LongTensor, word_mask: torch.BoolTensor) -> torch.Tensor:
        """Cross-entropy averaged over the labelled words, or the CRF's negative log-likelihood averaged over the
        sentences; a batch without labelled words (or sentences) gives 0, not NaN."""
        if self.crf is not None:
            return self.crf.negative_log_likelihood(emissions, labels, word_mask).sum() / max(labels.shape[0], 1)
        is_labelled = labels != IGNORE_INDEX  # (B, T)
        task_loss = F.cross_entropy(emissions[is_labelled], labels[is_labelled], reduction="sum")
        return task_loss / is_labelled.sum().clamp(min=1)

    @torch.no_grad()
    def decode(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        predicate_mask: torch.LongTensor | None = None,
    ) -> list[list[int]]:
        """The best tag ids of each sentence's words: the Viterbi path with a CRF, else each word's argmax. Inputs as
        for ``forward``; call ``eval()`` first for deterministic output (dropout)."""
        features, _, word_mask = self.word_features(input_ids, attention_mask, predicate_mask)
        emissions = self.classifier(features)  # (B, T, num_labels)
        if self.crf is not None:
            return self.crf.viterbi_decode(emissions, word_mask)
        best = emissions.argmax(dim=-1)  # (B, T)
        return [row[:length].tolist() for row, length in zip(best, word_mask.sum(dim=1).tolist())]

def compare_pooled_pair(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """The comparison of two sentence vectors a, b (batch, D) that a pair classifier reads: ``[a; b; |a - b|; a * b]``
    (batch, 4D), as in ESIM and InferSent."""
    return torch.cat([first, second, (first - second).abs(), first * second], dim=-1)


def soft_align(
    first: torch.Tensor, first_mask: torch.BoolTensor, second: torch.Tensor, second_mask: torch.BoolTensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """ESIM's soft alignment: each word of one side as the attention-weighted sum of the other side's words, the
    weights the softmax over the other side's real words of the dot products. first (B, T1, D), second (B, T2, D),
    masks (B, T1) / (B, T2) -> (first aligned with second (B, T1, D), second aligned with first (B, T2, D)); a side
    without words gives zeros."""
    scores = first @ second.transpose(1, 2)  # (B, T1, T2)
    lowest = torch.finfo(scores.dtype).min
    pair_mask = first_mask.unsqueeze(2) & second_mask.unsqueeze(1)  # (B, T1, T2)
    to_second = scores.masked_fill(~pair_mask, lowest).softmax(dim=2) * pair_mask  # rows sum to 1 over second's words
    to_first = scores.masked_fill(~pair_mask, lowest).softmax(dim=1) * pair_mask  # columns sum to 1 over first's words
    return to_second @ second, to_first.transpose(1, 2) @ first


def enhance_aligned(features: torch.Tensor, aligned: torch.Tensor) -> torch.Tensor:
    """ESIM's local inference enhancement per word: ``[x; x~; x - x~; x * x~]`` (B, T, D) -> (B, T, 4D)."""
    return torch.cat([features, aligned, features - aligned, features * aligned], dim=-1)


class ELMoForSequenceClassification(ELMoTaskModel):
    """ELMo with a sentence classifier (sentiment, regression scores, sentence pairs): steps 1-5 of the
    module docstring, the words' features pooled (``task_pooling``), then a linear layer. The loss follows
    transformers' ``problem_type`` convention (inferred when ``config.problem_type`` is None): ``num_labels == 1`` is
    regression (MSE), integer labels single-label classification (cross-entropy), float labels of shape
    `(batch, num_labels)` multi-label classification (binary cross-entropy with logits). With
    ``config.task_sentence_pairs`` it classifies sentence pairs (``pair_input_ids``, see ``forward``)."""

    def __init__(self, config: ELMoConfig):
        super().__init__(config)
        if config.task_pair_attention:  # [pooled enhance_aligned of each side]
            classifier_size = 2 * pooled_size(4 * self.task_encoder.output_size, config.task_pooling)
        else:
            sentence_size = pooled_size(self.task_encoder.output_size, config.task_pooling)
            classifier_size = 4 * sentence_size if config.task_sentence_pairs else sentence_size  # compare_pooled_pair
        self.classifier = nn.Linear(classifier_size, config.num_labels)
        self.post_init()
        self.freeze_submodules()

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        pair_input_ids: torch.LongTensor | None = None,
        pair_attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> SequenceClassifierOutput | tuple:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch, words, max_characters_per_token)`):
                Character ids from [`ELMoTokenizer`], right-padded with all-zero rows.
            attention_mask (`torch.Tensor` of shape `(batch, words)`, *optional*):
                1 for words, 0 for padding. Derived from `input_ids` when omitted.
            pair_input_ids (`torch.LongTensor` of shape `(batch, pair_words, max_characters_per_token)`, *optional*):
                The second sentence of each pair (`tokenizer(text, text_pair)`), read on its own. Required when
                `config.task_sentence_pairs` is set, refused otherwise.
            pair_attention_mask (`torch.Tensor` of shape `(batch, pair_words)`, *optional*):
                The second sentences' mask, like `attention_mask`.
            labels (`torch.Tensor`, *optional*):
                `(batch,)` integer class ids in `[0, num_labels)` (single-label classification); `(batch,)` or
                `(batch, 1)` floats with `num_labels == 1` (regression); `(batch, num_labels)` floats in [0, 1]
                (multi-label classification).
            output_hidden_states (`bool`, *optional*):
                Also return the biLM's L + 1 layers as `hidden_states` (not available without ELMo); for pairs,
                those of the first sentences (`input_ids`).

        Returns:
            [`SequenceClassifierOutput`]: `loss` (when `labels` are given: the task loss plus the mix penalty, see
            `mix_l2_penalty`), `logits` `(batch, num_labels)`, `hidden_states`.
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        self._check_pair_inputs(input_ids, pair_input_ids, pair_attention_mask)
        features, layers, word_mask = self.word_features(input_ids, attention_mask)  # (B, T, output_size)
        if pair_input_ids is None:
            sentences = pool_words(features, word_mask, self.config.task_pooling)  # (B, D)
        else:
            pair_features, _, pair_word_mask = self.word_features(pair_input_ids, pair_attention_mask)  # (B, T2, ...)
            sentences = self._compared_pair(features, word_mask, pair_features, pair_word_mask)
        logits = self.classifier(sentences)  # (B, num_labels)

        loss = None
        if labels is not None:
            problem_type, labels = checked_sequence_labels(labels, logits, self.config.problem_type)
            if problem_type == "regression":
                task_loss = F.mse_loss(logits, labels)
            elif problem_type == "single_label_classification":
                task_loss = F.cross_entropy(logits, labels)
            else:
                task_loss = F.binary_cross_entropy_with_logits(logits, labels)
            loss = task_loss + self.mix_l2_penalty()

        output = SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=layers if output_hidden_states else None
        )
        return output if return_dict else output.to_tuple()

    def _compared_pair(
        self, features: torch.Tensor, word_mask: torch.BoolTensor, pair_features: torch.Tensor, pair_mask: torch.BoolTensor
    ) -> torch.Tensor:
        """What the classifier reads for a pair, from each side's word features (B, T, D) / (B, T2, D):
        ``compare_pooled_pair`` of the pooled sides (B, 4D'), or with ``task_pair_attention`` the pooled
        ``enhance_aligned`` of each side, concatenated (B, 2 * pooled_size(4D))."""
        pooling = self.config.task_pooling
        if not self.config.task_pair_attention:
            return compare_pooled_pair(pool_words(features, word_mask, pooling), pool_words(pair_features, pair_mask, pooling))
        aligned, pair_aligned = soft_align(features, word_mask, pair_features, pair_mask)
        first = pool_words(enhance_aligned(features, aligned), word_mask, pooling)
        second = pool_words(enhance_aligned(pair_features, pair_aligned), pair_mask, pooling)
        return torch.cat([first, second], dim=-1)

    def _check_pair_inputs(
        self, input_ids: Any, pair_input_ids: Any, pair_attention_mask: Any
    ) -> None:
        """Pair inputs exactly when the model was built for pairs (its classifier's width depends on it), with as
        many second sentences as first ones."""
        if pair_input_ids is None and pair_attention_mask is not None:
            raise ValueError("pair_attention_mask was given without pair_input_ids, the second sentences it masks.")
        if self.config.task_sentence_pairs and pair_input_ids is None:
            raise ValueError(
                "This model classifies sentence pairs (config.task_sentence_pairs=True): pass pair_input_ids and "
                "pair_attention_mask, e.g. the output of tokenizer(text, text_pair)."
            )
        if not self.config.task_sentence_pairs and pair_input_ids is not None:
            raise ValueError(
                "pair_input_ids was given, but this model classifies single sentences (config.task_sentence_pairs="
                "False: its classifier reads one sentence vector). Build a pair classifier with "
                "ELMoForSequenceClassification.from_pretrained(..., task_sentence_pairs=True)."
            )
        if pair_input_ids is not None and len(pair_input_ids) != len(input_ids):
            raise ValueError(
                f"pair_input_ids must hold one second sentence per first sentence: input_ids has {len(input_ids)}, "
                f"pair_input_ids {len(pair_input_ids)}."
            )


__all__ = [
    "ELMoForSequenceClassification",
    "compare_pooled_pair",
    "enhance_aligned",
    "soft_align",
    "ELMoForTokenClassification",
    "ELMoTaskEncoder",
    "ELMoTaskModel",
    "ELMoTokenClassifierOutput",
    "run_bilm",
    "run_packed_lstm",
]
