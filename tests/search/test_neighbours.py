"""Contextual nearest neighbours (elmo_hf.search): the index over an embed output finds a corpus sentence's own word
first at cosine 1, maps ids back to the right sentences (checked against brute force), survives save / move / load,
IVF and IVF-PQ build and search, static neighbours are the token layer's, and bad input is refused with clear
errors."""

from __future__ import annotations

import json
import shutil
import sys
from glob import glob
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import load_dataset

from elmo_hf.corpus.readers import CorpusSource
from elmo_hf.embedding.embedder import ELMoEmbedder
from elmo_hf.embedding.driver import embed_corpus
from elmo_hf.search import ContextualIndex, IndexInputError, QueryError, build_index, static_neighbours
from elmo_hf.search.index import import_faiss
from elmo_hf.storage import OutputDirectoryError
from elmo_hf.tokenization_elmo import ELMoTokenizer
from elmo_hf_cli import main

from ..helpers import random_model, tiny_config, torch_threads

faiss = import_faiss()  # in the test extra; missing, it fails naming elmo-hf[search]

CORPUS = [
    "We went to see the play at the theatre last night .",
    "The children want to play football in the park .",
    "She wrote a play about the war .",
    "Let us play a game of chess after dinner .",
    "The actors rehearsed the new play for three weeks .",
    "They play music in the church every Sunday .",
    "",
    "The bank raised its interest rates again .",
    "We sat on the bank of the river and watched the boats .",
    "He took the money to the bank before noon .",
    "The river flooded the old town in spring .",
    "A game of football lasts ninety minutes .",
    "The theatre was full for the opening night .",
    "Rates fell sharply after the announcement .",
    "She plays the piano better than her brother .",
    "Our neighbours play loud music at night .",
    "The critics praised the play and its actors .",
    "He sat quietly on the old wooden boat .",
    "Chess is a game for two players .",
    "The boats went down the river to the sea .",
]
PLAY_LINES = [number for number, line in enumerate(CORPUS) if "play" in line.split()]
WORDS = sum(len(line.split()) for line in CORPUS)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """One thread for torch and FAISS: tiny models gain nothing from two, and on a busy 2-core machine FAISS's
    OpenMP threads spin (an IVF-PQ build took 0.6 s instead of 0.03 s)."""
    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    with torch_threads(1):
        yield
    faiss.omp_set_num_threads(previous)


def embed(directory: Path, model_dir: Path, lines: list[str], **options) -> Path:
    corpus = directory / "corpus.txt"
    corpus.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    embedder = ELMoEmbedder.from_pretrained(str(model_dir), **options)
    embed_corpus(CorpusSource.open(corpus), embedder, directory / "embedded", model_name=str(model_dir), shard_size=6, progress=False)
    return directory / "embedded"


@pytest.fixture(scope="module")
def embed_dir(tmp_path_factory, converted_fixture_dir) -> Path:
    return embed(tmp_path_factory.mktemp("neighbours"), converted_fixture_dir, CORPUS)


@pytest.fixture(scope="module")
def index_dir(embed_dir, tmp_path_factory) -> Path:
    index_dir = tmp_path_factory.mktemp("index") / "play-index"
    summary = build_index(embed_dir, index_dir, progress=False)
    assert (summary.sentences, summary.words, summary.dim) == (len(CORPUS), WORDS, 32)
    return index_dir


@pytest.fixture(scope="module")
def index(index_dir) -> ContextualIndex:
    return ContextualIndex.load(index_dir)


def all_vectors(embed_dir: Path) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Every word vector of the embed output, normalised, in corpus order, and its (input row, position)."""
    shards = load_dataset("parquet", data_files=sorted(glob(str(embed_dir / "shard-*.parquet"))), split="train").with_format("numpy")
    vectors = np.concatenate([row for row in shards["elmo"] if len(row)])
    places = [(int(row), position) for row, count in zip(shards["input_row"], shards["num_words"]) for position in range(count)]
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True), places


def test_a_corpus_sentence_finds_its_own_word_first_at_distance_0(index):
    for line in PLAY_LINES:
        for sentence in (CORPUS[line], CORPUS[line].split()):  # raw text, and a list of words
            result = index.query(sentence, "play", k=3)
            first = result.neighbours[0]
            assert (first.input_row, first.position, first.word) == (line, CORPUS[line].split().index("play"), "play")
            assert first.score == pytest.approx(1.0, abs=1e-5) and first.distance == pytest.approx(0.0, abs=1e-5)
            assert first.sentence == CORPUS[line] and first.where == f"corpus.txt line {line + 1}"
            assert result.representation == "scalar mix 0" and result.index_kind == "flat"
    last_word = index.query(CORPUS[-1], position=len(CORPUS[-1].split()) - 1, k=1).neighbours[0]
    assert (last_word.input_row, last_word.word, last_word.score) == (len(CORPUS) - 1, ".", pytest.approx(1.0, abs=1e-5))


def test_the_same_word_in_a_near_identical_context_ranks_first(index):
    result = index.query("We went to see the play at the theatre last week .", "play", k=5)
    assert (result.neighbours[0].input_row, result.neighbours[0].word) == (0, "play")
    assert result.neighbours[0].score > 0.99


def test_results_equal_brute_force_over_the_embed_output(index, embed_dir):
    vectors, places = all_vectors(embed_dir)
    query = "Our friends play chess at night ."
    vector = index.embedder.embed_words([query.split()])[0][2]
    scores = vectors @ (vector / np.linalg.norm(vector))
    expected = [places[i] for i in np.argsort(-scores, kind="stable")[:8]]
    result = index.query(query, "play", k=8)
    assert [(n.input_row, n.position) for n in result.neighbours] == expected
    np.testing.assert_allclose([n.score for n in result.neighbours], np.sort(scores)[::-1][:8], atol=1e-5)
    for neighbour in result.neighbours:
        assert neighbour.words == tuple(CORPUS[neighbour.input_row].split())
        assert neighbour.word == neighbour.words[neighbour.position]

    same_word = index.query(query, "play", k=50, same_word=True)
    assert [n.input_row for n in same_word.neighbours] != [] and {n.word for n in same_word.neighbours} == {"play"}
    assert sorted(n.input_row for n in same_word.neighbours) == PLAY_LINES  # every occurrence, none twice
    assert "occurrences of 'play'" in same_word.describe() and "[play]" in same_word.describe()
    assert index.query(query, "play", k=3, same_word=True).neighbours == same_word.neighbours[:3]


def test_saved_index_loads_anywhere_with_identical_results(index, index_dir, embed_dir, tmp_path):
    expected = index.query(CORPUS[2], "play", k=10, static_k=5)
    moved_index = tmp_path / "moved-index"
    shutil.copytree(index_dir, moved_index)
    moved_embeddings = tmp_path / "moved-embeddings"
    shutil.copytree(embed_dir, moved_embeddings)
    for loaded in (ContextualIndex.load(index_dir), ContextualIndex.load(moved_index, embeddings=moved_embeddings, verify=True)):
        got = loaded.query(CORPUS[2], "play", k=10, static_k=5)
        assert [(n.input_row, n.position, n.score) for n in got.neighbours] == [(n.input_row, n.position, n.score) for n in expected.neighbours]
        assert got.static_neighbours == expected.static_neighbours
    assert json.loads(json.dumps(expected.to_json()))["neighbours"][0]["sentence"] == CORPUS[2]


@pytest.mark.parametrize("kind, options", [("ivf", {"nlist": 4}), ("ivfpq", {"nlist": 2, "pq_subquantizers": 8, "pq_bits": 4})])
def test_ivf_indexes_train_on_a_sample_and_search(index, embed_dir, tmp_path, kind, options):
    summary = build_index(embed_dir, tmp_path / kind, kind=kind, progress=False, **options)
    assert summary.kind == kind
    loaded = ContextualIndex.load(tmp_path / kind, model=index.embedder.model)
    record = loaded.record["index"]
    assert record["nlist"] == options["nlist"] and record["train_size"] == summary.words and record["nprobe"] == 1
    exhaustive = loaded.query(CORPUS[4], "play", k=5, nprobe=options["nlist"])
    assert len(exhaustive.neighbours) == 5 and exhaustive.index_kind == kind
    if kind == "ivf":  # exact scores: with every cluster scanned it is the flat index
        flat = index.query(CORPUS[4], "play", k=5)
        assert [(n.index_id, n.score) for n in exhaustive.neighbours] == [(n.index_id, pytest.approx(n.score, abs=1e-6)) for n in flat.neighbours]
        first = loaded.query(CORPUS[4], "play", k=1).neighbours[0]  # nprobe 1: its own cluster holds it
        assert (first.input_row, first.score) == (4, pytest.approx(1.0, abs=1e-5))
    else:  # compressed: approximate scores, the occurrence itself among the best
        assert 4 in [n.input_row for n in loaded.query(CORPUS[4], "play", k=5, same_word=True).neighbours[:3]]
    # Same-word queries scan every cluster (the recorded nprobe is 1): no occurrence in another cluster is missed.
    assert sorted(n.input_row for n in loaded.query(CORPUS[4], "play", k=50, same_word=True).neighbours) == PLAY_LINES


def test_a_model_with_its_own_character_vocabulary_is_queried_with_its_own_tokenizer(tmp_path):
    """An ELMoForManyLangs conversion: Unicode characters and <bos>/<eos> rows of its own (not the byte scheme)."""
    from elmo_hf.conversion.convert_elmoformanylangs import convert_elmoformanylangs

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "elmoformanylangs" / "chars-only"
    model_dir = tmp_path / "model"
    convert_elmoformanylangs(fixture, model_dir)
    embedded = embed(tmp_path, model_dir, CORPUS[:6])
    build_index(embedded, tmp_path / "index", progress=False)
    result = ContextualIndex.load(tmp_path / "index").query(CORPUS[2], "play", k=1)
    (first,) = result.neighbours
    assert (first.input_row, first.position, first.score) == (2, 3, pytest.approx(1.0, abs=1e-5))


def test_static_neighbours_are_the_token_layer_cosines(index, converted_fixture_dir):
    model = index.embedder.model
    tokenizer = ELMoTokenizer(max_characters_per_token=model.config.max_characters_per_token)
    vocabulary = ["play", "plays", "played", "xylophone", "bank", "."]
    neighbours = static_neighbours(model, tokenizer, "play", vocabulary, k=10)
    assert [n.word for n in neighbours if n.word == "play"] == [] and len(neighbours) == 5
    with torch.inference_mode():
        ids, mask = tokenizer.batch_character_ids([[word] for word in ["play", *vocabulary]])
        tokens = model.token_layer(torch.from_numpy(ids), torch.from_numpy(mask))[0][:, 0]
        expected = torch.cosine_similarity(tokens[:1], tokens[1:], dim=-1)
    by_word = dict(zip(vocabulary, expected.tolist()))
    assert [n.score for n in neighbours] == sorted((n.score for n in neighbours), reverse=True)
    for neighbour in neighbours:
        assert neighbour.score == pytest.approx(by_word[neighbour.word], abs=1e-5)
    corpus_static = index.static_neighbours("play", 4)
    assert len(corpus_static) == 4 and "play" not in [n.word for n in corpus_static]
    assert {n.word for n in corpus_static} <= {word for line in CORPUS for word in line.split()}


def test_bad_queries_are_refused_naming_the_sentence(index):
    with pytest.raises(QueryError, match=r"the word 'Play' is not in the sentence 'We went .*\(it has 'play': words are matched exactly\)"):
        index.query(CORPUS[0], "Play")
    with pytest.raises(QueryError, match=r"the word 'drama' is not in the sentence .*its words are \['We', 'went'"):
        index.query(CORPUS[0], "drama")
    with pytest.raises(QueryError, match=r"position 12 is out of range: the sentence 'We went .*' has 12 words \(positions 0 to 11\)"):
        index.query(CORPUS[0], position=12)
    with pytest.raises(QueryError, match="word 0 of the sentence .* is 'We', not 'play'"):
        index.query(CORPUS[0], "play", position=0)
    with pytest.raises(QueryError, match="name the query word"):
        index.query(CORPUS[0])
    with pytest.raises(QueryError, match="has no words"):
        index.query("   ", position=0)
    with pytest.raises(QueryError, match=r"a query vector of shape \(16,\) .* holds 32-dimensional vectors"):
        index.search_vector(np.zeros(16, np.float32))


def test_a_model_of_another_size_or_other_weights_is_refused(index_dir):
    with pytest.raises(IndexInputError, match="the model gives 16-dimensional vectors, but index .* holds 32-dimensional ones"):
        ContextualIndex.load(index_dir, model=random_model()).query(CORPUS[0], "play")
    with pytest.raises(IndexInputError, match="the model has other weights than .*elmo-fixture, which embedded the corpus"):
        ContextualIndex.load(index_dir, model=random_model(tiny_config(projection_dim=16))).query(CORPUS[0], "play")


def test_inputs_without_per_word_vectors_are_refused(tmp_path, converted_fixture_dir, embed_dir, index_dir):
    (tmp_path / "empty").mkdir()
    with pytest.raises(IndexInputError, match="empty is not an elmo-hf embed output with vectors .*no elmo-hf ownership marker"):
        build_index(tmp_path / "empty", tmp_path / "out", progress=False)
    with pytest.raises(IndexInputError, match="is not an elmo-hf embed output with vectors .*of kind 'neighbours-index'"):
        build_index(index_dir, tmp_path / "out", progress=False)
    with pytest.raises(IndexInputError, match="missing is not a directory"):
        build_index(tmp_path / "missing", tmp_path / "out", progress=False)
    pooled = embed(tmp_path, converted_fixture_dir, CORPUS[:3], pooling="mean")
    with pytest.raises(IndexInputError, match=f"embed output {pooled} holds one pooled vector per sentence .*--pooling mean"):
        build_index(pooled, tmp_path / "out", progress=False)
    with pytest.raises(IndexInputError, match="is not an elmo-hf neighbours index .*it is an embed output"):
        ContextualIndex.load(embed_dir)
    assert not (tmp_path / "out").exists()


def test_every_layer_output_indexes_the_chosen_layer(tmp_path, converted_fixture_dir):
    every_layer = embed(tmp_path, converted_fixture_dir, CORPUS[:6], representation="all")
    with pytest.raises(IndexInputError, match=r"holds every layer \(--representation all\): choose the one to index with layer="):
        build_index(every_layer, tmp_path / "index", progress=False)
    build_index(every_layer, tmp_path / "index", layer=2, progress=False)
    result = ContextualIndex.load(tmp_path / "index").query(CORPUS[1], "play", k=1)
    assert result.representation == "layer 2" and result.neighbours[0].input_row == 1
    assert result.neighbours[0].score == pytest.approx(1.0, abs=1e-5)


def test_an_index_of_an_embed_output_that_changed_since_is_refused(tmp_path, converted_fixture_dir):
    changed = embed(tmp_path, converted_fixture_dir, CORPUS[:8])
    build_index(changed, tmp_path / "index", progress=False)
    shard = changed / "shard-00001.parquet"
    damaged = bytearray(shard.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF  # same size, other bytes: the hashes see it (a quick load may not)
    shard.write_bytes(bytes(damaged))
    with pytest.raises(IndexInputError, match="shard-00001.parquet has another sha256 than the manifest records"):
        ContextualIndex.load(tmp_path / "index", verify=True)

    embedder = ELMoEmbedder.from_pretrained(str(converted_fixture_dir))
    (tmp_path / "corpus.txt").write_text("Another corpus entirely .\n")
    embed_corpus(CorpusSource.open(tmp_path / "corpus.txt"), embedder, changed, model_name="x", overwrite=True, progress=False)
    with pytest.raises(IndexInputError, match=f"the embed output {changed} has changed since index .* was built from it .*--overwrite"):
        ContextualIndex.load(tmp_path / "index")
    shutil.rmtree(changed)
    with pytest.raises(IndexInputError, match="holds no elmo-hf embed output .*pass where it is now"):
        ContextualIndex.load(tmp_path / "index")


def test_index_directory_follows_the_output_policy(tmp_path, embed_dir, index_dir):
    stranger = tmp_path / "notes"
    stranger.mkdir()
    (stranger / "keep.txt").write_text("mine")
    with pytest.raises(OutputDirectoryError, match="already exists; pass --overwrite"):
        build_index(embed_dir, stranger, progress=False)
    with pytest.raises(OutputDirectoryError, match="not an elmo-hf neighbours index"):
        build_index(embed_dir, stranger, overwrite=True, progress=False)
    assert (stranger / "keep.txt").read_text() == "mine"
    with pytest.raises(IndexInputError, match="cannot be written inside the embed output"):
        build_index(embed_dir, embed_dir / "index", progress=False)
    copy = tmp_path / "copy"
    shutil.copytree(index_dir, copy)
    build_index(embed_dir, copy, kind="ivf", nlist=2, overwrite=True, progress=False)
    assert json.loads((copy / "index.json").read_text())["index"]["kind"] == "ivf"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["copy", "notes"]  # no staging or lock left


def test_missing_faiss_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(ImportError, match=r"pip install 'elmo-hf\[search\]'"):
        import_faiss()


def test_cli_builds_and_queries(tmp_path, embed_dir, capsys):
    assert main(["neighbours", "build", str(embed_dir), "--output", str(tmp_path / "index"), "--no-progress"]) == 0
    assert f"indexed {WORDS} words of {len(CORPUS)} sentences" in capsys.readouterr().out
    query = ["neighbours", "query", str(tmp_path / "index"), "--sentence", CORPUS[0], "--sentence", CORPUS[1], "--word", "play", "-k", "2"]
    assert main([*query, "--static", "3"]) == 0
    output = capsys.readouterr().out
    assert "query: We went to see the [play] at the theatre last night ." in output
    words = " ".join(output.split())  # columns are padded
    assert "1. 1.0000 corpus.txt line 1 We went to see the [play] at the theatre last night ." in words
    assert "1. 1.0000 corpus.txt line 2 The children want to [play] football in the park ." in words
    assert output.count("static neighbours of 'play' (token layer, no context): ") == 2
    assert main([*query, "--same-word", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert [result["neighbours"][0]["input_row"] for result in results] == [0, 1]
    assert main(["neighbours", "query", str(tmp_path / "index"), "--sentence", "No such word here .", "--word", "play"]) == 2
    assert "error: the word 'play' is not in the sentence 'No such word here .'" in capsys.readouterr().err
    assert main(["neighbours", "build", str(embed_dir), "--output", str(tmp_path / "ivf"), "--index", "ivf", "--nlist", "500", "--no-progress"]) == 2
    assert f"needs at least 500 training vectors, and the corpus has {WORDS}" in capsys.readouterr().err


def test_an_int8_embed_output_is_queried_in_int8(tmp_path, converted_fixture_dir):
    """The index records the embed run's compute dtype and embeds queries in it; an int8 vector depends slightly on
    the rest of its batch, so a corpus sentence finds its own word first at a cosine just below 1."""
    embed_dir = embed(tmp_path, converted_fixture_dir, CORPUS, compute_dtype="int8")
    build_index(embed_dir, tmp_path / "index", progress=False)
    index = ContextualIndex.load(tmp_path / "index")
    assert index.embedder.compute_dtype == "int8" and index.embedder.model.encoder.int8_matmuls
    line = PLAY_LINES[0]
    first = index.query(CORPUS[line], "play", k=3).neighbours[0]
    assert (first.input_row, first.word) == (line, "play") and first.score > 0.999
