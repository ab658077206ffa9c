"""bilm-tf TensorFlow checkpoints -> ELMoForPreTraining (conversion/tf_checkpoint.py, conversion/convert_tf_checkpoint.py).

The fixtures (tests/fixtures/tf-checkpoint/, see its README) were written by bilm-tf's own training code and
TensorFlow's Saver; these tests need no TensorFlow.
"""

import hashlib
import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from elmo_hf import ELMoForPreTraining, ELMoModel, ELMoTokenizer
from elmo_hf.conversion import ConversionError
from elmo_hf.conversion.convert_allennlp_to_hf import read_state_dict
from elmo_hf.conversion.convert_tf_checkpoint import convert_tf_checkpoint, dump_weights_name, hdf5_name_of_variable, load_tf_checkpoint
from elmo_hf.conversion.tf_checkpoint import TFCheckpoint, checkpoint_prefix, crc32c
from elmo_hf.pretraining import DataCollatorForBiLM, ELMoLanguageModelScorer
from elmo_hf.validation_elmo import max_abs_difference
from elmo_hf_cli import main as cli_main

from .tf_bundle import write_bundle

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tf-checkpoint"
MODELS = ("two-layer", "one-layer")
SENTENCES = [["First", "Citizen:"], ["Before", "we", "proceed", "any", "further,", "hear", "me", "speak."], ["You", "are", "all"]]


def fixture(name: str) -> Path:
    return FIXTURES / name


@pytest.fixture(scope="module")
def converted() -> dict:
    return {name: load_tf_checkpoint(fixture(name), fixture(name) / "vocab.txt") for name in MODELS}


def copy_fixture(name: str, destination: Path) -> Path:
    target = destination / name
    shutil.copytree(fixture(name), target)
    return target


# ---- the reader ---------------------------------------------------------------------------------------------------


def test_crc32c_matches_the_standard_check_value_and_a_byte_loop():
    assert crc32c(b"123456789") == 0xE3069283
    table = []
    for byte in range(256):
        value = byte
        for _ in range(8):
            value = (value >> 1) ^ (0x82F63B78 if value & 1 else 0)
        table.append(value)
    generator = np.random.default_rng(0)
    for size in (0, 1, 4095, 4096, 70_001):  # below and above the lane-parallel threshold, uneven tails
        data = generator.integers(0, 256, size, dtype=np.uint8)
        state = 0xFFFFFFFF
        for byte in data.tobytes():
            state = table[(state ^ byte) & 0xFF] ^ (state >> 8)
        assert crc32c(data) == state ^ 0xFFFFFFFF, size


@pytest.mark.parametrize("name", MODELS)
def test_every_variable_reads_as_tensorflow_reads_it(name):
    expected = json.loads((fixture(name) / "variables.json").read_text())
    checkpoint = TFCheckpoint(fixture(name))
    assert set(checkpoint.entries) == set(expected)
    for variable, facts in expected.items():
        value = checkpoint.read(variable)  # size and crc32c checked
        assert (value.dtype.name, list(value.shape)) == (facts["dtype"], facts["shape"]), variable
        assert hashlib.sha256(value.tobytes()).hexdigest() == facts["sha256"], variable


def test_a_checkpoint_is_found_from_its_directory_prefix_or_files():
    directory = fixture("two-layer")
    prefix = directory / "model.ckpt-3"
    # The directory's `checkpoint` file names the training machine's absolute path; the copy is found by name.
    assert "/tmp/" in (directory / "checkpoint").read_text()
    for path in (directory, prefix, Path(f"{prefix}.index"), Path(f"{prefix}.data-00000-of-00001"), Path(f"{prefix}.meta")):
        assert checkpoint_prefix(path) == prefix


def test_bilm_tfs_dump_rule_gives_the_names_and_values_of_its_real_dump():
    for name in MODELS:
        checkpoint = TFCheckpoint(fixture(name))
        bilm = [v for v in checkpoint.entries if v.startswith("lm/") and "softmax" not in v and not v.endswith("/Adagrad")]
        with h5py.File(fixture(name) / "weights.hdf5", "r") as dump:
            datasets = []
            dump.visititems(lambda key, item: datasets.append(key) if isinstance(item, h5py.Dataset) else None)
            assert sorted(dump_weights_name(variable) for variable in bilm) == sorted(datasets)
            for variable in bilm:
                assert np.array_equal(checkpoint.read(variable), dump[dump_weights_name(variable)][...]), variable
    # Older checkpoints already carry the dump's names; a single layer is stored as MultiRNNCell/Cell0 by loadable files.
    assert dump_weights_name("lm/RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_P_0") == "RNN_1/RNN/MultiRNNCell/Cell1/LSTMCell/W_P_0"
    assert hdf5_name_of_variable("lm/RNN_1/rnn/lstm_cell/projection/kernel") == "RNN_1/RNN/MultiRNNCell/Cell0/LSTMCell/W_P_0"


# ---- the conversion -----------------------------------------------------------------------------------------------


def test_the_checkpoint_and_its_hdf5_dump_give_the_same_bilm(converted, tokenizer):
    from_checkpoint = converted["two-layer"].model.elmo
    state, _ = read_state_dict(fixture("two-layer") / "weights.hdf5", from_checkpoint.config)
    from_dump = ELMoModel(from_checkpoint.config)
    from_dump.load_state_dict(state)
    for name, value in from_dump.state_dict().items():
        assert torch.equal(value, from_checkpoint.state_dict()[name]), name
    inputs = tokenizer([" ".join(sentence) for sentence in SENTENCES], padding=True, return_tensors="pt")
    with torch.no_grad():
        first, second = from_checkpoint.eval()(**inputs), from_dump.eval()(**inputs)
    assert len(first.hidden_states) == 3
    for layer_a, layer_b in zip(first.hidden_states, second.hidden_states):
        assert max_abs_difference(layer_a, layer_b) == 0.0


@pytest.mark.parametrize("name", MODELS)
def test_the_converted_softmax_reproduces_bilm_tfs_own_loss(converted, name):
    """bilm-tf's test-mode graph scored a batch (full softmax, zero state): the windowed regime reads the same
    streams (training character ids + 1) and must give the same mean NLL per direction."""
    model, vocabulary = converted[name].model, converted[name].vocabulary
    reference = json.loads((fixture(name) / "reference_batch.json").read_text())
    file_words = [line.strip() for line in (fixture(name) / "vocab.txt").read_text().splitlines() if line.strip() != "!!!MAXTERMID"]
    our_id_of_bilm_tf_id = torch.tensor(vocabulary.encode(file_words))
    with torch.no_grad():
        output = model(
            input_ids=torch.tensor(reference["tokens_characters"]) + 1,
            backward_input_ids=torch.tensor(reference["tokens_characters_reverse"]) + 1,
            next_word_labels=our_id_of_bilm_tf_id[torch.tensor(reference["next_token_id"])],
            previous_word_labels=our_id_of_bilm_tf_id[torch.tensor(reference["next_token_id_reverse"])],
        )
    mean_nll = output.negative_log_likelihood / output.num_predictions
    assert max_abs_difference(mean_nll, torch.tensor([reference["forward_loss"], reference["backward_loss"]])) <= 2e-6
    assert max_abs_difference(output.loss, torch.tensor(reference["total_loss"])) <= 2e-6


def test_the_released_special_token_order_is_moved_to_elmo_hfs_ids(converted):
    two_layer, one_layer = converted["two-layer"], converted["one-layer"]
    assert two_layer.reordered_special_tokens and not one_layer.reordered_special_tokens
    file_words = (fixture("two-layer") / "vocab.txt").read_text().split()
    assert file_words[:3] == ["</S>", "<S>", "<UNK>"] and file_words[-1] == "!!!MAXTERMID"
    assert two_layer.vocabulary.words == ("<S>", "</S>", "<UNK>", *file_words[3:-1])
    softmax = TFCheckpoint(fixture("two-layer")).read("lm/softmax/W")
    assert torch.equal(two_layer.model.softmax.weight[0], torch.from_numpy(softmax[1]))  # <S>: line 2 of the file
    assert torch.equal(two_layer.model.softmax.weight[3:], torch.from_numpy(softmax[3:]))
    assert len(two_layer.optimizer_slots) == 27 and two_layer.bookkeeping == ["global_step", "train_perplexity"]


def test_push_to_hub_pushes_the_written_directory_as_the_other_converters_do(tmp_path, monkeypatch):
    """The push itself (push_directory_to_hub) is tested against the Hub test server in tests/hub."""
    import elmo_hf.conversion.convert_tf_checkpoint as module

    pushes = []
    monkeypatch.setattr(module, "push_directory_to_hub", lambda *arguments: pushes.append(arguments) or "https://hub/alice/elmo")
    report = convert_tf_checkpoint(
        fixture("two-layer"), fixture("two-layer") / "vocab.txt", tmp_path / "elmo", push_to_hub="alice/elmo",
        private=True, revision="v1",
    )
    assert pushes == [(tmp_path / "elmo", "alice/elmo", True, "v1", None)] and report.pushed_to == "https://hub/alice/elmo"
    assert "alice/elmo" in (tmp_path / "elmo" / "README.md").read_text(encoding="utf-8")


def test_converted_directory_scores_text_and_continues_as_a_pretraining_model(tmp_path, converted):
    report = convert_tf_checkpoint(fixture("two-layer"), fixture("two-layer") / "vocab.txt", tmp_path / "elmo")
    names = {path.name for path in (tmp_path / "elmo").iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer_config.json", "vocab.txt", "original_options.json", "README.md"} <= names
    assert report.vocabulary_size == 30 and report.reordered_special_tokens
    loaded = ELMoForPreTraining.from_pretrained(tmp_path / "elmo")
    for name, value in converted["two-layer"].model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name

    scorer = ELMoLanguageModelScorer.from_pretrained(tmp_path / "elmo")
    first, second = scorer.score(SENTENCES), scorer.score(SENTENCES)
    assert np.isfinite([first.forward_perplexity, first.backward_perplexity]).all() and first.perplexity > 1.0
    assert first == second
    # The scorer's totals are the model's own per-sentence negative log-likelihood with boundary labels.
    collator = DataCollatorForBiLM(scorer.vocabulary, ELMoTokenizer(), label_boundary_positions=True)
    batch = collator([{"words": words} for words in SENTENCES])
    with torch.no_grad():
        nll = loaded.eval()(**batch).negative_log_likelihood
    expected = torch.tensor([first.forward_negative_log_likelihood, first.backward_negative_log_likelihood])
    assert max_abs_difference(nll, expected) <= 1e-4


def test_cli_converts_a_checkpoint(tmp_path, capsys):
    status = cli_main(
        ["convert", "--checkpoint", str(fixture("one-layer") / "model.ckpt-3"), "--vocab", str(fixture("one-layer") / "vocab.txt"),
         "--output", str(tmp_path / "out")]
    )
    printed = capsys.readouterr().out
    assert status == 0 and "softmax over 30 words" in printed and "11 optimizer slot(s)" in printed
    assert (tmp_path / "out" / "vocab.txt").read_text() == (fixture("one-layer") / "vocab.txt").read_text()
    status = cli_main(["convert", "--checkpoint", str(fixture("one-layer")), "--weights", "w.hdf5", "--output", str(tmp_path / "x")])
    assert status == 2 and "--weights" in capsys.readouterr().err and not (tmp_path / "x").exists()


# ---- refusals -----------------------------------------------------------------------------------------------------


def edit_options(directory: Path, **changes) -> None:
    options = json.loads((directory / "options.json").read_text())
    for key, value in changes.items():
        section, _, field = key.rpartition("__")
        (options[section] if section else options)[field] = value
    (directory / "options.json").write_text(json.dumps(options))


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"char_cnn__n_highway": 2}, "missing variable 'lm/CNN_high_1/W_transform' (expected shape (16, 16)"),
        ({"char_cnn__n_highway": 0}, "holds biLM variable(s) the options do not describe: ['lm/CNN_high_0/W_carry',"),
        ({"lstm__n_layers": 1}, "holds biLM variable(s) the options do not describe"),
        ({"lstm__dim": 16}, "has shape (8, 32), expected (8, 64)"),
        ({"n_tokens_vocab": 31}, "n_tokens_vocab is 31, the softmax has 30 rows"),
        ({"bidirectional": False}, "bidirectional is not true"),
    ],
)
def test_options_that_do_not_describe_the_checkpoint_are_refused(tmp_path, changes, message):
    directory = copy_fixture("two-layer", tmp_path)
    edit_options(directory, **changes)
    with pytest.raises(ConversionError) as error:
        convert_tf_checkpoint(directory, directory / "vocab.txt", tmp_path / "out")
    assert message in str(error.value)
    assert not (tmp_path / "out").exists()


def test_a_word_input_model_is_refused(tmp_path):
    directory = copy_fixture("two-layer", tmp_path)
    options = json.loads((directory / "options.json").read_text())
    del options["char_cnn"]
    (directory / "options.json").write_text(json.dumps(options))
    with pytest.raises(ConversionError, match="char_cnn"):
        load_tf_checkpoint(directory, directory / "vocab.txt")


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda lines: lines[:-2] + lines[-1:], "has 29 words (bilm-tf's count: !!!MAXTERMID skipped) but the checkpoint's softmax has 30 rows"),
        (lambda lines: [line for line in lines if line != "<UNK>"] + ["extra"], "lacks the special token(s) ['<UNK>']"),
        (lambda lines: lines[:5] + [lines[4]] + lines[6:], "appears twice"),
    ],
)
def test_a_vocabulary_that_does_not_fit_the_softmax_is_refused(tmp_path, edit, message):
    directory = copy_fixture("two-layer", tmp_path)
    lines = (directory / "vocab.txt").read_text().splitlines()
    (directory / "vocab.txt").write_text("\n".join(edit(lines)) + "\n")
    with pytest.raises(ConversionError) as error:
        load_tf_checkpoint(directory, directory / "vocab.txt")
    assert message in str(error.value) and "vocab.txt" in str(error.value)


def test_damaged_truncated_or_missing_checkpoints_are_refused(tmp_path):
    directory = copy_fixture("one-layer", tmp_path)
    data_file = directory / "model.ckpt-3.data-00000-of-00001"
    original = data_file.read_bytes()
    byte = TFCheckpoint(directory).entries["lm/char_embed"].offset + 7
    data_file.write_bytes(original[:byte] + bytes([original[byte] ^ 1]) + original[byte + 1 :])
    with pytest.raises(ConversionError, match="damaged: the checksum of variable"):
        load_tf_checkpoint(directory, directory / "vocab.txt")
    data_file.write_bytes(original[:-10])
    with pytest.raises(ConversionError, match="is truncated"):
        load_tf_checkpoint(directory, directory / "vocab.txt")
    index_file = directory / "model.ckpt-3.index"
    index = index_file.read_bytes()
    index_file.write_bytes(index[:50] + bytes([index[50] ^ 1]) + index[51:])
    with pytest.raises(ConversionError, match="index is damaged|is damaged: the checksum of the block"):
        TFCheckpoint(directory)
    index_file.write_bytes(b"not a table")
    with pytest.raises(ConversionError, match="not a TensorFlow checkpoint index"):
        TFCheckpoint(directory)
    with pytest.raises(ConversionError, match="without a 'checkpoint' file"):
        TFCheckpoint(tmp_path)
    with pytest.raises(ConversionError, match=r"model.ckpt-9.index does not exist"):
        TFCheckpoint(directory / "model.ckpt-9")


def test_the_checkpoint_state_file_path_is_unescaped_as_utf_8_and_unreadable_ones_are_refused(tmp_path):
    directory = copy_fixture("one-layer", tmp_path)
    for renamed in ("modèle.ckpt-3", "模型.ckpt-3"):
        for file in directory.glob("model.ckpt-3.*"):
            shutil.copy(file, directory / file.name.replace("model.ckpt-3", renamed))
    state_file = directory / "checkpoint"
    # TF's text format writes the path's non-ASCII bytes as octal escapes: \303\250 is the UTF-8 of "è".
    state_file.write_bytes(b'model_checkpoint_path: "/training/machine/mod\\303\\250le.ckpt-3"\n')
    assert checkpoint_prefix(directory) == directory / "modèle.ckpt-3"
    state_file.write_bytes('model_checkpoint_path: "模型.ckpt-3"\n'.encode("utf-8"))  # unescaped UTF-8, not Latin-1
    assert checkpoint_prefix(directory) == directory / "模型.ckpt-3"
    for content, message in (
        (b"\xff\xfe\x00garbage", "names no model_checkpoint_path (expected tf.train.Saver's checkpoint file"),
        (b'model_checkpoint_path: "model.ckpt-3\\x"\n', r"the model_checkpoint_path value b'model.ckpt-3\\x' cannot be unescaped"),
    ):
        state_file.write_bytes(content)
        with pytest.raises(ConversionError) as error:
            checkpoint_prefix(directory)
        assert message in str(error.value) and str(state_file) in str(error.value)


# A tensor bundle written by hand (tf_bundle.write_bundle), to try shard layouts the fixtures do not have.


def test_a_checkpoint_in_several_shards_reads_each_variable_from_its_shard_file(tmp_path):
    first, second = np.arange(3, dtype=np.float32), np.arange(5, dtype=np.float32) * -1.5
    write_bundle(tmp_path / "model.ckpt-1", 2, {"a": (0, first), "b": (1, second)})
    checkpoint = TFCheckpoint(tmp_path / "model.ckpt-1")
    assert checkpoint.num_shards == 2
    assert [checkpoint.data_file(shard).name for shard in (0, 1)] == ["model.ckpt-1.data-00000-of-00002", "model.ckpt-1.data-00001-of-00002"]
    assert np.array_equal(checkpoint.read("a"), first) and np.array_equal(checkpoint.read("b"), second)


def test_an_index_placing_a_variable_in_a_shard_the_checkpoint_lacks_is_refused(tmp_path):
    write_bundle(tmp_path / "model.ckpt-1", 2, {"a": (0, np.ones(3)), "b": (2, np.ones(2))})
    with pytest.raises(ConversionError) as error:
        TFCheckpoint(tmp_path / "model.ckpt-1")
    message = str(error.value)
    assert "model.ckpt-1.index is damaged: variable 'b' is placed in shard 2, but the checkpoint has 2 shard(s)" in message
