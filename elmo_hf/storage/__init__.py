"""Where elmo-hf writes: ``output_directory.py`` (the one policy for every output directory: ownership marker,
lock, safe overwrite, cleanup after a failure) and ``files.py`` (atomic file writes, hashes)."""

from .files import sha256_of_file, write_atomically
from .output_directory import (
    OutputDirectory,
    OutputDirectoryError,
    OutputKind,
    check_deletable,
    open_output_directory,
    staged_output_directory,
)

__all__ = [
    "OutputDirectory",
    "OutputDirectoryError",
    "OutputKind",
    "check_deletable",
    "open_output_directory",
    "sha256_of_file",
    "staged_output_directory",
    "write_atomically",
]
