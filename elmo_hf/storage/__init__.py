"""Where elmo-hf writes: ``output_directory.py`` (how every command opens its output) from ``ownership.py`` (the
marker and its record), ``lock.py`` and ``replacement.py``; ``files.py`` (atomic writes) and ``interrupts.py``
(what Ctrl-C may cut).
"""

from .files import sha256_of_file, write_atomically
from .output_directory import (
    OutputDirectory, OutputDirectoryError, OutputKind, check_deletable, open_output_directory, staged_output_directory,
)

__all__ = [
    "OutputDirectory", "OutputDirectoryError", "OutputKind", "check_deletable", "open_output_directory",
    "sha256_of_file", "staged_output_directory", "write_atomically",
]
