"""What transformers' tokenizer interface means for rows of character ids: the base class of `ELMoTokenizer`.

ELMo's tokens are words, and each word is a row of character ids, so a batch is 3-D (batch, words, row width) where
`PreTrainedTokenizerBase` expects 2-D lists of token ids. `CharacterRowsTokenizerBase` gives the base's interface
that meaning: the "vocabulary" is the character ids and their names (`get_vocab`, `convert_tokens_to_ids`), padding
adds padding words (rows of zeros) on the right, and decoding turns rows back into words. Splitting text into words
and words into rows is `tokenization_elmo.py`'s; a subclass supplies, besides `PreTrainedTokenizerBase`'s own:

    max_characters_per_token, character_vocabulary (a `CharacterVocabulary` or None), token_row_width,
    sentence_boundary_words, row_to_word(row) -> str

Remote code: imports only numpy, transformers and the flat siblings `characters_elmo.py` and `sentence_pairs_elmo.py`.
"""

from __future__ import annotations

import json
import numbers
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
from transformers.tokenization_utils_base import AddedToken, BatchEncoding, PreTrainedTokenizerBase
from transformers.utils import PaddingStrategy, TensorType, to_py_obj

from .characters_elmo import (
    BEGIN_SENTENCE_CHARACTER_ID,
    BEGIN_WORD_CHARACTER_ID,
    CHARACTER_ID_SHIFT,
    CHARACTER_VOCABULARY_FILE_NAME,
    END_SENTENCE_CHARACTER_ID,
    END_WORD_CHARACTER_ID,
    NUM_CHARACTERS,
    PAD_TOKEN,
    PADDING_CHARACTER_ID,
    PADDING_TOKEN_ID,
)
from .sentence_pairs_elmo import has_pair_keys, merged_pair, split_pair_keys


# ----------------------------------------------------------------------------------------------------------------
# Names of the character ids (the "vocabulary") and helpers for nested inputs
# ----------------------------------------------------------------------------------------------------------------
def _character_vocabulary() -> dict[str, int]:
    """Names of the NUM_CHARACTERS rows of the character embedding: `<pad>`, `<0x00>`..`<0xFF>`, five markers."""
    vocabulary = {PAD_TOKEN: PADDING_TOKEN_ID}
    for byte in range(256):
        vocabulary[f"<0x{byte:02X}>"] = byte + CHARACTER_ID_SHIFT
    vocabulary["<begin_sentence>"] = BEGIN_SENTENCE_CHARACTER_ID
    vocabulary["<end_sentence>"] = END_SENTENCE_CHARACTER_ID
    vocabulary["<begin_word>"] = BEGIN_WORD_CHARACTER_ID
    vocabulary["<end_word>"] = END_WORD_CHARACTER_ID
    vocabulary["<padding_character>"] = PADDING_CHARACTER_ID
    return vocabulary


_CHARACTER_VOCABULARY = _character_vocabulary()
_CHARACTER_NAMES = {index: name for name, index in _CHARACTER_VOCABULARY.items()}


def _nesting_depth(value: Any) -> int:
    """0 for a scalar, 1 for a list of scalars (or an empty list), 2 for a list of lists, ..."""
    if not isinstance(value, (list, tuple)):
        return 0
    return 1 + max((_nesting_depth(item) for item in value), default=0)


def _is_one_sentence(input_ids: Any) -> bool:
    """Whether `input_ids` is one sentence's (words, characters) ids rather than a batch of sentences."""
    if hasattr(input_ids, "ndim"):
        return input_ids.ndim == 2
    if not isinstance(input_ids, (list, tuple)) or not input_ids:
        return False
    first_word = input_ids[0]
    if hasattr(first_word, "ndim"):
        return first_word.ndim == 1
    return isinstance(first_word, (list, tuple)) and len(first_word) > 0 and isinstance(first_word[0], numbers.Integral)


def _is_batch_of_sentences(ids: Any) -> bool:
    """Whether nested lists of ids are (batch, words, characters): some item is a sentence (empty or of rows)."""
    return isinstance(ids, (list, tuple)) and any(
        isinstance(item, (list, tuple)) and (not item or isinstance(item[0], (list, tuple))) for item in ids
    )


def _as_int64_array(value: Any) -> Any:
    """Nested lists of ints -> an int64 NumPy array; anything else (tensors, ragged lists) is returned unchanged."""
    if not isinstance(value, (list, tuple)):
        return value
    try:
        return np.asarray(value, dtype=np.int64)
    except (ValueError, TypeError):  # ragged: let BatchEncoding raise its usual "activate padding" error
        return value



def check_padding_side(padding_side: str) -> None:
    if padding_side != "right":
        raise ValueError(
            f"ELMoTokenizer only pads on the right, got padding_side={padding_side!r}: the ELMo model puts `</S>` "
            "right after each sentence's last word and runs its LSTMs over the first `length` positions, so padding "
            "words must come after the sentence."
        )




class CharacterRowsTokenizerBase(PreTrainedTokenizerBase):
    """`PreTrainedTokenizerBase` over rows of character ids: the vocabulary of character ids, padding with padding
    words, special-token masks and decoding (see the module docstring for what a subclass supplies)."""

    model_input_names = ["input_ids", "attention_mask"]
    padding_side = "right"

    # ---- vocabulary: the character ids (not words) ----
    def _id_names(self) -> dict[str, int]:
        return _CHARACTER_VOCABULARY if self.character_vocabulary is None else self.character_vocabulary.names()

    @property
    def vocab_size(self) -> int:
        """Number of character ids, the rows of the model's character embedding: `NUM_CHARACTERS` (262) for the byte
        scheme, the largest id + 1 for a character vocabulary."""
        if self.character_vocabulary is None:
            return NUM_CHARACTERS
        return self.character_vocabulary.largest_character_id + 1

    def __len__(self) -> int:
        return self.vocab_size

    def get_vocab(self) -> dict[str, int]:
        """Names of the character ids: `<pad>` 0, `<0x00>`..`<0xFF>` 1..256 (bytes), then the five markers; or the
        character vocabulary's characters and markers."""
        return dict(self._id_names())

    @property
    def added_tokens_encoder(self) -> dict[str, int]:
        return {PAD_TOKEN: PADDING_TOKEN_ID}

    @property
    def added_tokens_decoder(self) -> dict[int, AddedToken]:
        return {PADDING_TOKEN_ID: AddedToken(PAD_TOKEN, lstrip=False, rstrip=False, normalized=False, special=True)}

    def _add_tokens(self, new_tokens: list[str] | list[AddedToken], special_tokens: bool = False) -> int:
        unknown = [str(token) for token in new_tokens if str(token) not in self._id_names()]
        if unknown:
            raise ValueError(
                f"ELMoTokenizer's character vocabulary is fixed ({self.vocab_size} ids); cannot add {unknown}. "
                "Any word is already encodable (from its UTF-8 bytes, or with the unknown-character id)."
            )
        return 0

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        """0: the tokenizer never adds words (the model adds `<S>`/`</S>` itself)."""
        return 0

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | list[int]:
        """
        Map names of character ids (`get_vocab()` keys such as `"<pad>"`, `"<0x41>"`, `"<end_word>"`) to ids.
        A word is not a token of this vocabulary: use `word_row` or call the tokenizer.
        """
        if isinstance(tokens, str):
            names = self._id_names()
            if tokens not in names:
                raise KeyError(
                    f"{tokens!r} is not the name of a character id (see get_vocab()); to encode a word, use "
                    "tokenizer.word_row(word) or tokenizer(text)"
                )
            return names[tokens]
        return [self.convert_tokens_to_ids(token) for token in tokens]

    def convert_ids_to_tokens(self, ids: int | list[int], skip_special_tokens: bool = False) -> str | list[str]:
        """Names of character ids (inverse of `convert_tokens_to_ids`); use `decode` for rows of a word."""
        ids = to_py_obj(ids)
        if isinstance(ids, numbers.Integral):
            names = _CHARACTER_NAMES if self.character_vocabulary is None else self._vocabulary_id_names()
            if ids not in names:
                raise ValueError(f"Character ids lie in [0, {self.vocab_size}), got {ids}")
            return names[int(ids)]
        if _nesting_depth(ids) > 1:
            raise TypeError("convert_ids_to_tokens takes character ids; use decode() for rows of words")
        return [
            self.convert_ids_to_tokens(index)
            for index in ids
            if not (skip_special_tokens and index == PADDING_TOKEN_ID)
        ]

    def _vocabulary_id_names(self) -> dict[int, str]:
        names: dict[int, str] = {}
        for name, index in self.character_vocabulary.names().items():
            names.setdefault(index, name)
        return names

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        """Write the character vocabulary as `character_vocabulary.json` and return its path; nothing for the byte
        scheme, which is fixed (returns `()`)."""
        if self.character_vocabulary is None:
            return ()
        name = (f"{filename_prefix}-" if filename_prefix else "") + CHARACTER_VOCABULARY_FILE_NAME
        path = os.path.join(save_directory, name)
        with open(path, "w", encoding="utf-8") as file:
            json.dump(self.character_vocabulary.to_dict(), file, ensure_ascii=False, indent=0)
            file.write("\n")
        return (path,)


    # ---- padding ----
    def pad(
        self,
        encoded_inputs: Any,
        padding: bool | str | PaddingStrategy = True,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
        return_tensors: str | TensorType | None = None,
        verbose: bool = True,
    ) -> BatchEncoding:
        """
        `PreTrainedTokenizerBase.pad` (padding words are rows of zeros, see `_pad`), plus two things the base
        cannot know about 3-D ids: one un-batched sentence (`input_ids` of shape (words, characters)) is padded as
        a batch of one and returned without the batch axis, and tensors keep their last axis when every sentence
        is empty (`input_ids` (batch, 0, max_characters_per_token), not (batch, 0)). Sentence pairs (`pair_input_ids`
        and the other `pair_` keys, see `sentence_pairs_elmo.py`): each side is padded on its own.
        """
        if padding_side is not None:
            check_padding_side(padding_side)
        if has_pair_keys(encoded_inputs):
            options = {"padding": padding, "max_length": max_length, "pad_to_multiple_of": pad_to_multiple_of,
                       "return_attention_mask": return_attention_mask, "return_tensors": return_tensors, "verbose": verbose}
            first, second = split_pair_keys(encoded_inputs)
            is_one_pair = [_is_one_sentence(side["input_ids"]) for side in (first, second)]
            if is_one_pair[0] != is_one_pair[1]:
                raise ValueError("input_ids and pair_input_ids must both be one sentence or both a batch of sentences")
            padded = [self.pad(side, **options) for side in (first, second)]
            return BatchEncoding(merged_pair(*padded, is_one_pair=is_one_pair[0]))
        is_one_sentence = isinstance(encoded_inputs, Mapping) and _is_one_sentence(encoded_inputs.get("input_ids"))
        if is_one_sentence:
            encoded_inputs = {key: [value] for key, value in encoded_inputs.items()}
        # Padded lists come back from the base; converted here through NumPy, not by the base's flattening of every id
        # in Python (docs/results/measurements.md, "tokenizer padding").
        padded = super().pad(
            encoded_inputs,
            padding=padding,
            max_length=max_length,
            pad_to_multiple_of=pad_to_multiple_of,
            padding_side=padding_side,
            return_attention_mask=return_attention_mask,
            return_tensors=None,
            verbose=verbose,
        )
        data = dict(padded)
        if not isinstance(padded, BatchEncoding):  # the base returns an empty batch (no sentence) untouched
            if return_attention_mask is not False and "attention_mask" in self.model_input_names:
                data.setdefault("attention_mask", [])
        if return_tensors is not None:
            data = {key: _as_int64_array(value) for key, value in data.items()}
        encoding = BatchEncoding(data, tensor_type=return_tensors)
        trailing_sizes = {"input_ids": self.token_row_width, "offset_mapping": 2}
        for key in list(encoding.keys()):
            encoding[key] = self._restore_empty_axes(key, encoding[key], trailing_sizes.get(key))
        if is_one_sentence:
            encoding = BatchEncoding({key: value[0] for key, value in encoding.items()})
        return encoding

    @staticmethod
    def _restore_empty_axes(key: str, value: Any, trailing_size: int | None) -> Any:
        """Reshape an empty tensor built from nested empty lists to (batch, 0[, trailing_size])."""
        if not hasattr(value, "ndim") or not hasattr(value, "reshape"):
            return value
        expected_ndim = 3 if trailing_size is not None else 2
        number_of_elements = value.numel() if callable(getattr(value, "numel", None)) else value.size
        if value.ndim >= expected_ndim or number_of_elements != 0 or key == "length":
            return value
        batch_size = value.shape[0] if value.ndim >= 1 else 0
        shape = (batch_size, 0) if trailing_size is None else (batch_size, 0, trailing_size)
        return value.reshape(shape)

    def _pad(
        self,
        encoded_inputs: dict[str, Any] | BatchEncoding,
        max_length: int | None = None,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
    ) -> dict:
        """
        Pad ONE sentence with padding words: rows of `max_characters_per_token` zeros in `input_ids`, 0 in
        `attention_mask`, (0, 0) in `offset_mapping`, 1 in `special_tokens_mask`, 0 in `predicate_mask`. Right
        padding only.
        """
        if return_attention_mask is None:
            return_attention_mask = "attention_mask" in self.model_input_names
        word_rows = list(encoded_inputs[self.model_input_names[0]])
        for row in word_rows:
            if len(row) != self.token_row_width:
                raise ValueError(
                    f"Every word's row of input_ids must have max_characters_per_token={self.max_characters_per_token}"
                    f" character ids{'' if self.token_row_width == self.max_characters_per_token else ' after a word id'}"
                    f", got a row of {len(row)}"
                )
        number_of_words = len(word_rows)
        if return_attention_mask and "attention_mask" not in encoded_inputs:
            encoded_inputs["attention_mask"] = [1] * number_of_words
        if padding_strategy == PaddingStrategy.DO_NOT_PAD:
            return encoded_inputs
        check_padding_side(padding_side if padding_side is not None else self.padding_side)

        target_words = number_of_words if padding_strategy == PaddingStrategy.LONGEST else max_length
        if target_words is not None and pad_to_multiple_of is not None and target_words % pad_to_multiple_of != 0:
            target_words = (target_words // pad_to_multiple_of + 1) * pad_to_multiple_of
        missing_words = (target_words or 0) - number_of_words
        if missing_words <= 0:
            return encoded_inputs
        padding_rows = [[PADDING_TOKEN_ID] * self.token_row_width for _ in range(missing_words)]
        encoded_inputs["input_ids"] = word_rows + padding_rows
        if return_attention_mask:
            encoded_inputs["attention_mask"] = list(encoded_inputs["attention_mask"]) + [0] * missing_words
        if "offset_mapping" in encoded_inputs:
            encoded_inputs["offset_mapping"] = list(encoded_inputs["offset_mapping"]) + [(0, 0)] * missing_words
        if "special_tokens_mask" in encoded_inputs:
            encoded_inputs["special_tokens_mask"] = list(encoded_inputs["special_tokens_mask"]) + [1] * missing_words
        if "predicate_mask" in encoded_inputs:  # the SRL head's per-word predicate indicator: padding is no predicate
            encoded_inputs["predicate_mask"] = list(encoded_inputs["predicate_mask"]) + [0] * missing_words
        return encoded_inputs

    def get_special_tokens_mask(
        self, token_ids_0: list[Any], token_ids_1: list[Any] | None = None, already_has_special_tokens: bool = False
    ) -> list[int]:
        """1 for each padding row and literal `<S>`/`</S>` row of one sentence's (words, characters) ids, else 0."""
        if token_ids_1 is not None:
            raise ValueError("get_special_tokens_mask reads one sentence: each side of a pair has its own mask")
        mask = []
        for row in to_py_obj(token_ids_0):
            is_padding = all(value == PADDING_TOKEN_ID for value in row)
            mask.append(int(is_padding or self.row_to_word(row) in self.sentence_boundary_words))
        return mask

    # ---- decoding ----
    def decode(
        self,
        token_ids: Any,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
        **kwargs,
    ) -> str | list[str]:
        """
        Decode character ids back to words.

        Args:
            token_ids: one sentence (words, max_characters_per_token) -> `str`, the words joined by spaces; a batch
                (batch, words, max_characters_per_token) -> `list[str]`; one word row (max_characters_per_token,)
                -> that word. Lists, tensors or arrays. Padding rows are always skipped.
            skip_special_tokens (`bool`, *optional*, defaults to `False`): drop `<S>` and `</S>` words.
            clean_up_tokenization_spaces (`bool`, *optional*): undo the splitter's spaces (`do n't` -> `don't`,
                `know .` -> `know.`); defaults to `self.clean_up_tokenization_spaces` (False).
        """
        ids = to_py_obj(token_ids)
        if isinstance(ids, (list, tuple)) and ids and all(isinstance(value, numbers.Integral) for value in ids):
            word = self.row_to_word(ids)
            return "" if skip_special_tokens and word in self.sentence_boundary_words else word
        if _nesting_depth(ids) > 3:
            raise ValueError(
                "decode expects one word (characters), one sentence (words, characters) or a batch "
                f"(batch, words, characters) of ids, got {_nesting_depth(ids)} levels of nesting"
            )
        if _is_batch_of_sentences(ids):
            return [self._decode(sentence, skip_special_tokens, clean_up_tokenization_spaces) for sentence in ids]
        return self._decode(ids, skip_special_tokens, clean_up_tokenization_spaces)

    def batch_decode(
        self,
        sequences: Any,
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
        **kwargs,
    ) -> list[str]:
        """Decode a batch (batch, words, max_characters_per_token) to one string per sentence (see `decode`)."""
        ids = to_py_obj(sequences)
        if isinstance(ids, (list, tuple)) and not ids:
            return []
        if not _is_batch_of_sentences(ids) or _nesting_depth(ids) > 3:
            raise ValueError(
                "batch_decode expects ids of shape (batch, words, characters); use decode for one sentence"
            )
        return [self._decode(sentence, skip_special_tokens, clean_up_tokenization_spaces) for sentence in ids]

    def _decode(
        self,
        token_ids: list[list[int]],
        skip_special_tokens: bool = False,
        clean_up_tokenization_spaces: bool | None = None,
        **kwargs,
    ) -> str:
        """One sentence (words, max_characters_per_token) -> its words joined by single spaces."""
        words = []
        for row in token_ids:
            if all(value == PADDING_TOKEN_ID for value in row):
                continue
            word = self.row_to_word(row)
            if skip_special_tokens and word in self.sentence_boundary_words:
                continue
            words.append(word)
        text = " ".join(words)
        if clean_up_tokenization_spaces is None:
            clean_up_tokenization_spaces = self.clean_up_tokenization_spaces
        return self.clean_up_tokenization(text) if clean_up_tokenization_spaces else text

    def clean_up_tokenization(self, text: str) -> str:
        """The base clean-up (` .` -> `.`, ` n't` -> `n't`, ` 's` -> `'s`, ...) plus the Moses splitter's contraction
        suffixes ` 't`, ` 'll`, ` 'd` (`don 't` -> `don't`)."""
        text = super().clean_up_tokenization(text)
        return text.replace(" 't", "'t").replace(" 'll", "'ll").replace(" 'd", "'d")

