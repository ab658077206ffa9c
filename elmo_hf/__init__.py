"""elmo-hf: ELMo (Peters et al. 2018) as a Hugging Face transformers model.

Importing the package registers the ELMo classes with the transformers Auto classes (`AutoConfig`, `AutoModel`,
`AutoTokenizer`; `AutoModelForTokenClassification` and `AutoModelForSequenceClassification` for the task heads)
and marks them for remote code: `save_pretrained` writes `auto_map` entries and copies the module files next to the
weights, so `trust_remote_code=True` loads a checkpoint where elmo-hf is not installed.
"""

import os

from transformers import AutoConfig, AutoModel, AutoModelForPreTraining, AutoTokenizer
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

from .configuration_elmo import ELMoConfig
from .modeling_elmo import ELMoModel, ELMoModelOutput, ELMoPreTrainedModel, ELMoScalarMix
from .modeling_elmo_downstream import ELMoForSequenceClassification, ELMoForTokenClassification
from .modeling_elmo_pretraining import ELMoForPreTraining, ELMoForPreTrainingOutput, bilm_perplexity_metrics
from .tokenization_elmo import ELMoTokenizer
from .validation_elmo import ELMoHFError

__version__ = "0.1.0"  # the one statement of the version: pyproject.toml reads it (dynamic = ["version"])

# The checkpoint shipped inside the package (pre-trained here by `elmo-hf pretrain`, packaged by
# `scripts/package_default_model.py`): what `elmo-hf embed` uses when no model is named, so it runs with no network.
# A small demonstration model, not for quality: see its README.md. A str, as every from_pretrained and pipeline takes.
DEFAULT_MODEL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "default_model")

AutoConfig.register(ELMoConfig.model_type, ELMoConfig, exist_ok=True)
AutoModel.register(ELMoConfig, ELMoModel, exist_ok=True)
AutoModelForTokenClassification.register(ELMoConfig, ELMoForTokenClassification, exist_ok=True)
AutoModelForSequenceClassification.register(ELMoConfig, ELMoForSequenceClassification, exist_ok=True)
AutoModelForPreTraining.register(ELMoConfig, ELMoForPreTraining, exist_ok=True)
AutoTokenizer.register(ELMoConfig, tokenizer_class=ELMoTokenizer, exist_ok=True)

ELMoConfig.register_for_auto_class()
ELMoModel.register_for_auto_class("AutoModel")
ELMoForTokenClassification.register_for_auto_class("AutoModelForTokenClassification")
ELMoForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
ELMoForPreTraining.register_for_auto_class("AutoModelForPreTraining")
ELMoTokenizer.register_for_auto_class("AutoTokenizer")

__all__ = [
    "DEFAULT_MODEL_DIR",
    "ELMoForPreTraining",
    "ELMoForPreTrainingOutput",
    "ELMoHFError",
    "bilm_perplexity_metrics",
    "ELMoConfig",
    "ELMoForSequenceClassification",
    "ELMoForTokenClassification",
    "ELMoModel", "ELMoModelOutput", "ELMoPreTrainedModel", "ELMoScalarMix", "ELMoTokenizer"]
