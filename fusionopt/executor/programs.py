"""What a rank runs in a step: the model's program of the plan, checked.

The program itself (its collectives in channel order, the compute stream's ops, the gates)
is the model's: :mod:`fusionopt.model.step_program`, built by
:func:`~fusionopt.model.allreduce_program.allreduce_program` (MODEL.md 3 and 4),
:func:`~fusionopt.model.sharded_program.sharded_program` (8.2) and
:func:`~fusionopt.model.decoupled_program.decoupled_program` (8.1), the same programs the
simulator runs; the pattern builds it (:meth:`~fusionopt.model.pattern.Pattern.program`).
:func:`build_program` refuses what the executor cannot run (two channels, a plan for another
pattern, an order that can never run) in one line.
"""

from __future__ import annotations

from fusionopt.model.decoupled_plan import DecoupledPlan
from fusionopt.model.plan import Plan
from fusionopt.model.problem import Problem
from fusionopt.model.sharded_plan import ShardedPlan
from fusionopt.model.step_program import Program


def build_program(problem: Problem, plan: Plan | DecoupledPlan | ShardedPlan) -> Program:
    """The :class:`~fusionopt.model.step_program.Program` of ``plan`` on an all-reduce,
    decoupled or fully sharded ``problem`` (:meth:`~fusionopt.model.pattern.Pattern.program`)."""
    problem.pattern.require_plan(plan)
    program = problem.pattern.program(problem, plan)
    if program is None:
        raise ValueError(f"{problem.pattern.article()} {problem.pattern.words} problem has no step program: "
                         "the executor runs step programs only")
    return program


__all__ = ["build_program"]
