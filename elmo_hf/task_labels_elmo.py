"""What a task head's labels may be: the checks of ``ELMoForTokenClassification`` and ``ELMoForSequenceClassification``
(transformers' ``problem_type`` convention) and the answer positions of ``ELMoForQuestionAnswering``, with errors that
name the shape, dtype or value at fault."""

from __future__ import annotations

from typing import Any

import torch

from .modeling_elmo import IGNORE_INDEX

PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")


def checked_token_labels(labels: Any, word_mask: torch.BoolTensor, num_labels: int, problem_type: str | None) -> torch.LongTensor:
    """``labels`` (batch, words) of a token-classification head as int64 on ``word_mask``'s device; errors name what is wrong."""
    if problem_type not in (None, "single_label_classification"):
        raise ValueError(
            "ELMoForTokenClassification supports config.problem_type None or 'single_label_classification', "
            f"got {problem_type!r}."
        )
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"labels must be a torch.LongTensor of shape (batch, words), got {type(labels).__name__}.")
    if labels.dtype.is_floating_point or labels.dtype == torch.bool or labels.is_complex():
        raise ValueError(f"labels must hold integer class ids (token classification), got dtype {labels.dtype}.")
    if labels.shape != word_mask.shape:
        raise ValueError(
            f"labels must have shape (batch, words) = {tuple(word_mask.shape)} like attention_mask, got "
            f"{tuple(labels.shape)} (pad labels with -100, e.g. with DataCollatorForTokenClassification)."
        )
    labels = labels.to(device=word_mask.device, dtype=torch.long)
    is_labelled = labels != IGNORE_INDEX
    out_of_range = is_labelled & ((labels < 0) | (labels >= num_labels))
    if out_of_range.any():
        batch_index, word_index = out_of_range.nonzero()[0].tolist()
        raise ValueError(
            f"labels must be class ids in [0, num_labels={num_labels}) or -100 (ignored), got "
            f"{int(labels[batch_index, word_index])} at (batch {batch_index}, word {word_index})."
        )
    labelled_padding = is_labelled & ~word_mask
    if labelled_padding.any():
        batch_index, word_index = labelled_padding.nonzero()[0].tolist()
        raise ValueError(
            f"labels must be -100 at padding positions, got {int(labels[batch_index, word_index])} at (batch "
            f"{batch_index}, word {word_index}), a padding word of the input."
        )
    return labels


def checked_sequence_labels(labels: Any, logits: torch.Tensor, problem_type: str | None) -> tuple[str, torch.Tensor]:
    """The problem type of a sequence-classification head's ``labels`` and the labels as its loss takes them."""
    batch_size, num_labels = logits.shape
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"labels must be a torch.Tensor with one row per sentence, got {type(labels).__name__}.")
    if labels.dtype == torch.bool or labels.is_complex():
        raise ValueError(f"labels must be integer class ids or float targets, got dtype {labels.dtype}.")
    is_integer = not labels.dtype.is_floating_point
    if problem_type is None:
        if num_labels == 1:
            problem_type = "regression"
        elif is_integer:
            problem_type = "single_label_classification"
        else:
            problem_type = "multi_label_classification"
    labels = labels.to(logits.device)

    if problem_type == "regression":
        expected = [(batch_size, num_labels)] + ([(batch_size,)] if num_labels == 1 else [])
        if tuple(labels.shape) not in expected:
            raise ValueError(
                f"labels for regression (num_labels={num_labels}) must have shape "
                f"{' or '.join(str(shape) for shape in expected)}, got {tuple(labels.shape)}."
            )
        return problem_type, labels.to(logits.dtype).reshape(batch_size, num_labels)
    if problem_type == "single_label_classification":
        if not is_integer:
            raise ValueError(
                f"labels for single-label classification must be integer class ids, got dtype {labels.dtype} "
                "(float labels mean multi-label classification, or regression with num_labels=1)."
            )
        if tuple(labels.shape) != (batch_size,):
            raise ValueError(
                f"labels for single-label classification must have shape (batch,) = ({batch_size},), got "
                f"{tuple(labels.shape)}."
            )
        if labels.numel() and (labels.min() < 0 or labels.max() >= num_labels):
            raise ValueError(
                f"labels must be class ids in [0, num_labels={num_labels}), got values in "
                f"[{int(labels.min())}, {int(labels.max())}]."
            )
        return problem_type, labels.long()
    if problem_type == "multi_label_classification":
        if tuple(labels.shape) != (batch_size, num_labels):
            raise ValueError(
                f"labels for multi-label classification must have shape (batch, num_labels) = "
                f"({batch_size}, {num_labels}), got {tuple(labels.shape)}."
            )
        if labels.numel() and (labels.min() < 0 or labels.max() > 1):
            raise ValueError(
                f"labels for multi-label classification must be in [0, 1], got values in "
                f"[{float(labels.min())}, {float(labels.max())}]."
            )
        return problem_type, labels.to(logits.dtype)
    raise ValueError(f"config.problem_type must be None or one of {PROBLEM_TYPES}, got {problem_type!r}.")


def checked_answer_positions(name: str, positions: Any, context_lengths: torch.LongTensor) -> torch.LongTensor:
    """``start_positions`` or ``end_positions`` of a question-answering head, (batch,) or (batch, 1) word indexes
    into each context, as int64 (batch,) on ``context_lengths``' device (batch,: each context's words). A position
    outside ``[0, that context's words)`` (-100 among them) becomes ``IGNORE_INDEX``: the example adds nothing to that
    loss. transformers' QA heads ignore positions past the sequence too, but clamp negative ones to 0."""
    batch_size = context_lengths.shape[0]
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"{name} must be a torch.LongTensor of shape (batch,), got {type(positions).__name__}.")
    if positions.dtype.is_floating_point or positions.dtype == torch.bool or positions.is_complex():
        raise ValueError(f"{name} must hold word indexes into the context (integers), got dtype {positions.dtype}.")
    if tuple(positions.shape) not in ((batch_size,), (batch_size, 1)):
        raise ValueError(
            f"{name} must have shape (batch,) = ({batch_size},), one word index into each context, got "
            f"{tuple(positions.shape)}."
        )
    positions = positions.reshape(batch_size).to(device=context_lengths.device, dtype=torch.long)
    inside = (positions >= 0) & (positions < context_lengths)
    return positions.masked_fill(~inside, IGNORE_INDEX)


__all__ = ["PROBLEM_TYPES", "checked_answer_positions", "checked_sequence_labels", "checked_token_labels"]
