"""``python -m lab``: the lab's command line (see lab/cli/__init__.py)."""

import sys

from lab.cli import main

sys.exit(main())
