"""Checks of the command line's arguments that answer before torch is imported (argparse ``type=`` functions): a
wrong value fails at once, naming the argument. A **choice** is one of ``elmo_hf/choices_elmo.py``'s lists; an
**input** must exist (a URL is left to the reader); a **model** follows ``model_argument``'s rule; an **output
directory** is refused where the output policy would refuse it in every mode (a file, or a non-empty directory
without an elmo-hf ownership marker). Values checked against the model (a layer, ``--mix-index``) are left to the
library. A typo gets the closest option or choice (``SuggestingArgumentParser``, every (sub)command's parser class).
"""

from __future__ import annotations

import argparse
import difflib
import os
from collections.abc import Iterable
from pathlib import Path

from elmo_hf import choices_elmo

def closest(value: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like ``value`` (``difflib.get_close_matches``, its default cutoff), or None if none is close."""
    matches = difflib.get_close_matches(value, list(candidates), n=1)
    return matches[0] if matches else None


class SuggestingArgumentParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors about a typo name the closest option or choice (Python 3.11's argparse has
    no ``suggest_on_error``); its subparsers are of its class. An argument a (sub)command does not know is reported by
    that command, with its own usage (argparse would hand it up to ``elmo-hf``, whose usage lists only the commands)."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, unknown = super().parse_known_args(args, namespace)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}{self._suggested_options(unknown)}")
        return namespace, unknown

    def _suggested_options(self, unknown: list[str]) -> str:
        """"; did you mean --model?" for the unknown options that resemble one of this parser's ("" if none)."""
        known = [option for action in self._actions for option in action.option_strings]
        unknown_options = [argument.split("=", 1)[0] for argument in unknown if argument[:1] in self.prefix_chars]
        suggestions = {option: closest(option, known) for option in unknown_options}
        suggestions = {option: match for option, match in suggestions.items() if match is not None}
        if not suggestions:
            return ""
        if len(suggestions) == 1:
            return f"; did you mean {next(iter(suggestions.values()))}?"
        return f"; did you mean {', '.join(f'{match} for {option}' for option, match in suggestions.items())}?"

    def _check_value(self, action, value):
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as error:
            match = closest(str(value), map(str, action.choices))
            if match is None:
                raise
            raise argparse.ArgumentError(action, f"{error.message}; did you mean {match!r}?") from None


def given_options(args: argparse.Namespace, names: Iterable[str]) -> dict:
    """The options among ``names`` that were given (a parser of ``argument_default=argparse.SUPPRESS`` leaves the
    others out): the library's defaults are the only defaults."""
    return {name: getattr(args, name) for name in names if hasattr(args, name)}


def representation_argument(value: str) -> str | int:
    """A representation name (``choices_elmo.REPRESENTATIONS``), or a layer index (checked against the model by the
    library)."""
    if value.lstrip("-").isdigit():
        return int(value)
    names = choices_elmo.REPRESENTATIONS
    if value not in names:
        match = closest(value, names)
        raise argparse.ArgumentTypeError(
            f"invalid choice: {value!r} (choose from {', '.join(names)}, or a layer index: 0 = token layer)"
            + (f"; did you mean {match!r}?" if match else "")
        )
    return value


def existing_path(value: str) -> str:
    """An input that must exist: a file or a directory. A URL (``s3://bucket/corpus/``, which ``--engine ray`` reads
    through pyarrow) is left to the reader."""
    if "://" in value:
        return value
    if not os.path.exists(os.path.expanduser(value)):
        raise argparse.ArgumentTypeError(f"no such file or directory: {value}")
    return os.path.expanduser(value)


def existing_directory(value: str) -> str:
    """An input directory that must exist."""
    path = os.path.expanduser(value)
    if not os.path.exists(path):
        raise argparse.ArgumentTypeError(f"no such directory: {value}")
    if not os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{value} is a file, not a directory")
    return path


def looks_like_local_path(value: str) -> bool:
    """Whether ``value`` can only mean a path on this machine, not a Hub repo id: it starts with ``.``, ``/`` or ``~``
    (or is absolute), huggingface_hub's ``validate_repo_id`` rejects it as a repo id (three parts, a backslash, ...),
    or it names a folder inside a directory that exists here (``models/nope`` where ``models/`` exists)."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    if value.startswith((".", "/", "~")) or os.path.isabs(value):
        return True
    try:
        validate_repo_id(value)
    except HFValidationError:
        return True
    parent = os.path.dirname(value)
    return bool(parent) and os.path.isdir(parent)


def model_argument(value: str) -> str:
    """``--model``: an existing directory (``~`` expanded); else a name that looks like a local path fails without
    asking the Hub; else a Hub repo id, looked up in the local Hub cache only under ``HF_HUB_OFFLINE=1``, or asked for
    once online (an unreachable Hub is no error for a cached repo)."""
    path = os.path.expanduser(value)
    if os.path.isdir(path):
        return path
    if os.path.exists(path):
        raise argparse.ArgumentTypeError(f"{value} is a file, not a model directory")
    if looks_like_local_path(value):
        parent = os.path.dirname(value)
        taken_as_path = f" ({parent}/ exists here, so this names a folder in it, not a Hub repo)" if os.path.isdir(parent) and not value.startswith((".", "/", "~")) else ""
        raise argparse.ArgumentTypeError(f"no such directory: {value}{taken_as_path}")
    import huggingface_hub
    from huggingface_hub import constants

    cached = isinstance(huggingface_hub.try_to_load_from_cache(value, "config.json"), str)
    if constants.HF_HUB_OFFLINE:
        if cached:
            return value
        raise argparse.ArgumentTypeError(
            f"no local directory {value}, and no Hub repo {value} in the local Hub cache ({constants.HF_HUB_CACHE}); "
            "HF_HUB_OFFLINE is set, so the Hub was not asked"
        )
    try:
        found = huggingface_hub.repo_exists(value)
    except Exception as error:  # any failure to ask (no network, DNS, proxy, server error): say so, with its reason
        if cached:
            return value
        raise argparse.ArgumentTypeError(
            f"no local directory {value}, and the Hub ({constants.ENDPOINT}) could not be reached to look for a repo "
            f"{value}: {error}"
        ) from None
    if not found:
        raise argparse.ArgumentTypeError(
            f"no local directory {value}, and the Hub ({constants.ENDPOINT}) has no repo {value} (a private repo needs "
            "a token: HF_TOKEN or `hf auth login`)"
        )
    return value


def output_directory(value: str) -> str:
    """``--output``: refuses at once what the output policy would refuse in every mode (see the module docstring)."""
    from elmo_hf.storage import output_directory as policy

    path = Path(os.path.expanduser(value))
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"output {value} exists and is not a directory")
    if path.is_dir() and any(path.iterdir()) and policy.read_marker(path) is None:
        raise argparse.ArgumentTypeError(
            f"output {value} exists and is not empty, and it is no elmo-hf output (no {policy.MARKER_NAME}; it "
            f"holds: {policy.describe_entries(path)}): elmo-hf writes only into a new or empty directory or one of its "
            "own outputs, and deletes nothing else (--overwrite included); choose another --output"
        )
    return str(path)


__all__ = [
    "SuggestingArgumentParser",
    "closest",
    "existing_directory",
    "existing_path",
    "given_options",
    "looks_like_local_path",
    "model_argument",
    "output_directory",
    "representation_argument",
]
