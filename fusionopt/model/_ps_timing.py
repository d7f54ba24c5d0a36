"""Timing of parameter-server plans (MODEL.md section 6): the simulator and a fast evaluator.

:func:`simulate_ps` is what :func:`fusionopt.model.simulate` runs for a problem with
``pattern=ParameterServer(...)``; its docstring is the PS model's statement.
:func:`offsets_iteration_time` computes the same ``T`` for the plans of
:meth:`~fusionopt.model.PSPlan.from_offsets` without building them (the inner loop of
searches; tests pin it to the simulator). The bound on every PS plan is
:func:`fusionopt.model.ps_lower_bound`.
"""

from __future__ import annotations

import bisect
from typing import Iterable

import numpy as np

from fusionopt.model._plan import Plan
from fusionopt.model._pattern import require_pattern
from fusionopt.model._problem import Problem
from fusionopt.model._ps_plan import PSPlan, check_offsets, stream_offsets
from fusionopt.model._timeline import ComputePiece, Timeline, read_only

__all__ = ["simulate_ps", "offsets_iteration_time", "require_ps", "pieces_by_tensor", "pull_gates", "pull_sources", "channel_times"]


def require_ps(problem: Problem, what: str) -> None:
    """Raise ``ValueError`` unless ``problem`` has a parameter server: ``what`` needs one."""
    require_pattern(problem, "ps", what)


def check_ps_inputs(problem: Problem, plan: PSPlan) -> None:
    """Raise ``ValueError`` unless ``plan`` is a PS plan for ``problem``'s parameter server."""
    require_ps(problem, "simulate_ps")
    problem.pattern.require_plan(plan)


def pieces_by_tensor(plan: Plan, n: int) -> list[list[tuple[int, int, int]]]:
    """Per tensor, its chunks in plan order as ``(message, lo, hi)``."""
    pieces: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
    for k, message in enumerate(plan.messages):
        for c in message.chunks:
            pieces[c.tensor].append((k, c.lo, c.hi))
    return pieces


def simulate_ps(problem: Problem, plan: PSPlan, *, validate: bool = True, pieces: list | None = None) -> Timeline:
    """Simulate a parameter-server plan (MODEL.md section 6, "Parameter server").

    The model, times in seconds from the start of the backward, sizes in bytes:

    1. **Backward.** The compute stream runs the backward of tensors ``n-1 .. 0``. Without
       partitioned compute, every chunk of tensor ``i`` is ready at ``r_i``. With
       ``ps.partition_compute``, a tensor the push plan sends in ``m >= 2`` chunks has its
       backward split into ``m`` pieces **aligned with its push chunks**: one piece per
       chunk, run in the order the push plan sends the chunks (message order, then chunk
       order inside a message), the piece of chunk ``[lo, hi)`` costing
       ``b_i (hi - lo) / s_i + delta``; the chunk is ready when its piece ends. A tensor
       sent in one chunk is one piece of ``b_i`` (no overhead).
    2. **Push channel.** Push messages run one at a time in push-plan order:
       ``start_k = max(R_k, end_{k-1})``, ``end_k = start_k + c_push(S_k)``, ``R_k`` the
       latest ready time of its chunks (MODEL.md section 3).
    3. **Server update.** The servers update a push message's bytes once it has arrived:
       they are up to date at ``U_k = end_k + update_overhead + update_per_byte S_k``
       (updates of different messages may overlap: the servers' cores work in parallel).
    4. **Pull channel.** Pull messages run one at a time in pull-plan order, each gated by
       the server updates of every push message that shares a byte with it:
       ``G_m = max U_k`` over those, ``start'_m = max(G_m, end'_{m-1})``,
       ``end'_m = start'_m + c_pull(S'_m)``. Pull chunks need not match push chunks. A
       tensor is back (``reduced``, ``C_i``) when its last pull ends.
    5. **Forward** (``sync`` applies to the pulls, MODEL.md section 4). ``barrier``: the
       updates ``U`` and forwards ``F`` run after the backward and every pull. ``layerwise``:
       tensor ``i``'s update ``u_i`` and forward run after tensor ``i - 1``'s forward and its
       own pulls. With ``ps.partition_compute`` and layerwise sync, a tensor the pull plan
       sends in ``m >= 2`` chunks has its forward split into pieces **aligned with its pull
       chunks**: one per chunk, in pull-plan order, the piece of ``[lo, hi)`` costing
       ``f_i (hi - lo) / s_i + delta`` and waiting only for the end of its own chunk's pull
       message; ``u_i`` runs just before the first piece, under the same gate. (Under
       barrier sync every pull is done before the forward starts, so the forward is never
       split.) ``T`` is the end of the last forward.

    The backward pieces follow the push chunks and the forward pieces the pull chunks,
    each independently of the other direction. With pull costs of zero, no server update,
    no partitioned compute and the pull plan equal to the push plan
    (:meth:`PSPlan.mirror`), the timeline is the all-reduce simulator's under the push cost.

    Parameters
    ----------
    validate : bool
        Check first that both plans send every byte exactly once.
    pieces : list, optional
        If given, one :class:`~fusionopt.model.ComputePiece` per compute piece is
        appended to it in stream order (backward pieces, then updates and forward pieces),
        with its start and end in seconds and, for a piece of a split tensor, the push or
        pull message of its chunk. Under barrier sync the updates run back to back from
        ``max(backward end, last pull end)`` and the last one ends where the forward
        starts. Recording changes no number of the timeline.

    Returns
    -------
    Timeline
        ``message_*`` the push channel, ``pull_*`` the pull channel, ``server_updated`` the
        ``U_k``, ``reduced`` the ``C_i``, ``forward_start`` each tensor's first forward
        piece (after ``u_i``), ``compute_overhead`` the deltas paid.

    Examples
    --------
    MODEL.md section 5's profile, ``alpha = 1 ms``, ``beta = 1 ns/B`` both ways, layer by
    layer with layerwise sync. Pushes: t3 1 -> 4, t2 4 -> 6, t1 6 -> 11 ms. Pulls in
    forward order: t1 11 -> 16, t2 16 -> 18, t3 18 -> 21. Forward: t1 16 -> 17, t2 18 -> 19,
    t3 21 -> 22 ms.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Problem, Profile, simulate, ParameterServer, PSPlan
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, pattern=ParameterServer(AlphaBeta(1e-3, 1e-9)), sync="layerwise")
    >>> t = simulate(problem, PSPlan.from_groups(profile, push=[[2], [1], [0]], pull=[[0], [1], [2]]))
    >>> (t.pull_end * 1e3).round(9).tolist(), round(t.iteration_time * 1e3, 9)
    ([16.0, 18.0, 21.0], 22.0)
    """
    check_ps_inputs(problem, plan)
    profile, ps = problem.profile, problem.pattern
    if validate:
        plan.validate(profile)
    n = profile.n
    sizes = profile.sizes.tolist()
    backward, forward, update = profile.backward.tolist(), profile.forward.tolist(), profile.update.tolist()
    split, delta = ps.partition_compute, ps.delta
    overhead = 0.0

    # 1. Backward, piece by piece.
    push_pieces = pieces_by_tensor(plan.push, n)
    n_push = plan.push.num_messages
    push_ready = [-np.inf] * n_push
    stream: list[tuple] = []      # the compute pieces as ComputePiece fields, in order
    clock = 0.0
    for i in range(n - 1, -1, -1):
        chunks = push_pieces[i]
        if split and len(chunks) > 1:
            for k, lo, hi in chunks:
                begin = clock
                clock += backward[i] * (hi - lo) / sizes[i] + delta
                overhead += delta
                push_ready[k] = max(push_ready[k], clock)
                stream.append(("backward", i, begin, clock, k))
        else:
            begin = clock
            clock += backward[i]
            for k, _, _ in chunks:
                push_ready[k] = max(push_ready[k], clock)
            stream.append(("backward", i, begin, clock))
    backward_end = clock

    # 2. Push channel; 3. server updates.
    push_bytes = plan.push.message_bytes
    push_cost = np.asarray(problem.cost(push_bytes), dtype=np.float64).tolist()
    push_start, push_end = channel_times(push_ready, push_cost)
    updated = (np.array(push_end) + ps.server_update(push_bytes)).tolist()

    # 4. Pull channel: each pull waits for the pushes its bytes came in.
    gate = pull_gates(plan, push_pieces, updated)
    pull_bytes = plan.pull.message_bytes
    pull_cost = np.asarray(ps.pull(pull_bytes), dtype=np.float64).tolist()
    pull_start, pull_end = channel_times(gate, pull_cost)
    pull_pieces = pieces_by_tensor(plan.pull, n)
    reduced = [max(pull_end[m] for m, _, _ in pull_pieces[i]) for i in range(n)]

    # 5. Forward.
    phi = [0.0] * n
    if problem.sync == "barrier":
        begin = max(backward_end, max(pull_end))
        for part in ("post_backward", "update_lump"):     # whole-step work (MODEL.md section 4)
            if getattr(profile, part):
                stream.append((part, -1, begin, begin + getattr(profile, part)))
                begin += getattr(profile, part)
        clock = begin + profile.U
        if pieces is not None:
            # The updates back to back; the last ends where the forward starts.
            ends = np.minimum(begin + np.cumsum(update), clock).tolist()
            ends[-1] = clock
            for i in range(n):
                stream.append(("update", i, begin, ends[i]))
                begin = ends[i]
        for i in range(n):
            phi[i] = clock
            clock += forward[i]
            stream.append(("forward", i, phi[i], clock))
    else:
        clock = backward_end
        for i in range(n):
            chunks = pull_pieces[i]
            if split and len(chunks) > 1:
                for q, (m, lo, hi) in enumerate(chunks):
                    clock = max(clock, pull_end[m])
                    if q == 0:
                        begin = clock
                        clock += update[i]
                        phi[i] = clock
                        stream.append(("update", i, begin, clock))
                    begin = clock
                    clock += forward[i] * (hi - lo) / sizes[i] + delta
                    overhead += delta
                    stream.append(("forward", i, begin, clock, m))
            else:
                begin = max(clock, reduced[i])
                clock = begin + update[i]
                phi[i] = clock
                clock += forward[i]
                stream.append(("update", i, begin, phi[i]))
                stream.append(("forward", i, phi[i], clock))
    if profile.host_overhead:
        stream.append(("host_overhead", -1, clock, clock + profile.host_overhead))
        clock += profile.host_overhead

    if pieces is not None:
        pieces.extend(ComputePiece(*fields) for fields in stream)

    for array in (push_bytes, pull_bytes):
        array.setflags(write=False)
    return Timeline(
        sync=problem.sync,
        iteration_time=float(clock),
        compute_time=profile.compute_time,
        message_ready=read_only(push_ready),
        message_start=read_only(push_start),
        message_end=read_only(push_end),
        message_bytes=push_bytes,
        reduced=read_only(reduced),
        forward_start=read_only(phi),
        pull_ready=read_only(gate),
        pull_start=read_only(pull_start),
        pull_end=read_only(pull_end),
        pull_bytes=pull_bytes,
        server_updated=read_only(updated),
        compute_overhead=float(overhead),
    )


def pull_sources(plan: PSPlan, push_pieces: list[list[tuple[int, int, int]]]) -> list[list[int]]:
    """Per pull message ``m``, the push messages that share a byte with it, in the order
    found (``push_pieces``: :func:`pieces_by_tensor` of the push plan): what its gate waits for."""
    intervals = [sorted((lo, hi, k) for k, lo, hi in chunks) for chunks in push_pieces]
    starts = [[lo for lo, _, _ in tensor] for tensor in intervals]
    sources: list[list[int]] = []
    for message in plan.pull.messages:
        mine = []
        for c in message.chunks:
            tensor = intervals[c.tensor]
            j = max(bisect.bisect_right(starts[c.tensor], c.lo) - 1, 0)
            while j < len(tensor) and tensor[j][0] < c.hi:
                if tensor[j][1] > c.lo:
                    mine.append(tensor[j][2])
                j += 1
        sources.append(mine)
    return sources


def pull_gates(plan: PSPlan, push_pieces: list[list[tuple[int, int, int]]], updated: list[float]) -> list[float]:
    """``G_m``, seconds: the latest server update ``updated[k]`` of the push messages that
    share a byte with pull message ``m``: the maximum over :func:`pull_sources`, folded into
    the same walk (the simulator's inner loop; tests pin the two together)."""
    intervals = [sorted((lo, hi, k) for k, lo, hi in chunks) for chunks in push_pieces]
    starts = [[lo for lo, _, _ in tensor] for tensor in intervals]
    gate = [-np.inf] * plan.pull.num_messages
    for m, message in enumerate(plan.pull.messages):
        for c in message.chunks:
            tensor = intervals[c.tensor]
            j = max(bisect.bisect_right(starts[c.tensor], c.lo) - 1, 0)
            while j < len(tensor) and tensor[j][0] < c.hi:
                if tensor[j][1] > c.lo:
                    gate[m] = max(gate[m], updated[tensor[j][2]])
                j += 1
    return gate


def channel_times(ready: list[float], cost: list[float]) -> tuple[list[float], list[float]]:
    """One message at a time in order: ``start_k = max(ready_k, end_{k-1})``, seconds."""
    start, end = [], []
    free = -np.inf
    for r, c in zip(ready, cost):
        s = max(r, free)
        free = s + c
        start.append(s)
        end.append(free)
    return start, end


# ---------------------------------------------------------------------------- fast path
def offsets_iteration_time(problem: Problem, push: Iterable[int] = (), pull: Iterable[int] = ()) -> float:
    """``T`` in seconds of ``PSPlan.from_offsets(profile, push, pull)``, without building it.

    Equal to ``simulate(problem, PSPlan.from_offsets(problem.profile, push, pull)).iteration_time``
    (tests pin the two together), in ``O((n + m) log m)`` for ``m`` messages: the compute
    pieces come from the union of the cut offsets and the tensor boundaries of each byte
    stream (:func:`~fusionopt.model.stream_offsets`), the pull gates from range maxima
    of the server-update times, and only the three max-plus recursions (push channel, pull
    channel, forward) are loops. Use it as the inner loop of searches over partitions.

    Parameters
    ----------
    push, pull : iterable of int
        Strictly increasing byte offsets inside ``(0, total bytes)`` of the push stream
        (backward order) and the pull stream (forward order).

    Examples
    --------
    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Problem, Profile, ParameterServer
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, pattern=ParameterServer(AlphaBeta(1e-3, 1e-9)), sync="layerwise")
    >>> round(offsets_iteration_time(problem, push=[2_000_000, 3_000_000],
    ...                              pull=[4_000_000, 5_000_000]) * 1e3, 9)    # layer by layer
    22.0
    >>> round(offsets_iteration_time(problem) * 1e3, 9)     # one push, one pull: 6 + 8 + 8 + 3
    25.0
    """
    require_ps(problem, "offsets_iteration_time")
    profile, ps = problem.profile, problem.pattern
    n = profile.n
    sizes = profile.sizes
    total = profile.total_bytes
    push_bounds = np.append(check_offsets(profile, push, "push"), total)
    pull_bounds = np.append(check_offsets(profile, pull, "pull"), total)
    split, delta = ps.partition_compute, ps.delta

    # Backward over the push stream: tensors n-1 .. 0.
    push_starts = stream_offsets(profile, "push")
    stream_start = push_starts[::-1]                          # by stream position
    stream_end = stream_start + sizes[::-1]
    backward = profile.backward[::-1]
    if split:
        ends = np.union1d(stream_end, push_bounds)            # piece ends, ascending
        begins = np.concatenate(([0], ends[:-1]))
        owner = np.searchsorted(stream_end, ends, side="left")   # stream position of each piece
        pieces = np.bincount(owner, minlength=n)
        is_split = pieces[owner] > 1
        work = np.where(is_split, backward[owner] * (ends - begins) / sizes[::-1][owner] + delta, backward[owner])
        piece_done = np.cumsum(work)
        push_ready = piece_done[np.searchsorted(ends, push_bounds)]
        backward_end = float(piece_done[-1])
    else:
        ready_by_position = np.cumsum(backward)
        push_ready = ready_by_position[np.searchsorted(stream_end, push_bounds, side="left")]
        backward_end = profile.B
    push_bytes = np.diff(push_bounds, prepend=0)
    _, push_end = channel_times(push_ready.tolist(), np.asarray(problem.cost(push_bytes), dtype=np.float64).tolist())
    updated = np.array(push_end) + ps.server_update(push_bytes)

    # Pull gates: for each forward piece, the push messages its bytes came in.
    pull_starts = stream_offsets(profile, "pull")
    pull_stream_end = pull_starts + sizes
    ends = np.union1d(pull_stream_end, pull_bounds)
    begins = np.concatenate(([0], ends[:-1]))
    owner = np.searchsorted(pull_stream_end, ends, side="left")           # tensor of each piece
    lo = push_starts[owner] + (begins - pull_starts[owner])                # on the push stream
    hi = lo + (ends - begins)
    first = np.searchsorted(push_bounds, lo, side="right")
    last = np.searchsorted(push_bounds, hi - 1, side="right")
    piece_gate = range_max(updated, first, last)
    message_of_piece = np.searchsorted(pull_bounds, ends, side="left")
    gate = np.maximum.reduceat(piece_gate, np.searchsorted(message_of_piece, np.arange(len(pull_bounds))))
    pull_bytes = np.diff(pull_bounds, prepend=0)
    _, pull_end = channel_times(gate.tolist(), np.asarray(ps.pull(pull_bytes), dtype=np.float64).tolist())

    forward, update = profile.forward.tolist(), profile.update.tolist()
    if problem.sync == "barrier":
        clock = max(backward_end, pull_end[-1]) + profile.U + profile.W
        for i in range(n):
            clock += forward[i]
        return clock
    pieces = np.bincount(owner, minlength=n)
    last_message = np.searchsorted(pull_bounds, pull_stream_end, side="left").tolist()
    clock = backward_end
    if not split:
        for i in range(n):
            clock = max(clock, pull_end[last_message[i]]) + update[i]
            clock += forward[i]
        return clock + profile.W      # layerwise: W is the host's share (MODEL.md section 4)
    sizes_list = sizes.tolist()
    piece = 0
    for i in range(n):
        count = int(pieces[i])
        if count == 1:
            clock = max(clock, pull_end[last_message[i]]) + update[i]
            clock += forward[i]
            piece += 1
            continue
        for q in range(count):
            clock = max(clock, pull_end[int(message_of_piece[piece])])
            if q == 0:
                clock += update[i]
            clock += forward[i] * int(ends[piece] - begins[piece]) / sizes_list[i] + delta
            piece += 1
    return clock + profile.W


def range_max(values: np.ndarray, first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """``max(values[first[j]:last[j] + 1])`` for each ``j``, by a sparse table."""
    table = [values]
    width = 1
    longest = int((last - first).max()) + 1 if len(first) else 1
    while 2 * width <= longest:
        previous = table[-1]
        table.append(np.maximum(previous[:-width], previous[width:]))
        width *= 2
    span = last - first + 1
    level = np.floor(np.log2(span)).astype(np.int64)
    out = np.empty(len(first))
    for k, row in enumerate(table):
        chosen = level == k
        if chosen.any():
            a, b = first[chosen], last[chosen] - (1 << k) + 1
            out[chosen] = np.maximum(row[a], row[b])
    return out
