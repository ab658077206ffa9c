"""Question answering on ELMo: the paper's SQuAD model (Peters et al. 2018, section 4), BiDAF (Seo et al. 2017) with
ELMo at the input and at the output of its first RNN, predicting the answer as a span of the context's words.

A question (``input_ids``, J words) and its context (``pair_input_ids``, T words: `tokenizer(question, context)`)
are each read on their own, as ELMo reads every sentence. Per example, in the order the code runs (config fields in
brackets, see [`ELMoConfig`]; D = ``task_encoder.output_size``, H = ``task_encoder_hidden_size``):

1-5. Each side through [`ELMoTaskModel.word_features`] (the same weights for both): the frozen biLM, ``[x_k;
     ELMo_k^in]`` -> biLSTM -> ``[r_k; ELMo_k^out]`` (``task_mix_positions=["input", "output"]`` is the paper's SQuAD
     setting: a second learned mix at the output of the task RNN). Question q (B, J, D), context c (B, T, D).
6. Similarity, trilinear: ``S_tj = w_c . c_t + w_q . q_j + w_cq . (c_t * q_j)`` (B, T, J); no bias, which every
   softmax below would cancel.
7. Context-to-question attention: ``a_t = sum_j softmax_j(S_tj) q_j`` over the question's real words (B, T, D).
   Question-to-context attention: ``b = sum_t softmax_t(max_j S_tj) c_t`` over the context's real words, the same
   vector for every t (B, D).
8. ``G_t = [c_t; a_t; c_t * a_t; c_t * b]`` (B, T, 4D).
9. The modelling biLSTM [``task_qa_modeling_layers``] ``M = LSTM(G)`` (B, T, 2H), then the span end's biLSTM
   ``M2 = LSTM(M)`` (B, T, 2H), each read over the context's own words (packed) and followed by dropout
   [``task_dropout``].
10. ``start_logits = w_1 . [G; M]``, ``end_logits = w_2 . [G; M2]`` (B, T); padding positions hold the dtype's
    lowest value, so a softmax over the context gives them 0.

Loss: the mean of the cross-entropies of ``start_positions`` and of ``end_positions`` (word indexes into the
context), each averaged over the examples whose position lies inside the context, plus the mixes' penalty.
``best_answer_spans`` reads the best spans (start <= end, at most a given number of words) from the logits.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from transformers.modeling_outputs import QuestionAnsweringModelOutput

from .configuration_elmo import ELMoConfig
from .modeling_elmo import IGNORE_INDEX
from .modeling_elmo_downstream import ELMoTaskModel, run_packed_lstm
from .task_labels_elmo import checked_answer_positions
from .validation_elmo import check_int


class ELMoTrilinearSimilarity(nn.Module):
    """BiDAF's similarity of every context word with every question word, ``w_c . c_t + w_q . q_j + w_cq . (c_t *
    q_j)``: context (B, T, D), question (B, J, D) -> (B, T, J)."""

    def __init__(self, size: int):
        super().__init__()
        self.context_weight = nn.Linear(size, 1, bias=False)  # w_c
        self.question_weight = nn.Linear(size, 1, bias=False)  # w_q
        self.product_weight = nn.Linear(size, 1, bias=False)  # w_cq

    def forward(self, context: torch.Tensor, question: torch.Tensor) -> torch.Tensor:
        products = (context * self.product_weight.weight) @ question.transpose(1, 2)  # (B, T, J)
        return self.context_weight(context) + self.question_weight(question).transpose(1, 2) + products


def attention_flow(
    similarity: torch.Tensor,
    context: torch.Tensor,
    context_mask: torch.BoolTensor,
    question: torch.Tensor,
    question_mask: torch.BoolTensor,
) -> torch.Tensor:
    """BiDAF's attention flow (steps 7-8 of the module docstring): similarity (B, T, J), context (B, T, D), its mask
    (B, T), question (B, J, D), its mask (B, J) -> ``G = [c; a; c * a; c * b]`` (B, T, 4D), zero at the context's
    padding. Each softmax reads only real words; a side without words gives zero attention."""
    lowest = torch.finfo(similarity.dtype).min
    pair_mask = context_mask.unsqueeze(2) & question_mask.unsqueeze(1)  # (B, T, J)
    to_question = similarity.masked_fill(~pair_mask, lowest).softmax(dim=2) * pair_mask  # (B, T, J)
    attended_question = to_question @ question  # a: (B, T, D)
    best_match = similarity.masked_fill(~pair_mask, lowest).max(dim=2).values  # (B, T)
    to_context = best_match.masked_fill(~context_mask, lowest).softmax(dim=1) * context_mask  # (B, T)
    attended_context = (to_context.unsqueeze(1) @ context).expand_as(context)  # b, tiled: (B, T, D)
    merged = torch.cat([context, attended_question, context * attended_question, context * attended_context], dim=-1)
    return merged * context_mask.unsqueeze(-1)


def best_answer_spans(
    start_logits: torch.Tensor, end_logits: torch.Tensor, num_words: int, max_answer_words: int = 15, top_k: int = 1
) -> list[tuple[int, int, float]]:
    """The ``top_k`` best answers of one context: ``(start word, end word (inclusive), score)``, best first, over the
    spans with ``start <= end < start + max_answer_words`` inside the context's first ``num_words`` words. The score
    of a span is ``softmax(start_logits)[start] * softmax(end_logits)[end]``, each softmax over the context's words
    (as transformers' question-answering pipeline scores spans). start_logits, end_logits: (T,), T >= num_words."""
    check_int("max_answer_words", max_answer_words, 1)
    check_int("top_k", top_k, 1)
    if num_words == 0:
        return []
    start_probabilities = start_logits[:num_words].float().softmax(dim=0)  # (n,)
    end_probabilities = end_logits[:num_words].float().softmax(dim=0)  # (n,)
    scores = start_probabilities.unsqueeze(1) * end_probabilities.unsqueeze(0)  # (n, n): [start, end]
    allowed = torch.ones_like(scores, dtype=torch.bool).triu().tril(max_answer_words - 1)
    scores = scores.masked_fill(~allowed, -1.0).flatten()
    best = scores.topk(min(top_k, int(allowed.sum()))).indices.tolist()
    return [(index // num_words, index % num_words, float(scores[index])) for index in best]


class ELMoForQuestionAnswering(ELMoTaskModel):
    """ELMo in BiDAF: answer span extraction (SQuAD), the module docstring's steps 1-10. Build one from a saved biLM
    with ``ELMoForQuestionAnswering.from_pretrained(elmo_dir, task_mix_positions=["input", "output"])`` (the paper's
    setting): the biLM weights load, the rest is initialised. Inputs come from ``tokenizer(question, context)``: the
    question as ``input_ids``, the context as ``pair_input_ids``; positions and logits are over the context's words."""

    def __init__(self, config: ELMoConfig):
        super().__init__(config)
        size = self.task_encoder.output_size  # D
        hidden_size = config.task_encoder_hidden_size  # H
        self.similarity = ELMoTrilinearSimilarity(size)
        lstm = dict(hidden_size=hidden_size, bidirectional=True, batch_first=True)
        self.modeling_lstm = nn.LSTM(
            4 * size, num_layers=config.task_qa_modeling_layers,
            dropout=config.task_dropout if config.task_qa_modeling_layers > 1 else 0.0, **lstm,
        )
        self.span_end_lstm = nn.LSTM(2 * hidden_size, num_layers=1, **lstm)
        self.modeling_dropout = nn.Dropout(config.task_dropout)
        self.span_start_output = nn.Linear(4 * size + 2 * hidden_size, 1)  # w_1 over [G; M]
        self.span_end_output = nn.Linear(4 * size + 2 * hidden_size, 1)  # w_2 over [G; M2]
        self.post_init()
        self.freeze_submodules()

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        pair_input_ids: torch.LongTensor | None = None,
        pair_attention_mask: torch.Tensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> QuestionAnsweringModelOutput | tuple:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch, question_words, max_characters_per_token)`):
                The questions' character ids from [`ELMoTokenizer`] (the first text of `tokenizer(question,
                context)`), right-padded with all-zero rows.
            attention_mask (`torch.Tensor` of shape `(batch, question_words)`, *optional*):
                1 for words, 0 for padding. Derived from `input_ids` when omitted.
            pair_input_ids (`torch.LongTensor` of shape `(batch, context_words, max_characters_per_token)`):
                The contexts' character ids (the second text), one per question. Required.
            pair_attention_mask (`torch.Tensor` of shape `(batch, context_words)`, *optional*):
                The contexts' mask, like `attention_mask`.
            start_positions, end_positions (`torch.LongTensor` of shape `(batch,)`, *optional*):
                The answer's first and last word (inclusive), indexes into the context's words; given together. A
                position outside the context (-100 among them) is ignored.
            output_hidden_states (`bool`, *optional*):
                Also return the biLM's L + 1 layers of the contexts as `hidden_states` (not available without ELMo).

        Returns:
            [`QuestionAnsweringModelOutput`]: `loss` (with positions: the mean of the start and end cross-entropies
            plus the mixes' penalty, see `mix_l2_penalty`), `start_logits` and `end_logits` `(batch, context_words)`
            (the dtype's lowest value at padding), `hidden_states`.
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        self._check_question_and_context(input_ids, pair_input_ids, pair_attention_mask, start_positions, end_positions)
        question, _, question_mask = self.word_features(input_ids, attention_mask)  # (B, J, D)
        context, layers, context_mask = self.word_features(pair_input_ids, pair_attention_mask)  # (B, T, D)
        start_logits, end_logits = self._span_logits(context, context_mask, question, question_mask)  # (B, T) each

        loss = None
        if start_positions is not None:
            context_lengths = context_mask.sum(dim=1)  # (B,)
            starts = checked_answer_positions("start_positions", start_positions, context_lengths)
            ends = checked_answer_positions("end_positions", end_positions, context_lengths)
            span_loss = (answer_position_loss(start_logits, starts) + answer_position_loss(end_logits, ends)) / 2
            loss = span_loss + self.mix_l2_penalty()

        output = QuestionAnsweringModelOutput(
            loss=loss, start_logits=start_logits, end_logits=end_logits,
            hidden_states=layers if output_hidden_states else None,
        )
        return output if return_dict else output.to_tuple()

    def _span_logits(
        self,
        context: torch.Tensor,
        context_mask: torch.BoolTensor,
        question: torch.Tensor,
        question_mask: torch.BoolTensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Steps 6-10: context (B, T, D), question (B, J, D) and their masks -> start and end logits (B, T) each."""
        similarity = self.similarity(context, question)  # (B, T, J)
        merged = attention_flow(similarity, context, context_mask, question, question_mask)  # G: (B, T, 4D)
        modeled = self.modeling_dropout(run_packed_lstm(self.modeling_lstm, merged, context_mask))  # M: (B, T, 2H)
        span_end = self.modeling_dropout(run_packed_lstm(self.span_end_lstm, modeled, context_mask))  # M2: (B, T, 2H)
        start_logits = self.span_start_output(torch.cat([merged, modeled], dim=-1)).squeeze(-1)  # (B, T)
        end_logits = self.span_end_output(torch.cat([merged, span_end], dim=-1)).squeeze(-1)  # (B, T)
        lowest = torch.finfo(start_logits.dtype).min
        return start_logits.masked_fill(~context_mask, lowest), end_logits.masked_fill(~context_mask, lowest)

    def _check_question_and_context(
        self, input_ids: Any, pair_input_ids: Any, pair_attention_mask: Any, start_positions: Any, end_positions: Any
    ) -> None:
        """A context for every question, and both answer positions or neither."""
        if pair_input_ids is None:
            raise ValueError(
                "The context is missing: ELMoForQuestionAnswering reads a question (input_ids) and its context "
                "(pair_input_ids, pair_attention_mask), e.g. the output of tokenizer(question, context)."
                + (" pair_attention_mask was given without pair_input_ids." if pair_attention_mask is not None else "")
            )
        if len(pair_input_ids) != len(input_ids):
            raise ValueError(
                f"pair_input_ids must hold one context per question: input_ids has {len(input_ids)} questions, "
                f"pair_input_ids {len(pair_input_ids)} contexts."
            )
        if (start_positions is None) != (end_positions is None):
            names = ("start_positions", "end_positions")
            given, missing = names if end_positions is None else names[::-1]
            raise ValueError(f"{given} was given without {missing}: the loss needs both ends of each answer span.")


def answer_position_loss(logits: torch.Tensor, positions: torch.LongTensor) -> torch.Tensor:
    """Cross-entropy of logits (B, T) at positions (B,), averaged over the positions that are not ``IGNORE_INDEX``;
    0 (not NaN) when every position is ignored."""
    answered = positions != IGNORE_INDEX  # (B,)
    if not answered.any():
        return logits.new_zeros(()) + 0.0 * logits[:, :0].sum()  # keeps the graph for a backward pass
    return F.cross_entropy(logits[answered], positions[answered])


__all__ = [
    "ELMoForQuestionAnswering",
    "ELMoTrilinearSimilarity",
    "answer_position_loss",
    "attention_flow",
    "best_answer_spans",
]
