"""Write a converter's output directory all at once, or not at all."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .hdf5_layout import ConversionError


def check_output_directory(output_dir: Path, overwrite: bool) -> None:
    """Refuse an existing output (unless ``overwrite``) before any work is done."""
    if output_dir.exists() and not overwrite:
        raise ConversionError(f"output directory {output_dir} already exists; pass overwrite=True (--overwrite) to replace it.")
    if output_dir.exists() and not output_dir.is_dir():
        raise ConversionError(f"output path {output_dir} exists and is not a directory.")


@contextmanager
def staged_output_directory(output_dir: Path) -> Iterator[Path]:
    """Yield an empty directory beside ``output_dir`` to write into. When the block succeeds it replaces
    ``output_dir``; when it raises, it is removed and ``output_dir`` is left as it was."""
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging_dir = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    try:
        yield staging_dir
        if output_dir.exists():
            shutil.rmtree(output_dir)
        staging_dir.rename(output_dir)
    finally:
        if staging_dir.exists():
            shutil.rmtree(staging_dir)


__all__ = ["check_output_directory", "staged_output_directory"]
