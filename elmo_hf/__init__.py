"""elmo-hf: ELMo (Peters et al. 2018) as a Hugging Face transformers model.

The ELMo classes are registered with the transformers Auto classes (`AutoConfig`, `AutoModel`, `AutoTokenizer`;
`AutoModelForTokenClassification`, `AutoModelForSequenceClassification` and `AutoModelForQuestionAnswering` for the
task heads, `AutoModelForPreTraining`) and marked for remote code: `save_pretrained` writes `auto_map` entries and
copies the module files next to the weights, so `trust_remote_code=True` loads a checkpoint where elmo-hf is not
installed.

Start-up, the transformers way: this package is lazy, as transformers' own (`_LazyModule`): `import elmo_hf` imports
none of its modules, each public name (`_IMPORT_STRUCTURE`) is imported on first use, and a submodule
(`elmo_hf.choices_elmo`, `elmo_hf.storage`, ...) is imported by itself, without torch, as the command line does
before its checks. The registrations follow what is imported (`_AfterImport`, a finder on `sys.meta_path` that runs
a function once a watched module has run):

- transformers' `AutoConfig` / `AutoTokenizer` module learns ELMo as it is imported (at once if it was already), so
  `AutoConfig.from_pretrained` / `AutoTokenizer.from_pretrained` of an ELMo checkpoint work after `import elmo_hf`;
- the model classes import transformers' modeling code (`PreTrainedModel`: torch._dynamo, torch.distributed,
  seconds), so they are registered with the `AutoModel` classes when one of them is first looked up here or the
  first `ELMoConfig` is made (`register_model_classes`, through `ELMoConfig._on_first_instance`): every model and
  every `AutoModel` call starts from a config.

`benchmarks/startup.py` measures the import; `tests/cli/test_startup.py` checks what an import loads.
"""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and editors
    from .choices_elmo import DEFAULT_MODEL_DIR
    from .configuration_elmo import ELMoConfig
    from .modeling_elmo import ELMoModel, ELMoModelOutput, ELMoPreTrainedModel, ELMoScalarMix
    from .modeling_elmo_downstream import ELMoForSequenceClassification, ELMoForTokenClassification
    from .modeling_elmo_pretraining import ELMoForPreTraining, ELMoForPreTrainingOutput, bilm_perplexity_metrics
    from .modeling_elmo_question_answering import ELMoForQuestionAnswering
    from .tokenization_elmo import ELMoTokenizer
    from .validation_elmo import ELMoHFError

__version__ = "0.1.0"  # the one statement of the version: pyproject.toml reads it (dynamic = ["version"])


def imported_name(package: str, names: dict[str, str], name: str) -> Any:
    """``name`` of ``package``, from the module of the package that ``names`` says defines it; kept as an attribute
    of the package, so that this runs once per name."""
    value = getattr(importlib.import_module(f".{names[name]}", package), name)
    setattr(sys.modules[package], name, value)
    return value


def lazy_names(
    package: str, names: dict[str, str], before: Callable[[str], None] | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` (PEP 562), the one lazy mechanism of ``elmo_hf``,
    ``elmo_hf.corpus`` and ``elmo_hf.embedding``: each of ``names`` (public name -> the package's module that defines
    it) is imported on first use (``imported_name``), after ``before(module)`` where given. transformers'
    ``_LazyModule`` would import transformers with the package, which the command line's checks must not."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if before is not None:
            before(names[name])
        return imported_name(package, names, name)

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return __getattr__, __dir__


# The module of this package -> the public names it defines, each imported on first use (transformers' layout).
_IMPORT_STRUCTURE = {
    "choices_elmo": ["DEFAULT_MODEL_DIR"],  # the shipped checkpoint, what `elmo-hf embed` uses when no model is named
    "configuration_elmo": ["ELMoConfig"],
    "tokenization_elmo": ["ELMoTokenizer"],
    "validation_elmo": ["ELMoHFError"],
    "modeling_elmo": ["ELMoModel", "ELMoModelOutput", "ELMoPreTrainedModel", "ELMoScalarMix"],
    "modeling_elmo_downstream": ["ELMoForSequenceClassification", "ELMoForTokenClassification"],
    "modeling_elmo_pretraining": ["ELMoForPreTraining", "ELMoForPreTrainingOutput", "bilm_perplexity_metrics"],
    "modeling_elmo_question_answering": ["ELMoForQuestionAnswering"],
}
LAZY_NAMES = {name: module for module, names in _IMPORT_STRUCTURE.items() for name in names}
# The modules whose names need the model classes registered first (`__getattr__`).
_MODELING_MODULES = (
    "modeling_elmo", "modeling_elmo_downstream", "modeling_elmo_pretraining", "modeling_elmo_question_answering",
)
# transformers Auto class -> the name of the ELMo model class it returns for an ELMoConfig.
AUTO_MODEL_CLASSES = {
    "AutoModel": "ELMoModel",
    "AutoModelForTokenClassification": "ELMoForTokenClassification",
    "AutoModelForSequenceClassification": "ELMoForSequenceClassification",
    "AutoModelForQuestionAnswering": "ELMoForQuestionAnswering",
    "AutoModelForPreTraining": "ELMoForPreTraining",
}

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
                auto_class.register(_lazy_name("ELMoConfig"), model_class, exist_ok=True)
                model_class.register_for_auto_class(auto_class_name)
            _model_classes_registered = True
            _lazy_name("ELMoConfig")._on_first_instance = None
        finally:
            _registering = False


def _lazy_name(name: str) -> Any:
    """The value of a `LAZY_NAMES` name, its module imported (and kept as an attribute of this package) if need be."""
    return imported_name(__name__, LAZY_NAMES, name)


def _before_import(module: str) -> None:
    """A model class's module: the model classes are registered first (`register_model_classes`)."""
    if module in _MODELING_MODULES:
        register_model_classes()


__getattr__, __dir__ = lazy_names(__name__, LAZY_NAMES, before=_before_import)


# ----------------------------------------------------------------------------------------------------------------
# Registration as modules are imported
# ----------------------------------------------------------------------------------------------------------------
def _config_class_imported() -> None:
    """`configuration_elmo` has run: the config is marked for remote code (which imports transformers' `AutoConfig`
    module, and so registers it there) and registers the model classes when the first one is made."""
    config_class = _lazy_name("ELMoConfig")
    config_class.register_for_auto_class()
    if not _model_classes_registered:
        config_class._on_first_instance = register_model_classes


def _tokenizer_class_imported() -> None:
    """`tokenization_elmo` has run: the tokenizer is marked for remote code."""
    _lazy_name("ELMoTokenizer").register_for_auto_class("AutoTokenizer")


def _auto_config_imported() -> None:
    """transformers' `AutoConfig` module has run: it learns the ELMo config."""
    from transformers.models.auto.configuration_auto import AutoConfig

    config_class = _lazy_name("ELMoConfig")
    AutoConfig.register(config_class.model_type, config_class, exist_ok=True)


def _auto_tokenizer_imported() -> None:
    """transformers' `AutoTokenizer` module has run: it learns the ELMo tokenizer."""
    from transformers.models.auto.tokenization_auto import AutoTokenizer

    AutoTokenizer.register(_lazy_name("ELMoConfig"), tokenizer_class=_lazy_name("ELMoTokenizer"), exist_ok=True)


class _AfterImport:
    """A finder on `sys.meta_path` that finds nothing itself: for a watched module it hands back the spec the other
    finders give, its loader wrapped so that the module's function (`actions`) runs once the module has run."""

    is_elmo_hf_after_import = True  # how a later copy of this package (a test that imports it afresh) knows it

    def __init__(self, actions: dict[str, Callable[[], None]]):
        self.actions = actions

    def find_spec(self, name, path, target=None):
        if name not in self.actions:
            return None
        for finder in sys.meta_path:
            if getattr(finder, "is_elmo_hf_after_import", False) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _LoaderThen(spec.loader, self.actions.pop(name))
                return spec
        return None


class _LoaderThen:
    """``loader``, then ``action`` once the module has run; the module keeps ``loader`` as its own."""

    def __init__(self, loader, action: Callable[[], None]):
        self.loader, self.action = loader, action

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.action()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


def _register_as_modules_are_imported() -> None:
    """Run each registration when its module has run: at once for one imported already, else from `_AfterImport`."""
    actions = {
        f"{__name__}.configuration_elmo": _config_class_imported,
        f"{__name__}.tokenization_elmo": _tokenizer_class_imported,
        "transformers.models.auto.configuration_auto": _auto_config_imported,
        "transformers.models.auto.tokenization_auto": _auto_tokenizer_imported,
    }
    sys.meta_path[:] = [finder for finder in sys.meta_path if not getattr(finder, "is_elmo_hf_after_import", False)]
    sys.meta_path.insert(0, _AfterImport({name: action for name, action in actions.items() if name not in sys.modules}))
    for name, action in actions.items():
        if name in sys.modules:
            action()


_register_as_modules_are_imported()

__all__ = [
    "DEFAULT_MODEL_DIR",
    "ELMoForPreTraining",
    "ELMoForPreTrainingOutput",
    "ELMoHFError",
    "bilm_perplexity_metrics",
    "ELMoConfig",
    "ELMoForQuestionAnswering",
    "ELMoForSequenceClassification",
    "ELMoForTokenClassification",
    "ELMoModel", "ELMoModelOutput", "ELMoPreTrainedModel", "ELMoScalarMix", "ELMoTokenizer",
    "register_model_classes",
]
