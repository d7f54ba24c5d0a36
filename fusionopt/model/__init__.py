"""The pure timing model (MODEL.md): profiles, cost models, patterns, plans, problems, the simulator.

numpy only: nothing here imports a solver.
"""

from fusionopt.model.allreduce import AllReduce
from fusionopt.model.bounds import best_bound
from fusionopt.model.cost import AlphaBeta, CommCost
from fusionopt.model.decoupled import Decoupled
from fusionopt.model.decoupled_plan import DecoupledPlan
from fusionopt.model.encoding import Cheapest, Encoded, Encoding
from fusionopt.model.pattern import Pattern
from fusionopt.model.hsdp import HSDP
from fusionopt.model.fusion_eval import evaluate_cuts, fusion_iteration_time
from fusionopt.model.plan import Chunk, Message, Plan
from fusionopt.model.problem import Problem
from fusionopt.model.profile import Profile
from fusionopt.model.ps import ParameterServer
from fusionopt.model.ps_plan import PSPlan
from fusionopt.model.sharded import FullySharded
from fusionopt.model.sharded_plan import ShardedPlan
from fusionopt.model.timeline import ComputePiece, Timeline
from fusionopt.model.simulator import compute_pieces, simulate

__all__ = [
    "AllReduce", "AlphaBeta", "Cheapest", "Chunk", "CommCost", "ComputePiece", "Decoupled", "DecoupledPlan", "Encoded",
    "Encoding", "FullySharded", "HSDP", "Message", "PSPlan", "ParameterServer", "Pattern", "Plan", "Problem",
    "Profile", "ShardedPlan", "Timeline", "best_bound", "compute_pieces", "evaluate_cuts", "fusion_iteration_time", "simulate",
]
