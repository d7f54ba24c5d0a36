"""The parameter-server step as a step program (MODEL.md section 6, "Parameter server"): the
model of :func:`~fusionopt.model.simulate_ps` stated in the engine the other
patterns run on (:mod:`fusionopt.model._step_program`).

The program of a :class:`~fusionopt.model.PSPlan`:

* **collectives**: the push messages in push-plan order (kind :data:`PUSH`, channel 0), each
  gated on the backward having run the compute piece that makes its last chunk ready
  (counter ``"pieces"``), then the pull messages in pull-plan order (kind :data:`PULL`,
  channel 1), each after the pushes that share a byte with it (gate ``CHANNEL`` on the
  latest of them) and their servers' update (``program.after``: ``(push, seconds)``);
* **ops**: the backward, tensors ``n-1 .. 0``, a piece per tensor (with partitioned compute,
  a piece per push chunk of a tensor sent in several, each ``b_i (hi - lo) / s_i + delta``),
  each counted when it ends; then the forward under the sync rule, waiting for the pulls
  (with partitioned compute and layerwise sync, a piece per pull chunk, each after its own
  pull);
* **the channel policy** (:class:`PushPull`): the pushes one at a time in order on the push
  channel, the servers' update of each (``U_k = end_k + update_overhead + update_per_byte
  S_k``), and the pulls one at a time in order on the pull channel, each once the pushes
  that share a byte with it are updated.

:func:`simulate_ps_program` runs it and gives :func:`fusionopt.model.simulate`'s timeline to
the last bit (``tests/model`` pins them together), so ``simulate_ps`` is a fast path of the
engine. The executor runs the same program on two channels of real collectives
(:mod:`fusionopt.executor._runner`).

Examples
--------
``simulate_ps``'s own example: pushes t3 1 -> 4, t2 4 -> 6, t1 6 -> 11 ms; pulls in forward
order 11 -> 16, 16 -> 18, 18 -> 21; forward t3 21 -> 22 ms.

>>> from fusionopt.cost import AlphaBeta

>>> from fusionopt.model import Problem, Profile, ParameterServer, PSPlan
>>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
>>> problem = Problem(profile, pattern=ParameterServer(AlphaBeta(1e-3, 1e-9)), sync="layerwise")
>>> t = simulate_ps_program(problem, PSPlan.from_groups(profile, push=[[2], [1], [0]], pull=[[0], [1], [2]]))
>>> (t.pull_end * 1e3).round(9).tolist(), round(t.iteration_time * 1e3, 9)
([16.0, 18.0, 21.0], 22.0)
"""

from __future__ import annotations

import math

import numpy as np

from fusionopt.model._problem import Problem
from fusionopt.model._ps_plan import PSPlan
from fusionopt.model._ps_timing import channel_times, check_ps_inputs, pieces_by_tensor, pull_gates, pull_sources
from fusionopt.model._step_program import CHANNEL, COMPUTE, FORWARD, MARK, PUBLISH, WAIT, Program, run_program
from fusionopt.model._timeline import Timeline, read_only

PUSH, PULL = 3, 4
"""The kinds of a push and a pull message in a program."""
PIECES = "pieces"
"""The gate the backward counts its compute pieces on."""


def ps_program(problem: Problem, plan: PSPlan) -> Program:
    """The :class:`~fusionopt.model.Program` of ``plan`` (validated by the
    caller) on a parameter-server ``problem`` (module docstring). ``program.roles`` holds
    ``"pushes"`` and ``"pulls"`` (their collectives' indices), ``"push_pieces"`` (per tensor,
    its push chunks) and ``"compute_overhead"`` (the deltas paid, seconds)."""
    check_ps_inputs(problem, plan)
    profile, ps = problem.profile, problem.pattern
    n = profile.n
    sizes = profile.sizes.tolist()
    backward, forward, update = profile.backward.tolist(), profile.forward.tolist(), profile.update.tolist()
    split, delta = ps.partition_compute, ps.delta
    program = Program("parameter-server", sizes)
    ops = program.ops
    overhead = 0.0

    # The backward, piece by piece; each push needs the count of the piece its last chunk ends.
    push_pieces = pieces_by_tensor(plan.push, n)
    need = [0] * plan.push.num_messages
    count = 0
    for i in range(n - 1, -1, -1):
        chunks = push_pieces[i]
        if split and len(chunks) > 1:
            for k, lo, hi in chunks:
                ops.append((COMPUTE, backward[i] * (hi - lo) / sizes[i] + delta))
                overhead += delta
                count += 1
                ops.append((PUBLISH, PIECES, count))
                need[k] = count
        else:
            ops.append((COMPUTE, backward[i]))
            count += 1
            ops.append((PUBLISH, PIECES, count))
            for k, _, _ in chunks:
                need[k] = count
    pushes = [program.collective(PUSH, k, int(plan.push.message_bytes[k]), PIECES, need[k], 0.0,
                                 ("push message {}", k), chunks=tuple((c.tensor, c.lo, c.hi) for c in message.chunks))
              for k, message in enumerate(plan.push.messages)]
    # The pulls on a channel of their own, each after the servers' update of every push that
    # shares a byte with it (the pushes end in order: the latest of them ends last).
    server = np.atleast_1d(ps.server_update(plan.push.message_bytes)).tolist()
    sources = pull_sources(plan, push_pieces)
    pulls = []
    for m, message in enumerate(plan.pull.messages):
        after = sorted(set(sources[m]))
        c = program.collective(PULL, m, int(plan.pull.message_bytes[m]), CHANNEL if after else None,
                               pushes[after[-1]] + 1 if after else 0, 0.0, ("pull message {}", m),
                               chunks=tuple((c.tensor, c.lo, c.hi) for c in message.chunks), channel=1)
        program.after[c] = tuple((pushes[k], server[k]) for k in after)
        pulls.append(c)
    program.gathers_to_tensors = True

    # The forward, as the sync rule says (MODEL.md section 4), on the pulls.
    pull_pieces = pieces_by_tensor(plan.pull, n)
    if problem.sync == "barrier":
        ops.append((WAIT, pulls[-1]))                 # one pull channel in order: the last ends last
        for part in ("post_backward", "update_lump"):
            if getattr(profile, part):
                ops.append((COMPUTE, getattr(profile, part)))
        ops.append((COMPUTE, profile.U))
        for i in range(n):
            ops += [(MARK, FORWARD, i), (COMPUTE, forward[i])]
    else:
        for i in range(n):
            chunks = pull_pieces[i]
            if split and len(chunks) > 1:
                for q, (m, lo, hi) in enumerate(chunks):
                    ops.append((WAIT, pulls[m]))
                    if q == 0:
                        ops += [(COMPUTE, update[i]), (MARK, FORWARD, i)]
                    ops.append((COMPUTE, forward[i] * (hi - lo) / sizes[i] + delta))
                    overhead += delta
            else:
                ops += [(WAIT, pulls[max(m for m, _, _ in chunks)]), (COMPUTE, update[i]), (MARK, FORWARD, i),
                        (COMPUTE, forward[i])]
    if profile.host_overhead:
        ops.append((COMPUTE, profile.host_overhead))
    program.forward_mark = np.arange(n)
    program.forward_offset = np.zeros(n)
    program.reduced_by = tuple(pulls[max(m for m, _, _ in pull_pieces[i])] for i in range(n))
    program.gathered_by = (-1,) * n
    program.roles = {"pushes": pushes, "pulls": pulls, "push_pieces": push_pieces, "compute_overhead": overhead}
    return program


class PushPull:
    """The parameter server's channel policy (module docstring): pushes timed in order as the
    backward counts its pieces, then the servers' updates, then the pulls in order."""

    def __init__(self, problem: Problem, plan: PSPlan, program: Program) -> None:
        ps = problem.pattern
        self.plan, self.program = plan, program
        self.pushes, self.pulls = program.roles["pushes"], program.roles["pulls"]
        self.push_cost = np.asarray(problem.cost(plan.push.message_bytes), dtype=np.float64).tolist()
        self.pull_cost = np.asarray(ps.pull(plan.pull.message_bytes), dtype=np.float64).tolist()
        self.update_seconds = ps.server_update(plan.push.message_bytes)
        self.counted: list[float] = []                # when the backward counted each piece
        self.push_ready: list[float] = []
        self.push_start: list[float] = []
        self.push_end: list[float] = []
        self.updated: list[float] = []
        self.gate: list[float] = []
        self.pull_start: list[float] = []
        self.pull_end: list[float] = []

    def publish(self, gate: str, value: int, time: float) -> None:
        assert gate == PIECES and value == len(self.counted) + 1, "the backward counts its pieces in order"
        self.counted.append(time)

    def ended(self, c: int) -> float:
        if not self.push_end:
            self._time_all()
        return self.pull_end[c - len(self.pushes)] if c >= len(self.pushes) else self.push_end[c]

    def finish(self) -> None:
        if not self.push_end:
            self._time_all()

    def _time_all(self) -> None:
        """Both channels, once every piece is counted (nothing is waited for before the
        backward's end: its pieces never wait)."""
        needs = [self.program.meta[k][1] for k in self.pushes]
        if len(self.counted) < max(needs, default=0):
            raise RuntimeError("a push was waited for before the backward made it ready")
        self.push_ready = [self.counted[need - 1] if need else -math.inf for need in needs]
        self.push_start, self.push_end = channel_times(self.push_ready, self.push_cost)
        self.updated = (np.array(self.push_end) + self.update_seconds).tolist()
        self.gate = pull_gates(self.plan, self.program.roles["push_pieces"], self.updated)
        self.pull_start, self.pull_end = channel_times(self.gate, self.pull_cost)


def simulate_ps_program(problem: Problem, plan: PSPlan, *, validate: bool = True) -> Timeline:
    """The :class:`~fusionopt.model.Timeline` of ``plan`` on a parameter-server
    ``problem``, from its step program run on the :class:`PushPull` policy: ``simulate``'s,
    to the bit."""
    if validate:
        plan.validate(problem.profile)
    program = ps_program(problem, plan)
    channel = PushPull(problem, plan, program)
    clock, marks = run_program(program, channel)
    reduced = [channel.pull_end[c - len(channel.pushes)] for c in program.reduced_by]
    return Timeline(
        sync=problem.sync,
        iteration_time=float(clock),
        compute_time=problem.profile.compute_time,
        message_ready=read_only(channel.push_ready),
        message_start=read_only(channel.push_start),
        message_end=read_only(channel.push_end),
        message_bytes=read_only(plan.push.message_bytes, np.int64),
        reduced=read_only(reduced),
        forward_start=read_only(program.forward_start(marks)),
        pull_ready=read_only(channel.gate),
        pull_start=read_only(channel.pull_start),
        pull_end=read_only(channel.pull_end),
        pull_bytes=read_only(plan.pull.message_bytes, np.int64),
        server_updated=read_only(channel.updated),
        compute_overhead=float(program.roles["compute_overhead"]),
    )


__all__ = ["PIECES", "PULL", "PUSH", "PushPull", "ps_program", "simulate_ps_program"]
