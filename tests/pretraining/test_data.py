"""biLM training data (elmo_hf.pretraining.data): per-sentence collator alignment, and the windowed stream of the
original (row streams, shifts across windows, determinism, nothing lost)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader
from transformers import default_data_collator

from elmo_hf.characters_elmo import word_to_character_ids
from elmo_hf.modeling_elmo import IGNORE_INDEX
from elmo_hf.pretraining.data import DataCollatorForBiLM, WindowedBiLMStream, sentence_bilm_labels
from elmo_hf.modeling_elmo import add_sentence_boundaries
from elmo_hf.tokenization_elmo import ELMoTokenizer, character_ids_to_word
from elmo_hf.corpus.vocabulary import ELMoWordVocabulary


# <S>=0 </S>=1 <UNK>=2 the=3 cat=4 sat=5 (counts 2, 1, 1; "cat" < "sat").
TINY_VOCABULARY = ELMoWordVocabulary.from_sentences([["the", "cat", "sat"], ["the"]])


# ----------------------------------------------------------------------------------------------------------------
# Per-sentence collator
# ----------------------------------------------------------------------------------------------------------------
def test_collator_hand_worked_example():
    collator = DataCollatorForBiLM(TINY_VOCABULARY)
    batch = collator([{"words": ["the", "cat", "sat"]}, {"words": ["the", "dog"], "id": 7}])

    assert sorted(batch) == ["attention_mask", "input_ids", "next_word_labels", "previous_word_labels"]
    assert all(value.dtype == torch.int64 for value in batch.values())
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["next_word_labels"].tolist() == [[4, 5, 1], [2, 1, IGNORE_INDEX]]  # cat sat </S> | <UNK> </S>
    assert batch["previous_word_labels"].tolist() == [[0, 3, 4], [0, 3, IGNORE_INDEX]]  # <S> the cat | <S> the
    expected_ids = ELMoTokenizer()([["the", "cat", "sat"], ["the", "dog"]], is_split_into_words=True, padding=True, return_tensors="pt")
    assert torch.equal(batch["input_ids"], expected_ids["input_ids"])
    assert not batch["input_ids"][1, 2].any()  # padding word: a row of zeros


def test_collator_boundary_positions_follow_the_models_layout():
    collator = DataCollatorForBiLM(TINY_VOCABULARY, label_boundary_positions=True)
    sentences = [["the", "cat", "sat"], ["the", "dog"], ["sat"]]
    batch = collator([{"words": words} for words in sentences])

    assert batch["next_word_labels"].tolist() == [[3, 4, 5, 1, -100], [3, 2, 1, -100, -100], [5, 1, -100, -100, -100]]
    assert batch["previous_word_labels"].tolist() == [[-100, 0, 3, 4, 5], [-100, 0, 3, 2, -100], [-100, 0, 5, -100, -100]]

    # Against the layout ELMoModel builds (keep_sentence_boundaries=True): each label is the id of the neighbour
    # token of the wrapped sentence, where there is one.
    wrapped_ids, position_mask = add_sentence_boundaries(batch["input_ids"], batch["attention_mask"].bool())
    assert wrapped_ids.shape[:2] == batch["next_word_labels"].shape
    for row in range(len(sentences)):
        tokens = [character_ids_to_word(ids) for ids, real in zip(wrapped_ids[row], position_mask[row]) if real]
        ids = [TINY_VOCABULARY.word_to_id(token) for token in tokens]
        assert tokens[0] == "<S>" and tokens[-1] == "</S>"
        assert batch["next_word_labels"][row].tolist() == ids[1:] + [-100] * (6 - len(ids))
        assert batch["previous_word_labels"][row].tolist() == [-100] + ids[:-1] + [-100] * (5 - len(ids))


def test_sentence_labels_function():
    assert sentence_bilm_labels([3, 4, 5]) == ([4, 5, 1], [0, 3, 4])
    assert sentence_bilm_labels([3, 4, 5], label_boundary_positions=True) == ([3, 4, 5, 1, -100], [-100, 0, 3, 4, 5])
    assert sentence_bilm_labels([]) == ([], [])


def test_collator_text_padding_and_numpy():
    tokenizer = ELMoTokenizer(word_splitter="moses")
    collator = DataCollatorForBiLM(TINY_VOCABULARY, tokenizer=tokenizer, pad_to_multiple_of=4, return_tensors="np")
    batch = collator([{"text": "The cat sat."}, {"words": []}])

    assert isinstance(batch["input_ids"], np.ndarray) and batch["input_ids"].shape == (2, 4, 50)
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [0, 0, 0, 0]]
    assert batch["next_word_labels"].tolist() == [[4, 5, 2, 1], [-100] * 4]  # The=<UNK> cat sat . </S>
    assert batch["previous_word_labels"].tolist() == [[0, 2, 4, 5], [-100] * 4]
    assert tokenizer.decode(batch["input_ids"][0]) == "The cat sat ."


def test_collator_errors():
    collator = DataCollatorForBiLM(TINY_VOCABULARY)
    with pytest.raises(ValueError, match="has 'text' but the collator has no tokenizer"):
        collator([{"text": "the cat"}])
    with pytest.raises(KeyError, match="neither 'words' nor 'text'.*remove_unused_columns=False"):
        collator([{"input_ids": [1]}])
    with pytest.raises(ValueError, match=r"feature 1 'words', word 0 is '<S>'"):
        collator([{"words": ["the"]}, {"words": ["<S>", "the"]}])
    with pytest.raises(TypeError, match=r"feature 0 'words' is a str"):
        collator([{"words": "the cat"}])
    with pytest.raises(ValueError, match="no features"):
        collator([])
    with pytest.raises(ValueError, match="return_tensors must be 'pt' or 'np'"):
        DataCollatorForBiLM(TINY_VOCABULARY, return_tensors="tf")


# ----------------------------------------------------------------------------------------------------------------
# Windowed stream
# ----------------------------------------------------------------------------------------------------------------
CORPUS = [
    ["the", "cat", "sat", "on", "the", "mat"],
    ["a", "dog"],
    [],  # skipped
    ["the", "dog", "ran", "to", "the", "cat", "and", "the", "cat", "ran"],
    ["hello"],
    ["a", "cat", "is", "a", "cat"],
    ["the", "end", "of", "it", "all", "was", "near"],
    ["dog", "days"],
    ["the", "mat", "is", "red"],
    ["on", "and", "on"],
]
NON_EMPTY = [sentence for sentence in CORPUS if sentence]
VOCABULARY = ELMoWordVocabulary.from_sentences(CORPUS, min_count=2)  # rare words become <UNK> targets


def expected_rows(stream: WindowedBiLMStream, epoch: int) -> list[list[tuple[str, str]]]:
    """Each row's (left, right) token pairs, rebuilt from the documented rule: sentences in `sentence_order`, wrapped
    in <S> ... </S>, consecutive pairs within a sentence, split into num_rows parts of numpy.array_split sizes."""
    positions = []
    for index in stream.sentence_order(epoch):
        wrapped = ["<S>", *NON_EMPTY[index], "</S>"]
        positions += list(zip(wrapped[:-1], wrapped[1:]))
    sizes = [len(part) for part in np.array_split(np.arange(len(positions)), stream.num_rows)]
    starts = np.cumsum(sizes) - sizes
    return [positions[start : start + size] for start, size in zip(starts, sizes)]


def as_target(word: str) -> str:
    """The word as a label of VOCABULARY shows it: itself, or <UNK>."""
    return VOCABULARY.id_to_word(VOCABULARY.word_to_id(word))


def decoded_rows(
    stream: WindowedBiLMStream, epoch: int, vocabulary: ELMoWordVocabulary = VOCABULARY
) -> dict[str, list[list[str]]]:
    """Every row's windows concatenated over the epoch, decoded: inputs as words, labels as vocabulary words."""
    rows = {key: [[] for _ in range(stream.num_rows)] for key in ("forward", "next", "backward", "previous")}
    for batch in stream.batches(epoch):
        for row in range(stream.num_rows):
            real = batch["attention_mask"][row].bool()
            rows["forward"][row] += [character_ids_to_word(ids) for ids in batch["input_ids"][row][real]]
            rows["next"][row] += vocabulary.decode(batch["next_word_labels"][row][real].tolist())
            rows["backward"][row] += [character_ids_to_word(ids) for ids in batch["backward_input_ids"][row][real]]
            rows["previous"][row] += vocabulary.decode(batch["previous_word_labels"][row][real].tolist())
            assert (batch["next_word_labels"][row][~real] == IGNORE_INDEX).all()
            assert (batch["previous_word_labels"][row][~real] == IGNORE_INDEX).all()
            assert not batch["input_ids"][row][~real].any() and not batch["backward_input_ids"][row][~real].any()
    return rows


@pytest.mark.parametrize("remainder", ["drop", "pad"])
@pytest.mark.parametrize("shuffle", [True, False])
def test_windows_of_a_row_reproduce_its_stream(remainder, shuffle):
    stream = WindowedBiLMStream(CORPUS, VOCABULARY, num_rows=3, window_size=4, shuffle=shuffle, seed=5, remainder=remainder)
    assert stream.num_sentences == 9 and stream.num_positions == sum(len(sentence) + 1 for sentence in NON_EMPTY) == 49
    assert stream.row_lengths == (17, 16, 16)
    assert (stream.num_batches, stream.num_dropped_positions) == ((5, 0) if remainder == "pad" else (4, 1))

    rows = decoded_rows(stream, epoch=0)
    for row, positions in enumerate(expected_rows(stream, epoch=0)):
        kept = positions if remainder == "pad" else positions[: stream.num_batches * stream.window_size]
        # Forward: the row's pairs in order, input = left token, target = right token.
        assert rows["forward"][row] == [left for left, _ in kept]
        assert rows["next"][row] == [as_target(right) for _, right in kept]
        # Backward: the same pairs in reverse order, input = right token, target = left token.
        assert rows["backward"][row] == [right for _, right in reversed(kept)]
        assert rows["previous"][row] == [as_target(left) for left, _ in reversed(kept)]
        assert "</S>" not in rows["forward"][row] and "<S>" not in rows["backward"][row]


def test_targets_continue_across_window_boundaries():
    stream = WindowedBiLMStream(CORPUS, VOCABULARY, num_rows=2, window_size=3, seed=1)
    batches = list(stream.batches())
    assert len(batches) == stream.num_batches == 8  # 49 positions: rows of 25 and 24 -> 24 // 3 windows
    boundary_checks = 0
    for previous, following in zip(batches, batches[1:]):
        for row in range(stream.num_rows):
            last_target = VOCABULARY.id_to_word(int(previous["next_word_labels"][row, -1]))
            next_input = character_ids_to_word(following["input_ids"][row, 0])
            # The forward target of a window's last position is the next window's first input (or </S> -> <S>).
            assert (last_target, next_input) == ("</S>", "<S>") or last_target == as_target(next_input)
            last_backward_target = VOCABULARY.id_to_word(int(previous["previous_word_labels"][row, -1]))
            next_backward_input = character_ids_to_word(following["backward_input_ids"][row, 0])
            assert (last_backward_target, next_backward_input) == ("<S>", "</S>") or last_backward_target == as_target(
                next_backward_input
            )
            boundary_checks += 1
        assert following["window_index"].tolist() == [previous["window_index"][0].item() + 1] * stream.num_rows
        assert following["row_index"].tolist() == list(range(stream.num_rows))
    assert boundary_checks == 14


def test_determinism_by_seed_and_epoch():
    def all_batches(stream, epoch):
        return [batch for batch in stream.batches(epoch)]

    def same(first, second):
        return all(torch.equal(a[key], b[key]) for a, b in zip(first, second) for key in a)

    first = WindowedBiLMStream(CORPUS, VOCABULARY, num_rows=2, window_size=4, seed=3)
    again = WindowedBiLMStream(CORPUS, VOCABULARY, num_rows=2, window_size=4, seed=3)
    other_seed = WindowedBiLMStream(CORPUS, VOCABULARY, num_rows=2, window_size=4, seed=4)
    assert same(all_batches(first, 0), all_batches(again, 0))
    assert not np.array_equal(first.sentence_order(0), other_seed.sentence_order(0))
    assert not same(all_batches(first, 0), all_batches(other_seed, 0))
    assert not np.array_equal(first.sentence_order(0), first.sentence_order(1))

    first.set_epoch(1)
    assert first.epoch == 1 and same([batch for batch in first.batches()], all_batches(again, 1))
    unshuffled = WindowedBiLMStream(CORPUS, VOCABULARY, num_rows=2, window_size=4, shuffle=False)
    assert unshuffled.sentence_order(7).tolist() == list(range(9))


@pytest.mark.parametrize("remainder", ["drop", "pad"])
def test_no_position_lost_or_duplicated_except_the_documented_remainder(remainder):
    vocabulary = ELMoWordVocabulary.from_sentences(CORPUS)  # every word its own class: pairs compare exactly
    stream = WindowedBiLMStream(CORPUS, vocabulary, num_rows=3, window_size=5, seed=2, remainder=remainder)
    corpus_pairs = Counter()
    for sentence in NON_EMPTY:
        wrapped = ["<S>", *sentence, "</S>"]
        corpus_pairs.update(zip(wrapped[:-1], wrapped[1:]))

    rows = decoded_rows(stream, epoch=0, vocabulary=vocabulary)
    forward_pairs = Counter(pair for row in range(3) for pair in zip(rows["forward"][row], rows["next"][row]))
    backward_pairs = Counter(pair for row in range(3) for pair in zip(rows["previous"][row], rows["backward"][row]))

    assert sum(forward_pairs.values()) == stream.num_positions - stream.num_dropped_positions
    assert not forward_pairs - corpus_pairs  # nothing duplicated or invented
    assert backward_pairs == forward_pairs  # both directions cover the same positions
    if remainder == "pad":
        assert (stream.num_batches, stream.num_dropped_positions) == (4, 0)  # ceil(17 / 5) windows
        assert forward_pairs == corpus_pairs
    else:
        assert (stream.num_batches, stream.num_dropped_positions) == (3, 49 - 3 * 3 * 5)
        assert sum((corpus_pairs - forward_pairs).values()) == stream.num_dropped_positions


def test_dataloader_rebuilds_the_batches_like_trainer_does(monkeypatch):
    stream = WindowedBiLMStream(CORPUS, VOCABULARY, num_rows=3, window_size=4, remainder="pad")
    loader = DataLoader(stream, batch_size=stream.num_rows, collate_fn=default_data_collator)  # as Trainer builds it
    assert len(loader) == stream.num_batches and len(stream) == stream.num_batches * 3
    loaded = list(loader)
    assert len(loaded) == stream.num_batches
    for from_loader, direct in zip(loaded, stream.batches()):
        assert sorted(from_loader) == sorted(direct)
        assert all(torch.equal(from_loader[key], direct[key]) for key in direct)
    assert loaded[0]["input_ids"].shape == (3, 4, 50) and loaded[0]["next_word_labels"].shape == (3, 4)

    class TwoWorkers:
        num_workers = 2

    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: TwoWorkers())
    with pytest.raises(RuntimeError, match="dataloader_num_workers=0"):
        next(iter(stream))


def test_stream_reads_a_dataset_column():
    from datasets import Dataset

    dataset = Dataset.from_dict({"words": CORPUS, "id": list(range(len(CORPUS)))})
    from_dataset = WindowedBiLMStream(dataset, VOCABULARY, num_rows=2, window_size=4)
    from_streamed = WindowedBiLMStream(dataset.to_iterable_dataset(), VOCABULARY, num_rows=2, window_size=4)
    from_lists = WindowedBiLMStream(CORPUS, VOCABULARY, num_rows=2, window_size=4)
    for a, b, c in zip(from_dataset.batches(), from_streamed.batches(), from_lists.batches(), strict=True):
        assert all(torch.equal(a[key], c[key]) and torch.equal(b[key], c[key]) for key in a)
    with pytest.raises(ValueError, match=r"no 'tokens' column \(columns: \['words', 'id'\]\)"):
        WindowedBiLMStream(dataset, VOCABULARY, num_rows=2, words_column="tokens")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_rows": 3, "window_size": 20}, r"no full window: .* 49 positions, 16 per row .* window_size=20"),
        ({"num_rows": 50, "remainder": "pad"}, r"49 positions .* fewer than num_rows=50"),
        ({"num_rows": 0}, r"num_rows must be an int >= 1, got 0"),
        ({"num_rows": 2, "window_size": 2.5}, r"window_size must be an int >= 1, got 2.5"),
        ({"num_rows": 2, "remainder": "wrap"}, r"remainder must be one of \['drop', 'pad'\], got 'wrap'"),
    ],
)
def test_stream_errors(options, message):
    with pytest.raises(ValueError, match=message):
        WindowedBiLMStream(CORPUS, VOCABULARY, **options)


def test_stream_refuses_boundary_words_and_empty_corpora():
    with pytest.raises(ValueError, match=r"sentence 1, word 0 is '</S>'"):
        WindowedBiLMStream([["a"], ["</S>"]], VOCABULARY, num_rows=1, window_size=1)
    with pytest.raises(ValueError, match="the corpus is empty"):
        WindowedBiLMStream([[], []], VOCABULARY, num_rows=1, window_size=1)


# ----------------------------------------------------------------------------------------------------------------
# Corpora larger than memory: the tokens on disk, the epoch read a batch at a time
# ----------------------------------------------------------------------------------------------------------------
def in_memory_batches(stream: WindowedBiLMStream, sentences, epoch: int) -> list[dict[str, np.ndarray]]:
    """The batches as the stream made them before its tokens went to disk: the whole epoch gathered into two arrays
    of (left, right) token ids, then every window cut from them. The definition the on-disk stream must equal."""
    characters = lambda word: word_to_character_ids(word)  # <S> and </S> give the boundary rows
    non_empty = [sentence for sentence in sentences if sentence]
    left, right = [], []
    for index in stream.sentence_order(epoch):
        wrapped = ["<S>", *non_empty[index], "</S>"]
        left += wrapped[:-1]
        right += wrapped[1:]
    row_lengths = np.asarray(stream.row_lengths)
    row_starts = np.cumsum(row_lengths) - row_lengths
    kept = row_lengths if stream.remainder == "pad" else np.full(stream.num_rows, stream.num_batches * stream.window_size)
    label = lambda word: stream.vocabulary.word_to_id(word) if word not in ("<S>", "</S>") else ("<S>", "</S>").index(word)
    batches = []
    for window in range(stream.num_batches):
        batch = {key: np.zeros((stream.num_rows, stream.window_size, 50), dtype=np.int64) for key in ("input_ids", "backward_input_ids")}
        batch |= {key: np.full((stream.num_rows, stream.window_size), IGNORE_INDEX) for key in ("next_word_labels", "previous_word_labels")}
        for row in range(stream.num_rows):
            for step in range(stream.window_size):
                position = window * stream.window_size + step
                if position >= kept[row]:
                    continue
                forward, backward = row_starts[row] + position, row_starts[row] + kept[row] - 1 - position
                batch["input_ids"][row, step] = characters(left[forward])
                batch["next_word_labels"][row, step] = label(right[forward])
                batch["backward_input_ids"][row, step] = characters(right[backward])
                batch["previous_word_labels"][row, step] = label(left[backward])
        batches.append(batch)
    return batches


@pytest.mark.parametrize(("num_rows", "window_size", "shuffle", "remainder"), [
    (3, 4, True, "drop"), (3, 4, False, "pad"), (1, 7, True, "pad"), (5, 2, False, "drop"), (4, 3, True, "pad"),
])
def test_windows_read_from_disk_equal_the_whole_epoch_gathered_in_memory(num_rows, window_size, shuffle, remainder):
    stream = WindowedBiLMStream(CORPUS, VOCABULARY, num_rows=num_rows, window_size=window_size, shuffle=shuffle, seed=7, remainder=remainder)
    for epoch in (0, 3):
        expected = in_memory_batches(stream, CORPUS, epoch)
        batches = list(stream.batches(epoch))
        assert len(batches) == len(expected) == stream.num_batches
        for batch, wanted in zip(batches, expected):
            for key, value in wanted.items():
                assert batch[key].dtype == torch.int64 and torch.equal(batch[key], torch.from_numpy(value)), key


def files_open_in(directory) -> list[str]:
    """What this process holds open in ``directory`` (/proc links: the path, with '(deleted)' for a file without a
    name; an O_TMPFILE file shows as 'directory/#inode (deleted)')."""
    import os

    links = []
    for descriptor in os.listdir("/proc/self/fd"):
        try:
            links.append(os.readlink(f"/proc/self/fd/{descriptor}"))
        except OSError:
            pass
    return [link for link in links if link.startswith(f"{directory}/")]


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self/fd"), reason="needs /proc (Linux)")
def test_the_token_file_has_no_name_is_never_mapped_and_goes_with_the_stream(tmp_path):
    stream = WindowedBiLMStream(CORPUS, VOCABULARY, num_rows=2, window_size=3, token_directory=tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing in the directory: no name to record, keep or delete
    opened = files_open_in(tmp_path)
    assert len(opened) == 1 and opened[0].endswith("(deleted)")
    assert str(tmp_path) not in open("/proc/self/maps").read()  # read with pread, never memory-mapped
    list(stream.batches())
    assert str(tmp_path) not in open("/proc/self/maps").read()
    stream.close()
    assert files_open_in(tmp_path) == []
    with pytest.raises(ValueError, match="the corpus is empty"):  # a failed construction leaves no file open
        WindowedBiLMStream([[], []], VOCABULARY, num_rows=1, token_directory=tmp_path)
    with pytest.raises(ValueError, match="sentence 1, word 0 is '<S>'"):
        WindowedBiLMStream([["a"], ["<S>"]], VOCABULARY, num_rows=1, token_directory=tmp_path)
    assert files_open_in(tmp_path) == [] and list(tmp_path.iterdir()) == []


def test_the_stream_reads_a_generator_once_with_its_tokens_written_in_chunks(monkeypatch):
    import elmo_hf.pretraining.data as data

    monkeypatch.setattr(data, "_WRITE_CHUNK_TOKENS", 5)  # many chunks for a small corpus
    from_generator = WindowedBiLMStream((sentence for sentence in CORPUS), VOCABULARY, num_rows=3, window_size=4, seed=2)
    from_list = WindowedBiLMStream(CORPUS, VOCABULARY, num_rows=3, window_size=4, seed=2)
    for first, second in zip(from_generator.batches(1), from_list.batches(1), strict=True):
        assert all(torch.equal(first[key], second[key]) for key in first)
