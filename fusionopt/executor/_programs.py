"""What a rank runs in a step: the model's program of the plan, checked.

The program itself (its collectives in channel order, the compute stream's ops, the gates)
is the model's: :mod:`fusionopt.model._step_program`, built by
:func:`~fusionopt.model.allreduce_program` (MODEL.md 3 and 4),
:func:`~fusionopt.model.sharded_program` (8.2) and
:func:`~fusionopt.model._decoupled_program.decoupled_program` (8.1) and
:func:`~fusionopt.model.ps_program` (section 6, the parameter server), the same
programs the simulator runs; the pattern builds it (:meth:`~fusionopt.model.Pattern.program`).
:func:`build_program` refuses what the executor cannot run (a plan for another pattern, an
order that can never run) in one line.

:func:`wire_collectives` says what each collective is on the wire, and :func:`wire_encodings`
what it travels in. A parameter server runs
as BytePS's co-located mode with a server on every rank: a push is a reduce-scatter (rank
``r`` is the server of shard ``r`` of the message and receives its sum), a pull an all-gather
of every server's shard. The cost model's own ``K`` servers price the prediction; the run
moves the bytes as ``K = P`` does.
"""

from __future__ import annotations

from dataclasses import replace

from fusionopt.model._decoupled_plan import ALL_GATHER, REDUCE_SCATTER, DecoupledPlan
from fusionopt.model._encoding import Encoding
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._ps_plan import PSPlan
from fusionopt.model._ps_program import PULL, PUSH
from fusionopt.model._sharded_plan import ShardedPlan
from fusionopt.model._step_program import CollectiveSpec, Program
from fusionopt.model._wire import collective_encodings

# What the collectives of a program's kinds are on the wire (module docstring).
WIRE_KINDS = {PUSH: REDUCE_SCATTER, PULL: ALL_GATHER}
# The patterns whose collectives the executor sends in their encodings (wire_encodings).
ENCODED_PATTERNS = ("all-reduce", "fully-sharded", "decoupled")


def build_program(problem: Problem, plan: Plan | DecoupledPlan | ShardedPlan | PSPlan) -> Program:
    """The :class:`~fusionopt.model.Program` of ``plan`` on an all-reduce,
    decoupled, fully sharded or parameter-server ``problem``
    (:meth:`~fusionopt.model.Pattern.program`)."""
    problem.pattern.require_plan(plan)
    program = problem.pattern.program(problem, plan)
    if program is None:
        raise ValueError(f"{problem.pattern.article()} {problem.pattern.words} problem has no step program: "
                         "the executor runs step programs only")
    return program


def wire_encodings(problem: Problem, program: Program) -> tuple[Encoding, ...] | None:
    """Each collective's encoding on the wire (:func:`~fusionopt.model._wire.collective_encodings`)
    for an all-reduce, fully sharded or decoupled problem; None (every collective as it is) for
    a parameter server, whose costs the :class:`~fusionopt.executor.Job` keeps without
    encodings."""
    if problem.pattern.name not in ENCODED_PATTERNS:
        return None
    return collective_encodings(problem, program)


def wire_collectives(program: Program) -> tuple[CollectiveSpec, ...]:
    """The program's collectives as the ranks run them: a push as a reduce-scatter, a pull as
    an all-gather (module docstring); every other kind as it is."""
    return tuple(replace(spec, kind=WIRE_KINDS[spec.kind]) if spec.kind in WIRE_KINDS else spec
                 for spec in program.collectives)


__all__ = ["ENCODED_PATTERNS", "WIRE_KINDS", "build_program", "wire_collectives", "wire_encodings"]
