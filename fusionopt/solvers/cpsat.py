"""``method="cpsat"``: the fusion problem as a shortest-path model solved by OR-Tools CP-SAT.

Formulation
-----------
In backward order, positions ``j = 1..n`` have ready times ``rho_j`` (non-decreasing) and
prefix sizes ``Q_j`` (:func:`~fusionopt.model.fusion.backward_arrays`). A fusion plan is a
path ``0 -> ... -> n`` in the DAG on nodes ``0..n`` whose arc ``(k, j)``, ``k < j``, means
"one message carries positions ``k+1..j``": it is ready at ``rho_j`` and holds the channel
for ``d_kj = c(Q_j - Q_k)``. The model has

* a Boolean ``x_kj`` per arc; one arc leaves node 0, one enters node ``n``, and every other
  node has as many arcs in as out (the DAG has no cycle, so the arcs chosen form one path);
* an integer ``e_j`` per node ``j >= 1`` (``e_0 = 0``) with, for each arc, enforced by
  ``x_kj``: ``e_j >= e_k + d_kj`` and ``e_j >= rho_j + d_kj``;
* the objective ``min e_n``, the end ``E`` of the last message. ``B``, ``U`` and ``F`` are
  constants, so ``T = max(B, E) + U + F`` (MODEL.md section 7, both sync modes) is minimised
  with it. ``max_message_bytes`` removes arcs, ``max_messages = K`` adds ``sum x <= K``;
* redundant cuts for the LP relaxation, which sees the enforced constraints only through
  big-M terms: ``e_n >= rho_p + sum_{(k, j): j >= p} d_kj x_kj`` for each position ``p``
  (the message holding ``p`` is ready no earlier than ``rho_p``, and it and all later
  messages follow; the maximum over ``p`` is the closed form of MODEL.md section 7). A cut
  whose ``rho_p`` equals ``rho_{p-1}`` is dominated by the one at ``p - 1`` and left out.

Integer time
------------
CP-SAT needs integers. With a time quantum ``q`` seconds, every ready time and duration is
rounded **down**: ``rho'_j = floor(rho_j / q)``, ``d'_kj = floor(d_kj / q)``.

* Lower bound. A plan's end ``E`` is a composition of ``max`` and ``+`` of its ready times
  and durations, hence non-decreasing in each of them: the rounded end ``E'(P)`` of every plan
  ``P`` satisfies ``E'(P) q <= E(P)``. CP-SAT's objective bound is at most ``min_P E'(P)``, so
  ``bound * q`` is at most the optimal ``E``, and ``max(B, bound q) + U + F`` is a lower
  bound on the optimal ``T``.
* Rounding bound. A plan of ``m <= n`` messages ends at ``E = max_j [R_j + sum_{k>=j} c_k]``;
  each term is a sum of at most ``m + 1`` rounded values, each short by less than ``q``,
  so the true end exceeds ``E'(P) q`` (hence CP-SAT's objective times ``q``) by less than
  ``(n + 1) q``: ``rounding_bound = (n + 1) q`` seconds. A plan CP-SAT proves optimal is
  therefore within ``rounding_bound`` of the optimal ``T``.

The automatic ``q`` is the largest power of two with ``(n + 1) q <= 1e-7 * E_ub``, where
``E_ub`` is the (true) end of the hint plan, or of a reference plan that respects the caps
when there is no hint: an upper bound on the optimal ``E``. Powers of two make the rounding
exact in floating point, and the integers stay below about ``2 (n + 1) 1e7``.

The integer end of that same plan, ``UB`` (in quanta), is also the horizon: an arc whose
message cannot end by ``UB`` (``rho'_j + d'_kj > UB``) is on no path better than the plan,
so it is dropped; the optimal integer path and thus the bound are unchanged.

Size
----
The model has up to ``n (n + 1) / 2`` arcs, twice as many enforced constraints and
O(n^3) terms in the cuts: it is an exact, independent reference for small and medium ``n``
(on a 2-core machine: n <= 40 proved optimal in about a second, n = 60 in seconds), not
a production solver; :func:`fusionopt.solvers.dp.dp` solves the same problem in O(n) or
O(n^2). For a few hundred tensors CP-SAT's presolve alone can outlast the time limit;
the result is then the hint (or a reference plan) with status ``TIME_LIMIT``.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from fusionopt.model.fusion import backward_arrays, fusion_iteration_time
from fusionopt.model.fusion_dp import _check_caps
from fusionopt.model.plan import Plan
from fusionopt.model.problem import Problem
from fusionopt.model.profile import Profile
from fusionopt.solvers.result import Result, Status, finish

# Relative precision of the automatic time quantum: (n + 1) q <= QUANTUM_PRECISION * E_ub.
QUANTUM_PRECISION = 1e-7
# The quantum when every plan ends at time 0 (no compute, free communication): any q works.
_SMALLEST_QUANTUM = 2.0 ** -100
# CP-SAT works in int64, but its propagators and LP are safest well below that.
MAX_INTEGER_TIME = 2 ** 50
HINT_BASELINES = ("wfbp", "single", "ddp", "horovod", "threshold")


def cpsat(
    problem: Problem,
    *,
    time_limit: float = 10.0,
    workers: int = 2,
    hint: str | Plan | None = "best-baseline",
    time_quantum: float | None = None,
    max_message_bytes: float | None = None,
    max_messages: int | None = None,
    random_seed: int = 0,
) -> Result:
    """The optimal fusion plan by the CP-SAT arc (shortest-path) model of the module docstring.

    Exact up to ``stats["rounding_bound"] = (n + 1) q`` seconds, where ``q`` is the time
    quantum; ``OPTIMAL`` is reported only when the re-simulated ``T`` is within that of a
    proven lower bound. Valid for both sync modes (FIFO fusion plans do not overlap the
    forward). The model has ``n (n + 1) / 2`` arcs: an exact reference for small and medium
    ``n``, not a production solver (use ``method="dp"``).

    Parameters
    ----------
    time_limit : float
        Seconds CP-SAT may search (positive, finite). Building the model and solving the
        hint are not counted.
    workers : int
        CP-SAT search workers (threads), ``>= 1``. With one worker and a search that ends
        before ``time_limit``, runs are reproducible; parallel workers may find different
        optimal plans of the same ``T``.
    hint : str, Plan or None
        A first solution for CP-SAT: ``"best-baseline"`` (the fastest of ``wfbp``,
        ``single``, ``ddp``, ``horovod`` and ``threshold`` that respects the caps), the name
        of another method (solved with the caps when it takes them), a fusion ``Plan`` of
        this profile, or ``None``. A hint that respects the caps is a feasible solution from
        the start, and the result is never slower than it; one that breaks them is not used
        (``stats["hint_used"]`` is false).
    time_quantum : float, optional
        Seconds per integer time step ``q``; default automatic (see the module docstring).
    max_message_bytes : float, optional
        Largest message in bytes; a tensor larger than it makes the problem infeasible
        (``ValueError``), as for :func:`fusionopt.solvers.dp.dp`.
    max_messages : int, optional
        Most messages allowed.
    random_seed : int
        CP-SAT's random seed.

    Returns
    -------
    Result
        The plan re-simulated; ``lower_bound`` is the best of CP-SAT's bound and the model's
        bounds. ``status`` is ``OPTIMAL`` when ``iteration_time`` meets it within the
        rounding bound (always so when CP-SAT proves its optimum), else ``TIME_LIMIT``
        (the time limit stopped CP-SAT), else ``FEASIBLE``. ``stats``:

        * ``time_quantum`` and ``rounding_bound``: ``q`` and ``(n + 1) q``, seconds;
        * ``cpsat_status``: CP-SAT's status name;
        * ``objective`` and ``bound``: the ``E`` of CP-SAT's solution in the rounded model
          and CP-SAT's lower bound on it, seconds (``None`` without a solution);
        * ``iteration_time_bound``: the lower bound on ``T`` CP-SAT proved, seconds;
        * ``arcs``: arcs in the model; ``wall_time``: CP-SAT's seconds;
        * ``hint``, ``hint_used``: what was hinted and whether it was used;
        * ``plan_source``: ``"cpsat"``, ``"hint"`` or ``"reference"`` (the caps-feasible
          plan used when there is neither a solution nor a hint).

    Raises
    ------
    ValueError
        For a bad option or hint, or caps no fusion plan satisfies.
    ImportError
        When OR-Tools is not installed.

    Examples
    --------
    MODEL.md section 5, ``alpha = 3 ms``: ``{t3}, {t2, t1}`` at 17 ms.

    >>> from fusionopt.model import AlphaBeta, Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> result = cpsat(Problem(profile, AlphaBeta(3e-3, 1e-9)), workers=1)
    >>> result.plan.groups(), round(result.iteration_time * 1e3, 6), str(result.status)
    ([[2], [1, 0]], 17.0, 'OPTIMAL')
    >>> result.stats["cpsat_status"], result.stats["rounding_bound"] < 1e-9
    ('OPTIMAL', True)
    >>> cpsat(Problem(profile, AlphaBeta(3e-3, 1e-9)), max_messages=1, hint=None).plan.groups()
    [[2, 1, 0]]
    """
    started = time.perf_counter()
    problem.require_plain("cpsat (this version)")
    time_limit = _positive_seconds("time_limit", time_limit)
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if time_quantum is not None:
        time_quantum = _positive_seconds("time_quantum", time_quantum)
    if (isinstance(random_seed, bool) or not isinstance(random_seed, (int, np.integer))
            or not -2**31 <= random_seed < 2**31):
        raise ValueError(f"random_seed must be a 32-bit integer, got {random_seed!r}")
    cap, limit = _check_caps(problem, max_message_bytes, max_messages)
    try:
        from ortools.sat.python import cp_model
    except ImportError as exc:
        raise ImportError("method='cpsat' needs OR-Tools: pip install ortools") from exc

    profile = problem.profile
    n = profile.n
    hint_plan, hint_label = _hint_plan(problem, hint, cap, limit, max_message_bytes, max_messages)
    hint_used = hint_plan is not None and _respects_caps(hint_plan, cap, limit)
    if hint_plan is not None and not hint_used:
        hint_label += " (not used: it breaks the caps)"
    reference = Plan.from_cuts(profile, _reference_cuts(problem, cap, limit))
    # The plan that sets the quantum and the horizon: a feasible one, so the model is too.
    anchor = hint_plan if hint_used else reference

    rho, prefix = backward_arrays(problem)
    ready = np.concatenate(([0.0], rho))                # ready[j] = rho_j, node j = 1..n
    tails, heads = np.triu_indices(n + 1, k=1)          # every arc (k, j), k < j
    sizes = prefix[heads] - prefix[tails]
    durations = np.asarray(problem.cost(sizes), dtype=np.float64)
    anchor_path = _path(anchor, profile)
    anchor_arcs = _arc_positions(anchor_path, n)
    if time_quantum is None:
        anchor_end = _path_end(anchor_path, ready, durations[anchor_arcs])
        time_quantum = _automatic_quantum(anchor_end, n)
    q = time_quantum
    ready_q = np.floor(ready / q)
    durations_q = np.floor(durations / q)
    horizon = _path_end(anchor_path, ready_q, durations_q[anchor_arcs])
    if not horizon < MAX_INTEGER_TIME:
        raise ValueError(
            f"time_quantum = {q!r} s is too small: the {hint_label if hint_used else 'reference'} "
            f"plan ends after {horizon:.3g} steps, more than 2^50"
        )
    keep = (sizes <= cap) & (ready_q[heads] + durations_q <= horizon)
    keep[anchor_arcs] = True                            # holds already; float-proof
    arc_tails = tails[keep].tolist()
    arc_heads = heads[keep].tolist()
    arc_durations = durations_q[keep].astype(np.int64).tolist()
    horizon = int(horizon)
    ready_int = ready_q.astype(np.int64).tolist()

    model = cp_model.CpModel()
    ends = [model.new_constant(0)]
    ends += [model.new_int_var(0, horizon, f"e{j}") for j in range(1, n + 1)]
    arcs = [model.new_bool_var(f"x{k}_{j}") for k, j in zip(arc_tails, arc_heads)]
    leaving: list[list[Any]] = [[] for _ in range(n + 1)]
    entering: list[list[Any]] = [[] for _ in range(n + 1)]
    for x, k, j, d in zip(arcs, arc_tails, arc_heads, arc_durations):
        leaving[k].append(x)
        entering[j].append(x)
        if k > 0:                                       # e_0 = 0 <= rho_j: implied below
            model.add(ends[j] >= ends[k] + d).only_enforce_if(x)
        model.add(ends[j] >= ready_int[j] + d).only_enforce_if(x)
    model.add(sum(leaving[0]) == 1)
    model.add(sum(entering[n]) == 1)
    for m in range(1, n):
        model.add(sum(entering[m]) == sum(leaving[m]))
    if limit is not None:
        model.add(sum(arcs) <= limit)
    # Valid inequalities, redundant for integer solutions: the message holding position p
    # is ready no earlier than rho_p, and it and every later message (the arcs entering
    # nodes >= p) run after that. Enforced constraints enter the LP relaxation only
    # through big-M terms; these cuts give it the closed form of MODEL.md section 7.
    by_head = sorted(range(len(arcs)), key=lambda a: -arc_heads[a])
    later_arcs: list[Any] = []
    later_durations: list[int] = []
    taken = 0
    for p in range(n, 0, -1):
        while taken < len(by_head) and arc_heads[by_head[taken]] >= p:
            later_arcs.append(arcs[by_head[taken]])
            later_durations.append(arc_durations[by_head[taken]])
            taken += 1
        if p == 1 or ready_int[p - 1] < ready_int[p]:   # else the cut at p - 1 dominates it
            model.add(ends[n] >= ready_int[p] + cp_model.LinearExpr.weighted_sum(later_arcs, later_durations))
    model.minimize(ends[n])
    if hint_used:
        chosen = set(zip(anchor_path[:-1], anchor_path[1:]))
        for x, k, j in zip(arcs, arc_tails, arc_heads):
            model.add_hint(x, (k, j) in chosen)
        hinted_ends = _node_ends(anchor_path, ready_int, durations_q[anchor_arcs].astype(np.int64).tolist())
        for j in range(1, n + 1):
            model.add_hint(ends[j], hinted_ends.get(j, 0))

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit
    solver.parameters.num_workers = int(workers)
    solver.parameters.random_seed = int(random_seed)
    # Presolve probing derives millions of clauses from the arc model's implications and
    # can use the whole time limit before the search starts (n >= 60); without it CP-SAT
    # proves optimality sooner on every instance we tried.
    solver.parameters.cp_model_probing_level = 0
    outcome = solver.solve(model)
    status_name = solver.status_name(outcome)
    if outcome == cp_model.MODEL_INVALID:
        raise RuntimeError(f"cpsat: CP-SAT rejected the model: {model.validate()}")
    if outcome == cp_model.INFEASIBLE:
        raise ValueError(
            f"infeasible: no fusion plan meets max_message_bytes = {max_message_bytes!r} "
            f"and max_messages = {max_messages!r}"
        )
    found = outcome in (cp_model.OPTIMAL, cp_model.FEASIBLE)
    objective = bound = time_bound = None
    candidates: list[tuple[str, Plan]] = []
    if found:
        objective = solver.objective_value * q
        successor = {k: j for x, k, j in zip(arcs, arc_tails, arc_heads) if solver.boolean_value(x)}
        candidates.append(("cpsat", _plan_of_successors(profile, successor)))
        # Out of this model's own bound only when a solution was found: then CP-SAT's
        # response carries a proven bound on the objective.
        raw_bound = solver.best_objective_bound
        if math.isfinite(raw_bound):
            bound = max(0.0, raw_bound) * q
            time_bound = max(profile.B, bound) + profile.U + profile.F
    if hint_used:
        candidates.append(("hint", hint_plan))
    if not candidates:
        candidates.append(("reference", reference))
    # CP-SAT ranks plans by rounded times; the simulator has the last word (ties: CP-SAT).
    source, plan = min(candidates, key=lambda c: fusion_iteration_time(problem, c[1].cuts(profile)))
    stats = {
        "time_quantum": q,
        "rounding_bound": (n + 1) * q,
        "cpsat_status": status_name,
        "objective": objective,
        "bound": bound,
        "iteration_time_bound": time_bound,
        "arcs": len(arcs),
        "wall_time": solver.wall_time,
        "hint": hint_label,
        "hint_used": hint_used,
        "plan_source": source,
    }
    # FEASIBLE or UNKNOWN: the time limit is the only limit set, so it stopped the search.
    status = Status.FEASIBLE if outcome == cp_model.OPTIMAL else Status.TIME_LIMIT
    return finish(problem, plan, "cpsat", started, stats=stats, lower_bound=time_bound,
                  status=status, tolerance=(n + 1) * q)


def _positive_seconds(label: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{label} must be a number of seconds, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{label} must be positive and finite (seconds), got {value!r}")
    return float(value)


def _automatic_quantum(upper_end: float, n: int) -> float:
    """The largest power of two ``q`` with ``(n + 1) q <= QUANTUM_PRECISION * upper_end``."""
    target = QUANTUM_PRECISION * upper_end / (n + 1)
    if not target >= _SMALLEST_QUANTUM:
        return _SMALLEST_QUANTUM
    _, exponent = math.frexp(target)                    # target = m 2^e, 0.5 <= m < 1
    return math.ldexp(1.0, exponent - 1)


def _hint_plan(problem: Problem, hint: Any, cap: float, limit: int | None,
               max_message_bytes: float | None, max_messages: int | None) -> tuple[Plan | None, str]:
    """The hint as a fusion plan of ``problem`` and a label for ``stats``."""
    profile = problem.profile
    if hint is None:
        return None, "none"
    if isinstance(hint, Plan):
        if not hint.is_fusion(profile):
            raise ValueError(
                f"hint plan is not a fusion plan of this profile ({profile.n} tensors): the arc "
                "model needs whole tensors, contiguous in backward order, messages in backward order"
            )
        return hint, "plan"
    if not isinstance(hint, str):
        raise ValueError(
            f"hint must be 'best-baseline', a method name, a Plan or None; got {type(hint).__name__}"
        )
    if hint == "best-baseline":
        from fusionopt.solvers import baselines

        best: tuple[float, str, Plan] | None = None
        for name in HINT_BASELINES:
            result = getattr(baselines, name)(problem)
            if _respects_caps(result.plan, cap, limit) and (best is None or result.iteration_time < best[0]):
                best = (result.iteration_time, name, result.plan)
        if best is None:
            return None, "best-baseline (none respects the caps)"
        return best[2], best[1]
    if hint == "cpsat":
        raise ValueError("hint 'cpsat' would solve the problem with CP-SAT to hint CP-SAT; "
                         "name another method, 'best-baseline', a Plan or None")
    from fusionopt.solvers.registry import get_method, solve

    try:
        method = get_method(hint)
    except ValueError as exc:
        raise ValueError(f"hint {hint!r} is neither 'best-baseline' nor a method: {exc}") from None
    options: dict[str, Any] = {}
    if max_message_bytes is not None and "max_message_bytes" in method.options:
        options["max_message_bytes"] = max_message_bytes
    if max_messages is not None and "max_messages" in method.options:
        options["max_messages"] = max_messages
    plan = solve(problem, hint, **options).plan
    if not plan.is_fusion(profile):
        raise ValueError(f"hint method {hint!r} returned a plan that is not a fusion plan")
    return plan, hint


def _respects_caps(plan: Plan, cap: float, limit: int | None) -> bool:
    if limit is not None and plan.num_messages > limit:
        return False
    return bool(plan.message_bytes.max() <= cap)


def _reference_cuts(problem: Problem, cap: float, limit: int | None) -> np.ndarray:
    """A fusion plan that meets the caps: WFBP, or with a message limit the greedy packing
    of contiguous groups under ``cap`` (the fewest messages, which ``_check_caps`` checked)."""
    n = problem.profile.n
    if limit is None:
        return np.ones(n - 1, dtype=bool)
    sizes = problem.profile.sizes[::-1].tolist()
    cuts = np.zeros(n - 1, dtype=bool)
    current = 0
    for j, s in enumerate(sizes):
        if j > 0 and current + s > cap:
            cuts[j - 1] = True
            current = 0
        current += s
    return cuts


def _path(plan: Plan, profile: Profile) -> list[int]:
    """Nodes ``0, ..., n`` visited by a fusion plan (the last position of each message)."""
    cuts = plan.cuts(profile)
    return [0] + (np.flatnonzero(cuts) + 1).tolist() + [profile.n]


def _arc_positions(path: list[int], n: int) -> np.ndarray:
    """Indices into the row-major ``triu_indices(n + 1, 1)`` arc list of a path's arcs."""
    k = np.asarray(path[:-1], dtype=np.int64)
    j = np.asarray(path[1:], dtype=np.int64)
    return k * n - k * (k - 1) // 2 + (j - k - 1)


def _path_end(path: list[int], ready: np.ndarray, durations: np.ndarray) -> float:
    end = 0.0
    for j, d in zip(path[1:], durations.tolist()):
        end = max(end, float(ready[j])) + d
    return end


def _node_ends(path: list[int], ready: list[int], durations: list[int]) -> dict[int, int]:
    end, ends = 0, {}
    for j, d in zip(path[1:], durations):
        end = max(end, ready[j]) + d
        ends[j] = end
    return ends


def _plan_of_successors(profile: Profile, successor: dict[int, int]) -> Plan:
    cuts = np.zeros(profile.n - 1, dtype=bool)
    node = successor[0]
    while node != profile.n:
        cuts[node - 1] = True
        node = successor[node]
    return Plan.from_cuts(profile, cuts)
