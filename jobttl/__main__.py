"""``python -m jobttl``: the same as the ``jobttl`` command."""

import sys

from jobttl.cli import main

sys.exit(main())
