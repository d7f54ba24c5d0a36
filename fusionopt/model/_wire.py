"""What each collective of a step program carries on the wire (MODEL.md section 2.2).

:func:`collective_encodings` gives every collective of a program its :class:`Encoding`, the
one the model prices it in: an all-reduce message's as :meth:`Problem.message_encodings`
chooses it (the cheapest its cost allows, a lossless one where it carries a tensor kept
exact), a fully sharded or decoupled problem's reduce-scatters and all-gathers in their own
costs' encodings (FSDP2's ``reduce_dtype`` and ``param_dtype``, Megatron's gradient and
parameter dtypes). The executor sends each collective in it, so that what runs is what was
priced.

Examples
--------
>>> from fusionopt.cost import FP16, AlphaBeta, Cheapest
>>> from fusionopt.model import Plan, Problem, Profile, allreduce_program
>>> profile = Profile.from_arrays([400, 4_000_000], [1e-3] * 2, [1e-3] * 2)
>>> problem = Problem(profile, Cheapest(AlphaBeta(25e-6, 1e-9), ["fp32", FP16.with_costs(seconds_per_message=40e-6)]))
>>> plan = Plan.per_tensor(profile)
>>> [e.name for e in collective_encodings(problem, allreduce_program(problem, plan))]  # 4 MB, then 400 B
['fp16', 'fp32']
"""

from __future__ import annotations

from fusionopt.model._decoupled_plan import ALL_GATHER, REDUCE_SCATTER
from fusionopt.model._encoding import FP32, Encoding, encoding_table, encodings_of
from fusionopt.model._problem import Problem
from fusionopt.model._step_program import Program


def collective_encodings(problem: Problem, program: Program) -> tuple[Encoding, ...]:
    """Each collective of ``program`` (a plan's on ``problem``), in program order, with the
    encoding the model prices it in (module docstring). An all-reduce, fully sharded or
    decoupled problem only: a parameter server's collectives are refused in one line."""
    pattern = problem.pattern
    specs = program.collectives
    if pattern.name == "all-reduce":
        table = {**encoding_table(problem.exact_cost), **encoding_table(problem.cost)}
        through = problem.compressor.name if problem.compressor is not None else None
        return tuple(FP32 if name == through else table[name] for name in _message_ways(problem, program))
    if pattern.name in ("fully-sharded", "decoupled"):
        costs = {REDUCE_SCATTER: pattern.reduce_scatter, ALL_GATHER: pattern.all_gather}
        return tuple(encoding_table(costs[s.kind])[encodings_of([s.nbytes], costs[s.kind])[0]] for s in specs)
    raise ValueError(f"the encodings of {pattern.article()} {pattern.words} problem's collectives are not "
                     "modelled per collective: all-reduce, fully sharded and decoupled problems only")


def compressed_collectives(problem: Problem, program: Program) -> tuple[bool, ...]:
    """Whether the model sends each collective of ``program`` (a plan's on ``problem``, in
    program order) through ``problem.compressor`` (MODEL.md section 2.4): where
    :meth:`~fusionopt.model.Problem.message_encodings` names it. Such a message's
    all-reduces carry its elements as they are (:func:`collective_encodings` gives it fp32);
    the compressor says which and how many. All False without a compressor.

    >>> from fusionopt.cost import AlphaBeta, PowerSGD
    >>> from fusionopt.model import Plan, Problem, Profile, allreduce_program
    >>> profile = Profile.from_arrays([1048576, 1024], [0, 0], [1e-3, 1e-3], ["w", "b"], shapes=[(256, 1024), (256,)])
    >>> problem = Problem(profile, AlphaBeta(1e-5, 1e-9), compressor=PowerSGD(rank=4))
    >>> plan = Plan.per_tensor(profile)     # b alone, then w: the hook pays for w only
    >>> compressed_collectives(problem, allreduce_program(problem, plan))
    (False, True)
    """
    if problem.compressor is None or not program.collectives:
        return (False,) * len(program.collectives)
    return tuple(name == problem.compressor.name for name in _message_ways(problem, program))


def _message_ways(problem: Problem, program: Program) -> list[str]:
    """Each all-reduce message's way, as :meth:`~fusionopt.model.Problem.message_encodings`
    names it (an encoding, or the compressor)."""
    specs = program.collectives
    return problem.message_encodings([s.nbytes for s in specs], [list(s.tensors) for s in specs])


__all__ = ["collective_encodings", "compressed_collectives"]
