"""The ``fusionopt`` command: the public API on the command line, nothing more.

Bad arguments and bad input files exit with status 2 and a one-line message. One module a
family of commands: :mod:`~fusionopt.cli.solving` (``methods``, ``solve``, ``simulate``,
``compare``), :mod:`~fusionopt.cli.advising` (``advise``), :mod:`~fusionopt.cli.profiling`
(``zoo``, ``profile``, ``traced``), :mod:`~fusionopt.cli.running` (``sweep``, ``run``,
``calibrate``), :mod:`~fusionopt.cli.plotting` (``plot``); the problem the flags describe is
built in :mod:`~fusionopt.cli.problems`, and :mod:`~fusionopt.cli.main` holds the parser.
"""

from fusionopt.cli.main import main

__all__ = ["main"]
