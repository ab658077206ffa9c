"""Corpora larger than memory (elmo_hf.corpus): directories of shards and glob patterns as corpora, sentences and
vocabulary counts streamed from every format equal to the in-memory path, errors naming the bad shard."""

from __future__ import annotations

import pytest
from datasets import Dataset

from elmo_hf.corpus.progress import CorpusProgress
from elmo_hf.corpus.readers import CorpusError, corpus_sources
from elmo_hf.corpus.sentences import load_sentences, stream_sentences
from elmo_hf.corpus.vocabulary import ELMoWordVocabulary

from ..conftest import TINYSHAKESPEARE

LINES = ["The cat sat on the mat .", "", "A dog ran .", "   ", "The dog sat .", "the cat ran to the dog ."]


def write_shards(directory, lines, num_shards, name="news.en-{:05d}-of-{:05d}"):
    """``lines`` split over ``num_shards`` files named as the 1B Word Benchmark names its training shards."""
    directory.mkdir(parents=True, exist_ok=True)
    for shard in range(num_shards):
        part = lines[shard::num_shards]
        (directory / name.format(shard + 1, num_shards)).write_text("".join(f"{line}\n" for line in part), encoding="utf-8")
    return directory


def test_a_directory_of_shards_is_its_files_in_name_order_read_as_text(tmp_path):
    shards = write_shards(tmp_path / "training-monolingual.tokenized.shuffled", LINES, 3)
    (shards / ".hidden").write_text("not a shard\n", encoding="utf-8")
    sources = corpus_sources(shards)
    assert [source.path.name for source in sources] == [f"news.en-0000{i}-of-00003" for i in (1, 2, 3)]
    assert {source.input_format for source in sources} == {"txt"}
    by_pattern = corpus_sources(str(shards / "news.en-*-of-00003"))
    assert by_pattern == sources
    expected = [LINES[index] for shard in range(3) for index in range(shard, len(LINES), 3)]
    assert [words for words in stream_sentences(shards, "whitespace")] == [line.split() for line in expected if line.split()]


def test_shards_keep_a_known_extension_and_a_saved_dataset_stays_one_corpus(tmp_path):
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    Dataset.from_dict({"text": ["b c ."]}).to_json(str(mixed / "b.jsonl"))
    (mixed / "a").write_text("a .\n", encoding="utf-8")
    assert [(source.path.name, source.input_format) for source in corpus_sources(mixed)] == [("a", "txt"), ("b.jsonl", "jsonl")]
    saved = tmp_path / "saved"
    Dataset.from_dict({"text": ["x y ."]}).save_to_disk(str(saved))
    assert [(source.path, source.input_format) for source in corpus_sources(saved)] == [(saved, "dataset")]


def test_corpora_that_are_not_there_are_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match=r"the corpus directory .*empty holds no file"):
        corpus_sources(tmp_path / "empty")
    with pytest.raises(CorpusError, match=r"the corpus pattern .*news\.en-\* matches no file"):
        corpus_sources(str(tmp_path / "news.en-*"))
    with pytest.raises(CorpusError, match=r"input .*missing.txt does not exist"):
        corpus_sources(tmp_path / "missing.txt")


def test_a_bad_shard_is_named_with_its_line(tmp_path):
    shards = write_shards(tmp_path / "shards", LINES, 2)
    (shards / "news.en-00002-of-00002").write_bytes(b"fine .\nbad \xff byte\n")
    with pytest.raises(CorpusError, match=r"shards/news\.en-00002-of-00002 line 2: not valid UTF-8"):
        ELMoWordVocabulary.from_corpus(shards, "whitespace")
    with pytest.raises(CorpusError, match=r"shards/news\.en-00002-of-00002 line 2: not valid UTF-8"):
        load_sentences(shards, "whitespace", cache_dir=tmp_path / "cache")


def write_corpus(tmp_path, input_format: str, lines: list[str]):
    dataset = Dataset.from_dict({"text": lines})
    path = tmp_path / {"txt": "c.txt", "jsonl": "c.jsonl", "parquet": "c.parquet", "dataset": "saved", "shards": "shards"}[input_format]
    if input_format == "txt":
        path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    elif input_format == "shards":
        write_shards(path, lines, 4)
    else:
        {"jsonl": dataset.to_json, "parquet": dataset.to_parquet, "dataset": dataset.save_to_disk}[input_format](str(path))
    return path


@pytest.mark.parametrize("input_format", ["txt", "jsonl", "parquet", "dataset", "shards"])
def test_the_streamed_vocabulary_equals_the_in_memory_one(tmp_path, input_format):
    lines = TINYSHAKESPEARE.read_text(encoding="utf-8").splitlines()[:3000]
    path = write_corpus(tmp_path, input_format, lines)
    in_memory = ELMoWordVocabulary.from_sentences(
        load_sentences(path, "moses", cache_dir=tmp_path / "cache")["words"], min_count=2, max_size=500
    )
    streamed = ELMoWordVocabulary.from_corpus(path, "moses", min_count=2, max_size=500, progress=True)
    assert streamed == in_memory and streamed.counts == in_memory.counts and len(streamed) == 500


def test_the_progress_bar_counts_rows_and_words_and_is_quiet_off_a_terminal(capsys):
    with CorpusProgress("counting", total=3, enabled=True) as bar:  # pytest's stderr is no terminal
        bar.update(2, 7)
        bar.update(1, 0)
    assert bar.words == 7 and bar._bar.disable
    assert capsys.readouterr().err == ""
    assert CorpusProgress("counting", total=None, enabled=False)._bar.disable


@pytest.mark.skipif(not hasattr(__import__("os"), "openpty"), reason="needs a pseudo-terminal")
def test_on_a_terminal_the_bar_shows_rows_of_the_total_and_words(tmp_path, monkeypatch):
    import fcntl
    import io
    import os
    import select
    import struct
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 160, 0, 0))  # a terminal 160 columns wide
    terminal = io.TextIOWrapper(os.fdopen(slave, "wb", buffering=0), write_through=True)
    monkeypatch.setattr("sys.stderr", terminal)
    path = write_corpus(tmp_path, "shards", LINES * 400)
    ELMoWordVocabulary.from_corpus(path, "whitespace", progress=True)
    shown = b""
    while select.select([master], [], [], 0.2)[0]:
        shown += os.read(master, 1 << 16)
    terminal.close()
    os.close(master)
    last = [drawn for drawn in shown.decode().split("\r") if "counting" in drawn][-1]
    assert "counting the vocabulary: 100%" in last and "2400/2400" in last and "8,800 words" in last  # rows (empty lines too) of the total, words


def resident_kib_of(paths: set[str]) -> int:
    """Resident KiB of this process's mappings of ``paths`` (/proc/self/smaps)."""
    resident, inside = 0, False
    for line in open("/proc/self/smaps", encoding="utf-8", errors="replace"):
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:  # a mapping's header line
            inside = len(fields) == 6 and fields[5] in paths
        elif inside and fields[0] == "Rss:":
            resident += int(fields[1])
    return resident


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="Linux's /proc and madvise")
def test_reading_a_dataset_gives_back_the_pages_of_its_memory_mapped_cache(tmp_path):
    from pathlib import Path

    from elmo_hf.corpus.sentences import dataset_words, release_mapped_pages

    words = [[f"w{row % 997}", "the", f"x{row}", "and", "so", "on"] for row in range(60_000)]
    Dataset.from_dict({"words": words}).save_to_disk(str(tmp_path / "saved"))
    dataset = Dataset.load_from_disk(str(tmp_path / "saved"))
    mapped = {str(Path(cache["filename"]).resolve()) for cache in dataset.cache_files}
    assert sum(len(batch["words"]) for batch in dataset.iter(batch_size=1000)) == 60_000
    assert resident_kib_of(mapped) > 1000  # what a plain read leaves resident: the whole cache
    assert release_mapped_pages(mapped) > 0 and resident_kib_of(mapped) == 0
    assert list(dataset_words(dataset, "words")) == words  # the same rows, and the pages given back
    assert resident_kib_of(mapped) == 0
    assert dataset[59_999]["words"] == words[-1]  # the mapping still reads
