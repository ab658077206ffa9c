"""Conversion between ELMo's original formats (AllenNLP / bilm-tf HDF5, NLPL archives, bilm-tf checkpoints, TF-Hub
modules, ELMoForManyLangs) and elmo-hf's Hugging Face directories: the only code that knows them. Each source's
module and the steps every conversion shares are listed in docs/design/conversion.md. Only ``shared`` is imported
here, so that the package imports without h5py; import a converter's module to use it.
"""

from .shared import (
    ALLENNLP_OPTIONS_FILE_NAME, CONVERTED_MODEL_OUTPUT, ConversionError, HubPushError, VerificationError,
    push_directory_to_hub, read_options,
)

__all__ = [
    "ALLENNLP_OPTIONS_FILE_NAME", "CONVERTED_MODEL_OUTPUT", "ConversionError", "HubPushError", "VerificationError",
    "push_directory_to_hub", "read_options",
]
