"""ELMo's character tokenizer: words -> rows of 50 character ids.

ELMo has no word vocabulary. Every word becomes a fixed-length row of character ids that the model's character CNN
embeds, so a batch of sentences is a 3-D tensor:

    input_ids       (batch, words, max_characters_per_token)   int64, 50 characters per word by default
    attention_mask  (batch, words)                             1 for a word, 0 for a padding word

The id scheme (bilm-tf's UTF-8 bytes and five markers, every id + 1, id 0 the padding word) and the vocabulary of
Unicode characters some models read instead (`CharacterVocabulary`) are in `characters_elmo.py`; splitting raw text
into words (`word_splitter`: `"moses"`, `"ptb"`, `"whitespace"`, `"space"`, `"bert"`, the Korean `"kiwi"` and
`"mecab"`) is in `word_splitters_elmo.py`. This file maps: text -> words -> rows of ids, with truncation of
sentences; what the `PreTrainedTokenizerBase` interface means for rows (the character ids as a vocabulary, padding
words, decoding) is its base class's, in `word_rows_elmo.py`. Their public names are importable from here as well.

`ELMoTokenizer.truncated_word_count` counts the words cut to the character slots; the tokenizer logs a warning with a
count the first time it cuts any.

The tokenizer does NOT add `<S>`/`</S>` around sentences, even with `add_special_tokens=True`: the model
(`ELMoModel`) adds the sentence boundaries itself, as the original biLM does.

The splitter's name is saved in `tokenizer_config.json`, so `AutoTokenizer.from_pretrained` splits text as the model
was trained.

This file imports only `numpy`, `transformers` and its flat siblings `characters_elmo.py`, `word_splitters_elmo.py`,
`word_rows_elmo.py`, `sentence_pairs_elmo.py` and `validation_elmo.py`, so that they can be copied next to a checkpoint and loaded with `trust_remote_code=True`
(transformers copies every file a remote-code file imports relatively).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from transformers.tokenization_utils_base import (
    BatchEncoding,
    TruncationStrategy,
)
from transformers.utils import PaddingStrategy, TensorType, logging

from .characters_elmo import (
    BEGIN_SENTENCE_CHARACTER_ID,
    BEGIN_WORD_CHARACTER_ID,
    BOS_CHARACTER_IDS,
    BOS_TOKEN,
    CHARACTER_ID_SHIFT,
    CHARACTER_VOCABULARY_FILE_NAME,
    END_SENTENCE_CHARACTER_ID,
    END_WORD_CHARACTER_ID,
    EOS_CHARACTER_IDS,
    EOS_TOKEN,
    MAX_CHARACTERS_PER_TOKEN,
    NUM_CHARACTERS,
    PAD_TOKEN,
    PADDING_CHARACTER_ID,
    PADDING_TOKEN_ID,
    CharacterVocabulary,
    character_id_row,
    character_id_rows,
    character_ids_to_word,
    check_max_characters_per_token,
    check_unicode_errors,
    lone_surrogate_error,
    word_to_character_ids,
)
from .sentence_pairs_elmo import PAIR_PREFIX, check_pair_batches, side_max_words
from .word_rows_elmo import CharacterRowsTokenizerBase, check_padding_side
from .word_splitters_elmo import (
    DEFAULT_WORD_SPLITTER,
    MORPHEME_ANALYSERS,
    MOSES_WORD_PATTERN,
    PTB_WORD_PATTERN,
    WORD_SPLITTERS,
    MorphemeWordSplitter,
    ascii_word_pattern,
    build_word_splitter,
    surface_words,
    words_of_text,
)

logger = logging.get_logger(__name__)
TRUNCATED_WORDS_WARNING = "words-longer-than-max-characters-per-token"  # key of the tokenizer's warned-once registry


def _replace_lone_surrogates(text: str) -> str:
    """Same length, lone surrogates replaced by a letter, so splitters keep them inside their word."""
    return "".join("x" if "\ud800" <= character <= "\udfff" else character for character in text)


def _check_encoding_options(
    text_pair: Any,
    stride: int,
    truncation_strategy: TruncationStrategy,
    padding_side: str | None,
    return_overflowing_tokens: bool,
    return_token_type_ids: bool | None,
    return_offsets_mapping: bool,
    is_split_into_words: bool,
) -> None:
    """Refuse the `PreTrainedTokenizerBase` options that have no meaning for ELMo's sentences of words."""
    if return_overflowing_tokens or stride:
        raise ValueError("ELMoTokenizer does not support return_overflowing_tokens or stride")
    if return_token_type_ids:
        raise ValueError("ELMo has no token type ids; leave return_token_type_ids unset")
    if return_offsets_mapping and is_split_into_words:
        raise ValueError(
            "return_offsets_mapping=True needs raw text: with is_split_into_words=True there is no original "
            "string to point into"
        )
    if truncation_strategy == TruncationStrategy.ONLY_SECOND and text_pair is None:
        raise ValueError("truncation='only_second' needs sentence pairs (it cuts text_pair): no text_pair was given")
    if padding_side is not None:
        check_padding_side(padding_side)


class ELMoTokenizer(CharacterRowsTokenizerBase):
    r"""
    ELMo's character tokenizer: splits text into words and maps every word to `max_characters_per_token` character
    ids (see the module docstring for the id scheme). The default scheme, UTF-8 bytes, has no vocabulary file; a
    model with a vocabulary of Unicode characters (ELMoForManyLangs) has a `CharacterVocabulary`, saved as
    `character_vocabulary.json` (rows then count characters, and start with a word id when it has words).

    Output of `tokenizer(texts, padding=True, return_tensors="pt")`:

    - `input_ids`: `torch.LongTensor` of shape `(batch, words, max_characters_per_token)`; padding words are rows
      of zeros.
    - `attention_mask`: `torch.LongTensor` of shape `(batch, words)`, 1 for a word, 0 for a padding word.
    - `offset_mapping` (with `return_offsets_mapping=True`, raw text only): `(batch, words, 2)` character
      offsets `(start, end)` of each word in the original string, `(0, 0)` for padding words.

    Inputs: a string (one sentence), a list of strings (a batch), or, with `is_split_into_words=True`, a list of
    words (one sentence) or a list of lists of words (a batch). `max_length` and `truncation` count WORDS;
    `padding` pads with padding words on the right (left padding is refused: the model needs right padding).
    `add_special_tokens` is accepted but adds nothing: `ELMoModel` wraps each sentence in `<S>` ... `</S>` itself.
    As in every transformers tokenizer, `max_length` given without `padding`/`truncation` truncates.

    Sentence pairs, `tokenizer(text, text_pair)` (entailment, paraphrase; `text_pair` shaped like `text`, one per
    text): each side is encoded and padded on its own, never joined, and the second comes back under `pair_input_ids`,
    `pair_attention_mask` (and `pair_offset_mapping`, ...); `max_length` counts the words of EACH side
    (`truncation="only_first"` / `"only_second"` cut one side only). See `sentence_pairs_elmo.py`.

    Args:
        max_characters_per_token (`int`, *optional*, defaults to 50):
            Length of each word's row of character ids; must match the model's `max_characters_per_token`.
        word_splitter (`str`, *optional*, defaults to `"moses"`):
            How raw text is split into words: `"moses"` (like ELMo's training data, `don 't`), `"ptb"`
            (Penn-Treebank-like, `do n't`), `"whitespace"` (already tokenised text), `"space"` (the space
            character alone, as a TF-Hub ELMo's `default` signature splits), `"bert"` (`BertPreTokenizer`),
            or Korean morphemes with `"kiwi"` / `"mecab"` (optional extras; `ImportError` naming the extra when the
            analyser is missing).
        unicode_errors (`str`, *optional*, defaults to `"strict"`):
            `"strict"` raises on text UTF-8 cannot encode (lone surrogates); `"ignore"` drops those characters
            like the original ELMo.
        character_vocabulary ([`CharacterVocabulary`], *optional*):
            Map words with this vocabulary of Unicode characters instead of UTF-8 bytes (the model's config must say
            `character_vocabulary="unicode_characters"` and have the same boundary rows).
        vocabulary_file (`str`, *optional*):
            A saved `character_vocabulary.json` (what `from_pretrained` passes); not with `character_vocabulary`.
        kwargs:
            Passed to `PreTrainedTokenizerBase` (`model_max_length`, `truncation_side`, ...).

    Example:

    ```python
    >>> tokenizer = ELMoTokenizer()
    >>> batch = tokenizer(["I don't know.", "Hello"], padding=True, return_tensors="pt")
    >>> tuple(batch["input_ids"].shape), batch["attention_mask"].tolist()
    ((2, 5, 50), [[1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    >>> tokenizer.decode(batch["input_ids"][0])
    "I do n't know ."
    ```
    """

    vocab_files_names: dict[str, str] = {"vocabulary_file": CHARACTER_VOCABULARY_FILE_NAME}  # only when there is one

    def __init__(
        self,
        max_characters_per_token: int = MAX_CHARACTERS_PER_TOKEN,
        word_splitter: str = DEFAULT_WORD_SPLITTER,
        unicode_errors: str = "strict",
        character_vocabulary: CharacterVocabulary | None = None,
        vocabulary_file: str | None = None,
        **kwargs,
    ):
        check_max_characters_per_token(max_characters_per_token)
        check_unicode_errors(unicode_errors)
        if character_vocabulary is not None and vocabulary_file is not None:
            raise ValueError("Give ELMoTokenizer a character_vocabulary or a vocabulary_file, not both.")
        if vocabulary_file is not None:
            character_vocabulary = CharacterVocabulary.from_file(vocabulary_file)
        if character_vocabulary is not None and not isinstance(character_vocabulary, CharacterVocabulary):
            raise TypeError(f"character_vocabulary must be a CharacterVocabulary, got {type(character_vocabulary).__name__}")
        pre_tokenizer = build_word_splitter(word_splitter)
        pad_token = kwargs.pop("pad_token", PAD_TOKEN)
        if str(pad_token) != PAD_TOKEN:
            raise ValueError(
                f"ELMoTokenizer's padding word is {PAD_TOKEN!r} (id {PADDING_TOKEN_ID}, a row of zeros), "
                f"got pad_token={pad_token!r}"
            )
        # Facts about one from_pretrained call, not options: keep them out of the saved tokenizer_config.json.
        kwargs.pop("is_local", None)
        kwargs.pop("local_files_only", None)
        # from_pretrained passes back what save_pretrained wrote from `added_tokens_decoder`: only the pad token.
        saved_added_tokens = kwargs.pop("added_tokens_decoder", None) or {}
        for index, token in saved_added_tokens.items():
            if (int(index), str(token)) != (PADDING_TOKEN_ID, PAD_TOKEN):
                raise ValueError(
                    f"ELMoTokenizer has a fixed character vocabulary and no added tokens, got {token!r} at {index}"
                )
        super().__init__(
            max_characters_per_token=max_characters_per_token,
            word_splitter=word_splitter,
            unicode_errors=unicode_errors,
            pad_token=PAD_TOKEN,
            **kwargs,
        )
        check_padding_side(self.padding_side)
        self.max_characters_per_token = max_characters_per_token
        self.unicode_errors = unicode_errors
        # Not an init kwarg of super(): it is saved as its own file (save_vocabulary), not in tokenizer_config.json.
        self.character_vocabulary = character_vocabulary
        self._word_splitter_name = word_splitter
        self._pre_tokenizer = pre_tokenizer
        self._ascii_word_pattern = ascii_word_pattern(word_splitter)

    @property
    def word_splitter(self) -> str:
        """Name of the pre-tokenizer that splits raw text into words (one of `WORD_SPLITTERS`)."""
        return self._word_splitter_name

    @word_splitter.setter
    def word_splitter(self, name: str) -> None:
        self._pre_tokenizer = build_word_splitter(name)
        self._word_splitter_name = name
        self._ascii_word_pattern = ascii_word_pattern(name)

    # ---- rows of ids: the byte scheme, or the character vocabulary ----
    @property
    def token_row_width(self) -> int:
        """Ids per word row: `max_characters_per_token`, plus a leading word id when the character vocabulary has
        words (the model's `config.token_row_width`)."""
        if self.character_vocabulary is None:
            return self.max_characters_per_token
        return self.character_vocabulary.row_width(self.max_characters_per_token)

    @property
    def sentence_boundary_words(self) -> tuple[str, str]:
        """The literal words that map to the sentence-boundary rows: `("<S>", "</S>")`, or the vocabulary's."""
        return (BOS_TOKEN, EOS_TOKEN) if self.character_vocabulary is None else self.character_vocabulary.boundary_words

    def word_row(self, word: str) -> np.ndarray:
        """The row of ids of one word (read-only int64, `token_row_width` ids)."""
        if self.character_vocabulary is None:
            return character_id_row(word, self.max_characters_per_token, self.unicode_errors)
        return self.character_vocabulary.word_row(word, self.max_characters_per_token)

    def word_rows(self, words: Sequence[str]) -> np.ndarray:
        """`word_row` of each word: (len(words), token_row_width) int64."""
        if self.character_vocabulary is None:
            return character_id_rows(words, self.max_characters_per_token, self.unicode_errors)
        if not words:
            return np.zeros((0, self.token_row_width), dtype=np.int64)
        rows = [self.character_vocabulary.word_row(word, self.max_characters_per_token) for word in words]
        return np.concatenate(rows).reshape(len(words), self.token_row_width)  # 7x faster than np.stack here

    def mismatch_with(self, config: Any) -> str | None:
        """Why this tokenizer's rows do not fit a model with `config` (an `ELMoConfig`), or None when they do: the same
        `max_characters_per_token`, character scheme, row width and sentence-boundary rows."""
        if self.max_characters_per_token != config.max_characters_per_token:
            return (
                f"the tokenizer's max_characters_per_token is {self.max_characters_per_token}, the model's "
                f"{config.max_characters_per_token}"
            )
        scheme = "utf8_bytes" if self.character_vocabulary is None else "unicode_characters"
        if scheme != config.character_vocabulary:
            return (
                f"the model's words become ids as {config.character_vocabulary!r}, the tokenizer's as {scheme!r}: load "
                "the model's own tokenizer (ELMoTokenizer.from_pretrained of the model directory)"
            )
        if self.token_row_width != config.token_row_width:
            return f"the tokenizer's rows have {self.token_row_width} ids, the model's {config.token_row_width}"
        if scheme == "unicode_characters":
            rows = self.character_vocabulary.boundary_rows(self.max_characters_per_token)
            if [list(row) for row in rows] != [list(row) for row in config.sentence_boundary_rows]:
                return "the tokenizer's sentence-boundary rows differ from the model's (another vocabulary?)"
        return None

    def row_to_word(self, row: Sequence[int]) -> str:
        """The word of one row of ids (`character_ids_to_word`, or the vocabulary's `decode_row`)."""
        if self.character_vocabulary is None:
            return character_ids_to_word(row)
        return self.character_vocabulary.decode_row(row)

    # ---- truncated words ----
    def is_truncated_word(self, word: str) -> bool:
        """Whether `word` is cut in its row of character ids: its UTF-8 bytes (with a `character_vocabulary`, its
        characters) do not fit between begin-of-word and end-of-word, `max_characters_per_token - 2` of them. The
        sentence-boundary words never are. The one rule `truncated_word_count`, the warning and `elmo-hf embed` use."""
        if self.character_vocabulary is not None:  # the limit counts characters, not bytes
            return self.character_vocabulary.is_truncated(word, self.max_characters_per_token)
        room = self.max_characters_per_token - 2
        if len(word) * 4 <= room or word in (BOS_TOKEN, EOS_TOKEN):  # 4 bytes at most per character
            return False
        return len(word.encode("utf-8", "ignore")) > room

    def truncated_words(self, words: Iterable[str]) -> list[str]:
        """The words of `words` that are cut (`is_truncated_word`), in order, repeats kept. Only words longer than
        `max_characters_per_token - 2` characters (a quarter of that in the byte scheme, where a character takes up to
        4 bytes) are checked: shorter ones always fit, and bulk work skips the check for nearly every word."""
        room = self.max_characters_per_token - 2
        always_fit = room if self.character_vocabulary is not None else room // 4
        return [word for word in words if len(word) > always_fit and self.is_truncated_word(word)]

    def truncated_word_count(self, words: Iterable[str]) -> int:
        """How many of `words` are cut (`is_truncated_word`), counting repeats: the count `elmo-hf embed` reports."""
        return len(self.truncated_words(words))

    def _warn_once_if_truncated(self, sentences: Sequence[Sequence[str]]) -> None:
        """Log a warning, the first time this tokenizer cuts words, with their count in this input and an example.
        The flag lives in the base's `deprecation_warnings`, its registry of warnings given once per tokenizer (which
        `datasets` leaves out of a tokenizer's fingerprint)."""
        if self.deprecation_warnings.get(TRUNCATED_WORDS_WARNING):
            return
        truncated = self.truncated_words(word for words in sentences for word in words)
        if not truncated:
            return
        self.deprecation_warnings[TRUNCATED_WORDS_WARNING] = True
        example = truncated[0]
        room, size = (
            (f"{self.max_characters_per_token - 2} UTF-8 bytes; a Hangul syllable takes 3", f"{len(example.encode('utf-8', 'ignore'))} bytes")
            if self.character_vocabulary is None
            else (f"{self.max_characters_per_token - 2} characters", f"{len(example)} characters")
        )
        logger.warning(
            f"{len(truncated)} word(s) of this input are longer than max_characters_per_token="
            f"{self.max_characters_per_token} allows ({room}) and were cut, e.g. "
            f"{example[:60]!r}{f' (its first 60 of {len(example):,} characters)' if len(example) > 60 else ''} ({size}). This "
            "tokenizer warns once; count them with tokenizer.truncated_word_count(words) (elmo-hf embed reports them "
            "in its summary and manifest)."
        )

    # ---- words ----
    def split_words(self, text: str) -> list[tuple[str, tuple[int, int]]]:
        """
        Split raw text into words with the configured `word_splitter`.

        Returns:
            `list[tuple[str, tuple[int, int]]]`: each word and its `(start, end)` character offsets in `text`
            (`text[start:end] == word`).
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {text!r} of type {type(text).__name__}")
        try:
            text.encode("utf-8")
            splittable_text = text
        except UnicodeEncodeError as error:
            if self.unicode_errors == "strict":
                raise lone_surrogate_error(text, error, "text") from error
            splittable_text = _replace_lone_surrogates(text)  # the surrogates are dropped later, with the bytes
        pieces = self._pre_tokenizer.pre_tokenize_str(splittable_text)
        return [(text[start:end], (start, end)) for _, (start, end) in pieces]

    def tokenize(self, text: str, pair: str | None = None, add_special_tokens: bool = False, **kwargs) -> list[str]:
        """The words of `text` (`split_words` without offsets). ELMo's tokens are words; each becomes a row of ids."""
        if pair is not None:
            raise ValueError("tokenize gives one sentence's words: tokenize each side of a pair on its own")
        if isinstance(text, str) and text.isascii():  # no lone surrogates: the same words faster (`ascii_word_pattern`)
            return words_of_text(text, self._pre_tokenizer, self._ascii_word_pattern)
        return [word for word, _ in self.split_words(text)]

    def batch_character_ids(self, sentences: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray]:
        """
        Character ids and attention mask of pre-split sentences, padded on the right: what
        `tokenizer(sentences, is_split_into_words=True, padding=True)` returns as int64 arrays, about 10x faster for
        bulk work (no per-id Python lists; repeated words are looked up, see `character_id_rows`).

        Returns:
            `input_ids` (batch, longest, max_characters_per_token) and `attention_mask` (batch, longest).
        """
        num_slots = self.token_row_width
        self._warn_once_if_truncated(sentences)
        lengths = np.array([len(words) for words in sentences], dtype=np.int64)  # (batch,)
        longest = int(lengths.max(initial=0))
        input_ids = np.zeros((len(sentences), longest, num_slots), dtype=np.int64)
        is_word = np.arange(longest) < lengths[:, None]  # (batch, longest): True where a word is, in reading order
        try:
            # Every word's row in one array (one `word_rows` call for the batch, not one per sentence), then put in place.
            input_ids[is_word] = self.word_rows([word for words in sentences for word in words])
        except (TypeError, ValueError):
            for index, words in enumerate(sentences):  # which sentence: the error names it
                try:
                    self.word_rows(words)
                except (TypeError, ValueError) as error:
                    raise type(error)(f"sentence {index} ({' '.join(map(str, words))[:60]!r}): {error}") from None
            raise
        return input_ids, is_word.astype(np.int64)

    @staticmethod
    def _as_batch_of_sentences(text: Any, is_split_into_words: bool, name: str = "text") -> tuple[list[Any], bool]:
        """
        Check the input's structure (`name`: the argument, for errors) and return it as a list of sentences, with
        whether it was a batch.

        Raw text: `str` -> one sentence; `list[str]` -> a batch. Pre-split: `list[str]` -> one sentence;
        `list[list[str]]` -> a batch.
        """
        if not is_split_into_words:
            if isinstance(text, str):
                return [text], False
            if not isinstance(text, (list, tuple)):
                raise TypeError(
                    f"{name} must be a string or a list of strings, got {text!r:.80} of type {type(text).__name__}"
                )
            for index, sentence in enumerate(text):
                if isinstance(sentence, (list, tuple)):
                    raise ValueError(
                        f"{name}[{index}] is a {type(sentence).__name__}, but is_split_into_words=False: pass "
                        "is_split_into_words=True for pre-split words, or one string per sentence"
                    )
                if not isinstance(sentence, str):
                    raise TypeError(
                        f"{name}[{index}] must be a string (one sentence), got {sentence!r:.80} of type "
                        f"{type(sentence).__name__}"
                    )
            return list(text), True

        if not isinstance(text, (list, tuple)):
            raise TypeError(
                f"With is_split_into_words=True, {name} must be a list of words (one sentence) or a list of lists of "
                f"words (a batch), got {text!r:.80} of type {type(text).__name__}"
            )
        is_batched = len(text) > 0 and isinstance(text[0], (list, tuple))
        sentences = list(text) if is_batched else [text]
        for sentence_index, sentence in enumerate(sentences):
            if not isinstance(sentence, (list, tuple)):
                raise TypeError(
                    f"{name}[{sentence_index}] must be a list of words like {name}[0], got {sentence!r:.80} of type "
                    f"{type(sentence).__name__}"
                )
            for word_index, word in enumerate(sentence):
                location = f"{name}[{sentence_index}][{word_index}]" if is_batched else f"{name}[{word_index}]"
                if isinstance(word, (list, tuple)):
                    raise ValueError(
                        f"{location} is a {type(word).__name__}: the input is nested too deeply; expected a list "
                        "of words (strings) or a list of such lists"
                    )
                if not isinstance(word, str):
                    raise TypeError(f"{location} must be a word (str), got {word!r:.80} of type {type(word).__name__}")
        return sentences, is_batched

    def _encode_plus(
        self,
        text: str | list[str] | list[list[str]],
        text_pair: Any = None,
        add_special_tokens: bool = True,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        truncation_strategy: TruncationStrategy = TruncationStrategy.DO_NOT_TRUNCATE,
        max_length: int | None = None,
        stride: int = 0,
        is_split_into_words: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors: str | TensorType | None = None,
        return_token_type_ids: bool | None = None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
        verbose: bool = True,
        split_special_tokens: bool = False,
        **kwargs,
    ) -> BatchEncoding:
        """
        Encode one sentence or a batch (the hook behind `tokenizer(...)` and `tokenizer.encode(...)`).

        Returns a `BatchEncoding` with `input_ids` (words, max_characters_per_token) for one sentence, or
        (batch, words, max_characters_per_token) for a batch or whenever `return_tensors` is set; `attention_mask`
        (words) / (batch, words); optionally `offset_mapping` (..., words, 2), `special_tokens_mask` (..., words)
        (1 for literal `<S>`/`</S>` words and padding words) and `length` (number of words before padding).
        `add_special_tokens` is ignored: the model adds the sentence boundaries. With `text_pair`, the same keys
        prefixed `pair_` for the second side (see the class docstring).
        """
        if kwargs:
            raise TypeError(f"ELMoTokenizer got unexpected keyword arguments: {sorted(kwargs)}")
        _check_encoding_options(
            text_pair, stride, truncation_strategy, padding_side, return_overflowing_tokens, return_token_type_ids,
            return_offsets_mapping, is_split_into_words,
        )
        sentences, is_batched = self._as_batch_of_sentences(text, is_split_into_words)
        sides = [("", "text", sentences, side_max_words(truncation_strategy, max_length, False))]
        if text_pair is not None:
            pairs, pairs_are_batched = self._as_batch_of_sentences(text_pair, is_split_into_words, "text_pair")
            check_pair_batches(sentences, is_batched, pairs, pairs_are_batched)
            sides.append((PAIR_PREFIX, "text_pair", pairs, side_max_words(truncation_strategy, max_length, True)))
        extras = {"offset_mapping": return_offsets_mapping, "special_tokens_mask": return_special_tokens_mask, "length": return_length}
        encoding = {}
        for prefix, name, side_sentences, max_words in sides:
            wanted = [key for key, asked in extras.items() if asked]
            batch = self._encoded_batch(side_sentences, is_split_into_words, max_words, wanted, name)
            padded = self.pad(
                batch, padding=padding_strategy, max_length=max_length, pad_to_multiple_of=pad_to_multiple_of,
                padding_side=padding_side, return_attention_mask=return_attention_mask, return_tensors=return_tensors,
            )
            encoding.update({prefix + key: value for key, value in padded.items()})
        if not is_batched and return_tensors is None:
            return BatchEncoding({key: value[0] for key, value in encoding.items()})
        return BatchEncoding(encoding, tensor_type=return_tensors)

    def _encoded_batch(
        self, sentences: list[Any], is_split_into_words: bool, max_words: int | None, extras: list[str], name: str = "text"
    ) -> dict[str, list[Any]]:
        """Each sentence's `input_ids` (words, row width) and the `extras` asked for (`offset_mapping`,
        `special_tokens_mask`, `length`), unpadded; warns once if words were cut. Errors name `name[index]`."""
        batch: dict[str, list[Any]] = {key: [] for key in ["input_ids", *extras]}
        encoded_words = []
        for sentence_index, sentence in enumerate(sentences):
            words, offsets, rows = self._encode_sentence(sentence, f"{name}[{sentence_index}]", is_split_into_words, max_words)
            batch["input_ids"].append(rows)
            encoded_words.append(words)
            if "offset_mapping" in batch:
                batch["offset_mapping"].append(offsets)
            if "special_tokens_mask" in batch:
                batch["special_tokens_mask"].append([int(word in self.sentence_boundary_words) for word in words])
            if "length" in batch:
                batch["length"].append(len(words))
        self._warn_once_if_truncated(encoded_words)
        return batch

    def _encode_sentence(
        self, sentence: str | Sequence[str], location: str, is_split_into_words: bool, max_words: int | None
    ) -> tuple[list[str], list[tuple[int, int]] | None, list[list[int]]]:
        """(words, their character offsets in the text or ``None`` for words given as such, one id row per word)
        of one sentence, cut to ``max_words`` words on the ``truncation_side``. Errors name the sentence and word."""
        if is_split_into_words:
            words, offsets = list(sentence), None
        else:
            try:
                words_with_offsets = self.split_words(sentence)
            except ValueError as error:
                raise ValueError(f"{location}: {error}") from error
            words = [word for word, _ in words_with_offsets]
            offsets = [offset for _, offset in words_with_offsets]
        if max_words is not None and len(words) > max_words:
            kept = slice(0, max_words) if self.truncation_side == "right" else slice(len(words) - max_words, None)
            words = words[kept]
            offsets = offsets[kept] if offsets is not None else None
        rows = []
        for word_index, word in enumerate(words):
            try:
                rows.append(self.word_row(word).tolist())
            except ValueError as error:
                raise ValueError(f"{location}, word {word_index}: {error}") from error
        return words, offsets, rows



__all__ = [
    "BEGIN_SENTENCE_CHARACTER_ID",
    "BEGIN_WORD_CHARACTER_ID",
    "BOS_CHARACTER_IDS",
    "BOS_TOKEN",
    "CHARACTER_ID_SHIFT",
    "END_SENTENCE_CHARACTER_ID",
    "END_WORD_CHARACTER_ID",
    "EOS_CHARACTER_IDS",
    "EOS_TOKEN",
    "ELMoTokenizer",
    "MAX_CHARACTERS_PER_TOKEN",
    "MORPHEME_ANALYSERS",
    "MOSES_WORD_PATTERN",
    "MorphemeWordSplitter",
    "NUM_CHARACTERS",
    "PADDING_CHARACTER_ID",
    "PADDING_TOKEN_ID",
    "PAD_TOKEN",
    "PTB_WORD_PATTERN",
    "DEFAULT_WORD_SPLITTER",
    "WORD_SPLITTERS",
    "build_word_splitter",
    "character_id_rows",
    "character_ids_to_word",
    "surface_words",
    "word_to_character_ids",
]
