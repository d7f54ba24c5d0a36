"""Communication cost models, public face: see :mod:`fusionopt.model._cost` and
:mod:`fusionopt.model._collectives`.

Examples
--------
>>> from fusionopt.cost import network, read_osu
>>> c = network("25gbe", 4)
>>> round(c(1e6), 6)
0.00063
"""

from fusionopt.model._collectives import (
    ALGORITHMS, COLLECTIVES, double_binary_tree_allreduce, hierarchical_all_gather, hierarchical_allreduce,
    hierarchical_reduce_scatter, network, network_link, networks, rabenseifner_allreduce,
    recursive_doubling_all_gather, recursive_doubling_allreduce, recursive_halving_reduce_scatter, ring_all_gather,
    ring_allreduce, ring_reduce_scatter,
)
from fusionopt.model._cost import (
    COST_SCHEMA, COST_VERSION, AlphaBeta, CommCost, Composite, PiecewiseLinear, cost_from_dict,
)
from fusionopt.model._cost_files import read_nccl_tests, read_osu
from fusionopt.model._encoding import BF16, ENCODINGS, FP16, FP32, Cheapest, Encoded, Encoding, crossovers, encodings_of
from fusionopt.model._overhead import with_message_overhead, with_overhead

__all__ = [
    "ALGORITHMS", "AlphaBeta", "BF16", "COLLECTIVES", "COST_SCHEMA", "COST_VERSION", "Cheapest", "CommCost",
    "Composite", "ENCODINGS", "Encoded", "Encoding", "FP16", "FP32", "PiecewiseLinear", "cost_from_dict",
    "crossovers", "double_binary_tree_allreduce", "encodings_of", "hierarchical_all_gather",
    "hierarchical_allreduce", "hierarchical_reduce_scatter", "network", "network_link", "networks",
    "rabenseifner_allreduce", "read_nccl_tests", "read_osu", "recursive_doubling_all_gather",
    "recursive_doubling_allreduce", "recursive_halving_reduce_scatter", "ring_all_gather", "ring_allreduce",
    "ring_reduce_scatter", "with_message_overhead", "with_overhead",
]
