"""``method="decoupled-cpsat"``: the decoupled all-reduce (MODEL.md section 8.1) solved exactly
by an OR-Tools CP-SAT model of its one channel, for small ``n``.

The space
---------
A plan of the space is a :class:`~fusionopt.model.DecoupledPlan` of whole tensors
without release times: reduce-scatter messages that are contiguous groups of the **ready
order**, run in that order; all-gather messages that are contiguous groups of the **forward
order**, run in that order; and **any interleaving** of the two kinds on the channel (the
plan's ``order``) that the simulator can run. ``decoupled-brute``'s space is the part of it
whose order is every reduce-scatter first, so this optimum is never slower. Both sync modes,
update times ``u_i`` and ``update_after_gather`` (DeAR) are modelled as
:func:`~fusionopt.model.simulate_decoupled` times them.

When an interleaving can pay: the first all-gather holds tensor 0, whose gradient is ready
last (at ``B``), and every other all-gather follows it, so no all-gather runs before the
reduce-scatter holding tensor 0. With tensor 0 last in the ready order (the default) that is
the last reduce-scatter, the only order the simulator can run is every reduce-scatter first,
and the space is ``decoupled-brute``'s. Only when tensor 0 ties at ``B`` with tensors the ready
order puts after it can an all-gather run between reduce-scatters; with
``update_after_gather`` under layerwise sync that lets the forward start on the first
tensors while the channel still reduces the others (the second example of
:func:`decoupled_cpsat`). Under ZeRO's semantics the forward waits for the last update,
which waits for the last reduce-scatter, and random tests found no gain there.

With ``interleave=False`` the space is ``decoupled-brute``'s alone: the channel's order is
known, so the model needs no start times, intervals or ``NoOverlap``, and it takes
``n <= 40`` instead of ``n <= 10``.

When the groupings separate
---------------------------
With tensor 0 last in the ready order, every reduce-scatter runs first, and the first
all-gather (tensor 0's) starts at ``s = V_n``, the last update's end (``E_n``, the last
reduce-scatter's, with ``update_after_gather``), which is at least the end of the last
reduce-scatter. Every other all-gather waits for an update (or reduce-scatter) that ended by
``s``, so the all-gathers run back to back from ``s``, and in both sync modes ``T = s + g``:
``s`` depends on the reduce-scatter grouping alone and ``g`` on the all-gather grouping
alone. ``g``'s least value is a DP over the forward order and ``s``'s a binary search over
a DP along the ready order (:meth:`DecoupledSpace.least_after_first_gather`,
:meth:`DecoupledSpace.least_wait`); the two groupings together are optimal. ``s`` is not ``E_n``
when updates take time, so the fusion DP's grouping, which ``decoupled-dp`` uses, need not
be the optimum's then. When tensor 0 ties at ``B`` with tensors the ready order puts after it,
their all-gathers wait for their own updates, which the reduce-scatter grouping moves, and
the best reduce-scatter grouping depends on the all-gather costs (docs/methods.md,
``decoupled-dp``, has a case of three tensors): there the model searches. Both least values
are constraints of the model in every case (each bounds every plan), and with a hint the
model starts from the separated plan when it has one.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from fusionopt.model._bounds import decoupled_lower_bound
from fusionopt.model._decoupled_plan import ALL_GATHER, REDUCE_SCATTER, DecoupledPlan
from fusionopt.model._problem import Problem
from fusionopt.model._simulator import simulate
from fusionopt.solvers.exact._cpsat_arcs import add_holding_ends, integer_horizon, positive_seconds
from fusionopt.solvers.exact._cpsat_search import check_deterministic_time, raise_if_interrupted, run_search, set_search
from fusionopt.solvers.baselines._megatron import decoupled_wfbp
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._result import Outcome, Result, Status
from fusionopt.solvers._catalogue import method, seconds_left
from fusionopt.model._cost import check_flag
import fusionopt.solvers._warm as warm

__all__ = ["decoupled_cpsat", "MAX_TENSORS", "MAX_TENSORS_SEQUENTIAL", "SPACE", "SPACE_SEQUENTIAL"]

MAX_TENSORS = 10                      # interleave=True
MAX_TENSORS_SEQUENTIAL = 40           # interleave=False
SPACE = ("whole tensors: reduce-scatters contiguous in the ready order, all-gathers contiguous in the "
         "forward order, any feasible interleaving on the channel")
SIZE_REASON = "models n (n + 1) optional messages on one channel"
# Checked before the options are read: it names both limits, not an option the caller may not have given.
SIZE_REASON_SEQUENTIAL = (f"takes n <= {MAX_TENSORS} tensors interleaving reduce-scatters and all-gathers (the "
                          f"default) and n <= {MAX_TENSORS_SEQUENTIAL} with interleave=False (every reduce-scatter "
                          "first, n (n + 1) arcs on a known channel order),")
SPACE_SEQUENTIAL = ("whole tensors: reduce-scatters contiguous in the ready order, all-gathers contiguous in "
                    "the forward order, every reduce-scatter first (decoupled-brute's space)")
HINT_METHODS = ("decoupled-wfbp", "decoupled-opt")


class DecoupledSpace:
    """The arcs of both kinds and the model's constants.

    Reduce-scatter positions ``p = 1..n`` follow the ready order (tensor ``pi(p)``), and the
    arc ``(a, b)`` is the message of positions ``a+1..b``; all-gather positions ``1..n``
    follow the forward order (tensor ``q - 1`` at ``q``), the arc ``(a, b)`` the message of
    tensors ``a..b-1``. ``P_ab``: the largest ready position among an all-gather arc's
    tensors: it waits for ``v`` (or ``D``) there, the latest of its tensors'.
    """

    def __init__(self, problem: Problem, interleave: bool = True) -> None:
        profile = problem.profile
        self.problem = problem
        self.interleave = interleave
        self.n = n = profile.n
        self.after = bool(problem.pattern.update_after_gather)
        self.layerwise = problem.sync == "layerwise"
        self.ready_order = [int(i) for i in profile.ready_order]
        self.position = {i: p + 1 for p, i in enumerate(self.ready_order)}
        sizes = profile.sizes.astype(np.float64)
        self.rs_prefix = np.concatenate(([0.0], np.cumsum(sizes[self.ready_order])))
        self.ag_prefix = np.concatenate(([0.0], np.cumsum(sizes)))
        self.arcs = [(a, b) for a in range(n) for b in range(a + 1, n + 1)]
        ready = profile.ready_times
        self.rs_ready = {(a, b): float(ready[self.ready_order[a:b]].max()) for a, b in self.arcs}
        self.ag_wait_position = {(a, b): max(self.position[i] for i in range(a, b)) for a, b in self.arcs}
        # Constants on a path to T: a ready time (or B), n reduce-scatters, n updates,
        # n all-gathers, n forward steps and the host's share.
        self.rounding_factor = 4 * n + 2

    # ------------------------------------------------------------------ plans
    def arcs_of(self, plan: DecoupledPlan) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """The arcs of a plan of the space, each kind in its own order; ``ValueError`` if it is not one."""
        profile = self.problem.profile
        rs, ag = plan.reduce_scatter.groups(), plan.all_gather.groups()
        if [i for g in rs for i in g] != self.ready_order:
            raise ValueError("not a plan of the space: its reduce-scatters are not contiguous groups of the "
                             "ready order, in that order")
        if [i for g in ag for i in g] != list(range(self.n)):
            raise ValueError("not a plan of the space: its all-gathers are not contiguous groups of the "
                             "forward order, in that order")
        if DecoupledPlan.from_groups(profile, rs, ag, order=plan.order.tolist()) != plan:
            raise ValueError("not a plan of the space: it splits tensors, has release times or reduces "
                             "with all-reduces")
        if not self.interleave and plan.order.tolist() != sorted(plan.order.tolist()):
            raise ValueError("not a plan of the space: with interleave=False every reduce-scatter runs "
                             "before the all-gathers")
        arcs = []
        for groups, key in ((rs, lambda i: self.position[i]), (ag, lambda i: i + 1)):
            ends = np.cumsum([len(g) for g in groups]).tolist()
            arcs.append(list(zip([0] + ends[:-1], ends)))
        return arcs[0], arcs[1]

    def plan_of(self, rs_arcs: list[tuple[int, int]], ag_arcs: list[tuple[int, int]], order: list[int]) -> DecoupledPlan:
        return DecoupledPlan.from_groups(self.problem.profile, [self.ready_order[a:b] for a, b in rs_arcs],
                                         [list(range(a, b)) for a, b in ag_arcs], order=order)

    # ------------------------------------------------------------------ integer constants
    def constants(self, q: float, horizon: int) -> dict[str, Any]:
        """Every constant in whole quanta, rounded down and capped at ``horizon + 1`` (a
        constant past the horizon only appears in plans slower than the anchor plan)."""
        problem, profile = self.problem, self.problem.profile
        halves = problem.pattern

        def quanta(seconds: Any) -> Any:
            value = np.minimum(np.floor(np.asarray(seconds, dtype=np.float64) / q), horizon + 1)
            return value.astype(np.int64).tolist() if value.ndim else int(value)

        rs_bytes = np.array([self.rs_prefix[b] - self.rs_prefix[a] for a, b in self.arcs])
        ag_bytes = np.array([self.ag_prefix[b] - self.ag_prefix[a] for a, b in self.arcs])
        update = profile.update
        forward = profile.forward
        work = forward + update if self.after else forward
        W = profile.host_overhead
        tail = (profile.U + profile.F + W) if self.after else (profile.F + W)
        return {
            "rs": dict(zip(self.arcs, quanta(halves.cost(REDUCE_SCATTER).of_sizes(rs_bytes)))),
            "ag": dict(zip(self.arcs, quanta(halves.cost(ALL_GATHER).of_sizes(ag_bytes)))),
            "ready": dict(zip(self.arcs, quanta([self.rs_ready[arc] for arc in self.arcs]))),
            "update": [0] + quanta(update[self.ready_order]),        # by ready position 1..n
            "work": quanta(work),                                    # by tensor, forward order
            "backward": quanta(profile.B),
            "host": quanta(W),
            "tail": quanta(tail),                                    # barrier: after the channel
        }

    # ------------------------------------------------------------------ the recursion
    def least_values(self, k: dict[str, Any], rs_arcs: list[tuple[int, int]], ag_arcs: list[tuple[int, int]],
                     order: list[int]) -> dict[str, Any]:
        """The least integer values the model allows for a plan (its arcs and order): the
        simulator's recursion with every constant rounded down (hints and tests)."""
        n = self.n
        start: dict[tuple[int, tuple[int, int]], int] = {}
        E, G = [0] * (n + 1), [0] * (n + 1)
        H, A = [0] * (n + 2), [0] * (n + 2)
        V = [k["backward"]] + [0] * n
        known = 0
        free = 0
        nxt = [0, 0]
        for kind in order:
            arc = (rs_arcs, ag_arcs)[kind][nxt[kind]]
            nxt[kind] += 1
            a, b = arc
            if kind == REDUCE_SCATTER:
                s = max(k["ready"][arc], free)
                free = E[b] = s + k["rs"][arc]
                for p in range(a + 1, b + 1):
                    H[p] = E[b]
                while known < b:
                    known += 1
                    V[known] = max(V[known - 1], H[known]) + k["update"][known]
            else:
                P = self.ag_wait_position[arc]
                assert P <= known, "the order runs an all-gather before the reduce-scatter it waits for"
                s = max(H[P] if self.after else V[P], free)
                free = G[b] = s + k["ag"][arc]
                for q in range(a + 1, b + 1):
                    A[q] = G[b]
            start[(kind, arc)] = s
        values: dict[str, Any] = {"start": start, "E": E, "G": G, "H": H, "V": V, "A": A}
        if not self.layerwise:
            values["T"] = max(k["backward"] if self.after else V[n], G[n]) + k["tail"]
            values["X"] = []
            return values
        clock = k["backward"] if self.after else V[n]
        X = []
        for i in range(n):
            clock = max(clock, A[i + 1]) + k["work"][i]
            X.append(clock)
        values["X"], values["T"] = X, clock + k["host"]
        return values

    def least_wait(self, k: dict[str, Any], last: int, updates: bool) -> tuple[int, list[tuple[int, int]]]:
        """The least integer ``V_last`` (``updates``) or ``H_last`` over every grouping of the
        reduce-scatters (a lower bound on that variable in every solution), and the arcs of
        positions ``1..last`` of a grouping that attains it.

        Only the messages up to the one holding ready position ``last`` count, and that one
        ends no later cut at ``last`` (costs do not decrease with size, MODEL.md section 2;
        nor do their rounded values), so the groupings of positions ``1..last`` are searched.
        With ``U_m`` the updates of positions ``m..last``, ``V_last`` is at least
        ``B + U_1`` and, for each message ``a+1..b``, its end ``E_b`` plus ``U_(a+1)``
        (``H_last``: ``E_b`` alone). Whether some grouping keeps every such term within
        ``tau`` is a DP over prefixes (among the groupings within ``tau`` so far, the one
        whose last end is least is the best for the rest), and a binary search on ``tau``
        finds the least: O(last^2 log horizon).
        """
        update = k["update"][:last + 1] if updates else [0] * (last + 1)
        after = np.concatenate((np.cumsum(update[::-1])[::-1], [0])).astype(np.int64).tolist()   # after[m] = U_m
        floor = k["backward"] + after[1] if updates else 0

        def least_end(tau: float) -> list[int] | None:
            best: list[int | None] = [None] * (last + 1)
            parent = [0] * (last + 1)
            best[0] = 0
            for b in range(1, last + 1):
                for a in range(b):
                    if best[a] is None:
                        continue
                    end = max(k["ready"][(a, b)], best[a]) + k["rs"][(a, b)]
                    if end + after[a + 1] <= tau and (best[b] is None or end < best[b]):
                        best[b], parent[b] = end, a
            if best[last] is None:
                return None
            path = [last]
            while path[-1] > 0:
                path.append(parent[path[-1]])
            return path[::-1]

        def value(path: list[int]) -> int:
            end, worst = 0, floor
            for a, b in zip(path, path[1:]):
                end = max(k["ready"][(a, b)], end) + k["rs"][(a, b)]
                worst = max(worst, end + after[a + 1])
            return worst

        path = least_end(math.inf)
        assert path is not None
        low, high = floor, value(path)
        while low < high:                       # a path within high is known
            middle = (low + high) // 2
            found = least_end(middle)
            if found is None:
                low = middle + 1
            else:
                path, high = found, value(found)
        return int(high), list(zip(path, path[1:]))

    def least_after_first_gather(self, k: dict[str, Any]) -> tuple[int, list[tuple[int, int]]]:
        """The least integer time from the first all-gather's start to ``T`` over every
        grouping of the all-gathers, each starting no earlier than the previous one's end,
        and the arcs of a grouping that attains it.

        Barrier: the least total ``c_AG`` plus the tail. Layerwise: the all-gather holding
        tensors ``a..b-1`` ends ``C`` after the first one's start (``C`` its costs and those
        before it), and the forward from tensor ``a`` on follows it, so ``T`` is at least
        ``max_groups (C + w_a + ... + w_(n-1)) + W``; ``h(a) = min_b c(a, b) + max(w_a + ... +
        w_(n-1), h(b))``, ``h(n) = 0``, gives its least value ``h(0)`` in O(n^2).
        """
        n = self.n
        work_from = np.concatenate((np.cumsum(k["work"][::-1])[::-1], [0])).astype(np.int64).tolist()
        h = [0] * (n + 1)
        following = [n] * (n + 1)
        for a in range(n - 1, -1, -1):
            if self.layerwise:
                h[a], following[a] = min((k["ag"][(a, b)] + max(work_from[a], h[b]), b) for b in range(a + 1, n + 1))
            else:
                h[a], following[a] = min((k["ag"][(a, b)] + h[b], b) for b in range(a + 1, n + 1))
        arcs, a = [], 0
        while a < n:
            arcs.append((a, following[a]))
            a = following[a]
        return int(h[0]) + (k["host"] if self.layerwise else k["tail"]), arcs

    def structured_plan(self, k: dict[str, Any]) -> DecoupledPlan | None:
        """With tensor 0 last in the ready order, every reduce-scatter first: the grouping of
        the least last wait (``V_n``, or ``E_n`` with ``update_after_gather``) and that of the
        least time after the first all-gather, which together attain the model's bound
        ``gate + after_first``; ``None`` when tensor 0 is not last."""
        if self.position[0] != self.n:
            return None
        rs_arcs = self.least_wait(k, self.n, updates=not self.after)[1]
        ag_arcs = self.least_after_first_gather(k)[1]
        return self.plan_of(rs_arcs, ag_arcs, [REDUCE_SCATTER] * len(rs_arcs) + [ALL_GATHER] * len(ag_arcs))

    # ------------------------------------------------------------------ the model
    def build(self, model: Any, k: dict[str, Any], horizon: int, floor_T: int) -> dict[str, Any]:
        """The CP-SAT model of :func:`decoupled_cpsat` (its docstring states it)."""
        from ortools.sat.python import cp_model

        n = self.n
        var = lambda name: model.new_int_var(0, horizon, name)          # noqa: E731
        sum_ = cp_model.LinearExpr.sum
        x, y, sx, sy, intervals = {}, {}, {}, {}, []
        rs_in: list[list[Any]] = [[] for _ in range(n + 1)]
        rs_out: list[list[Any]] = [[] for _ in range(n + 1)]
        ag_in: list[list[Any]] = [[] for _ in range(n + 1)]
        ag_out: list[list[Any]] = [[] for _ in range(n + 1)]
        # Without interleaving the channel's order is known (every reduce-scatter, then every
        # all-gather), so each kind is a chain of ends and needs no start or interval.
        for arc in self.arcs:
            a, b = arc
            d = k["rs"][arc]
            if k["ready"][arc] + d <= horizon:
                x[arc] = model.new_bool_var(f"x{a}_{b}")
                if self.interleave:
                    sx[arc] = model.new_int_var(0, horizon - d, f"sx{a}_{b}")
                    intervals.append(model.new_optional_fixed_size_interval_var(sx[arc], d, x[arc], f"rs{a}_{b}"))
                rs_in[b].append(x[arc])
                rs_out[a].append(x[arc])
            g = k["ag"][arc]
            if g <= horizon:
                y[arc] = model.new_bool_var(f"y{a}_{b}")
                if self.interleave:
                    sy[arc] = model.new_int_var(0, horizon - g, f"sy{a}_{b}")
                    intervals.append(model.new_optional_fixed_size_interval_var(sy[arc], g, y[arc], f"ag{a}_{b}"))
                ag_in[b].append(y[arc])
                ag_out[a].append(y[arc])
        # Each kind's arcs form one path 0 -> n (the DAG has no cycle).
        for into, out in ((rs_in, rs_out), (ag_in, ag_out)):
            model.add(sum_(out[0]) == 1)
            model.add(sum_(into[n]) == 1)
            for m in range(1, n):
                model.add(sum_(into[m]) == sum_(out[m]))
        cut = [None] + [model.new_bool_var(f"c{m}") for m in range(1, n)]
        cut_ag = [None] + [model.new_bool_var(f"cg{m}") for m in range(1, n)]
        for m in range(1, n):
            model.add(cut[m] == sum_(rs_in[m]))
            model.add(cut_ag[m] == sum_(ag_in[m]))
        # The channel: one message at a time, in some order, idle gaps allowed.
        if self.interleave:
            model.add_no_overlap(intervals)
        # Reduce-scatters: ready, after the previous one; E_b the end of the one ending at b.
        E = [None] + [var(f"E{b}") for b in range(1, n + 1)]
        for arc, chosen in x.items():
            a, b = arc
            if not self.interleave:
                model.add(E[b] >= k["ready"][arc] + k["rs"][arc]).only_enforce_if(chosen)
                if a > 0:
                    model.add(E[b] >= E[a] + k["rs"][arc]).only_enforce_if(chosen)
                continue
            model.add(sx[arc] >= k["ready"][arc]).only_enforce_if(chosen)
            if a > 0:
                model.add(sx[arc] >= E[a]).only_enforce_if(chosen)
            model.add(E[b] >= sx[arc] + k["rs"][arc]).only_enforce_if(chosen)
            model.add(sx[arc] == 0).only_enforce_if(~chosen)
        # H_p: the end of the reduce-scatter holding ready position p (D of its tensor).
        H = add_holding_ends(model, var, "H", E, cut, n)
        # V_p: the updates along the ready order from B (ZeRO's semantics).
        V: list[Any] = [k["backward"]]
        if not self.after:
            for p in range(1, n + 1):
                v = var(f"V{p}")
                model.add(v >= V[p - 1] + k["update"][p])
                model.add(v >= H[p] + k["update"][p])
                V.append(v)
        # All-gathers: after the update (or reduce-scatter) they wait for, after the previous one.
        G = [None] + [var(f"G{b}") for b in range(1, n + 1)]
        for arc, chosen in y.items():
            a, b = arc
            P = self.ag_wait_position[arc]
            if not self.interleave:
                # The first all-gather follows the last reduce-scatter on the channel.
                model.add(G[b] >= (H[P] if self.after else V[P]) + k["ag"][arc]).only_enforce_if(chosen)
                model.add(G[b] >= (G[a] if a > 0 else E[n]) + k["ag"][arc]).only_enforce_if(chosen)
                continue
            model.add(sy[arc] >= (H[P] if self.after else V[P])).only_enforce_if(chosen)
            if a > 0:
                model.add(sy[arc] >= G[a]).only_enforce_if(chosen)
            model.add(G[b] >= sy[arc] + k["ag"][arc]).only_enforce_if(chosen)
            model.add(sy[arc] == 0).only_enforce_if(~chosen)
        # A_q: the end of the all-gather holding forward position q (tensor q - 1).
        A = add_holding_ends(model, var, "A", G, cut_ag, n)
        total = model.new_int_var(floor_T, horizon, "T")
        X: list[Any] = []
        first = k["backward"] if self.after else V[n]
        if not self.layerwise:
            model.add(total >= first + k["tail"])
            model.add(total >= G[n] + k["tail"])
        else:
            clock = first
            for i in range(n):
                step = var(f"X{i}")
                model.add(step >= clock + k["work"][i])
                model.add(step >= A[i + 1] + k["work"][i])
                X.append(step)
                clock = step
            model.add(total >= clock + k["host"])
        # Valid inequalities for the LP relaxation (each holds for every plan's least values):
        # the channel carries every chosen message after the first ready time, and the
        # reduce-scatters holding position p and after it follow rho_p.
        rs_weighted = lambda keep: cp_model.LinearExpr.weighted_sum(        # noqa: E731
            [v for arc, v in x.items() if keep(arc)], [k["rs"][arc] for arc in x if keep(arc)])
        ag_weighted = cp_model.LinearExpr.weighted_sum(list(y.values()), [k["ag"][arc] for arc in y])
        last_end = var("channel_end")
        model.add(last_end >= E[n])
        model.add(last_end >= G[n])
        for p in range(1, n + 1):
            rho = min(k["ready"][arc] for arc in self.arcs if arc[1] >= p and arc[0] < p)
            model.add(E[n] >= rho + rs_weighted(lambda arc: arc[1] >= p))
        model.add(last_end >= min(k["ready"].values()) + rs_weighted(lambda arc: True) + ag_weighted)
        if self.layerwise:
            model.add(total >= last_end + k["work"][n - 1] + k["host"])
        else:
            model.add(total >= last_end + k["tail"])
        # Every all-gather follows the wait of tensor 0's (the first of the forward order):
        # the reduce-scatters holding its ready position and before it, from rho_p on; and
        # under layerwise sync the forward from tensor q - 1 on follows the all-gathers up to it.
        zero = self.position[0]
        for p in range(1, zero + 1):
            if p == 1 or k["ready"][(p - 1, p)] > k["ready"][(p - 2, p - 1)]:
                model.add(H[zero] >= k["ready"][(p - 1, p)] + rs_weighted(lambda arc: arc[1] >= p and arc[0] < zero))
        gate = H[zero] if self.after else V[zero]
        if self.layerwise:
            work = np.cumsum(k["work"][::-1])[::-1].tolist()
            for q in range(1, n + 1):
                model.add(total >= gate + cp_model.LinearExpr.weighted_sum(
                    [v for arc, v in y.items() if arc[0] < q], [k["ag"][arc] for arc in y if arc[0] < q])
                    + int(work[q - 1]) + k["host"])
        else:
            model.add(total >= gate + ag_weighted + k["tail"])
        # The all-gathers' least share of T from the first one's start (a constant): every
        # all-gather follows tensor 0's wait and, without interleaving, the last reduce-scatter.
        after_first = self.least_after_first_gather(k)[0]
        model.add(total >= gate + after_first)
        # The least waits over every reduce-scatter grouping (constants; with tensor 0 last
        # in the ready order, the least gate plus after_first is the optimum).
        model.add(gate >= self.least_wait(k, zero, updates=not self.after)[0])
        model.add(E[n] >= self.least_wait(k, n, updates=False)[0])
        if not self.after:
            model.add(V[n] >= self.least_wait(k, n, updates=True)[0])
        if not self.interleave:
            model.add(G[n] >= E[n] + ag_weighted)
            model.add(total >= E[n] + after_first)
        model.minimize(total)
        return {"x": x, "y": y, "sx": sx, "sy": sy, "cut": cut, "cut_ag": cut_ag, "E": E, "H": H, "V": V,
                "G": G, "A": A, "X": X, "T": total, "channel_end": last_end, "intervals": len(intervals)}

    def add_hint(self, model: Any, variables: dict[str, Any], values: dict[str, Any],
                 rs_arcs: list[tuple[int, int]], ag_arcs: list[tuple[int, int]], floor_T: int) -> None:
        """Hint every variable with a plan's least values (a feasible solution)."""
        n = self.n
        for kind, arcs, chosen, starts in ((REDUCE_SCATTER, rs_arcs, variables["x"], variables["sx"]),
                                           (ALL_GATHER, ag_arcs, variables["y"], variables["sy"])):
            picked = set(arcs)
            for arc, v in chosen.items():
                model.add_hint(v, arc in picked)
                if arc in starts:
                    model.add_hint(starts[arc], int(values["start"].get((kind, arc), 0)))
        rs_ends = {b for _, b in rs_arcs}
        ag_ends = {b for _, b in ag_arcs}
        for m in range(1, n):
            model.add_hint(variables["cut"][m], m in rs_ends)
            model.add_hint(variables["cut_ag"][m], m in ag_ends)
        for m in range(1, n + 1):
            for name in ("E", "H", "G", "A"):
                model.add_hint(variables[name][m], int(values[name][m]))
            if not self.after:
                model.add_hint(variables["V"][m], int(values["V"][m]))
        for v, value in zip(variables["X"], values["X"]):
            model.add_hint(v, int(value))
        model.add_hint(variables["channel_end"], max(values["E"][n], values["G"][n]))
        model.add_hint(variables["T"], max(int(values["T"]), floor_T))


@method("decoupled-cpsat", family="exact",
        summary="decoupled all-reduce, exact: CP-SAT over both groupings and their interleaving on the channel, "
                "n <= 10 (every reduce-scatter first with interleave=False, n <= 40)",
        in_default_comparison=False)
@declares(Needs(pattern="decoupled", max_tensors=MAX_TENSORS_SEQUENTIAL,
                size_reason=SIZE_REASON_SEQUENTIAL))
def decoupled_cpsat(
    problem: Problem,
    *,
    interleave: bool = True,
    time_limit: float = 10.0,
    deterministic_time: float | None = None,
    workers: int = 2,
    hint: Any = "best-baseline",
    time_quantum: float | None = None,
    random_seed: int = 0,
) -> Result:
    """The optimal decoupled plan of the module docstring's space (reduce-scatters contiguous in
    the ready order, all-gathers contiguous in the forward order, any feasible interleaving),
    by a CP-SAT model of the channel, for ``n <= 10``; with ``interleave=False``, of
    ``decoupled-brute``'s space (every reduce-scatter first), for ``n <= 40``.

    The formulation, why its relaxation is exact, and the rounding bound: docs/methods.md,
    section decoupled-cpsat.

    Parameters
    ----------
    interleave : bool
        ``True`` (default): the space with any feasible interleaving, ``n <= 10``.
        ``False``: every reduce-scatter first (``decoupled-brute``'s space), ``n <= 40``;
        the model has no interleaving variables. A larger ``n`` is refused in one line.
    time_limit : float
        Seconds CP-SAT may search (positive, finite).
    deterministic_time : float, optional
        A limit on CP-SAT's work in its deterministic time units: a seeded search stopped by
        it stops at the same point on every machine (:mod:`fusionopt.solvers.exact._cpsat_search`).
    workers : int
        CP-SAT search workers, ``>= 1``.
    hint : str, DecoupledPlan or None
        A first solution: ``"best-baseline"`` (the faster of ``decoupled-wfbp`` and
        ``decoupled-opt``), a decoupled method's name (its plan must lie in the space), a
        ``DecoupledPlan`` of the space, or ``None``. The result is never slower than it.
        With a hint and tensor 0 last in the ready order, CP-SAT starts from the separated
        plan of the module docstring unless the hint's integer ``T`` is smaller, and that
        plan is a candidate for the result too.
    time_quantum : float, optional
        Seconds per integer step; default automatic.
    random_seed : int
        CP-SAT's random seed.

    Returns
    -------
    Result
        The plan re-simulated. ``status`` OPTIMAL when ``T`` is within the rounding bound of
        CP-SAT's bound: optimal over the space to within ``rounding_bound`` seconds (about
        1e-7 of ``T`` with the automatic quantum; a coarse ``time_quantum`` makes it coarse,
        and a plan that far from the optimum may be called OPTIMAL), TIME_LIMIT when a limit
        stopped CP-SAT, else FEASIBLE. ``stats``: ``space``, ``time_quantum``, ``rounding_bound``,
        ``cpsat_status``, ``objective`` and ``bound`` (seconds, CP-SAT's), ``intervals``,
        ``wall_time``, ``deterministic_time``, ``hint``, ``hint_used``, ``plan_source``
        (``"cpsat"``, ``"hint"``, ``"reference"`` or ``"structure"``, the separated plan),
        ``interleave`` (the option), ``interleaved`` (the plan's order is not every
        reduce-scatter first), ``structure`` (``"hint"``: CP-SAT started from the separated
        plan; ``"candidate"``: it was only a candidate; ``"none"``: no hint, or tensor 0 is
        not last).

    Examples
    --------
    MODEL.md section 5's profile (gradients ready at 1, 3 and 6 ms, forwards of 1 ms), halves
    of ``1 ms + 1 ns/B``, barrier sync: the optimum is every reduce-scatter first, 22 ms, as
    ``decoupled-brute`` finds.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Decoupled, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> r = decoupled_cpsat(Problem(profile, pattern=Decoupled(half, half)), workers=1, hint=None)
    >>> round(r.iteration_time * 1e3, 6), str(r.status), r.stats["interleaved"]
    (22.0, 'OPTIMAL', False)

    An interleaving pays when tensor 0 is not the last gradient of the ready order (it ties
    with a later one) and the all-gathers carry gradients (DeAR): tensors of 1 and 3 MB, both
    ready at 0 (tensor 0 first), forwards of 10 and 1 ms, layerwise. Reduce-scatter ``{t0}``
    0-2 ms, all-gather ``{t0}`` 2-4, then ``{t1}`` both ways 4-8 and 8-12: the forward runs
    4-14 and 14-15 ms. With every reduce-scatter first the best is 18 ms (one reduce-scatter
    0-5, gathers 5-7 and 7-11, forwards 7-17 and 17-18).

    >>> profile = Profile.from_arrays([1e6, 3e6], [10e-3, 1e-3], [0.0, 0.0], ready_order=[0, 1])
    >>> problem = Problem(profile, pattern=Decoupled(half, half, update_after_gather=True), sync="layerwise")
    >>> r = decoupled_cpsat(problem, workers=1, hint=None)
    >>> round(r.iteration_time * 1e3, 6), r.plan.order.tolist(), r.plan.reduce_scatter.groups()
    (15.0, [0, 1, 0, 1], [[0], [1]])

    Without interleaving, the 18 ms of every reduce-scatter first:

    >>> r = decoupled_cpsat(problem, interleave=False, workers=1, hint=None)
    >>> round(r.iteration_time * 1e3, 6), r.plan.order.tolist(), r.stats["intervals"]
    (18.0, [0, 1, 1], 0)
    """
    check_flag("interleave", interleave)
    interleave = bool(interleave)
    if interleave and problem.profile.n > MAX_TENSORS:
        raise ValueError(f"decoupled-cpsat, interleaving reduce-scatters and all-gathers (the default), "
                         f"{SIZE_REASON} and takes n <= {MAX_TENSORS}, and this problem has n = {problem.profile.n}: "
                         f"interleave=False (every reduce-scatter first) takes n <= {MAX_TENSORS_SEQUENTIAL}")
    deterministic_time = check_deterministic_time(deterministic_time)
    if isinstance(workers, bool) or not isinstance(workers, numbers.Integral) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if time_quantum is not None:
        time_quantum = positive_seconds("time_quantum", time_quantum)
    if isinstance(random_seed, bool) or not isinstance(random_seed, numbers.Integral) or not -2**31 <= random_seed < 2**31:
        raise ValueError(f"random_seed must be a 32-bit integer, got {random_seed!r}")
    try:
        from ortools.sat.python import cp_model
    except ImportError as exc:
        raise ImportError("decoupled-cpsat needs OR-Tools: pip install ortools") from exc
    space = DecoupledSpace(problem, interleave)
    hint_plan, hint_label = _hint(problem, hint, space)

    reference = decoupled_wfbp(problem).plan
    anchor = hint_plan if hint_plan is not None else reference
    upper = simulate(problem, anchor, validate=False).iteration_time
    factor = space.rounding_factor
    q, horizon = integer_horizon(upper, factor, time_quantum, "hint" if hint_plan is not None else "reference")
    constants = space.constants(q, horizon)
    floor_T = min(int(math.floor(decoupled_lower_bound(problem) / q)), horizon)
    model = cp_model.CpModel()
    variables = space.build(model, constants, horizon, floor_T)
    # With tensor 0 last in the ready order the groupings separate (module docstring): the
    # two least-wait groupings make a plan whose integer T is the model's bound, and with a
    # hint CP-SAT starts from the one of the two with the smaller integer T.
    structure = space.structured_plan(constants) if hint_plan is not None else None
    starts = [(plan, space.arcs_of(plan)) for plan in ([structure] if structure is not None else []) + [anchor]]
    values = [space.least_values(constants, *arcs, plan.order.tolist()) for plan, arcs in starts]
    best = min(range(len(starts)), key=lambda i: values[i]["T"])
    space.add_hint(model, variables, values[best], *starts[best][1], floor_T)
    structure_use = "none" if structure is None else ("hint" if best == 0 else "candidate")

    solver = cp_model.CpSolver()
    set_search(solver, seconds=max(seconds_left(), 0.01), workers=workers, random_seed=random_seed,
               deterministic_time=deterministic_time)
    outcome, interrupted = run_search(solver, model)
    status_name = solver.status_name(outcome)
    if outcome == cp_model.MODEL_INVALID:
        raise RuntimeError(f"decoupled-cpsat: CP-SAT rejected the model: {model.validate()}")
    if outcome == cp_model.INFEASIBLE:
        raise RuntimeError("decoupled-cpsat: CP-SAT found the model infeasible, but the anchor plan is a solution")
    candidates: list[tuple[str, DecoupledPlan]] = []
    objective = bound = None
    if outcome in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        objective = solver.objective_value * q
        candidates.append(("cpsat", _decode(solver, space, variables, constants)))
        if math.isfinite(solver.best_objective_bound):
            bound = max(0.0, solver.best_objective_bound) * q
    candidates.append(("hint" if hint_plan is not None else "reference", anchor))
    if structure is not None:
        candidates.append(("structure", structure))
    # CP-SAT ranks plans by rounded times; the simulator has the last word (ties: CP-SAT).
    source, plan = min(candidates, key=lambda c: simulate(problem, c[1], validate=False).iteration_time)
    order = plan.order.tolist()
    stats = {
        "space": SPACE if interleave else SPACE_SEQUENTIAL, "interleave": interleave, "time_quantum": q,
        "rounding_bound": factor * q, "cpsat_status": status_name,
        "objective": objective, "bound": bound, "intervals": variables["intervals"],
        "wall_time": solver.wall_time, "deterministic_time": solver.deterministic_time,
        "hint": hint_label, "hint_used": hint_plan is not None, "plan_source": source,
        "interleaved": order != sorted(order), "structure": structure_use,
    }
    # FEASIBLE or UNKNOWN: a limit (time or work) stopped the search.
    status = Status.INTERRUPTED if interrupted else (
        Status.FEASIBLE if outcome == cp_model.OPTIMAL else Status.TIME_LIMIT)
    return raise_if_interrupted(Outcome(plan, stats=stats, lower_bound=bound,
                                        status=status, tolerance=factor * q))


def _decode(solver: Any, space: DecoupledSpace, variables: dict[str, Any], k: dict[str, Any]) -> DecoupledPlan:
    """The plan of a solution: each kind's chosen arcs along its path, and the channel order
    sorted by ``(start, end, kind, index)`` (the class docstring's argument)."""
    chosen = [sorted(arc for arc, v in variables[name].items() if solver.boolean_value(v)) for name in ("x", "y")]
    if not space.interleave:
        return space.plan_of(chosen[0], chosen[1], [REDUCE_SCATTER] * len(chosen[0]) + [ALL_GATHER] * len(chosen[1]))
    messages = []
    for kind, picked, starts, durations in ((REDUCE_SCATTER, chosen[0], variables["sx"], k["rs"]),
                                            (ALL_GATHER, chosen[1], variables["sy"], k["ag"])):
        for index, arc in enumerate(picked):
            s = solver.value(starts[arc])
            messages.append((s, s + durations[arc], kind, index))
    order = [kind for _, _, kind, _ in sorted(messages)]
    return space.plan_of(chosen[0], chosen[1], order)


def _hint(problem: Problem, hint: Any, space: DecoupledSpace) -> tuple[DecoupledPlan | None, str]:
    """The hint as a plan of the space, and a label for ``stats``
    (:func:`fusionopt.solvers._warm.hint_plan`)."""
    def check(plan: DecoupledPlan) -> None:
        plan.validate(problem.profile)
        space.arcs_of(plan)
        simulate(problem, plan, validate=False)             # an order it cannot run: ValueError

    return warm.hint_plan(problem, hint, method="decoupled-cpsat", plan_type=DecoupledPlan,
                          best_of=("decoupled-wfbp", "decoupled-opt"), check=check)
