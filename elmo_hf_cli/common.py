"""What every command shares: exit codes and how errors are reported."""

from __future__ import annotations

import sys

EXIT_OK = 0
EXIT_FAILED_CHECK = 1
EXIT_USAGE_ERROR = 2
EXIT_INTERRUPTED = 130

DEFAULT_MODEL_NOTE = (
    "note: no --model given, using elmo-hf's default model: a small demonstration ELMo pre-trained on about 265k "
    "words of Shakespeare and English web text, shipped in the package so that this works offline. For real vectors "
    "convert a released ELMo (elmo-hf convert --help) and pass --model"
)


def report_error(error: BaseException) -> int:
    """Print ``error: ...`` (the library's message names the input and what was expected) and return exit code 2."""
    print(f"error: {error}", file=sys.stderr)
    return EXIT_USAGE_ERROR


def quiet_progress_bars() -> None:
    """No progress bars from transformers, datasets or huggingface_hub (loading weights, reading data)."""
    import datasets
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    datasets.disable_progress_bars()
    disable_progress_bars()


__all__ = ["DEFAULT_MODEL_NOTE", "EXIT_FAILED_CHECK", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE_ERROR", "quiet_progress_bars", "report_error"]
