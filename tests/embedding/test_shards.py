"""`elmo-hf embed`: input formats, sharded output + manifest, refusing to overwrite, resume after SIGKILL / Ctrl-C,
bad input, the offline default model."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import signal
import subprocess
import sys
import time
import warnings
from glob import glob
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from datasets import Array2D, Dataset, load_dataset, load_from_disk

from elmo_hf import ELMoModel, ELMoTokenizer
from elmo_hf_cli import main
from elmo_hf import DEFAULT_MODEL_DIR
from elmo_hf.corpus.readers import InvalidRowError
from elmo_hf.embedding.embedder import ELMoEmbedder, embed_texts
from elmo_hf.embedding.driver import PROGRESS_REFRESH_SECONDS
from elmo_hf.embedding.engine import input_characters, shards_of_rows
from elmo_hf.embedding.manifest import MANIFEST_NAME, verify_embedding_output
from elmo_hf.embedding import engine as engine_module
from elmo_hf.storage.output_directory import MARKER_NAME, lock_path_of, read_marker
from elmo_hf.validation_elmo import is_close, largest, max_abs_difference

from ..conftest import REPOSITORY_ROOT
from ..helpers import DEVICES

WORDS = "the bank river money rates fell rose we sat on a boat , and she took it to . quickly old new".split()


def synthetic_sentences(count: int, seed: int = 0) -> list[str]:
    generator = random.Random(seed)
    return [" ".join(generator.choices(WORDS, k=generator.randint(1, 14))) for _ in range(count)]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def load_shards(output_dir: Path) -> Dataset:
    files = sorted(glob(str(output_dir / "shard-*.parquet")))
    return load_dataset("parquet", data_files=files, split="train")


def shard_hashes(output_dir: Path) -> dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(output_dir.glob("shard-*.parquet"))}


def listed_and_alone(output_dir: Path) -> list[str]:
    """The shard files the manifest lists, checked to be all the directory holds besides the manifest and the
    output's marker (no unlisted shard, no temporary file)."""
    listed = [entry["file"] for entry in json.loads((output_dir / MANIFEST_NAME).read_text())["shards"]]
    assert sorted(path.name for path in output_dir.iterdir()) == sorted([MARKER_NAME, MANIFEST_NAME, *listed])
    return listed


def run_embed(*args: str) -> int:
    return main(["embed", *map(str, args), "--no-progress"])


@pytest.fixture(scope="module")
def model_dir(converted_fixture_dir) -> Path:
    return converted_fixture_dir


def test_text_file_to_shards_equals_direct_model_calls(tmp_path, model_dir, capsys):
    lines = ["The bank raised rates .", "", "We sat on the river bank .", "  ", "Hi ."] * 3
    corpus = write_lines(tmp_path / "corpus.txt", lines)
    assert run_embed(corpus, "--model", model_dir, "--output", tmp_path / "out", "--shard-size", "4", "--batch-size", "2") == 0
    summary = capsys.readouterr().out
    assert "embedded 15 sentences (42 words) into 4 shards" in summary and "words/s" in summary

    output = load_shards(tmp_path / "out")
    assert output["input_row"][:] == list(range(15))
    assert output["text"][:] == lines
    model, tokenizer = ELMoModel.from_pretrained(model_dir).eval(), ELMoTokenizer.from_pretrained(model_dir)
    vectors = output.with_format("numpy", columns=["elmo"])
    for index, line in enumerate(lines):
        assert output[index]["num_words"] == len(line.split())
        if not line.strip():
            assert vectors[index]["elmo"].shape == (0, 32)
            continue
        encoding = tokenizer(line, return_tensors="pt")
        with torch.inference_mode():
            expected = model(**encoding).elmo_representations[0][0].numpy()
        np.testing.assert_allclose(vectors[index]["elmo"], expected, rtol=0, atol=1e-6)

    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["complete"] and manifest["totals"] == {"sentences": 15, "words": 42, "skipped_rows": 0, "truncated_words": 0}
    assert [shard["first_row"] for shard in manifest["shards"]] == [0, 4, 8, 12]
    assert {shard["file"]: shard["sha256"] for shard in manifest["shards"]} == shard_hashes(tmp_path / "out")


def test_cli_output_equals_library_path(tmp_path, model_dir):
    lines = synthetic_sentences(40, seed=3)
    corpus = write_lines(tmp_path / "corpus.txt", lines)
    assert run_embed(corpus, "--model", model_dir, "--output", tmp_path / "out", "--pooling", "mean", "--dtype", "float16") == 0
    output = load_shards(tmp_path / "out").with_format("numpy")["elmo"][:]
    expected = embed_texts(ELMoEmbedder.from_pretrained(str(model_dir), pooling="mean", dtype="float16"), lines)
    np.testing.assert_array_equal(np.stack(list(output)), np.stack(expected))


def test_structured_inputs_keep_their_columns(tmp_path, model_dir):
    rows = {"id": [10, 11, 12, 13], "sentence": ["A b c .", "", "Deep contextual vectors .", "NA"], "label": ["x", "y", "z", "w"]}
    source = Dataset.from_dict(rows)
    inputs = {
        "data.jsonl": lambda path: source.to_json(path),
        "data.csv": lambda path: source.to_csv(path, index=False),
        "data.parquet": lambda path: source.to_parquet(path),
        "saved": lambda path: source.save_to_disk(path),
    }
    results = {}
    for name, write in inputs.items():
        write(str(tmp_path / name))
        output_dir = tmp_path / f"out-{name}"
        assert run_embed(tmp_path / name, "--model", model_dir, "--output", output_dir, "--text-column", "sentence") == 0
        output = load_shards(output_dir)
        assert output["id"][:] == rows["id"] and output["label"][:] == rows["label"]
        assert output["sentence"][:] == rows["sentence"]  # CSV too: an empty field is an empty sentence
        results[name] = output.with_format("numpy")["elmo"][:]
    for name, vectors in results.items():
        for got, expected in zip(vectors, results["data.jsonl"]):
            np.testing.assert_array_equal(got, expected)


def test_words_column_input(tmp_path, model_dir):
    Dataset.from_dict({"tokens": [["Pre", "split", "."], ["words"]]}).to_json(str(tmp_path / "words.jsonl"))
    assert run_embed(tmp_path / "words.jsonl", "--model", model_dir, "--output", tmp_path / "out", "--words-column", "tokens") == 0
    output = load_shards(tmp_path / "out")
    assert output["num_words"][:] == [3, 1] and "words" not in output.column_names


def test_existing_output_is_refused_without_resume_or_overwrite(tmp_path, model_dir, capsys):
    corpus = write_lines(tmp_path / "corpus.txt", ["one .", "two ."])
    output_dir = tmp_path / "out"
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir) == 0
    before = shard_hashes(output_dir)
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir) == 2
    assert "already holds an embedding run (complete); pass --resume to continue it or --overwrite" in capsys.readouterr().err
    assert shard_hashes(output_dir) == before

    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--resume") == 0
    assert "already complete" in capsys.readouterr().out
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--resume", "--representation", "top") == 2
    assert "started with different options (representation: was 'mix', now 'top')" in capsys.readouterr().err
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--overwrite", "--representation", "top") == 0

    stranger = tmp_path / "not-ours"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("keep me")
    assert run_embed(corpus, "--model", model_dir, "--output", stranger, "--overwrite") == 2
    assert "it is no elmo-hf output (no .elmo-hf-output.json; it holds: notes.txt)" in capsys.readouterr().err
    assert (stranger / "notes.txt").read_text() == "keep me"


def test_resume_refuses_a_changed_input(tmp_path, model_dir, capsys):
    corpus = write_lines(tmp_path / "corpus.txt", ["one ."] * 5)
    output_dir = tmp_path / "out"
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "2") == 0
    manifest_path = output_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["complete"] = False
    manifest_path.write_text(json.dumps(manifest))
    write_lines(corpus, ["one ."] * 6)
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "2", "--resume") == 2
    assert "started with different input (size:" in capsys.readouterr().err


def test_a_library_resume_refuses_a_changed_input(tmp_path, model_dir):
    """The command line checks the input before it loads a model; ``embed_corpus`` checks it again for a caller of
    the library, which would otherwise continue an output with the rows of another input."""
    from elmo_hf.corpus.readers import CorpusSource
    from elmo_hf.embedding.driver import embed_corpus
    from elmo_hf.storage.output_directory import OutputDirectoryError

    corpus = write_lines(tmp_path / "corpus.txt", ["one ."] * 5)
    embedder = ELMoEmbedder.from_pretrained(str(model_dir))

    def embed(**flags):
        return embed_corpus(CorpusSource.open(corpus), embedder, tmp_path / "out", model_name="fixture", shard_size=2,
                            progress=False, workers=1, **flags)

    embed()
    manifest_path = tmp_path / "out" / "manifest.json"
    manifest_path.write_text(json.dumps({**json.loads(manifest_path.read_text()), "complete": False}))
    listed = shard_hashes(tmp_path / "out")
    write_lines(corpus, ["two ."] * 6)
    with pytest.raises(OutputDirectoryError, match=r"started with different input \(size:"):
        embed(resume=True)
    assert shard_hashes(tmp_path / "out") == listed


def test_resume_refuses_a_model_whose_weights_changed_since(tmp_path, model_dir, capsys):
    """The same --model folder with other weights would add another model's vectors to the output: the run compares
    the weights' sha256 with the manifest's (the check before loading sees only the files' sizes and times), and
    refuses, naming them."""
    from safetensors.torch import load_file, save_file

    model = tmp_path / "model"
    shutil.copytree(model_dir, model)
    corpus = write_lines(tmp_path / "corpus.txt", synthetic_sentences(5))
    command = (corpus, "--model", model, "--output", tmp_path / "out", "--shard-size", "2")
    assert run_embed(*command) == 0
    manifest_path = tmp_path / "out" / "manifest.json"
    manifest_path.write_text(json.dumps({**json.loads(manifest_path.read_text()), "complete": False}))
    listed = shard_hashes(tmp_path / "out")
    weights = load_file(model / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = weights[name] + 0.01
    save_file(weights, model / "model.safetensors", metadata={"format": "pt"})
    capsys.readouterr()
    assert run_embed(*command, "--resume") == 2
    assert "it was started with different model weights (sha256: was" in capsys.readouterr().err
    assert shard_hashes(tmp_path / "out") == listed


def test_shards_hold_at_most_shard_size_rows_and_shard_characters_characters():
    rows = [(index, {"text": "x" * length}) for index, length in enumerate([3, 3, 3, 10, 2, 2, 2, 2, 2])]
    cut = [[index for index, _ in shard] for shard in shards_of_rows(rows, 4, 6, "text")]
    assert cut == [[0, 1], [2], [3], [4, 5, 6], [7, 8]]  # 3 + 3; 3 (+10 too many); 10 alone; 2 + 2 + 2
    assert [len(shard) for shard in shards_of_rows(rows, 4, 0, "text")] == [4, 4, 1]  # 0: rows only
    words = [(0, {"tokens": ["ab", "c"]}), (1, {"tokens": ["d"]}), (2, InvalidRowError("not text")), (3, {"other": "x"})]
    assert input_characters(words[0][1], "tokens") == 5  # each word and a separator
    assert [[index for index, _ in shard] for shard in shards_of_rows(words, 10, 5, "tokens")] == [[0], [1, 2, 3]]
    assert list(shards_of_rows([], 4, 6, "text")) == []


def test_long_rows_make_more_shards_and_the_option_is_recorded(tmp_path, model_dir, capsys):
    """Rows past --shard-characters start a new shard: 6 rows of 71 characters at 150 a shard are 3 shards
    of 2 rows (one with --shard-characters 0); the vectors do not depend on where a shard ends."""
    corpus = write_lines(tmp_path / "corpus.txt", [" ".join(["the bank raised rates ."] * 3)] * 6)
    assert run_embed(corpus, "--model", model_dir, "--output", tmp_path / "cut", "--shard-characters", "150") == 0
    assert run_embed(corpus, "--model", model_dir, "--output", tmp_path / "whole", "--shard-characters", "0") == 0
    cut, whole = (json.loads((tmp_path / name / "manifest.json").read_text()) for name in ("cut", "whole"))
    assert [shard["input_rows"] for shard in cut["shards"]] == [2, 2, 2] and len(whole["shards"]) == 1
    assert cut["options"]["shard_characters"] == 150 and whole["options"]["shard_characters"] == 0
    np.testing.assert_array_equal(
        np.concatenate(load_shards(tmp_path / "cut").with_format("numpy")["elmo"][:]),
        np.concatenate(load_shards(tmp_path / "whole").with_format("numpy")["elmo"][:]),
    )
    assert run_embed(corpus, "--model", model_dir, "--output", tmp_path / "cut", "--resume") == 2
    assert "shard_characters: was 150, now 200000" in capsys.readouterr().err
    assert run_embed(corpus, "--model", model_dir, "--output", tmp_path / "bad", "--shard-characters", "-1") != 0
    assert "shard_characters must be an int >= 0 (0: no limit), got -1" in capsys.readouterr().err


def test_a_run_from_before_the_newer_options_resumes_with_them_at_0(tmp_path, model_dir, capsys):
    """A manifest written before --shard-characters and --min-batch-size existed ran as both at 0: a resume with the
    new defaults is refused naming both, and one with both at 0 continues (and says so in the manifest)."""
    corpus = write_lines(tmp_path / "corpus.txt", synthetic_sentences(6, seed=2))
    output_dir = tmp_path / "out"
    old_behaviour = ["--shard-size", "2", "--shard-characters", "0", "--min-batch-size", "0"]
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, *old_behaviour) == 0
    manifest_path = output_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest["options"]["shard_characters"], manifest["options"]["min_batch_size"]  # as such a run wrote it
    manifest["complete"], manifest["shards"] = False, manifest["shards"][:1]
    manifest_path.write_text(json.dumps(manifest))
    (output_dir / "shard-00001.parquet").unlink()
    (output_dir / "shard-00002.parquet").unlink()
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "2", "--resume") == 2
    refusal = capsys.readouterr().err
    assert "min_batch_size: was 0, now 128" in refusal and "shard_characters: was 0, now 200000" in refusal
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, *old_behaviour, "--resume") == 0
    resumed = json.loads(manifest_path.read_text())
    assert resumed["complete"] and [shard["first_row"] for shard in resumed["shards"]] == [0, 2, 4]
    assert resumed["options"]["shard_characters"] == 0 and resumed["options"]["min_batch_size"] == 0


def cli_subprocess(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "elmo_hf_cli", "embed", *map(str, args), "--no-progress"],
        cwd=REPOSITORY_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # Ctrl-C as from a terminal: a test run started in the background (`cmd &` in a script) inherits an ignored
        # SIGINT, which Python then keeps ignoring, and the run would not stop.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def wait_for_shards(process: subprocess.Popen, output_dir: Path, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    manifest_path = output_dir / "manifest.json"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"embed finished before it could be interrupted: {process.communicate()}")
        try:
            if len(json.loads(manifest_path.read_text())["shards"]) >= count:
                return
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            pass
        time.sleep(0.01)
    pytest.fail(f"no {count} shards in {output_dir} after {timeout} s")


INTERRUPTED_CORPUS_LINES = 1000


@pytest.fixture(scope="module")
def uninterrupted_run(tmp_path_factory, model_dir):
    """One uninterrupted run that the interrupted runs are compared with (the corpus, the options, the output)."""
    directory = tmp_path_factory.mktemp("uninterrupted")
    corpus = write_lines(directory / "corpus.txt", synthetic_sentences(INTERRUPTED_CORPUS_LINES, seed=1))
    common = [corpus, "--model", model_dir, "--shard-size", "20"]
    assert run_embed(*common, "--output", directory / "out") == 0
    return common, directory / "out"


@pytest.mark.parametrize("interruption", [signal.SIGKILL, signal.SIGINT])
def test_interrupted_run_resumes_to_byte_identical_output(tmp_path, uninterrupted_run, interruption):
    common, reference_dir = uninterrupted_run
    output_dir = tmp_path / "interrupted"
    process = cli_subprocess(*common, "--output", output_dir)
    wait_for_shards(process, output_dir, count=2)
    process.send_signal(interruption)
    _, stderr = process.communicate(timeout=60)
    manifest = json.loads((output_dir / "manifest.json").read_text())
    assert not manifest["complete"] and 2 <= len(manifest["shards"]) < 50, len(manifest["shards"])
    if interruption == signal.SIGINT:
        assert process.returncode == 130
        assert "finished shard(s) are kept" in stderr and "run the same command with --resume to continue" in stderr
        assert "Loading weights" not in stderr  # --no-progress: no bar at all, weight loading included
    else:
        assert process.returncode == -signal.SIGKILL
        assert lock_path_of(output_dir).exists()  # a SIGKILL leaves its lock; the resume takes it over

    assert run_embed(*common, "--output", output_dir, "--resume") == 0
    assert shard_hashes(output_dir) == shard_hashes(reference_dir)
    resumed, reference = (json.loads((path / "manifest.json").read_text()) for path in (output_dir, reference_dir))
    assert resumed["shards"] == reference["shards"] and resumed["totals"] == reference["totals"]
    assert load_shards(output_dir)["input_row"][:] == list(range(INTERRUPTED_CORPUS_LINES))
    assert not lock_path_of(output_dir).exists() and run_embed("--verify", output_dir) == 0


def test_ctrl_c_before_the_first_shard_keeps_nothing(tmp_path, model_dir, monkeypatch, capsys):
    corpus = write_lines(tmp_path / "corpus.txt", ["one .", "two ."])

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ELMoEmbedder, "embed_prepared", interrupted)
    assert run_embed(corpus, "--model", model_dir, "--output", tmp_path / "new" / "out") == 130
    assert "interrupted before the first shard was finished: nothing was kept" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus.txt"]  # no output, no parent, no lock


def test_a_shard_that_cannot_be_hashed_leaves_no_temporary_file(tmp_path, model_dir, monkeypatch, capsys):
    """One process (the pipeline's writing thread): the shard whose file was filled but could not be hashed is
    removed with its temporary file; the shards before it stay, listed."""
    corpus = write_lines(tmp_path / "corpus.txt", synthetic_sentences(40, seed=9))
    original, hashed = engine_module.sha256_of_file, []

    def failing_on_the_third(path):
        hashed.append(path)
        if len(hashed) == 3:
            raise OSError(5, "Input/output error")
        return original(path)

    monkeypatch.setattr(engine_module, "sha256_of_file", failing_on_the_third)
    output_dir = tmp_path / "out"
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "10", "--workers", "1") != 0
    assert "Input/output error" in capsys.readouterr().err
    assert listed_and_alone(output_dir) == ["shard-00000.parquet", "shard-00001.parquet"]


@pytest.mark.parametrize("device", DEVICES)
def test_resume_redoes_missing_and_damaged_shards_and_drops_unlisted_ones(tmp_path, model_dir, capsys, device):
    """Resume trusts nothing it has not checked: a listed shard that is missing or damaged is redone (to the same
    bytes, on either device); unlisted files a record proves the run's (shards the marker records, temporary files
    named with the output's recorded token) are dropped; files no record lists stop the resume, named, and stay."""
    corpus = write_lines(tmp_path / "corpus.txt", synthetic_sentences(50, seed=2))
    output_dir = tmp_path / "out"
    on_device = ("--device", device)
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "10", *on_device) == 0
    reference = shard_hashes(output_dir)
    manifest_path = output_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["shards"], manifest["complete"] = manifest["shards"][:3], False
    manifest_path.write_text(json.dumps(manifest))
    (output_dir / "shard-00000.parquet").unlink()  # listed, missing
    damaged = bytearray((output_dir / "shard-00001.parquet").read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF  # listed, one byte flipped: same size, another sha256
    (output_dir / "shard-00001.parquet").write_bytes(bytes(damaged))
    token = read_marker(output_dir)["temporaries"]
    (output_dir / f".shard-00004.parquet.{token}.abcd1234.tmp").write_bytes(b"temporary")  # a killed run's
    strays = {"shard-00042.parquet": b"stray", ".shard-00004.parquet.1234.tmp": b"not ours", "notes.tmp": b"mine"}
    for name, content in strays.items():  # no record lists these
        (output_dir / name).write_bytes(content)
    problems = verify_embedding_output(output_dir)
    assert any("shard-00000.parquet is missing" in problem for problem in problems)
    assert any("shard-00001.parquet has another sha256" in problem for problem in problems)
    assert any("shard-00003.parquet is not listed" in problem for problem in problems)
    assert any("shard-00042.parquet is not listed" in problem for problem in problems)
    assert run_embed("--verify", output_dir) == 1

    resume = (corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "10", "--resume", *on_device)
    assert run_embed(*resume) == 2
    assert "also holds what elmo-hf does not write (.shard-00004.parquet.1234.tmp, notes.tmp, shard-00042.parquet)" in capsys.readouterr().err
    assert all((output_dir / name).read_bytes() == content for name, content in strays.items())
    for name in strays:
        (output_dir / name).unlink()
    assert run_embed(*resume) == 0
    assert "2 damaged shards redone" in capsys.readouterr().out
    assert shard_hashes(output_dir) == reference and verify_embedding_output(output_dir) == []
    assert not list(output_dir.glob(".*tmp"))

    (output_dir / "notes.txt").write_text("mine")
    assert run_embed(*resume) == 2
    assert "also holds what elmo-hf does not write (notes.txt)" in capsys.readouterr().err
    assert (output_dir / "notes.txt").read_text() == "mine"


def test_resume_of_a_complete_output_deletes_nothing_no_record_lists(tmp_path, model_dir, capsys):
    """Issue 51, item 1: on a complete output, `--resume` answered "already complete" and deleted every file the
    manifest does not list, by their names (`*.tmp`, `shard-[0-9]*.parquet`, `.cache`), without a word; a user's `.draft.tmp` is kept the same."""
    corpus = write_lines(tmp_path / "corpus.txt", synthetic_sentences(30, seed=4))
    output_dir = tmp_path / "out"
    command = (corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "10")
    assert run_embed(*command) == 0
    reference = shard_hashes(output_dir)
    mine = {"notes.tmp": "a", ".draft.tmp": "e", "shard-0-mine.parquet": "b", "shard-99999.parquet": "c", ".cache/mine.txt": "d"}
    (output_dir / ".cache").mkdir()
    for name, content in mine.items():
        (output_dir / name).write_text(content)
    capsys.readouterr()
    assert run_embed(*command, "--resume") == 2
    error = capsys.readouterr().err
    assert "also holds what elmo-hf does not write (.cache/mine.txt, .draft.tmp, notes.tmp, shard-0-mine.parquet, shard-99999.parquet)" in error
    assert all((output_dir / name).read_text() == content for name, content in mine.items())
    assert {name: digest for name, digest in shard_hashes(output_dir).items() if name in reference} == reference


def test_a_shard_in_place_but_not_yet_listed_is_the_runs_own_for_overwrite_and_resume(tmp_path, model_dir, capsys):
    """Issue 51, item 4: killed between a shard's rename and the manifest's update, the next `--overwrite` refused the
    run's own shard ("holds files no elmo-hf run recorded writing: shard-00002.parquet ... Move them away"). The
    shard is recorded in flight before it gets its name, so both `--overwrite` and `--resume` know it."""
    from ..storage.test_output_directory import run_killed_at, tree_of

    corpus = write_lines(tmp_path / "corpus.txt", synthetic_sentences(60, seed=5))
    command = (corpus, "--model", model_dir, "--shard-size", "10", "--workers", "1")
    reference = tmp_path / "reference"
    assert run_embed(*command, "--output", reference) == 0
    for then in ("--overwrite", "--resume"):
        output_dir = tmp_path / then.strip("-")
        embed = lambda *flags: run_embed(*command, "--output", output_dir, *flags)
        original_move = engine_module.move_into_place
        try:
            engine_module.move_into_place = _killed_after_moving_the_third(original_move)
            assert run_killed_at("never", lambda: embed()), "the run was not killed"
        finally:
            engine_module.move_into_place = original_move
        listed = [entry["file"] for entry in json.loads((output_dir / MANIFEST_NAME).read_text())["shards"]]
        # shard-00002 in place and not listed; the shards listed before it in order (the record of shard-00001 may
        # not be written yet: one full run failed that way in a CI simulation, 1 in 1,166 tests)
        assert (output_dir / "shard-00002.parquet").exists() and "shard-00002.parquet" not in listed
        assert listed == [f"shard-{index:05d}.parquet" for index in range(len(listed))] and len(listed) <= 2
        capsys.readouterr()
        assert embed(then) == 0, capsys.readouterr().err
        assert tree_of(output_dir) == tree_of(reference) and verify_embedding_output(output_dir) == []


def test_a_manifest_entry_outside_the_output_top_level_proves_nothing(tmp_path, model_dir, capsys):
    """The manifest's own record lists shard files, which sit at the top of the output: an entry naming a path in a
    folder (a manifest edited, or damaged) proves nothing, so --overwrite keeps that file."""
    corpus = write_lines(tmp_path / "corpus.txt", ["one .", "two ."])
    output_dir = tmp_path / "out"
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir) == 0
    (output_dir / "sub").mkdir()
    (output_dir / "sub" / "mine.txt").write_text("mine")
    manifest = json.loads((output_dir / MANIFEST_NAME).read_text())
    manifest["shards"].append({**manifest["shards"][0], "file": "sub/mine.txt", "bytes": 4})
    (output_dir / MANIFEST_NAME).write_text(json.dumps(manifest))
    capsys.readouterr()
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--overwrite") == 2
    assert "recorded writing (or changed since): sub/mine.txt; " in capsys.readouterr().err
    assert (output_dir / "sub" / "mine.txt").read_text() == "mine"


def _killed_after_moving_the_third(move):
    import os

    moved = []

    def killing(temporary, path):
        move(temporary, path)
        moved.append(path)
        if path.name == "shard-00002.parquet":
            os.kill(os.getpid(), signal.SIGKILL)  # in place, the manifest not updated yet

    return killing


def test_two_runs_into_one_output_never_both_succeed(tmp_path, model_dir):
    """Started together into one directory (one on the lines reversed): one run writes, the other is refused, naming
    the holder or the finished run; the output is intact and is the winner's."""
    lines = synthetic_sentences(200, seed=6)
    forward = write_lines(tmp_path / "forward.txt", lines)
    backward = write_lines(tmp_path / "backward.txt", lines[::-1])
    output_dir = tmp_path / "shared"
    processes = [cli_subprocess(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "20") for corpus in (forward, backward)]
    results = [process.communicate(timeout=300) for process in processes]
    codes = sorted(process.returncode for process in processes)
    assert codes == [0, 2], results
    refused = results[[process.returncode for process in processes].index(2)][1]
    assert "is locked by another elmo-hf run" in refused or "already holds an embedding run (complete)" in refused
    assert verify_embedding_output(output_dir) == []
    winner = lines if processes[0].returncode == 0 else lines[::-1]
    assert load_shards(output_dir)["text"][:] == winner


def test_undecodable_line_is_named_or_skipped(tmp_path, model_dir, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(b"good line .\nbad \xff byte .\nanother good line .\r\nlast line without newline")
    assert run_embed(corpus, "--model", model_dir, "--output", tmp_path / "strict") == 2
    error = capsys.readouterr().err
    assert f"{corpus} line 2: not valid UTF-8 (invalid start byte: byte 0xff at byte offset 4 of the line)" in error
    assert "--skip-invalid" in error

    assert run_embed(corpus, "--model", model_dir, "--output", tmp_path / "skipping", "--skip-invalid") == 0
    assert "1 invalid row skipped" in capsys.readouterr().out
    output = load_shards(tmp_path / "skipping")
    assert output["input_row"][:] == [0, 2, 3]
    assert output["text"][:] == ["good line .", "another good line .", "last line without newline"]
    manifest = json.loads((tmp_path / "skipping" / "manifest.json").read_text())
    assert manifest["totals"]["skipped_rows"] == 1 and manifest["shards"][0]["skipped"][0]["row"] == 1


def test_null_text_in_jsonl_is_named_or_skipped(tmp_path, model_dir, capsys):
    (tmp_path / "data.jsonl").write_text('{"text": "fine ."}\n{"text": null}\n{"text": "also fine ."}\n')
    assert run_embed(tmp_path / "data.jsonl", "--model", model_dir, "--output", tmp_path / "strict") == 2
    assert "data.jsonl row 1: 'text' is None of type NoneType; expected a string" in capsys.readouterr().err
    assert run_embed(tmp_path / "data.jsonl", "--model", model_dir, "--output", tmp_path / "skipping", "--skip-invalid") == 0
    assert load_shards(tmp_path / "skipping")["input_row"][:] == [0, 2]


def test_unreadable_and_misnamed_inputs(tmp_path, model_dir, capsys):
    (tmp_path / "broken.jsonl").write_text('{"text": "fine ."}\nnot json at all\n')
    assert run_embed(tmp_path / "broken.jsonl", "--model", model_dir, "--output", tmp_path / "a") == 2
    assert "broken.jsonl row 1: (line 2) is not a valid JSON object" in capsys.readouterr().err  # one row, named
    (tmp_path / "corpus.doc").write_text("x")
    assert run_embed(tmp_path / "corpus.doc", "--model", model_dir, "--output", tmp_path / "b") == 2
    assert "cannot tell the format" in capsys.readouterr().err
    assert run_embed(tmp_path / "missing.txt", "--model", model_dir, "--output", tmp_path / "c") == 2
    assert "argument input: no such file or directory" in capsys.readouterr().err  # before the model loads
    write_lines(tmp_path / "corpus.txt", ["a ."])
    assert run_embed(tmp_path / "corpus.txt", "--model", model_dir, "--output", tmp_path / "d", "--text-column", "sentence") == 2
    assert "has no column 'sentence'" in capsys.readouterr().err


def test_empty_input_gives_an_empty_loadable_output(tmp_path, model_dir):
    (tmp_path / "empty.txt").write_bytes(b"")
    assert run_embed(tmp_path / "empty.txt", "--model", model_dir, "--output", tmp_path / "out", "--output-format", "dataset") == 0
    # One shard without rows but with the full schema (read with pyarrow: datasets 5.2 rejects 0-row Parquet files).
    table = pq.read_table(tmp_path / "out" / "shard-00000.parquet")
    assert table.num_rows == 0 and table.column_names == ["input_row", "text", "elmo", "num_words", "words"]
    saved = load_from_disk(str(tmp_path / "out" / "dataset"))
    assert len(saved) == 0 and saved.features["elmo"] == Array2D((None, 32), "float32")


def test_dataset_output_format_equals_the_shards(tmp_path, model_dir):
    corpus = write_lines(tmp_path / "corpus.txt", synthetic_sentences(25, seed=4))
    assert run_embed(corpus, "--model", model_dir, "--output", tmp_path / "out", "--output-format", "dataset", "--shard-size", "10") == 0
    saved = load_from_disk(str(tmp_path / "out" / "dataset"))
    shards = load_shards(tmp_path / "out")
    assert saved.features == shards.features and saved.to_dict() == shards.to_dict()
    assert not (tmp_path / "out" / ".cache").exists()


def test_default_model_is_the_shipped_demo_model(tmp_path, capsys):
    assert "small demonstration model" in (Path(DEFAULT_MODEL_DIR) / "README.md").read_text()

    corpus = write_lines(tmp_path / "corpus.txt", ["No model was named ."])
    assert run_embed(corpus, "--output", tmp_path / "out") == 0
    note = capsys.readouterr().err
    assert "no --model given, using elmo-hf's default model: a small demonstration ELMo" in note
    assert "AllenNLP's tiny test ELMo" not in note and "convert a released ELMo" in note
    assert load_shards(tmp_path / "out")["num_words"][:] == [5]


def test_progress_bar_reports_words_per_second(tmp_path, model_dir, capsys):
    corpus = write_lines(tmp_path / "corpus.txt", synthetic_sentences(50, seed=5))
    assert main(["embed", str(corpus), "--model", str(model_dir), "--output", str(tmp_path / "out")]) == 0
    assert "words/s" in capsys.readouterr().err


def test_progress_bar_is_redrawn_at_most_twice_a_second(tmp_path, model_dir, capsys):
    """A long line runs in many model batches; each used to redraw the bar, flooding a log with hundreds of lines.
    So did every batch of short sentences, ten times a second (tqdm's default)."""
    corpus = write_lines(tmp_path / "corpus.txt", [" ".join(["word"] * 1500)] + synthetic_sentences(200, seed=3))
    args = ["embed", str(corpus), "--model", str(model_dir), "--output", str(tmp_path / "out"), "--max-window-words", "16",
            "--window-context", "4", "--batch-size", "1"]
    started = time.monotonic()
    assert main(args) == 0
    elapsed = time.monotonic() - started
    redraws = capsys.readouterr().err.count("\r")
    assert redraws <= 6 + 2 * elapsed / PROGRESS_REFRESH_SECONDS, (redraws, elapsed)


# ----------------------------------------------------------------------------------------------------------------------
# The staged pipeline: tables without datasets.Dataset, shards written on their own thread
# ----------------------------------------------------------------------------------------------------------------------


def parquet_bytes(table) -> bytes:
    import io

    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("representation", ["mix", "all"])
@pytest.mark.parametrize("pooling", ["none", "mean_max"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_shard_tables_are_byte_identical_to_the_datasets_engine(fixture_model, tokenizer, representation, pooling, dtype, device):
    import copy

    from datasets import Features, Value

    from elmo_hf.embedding.parquet import shard_table

    model = fixture_model if device == "cpu" else copy.deepcopy(fixture_model).to(device)
    embedder = ELMoEmbedder(model, tokenizer, representation=representation, pooling=pooling, dtype=dtype)
    features = Features({"input_row": Value("int64"), "text": Value("string"), **embedder.features})
    for texts in (synthetic_sentences(30, seed=4) + ["", "   "], [], [""]):
        sentences = [embedder.words_of(text) for text in texts]
        columns = {"input_row": list(range(len(texts))), "text": texts, **embedder.embed_sentences(sentences)}
        expected = Dataset.from_dict(columns, features=features).data.table
        table = shard_table(columns, features, embedder.output_column, typed_columns=["input_row", *embedder.features])
        assert table.schema == expected.schema and table.schema.metadata == expected.schema.metadata
        assert parquet_bytes(table) == parquet_bytes(expected)


class _Recorder:
    def __init__(self):
        self.entries = []

    def __call__(self, entry):
        self.entries.append(entry)


def _pipeline_parts(tmp_path, model_dir, lines, shard_size=10, **options):
    from elmo_hf.corpus.readers import CorpusSource
    from elmo_hf.embedding.engine import ShardRunner

    corpus = write_lines(tmp_path / "corpus.txt", lines)
    source = CorpusSource.open(corpus)
    writer = ShardRunner(source, ELMoEmbedder.from_pretrained(model_dir, **options), None)
    rows = list(source.rows(start=0))
    return writer, [rows[start : start + shard_size] for start in range(0, len(rows), shard_size)]


def named_shards(chunks, directory):
    """``ShardRunner.run``'s shards: each chunk of rows with its path in ``directory``, named as ``embed`` names them."""
    from elmo_hf.embedding.shard_names import EMBED_SHARDS

    return ((directory / EMBED_SHARDS.name(index), rows) for index, rows in enumerate(chunks))


@pytest.mark.parametrize("device", DEVICES)
def test_pipelined_shards_equal_shards_written_one_by_one(tmp_path, model_dir, device):
    """The staged pipeline (on CUDA: pinned host buffers, copies that do not block, the device computing while the
    previous batch is copied back and written) gives the bytes of shards written one at a time, and on CUDA the
    CPU's vectors up to float32 rounding."""
    writer, chunks = _pipeline_parts(tmp_path, model_dir, synthetic_sentences(55, seed=5), device=device)
    (tmp_path / "serial").mkdir(), (tmp_path / "pipelined").mkdir()
    serial = [writer.write(chunk, tmp_path / "serial" / f"shard-{index:05d}.parquet") for index, chunk in enumerate(chunks)]
    recorded = _Recorder()
    writer.run(named_shards(chunks, tmp_path / "pipelined"), recorded)
    assert recorded.entries == serial  # in order, same bytes (sha256), same counts
    assert set(writer.stage_seconds) == {"read", "model", "write"}
    if device != "cpu":
        on_cpu, _ = _pipeline_parts(tmp_path, model_dir, synthetic_sentences(55, seed=5), device="cpu")
        (tmp_path / "cpu").mkdir()
        for index, chunk in enumerate(chunks):
            on_cpu.write(chunk, tmp_path / "cpu" / f"shard-{index:05d}.parquet")
        expected, actual = (load_shards(tmp_path / name).with_format("numpy")["elmo"][:] for name in ("cpu", "pipelined"))
        assert len(actual) == len(expected) == 55
        assert is_close(largest(max_abs_difference(a, e) for a, e in zip(actual, expected)), 1e-5)


def test_a_failing_stage_keeps_every_shard_written_before_it(tmp_path, model_dir, monkeypatch):
    """An error in any stage (here: the model on the 4th shard, then the disk on the 3rd) stops the pipeline with
    that error; every shard finished before it is recorded, in order, and nothing half-written stays behind."""
    from elmo_hf.embedding.engine import ShardTask

    writer, chunks = _pipeline_parts(tmp_path, model_dir, synthetic_sentences(60, seed=6))
    embed = ShardTask.embed
    calls = []

    def model_fails_on_the_fourth_shard(task, embedder, shard, on_progress=None):
        calls.append(shard)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return embed(task, embedder, shard, on_progress)

    monkeypatch.setattr(ShardTask, "embed", model_fails_on_the_fourth_shard)
    recorded = _Recorder()
    with pytest.raises(KeyboardInterrupt):
        writer.run(named_shards(chunks, tmp_path), recorded)
    assert [entry["file"] for entry in recorded.entries] == [f"shard-0000{index}.parquet" for index in range(3)]
    assert sorted(path.name for path in tmp_path.glob("shard-*")) == [entry["file"] for entry in recorded.entries]

    monkeypatch.setattr(ShardTask, "embed", embed)
    write = ShardTask.write

    def disk_full_on_the_third_shard(task, embedder, shard, vectors):
        if task.name == "shard-00002.parquet":
            raise OSError(28, "No space left on device")
        return write(task, embedder, shard, vectors)

    monkeypatch.setattr(ShardTask, "write", disk_full_on_the_third_shard)
    recorded = _Recorder()
    (tmp_path / "second").mkdir()
    with pytest.raises(OSError, match="No space left"):
        writer.run(named_shards(chunks, tmp_path / "second"), recorded)
    assert [entry["file"] for entry in recorded.entries] == ["shard-00000.parquet", "shard-00001.parquet"]
    assert not list((tmp_path / "second").glob("*tmp*"))


def test_an_invalid_row_read_ahead_stops_the_run_after_the_shards_before_it(tmp_path, model_dir, capsys):
    lines = synthetic_sentences(30, seed=7) + ["bad \udcff line"] + synthetic_sentences(9, seed=8)
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes("".join(f"{line}\n" for line in lines).encode("utf-8", "surrogateescape"))
    output_dir = tmp_path / "out"
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "10") != 0
    assert "line 31" in capsys.readouterr().err
    manifest = json.loads((output_dir / "manifest.json").read_text())
    assert [shard["file"] for shard in manifest["shards"]] == [f"shard-0000{index}.parquet" for index in range(3)]
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "10", "--resume", "--skip-invalid") != 0  # options differ


def test_parquet_shards_dictionary_encode_every_column_but_the_vectors(tmp_path):
    import pyarrow as pa

    from elmo_hf.embedding.parquet import write_parquet

    table = pa.table(
        {
            "words": pa.array([["a", "b"], ["a"]]),
            "meta": pa.array([{"source": "x", "tags": ["t"]}, {"source": "x", "tags": []}]),
            "elmo": pa.array([[[0.5, 1.5]], [[2.5, 3.5]]], type=pa.list_(pa.list_(pa.float32()))),
        }
    )
    write_parquet(table, tmp_path / "shard.parquet", "elmo")
    row_group = pq.ParquetFile(tmp_path / "shard.parquet").metadata.row_group(0)
    encodings = {row_group.column(index).path_in_schema: row_group.column(index).encodings for index in range(row_group.num_columns)}
    assert set(encodings) == {"words.list.element", "meta.source", "meta.tags.list.element", "elmo.list.element.list.element"}
    for path, used in encodings.items():
        assert ("RLE_DICTIONARY" in used) == (path != "elmo.list.element.list.element"), (path, used)
    assert pq.read_table(tmp_path / "shard.parquet").equals(table)


def test_tf32_is_an_explicit_recorded_option(fixture_model, tokenizer):
    embedder = ELMoEmbedder(fixture_model, tokenizer, allow_tf32=True)
    assert fixture_model.allow_tf32 is True and embedder.options()["allow_tf32"] is True
    assert ELMoEmbedder(fixture_model, tokenizer).options()["allow_tf32"] is False and fixture_model.allow_tf32 is False
    with pytest.raises(ValueError, match="allow_tf32 must be a bool"):
        ELMoEmbedder(fixture_model, tokenizer, allow_tf32="yes")


def test_cli_compute_dtype_is_recorded_and_a_resume_in_another_is_refused(tmp_path, model_dir, capsys):
    corpus = write_lines(tmp_path / "corpus.txt", synthetic_sentences(12, seed=9))
    output_dir = tmp_path / "out"
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "5", "--compute-dtype", "bfloat16") == 0
    assert json.loads((output_dir / "manifest.json").read_text())["options"]["compute_dtype"] == "bfloat16"
    assert load_shards(output_dir).with_format("numpy")["elmo"][0].dtype == np.float32
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "5", "--resume") == 2
    assert "compute_dtype: was 'bfloat16', now 'float32'" in capsys.readouterr().err
    assert run_embed(corpus, "--model", model_dir, "--output", tmp_path / "other", "--compute-dtype", "float64") != 0
    assert "argument --compute-dtype: invalid choice: 'float64' (choose from 'float32', 'bfloat16', 'float16', 'int8')" in capsys.readouterr().err


def test_cli_int8_is_recorded_and_a_resume_in_another_dtype_is_refused_naming_both(tmp_path, model_dir, capsys):
    corpus = write_lines(tmp_path / "corpus.txt", synthetic_sentences(12, seed=9))
    output_dir = tmp_path / "out"
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "5", "--compute-dtype", "int8") == 0
    assert json.loads((output_dir / "manifest.json").read_text())["options"]["compute_dtype"] == "int8"
    for other in ("float32", "bfloat16"):
        arguments = ("--shard-size", "5", "--resume", "--compute-dtype", other)
        assert run_embed(corpus, "--model", model_dir, "--output", output_dir, *arguments) == 2
        assert f"compute_dtype: was 'int8', now '{other}'" in capsys.readouterr().err
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "5", "--resume", "--compute-dtype", "int8") == 0


def test_cli_records_allow_tf32_in_the_manifest(tmp_path, model_dir):
    corpus = write_lines(tmp_path / "corpus.txt", ["one .", "two ."])
    for flag, expected in (([], False), (["--allow-tf32"], True)):
        output_dir = tmp_path / f"out-{expected}"
        assert run_embed(corpus, "--model", model_dir, "--output", output_dir, *flag) == 0
        assert json.loads((output_dir / "manifest.json").read_text())["options"]["allow_tf32"] is expected


EMBED_OVERWRITE_STEPS = [
    "journal-written", "set-aside", "new-marker-written", "shard-recorded:1", "shard-recorded:3", "recorded:1",
    "new-complete", "remove-old:1", "remove-old:5",
]


def test_embed_overwrite_killed_at_any_instant_keeps_the_old_output_whole_until_the_new_one_is_complete(
    tmp_path, model_dir, capsys, caplog
):
    """`embed --overwrite` (in place) killed at each step, before the new run, after 1 and 3 of its 4 shards, and
    while deleting the old output: by the sha256 of every file, the target holds the whole old output, nothing, or
    only the new run's own shards (its manifest incomplete), and the old output is whole at the journal's name
    until the new one is complete. `--resume` then ends byte-identical to an uninterrupted run and leaves no
    `.replaced` folder; a plain run is refused naming both; `--overwrite` starts over, the old output kept aside."""
    from ..storage.test_output_directory import run_killed_at, tree_of
    from elmo_hf.storage.output_directory import journal_path_of

    corpus = write_lines(tmp_path / "corpus.txt", synthetic_sentences(12))
    output_dir = tmp_path / "runs" / "out"
    old_options, new_options = ("--shard-size", "2"), ("--shard-size", "3")
    saved_old = tmp_path / "old"
    assert run_embed(corpus, "--model", model_dir, "--output", saved_old, *old_options) == 0
    reference = tmp_path / "reference"
    assert run_embed(corpus, "--model", model_dir, "--output", reference, *new_options) == 0
    old, new = tree_of(saved_old), tree_of(reference)
    embed = lambda *flags: run_embed(corpus, "--model", model_dir, "--output", output_dir, *new_options, *flags)

    def check_never_a_mix(step):
        found = tree_of(output_dir)
        if found == old:
            return
        shards = {  # the new run's shards (its manifest aside, and a shard it was writing under a temporary name)
            name: digest for name, digest in (found or {}).items()
            if name != "manifest.json" and not (name.startswith(".shard-") and name.endswith(".tmp"))
        }
        assert all(new.get(name) == digest for name, digest in shards.items()), f"{step}: a mix {found}"
        journal = journal_path_of(output_dir)
        if not journal.exists() or json.loads(journal.read_text()).get("new_complete"):
            assert found == new, f"{step}: the new output is not complete"
        else:
            # Until the journal says the new output is complete, the old one is whole aside (even when the new
            # manifest just said complete: killed at "recorded:1").
            assert tree_of(output_dir.parent / json.loads(journal.read_text())["replaced"]) == old, step

    for step in EMBED_OVERWRITE_STEPS:
        shutil.rmtree(output_dir.parent, ignore_errors=True)
        shutil.copytree(saved_old, output_dir)
        assert run_killed_at(step, lambda: embed("--overwrite")), f"the run never reached {step}"
        check_never_a_mix(step)
        aside = sorted(output_dir.parent.glob(".out.*.replaced"))
        capsys.readouterr()
        if step == "shard-recorded:3":  # neither flag: refused, naming the unfinished new output and the old one
            assert embed() == 2
            error = capsys.readouterr().err
            assert f"{output_dir} holds the unfinished output of a run that replaced it" in error
            assert f"kept whole at {aside[0]}" in error and "--resume" in error
            check_never_a_mix(step)
        if step == "new-marker-written":  # --overwrite: starts over, the old output aside until it completes
            caplog.clear()
            assert embed("--overwrite") == 0
            assert f"the previous output stays whole at {aside[0]}" in caplog.text
        elif step in ("journal-written", "set-aside"):  # nothing new yet: the old output is at the target (put back)
            assert embed("--resume") == 2 and tree_of(output_dir) == old
            assert "started with different options" in capsys.readouterr().err
            assert embed("--overwrite") == 0
        else:
            caplog.clear()
            assert embed("--resume") == 0
            assert all(str(path) in caplog.text for path in aside), step  # the old output's deletion is named
        assert tree_of(output_dir) == new, step  # byte-identical to the uninterrupted run
        assert [path.name for path in output_dir.parent.iterdir()] == ["out"], step  # no .replaced, journal, lock
        assert verify_embedding_output(output_dir) == []


def test_embed_overwrite_that_fails_puts_the_old_output_back_or_keeps_both(tmp_path, model_dir, monkeypatch, capsys, caplog):
    """An error (not a kill): before the first shard, the old output is put back; after it, both are kept and the
    message says where the old one is and how to finish; --resume then completes and deletes the old output."""
    from ..storage.test_output_directory import tree_of

    corpus = write_lines(tmp_path / "corpus.txt", synthetic_sentences(12))
    output_dir = tmp_path / "out"
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "2") == 0
    old = tree_of(output_dir)
    real = ELMoEmbedder.embed_prepared
    calls = {"n": 0}

    def fails_on_the_second_shard(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == limit:
            raise RuntimeError("the model failed")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ELMoEmbedder, "embed_prepared", fails_on_the_second_shard)
    one_process = ("--workers", "1")  # the calls are counted in this process (forked workers count their own)
    limit = 1
    with pytest.raises(RuntimeError):
        run_embed(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "3", "--overwrite", *one_process)
    assert tree_of(output_dir) == old and sorted(path.name for path in tmp_path.iterdir()) == ["corpus.txt", "out"]
    assert "put the previous output back" in caplog.text

    calls["n"], limit = 0, 2
    caplog.clear()
    with pytest.raises(RuntimeError):
        run_embed(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "3", "--overwrite", *one_process)
    aside = sorted(tmp_path.glob(".out.*.replaced"))
    assert [tree_of(path) for path in aside] == [old] and len(json.loads((output_dir / "manifest.json").read_text())["shards"]) >= 1
    assert f"the previous output is kept whole at {aside[0]}" in caplog.text and "--resume" in caplog.text
    monkeypatch.setattr(ELMoEmbedder, "embed_prepared", real)
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "3", "--resume") == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus.txt", "out"] and verify_embedding_output(output_dir) == []


def test_embed_overwrite_keeps_files_no_run_recorded_inside_folders_it_writes(tmp_path, model_dir, capsys):
    corpus = write_lines(tmp_path / "corpus.txt", ["one .", "two ."])
    output_dir = tmp_path / "out"
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--output-format", "dataset") == 0
    for mine in ["dataset/my_annotations.arrow", ".cache/keep.txt", "shard-99999.parquet"]:
        (output_dir / mine).parent.mkdir(exist_ok=True)
        (output_dir / mine).write_text("mine")
        assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--overwrite") == 2
        assert f"recorded writing (or changed since): {mine}; " in capsys.readouterr().err
        assert (output_dir / mine).read_text() == "mine"
        (output_dir / mine).unlink()
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--overwrite") == 0


def test_verify_fails_an_unfinished_output_one_without_a_manifest_and_a_file_embed_does_not_write(tmp_path, model_dir):
    """`--verify` passes a finished output only: a run that stopped before its end (its manifest not complete), one
    killed before its first shard (a marker, no manifest) and a file elmo-hf does not write are each named, exit 1."""
    corpus = write_lines(tmp_path / "corpus.txt", synthetic_sentences(6))
    output_dir = tmp_path / "out"
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "2") == 0
    assert verify_embedding_output(output_dir) == []
    (output_dir / "notes.txt").write_text("mine")
    assert verify_embedding_output(output_dir) == ["notes.txt is not written by elmo-hf embed"]
    assert run_embed("--verify", output_dir) == 1
    (output_dir / "notes.txt").unlink()
    manifest_path = output_dir / MANIFEST_NAME
    manifest_path.write_text(json.dumps({**json.loads(manifest_path.read_text()), "complete": False}))
    assert verify_embedding_output(output_dir) == ["the run is not complete (6 input rows done): resume it"]
    assert run_embed("--verify", output_dir) == 1
    for path in [manifest_path, *output_dir.glob("shard-*.parquet")]:
        path.unlink()
    assert verify_embedding_output(output_dir) == [f"{output_dir} has no {MANIFEST_NAME}: the run never finished a shard"]
    assert run_embed("--verify", output_dir) == 1


def test_verify_finds_infinite_values_stored_in_float16_shards(tmp_path, model_dir, fixture_model, capsys):
    """A model whose vectors exceed float16's 65,504: `embed --dtype float16` refuses (naming the sentence); with
    --allow-non-finite it stores inf, and --verify reports the shard, the count and the first row."""
    import copy

    loud_dir = tmp_path / "loud-model"
    shutil.copytree(model_dir, loud_dir)
    loud = copy.deepcopy(fixture_model)
    with torch.no_grad():
        loud.scalar_mixes[0].gamma.fill_(1e7)
    loud.save_pretrained(loud_dir)
    corpus = write_lines(tmp_path / "corpus.txt", ["one .", "two .", "three ."])
    arguments = [corpus, "--model", loud_dir, "--dtype", "float16"]
    assert run_embed(*arguments, "--output", tmp_path / "refused") == 2
    assert "vectors too large for float16 for the sentence 'one .'" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # inf stored as asked, without numpy's overflow warning
        assert run_embed(*arguments, "--output", tmp_path / "stored", "--allow-non-finite") == 0
    problems = verify_embedding_output(tmp_path / "stored")
    assert len(problems) == 1 and "shard-00000.parquet holds " in problems[0] and "the first in its row 0" in problems[0]
    assert run_embed("--verify", tmp_path / "stored") == 1
    assert verify_embedding_output(tmp_path / "refused-never-made") != []


def test_verify_reads_the_shards_on_its_own_thread(tmp_path, model_dir, monkeypatch):
    """`elmo-hf embed --verify` reads every shard's floats just before its process exits. Through Arrow's thread pool
    (``pq.read_table``, or a read with threads), a pool thread could still be releasing the vectors' Python extension
    type as the interpreter finalized, and the process aborted (exit 134 in 2-4 of 30 runs beside other work): the
    check reads on the calling thread (see ``shards.non_finite_values``)."""
    corpus = write_lines(tmp_path / "corpus.txt", ["one .", "two ."])
    assert run_embed(corpus, "--model", model_dir, "--output", tmp_path / "out") == 0
    reads = []
    read = pq.ParquetFile.read

    def recorded_read(self, *arguments, **options):
        reads.append(options.get("use_threads", True))
        return read(self, *arguments, **options)

    monkeypatch.setattr(pq.ParquetFile, "read", recorded_read)
    monkeypatch.setattr(pq, "read_table", lambda *arguments, **options: pytest.fail("pq.read_table reads through Arrow's pool"))
    assert verify_embedding_output(tmp_path / "out") == []
    assert reads == [False]


def test_the_model_fingerprint_covers_buffers_too(fixture_model):
    """A warm initial LSTM state is a buffer, not a parameter: a model differing only there is another model, and a
    resumed run must not mix the two."""
    import copy

    from elmo_hf.embedding.manifest import model_fingerprint

    warm = copy.deepcopy(fixture_model)
    buffers = dict(warm.named_buffers())
    assert "encoder.initial_hidden_state" in buffers
    with torch.no_grad():
        buffers["encoder.initial_hidden_state"].add_(0.5)
    assert model_fingerprint(warm) != model_fingerprint(fixture_model)


def test_rows_are_counted_with_the_skipped_ones_and_verify_checks_their_continuity(tmp_path, model_dir, capsys):
    """A shard's `input_rows` counts every input row it covers, skipped ones too, so the next shard's `first_row`
    follows on; --verify reports a shard that does not start where the one before ended."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(b"one .\nbad \xff .\ntwo .\nthree .\nbad \xfe again .\nfour .\n")
    output_dir = tmp_path / "out"
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "2", "--skip-invalid") == 0
    manifest = json.loads((output_dir / "manifest.json").read_text())
    assert [(shard["first_row"], shard["input_rows"], shard["rows"]) for shard in manifest["shards"]] == [(0, 2, 1), (2, 2, 2), (4, 2, 1)]
    assert load_shards(output_dir)["input_row"][:] == [0, 2, 3, 5]
    assert verify_embedding_output(output_dir) == []
    manifest["shards"][2]["first_row"] = 5
    (output_dir / "manifest.json").write_text(json.dumps(manifest))
    assert verify_embedding_output(output_dir) == ["shard-00002.parquet starts at input row 5, expected 4"]


def test_every_input_row_is_numbered_blank_csv_rows_and_a_byte_order_mark_included(tmp_path, model_dir):
    """One row rule for every format: a whitespace-only or empty CSV line is a row (an empty sentence, as an empty
    text line), not dropped unnumbered; a UTF-8 byte order mark is not a word; only `\\n` ends a text line."""
    (tmp_path / "one-column.csv").write_text("text\nhello there .\n   \n\nworld .\n", encoding="utf-8")
    assert run_embed(tmp_path / "one-column.csv", "--model", model_dir, "--output", tmp_path / "csv") == 0
    output = load_shards(tmp_path / "csv")
    assert output["input_row"][:] == [0, 1, 2, 3] and output["num_words"][:] == [3, 0, 0, 2]

    (tmp_path / "marked.txt").write_bytes(b"\xef\xbb\xbfFirst words .\nbreak\x0bhere\x0cand\xe2\x80\xa8there\rtoo .\n")
    assert run_embed(tmp_path / "marked.txt", "--model", model_dir, "--output", tmp_path / "txt") == 0
    output = load_shards(tmp_path / "txt")
    assert output["input_row"][:] == [0, 1] and output["words"][0] == ["First", "words", "."]


def test_resume_names_a_symbolic_link_in_the_output(tmp_path, model_dir, capsys):
    corpus = write_lines(tmp_path / "corpus.txt", ["one .", "two .", "three ."])
    output_dir = tmp_path / "out"
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "1") == 0
    (tmp_path / "elsewhere").mkdir()
    (output_dir / "shard-00009.parquet").symlink_to(tmp_path / "elsewhere")
    assert run_embed(corpus, "--model", model_dir, "--output", output_dir, "--shard-size", "1", "--resume") == 2
    error = capsys.readouterr().err
    assert f"{output_dir / 'shard-00009.parquet'} is a symbolic link (to {tmp_path / 'elsewhere'})" in error
    assert (tmp_path / "elsewhere").is_dir()


def test_a_lone_surrogate_escape_in_json_lines_is_one_row_named_in_the_file_or_skipped(tmp_path, model_dir, capsys):
    """pyarrow refuses the whole block for one `\\ud800` escape, naming a row within the block; the file used to be
    unreadable even with --skip-invalid."""
    lines = [json.dumps({"text": f"line {index} ."}) for index in range(1500)]
    lines[1200] = '{"text": "bad \\ud800 ."}'
    (tmp_path / "data.jsonl").write_text("\n".join(lines) + "\n")
    assert run_embed(tmp_path / "data.jsonl", "--model", model_dir, "--output", tmp_path / "strict") == 2
    assert "data.jsonl row 1200: (line 1201) holds the escape of a lone surrogate (\\ud800)" in capsys.readouterr().err
    assert run_embed(tmp_path / "data.jsonl", "--model", model_dir, "--output", tmp_path / "skipping", "--skip-invalid") == 0
    output = load_shards(tmp_path / "skipping")
    assert output["input_row"][:] == [row for row in range(1500) if row != 1200]
    assert output["text"][:3] == ["line 0 .", "line 1 .", "line 2 ."]
