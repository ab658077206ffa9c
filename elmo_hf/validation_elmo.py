"""Argument checks shared by every elmo-hf module, and ``ELMoHFError``, the base of the package's errors.

Each check returns the value it accepted and raises ``ValueError`` naming the argument, what was expected and what
was given, e.g. ``"batch_size must be an int >= 1, got 0"``. ``bool`` is never accepted as a number (``True`` is an
``int`` in Python, and ``batch_size=True`` is a mistake, not 1). ``hint`` adds a short explanation after the
expectation, in brackets.

This file imports no other module of the package (only the standard library), so that the remote-code files (configuration, tokenization, modeling) can use it when
they are copied next to a checkpoint.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection, Iterable
from typing import Any


class ELMoHFError(ValueError):
    """The base of every error elmo-hf raises about its inputs (a file, an option, a directory): the message names
    the input and what was expected. A ``ValueError``, so callers that catch those keep working; the command line
    catches this one class. Subclasses exist where a caller must tell failures apart (``VerificationError`` exits 1,
    ``HubPushError`` means the output was written but not pushed)."""


def _explained(expectation: str, hint: str | None) -> str:
    return f"{expectation} ({hint})" if hint else expectation


def is_int(value: Any) -> bool:
    """An integer that is not a ``bool`` (NumPy integers included)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _within(value: Any, minimum: Any, maximum: Any, minimum_inclusive: bool, maximum_inclusive: bool) -> bool:
    above = minimum is None or (value >= minimum if minimum_inclusive else value > minimum)
    below = maximum is None or (value <= maximum if maximum_inclusive else value < maximum)
    return above and below


def _range_expectation(
    noun: str, minimum: Any, maximum: Any, minimum_inclusive: bool, maximum_inclusive: bool, allow_none: bool
) -> str:
    """``"an int in [0, 3)"``, ``"a number > 0"``, ``"None or an int >= 1"``, ..."""
    if minimum is not None and maximum is not None:
        expectation = f"{noun} in {'[' if minimum_inclusive else '('}{minimum:g}, {maximum:g}{']' if maximum_inclusive else ')'}"
    elif minimum is not None:
        expectation = f"{noun} {'>=' if minimum_inclusive else '>'} {minimum:g}"
    elif maximum is not None:
        expectation = f"{noun} {'<=' if maximum_inclusive else '<'} {maximum:g}"
    else:
        expectation = noun
    return f"None or {expectation}" if allow_none else expectation


def check_int(
    name: str,
    value: Any,
    minimum: int | None = None,
    maximum_exclusive: int | None = None,
    *,
    allow_none: bool = False,
    hint: str | None = None,
) -> int | None:
    """``value`` as an int within ``[minimum, maximum_exclusive)`` (either bound optional), or None if allowed."""
    if value is None and allow_none:
        return None
    if not (is_int(value) and _within(value, minimum, maximum_exclusive, True, False)):
        expectation = _range_expectation("an int", minimum, maximum_exclusive, True, False, allow_none)
        raise ValueError(f"{name} must be {_explained(expectation, hint)}, got {value!r}")
    return int(value)


def check_number(
    name: str,
    value: Any,
    minimum: float | None = None,
    maximum: float | None = None,
    *,
    minimum_inclusive: bool = True,
    maximum_inclusive: bool = True,
    allow_none: bool = False,
    hint: str | None = None,
) -> float | None:
    """``value`` as a finite float within the given bounds (inclusive unless said otherwise), or None if allowed."""
    if value is None and allow_none:
        return None
    is_number = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if not (is_number and _within(value, minimum, maximum, minimum_inclusive, maximum_inclusive)):
        noun = "a number" if minimum is not None or maximum is not None else "a finite number"
        expectation = _range_expectation(noun, minimum, maximum, minimum_inclusive, maximum_inclusive, allow_none)
        raise ValueError(f"{name} must be {_explained(expectation, hint)}, got {value!r}")
    return float(value)


def check_bool(name: str, value: Any, *, hint: str | None = None) -> bool:
    """``value`` if it is a ``bool`` (``"false"`` and ``1`` are refused: they are easy to misread)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be {_explained('a bool (true or false)', hint)}, got {value!r}")
    return value


def check_choice(name: str, value: Any, choices: Collection[Any], *, hint: str | None = None) -> Any:
    """``value`` if it is one of ``choices``."""
    if isinstance(value, bool) or value not in choices:
        raise ValueError(f"{name} must be {_explained(f'one of {list(choices)}', hint)}, got {value!r}")
    return value


# ----------------------------------------------------------------------------------------------------------------------
# Comparing numbers: NaN is never close to anything (Python's max() skips NaN unless it comes first; these do not).
# ----------------------------------------------------------------------------------------------------------------------


# What transformers' Trainer and pipelines pass to every model's forward and ELMo has no use for.
IGNORED_FORWARD_ARGUMENTS = frozenset({"token_type_ids", "output_hidden_states", "output_attentions"})


def check_forward_arguments(model_name: str, arguments: Collection[str]) -> None:
    """`TypeError` naming the arguments of `model_name.forward()`'s `**kwargs` other than the ignored ones."""
    extra = set(arguments) - IGNORED_FORWARD_ARGUMENTS
    if extra:
        raise TypeError(f"{model_name}.forward() got unexpected argument(s) {sorted(extra)}.")


def largest(values: Iterable[float]) -> float:
    """The largest of ``values``; NaN if any of them is NaN; 0.0 for none."""
    result = 0.0
    for value in values:
        value = float(value)
        if math.isnan(value):
            return math.nan
        result = max(result, value)
    return result


def max_abs_difference(first: Any, second: Any) -> float:
    """Largest ``|first - second|`` over all elements of two tensors or arrays (torch or NumPy), as a float; NaN if
    any element is NaN on either side, 0.0 for empty inputs; tensors that require grad are compared by value."""
    first, second = (value.detach() if hasattr(value, "detach") else value for value in (first, second))
    difference = abs(first - second)
    num_elements = difference.numel() if hasattr(difference, "numel") else difference.size  # torch / NumPy
    return float(difference.max()) if num_elements else 0.0


def is_close(difference: float, tolerance: float) -> bool:
    """``difference <= tolerance``, False for NaN (written out so that no caller tests ``nan > tolerance``)."""
    return not math.isnan(difference) and difference <= tolerance


# The ownership marker every elmo-hf output directory holds (its record: storage/ownership.py, which takes the
# name from here: this file is the one the remote-code modules can read it from).
OUTPUT_MARKER_NAME = ".elmo-hf-output.json"
_LOADED_FILES = ("config.json", "tokenizer_config.json", "special_tokens_map.json")


def check_model_directory_complete(directory: Any) -> None:
    """``OSError`` naming what is missing when a local model directory lacks a file loading reads (configs, weights,
    the remote-code modules) that its elmo-hf record (``.elmo-hf-output.json``'s ``files``, written when the
    directory was made) lists. (``config.json``'s ``auto_map`` is no such list: ``save_pretrained`` keeps it without
    copying the modules, and such a directory loads wherever elmo-hf is installed.) A directory missing its
    ``tokenizer_config.json`` loaded silently with default tokenizer settings. Anything that is not a local directory
    (a Hub id) is not checked here."""
    import json
    import os

    if not isinstance(directory, (str, os.PathLike)) or not os.path.isdir(directory):
        return
    try:
        with open(os.path.join(directory, OUTPUT_MARKER_NAME), encoding="utf-8") as file:
            recorded = json.load(file).get("files") or {}
    except (OSError, ValueError, AttributeError):
        return  # no elmo-hf record (saved by save_pretrained, or by an older elmo-hf): nothing to check against
    # What loading reads (a README or a report may be left out of a copy on purpose), at the top level (a
    # pre-training output's checkpoint folders come and go). Presence only: a file edited by hand (a
    # tokenizer_config.json with another word splitter) is the user's choice.
    problems = [
        f"{name} is missing" for name in recorded
        if "/" not in name and (name in _LOADED_FILES or name.endswith((".py", ".safetensors")))
        and not os.path.isfile(os.path.join(directory, name))
    ]
    if problems:
        raise OSError(
            f"model directory {directory} is incomplete: {'; '.join(problems)} (the elmo-hf run that made it recorded "
            "writing them); it was damaged or only partly copied: convert or copy it again"
        )


__all__ = [
    "ELMoHFError", "OUTPUT_MARKER_NAME", "check_bool", "check_choice", "check_int", "check_model_directory_complete", "check_number", "is_close", "is_int",
    "largest", "max_abs_difference",
]
