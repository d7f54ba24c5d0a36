"""The ``fusionopt`` command: the public API on the command line, nothing more.

Bad arguments and bad input files exit with status 2 and a one-line message: :func:`main`
runs a command (``python -m fusionopt --help`` lists them), :func:`option_value` parses one
``--option key=value`` the way the commands do.
"""

from fusionopt.cli._main import main
from fusionopt.cli._problems import option_value

__all__ = ["main", "option_value"]
