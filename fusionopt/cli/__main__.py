"""``python -m fusionopt.cli``: the command line, as ``python -m fusionopt`` runs it."""

import sys

from fusionopt.cli import main

if __name__ == "__main__":
    sys.exit(main())
