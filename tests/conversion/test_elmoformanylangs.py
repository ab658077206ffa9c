"""ELMoForManyLangs models converted to elmo-hf: parity with the package's own `Embedder` (fixtures made with the real
package by scripts/make_elmoformanylangs_fixture.py, see tests/fixtures/elmoformanylangs/README.md), the loaders, the
tokenizer's character vocabulary, the embedder, the pipeline and the heads, the fast path on the variant, and what the
converter refuses."""

from __future__ import annotations

import json
import pickle
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer, pipeline

from elmo_hf import ELMoConfig, ELMoForTokenClassification, ELMoModel, ELMoTokenizer
from elmo_hf.conversion import ConversionError
from elmo_hf.conversion.convert_elmoformanylangs import convert_elmoformanylangs, read_elmoformanylangs
from elmo_hf.embedding.embedder import ELMoEmbedder, embed_texts
from elmo_hf.tokenization_elmo import CharacterVocabulary
from elmo_hf.validation_elmo import largest, max_abs_difference

from ..helpers import random_model, run_without_elmo_hf, tiny_config, torch_threads

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "elmoformanylangs"
VARIANTS = ("with-words", "chars-only")
SENTENCES = json.loads((FIXTURES / "sentences.json").read_text(encoding="utf-8"))
# The bound; measured: 1.5e-6 (with words), 5.4e-7 (characters only), both paths.
PARITY_TOLERANCE = 1e-5
OUTPUT_LAYERS = (-1, 0, 1, 2, -2)  # sents2elmo's output_layer: the average, each layer, all of them


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models: one intra-op thread (see helpers.torch_threads)."""
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict[str, Path]:
    """Both fixture models converted once, through the whole converter (output policy, card, tokenizer files)."""
    root = tmp_path_factory.mktemp("elmoformanylangs")
    return {variant: convert_elmoformanylangs(FIXTURES / variant, root / variant).output_dir for variant in VARIANTS}


def package_outputs(variant: str) -> dict[str, np.ndarray]:
    with np.load(FIXTURES / f"{variant}.npz") as outputs:
        return dict(outputs)


def as_package_layers(hidden_states: tuple[torch.Tensor, ...], sentence: int, words: int, output_layer: int) -> np.ndarray:
    """What `sents2elmo(output_layer=...)` returns for one sentence, from elmo-hf's L + 1 hidden states."""
    layers = torch.stack([layer[sentence, :words] for layer in hidden_states]).numpy()  # (L + 1, words, 2P)
    if output_layer == -1:
        return layers.mean(axis=0)
    return layers if output_layer == -2 else layers[output_layer]


def worst_difference(hidden_states, expected: dict[str, np.ndarray], output_layer: int) -> float:
    return largest(
        max_abs_difference(as_package_layers(hidden_states, index, len(words), output_layer), expected[f"sentence{index}/layer{output_layer}"])
        for index, words in enumerate(SENTENCES)
    )


@pytest.mark.parametrize("path", ["reference", "fast"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_output_layer_matches_the_package(converted, variant, path):
    model = ELMoModel.from_pretrained(converted[variant]).eval()
    tokenizer = ELMoTokenizer.from_pretrained(converted[variant])
    model.set_inference_path(path)
    inputs = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden_states = model(**inputs).hidden_states
    expected = package_outputs(variant)
    differences = {layer: worst_difference(hidden_states, expected, layer) for layer in OUTPUT_LAYERS}
    assert all(difference <= PARITY_TOLERANCE for difference in differences.values()), differences


def test_the_fixture_clips_and_truncates(converted):
    """The fixtures exercise what differs: the tight clips bite, and words longer than the limit are cut."""
    model = ELMoModel.from_pretrained(converted["chars-only"]).eval()
    tokenizer = ELMoTokenizer.from_pretrained(converted["chars-only"])
    inputs = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        first_layer = model(**inputs).hidden_states[1][inputs["attention_mask"].bool()]
    assert (first_layer.abs() == 0.3).float().mean() > 0.1, "the projection clip (0.3) does not bite"
    vocabulary = tokenizer.character_vocabulary
    assert [word for sentence in SENTENCES for word in sentence if vocabulary.is_truncated(word, 10)] == [
        "internationalization", "대한민국의수도서울특별시"
    ]


def test_tokenizer_counts_characters_not_bytes(converted):
    tokenizer = ELMoTokenizer.from_pretrained(converted["with-words"])
    vocabulary = tokenizer.character_vocabulary
    assert tokenizer.max_characters_per_token == 10 and tokenizer.token_row_width == 11  # word id + 10 slots
    seven_syllables = "서울특별시입니"  # 7 characters, 21 UTF-8 bytes: fits the 8-character room
    row = tokenizer.word_row(seven_syllables)
    assert row[0] == vocabulary.unknown_word  # not in word.dic
    assert row[1] == vocabulary.markers["begin_word"] and row[9] == vocabulary.markers["end_word"]
    assert tokenizer.decode(row) == seven_syllables and not vocabulary.is_truncated(seven_syllables, 10)
    byte_tokenizer = ELMoTokenizer(max_characters_per_token=10)  # the byte scheme cuts it after 8 bytes
    assert byte_tokenizer.decode(byte_tokenizer.word_row(seven_syllables)) == "서울\ufffd"
    twelve = "대한민국의수도서울특별시"
    assert tokenizer.decode(tokenizer.word_row(twelve)) == twelve[:8] and vocabulary.is_truncated(twelve, 10)
    assert tokenizer.truncated_words([seven_syllables, twelve, "a" * 8, "a" * 9, "<bos>"]) == [twelve, "a" * 9]
    # Boundary words are real tokens with their own rows, also when typed in a sentence.
    begin, end = tokenizer.character_vocabulary.boundary_rows(10)
    assert tokenizer.word_row("<eos>").tolist() == end and tokenizer.decode(begin) == "<bos>"
    assert tokenizer.decode(tokenizer.word_row("😀")) == "\ufffd"  # a character not in char.dic: <oov>


def test_auto_classes_load_the_conversion_and_save_it_again(converted, tmp_path):
    directory = converted["with-words"]
    model, tokenizer = AutoModel.from_pretrained(directory).eval(), AutoTokenizer.from_pretrained(directory)
    assert isinstance(model, ELMoModel) and isinstance(tokenizer, ELMoTokenizer)
    assert model.config.character_vocabulary == "unicode_characters" and not model.config.tf_forget_gate_bias
    assert tokenizer.mismatch_with(model.config) is None
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "character_vocabulary.json").read_text(encoding="utf-8")) == json.loads(
        (directory / "character_vocabulary.json").read_text(encoding="utf-8")
    )
    reloaded, reloaded_tokenizer = ELMoModel.from_pretrained(tmp_path).eval(), ELMoTokenizer.from_pretrained(tmp_path)
    assert reloaded_tokenizer.character_vocabulary == tokenizer.character_vocabulary
    inputs = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    assert torch.equal(inputs["input_ids"], reloaded_tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")["input_ids"])
    with torch.no_grad():
        assert torch.equal(model(**inputs).last_hidden_state, reloaded(**inputs).last_hidden_state)


REMOTE_CODE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    checkpoint, sentences, output_file = sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    model = AutoModel.from_pretrained(checkpoint, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=True)
    assert type(tokenizer).__module__.startswith("transformers_modules"), type(tokenizer).__module__
    inputs = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        np.save(output_file, torch.stack(model(**inputs).hidden_states).numpy())
    """
)


def test_remote_code_matches_the_package(converted, tmp_path, monkeypatch):
    """The checkpoint's own module files (the classes transformers loads with trust_remote_code=True), in process."""
    from transformers.dynamic_module_utils import get_class_from_dynamic_module

    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "modules"))
    directory = converted["with-words"]
    auto_map = {
        **json.loads((directory / "config.json").read_text())["auto_map"],
        "AutoTokenizer": json.loads((directory / "tokenizer_config.json").read_text())["auto_map"]["AutoTokenizer"][0],
    }
    model_class = get_class_from_dynamic_module(auto_map["AutoModel"], str(directory))
    tokenizer_class = get_class_from_dynamic_module(auto_map["AutoTokenizer"], str(directory))
    assert model_class.__module__.startswith("transformers_modules") and tokenizer_class is not ELMoTokenizer
    model, tokenizer = model_class.from_pretrained(directory).eval(), tokenizer_class.from_pretrained(directory)
    inputs = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden_states = model(**inputs).hidden_states
    assert worst_difference(hidden_states, package_outputs("with-words"), -2) <= PARITY_TOLERANCE


@pytest.mark.slow
def test_remote_code_without_elmo_hf_matches_the_package(converted, tmp_path):
    output_file = tmp_path / "layers.npy"
    result = run_without_elmo_hf(REMOTE_CODE_SCRIPT, tmp_path, str(converted["with-words"]), json.dumps(SENTENCES), str(output_file))
    assert result.returncode == 0, result.stderr[-3000:]
    hidden_states = tuple(torch.from_numpy(np.load(output_file)))
    assert worst_difference(hidden_states, package_outputs("with-words"), -2) <= PARITY_TOLERANCE


def test_embedder_matches_the_package_average(converted):
    embedder = ELMoEmbedder.from_pretrained(converted["with-words"], representation="average", words_column="words")
    vectors = embed_texts(embedder, SENTENCES)
    expected = package_outputs("with-words")
    assert largest(max_abs_difference(got, expected[f"sentence{index}/layer-1"]) for index, got in enumerate(vectors)) <= PARITY_TOLERANCE
    # The default byte tokenizer would feed the model wrong ids: refused, naming the fix.
    with pytest.raises(ValueError, match="load the model's own tokenizer"):
        ELMoEmbedder(embedder.model)


def test_pipeline_and_token_classification_head(converted):
    directory = converted["with-words"]
    extractor = pipeline("feature-extraction", model=str(directory), tokenizer=str(directory))
    vectors = np.array(extractor("나는 서울에 산다 ."))  # raw text: split at whitespace
    assert vectors.shape == (1, 4, 32)
    np.testing.assert_allclose(vectors[0], package_outputs("with-words")["sentence1/layer2"], rtol=0, atol=PARITY_TOLERANCE)
    head = ELMoForTokenClassification.from_pretrained(directory, num_labels=3)
    inputs = ELMoTokenizer.from_pretrained(directory)(SENTENCES[:2], is_split_into_words=True, padding=True, return_tensors="pt")
    labels = torch.where(inputs["attention_mask"].bool(), 1, -100)
    output = head(**inputs, labels=labels)
    output.loss.backward()
    assert output.logits.shape == (2, 6, 3) and torch.isfinite(output.loss)


def test_export_to_the_original_format_is_refused(converted, tmp_path):
    from elmo_hf.conversion.convert_hf_to_allennlp import convert_hf_to_allennlp

    with pytest.raises(ConversionError, match="a vocabulary of Unicode characters, a word embedding"):
        convert_hf_to_allennlp(converted["with-words"], tmp_path / "export")
    assert not (tmp_path / "export").exists()


# ---- the variant, fast path against reference, on random weights -----------------------------------------------------

# A word vocabulary past int16 ids: the fast path's distinct-row keys and the token cache must use int32 then (in
# int16, the ids 4464 and 70000 are the same).
LARGE_WORD_VOCABULARY = 70_010


def unicode_variant(word_embedding: bool) -> tuple[ELMoModel, ELMoTokenizer]:
    characters = {character: index for index, character in enumerate("abcdefghijklmnopqrstuvwxyz가나다라마바사", start=1)}
    words = {f"w{index}": index for index in range(1, LARGE_WORD_VOCABULARY)} if word_embedding else None
    if words:
        words.update(the=4464, bank=4464 + 2**16, 가나=2)
    markers = dict(begin_word=40, end_word=41, padding=42, unknown=43, begin_sentence=44, end_sentence=45)
    vocabulary = CharacterVocabulary(characters, **markers, words=words, unknown_word=1 if words else None)
    tokenizer = ELMoTokenizer(max_characters_per_token=12, word_splitter="whitespace", character_vocabulary=vocabulary)
    begin, end = vocabulary.boundary_rows(12)
    config = tiny_config(
        max_characters_per_token=12, character_vocabulary="unicode_characters", num_characters=46,
        begin_sentence_ids=begin, end_sentence_ids=end, tf_forget_gate_bias=False,
        word_embedding_dim=4 if words else 0, word_embedding_vocab_size=LARGE_WORD_VOCABULARY if words else 0,
    )
    return random_model(config), tokenizer


@pytest.mark.parametrize("word_embedding", [True, False])
def test_fast_path_equals_reference_on_the_variant(word_embedding):
    model, tokenizer = unicode_variant(word_embedding)
    assert tokenizer.mismatch_with(model.config) is None
    sentences = ["the bank 가나 다라마바사가나다라마 zzz", "bank", "", "the the unknown-word 가"]
    inputs = tokenizer(sentences, padding=True, return_tensors="pt")
    outputs = {}
    for path in ("reference", "fast", "fast-cached"):
        if path == "fast-cached":
            model.cache_token_embeddings(max_words=100)  # grows with every word met (the probe stays in range)
            assert model.char_embeddings.token_embedding_cache.grows
        model.set_inference_path("reference" if path == "reference" else "fast")
        with torch.no_grad():
            outputs[path] = [model(**inputs, keep_sentence_boundaries=keep) for keep in (False, True)]
            if path == "fast-cached":
                outputs[path] += [model(**inputs, keep_sentence_boundaries=keep) for keep in (False, True)]  # hits
    for path in ("fast", "fast-cached"):
        for reference, fast in zip(outputs["reference"] * 2, outputs[path]):
            assert largest(max_abs_difference(a, b) for a, b in zip(reference.hidden_states, fast.hidden_states)) <= 1e-5


def test_config_checks_the_new_options():
    with pytest.raises(ValueError, match="need character_vocabulary='unicode_characters'"):
        ELMoConfig(word_embedding_dim=4, word_embedding_vocab_size=10)
    with pytest.raises(ValueError, match="must be a row of 12 ids"):
        tiny_config(max_characters_per_token=12, character_vocabulary="unicode_characters", num_characters=20,
                    begin_sentence_ids=[1, 2, 3], end_sentence_ids=[1, 2, 3])
    with pytest.raises(ValueError, match="both be > 0"):
        ELMoConfig(word_embedding_dim=4)
    with pytest.raises(ValueError, match="num_characters must be 262"):
        ELMoConfig(num_characters=100)
    model, tokenizer = unicode_variant(word_embedding=True)
    with pytest.raises(ValueError, match="must have shape .* own tokenizer"):
        model(**ELMoTokenizer(max_characters_per_token=12)("a b", return_tensors="pt"))
    row = tokenizer.word_row("the").copy()
    row[0] = LARGE_WORD_VOCABULARY
    with pytest.raises(ValueError, match="input_ids\\[..., 0\\] must be word ids"):
        model(input_ids=torch.from_numpy(row).reshape(1, 1, -1))


# ---- refusals -----------------------------------------------------------------------------------------------------------


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")


def edit_state(path: Path, change) -> None:
    state = torch.load(path, weights_only=False)  # the test's own files
    change(state)
    torch.save(state, path)


class NotATensor:
    """Anything a state dict should not hold: weights_only refuses to unpickle it."""


class CustomStateDict(dict):
    """A state dict of a class weights_only does not know: a valid model that only an unrestricted unpickler reads."""


REFUSALS = {
    "no config.json": (lambda d: (d / "config.json").unlink(), "config.json: missing"),
    "network configuration not in the directory": (
        lambda d: (d / "cnn_tiny.json").unlink(), "copy that file into the model directory"
    ),
    "no char.dic": (lambda d: (d / "char.dic").unlink(), "char.dic: missing"),
    "no word.dic": (lambda d: (d / "word.dic").unlink(), "word.dic: missing"),
    "no encoder.pkl": (lambda d: (d / "encoder.pkl").unlink(), "encoder.pkl: missing"),
    "unknown section": (lambda d: edit_json(d / "cnn_tiny.json", lambda c: c.update(extra={})), r"unknown section\(s\) \['extra'\]"),
    "unknown field": (
        lambda d: edit_json(d / "cnn_tiny.json", lambda c: c["encoder"].update(use_peepholes=True)),
        "section 'encoder' must have exactly the keys",
    ),
    "lstm encoder": (
        lambda d: edit_json(d / "cnn_tiny.json", lambda c: c["encoder"].update(name="lstm")), "plain stacked LSTM"
    ),
    "lstm token embedder": (
        lambda d: edit_json(d / "cnn_tiny.json", lambda c: c["token_embedder"].update(name="lstm")), "character LSTM"
    ),
    "no character input": (
        lambda d: edit_json(d / "cnn_tiny.json", lambda c: c["token_embedder"].update(char_dim=0)), "without character input"
    ),
    "mismatched shape": (
        lambda d: edit_state(d / "encoder.pkl", lambda s: s.update({"forward_layer_1.state_projection.weight": torch.zeros(16, 31)})),
        r"'forward_layer_1.state_projection.weight' has shape \(16, 31\), expected \(16, 32\)",
    ),
    "missing tensor": (
        lambda d: edit_state(d / "token_embedder.pkl", lambda s: s.pop("highways._layers.1.bias")),
        r"missing \['highways._layers.1.bias'\]",
    ),
    "vocabulary larger than the embedding": (
        lambda d: (d / "char.dic").write_text((d / "char.dic").read_text(encoding="utf-8") + "Z\t85\n", encoding="utf-8"),
        "has 86 distinct entries but the pickled character embedding has 85 rows",
    ),
    "malformed dic line": (
        lambda d: (d / "word.dic").write_text("the\t1\textra\n", encoding="utf-8"), r"word.dic, line 1: expected `entry<TAB>id`"
    ),
    "missing marker": (
        lambda d: (d / "char.dic").write_text((d / "char.dic").read_text(encoding="utf-8").replace("<bow>", "<b0w>"), encoding="utf-8"),
        r"missing the package's marker entries \['<bow>'\]",
    ),
    "non-finite weights": (
        lambda d: edit_state(d / "encoder.pkl", lambda s: s["backward_layer_0.state_linearity.bias"].fill_(float("nan"))),
        "NaN or infinite",
    ),
    "truncated pickle": (
        lambda d: (d / "encoder.pkl").write_bytes((d / "encoder.pkl").read_bytes()[:5000]), "truncated or damaged",
    ),
    "pickle with code": (
        lambda d: edit_state(d / "encoder.pkl", lambda s: s.update(extra=NotATensor())), "pass --allow-pickle",
    ),
    "features already projection_dim wide": (
        lambda d: edit_json(d / "cnn_tiny.json", lambda c: c["encoder"].update(projection_dim=28)),
        "already projection_dim",
    ),
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_refusals_name_the_file_and_what_was_expected(name, tmp_path):
    directory = tmp_path / "model"
    shutil.copytree(FIXTURES / "with-words", directory)
    damage, message = REFUSALS[name]
    damage(directory)
    with pytest.raises(ConversionError, match=message):
        read_elmoformanylangs(directory)


def test_a_pickle_with_code_converts_only_when_allowed(tmp_path):
    directory = tmp_path / "model"
    shutil.copytree(FIXTURES / "chars-only", directory)
    state = torch.load(directory / "encoder.pkl", weights_only=True)
    torch.save(CustomStateDict(state), directory / "encoder.pkl", pickle_module=pickle)
    with pytest.raises(ConversionError, match="pass --allow-pickle"):
        read_elmoformanylangs(directory)
    read = read_elmoformanylangs(directory, allow_pickle=True)
    assert torch.equal(read.state_dict["encoder.forward_layers.0.state_to_gates.weight"], state["forward_layer_0.state_linearity.weight"])
    edit_state(directory / "encoder.pkl", lambda s: s.update(extra=NotATensor()))
    with pytest.raises(ConversionError, match="expected a state dict .*got a mapping holding other things than named "
                       "tensors: it is not an ELMoForManyLangs weight file. It was unpickled without restrictions "
                       r"\(--allow-pickle\), so any code it names has already run"):  # unpickled, then refused
        read_elmoformanylangs(directory, allow_pickle=True)


def test_the_command_converts_and_refuses(tmp_path, capsys):
    from elmo_hf_cli import main

    output = tmp_path / "converted"
    assert main(["convert", "--elmoformanylangs", str(FIXTURES / "chars-only"), "--output", str(output)]) == 0
    assert "Converted ELMoForManyLangs" in capsys.readouterr().out
    assert {"character_vocabulary.json", "original_elmoformanylangs_config.json", "README.md"} <= {p.name for p in output.iterdir()}
    card = (output / "README.md").read_text(encoding="utf-8")
    assert "elmo-hf convert --elmoformanylangs chars-only --output converted" in card and str(FIXTURES) not in card
    assert main(["convert", "--elmoformanylangs", str(tmp_path / "missing"), "--output", str(tmp_path / "other")]) != 0
    assert "argument --elmoformanylangs: no such directory" in capsys.readouterr().err
    options = str(FIXTURES / "chars-only" / "config.json")  # an existing file: refused for being given at all
    assert main(["convert", "--elmoformanylangs", str(FIXTURES / "chars-only"), "--options", options, "--output", str(tmp_path / "other")]) != 0
    assert "give no --options with it" in capsys.readouterr().err
    assert not (tmp_path / "other").exists()


def test_another_converter_may_overwrite_this_conversion(tmp_path):
    """One output kind for every converter: its files (character_vocabulary.json, the kept network configuration)
    are elmo-hf's, so --overwrite by the HDF5 converter replaces them instead of refusing."""
    from elmo_hf.conversion.convert_allennlp_to_hf import convert_allennlp_to_hf

    output = tmp_path / "model"
    convert_elmoformanylangs(FIXTURES / "chars-only", output)
    assert (output / "character_vocabulary.json").is_file()
    hdf5_model = Path(__file__).resolve().parents[1] / "fixtures" / "tf-checkpoint" / "two-layer"
    convert_allennlp_to_hf(hdf5_model / "options.json", hdf5_model / "weights.hdf5", output, overwrite=True)
    assert not (output / "character_vocabulary.json").exists()
    assert ELMoTokenizer.from_pretrained(output).character_vocabulary is None
