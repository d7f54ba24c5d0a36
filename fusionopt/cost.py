"""Communication cost models: what one message costs on the channel, seconds against bytes.

Costs
    :class:`CommCost` (the interface), :class:`AlphaBeta`, :class:`PiecewiseLinear`,
    :class:`Composite`; from files: :func:`cost_from_dict` (:data:`COST_SCHEMA`,
    :data:`COST_VERSION`), :func:`read_osu`, :func:`read_nccl_tests`; a framework's own cost
    per message or step: :func:`with_message_overhead`, :func:`with_overhead`.
Collectives on a network
    :func:`network` (a preset link and worker count, :func:`networks`, :func:`network_link`),
    the algorithms it prices (:data:`ALGORITHMS`, :data:`COLLECTIVES`): :func:`ring_allreduce`,
    :func:`double_binary_tree_allreduce`, :func:`rabenseifner_allreduce`,
    :func:`recursive_doubling_allreduce`, :func:`hierarchical_allreduce`,
    :func:`ring_reduce_scatter`, :func:`recursive_halving_reduce_scatter`,
    :func:`hierarchical_reduce_scatter`, :func:`ring_all_gather`,
    :func:`recursive_doubling_all_gather`, :func:`hierarchical_all_gather`.
What a message carries on the wire
    :class:`Encoding` (:data:`FP32`, :data:`FP16`, :data:`BF16`, :data:`ENCODINGS`),
    :class:`Encoded` (one encoding) and :class:`Cheapest` (each message its cheapest allowed
    encoding), :func:`encodings_of`, :func:`crossovers`; :class:`PowerSGD` (torch's
    ``powerSGD_hook``: its split of each tensor, a bucket's price, a problem priced for it) and
    its :class:`TensorSplit`; a :class:`Compressor` (PowerSGD is one) is a choice per message
    with ``Problem(..., compressor=...)``.
Alignment
    :class:`Aligned`: the cliff a message pays where its per-rank part breaks an alignment,
    or the price of padding to it (found by :func:`fusionopt.executor.fit_alignment`).

Examples
--------
>>> from fusionopt.cost import network, read_osu
>>> c = network("25gbe", 4)
>>> round(c(1e6), 6)
0.00063
"""

from fusionopt.model._alignment import Aligned
from fusionopt.model._collectives import (
    ALGORITHMS, COLLECTIVES, double_binary_tree_allreduce, hierarchical_all_gather, hierarchical_allreduce,
    hierarchical_reduce_scatter, network, network_link, networks, rabenseifner_allreduce,
    recursive_doubling_all_gather, recursive_doubling_allreduce, recursive_halving_reduce_scatter, ring_all_gather,
    ring_allreduce, ring_reduce_scatter,
)
from fusionopt.model._compressor import Compressor
from fusionopt.model._cost import (
    COST_SCHEMA, COST_VERSION, AlphaBeta, CommCost, Composite, PiecewiseLinear, cost_from_dict,
)
from fusionopt.model._cost_files import read_nccl_tests, read_osu
from fusionopt.model._encoding import BF16, ENCODINGS, FP16, FP32, Cheapest, Encoded, Encoding, crossovers, encodings_of
from fusionopt.model._overhead import with_message_overhead, with_overhead
from fusionopt.model._powersgd import PowerSGD, TensorSplit

__all__ = [
    "ALGORITHMS", "Aligned", "AlphaBeta", "BF16", "COLLECTIVES", "COST_SCHEMA", "COST_VERSION", "Cheapest",
    "CommCost", "Composite", "Compressor", "ENCODINGS", "Encoded", "Encoding", "FP16", "FP32", "PiecewiseLinear", "PowerSGD", "TensorSplit",
    "cost_from_dict",
    "crossovers", "double_binary_tree_allreduce", "encodings_of", "hierarchical_all_gather",
    "hierarchical_allreduce", "hierarchical_reduce_scatter", "network", "network_link", "networks",
    "rabenseifner_allreduce", "read_nccl_tests", "read_osu", "recursive_doubling_all_gather",
    "recursive_doubling_allreduce", "recursive_halving_reduce_scatter", "ring_all_gather", "ring_allreduce",
    "ring_reduce_scatter", "with_message_overhead", "with_overhead",
]
