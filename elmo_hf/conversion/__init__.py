"""Conversion between ELMo's original formats and elmo-hf's Hugging Face directories: the only code that knows the
original HDF5 layout and TF's conventions (h5py, the ``convert`` extra), bilm-tf's TensorFlow checkpoints, TF-Hub
modules and ELMoForManyLangs' model directories.

- ``shared.py``: the converters' errors, the file names they write, their output kind, ``read_options``,
  ``push_directory_to_hub``;
- ``hdf5_layout.py``: the renaming table (HDF5 dataset <-> model parameter) and its transforms;
- ``convert_allennlp_to_hf.py`` (``options.json`` + ``weights.hdf5``), ``nlpl_zip.py`` (NLPL archives),
  ``convert_tf_checkpoint.py`` with ``tf_checkpoint.py`` (bilm-tf checkpoints, read without TensorFlow),
  ``convert_tfhub_module.py`` with ``tfhub_module.py`` (TF-Hub modules in the TF1 Hub format: google/elmo 2-3,
  DeepPavlov's),
  ``convert_elmoformanylangs.py`` (ELMoForManyLangs), ``convert_hf_to_allennlp.py`` (export back to HDF5);
- ``reference_outputs.py`` (``--verify``), ``model_cards.py`` with ``model_card_template.md``.

Only ``shared`` is imported here, so that the package imports without h5py; import a converter's module to use it.
The scripts a user runs (``python -m conversion.convert_allennlp_to_hf ...``) live in the repository's top-level
``conversion/`` folder, which the library never imports.
"""

from .shared import (
    ALLENNLP_OPTIONS_FILE_NAME,
    CONVERTED_MODEL_OUTPUT,
    ConversionError,
    HubPushError,
    VerificationError,
    push_directory_to_hub,
    read_options,
)

__all__ = [
    "ALLENNLP_OPTIONS_FILE_NAME",
    "CONVERTED_MODEL_OUTPUT",
    "ConversionError",
    "HubPushError",
    "VerificationError",
    "push_directory_to_hub",
    "read_options",
]
