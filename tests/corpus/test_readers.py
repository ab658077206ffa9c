"""The one corpus reader (elmo_hf.corpus.readers): formats, line semantics, resuming at a row, row names."""

from __future__ import annotations

import pytest
from datasets import Dataset

from elmo_hf.corpus.readers import (
    JSON_COLUMNS_BYTES, CorpusError, CorpusSource, InvalidRowError, count_lines, read_lines, read_text_lines,
)

from .test_sentences import CONLLU_SAMPLE


def test_lines_end_at_newline_drop_carriage_returns_and_name_bad_bytes(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"one\r\ntwo\n\nbad \xff\nlast without newline")
    rows = list(read_lines(path))
    assert [row for row, _ in rows] == [0, 1, 2, 3, 4] and count_lines(path) == 5
    assert [line for _, line in rows if isinstance(line, str)] == ["one", "two", "", "last without newline"]
    assert isinstance(rows[3][1], InvalidRowError) and "byte 0xff at byte offset 4" in str(rows[3][1])
    assert [line for _, line in read_lines(path, start=4)] == ["last without newline"]
    with pytest.raises(ValueError, match=r"corpus.txt line 4 is not valid UTF-8"):
        list(read_text_lines(path))


@pytest.mark.parametrize("name", ["data.jsonl", "data.csv", "data.parquet", "saved"])
def test_structured_formats_stream_rows_from_any_start(tmp_path, name):
    rows = {"id": [1, 2, 3], "text": ["a .", "", "c ."]}
    path = tmp_path / name
    dataset = Dataset.from_dict(rows)
    {"data.jsonl": dataset.to_json, "data.csv": lambda p: dataset.to_csv(p, index=False), "data.parquet": dataset.to_parquet,
     "saved": dataset.save_to_disk}[name](str(path))
    source = CorpusSource.open(path)
    assert list(source.features()) == ["id", "text"] and source.default_columns == ("text", None)
    assert [record["text"] for _, record in source.rows()] == rows["text"]
    assert [(row, record["id"]) for row, record in source.rows(start=1)] == [(1, 2), (2, 3)]
    assert source.row_name(1) == f"{path} row 1"


def test_conllu_rows_are_sentences_with_words(tmp_path):
    path = tmp_path / "sample.conllu"
    path.write_text(CONLLU_SAMPLE, encoding="utf-8")
    source = CorpusSource.open(path)
    assert source.input_format == "conllu" and source.default_columns == (None, "words")
    assert list(source.features()) == ["sent_id", "words", "upos"]
    assert [record["words"] for _, record in source.rows(start=1)] == [["Yes"], ["No"]]
    assert source.row_name(0) == f"{path} sentence 1"
    path.write_text("1\tI\tI\tPRON\n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"cannot read .*sample.conllu as conllu.*expected 10 tab-separated"):
        list(CorpusSource.open(path).rows())


def test_formats_are_told_by_extension_or_refused(tmp_path):
    (tmp_path / "corpus.doc").write_text("x")
    with pytest.raises(CorpusError, match="cannot tell the format"):
        CorpusSource.open(tmp_path / "corpus.doc")
    with pytest.raises(CorpusError, match="does not exist"):
        CorpusSource.open(tmp_path / "missing.txt")
    with pytest.raises(CorpusError, match="must be a directory written by Dataset.save_to_disk"):
        CorpusSource.open(tmp_path / "corpus.doc", "dataset")
    assert CorpusSource.open(tmp_path / "corpus.doc", "txt").num_rows() == 1


def test_a_text_files_characters_are_counted_up_to_a_limit_and_other_formats_say_none(tmp_path):
    """Characters as the shards count them (lines without their ends), not bytes (3 a Hangul syllable), including
    one split between two reads of 1 MiB; read only until the limit is reached."""
    text = tmp_path / "corpus.txt"
    lines = ["한국어 문장", "line", "끝" * ((1 << 20) // 3)]  # the last line's syllables straddle the first MiB's end
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    source = CorpusSource.open(text)
    assert source.num_characters(at_most=10**9) == sum(map(len, lines)) == 6 + 4 + (1 << 20) // 3
    assert source.num_characters(at_most=100) == 100
    (tmp_path / "corpus.jsonl").write_text('{"text": "a"}\n', encoding="utf-8")
    assert CorpusSource.open(tmp_path / "corpus.jsonl").num_characters(at_most=100) is None


@pytest.mark.parametrize("name", ["data.txt", "data.jsonl", "data.csv", "data.parquet", "saved", "sample.conllu"])
def test_the_column_names_read_without_datasets_are_its_features(tmp_path, name):
    """One set of columns: those `column_names` reads cheaply (for the command line, before torch) are the ones
    `features` gets from `datasets`, in the same order."""
    path = tmp_path / name
    dataset = Dataset.from_dict({"id": [1, 2], "sentence": ["a .", "b ."], "label": ["x", "y"]})
    writers = {
        "data.txt": lambda path: path.write_text("a .\nb .\n"), "data.jsonl": lambda path: dataset.to_json(str(path)),
        "data.csv": lambda path: dataset.to_csv(str(path), index=False), "data.parquet": lambda path: dataset.to_parquet(str(path)),
        "saved": lambda path: dataset.save_to_disk(str(path)), "sample.conllu": lambda path: path.write_text(CONLLU_SAMPLE),
    }
    writers[name](path)
    source = CorpusSource.open(path)
    assert source.column_names() == list(source.features())
    source.check_column(list(source.features())[-1])
    with pytest.raises(CorpusError, match=rf"input {path} has no column 'nope'; its columns are \[.*\] \(choose one with --text-column"):
        source.check_column("nope")


def test_a_json_lines_column_is_looked_for_as_far_as_datasets_reads(tmp_path):
    """A key that only a later line has is a column (pyarrow unites the keys of the lines it reads); the search stops at
    the column looked for, and looks at least as far as `datasets` does."""
    import importlib

    json_builder = importlib.import_module("datasets.packaged_modules.json.json")
    assert JSON_COLUMNS_BYTES >= json_builder.JsonConfig.__dataclass_fields__["chunksize"].default
    path = tmp_path / "mixed.jsonl"
    path.write_text('{"id": 1}\n\nnot json\n{"id": 2, "text": "late ."}\n{"id": 3, "label": "z"}\n')
    source = CorpusSource.open(path)
    assert source.column_names() == ["id", "text", "label"]
    assert source.column_names(look_for="text") == ["id", "text"]
    source.check_column("text")
    with pytest.raises(CorpusError, match=r"has no column 'sentence'; its columns are \['id', 'text', 'label'\]"):
        source.check_column("sentence")
    far = tmp_path / "far.jsonl"
    line = '{"id": 1, "padding": "%s"}\n' % ("x" * 1000)
    far.write_text(line * (JSON_COLUMNS_BYTES // len(line) + 1) + '{"text": "too far ."}\n')
    assert CorpusSource.open(far).column_names() == ["id", "padding"]


def test_columns_that_cannot_be_read_refuse_nothing(tmp_path):
    """A file that is not what its extension says: no columns (None), and the reading of its rows says what is wrong."""
    for name, content in [("bad.parquet", b"not parquet"), ("bad.csv", b"\xff\xfe"), ("empty.csv", b"")]:
        (tmp_path / name).write_bytes(content)
        source = CorpusSource.open(tmp_path / name)
        assert source.column_names() is None
        source.check_column("text")
    (tmp_path / "splits").mkdir()
    (tmp_path / "splits" / "dataset_dict.json").write_text('{"splits": ["train"]}')
    assert CorpusSource.open(tmp_path / "splits").column_names() is None


def test_a_text_file_whose_lines_end_in_a_lone_carriage_return_is_refused_naming_it(tmp_path):
    """Issue 51, item 7: read by the \\n rule such a file was one row, silently; now refused, naming the file and the
    count, at ``CorpusSource.open`` (before any model loads) and in ``read_lines`` (every other reader)."""
    path = tmp_path / "mac.txt"
    path.write_bytes(b"one .\rtwo .\rthree .\r")
    message = rf"{path} ends its lines in a lone carriage return \(\\r, 3 of them, and no \\n\)"
    with pytest.raises(CorpusError, match=message):
        CorpusSource.open(path)
    with pytest.raises(CorpusError, match=message):
        list(read_lines(path))
    path.write_bytes(b"one .\r\ntwo .\r\n")  # Windows line endings are lines, as before
    assert [line for _, line in CorpusSource.open(path).rows()] == [{"text": "one ."}, {"text": "two ."}]


def test_nul_bytes_and_a_lone_carriage_return_inside_a_row_are_read_with_a_warning_naming_the_row(tmp_path, caplog):
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"fine .\nwith a \0 byte .\nsplit \r inside .\nagain \0 .\n")
    with caplog.at_level("WARNING", logger="elmo_hf.corpus.readers"):
        lines = [line for _, line in read_lines(path)]
    assert lines == ["fine .", "with a \0 byte .", "split \r inside .", "again \0 ."]
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 2, warnings  # the first row of each kind
    assert warnings[0].startswith(f"{path} row 1 (line 2) holds a NUL byte") and f"{path} row 2 (line 3) holds a carriage return" in warnings[1]
    caplog.clear()
    with caplog.at_level("WARNING", logger="elmo_hf.corpus.readers"):
        assert [line for _, line in read_lines(path, start=3)] == ["again \0 ."]
    assert [record.getMessage() for record in caplog.records] == [f"{path} row 3 (line 4) holds a NUL byte (\\0), which becomes part of its words: is it a text file? (only the first such row is named)"]


def test_a_line_longer_than_the_limit_is_an_invalid_row_naming_it_read_in_bounded_memory(tmp_path):
    """Issue 51, item 7: one 100 MB line ran 120 s and 1.5 GB and rising; now a line past ``MAX_LINE_BYTES`` is an
    ``InvalidRowError`` naming the limit (refused, or skipped with --skip-invalid), read past without being held."""
    import tracemalloc

    from elmo_hf.corpus.readers import MAX_LINE_BYTES

    path = tmp_path / "corpus.txt"
    at_the_limit = b"a " * (MAX_LINE_BYTES // 2)
    with open(path, "wb") as file:
        file.write(b"first .\n" + at_the_limit + b"\r\n")
        file.write(b"word " * (20 * MAX_LINE_BYTES // 5) + b"\n")  # 20 MiB
        file.write(b"last .")
    tracemalloc.start()
    try:
        rows = [(row, line if isinstance(line, InvalidRowError) else len(line)) for row, line in read_lines(path)]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [row for row, _ in rows] == [0, 1, 2, 3] and count_lines(path) == 4
    assert rows[0][1] == len("first .") and rows[1][1] == MAX_LINE_BYTES and rows[3][1] == len("last .")
    assert isinstance(rows[2][1], InvalidRowError)
    assert f"a line of {20 * MAX_LINE_BYTES + 1:,} bytes, longer than the {MAX_LINE_BYTES:,} a row may hold" in str(rows[2][1])
    assert peak < 12 * MAX_LINE_BYTES, peak  # bounded by the limit (about 7 MiB measured): the 20 MiB line never held whole


def test_a_json_lines_file_read_line_by_line_after_pyarrow_refused_it_skips_its_byte_order_mark(tmp_path):
    """pyarrow refuses the whole first block for one bad line (a lone surrogate escape), so the rows are parsed one by
    one from row 0 (``CorpusSource._json_lines``): the UTF-8 byte order mark opening the file is no part of row 0."""
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"text": "first ."}\n{"text": "bad \\ud800 ."}\n{"text": "last ."}\n')
    rows = list(CorpusSource.open(path).rows())
    assert [row for row, _ in rows] == [0, 1, 2]
    assert rows[0][1] == {"text": "first ."} and rows[2][1] == {"text": "last ."}
    assert isinstance(rows[1][1], InvalidRowError) and "lone surrogate" in str(rows[1][1])
