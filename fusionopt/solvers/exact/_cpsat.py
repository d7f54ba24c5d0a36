"""``method="cpsat"``: the fusion problem as a shortest-path model solved by OR-Tools CP-SAT.

The formulation, its integer time and rounding bound, and the model's size are derived in
docs/methods.md, section cpsat; :func:`cpsat` states what it returns.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from fusionopt.model._fusion import arc_times, backward_arrays, fusion_message_times, time_bound_after_channel
from fusionopt.model._fusion_eval import fusion_iteration_time
from fusionopt.model._fusion_dp import check_caps
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._profile import Profile
from fusionopt.model._simulator import simulate
from fusionopt.solvers._result import Outcome, Result, Status
from fusionopt.solvers.exact._cpsat_partition import DEFAULT_MAX_UNITS
from fusionopt.solvers.exact._cpsat_arcs import (MAX_INTEGER_TIME, add_path_constraints, arc_positions,
                                                  automatic_quantum, plan_path, positive_seconds, reference_cuts)
from fusionopt.solvers.exact._cpsat_search import (check_deterministic_time, raise_if_interrupted, run_search,
                                                    set_search)
from fusionopt.solvers._catalogue import deadline as solve_deadline, method
import fusionopt.solvers._warm as warm

HINT_BASELINES = ("wfbp", "single", "ddp", "horovod", "threshold")


@method("cpsat", family="exact", summary="exact: OR-Tools CP-SAT model, anytime", in_default_comparison=False)
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
    unit_parameters: int | None = None,
    max_units: int | None = None,
    deterministic_time: float | None = None,
) -> Result:
    """The optimal fusion plan by the CP-SAT arc (shortest-path) model of docs/methods.md, section cpsat.

    Exact up to ``stats["rounding_bound"]`` seconds: ``(n + 1) q``, where ``q`` is the time
    quantum, for the plain model; ``(M + 1) q`` with a copy cost and ``(M^2 + M + 2) / 2 * q``
    with contention, ``2M q`` with ``comm_contention`` and ``(M^2 + 3M) / 2 * q`` with both,
    ``M`` the most messages allowed (docs/methods.md, section cpsat). ``OPTIMAL`` is
    reported only when the re-simulated ``T`` is within that of a proven lower bound. Valid
    for both sync modes where a fusion plan's messages cannot overlap the forward
    (:func:`~fusionopt.model.layerwise_slack` 0; with a positive slack CP-SAT minimises the
    last message's end, which then no longer decides ``T``, and claims no optimum), with the extensions
    ``copy_cost`` (either ``copy_on``), ``message_compute``, ``contention`` and ``comm_contention`` on one channel,
    and with ``channels > 1`` (and copy cost, no contention) by the relaxation and cuts of
    :mod:`fusionopt.solvers.exact._cpsat_channels`, exact up to ``rounding_bound = q``. The model has
    ``n (n + 1) / 2`` arcs: an exact reference for small and medium ``n``, not a production
    solver (use ``method="dp"`` for the plain model).

    Parameters
    ----------
    time_limit : float
        Seconds for the whole solve from its start (positive, finite): building the model
        counts, and CP-SAT searches for what is left. A model not built in time is not
        searched: the result is the reference (or hint) plan with status ``TIME_LIMIT`` and
        ``stats["cpsat_status"] == "NOT_BUILT"``. Solving the hint is not counted.
    workers : int
        CP-SAT search workers (threads), ``>= 1``. With one worker and a search that ends
        before ``time_limit``, runs are reproducible; parallel workers may find different
        optimal plans of the same ``T``.
    hint : str, Plan or None
        A first solution for CP-SAT: ``"best-baseline"`` (the fastest of ``wfbp``,
        ``single``, ``ddp``, ``horovod`` and ``threshold`` that respects the caps, judged by
        :func:`simulate` on ``problem``), the name of another method (solved with the caps
        when it takes them; a method of the plain model only, such as ``"dp"``, solves the
        problem without its extensions), a fusion ``Plan`` of this profile, or ``None``. A
        hint that respects the caps is a feasible solution from the start, and the result
        is never slower than it; one that breaks them is not used (``stats["hint_used"]``
        is false).
    time_quantum : float, optional
        Seconds per integer time step ``q``; default automatic (docs/methods.md, section cpsat).
    max_message_bytes : float, optional
        Largest message in bytes; a tensor larger than it makes the problem infeasible
        (``ValueError``), as for :func:`fusionopt.solvers.exact.dp`.
    max_messages : int, optional
        Most messages allowed.
    random_seed : int
        CP-SAT's random seed.
    deterministic_time : float, optional
        A limit on CP-SAT's work, in its deterministic time units (close to seconds on a
        typical core), beside ``time_limit``: a seeded search stopped by it stops at the same
        point on every machine, with several workers too (they are then interleaved; see
        :mod:`fusionopt.solvers.exact._cpsat_search`, which names the one exception seen: the
        several-channel rounds with two workers; one worker reproduces them). Use it, with a ``time_limit`` far out of the
        way, for results that must reproduce exactly; ``stats["deterministic_time"]`` is the
        work spent.
    unit_parameters : int, optional
        Optimise over **partition plans** instead (:mod:`fusionopt.solvers.exact._cpsat_partition`):
        tensors cut into units of this many parameters, messages of consecutive units in any
        order; the exact reference for layerwise sync on small instances. Plain model only;
        ``hint`` must then be a plan on the unit grid (fusion plans are).
    max_units : int, optional
        Largest number of units the partition model accepts (default 40); only with
        ``unit_parameters``.

    Returns
    -------
    Result
        The plan re-simulated; ``lower_bound`` is the best of CP-SAT's bound and the model's
        bounds. ``status`` is ``OPTIMAL`` when ``iteration_time`` meets it within the
        rounding bound (always so when CP-SAT proves its optimum), else ``TIME_LIMIT``
        (the time limit stopped CP-SAT), else ``FEASIBLE``. ``stats``:

        * ``time_quantum`` and ``rounding_bound``: ``q`` and the bound above, seconds;
        * ``cpsat_status``: CP-SAT's status name;
        * ``objective`` and ``bound``: the ``E`` of CP-SAT's solution in the rounded model
          and CP-SAT's lower bound on it, seconds (``None`` without a solution);
        * ``iteration_time_bound``: the lower bound on ``T`` CP-SAT proved, seconds;
        * ``arcs``: arcs in the model; ``wall_time``: CP-SAT's seconds;
        * ``hint``, ``hint_used``: what was hinted and whether it was used;
        * ``plan_source``: ``"cpsat"``, ``"hint"`` or ``"reference"`` (the caps-feasible
          plan used when there is neither a solution nor a hint);
        * ``extensions``: ``problem.extensions``.

        With several channels, also ``rounds`` (CP-SAT solves) and ``plans_simulated``;
        ``objective`` is then the relaxation's value of its last solution.

        With an extension on, the model's own bounds include the plain optimum
        (:func:`~fusionopt.model.fusion_bound`), which copy cost and contention only
        exceed: ``status`` comes from CP-SAT's bound unless that one is tight.

    Raises
    ------
    ValueError
        For a bad option or hint, caps no fusion plan satisfies, or ``channels > 1`` with
        ``contention > 1`` or ``comm_contention > 1``.
    ImportError
        When OR-Tools is not installed.

    Examples
    --------
    MODEL.md section 5, ``alpha = 3 ms``: ``{t3}, {t2, t1}`` at 17 ms.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> result = cpsat(Problem(profile, AlphaBeta(3e-3, 1e-9)), workers=1)
    >>> result.plan.groups(), round(result.iteration_time * 1e3, 6), str(result.status)
    ([[2], [1, 0]], 17.0, 'OPTIMAL')
    >>> result.stats["cpsat_status"], result.stats["rounding_bound"] < 1e-9
    ('OPTIMAL', True)
    >>> cpsat(Problem(profile, AlphaBeta(3e-3, 1e-9)), max_messages=1, hint=None).plan.groups()
    [[2, 1, 0]]

    ``alpha = 1 ms`` with contention 2 (compute at half speed while the channel is busy):
    WFBP, optimal without contention, takes 16.5 ms; ``{t3, t2}, {t1}`` takes 16 ms.

    >>> slowed = cpsat(Problem(profile, AlphaBeta(1e-3, 1e-9), contention=2.0), workers=1)
    >>> slowed.plan.groups(), round(slowed.iteration_time * 1e3, 6), slowed.stats["cpsat_status"]
    ([[2, 1], [0]], 16.0, 'OPTIMAL')

    Two channels sharing the bandwidth, ``alpha = 3 ms``: latencies overlap, and WFBP and
    ``{t3, t2}, {t1}`` both take 16 ms, the optimum (one channel: 17 ms at best).

    >>> shared = cpsat(Problem(profile, AlphaBeta(3e-3, 1e-9), channels=2), workers=1)
    >>> round(shared.iteration_time * 1e3, 6), str(shared.status)
    (16.0, 'OPTIMAL')
    """
    if problem.channels > 1 and (problem.contention > 1.0 or problem.comm_contention > 1.0):
        name = "contention" if problem.contention > 1.0 else "comm_contention"
        raise ValueError(
            f"cpsat does not model {name} = {getattr(problem, name)!r} with channels = "
            f"{problem.channels}: use method='brute' (n <= 14) or a metaheuristic ('gradssa')"
        )
    deterministic_time = check_deterministic_time(deterministic_time)
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if time_quantum is not None:
        time_quantum = positive_seconds("time_quantum", time_quantum)
    if (isinstance(random_seed, bool) or not isinstance(random_seed, (int, np.integer))
            or not -2**31 <= random_seed < 2**31):
        raise ValueError(f"random_seed must be a 32-bit integer, got {random_seed!r}")
    if max_units is not None and unit_parameters is None:
        raise ValueError("max_units bounds the units of unit_parameters: give unit_parameters, or leave it out")
    if max_units is None:
        max_units = DEFAULT_MAX_UNITS
    if isinstance(max_units, bool) or not isinstance(max_units, (int, np.integer)) or max_units < 1:
        raise ValueError(f"max_units must be an integer >= 1, got {max_units!r}")
    try:
        from ortools.sat.python import cp_model
    except ImportError as exc:
        raise ImportError("method='cpsat' needs OR-Tools: pip install ortools") from exc
    if unit_parameters is not None:
        from fusionopt.solvers.exact._cpsat_partition import cpsat_partition

        return cpsat_partition(problem, unit_parameters=unit_parameters,
                               workers=int(workers), hint=hint,
                               time_quantum=time_quantum, max_message_bytes=max_message_bytes,
                               max_messages=max_messages, random_seed=int(random_seed),
                               max_units=max_units, deterministic_time=deterministic_time)
    cap, limit = check_caps(problem, max_message_bytes, max_messages)

    profile = problem.profile
    n = profile.n
    extended = bool(problem.extensions)
    hint_plan, hint_label = _hint_plan(problem, hint, cap, limit, max_message_bytes, max_messages)
    hint_used = hint_plan is not None
    reference = Plan.from_cuts(profile, reference_cuts(problem, cap, limit))
    if problem.channels > 1:
        from fusionopt.solvers.exact._cpsat_channels import cpsat_channels

        return cpsat_channels(problem, workers=int(workers),
                              hint_plan=hint_plan, hint_label=hint_label, hint_used=hint_used,
                              reference=reference, cap=cap, limit=limit, time_quantum=time_quantum,
                              random_seed=int(random_seed), deterministic_time=deterministic_time)
    # The plan that sets the quantum and the horizon: a feasible one, so the model is too.
    anchor = hint_plan if hint_used else reference

    rho, prefix = backward_arrays(problem)
    ready = np.concatenate(([0.0], rho))                # ready[j] = rho_j, node j = 1..n
    tails, heads = np.triu_indices(n + 1, k=1)          # every arc (k, j), k < j
    sizes = prefix[heads] - prefix[tails]
    times = arc_times(problem, ready, prefix, tails, heads)
    durations = times["duration"]
    anchor_path = plan_path(anchor, profile)
    anchor_arcs = arc_positions(anchor_path, n)
    factor = rounding_factor(problem, n if limit is None else limit)
    if time_quantum is None:
        if extended:
            anchor_end = float(fusion_message_times(problem, anchor.cuts(profile))[1][-1])
        else:
            anchor_end = _path_end(anchor_path, ready, durations[anchor_arcs])
        # The lags reach (1 - 1/kappa) mu times the backlog: their steps must fit too.
        time_quantum = automatic_quantum(anchor_end * max(1.0, _lag_share(problem)), factor)
    q = time_quantum
    rounding_bound = factor * q
    ready_q = np.floor(ready / q)
    durations_q = np.floor(durations / q)
    if extended:
        constants = integer_arc_times(problem, q, times)
        anchor_values = rounded_path(anchor_path, anchor_arcs, constants)
        # The delay cuts below may exceed the recursion's rounded end (a sum of floors is
        # not the floor of the sum): the horizon admits the anchor under both.
        anchor_cut = max(delay_cut(anchor_path, anchor_arcs, constants, p) for p in range(1, n + 1))
        anchor_values["end"][-1] = max(anchor_values["end"][-1], int(anchor_cut))
        horizon = float(anchor_values["end"][-1])
        earliest_end_q = constants["nominal"] + constants["duration"]
    else:
        horizon = _path_end(anchor_path, ready_q, durations_q[anchor_arcs])
        earliest_end_q = ready_q[heads] + durations_q
    # With comm contention a backlog or a lag may reach past the horizon (docs/methods.md, section cpsat).
    reach = max(1.0, _lag_share(problem)) * (horizon + factor) if problem.comm_contention > 1.0 else horizon
    if not reach < MAX_INTEGER_TIME:
        raise ValueError(
            f"time_quantum = {q!r} s is too small: the {hint_label if hint_used else 'reference'} "
            f"plan ends after {horizon:.3g} steps, and its backlogs and lags may take {reach:.3g}, "
            "more than 2^30 (MAX_INTEGER_TIME)" if reach > horizon else
            f"time_quantum = {q!r} s is too small: the {hint_label if hint_used else 'reference'} "
            f"plan ends after {horizon:.3g} steps, more than 2^30 (MAX_INTEGER_TIME)"
        )
    # Cuts with the least delays replace the plain ones when a delay can be positive.
    delays = extended and (problem.contention > 1.0 or problem.computes_per_message
                           or (problem.copy_on == "compute" and problem.copy_cost > 0))
    keep = (sizes <= cap) & (earliest_end_q <= horizon)
    keep[anchor_arcs] = True                            # holds already; float-proof
    kept = np.flatnonzero(keep)
    arc_tails = tails[keep].tolist()
    arc_heads = heads[keep].tolist()
    arc_durations = durations_q[keep].astype(np.int64).tolist()
    horizon = int(horizon)
    ready_int = ready_q.astype(np.int64).tolist()

    deadline = solve_deadline()

    def unbuilt() -> Result:
        """The time limit passed while the model was being built: the anchor plan, honestly."""
        stats = {"time_quantum": q, "cpsat_status": "NOT_BUILT", "arcs": len(arc_tails), "hint": hint_label,
                 "hint_used": hint_used, "plan_source": "hint" if hint_used else "reference",
                 "model": f"not built within time_limit = {time_limit:g} s ({len(arc_tails)} arcs); "
                          "raise time_limit, or use method='dp'",
                 "extensions": problem.extensions}
        return Outcome(anchor, stats=stats, status=Status.TIME_LIMIT)

    if time.perf_counter() > deadline:
        return unbuilt()
    model = cp_model.CpModel()
    ends = [model.new_constant(0)]
    ends += [model.new_int_var(0, horizon, f"e{j}") for j in range(1, n + 1)]
    arcs = [model.new_bool_var(f"x{k}_{j}") for k, j in zip(arc_tails, arc_heads)]
    leaving: list[list[Any]] = [[] for _ in range(n + 1)]
    entering: list[list[Any]] = [[] for _ in range(n + 1)]
    for x, k, j in zip(arcs, arc_tails, arc_heads):
        leaving[k].append(x)
        entering[j].append(x)
    if extended:
        extended_variables = _add_extended_constraints(model, problem, constants, kept, arcs, arc_tails,
                                                       arc_heads, ends, horizon, factor)
    else:
        extended_variables = {}
        for a, (x, k, j, d) in enumerate(zip(arcs, arc_tails, arc_heads, arc_durations)):
            if k > 0:                                   # e_0 = 0 <= rho_j: implied below
                model.add(ends[j] >= ends[k] + d).only_enforce_if(x)
            model.add(ends[j] >= ready_int[j] + d).only_enforce_if(x)
            if a % 4096 == 0 and time.perf_counter() > deadline:
                return unbuilt()
    add_path_constraints(model, arcs, leaving, entering, limit)
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
        if delays:
            continue                                    # the cuts below are stronger
        if p == 1 or ready_int[p - 1] < ready_int[p]:   # else the cut at p - 1 dominates it
            model.add(ends[n] >= ready_int[p] + cp_model.LinearExpr.weighted_sum(later_arcs, later_durations))
            if time.perf_counter() > deadline:
                return unbuilt()
    if delays:
        # The delay cuts of docs/methods.md, section cpsat: packing on the compute stream and the
        # compute time lost while earlier messages hold the channel.
        before, holding = constants["before"][kept], constants["holding"][kept]
        kept_tails, kept_heads = np.asarray(arc_tails), np.asarray(arc_heads)
        for p in range(1, n + 1):
            if time.perf_counter() > deadline:
                return unbuilt()
            weights = np.where(kept_heads < p, before, np.where(kept_tails < p, holding, arc_durations))
            used = np.flatnonzero(weights > 0).tolist()
            model.add(ends[n] >= cp_model.LinearExpr.weighted_sum(
                [arcs[a] for a in used], [int(weights[a]) for a in used]))
    model.minimize(ends[n])
    if hint_used:
        chosen = set(zip(anchor_path[:-1], anchor_path[1:]))
        for x, k, j in zip(arcs, arc_tails, arc_heads):
            model.add_hint(x, (k, j) in chosen)
        if extended:
            _add_extended_hint(model, extended_variables, anchor_path, anchor_values, n)
        else:
            hinted_ends = _node_ends(anchor_path, ready_int, durations_q[anchor_arcs].astype(np.int64).tolist())
            for j in range(1, n + 1):
                model.add_hint(ends[j], hinted_ends.get(j, 0))

    if time.perf_counter() > deadline:
        return unbuilt()
    solver = cp_model.CpSolver()
    # What is left of the limit once the model is built (the search gets at least 10 ms).
    set_search(solver, seconds=max(deadline - time.perf_counter(), 0.01), workers=workers,
               random_seed=random_seed, deterministic_time=deterministic_time)
    # Presolve probing derives millions of clauses from the arc model's implications and
    # can use the whole time limit before the search starts (n >= 60); without it CP-SAT
    # proves optimality sooner on every instance we tried.
    solver.parameters.cp_model_probing_level = 0
    outcome, interrupted = run_search(solver, model)
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
            time_bound = time_bound_after_channel(problem, bound)
    if hint_used:
        candidates.append(("hint", hint_plan))
    if not candidates:
        candidates.append(("reference", reference))
    # CP-SAT ranks plans by rounded times; the simulator has the last word (ties: CP-SAT).
    source, plan = min(candidates, key=lambda c: _iteration_time(problem, c[1]))
    stats = {
        "time_quantum": q,
        "rounding_bound": rounding_bound,
        "cpsat_status": status_name,
        "objective": objective,
        "bound": bound,
        "iteration_time_bound": time_bound,
        "arcs": len(arcs),
        "wall_time": solver.wall_time,
        "deterministic_time": solver.deterministic_time,
        "hint": hint_label,
        "hint_used": hint_used,
        "plan_source": source,
        "extensions": problem.extensions,
    }
    # FEASIBLE or UNKNOWN: a limit (time or work) stopped the search.
    status = Status.INTERRUPTED if interrupted else (
        Status.FEASIBLE if outcome == cp_model.OPTIMAL else Status.TIME_LIMIT)
    return raise_if_interrupted(Outcome(plan, stats=stats, lower_bound=time_bound,
                                        status=status, tolerance=rounding_bound))


def rounding_factor(problem: Problem, messages: int) -> int:
    """``rounding_bound / q`` (docs/methods.md, section cpsat) for plans of at most ``messages`` messages."""
    if not problem.extensions:
        return problem.profile.n + 1
    if problem.comm_contention > 1.0:
        return (messages * messages + 3 * messages) // 2 if problem.contention > 1.0 else 2 * messages
    if problem.contention > 1.0:
        return (messages * messages + messages + 2) // 2
    return messages + 1


def _lag_share(problem: Problem) -> float:
    """``(1 - 1/kappa) mu``: the compute delay per second of backlog (docs/methods.md, section cpsat)."""
    return (1.0 - 1.0 / problem.contention) * problem.comm_contention


def integer_arc_times(problem: Problem, q: float, times: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The extended model's per-arc constants in whole quanta (as floats), each rounded
    towards the faster plan (docs/methods.md, section cpsat)."""
    kappa, mu = problem.contention, problem.comm_contention
    share = _lag_share(problem)                         # of backlog lost by the compute
    durations, work, packing = times["duration"], times["work"], times["packing"]
    constants = {
        "duration": np.floor(durations / q),
        "work": np.floor(work / q),
        "nominal": np.floor(times["nominal"] / q),
        # The delay cuts' weights: a message before the one holding p, and that one.
        "before": np.floor((packing + min(share, 1.0) * durations) / q),
        "holding": np.floor((times["nominal"] + durations) / q),
    }
    if kappa > 1.0:
        constants["slow_work"] = np.floor(kappa * work / q)
        constants["lag_start"] = np.floor(share * durations / q)
        constants["lag_carry"] = np.floor((share * durations - (kappa - 1.0) * work) / q)
    if mu > 1.0:
        constants["backlog_carry"] = np.floor((durations - kappa * work / mu) / q)
    # Floats holding whole numbers: an arc the horizon prunes may not fit in int64 (a tiny
    # automatic q); kept arcs end by the horizon, and int() converts them exactly.
    return constants


def rounded_path(path: list[int], arc_index: np.ndarray, constants: dict[str, np.ndarray]) -> dict[str, list]:
    """The least integer values the extended model allows along ``path`` (its recursion in
    whole quanta): ``ready``, ``lag``, ``backlog`` and ``end`` per message and ``slow``, the
    branch of each message after the first (``None`` without contention). With comm
    contention ``end`` is ``ready + backlog``, the end of the last message only."""
    contention = "slow_work" in constants
    two_way = "backlog_carry" in constants
    values: dict[str, list] = {"ready": [], "lag": [], "backlog": [], "end": [], "slow": []}
    for m, a in enumerate(arc_index.tolist()):
        nominal = int(constants["nominal"][a])
        duration = int(constants["duration"][a])
        lag = int(constants["lag_start"][a]) if contention else 0
        backlog = duration
        slow = None
        if m == 0:
            ready = nominal
            end = ready + duration
        else:
            previous_ready, previous_lag = values["ready"][-1], values["lag"][-1]
            fast = previous_ready + int(constants["work"][a]) + (previous_lag if contention else 0)
            if contention:
                slowed = previous_ready + int(constants["slow_work"][a])
                slow = slowed <= fast
                fast = min(slowed, fast)
                lag = max(lag, previous_lag + int(constants["lag_carry"][a]))
            ready = max(nominal, fast)
            end = max(ready, values["end"][-1]) + duration
            if two_way:
                backlog = max(duration, values["backlog"][-1] + int(constants["backlog_carry"][a]))
        if two_way:
            end = ready + backlog
        values["ready"].append(ready)
        values["lag"].append(lag)
        values["backlog"].append(backlog)
        values["end"].append(end)
        values["slow"].append(slow)
    return values


def delay_cut(path: list[int], arc_index: np.ndarray, constants: dict[str, np.ndarray], p: int) -> float:
    """The delay cut at position ``p`` (docs/methods.md, section cpsat) for one path, in quanta."""
    value = 0.0
    for k, j, a in zip(path[:-1], path[1:], arc_index.tolist()):
        value += constants["before" if j < p else "holding" if k < p else "duration"][a]
    return value


def _add_extended_constraints(model: Any, problem: Problem, constants: dict[str, np.ndarray],
                              kept: np.ndarray, arcs: list[Any], arc_tails: list[int],
                              arc_heads: list[int], ends: list[Any], horizon: int, factor: int) -> dict[str, Any]:
    """Copy cost and contention: the variables ``R_j``, ``L_j``, ``G_j`` and ``y_kj`` and
    the constraints of docs/methods.md, section cpsat, each enforced by its arc's ``x_kj``."""
    n = problem.profile.n
    contention = problem.contention > 1.0
    two_way = problem.comm_contention > 1.0
    # A backlog and a lag of a plan worth finding stay below its true end, within the
    # rounding bound of the horizon; a lag is (1 - 1/kappa) mu times a backlog.
    reach = horizon + factor if two_way else horizon
    lag_reach = int(math.ceil(max(1.0, _lag_share(problem)) * reach)) if two_way else horizon
    readies = [None] + [model.new_int_var(0, horizon, f"r{j}") for j in range(1, n + 1)]
    lags = [None] + [model.new_int_var(0, lag_reach, f"l{j}") for j in range(1, n + 1)] if contention else []
    backlogs = [None] + [model.new_int_var(0, reach, f"g{j}") for j in range(1, n + 1)] if two_way else []
    if two_way:
        model.add(ends[n] >= readies[n] + backlogs[n])  # from R_M the channel runs at full speed
    slow: dict[tuple[int, int], Any] = {}
    for x, a, k, j in zip(arcs, kept.tolist(), arc_tails, arc_heads):
        d = int(constants["duration"][a])
        model.add(readies[j] >= int(constants["nominal"][a])).only_enforce_if(x)
        if two_way:
            model.add(backlogs[j] >= d).only_enforce_if(x)
        else:
            model.add(ends[j] >= readies[j] + d).only_enforce_if(x)
        if contention and constants["lag_start"][a] > 0:
            model.add(lags[j] >= int(constants["lag_start"][a])).only_enforce_if(x)
        if k == 0:
            continue                                    # R_j >= Delta_0j = nominal: above
        if two_way:
            model.add(backlogs[j] >= backlogs[k] + int(constants["backlog_carry"][a])).only_enforce_if(x)
        else:
            model.add(ends[j] >= ends[k] + d).only_enforce_if(x)
        if not contention:
            model.add(readies[j] >= readies[k] + int(constants["work"][a])).only_enforce_if(x)
            continue
        y = model.new_bool_var(f"y{k}_{j}")
        model.add_implication(y, x)                     # no choice off the path
        slow[(k, j)] = y
        model.add(readies[j] >= readies[k] + int(constants["slow_work"][a])).only_enforce_if([x, y])
        model.add(readies[j] >= readies[k] + lags[k] + int(constants["work"][a])).only_enforce_if([x, ~y])
        model.add(lags[j] >= lags[k] + int(constants["lag_carry"][a])).only_enforce_if(x)
    return {"ready": readies, "lag": lags, "backlog": backlogs, "slow": slow, "end": ends}


def _add_extended_hint(model: Any, variables: dict[str, Any], path: list[int],
                       values: dict[str, list], n: int) -> None:
    on_path = {j: m for m, j in enumerate(path[1:])}
    two_way = bool(variables["backlog"])
    for j in range(1, n + 1):
        m = on_path.get(j)
        # With comm contention only the last end is constrained (by R_n + G_n).
        model.add_hint(variables["end"][j], 0 if m is None or (two_way and j < n) else values["end"][m])
        model.add_hint(variables["ready"][j], 0 if m is None else values["ready"][m])
        if variables["lag"]:
            model.add_hint(variables["lag"][j], 0 if m is None else values["lag"][m])
        if two_way:
            model.add_hint(variables["backlog"][j], 0 if m is None else values["backlog"][m])
    chosen = {(k, j): m + 1 for m, (k, j) in enumerate(zip(path[1:-1], path[2:]))}
    for arc, y in variables["slow"].items():
        model.add_hint(y, bool(values["slow"][chosen[arc]]) if arc in chosen else False)


def _iteration_time(problem: Problem, plan: Plan) -> float:
    if problem.extensions:
        return simulate(problem, plan).iteration_time
    return fusion_iteration_time(problem, plan.cuts(problem.profile))


def _hint_plan(problem: Problem, hint: Any, cap: float, limit: int | None,
               max_message_bytes: float | None, max_messages: int | None) -> tuple[Plan | None, str]:
    """The hint as a fusion plan of ``problem`` and a label for ``stats``
    (:func:`fusionopt.solvers._warm.hint_plan`): None where it breaks the caps."""
    profile = problem.profile

    def check(plan: Plan) -> None:
        if not plan.is_fusion(profile):
            raise ValueError(f"not a fusion plan of this profile ({profile.n} tensors): the arc model needs whole "
                             "tensors, contiguous in backward order, messages in backward order")

    return warm.hint_plan(problem, hint, method="cpsat", plan_type=Plan, best_of=HINT_BASELINES, check=check,
                          fits=lambda plan: _respects_caps(plan, cap, limit), adapt=Plan.without_release,
                          options={"max_message_bytes": max_message_bytes, "max_messages": max_messages})


def _respects_caps(plan: Plan, cap: float, limit: int | None) -> bool:
    if limit is not None and plan.num_messages > limit:
        return False
    return bool(plan.message_bytes.max() <= cap)


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
