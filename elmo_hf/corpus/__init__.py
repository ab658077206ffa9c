"""Reading corpora: one reader class per input format (``format_readers.py``), registered in one table
(``formats.INPUT_FORMATS``), read through ``CorpusSource`` (``readers.py``)."""

from .format_readers import CorpusReader
from .formats import INPUT_FORMATS, register_input_format
from .readers import CorpusError, CorpusSource, InvalidRowError, infer_input_format

__all__ = ["CorpusError", "CorpusReader", "CorpusSource", "INPUT_FORMATS", "InvalidRowError", "infer_input_format", "register_input_format"]
