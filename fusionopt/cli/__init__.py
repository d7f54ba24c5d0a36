"""The ``fusionopt`` command: the public API on the command line, nothing more.

Bad arguments and bad input files exit with status 2 and a one-line message: :func:`main`
runs a command (``python -m fusionopt --help`` lists them), :func:`option_value` parses one
``--option key=value`` the way the commands do.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status. Warnings print as one line each.

    The commands load here, not when the ``fusionopt`` command starts: Ctrl-C while they load
    ends it with one line too."""
    try:
        from fusionopt.cli._main import main as run
    except KeyboardInterrupt:
        print("fusionopt: interrupted", file=sys.stderr)
        return 130                         # _common.INTERRUPTED, which would load the commands
    return run(argv)


def __getattr__(name: str) -> Any:
    if name == "option_value":
        from fusionopt.cli._problems import option_value

        return option_value
    raise AttributeError(f"module 'fusionopt.cli' has no attribute {name!r}")


__all__ = ["main", "option_value"]
