"""Auto classes (registered at import, the model classes on first use: see elmo_hf/__init__.py), and remote code
loaded where elmo_hf is not installed."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer

import elmo_hf
from elmo_hf import ELMoConfig, ELMoModel, ELMoTokenizer

from .helpers import random_model, run_without_elmo_hf

TEXTS = ["The bank raised its rates .", "We sat on the river bank and did n't talk ."]


def save_checkpoint(directory):
    model = random_model()
    model.save_pretrained(directory)
    ELMoTokenizer().save_pretrained(directory)
    return model


def test_auto_classes_return_the_elmo_classes(tmp_path):
    save_checkpoint(tmp_path)
    assert isinstance(AutoConfig.from_pretrained(tmp_path), ELMoConfig)
    assert isinstance(AutoModel.from_pretrained(tmp_path), ELMoModel)
    assert isinstance(AutoTokenizer.from_pretrained(tmp_path), ELMoTokenizer)
    assert isinstance(AutoModel.from_config(ELMoConfig(projection_dim=8, lstm_cell_size=16, char_cnn_filters=[[1, 4]])), ELMoModel)


def run_in_a_fresh_interpreter(script: str, *arguments: str) -> list[str]:
    """The lines ``script`` prints, run in a new interpreter (which has imported nothing of elmo_hf yet)."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *arguments], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.split()


def test_auto_models_know_elmo_before_any_model_class_was_imported(tmp_path):
    """`import elmo_hf` leaves the modeling code unimported; the AutoModel classes find the ELMo model classes anyway
    (registered when the checkpoint's config is made), and save_pretrained then writes their auto_map."""
    save_checkpoint(tmp_path / "checkpoint")
    printed = run_in_a_fresh_interpreter(
        """
        import sys
        import elmo_hf
        import transformers
        from transformers import AutoModel

        assert "elmo_hf.modeling_elmo" not in sys.modules
        model = AutoModel.from_pretrained(sys.argv[1])
        print(type(model).__module__, type(model).__name__)
        for auto_class in elmo_hf.AUTO_MODEL_CLASSES:
            print(auto_class, getattr(transformers, auto_class)._model_mapping[elmo_hf.ELMoConfig].__name__)
        model.save_pretrained(sys.argv[2])
        """,
        str(tmp_path / "checkpoint"), str(tmp_path / "saved"),
    )
    assert printed[:2] == ["elmo_hf.modeling_elmo", "ELMoModel"]
    assert printed[2:] == [word for pair in elmo_hf.AUTO_MODEL_CLASSES.items() for word in pair]
    assert json.loads((tmp_path / "saved" / "config.json").read_text())["auto_map"]["AutoModel"] == "modeling_elmo.ELMoModel"


def test_looking_up_a_model_class_registers_the_model_classes():
    printed = run_in_a_fresh_interpreter(
        """
        import elmo_hf
        from transformers import MODEL_FOR_PRETRAINING_MAPPING, MODEL_MAPPING

        assert elmo_hf.ELMoConfig not in MODEL_MAPPING
        pretraining = elmo_hf.ELMoForPreTraining
        print(MODEL_FOR_PRETRAINING_MAPPING[elmo_hf.ELMoConfig] is pretraining, MODEL_MAPPING[elmo_hf.ELMoConfig] is elmo_hf.ELMoModel)
        print(elmo_hf.ELMoConfig._on_first_instance, elmo_hf.ELMoModel._auto_class)
        """
    )
    assert printed == ["True", "True", "None", "AutoModel"]


def test_auto_classes_imported_before_elmo_hf_know_it_once_it_is_imported():
    printed = run_in_a_fresh_interpreter(
        """
        from transformers import CONFIG_MAPPING, TOKENIZER_MAPPING, AutoConfig, AutoTokenizer
        import elmo_hf

        print(CONFIG_MAPPING["elmo"] is elmo_hf.ELMoConfig, TOKENIZER_MAPPING[elmo_hf.ELMoConfig] is elmo_hf.ELMoTokenizer)
        """
    )
    assert printed == ["True", "True"]


def test_a_config_made_from_its_module_registers_the_model_classes_and_modules_keep_their_own_loader():
    """`from elmo_hf.configuration_elmo import ELMoConfig` never looks a name up on the package: the config still
    registers the model classes when it is first made, and the module imported through the package's finder keeps the
    loader that found it."""
    printed = run_in_a_fresh_interpreter(
        """
        from elmo_hf.configuration_elmo import ELMoConfig
        import elmo_hf.configuration_elmo as module
        from transformers import AutoModel

        model = AutoModel.from_config(ELMoConfig(projection_dim=8, lstm_cell_size=16, char_cnn_filters=[[1, 4]]))
        print(type(model).__name__, type(module.__loader__).__name__, module.__spec__.loader is module.__loader__)
        """
    )
    assert printed == ["ELMoModel", "SourceFileLoader", "True"]


def test_threads_making_their_first_configs_at_once_all_find_the_model_classes():
    printed = run_in_a_fresh_interpreter(
        """
        import threading
        import elmo_hf
        from transformers import MODEL_MAPPING

        found = []

        def make_a_config():
            elmo_hf.ELMoConfig(projection_dim=8, lstm_cell_size=16, char_cnn_filters=[[1, 4]])
            found.append(elmo_hf.ELMoConfig in MODEL_MAPPING)

        threads = [threading.Thread(target=make_a_config) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        print(*found)
        """
    )
    assert printed == ["True"] * 4


def test_every_public_name_is_there_and_listed():
    """`__all__` and `dir()` tell the truth about the lazily imported names; an unknown name is an AttributeError."""
    assert set(elmo_hf.LAZY_NAMES) <= set(elmo_hf.__all__) <= set(dir(elmo_hf))
    for name in elmo_hf.__all__:
        assert getattr(elmo_hf, name) is not None, name
    assert elmo_hf.ELMoModel is elmo_hf.modeling_elmo.ELMoModel
    names: dict = {}
    exec("from elmo_hf import *", names)
    assert set(elmo_hf.__all__) <= set(names)
    with pytest.raises(AttributeError, match="no attribute 'ELMoModle'"):
        elmo_hf.ELMoModle  # noqa: B018


def test_checkpoints_carry_their_code(tmp_path):
    save_checkpoint(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    tokenizer_config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["auto_map"] == {"AutoConfig": "configuration_elmo.ELMoConfig", "AutoModel": "modeling_elmo.ELMoModel"}
    assert tokenizer_config["auto_map"] == {"AutoTokenizer": ["tokenization_elmo.ELMoTokenizer", None]}
    # Every flat module the three import, directly or not: transformers copies a file's relative imports with it.
    modules = ("configuration_elmo.py", "modeling_elmo.py", "tokenization_elmo.py", "characters_elmo.py", "word_splitters_elmo.py",
               "word_rows_elmo.py", "sentence_pairs_elmo.py", "validation_elmo.py", "recurrence_elmo.py", "fast_recurrence_elmo.py",
               "token_cache_elmo.py", "int8_elmo.py", "model_inputs_elmo.py", "pooling_elmo.py")
    for module in modules:
        assert (tmp_path / module).is_file(), module


# Runs where elmo_hf cannot be imported (tests/helpers.run_without_elmo_hf).
REMOTE_CODE_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    checkpoint, texts, output_file = sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    config = AutoConfig.from_pretrained(checkpoint, trust_remote_code=True)
    model = AutoModel.from_pretrained(checkpoint, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=True)
    assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
    assert type(tokenizer).__module__.startswith("transformers_modules"), type(tokenizer).__module__
    inputs = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model(**inputs)
    np.savez(
        output_file,
        input_ids=inputs["input_ids"].numpy(),
        top=output.last_hidden_state.numpy(),
        mix=output.elmo_representations[0].numpy(),
        **{"param:" + name: value.numpy() for name, value in model.state_dict().items()},
    )
    print(type(config).__name__, type(model).__name__, type(tokenizer).__name__)
    """
)


def test_remote_code_loads_where_elmo_hf_is_not_installed(tmp_path):
    checkpoint = tmp_path / "checkpoint"
    model = save_checkpoint(checkpoint)
    result = run_without_elmo_hf(REMOTE_CODE_SCRIPT, tmp_path, str(checkpoint), json.dumps(TEXTS), str(tmp_path / "out.npz"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["ELMoConfig", "ELMoModel", "ELMoTokenizer"]

    remote = np.load(tmp_path / "out.npz")
    inputs = ELMoTokenizer()(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        local = model(**inputs)
    assert np.array_equal(remote["input_ids"], inputs["input_ids"].numpy())
    for name, value in model.state_dict().items():
        assert np.array_equal(remote["param:" + name], value.numpy()), name
    np.testing.assert_allclose(remote["top"], local.last_hidden_state.numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(remote["mix"], local.elmo_representations[0].numpy(), rtol=0, atol=1e-6)
