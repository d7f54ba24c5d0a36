"""The ``fusionopt`` command: the public API on the command line, nothing more.

Bad arguments and bad input files exit with status 2 and a one-line message. One module a
family of commands: :mod:`~fusionopt.cli._solving` (``methods``, ``solve``, ``simulate``,
``compare``), :mod:`~fusionopt.cli._advising` (``advise``), :mod:`~fusionopt.cli._profiling`
(``zoo``, ``profile``, ``traced``), :mod:`~fusionopt.cli._running` (``sweep``, ``run``,
``calibrate``), :mod:`~fusionopt.cli._plotting` (``plot``); the problem the flags describe is
built in :mod:`~fusionopt.cli._problems`, and :mod:`~fusionopt.cli._main` holds the parser.
"""

from fusionopt.cli._main import main
from fusionopt.cli._problems import option_value

__all__ = ["main", "option_value"]
