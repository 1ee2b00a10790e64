"""`python -m anchorft ...`: the `anchorft` console script."""

import sys

from anchorft.cli import console

sys.exit(console())
