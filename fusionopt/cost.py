"""Communication cost models, public face: see :mod:`fusionopt.model.cost` and
:mod:`fusionopt.model.collectives`.

Examples
--------
>>> from fusionopt.cost import network, read_osu
>>> c = network("25gbe", 4)
>>> round(c(1e6), 6)
0.00063
"""

from fusionopt.model.collectives import (
    ALGORITHMS,
    COLLECTIVES,
    double_binary_tree_allreduce,
    hierarchical_all_gather,
    hierarchical_allreduce,
    hierarchical_reduce_scatter,
    network,
    network_link,
    networks,
    rabenseifner_allreduce,
    recursive_doubling_all_gather,
    recursive_doubling_allreduce,
    recursive_halving_reduce_scatter,
    ring_all_gather,
    ring_allreduce,
    ring_reduce_scatter,
)
from fusionopt.model.cost import (
    COST_SCHEMA,
    COST_VERSION,
    AlphaBeta,
    CommCost,
    Composite,
    PiecewiseLinear,
    cost_from_dict,
)
from fusionopt.model.cost_files import read_nccl_tests, read_osu

__all__ = [
    "COST_SCHEMA",
    "COST_VERSION",
    "CommCost",
    "AlphaBeta",
    "PiecewiseLinear",
    "Composite",
    "cost_from_dict",
    "read_nccl_tests",
    "read_osu",
    "ring_allreduce",
    "recursive_doubling_allreduce",
    "rabenseifner_allreduce",
    "double_binary_tree_allreduce",
    "hierarchical_allreduce",
    "ALGORITHMS",
    "ring_reduce_scatter",
    "ring_all_gather",
    "recursive_halving_reduce_scatter",
    "recursive_doubling_all_gather",
    "hierarchical_reduce_scatter",
    "hierarchical_all_gather",
    "COLLECTIVES",
    "network",
    "network_link",
    "networks",
]
