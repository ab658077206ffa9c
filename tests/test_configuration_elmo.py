import json

import pytest

from elmo_hf import ELMoConfig


def test_defaults_are_the_original_elmo():
    config = ELMoConfig()
    assert (config.projection_dim, config.lstm_cell_size, config.num_lstm_layers, config.num_highway_layers) == (512, 4096, 2, 2)
    assert config.char_cnn_output_dim == 2048
    assert config.num_representation_layers == 3 and config.output_dim == 1024


def test_options_round_trip_for_every_released_model(pretrained_options_dir):
    files = sorted(pretrained_options_dir.glob("*.json"))
    assert len(files) == 4
    for path in files:
        options = json.loads(path.read_text())
        config = ELMoConfig.from_options_dict(options)
        assert config.to_options_dict() == options, path.name


def test_fixture_options_map_to_descriptive_fields(allennlp_fixture_dir):
    config = ELMoConfig.from_options_dict(json.loads((allennlp_fixture_dir / "options.json").read_text()))
    assert config.char_embedding_dim == 4 and config.char_cnn_output_dim == 124
    assert (config.projection_dim, config.lstm_cell_size, config.num_lstm_layers) == (16, 64, 2)
    assert (config.cell_clip, config.projection_clip, config.use_skip_connections) == (3, 3, True)


def test_runtime_options_pass_through_and_survive_save(tmp_path, allennlp_fixture_dir):
    options = json.loads((allennlp_fixture_dir / "options.json").read_text())
    config = ELMoConfig.from_options_dict(options, num_output_representations=2, keep_sentence_boundaries=True)
    config.save_pretrained(tmp_path)
    reloaded = ELMoConfig.from_pretrained(tmp_path)
    assert reloaded.num_output_representations == 2 and reloaded.keep_sentence_boundaries is True
    assert reloaded.char_cnn_filters == options["char_cnn"]["filters"]
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "elmo"


def _options(**changes):
    options = {
        "lstm": {"cell_clip": 3, "use_skip_connections": True, "n_layers": 2, "proj_clip": 3, "projection_dim": 16, "dim": 64},
        "char_cnn": {
            "embedding": {"dim": 4},
            "filters": [[1, 4], [2, 8]],
            "n_highway": 1,
            "n_characters": 262,
            "max_characters_per_token": 50,
            "activation": "relu",
        },
    }
    for dotted, value in changes.items():
        section, key = dotted.split(".", 1)
        if value is None:
            del options[section][key]
        else:
            options[section][key] = value
    return options


def test_training_only_keys_are_ignored_and_261_characters_mapped():
    options = _options(**{"char_cnn.n_characters": 261})
    options.update({"n_tokens_vocab": 793471, "batch_size": 128, "unroll_steps": 20, "dropout": 0.1, "bidirectional": True})
    config = ELMoConfig.from_options_dict(options)
    assert config.num_characters == 262


def test_absent_clips_and_skip_mean_off():
    config = ELMoConfig.from_options_dict(_options(**{"lstm.cell_clip": None, "lstm.proj_clip": None, "lstm.use_skip_connections": None}))
    assert config.cell_clip is None and config.projection_clip is None and config.use_skip_connections is False
    assert config.to_options_dict()["lstm"]["cell_clip"] == 0


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(_options(), extra_section={}), r"unknown top-level key\(s\) \['extra_section'\]"),
        (_options(**{"lstm.peepholes": True}), r"unknown key\(s\) \['peepholes'\] in section 'lstm'"),
        (_options(**{"lstm.dim": None}), r"missing field lstm\.dim"),
        (_options(**{"char_cnn.filters": None}), r"missing field char_cnn\.filters"),
        ({"lstm": {}}, r"missing"),
        ([1, 2], r"JSON object"),
    ],
)
def test_bad_options_name_the_problem(options, message):
    with pytest.raises(ValueError, match=message):
        ELMoConfig.from_options_dict(options)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("char_embedding_dim", 0, r"char_embedding_dim must be an int >= 1"),
        ("char_cnn_filters", [[1, 4], [0, 8]], r"char_cnn_filters\[1\]"),
        ("char_cnn_filters", [], r"char_cnn_filters must be a non-empty list"),
        ("char_cnn_activation", "gelu", r"char_cnn_activation must be one of"),
        ("num_characters", 300, r"num_characters must be 262"),
        ("max_characters_per_token", 2, r"max_characters_per_token"),
        ("projection_dim", 128, r"projection_dim \(128\) must be <= lstm_cell_size \(64\)"),
        ("num_lstm_layers", 0, r"num_lstm_layers must be an int >= 1"),
        ("cell_clip", -1.0, r"cell_clip must be None or a number >= 0"),
        ("projection_clip", "3", r"projection_clip must be None or a number >= 0"),
        ("use_skip_connections", 1, r"use_skip_connections must be a bool"),
        ("representation_dropout", 1.5, r"representation_dropout must be a number in \[0, 1\)"),
        ("num_output_representations", -1, r"num_output_representations"),
    ],
)
def test_invalid_values_raise_naming_the_field(field, value, message):
    values = dict(projection_dim=16, lstm_cell_size=64, char_cnn_filters=[[1, 4], [2, 8]])
    values[field] = value
    with pytest.raises(ValueError, match=message):
        ELMoConfig(**values)


def test_filters_wider_than_the_word_are_rejected():
    with pytest.raises(ValueError, match=r"max_characters_per_token \(5\) must be >= the widest character filter \(7\)"):
        ELMoConfig(max_characters_per_token=5)


@pytest.mark.parametrize("value", ["false", "true", 0, 1, "no"])
def test_skip_connections_must_be_a_json_bool_in_options(value):
    """"false" is a non-empty string, which bool() takes for True: anything but true / false / absent is refused."""
    with pytest.raises(ValueError, match=r"options.json: lstm.use_skip_connections must be a bool \(true or false\), got"):
        ELMoConfig.from_options_dict(_options(**{"lstm.use_skip_connections": value}))
    assert ELMoConfig.from_options_dict(_options(**{"lstm.use_skip_connections": False})).use_skip_connections is False


def test_max_characters_per_token_is_bounded():
    """10**9 character slots used to convert, and then the first batch died with a MemoryError."""
    from elmo_hf.configuration_elmo import MAX_CHARACTERS_PER_TOKEN_LIMIT

    ELMoConfig(max_characters_per_token=MAX_CHARACTERS_PER_TOKEN_LIMIT)
    with pytest.raises(ValueError, match=r"max_characters_per_token must be an int in \[3, 1025\) \(character slots .*got 1000000000"):
        ELMoConfig(max_characters_per_token=10**9)


def test_the_first_instance_hook_runs_until_it_clears_itself(monkeypatch):
    """`ELMoConfig._on_first_instance` (elmo_hf/__init__.py registers the model classes with it, then clears it): every
    config calls it while it is set; one that raises fails that config, and the next config calls it again."""
    calls = []

    def failing():
        calls.append("failed")
        raise RuntimeError("registration failed")

    def clearing():
        calls.append("ran")
        ELMoConfig._on_first_instance = None

    monkeypatch.setattr(ELMoConfig, "_on_first_instance", failing)
    with pytest.raises(RuntimeError, match="registration failed"):
        ELMoConfig()
    monkeypatch.setattr(ELMoConfig, "_on_first_instance", clearing)
    ELMoConfig()
    ELMoConfig()
    assert calls == ["failed", "ran"] and ELMoConfig._on_first_instance is None
