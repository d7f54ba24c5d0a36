"""What a rank runs in a sharded step: its collectives in channel order and its compute program.

The two sharded patterns of MODEL.md section 8 are compiled into one form, a
:class:`Program`, that the sharded runner (:mod:`fusionopt.executor.sharded_runner`) executes
and that :func:`replay` times on the model's clock:

* ``collectives``: the channel's collectives in the order it runs them, each a
  :class:`CollectiveSpec` (kind, chunks, and the *gate* it waits for: a counter the compute
  program publishes, and how far it must have got);
* ``ops``: the compute stream's program, a list of operations on a compute clock ``clock``
  (seconds from the start of the step):

  - ``(AT, t)``: ``clock = max(clock, t)`` (the backward's emissions, at ready times);
  - ``(COMPUTE, s)``: ``clock += s`` (emulated compute);
  - ``(PUBLISH, gate, value)``: at ``clock``, set counter ``gate`` to ``value`` (a gradient
    emitted, an update done, a collective issued): collectives waiting for it may start;
  - ``(WAIT, c)``: ``clock = max(clock, end of collective c)``;
  - ``(PHI, i)``: tensor ``i``'s forward starts at ``clock`` (recorded).

  The step ends at the final ``clock``.

Decoupled all-reduce (MODEL.md 8.1, :func:`decoupled_program`): the channel runs the plan's
reduce-scatter and all-gather messages in the plan's order; a reduce-scatter waits for the
emission of its gradients (gate ``emitted``), an all-gather for the updates of its tensors
(gate ``updated``; none with ``update_after_gather``, whose gathers follow their
reduce-scatters on the channel). The program: the backward's emissions, the sharded updates
in the ready order (each after its tensor's last reduce-scatter), then the forward per
``sync``; as :func:`~fusionopt.model.decoupled_timing.simulate_decoupled` says.

Fully sharded (MODEL.md 8.2, :func:`sharded_program`): the program of
:func:`~fusionopt.model.sharded_timing.simulate_sharded` (forward units, backward units,
optimiser) with every collective published (gate ``issued``) at its issue point; the
channel runs them in issue order. The sequence is checked against the model's timeline
(kind, unit and bytes of every collective).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from fusionopt.model.decoupled import ALL_GATHER, KINDS, REDUCE_SCATTER, DecoupledPlan
from fusionopt.model.decoupled_timing import simulate_decoupled
from fusionopt.model.problem import Problem
from fusionopt.model.sharded import ShardedPlan
from fusionopt.model.sharded_timing import group_issue_points, simulate_sharded

AT, COMPUTE, PUBLISH, WAIT, PHI = "at", "compute", "publish", "wait", "phi"
KIND_NAMES = KINDS                                         # by message_kind: 0 reduce-scatter, 1 all-gather


@dataclass(frozen=True)
class CollectiveSpec:
    """One collective of the channel.

    ``chunks`` are ``(tensor, lo, hi)`` byte ranges in buffer order (their concatenation is
    the message's unsharded bytes); the collective may start once counter ``gate`` has
    reached ``need`` (no gate: when the one before it has ended) and ``release`` seconds of
    the step have passed. ``unit`` is the plan's index of what it carries (message of its
    kind, unit, or reduce-scatter group); ``label`` names it in errors.
    """

    kind: int
    chunks: tuple[tuple[int, int, int], ...]
    gate: str | None
    need: int
    release: float
    unit: int
    label: str

    @property
    def nbytes(self) -> int:
        return sum(hi - lo for _, lo, hi in self.chunks)

    @property
    def tensors(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(t for t, _, _ in self.chunks))


@dataclass(frozen=True)
class Program:
    """A sharded step: the channel's collectives and the compute stream's operations.

    ``reduced_by[i]`` / ``gathered_by[i]``: the collective whose end is tensor ``i``'s
    ``D_i`` (its last reduce-scatter) and its gathered time (its last all-gather; for a
    fully sharded plan, its unit's forward all-gather), or -1.
    """

    pattern: str
    collectives: tuple[CollectiveSpec, ...]
    ops: tuple[tuple, ...]
    reduced_by: tuple[int, ...]
    gathered_by: tuple[int, ...]


def _whole(profile, tensors: Sequence[int]) -> tuple[tuple[int, int, int], ...]:
    sizes = profile.sizes
    return tuple((int(i), 0, int(sizes[i])) for i in tensors)


def decoupled_program(problem: Problem, plan: DecoupledPlan) -> Program:
    """The program of a decoupled all-reduce plan (MODEL.md 8.1)."""
    simulate_decoupled(problem, plan, validate=False)     # refuses an order that can never run, naming it
    profile = problem.profile
    n = profile.n
    order = [int(i) for i in profile.ready_order]
    position = {i: p for p, i in enumerate(order)}
    after = problem.decoupled.update_after_gather
    specs: list[CollectiveSpec] = []
    last = {REDUCE_SCATTER: [-1] * n, ALL_GATHER: [-1] * n}
    counts = [0, 0]
    for kind in plan.order.tolist():
        k = counts[kind]
        counts[kind] += 1
        message = plan.plan(kind).messages[k]
        chunks = tuple((int(c.tensor), int(c.lo), int(c.hi)) for c in message.chunks)
        latest = 1 + max(position[t] for t, _, _ in chunks)
        if kind == REDUCE_SCATTER:
            gate, need = "emitted", latest
        elif after:
            gate, need = None, 0           # it follows its tensors' reduce-scatters on the channel
        else:
            gate, need = "updated", latest
        specs.append(CollectiveSpec(kind, chunks, gate, need, float(message.release), k,
                                    f"{KIND_NAMES[kind]} message {k}"))
        for t, _, _ in chunks:
            last[kind][t] = len(specs) - 1

    ready = profile.ready_times
    update, forward = profile.update.tolist(), profile.forward.tolist()
    ops: list[tuple] = []
    # Backward: only the emissions that make a reduce-scatter ready are observable.
    for need in sorted({s.need for s in specs if s.gate == "emitted"}):
        ops += [(AT, float(ready[order[need - 1]])), (PUBLISH, "emitted", need)]
    ops.append((AT, float(profile.B)))
    gathers = sorted({c for c in last[ALL_GATHER] if c >= 0})
    if not after:
        # The sharded updates, in the ready order, each after its last reduce-scatter.
        wakes = {s.need for s in specs if s.gate == "updated"}
        for p, i in enumerate(order):
            if last[REDUCE_SCATTER][i] >= 0:
                ops.append((WAIT, last[REDUCE_SCATTER][i]))
            ops.append((COMPUTE, update[i]))
            if p + 1 in wakes:
                ops.append((PUBLISH, "updated", p + 1))
        if problem.sync == "layerwise":
            for i in range(n):
                if last[ALL_GATHER][i] >= 0:
                    ops.append((WAIT, last[ALL_GATHER][i]))
                ops += [(PHI, i), (COMPUTE, forward[i])]
        else:
            ops += [(WAIT, c) for c in gathers]
            for i in range(n):
                ops += [(PHI, i), (COMPUTE, forward[i])]
    elif problem.sync == "layerwise":
        # DeAR: each tensor is updated from its gathered shards just before its forward.
        for i in range(n):
            if last[ALL_GATHER][i] >= 0:
                ops.append((WAIT, last[ALL_GATHER][i]))
            ops += [(COMPUTE, update[i]), (PHI, i), (COMPUTE, forward[i])]
    else:
        ops += [(WAIT, c) for c in gathers]
        ops += [(COMPUTE, update[i]) for i in range(n)]
        for i in range(n):
            ops += [(PHI, i), (COMPUTE, forward[i])]
    ops.append((COMPUTE, float(profile.host_overhead)))
    return Program("decoupled", tuple(specs), tuple(ops), tuple(last[REDUCE_SCATTER]), tuple(last[ALL_GATHER]))


def sharded_program(problem: Problem, plan: ShardedPlan) -> Program:
    """The program of a fully sharded plan (MODEL.md 8.2), checked against the model's
    issue order: raises ``RuntimeError`` if the collective sequence differs from
    :func:`~fusionopt.model.sharded_timing.simulate_sharded`'s."""
    if problem.fully_sharded.channels != "one":
        raise ValueError("the executor runs one communicator: FullySharded(channels='two') is not executable")
    profile = problem.profile
    n, m = profile.n, plan.num_units
    bounds = plan.bounds.tolist()
    reshard = plan.reshard.tolist()
    d_f, d_b, root = plan.forward_prefetch, plan.backward_prefetch, plan.root
    forward = profile.forward.tolist()
    backward_total = np.add.reduceat(profile.backward, plan.bounds[:-1]).tolist()
    grouped = plan.reduce_bounds is not None
    unit = [list(range(bounds[j], bounds[j + 1])) for j in range(m)]
    specs: list[CollectiveSpec] = []
    ops: list[tuple] = []

    def send(kind: int, index: int, tensors: list[int], label: str) -> int:
        specs.append(CollectiveSpec(kind, _whole(profile, tensors), "issued", len(specs) + 1, 0.0, index, label))
        ops.append((PUBLISH, "issued", len(specs)))
        return len(specs) - 1

    kept = [False] * n if plan.persistent is None else plan.persistent.tolist()
    gathered = [[i for i in tensors if not kept[i]] for tensors in unit]   # what a unit's gathers carry
    unit_of = np.repeat(np.arange(m), np.diff(plan.bounds)).tolist()
    nothing = -2
    gather = [-1] * m
    # The persistent tensors, each gathered alone after the last optimiser step: first, and
    # the forward waits for them.
    alone = {i: send(ALL_GATHER, unit_of[i], [i], f"all-gather of persistent tensor {i}") for i in range(n) if kept[i]}
    ops += [(WAIT, c) for c in alone.values()]

    def gather_forward(j: int) -> None:
        if j < m and gather[j] == -1:
            if root and j == 0:
                both = gathered[0] + gathered[m - 1]
                gather[0] = gather[m - 1] = nothing if not both else send(
                    ALL_GATHER, 0, both, f"all-gather of the root (units 0 and {m - 1})")
            else:
                gather[j] = nothing if not gathered[j] else send(ALL_GATHER, j, gathered[j],
                                                                  f"all-gather of unit {j} (forward)")

    # Forward.
    for j in range(min(max(d_f, 1), m)):
        gather_forward(j)
    for j in range(m):
        if gather[j] >= 0:
            ops.append((WAIT, gather[j]))
        if d_f >= 1:
            gather_forward(j + d_f)
        for i in unit[j]:
            ops += [(PHI, i), (COMPUTE, forward[i])]
        if d_f == 0:
            gather_forward(j + 1)

    # Backward.
    regather = [-1] * m

    def gather_backward(j: int) -> None:
        regather[j] = send(ALL_GATHER, j, gathered[j], f"all-gather of unit {j} (backward)")

    again = [reshard[j] and bool(gathered[j]) for j in range(m)]
    for j in range(m - 1, max(m - max(d_b, 1), 0) - 1, -1):     # the last max(d_b, 1) units
        if again[j]:
            gather_backward(j)
    if grouped:
        group_bounds = plan.reduce_bounds.tolist()
        issuing = group_issue_points(profile, bounds, group_bounds)
        scatter = [-1] * (len(group_bounds) - 1)
    else:
        scatter = [-1] * m
    for j in range(m - 1, -1, -1):
        if regather[j] >= 0:
            ops.append((WAIT, regather[j]))
        k = j - d_b
        if d_b >= 1 and k >= 0 and again[k] and regather[k] < 0:
            gather_backward(k)
        if grouped:
            elapsed = 0.0
            for g, before in issuing[j]:              # gradients of group g all ready within this unit
                point = backward_total[j] - before
                if point > elapsed:
                    ops.append((COMPUTE, point - elapsed))
                    elapsed = point
                scatter[g] = send(REDUCE_SCATTER, g, list(range(group_bounds[g], group_bounds[g + 1])),
                                  f"reduce-scatter of group {g}")
            ops.append((COMPUTE, max(backward_total[j] - elapsed, 0.0)))
        else:
            ops.append((COMPUTE, backward_total[j]))
            if root and j == 0:
                scatter[0] = scatter[m - 1] = send(REDUCE_SCATTER, 0, unit[0] + unit[m - 1],
                                                   f"reduce-scatter of the root (units 0 and {m - 1})")
            elif not (root and j == m - 1):
                scatter[j] = send(REDUCE_SCATTER, j, unit[j], f"reduce-scatter of unit {j}")
        if d_b == 0 and j >= 1 and again[j - 1]:
            gather_backward(j - 1)

    # The optimiser after every reduce-scatter, then the step's other parts.
    ops += [(WAIT, c) for c in sorted(set(scatter))]
    ops.append((COMPUTE, float(profile.U + profile.update_lump + profile.host_overhead)))

    _check_against_model(problem, plan, specs)
    group_of = (np.repeat(np.arange(len(scatter)), np.diff(plan.reduce_bounds)) if grouped
                else np.repeat(np.arange(m), np.diff(plan.bounds))).tolist()
    return Program("fully-sharded", tuple(specs), tuple(ops), tuple(scatter[group_of[i]] for i in range(n)),
                   tuple(alone[i] if kept[i] else gather[unit_of[i]] for i in range(n)))


def _check_against_model(problem: Problem, plan: ShardedPlan, specs: list[CollectiveSpec]) -> None:
    timeline = simulate_sharded(problem, plan, validate=False)
    mine = [(s.kind, s.unit, s.nbytes) for s in specs]
    model = list(zip(timeline.message_kind.tolist(), timeline.message_unit.tolist(), timeline.message_bytes.tolist()))
    if mine != model:
        first = next((c for c, (a, b) in enumerate(zip(mine, model)) if a != b), min(len(mine), len(model)))
        raise RuntimeError(f"the executor's collective sequence differs from the model's at collective {first} "
                           f"(executor {mine[first:first + 1]}, model {model[first:first + 1]}; "
                           f"{len(mine)} against {len(model)} collectives)")


def build_program(problem: Problem, plan: DecoupledPlan | ShardedPlan) -> Program:
    """The :class:`Program` of ``plan`` on a decoupled or fully sharded ``problem``."""
    if problem.fully_sharded is not None and isinstance(plan, ShardedPlan):
        return sharded_program(problem, plan)
    if problem.decoupled is not None and isinstance(plan, DecoupledPlan):
        return decoupled_program(problem, plan)
    raise ValueError(f"a {problem.pattern} problem does not take a {type(plan).__name__}")


def replay(program: Program, durations: Sequence[float]) -> dict[str, object]:
    """Run ``program`` on the model's clock, collective ``c`` lasting ``durations[c]``.

    The channel runs the collectives in order, each from ``max(end of the one before, its
    release, when its gate was published)``. Returns the step's ``iteration_time``, the
    collectives' ``start`` and ``end`` and the tensors' ``forward_start``: for a program
    built from a plan, :func:`~fusionopt.model.simulate`'s timeline of the same plan (the
    check that the executor follows the model).
    """
    specs = program.collectives
    published: dict[str, list[tuple[int, float]]] = {}
    start: list[float] = []
    end: list[float] = []

    def run_until(c: int) -> None:
        while len(end) <= c:
            spec = specs[len(end)]
            begin = max(end[-1] if end else -math.inf, spec.release)
            if spec.gate is not None:
                times = [t for value, t in published.get(spec.gate, []) if value >= spec.need]
                if not times:
                    raise RuntimeError(f"{spec.label} waits for {spec.gate} {spec.need}, which the program never "
                                       "publishes before it needs the collective")
                begin = max(begin, times[0])
            start.append(begin)
            end.append(begin + float(durations[len(end)]))

    clock = 0.0
    phi = [math.nan] * len(program.reduced_by)
    for op in program.ops:
        code = op[0]
        if code == AT:
            clock = max(clock, op[1])
        elif code == COMPUTE:
            clock += op[1]
        elif code == PUBLISH:
            published.setdefault(op[1], []).append((op[2], clock))
        elif code == WAIT:
            run_until(op[1])
            clock = max(clock, end[op[1]])
        elif code == PHI:
            phi[op[1]] = clock
    if specs:
        run_until(len(specs) - 1)
    return {"iteration_time": clock, "start": start, "end": end, "forward_start": phi}


__all__ = ["AT", "COMPUTE", "PUBLISH", "WAIT", "PHI", "CollectiveSpec", "Program", "build_program",
           "decoupled_program", "replay", "sharded_program"]
