"""Reading corpora: one streaming reader for every input format elmo-hf takes (``readers.py``)."""

from .readers import INPUT_FORMATS, CorpusError, CorpusSource, InvalidRowError, infer_input_format

__all__ = ["CorpusError", "CorpusSource", "INPUT_FORMATS", "InvalidRowError", "infer_input_format"]
