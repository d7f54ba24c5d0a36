"""CP-SAT for fusion plans on several channels: a relaxation tightened by simulated plans.

With ``channels = K > 1`` (MODEL.md section 6, :mod:`fusionopt.model._events`) up to ``K``
messages are in flight, dispatched in plan order; each runs a latency phase ``alpha_m``
(``alpha``, plus the packing ``gamma S_m`` of a multi-tensor message when it runs on the
channel) and then a transfer of ``w_m = beta S_m`` seconds of exclusive bandwidth, the
transfers in flight sharing the bandwidth equally (processor sharing). A message's end
depends on every transfer it overlaps, so it is no ``max``/``+`` expression of constants
as on one channel, and the arc model of :mod:`fusionopt.solvers.exact._cpsat` cannot state it.

Exactness comes instead from a **relaxation with no-good cuts** (a logic-based Benders
scheme). CP-SAT minimises a lower bound ``T'(P) <= T(P)`` over fusion plans ``P``; each
plan it finds is simulated exactly (:func:`~fusionopt.model.channel_schedule`) and cuts are added that
raise ``T'`` to the truth on that plan (and to its exact dispatch times on every plan
sharing a prefix with it). Then CP-SAT is solved again. The relaxation's optimum ``v`` is a
lower bound on the optimal ``T`` throughout, and when the best simulated plan meets it the
plan is optimal. Every round either proves that or adds a plan never simulated before,
so the scheme ends after at most ``2^(n-1)`` rounds.

The relaxation
--------------
Arcs ``x_kj`` form a path ``0 -> n`` as in the one-channel model (message ``m`` carries
positions ``k+1..j`` in backward order). Per node ``j``, for the message ending there: its
dispatch ``D_j`` and a lower bound ``E_j`` on its end; and ``T``. Write ``tail_i`` for the
updates and forwards from tensor ``i`` on (layerwise sync: ``T >= C_i + tail_i``) and
``after`` for what follows a set of messages: ``U + F + W`` with barrier sync, ``tail`` of the
smallest forward index they hold with layerwise sync. Enforced by ``x_kj``:

* ready: ``D_j >= rho_j`` (plus the packing on the compute stream; with packing there,
  ``R_j >= R_k + Delta_kj`` as on one channel and ``D_j >= R_j``); plan order:
  ``D_j >= D_k``;
* alone on the bandwidth: ``E_j >= D_j + alpha_kj + w_kj`` and ``T >= E_j + after``;
* slots: at most ``K`` in flight, so message ``m`` is dispatched no earlier than the
  ``(m - K)``-th end among the earlier messages, which is at least the least end of the
  ``K`` messages before it: ``D_j >= min(E of the K messages before)`` (variables carry
  the ``E`` of the ``K - 1`` messages before each node along the path; with fewer than
  ``K + 1`` messages nothing waits);
* bandwidth: this message and all later ones transfer after ``D_j + alpha`` at one byte per
  ``beta`` seconds: ``T >= D_j + alpha + beta (Q_n - Q_k) + after``; they also hold a slot
  at least ``alpha + w`` each: ``T >= D_j + (alpha M_k + beta (Q_n - Q_k)) / K + after``
  with ``M_k`` the number of messages from node ``k`` on (a variable: ``M_k >= M_j + 1``);
  and for every position ``p``, ``T >= rho_p + alpha + sum_{(k, j): j >= p} w_kj x_kj + after``.

Every constraint holds for every plan's true times, so ``T'(P) <= T(P)``
(``tests/solvers/test_cpsat_channels.py`` checks it plan by plan).

The cuts of a simulated plan ``m_1..m_M`` (arcs ``a_1..a_M``): for each prefix ``m <= M``,
enforced by ``x_a1 and .. and x_am``, the exact ``D_(j_m) >= D_m``; with barrier sync
``T >= D_m + max(backlog_m, alpha) + beta (Q_n - Q_(k_m)) + U + F + W``, where the backlog is
the transfer work of earlier messages unfinished at ``D_m``; and ``E_(j_m) >= s_m + w_m +
sum min(r_i, w_m)`` over the earlier transfers in flight when ``m``'s transfer starts at
``s_m`` with ``r_i`` left (each gets the bandwidth ``m`` gets while both run). ``D_m``,
the backlog and the ``r_i`` depend on the prefix only: nothing later is dispatched before
``D_m`` (the last bound is dropped when a later message with a shorter latency already
transfers at ``s_m``). For the whole path, ``T >= T(P)``.

The relaxation sees bandwidth sharing only through these cuts. With barrier sync only the
end of all transfers matters, which the bandwidth bounds capture, and the scheme needs a
few rounds; with layerwise sync each message's own end matters, and it can take tens of
rounds at ``n = 10`` (``validation/results/exact.md``).

Integer time
------------
Every constant is rounded down to whole quanta ``q`` (the automatic ``q`` is the largest
power of two below ``1e-7`` of the first plan's ``T``), so ``v q`` stays a lower bound.
When the best plan meets the bound, ``T - v q < q`` (its own cut is ``floor(T / q)``):
``rounding_bound = q``.

Contention (compute slowed while a message is in flight) couples the compute stream to
the shared bandwidth as well and is refused here: :func:`fusionopt.solvers.exact.brute`
(n <= 14) is exact for it with several channels, GradSSA searches larger instances.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from fusionopt.model._fusion import arc_times, backward_arrays
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._sharing import channel_schedule, message_phases
from fusionopt.model._bounds import layerwise_tails
from fusionopt.solvers.exact._cpsat_arcs import (MAX_INTEGER_TIME, add_path_constraints, arc_positions,
                                                  automatic_quantum, plan_path)
from fusionopt.solvers.exact._cpsat_search import raise_if_interrupted, run_search, set_search
from fusionopt.solvers._result import Outcome, Status
from fusionopt.solvers._catalogue import deadline as solve_deadline

class ChannelRelaxation:
    """The CP-SAT relaxation of the module docstring for one problem, with its cuts.

    ``value(path)`` (tests) solves it with a path's arcs fixed: at most the path's true
    ``T`` over ``q``, for every path, before and after cuts.
    """

    def __init__(self, problem: Problem, *, quantum: float, horizon: int, cap: float,
                 limit: int | None, keep_path: tuple[int, ...]) -> None:
        from ortools.sat.python import cp_model

        self.problem = problem
        self.q = quantum
        profile = problem.profile
        self.n = n = profile.n
        K = problem.channels
        alpha, self.beta = problem.cost.affine
        rho, self.prefix = backward_arrays(problem)
        prefix = self.prefix
        tails, heads = np.triu_indices(n + 1, k=1)
        sizes = prefix[heads] - prefix[tails]
        times = arc_times(problem, np.concatenate(([0.0], rho)), prefix, tails, heads)
        latency, transfer = message_phases(problem, sizes, heads - tails)
        tail = layerwise_tails(problem)                      # seconds after C_i, by forward index
        if problem.sync == "layerwise":
            # After this message alone: the tail of its smallest forward index. After every
            # message from position k on, or every one holding a position >= p - 1: at least
            # the tail of the largest forward index there (the tail falls with the index).
            # In the ready order, not assumed to be the reverse of the forward order.
            order = np.asarray(profile.backward_order, dtype=np.int64)
            largest_from = np.maximum.accumulate(order[::-1])[::-1]
            smallest_in = np.concatenate([np.minimum.accumulate(order[k:]) for k in range(n)])
            self.alone_after, self.all_after = tail[smallest_in], tail[largest_from[tails]]
            cut_after = tail[largest_from]
        else:
            self.alone_after = self.all_after = np.full(len(heads), profile.U + profile.F + profile.W)
            cut_after = np.full(n, profile.U + profile.F + profile.W)
        self.alpha_base = alpha_base = alpha if profile.sizes.min() > 0 else 0.0
        self.rest = rest = self.beta * (prefix[n] - prefix[tails])   # transfer from this message on

        alone = self.quanta(times["nominal"] + latency + transfer + self.alone_after)
        keep = (sizes <= cap) & (alone <= horizon)
        keep[arc_positions(keep_path, n)] = True
        self.kept = kept = np.flatnonzero(keep)
        self.tails, self.heads = tails, heads
        self.index_of = {(int(tails[a]), int(heads[a])): i for i, a in enumerate(kept)}
        most_messages = n if limit is None else min(n, limit)
        slots = K < most_messages                    # else nothing ever waits for a slot
        packing_on_compute = bool(problem.computes_per_message
                                  or (problem.copy_on == "compute" and problem.copy_cost > 0))
        alpha_q = int(self.quanta(alpha_base))

        self.model = model = cp_model.CpModel()
        self.dispatch = dispatch = [model.new_constant(0)] + [model.new_int_var(0, horizon, f"d{j}")
                                                              for j in range(1, n + 1)]
        readies = ([None] + [model.new_int_var(0, horizon, f"r{j}") for j in range(1, n + 1)]
                   if packing_on_compute else [])
        # ends[j]: a lower bound on the end of the message ending at j; carried[t][j]: that
        # of the message t + 1 before it (0: none); earliest_free[j]: when one of the last K
        # messages up to j's ended, so that another one may be dispatched.
        self.ends = ends = [model.new_constant(0)] + [model.new_int_var(0, horizon, f"e{j}") for j in range(1, n + 1)]
        carried = [[model.new_int_var(0, horizon, f"p{t}_{j}") for j in range(n + 1)] for t in range(K - 1)] if slots else []
        earliest_free = [model.new_int_var(0, horizon, f"free{j}") for j in range(n + 1)] if slots else []
        for j in range(1, n + 1) if slots else ():
            model.add_min_equality(earliest_free[j], [ends[j]] + [carried[t][j] for t in range(K - 1)])
        # messages[k]: how many messages follow node k (the one leaving it included).
        messages = [model.new_int_var(0, most_messages, f"m{k}") for k in range(n)] + [model.new_constant(0)]
        self.total = total = model.new_int_var(0, horizon, "T")
        self.arcs = arcs = [model.new_bool_var(f"x{tails[a]}_{heads[a]}") for a in kept]
        leaving: list[list[Any]] = [[] for _ in range(n + 1)]
        entering: list[list[Any]] = [[] for _ in range(n + 1)]
        nominal_q, work_q = self.quanta(times["nominal"]), self.quanta(times["work"])
        latency_q = self.quanta(latency + transfer)
        after_q = self.quanta(self.alone_after)
        all_q = self.quanta(alpha_base + rest + self.all_after)
        shared_q = self.quanta(rest + K * self.all_after)
        for x, a in zip(arcs, kept.tolist()):
            k, j = int(tails[a]), int(heads[a])
            leaving[k].append(x)
            entering[j].append(x)
            model.add(dispatch[j] >= int(nominal_q[a])).only_enforce_if(x)
            if packing_on_compute:
                model.add(readies[j] >= int(nominal_q[a])).only_enforce_if(x)
                model.add(dispatch[j] >= readies[j]).only_enforce_if(x)
                if k > 0:
                    model.add(readies[j] >= readies[k] + int(work_q[a])).only_enforce_if(x)
            if k > 0:
                model.add(dispatch[j] >= dispatch[k]).only_enforce_if(x)
            model.add(ends[j] >= dispatch[j] + int(latency_q[a])).only_enforce_if(x)
            if slots and k > 0:
                model.add(carried[0][j] >= ends[k]).only_enforce_if(x)
                for t in range(1, K - 1):
                    model.add(carried[t][j] >= carried[t - 1][k]).only_enforce_if(x)
                # At most K in flight: one of the K messages before this one has ended.
                model.add(dispatch[j] >= earliest_free[k]).only_enforce_if(x)
            model.add(messages[k] >= messages[j] + 1).only_enforce_if(x)
            model.add(total >= ends[j] + int(after_q[a])).only_enforce_if(x)
            model.add(total >= dispatch[j] + int(all_q[a])).only_enforce_if(x)
            if alpha_q > 0:
                # The K slots hold messages m..M at least alpha + w each, after D_m. T is
                # an integer: less K - 1, the constraint gives T >= floor(RHS / K), not ceil.
                model.add(K * total >= K * dispatch[j] + alpha_q * messages[k] + int(shared_q[a]) - (K - 1)
                          ).only_enforce_if(x)
        add_path_constraints(model, arcs, leaving, entering, limit)
        transfer_q = self.quanta(transfer[kept]).astype(np.int64)
        kept_heads = heads[kept]
        for p in range(1, n + 1):
            if p > 1 and rho[p - 1] == rho[p - 2] and cut_after[p - 1] == cut_after[p - 2]:
                continue                            # the cut at p - 1 dominates it
            later = np.flatnonzero((kept_heads >= p) & (transfer_q > 0)).tolist()
            model.add(total >= int(self.quanta(rho[p - 1] + alpha_base + cut_after[p - 1]))
                      + cp_model.LinearExpr.weighted_sum([arcs[i] for i in later],
                                                         [int(transfer_q[i]) for i in later]))
        model.minimize(total)
        self.cut_prefixes: set[tuple[int, ...]] = set()

    def quanta(self, seconds: Any) -> np.ndarray:
        """Seconds in whole quanta, rounded down."""
        return np.floor(np.asarray(seconds, dtype=np.float64) / self.q)

    def literals(self, path: tuple[int, ...]) -> list[Any] | None:
        """The arc variables of a path, or None when the horizon dropped one of its arcs."""
        if any((k, j) not in self.index_of for k, j in zip(path[:-1], path[1:])):
            return None
        return [self.arcs[self.index_of[(k, j)]] for k, j in zip(path[:-1], path[1:])]

    def add_cuts(self, path: tuple[int, ...], schedule: dict[str, Any]) -> None:
        """The cuts of a simulated plan (module docstring)."""
        literals = self.literals(path)
        if literals is None:
            return                                  # on no path better than the first plan
        model, n = self.model, self.n
        for m in range(len(literals)):
            key = path[:m + 2]
            if key in self.cut_prefixes:
                continue
            self.cut_prefixes.add(key)
            k, j = path[m], path[m + 1]
            d = float(schedule["dispatch"][m])
            a = int(arc_positions((k, j), n)[0])
            model.add(self.dispatch[j] >= int(self.quanta(d))).only_enforce_if(literals[:m + 1])
            # Barrier sync waits for the backlog too; layerwise only for this and later messages.
            backlog = float(schedule["backlog"][m]) if self.problem.sync == "barrier" else 0.0
            bound = d + max(backlog, self.alpha_base) + self.rest[a] + self.all_after[a]
            model.add(self.total >= int(self.quanta(bound))).only_enforce_if(literals[:m + 1])
            model.add(self.ends[j] >= int(self.quanta(schedule["shared_end"][m]))).only_enforce_if(literals[:m + 1])
        model.add(self.total >= int(self.quanta(schedule["iteration_time"]))).only_enforce_if(literals)

    def hint(self, path: tuple[int, ...]) -> None:
        self.model.clear_hints()
        chosen = _arc_set(path)
        for x, a in zip(self.arcs, self.kept.tolist()):
            self.model.add_hint(x, (int(self.tails[a]), int(self.heads[a])) in chosen)

    def path_of(self, callback: Any) -> tuple[int, ...]:
        """The path of a CP-SAT solution (a solver or a solution callback)."""
        successor = {int(self.tails[a]): int(self.heads[a])
                     for x, a in zip(self.arcs, self.kept.tolist()) if callback.boolean_value(x)}
        path, node = [0], 0
        while node in successor:
            node = successor[node]
            path.append(node)
        return tuple(path)

    def value(self, path: tuple[int, ...], workers: int = 1) -> float:
        """The relaxation's least ``T`` for one path, seconds (tests)."""
        from ortools.sat.python import cp_model

        literals = self.literals(path)
        if literals is None:
            raise ValueError(f"path {path} has an arc beyond the horizon")
        self.model.clear_hints()
        self.model.add_assumptions(literals)
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = workers
        outcome, interrupted = run_search(solver, self.model)
        if interrupted:
            raise KeyboardInterrupt
        self.model.clear_assumptions()
        if outcome != cp_model.OPTIMAL:
            raise RuntimeError(f"relaxation of path {path}: {solver.status_name(outcome)}")
        return solver.objective_value * self.q


def cpsat_channels(problem: Problem, *, workers: int,
                   hint_plan: Plan | None, hint_label: str, hint_used: bool, reference: Plan,
                   cap: float, limit: int | None, time_quantum: float | None,
                   random_seed: int, deterministic_time: float | None = None) -> Outcome:
    """The relaxation-and-cuts scheme of the module docstring (called by ``cpsat``), until the
    solve's :func:`~fusionopt.solvers.deadline`."""
    from ortools.sat.python import cp_model

    profile = problem.profile
    n = profile.n
    simulated: dict[tuple[int, ...], dict[str, Any]] = {}
    best: list[Any] = [math.inf, None, ""]          # T, path, source

    def evaluate(path: tuple[int, ...], source: str) -> dict[str, Any]:
        schedule = channel_schedule(problem, _cuts_of(path, n))
        simulated[path] = schedule
        if schedule["iteration_time"] < best[0]:
            best[:] = [schedule["iteration_time"], path, source]
        return schedule

    anchor_path = tuple(plan_path(hint_plan if hint_used else reference, profile))
    anchor = evaluate(anchor_path, "hint" if hint_used else "reference")
    q = time_quantum if time_quantum is not None else automatic_quantum(anchor["iteration_time"], 1)
    horizon = math.floor(anchor["iteration_time"] / q)
    if not horizon < MAX_INTEGER_TIME:
        raise ValueError(f"time_quantum = {q!r} s is too small: the first plan takes {horizon:.3g} "
                         "steps, more than 2^30 (MAX_INTEGER_TIME)")
    relaxation = ChannelRelaxation(problem, quantum=q, horizon=horizon, cap=cap, limit=limit,
                                   keep_path=anchor_path)
    relaxation.add_cuts(anchor_path, anchor)
    if hint_used:
        path = tuple(plan_path(reference, profile))     # it meets the caps
        if path not in simulated:
            relaxation.add_cuts(path, evaluate(path, "reference"))

    solver = cp_model.CpSolver()
    solver.parameters.cp_model_probing_level = 0
    lower, rounds, wall, work = -math.inf, 0, 0.0, 0.0
    status_name, objective = "UNKNOWN", None
    found: list[tuple[int, ...]] = []

    class Collector(cp_model.CpSolverSolutionCallback):
        def on_solution_callback(self) -> None:
            found.append(relaxation.path_of(self))

    deadline = solve_deadline()
    timed_out = False  # the time limit, not a proof or a spent relaxation, ended the search
    interrupted = False
    while True:
        left = deadline - time.perf_counter()
        work_left = None if deterministic_time is None else deterministic_time - work
        if left <= 0 or (work_left is not None and work_left <= 0):
            timed_out = True
            break
        rounds += 1
        set_search(solver, seconds=left, workers=workers, random_seed=random_seed, deterministic_time=work_left)
        relaxation.hint(best[1])
        found.clear()
        outcome, interrupted = run_search(solver, relaxation.model, Collector())
        wall += solver.wall_time
        work += solver.deterministic_time
        status_name = solver.status_name(outcome)
        if outcome == cp_model.MODEL_INVALID:
            raise RuntimeError(f"cpsat: CP-SAT rejected the model: {relaxation.model.validate()}")
        if outcome == cp_model.INFEASIBLE:
            # The first plan is in the model, so this cannot happen with valid cuts.
            raise AssertionError("cpsat: the channel relaxation lost every plan")
        if outcome not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            timed_out = True    # UNKNOWN: a limit (time or work) stopped it
            break
        objective = solver.objective_value * q
        if math.isfinite(solver.best_objective_bound):
            lower = max(lower, solver.best_objective_bound * q)
        fresh = [path for path in dict.fromkeys(found) if path not in simulated]
        for path in fresh:
            relaxation.add_cuts(path, evaluate(path, "cpsat"))
        if interrupted:     # the bound and the plans of the solutions found so far are kept
            break
        if outcome != cp_model.OPTIMAL:
            # CP-SAT stops on its own clock, which can run out just before ours.
            timed_out = True
            break
        if best[0] - lower <= q or not fresh:
            break

    lower_bound = lower if math.isfinite(lower) else None
    stats = {
        "time_quantum": q,
        "rounding_bound": q,
        "cpsat_status": status_name,
        "objective": objective,
        "bound": lower_bound,
        "iteration_time_bound": lower_bound,
        "arcs": len(relaxation.arcs),
        "rounds": rounds,
        "plans_simulated": len(simulated),
        "wall_time": wall,
        "deterministic_time": work,
        "hint": hint_label,
        "hint_used": hint_used,
        "plan_source": best[2],
        "extensions": problem.extensions,
    }
    status = Status.INTERRUPTED if interrupted else (Status.TIME_LIMIT if timed_out else Status.FEASIBLE)
    plan = Plan.from_cuts(profile, _cuts_of(best[1], n))
    return raise_if_interrupted(Outcome(plan, stats=stats, lower_bound=lower_bound, status=status, tolerance=q))


def _cuts_of(path: tuple[int, ...], n: int) -> np.ndarray:
    cuts = np.zeros(n - 1, dtype=bool)
    cuts[np.asarray(path[1:-1], dtype=np.int64) - 1] = True
    return cuts


def _arc_set(path: tuple[int, ...]) -> set[tuple[int, int]]:
    return set(zip(path[:-1], path[1:]))
