"""Tests of ELMo's character tokenizer: exact id rows, word splitting, padding, decoding, saving, errors."""

import json
import pickle
import random

import numpy as np
import pytest
import torch
from transformers import DataCollatorWithPadding

from elmo_hf.tokenization_elmo import (
    BOS_CHARACTER_IDS,
    EOS_CHARACTER_IDS,
    MAX_CHARACTERS_PER_TOKEN,
    NUM_CHARACTERS,
    PADDING_CHARACTER_ID,
    ELMoTokenizer,
    build_word_splitter,
    character_ids_to_word,
    word_to_character_ids,
)
from elmo_hf.word_splitters_elmo import ascii_word_pattern

PADDING_ROW = [0] * 50


def padded_row(ids: list[int], length: int = 50) -> list[int]:
    """`ids` followed by the padding character 261 up to `length` slots."""
    return ids + [261] * (length - len(ids))


@pytest.fixture(scope="module")
def ptb_tokenizer() -> ELMoTokenizer:
    """The Penn-Treebank splitter; conftest's `tokenizer` fixture splits on whitespace."""
    return ELMoTokenizer(word_splitter="ptb")


# ---------------------------------------------------------------------------------------------------------------
# Constants and the word -> ids function
# ---------------------------------------------------------------------------------------------------------------
def test_constants():
    assert MAX_CHARACTERS_PER_TOKEN == 50
    assert NUM_CHARACTERS == 262
    assert PADDING_CHARACTER_ID == 261
    assert BOS_CHARACTER_IDS == tuple([259, 257, 260] + [261] * 47)
    assert EOS_CHARACTER_IDS == tuple([259, 258, 260] + [261] * 47)


@pytest.mark.parametrize(
    "word, expected",
    [
        ("th", padded_row([259, 117, 105, 260])),
        ("<S>", [259, 257, 260] + [261] * 47),
        ("</S>", [259, 258, 260] + [261] * 47),
        ("Hello!", padded_row([259, 73, 102, 109, 109, 112, 34, 260])),
        ("U.S.", padded_row([259, 86, 47, 84, 47, 260])),
        ("한국어", padded_row([259, 238, 150, 157, 235, 182, 174, 237, 151, 181, 260])),
        ("😀", padded_row([259, 241, 160, 153, 129, 260])),
        ("", padded_row([259, 260])),
        ("New York", padded_row([259, 79, 102, 120, 33, 90, 112, 115, 108, 260])),  # a space is just a byte
        ("<s>", padded_row([259, 61, 116, 63, 260])),  # only the exact words <S> and </S> are boundaries
    ],
)
def test_word_to_character_ids_exact(word, expected):
    assert len(expected) == 50
    assert word_to_character_ids(word) == expected


def test_over_long_ascii_word_is_cut_to_48_bytes_without_padding():
    ids = word_to_character_ids("a" * 60)
    assert ids == [259] + [98] * 48 + [260]
    assert PADDING_CHARACTER_ID not in ids


def test_over_long_word_cut_inside_a_multi_byte_character():
    # "a" + 16 x "한" is 49 bytes; keeping 48 leaves the first 2 of the 3 bytes of the last "한".
    ids = word_to_character_ids("a" + "한" * 16)
    assert ids == [259, 98] + [238, 150, 157] * 15 + [238, 150] + [260]
    assert character_ids_to_word(ids) == "a" + "한" * 15 + "\ufffd"


def test_exactly_48_bytes_fits_and_49_is_cut():
    assert word_to_character_ids("b" * 48) == [259] + [99] * 48 + [260]
    assert word_to_character_ids("b" * 49) == [259] + [99] * 48 + [260]
    assert word_to_character_ids("b" * 47) == [259] + [99] * 47 + [260, 261]


def test_custom_max_characters_per_token():
    assert word_to_character_ids("hello", max_characters_per_token=5) == [259, 105, 102, 109, 260]
    assert word_to_character_ids("<S>", max_characters_per_token=5) == [259, 257, 260, 261, 261]
    assert word_to_character_ids("a", max_characters_per_token=3) == [259, 98, 260]


def test_lone_surrogate_strict_raises_and_ignore_drops_it():
    with pytest.raises(ValueError, match=r"'a\\ud800b'.*character 1 .*lone surrogate.*unicode_errors='ignore'"):
        word_to_character_ids("a\ud800b")
    assert word_to_character_ids("a\ud800b", unicode_errors="ignore") == word_to_character_ids("ab")
    assert word_to_character_ids("\udfff", unicode_errors="ignore") == word_to_character_ids("")


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: word_to_character_ids(3), TypeError, r"word must be a str, got 3 of type int"),
        (lambda: word_to_character_ids(None), TypeError, r"got None of type NoneType"),
        (lambda: word_to_character_ids(b"ab"), TypeError, r"got b'ab' of type bytes"),
        (lambda: word_to_character_ids("a", unicode_errors="replace"), ValueError, r"unicode_errors must be one of"),
        (lambda: word_to_character_ids("a", max_characters_per_token=2), ValueError, r"int >= 3.*got 2"),
        (lambda: word_to_character_ids("a", max_characters_per_token=True), ValueError, r"got True"),
        (lambda: word_to_character_ids("a", max_characters_per_token=50.0), ValueError, r"got 50.0"),
    ],
)
def test_word_to_character_ids_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ---------------------------------------------------------------------------------------------------------------
# ids -> word
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("word", ["th", "Hello!", "한국어", "😀", "", "<S>", "</S>", "naïve café", "a" * 48])
def test_character_ids_to_word_inverts(word):
    assert character_ids_to_word(word_to_character_ids(word)) == word
    assert character_ids_to_word(torch.tensor(word_to_character_ids(word))) == word


def test_character_ids_to_word_padding_and_truncation():
    assert character_ids_to_word(PADDING_ROW) == ""
    assert character_ids_to_word(word_to_character_ids("z" * 60)) == "z" * 48


@pytest.mark.parametrize(
    "row, message",
    [
        ([], r"non-empty row of integer character ids"),
        ([[259, 260]], r"non-empty row of integer character ids"),
        (padded_row([98, 260]), r"starts with the begin-of-word id 259, got 98"),
        (padded_row([259, 98, 262]), r"\[0, 262\), got 262"),
        (padded_row([259, 98, -1]), r"got -1"),
        (padded_row([259, 98, 259, 260]), r"byte id .* at position 2, got 259"),
        ([259, 98, 99], r"no end-of-word id 260"),
    ],
)
def test_character_ids_to_word_errors(row, message):
    with pytest.raises(ValueError, match=message):
        character_ids_to_word(row)


# ---------------------------------------------------------------------------------------------------------------
# Word splitters
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, words",
    [
        ("I don't know.", ["I", "do", "n't", "know", "."]),
        (
            "It's we're I'm they've she'll he'd",
            ["It", "'s", "we", "'re", "I", "'m", "they", "'ve", "she", "'ll", "he", "'d"],
        ),
        ("can't won't DON'T isn't", ["ca", "n't", "wo", "n't", "DO", "N'T", "is", "n't"]),
        ("I’m sure it’s fine, don’t worry", ["I", "’m", "sure", "it", "’s", "fine", ",", "do", "n’t", "worry"]),
        (
            "The U.S. grew 3.5% in 2019, e.g. 1,000 jobs.",
            ["The", "U.S.", "grew", "3.5", "%", "in", "2019", ",", "e.g.", "1,000", "jobs", "."],
        ),
        ("a well-known state-of-the-art tool", ["a", "well-known", "state-of-the-art", "tool"]),
        ("O'Neill's dogs' bones", ["O'Neill", "'s", "dogs", "'", "bones"]),
        ("Mr. Smith vs. Dr. Who, etc.", ["Mr.", "Smith", "vs.", "Dr.", "Who", ",", "etc."]),
        (
            '"Hello," she said... -- (really?) $5',
            ['"', "Hello", ",", '"', "she", "said", "...", "--", "(", "really", "?", ")", "$", "5"],
        ),
        ("at 12:30 or 1/2 and/or", ["at", "12:30", "or", "1/2", "and", "/", "or"]),
        ("한국어 문장입니다. 😀👍🏽 👩‍💻!", ["한국어", "문장입니다", ".", "😀", "👍🏽", "👩‍💻", "!"]),
        ("  spaces\tand\nnewlines  ", ["spaces", "and", "newlines"]),
        ("", []),
    ],
)
def test_ptb_splitter(ptb_tokenizer, text, words):
    assert ptb_tokenizer.tokenize(text) == words


@pytest.mark.parametrize(
    "text, words",
    [
        ("It wasn't me.", ["It", "wasn", "'t", "me", "."]),
        ("Don't stop, it's late", ["Don", "'t", "stop", ",", "it", "'s", "late"]),
        (
            "The U.S. , Ms. Lee and bio-identical drugs",
            ["The", "U.S.", ",", "Ms.", "Lee", "and", "bio-identical", "drugs"],
        ),
    ],
)
def test_moses_splitter_splits_contractions_like_the_training_data(text, words):
    assert ELMoTokenizer(word_splitter="moses").tokenize(text) == words


def test_moses_splitter_reproduces_the_tokenisation_of_the_fixture_sentences(allennlp_fixture_dir):
    # The fixture's sentences come from ELMo's training data (1B Word Benchmark, Moses-tokenised: "Don 't !").
    groups = json.loads((allennlp_fixture_dir / "sentences.json").read_text(encoding="utf-8"))
    sentences = [sentence for group in groups for sentence in group]
    moses = ELMoTokenizer(word_splitter="moses")
    assert [moses.tokenize(sentence) for sentence in sentences] == [sentence.split() for sentence in sentences]
    assert any("'t" in sentence.split() for sentence in sentences)


def test_whitespace_and_bert_splitters():
    text = "I don't know. U.S."
    assert ELMoTokenizer(word_splitter="whitespace").tokenize(text) == ["I", "don't", "know.", "U.S."]
    assert ELMoTokenizer(word_splitter="bert").tokenize(text) == ["I", "don", "'", "t", "know", ".", "U", ".", "S", "."]


# Characters and pieces the treebank patterns treat specially, joined at random into ASCII text; U+001C-U+001F are
# whitespace to Python's str.split but not to the splitters.
ASCII_PIECES = [
    *"abcXYZ019'-.,:/ \t\n\x0b\x0c\r\x1c\x1f\x00\x7f!?;\"()&@#$%*+=<>[]_`~^|\\{}",
    "Mr.", "Mrs", "U.S.", "e.g.", "a.m.", "etc.", "Sept.", "vs", "n't", "N'T", "'ll", "'S", "'t", "'ve", "ll", "re",
    "don't", "can't", "1,000", "12:30", "1/2", "3.5", "...", "--", "O'Neill", "rock'n'roll", "www.x.com",
]  # fmt: skip


@pytest.mark.parametrize("word_splitter", ["ptb", "moses", "whitespace", "space"])
def test_the_ascii_word_pattern_splits_ascii_text_as_the_splitter_does(word_splitter):
    splitter, pattern = build_word_splitter(word_splitter), ascii_word_pattern(word_splitter)
    rng = random.Random(0)
    texts = ["".join(rng.choice(ASCII_PIECES) for _ in range(rng.randint(0, 25))) for _ in range(3000)]
    texts += ["a\x1cb c\x1fd\x1e", "\x0bx\x0cy\rz\r\n", "Mrs. vs.A 1,000. ..-- it's", ""]
    for text in texts:
        assert pattern.findall(text) == [word for word, _ in splitter.pre_tokenize_str(text)], repr(text)


@pytest.mark.parametrize("word_splitter", ["ptb", "moses", "whitespace", "space", "bert"])
def test_tokenize_gives_the_words_of_split_words(word_splitter):
    tokenizer = ELMoTokenizer(word_splitter=word_splitter)
    for text in ["I don't know, Mr. Smith... it's 1,000\x1c$.", "naïve café, it’s 한국어 😀.", "", "  "]:
        assert tokenizer.tokenize(text) == [word for word, _ in tokenizer.split_words(text)]
    assert (ascii_word_pattern(word_splitter) is None) == (word_splitter == "bert")


@pytest.mark.parametrize("word_splitter", ["ptb", "moses", "whitespace", "space", "bert"])
def test_offsets_point_into_the_original_text(word_splitter):
    texts = ["  Héllo, wörld! I don't  know 한국어 😀👍🏽.", "", "x"]
    elmo_tokenizer = ELMoTokenizer(word_splitter=word_splitter)
    encoding = elmo_tokenizer(texts, padding=True, return_offsets_mapping=True, return_tensors="pt")
    words_per_text = [elmo_tokenizer.tokenize(text) for text in texts]
    longest = max(len(words) for words in words_per_text)
    assert encoding["offset_mapping"].shape == (3, longest, 2)
    assert encoding["input_ids"].shape == (3, longest, 50)
    for text, words, offsets in zip(texts, words_per_text, encoding["offset_mapping"].tolist(), strict=True):
        assert [text[start:end] for start, end in offsets[: len(words)]] == words
        assert offsets[len(words) :] == [[0, 0]] * (longest - len(words))
    assert len(words_per_text[0]) > 5


def test_offsets_with_ignored_lone_surrogates_still_index_the_original_text():
    elmo_tokenizer = ELMoTokenizer(unicode_errors="ignore")
    text = "a \ud800b c"
    encoding = elmo_tokenizer(text, return_offsets_mapping=True)
    assert [text[start:end] for start, end in encoding["offset_mapping"]] == ["a", "\ud800b", "c"]
    assert encoding["input_ids"][1] == word_to_character_ids("b")


def test_build_word_splitter_unknown_name():
    with pytest.raises(
        ValueError,
        match=r"word_splitter must be one of \['ptb', 'moses', 'whitespace', 'space', 'bert', 'kiwi', 'mecab'\], got 'spacy'",
    ):
        build_word_splitter("spacy")


def test_word_splitter_can_be_changed_after_construction():
    elmo_tokenizer = ELMoTokenizer()
    elmo_tokenizer.word_splitter = "whitespace"
    assert elmo_tokenizer.tokenize("don't.") == ["don't."]
    assert elmo_tokenizer.word_splitter == "whitespace"


# ---------------------------------------------------------------------------------------------------------------
# Encoding: shapes, padding, truncation
# ---------------------------------------------------------------------------------------------------------------
def test_single_sentence_lists(ptb_tokenizer):
    encoding = ptb_tokenizer("th ok")
    assert encoding["input_ids"] == [word_to_character_ids("th"), word_to_character_ids("ok")]
    assert encoding["attention_mask"] == [1, 1]
    assert set(encoding.keys()) == {"input_ids", "attention_mask"}


def test_batch_with_padding(ptb_tokenizer):
    encoding = ptb_tokenizer(["a b c", "d", ""], padding=True)
    assert [len(sentence) for sentence in encoding["input_ids"]] == [3, 3, 3]
    assert encoding["input_ids"][1] == [word_to_character_ids("d"), PADDING_ROW, PADDING_ROW]
    assert encoding["input_ids"][2] == [PADDING_ROW] * 3
    assert encoding["attention_mask"] == [[1, 1, 1], [1, 0, 0], [0, 0, 0]]


def test_batch_without_padding_is_ragged(ptb_tokenizer):
    encoding = ptb_tokenizer(["a b c", "d"])
    assert [len(sentence) for sentence in encoding["input_ids"]] == [3, 1]
    with pytest.raises(ValueError, match="Unable to create tensor"):
        ptb_tokenizer(["a b c", "d"], return_tensors="pt")


def test_padding_max_length_and_multiple_of(ptb_tokenizer):
    encoding = ptb_tokenizer(["a b", "c"], padding="max_length", max_length=4)
    assert encoding["attention_mask"] == [[1, 1, 0, 0], [1, 0, 0, 0]]
    encoding = ptb_tokenizer(["a b c", "d"], padding=True, pad_to_multiple_of=4)
    assert encoding["attention_mask"] == [[1, 1, 1, 0], [1, 0, 0, 0]]
    assert encoding["input_ids"][0][3] == PADDING_ROW


def test_return_tensors_pt_and_np(ptb_tokenizer):
    encoding = ptb_tokenizer(["a b c", "d"], padding=True, return_tensors="pt")
    assert encoding["input_ids"].dtype == torch.int64
    assert encoding["input_ids"].shape == (2, 3, 50)
    assert encoding["attention_mask"].dtype == torch.int64
    assert encoding["attention_mask"].shape == (2, 3)
    assert encoding["input_ids"][0, 0].tolist() == word_to_character_ids("a")
    assert encoding["input_ids"][1, 1].tolist() == PADDING_ROW
    single = ptb_tokenizer("a b", return_tensors="pt")
    assert single["input_ids"].shape == (1, 2, 50)
    assert single["attention_mask"].tolist() == [[1, 1]]
    as_numpy = ptb_tokenizer(["a b c", "d"], padding=True, return_tensors="np")
    assert isinstance(as_numpy["input_ids"], np.ndarray)
    assert as_numpy["input_ids"].shape == (2, 3, 50)


def test_empty_strings(ptb_tokenizer):
    assert ptb_tokenizer("")["input_ids"] == []
    assert ptb_tokenizer("")["attention_mask"] == []
    empty = ptb_tokenizer("", return_tensors="pt")
    assert empty["input_ids"].shape == (1, 0, 50)
    assert empty["attention_mask"].shape == (1, 0)
    mixed = ptb_tokenizer(["", "a b"], padding=True, return_tensors="pt")
    assert mixed["input_ids"].shape == (2, 2, 50)
    assert mixed["input_ids"][0].eq(0).all()
    assert mixed["attention_mask"].tolist() == [[0, 0], [1, 1]]
    all_empty = ptb_tokenizer(["", "   "], padding=True, return_tensors="pt")
    assert all_empty["input_ids"].shape == (2, 0, 50)
    assert all_empty["attention_mask"].shape == (2, 0)
    no_sentence = ptb_tokenizer([], padding=True, return_tensors="pt")
    assert no_sentence["input_ids"].shape == (0, 0, 50)
    assert no_sentence["attention_mask"].shape == (0, 0)


def test_truncation_counts_words(ptb_tokenizer):
    encoding = ptb_tokenizer(["a b c d e", "f"], padding=True, truncation=True, max_length=3)
    assert encoding["input_ids"][0] == [word_to_character_ids(word) for word in "abc"]
    assert encoding["attention_mask"] == [[1, 1, 1], [1, 0, 0]]
    left = ELMoTokenizer(truncation_side="left")("a b c d e", truncation=True, max_length=2)
    assert left["input_ids"] == [word_to_character_ids("d"), word_to_character_ids("e")]


def test_no_truncation_unless_asked(ptb_tokenizer):
    long_text = " ".join(["w"] * 600)
    assert len(ptb_tokenizer(long_text)["input_ids"]) == 600
    assert len(ptb_tokenizer([long_text, "a"], padding=True)["input_ids"][1]) == 600
    # transformers' convention: max_length without padding/truncation means truncation="longest_first".
    assert len(ptb_tokenizer(long_text, max_length=4)["input_ids"]) == 4


def test_truncation_keeps_offsets_aligned(ptb_tokenizer):
    text = "one two three four"
    encoding = ptb_tokenizer(text, truncation=True, max_length=2, return_offsets_mapping=True)
    assert [text[start:end] for start, end in encoding["offset_mapping"]] == ["one", "two"]


def test_add_special_tokens_does_not_add_boundaries(ptb_tokenizer):
    with_special = ptb_tokenizer("a b", add_special_tokens=True)
    without_special = ptb_tokenizer("a b", add_special_tokens=False)
    assert with_special["input_ids"] == without_special["input_ids"]
    assert len(with_special["input_ids"]) == 2
    assert list(BOS_CHARACTER_IDS) not in with_special["input_ids"]


def test_pre_split_words(ptb_tokenizer):
    one = ptb_tokenizer(["New York", "<S>", "😀"], is_split_into_words=True)
    assert one["input_ids"] == [word_to_character_ids("New York"), list(BOS_CHARACTER_IDS), word_to_character_ids("😀")]
    batch = ptb_tokenizer([["a", "b"], ["c"], []], is_split_into_words=True, padding=True, return_tensors="pt")
    assert batch["input_ids"].shape == (3, 2, 50)
    assert batch["attention_mask"].tolist() == [[1, 1], [1, 0], [0, 0]]
    empty_sentence = ptb_tokenizer([], is_split_into_words=True, return_tensors="pt")
    assert empty_sentence["input_ids"].shape == (1, 0, 50)


def test_batch_equals_one_sentence_at_a_time(ptb_tokenizer):
    texts = ["I don't know.", "한국어 😀", "", "A much longer sentence, with more words than the others."]
    batch = ptb_tokenizer(texts, padding=True, return_tensors="pt")
    for index, text in enumerate(texts):
        alone = ptb_tokenizer(text, return_tensors="pt")
        number_of_words = alone["input_ids"].shape[1]
        assert torch.equal(batch["input_ids"][index, :number_of_words], alone["input_ids"][0])
        assert batch["input_ids"][index, number_of_words:].eq(0).all()
        assert batch["attention_mask"][index].sum().item() == number_of_words


def test_special_tokens_mask_and_length():
    elmo_tokenizer = ELMoTokenizer(word_splitter="whitespace")
    encoding = elmo_tokenizer(["<S> a </S>", "b"], padding=True, return_special_tokens_mask=True, return_length=True)
    assert encoding["special_tokens_mask"] == [[1, 0, 1], [0, 1, 1]]
    assert encoding["length"] == [3, 1]
    assert elmo_tokenizer.get_special_tokens_mask(encoding["input_ids"][1]) == [0, 1, 1]


def test_encode_and_text_target(ptb_tokenizer):
    assert ptb_tokenizer.encode("a b") == [word_to_character_ids("a"), word_to_character_ids("b")]
    encoding = ptb_tokenizer(text="a b", text_target="c d e")
    assert encoding["labels"] == [word_to_character_ids(word) for word in "cde"]


# ---------------------------------------------------------------------------------------------------------------
# pad() and the data collator
# ---------------------------------------------------------------------------------------------------------------
def test_data_collator_with_padding(ptb_tokenizer):
    texts = ["a b c", "", "hello world"]
    features = [ptb_tokenizer(text) for text in texts]
    batch = DataCollatorWithPadding(ptb_tokenizer)(features)
    expected = ptb_tokenizer(texts, padding=True, return_tensors="pt")
    assert batch["input_ids"].shape == (3, 3, 50)
    assert torch.equal(batch["input_ids"], expected["input_ids"])
    assert torch.equal(batch["attention_mask"], expected["attention_mask"])
    plain_dicts = [{"input_ids": feature["input_ids"]} for feature in features]
    assert torch.equal(
        DataCollatorWithPadding(ptb_tokenizer)(plain_dicts)["attention_mask"], expected["attention_mask"]
    )
    all_empty = DataCollatorWithPadding(ptb_tokenizer)([ptb_tokenizer(""), ptb_tokenizer("")])
    assert all_empty["input_ids"].shape == (2, 0, 50)


def test_data_collator_with_tensor_features(ptb_tokenizer):
    features = [{key: torch.tensor(value) for key, value in ptb_tokenizer(text).items()} for text in ["a b", "c"]]
    batch = DataCollatorWithPadding(ptb_tokenizer)(features)
    assert batch["input_ids"].shape == (2, 2, 50)
    assert batch["attention_mask"].tolist() == [[1, 1], [1, 0]]


def test_pad_one_sentence_keeps_no_batch_axis(ptb_tokenizer):
    padded = ptb_tokenizer.pad(ptb_tokenizer("a b"), padding="max_length", max_length=4)
    assert padded["attention_mask"] == [1, 1, 0, 0]
    assert padded["input_ids"][2:] == [PADDING_ROW, PADDING_ROW]
    as_tensor = ptb_tokenizer.pad(ptb_tokenizer("a b"), padding="max_length", max_length=4, return_tensors="pt")
    assert as_tensor["input_ids"].shape == (4, 50)


def test_pad_checks_row_width(ptb_tokenizer):
    narrow = ELMoTokenizer(max_characters_per_token=10)("a b")
    with pytest.raises(ValueError, match=r"max_characters_per_token=50 character ids, got a row of 10"):
        ptb_tokenizer.pad([narrow, ptb_tokenizer("c")])


def test_left_padding_is_refused(ptb_tokenizer):
    message = r"only pads on the right, got padding_side='left'"
    with pytest.raises(ValueError, match=message):
        ptb_tokenizer(["a b", "c"], padding=True, padding_side="left")
    with pytest.raises(ValueError, match=message):
        ELMoTokenizer(padding_side="left")
    with pytest.raises(ValueError, match=message):
        ptb_tokenizer.pad([ptb_tokenizer("a b"), ptb_tokenizer("c")], padding_side="left")
    left = ELMoTokenizer()
    left.padding_side = "left"
    with pytest.raises(ValueError, match=message):
        left(["a b", "c"], padding=True)


# ---------------------------------------------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------------------------------------------
def test_decode_round_trip(ptb_tokenizer):
    texts = ["I don't know.", "한국어 문장입니다 😀", "", "x " + "y" * 60]
    batch = ptb_tokenizer(texts, padding=True, return_tensors="pt")
    expected = [" ".join(ptb_tokenizer.tokenize(text)) for text in texts]
    expected[3] = "x " + "y" * 48  # the over-long word keeps its first 48 bytes
    assert ptb_tokenizer.batch_decode(batch["input_ids"]) == expected
    assert ptb_tokenizer.decode(batch["input_ids"]) == expected
    assert ptb_tokenizer.decode(batch["input_ids"][1]) == "한국어 문장입니다 😀"
    assert ptb_tokenizer.decode(ptb_tokenizer("I don't know.")["input_ids"]) == "I do n't know ."
    assert ptb_tokenizer.decode(word_to_character_ids("한국어")) == "한국어"
    assert ptb_tokenizer.decode([]) == ""
    assert ptb_tokenizer.batch_decode([]) == []


def test_decode_truncated_multi_byte_word(ptb_tokenizer):
    ids = ptb_tokenizer(["a" + "한" * 16], is_split_into_words=True)["input_ids"]
    assert ptb_tokenizer.decode(ids) == "a" + "한" * 15 + "\ufffd"


def test_decode_special_words_and_clean_up():
    elmo_tokenizer = ELMoTokenizer(word_splitter="whitespace")
    ids = elmo_tokenizer("<S> hello world </S>", padding="max_length", max_length=6)["input_ids"]
    assert elmo_tokenizer.decode(ids) == "<S> hello world </S>"
    assert elmo_tokenizer.decode(ids, skip_special_tokens=True) == "hello world"
    ptb_ids = ELMoTokenizer(word_splitter="ptb")("I don't know.")["input_ids"]
    assert elmo_tokenizer.decode(ptb_ids) == "I do n't know ."
    moses_ids = ELMoTokenizer()("I don't know.")["input_ids"]
    assert elmo_tokenizer.decode(moses_ids) == "I don 't know ."
    assert elmo_tokenizer.decode(moses_ids, clean_up_tokenization_spaces=True) == "I don't know."
    assert elmo_tokenizer.decode(ptb_ids, clean_up_tokenization_spaces=True) == "I don't know."


def test_batch_decode_rejects_one_sentence(ptb_tokenizer):
    with pytest.raises(ValueError, match=r"batch_decode expects ids of shape \(batch, words, characters\)"):
        ptb_tokenizer.batch_decode(ptb_tokenizer("a b")["input_ids"])


# ---------------------------------------------------------------------------------------------------------------
# Vocabulary, saving, pickling
# ---------------------------------------------------------------------------------------------------------------
def test_character_vocabulary(ptb_tokenizer):
    vocabulary = ptb_tokenizer.get_vocab()
    assert ptb_tokenizer.vocab_size == len(ptb_tokenizer) == len(vocabulary) == 262
    assert sorted(vocabulary.values()) == list(range(262))
    assert ptb_tokenizer.pad_token == "<pad>"
    assert ptb_tokenizer.pad_token_id == 0
    assert ptb_tokenizer.convert_tokens_to_ids(["<pad>", "<0x41>", "<end_word>"]) == [0, 66, 260]
    assert ptb_tokenizer.convert_ids_to_tokens([0, 66, 257, 261]) == [
        "<pad>",
        "<0x41>",
        "<begin_sentence>",
        "<padding_character>",
    ]
    assert ptb_tokenizer.all_special_ids == [0]
    assert ptb_tokenizer.num_special_tokens_to_add() == 0
    assert ptb_tokenizer.add_special_tokens({"pad_token": "<pad>"}) == 0


def test_save_pretrained_round_trip(tmp_path):
    original = ELMoTokenizer(
        max_characters_per_token=20, word_splitter="moses", unicode_errors="ignore", model_max_length=64
    )
    original.save_pretrained(tmp_path)
    saved_config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert saved_config["tokenizer_class"] == "ELMoTokenizer"
    assert saved_config["max_characters_per_token"] == 20
    assert saved_config["word_splitter"] == "moses"
    assert saved_config["unicode_errors"] == "ignore"
    assert not any(path.name.startswith("vocab") for path in tmp_path.iterdir())

    reloaded = ELMoTokenizer.from_pretrained(tmp_path)
    assert (reloaded.max_characters_per_token, reloaded.word_splitter, reloaded.unicode_errors) == (
        20,
        "moses",
        "ignore",
    )
    assert reloaded.model_max_length == 64
    assert reloaded.pad_token_id == 0
    text = "It wasn't \ud800me."
    assert reloaded(text)["input_ids"] == original(text)["input_ids"]
    assert len(reloaded(text)["input_ids"][0]) == 20

    reloaded.save_pretrained(tmp_path)  # a second save writes the same options and no load-time facts
    assert json.loads((tmp_path / "tokenizer_config.json").read_text()) == saved_config

    overridden = ELMoTokenizer.from_pretrained(tmp_path, word_splitter="whitespace")
    assert overridden.tokenize("wasn't.") == ["wasn't."]


def test_pickle_round_trip():
    elmo_tokenizer = ELMoTokenizer(word_splitter="moses")
    restored = pickle.loads(pickle.dumps(elmo_tokenizer))
    assert restored.word_splitter == "moses"
    assert restored("don't stop")["input_ids"] == elmo_tokenizer("don't stop")["input_ids"]


# ---------------------------------------------------------------------------------------------------------------
# Errors a user can cause
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda t: t(["a", None]), TypeError, r"text\[1\] must be a string \(one sentence\), got None"),
        (lambda t: t(["a", 3]), TypeError, r"text\[1\] must be a string \(one sentence\), got 3 of type int"),
        (lambda t: t(5), TypeError, r"text must be a string or a list of strings, got 5 of type int"),
        (lambda t: t(None), ValueError, r"You need to specify either `text` or `text_target`"),
        (lambda t: t([["a", "b"]]), ValueError, r"text\[0\] is a list, but is_split_into_words=False"),
        (
            lambda t: t("a b", is_split_into_words=True),
            TypeError,
            r"is_split_into_words=True, text must be a list of words.*got 'a b' of type str",
        ),
        (
            lambda t: t([["a", ["b"]]], is_split_into_words=True),
            ValueError,
            r"text\[0\]\[1\] is a list: the input is nested too deeply",
        ),
        (
            lambda t: t(["a", ["b"]], is_split_into_words=True),
            ValueError,
            r"text\[1\] is a list: the input is nested too deeply",
        ),
        (
            lambda t: t([["a"], "b"], is_split_into_words=True),
            TypeError,
            r"text\[1\] must be a list of words like text\[0\], got 'b'",
        ),
        (
            lambda t: t([["a", None]], is_split_into_words=True),
            TypeError,
            r"text\[0\]\[1\] must be a word \(str\), got None",
        ),
        (
            lambda t: t(["a", 7], is_split_into_words=True),
            TypeError,
            r"text\[1\] must be a word \(str\), got 7 of type int",
        ),
        (
            lambda t: t(["a b"], is_split_into_words=True, return_offsets_mapping=True),
            ValueError,
            r"return_offsets_mapping=True needs raw text",
        ),
        (lambda t: t(["a"], "b"), ValueError, r"text is a batch but text_pair is one sentence"),
        (
            lambda t: t("a", tokenize_chinese_chars=True),
            TypeError,
            r"unexpected keyword arguments: \['tokenize_chinese_chars'\]",
        ),
        (lambda t: t("a", return_token_type_ids=True), ValueError, r"ELMo has no token type ids"),
        (lambda t: t("a", return_overflowing_tokens=True), ValueError, r"does not support return_overflowing_tokens"),
        (lambda t: t("a b", truncation="only_second", max_length=1), ValueError, r"only_second.*needs sentence pairs"),
        (
            lambda t: t(["ok", "a \ud800b"]),
            ValueError,
            r"text\[1\]: Cannot encode the text 'a \\ud800b' as UTF-8: character 2",
        ),
        (
            lambda t: t([["ok"], ["x", "a\ud800"]], is_split_into_words=True),
            ValueError,
            r"text\[1\], word 1: Cannot encode the word 'a\\ud800'",
        ),
        (lambda t: t.convert_tokens_to_ids("hello"), KeyError, r"'hello' is not the name of a character id"),
        (lambda t: t.convert_ids_to_tokens(262), ValueError, r"Character ids lie in \[0, 262\), got 262"),
        (lambda t: t.convert_ids_to_tokens([[259, 260]]), TypeError, r"use decode\(\) for rows of words"),
        (lambda t: t.add_tokens(["hello"]), ValueError, r"character vocabulary is fixed.*\['hello'\]"),
        (lambda t: t.decode([[[[259]]]]), ValueError, r"got 4 levels of nesting"),
        (lambda t: ELMoTokenizer(word_splitter="spacy"), ValueError, r"word_splitter must be one of .*, got 'spacy'"),
        (
            lambda t: ELMoTokenizer(unicode_errors="replace"),
            ValueError,
            r"unicode_errors must be one of \['strict', 'ignore'\], got 'replace'",
        ),
        (
            lambda t: ELMoTokenizer(max_characters_per_token=1),
            ValueError,
            r"max_characters_per_token must be an int >= 3.*got 1",
        ),
        (lambda t: ELMoTokenizer(pad_token="[PAD]"), ValueError, r"padding word is '<pad>'.*got pad_token='\[PAD\]'"),
    ],
)
def test_user_errors(ptb_tokenizer, call, error, message):
    with pytest.raises(error, match=message):
        call(ptb_tokenizer)


def test_default_splitter_is_moses_like_elmos_training_data():
    default = ELMoTokenizer()
    assert default.word_splitter == "moses"
    assert default.tokenize("I don't know.") == ["I", "don", "'t", "know", "."]


def test_batch_character_ids_equal_the_tokenizers_padded_output():
    tokenizer = ELMoTokenizer()
    sentences = [["The", "bank", "."], [], ["Größe", "<S>", "x" * 70, "</S>", "은행에"], ["bank"]]
    input_ids, attention_mask = tokenizer.batch_character_ids(sentences)
    expected = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="np")
    assert input_ids.dtype == attention_mask.dtype == np.int64
    assert np.array_equal(input_ids, expected["input_ids"]) and np.array_equal(attention_mask, expected["attention_mask"])
    # Twice (the rows are now remembered) and with another slot count: still equal.
    assert np.array_equal(tokenizer.batch_character_ids(sentences)[0], input_ids)
    short = ELMoTokenizer(max_characters_per_token=10)
    assert np.array_equal(short.batch_character_ids(sentences)[0], short(sentences, is_split_into_words=True, padding=True, return_tensors="np")["input_ids"])
    assert tokenizer.batch_character_ids([])[0].shape == (0, 0, 50)


def test_batch_character_ids_name_the_sentence_of_a_bad_word():
    with pytest.raises(ValueError, match=r"sentence 1 \('ok \\ud800'\)"):
        ELMoTokenizer().batch_character_ids([["fine"], ["ok", "\ud800"]])


def test_the_truncation_warning_shows_a_short_example(caplog):
    """A 1 MB token used to be printed whole to stderr."""
    from elmo_hf.tokenization_elmo import ELMoTokenizer

    huge = "x" * 1_000_000
    with caplog.at_level("WARNING"):
        ELMoTokenizer()([["fine", huge]], is_split_into_words=True)
    assert "its first 60 of 1,000,000 characters" in caplog.text and len(caplog.text) < 2000
