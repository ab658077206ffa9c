"""ELMo TF-Hub modules in the TF1 Hub format -> ELMoModel (conversion/tfhub_module.py, conversion/convert_tfhub_module.py).

The fixtures (tests/fixtures/tfhub-module/, see its README) were exported by tensorflow-hub's own exporter around
bilm-tf's graph, and their reference outputs computed by hub.Module; these tests need no TensorFlow. Variants are
made by rewriting the fixture's variables with a hand-written checkpoint (tf_bundle.write_bundle).
"""

import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from elmo_hf import ELMoModel, ELMoTokenizer
from elmo_hf.conversion import ConversionError
from elmo_hf.conversion.convert_tfhub_module import convert_tfhub_module, load_tfhub_module
from elmo_hf.conversion.tf_checkpoint import TFCheckpoint
from elmo_hf.word_splitters_elmo import ascii_word_pattern
from elmo_hf_cli import main as cli_main

from .tf_bundle import write_bundle

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tfhub-module"
MODULES = ("google-style", "deeppavlov-style")
OUTPUT_KEYS = ("word_emb", "lstm_outputs1", "lstm_outputs2", "elmo", "default")
TOLERANCE = 1e-6


def archive(name: str) -> Path:
    return FIXTURES / f"{name}.tar.gz"


def reference(name: str) -> dict:
    with np.load(FIXTURES / f"{name}-reference_outputs.npz") as loaded:
        return {key: loaded[key] for key in loaded.files}


def extract(name: str, target: Path) -> Path:
    with tarfile.open(archive(name)) as opened:
        opened.extractall(target, filter="data")
    return target


@pytest.fixture(scope="module")
def module_dirs(tmp_path_factory) -> dict:
    return {name: extract(name, tmp_path_factory.mktemp(name)) for name in MODULES}


@pytest.fixture(scope="module")
def converted(module_dirs) -> dict:
    return {name: load_tfhub_module(directory) for name, directory in module_dirs.items()}


def module_outputs(model: ELMoModel, pooling: str, batch, tokenizer: ELMoTokenizer, lstm_state=None):
    """The five Hub outputs from elmo-hf's (the migration table of docs/guide/conversion.md), and the state."""
    split = isinstance(batch[0], list)
    inputs = tokenizer(batch, is_split_into_words=split, padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model(**inputs, lstm_state=lstm_state, return_lstm_state=True)
    projection, gamma = model.config.projection_dim, model.scalar_mixes[0].gamma.detach()
    default = output.sentence_vectors("mean") / (1 if pooling == "elmo" else gamma)
    outputs = {
        "word_emb": output.hidden_states[0][..., :projection], "lstm_outputs1": output.hidden_states[1],
        "lstm_outputs2": output.hidden_states[2], "elmo": output.elmo_representations[0], "default": default,
    }
    return {key: value.numpy() for key, value in outputs.items()}, output.word_mask.sum(dim=1).tolist(), output.lstm_state


def max_difference_at_valid_positions(actual: np.ndarray, expected: np.ndarray, lengths: list[int]) -> float:
    if actual.ndim == 2:  # default: one vector per sentence
        return float(np.abs(actual - expected).max())
    return max(float(np.abs(actual[row, :length] - expected[row, :length]).max(initial=0.0)) for row, length in enumerate(lengths))


def signature_inputs(ref: dict) -> dict:
    """Each signature's input as the converted tokenizer takes it: the words up to sequence_len; the raw sentences."""
    words = [[str(word) for word in row[:length]] for row, length in zip(ref["tokens"], ref["sequence_len"])]
    return {"tokens": words, "default": [str(sentence) for sentence in ref["strings"]]}


# ---- parity -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", MODULES)
def test_all_five_outputs_of_both_signatures_match_the_modules_first_call(converted, name):
    read, ref = converted[name], reference(name)
    tokenizer = ELMoTokenizer(word_splitter="space")
    for signature, batch in signature_inputs(ref).items():
        outputs, lengths, _ = module_outputs(read.model, read.default_pooling, batch, tokenizer)
        expected_lengths = ref["sequence_len"].tolist() if signature == "tokens" else [len([word for word in text.split(" ") if word]) for text in batch]
        assert lengths == expected_lengths  # the module's padding positions (nonzero in its word_emb) are not compared
        for key in OUTPUT_KEYS:
            expected = ref[f"{signature}/{key}/call1"]
            difference = max_difference_at_valid_positions(outputs[key], expected, lengths)
            assert difference <= TOLERANCE, (name, signature, key, difference)


@pytest.mark.parametrize("name", MODULES)
def test_threading_lstm_state_reproduces_the_modules_second_call(converted, name):
    read, ref = converted[name], reference(name)
    tokenizer = ELMoTokenizer(word_splitter="space")
    for signature, batch in signature_inputs(ref).items():
        _, _, state = module_outputs(read.model, read.default_pooling, batch, tokenizer)
        outputs, lengths, _ = module_outputs(read.model, read.default_pooling, batch, tokenizer, lstm_state=state)
        for key in OUTPUT_KEYS:
            expected = ref[f"{signature}/{key}/call2"]
            assert not np.allclose(expected, ref[f"{signature}/{key}/call1"]) or key == "word_emb"  # the module is stateful
            assert max_difference_at_valid_positions(outputs[key], expected, lengths) <= TOLERANCE, (name, signature, key)


def test_what_the_default_output_pools_is_read_from_the_graph(converted):
    assert converted["google-style"].default_pooling == "elmo"
    assert converted["deeppavlov-style"].default_pooling == "the mix before scaling"
    for read in converted.values():
        assert torch.allclose(read.model.scalar_mixes[0].scalar_weights, torch.tensor([0.4, -0.7, 0.9]))
        assert torch.allclose(read.model.scalar_mixes[0].gamma, torch.tensor([1.7]))
        assert read.non_zero_state_buffers == [] and len(read.variables.state_buffers) == 16 and read.num_shards == 2


def test_the_space_splitter_splits_as_the_default_signature():
    """tf.string_split(sentences, " "): spaces only, empty pieces dropped; tabs and other whitespace stay in words."""
    tokenizer = ELMoTokenizer(word_splitter="space")
    pattern = ascii_word_pattern("space")
    for text in [" dogs\tbark loudly at  night ", "a\u00a0b c\nd", "", "   ", "Zürich 日本語  x"]:
        expected = [piece for piece in text.split(" ") if piece]
        assert [word for word, _ in tokenizer.split_words(text)] == expected
        if text.isascii():
            assert pattern.findall(text) == expected


# ---- what a module may be given as, and its variants ------------------------------------------------------------------


def state_dicts_equal(first: ELMoModel, second: ELMoModel) -> bool:
    return first.state_dict().keys() == second.state_dict().keys() and all(
        torch.equal(value, second.state_dict()[name]) for name, value in first.state_dict().items()
    )


def test_the_tar_gz_a_download_folder_and_the_directory_give_the_same_model(tmp_path, converted, module_dirs):
    report = convert_tfhub_module(archive("google-style"), tmp_path / "from-archive")
    assert report.default_pooling == "elmo" and report.num_state_buffers == 16
    assert state_dicts_equal(ELMoModel.from_pretrained(tmp_path / "from-archive"), converted["google-style"].model)
    assert [path.name for path in tmp_path.iterdir()] == ["from-archive"]  # the extraction is gone
    shutil.copytree(module_dirs["google-style"], tmp_path / "elmo" / "3")
    assert state_dicts_equal(load_tfhub_module(tmp_path / "elmo").model, converted["google-style"].model)
    shutil.copytree(module_dirs["deeppavlov-style"], tmp_path / "elmo" / "2")
    with pytest.raises(ConversionError, match=r"holds 2 modules \(2, 3\): give the one to convert"):
        load_tfhub_module(tmp_path / "elmo")


def module_variables(directory: Path) -> dict[str, np.ndarray]:
    checkpoint = TFCheckpoint(directory / "variables" / "variables")
    return {name: checkpoint.read(name) for name in checkpoint.entries}


def rewritten_module(source: Path, target: Path, variables: dict[str, np.ndarray], num_shards: int = 1) -> Path:
    """The module at ``source`` with its variables replaced by ``variables``, spread over ``num_shards`` shards."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("variables"))
    (target / "variables").mkdir()
    placed = {name: (index % num_shards, value) for index, (name, value) in enumerate(sorted(variables.items()))}
    write_bundle(target / "variables" / "variables", num_shards, placed)
    return target


@pytest.mark.parametrize(
    "variant",
    ["scaling of shape [1]", "char_embed of 261 rows", "no state buffers", "one shard", "three shards", "weight_layers names"],
)
def test_variants_of_the_format_give_the_same_model(tmp_path, module_dirs, converted, variant):
    variables, num_shards = module_variables(module_dirs["google-style"]), 2
    if variant == "scaling of shape [1]":
        variables["aggregation/scaling"] = variables["aggregation/scaling"].reshape(1)
    elif variant == "char_embed of 261 rows":
        variables["bilm/char_embed"] = variables["bilm/char_embed"][1:]
    elif variant == "weight_layers names":  # bilm-tf's weight_layers("elmo", ...) called outside any scope
        variables["elmo_ELMo_W"], variables["elmo_ELMo_gamma"] = variables.pop("aggregation/weights"), variables.pop("aggregation/scaling")
    elif variant == "no state buffers":
        variables = {name: value for name, value in variables.items() if "/Variable" not in name}
    else:
        num_shards = 1 if variant == "one shard" else 3
    read = load_tfhub_module(rewritten_module(module_dirs["google-style"], tmp_path / "module", variables, num_shards))
    assert state_dicts_equal(read.model, converted["google-style"].model) and read.num_shards == num_shards


def test_non_zero_state_buffers_convert_and_are_reported(tmp_path, module_dirs, converted):
    variables = module_variables(module_dirs["google-style"])
    variables["bilm_1/Variable_3"] = np.ones_like(variables["bilm_1/Variable_3"])
    read = load_tfhub_module(rewritten_module(module_dirs["google-style"], tmp_path / "module", variables))
    assert read.non_zero_state_buffers == ["bilm_1/Variable_3"] and state_dicts_equal(read.model, converted["google-style"].model)


def test_options_override_what_the_shapes_cannot_say_and_are_checked_against_them(tmp_path, module_dirs, converted):
    options = converted["google-style"].model.config.to_options_dict()
    options["lstm"].update(cell_clip=5, proj_clip=0, use_skip_connections=False)
    options["char_cnn"]["activation"] = "tanh"
    (tmp_path / "options.json").write_text(json.dumps(options))
    report = convert_tfhub_module(module_dirs["google-style"], tmp_path / "out", tmp_path / "options.json")
    config = report.config
    assert (config.cell_clip, config.projection_clip, config.use_skip_connections, config.char_cnn_activation) == (5, None, False, "tanh")
    assert json.loads((tmp_path / "out" / "original_options.json").read_text()) == options
    options["lstm"]["projection_dim"] = 6
    (tmp_path / "options.json").write_text(json.dumps(options))
    with pytest.raises(ConversionError, match=r"inconsistent shapes: variable 'bilm/CNN_proj/W_proj' has shape \(16, 4\), expected \(16, 6\) \(from options.json\)"):
        load_tfhub_module(module_dirs["google-style"], tmp_path / "options.json")


# ---- refusals: named, and nothing left behind ----------------------------------------------------------------------


def damaged_module(source: Path, target: Path, damage: str) -> Path:
    variables = module_variables(source)
    if damage == "unknown variable":
        variables["bilm/extra_layer/W"] = np.ones(3, dtype=np.float32)
    elif damage == "missing variable":
        del variables["bilm/CNN_high_1/b_carry"]
    elif damage == "wrong shape":
        variables["bilm/RNN_1/RNN/MultiRNNCell/Cell1/rnn/lstm_cell/bias"] = np.zeros(30, dtype=np.float32)
    elif damage == "missing mix":
        del variables["aggregation/scaling"]
    module = rewritten_module(source, target, variables, num_shards=2)
    if damage == "corrupt data file":
        data_file = module / "variables" / "variables.data-00001-of-00002"
        data = bytearray(data_file.read_bytes())
        data[5] ^= 1
        data_file.write_bytes(bytes(data))
    return module


REFUSALS = {
    "unknown variable": r"unknown variable\(s\) \['bilm/extra_layer/W'\]",
    "missing variable": r"missing variable 'bilm/CNN_high_1/b_carry'",
    "wrong shape": r"inconsistent shapes: variable 'bilm/RNN_1/RNN/MultiRNNCell/Cell1/rnn/lstm_cell/bias' has shape \(30,\), expected \(32,\)",
    "missing mix": r"expected one variable for the scalar mix's scaling .* found none",
    "corrupt data file": r"variables.data-00001-of-00002 is damaged: the checksum of variable",
}


@pytest.mark.parametrize("damage", sorted(REFUSALS))
def test_a_damaged_module_is_refused_naming_it_and_nothing_is_written(tmp_path, module_dirs, damage):
    module = damaged_module(module_dirs["google-style"], tmp_path / "module", damage)
    with tarfile.open(tmp_path / "module.tar.gz", "w:gz") as packed:
        packed.add(module, arcname=".")
    (tmp_path / "outputs").mkdir()
    for source in (module, tmp_path / "module.tar.gz"):
        with pytest.raises(ConversionError, match=REFUSALS[damage]):
            convert_tfhub_module(source, tmp_path / "outputs" / "elmo")
        assert list((tmp_path / "outputs").iterdir()) == []  # no output, no staging folder, no extraction


def test_archives_and_folders_that_are_no_module_are_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConversionError, match="has no tfhub_module.pb and saved_model.pb"):
        load_tfhub_module(tmp_path / "empty")
    (tmp_path / "not-an-archive.tar.gz").write_bytes(b"\x1f\x8b no gzip")
    with pytest.raises(ConversionError, match="is not a tar archive|is damaged"):
        convert_tfhub_module(tmp_path / "not-an-archive.tar.gz", tmp_path / "out")
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(archive("google-style").read_bytes()[:40_000])
    with pytest.raises(ConversionError, match="is damaged and cannot be extracted|is not a tar archive"):
        convert_tfhub_module(truncated, tmp_path / "out")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".elmo-hf-tfhub-*"))


def test_a_module_of_another_format_or_with_an_undecodable_graph_is_refused(tmp_path, module_dirs):
    module = shutil.copytree(module_dirs["google-style"], tmp_path / "module")
    (module / "tfhub_module.pb").write_bytes(b"\x08\x02")
    with pytest.raises(ConversionError, match=r"tfhub_module.pb: module format 2, expected 3"):
        load_tfhub_module(module)
    (module / "tfhub_module.pb").write_bytes(b"\x08\x03")
    saved_model = (module_dirs["google-style"] / "saved_model.pb").read_bytes()
    (module / "saved_model.pb").write_bytes(saved_model[: len(saved_model) // 2])
    with pytest.raises(ConversionError, match=r"saved_model.pb cannot be decoded as a SavedModel"):
        load_tfhub_module(module)


# ---- the command, the directory, the card ----------------------------------------------------------------------------


def test_cli_converts_a_module_whose_directory_embeds_raw_text_as_the_default_signature(tmp_path, capsys):
    from conversion.convert_tfhub_module import main as script_main

    status = script_main([str(archive("deeppavlov-style")), "--output", str(tmp_path / "out")])
    printed = capsys.readouterr().out
    assert status == 0 and "the module's default output: the mean of the mix before scaling" in printed
    assert "16 LSTM state buffer(s)" in printed
    tokenizer = ELMoTokenizer.from_pretrained(tmp_path / "out")
    model = ELMoModel.from_pretrained(tmp_path / "out").eval()
    ref = reference("deeppavlov-style")
    outputs, lengths, _ = module_outputs(model, "the mix before scaling", [str(text) for text in ref["strings"]], tokenizer)
    assert tokenizer.word_splitter == "space"
    assert max_difference_at_valid_positions(outputs["elmo"], ref["default/elmo/call1"], lengths) <= TOLERANCE
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert "license: other" in card and "`default` is `output.sentence_vectors(\"mean\") / gamma`" in card
    assert "elmo-hf convert --tfhub deeppavlov-style.tar.gz --output out" in card and str(tmp_path) not in card
    status = cli_main(["convert", "--tfhub", str(archive("google-style")), "--vocab", "v.txt", "--output", str(tmp_path / "x")])
    assert status == 2 and "--vocab" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_push_to_hub_pushes_the_written_directory_as_the_other_converters_do(tmp_path, monkeypatch):
    """The push itself (push_directory_to_hub) is tested against the Hub test server in tests/hub."""
    import elmo_hf.conversion.convert_tfhub_module as module

    pushes = []
    monkeypatch.setattr(module, "push_directory_to_hub", lambda *arguments: pushes.append(arguments) or "https://hub/alice/elmo")
    report = convert_tfhub_module(archive("google-style"), tmp_path / "elmo", push_to_hub="alice/elmo", private=True, revision="v1")
    assert pushes == [(tmp_path / "elmo", "alice/elmo", True, "v1", None)] and report.pushed_to == "https://hub/alice/elmo"
    card = (tmp_path / "elmo" / "README.md").read_text(encoding="utf-8")
    assert "alice/elmo" in card and "`default` is `output.sentence_vectors(\"mean\")` (the mean of `elmo`" in card
