"""The table of input formats (elmo_hf.corpus.formats): every row's reader, the command line's choices and help read
from it, registration; and the TSV format that ships (format_readers.TsvReader)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from elmo_hf.corpus.format_readers import CorpusReader, TsvReader
from elmo_hf.corpus.formats import INPUT_FORMATS, format_of_extension, reader_class, register_input_format
from elmo_hf.corpus.readers import MAX_LINE_BYTES, CorpusError, CorpusSource, InvalidRowError, infer_input_format
from elmo_hf_cli import build_parser


def test_every_row_names_a_reader_and_extensions_tell_one_format_each():
    extensions = [extension for row in INPUT_FORMATS.values() for extension in row.extensions]
    assert len(extensions) == len(set(extensions))
    for name, row in INPUT_FORMATS.items():
        assert row.name == name and row.description
        reader = reader_class(name)
        assert issubclass(reader, CorpusReader) and reader.rows is not CorpusReader.rows, name
        assert all(format_of_extension(extension.upper()) == name for extension in row.extensions)
    with pytest.raises(ValueError, match=r"input format must be one of \['txt', .*\], got 'doc'"):
        reader_class("doc")


def test_the_command_line_offers_the_table_s_formats_with_their_descriptions():
    commands = build_parser()._subparsers._group_actions[0].choices
    embed_actions = {action.dest: action for action in commands["embed"]._actions}
    assert list(embed_actions["input_format"].choices) == list(INPUT_FORMATS)
    for help_text in (embed_actions["input_format"].help, commands["pretrain"].description):
        assert all(f"{row.name} ({row.description}" in help_text for row in INPUT_FORMATS.values()), help_text


def test_a_name_or_extension_registered_twice_is_refused():
    with pytest.raises(ValueError, match="'csv' is registered already"):
        register_input_format("csv", CorpusReader, "again")
    with pytest.raises(ValueError, match=r"extension '.tsv' tells 'tsv' already"):
        register_input_format("other", CorpusReader, "other", (".tsv",))
    with pytest.raises(ValueError, match="expected a lower-case extension with its dot"):
        register_input_format("other", CorpusReader, "other", ("tab",))
    assert "other" not in INPUT_FORMATS


def test_tsv_rows_are_lines_split_at_tabs_under_the_header_quotes_are_text(tmp_path):
    path = tmp_path / "corpus.tsv"
    path.write_bytes(b'\xef\xbb\xbfid\ttext\n1\tHe said "hi" .\r\n2\t\n3\ttoo\tmany\n4\tlast .')
    source = CorpusSource.open(path)
    assert infer_input_format(path) == "tsv" and source.default_columns == ("text", None)
    assert source.column_names() == ["id", "text"] == list(source.features()) and source.num_rows() == 4
    rows = list(source.rows())
    assert [row for row, _ in rows] == [0, 1, 2, 3]
    assert rows[0][1] == {"id": "1", "text": 'He said "hi" .'} and rows[1][1] == {"id": "2", "text": ""}
    assert isinstance(rows[2][1], InvalidRowError) and "has 3 tab-separated field(s) where the header names 2" in str(rows[2][1])
    assert [row for row, _ in source.rows(start=3)] == [3] and source.row_name(2) == f"{path} line 4"
    with pytest.raises(CorpusError, match=r"has no column 'sentence'; its columns are \['id', 'text'\]"):
        source.check_column("sentence")


def test_tsv_keeps_the_text_files_refusals_and_limits(tmp_path):
    """A TSV file is read by the text files' line reader: a lone \\r ending is refused when the input is opened, a
    line past MAX_LINE_BYTES is an invalid row, a header that is empty or names a column twice is refused."""
    path = tmp_path / "corpus.tsv"
    path.write_bytes(b"text\rone .\rtwo .\r")
    with pytest.raises(CorpusError, match=r"ends its lines in a lone carriage return"):
        CorpusSource.open(path)
    path.write_bytes(b"text\n" + b"a " * MAX_LINE_BYTES + b"\nlast .\n")
    rows = list(CorpusSource.open(path).rows())
    assert isinstance(rows[0][1], InvalidRowError) and "longer than the" in str(rows[0][1]) and rows[1][1] == {"text": "last ."}
    for content, message in [(b"", "has no header line"), (b"\n", "has no header line"), (b"a\tb\ta\n", r"names the column\(s\) \['a'\] more than once")]:
        path.write_bytes(content)
        with pytest.raises(CorpusError, match=message):
            CorpusSource.open(path)


def test_tsv_for_the_ray_engine_reads_the_same_rows(tmp_path):
    """`file_table`'s reading (one Ray task per whole file) gives the local reader's rows; a row of the wrong width
    stops it naming the line."""
    from elmo_hf.embedding.ray_engine import file_table

    content = b"\xef\xbb\xbfid\ttext\n1\tone .\r\n2\t\n3\t\"quoted\" ."
    (tmp_path / "corpus.tsv").write_bytes(content)
    expected = [{**record, "input_row": row} for row, record in CorpusSource.open(tmp_path / "corpus.tsv").rows()]
    assert file_table(pa.table({"bytes": [content]}), "tsv").to_pylist() == expected
    with pytest.raises(ValueError, match="TSV line 3 has 1 tab-separated field"):
        TsvReader.table_of_file(b"id\ttext\n1\tone\nbroken\n")


def test_a_row_of_a_format_no_longer_registered_is_named_by_its_number(tmp_path):
    """A search names the rows of an output embedded earlier, perhaps from a format registered only then."""
    assert CorpusSource(tmp_path / "old.tab", "tabbed").row_name(3) == f"{tmp_path / 'old.tab'} row 3"
