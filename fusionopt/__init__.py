"""fusionopt: communication scheduling for data-parallel deep learning.

Model how gradient communication overlaps computation, compute optimal or near-optimal
tensor fusion and partition schedules, and compare published heuristics against them.

Examples
--------
>>> import fusionopt
>>> profile = fusionopt.Profile.from_arrays([4e6, 1e6, 2e6], forward=[1e-3] * 3,
...                                         backward=[3e-3, 2e-3, 1e-3])
>>> problem = fusionopt.Problem(profile, fusionopt.cost.AlphaBeta(alpha=3e-3, beta=1e-9))
>>> round(fusionopt.solve(problem, "single").iteration_time * 1e3, 9)
19.0
"""

from fusionopt import cost
from fusionopt.model import (
    Chunk,
    Message,
    Plan,
    Problem,
    Profile,
    Timeline,
    evaluate_cuts,
    fusion_iteration_time,
    simulate,
)
from fusionopt.solvers import Result, Status, compare, methods, solve

__version__ = "0.1.0"

__all__ = [
    "Chunk", "Message", "Plan", "Problem", "Profile", "Result", "Status", "Timeline", "compare",
    "cost", "evaluate_cuts", "fusion_iteration_time", "methods", "simulate", "solve",
]
