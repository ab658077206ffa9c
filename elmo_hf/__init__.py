"""elmo-hf: ELMo (Peters et al. 2018) as a Hugging Face transformers model."""

from .configuration_elmo import ELMoConfig
from .modeling_elmo import ELMoModel, ELMoModelOutput, ELMoPreTrainedModel, ELMoScalarMix
from .tokenization_elmo import ELMoTokenizer

__version__ = "0.1.0"

__all__ = ["ELMoConfig", "ELMoModel", "ELMoModelOutput", "ELMoPreTrainedModel", "ELMoScalarMix", "ELMoTokenizer"]
