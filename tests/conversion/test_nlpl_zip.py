"""`elmo-hf convert --zip`: NLPL vector repository archives converted without unzipping (their vocab.txt kept, where
the embedder pre-fills its token cache from it), ambiguous or broken archives refused, the extraction always removed."""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
import zipfile
from types import SimpleNamespace

import numpy as np
import pytest
from safetensors.numpy import load_file

from elmo_hf.conversion import ConversionError
from elmo_hf.conversion.nlpl_zip import convert_nlpl_zip, extracted_archive
from elmo_hf.embedding.embedder import ELMoEmbedder, embed_texts
from elmo_hf.embedding.loading import model_vocabulary_words
from elmo_hf_cli import main

from ..helpers import tiny_options, write_random_original_model


@pytest.fixture
def extraction_dir(tmp_path, monkeypatch):
    """Where the archives are extracted: beside the output (``tmp_path / "out"``), in ``tmp_path``. Python's
    temporary directory is moved to ``tmp_path / "system-tmp"`` to see that it is not used."""
    (tmp_path / "system-tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "system-tmp"))
    return tmp_path


def nothing_extracted_stays(directory) -> bool:
    return not list(directory.glob(".elmo-hf-zip-*")) and not any((directory / "system-tmp").iterdir())


def write_zip(path, members: dict[str, bytes]):
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return path


def fixture_members(fixture_dir, folder: str = "", vocabulary_name: str = "vocab.txt") -> dict[str, bytes]:
    """The AllenNLP fixture laid out as an NLPL entry: options.json, model.hdf5, the vocabulary, meta.json, README."""
    vocabulary = (fixture_dir / "vocab_test.txt").read_bytes()
    return {
        f"{folder}meta.json": json.dumps({"id": 999, "algorithm": {"name": "ELMo"}}).encode(),
        f"{folder}README": b"An ELMo model.\n",
        f"{folder}options.json": (fixture_dir / "options.json").read_bytes(),
        f"{folder}model.hdf5": (fixture_dir / "lm_weights.hdf5").read_bytes(),
        f"{folder}{vocabulary_name}": gzip.compress(vocabulary) if vocabulary_name.endswith(".gz") else vocabulary,
    }


@pytest.mark.parametrize("folder, vocabulary_name", [("", "vocab.txt"), ("999/", "vocab.txt.gz")])
def test_cli_converts_an_archive_with_its_vocabulary(
    allennlp_fixture_dir, converted_fixture_dir, extraction_dir, tmp_path, capsys, folder, vocabulary_name
):
    archive = write_zip(tmp_path / "999.zip", fixture_members(allennlp_fixture_dir, folder, vocabulary_name))
    assert main(["convert", "--zip", str(archive), "--output", str(tmp_path / "out")]) == 0
    out = tmp_path / "out"
    assert "vocab.txt kept from the archive" in capsys.readouterr().out
    assert (out / "vocab.txt").read_bytes() == (allennlp_fixture_dir / "vocab_test.txt").read_bytes()
    converted, direct = load_file(out / "model.safetensors"), load_file(converted_fixture_dir / "model.safetensors")
    assert converted.keys() == direct.keys() and all(np.array_equal(converted[name], direct[name]) for name in direct)
    card = (out / "README.md").read_text()
    assert "in `999.zip` (sha256 " in card and "elmo-hf convert --zip 999.zip --output out" in card
    assert nothing_extracted_stays(extraction_dir)


def test_the_archive_vocabulary_pre_fills_the_token_cache_without_changing_vectors(allennlp_fixture_dir, extraction_dir, tmp_path):
    convert_nlpl_zip(write_zip(tmp_path / "999.zip", fixture_members(allennlp_fixture_dir)), tmp_path / "out")
    words = model_vocabulary_words(tmp_path / "out")
    assert words == (allennlp_fixture_dir / "vocab_test.txt").read_text().split() and len(words) == 458
    assert model_vocabulary_words(tmp_path / "out", max_words=5) == words[:5]
    prefilled = ELMoEmbedder.from_pretrained(tmp_path / "out", prefill_token_cache=True)
    assert len(prefilled.model.char_embeddings.token_embedding_cache) == len({*words, "<S>", "</S>"})
    # On the CPU nothing is computed up front by default (the cache keeps the words met): only <S> and </S>.
    assert len(ELMoEmbedder.from_pretrained(tmp_path / "out").model.char_embeddings.token_embedding_cache) == 2
    plain = ELMoEmbedder.from_pretrained(tmp_path / "out", token_cache_words=0)
    texts = ["The bank raised its rates .", "An unseen wordzzz here ."]
    for got, expected in zip(embed_texts(prefilled, texts), embed_texts(plain, texts)):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"options.json": None}, r"has no options file, expected options\.json .*it holds \['meta\.json', 'README', 'model\.hdf5', 'vocab\.txt'\]"),
        ({"model.hdf5": None}, r"has no weight file, expected model\.hdf5"),
        ({"other/model.hdf5": b"x"}, r"holds 2 weight files \['model\.hdf5', 'other/model\.hdf5'\]: an archive of one ELMo"),
        ({"elmo_options.json": b"{}"}, r"holds 2 options files \['options\.json', 'elmo_options\.json'\]"),
        ({"vocab.txt.gz": gzip.compress(b"a\n")}, r"holds 2 vocabularies \['vocab\.txt', 'vocab\.txt\.gz'\]"),
        ({"vocab.txt": b"<S>\n</S>\n\xff\xfe\n"}, r"vocab\.txt line 3 is not valid UTF-8"),
        ({"model.hdf5": b"not hdf5"}, r"999\.zip:model\.hdf5 is not an HDF5 file"),
        ({"options.json": None, "encoder.pkl": b"", "char.dic": b""}, r"looks like an ELMoForManyLangs model: unzip it"),
    ],
)
def test_unclear_or_broken_archives_are_refused_and_nothing_stays(
    allennlp_fixture_dir, extraction_dir, tmp_path, capsys, change, message
):
    members = fixture_members(allennlp_fixture_dir)
    for name, content in change.items():
        members.pop(name) if content is None else members.__setitem__(name, content)
    archive = write_zip(tmp_path / "999.zip", members)
    with pytest.raises(ConversionError, match=message):
        convert_nlpl_zip(archive, tmp_path / "out")
    assert main(["convert", "--zip", str(archive), "--output", str(tmp_path / "out")]) == 2
    assert "error: " in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and nothing_extracted_stays(extraction_dir)


def test_files_that_are_no_archive_are_refused(tmp_path, extraction_dir):
    (tmp_path / "model.zip").write_text("options.json model.hdf5")
    with pytest.raises(ConversionError, match="is not a zip archive"):
        convert_nlpl_zip(tmp_path / "model.zip", tmp_path / "out")
    with pytest.raises(ConversionError, match="does not exist"):
        convert_nlpl_zip(tmp_path / "missing.zip", tmp_path / "out")
    damaged = write_zip(tmp_path / "damaged.zip", {"options.json": json.dumps(tiny_options()).encode(), "model.hdf5": b"w" * 1000})
    content = bytearray(damaged.read_bytes())
    content[content.index(b"w" * 100) + 50] = ord("x")  # a stored member with another CRC
    damaged.write_bytes(bytes(content))
    with pytest.raises(ConversionError, match="is damaged and cannot be extracted"):
        convert_nlpl_zip(damaged, tmp_path / "out")
    assert nothing_extracted_stays(extraction_dir)


def test_a_model_that_does_not_match_its_options_is_refused_after_extraction(tmp_path, extraction_dir):
    options_file, weight_file = write_random_original_model(tiny_options(n_highway=1), tmp_path / "model")
    members = {"options.json": json.dumps(tiny_options()).encode(), "model.hdf5": weight_file.read_bytes()}
    with pytest.raises(ConversionError, match=r"999\.zip:model\.hdf5: missing dataset 'CNN_high_1/W_transform'") as error:
        convert_nlpl_zip(write_zip(tmp_path / "999.zip", members), tmp_path / "out")
    assert "elmo-hf-zip-" not in str(error.value)  # the extracted files are gone: the message names the members
    assert not (tmp_path / "out").exists() and nothing_extracted_stays(extraction_dir)


def test_zip_excludes_the_other_inputs(tmp_path, capsys):
    for name in ("a.zip", "options.json"):
        (tmp_path / name).write_bytes(b"")  # they exist (a missing one is refused first, as any missing input)
    arguments = ["--zip", str(tmp_path / "a.zip"), "--options", str(tmp_path / "options.json")]
    assert main(["convert", *arguments, "--output", str(tmp_path / "out")]) == 2
    assert "give no --options, --weights, --checkpoint or --vocab" in capsys.readouterr().err


def test_extraction_happens_beside_the_output_in_its_nearest_existing_ancestor(allennlp_fixture_dir, extraction_dir, tmp_path):
    archive = write_zip(tmp_path / "999.zip", fixture_members(allennlp_fixture_dir))
    for output, expected_parent in ((tmp_path / "out", tmp_path), (tmp_path / "not" / "yet" / "out", tmp_path)):
        with extracted_archive(archive, output) as extracted:
            assert extracted.weight_file.parent.parent == expected_parent
            assert extracted.weight_file.parent.name.startswith(".elmo-hf-zip-") and extracted.weight_file.is_file()
        assert not (tmp_path / "not").exists() and nothing_extracted_stays(extraction_dir)


def test_members_larger_than_the_free_space_are_refused_before_extraction(allennlp_fixture_dir, extraction_dir, tmp_path, monkeypatch):
    members = fixture_members(allennlp_fixture_dir)
    needed = sum(len(members[name]) for name in ("options.json", "model.hdf5", "vocab.txt"))
    asked = []

    def small_disk(path):
        asked.append(path)
        return SimpleNamespace(total=10**9, used=10**9 - needed + 1, free=needed - 1)

    monkeypatch.setattr(shutil, "disk_usage", small_disk)
    with pytest.raises(ConversionError) as error:
        convert_nlpl_zip(write_zip(tmp_path / "999.zip", members), tmp_path / "out")
    assert f"need {needed:,} bytes once extracted" in str(error.value) and f"has {needed - 1:,} bytes free" in str(error.value)
    assert asked[0].parent == tmp_path  # the folder beside the output
    assert not (tmp_path / "out").exists() and nothing_extracted_stays(extraction_dir)


def test_a_member_compressed_with_an_unsupported_method_is_named(allennlp_fixture_dir, extraction_dir, tmp_path):
    archive = write_zip(tmp_path / "999.zip", fixture_members(allennlp_fixture_dir))
    content = bytearray(archive.read_bytes())
    with zipfile.ZipFile(archive) as opened:
        info = opened.getinfo("model.hdf5")
    # The compression method: 2 bytes at offset 8 of the local header, at offset 10 of the central directory entry.
    content[info.header_offset + 8 : info.header_offset + 10] = (9).to_bytes(2, "little")  # deflate64
    central = content.index(b"PK\x01\x02")
    while content[central + 46 : central + 56] != b"model.hdf5":  # the file name follows the 46-byte entry
        central = content.index(b"PK\x01\x02", central + 1)
    content[central + 10 : central + 12] = (9).to_bytes(2, "little")
    archive.write_bytes(bytes(content))
    with pytest.raises(ConversionError) as error:
        convert_nlpl_zip(archive, tmp_path / "out")
    assert "the member 'model.hdf5' (compression method 9, deflate64) cannot be read" in str(error.value)
    assert "encrypted" not in str(error.value)
    assert not (tmp_path / "out").exists() and nothing_extracted_stays(extraction_dir)


def test_a_gzipped_vocabulary_that_expands_without_bound_is_refused(allennlp_fixture_dir, extraction_dir, tmp_path):
    """A 200 KB vocab.txt.gz of zeros (about 1,000x) used to be written out whole (an 80 MB member, ~80 GB): the
    expansion is read with a cap and refused, naming the member and the limit; nothing stays."""
    members = fixture_members(allennlp_fixture_dir)
    del members["vocab.txt"]
    members["vocab.txt.gz"] = gzip.compress(b"\0" * (200 << 20), compresslevel=9)
    archive = write_zip(tmp_path / "999.zip", members)
    with pytest.raises(ConversionError, match=r"the member 'vocab.txt.gz' \(.* bytes gzipped\) expands past [\d,]+ bytes \(the least of 100x"):
        convert_nlpl_zip(archive, tmp_path / "out")
    assert nothing_extracted_stays(extraction_dir) and not (tmp_path / "out").exists()
