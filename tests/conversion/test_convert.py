import json
import shutil
import sys

import h5py
import numpy as np
import pytest
import torch

from conversion.convert_allennlp_to_hf import main as convert_main
from conversion.convert_hf_to_allennlp import main as export_main
from elmo_hf.conversion import ConversionError
from elmo_hf.conversion.convert_allennlp_to_hf import convert_allennlp_to_hf
from elmo_hf.conversion.convert_hf_to_allennlp import convert_hf_to_allennlp
from elmo_hf import ELMoConfig, ELMoModel, ELMoTokenizer
from elmo_hf.storage.output_directory import OutputDirectoryError

from ..helpers import assert_hdf5_files_identical, tiny_options, write_random_original_model


def convert(options_file, weight_file, output_dir, **kwargs):
    return convert_allennlp_to_hf(options_file, weight_file, output_dir, **kwargs)


def test_fixture_converts_to_a_loadable_directory(converted_fixture_dir):
    names = {path.name for path in converted_fixture_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer_config.json"} <= names
    model = ELMoModel.from_pretrained(converted_fixture_dir)
    tokenizer = ELMoTokenizer.from_pretrained(converted_fixture_dir)
    output = model(**tokenizer(["The bank is open ."], return_tensors="pt"))
    assert output.last_hidden_state.shape == (1, 5, 32)


def test_fixture_round_trip_is_bit_exact(allennlp_fixture_dir, converted_fixture_dir, tmp_path):
    convert_hf_to_allennlp(converted_fixture_dir, tmp_path / "exported")
    assert_hdf5_files_identical(allennlp_fixture_dir / "lm_weights.hdf5", tmp_path / "exported" / "weights.hdf5")
    original = json.loads((allennlp_fixture_dir / "options.json").read_text())
    assert json.loads((tmp_path / "exported" / "options.json").read_text()) == original


def test_cli_verifies_and_prints_actual_vs_expected(allennlp_fixture_dir, tmp_path, capsys):
    status = convert_main(
        [
            "--options", str(allennlp_fixture_dir / "options.json"),
            "--weights", str(allennlp_fixture_dir / "lm_weights.hdf5"),
            "--output", str(tmp_path / "out"),
            "--verify", str(allennlp_fixture_dir),
        ]
    )
    printed = capsys.readouterr().out
    assert status == 0
    assert printed.count("verify top layer, batch") == 10 and "verify token layer" in printed
    assert "actual" in printed and "expected" in printed and "FAIL" not in printed


def test_failed_verification_writes_nothing(allennlp_fixture_dir, tmp_path, capsys):
    options_file, weight_file = write_random_original_model(json.loads((allennlp_fixture_dir / "options.json").read_text()), tmp_path / "random")
    status = convert_main(
        ["--options", str(options_file), "--weights", str(weight_file), "--output", str(tmp_path / "out"), "--verify", str(allennlp_fixture_dir)]
    )
    assert status == 1 and "verification failed, nothing written" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert [path.name for path in tmp_path.iterdir()] == ["random"]  # no staging directory left behind


@pytest.mark.parametrize(
    "changes",
    [
        dict(filters=[[1, 4], [2, 4]], projection_dim=8),  # F == P: no CNN_proj
        dict(projection_dim=16, dim=16),  # P == D: no W_P_0
        dict(n_highway=0, use_skip_connections=False),
        dict(n_highway=3, n_layers=3, activation="tanh"),
    ],
)
def test_optional_pieces_convert_and_round_trip(changes, tmp_path, tokenizer):
    options = tiny_options(**changes)
    options_file, weight_file = write_random_original_model(options, tmp_path / "original")
    config = ELMoConfig.from_options_dict(options)
    with h5py.File(weight_file, "r") as weights:
        assert ("CNN_proj" in weights) == (config.char_cnn_output_dim != config.projection_dim)
        assert ("W_P_0" in weights["RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell"]) == (config.projection_dim < config.lstm_cell_size)
    convert(options_file, weight_file, tmp_path / "hf")
    model = ELMoModel.from_pretrained(tmp_path / "hf")
    assert torch.isfinite(model(**tokenizer(["a few words"], return_tensors="pt")).last_hidden_state).all()
    convert_hf_to_allennlp(tmp_path / "hf", tmp_path / "exported")
    assert_hdf5_files_identical(weight_file, tmp_path / "exported" / "weights.hdf5")


def test_export_reports_state_the_original_cannot_hold(converted_fixture_dir, tmp_path, capsys):
    model = ELMoModel.from_pretrained(converted_fixture_dir)
    model.set_initial_lstm_state(torch.ones(2, 2, 16), torch.ones(2, 2, 64))
    model.save_pretrained(tmp_path / "warm")
    assert export_main(["--model", str(tmp_path / "warm"), "--output", str(tmp_path / "exported")]) == 0
    printed = capsys.readouterr().out
    assert "not exported" in printed and "encoder.initial_hidden_state" in printed and "scalar_mixes" not in printed


def _corrupt(weight_file, edit):
    with h5py.File(weight_file, "a") as weights:
        edit(weights)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda w: w.__delitem__("CNN_high_1/W_carry"), r"missing dataset 'CNN_high_1/W_carry' \(expected shape \(20, 20\)"),
        (
            lambda w: (w.__delitem__("CNN/b_cnn_0"), w.create_dataset("CNN/b_cnn_0", data=np.zeros(5, np.float32))),
            r"does not match options.json: dataset 'CNN/b_cnn_0' has shape \(5,\), expected \(4,\)",
        ),
        (
            lambda w: w.create_dataset("CNN_high_2/W_carry", data=np.zeros((20, 20), np.float32)),
            r"does not match options.json: it holds biLM dataset\(s\) the options do not describe: \['CNN_high_2/W_carry'\]",
        ),
        (
            lambda w: (w.__delitem__("char_embed"), w.create_dataset("char_embed", data=np.zeros((261, 4), np.float64))),
            r"dataset 'char_embed' has dtype float64, expected float32",
        ),
    ],
)
def test_bad_weight_files_raise_and_write_nothing(edit, message, tmp_path):
    options_file, weight_file = write_random_original_model(tiny_options(), tmp_path / "original")
    _corrupt(weight_file, edit)
    with pytest.raises(ConversionError, match=message):
        convert(options_file, weight_file, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_other_bad_inputs(tmp_path):
    options_file, weight_file = write_random_original_model(tiny_options(), tmp_path / "original")
    with pytest.raises(ConversionError, match="weight file not found"):
        convert(options_file, tmp_path / "missing.hdf5", tmp_path / "hf")
    with pytest.raises(ConversionError, match="options file not found"):
        convert(tmp_path / "missing.json", weight_file, tmp_path / "hf")
    not_hdf5 = tmp_path / "weights.txt"
    not_hdf5.write_text("not an hdf5 file")
    with pytest.raises(ConversionError, match=r"is not an HDF5 file"):
        convert(options_file, not_hdf5, tmp_path / "hf")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{lstm:")
    with pytest.raises(ConversionError, match="is not valid JSON"):
        convert(bad_json, weight_file, tmp_path / "hf")
    missing_option = tiny_options()
    del missing_option["lstm"]["projection_dim"]
    (tmp_path / "missing_option.json").write_text(json.dumps(missing_option))
    with pytest.raises(ConversionError, match=r"missing_option.json: options.json: missing field lstm.projection_dim"):
        convert(tmp_path / "missing_option.json", weight_file, tmp_path / "hf")
    # options describe a different network than the weights
    (tmp_path / "other.json").write_text(json.dumps(tiny_options(dim=32)))
    with pytest.raises(ConversionError, match=r"does not match options.json: dataset 'RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0'"):
        convert(tmp_path / "other.json", weight_file, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_existing_output_is_refused_and_overwrite_replaces_only_an_earlier_conversion(tmp_path):
    options_file, weight_file = write_random_original_model(tiny_options(), tmp_path / "original")
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "keep.txt").write_text("user data")
    with pytest.raises(OutputDirectoryError, match="already exists; pass --overwrite"):
        convert(options_file, weight_file, tmp_path / "hf")
    with pytest.raises(OutputDirectoryError, match="is not an elmo-hf converted model.*keep.txt"):
        convert(options_file, weight_file, tmp_path / "hf", overwrite=True)
    assert (tmp_path / "hf" / "keep.txt").read_text() == "user data"
    convert(options_file, weight_file, tmp_path / "converted")
    first = (tmp_path / "converted" / "model.safetensors").read_bytes()
    convert(options_file, weight_file, tmp_path / "converted", overwrite=True)
    assert (tmp_path / "converted" / "model.safetensors").read_bytes() == first
    with pytest.raises(OutputDirectoryError, match="already exists"):
        convert_hf_to_allennlp(tmp_path / "converted", tmp_path / "original")
    with pytest.raises(ConversionError, match="no config.json"):
        convert_hf_to_allennlp(tmp_path / "original", tmp_path / "exported")
    assert not (tmp_path / "exported").exists()


def test_unrelated_datasets_are_reported(tmp_path, capsys):
    options_file, weight_file = write_random_original_model(tiny_options(), tmp_path / "original")
    _corrupt(weight_file, lambda w: w.create_dataset("softmax/W", data=np.zeros((3, 8), np.float32)))
    status = convert_main(["--options", str(options_file), "--weights", str(weight_file), "--output", str(tmp_path / "hf")])
    assert status == 0
    assert "unused dataset (not part of the biLM, not converted): softmax/W" in capsys.readouterr().out


@pytest.mark.parametrize(
    "file_name, millions",
    [
        ("elmo_2x1024_128_2048cnn_1xhighway_options.json", 13.6),
        pytest.param("elmo_2x4096_512_2048cnn_2xhighway_options.json", 93.6, marks=pytest.mark.slow),
    ],
)
def test_full_size_round_trip_is_bit_exact(file_name, millions, pretrained_options_dir, tmp_path):
    options = json.loads((pretrained_options_dir / file_name).read_text())
    options_file, weight_file = write_random_original_model(options, tmp_path / "original", scale=0.05)
    report = convert(options_file, weight_file, tmp_path / "hf")
    assert round(report.num_parameters / 1e6, 1) == millions
    convert_hf_to_allennlp(tmp_path / "hf", tmp_path / "exported")
    assert_hdf5_files_identical(weight_file, tmp_path / "exported" / "weights.hdf5")
    shutil.rmtree(tmp_path)


def test_non_finite_weights_are_refused_unless_allowed(tmp_path, capsys):
    options_file, weight_file = write_random_original_model(tiny_options(), tmp_path / "original")
    _corrupt(weight_file, lambda w: w["RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell/W_0"].__setitem__((0, 0), np.nan))
    _corrupt(weight_file, lambda w: w["CNN/b_cnn_1"].__setitem__(0, np.inf))
    with pytest.raises(ConversionError, match=r"dataset 'CNN/b_cnn_1' holds 1 NaN or infinite value\(s\).*--allow-non-finite"):
        convert(options_file, weight_file, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    status = convert_main(["--options", str(options_file), "--weights", str(weight_file), "--output", str(tmp_path / "hf")])
    assert status == 2 and "NaN or infinite" in capsys.readouterr().err and not (tmp_path / "hf").exists()
    convert(options_file, weight_file, tmp_path / "hf", allow_non_finite=True)
    assert (tmp_path / "hf" / "model.safetensors").is_file()


def test_verify_fails_on_nan_outputs_and_writes_nothing(allennlp_fixture_dir, tmp_path, capsys):
    """One NaN in an LSTM weight makes the outputs NaN: --verify must fail (nan > tolerance is False)."""
    original = tmp_path / "original"
    original.mkdir()
    shutil.copy(allennlp_fixture_dir / "options.json", original)
    shutil.copy(allennlp_fixture_dir / "lm_weights.hdf5", original)
    _corrupt(original / "lm_weights.hdf5", lambda w: w["RNN_0/RNN/MultiRNNCell/Cell0/LSTMCell/W_0"].__setitem__((0, 0), np.nan))
    arguments = ["--options", str(original / "options.json"), "--weights", str(original / "lm_weights.hdf5"), "--output", str(tmp_path / "out")]
    status = convert_main([*arguments, "--verify", str(allennlp_fixture_dir), "--allow-non-finite"])
    error = capsys.readouterr().err
    assert status == 1 and "verification failed, nothing written" in error and "= nan >" in error
    assert not (tmp_path / "out").exists()


def test_a_truncated_weight_file_is_named_as_such(tmp_path, capsys):
    options_file, weight_file = write_random_original_model(tiny_options(), tmp_path / "original")
    content = weight_file.read_bytes()
    weight_file.write_bytes(content[: len(content) // 2])
    status = convert_main(["--options", str(options_file), "--weights", str(weight_file), "--output", str(tmp_path / "hf")])
    error = capsys.readouterr().err
    assert status == 2 and str(weight_file) in error and ("cannot be read as HDF5" in error or "is not an HDF5 file" in error)
    assert "Hub" not in error and not (tmp_path / "hf").exists()


def test_the_converter_never_deletes_the_working_directory(tmp_path, monkeypatch, capsys):
    """`--output . --overwrite` in a directory of one's own files used to delete them all."""
    options_file, weight_file = write_random_original_model(tiny_options(), tmp_path / "original")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    monkeypatch.chdir(mine)
    status = convert_main(["--options", str(options_file), "--weights", str(weight_file), "--output", ".", "--overwrite"])
    error = capsys.readouterr().err  # refused before anything loads: the folder holds what elmo-hf did not write
    assert status == 2 and "argument --output: output . exists and is not empty, and it is no elmo-hf output" in error
    assert (mine / "thesis.tex").read_text() == "years of work"


def test_the_conversion_scripts_run_the_command_with_its_flags(monkeypatch):
    """``python -m conversion.<script>``: thin entry points to ``elmo-hf convert`` / ``export`` (the library is
    ``elmo_hf.conversion``; nothing in the package imports the scripts)."""
    import elmo_hf_cli
    from conversion import convert_elmoformanylangs, convert_tf_checkpoint

    calls = []
    monkeypatch.setattr(elmo_hf_cli, "main", lambda arguments: calls.append(arguments) or 0)
    assert convert_main(["--options", "o.json", "--weights", "w.hdf5", "--output", "out"]) == 0
    assert export_main(["--model", "m", "--output", "out"]) == 0
    assert convert_elmoformanylangs.main(["zhs.model", "--output", "out"]) == 0
    assert convert_tf_checkpoint.main(["save_dir", "--vocab", "vocab.txt", "--output", "out"]) == 0
    assert convert_tf_checkpoint.main(["--checkpoint", "save_dir", "--vocab", "vocab.txt", "--output", "out"]) == 0
    assert calls == [
        ["convert", "--options", "o.json", "--weights", "w.hdf5", "--output", "out"],
        ["export", "--model", "m", "--output", "out"],
        ["convert", "--elmoformanylangs", "zhs.model", "--output", "out"],
        ["convert", "--checkpoint", "save_dir", "--vocab", "vocab.txt", "--output", "out"],
        ["convert", "--checkpoint", "save_dir", "--vocab", "vocab.txt", "--output", "out"],
    ]


def test_convert_overwrite_killed_at_any_step_of_the_swap_leaves_the_whole_old_or_the_whole_new_model(tmp_path, caplog):
    """`convert --overwrite` killed (SIGKILL) at every step of replacing the model directory, and after each file of
    the old model deleted: the target is always one whole conversion (sha256 of every file), never a mix, and the
    next run names the folders it finished or deleted."""
    from ..storage.test_output_directory import run_killed_at, tree_of

    old_options, old_weights = write_random_original_model(tiny_options(), tmp_path / "old", seed=1)
    new_options, new_weights = write_random_original_model(tiny_options(), tmp_path / "new", seed=2)
    convert(new_options, new_weights, tmp_path / "reference" / "converted")  # the model card names the folder
    new = tree_of(tmp_path / "reference" / "converted")
    target = tmp_path / "models" / "converted"
    convert(old_options, old_weights, target)
    old = tree_of(target)
    steps = ["staging-written", "journal-written", "moved-aside", "swapped"]
    steps += [f"remove-old:{n}" for n in range(1, len(old) + 2)]  # every file of the old model, and its marker
    assert len(steps) >= 12 and old != new
    for step in steps:
        assert run_killed_at(step, lambda: convert(new_options, new_weights, target, overwrite=True)), step
        if step == "moved-aside":  # between the two renames: the target is absent, the old model whole aside
            assert tree_of(target) is None and tree_of(next(target.parent.glob(".converted.*.replaced"))) == old
        else:
            assert tree_of(target) in (old, new), f"killed at {step}: the target is a mix"
        leftovers = [path for path in target.parent.iterdir() if path.name.endswith((".staging", ".replaced"))]
        caplog.clear()
        convert(old_options, old_weights, target, overwrite=True)  # the next run
        assert all(str(leftover) in caplog.text for leftover in leftovers), (step, caplog.text)
        assert tree_of(target) == old and [path.name for path in target.parent.iterdir()] == ["converted"]


def test_convert_overwrite_keeps_a_file_it_did_not_write_even_with_a_name_it_writes(tmp_path):
    """`my_finetune.py` matches the `*.py` the converter writes, but no conversion's record lists it: --overwrite
    deletes nothing and names it."""
    options_file, weight_file = write_random_original_model(tiny_options(), tmp_path / "original")
    convert(options_file, weight_file, tmp_path / "converted")
    (tmp_path / "converted" / "my_finetune.py").write_text("years of work")
    with pytest.raises(OutputDirectoryError, match="recorded writing .*: my_finetune.py; .*these are kept"):
        convert(options_file, weight_file, tmp_path / "converted", overwrite=True)
    assert (tmp_path / "converted" / "my_finetune.py").read_text() == "years of work"


def test_a_converted_model_missing_a_file_it_names_fails_loudly(tmp_path):
    """A model directory without its tokenizer_config.json or a remote-code module used to load with defaults."""
    options_file, weight_file = write_random_original_model(tiny_options(), tmp_path / "original")
    convert(options_file, weight_file, tmp_path / "converted")
    ELMoModel.from_pretrained(tmp_path / "converted")
    for name in ["tokenizer_config.json", "validation_elmo.py"]:
        damaged = tmp_path / f"without-{name}"
        shutil.copytree(tmp_path / "converted", damaged)
        (damaged / name).unlink()
        with pytest.raises(OSError, match=f"model directory {damaged} is incomplete: {name} is missing"):
            ELMoModel.from_pretrained(damaged)


@pytest.mark.parametrize(
    "module, arguments",
    [
        ("convert_allennlp_to_hf", ["convert", "--options", "{file}", "--weights", "{file}"]),
        ("convert_elmoformanylangs", ["convert", "--elmoformanylangs", "{directory}"]),
        ("nlpl_zip", ["convert", "--zip", "{file}"]),
        ("convert_tf_checkpoint", ["convert", "--checkpoint", "{file}", "--vocab", "{file}"]),
        ("convert_hf_to_allennlp", ["export", "--model", "{directory}"]),
    ],
)
def test_every_converter_without_its_libraries_names_the_convert_extra(module, arguments, tmp_path, monkeypatch, capsys):
    from elmo_hf_cli import main

    (tmp_path / "input.txt").write_text("x")
    monkeypatch.setitem(sys.modules, f"elmo_hf.conversion.{module}", None)  # as if h5py were missing
    argv = [argument.format(file=tmp_path / "input.txt", directory=tmp_path) for argument in arguments]
    assert main([*argv, "--output", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert "the converter needs h5py: pip install 'elmo-hf[convert]'" in error and module in error, error
    assert not (tmp_path / "out").exists()
