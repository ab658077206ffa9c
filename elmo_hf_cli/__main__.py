"""``python -m elmo_hf_cli``: the same as ``elmo-hf``."""

from . import command_line

command_line()
