"""Sentence pairs in the tokenizer's output: the second side's keys and what truncation means for each side.

ELMo reads every sentence on its own (the paper's SNLI model runs each sentence through the biLM separately), so a
pair is never one sequence: `tokenizer(text, text_pair)` returns the first side under the usual keys and the second
under the same keys prefixed with `pair_`:

    input_ids, attention_mask, offset_mapping, ...            text
    pair_input_ids, pair_attention_mask, pair_offset_mapping  text_pair

Each side is padded on its own (its own longest sentence). `max_length` with truncation counts the WORDS of each
side: `True`/`"longest_first"` cuts both sides to `max_length` words, `"only_first"` only `text`, `"only_second"`
only `text_pair`.

Remote code: imports only transformers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from transformers.tokenization_utils_base import TruncationStrategy

PAIR_PREFIX = "pair_"


def has_pair_keys(encoded_inputs: Any) -> bool:
    """Whether an encoding (a mapping, or a list of mappings as a data collator gives) holds a second side."""
    if isinstance(encoded_inputs, (list, tuple)) and encoded_inputs and isinstance(encoded_inputs[0], Mapping):
        encoded_inputs = encoded_inputs[0]
    return isinstance(encoded_inputs, Mapping) and any(str(key).startswith(PAIR_PREFIX) for key in encoded_inputs)


def split_pair_keys(encoded_inputs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(first side, second side without the prefix) of an encoding, each a dict of lists; a list of mappings (one
    per example) is turned into lists per key first. Keys such as `labels` stay with the first side."""
    if isinstance(encoded_inputs, (list, tuple)):
        keys = list(encoded_inputs[0].keys())
        for index, example in enumerate(encoded_inputs):
            if set(example.keys()) != set(keys):
                raise ValueError(
                    f"Every example of a batch of sentence pairs must have the same keys: example 0 has "
                    f"{sorted(keys)}, example {index} {sorted(example.keys())}"
                )
        encoded_inputs = {key: [example[key] for example in encoded_inputs] for key in keys}
    first = {key: value for key, value in encoded_inputs.items() if not key.startswith(PAIR_PREFIX)}
    second = {key[len(PAIR_PREFIX):]: value for key, value in encoded_inputs.items() if key.startswith(PAIR_PREFIX)}
    if "input_ids" not in second:
        raise ValueError(f"A sentence pair's encoding needs pair_input_ids, got the keys {sorted(encoded_inputs)}")
    return first, second


def merged_pair(first: Mapping[str, Any], second: Mapping[str, Any], is_one_pair: bool = False) -> dict[str, Any]:
    """The two sides' encodings as one dict, the second side's keys prefixed with `pair_`, after checking that both
    hold as many sentences (batches; `is_one_pair`: each side is one sentence)."""
    sizes = [1, 1] if is_one_pair else [len(side["input_ids"]) for side in (first, second)]
    if sizes[0] != sizes[1]:
        raise ValueError(
            f"A batch of sentence pairs needs as many sentences on each side: input_ids has {sizes[0]}, "
            f"pair_input_ids {sizes[1]}"
        )
    return {**first, **{PAIR_PREFIX + key: value for key, value in second.items()}}


def check_pair_batches(texts: list[Any], texts_are_batched: bool, pairs: list[Any], pairs_are_batched: bool) -> None:
    """`ValueError` unless `text` and `text_pair` are both one sentence or both batches of the same length."""
    if texts_are_batched != pairs_are_batched:
        shapes = ("a batch", "one sentence") if texts_are_batched else ("one sentence", "a batch")
        raise ValueError(
            f"text is {shapes[0]} but text_pair is {shapes[1]}: give one text_pair per text (both strings, or both "
            "lists of the same length)"
        )
    if len(texts) != len(pairs):
        raise ValueError(
            f"text has {len(texts)} sentences but text_pair has {len(pairs)}: give one text_pair per text"
        )


def side_max_words(
    truncation_strategy: TruncationStrategy, max_length: int | None, is_second_side: bool
) -> int | None:
    """How many words one side keeps: `max_length` when the strategy cuts that side, else None (no cut)."""
    if max_length is None or truncation_strategy == TruncationStrategy.DO_NOT_TRUNCATE:
        return None
    cut_side = {TruncationStrategy.ONLY_FIRST: False, TruncationStrategy.ONLY_SECOND: True}.get(truncation_strategy)
    return max_length if cut_side is None or cut_side == is_second_side else None


__all__ = ["PAIR_PREFIX", "check_pair_batches", "has_pair_keys", "merged_pair", "side_max_words", "split_pair_keys"]
