"""``ps-cpsat``: a CP-SAT model over a parameter server's push and pull groupings on a unit
grid, anytime (MODEL.md section 6; the spaces: :mod:`fusionopt.solvers.exact._ps_spaces`).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

import fusionopt.solvers._warm as warm
from fusionopt.model._bounds import ps_lower_bound
from fusionopt.model._problem import Problem
from fusionopt.model._ps_plan import PSPlan
from fusionopt.model._ps_timing import offsets_iteration_time
from fusionopt.solvers._catalogue import method, seconds_left
from fusionopt.solvers.exact._cpsat_arcs import (
    add_holding_ends, add_path_constraints, integer_horizon, positive_seconds,
)
from fusionopt.solvers.exact._cpsat_search import raise_if_interrupted, run_search
from fusionopt.solvers.exact._ps_spaces import DEFAULT_MAX_UNITS, common_stats, ps_units
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._result import Outcome, Result, Status


# ---------------------------------------------------------------------------- CP-SAT
class PSGrid:
    """The units of a granularity laid out on both streams, and the model's constants.

    Push positions ``p = 1..N`` follow the push stream (tensors in backward order), pull
    positions ``q = 1..N`` the pull stream (forward order); node ``m`` is the boundary
    after position ``m``. Times are in whole quanta ``q_s`` (seconds per step), each
    rounded down.
    """

    def __init__(self, problem: Problem, units: list[tuple[int, int, int]]) -> None:
        profile, ps = problem.profile, problem.pattern
        self.problem = problem
        self.n, self.N = profile.n, len(units)
        push_units = sorted(units, key=lambda u: (-u[0], u[1]))
        self.push_units, self.pull_units = push_units, list(units)
        self.push_position = {u: p + 1 for p, u in enumerate(push_units)}
        sizes = profile.sizes.astype(np.float64)
        self.push_prefix = np.concatenate(([0.0], np.cumsum([hi - lo for _, lo, hi in push_units])))
        self.pull_prefix = np.concatenate(([0.0], np.cumsum([hi - lo for _, lo, hi in units])))
        # The positions of each tensor: nodes first..last, inner nodes first+1..last-1.
        self.push_span: dict[int, tuple[int, int]] = {}
        self.pull_span: dict[int, tuple[int, int]] = {}
        for layout, span in ((push_units, self.push_span), (units, self.pull_span)):
            for p, (i, _, _) in enumerate(layout, start=1):
                first, _ = span.get(i, (p - 1, p))
                span[i] = (first, p)
        self.split = bool(ps.partition_compute) and any(last - first > 1 for first, last in self.push_span.values())
        # Seconds, unrounded.
        ready = profile.ready_times
        self.push_ready = np.array([0.0] + [ready[i] for i, _, _ in push_units])   # unsplit, by node
        share = np.array([profile.backward[i] * (hi - lo) / sizes[i] for i, lo, hi in push_units])
        self.backward_prefix = np.concatenate(([0.0], np.cumsum(share)))            # split, by node
        self.forward_share = np.array([profile.forward[i] * (hi - lo) / sizes[i] for i, lo, hi in units])
        self.rounding_factor = (5 if self.split else 3) * self.N + self.n + 3

    def cuts_of(self, plan: PSPlan) -> tuple[list[int], list[int]]:
        """The cut nodes of a plan of this space; ``ValueError`` if it is not one."""
        profile = self.problem.profile
        offsets = [np.cumsum(plan.push.message_bytes)[:-1], np.cumsum(plan.pull.message_bytes)[:-1]]
        if PSPlan.from_offsets(profile, *(o.tolist() for o in offsets)) != plan:
            raise ValueError("hint: not a plan of the space (push messages must be contiguous in the push stream, "
                             "backward order; pull messages contiguous in the pull stream, forward order)")
        nodes = []
        for direction, prefix, cut in (("push", self.push_prefix, offsets[0]), ("pull", self.pull_prefix, offsets[1])):
            where = np.minimum(np.searchsorted(prefix, cut), self.N)
            if not np.array_equal(prefix[where], cut):
                raise ValueError(f"hint: its {direction} messages do not end on unit boundaries of the grid")
            nodes.append(where.tolist())
        return nodes[0], nodes[1]

    def plan_of(self, push_nodes: list[int], pull_nodes: list[int]) -> PSPlan:
        return PSPlan.from_offsets(self.problem.profile, [int(self.push_prefix[m]) for m in push_nodes],
                                   [int(self.pull_prefix[m]) for m in pull_nodes])

    # ------------------------------------------------------------------ integer constants
    def constants(self, q: float, horizon: int) -> dict[str, Any]:
        """Every constant of the model in whole quanta, rounded down and capped at
        ``horizon + 1``: a constant past the horizon only appears in plans slower than the
        anchor plan (which set the horizon), and the cap keeps it a 64-bit integer when a
        tiny automatic quantum meets a long duration."""
        problem, profile, ps = self.problem, self.problem.profile, self.problem.pattern
        N = self.N

        def quanta(seconds: Any) -> np.ndarray:
            return np.minimum(np.floor(np.asarray(seconds, dtype=np.float64) / q), horizon + 1)

        tails, heads = np.triu_indices(N + 1, k=1)
        push_bytes = self.push_prefix[heads] - self.push_prefix[tails]
        pull_bytes = self.pull_prefix[heads] - self.pull_prefix[tails]
        return {
            "tails": tails.tolist(), "heads": heads.tolist(),
            "push": quanta(problem.cost(push_bytes)), "update": quanta(ps.server_update(push_bytes)),
            "pull": quanta(ps.pull(pull_bytes)),
            "ready": quanta(self.backward_prefix if self.split else self.push_ready),
            "backward": float(quanta(profile.B)),
            "delta": float(quanta(ps.delta)) if self.split else 0.0,
            "after": float(quanta(profile.U + profile.F + profile.W)),
            "host": float(quanta(profile.W)),         # layerwise: the host's share ends the step
            "work": quanta(profile.update + profile.forward),           # per tensor, unsplit forward
            "update_compute": quanta(profile.update),                  # per tensor, split forward
            "forward_share": quanta(self.forward_share),               # per pull unit, split forward
        }

    # ------------------------------------------------------------------ the recursion
    def least_values(self, k: dict[str, Any], push_nodes: list[int], pull_nodes: list[int]) -> dict[str, Any]:
        """The least integer values the model allows for a plan given by its cut nodes:
        the simulator's recursion with every constant rounded down (hints and tests)."""
        N, n = self.N, self.n
        index = {(a, b): t for t, (a, b) in enumerate(zip(k["tails"], k["heads"]))}
        push_path = [0] + sorted(push_nodes) + [N]
        pull_path = [0] + sorted(pull_nodes) + [N]
        z = [0] * (N + 1)
        for m in push_path[1:]:
            z[m] = 1
        pieces_before, split = self._pieces(z)
        delta = int(k["delta"])
        ready = [0] * (N + 1)
        for m in range(1, N + 1):
            ready[m] = int(k["ready"][m]) + delta * pieces_before[m]
        backward_end = int(k["backward"]) + delta * pieces_before[N]
        end, update = [0] * (N + 1), [0] * (N + 1)
        free = 0
        for a, b in zip(push_path[:-1], push_path[1:]):
            t = index[(a, b)]
            free = max(free, ready[b]) + int(k["push"][t])
            end[b], update[b] = free, free + int(k["update"][t])
        gate_of_push = [0] * (N + 2)                  # V_p: update of the message holding p
        for p in range(N, 0, -1):
            gate_of_push[p] = update[p] if z[p] else gate_of_push[p + 1]
        zp = [0] * (N + 1)
        for m in pull_path[1:]:
            zp[m] = 1
        gate = [0] * (N + 2)                          # max V from q to the end of its message
        for q in range(N, 0, -1):
            own = gate_of_push[self.push_position[self.pull_units[q - 1]]]
            gate[q] = own if zp[q] else max(own, gate[q + 1])
        pull_end = [0] * (N + 1)
        free = 0
        for a, b in zip(pull_path[:-1], pull_path[1:]):
            free = max(free, gate[a + 1]) + int(k["pull"][index[(a, b)]])
            pull_end[b] = free
        held = [0] * (N + 2)                          # end of the pull message holding q
        for q in range(N, 0, -1):
            held[q] = pull_end[q] if zp[q] else held[q + 1]
        values = {"z": z, "zp": zp, "split": split, "ready": ready, "end": end, "update": update,
                  "gate_of_push": gate_of_push, "gate": gate, "pull_end": pull_end, "held": held,
                  "backward_end": backward_end}
        if self.problem.sync == "barrier":
            values["T"] = max(backward_end, pull_end[N]) + int(k["after"])
            return values
        if not self.split:
            clock, forward = backward_end, []
            for i in range(n):
                clock = max(clock, held[self.pull_span[i][1]]) + int(k["work"][i])
                forward.append(clock)
            values["forward"], values["T"] = forward, clock + int(k["host"])
            return values
        _, split_pull = self._pieces(zp, direction="pull")
        clock, forward = backward_end, [0] * (N + 1)
        forward[0] = clock
        for q in range(1, N + 1):
            i = self.pull_units[q - 1][0]
            first, last = self.pull_span[i]
            step = int(k["forward_share"][q - 1]) + (int(k["update_compute"][i]) if q == first + 1 else 0)
            ends_piece = zp[q] if q < last else split_pull[i]
            clock = max(clock, held[q]) + step + delta * ends_piece
            forward[q] = clock
        values["split_pull"], values["forward"], values["T"] = split_pull, forward, clock + int(k["host"])
        return values

    def _pieces(self, z: list[int], direction: str = "push") -> tuple[list[int], dict[int, int]]:
        """Per node, the compute pieces of split tensors ended by it (a tensor is split when
        a cut lies inside it), and whether each tensor is split."""
        span = self.push_span if direction == "push" else self.pull_span
        split = {i: int(any(z[m] for m in range(first + 1, last))) for i, (first, last) in span.items()}
        ended = [0] * (self.N + 1)
        layout = self.push_units if direction == "push" else self.pull_units
        count = 0
        for m in range(1, self.N + 1):
            i = layout[m - 1][0]
            first, last = span[i]
            if split[i] and (m == last or z[m]):
                count += 1
            ended[m] = count
        return ended, split

    # ------------------------------------------------------------------ the model
    def build(self, model: Any, k: dict[str, Any], horizon: int, floor_T: int) -> dict[str, Any]:
        """The CP-SAT model of :func:`ps_cpsat` (its docstring states it)."""
        from ortools.sat.python import cp_model

        N, n = self.N, self.n
        tails, heads = k["tails"], k["heads"]
        sum_ = cp_model.LinearExpr.sum
        var = lambda name: model.new_int_var(0, horizon, name)          # noqa: E731
        # Paths: x (push arcs) and y (pull arcs), one message per arc.
        x, y, push_arcs, pull_arcs = {}, {}, [], []
        push_in: list[list[Any]] = [[] for _ in range(N + 1)]
        push_out: list[list[Any]] = [[] for _ in range(N + 1)]
        pull_in: list[list[Any]] = [[] for _ in range(N + 1)]
        pull_out: list[list[Any]] = [[] for _ in range(N + 1)]
        least_ready = k["ready"]
        for t, (a, b) in enumerate(zip(tails, heads)):
            if least_ready[b] + k["push"][t] <= horizon:
                x[(a, b)] = model.new_bool_var(f"x{a}_{b}")
                push_arcs.append((t, a, b))
                push_in[b].append(x[(a, b)])
                push_out[a].append(x[(a, b)])
            if k["pull"][t] <= horizon:
                y[(a, b)] = model.new_bool_var(f"y{a}_{b}")
                pull_arcs.append((t, a, b))
                pull_in[b].append(y[(a, b)])
                pull_out[a].append(y[(a, b)])
        add_path_constraints(model, list(x.values()), push_out, push_in, None)
        add_path_constraints(model, list(y.values()), pull_out, pull_in, None)
        # z[m] / zp[m]: a push / pull message ends at node m (1 at node N).
        z = [None] + [sum_(push_in[m]) for m in range(1, N)] + [1]
        zp = [None] + [sum_(pull_in[m]) for m in range(1, N)] + [1]
        cut = [None] + [model.new_bool_var(f"z{m}") for m in range(1, N)]
        cut_pull = [None] + [model.new_bool_var(f"zp{m}") for m in range(1, N)]
        for m in range(1, N):
            model.add(cut[m] == z[m])
            model.add(cut_pull[m] == zp[m])
        # Ready times (pieces with partitioned compute), push ends and server updates.
        delta = int(k["delta"])
        pieces_ended: list[Any] = [0] * (N + 1)
        split: dict[int, Any] = {}
        backward_end: Any = int(k["backward"])
        if self.split:
            split, pieces_ended = self._piece_expressions(model, cut, self.push_span, self.push_units, "s")
            backward_end = int(k["backward"]) + delta * pieces_ended[N]
        ready = [None] + [int(k["ready"][m]) + delta * pieces_ended[m] for m in range(1, N + 1)]
        end = [model.new_constant(0)] + [var(f"e{m}") for m in range(1, N + 1)]
        update = [None] + [var(f"u{m}") for m in range(1, N + 1)]
        for t, a, b in push_arcs:
            d = int(k["push"][t])
            if a > 0:
                model.add(end[b] >= end[a] + d).only_enforce_if(x[(a, b)])
            model.add(end[b] >= ready[b] + d).only_enforce_if(x[(a, b)])
        # Upd_b >= e_b + (update of the arc entering b): linear, as at most one arc enters b
        # (at a node no message ends, both are free and their least values 0).
        for b in range(1, N + 1):
            entering = [(x[(a, c)], int(k["update"][t])) for t, a, c in push_arcs if c == b]
            model.add(update[b] >= end[b] + cp_model.LinearExpr.weighted_sum([v for v, _ in entering],
                                                                            [w for _, w in entering]))
        # V_p: the update of the push message holding position p.
        held_push = add_holding_ends(model, var, "v", update, cut, N)
        # Pull gates: the largest V from q to the end of q's pull message.
        gate = [None] + [var(f"g{q}") for q in range(1, N + 1)]
        for q in range(1, N + 1):
            model.add(gate[q] >= held_push[self.push_position[self.pull_units[q - 1]]])
            if q < N:
                model.add(gate[q] >= gate[q + 1]).only_enforce_if(~cut_pull[q])
        pull_end = [model.new_constant(0)] + [var(f"f{m}") for m in range(1, N + 1)]
        for t, a, b in pull_arcs:
            d = int(k["pull"][t])
            if a > 0:
                model.add(pull_end[b] >= pull_end[a] + d).only_enforce_if(y[(a, b)])
            model.add(pull_end[b] >= gate[a + 1] + d).only_enforce_if(y[(a, b)])
        # The end of the pull message holding q.
        held = add_holding_ends(model, var, "h", pull_end, cut_pull, N)
        total = model.new_int_var(floor_T, horizon, "T")
        forwards: list[Any] = []
        split_pull: dict[int, Any] = {}
        if self.problem.sync == "barrier":
            model.add(total >= pull_end[N] + int(k["after"]))
            model.add(total >= backward_end + int(k["after"]))
        elif not self.split:
            clock: Any = backward_end
            for i in range(n):
                forward = var(f"phi{i}")
                w = int(k["work"][i])
                model.add(forward >= clock + w)
                model.add(forward >= held[self.pull_span[i][1]] + w)
                clock = forward
                forwards.append(forward)
            model.add(total >= clock + int(k["host"]))
        else:
            split_pull, _ = self._piece_expressions(model, cut_pull, self.pull_span, self.pull_units, "sp")
            clock = backward_end
            for q in range(1, N + 1):
                i = self.pull_units[q - 1][0]
                first, last = self.pull_span[i]
                step = int(k["forward_share"][q - 1]) + (int(k["update_compute"][i]) if q == first + 1 else 0)
                ends_piece = cut_pull[q] if q < last else split_pull.get(i, 0)
                forward = var(f"w{q}")
                model.add(forward >= clock + step + delta * ends_piece)
                model.add(forward >= held[q] + step + delta * ends_piece)
                clock = forward
                forwards.append(forward)
            model.add(total >= clock + int(k["host"]))
        # Valid inequalities for the LP relaxation (each holds for every plan's least values):
        # the message holding a position starts no earlier than its gate (its ready time),
        # then it and every later message run one at a time; and the message holding a pull
        # position ends no earlier than the first gate plus the messages up to it, then the
        # forward from there on runs.
        def weighted(arcs: list[tuple[int, int, int]], durations: Any, chosen: dict, keep) -> Any:
            terms = [(chosen[(a, b)], int(durations[t])) for t, a, b in arcs if keep(a, b)]
            return cp_model.LinearExpr.weighted_sum([v for v, _ in terms], [w for _, w in terms])

        for p in range(1, N + 1):
            model.add(pull_end[N] >= gate[p] + weighted(pull_arcs, k["pull"], y, lambda a, b: b >= p))
            if p == 1 or least_ready[p] > least_ready[p - 1]:
                model.add(end[N] >= int(least_ready[p]) + weighted(push_arcs, k["push"], x, lambda a, b: b >= p))
        if self.problem.sync == "layerwise":
            for q, after_q in self._forward_after(k):
                model.add(total >= gate[1] + after_q + weighted(pull_arcs, k["pull"], y, lambda a, b: a < q))
        model.minimize(total)
        # Branch on the cuts, then on the times in the order they are computed, each at its
        # least value: with the cuts fixed, propagation gives each time its least value
        # given the earlier ones (every constraint is a >=), so each branch is one plan at
        # its least T. Left to itself, a single worker assigned some time above its least
        # value and then improved T by one quantum per solution.
        times = (end[1:] + update[1:] + held_push[:0:-1] + gate[:0:-1] + pull_end[1:] + held[:0:-1]
                 + forwards + [total])
        model.add_decision_strategy(cut[1:] + cut_pull[1:] + list(x.values()) + list(y.values()),
                                    cp_model.CHOOSE_FIRST, cp_model.SELECT_MIN_VALUE)
        model.add_decision_strategy(times, cp_model.CHOOSE_FIRST, cp_model.SELECT_MIN_VALUE)
        return {"x": x, "y": y, "cut": cut, "cut_pull": cut_pull, "split": split, "end": end, "update": update,
                "held_push": held_push, "gate": gate, "pull_end": pull_end, "held": held, "forward": forwards,
                "split_pull": split_pull, "T": total}

    def _forward_after(self, k: dict[str, Any]) -> list[tuple[int, int]]:
        """Layerwise: pairs ``(q, w)``: once the pull message holding position ``q`` ends,
        at least ``w`` quanta of the model's forward chain remain (its rounded constants)."""
        if not self.split:
            work = [int(w) for w in k["work"]]
            tails = np.cumsum(work[::-1])[::-1].tolist()
            return [(self.pull_span[i][1], int(tails[i]) + int(k["host"])) for i in range(self.n)]
        steps = [int(k["forward_share"][q - 1]) + (int(k["update_compute"][self.pull_units[q - 1][0]])
                                                     if q == self.pull_span[self.pull_units[q - 1][0]][0] + 1 else 0)
                 for q in range(1, self.N + 1)]
        tails = np.cumsum(steps[::-1])[::-1].tolist()
        return [(q, int(tails[q - 1]) + int(k["host"])) for q in range(1, self.N + 1)]

    def _piece_expressions(self, model: Any, cut: list[Any], span: dict[int, tuple[int, int]],
                           layout: list[tuple[int, int, int]], name: str) -> tuple[dict[int, Any], list[Any]]:
        """Booleans ``split_i`` (a cut inside tensor ``i``) and, per node, the number of pieces
        of split tensors ended by it, as linear expressions."""
        split: dict[int, Any] = {}
        for i, (first, last) in span.items():
            inner = [cut[m] for m in range(first + 1, last)]
            if inner:
                split[i] = model.new_bool_var(f"{name}{i}")
                for c in inner:
                    model.add_implication(c, split[i])
                model.add_bool_or(inner).only_enforce_if(split[i])
        ended: list[Any] = [0] * (self.N + 1)
        count: Any = 0
        for m in range(1, self.N + 1):
            i = layout[m - 1][0]
            first, last = span[i]
            if i in split:
                count = count + (split[i] if m == last else cut[m])
            ended[m] = count
        return split, ended

    def add_hint(self, model: Any, variables: dict[str, Any], values: dict[str, Any],
                 push_nodes: list[int], pull_nodes: list[int], floor_T: int) -> None:
        """Hint every variable with a plan's least values (a feasible solution)."""
        N = self.N
        push_path = [0] + sorted(push_nodes) + [N]
        pull_path = [0] + sorted(pull_nodes) + [N]
        chosen = set(zip(push_path[:-1], push_path[1:]))
        for arc, v in variables["x"].items():
            model.add_hint(v, arc in chosen)
        chosen = set(zip(pull_path[:-1], pull_path[1:]))
        for arc, v in variables["y"].items():
            model.add_hint(v, arc in chosen)
        for m in range(1, N):
            model.add_hint(variables["cut"][m], bool(values["z"][m]))
            model.add_hint(variables["cut_pull"][m], bool(values["zp"][m]))
        for i, v in variables["split"].items():
            model.add_hint(v, bool(values["split"][i]))
        for i, v in variables["split_pull"].items():
            model.add_hint(v, bool(values["split_pull"][i]))
        for m in range(1, N + 1):
            for name in ("end", "update", "held_push", "gate", "pull_end", "held"):
                key = {"held_push": "gate_of_push"}.get(name, name)
                model.add_hint(variables[name][m], int(values[key][m]))
        forward = values.get("forward", [])
        if self.split and self.problem.sync == "layerwise":
            forward = forward[1:]
        for v, value in zip(variables["forward"], forward):
            model.add_hint(v, int(value))
        model.add_hint(variables["T"], max(int(values["T"]), floor_T))


@method("ps-cpsat", family="exact",
        summary="parameter server, exact: CP-SAT over push and pull groupings, anytime",
        in_default_comparison=False)
@declares(Needs(pattern="ps"))
def ps_cpsat(
    problem: Problem,
    *,
    time_limit: float = 10.0,
    workers: int = 2,
    hint: Any = "best-baseline",
    time_quantum: float | None = None,
    granularity: Any = "tensor",
    random_seed: int = 0,
    max_units: int = DEFAULT_MAX_UNITS,
) -> Result:
    """The optimal plan of the space by a CP-SAT model of both directions, anytime.

    The space is ``ps_brute``'s (module docstring): cuts at tensor boundaries
    (``granularity="tensor"``) or on a grid of units, in both streams; with a grid and
    ``ps.partition_compute`` it includes split compute.

    The formulation, why its relaxation is exact, and the rounding bound: docs/methods.md,
    section ps-cpsat.

    Parameters
    ----------
    time_limit : float
        Seconds CP-SAT may search (positive, finite).
    workers : int
        CP-SAT search workers, ``>= 1``.
    hint : str, PSPlan or None
        A first solution: ``"best-baseline"`` (the fastest of ``ps-default``, ``ps-layer``
        and ``ps-dp``), a method's name (its plan must lie in the space), a PSPlan of the
        space, or ``None``. The result is never slower than the hint.
    time_quantum : float, optional
        Seconds per integer step; default automatic.
    granularity : "tensor" or int
        The space (module docstring).
    random_seed : int
        CP-SAT's random seed.
    max_units : int
        Largest ``N`` accepted (the model has ``N (N + 1)`` arcs).

    Returns
    -------
    Result
        The plan re-simulated. ``status`` OPTIMAL when ``T`` is within the rounding bound
        of CP-SAT's bound (optimal over the space), TIME_LIMIT when the time limit
        stopped CP-SAT, else FEASIBLE. ``stats``: ``time_quantum``, ``rounding_bound``,
        ``cpsat_status``, ``objective`` and ``bound`` (seconds, CP-SAT's), ``arcs``,
        ``wall_time``, ``hint``, ``hint_used``, ``plan_source`` (``"cpsat"``, ``"hint"``
        or ``"reference"``), ``space``, ``granularity``, ``units``, ``bound_all_plans``.

    Examples
    --------
    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile, ParameterServer
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, pattern=ParameterServer(AlphaBeta(1e-3, 1e-9)), sync="layerwise")
    >>> r = ps_cpsat(problem, workers=1, hint=None)
    >>> r.plan.push.groups(), r.plan.pull.groups(), round(r.iteration_time * 1e3, 6), str(r.status)
    ([[2], [1], [0]], [[0, 1], [2]], 21.0, 'OPTIMAL')
    >>> r = ps_cpsat(problem, workers=1, granularity=250_000)     # 1 MB units: a push-pull pipeline
    >>> round(r.iteration_time * 1e3, 6), str(r.status), r.stats["units"]
    (20.0, 'OPTIMAL', 7)
    """
    if isinstance(workers, bool) or not isinstance(workers, numbers.Integral) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    if time_quantum is not None:
        time_quantum = positive_seconds("time_quantum", time_quantum)
    if isinstance(random_seed, bool) or not isinstance(random_seed, numbers.Integral) or not -2**31 <= random_seed < 2**31:
        raise ValueError(f"random_seed must be a 32-bit integer, got {random_seed!r}")
    if isinstance(max_units, bool) or not isinstance(max_units, numbers.Integral) or max_units < 1:
        raise ValueError(f"max_units must be an integer >= 1, got {max_units!r}")
    units = ps_units(problem, granularity)
    if len(units) > max_units:
        raise ValueError(
            f"granularity = {granularity!r} gives {len(units)} units ({problem.profile.n} tensors), more than "
            f"max_units = {max_units}: the model has N (N + 1) arcs; choose a coarser grid or raise max_units"
        )
    try:
        from ortools.sat.python import cp_model
    except ImportError as exc:
        raise ImportError("ps-cpsat needs OR-Tools: pip install ortools") from exc
    grid = PSGrid(problem, units)
    hint_plan, hint_label = _ps_hint(problem, hint, grid)
    reference = PSPlan.from_offsets(problem.profile)
    anchor = hint_plan if hint_plan is not None else reference
    upper = offsets_iteration_time(problem, *_offsets_of(grid, anchor))
    factor = grid.rounding_factor
    q, horizon = integer_horizon(upper, factor, time_quantum, "hint" if hint_plan is not None else "reference")
    constants = grid.constants(q, horizon)
    floor_T = min(int(math.floor(ps_lower_bound(problem) / q)), horizon)
    model = cp_model.CpModel()
    variables = grid.build(model, constants, horizon, floor_T)
    anchor_nodes = grid.cuts_of(anchor)
    grid.add_hint(model, variables, grid.least_values(constants, *anchor_nodes), *anchor_nodes, floor_T)

    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(seconds_left(), 0.01)
    solver.parameters.num_workers = int(workers)
    solver.parameters.random_seed = int(random_seed)
    # As in cpsat: probing spends the time limit on the arc model's implications.
    solver.parameters.cp_model_probing_level = 0
    # Presolve rewrote the valid inequalities into a form whose LP bound stayed near half
    # the optimum (n = 32 whole tensors: not proved in 10 s with it, 1.7 s without).
    solver.parameters.cp_model_presolve = False
    if workers == 1:
        # One worker follows the model's decision strategy only when told to; its default
        # search stepped T down one quantum per solution (Grid.build).
        solver.parameters.search_branching = cp_model.FIXED_SEARCH
    outcome, interrupted = run_search(solver, model)
    status_name = solver.status_name(outcome)
    if outcome == cp_model.MODEL_INVALID:
        raise RuntimeError(f"ps-cpsat: CP-SAT rejected the model: {model.validate()}")
    if outcome == cp_model.INFEASIBLE:
        raise RuntimeError("ps-cpsat: CP-SAT found the model infeasible, but the hint plan is a solution")
    candidates: list[tuple[str, PSPlan]] = []
    objective = bound = time_bound = None
    if outcome in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        objective = solver.objective_value * q
        nodes = []
        for arcs in (variables["x"], variables["y"]):
            successor = {a: b for (a, b), v in arcs.items() if solver.boolean_value(v)}
            path, node = [], successor[0]
            while node != grid.N:
                path.append(node)
                node = successor[node]
            nodes.append(path)
        candidates.append(("cpsat", grid.plan_of(*nodes)))
        if math.isfinite(solver.best_objective_bound):
            bound = max(0.0, solver.best_objective_bound) * q
            time_bound = bound
    candidates.append(("hint" if hint_plan is not None else "reference", anchor))
    # CP-SAT ranks plans by rounded times; the simulator has the last word (ties: CP-SAT).
    source, plan = min(candidates, key=lambda c: offsets_iteration_time(problem, *_offsets_of(grid, c[1])))
    stats = common_stats(problem, granularity, units)
    stats.update({
        "time_quantum": q, "rounding_bound": factor * q, "cpsat_status": status_name,
        "objective": objective, "bound": bound,
        "arcs": len(variables["x"]) + len(variables["y"]), "wall_time": solver.wall_time,
        "hint": hint_label, "hint_used": hint_plan is not None, "plan_source": source,
    })
    status = Status.INTERRUPTED if interrupted else (
        Status.FEASIBLE if outcome == cp_model.OPTIMAL else Status.TIME_LIMIT)
    return raise_if_interrupted(Outcome(plan, stats=stats, lower_bound=time_bound,
                                        status=status, tolerance=factor * q))


def _offsets_of(grid: PSGrid, plan: PSPlan) -> tuple[list[int], list[int]]:
    push_nodes, pull_nodes = grid.cuts_of(plan)
    return [int(grid.push_prefix[m]) for m in push_nodes], [int(grid.pull_prefix[m]) for m in pull_nodes]


HINT_METHODS = ("ps-default", "ps-layer", "ps-dp")


def _ps_hint(problem: Problem, hint: Any, grid: PSGrid) -> tuple[PSPlan | None, str]:
    """The hint as a plan of the space, and a label for ``stats``
    (:func:`fusionopt.solvers._warm.hint_plan`)."""
    def check(plan: PSPlan) -> None:
        grid.cuts_of(plan.validate(problem.profile))

    return warm.hint_plan(problem, hint, method="ps-cpsat", plan_type=PSPlan, best_of=HINT_METHODS, check=check)


__all__ = ["ps_cpsat", "HINT_METHODS"]
