"""`elmo-hf embed` counts the words cut to the model's character slots: per shard and in the totals of the manifest, in
the summary, the same after a resume or a redone shard, and manifests written before the count existed still verify."""

from __future__ import annotations

import json

import pytest

from elmo_hf import ELMoTokenizer
from elmo_hf.corpus.readers import CorpusSource
from elmo_hf.embedding.embedder import ELMoEmbedder
from elmo_hf.embedding.driver import embed_corpus
from elmo_hf.embedding.manifest import verify_embedding_output

from ..helpers import random_model, tiny_config

SLOTS = 8  # 6 UTF-8 bytes: two Hangul syllables
LINES = ["대한민국 은 민주 공화국 이 다", "모든 국민 은 법 앞 에", "헌법재판소 는", "", "a bb ccc", "abcdefgh 국회의원"]
TRUNCATED = [2, 0, 1, 0, 0, 2]  # 대한민국 공화국 | - | 헌법재판소 | - | - | abcdefgh 국회의원


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("models") / "slots-8"
    random_model(tiny_config(max_characters_per_token=SLOTS)).save_pretrained(directory)
    ELMoTokenizer(max_characters_per_token=SLOTS, word_splitter="whitespace").save_pretrained(directory)
    return directory


def embed(model_dir, corpus, output, **options):
    embedder = ELMoEmbedder.from_pretrained(model_dir, token_cache_words=0)
    return embed_corpus(
        CorpusSource.open(corpus), embedder, output, model_name="slots-8", shard_size=2, progress=False, **options
    )


def test_truncated_words_are_counted_per_shard_and_survive_a_resume(model_dir, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"{line}\n" for line in LINES), encoding="utf-8")
    output = tmp_path / "out"
    summary = embed(model_dir, corpus, output)
    assert summary.truncated_words == 5
    assert "(19 words, 5 words cut to the model's 8 character slots)" in summary.describe()
    manifest_path = output / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    assert [shard["truncated_words"] for shard in manifest["shards"]] == [2, 1, 2]
    assert manifest["totals"]["truncated_words"] == 5

    # Interrupted after two shards: the resumed run counts the third again, and only once.
    manifest["shards"], manifest["complete"] = manifest["shards"][:2], False
    manifest_path.write_text(json.dumps(manifest))
    (output / "shard-00002.parquet").unlink()
    assert embed(model_dir, corpus, output, resume=True).truncated_words == 5
    # A damaged shard is redone with its count.
    (output / "shard-00000.parquet").write_bytes(b"damaged")
    resumed = embed(model_dir, corpus, output, resume=True)
    assert (resumed.truncated_words, resumed.redone_shards, resumed.already_complete) == (5, 1, True)
    assert "5 words cut to the model's 8 character slots" in resumed.describe()
    assert json.loads(manifest_path.read_text())["totals"]["truncated_words"] == 5

    # A manifest from before the count (same format version) still verifies and counts 0.
    manifest = json.loads(manifest_path.read_text())
    for shard in manifest["shards"]:
        del shard["truncated_words"]
    del manifest["totals"]["truncated_words"]
    manifest_path.write_text(json.dumps(manifest))
    assert verify_embedding_output(output) == []
    assert embed(model_dir, corpus, output, resume=True).truncated_words == 0
