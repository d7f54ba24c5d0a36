"""Exact methods: a proven optimum over their plan space, or a certified gap. The fusion DP,
brute force, CP-SAT and MILP models, the closed forms, and the exact methods of the parameter
server, the decoupled all-reduce and full sharding."""

from fusionopt.solvers.exact._brute import brute
from fusionopt.solvers.exact._closed_form import closed_form
from fusionopt.solvers.exact._cpsat import cpsat, delay_cut, integer_arc_times, rounded_path, rounding_factor
from fusionopt.solvers.exact._cpsat_arcs import (
    MAX_INTEGER_TIME, QUANTUM_PRECISION, arc_positions, automatic_quantum, plan_path,
)
from fusionopt.solvers.exact._cpsat_channels import ChannelRelaxation
from fusionopt.solvers.exact._cpsat_partition import grid_plan, unit_grid
from fusionopt.solvers.exact._decoupled_brute import in_grouping_space
from fusionopt.solvers.exact._decoupled_cpsat import (
    MAX_TENSORS, MAX_TENSORS_SEQUENTIAL, SPACE_SEQUENTIAL, DecoupledSpace,
)
from fusionopt.solvers.exact._dp import dp
from fusionopt.solvers.exact._dp_apart import dp_apart
from fusionopt.solvers.exact._milp import encode_model, milp
from fusionopt.solvers.exact._ps_brute import MAX_BRUTE_CUTS, ps_brute
from fusionopt.solvers.exact._ps_cpsat import PSGrid, ps_cpsat
from fusionopt.solvers.exact._ps_dp import ps_dp
from fusionopt.solvers.exact._ps_spaces import candidate_cuts, ps_units
from fusionopt.solvers.exact._sharded_brute import BRUTE_MAX_FREE_UNITS, RESHARD_SPACES, plans_with_units

__all__ = [
    "BRUTE_MAX_FREE_UNITS", "ChannelRelaxation", "DecoupledSpace", "MAX_BRUTE_CUTS", "MAX_INTEGER_TIME", "MAX_TENSORS",
    "MAX_TENSORS_SEQUENTIAL", "PSGrid", "QUANTUM_PRECISION", "SPACE_SEQUENTIAL", "arc_positions",
    "automatic_quantum", "brute", "candidate_cuts", "closed_form", "cpsat", "delay_cut", "dp", "dp_apart", "encode_model",
    "RESHARD_SPACES", "grid_plan", "in_grouping_space", "integer_arc_times", "milp", "plan_path", "plans_with_units", "ps_brute", "ps_cpsat", "ps_dp",
    "ps_units", "rounded_path", "rounding_factor", "unit_grid",
]
