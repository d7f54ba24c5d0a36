"""CP-SAT for partition plans on unit-granular instances: the exact reference for layerwise sync.

With ``sync="layerwise"`` the forward of tensor ``i`` waits only for tensor ``i``'s own
gradient (MODEL.md section 4), so it pays to cut tensors into blocks and send them out of
backward order (P3, ByteScheduler, US-Byte). This model optimises over such plans on a
grid: every tensor is cut into **units** of ``unit_parameters`` parameters (the last unit
of a tensor may be shorter), the units of all tensors are lined up in forward order, and a
message is any run of consecutive units, within one tensor or across the boundary of
neighbouring tensors (then it fuses the tail of one with the head of the next). The
messages may go in any order. Every US-Byte plan with unit ``S_p``, every fusion plan and
every P3 or ByteScheduler plan whose slices fall on the grid is such a plan.

Formulation
-----------
With ``N`` units, nodes ``0..N`` and a Boolean ``x_ab`` per run of units ``a+1..b`` (an
*interval*), the chosen intervals form a path ``0 -> N`` (the arc model of
:mod:`fusionopt.solvers.exact._cpsat`). Each interval carries an optional CP-SAT interval variable
of length ``c(S_ab)`` that starts no earlier than its ready time ``r_ab`` (the latest ready
time of the tensors it touches), present iff ``x_ab``; one ``NoOverlap`` puts the present
ones on the channel, in any order. Then, enforced by ``x_ab``, ``C_i >= end_ab`` for each
tensor ``i`` the interval touches, and the sync rule of MODEL.md section 4 on the compute
stream: layerwise ``phi_0 >= max(B, C_0) + u_0``, ``phi_i >= max(phi_(i-1) + f_(i-1), C_i)
+ u_i``, ``T >= phi_(n-1) + f_(n-1) + W``; barrier ``T >= max(B, C_i) + U + F + W``. The objective
is ``min T``; ``T >=`` the model's lower bound (the fluid bound with an affine cost) is
added as a redundant constraint. A plan's least ``T`` in the model is its simulated ``T``
(every constraint is a ``max`` or ``+`` of the recursion, relaxed to ``>=``) when its
messages go in the model's order by start.

Integer time: every ready time, duration and compute time is rounded down to whole quanta
``q``, so CP-SAT's bound times ``q`` is a lower bound on the optimal ``T`` over the grid.
A plan's ``T`` is a longest path through at most ``M + 1`` channel terms and ``2 n + 2``
compute terms, each short by less than ``q``: ``rounding_bound = (N + 2 n + 3) q``. The
automatic ``q`` is the largest power of two with ``rounding_bound <= 1e-7`` of the hint's
``T``, but no finer than ``T / 2^16``: NoOverlap proves fine grids slowly, so the rounding
bound may reach ``(N + 2 n + 3) / 2^15`` of ``T`` (about 0.05% for 5 units of 3 tensors).

The model has ``N (N + 1) / 2`` intervals; with ``NoOverlap`` over all of them it proves
small instances (tens of units), not zoo models: ``max_units`` (default 40) guards it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fusionopt.model._bounds import best_bound
from fusionopt.model._plan import Chunk, Message, Plan
from fusionopt.model._problem import Problem
from fusionopt.model._simulator import simulate
from fusionopt.solvers.exact._cpsat_arcs import MAX_INTEGER_TIME, add_path_constraints, automatic_quantum
from fusionopt.solvers.exact._cpsat_search import raise_if_interrupted, run_search, set_search
from fusionopt.solvers._result import Outcome, Status
from fusionopt.solvers._catalogue import seconds_left
import fusionopt.solvers._warm as warm

DEFAULT_MAX_UNITS = 40


def unit_grid(problem: Problem, unit_parameters: Any) -> list[tuple[int, int, int]]:
    """The units ``(tensor, lo, hi)`` of ``unit_parameters`` parameters each, in forward order.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Problem, Profile
    >>> profile = Profile.from_arrays([12, 4], [0.0] * 2, [1e-3] * 2)   # float32: 3 and 1 parameters
    >>> unit_grid(Problem(profile, AlphaBeta(1e-3, 1e-9)), 2)
    [(0, 0, 8), (0, 8, 12), (1, 0, 4)]
    """
    if isinstance(unit_parameters, bool) or not isinstance(unit_parameters, (int, np.integer)) or unit_parameters < 1:
        raise ValueError(f"unit_parameters must be an integer >= 1, got {unit_parameters!r}")
    profile = problem.profile
    unit = int(unit_parameters) * profile.dtype_bytes
    units = []
    for i, size in enumerate(profile.sizes.tolist()):
        for lo in range(0, int(size), unit):
            units.append((i, lo, min(lo + unit, int(size))))
    return units


def cpsat_partition(problem: Problem, *, unit_parameters: int,
                    workers: int, hint: Any, time_quantum: float | None, max_message_bytes: float | None,
                    max_messages: int | None, random_seed: int, max_units: int = DEFAULT_MAX_UNITS,
                    deterministic_time: float | None = None) -> Outcome:
    """``cpsat(problem, unit_parameters=...)``: the optimal plan on the unit grid (module docstring),
    searched until the solve's :func:`~fusionopt.solvers.deadline`."""
    from ortools.sat.python import cp_model

    problem.require_plain("cpsat over partition plans")
    profile = problem.profile
    units = unit_grid(problem, unit_parameters)
    count = len(units)
    if count > max_units:
        raise ValueError(
            f"unit_parameters = {unit_parameters} cuts the {profile.n} tensors into {count} units, more than "
            f"max_units = {max_units}: the partition model has N (N + 1) / 2 intervals; choose a larger unit "
            "or raise max_units"
        )
    cap = math.inf if max_message_bytes is None else float(max_message_bytes)
    if cap < max(hi - lo for _, lo, hi in units):
        raise ValueError(f"infeasible: max_message_bytes = {max_message_bytes!r} is smaller than a unit")
    if max_messages is not None and (isinstance(max_messages, bool) or not isinstance(max_messages, (int, np.integer))
                                     or max_messages < 1):
        raise ValueError(f"max_messages must be an integer >= 1, got {max_messages!r}")

    tensor_of = np.array([u[0] for u in units])
    unit_bytes = np.array([u[2] - u[1] for u in units], dtype=np.float64)
    prefix = np.concatenate(([0.0], np.cumsum(unit_bytes)))
    ready = profile.ready_times
    tails, heads = np.triu_indices(count + 1, k=1)      # interval = units tails..heads-1
    sizes = prefix[heads] - prefix[tails]
    # Units are in forward order, so an interval's latest-ready tensor is its first one.
    releases = ready[tensor_of[tails]]
    durations = np.asarray(problem.cost(sizes), dtype=np.float64)
    keep = sizes <= cap

    hint_plan, hint_label = _grid_hint(problem, hint, units, cap, max_messages)
    upper = simulate(problem, hint_plan).iteration_time if hint_plan is not None else None
    if upper is None:
        upper = simulate(problem, grid_plan(units, [(a, a + 1) for a in range(count)], profile.n)).iteration_time
    factor = count + 2 * profile.n + 3
    q = time_quantum if time_quantum is not None else _partition_quantum(upper, factor)
    horizon = math.floor(upper / q) + 1
    if not horizon < MAX_INTEGER_TIME:
        raise ValueError(f"time_quantum = {q!r} s is too small: the hint takes more than 2^30 (MAX_INTEGER_TIME) steps")

    def quanta(seconds: Any) -> Any:
        return np.floor(np.asarray(seconds, dtype=np.float64) / q).astype(np.int64)

    releases_q, durations_q = quanta(releases), quanta(durations)
    keep &= releases_q + durations_q <= horizon
    hint_intervals = _intervals_of(hint_plan, units) if hint_plan is not None else []
    for a, b in hint_intervals:
        keep[_interval_index(a, b, count)] = True
    kept = np.flatnonzero(keep)

    model = cp_model.CpModel()
    chosen, intervals, starts = [], [], []
    leaving: list[list[Any]] = [[] for _ in range(count + 1)]
    entering: list[list[Any]] = [[] for _ in range(count + 1)]
    reduced = [model.new_int_var(0, horizon, f"C{i}") for i in range(profile.n)]
    for v in kept.tolist():
        a, b = int(tails[v]), int(heads[v])
        x = model.new_bool_var(f"x{a}_{b}")
        start = model.new_int_var(int(releases_q[v]), horizon, f"s{a}_{b}")
        d = int(durations_q[v])
        intervals.append(model.new_optional_fixed_size_interval_var(start, d, x, f"i{a}_{b}"))
        chosen.append(x)
        starts.append(start)
        leaving[a].append(x)
        entering[b].append(x)
        for i in sorted(set(tensor_of[a:b].tolist())):
            model.add(reduced[i] >= start + d).only_enforce_if(x)
    add_path_constraints(model, chosen, leaving, entering, max_messages)
    model.add_no_overlap(intervals)
    total = model.new_int_var(0, horizon, "T")
    update_q, forward_q = quanta(profile.update), quanta(profile.forward)
    backward_q = int(quanta(profile.B))
    if problem.sync == "layerwise":
        phi = [model.new_int_var(0, horizon, f"phi{i}") for i in range(profile.n)]
        model.add(phi[0] >= backward_q + int(update_q[0]))
        for i in range(profile.n):
            model.add(phi[i] >= reduced[i] + int(update_q[i]))
            if i > 0:
                model.add(phi[i] >= phi[i - 1] + int(forward_q[i - 1]) + int(update_q[i]))
        model.add(total >= phi[-1] + int(forward_q[-1]) + int(quanta(profile.W)))   # + the host's share
    else:
        after = int(quanta(profile.U + profile.F + profile.W))
        model.add(total >= backward_q + after)
        for i in range(profile.n):
            model.add(total >= reduced[i] + after)
    model.add(total >= int(quanta(best_bound(problem))))
    model.minimize(total)
    if hint_plan is not None:
        timeline = simulate(problem, hint_plan)
        hinted = {interval: float(s) for interval, s in zip(hint_intervals, timeline.message_start)}
        for v, x, start in zip(kept.tolist(), chosen, starts):
            key = (int(tails[v]), int(heads[v]))
            model.add_hint(x, key in hinted)
            if key in hinted:
                model.add_hint(start, int(math.floor(hinted[key] / q)))

    solver = cp_model.CpSolver()
    set_search(solver, seconds=max(seconds_left(), 0.01), workers=workers, random_seed=random_seed,
               deterministic_time=deterministic_time)
    outcome, interrupted = run_search(solver, model)
    status_name = solver.status_name(outcome)
    if outcome == cp_model.MODEL_INVALID:
        raise RuntimeError(f"cpsat: CP-SAT rejected the partition model: {model.validate()}")
    if outcome == cp_model.INFEASIBLE:
        raise ValueError(f"infeasible: no plan on the unit grid meets max_messages = {max_messages!r} "
                         f"and max_message_bytes = {max_message_bytes!r}")
    candidates: list[tuple[str, Plan]] = []
    bound = objective = None
    if outcome in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        objective = solver.objective_value * q
        picked = sorted(((solver.value(start), int(tails[v]), int(heads[v]))
                         for v, x, start in zip(kept.tolist(), chosen, starts) if solver.boolean_value(x)))
        candidates.append(("cpsat", grid_plan(units, [(a, b) for _, a, b in picked], profile.n)))
        if math.isfinite(solver.best_objective_bound):
            bound = max(0.0, solver.best_objective_bound) * q
    if hint_plan is not None:
        candidates.append(("hint", hint_plan))
    if not candidates:
        candidates.append(("units", grid_plan(units, [(a, a + 1) for a in range(count)], profile.n)))
    source, plan = min(candidates, key=lambda c: simulate(problem, c[1]).iteration_time)
    stats = {
        "unit_parameters": int(unit_parameters),
        "units": count,
        "intervals": len(chosen),
        "time_quantum": q,
        "rounding_bound": factor * q,
        "cpsat_status": status_name,
        "objective": objective,
        "bound": bound,
        "iteration_time_bound": bound,
        "wall_time": solver.wall_time,
        "deterministic_time": solver.deterministic_time,
        "hint": hint_label,
        "hint_used": hint_plan is not None,
        "plan_source": source,
        "extensions": problem.extensions,
    }
    status = Status.INTERRUPTED if interrupted else (
        Status.FEASIBLE if outcome == cp_model.OPTIMAL else Status.TIME_LIMIT)
    return raise_if_interrupted(Outcome(plan, stats=stats, lower_bound=bound, status=status, space="any",
                                        tolerance=factor * q))


def _partition_quantum(upper: float, factor: int) -> float:
    """The automatic quantum of this model: as :func:`~fusionopt.solvers.exact.automatic_quantum`,
    but never finer than ``upper / 2^16``: NoOverlap over fine time grids is slow to prove
    (with ``alpha = 0``, tiny instances whose many plans tie; the hypothesis tests of
    ``tests/solvers/test_cpsat_partition.py`` run into it without this cap)."""
    _, exponent = math.frexp(upper / 2 ** 16)
    return max(automatic_quantum(upper, factor), math.ldexp(1.0, exponent))


def _interval_index(a: int, b: int, count: int) -> int:
    """Index of interval ``(a, b)`` in ``triu_indices(count + 1, 1)``."""
    return a * count - a * (a - 1) // 2 + (b - a - 1)


def grid_plan(units: list[tuple[int, int, int]], intervals: list[tuple[int, int]], n: int) -> Plan:
    """The plan sending the runs of units ``a..b-1`` in the given order."""
    messages = []
    for a, b in intervals:
        chunks: list[Chunk] = []
        for tensor, lo, hi in units[a:b]:
            if chunks and chunks[-1].tensor == tensor and chunks[-1].hi == lo:
                chunks[-1] = Chunk(tensor, chunks[-1].lo, hi)
            else:
                chunks.append(Chunk(tensor, lo, hi))
        messages.append(Message(tuple(chunks)))
    return Plan(tuple(messages))


def _intervals_of(plan: Plan, units: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
    """The unit runs ``(a, b)`` of a plan's messages, in plan order; ``ValueError`` when a
    message is not a run of whole consecutive units."""
    first = {(tensor, lo): k for k, (tensor, lo, _) in enumerate(units)}
    after = {(tensor, hi): k + 1 for k, (tensor, _, hi) in enumerate(units)}
    runs = []
    for m, message in enumerate(plan.messages):
        covered: list[int] = []
        for c in message.chunks:
            a, b = first.get((c.tensor, c.lo)), after.get((c.tensor, c.hi))
            if a is None or b is None:
                raise ValueError(f"message {m} cuts tensor {c.tensor} off the unit grid "
                                 f"(bytes [{c.lo}, {c.hi}))")
            covered.extend(range(a, b))
        if sorted(covered) != list(range(min(covered), max(covered) + 1)):
            raise ValueError(f"message {m} is not a run of consecutive units in forward order")
        runs.append((min(covered), max(covered) + 1))
    return runs


def _grid_hint(problem: Problem, hint: Any, units: list[tuple[int, int, int]], cap: float,
               max_messages: int | None) -> tuple[Plan | None, str]:
    """The hint as a plan on the grid (:func:`fusionopt.solvers._warm.hint_plan`): a Plan, a
    method name, ``"best-baseline"`` (the best fusion baseline, or the DP's plan, that meets
    the caps) or None; None where it breaks the caps."""
    def check(plan: Plan) -> None:
        _intervals_of(plan.validate(problem.profile), units)

    def fits(plan: Plan) -> bool:
        return (plan.message_bytes.max() <= cap
                and (max_messages is None or plan.num_messages <= max_messages))

    return warm.hint_plan(problem, hint, method="cpsat", plan_type=Plan,
                          best_of=("wfbp", "single", "ddp", "horovod", "dp"), check=check, fits=fits)
