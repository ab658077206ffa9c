"""Reading corpora: one reader class per input format (``format_readers.py``), registered in one table
(``formats.INPUT_FORMATS``), read through ``CorpusSource`` (``readers.py``). Lazy like the package
(``elmo_hf/__init__.py``): a name below imports its module on first use, so that the command line reads
``elmo_hf.corpus.formats`` (the table's names and help) and nothing else of it."""

from __future__ import annotations

from .. import lazy_names

# Public name -> the module of this package that defines it.
LAZY_NAMES = {
    "CorpusReader": "format_readers", "INPUT_FORMATS": "formats", "register_input_format": "formats",
    "CorpusError": "readers", "CorpusSource": "readers", "InvalidRowError": "readers", "infer_input_format": "readers",
}


__getattr__, __dir__ = lazy_names(__name__, LAZY_NAMES)

__all__ = ["CorpusError", "CorpusReader", "CorpusSource", "INPUT_FORMATS", "InvalidRowError", "infer_input_format", "register_input_format"]
