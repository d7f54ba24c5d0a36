"""What a rank runs in a sharded step: the model's program of the plan, checked.

The program itself (its collectives in channel order, the compute stream's ops, the gates)
is the model's: :mod:`fusionopt.model.step_program`, built by
:func:`~fusionopt.model.sharded_program.sharded_program` (MODEL.md 8.2) and
:func:`~fusionopt.model.decoupled_program.decoupled_program` (8.1), the same programs the
simulator runs. :func:`build_program` refuses what the executor cannot run (two channels, a
plan for another pattern, an order that can never run) in one line.
"""

from __future__ import annotations

from fusionopt.model.decoupled_plan import DecoupledPlan
from fusionopt.model.decoupled_program import decoupled_program
from fusionopt.model.decoupled_timing import simulate_decoupled
from fusionopt.model.problem import Problem
from fusionopt.model.sharded_plan import ShardedPlan
from fusionopt.model.sharded_program import sharded_program
from fusionopt.model.step_program import Program


def build_program(problem: Problem, plan: DecoupledPlan | ShardedPlan) -> Program:
    """The :class:`~fusionopt.model.step_program.Program` of ``plan`` on a decoupled or
    fully sharded ``problem``, validated."""
    if problem.fully_sharded is not None and isinstance(plan, ShardedPlan):
        if problem.fully_sharded.channels != "one":
            raise ValueError("the executor runs one communicator: FullySharded(channels='two') is not executable")
        plan.validate(problem.profile)
        return sharded_program(problem, plan)
    if problem.decoupled is not None and isinstance(plan, DecoupledPlan):
        simulate_decoupled(problem, plan)                 # validates; refuses an order that can never run, naming it
        return decoupled_program(problem, plan)
    raise ValueError(f"a {problem.pattern} problem does not take a {type(plan).__name__}")


__all__ = ["build_program"]
