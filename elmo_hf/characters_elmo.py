"""ELMo's character ids: the id scheme of the original (words -> rows of 50 character ids), and
`CharacterVocabulary`, a vocabulary of Unicode characters (and words) for models that do not read UTF-8 bytes.

The id scheme is the one of the original bilm-tf `UnicodeCharsVocabulary` / AllenNLP `ELMoCharacterMapper`:

    raw ids 0..255   the UTF-8 bytes of the word
    raw id  256      begin-of-sentence character (only in the `<S>` row)
    raw id  257      end-of-sentence character   (only in the `</S>` row)
    raw id  258      begin-of-word
    raw id  259      end-of-word
    raw id  260      padding character (fills a word's row after its end-of-word)

    word row = [258] + utf8_bytes[:max_characters_per_token - 2] + [259] + [260] * rest

and then EVERY id is shifted by +1 (bilm-tf's `Batcher` and AllenNLP both add 1), so that id 0 is free to mean
"padding word": a padding row is all zeros and the model masks it out. Examples with the shift applied:

    "th"   -> [259, 117, 105, 260, 261, 261, ..., 261]        (50 ids)
    "<S>"  -> [259, 257, 260, 261, ..., 261]                  (BOS_CHARACTER_IDS)
    "</S>" -> [259, 258, 260, 261, ..., 261]                  (EOS_CHARACTER_IDS)
    pad    -> [0, 0, ..., 0]

Truncation of long words is at the byte level (48 bytes with the default 50 slots) and may cut a multi-byte
character in two; that is the original's behaviour and `character_ids_to_word` decodes such a cut with U+FFFD. A
Hangul syllable takes 3 bytes, so 50 slots hold 16 syllables.

A remote-code file (copied next to a checkpoint for `trust_remote_code=True`): it imports only `numpy` and
`validation_elmo.py` (and `transformers.utils.to_py_obj`).
"""

from __future__ import annotations

import functools
import json
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from transformers.utils import to_py_obj

from .validation_elmo import check_choice, check_int

# ----------------------------------------------------------------------------------------------------------------
# Character ids. Raw ids come from bilm-tf's `UnicodeCharsVocabulary` (bytes 0..255, then five markers 256..260);
# every raw id is shifted by CHARACTER_ID_SHIFT so that 0 can mean "padding word" (bilm-tf `Batcher`:
# `char_ids + 1`; AllenNLP `ELMoCharacterMapper.convert_word_to_char_ids`: `c + 1`). The constants below are the
# shifted ids, the ones the model's character embedding sees.
# ----------------------------------------------------------------------------------------------------------------
CHARACTER_ID_SHIFT = 1
PADDING_TOKEN_ID = 0  # a whole padding word: every one of its character ids is 0
BYTE_CHARACTER_IDS = range(0 + CHARACTER_ID_SHIFT, 256 + CHARACTER_ID_SHIFT)  # UTF-8 byte b has id b + 1
BEGIN_SENTENCE_CHARACTER_ID = 256 + CHARACTER_ID_SHIFT  # raw 256: the character of the `<S>` word
END_SENTENCE_CHARACTER_ID = 257 + CHARACTER_ID_SHIFT  # raw 257: the character of the `</S>` word
BEGIN_WORD_CHARACTER_ID = 258 + CHARACTER_ID_SHIFT  # raw 258: first slot of every word row
END_WORD_CHARACTER_ID = 259 + CHARACTER_ID_SHIFT  # raw 259: after the word's last byte
PADDING_CHARACTER_ID = 260 + CHARACTER_ID_SHIFT  # raw 260: fills the row after the end-of-word
NUM_CHARACTERS = 261 + CHARACTER_ID_SHIFT  # rows of the model's character embedding (ids 0..261)

MAX_CHARACTERS_PER_TOKEN = 50  # slots per word in every released ELMo (options.json `max_characters_per_token`)

BOS_TOKEN = "<S>"  # the literal word the original maps to the begin-of-sentence row
EOS_TOKEN = "</S>"  # the literal word the original maps to the end-of-sentence row
PAD_TOKEN = "<pad>"  # name of the padding word (id 0); never produced from text

UNICODE_ERRORS_CHOICES = ("strict", "ignore")


def _boundary_character_ids(sentence_character_id: int, max_characters_per_token: int) -> list[int]:
    """The row of a sentence-boundary word: begin-of-word, the boundary character, end-of-word, padding."""
    return [BEGIN_WORD_CHARACTER_ID, sentence_character_id, END_WORD_CHARACTER_ID] + [PADDING_CHARACTER_ID] * (
        max_characters_per_token - 3
    )


# `<S>` = [259, 257, 260] + [261] * 47 and `</S>` = [259, 258, 260] + [261] * 47 (shifted ids, 50 slots).
BOS_CHARACTER_IDS: tuple[int, ...] = tuple(
    _boundary_character_ids(BEGIN_SENTENCE_CHARACTER_ID, MAX_CHARACTERS_PER_TOKEN)
)
EOS_CHARACTER_IDS: tuple[int, ...] = tuple(_boundary_character_ids(END_SENTENCE_CHARACTER_ID, MAX_CHARACTERS_PER_TOKEN))


def check_max_characters_per_token(max_characters_per_token: Any) -> None:
    check_int(
        "max_characters_per_token",
        max_characters_per_token,
        3,
        hint=f"begin-of-word, at least one character, end-of-word; every released ELMo uses {MAX_CHARACTERS_PER_TOKEN}",
    )


def check_unicode_errors(unicode_errors: Any) -> None:
    check_choice("unicode_errors", unicode_errors, UNICODE_ERRORS_CHOICES)


def lone_surrogate_error(text: str, error: UnicodeEncodeError, what: str) -> ValueError:
    return ValueError(
        f"Cannot encode the {what} {text!r} as UTF-8: character {error.start} ({text[error.start]!r}) is a lone "
        "surrogate. The original ELMo silently drops such characters; pass unicode_errors='ignore' to do the same."
    )


def word_to_character_ids(
    word: str, max_characters_per_token: int = MAX_CHARACTERS_PER_TOKEN, unicode_errors: str = "strict"
) -> list[int]:
    """
    Map one word to its row of character ids (shifted by +1, see the module docstring).

    `[258] + utf8_bytes[:max_characters_per_token - 2] + [259] + [260] * rest`, then +1 on every id. The literal
    words `<S>` and `</S>` map to the sentence-boundary rows. Truncation is at the byte level and may cut a
    multi-byte character, as in the original. The empty word gives `[259, 260, 261, ...]`, as in the original.

    Args:
        word (`str`): the word. It may contain any character, whitespace included (it is just bytes).
        max_characters_per_token (`int`, *optional*, defaults to 50): length of the row.
        unicode_errors (`str`, *optional*, defaults to `"strict"`): what to do with characters UTF-8 cannot
            encode (lone surrogates such as `"\\ud800"`): `"strict"` raises `ValueError`; `"ignore"` drops them,
            like the original (`word.encode("utf-8", "ignore")`).

    Returns:
        `list[int]` of length `max_characters_per_token`.

    Example:

    ```python
    >>> word_to_character_ids("th")[:6]
    [259, 117, 105, 260, 261, 261]
    ```
    """
    if not isinstance(word, str):
        raise TypeError(f"word must be a str, got {word!r} of type {type(word).__name__}")
    check_max_characters_per_token(max_characters_per_token)
    check_unicode_errors(unicode_errors)
    if word == BOS_TOKEN:
        return _boundary_character_ids(BEGIN_SENTENCE_CHARACTER_ID, max_characters_per_token)
    if word == EOS_TOKEN:
        return _boundary_character_ids(END_SENTENCE_CHARACTER_ID, max_characters_per_token)
    try:
        word_bytes = word.encode("utf-8")
    except UnicodeEncodeError as error:
        if unicode_errors == "strict":
            raise lone_surrogate_error(word, error, "word") from error
        word_bytes = word.encode("utf-8", "ignore")
    # Keep room for the begin-of-word and end-of-word markers; this may cut a multi-byte character (original).
    kept_bytes = word_bytes[: max_characters_per_token - 2]
    character_ids = [BEGIN_WORD_CHARACTER_ID] + [byte + CHARACTER_ID_SHIFT for byte in kept_bytes]
    character_ids.append(END_WORD_CHARACTER_ID)
    character_ids.extend([PADDING_CHARACTER_ID] * (max_characters_per_token - len(character_ids)))
    return character_ids


# Words whose character-id rows are remembered (LRU): bulk embedding meets the same words again and again.
CHARACTER_ID_ROW_CACHE_WORDS = 2**17


@functools.lru_cache(maxsize=CHARACTER_ID_ROW_CACHE_WORDS)
def character_id_row(word: str, max_characters_per_token: int, unicode_errors: str) -> np.ndarray:
    """``word_to_character_ids`` as a read-only int64 array (C,), remembered."""
    row = np.array(word_to_character_ids(word, max_characters_per_token, unicode_errors), dtype=np.int64)
    row.flags.writeable = False
    return row


def character_id_rows(words: Sequence[str], max_characters_per_token: int, unicode_errors: str = "strict") -> np.ndarray:
    """``word_to_character_ids`` of each word, as one int64 array (len(words), C); each distinct word's row is computed
    once and remembered (``CHARACTER_ID_ROW_CACHE_WORDS``)."""
    if not words:
        return np.zeros((0, max_characters_per_token), dtype=np.int64)
    rows = [character_id_row(word, max_characters_per_token, unicode_errors) for word in words]
    # One flat copy, reshaped: np.stack checks and reshapes each row in Python, 7x slower for a shard's 6,400 words.
    return np.concatenate(rows).reshape(len(words), max_characters_per_token)


def character_ids_to_word(character_ids: Sequence[int]) -> str:
    """
    Inverse of `word_to_character_ids` for one row of character ids.

    The sentence-boundary rows give `"<S>"` / `"</S>"`; a padding row (all 0) gives `""` (as does the empty word);
    otherwise the bytes between begin-of-word and end-of-word are decoded as UTF-8 with `errors="replace"`, since
    truncation may have cut the last character (it then ends with U+FFFD).

    Args:
        character_ids (`Sequence[int]`, a list, tuple, 1-D tensor or array): one row, shape (max_characters_per_token,).

    Returns:
        `str`: the word.
    """
    row = to_py_obj(character_ids)
    if not isinstance(row, (list, tuple)) or not row or not all(isinstance(value, numbers.Integral) for value in row):
        raise ValueError(f"Expected one non-empty row of integer character ids, got {character_ids!r}")
    row = [int(value) for value in row]
    out_of_range = [value for value in row if not 0 <= value < NUM_CHARACTERS]
    if out_of_range:
        raise ValueError(f"Character ids must lie in [0, {NUM_CHARACTERS}), got {out_of_range[0]} in the row {row!r}")
    if all(value == PADDING_TOKEN_ID for value in row):
        return ""
    if row[0] != BEGIN_WORD_CHARACTER_ID:
        raise ValueError(
            f"A word row starts with the begin-of-word id {BEGIN_WORD_CHARACTER_ID}, got {row[0]} in the row {row!r}"
        )
    if len(row) >= 3 and row[2] == END_WORD_CHARACTER_ID:
        if row[1] == BEGIN_SENTENCE_CHARACTER_ID:
            return BOS_TOKEN
        if row[1] == END_SENTENCE_CHARACTER_ID:
            return EOS_TOKEN
    word_bytes = bytearray()
    for position, value in enumerate(row[1:], start=1):
        if value == END_WORD_CHARACTER_ID:
            return word_bytes.decode("utf-8", errors="replace")
        if value not in BYTE_CHARACTER_IDS:
            raise ValueError(
                f"Expected a byte id (1..256) or the end-of-word id {END_WORD_CHARACTER_ID} at position {position}, "
                f"got {value} in the row {row!r}"
            )
        word_bytes.append(value - CHARACTER_ID_SHIFT)
    raise ValueError(f"The row has no end-of-word id {END_WORD_CHARACTER_ID}: {row!r}")


def byte_sentence_boundary_rows(max_characters_per_token: int) -> tuple[list[int], list[int]]:
    """The `<S>` and `</S>` rows of the byte scheme for `max_characters_per_token` slots (`BOS_CHARACTER_IDS` and
    `EOS_CHARACTER_IDS` for 50)."""
    return (
        _boundary_character_ids(BEGIN_SENTENCE_CHARACTER_ID, max_characters_per_token),
        _boundary_character_ids(END_SENTENCE_CHARACTER_ID, max_characters_per_token),
    )


# ----------------------------------------------------------------------------------------------------------------
# A vocabulary of Unicode characters instead of UTF-8 bytes (ELMoForManyLangs), optionally with word ids
# ----------------------------------------------------------------------------------------------------------------
# ELMoConfig.character_vocabulary: "utf8_bytes" (the scheme above: fixed, no file) or "unicode_characters" (a
# CharacterVocabulary, saved next to the tokenizer as CHARACTER_VOCABULARY_FILE_NAME).
CHARACTER_VOCABULARIES = ("utf8_bytes", "unicode_characters")
CHARACTER_VOCABULARY_FILE_NAME = "character_vocabulary.json"
CHARACTER_VOCABULARY_FORMAT = "elmo-hf character vocabulary"
# The marker ids of a CharacterVocabulary (keyword arguments, JSON keys, and `<name>` in `names()`).
CHARACTER_MARKERS = ("begin_word", "end_word", "padding", "unknown", "begin_sentence", "end_sentence")


class CharacterVocabulary:
    """
    How words become rows of ids with a vocabulary of Unicode characters: ELMoForManyLangs' scheme (the default
    UTF-8 byte scheme above needs no vocabulary). With C = `max_characters_per_token`:

        word row  = [begin_word] + [id of each character of word[:C - 2]] + [end_word] + [padding] * rest
        <bos> row = [begin_word, begin_sentence, end_word] + [padding] * (C - 3)    (<eos>: end_sentence)

    A character missing from `characters` gets `unknown`. The limit counts characters (code points), not bytes: a
    Hangul syllable is one. The words `boundary_words` (`"<bos>"`, `"<eos>"`) are real tokens of the biLM: the model
    puts their rows around every sentence (`ELMoConfig.begin_sentence_ids` / `end_sentence_ids`), and the same words
    typed in a sentence get the same rows, as in the original.

    With `words` (models with a word embedding, `ELMoConfig.word_embedding_dim > 0`) every row starts with one more
    id, the word's (`unknown_word` when it is not in `words`; a long word is looked up after truncation, as the
    original does), so rows are C + 1 long. Every id is >= 1: 0 is the padding token (a row of zeros), as in the byte
    scheme.

    Example:

    ```python
    >>> vocabulary = CharacterVocabulary({"a": 1, "b": 2}, begin_word=3, end_word=4, padding=5, unknown=6,
    ...                                  begin_sentence=7, end_sentence=8)
    >>> vocabulary.word_row("abc", 6).tolist(), vocabulary.boundary_rows(6)[0]
    ([3, 1, 2, 6, 4, 5], [3, 7, 4, 5, 5, 5])
    ```
    """

    def __init__(
        self,
        characters: Mapping[str, int],
        *,
        begin_word: int,
        end_word: int,
        padding: int,
        unknown: int,
        begin_sentence: int,
        end_sentence: int,
        boundary_words: Sequence[str] = ("<bos>", "<eos>"),
        words: Mapping[str, int] | None = None,
        unknown_word: int | None = None,
    ):
        self.characters = dict(characters)
        self.markers = dict(
            begin_word=begin_word, end_word=end_word, padding=padding, unknown=unknown,
            begin_sentence=begin_sentence, end_sentence=end_sentence,
        )
        self.boundary_words = tuple(boundary_words)
        self.words = None if words is None else dict(words)
        self.unknown_word = unknown_word
        self._validate()
        self._character_of_id: dict[int, str] = {}
        for character, index in self.characters.items():
            self._character_of_id.setdefault(index, character)
        self._rows: dict[tuple[str, int], np.ndarray] = {}  # remembered rows, see `word_row`

    def _validate(self) -> None:
        for character, index in self.characters.items():
            if not isinstance(character, str) or len(character) != 1:
                raise ValueError(f"CharacterVocabulary.characters: keys must be single characters, got {character!r}")
            check_int(f"CharacterVocabulary.characters[{character!r}]", index, 1, hint="0 is the padding token")
        for name, index in self.markers.items():
            check_int(f"CharacterVocabulary.{name}", index, 1, hint="0 is the padding token")
        if len(self.boundary_words) != 2 or not all(isinstance(word, str) and word for word in self.boundary_words):
            raise ValueError(f"CharacterVocabulary.boundary_words must be two non-empty words, got {self.boundary_words!r}")
        if self.words is None:
            if self.unknown_word is not None:
                raise ValueError("CharacterVocabulary.unknown_word is given without a word vocabulary (words=None).")
            return
        for word, index in self.words.items():
            if not isinstance(word, str):
                raise ValueError(f"CharacterVocabulary.words: keys must be words (str), got {word!r}")
            check_int(f"CharacterVocabulary.words[{word!r}]", index, 1, hint="0 is the padding token")
        check_int("CharacterVocabulary.unknown_word", self.unknown_word, 1, hint="needed with a word vocabulary")

    def __getstate__(self) -> dict[str, Any]:
        """The state without the remembered rows: a pickled tokenizer (datasets fingerprints it) does not depend on
        what it has encoded."""
        state = dict(self.__dict__)
        state["_rows"] = {}
        return state

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CharacterVocabulary) and self.to_dict() == other.to_dict()

    @property
    def has_words(self) -> bool:
        """Whether rows start with a word id (a word vocabulary is present)."""
        return self.words is not None

    def row_width(self, max_characters_per_token: int) -> int:
        """Ids per row: C, plus the word id in front when `has_words`."""
        return max_characters_per_token + int(self.has_words)

    @property
    def largest_character_id(self) -> int:
        return max([*self.characters.values(), *self.markers.values()])

    @property
    def largest_word_id(self) -> int | None:
        return None if self.words is None else max([*self.words.values(), self.unknown_word])

    def is_truncated(self, word: str, max_characters_per_token: int) -> bool:
        """Whether `word` is cut in its row: more than C - 2 characters. A boundary word never is."""
        return word not in self.boundary_words and len(word) > max_characters_per_token - 2

    def _characters_row(self, word: str, max_characters_per_token: int) -> list[int]:
        markers = self.markers
        if word in self.boundary_words:
            sentence_id = markers["begin_sentence"] if word == self.boundary_words[0] else markers["end_sentence"]
            row = [markers["begin_word"], sentence_id, markers["end_word"]]
        else:
            row = [markers["begin_word"], *(self.characters.get(c, markers["unknown"]) for c in word), markers["end_word"]]
        return row + [markers["padding"]] * (max_characters_per_token - len(row))

    def _row(self, word: str, max_characters_per_token: int, truncate: bool = True) -> list[int]:
        # The original truncates the word itself (characters, not bytes) and then looks up both its characters and
        # its word id; a boundary word typed in the text is recognised after truncation too.
        if truncate and len(word) + 2 > max_characters_per_token:
            word = word[: max_characters_per_token - 2]
        row = self._characters_row(word, max_characters_per_token)
        if self.words is not None:
            row.insert(0, self.words.get(word, self.unknown_word))
        return row

    def word_row(self, word: str, max_characters_per_token: int) -> np.ndarray:
        """The row of one word: a read-only int64 array of `row_width(C)` ids, remembered (up to
        `CHARACTER_ID_ROW_CACHE_WORDS` words, then forgotten all at once)."""
        if not isinstance(word, str):
            raise TypeError(f"word must be a str, got {word!r} of type {type(word).__name__}")
        key = (word, max_characters_per_token)
        row = self._rows.get(key)
        if row is None:
            check_max_characters_per_token(max_characters_per_token)
            if len(self._rows) >= CHARACTER_ID_ROW_CACHE_WORDS:
                self._rows.clear()
            row = np.array(self._row(word, max_characters_per_token), dtype=np.int64)
            row.flags.writeable = False
            self._rows[key] = row
        return row

    def boundary_rows(self, max_characters_per_token: int) -> tuple[list[int], list[int]]:
        """The rows the model puts before and after every sentence (the rows of `boundary_words`)."""
        return tuple(self._row(word, max_characters_per_token, truncate=False) for word in self.boundary_words)

    def decode_row(self, row: Sequence[int]) -> str:
        """The word of one row (inverse of `word_row` up to truncation; a character missing from the vocabulary comes
        back as U+FFFD); `""` for a padding row."""
        values = [int(value) for value in to_py_obj(row)]
        characters = values[1:] if self.has_words else values
        if all(value == PADDING_TOKEN_ID for value in values):
            return ""
        markers = self.markers
        if not characters or characters[0] != markers["begin_word"]:
            raise ValueError(f"A word row starts with the begin-of-word id {markers['begin_word']}, got the row {values!r}")
        if len(characters) >= 3 and characters[2] == markers["end_word"]:
            if characters[1] == markers["begin_sentence"]:
                return self.boundary_words[0]
            if characters[1] == markers["end_sentence"]:
                return self.boundary_words[1]
        if markers["end_word"] not in characters[1:]:
            raise ValueError(f"The row has no end-of-word id {markers['end_word']}: {values!r}")
        word = characters[1 : characters.index(markers["end_word"], 1)]
        return "".join(self._character_of_id.get(index, "\ufffd") for index in word)

    def names(self) -> dict[str, int]:
        """Names of the character ids: `<pad>` 0, every character, then the markers as `<begin_word>`, ..."""
        return {PAD_TOKEN: PADDING_TOKEN_ID, **self.characters, **{f"<{name}>": index for name, index in self.markers.items()}}

    def to_dict(self) -> dict[str, Any]:
        """The JSON content of `CHARACTER_VOCABULARY_FILE_NAME`."""
        return {
            "format": CHARACTER_VOCABULARY_FORMAT,
            "version": 1,
            "characters": self.characters,
            **self.markers,
            "boundary_words": list(self.boundary_words),
            "words": self.words,
            "unknown_word": self.unknown_word,
        }

    @classmethod
    def from_dict(cls, data: Any, source: str = "character vocabulary") -> "CharacterVocabulary":
        """The inverse of `to_dict`; `ValueError` naming `source` and the field when it is not one."""
        if not isinstance(data, dict) or data.get("format") != CHARACTER_VOCABULARY_FORMAT or data.get("version") != 1:
            raise ValueError(f"{source} is not an {CHARACTER_VOCABULARY_FORMAT!r} (version 1) JSON object.")
        expected = {"format", "version", "characters", *CHARACTER_MARKERS, "boundary_words", "words", "unknown_word"}
        if set(data) != expected:
            raise ValueError(
                f"{source}: expected the keys {sorted(expected)}; missing {sorted(expected - set(data))}, unknown "
                f"{sorted(set(data) - expected)}."
            )
        if not isinstance(data["characters"], dict) or not (data["words"] is None or isinstance(data["words"], dict)):
            raise ValueError(f"{source}: 'characters' must be an object and 'words' an object or null.")
        try:
            return cls(
                data["characters"], **{name: data[name] for name in CHARACTER_MARKERS},
                boundary_words=data["boundary_words"], words=data["words"], unknown_word=data["unknown_word"],
            )
        except (TypeError, ValueError) as error:
            raise ValueError(f"{source}: {error}") from None

    @classmethod
    def from_file(cls, path: str) -> "CharacterVocabulary":
        with open(path, encoding="utf-8") as file:
            try:
                data = json.load(file)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path} is not valid JSON: {error}") from None
        return cls.from_dict(data, source=str(path))


__all__ = [
    "BEGIN_SENTENCE_CHARACTER_ID",
    "BEGIN_WORD_CHARACTER_ID",
    "BOS_CHARACTER_IDS",
    "BOS_TOKEN",
    "BYTE_CHARACTER_IDS",
    "CHARACTER_ID_ROW_CACHE_WORDS",
    "CHARACTER_ID_SHIFT",
    "CHARACTER_MARKERS",
    "CHARACTER_VOCABULARIES",
    "CHARACTER_VOCABULARY_FILE_NAME",
    "CHARACTER_VOCABULARY_FORMAT",
    "CharacterVocabulary",
    "END_SENTENCE_CHARACTER_ID",
    "END_WORD_CHARACTER_ID",
    "EOS_CHARACTER_IDS",
    "EOS_TOKEN",
    "MAX_CHARACTERS_PER_TOKEN",
    "NUM_CHARACTERS",
    "PADDING_CHARACTER_ID",
    "PADDING_TOKEN_ID",
    "PAD_TOKEN",
    "UNICODE_ERRORS_CHOICES",
    "byte_sentence_boundary_rows",
    "character_id_row",
    "character_id_rows",
    "character_ids_to_word",
    "check_max_characters_per_token",
    "check_unicode_errors",
    "lone_surrogate_error",
    "word_to_character_ids",
]
