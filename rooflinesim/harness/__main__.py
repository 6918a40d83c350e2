"""``python -m rooflinesim.harness run [options]``."""

import sys

from .cli import main

sys.exit(main())
