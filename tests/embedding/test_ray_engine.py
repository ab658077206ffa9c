"""`elmo-hf embed --engine ray` on a local Ray instance (2 CPUs) gives the vectors of the datasets engine.

Runs in the default test run (one Ray start, about 20-30 s on 2 cores), so CI exercises the Ray path every run.
"""

from __future__ import annotations

from glob import glob

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Dataset, load_dataset

from elmo_hf_cli import main
from elmo_hf.embedding.ray_engine import vectors_to_arrow

ray = pytest.importorskip("ray", reason="the Ray engine needs the `ray` extra (installed by the `test` extra)")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_engine_equals_datasets_engine(tmp_path, converted_fixture_dir, local_ray, capsys):
    long_sentence = " ".join(["word"] * 30 + ["end", "."])
    texts = ["The bank raised rates .", "", "We sat on the river bank .", long_sentence] + [f"Sentence number {i} ." for i in range(60)]
    Dataset.from_dict({"id": list(range(len(texts))), "text": texts}).to_json(str(tmp_path / "corpus.jsonl"))
    common = [str(tmp_path / "corpus.jsonl"), "--model", str(converted_fixture_dir), "--max-window-words", "16", "--window-context", "4", "--no-progress"]

    assert main(["embed", *common, "--output", str(tmp_path / "datasets-engine")]) == 0
    assert main(["embed", *common, "--output", str(tmp_path / "ray-engine"), "--engine", "ray", "--ray-workers", "1"]) == 0
    assert f"embedded {len(texts)} sentences" in capsys.readouterr().out

    reference = load_dataset("parquet", data_files=sorted(glob(str(tmp_path / "datasets-engine" / "shard-*.parquet"))), split="train")
    ray_files = sorted(glob(str(tmp_path / "ray-engine" / "part-*.parquet")))
    ray_table = pa.concat_tables([pq.read_table(path) for path in ray_files])
    # Rows come back in input order, with the input's columns and the same words.
    assert ray_table["id"].to_pylist() == list(range(len(texts)))
    assert ray_table["words"].to_pylist() == reference["words"][:]
    assert ray_table["num_words"].to_pylist() == reference["num_words"][:]
    ray_vectors = ray_table["elmo"].to_pylist()
    for index, expected in enumerate(reference.with_format("numpy")["elmo"][:]):
        got = np.asarray(ray_vectors[index], dtype=np.float32).reshape(expected.shape)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)

    # A second run refuses the non-empty output unless told to overwrite.
    assert main(["embed", *common, "--output", str(tmp_path / "ray-engine"), "--engine", "ray"]) == 2
    assert "pass --overwrite" in capsys.readouterr().err


def test_vectors_to_arrow_layouts():
    per_word = [np.arange(6, dtype=np.float32).reshape(3, 2), np.zeros((0, 2), np.float32)]
    column = vectors_to_arrow(per_word, (2,), pooled=False, dtype="float32")
    assert column.to_pylist() == [[[0, 1], [2, 3], [4, 5]], []]
    assert column.type == pa.list_(pa.list_(pa.float32(), 2))
    all_layers = [np.arange(12, dtype=np.float16).reshape(2, 3, 2)]
    assert vectors_to_arrow(all_layers, (3, 2), pooled=False, dtype="float16").type == pa.list_(pa.list_(pa.list_(pa.float16(), 2), 3))
    pooled = [np.ones(4, np.float32), np.zeros(4, np.float32)]
    assert vectors_to_arrow(pooled, (4,), pooled=True, dtype="float32").to_pylist() == [[1, 1, 1, 1], [0, 0, 0, 0]]
    # An empty batch keeps the column type, so blocks concatenate.
    assert vectors_to_arrow([], (3, 2), pooled=True, dtype="float16").type == pa.list_(pa.list_(pa.float16(), 2), 3)
    assert vectors_to_arrow([], (4,), pooled=False, dtype="float32").type == pa.list_(pa.list_(pa.float32(), 4))
