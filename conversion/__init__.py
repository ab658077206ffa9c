"""The conversion scripts a user runs from a checkout (``python -m conversion.<script> ...``), each a thin entry
point to the ``elmo-hf`` command, which calls the library (``elmo_hf.conversion``). Nothing in ``elmo_hf`` imports
this folder, and the wheel does not ship it, as transformers' ``convert_*.py`` scripts are never imported by the
library."""
