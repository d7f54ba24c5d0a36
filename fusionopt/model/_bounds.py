"""Lower bounds on the iteration time (MODEL.md section 7).

Each bound holds for every plan of its ``space``: ``"any"`` (fusion or partition plans,
chunks of whole bytes, any order) or ``"fusion"`` (whole tensors, contiguous in backward
order, backward order). :func:`best_bound` is what every ``Result`` carries;
:func:`ps_lower_bound` bounds every plan of a parameter-server problem, and
:func:`decoupled_lower_bound` every plan of a decoupled all-reduce (MODEL.md section 8.1).
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from fusionopt.model._cost import CommCost
from fusionopt.model._decoupled_timing import require_decoupled
from fusionopt.model._encoding import wire_link
from fusionopt.model._fusion_dp import optimal_fusion
from fusionopt.model._problem import Problem
from fusionopt.model._ps_timing import require_ps
from fusionopt.model._sharded_timing import require_sharded, whole_bytes

SPACES = ("any", "fusion")
_FUSION_OPTIMA: "weakref.WeakKeyDictionary[Problem, float]" = weakref.WeakKeyDictionary()


def compute_bound(problem: Problem) -> float:
    """``B + F + U + W`` in seconds: no plan finishes a step before its compute does.

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> round(compute_bound(Problem(profile, AlphaBeta(1e-3, 1e-9))), 9)
    0.009
    """
    return problem.profile.compute_time


def last_message_bound(problem: Problem) -> float:
    """``B + c(1) + U + F + W``: tensor 0's last chunk is ready at ``B`` and its message carries
    at least one byte; its update and every forward follow it in both sync modes.

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> round(last_message_bound(Problem(profile, AlphaBeta(1e-3, 1e-9))) * 1e3, 6)
    10.000001

    With a :attr:`~fusionopt.model.Problem.compressor`, that message may go through it
    instead, at no less than its :meth:`~fusionopt.model.Compressor.least_seconds`.
    """
    least = float(problem.cost(1))
    if problem.compressor is not None:
        least = min(least, problem.compressor.least_seconds(wire_link(problem.cost)))
    return problem.profile.compute_time + least


def channel_bound(problem: Problem) -> float | None:
    """Every byte crosses the channel after the first gradient is ready, in messages whose
    costs add up to at least :func:`least_channel_time` of the total bytes (``c(total bytes)``
    for an affine cost, ``alpha >= 0``), and at least the update and forward of the tensor
    reduced last follow the end of the channel. ``None`` with a compressor, which may send
    bytes for less.
    """
    if problem.compressor is not None:
        return None
    profile = problem.profile
    channel_end = float(profile.ready_times.min()) + least_channel_time(problem.cost, profile.total_bytes)
    if problem.sync == "barrier":
        return channel_end + profile.U + profile.F + profile.W
    # The tensor i reduced last is then updated and runs forward i .. n-1.
    return channel_end + float(layerwise_tails(problem).min())


def layerwise_tails(problem: Problem) -> np.ndarray:
    """``tail_i = u_i + f_i + sum_{k > i} (u_k + f_k) + W`` seconds, forward order: what follows
    tensor ``i``'s reduction on the compute stream under layerwise sync (whose ``W`` is the
    host's share, MODEL.md section 4)."""
    profile = problem.profile
    return (profile.update + profile.forward)[::-1].cumsum()[::-1] + profile.W


def fluid_bound(problem: Problem) -> float | None:
    """The fluid relaxation of MODEL.md section 7, a bound for every plan under an affine
    cost in both sync modes (barrier is never faster than layerwise for the same plan).

    Relax ``alpha`` to 0 and let the channel serve bytes preemptively at ``1 / beta``
    bytes per second, smallest forward index first, each tensor's bytes arriving at its
    ready time. Layerwise ``T = max(B + tail_0, max_i D_i + tail_i)`` where ``D_i`` is the
    time tensors ``0..i`` are all reduced and ``tail_i`` (decreasing in ``i``) the update
    and forward work after tensor ``i``'s reduction; serving the smallest index first makes
    every ``D_i`` as early as any schedule can, so the fluid ``T`` is a lower bound.

    ``None`` for costs not known to be affine, and with a compressor (which may send bytes for
    less than ``beta`` each).

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> round(fluid_bound(Problem(profile, AlphaBeta(3e-3, 1e-9), sync="layerwise")) * 1e3, 9)
    13.0
    """
    affine = problem.cost.affine
    if affine is None or problem.compressor is not None:
        return None
    profile = problem.profile
    tails = layerwise_tails(problem)
    return float(max(profile.B + tails[0], float((fluid_prefix_done(profile, affine[1]) + tails).max())))


def fluid_latency_bound(problem: Problem) -> float | None:
    """The fluid relaxation with one latency after the backward, for one channel and an
    affine cost.

    Every tensor's gradient is ready by ``B = r_0``, when tensor 0's arrives. Count a
    message's transfer time ``beta S`` as serving its bytes: by ``B`` no plan has served
    more bytes of tensors ``0..i`` than the fluid schedule (smallest index first,
    preemptive, no latency), which leaves ``R_i`` seconds of their work unserved at ``B``
    (at least tensor 0's ``beta s_0``, which arrives at ``B``). Those bytes cross the
    channel after ``B``, and the message with tensor 0's last byte starts at ``B`` or later
    and pays ``alpha``: all of tensors ``0..i`` are reduced no earlier than
    ``B + alpha + R_i``. With ``tail_i`` the updates and forwards that follow (layerwise;
    ``U + F + W`` after the last, barrier), ``T >= max_i (B + alpha + R_i + tail_i)``.

    ``R_i = max_j (sum of the work of tensors l <= i released at or after r_j) - (B - r_j)``
    over ``j <= i`` (Lindley's recursion for the busy period ending at ``B``); ready times
    fall with the forward index, so it takes O(n). ``None`` for costs not known to be
    affine, for several channels (their latencies overlap transfers) and with a compressor.

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(3e-3, 1e-9), sync="layerwise")
    >>> round(fluid_latency_bound(problem) * 1e3, 9)   # 6 + 3 + 4 (t1 after B) + 3 forwards
    16.0
    """
    affine = problem.cost.affine
    if affine is None or problem.channels > 1 or problem.compressor is not None:
        return None
    alpha, beta = affine
    profile = problem.profile
    B = float(profile.ready_times[0])
    unserved = fluid_prefix_done(profile, beta) - B
    latency = alpha if profile.sizes.min() > 0 else 0.0
    if problem.sync == "barrier":
        return float(B + latency + unserved[-1] + profile.U + profile.F + profile.W)
    return float((B + latency + unserved + layerwise_tails(problem)).max())


def fluid_prefix_done(profile, beta: float) -> np.ndarray:
    """``D_i``, seconds: when the fluid schedule (preemptive, smallest forward index first,
    ``beta`` seconds per byte, no latency) has served every byte of tensors ``0..i``.

    Tensors ``0..i`` have priority over the rest, so they are served as if alone: a
    work-conserving server ends their work at ``max_j (r_j + work released at or after
    r_j)``. Ready times fall with the forward index, so the work released at or after
    ``r_j`` among tensors ``0..i`` is that of tensors ``0..min(i, end of j's group)``, a group
    being the tensors of one ready time (Lindley's recursion; O(n)).
    """
    ready = profile.ready_times                      # non-increasing in the forward index
    served = np.cumsum(beta * profile.sizes.astype(np.float64))     # work of tensors 0..i
    # For prefix i the candidates j in earlier groups contribute W(end of j's group) + r_j,
    # those in i's group W_i + r_i.
    group_end = np.searchsorted(-ready, -ready, side="right") - 1
    candidate = served[group_end] + ready
    earlier = np.full(profile.n, -np.inf)
    closed = np.flatnonzero(group_end[:-1] < np.arange(1, profile.n))     # group ends before i
    if closed.size:
        finished = np.full(profile.n, -np.inf)
        finished[group_end[closed]] = candidate[closed]
        earlier[1:] = np.maximum.accumulate(finished)[:-1]
    return np.maximum(earlier, served + ready)


def fusion_bound(problem: Problem) -> float | None:
    """The optimal fusion plan's ``T`` (the exact DP of section 7): a bound for every fusion
    plan, attained by the DP on the plain model. Cached per problem.

    With one channel, a copy cost and contention only add time, so the plain optimum still
    bounds every fusion plan; with several channels messages overlap and it does not
    (``None``). Tensors kept exact (``exact_tensors``, alone) the DP takes as they are, so its
    optimum is then this problem's own.
    """
    if problem.channels > 1:
        return None
    cached = _FUSION_OPTIMA.get(problem)
    if cached is None:
        cached = optimal_fusion(problem.plain() if problem.timing_extensions else problem).iteration_time
        _FUSION_OPTIMA[problem] = cached
    return cached


def note_fusion_optimum(problem: Problem, seconds: float) -> None:
    """Remember ``seconds`` as :func:`fusion_bound` of ``problem``: an exact solver that has
    just computed the optimal fusion plan of the plain model (without caps) saves the bound
    its second computation."""
    _FUSION_OPTIMA[problem] = float(seconds)


def best_bound(problem: Problem, space: str = "any") -> float:
    """The largest lower bound this module proves for the plans of ``space``, in seconds."""
    if space not in SPACES:
        raise ValueError(f"unknown plan space {space!r}: choose 'any' or 'fusion'")
    if problem.pattern.is_a("decoupled"):
        raise ValueError("best_bound bounds all-reduce plans; this problem is a decoupled all-reduce, "
                         "whose plans it does not bound")
    bounds = [last_message_bound(problem), channel_bound(problem), fluid_bound(problem),
              fluid_latency_bound(problem)]
    if space == "fusion":
        bounds.append(fusion_bound(problem))
    return max(b for b in bounds if b is not None)


# ---------------------------------------------------------------------------- bounds
def ps_lower_bound(problem: Problem) -> float:
    """A lower bound in seconds on ``T`` of every PS plan of ``problem``.

    The largest of:

    * ``B + F + U + W``: compute only grows with partitioning (``delta >= 0``);
    * the last chunk: the backward's last piece (a piece of tensor 0) ends at ``B`` or later;
      its push, server update and pull (each of at least one byte) follow, then the forward:
      ``U + F + W`` (barrier, or layerwise without partitioned compute) or at least the
      updates and forwards of tensors ``1..n-1`` (tensor 0's forward may be split);
    * the push channel: it opens no earlier than the first chunk is ready and carries every
      byte, in at least :func:`least_channel_time` of the total bytes (``c(total)`` for an
      affine cost; a measured cost's least cost per byte times the bytes); the last push's
      bytes are then updated and pulled; likewise for the pull channel, which opens after
      the first push and its update;
    * without partitioned compute, every all-reduce bound of
      :func:`fusionopt.model.best_bound` for the push cost: pulls and updates only
      delay each tensor's return, so ``T`` is at least the all-reduce ``T`` of the push plan.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Problem, Profile, ParameterServer
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> ps = ParameterServer(AlphaBeta(1e-3, 1e-9), partition_compute=True)
    >>> round(ps_lower_bound(Problem(profile, pattern=ps)) * 1e3, 6)   # 0 + 8 pushing + 1 pulling + 3
    12.000001
    """
    require_ps(problem, "ps_lower_bound")
    profile, ps = problem.profile, problem.pattern
    split = ps.partition_compute
    # Work left after tensor i's update starts, the step parts included (layerwise: the host's).
    tails = (profile.update + profile.forward)[::-1].cumsum()[::-1] + profile.W
    everything = profile.U + profile.F + profile.W
    after_tensor_0 = float(tails[1]) if profile.n > 1 else profile.W
    barrier = problem.sync == "barrier"
    last_tail = everything if barrier or not split else after_tensor_0
    one_byte = float(problem.cost(1)) + ps.server_update(1) + float(ps.pull(1))
    bounds = [profile.compute_time, profile.B + one_byte + last_tail]
    # After the last push or pull of some tensor: U + F + W (barrier), the last tensor's own
    # update and forward (layerwise, whole forwards), or nothing certain (split forwards).
    least_tail = everything if barrier else (profile.W if split else float(tails[-1]))
    last_backward = float(profile.backward[-1])
    first_ready = min(last_backward, ps.delta) if split else last_backward
    total = profile.total_bytes
    bounds.append(first_ready + least_channel_time(problem.cost, total) + ps.server_update(1) + float(ps.pull(1))
                  + least_tail)
    bounds.append(first_ready + float(problem.cost(1)) + ps.server_update(1) + least_channel_time(ps.pull, total)
                  + least_tail)
    if not split:
        bounds.append(best_bound(problem.plain(), space="any"))
    return float(max(bounds))


# ---------------------------------------------------------------------------- decoupled all-reduce
def least_channel_time(cost: CommCost, nbytes: int) -> float:
    """Seconds the channel needs at least to carry ``nbytes`` bytes in any number of messages:
    ``alpha + beta * nbytes`` for an affine cost (every message pays its startup and every
    byte its transfer), else the larger of ``c(1)`` (one message of at least one byte; every
    cost model rises with the bytes) and ``nbytes`` times the least cost per byte of a
    message of at most ``nbytes`` (:meth:`~fusionopt.cost.CommCost.least_seconds_per_byte`);
    0 for no bytes.

    >>> from fusionopt.cost import PiecewiseLinear
    >>> measured = PiecewiseLinear([1e3, 1e4, 1e5], [1e-5, 2e-5, 1.1e-4])
    >>> round(least_channel_time(measured, 100_000) * 1e6, 9), round(least_channel_time(measured, 10) * 1e6, 9)
    (110.0, 10.0)
    """
    if nbytes <= 0:
        return 0.0
    affine = cost.affine
    if affine is not None:
        return affine[0] + affine[1] * nbytes
    return max(float(cost(1)), nbytes * cost.least_seconds_per_byte(nbytes))


def decoupled_lower_bound(problem: Problem) -> float:
    """A lower bound on ``T`` for every plan of a decoupled all-reduce (MODEL.md section 8.1),
    in seconds: the largest of

    * the compute, ``B + U + F + W``;
    * ``V + F + W``, with ``V`` a bound on the last update's end: the updates start at ``B``
      (``V >= B + U``), and the reduce-scatters of the gradients ready at ``B`` (set ``L``)
      start at ``B`` or later, one at a time, so ``V >= B + rs(L) + min_(i in L) u_i`` with
      ``rs(L)`` the least channel time of their bytes (:func:`least_channel_time`);
    * ``V + ag(s_l) + tail_l + W`` for the last tensor ``l`` of the ready order, whose
      all-gathers wait for its update, the last one: ``tail_l`` is its forward suffix under
      layerwise sync, ``F`` under barrier sync;
    * ``B + rs(L) + ag(all bytes) + tail + W``: after ``B`` the channel carries the
      reduce-scatters of ``L`` and every all-gather, and the last message is an all-gather
      (every tensor's all-gather follows its reduce-scatter); ``tail`` is the last tensor's
      forward under layerwise sync, ``F`` under barrier sync;
    * ``r_0 + rs(all bytes) + ag(all bytes) + tail + W``: no message starts before the first
      gradient is ready (``r_0``), and the channel carries every byte both ways.

    With ``update_after_gather`` the updates follow the all-gathers: the last tensor ``l``'s
    all-gathers wait for its own reduce-scatters (``B + rs(s_l) + ag(s_l)``), then come
    ``u_i + f_i`` of every tensor from ``l`` on (layerwise) or ``U + F`` (barrier); an
    all-gather may then run before ``B``, so the channel after ``B`` is bounded by the
    reduce-scatters and all-gathers of ``L`` alone; the channel bounds end with the last
    tensor's ``u + f`` (layerwise) or ``U + F``.

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Decoupled, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> round(decoupled_lower_bound(Problem(profile, pattern=Decoupled(half, half), sync="layerwise")) * 1e3, 9)
    20.0
    """
    require_decoupled(problem, "decoupled_lower_bound")
    profile, halves = problem.profile, problem.pattern
    order = profile.backward_order
    ready = profile.ready_times
    last = int(order[-1])
    at_b = ready == profile.B
    rs_last = least_channel_time(halves.reduce_scatter, int(profile.sizes[at_b].sum()))
    updates = profile.update
    if halves.update_after_gather:
        return _gather_then_update_bound(problem, last, rs_last)
    v = max(profile.B + profile.U, profile.B + rs_last + float(updates[at_b].min()))
    layerwise = problem.sync == "layerwise"
    forward = profile.forward
    suffix = float(forward[last:].sum()) if layerwise else profile.F
    tail = float(forward[-1]) if layerwise else profile.F
    W = profile.host_overhead
    return max(
        profile.compute_time,
        v + profile.F + W,
        v + least_channel_time(halves.all_gather, int(profile.sizes[last])) + suffix + W,
        profile.B + rs_last + least_channel_time(halves.all_gather, profile.total_bytes) + tail + W,
        _both_ways(problem) + tail + W,
    )


def _gather_then_update_bound(problem: Problem, last: int, rs_last: float) -> float:
    profile, halves = problem.profile, problem.pattern
    layerwise = problem.sync == "layerwise"
    work = profile.update + profile.forward
    suffix = float(work[last:].sum()) if layerwise else profile.U + profile.F
    tail = float(work[-1]) if layerwise else profile.U + profile.F
    size = int(profile.sizes[last])
    own = profile.B + least_channel_time(halves.reduce_scatter, size) + least_channel_time(halves.all_gather, size)
    W = profile.host_overhead
    # An all-gather may now run before B (it waits for reduce-scatters only), so after B the
    # channel surely carries only the gradients ready at B, both ways.
    at_b = profile.ready_times == profile.B
    return max(
        profile.compute_time,
        own + suffix + W,
        profile.B + rs_last + least_channel_time(halves.all_gather, int(profile.sizes[at_b].sum())) + tail + W,
        _both_ways(problem) + tail + W,
    )


def _both_ways(problem: Problem) -> float:
    """The first gradient's ready time plus the least channel time of every byte reduce-scattered
    and all-gathered (seconds): no message starts earlier, and they run one at a time."""
    profile, halves = problem.profile, problem.pattern
    return (float(profile.ready_times.min()) + least_channel_time(halves.reduce_scatter, profile.total_bytes)
            + least_channel_time(halves.all_gather, profile.total_bytes))


def sharded_lower_bound(problem: Problem) -> float:
    """A lower bound on ``T`` for every plan of a fully sharded problem (MODEL.md section
    8.2), whatever its units, reshard flags, prefetch depths and root, in seconds: the
    largest of

    * the compute, ``F + B + U + W``;
    * ``ag(s_0) + F + B + rs(s_0) + U + W``: the unit holding tensor 0 is gathered before
      the first forward and reduce-scattered after the last backward, each in one message
      of at least ``s_0`` bytes (``c`` is non-decreasing);
    * ``ag(s_0) + F + rs(all bytes) + U + W``: every reduce-scatter is issued after the
      forward, and they carry every byte;
    * ``ag(all bytes) + rs(all bytes) + U + W``: the channel carries every byte both ways
      (:func:`least_channel_time`) before the optimiser.

    With a memory cap ``M`` and affine costs, every collective that takes time holds at most
    ``M`` bytes (they are whole while it runs), and when every tensor's backward takes time,
    every all-gather at most ``M / 2`` (its unit's parameters and gradients are whole
    together during the unit's backward): at least ``ceil(2 N / M)`` (else ``ceil(N / M)``)
    all-gathers and ``ceil(N / M)`` reduce-scatters of ``N`` bytes each way, and the channel
    needs their startups and ``(beta_AG + beta_RS) N`` before the optimiser. The cap also
    forces regathers: when the forward ends, every unit kept whole after its forward is
    whole (its backward is still to come, unless it belongs to the trailing tensors whose
    backward takes no time, ``Z`` bytes), so at most ``M + Z`` bytes are kept and at least
    ``R = N - M - Z`` bytes are gathered twice: the all-gathers carry ``N + R`` bytes.
    :func:`sharded_memory_floor` says when no plan fits the cap.

    With two channels (``FullySharded(channels="two")``, affine costs) an all-gather's
    startup may overlap a reduce-scatter's transfer and the other way round, but every byte
    still crosses the one shared bandwidth (the transfers in flight drain it at rate 1 in
    all), so the ``beta`` terms stand, and two startups still run while nothing transfers:
    the first all-gather's (before the first backward only the forward gathers run, one at a
    time on their channel; with the cap, each of the at least ``ceil(share N / M)`` forward
    gathers), and that of the reduce-scatter holding tensor 0 (``s_0 > 0``; issued when unit
    0's backward has begun, after every all-gather has ended, and alone on its channel).
    The uncapped terms therefore stand; the capped one becomes the largest of those
    startups plus the ``beta`` terms, the all-gather channel's own
    ``gathers * alpha_AG + beta_AG (N + R)`` followed by ``rs(s_0)``, and the
    reduce-scatter channel's ``scatters * alpha_RS + beta_RS N`` after ``ag(s_0) + F``.

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile, FullySharded
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> round(sharded_lower_bound(Problem(profile, pattern=FullySharded(half, half))) * 1e3, 9)   # 5 + 3 + 6 + 5
    19.0
    """
    require_sharded(problem, "sharded_lower_bound")
    profile, halves = problem.profile, problem.pattern
    first = float(profile.sizes[0])
    ag_first = float(halves.all_gather(first))
    rs_first = float(halves.reduce_scatter(first))
    total = profile.total_bytes
    after = profile.U + profile.update_lump + profile.host_overhead
    capped = gathered = 0.0
    cap = halves.memory_cap
    two = halves.channels == "two"
    if cap is not None:
        busy = np.flatnonzero(profile.backward > 0)
        idle_tail = int(profile.sizes[busy[-1] + 1:].sum()) if busy.size else total
        gathered = total + max(0.0, total - cap - idle_tail)       # bytes every plan all-gathers
        if halves.all_gather.affine is not None and halves.reduce_scatter.affine is not None:
            share = 2 if busy.size == profile.n else 1
            gathers, scatters = math.ceil(share * gathered / cap), math.ceil(total / cap)
            (a_ag, b_ag), (a_rs, b_rs) = halves.all_gather.affine, halves.reduce_scatter.affine
            if not two:
                capped = gathers * a_ag + scatters * a_rs + b_ag * gathered + b_rs * total + after
            else:
                forward_gathers = math.ceil(share * total / cap)
                capped = max(forward_gathers * a_ag + a_rs + b_ag * gathered + b_rs * total,
                             gathers * a_ag + b_ag * gathered + rs_first,
                             ag_first + profile.F + scatters * a_rs + b_rs * total) + after
    return max(
        profile.compute_time,
        ag_first + profile.F + profile.B + rs_first + after,
        ag_first + profile.F + least_channel_time(halves.reduce_scatter, total) + after,
        least_channel_time(halves.all_gather, max(total, int(gathered))) + least_channel_time(halves.reduce_scatter, total)
        + after,
        capped,
    )


def sharded_memory_floor(problem: Problem) -> tuple[int, int]:
    """``(bytes, tensor)``: no plan of a fully sharded problem peaks below ``bytes``, because
    of ``tensor`` (forward index). Every tensor is whole at some moment (``s_i``), and a
    tensor whose backward takes time is whole together with its gradient during its unit's
    backward (``2 s_i``; each at its width in mixed precision, ``FullySharded.whole_widths``,
    counted as the memory account counts it). A cap below the floor admits no plan.

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile, FullySharded
    >>> profile = Profile.from_arrays([4e6, 1e6, 5e6], [1e-3] * 3, [3e-3, 2e-3, 0.0])
    >>> sharded_memory_floor(Problem(profile, pattern=FullySharded(AlphaBeta(0, 1e-9), AlphaBeta(0, 1e-9))))
    (8000000, 0)
    """
    require_sharded(problem, "sharded_memory_floor")
    profile = problem.profile
    parameter, gradient = problem.pattern.whole_widths          # bytes whole per profile byte
    need = whole_bytes(profile.sizes, parameter) + np.where(profile.backward > 0,
                                                            whole_bytes(profile.sizes, gradient), 0)
    tensor = int(np.argmax(need))
    return int(need[tensor]), tensor
