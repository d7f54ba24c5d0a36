"""``python -m fusionopt``: the command line."""

import sys

from fusionopt.cli import main

if __name__ == "__main__":
    sys.exit(main())
