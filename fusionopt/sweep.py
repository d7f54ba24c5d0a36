"""Deprecated: the sweep's names live in :mod:`fusionopt.experiments`, their one public path.

This alias warns once on import and will be removed in the next release.
"""

import warnings

from fusionopt.experiments import (  # noqa: F401  (the old spelling's names)
    CELL_FIELDS, CHEAP_BATCH, FIELDS, SYNCS, Cell, cells, pending_cells, read_results, run_cell, run_cells, run_sweep,
)

__all__ = ["CELL_FIELDS", "CHEAP_BATCH", "FIELDS", "SYNCS", "Cell", "cells", "pending_cells", "read_results",
           "run_cell", "run_cells", "run_sweep"]

warnings.warn("fusionopt.sweep is deprecated: import its names from fusionopt.experiments", DeprecationWarning,
              stacklevel=2)
