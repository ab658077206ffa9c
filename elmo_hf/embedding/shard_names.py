"""The one rule for the names of the Parquet files the embedding engines write (imports nothing: the command line
reads it, through ``manifest.py``, before torch).

``elmo-hf embed`` names its shards ``shard-00000.parquet``, ``shard-00001.parquet``, ... (``EMBED_SHARDS``); the
Ray engine names its files ``part-000000-<write id>.parquet`` (``RAY_PARTS``: Ray numbers its write tasks and adds
the write's id). Both sort by name in input order. Everything that names, matches or lists such files asks this rule:
the writers, the output kinds' entries (what ``--overwrite`` and ``--resume`` may consider theirs), ``--verify`` and
the Ray engine's summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path


@dataclass(frozen=True)
class ShardNames:
    """``<prefix>-<index on digits>[-<tag>].parquet``: how one engine names its files, in input order."""

    prefix: str
    digits: int

    def name(self, index: int, tag: str | None = None) -> str:
        """The file of shard ``index`` (from 0), with ``tag`` after the number where the writer adds one."""
        return f"{self.prefix}-{index:0{self.digits}d}{'' if tag is None else '-' + tag}.parquet"

    @property
    def pattern(self) -> str:
        """The glob pattern every such name matches (an ``OutputKind``'s entries)."""
        return f"{self.prefix}-[0-9]*.parquet"

    def matches(self, name: str) -> bool:
        return fnmatchcase(name, self.pattern)

    def in_directory(self, directory: Path) -> list[Path]:
        """The files of ``directory`` named by this rule, in name (input) order."""
        return sorted(path for path in Path(directory).iterdir() if self.matches(path.name))


EMBED_SHARDS = ShardNames("shard", 5)
RAY_PARTS = ShardNames("part", 6)

__all__ = ["EMBED_SHARDS", "RAY_PARTS", "ShardNames"]
