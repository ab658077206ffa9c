"""The word vocabulary of ELMo's language-model heads (pre-training only): ``<S>`` = 0, ``</S>`` = 1, ``<UNK>`` = 2,
then the corpus words by count, most frequent first, ties by word (bilm-tf's order, which its log-uniform sampled
softmax assumes), with the unigram counts the LM heads see as targets; saved as bilm-tf's ``vocab.txt`` plus a
``vocab_counts.tsv`` sidecar. Ids, counts, files and refusals: docs/design/pretraining-data.md, "Word vocabulary".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..characters_elmo import BOS_TOKEN, EOS_TOKEN
from ..modeling_elmo import IGNORE_INDEX
from ..validation_elmo import check_choice, check_int, is_int
from ..word_splitters_elmo import DEFAULT_WORD_SPLITTER, WORD_SPLITTERS
from .lines import read_text_lines

UNK_TOKEN = "<UNK>"  # bilm-tf's unknown-word token (case sensitive)
BOS_WORD_ID = 0
EOS_WORD_ID = 1
UNK_WORD_ID = 2
SPECIAL_WORDS = (BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)  # at ids 0, 1, 2
SENTENCE_BOUNDARY_WORDS = (BOS_TOKEN, EOS_TOKEN)

VOCABULARY_FILE_NAME = "vocab.txt"
COUNTS_FILE_NAME = "vocab_counts.tsv"
# bilm-tf (after lm_1b) skips this line of a vocabulary file; the 1B Word Benchmark vocabulary ends with it.
BILM_TF_SKIPPED_LINE = "!!!MAXTERMID"


# Sentences: validation, shared with data.py and lm_scoring.py ---------------------------------------------------
def check_sentence_words(sentence: Any, where: str) -> list[str]:
    """
    The words of one sentence as a list, or an error naming `where` (e.g. "sentence 12").

    A sentence is a list (or tuple) of `str` words without the sentence-boundary words `<S>` / `</S>`: those are
    added around every sentence by the data pipeline and the model, never taken from the corpus.
    """
    if isinstance(sentence, str):
        raise TypeError(
            f"{where} is a str ({sentence[:40]!r}); expected a list of words. Split text into words first "
            "(e.g. with ELMoTokenizer(...).split_words or elmo_hf.corpus.load_sentences)."
        )
    if not isinstance(sentence, (list, tuple)):
        raise TypeError(f"{where} must be a list of words, got {type(sentence).__name__}")
    for position, word in enumerate(sentence):
        if not isinstance(word, str):
            raise TypeError(f"{where}, word {position}: expected a str, got {word!r} of type {type(word).__name__}")
        if word in SENTENCE_BOUNDARY_WORDS:
            raise ValueError(
                f"{where}, word {position} is {word!r}: the corpus must not contain the sentence-boundary words "
                f"{BOS_TOKEN} / {EOS_TOKEN}; they are added around every sentence (bilm-tf: \"Don't include the <S> "
                "or </S> tokens in your training data\")"
            )
    return list(sentence)


# The vocabulary -------------------------------------------------------------------------------------------------
def _check_limits(min_count: Any, max_size: Any) -> None:
    check_int("min_count", min_count, 1, hint="words seen fewer times become <UNK>")
    hint = f"it counts the {len(SPECIAL_WORDS)} special tokens {', '.join(SPECIAL_WORDS)} plus at least one word"
    check_int("max_size", max_size, len(SPECIAL_WORDS) + 1, allow_none=True, hint=hint)


def _by_count(word_counts: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """(word, count) pairs most frequent first, ties by word (code point order)."""
    return sorted(word_counts, key=lambda word_and_count: (-word_and_count[1], word_and_count[0]))


def _word_problem(word: Any) -> str | None:
    """Why `word` cannot be a vocabulary word (one line of a bilm-tf vocabulary file), or None."""
    if not isinstance(word, str):
        return f"is a {type(word).__name__}, not a str"
    if not word:
        return "is empty"
    if any(character.isspace() for character in word):
        return "contains whitespace (a vocabulary file holds one word per line and bilm-tf splits on whitespace)"
    return None


class ELMoWordVocabulary:
    r"""
    Word vocabulary of ELMo's LM heads (the module docstring), with the corpus's unigram counts when it was built
    from one (or loaded with its counts file). Build one with `from_sentences`, `from_corpus` (any corpus format,
    streamed), `from_text_files` or `from_word_counts`; `save(directory)` / `load(directory)` round-trip it.

    Args:
        words (`Sequence[str]`):
            Every word by id, starting with `<S>`, `</S>`, `<UNK>`. Words are unique, non-empty and contain no
            whitespace.
        counts (`Sequence[int]`, *optional*):
            One count >= 0 per word, aligned with `words`.

    Example:

    ```python
    >>> vocabulary = ELMoWordVocabulary.from_sentences([["the", "cat", "sat"], ["the", "dog"]], min_count=1)
    >>> vocabulary.words
    ('<S>', '</S>', '<UNK>', 'the', 'cat', 'dog', 'sat')
    >>> vocabulary.counts
    (2, 2, 0, 2, 1, 1, 1)
    >>> vocabulary.encode(["the", "bird"])
    [3, 2]
    ```
    """

    def __init__(self, words: Sequence[str], counts: Sequence[int] | None = None):
        words = tuple(words)
        if words[: len(SPECIAL_WORDS)] != SPECIAL_WORDS:
            raise ValueError(
                f"a vocabulary starts with the special tokens {list(SPECIAL_WORDS)} (ids 0, 1, 2), got "
                f"{list(words[: len(SPECIAL_WORDS)])}"
            )
        word_to_id: dict[str, int] = {}
        for index, word in enumerate(words):
            problem = _word_problem(word)
            if problem is not None:
                raise ValueError(f"vocabulary word {index} ({word!r}) {problem}")
            if word in word_to_id:
                raise ValueError(f"vocabulary word {word!r} appears twice, at ids {word_to_id[word]} and {index}")
            word_to_id[word] = index
        if counts is not None:
            counts = tuple(counts)
            if len(counts) != len(words):
                raise ValueError(f"counts must have one entry per word ({len(words)}), got {len(counts)}")
            for index, count in enumerate(counts):
                check_int(f"count of {words[index]!r} (id {index})", count, 0)
        self._words = words
        self._word_to_id = word_to_id
        self._counts = counts

    # ---- building ----
    @classmethod
    def from_sentences(
        cls, sentences: Iterable[Sequence[str]], min_count: int = 1, max_size: int | None = None
    ) -> "ELMoWordVocabulary":
        """
        Count the words of ``sentences`` (one list of words each; sentences without words count as none) and build
        the vocabulary: words seen fewer than ``min_count`` times, and the least frequent beyond ``max_size`` (the 3
        special tokens included, bilm-tf's `n_tokens_vocab`), go to `<UNK>`. Raises `ValueError` for an empty
        corpus, a `min_count` that leaves no word, words that cannot be vocabulary words and `<S>` / `</S>`;
        `TypeError` for a sentence that is not a list of strings.
        """
        _check_limits(min_count, max_size)
        word_counts, num_sentences = _count_words(sentences)
        return cls.from_word_counts(word_counts, num_sentences, min_count=min_count, max_size=max_size)

    @classmethod
    def from_text_files(
        cls,
        paths: str | Path | Sequence[str | Path],
        word_splitter: str = DEFAULT_WORD_SPLITTER,
        min_count: int = 1,
        max_size: int | None = None,
    ) -> "ELMoWordVocabulary":
        """The vocabulary of UTF-8 text files (``paths``, read in order), one sentence per line, split by one of
        `ELMoTokenizer`'s word splitters (`"whitespace"` for tokenised text); lines without words are skipped, as
        `load_sentences` skips them. ``min_count``, ``max_size``: as in `from_sentences`."""
        check_choice("word_splitter", word_splitter, WORD_SPLITTERS)
        paths = [paths] if isinstance(paths, (str, Path)) else list(paths)
        if not paths:
            raise ValueError("paths is empty: give at least one text file")
        for path in map(Path, paths):
            if not path.is_file():
                raise FileNotFoundError(f"text file {path} does not exist or is not a file")
        return cls.from_corpus(paths, word_splitter, input_format="txt", min_count=min_count, max_size=max_size)

    @classmethod
    def from_corpus(
        cls,
        paths: str | Path | Sequence[str | Path],
        word_splitter: str = DEFAULT_WORD_SPLITTER,
        *,
        text_column: str | None = None,
        words_column: str | None = None,
        input_format: str | None = None,
        min_count: int = 1,
        max_size: int | None = None,
        progress: bool = False,
    ) -> "ELMoWordVocabulary":
        """The vocabulary of a corpus of any format, directories of shards or glob patterns, read as
        `load_sentences` reads it (same arguments) but streamed: memory grows with the distinct words, not the
        corpus. ``progress``: a bar of the rows and words read. Raises `CorpusError` naming the file and row that
        cannot be read; `ValueError` as `from_sentences`."""
        from .sentences import stream_sentences

        _check_limits(min_count, max_size)
        sentences = stream_sentences(
            paths, word_splitter, text_column=text_column, words_column=words_column, input_format=input_format,
            progress=progress, description="counting the vocabulary",
        )
        return cls.from_sentences(sentences, min_count=min_count, max_size=max_size)

    @classmethod
    def from_word_counts(
        cls, word_counts: Mapping[str, int], num_sentences: int, min_count: int = 1, max_size: int | None = None
    ) -> "ELMoWordVocabulary":
        """The vocabulary of counts already made (e.g. summed over shards): ``word_counts`` (a literal `<UNK>`
        counts as `<UNK>`) and ``num_sentences`` (those with a word: the counts of `<S>` and `</S>`)."""
        _check_limits(min_count, max_size)
        check_int("num_sentences", num_sentences, 0)
        if num_sentences == 0 or not word_counts:
            raise ValueError("the corpus is empty: it has no sentence with at least one word")
        for word, count in word_counts.items():
            if word in SENTENCE_BOUNDARY_WORDS:
                raise ValueError(
                    f"the corpus contains the word {word!r} ({count} times): sentence-boundary words are added "
                    "around every sentence and must not appear in the training data"
                )
            problem = _word_problem(word)
            if problem is not None:
                raise ValueError(f"the corpus word {word!r} (seen {count} times) {problem}")
            check_int(f"the count of {word!r}", count, 1)
        ranked = _by_count((word, count) for word, count in word_counts.items() if word != UNK_TOKEN)
        kept = [(word, count) for word, count in ranked if count >= min_count]
        if max_size is not None:
            kept = kept[: max_size - len(SPECIAL_WORDS)]
        if not kept:
            raise ValueError(
                f"min_count={min_count} leaves no word in the vocabulary: the most frequent word, "
                f"{ranked[0][0]!r}, occurs {ranked[0][1]} time(s)"
                if ranked
                else "the corpus has no word other than <UNK>"
            )
        unknown_count = sum(word_counts.values()) - sum(count for _, count in kept)
        words = list(SPECIAL_WORDS) + [word for word, _ in kept]
        counts = [num_sentences, num_sentences, unknown_count] + [count for _, count in kept]
        return cls(words, counts)

    def counted_on(
        self,
        sentences: Iterable[Sequence[str]],
        add_words: bool = False,
        min_count: int = 1,
        max_size: int | None = None,
    ) -> "ELMoWordVocabulary":
        """This vocabulary, every word keeping its id, with the counts of another corpus (``sentences``): for
        continuing a model's pre-training on new text. ``add_words``: also append the corpus words it lacks, seen
        ``min_count`` times, most frequent first (ties by word); ``max_size`` bounds the whole vocabulary and never
        removes an existing word."""
        _check_limits(min_count, max_size)
        word_counts, num_sentences = _count_words(sentences)
        if num_sentences == 0:
            raise ValueError("the corpus is empty: it has no sentence with at least one word")
        added: list[str] = []
        if add_words:
            candidates = _by_count(
                (word, count) for word, count in word_counts.items() if word not in self._word_to_id and count >= min_count
            )
            room = len(candidates) if max_size is None else max(0, max_size - len(self._words))
            added = [word for word, _ in candidates[:room]]
        words = self._words + tuple(added)
        known = set(words)
        unknown = sum(count for word, count in word_counts.items() if word not in known) + word_counts.get(UNK_TOKEN, 0)
        counts = [num_sentences, num_sentences, unknown] + [word_counts.get(word, 0) for word in words[len(SPECIAL_WORDS) :]]
        return ELMoWordVocabulary(words, counts)

    # ---- lookups ----
    @property
    def words(self) -> tuple[str, ...]:
        """Every word by id, `<S>`, `</S>`, `<UNK>` first."""
        return self._words

    @property
    def counts(self) -> tuple[int, ...] | None:
        """Unigram counts aligned with the ids (see the module docstring), or None when unknown (a vocabulary file
        loaded without its counts file)."""
        return self._counts

    def __len__(self) -> int:
        return len(self._words)

    def __contains__(self, word: object) -> bool:
        return word in self._word_to_id

    def __iter__(self) -> Iterator[str]:
        return iter(self._words)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ELMoWordVocabulary):
            return NotImplemented
        return self._words == other._words and self._counts == other._counts

    def __repr__(self) -> str:
        counts = "with counts" if self._counts is not None else "without counts"
        return f"ELMoWordVocabulary(size={len(self)}, {counts})"

    def word_to_id(self, word: str) -> int:
        """The id of `word`; `UNK_WORD_ID` (2) for a word not in the vocabulary."""
        if not isinstance(word, str):
            raise TypeError(f"word must be a str, got {word!r} of type {type(word).__name__}")
        return self._word_to_id.get(word, UNK_WORD_ID)

    def id_to_word(self, word_id: int) -> str:
        """The word of id `word_id` (0 <= word_id < len(self))."""
        if not is_int(word_id) or not 0 <= word_id < len(self._words):
            raise IndexError(f"word ids lie in [0, {len(self._words)}), got {word_id!r}")
        return self._words[word_id]

    def encode(self, words: Sequence[str]) -> list[int]:
        """The ids of a list of words, unknown words mapped to `<UNK>` (2). No boundary is added."""
        if isinstance(words, str):
            raise TypeError(f"encode takes a list of words, got the str {words[:40]!r}; split it into words first")
        ids = []
        for position, word in enumerate(words):
            if not isinstance(word, str):
                raise TypeError(f"word {position}: expected a str, got {word!r} of type {type(word).__name__}")
            ids.append(self._word_to_id.get(word, UNK_WORD_ID))
        return ids

    def decode(self, word_ids: Iterable[int]) -> list[str]:
        """The words of a sequence of ids (inverse of `encode` for vocabulary words)."""
        return [self.id_to_word(int(word_id)) for word_id in word_ids]

    # ---- files ----
    def save(self, directory: str | Path) -> tuple[Path, ...]:
        """Write `vocab.txt` (bilm-tf's format) and, when counts are known, `vocab_counts.tsv` (else an earlier one
        is removed) into `directory` (created if needed); returns the files written."""
        directory = Path(directory)
        if directory.exists() and not directory.is_dir():
            raise NotADirectoryError(f"save() takes a directory, got the file {directory}")
        directory.mkdir(parents=True, exist_ok=True)
        vocabulary_file, counts_file = directory / VOCABULARY_FILE_NAME, directory / COUNTS_FILE_NAME
        vocabulary_file.write_text("".join(f"{word}\n" for word in self._words), encoding="utf-8", newline="\n")
        if self._counts is None:
            counts_file.unlink(missing_ok=True)
            return (vocabulary_file,)
        counts_file.write_text(
            "".join(f"{word}\t{count}\n" for word, count in zip(self._words, self._counts)), encoding="utf-8", newline="\n"
        )
        return vocabulary_file, counts_file

    @classmethod
    def load(cls, path: str | Path) -> "ELMoWordVocabulary":
        """A vocabulary written by `save` (a directory: `vocab.txt` and, if there, `vocab_counts.tsv`, whose words
        must match) or a bilm-tf vocabulary file (counts unknown). Read as bilm-tf reads it (lines stripped, a
        `!!!MAXTERMID` line skipped) but strictly: `<S>`, `</S>`, `<UNK>` first, no empty, spaced or repeated
        word; errors name the file and the line."""
        path = Path(path)
        if path.is_dir():
            vocabulary_file, counts_file = path / VOCABULARY_FILE_NAME, path / COUNTS_FILE_NAME
            if not vocabulary_file.is_file():
                raise FileNotFoundError(f"{path} holds no {VOCABULARY_FILE_NAME} (expected a directory written by save())")
        elif path.is_file():
            vocabulary_file, counts_file = path, None
        else:
            raise FileNotFoundError(f"no vocabulary at {path}: expected a directory written by save() or a vocabulary file")
        words = _read_vocabulary_file(vocabulary_file)
        counts = _read_counts_file(counts_file, words) if counts_file is not None and counts_file.is_file() else None
        return cls(words, counts)


def _count_words(sentences: Iterable[Sequence[str]]) -> tuple[Counter[str], int]:
    """(occurrences of each word, number of sentences with at least one word), every sentence checked."""
    word_counts: Counter[str] = Counter()
    num_sentences = 0
    for index, sentence in enumerate(sentences):
        words = check_sentence_words(sentence, f"sentence {index}")
        if words:
            word_counts.update(words)
            num_sentences += 1
    return word_counts, num_sentences


def vocabulary_file_words(path: str | Path) -> Iterator[tuple[int, str]]:
    """(line number, word) for the lines of a ``vocab.txt`` as bilm-tf reads them: each line stripped, its
    ``!!!MAXTERMID`` line skipped (empty lines are kept: the callers decide about them)."""
    for line_number, line in read_text_lines(path):
        word = line.strip()
        if word != BILM_TF_SKIPPED_LINE:
            yield line_number, word


def _read_vocabulary_file(path: Path) -> list[str]:
    words: list[str] = []
    line_of_word: dict[str, int] = {}
    for line_number, word in vocabulary_file_words(path):
        problem = _word_problem(word)
        if problem is not None:
            raise ValueError(f"{path} line {line_number}: the word {word!r} {problem}")
        if word in line_of_word:
            raise ValueError(f"{path} line {line_number}: the word {word!r} is already on line {line_of_word[word]}")
        position = len(words)
        if position < len(SPECIAL_WORDS) and word != SPECIAL_WORDS[position]:
            hint = (
                " The released vocab-2016-09-10.txt starts with </S>, <S>: swap its first two lines (no other id changes)."
                if word in SPECIAL_WORDS
                else ""
            )
            raise ValueError(
                f"{path} line {line_number} is {word!r}, expected {SPECIAL_WORDS[position]!r}: a vocabulary file starts "
                f"with {', '.join(SPECIAL_WORDS)} (ids 0, 1, 2), as bilm-tf's README asks.{hint}"
            )
        line_of_word[word] = line_number
        words.append(word)
    if len(words) < len(SPECIAL_WORDS):
        raise ValueError(f"{path} has {len(words)} word(s); a vocabulary file starts with {', '.join(SPECIAL_WORDS)}")
    return words


def _read_counts_file(path: Path, words: Sequence[str]) -> list[int]:
    counts: list[int] = []
    for line_number, line in read_text_lines(path):
        fields = line.split("\t")
        if len(fields) != 2:
            raise ValueError(f"{path} line {line_number}: expected 'word<TAB>count', got {line!r}")
        word, count_text = fields
        if line_number > len(words):
            raise ValueError(f"{path} has more lines than the vocabulary has words ({len(words)})")
        if word != words[line_number - 1]:
            raise ValueError(
                f"{path} line {line_number} is for {word!r} but word {line_number - 1} of the vocabulary is "
                f"{words[line_number - 1]!r}: the counts file does not belong to this vocabulary file"
            )
        if not count_text.isascii() or not count_text.isdigit():
            raise ValueError(f"{path} line {line_number}: the count must be an integer >= 0, got {count_text!r}")
        counts.append(int(count_text))
    if len(counts) != len(words):
        raise ValueError(f"{path} has {len(counts)} count(s) for {len(words)} vocabulary words")
    return counts


def sentence_bilm_labels(word_ids: Sequence[int], label_boundary_positions: bool = False) -> tuple[list[int], list[int]]:
    """
    Forward and backward LM targets of one sentence of n words with vocabulary ids `word_ids`.

    - `label_boundary_positions=False`: n positions, the words (ELMoModel's default output). Position i has the
      next word (`</S>` after the last word) and the previous word (`<S>` before the first word).
    - `label_boundary_positions=True`: n + 2 positions `<S> w1 ... wn </S>` (ELMoModel with
      `keep_sentence_boundaries=True`). `<S>` has the forward target w1 and no backward target; `</S>` has the
      backward target wn and no forward target (-100).

    Example (`the`=3, `cat`=4, `sat`=5):

    ```python
    >>> sentence_bilm_labels([3, 4, 5])
    ([4, 5, 1], [0, 3, 4])
    >>> sentence_bilm_labels([3, 4, 5], label_boundary_positions=True)
    ([3, 4, 5, 1, -100], [-100, 0, 3, 4, 5])
    ```
    """
    wrapped = [BOS_WORD_ID, *word_ids, EOS_WORD_ID]  # the sentence as the biLM sees it
    next_word = wrapped[1:]  # target of <S>, w1, ..., wn
    previous_word = wrapped[:-1]  # target of w1, ..., wn, </S>
    if label_boundary_positions:
        return next_word + [IGNORE_INDEX], [IGNORE_INDEX] + previous_word
    return next_word[1:], previous_word[:-1]


__all__ = [
    "BOS_WORD_ID", "COUNTS_FILE_NAME", "ELMoWordVocabulary", "EOS_WORD_ID", "SPECIAL_WORDS", "UNK_TOKEN", "UNK_WORD_ID",
    "VOCABULARY_FILE_NAME", "check_sentence_words", "sentence_bilm_labels",
]
