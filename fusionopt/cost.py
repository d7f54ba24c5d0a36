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
    double_binary_tree_allreduce,
    hierarchical_allreduce,
    network,
    network_link,
    networks,
    rabenseifner_allreduce,
    recursive_doubling_allreduce,
    ring_allreduce,
)
from fusionopt.model.cost import (
    COST_SCHEMA,
    COST_VERSION,
    AlphaBeta,
    CommCost,
    Composite,
    PiecewiseLinear,
    cost_from_dict,
    read_nccl_tests,
    read_osu,
)

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
    "network",
    "network_link",
    "networks",
]
