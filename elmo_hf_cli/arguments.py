"""Checks of the command line's arguments that answer before torch is imported (argparse ``type=`` functions).

A wrong value fails at once, naming the argument, instead of after the seconds that importing torch and transformers
takes. What is checked here, and the rule for each:

- a **choice** (``--pooling``, ``--representation``, ``--dtype``, ...): one of the library's own list of values,
  ``elmo_hf/choices_elmo.py``, which imports nothing (``elmo_hf`` is lazy: its ``__init__`` imports no module);
- an **input** (a corpus, an index, ``--options``, ...): it must exist ("no such file or directory"), unless it is a
  URL (``s3://...``, for ``--engine ray``);
- a **model** (``--model``): an existing directory; else, a name that looks like a local path fails with "no such
  directory" and the Hub is never asked; else (a name of the Hub's ``name`` or ``namespace/name`` form) the Hub is
  asked whether that repo exists, or with ``HF_HUB_OFFLINE=1`` only the local Hub cache is (see ``model_argument``);
- an **output directory** (``--output``): what the library's output policy (``elmo_hf/storage/output_directory.py``)
  refuses in every mode, new, ``--resume`` or ``--overwrite``: a path that is not a directory, and a non-empty
  directory without an elmo-hf ownership marker (``--output .`` in a folder of one's own files). Everything else the
  policy decides when the command runs.

Values the library checks against the model (a layer index, ``--mix-index``) or that need its code are left to it.

A typo gets a suggestion (``SuggestingArgumentParser``, the class of every (sub)command's parser): an unknown option is
reported by the command it was given to, with that command's usage and the closest of its options (``--modle``: did
you mean ``--model``?), and a value outside the choices (a command, ``--pooling``) with the closest choice.
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
    """An ``ArgumentParser`` whose errors about a typo name the closest option or choice (``closest``); Python 3.11's
    argparse has no ``suggest_on_error``. ``add_subparsers`` makes subparsers of the parser's own class, so every
    command and nested command of ``elmo-hf`` is one.

    - An argument a (sub)command does not know is reported by that command, with its own usage (argparse would hand
      it up to ``elmo-hf`` itself, whose usage lists only the commands): ``parse_known_args`` refuses what is left
      over, so it never returns any.
    - A value outside an argument's choices (a command name, ``--pooling``) gets "did you mean" after argparse's
      "invalid choice: ... (choose from ...)"."""

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
    """``--model``: an ELMo directory here, or a Hub repo id. The rule, in order:

    1. an existing directory is the model (``~`` expanded);
    2. a name that looks like a local path (``looks_like_local_path``) fails: "no such directory", the Hub not asked;
    3. otherwise the name has the Hub's form: with ``HF_HUB_OFFLINE=1`` (huggingface_hub's ``constants``) it must be
       in the local Hub cache, and nothing is sent; online the Hub is asked once whether the repo exists, and a
       Hub that cannot be reached is no error for a repo in the cache (transformers then loads the cached copy, as it
       did before this check). The message names both places: no local directory, and no such repo (or the Hub
       could not be reached).
    """
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
    "looks_like_local_path",
    "model_argument",
    "output_directory",
    "representation_argument",
]
