"""ELMoWordVocabulary: counts and order, min_count / max_size / <UNK>, lookups, bilm-tf file format, errors."""

from __future__ import annotations

import pytest

from elmo_hf.corpus.vocabulary import (
    BOS_WORD_ID,
    COUNTS_FILE_NAME,
    EOS_WORD_ID,
    UNK_WORD_ID,
    VOCABULARY_FILE_NAME,
    ELMoWordVocabulary,
)

# "the" 4, "a" 3, "cat" / "dog" 2 (tie: alphabetical), "sat" / "ran" / "Zoo" 1 ("Zoo" < "ran" < "sat" by code point).
CORPUS = [
    ["the", "cat", "sat"],
    ["the", "dog", "ran"],
    [],  # no words: not a sentence
    ["a", "cat", "a", "dog", "a"],
    ["the", "the", "Zoo"],
]


def test_counts_order_and_special_ids():
    vocabulary = ELMoWordVocabulary.from_sentences(CORPUS)

    assert (BOS_WORD_ID, EOS_WORD_ID, UNK_WORD_ID) == (0, 1, 2)
    assert vocabulary.words == ("<S>", "</S>", "<UNK>", "the", "a", "cat", "dog", "Zoo", "ran", "sat")
    # <S> and </S>: one per sentence with words (4); nothing unknown.
    assert vocabulary.counts == (4, 4, 0, 4, 3, 2, 2, 1, 1, 1)
    assert len(vocabulary) == 10
    assert vocabulary == ELMoWordVocabulary.from_sentences(reversed(CORPUS))  # order of sentences does not matter


def test_min_count_and_max_size_send_words_to_unk_with_their_counts():
    by_count = ELMoWordVocabulary.from_sentences(CORPUS, min_count=2)
    assert by_count.words == ("<S>", "</S>", "<UNK>", "the", "a", "cat", "dog")
    assert by_count.counts == (4, 4, 3, 4, 3, 2, 2)  # Zoo, ran, sat -> <UNK>

    # max_size counts the 3 special tokens; the cut falls inside the cat/dog tie, which the word order settles.
    by_size = ELMoWordVocabulary.from_sentences(CORPUS, max_size=6)
    assert by_size.words == ("<S>", "</S>", "<UNK>", "the", "a", "cat")
    assert by_size.counts == (4, 4, 5, 4, 3, 2)
    assert by_size.encode(["dog", "the", "unseen"]) == [UNK_WORD_ID, 3, UNK_WORD_ID]

    both = ELMoWordVocabulary.from_sentences(CORPUS, min_count=3, max_size=100)
    assert both.words == ("<S>", "</S>", "<UNK>", "the", "a")


def test_literal_unk_in_the_corpus_counts_as_unk():
    vocabulary = ELMoWordVocabulary.from_sentences([["<UNK>", "x", "x"], ["y"]], min_count=2)
    assert vocabulary.words == ("<S>", "</S>", "<UNK>", "x")
    assert vocabulary.counts == (2, 2, 2, 2)  # one literal <UNK> + "y"
    assert vocabulary.encode(["<UNK>", "y", "x"]) == [2, 2, 3]


def test_lookups():
    vocabulary = ELMoWordVocabulary.from_sentences(CORPUS)
    assert vocabulary.word_to_id("cat") == 5
    assert vocabulary.word_to_id("never seen") == UNK_WORD_ID
    assert vocabulary.id_to_word(0) == "<S>" and vocabulary.id_to_word(9) == "sat"
    assert vocabulary.encode(["the", "Cat", "sat"]) == [3, UNK_WORD_ID, 9]
    assert vocabulary.decode([3, 5, 1]) == ["the", "cat", "</S>"]
    assert "dog" in vocabulary and "<S>" in vocabulary and "Dog" not in vocabulary
    assert list(vocabulary)[:4] == ["<S>", "</S>", "<UNK>", "the"]
    with pytest.raises(IndexError, match=r"word ids lie in \[0, 10\), got 10"):
        vocabulary.id_to_word(10)
    with pytest.raises(TypeError, match="split it into words first"):
        vocabulary.encode("the cat")
    with pytest.raises(TypeError, match="word 1: expected a str"):
        vocabulary.encode(["the", 3])


def test_save_load_round_trip_and_file_format(tmp_path):
    vocabulary = ELMoWordVocabulary.from_sentences(CORPUS + [["naïve", "日本"]])
    written = vocabulary.save(tmp_path / "vocabulary")

    assert [path.name for path in written] == [VOCABULARY_FILE_NAME, COUNTS_FILE_NAME]
    lines = (tmp_path / "vocabulary" / VOCABULARY_FILE_NAME).read_bytes().decode("utf-8").split("\n")
    assert lines[:4] == ["<S>", "</S>", "<UNK>", "the"] and lines[-1] == ""
    counts_text = (tmp_path / "vocabulary" / COUNTS_FILE_NAME).read_text(encoding="utf-8")
    assert counts_text.splitlines()[:4] == ["<S>\t5", "</S>\t5", "<UNK>\t0", "the\t4"]

    reloaded = ELMoWordVocabulary.load(tmp_path / "vocabulary")
    assert reloaded == vocabulary and reloaded.counts == vocabulary.counts

    # The vocabulary file alone (a bilm-tf file): same words and ids, counts unknown.
    from_file = ELMoWordVocabulary.load(tmp_path / "vocabulary" / VOCABULARY_FILE_NAME)
    assert from_file.words == vocabulary.words and from_file.counts is None

    # Saving a vocabulary without counts removes the stale counts file.
    from_file.save(tmp_path / "vocabulary")
    assert not (tmp_path / "vocabulary" / COUNTS_FILE_NAME).exists()
    assert ELMoWordVocabulary.load(tmp_path / "vocabulary").counts is None


def bilm_tf_word_ids(path) -> dict[str, int]:
    """bilm-tf's `Vocabulary.__init__` reading loop, restated: strip each line, skip `!!!MAXTERMID`, number the rest."""
    word_to_id, index = {}, 0
    with open(path, encoding="utf-8") as file:
        for line in file:
            word = line.strip()
            if word == "!!!MAXTERMID":
                continue
            word_to_id[word] = index
            index += 1
    return word_to_id


def test_bilm_tf_reads_our_file_with_the_same_ids_and_we_read_its_files(tmp_path):
    vocabulary = ELMoWordVocabulary.from_sentences(CORPUS)
    vocabulary.save(tmp_path)
    assert bilm_tf_word_ids(tmp_path / VOCABULARY_FILE_NAME) == {word: index for index, word in enumerate(vocabulary.words)}

    # A file as bilm-tf's training fixture has it (CRLF and stray spaces are stripped, !!!MAXTERMID is skipped).
    bilm_tf_file = tmp_path / "bilm_tf_vocab.txt"
    bilm_tf_file.write_bytes(b"<S>\n</S>\n<UNK>\nof\r\n the \nneural\n!!!MAXTERMID\n")
    loaded = ELMoWordVocabulary.load(bilm_tf_file)
    assert loaded.words == ("<S>", "</S>", "<UNK>", "of", "the", "neural")
    assert {word: loaded.word_to_id(word) for word in loaded.words} == bilm_tf_word_ids(bilm_tf_file)


def test_from_text_files_splits_lines_and_skips_empty_ones(tmp_path):
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_bytes("I don't know.\r\n\n   \nThe cat's toy.".encode("utf-8"))
    second.write_text("The end.\n", encoding="utf-8")

    vocabulary = ELMoWordVocabulary.from_text_files([first, second], word_splitter="moses")

    expected = ELMoWordVocabulary.from_sentences(
        [["I", "don", "'t", "know", "."], ["The", "cat", "'s", "toy", "."], ["The", "end", "."]]
    )
    assert vocabulary == expected
    assert vocabulary.counts[:3] == (3, 3, 0)
    assert ELMoWordVocabulary.from_text_files(first, word_splitter="whitespace").encode(["don't"]) == [6]


@pytest.mark.parametrize(
    ("sentences", "options", "error", "message"),
    [
        ([], {}, ValueError, "the corpus is empty"),
        ([[], []], {}, ValueError, "the corpus is empty"),
        ([["a"]], {"min_count": 0}, ValueError, r"min_count must be an int >= 1 .*, got 0"),
        ([["a"]], {"min_count": "2"}, ValueError, r"min_count must be an int >= 1 .*, got '2'"),
        ([["a"]], {"max_size": 3}, ValueError, r"max_size must be None or an int >= 4"),
        ([["a", "b", "a"]], {"min_count": 3}, ValueError, r"min_count=3 leaves no word .* 'a', occurs 2 time"),
        (["the cat"], {}, TypeError, r"sentence 0 is a str \('the cat'\); expected a list of words"),
        ([["a"], ["b", 7]], {}, TypeError, r"sentence 1, word 1: expected a str, got 7"),
        ([["a", "</S>"]], {}, ValueError, r"sentence 0, word 1 is '</S>': the corpus must not contain"),
        ([["a b"]], {}, ValueError, r"'a b' \(seen 1 times\) contains whitespace"),
        ([[""]], {}, ValueError, r"'' \(seen 1 times\) is empty"),
    ],
)
def test_build_errors(sentences, options, error, message):
    with pytest.raises(error, match=message):
        ELMoWordVocabulary.from_sentences(sentences, **options)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"</S>\n<S>\n<UNK>\nthe\n", r"line 1 is '</S>', expected '<S>'.*swap its first two lines"),
        (b"<S>\n</S>\nthe\n", r"line 3 is 'the', expected '<UNK>'"),
        (b"<S>\n</S>\n<UNK>\nthe\ncat\nthe\n", r"line 6: the word 'the' is already on line 4"),
        (b"<S>\n</S>\n<UNK>\nthe\n\ncat\n", r"line 5: the word '' is empty"),
        (b"<S>\n</S>\n<UNK>\nthe cat\n", r"line 4: the word 'the cat' contains whitespace"),
        (b"<S>\n</S>\n<UNK>\nna\xefve\n", r"line 4 is not valid UTF-8"),
        (b"<S>\n</S>\n", r"has 2 word\(s\)"),
    ],
)
def test_load_errors_name_the_file_and_line(tmp_path, content, message):
    path = tmp_path / "vocab.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        ELMoWordVocabulary.load(path)


@pytest.mark.parametrize(
    ("counts_content", "message"),
    [
        ("<S>\t1\n</S>\t1\n<UNK>\t0\ndog\t1\n", r"line 4 is for 'dog' but word 3 of the vocabulary is 'the'"),
        ("<S>\t1\n</S>\t1\n<UNK>\t0\nthe\t-1\n", r"line 4: the count must be an integer >= 0, got '-1'"),
        ("<S>\t1\n</S>\t1\n<UNK>\t0\nthe 1\n", r"line 4: expected 'word<TAB>count'"),
        ("<S>\t1\n</S>\t1\n<UNK>\t0\n", r"has 3 count\(s\) for 4 vocabulary words"),
    ],
)
def test_load_errors_in_the_counts_file(tmp_path, counts_content, message):
    ELMoWordVocabulary.from_sentences([["the"]]).save(tmp_path)
    (tmp_path / COUNTS_FILE_NAME).write_text(counts_content, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        ELMoWordVocabulary.load(tmp_path)


def test_missing_paths(tmp_path):
    with pytest.raises(FileNotFoundError, match="no vocabulary at"):
        ELMoWordVocabulary.load(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="holds no vocab.txt"):
        ELMoWordVocabulary.load(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist or is not a file"):
        ELMoWordVocabulary.from_text_files(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="word_splitter must be one of"):
        ELMoWordVocabulary.from_text_files(tmp_path / "missing.txt", word_splitter="spaces")


def test_constructor_validates_words_and_counts():
    with pytest.raises(ValueError, match=r"starts with the special tokens"):
        ELMoWordVocabulary(["the", "<S>", "</S>", "<UNK>"])
    with pytest.raises(ValueError, match=r"'the' appears twice, at ids 3 and 4"):
        ELMoWordVocabulary(["<S>", "</S>", "<UNK>", "the", "the"])
    with pytest.raises(ValueError, match=r"counts must have one entry per word \(4\), got 3"):
        ELMoWordVocabulary(["<S>", "</S>", "<UNK>", "the"], [1, 1, 0])
    assert ELMoWordVocabulary(["<S>", "</S>", "<UNK>", "the"]).counts is None
