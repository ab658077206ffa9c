"""Which vectors of an ``ELMoModelOutput`` (``check_representation``) and one vector per sentence from its words'
vectors (``pool_words``): what ``ELMoModelOutput.sentence_vectors``, the task heads and bulk embedding pool with.
"""

from __future__ import annotations

import torch

from .choices_elmo import POOLINGS, REPRESENTATIONS
from .validation_elmo import check_int, is_int


def check_representation(representation: str | int, num_layers: int, num_mixes: int, mix_index: int = 0) -> None:
    """``ValueError`` unless ``representation`` names one of `REPRESENTATIONS` or is a layer index in
    [0, num_layers), and, for `"mix"`, ``mix_index`` is in [0, num_mixes)."""
    if isinstance(representation, bool) or not (
        representation in REPRESENTATIONS or (is_int(representation) and 0 <= representation < num_layers)
    ):
        raise ValueError(
            f"representation must be one of {list(REPRESENTATIONS)} or a layer index in [0, {num_layers}), "
            f"got {representation!r}"
        )
    if representation == "mix":
        check_int("mix_index", mix_index, 0, num_mixes, hint="config.num_output_representations")


def pooled_size(size: int, pooling: str) -> int:
    """Width of a `pool_words` vector from word vectors ``size`` wide."""
    return 2 * size if pooling in ("mean_max", "first_last") else size


def pool_words(features: torch.Tensor, word_mask: torch.BoolTensor, pooling: str) -> torch.Tensor:
    """One vector per sentence from its real words' vectors (`POOLINGS`): (batch, words, *S, D) -> (batch, *S, D'),
    D' = `pooled_size(D, pooling)`. ``"mean"`` and ``"max"`` over the words where ``word_mask`` (batch, words) is
    True; ``"mean_max"`` the mean then the max, concatenated; ``"first_last"`` the first word's vector then the last
    word's. A sentence without words gets zeros. Means accumulate in float32 and are returned in the features' dtype."""
    batch_size, num_words = word_mask.shape
    vector_shape = features.shape[2:]
    if num_words == 0:
        return features.new_zeros(batch_size, *vector_shape[:-1], pooled_size(vector_shape[-1], pooling))
    mask = word_mask.reshape(batch_size, num_words, *[1] * len(vector_shape))  # (B, T, 1, ...)
    lengths = word_mask.sum(dim=1).reshape(batch_size, *[1] * len(vector_shape))  # (B, 1, ...)
    has_words = lengths > 0
    if pooling == "mean":
        summed = features.masked_fill(~mask, 0).sum(dim=1, dtype=torch.promote_types(features.dtype, torch.float32))
        return (summed / lengths.clamp(min=1)).to(features.dtype)
    if pooling == "max":
        maximum = features.masked_fill(~mask, float("-inf")).max(dim=1).values
        return torch.where(has_words, maximum, torch.zeros_like(maximum))
    if pooling == "mean_max":
        return torch.cat([pool_words(features, word_mask, "mean"), pool_words(features, word_mask, "max")], dim=-1)
    if pooling == "first_last":
        rows = torch.arange(batch_size, device=features.device)
        first = word_mask.int().argmax(dim=1)  # (B,) the first True (after <S> when boundaries are kept)
        last = num_words - 1 - word_mask.flip(1).int().argmax(dim=1)  # (B,) the last True
        ends = torch.cat([features[rows, first], features[rows, last]], dim=-1)
        return torch.where(has_words, ends, torch.zeros_like(ends))
    raise ValueError(f"pooling must be one of {list(POOLINGS)}, got {pooling!r}.")


__all__ = ["check_representation", "pool_words", "pooled_size"]
