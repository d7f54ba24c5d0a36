"""``python -m fusionopt``: the command line."""

import sys

from fusionopt.cli import main

sys.exit(main())
