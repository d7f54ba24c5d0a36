"""``python -m fusionopt.cli``: the command line, as ``python -m fusionopt`` runs it."""

import sys

from fusionopt.cli.main import main

sys.exit(main())
