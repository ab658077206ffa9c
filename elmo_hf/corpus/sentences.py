"""Corpora as sentences (lists of words) from any input format, directories of shards and glob patterns
(``corpus_sources``): ``load_sentences`` (a `datasets.Dataset`, how `elmo-hf pretrain` reads its corpora; text split
by ``ELMoTokenizer``'s word splitters, sentences without words left out), ``load_conllu_sentences`` (keeps
``sent_id`` and ``upos``), both cached by `datasets` under the files' path, size and modification time; and
``stream_sentences`` (the same sentences, nothing cached, memory that does not grow with the corpus).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from datasets import Dataset, Features, List, Value

from ..word_splitters_elmo import DEFAULT_WORD_SPLITTER, ascii_word_pattern, build_word_splitter, words_of_text
from .progress import CorpusProgress
from .readers import CONLLU_WORDS_COLUMN, CorpusError, CorpusSource, InvalidRowError, conllu_features, corpus_sources

WORDS_FEATURES = Features({"words": List(Value("string"))})


def _checked_sources(
    paths: str | Path | Sequence[str | Path],
    word_splitter: str,
    text_column: str | None,
    words_column: str | None,
    input_format: str | None,
) -> list[CorpusSource]:
    """The opened sources of ``paths``, after the arguments every sentence reader takes are checked: an unknown
    word splitter (or a Korean analyser not installed), both columns given, no path."""
    build_word_splitter(word_splitter)
    if text_column is not None and words_column is not None:
        raise ValueError("give text_column or words_column, not both")
    return _as_sources(paths, input_format)


def _as_sources(paths: str | Path | Sequence[str | Path], input_format: str | None = None) -> list[CorpusSource]:
    paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
    if not paths:
        raise ValueError("paths is empty: give at least one corpus file")
    return corpus_sources(paths, input_format)


def _words_of_rows(
    sources: Sequence[CorpusSource], word_splitter: str, text_column: str | None, words_column: str | None
) -> Iterator[list[str]]:
    """The words of every row of ``sources``, in order (an empty list for a row without words)."""
    splitter, pattern = build_word_splitter(word_splitter), ascii_word_pattern(word_splitter)
    for source in sources:
        default_text, default_words = source.default_columns
        text, words_of = (text_column, words_column) if (text_column or words_column) else (default_text, default_words)
        for row, record in source.rows():
            if isinstance(record, InvalidRowError):
                raise CorpusError(f"{source.row_name(row)}: {record}")
            yield _words_of_record(source, row, record, splitter, pattern, text, words_of)


def _sentence_rows(
    sources: list[tuple[str, str, int, int]], word_splitter: str, text_column: str | None, words_column: str | None
) -> Iterator[dict[str, Any]]:
    """`Dataset.from_generator` generator of ``{"words": [...]}``; each source comes with its format, size and
    modification time, so a changed file is not served from a stale cache (datasets fingerprints the arguments)."""
    opened = [CorpusSource(Path(path), input_format) for path, input_format, _, _ in sources]
    for words in _words_of_rows(opened, word_splitter, text_column, words_column):
        if words:  # left out here, not by a later `filter`: that pass would read the whole cache once more
            yield {"words": words}


def stream_sentences(
    paths: str | Path | Sequence[str | Path],
    word_splitter: str = DEFAULT_WORD_SPLITTER,
    *,
    text_column: str | None = None,
    words_column: str | None = None,
    input_format: str | None = None,
    progress: bool = False,
    description: str = "reading the corpus",
) -> Iterator[list[str]]:
    """
    The sentences of ``paths`` as ``load_sentences`` reads them (the same words, the same order, sentences without
    words left out), streamed: nothing is cached and memory does not grow with the corpus. Arguments as in
    ``load_sentences``; ``progress`` shows a bar of the rows read (of how many, where the formats tell: text files
    are counted by their line breaks first) and the words.
    """
    sources = _checked_sources(paths, word_splitter, text_column, words_column, input_format)
    with CorpusProgress(description, _total_rows(sources) if progress else None, enabled=progress) as bar:
        for words in _words_of_rows(sources, word_splitter, text_column, words_column):
            bar.update(1, len(words))
            if words:
                yield words


def _total_rows(sources: Sequence[CorpusSource]) -> int | None:
    """Rows of every source, or None when a format does not tell it cheaply (JSON lines, CSV, CoNLL-U)."""
    counts = [source.num_rows() for source in sources]
    return None if None in counts else sum(counts)


def _words_of_record(source, row, record, splitter, pattern, text_column, words_column) -> list[str]:
    column = words_column or text_column
    if column not in record:
        raise CorpusError(f"{source.row_name(row)} has no column {column!r}; its columns are {sorted(record)}")
    value = record[column]
    if words_column is not None:
        if not isinstance(value, (list, tuple)) or not all(isinstance(word, str) and word for word in value):
            raise CorpusError(f"{source.row_name(row)}: {column!r} must be a list of non-empty strings, got {value!r:.60}")
        return list(value)
    if not isinstance(value, str):
        raise CorpusError(f"{source.row_name(row)}: {column!r} must be a string, got {value!r:.60}")
    return words_of_text(value, splitter, pattern)


def load_sentences(
    paths: str | Path | Sequence[str | Path],
    word_splitter: str = DEFAULT_WORD_SPLITTER,
    *,
    text_column: str | None = None,
    words_column: str | None = None,
    input_format: str | None = None,
    cache_dir: str | Path | None = None,
) -> Dataset:
    """
    A `Dataset` with one column, `words`: the sentences of every file of ``paths``, in order, sentences without words
    left out.

    Args:
        paths: corpus files of any ``INPUT_FORMATS`` (formats may be mixed: text, `.conllu`, `.jsonl`, ...),
            directories of shards and glob patterns (``corpus_sources``).
        word_splitter (`str`, defaults to `"moses"`): how text becomes words (`"moses"`, `"ptb"`, `"whitespace"`,
            `"bert"`, `"kiwi"`, `"mecab"`, see `ELMoTokenizer`).
        text_column / words_column: the column holding raw sentences / lists of words in structured input; by
            default the words of CoNLL-U files and the `text` column of everything else.
        input_format: the format of every file, when the extension does not tell it.
        cache_dir: the `datasets` cache directory (default: `HF_DATASETS_CACHE`).

    Raises:
        `CorpusError` naming the file and row for a row that cannot be read (not UTF-8, a missing column, a value
        of the wrong type).
    """
    opened = _checked_sources(paths, word_splitter, text_column, words_column, input_format)
    if not any(words for words in _words_of_rows(opened, word_splitter, text_column, words_column)):
        return Dataset.from_dict({"words": []}, features=WORDS_FEATURES)  # datasets cannot build from no rows at all
    sources = [(str(source.path.resolve()), source.input_format, *_size_and_mtime(source)) for source in opened]
    arguments = {"sources": sources, "word_splitter": word_splitter, "text_column": text_column, "words_column": words_column}
    return _generated(_sentence_rows, WORDS_FEATURES, arguments, cache_dir)


def load_conllu_sentences(paths: str | Path | Sequence[str | Path], cache_dir: str | Path | None = None) -> Dataset:
    """
    A `Dataset` of the sentences of CoNLL-U files (e.g. UD English-EWT), in file order, with the columns `sent_id`
    (str, None when the sentence has no `# sent_id` comment), `words` (the FORM column of the syntactic words, see
    `read_conllu_sentences`) and `upos` (their UPOS tags, for POS-tagging tasks).
    """
    sources = _as_sources(paths)
    not_conllu = [str(source.path) for source in sources if source.input_format != "conllu"]
    if not_conllu:
        raise CorpusError(f"load_conllu_sentences reads .conllu files, got {not_conllu}; use load_sentences for other formats")
    identities = [(str(source.path.resolve()), *_size_and_mtime(source)) for source in sources]
    return _generated(_conllu_rows, conllu_features(), {"files": identities}, cache_dir)


def _generated(generator, features: Features, arguments: dict[str, Any], cache_dir: str | Path | None) -> Dataset:
    """``Dataset.from_generator`` (cached under ``arguments``); a ``CorpusError`` it wraps is raised as it is."""
    try:
        return Dataset.from_generator(
            generator, features=features, gen_kwargs=arguments, cache_dir=str(cache_dir) if cache_dir else None
        )
    except Exception as error:  # datasets wraps the generator's errors in its own
        cause = _corpus_error_in(error)
        if cause is not None:
            raise cause from None
        raise


def _conllu_rows(files: list[tuple[str, int, int]]) -> Iterator[dict[str, Any]]:
    for path, _, _ in files:
        for _, sentence in CorpusSource(Path(path), "conllu").rows():
            yield sentence


def dataset_words(dataset: Dataset, column: str = "words", batch_size: int = 1000) -> Iterator[list[str]]:
    """The values of ``column`` of every row of ``dataset``, in order, ``batch_size`` rows at a time, in memory that
    does not grow with the dataset: the pages of its memory-mapped cache files, which would stay resident, are given
    back every `_RELEASE_EVERY_ROWS` rows (docs/design/pretraining-data.md, "Corpora larger than memory")."""
    if column not in dataset.column_names:
        raise ValueError(f"the dataset has no {column!r} column (columns: {dataset.column_names})")
    mapped = {str(Path(cache["filename"]).resolve()) for cache in dataset.cache_files}
    rows_since_release = 0
    for batch in dataset.select_columns([column]).iter(batch_size=batch_size):
        yield from batch[column]
        rows_since_release += batch_size
        if mapped and rows_since_release >= _RELEASE_EVERY_ROWS:
            release_mapped_pages(mapped)
            rows_since_release = 0
    if mapped:
        release_mapped_pages(mapped)


_RELEASE_EVERY_ROWS = 50_000  # about a million words: a few MB of a cache's pages resident at most
_MADV_DONTNEED = 4  # Linux's madvise advice: drop these pages of the mapping (clean file pages are read again if touched)


def release_mapped_pages(paths: set[str]) -> int:
    """Give back the resident pages of this process's read-only memory mappings of the files ``paths`` (resolved),
    Linux only (``/proc/self/maps``, ``madvise(MADV_DONTNEED)``): a page touched again is read back. Returns the
    bytes of mappings released."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return 0
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            regions = [line.split(maxsplit=5) for line in maps]
    except OSError:
        return 0
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    released = 0
    for fields in regions:
        if len(fields) == 6 and fields[5].strip() in paths and "w" not in fields[1]:  # read-only mappings only
            start, end = (int(address, 16) for address in fields[0].split("-"))
            if madvise(start, end - start, _MADV_DONTNEED) == 0:
                released += end - start
    return released


def _size_and_mtime(source: CorpusSource) -> tuple[int, int]:
    identity = source.identity()
    return identity["size"], identity["mtime_ns"]


def _corpus_error_in(error: BaseException) -> CorpusError | None:
    """The ``CorpusError`` a `datasets` error was raised from, if any (datasets wraps generator errors)."""
    while error is not None:
        if isinstance(error, CorpusError):
            return error
        error = error.__cause__ or error.__context__
    return None


__all__ = ["CONLLU_WORDS_COLUMN", "dataset_words", "load_conllu_sentences", "load_sentences", "release_mapped_pages", "stream_sentences"]
