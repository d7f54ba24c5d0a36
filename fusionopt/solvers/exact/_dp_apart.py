"""``method="dp-apart"``: the exact DP over plans that send the tensors kept exact apart."""

from __future__ import annotations

from fusionopt.model._apart_dp import optimal_apart
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.solvers._catalogue import method
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._result import Outcome, Result


def _keeps_tensors_exact(problem: Problem) -> bool:
    """A comparison runs ``dp-apart`` where tensors are kept exact (elsewhere it is ``dp``)."""
    return problem.restricts_encodings


@method("dp-apart", family="exact", in_default_comparison=_keeps_tensors_exact,
        summary="exact DP over plans whose messages each take a run of the exact tensors and a run of the others "
                "(exact_tensors; barrier sync)")
@declares(Needs(plain=True, barrier=True, takes=("exact_tensors",)))
def dp_apart(problem: Problem, *, max_message_bytes: float | None = None) -> Result:
    """The optimal plan that may send the tensors kept exact (``exact_tensors``, MODEL.md
    section 2.2) apart from the others: each message takes a run of the exact tensors and a
    run of the others, each in ready order, in any interleaving on the channel
    (:func:`~fusionopt.model._apart_dp.optimal_apart`). The space holds every fusion plan,
    so the plan is never slower than ``dp``'s; without ``exact_tensors`` it is ``dp``'s
    optimum (and a comparison that names no methods runs it only with them). Barrier sync
    only.

    It is exact over that space (``stats["space_optimum"]``), not over every plan: a plan
    that splits tensors may be faster, so the result's bound and gap are the model's for
    any plan.

    Complexity: ``O(a^2 b^2)`` cost evaluations for ``a`` exact tensors and ``b`` others, in
    ``a`` numpy steps and ``a b`` small ones.

    Examples
    --------
    >>> from fusionopt.cost import AlphaBeta, Cheapest
    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e5, 4e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, Cheapest(AlphaBeta(3e-3, 2e-9), ["fp32", "fp16"]), exact_tensors=[1])
    >>> result = dp_apart(problem)
    >>> result.plan.groups(), round(result.iteration_time * 1e3, 9), result.stats["encodings"]
    ([[1], [2, 0]], 20.2, ['fp32', 'fp16'])
    """
    best = optimal_apart(problem, max_message_bytes=max_message_bytes)
    plan = Plan.from_groups(problem.profile, [list(g) for g in best.groups])
    encodings = problem.message_encodings(plan.message_bytes, [list(m.tensors) for m in plan.messages])

    def agrees(result: Result) -> None:
        if abs(result.iteration_time - best.iteration_time) > 1e-9 * max(1.0, best.iteration_time):
            raise AssertionError(f"dp-apart: the DP's T {best.iteration_time!r} s is not the simulator's "
                                 f"{result.iteration_time!r} s")

    return Outcome(plan, space="any", check=agrees,
                   stats={"space_optimum": best.iteration_time, "communication_end": best.communication_end,
                          "encodings": encodings})
