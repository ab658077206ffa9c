"""`elmo-hf embed --engine ray` through a real two-node Ray cluster: two raylets of 1 CPU each on loopback, with
Ray's token authentication on, reached with --ray-address as on a real cluster. The vectors equal the datasets
engine's; two actors that take every CPU still finish (reading and writing reserve no CPU); a pool the cluster
cannot hold is refused, naming the numbers. A Ray that elmo-hf starts for the job runs its workers at niceness 0.

The cluster test is `slow` (the cluster, two actors and a driver process: about 90 s on the 2-core Zen 3): CI runs
it with the rest of `pytest -m slow` (`.ci/run`). The default run keeps the Ray engine's parts and a real local Ray
started for a job (its workers' priority).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from glob import glob

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from datasets import Dataset, load_dataset

from elmo_hf.embedding.ray_engine import (
    RAY_WORKER_NICENESS_VARIABLE, check_actor_pool_fits, ray_for_the_job, text_file_rows, vectors_to_arrow,
)
from elmo_hf_cli import main

# Ray reads these when it is imported, so they are set before: token authentication as Ray 2.60 does by default on a
# cluster, with a token of this test's own (every raylet and the driver inherit it), and every node bound to the
# loopback address.
os.environ.update(
    RAY_AUTH_MODE="token",
    RAY_AUTH_TOKEN=secrets.token_hex(32),
    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
    RAY_USAGE_STATS_ENABLED="0",
)
ray = pytest.importorskip("ray", reason="the Ray engine needs the `ray` extra (installed by the `test` extra)")


@pytest.fixture(scope="module")
def two_node_cluster():
    """Head and worker raylets, 1 CPU each, on 127.0.0.1."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    # Workers at niceness 0, as the guide tells users to start a cluster on nodes that run other work: at Ray's 15,
    # the two actors starved (pending after 5 minutes) when the test run had two busy processes beside it.
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv(RAY_WORKER_NICENESS_VARIABLE, "0")
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        cluster.add_node(num_cpus=1)
    try:
        assert cluster.address.startswith("127.0.0.1:"), cluster.address
        yield cluster.address
    finally:
        cluster.shutdown()


@pytest.mark.slow
def test_ray_engine_through_a_two_node_cluster_equals_the_datasets_engine(tmp_path, converted_fixture_dir, two_node_cluster, capsys):
    long_sentence = " ".join(["word"] * 30 + ["end", "."])
    texts = ["The bank raised rates .", "", "We sat on the river bank .", long_sentence] + [f"Sentence number {i} ." for i in range(60)]
    Dataset.from_dict({"id": list(range(len(texts))), "text": texts}).to_json(str(tmp_path / "corpus.jsonl"))
    common = [str(tmp_path / "corpus.jsonl"), "--model", str(converted_fixture_dir), "--max-window-words", "16", "--window-context", "4", "--no-progress"]
    ray_options = ["--engine", "ray", "--ray-address", two_node_cluster]

    assert main(["embed", *common, "--output", str(tmp_path / "datasets-engine")]) == 0
    # Two actors of 1 CPU take both nodes' CPUs: the job used to wait forever for a CPU to read with. A separate
    # process, so that a hang fails the test instead of stopping the test run.
    command = [sys.executable, "-m", "elmo_hf_cli", "embed", *common, "--output", str(tmp_path / "ray-engine"), *ray_options, "--ray-workers", "2"]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert f"embedded {len(texts)} sentences" in finished.stdout

    reference = load_dataset("parquet", data_files=sorted(glob(str(tmp_path / "datasets-engine" / "shard-*.parquet"))), split="train")
    ray_files = sorted(glob(str(tmp_path / "ray-engine" / "part-*.parquet")))
    ray_table = pa.concat_tables([pq.read_table(path) for path in ray_files])
    # Rows come back in input order, with the input's columns and the same words.
    assert ray_table["id"].to_pylist() == ray_table["input_row"].to_pylist() == list(range(len(texts)))
    assert ray_table["words"].to_pylist() == reference["words"][:]
    assert ray_table["num_words"].to_pylist() == reference["num_words"][:]
    ray_vectors = ray_table["elmo"].to_pylist()
    for index, expected in enumerate(reference.with_format("numpy")["elmo"][:]):
        got = np.asarray(ray_vectors[index], dtype=np.float32).reshape(expected.shape)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)

    # A text file: the datasets engine's lines (`\n` only; str.splitlines would make 19 rows of these 14) and its
    # input_row, empty lines included.
    text = b"".join(f"line {i} .".encode() + separator + b"\n" for i, separator in enumerate(
        [b"", b"\xe2\x80\xa8x", b"\xc2\x85x", b"\x0bx", b"\x0cx", b"\rx", b"", b"\r"] + [b""] * 6))
    (tmp_path / "lines.txt").write_bytes(b"\xef\xbb\xbf" + text.replace(b"line 6 .", b""))
    text_options = [str(tmp_path / "lines.txt"), "--model", str(converted_fixture_dir), "--no-progress"]
    assert main(["embed", *text_options, "--output", str(tmp_path / "text-datasets")]) == 0
    assert main(["embed", *text_options, "--output", str(tmp_path / "text-ray"), *ray_options]) == 0
    text_reference = load_dataset("parquet", data_files=sorted(glob(str(tmp_path / "text-datasets" / "shard-*.parquet"))), split="train")
    text_table = pa.concat_tables([pq.read_table(path) for path in sorted(glob(str(tmp_path / "text-ray" / "part-*.parquet")))])
    assert text_table["input_row"].to_pylist() == text_reference["input_row"][:] == list(range(14))
    assert text_table["text"].to_pylist() == text_reference["text"][:] and text_table["words"].to_pylist() == text_reference["words"][:]
    capsys.readouterr()

    # A second run refuses the non-empty output unless told to overwrite; a pool the cluster cannot hold is refused.
    assert main(["embed", *common, "--output", str(tmp_path / "ray-engine"), *ray_options]) == 2
    assert "pass --overwrite to replace it" in capsys.readouterr().err
    assert main(["embed", *common, "--output", str(tmp_path / "too-many"), *ray_options, "--ray-workers", "3"]) == 2
    error = capsys.readouterr().err
    assert "cannot hold --ray-workers 3 actors of 1 CPU" in error and "2 node(s) (1 CPU / 0 GPU, 1 CPU / 0 GPU) hold 2" in error
    assert not (tmp_path / "too-many").exists()


def test_a_ray_started_for_the_job_runs_its_workers_at_normal_priority(monkeypatch):
    """Ray's default niceness (15) starves the actors beside any other work; a Ray that elmo-hf starts uses 0.
    ``"local"``: a new local Ray even while the two-node cluster of this module runs (``ray.init()`` would join it)."""
    if ray.is_initialized():
        ray.shutdown()
    monkeypatch.delenv(RAY_WORKER_NICENESS_VARIABLE, raising=False)

    @ray.remote(num_cpus=0)
    class Niceness:
        def get(self):
            return os.nice(0)

    with ray_for_the_job(ray, "local"):
        assert ray.get(Niceness.remote().get.remote()) == 0
        assert RAY_WORKER_NICENESS_VARIABLE not in os.environ  # set only while ray.init ran
    assert not ray.is_initialized()


class RecordingRay:
    """``ray_for_the_job``'s view of Ray: records what ``init`` saw of the niceness variable, and each call."""

    def __init__(self, initialized=False, init_error=None):
        self.initialized, self.init_error, self.calls = initialized, init_error, []

    def is_initialized(self):
        return self.initialized

    def init(self, address, **options):
        self.calls.append(("init", address, os.environ.get(RAY_WORKER_NICENESS_VARIABLE)))
        if self.init_error:
            raise self.init_error
        self.initialized = True

    def shutdown(self):
        self.calls.append(("shutdown",))
        self.initialized = False


def test_ray_for_the_job_sets_niceness_only_for_a_ray_it_starts_and_keeps_the_users_choice(monkeypatch):
    monkeypatch.delenv(RAY_WORKER_NICENESS_VARIABLE, raising=False)
    fake = RecordingRay()
    with pytest.raises(KeyError):  # a failing job still disconnects
        with ray_for_the_job(fake, "HEAD:6379"):
            assert RAY_WORKER_NICENESS_VARIABLE not in os.environ
            raise KeyError("the job failed")
    assert fake.calls == [("init", "HEAD:6379", "0"), ("shutdown",)]

    already = RecordingRay(initialized=True)  # the caller's Ray: neither started nor shut down here
    with ray_for_the_job(already, None):
        pass
    assert already.calls == [] and already.initialized

    monkeypatch.setenv(RAY_WORKER_NICENESS_VARIABLE, "7")  # the user's choice wins and stays
    users = RecordingRay()
    with ray_for_the_job(users, None):
        pass
    assert users.calls == [("init", None, "7"), ("shutdown",)] and os.environ[RAY_WORKER_NICENESS_VARIABLE] == "7"

    monkeypatch.delenv(RAY_WORKER_NICENESS_VARIABLE)
    failing = RecordingRay(init_error=ConnectionError("no Ray at HEAD:6379"))
    with pytest.raises(ConnectionError):
        with ray_for_the_job(failing, "HEAD:6379"):
            pass
    assert failing.calls == [("init", "HEAD:6379", "0")] and RAY_WORKER_NICENESS_VARIABLE not in os.environ


def test_actor_pool_fits_per_node():
    one_cpu_nodes = [{"CPU": 1.0}, {"CPU": 1.0}]
    check_actor_pool_fits(one_cpu_nodes, 2, 1, 0)
    check_actor_pool_fits(one_cpu_nodes, 4, 0.5, 0)
    with pytest.raises(ValueError, match="hold 2"):
        check_actor_pool_fits(one_cpu_nodes, 3, 1, 0)
    with pytest.raises(ValueError, match="hold 0"):
        check_actor_pool_fits(one_cpu_nodes, 1, 2, 0)  # no node has 2 CPUs, though the cluster has
    with pytest.raises(ValueError, match="0 GPU each|1 GPU each"):
        check_actor_pool_fits([{"CPU": 8.0, "GPU": 1.0}], 2, 1, 1)


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


def test_text_file_rows_follow_the_datasets_engine(tmp_path):
    """Ray's text rows come from `text_file_rows`: the same lines and numbers as `read_lines` for line breaks of
    every kind, a byte order mark, a missing final line break and an empty file."""
    from elmo_hf.corpus.readers import read_lines

    for content in [b"", b"\n", b"a\nb", b"\xef\xbb\xbfa\r\n\r\nb\rc\xe2\x80\xa8d\x0be\x0cf\xc2\x85g\n", b"x\n\n\n"]:
        (tmp_path / "file.txt").write_bytes(content)
        expected = [{"text": line, "input_row": row} for row, line in read_lines(tmp_path / "file.txt")]
        assert text_file_rows({"bytes": content}) == expected, content


def test_every_format_is_read_as_the_datasets_engine_reads_it(tmp_path):
    """`file_table` (one Ray task per file) gives the rows and input_row numbers of the datasets engine's reader
    (`CorpusSource.rows`): blank CSV lines are rows, a byte order mark is no text, only `\\n` ends a text line."""
    from elmo_hf.corpus.readers import CorpusSource
    from elmo_hf.embedding.ray_engine import file_table

    Dataset.from_dict({"id": [3, 4], "text": ["a .", "b ."]}).to_parquet(str(tmp_path / "data.parquet"))
    files = {
        "data.txt": b"\xef\xbb\xbfone .\n\ntwo\xe2\x80\xa8three .\r\nlast",
        "data.jsonl": b'{"id": 1, "text": "x ."}\n{"id": 2, "text": "y ."}\n',
        "data.csv": b"\xef\xbb\xbfid,text\n1,hello .\n2,   \n\n3,NA\n",
        "data.parquet": (tmp_path / "data.parquet").read_bytes(),
    }
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
        input_format = name.rsplit(".", 1)[1]
        expected = [{**record, "input_row": row} for row, record in CorpusSource(tmp_path / name, input_format).rows()]
        assert file_table(pa.table({"bytes": [content]}), input_format).to_pylist() == expected, name
