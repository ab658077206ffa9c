"""elmo-hf: ELMo (Peters et al. 2018) as a Hugging Face transformers model.

Importing the package registers the ELMo classes with the transformers Auto classes (`AutoConfig`, `AutoModel`,
`AutoTokenizer`; `AutoModelForTokenClassification` and `AutoModelForSequenceClassification` for the task heads,
`AutoModelForPreTraining`) and marks them for remote code: `save_pretrained` writes `auto_map` entries and copies the
module files next to the weights, so `trust_remote_code=True` loads a checkpoint where elmo-hf is not installed.

Start-up: the model classes import transformers' modeling code (`PreTrainedModel`, which brings torch._dynamo and
torch.distributed with it: seconds), which a user of the config, the tokenizer, the CLI's `--help` or a corpus reader
does not need. So the config and the tokenizer are registered at import, and the model classes (attributes of this
package like the others, `__all__` lists them) are imported on first use: the first time one of them is looked up
here, or the first time an `ELMoConfig` is made, whichever comes first. Every model and every `AutoModel` call starts
from a config, so the `AutoModel` classes know ELMo whenever one can be asked for it (`register_model_classes`).
`benchmarks/startup.py` measures what this saves; `tests/cli/test_startup.py` checks what an import loads.
"""

from __future__ import annotations

import importlib
import threading
from typing import TYPE_CHECKING, Any

from transformers import AutoConfig, AutoTokenizer

from .choices_elmo import DEFAULT_MODEL_DIR  # the shipped checkpoint, what `elmo-hf embed` uses when no model is named
from .configuration_elmo import ELMoConfig
from .tokenization_elmo import ELMoTokenizer
from .validation_elmo import ELMoHFError

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and editors
    from .modeling_elmo import ELMoModel, ELMoModelOutput, ELMoPreTrainedModel, ELMoScalarMix
    from .modeling_elmo_downstream import ELMoForSequenceClassification, ELMoForTokenClassification
    from .modeling_elmo_pretraining import ELMoForPreTraining, ELMoForPreTrainingOutput, bilm_perplexity_metrics

__version__ = "0.1.0"  # the one statement of the version: pyproject.toml reads it (dynamic = ["version"])

# Names of this package imported on first use -> the module defining each (see the module docstring).
LAZY_NAMES = {
    "ELMoModel": "modeling_elmo",
    "ELMoModelOutput": "modeling_elmo",
    "ELMoPreTrainedModel": "modeling_elmo",
    "ELMoScalarMix": "modeling_elmo",
    "ELMoForSequenceClassification": "modeling_elmo_downstream",
    "ELMoForTokenClassification": "modeling_elmo_downstream",
    "ELMoForPreTraining": "modeling_elmo_pretraining",
    "ELMoForPreTrainingOutput": "modeling_elmo_pretraining",
    "bilm_perplexity_metrics": "modeling_elmo_pretraining",
}
# transformers Auto class -> the name of the ELMo model class it returns for an ELMoConfig.
AUTO_MODEL_CLASSES = {
    "AutoModel": "ELMoModel",
    "AutoModelForTokenClassification": "ELMoForTokenClassification",
    "AutoModelForSequenceClassification": "ELMoForSequenceClassification",
    "AutoModelForPreTraining": "ELMoForPreTraining",
}

AutoConfig.register(ELMoConfig.model_type, ELMoConfig, exist_ok=True)
AutoTokenizer.register(ELMoConfig, tokenizer_class=ELMoTokenizer, exist_ok=True)
ELMoConfig.register_for_auto_class()
ELMoTokenizer.register_for_auto_class("AutoTokenizer")

_model_classes_registered = False
_registration = threading.RLock()  # threads making their first configs at once wait for one registration
_registering = False  # set while this process registers: a config made meanwhile (same thread) does not recurse


def register_model_classes() -> None:
    """Register the model classes with their transformers Auto classes (`AUTO_MODEL_CLASSES`) and for remote code;
    once per process, later calls do nothing. Runs by itself (see the module docstring); call it only to fill
    `transformers.MODEL_MAPPING` and its siblings before any ELMo config or model class exists."""
    global _model_classes_registered, _registering
    if _model_classes_registered:
        return
    with _registration:
        if _model_classes_registered or _registering:
            return
        _registering = True
        try:
            import transformers

            for auto_class_name, model_class_name in AUTO_MODEL_CLASSES.items():
                auto_class, model_class = getattr(transformers, auto_class_name), _lazy_name(model_class_name)
                auto_class.register(ELMoConfig, model_class, exist_ok=True)
                model_class.register_for_auto_class(auto_class_name)
            _model_classes_registered = True
            ELMoConfig._on_first_instance = None
        finally:
            _registering = False


def _lazy_name(name: str) -> Any:
    """The value of a `LAZY_NAMES` name, its module imported (and kept as an attribute of this package) if need be."""
    value = getattr(importlib.import_module(f".{LAZY_NAMES[name]}", __name__), name)
    globals()[name] = value
    return value


def __getattr__(name: str) -> Any:
    """A `LAZY_NAMES` name on first use: the model classes are registered (`register_model_classes`) first."""
    if name not in LAZY_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    register_model_classes()
    return _lazy_name(name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(LAZY_NAMES))


ELMoConfig._on_first_instance = register_model_classes

__all__ = [
    "DEFAULT_MODEL_DIR",
    "ELMoForPreTraining",
    "ELMoForPreTrainingOutput",
    "ELMoHFError",
    "bilm_perplexity_metrics",
    "ELMoConfig",
    "ELMoForSequenceClassification",
    "ELMoForTokenClassification",
    "ELMoModel", "ELMoModelOutput", "ELMoPreTrainedModel", "ELMoScalarMix", "ELMoTokenizer",
    "register_model_classes",
]
