"""``method="milp"``: the optimal fusion plan as a MILP over a cut vector, solved by HiGHS.

An encoder of :class:`Problem` into ``scipy.optimize.milp`` and a decoder back to a
:class:`Plan`, independent of the DP (no recurrence) and of the CP-SAT arc model (no arcs):
the decision is the cut vector itself and the objective is MODEL.md section 7's closed form.

Formulation
-----------
Positions ``j = 1..n`` in backward order with ready times ``rho_j`` (non-decreasing) and
prefix sizes ``Q_j`` (``Q_0 = 0``). For an affine cost ``c(S) = alpha + beta S`` (``S > 0``):

* ``x_j`` binary for ``j = 1..n-1``: a message ends at position ``j``; ``x_n = 1``.
* ``P_j`` continuous: the prefix size at the last message end before ``j`` (``P_1 = 0``),
  so the message ending at ``j`` holds ``Q_j - P_j`` bytes. Exact for binary ``x``, by
  lower and upper bounds both (``x_{j-1} = 1`` pins ``P_j = Q_{j-1}`` with rows 2 and 3,
  ``x_{j-1} = 0`` pins ``P_j = P_{j-1}`` with rows 1 and 4)::

      P_j >= P_{j-1}                          (1: P never decreases)
      P_j >= Q_{j-1} x_{j-1}                  (2)
      P_j <= Q_{j-1}                          (3: a variable bound)
      P_j <= P_{j-1} + M_j x_{j-1}            (4)

  with ``M_j = min(Q_{j-1}, cap)`` bytes: when ``x_{j-1} = 1`` the step ``P_j - P_{j-1}``
  is the size of the message ending at ``j - 1``, at most ``Q_{j-1}`` and at most the byte
  cap (``cap = inf`` without one).
* ``E`` continuous, minimised, with for **every** position ``j``::

      E >= rho_j + alpha * sum_{k >= j} x_k + beta * (Q_n - P_j) - M_j (1 - x_j)

  For a message end (``x_j = 1``) the right-hand side is ``R_j + sum_{k >= j} c(S_k)``,
  the term of section 7, so ``E`` is the end of the last message. The big-M is
  ``M_j = 0``: when ``x_j = 0``, let ``k > j`` be the end of ``j``'s message; no message
  ends in ``[j, k)``, so ``sum_{k' >= j} x = sum_{k' >= k} x`` and ``P_j = P_k``, while
  ``rho_j <= rho_k``: the row of ``j`` is dominated by the row of ``k``, and holds for
  every plan without relaxation. (The textbook ``M = rho_n + alpha n + beta Q_n``, the
  largest right-hand side, is also safe, but only weakens the LP relaxation.)
* ``max_message_bytes = cap``: ``Q_j - P_j <= cap + M'_j (1 - x_j)`` with ``M'_j = 0``
  by the same dominance (the bytes from a message's start to ``j`` are at most the whole
  message's). The first position needs no row: ``check_caps`` has ``s <= cap``.
* ``max_messages = K``: ``sum_{j < n} x_j <= K - 1``.
* Without a byte cap, ``x_j = 0`` is fixed where ``rho_{j+1} = rho_j`` (the tensor at
  ``j + 1`` has no backward time, e.g. a bias): moving such a cut from ``j`` to ``j + 1``
  keeps the earlier message's ready time and the sum of the costs from it on, moves
  ``beta s_{j+1}`` off the later message (or merges it away, saving ``alpha``), and never
  adds a message; moving such cuts right one at a time ends in an optimal plan with none
  of them. A byte cap can forbid the move, so the fixing is skipped with one.

Then ``T = max(B, E) + U + F + W`` in both sync modes (section 7), unless the layerwise slack
of :func:`~fusionopt.model.layerwise_slack` is positive: the MILP then still minimises
``E``, its bound is lowered by the slack, and ``OPTIMAL`` comes only from meeting the DP's
optimum.

Numerics: times are divided by ``tau = rho_n + alpha n + beta Q_n`` (the largest
right-hand side, an upper bound on ``E`` for every plan) and bytes by ``Q_n``, so every
coefficient, bound and variable lies in ``[0, 1]``. HiGHS's absolute tolerances then act
as fractions of ``tau``; they are tightened from their defaults (module constants) and
the answer is accurate to ``mip_rel_gap`` of ``E`` plus ``NUMERICAL_RTOL`` of ``tau``
(``stats["tolerance"]``, seconds). Nothing is rounded but ``x`` (``> 0.5``); the decoded
plan is re-simulated and its simulated ``T`` is what the result reports.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusionopt.model._fusion import backward_arrays, time_bound_after_channel
from fusionopt.model._fusion_dp import check_caps
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.solvers.exact._cpsat_arcs import reference_cuts
from fusionopt.solvers._result import Outcome, Result, Status
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._catalogue import method, seconds_left

# HiGHS's primal, dual and MIP feasibility tolerances on the scaled model, where they are
# fractions of tau and of Q_n. With the defaults (1e-7, 1e-7, 1e-6) HiGHS passed over
# plans up to ~1e-6 tau better than its incumbent and reported that incumbent optimal,
# its dual bound above the true optimum (seen on AlphaBeta(0, 1e-12) cases).
HIGHS_FEASIBILITY = 1e-9
# Accuracy in units of tau claimed on top of mip_rel_gap: ten times the feasibility
# tolerance, which also covers HiGHS dropping matrix entries below 1e-9 (an alpha or a
# beta Q_n under 1e-9 tau). Over 1500 random cross-checks with the DP, errors stayed
# below 1e-9 tau.
NUMERICAL_RTOL = 10 * HIGHS_FEASIBILITY


@method("milp", family="exact",
        summary="exact: MILP solved by HiGHS, independent formulation",
        in_default_comparison=False)
@declares(Needs(plain=True))
def milp(
    problem: Problem,
    *,
    time_limit: float = 10.0,
    mip_rel_gap: float = 1e-9,
    max_message_bytes: float | None = None,
    max_messages: int | None = None,
    node_limit: int | None = None,
) -> Result:
    """The optimal fusion plan by a mixed-integer linear programme over the cut vector.

    One channel, whole tensors in contiguous groups in backward order, either sync mode;
    the formulation is in the module docstring. Needs an affine cost (``AlphaBeta``, or
    any cost whose ``affine`` is known); for other costs use ``method="dp"`` or ``"cpsat"``.

    Parameters
    ----------
    problem : Problem
    time_limit : float
        Seconds HiGHS may search, positive and finite.
    mip_rel_gap : float
        HiGHS stops once its incumbent is within this fraction of its dual bound, in
        ``[0, 1)`` (HiGHS's absolute gap criterion is switched off).
    max_message_bytes : float, optional
        Largest message in bytes; a tensor larger than it is infeasible (``ValueError``).
    max_messages : int, optional
        Most messages allowed.
    node_limit : int, optional
        Most branch-and-bound nodes HiGHS may explore, beside ``time_limit``: HiGHS's search
        is deterministic, so a solve stopped by it stops at the same point on every machine.
        Use it, with a ``time_limit`` far out of the way, for results that must reproduce
        exactly; a solve it stops has status ``TIME_LIMIT``, as for the time limit.

    Returns
    -------
    Result
        The decoded plan, re-simulated. ``lower_bound`` includes HiGHS's dual bound turned
        into an iteration time, ``max(B, E_dual) + U + F + W``; ``status`` is ``OPTIMAL`` when
        the simulated time meets the bound within ``stats["tolerance"]`` seconds, else
        ``TIME_LIMIT`` when HiGHS stopped on its time limit (``FEASIBLE`` otherwise).
        ``stats``: HiGHS's status code and message, its objective and dual bound in
        seconds (``communication_end``, ``dual_bound``), ``node_count``, ``variables``,
        ``constraints``, ``fixed_cuts`` (cuts fixed to 0 by dominance), the big-Ms
        (``big_m_end`` in seconds, ``big_m_cap`` and ``big_m_prefix`` in bytes: the largest
        ``M_j`` of each family), ``time_scale`` (``tau``, seconds) and ``tolerance``.

    Raises
    ------
    ValueError
        Bad options, a non-affine cost, or caps no fusion plan can meet.
    RuntimeError
        HiGHS found no feasible plan within ``time_limit`` (there is no fall-back plan:
        raise the limit or use ``method="dp"``), or failed.

    Examples
    --------
    MODEL.md section 5, ``alpha = 3 ms``: ``{t3}, {t2, t1}`` at 17 ms.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(3e-3, 1e-9))
    >>> result = milp(problem)
    >>> result.plan.groups(), round(result.iteration_time * 1e3, 9), str(result.status)
    ([[2], [1, 0]], 17.0, 'OPTIMAL')
    >>> milp(problem, max_message_bytes=4e6).plan.groups()   # {t3, t2} fits in 4 MB
    [[2, 1], [0]]
    >>> round(milp(problem, max_messages=1).iteration_time * 1e3, 9)
    19.0
    """
    mip_rel_gap = _check_gap(mip_rel_gap)
    if node_limit is not None and (isinstance(node_limit, bool) or not isinstance(node_limit, (int, np.integer))
                                   or node_limit < 1):
        raise ValueError(f"node_limit must be an integer >= 1, got {node_limit!r}")
    affine = problem.cost.affine
    if affine is None:
        raise ValueError(
            f"milp needs an affine cost such as AlphaBeta, got {type(problem.cost).__name__}; "
            "use method='cpsat' or 'dp' for other cost models"
        )
    cap, max_messages = check_caps(problem, max_message_bytes, max_messages)
    from scipy.optimize import Bounds, LinearConstraint
    from scipy.optimize import milp as highs_milp

    model = encode_model(problem, affine, cap, max_messages)
    # scipy passes the HiGHS options it does not list through verbatim, with a warning.
    options = {
        "time_limit": max(seconds_left(), 0.01),         # the solve's deadline: encoding counts too
        "mip_rel_gap": mip_rel_gap,
        "mip_abs_gap": 0.0,
        "mip_feasibility_tolerance": HIGHS_FEASIBILITY,
        "primal_feasibility_tolerance": HIGHS_FEASIBILITY,
        "dual_feasibility_tolerance": HIGHS_FEASIBILITY,
    }
    if node_limit is not None:
        options["node_limit"] = int(node_limit)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Unrecognized options detected", category=RuntimeWarning)
        res = highs_milp(
            model.objective,
            integrality=model.integrality,
            bounds=Bounds(model.lower, model.upper),
            constraints=LinearConstraint(model.matrix, model.row_lower, model.row_upper),
            options=options,
        )
    profile = problem.profile
    tau = model.time_scale
    # scipy says 1 for HiGHS's time limit; HiGHS's node limit comes through as 4 ("not recognized"),
    # its message naming the limit.
    stopped = res.status == 1 or (res.status == 4 and "limit reached" in str(res.message))
    if res.x is None:
        if not stopped:
            raise RuntimeError(f"milp: HiGHS ended without a plan, status {res.status}: {res.message}")
        # The limit came before HiGHS's first incumbent: the best plan so far is the
        # fewest-messages plan within the caps (greedy, in ready order), with TIME_LIMIT.
        plan = Plan.from_cuts(profile, reference_cuts(problem, cap, profile.n))   # greedy packing under cap
        if max_messages is not None and plan.num_messages > max_messages:
            return Outcome(plan, status=Status.INFEASIBLE,
                           stats={"highs_status": int(res.status), "highs_message": str(res.message)})
        stats = {"highs_status": int(res.status), "highs_message": str(res.message),
                 "plan": "fewest messages within the caps: HiGHS found no plan within its limit"}
        return Outcome(plan, stats=stats, status=Status.TIME_LIMIT)
    cuts = np.asarray(res.x[: profile.n - 1]) > 0.5
    plan = Plan.from_cuts(profile, cuts)
    # HiGHS's incumbent meets the caps to its tolerance; the rounded plan must meet them exactly.
    if plan.message_bytes.max() > cap or (max_messages is not None and plan.num_messages > max_messages):
        raise RuntimeError(
            f"milp: HiGHS's plan breaks a cap after rounding (largest message "
            f"{int(plan.message_bytes.max())} bytes, {plan.num_messages} messages)"
        )
    objective = float(res.fun) * tau
    dual = res.get("mip_dual_bound")
    if dual is None or not math.isfinite(dual):
        dual = res.fun if res.status == 0 else None
    dual_end = None if dual is None else float(dual) * tau
    tolerance = max(1e-12, mip_rel_gap * abs(objective) + NUMERICAL_RTOL * tau)
    stats = {
        "highs_status": int(res.status),
        "highs_message": str(res.message),
        "communication_end": objective,
        "dual_bound": dual_end,
        "node_count": None if res.get("mip_node_count") is None else int(res.mip_node_count),
        "variables": model.variables,
        "constraints": model.constraints,
        "fixed_cuts": model.fixed_cuts,
        "big_m_end": 0.0,
        "big_m_cap": 0.0,
        "big_m_prefix": model.big_m_prefix,
        "time_scale": tau,
        "tolerance": tolerance,
    }
    lower_bound = None if dual_end is None else time_bound_after_channel(problem, dual_end)
    status = Status.TIME_LIMIT if stopped else Status.FEASIBLE
    return Outcome(plan, stats=stats, lower_bound=lower_bound,
                   status=status, tolerance=tolerance)


def _check_gap(mip_rel_gap: Any) -> float:
    if isinstance(mip_rel_gap, bool) or not isinstance(mip_rel_gap, (int, float, np.integer, np.floating)):
        raise ValueError(f"mip_rel_gap must be a number, got {mip_rel_gap!r}")
    if not 0 <= mip_rel_gap < 1:
        raise ValueError(f"mip_rel_gap must lie in [0, 1), got {mip_rel_gap!r}")
    return float(mip_rel_gap)


@dataclass(frozen=True, eq=False)
class _Model:
    """The scaled MILP in ``scipy.optimize.milp``'s form.

    Columns: ``x_1..x_{n-1}`` (0..n-2), ``P_2..P_n`` in units of ``Q_n`` (n-1..2n-3), ``E``
    in units of ``time_scale`` seconds (2n-2).
    """

    objective: np.ndarray
    integrality: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    matrix: Any
    row_lower: np.ndarray
    row_upper: np.ndarray
    time_scale: float
    fixed_cuts: int
    big_m_prefix: float

    @property
    def variables(self) -> int:
        return len(self.objective)

    @property
    def constraints(self) -> int:
        return len(self.row_lower)


def encode_model(problem: Problem, affine: tuple[float, float], cap: float, max_messages: int | None) -> _Model:
    from scipy.sparse import coo_array

    alpha, beta = affine
    rho, prefix = backward_arrays(problem)
    n = len(rho)
    total = float(prefix[-1])
    tau = float(rho[-1] + alpha * n + beta * total)
    if not tau > 0:
        tau = 1.0                                        # every plan ends at 0 s
    q = prefix / total                                   # bytes in units of Q_n
    a = alpha / tau                                      # seconds in units of tau
    b = beta * total / tau
    r = rho / tau
    scaled_cap = cap / total

    def x(j: int) -> int:                                # column of x_j, j = 1..n-1
        return j - 1

    def p(j: int) -> int:                                # column of P_j, j = 2..n
        return n + j - 3

    e = 2 * n - 2
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    row_lower: list[float] = []
    row_upper: list[float] = []

    def row(entries: list[tuple[int, float]], lo: float, hi: float) -> None:
        for col, value in entries:
            rows.append(len(row_lower))
            cols.append(col)
            vals.append(value)
        row_lower.append(lo)
        row_upper.append(hi)

    big_m_prefix = 0.0
    for j in range(2, n + 1):
        previous = [(p(j - 1), -1.0)] if j > 2 else []   # P_1 = 0
        m = min(q[j - 1], scaled_cap)
        big_m_prefix = max(big_m_prefix, m)
        row([(p(j), 1.0)] + previous, 0.0, np.inf)                              # (1)
        row([(p(j), 1.0), (x(j - 1), -q[j - 1])], 0.0, np.inf)                  # (2)
        row([(p(j), 1.0), (x(j - 1), -m)] + previous, -np.inf, 0.0)             # (4)
    for j in range(1, n + 1):
        # E - alpha sum_{j <= k < n} x_k + beta P_j >= rho_j + alpha x_n + beta Q_n
        entries = [(e, 1.0)] + [(x(k), -a) for k in range(j, n)]
        if j >= 2:
            entries.append((p(j), b))
        row(entries, r[j - 1] + a + b, np.inf)
    if cap < math.inf:
        for j in range(2, n + 1):                        # Q_j - P_j <= cap
            row([(p(j), 1.0)], q[j] - scaled_cap, np.inf)
    if max_messages is not None and n > 1:
        row([(x(j), 1.0) for j in range(1, n)], -np.inf, max_messages - 1.0)

    variables = 2 * n - 1
    lower = np.zeros(variables)
    upper = np.full(variables, np.inf)
    upper[: n - 1] = 1.0
    if cap == math.inf:
        # Dominance (module docstring): no cut before a tensor without backward time.
        upper[: n - 1][rho[1:] == rho[:-1]] = 0.0
    fixed_cuts = int(np.count_nonzero(upper[: n - 1] == 0.0))
    for j in range(2, n + 1):
        upper[p(j)] = q[j - 1]                           # (3)
    integrality = np.zeros(variables)
    integrality[: n - 1] = 1
    objective = np.zeros(variables)
    objective[e] = 1.0
    matrix = coo_array((vals, (rows, cols)), shape=(len(row_lower), variables)).tocsr()
    return _Model(
        objective=objective, integrality=integrality, lower=lower, upper=upper, matrix=matrix,
        row_lower=np.array(row_lower), row_upper=np.array(row_upper), time_scale=tau,
        fixed_cuts=fixed_cuts, big_m_prefix=float(big_m_prefix * total),
    )
