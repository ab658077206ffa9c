"""``python -m elmo_hf_cli``: the same as ``elmo-hf``."""

import sys

from . import main

sys.exit(main())
