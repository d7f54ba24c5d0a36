"""``method="dp"``: the exact fusion dynamic programme of MODEL.md section 7."""

from __future__ import annotations


from fusionopt.model._bounds import note_fusion_optimum
from fusionopt.model._fusion_dp import optimal_fusion
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.solvers._result import Outcome, Result
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._catalogue import method


@method("dp", family="exact", summary="exact fusion dynamic programme (O(n) affine, O(n^2) any cost)")
@declares(Needs(plain=True, takes=("message_compute", "exact_tensors", "compressor")))
def dp(
    problem: Problem,
    *,
    max_message_bytes: float | None = None,
    max_messages: int | None = None,
    algorithm: str = "auto",
) -> Result:
    """The optimal fusion plan (one channel, contiguous groups in backward order), exactly.

    Complexity: O(n) for affine costs (``AlphaBeta``), O(n^2) for any other cost model;
    a ``max_message_bytes`` cap keeps these; ``max_messages = K`` costs O(K n^2).
    Valid for both sync modes (a FIFO fusion plan does not overlap the forward). With
    ``message_compute`` on, a recurrence by message count, O(n^3) at most
    (:func:`~fusionopt.model.optimal_fusion`).

    Parameters
    ----------
    max_message_bytes : float, optional
        Largest message in bytes (memory cap); a tensor larger than it makes the problem
        infeasible (``ValueError``), since fusion never splits tensors.
    max_messages : int, optional
        Most messages allowed.
    algorithm : {"auto", "linear", "quadratic"}
        Force the O(n) (affine only) or the O(n^2) algorithm.

    Returns
    -------
    Result
        ``status`` OPTIMAL, ``lower_bound == iteration_time``.

    Examples
    --------
    MODEL.md section 5, ``alpha = 3 ms``: ``{t3}, {t2, t1}`` at 17 ms.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> result = dp(Problem(profile, AlphaBeta(3e-3, 1e-9)))
    >>> result.plan.groups(), round(result.iteration_time * 1e3, 9), str(result.status)
    ([[2], [1, 0]], 17.0, 'OPTIMAL')
    >>> dp(Problem(profile, AlphaBeta(3e-3, 1e-9)), max_messages=1).plan.groups()
    [[2, 1, 0]]
    """
    best = optimal_fusion(problem, max_message_bytes=max_message_bytes,
                          max_messages=max_messages, algorithm=algorithm)
    if max_message_bytes is None and max_messages is None and not problem.extensions:
        note_fusion_optimum(problem, best.iteration_time)       # the fusion bound: not computed twice
    plan = Plan.from_cuts(problem.profile, best.cuts)
    return Outcome(plan, lower_bound=best.iteration_time, optimal=True,
                   stats={"algorithm": best.algorithm, "communication_end": best.communication_end})
