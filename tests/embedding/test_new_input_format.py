"""Adding an input format is one class and one table row: a small tab-separated reader written here, registered
with `register_input_format`, is read by `elmo-hf embed` (the local engine, its checks before the model loads
included) and by the Ray engine, and gives the rows and vectors of a text file of the same sentences."""

from __future__ import annotations

from glob import glob

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from elmo_hf.corpus import CorpusReader, register_input_format
from elmo_hf.corpus.formats import INPUT_FORMATS
from elmo_hf.corpus.lines import read_lines
from elmo_hf_cli import main

SENTENCES = ["The bank raised rates .", "", "We sat on the river bank .", "A third sentence , longer than the others ."]


class TabbedReader(CorpusReader):
    """One row per line: an id, a tab, the sentence (no header)."""

    def rows(self, start=0):
        for row, line in read_lines(self.path, start):
            identifier, _, text = line.partition("\t")
            yield row, {"id": identifier, "text": text}

    def column_names(self, look_for=None):
        return ["id", "text"]

    @staticmethod
    def table_of_file(data):
        pairs = [line.partition("\t") for line in data.decode("utf-8").splitlines()]
        return pa.table({"id": [pair[0] for pair in pairs], "text": [pair[2] for pair in pairs]})


@pytest.fixture
def tabbed_format():
    register_input_format("tabbed", TabbedReader, "an id and a sentence per line", (".tab",))
    try:
        yield
    finally:
        INPUT_FORMATS.pop("tabbed")


def write_corpora(directory):
    (directory / "corpus.tab").write_text("".join(f"s{row}\t{text}\n" for row, text in enumerate(SENTENCES)), encoding="utf-8")
    (directory / "corpus.txt").write_text("".join(f"{text}\n" for text in SENTENCES), encoding="utf-8")


def output_table(directory, pattern: str) -> pa.Table:
    return pa.concat_tables([pq.read_table(path) for path in sorted(glob(str(directory / pattern)))])


def assert_same_sentences(tabbed: pa.Table, text: pa.Table, atol: float = 0) -> None:
    assert tabbed["id"].to_pylist() == [f"s{row}" for row in range(len(SENTENCES))]
    for column in ("input_row", "text", "words", "num_words"):
        assert tabbed[column].to_pylist() == text[column].to_pylist(), column
    for got, expected in zip(tabbed["elmo"].to_pylist(), text["elmo"].to_pylist()):
        np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(expected, np.float32), rtol=0, atol=atol)


def test_a_format_registered_in_one_row_is_embedded_as_its_text_would_be(tmp_path, converted_fixture_dir, tabbed_format, capsys):
    write_corpora(tmp_path)
    common = ["--model", str(converted_fixture_dir), "--no-progress", "--shard-size", "3"]
    assert main(["embed", str(tmp_path / "corpus.tab"), "--output", str(tmp_path / "tabbed"), *common]) == 0
    assert main(["embed", str(tmp_path / "corpus.txt"), "--output", str(tmp_path / "text"), *common]) == 0
    assert_same_sentences(output_table(tmp_path / "tabbed", "shard-*.parquet"), output_table(tmp_path / "text", "shard-*.parquet"))
    capsys.readouterr()

    # Its column names are checked before the model loads, as every format's; --input-format offers it.
    assert main(["embed", str(tmp_path / "corpus.tab"), "--output", str(tmp_path / "refused"), "--text-column", "sentence", *common]) == 2
    assert "has no column 'sentence'; its columns are ['id', 'text']" in capsys.readouterr().err
    (tmp_path / "corpus.data").write_bytes((tmp_path / "corpus.tab").read_bytes())
    assert main(["embed", str(tmp_path / "corpus.data"), "--input-format", "tabbed", "--output", str(tmp_path / "given"), *common]) == 0


@pytest.mark.slow
def test_the_ray_engine_reads_a_registered_format(tmp_path, converted_fixture_dir, tabbed_format):
    """A local Ray started for the job: the reader class travels to Ray's workers with the read tasks."""
    from elmo_hf.embedding.ray_engine import embed_with_ray

    write_corpora(tmp_path)
    common = ["--model", str(converted_fixture_dir), "--no-progress"]
    assert main(["embed", str(tmp_path / "corpus.txt"), "--output", str(tmp_path / "text"), *common]) == 0
    summary = embed_with_ray(
        str(tmp_path / "corpus.tab"), tmp_path / "ray", model_name=str(converted_fixture_dir), address="local"
    )
    assert summary.sentences == len(SENTENCES)
    assert_same_sentences(output_table(tmp_path / "ray", "part-*.parquet"), output_table(tmp_path / "text", "shard-*.parquet"), atol=1e-6)
