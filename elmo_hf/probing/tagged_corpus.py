"""Token-labelled corpora for the probes: a CoNLL-U treebank (any of its columns) or rows of words and tags.

A CoNLL-U file gives its FORM column as the words and one named column as the tags (``upos`` by default; ``xpos``,
``deprel``, ``lemma``, ``feats``, ...: ``corpus.format_readers.CONLLU_FIELDS``). Any other input format elmo-hf
reads (JSON lines, CSV, TSV, Parquet, a saved dataset: ``corpus/formats.py``) gives one sentence per row, its words
in ``words_column`` and its tags in ``tags_column``, each a list or a string of space-separated items.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..corpus.format_readers import CONLLU_WORDS_COLUMN
from ..corpus.readers import CorpusSource, read_conllu_sentences
from .layer_probe import ProbeInputError, TaggedSentences


def _items(value: Any, where: str, column: str) -> list[str]:
    if isinstance(value, str):
        return value.split()
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        return list(value)
    raise ProbeInputError(f"{where}: column {column!r} must hold a list of strings or a space-separated string, got {value!r:.60}")


def tagged_sentences(
    path: str | Path, *, tag_column: str = "upos", words_column: str = CONLLU_WORDS_COLUMN,
    input_format: str | None = None, limit: int | None = None,
) -> TaggedSentences:
    """The first ``limit`` (all by default) sentences of ``path`` with their tags (see the module docstring)."""
    source = CorpusSource.open(path, input_format)
    words, tags = [], []
    if source.input_format == "conllu":
        rows = read_conllu_sentences(source.path, (tag_column,))
        for sentence in rows:
            if limit is not None and len(words) >= limit:
                break
            words.append(sentence[CONLLU_WORDS_COLUMN])
            tags.append(sentence[tag_column])
        return TaggedSentences(words, tags, str(path))
    columns = source.column_names() or []
    missing = [column for column in (words_column, tag_column) if column not in columns]
    if missing:
        found = f"its columns are {', '.join(columns)}" if columns else f"a {source.input_format} file has no columns"
        raise ProbeInputError(f"{path}: no column {missing[0]!r} of words or tags ({found}): give a CoNLL-U file or rows of words and tags")
    for row, record in source.rows():
        if limit is not None and len(words) >= limit:
            break
        where = source.row_name(row)
        if isinstance(record, Exception):
            raise ProbeInputError(f"{where}: {record}")
        words.append(_items(record[words_column], where, words_column))
        tags.append(_items(record[tag_column], where, tag_column))
    return TaggedSentences(words, tags, str(path))


__all__ = ["tagged_sentences"]
