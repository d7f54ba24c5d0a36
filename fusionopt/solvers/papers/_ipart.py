"""``method="ibatch"`` and ``method="ipart"``: greedy partitioning for a parameter server.

* **iBatch** (Wang, Pi, Zhou; AAAI 2019) batches the parameter **pulls** with the forward:
  layers are pulled in batches, in forward order, and a batch's forward overlaps the pull of
  the next batch. Each message costs a startup plus a transfer time; the batch boundaries are
  placed greedily from the first layer on [abs].
* **iPart** (Wang, Pi, Zhou, Wang, Xu; IEEE TPDS 32(9), 2021) partitions **both** directions
  into partitions of various sizes, pushes overlapping the backward and pulls overlapping the
  forward, with the compute partitioned along (MODEL.md section 6,
  ``ParameterServer(partition_compute=True)``), chosen by a greedy algorithm [abs].

Neither paper's full text or code is public (docs/methods.md, section ipart). Everything here beyond those
abstracts is **our reconstruction**, marked [reconstructed] or [our choice]; none of it is a
claim about the papers' own algorithms.

The plan space
--------------
Both methods return plans of :meth:`PSPlan.from_offsets <fusionopt.model.PSPlan.from_offsets>`:
contiguous partitions of the **push stream** (the tensors in backward order) and of the **pull
stream** (forward order), cut at byte offsets, between tensors or inside one. Candidates are
timed by the fast evaluator :func:`~fusionopt.model.offsets_iteration_time`, the
finalists by :func:`~fusionopt.model.simulate_ps`, and the result by
:func:`~fusionopt.solvers.finish`. In this space the first pull (tensor 0's first bytes,
first in forward order) waits for the push of tensor 0, last in backward order, so the pull
phase starts when the push phase is nearly over.

The greedy [reconstructed]
--------------------------
Our reading (docs/methods.md, section ipart): walk the layers in the order of the phase
(forward for pull, backward for push) and close a partition at the first boundary where the
next partition's communication can be hidden behind the current partition's compute; allow
boundaries inside a large tensor. Our statement of it, per phase. Each step sees only the partitions already
closed (a greedy) and times them by the rules of
:func:`~fusionopt.model.simulate_ps` (a test replays the greedy's times against
the evaluator). All times in seconds, positions in bytes of the stream.

**Pull phase** (forward order; layerwise sync). A partition's forward runs once its pull has
ended, so the next partition's pull can hide behind it.

1. *Fit.* The pull channel is free at ``t_c`` and the forward will have run everything
   pulled so far at ``t_f``. The next partition ``[p, y)`` is the **largest** whose pull ends
   by ``t_f``: ``max(t_c, G(p, y)) + c_pull(y - p) <= t_f``, where ``G`` is the latest server
   update of its bytes. It is hidden whole, in as few messages as that allows. When ``y``
   falls inside a tensor, the boundary goes **inside it, at the byte where the pull ends
   exactly at** ``t_f`` (rounded down to a valid cut, below); without cuts, at the last
   tensor boundary that fits.
2. *Walk.* When nothing fits, the forward waits for this partition whatever its size (at the
   start, or when the pulls fall behind). Walk the boundaries from ``p`` and close at the
   **first** one, ``y``, where the next partition's pull can be hidden behind the forward
   of ``[p, y)``: the pull of the look-ahead ``[y, y + g)`` (after the pull of ``[p, y)``
   and its own server updates) ends no later than the forward of ``[p, y)`` does. The
   boundaries, in order: tensor ends; with cuts, first the points inside a tensor where a
   push partition ends (its bytes before that point are up to date sooner), and, when the
   tensor's end does not hide the look-ahead, the **smallest** valid cut inside the tensor
   that does (the forward waits for this partition: keep it small).

Under barrier sync no forward overlaps a pull (MODEL.md section 4): there is no compute to
hide a pull behind, and the pull phase is one message.

**Push phase** (backward order). Time runs the other way: a partition's push overlaps the
backward of the partitions *after* it, so what hides behind a partition's backward is the
push of the one *before*.

1. *Fit.* The push channel frees at ``t_c``. The next partition ``[x, y)`` is the **largest**
   whose backward is done by then, ``R(y) <= t_c``: it goes the moment the channel frees, the
   channel does not idle, and all that was computed meanwhile travels in one message. When
   the backward reaches ``t_c`` inside a tensor, the boundary goes **at the byte it has
   reached at** ``t_c`` (rounded down to a valid cut); without cuts, at the last tensor end
   computed by then.
2. *Walk.* When nothing is ready by ``t_c`` (the channel would wait for compute: at the
   start, or when the pushes keep up), walk the tensor ends from ``x`` and close at the
   **first**, ``y``, whose push ends no later than the backward of the look-ahead
   ``[y, y + g)`` does: the push hides behind it. With ``g`` = the next tensor this is
   MODEL.md section 7's WFBP condition (``c(s_i) <=`` the next tensor's ``b``). With cuts,
   a tensor whose end does not qualify is cut at the **largest** valid byte that does.

**Look-ahead** ``g``: "the next partition" is not known when a partition closes, so the test
uses a stand-in: the next whole tensor (iBatch; the layer-by-layer reading), or ``g`` bytes
rounded up to the next valid boundary (iPart tries several sizes).

**Cuts inside tensors** [our choice]. Without partitioned compute a tensor's bytes are all
ready when its backward ends and its forward waits for all of them (MODEL.md section 6): a cut
starts no compute earlier, so the greedy cuts inside tensors only when
``ps.partition_compute`` is on. A cut lies on a whole parameter (``profile.dtype_bytes``) and
leaves every piece of the tensor at least ``min_partition_bytes`` long and with at least as
much compute as the ``delta`` it pays (``delta / (b_i / s_i)`` bytes in the push stream,
``delta / (f_i / s_i)`` in the pull stream), so that a cut's overhead never exceeds the
work it lets start early (without this, each piece's ``delta`` would be compute to hide the
next piece behind, and the greedy would cut a tensor into thousands of pieces). The
greedy's times include the ``delta`` of every piece.

The methods
-----------
* :func:`ibatch`: the pull greedy over whole tensors with the next tensor as look-ahead;
  pushes as the default PS by default. The better of its plan and ``ps-default``'s.
* :func:`ipart`: both greedies for several look-aheads, with and without cuts inside
  tensors; the best greedy plan against ``ps-default``'s and ``ps-layer``'s.

Examples
--------
>>> from fusionopt.cost import AlphaBeta
>>> from fusionopt.model import Problem, Profile, ParameterServer
>>> from fusionopt.solvers.baselines import ps_default, ps_layer
>>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
>>> ps = ParameterServer(AlphaBeta(1e-3, 1e-9), AlphaBeta(0.2e-3, 0.2e-9))
>>> problem = Problem(profile, pattern=ps, sync="layerwise")
>>> [round(solver(problem).iteration_time * 1e3, 9) for solver in (ps_default, ps_layer, ibatch, ipart)]
[18.6, 15.0, 18.0, 15.0]
"""

from __future__ import annotations

import bisect
import math
import numbers
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from fusionopt.model._cost import CommCost
from fusionopt.model._problem import Problem
from fusionopt.model._ps_plan import PSPlan, stream_offsets
from fusionopt.model._ps_timing import offsets_iteration_time, simulate_ps
from fusionopt.solvers._result import Outcome, Result
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._catalogue import method

__all__ = ["PUSH_MODES", "ibatch", "ipart"]

PUSH_MODES = ("after-backward", "per-tensor")
DEFAULT_LOOKAHEAD_SIZES = 8
NEXT_TENSOR = None          # the look-ahead "the next whole tensor"


# ---------------------------------------------------------------------------- streams
@dataclass(frozen=True)
class IPartStream:
    """One direction's byte stream: tensors in stream order, their extents and compute.

    ``work[j]`` is the compute of the ``j``-th tensor of the stream when it is not cut
    (backward ``b_i`` for push; update and forward ``u_i + f_i`` for pull), ``rate[j]`` its
    seconds per byte when cut (``b_i / s_i`` or ``f_i / s_i``), ``first[j]`` what its first
    piece adds (``u_i`` for pull, 0 for push).
    """

    tensors: tuple[int, ...]
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    work: tuple[float, ...]
    rate: tuple[float, ...]
    first: tuple[float, ...]
    prefix: tuple[float, ...]       # prefix[j]: work of stream tensors 0..j-1, uncut
    total: int
    delta: float

    @classmethod
    def build(cls, problem: Problem, direction: str) -> "IPartStream":
        profile, ps = problem.profile, problem.pattern
        order = list(range(profile.n - 1, -1, -1)) if direction == "push" else list(range(profile.n))
        offsets = stream_offsets(profile, direction)
        sizes = profile.sizes.tolist()
        if direction == "push":
            compute, first = profile.backward.tolist(), [0.0] * profile.n
        else:
            compute, first = profile.forward.tolist(), profile.update.tolist()
        work = [first[i] + compute[i] for i in order]
        return cls(
            tensors=tuple(order),
            starts=tuple(int(offsets[i]) for i in order),
            ends=tuple(int(offsets[i]) + sizes[i] for i in order),
            work=tuple(work),
            rate=tuple(compute[i] / sizes[i] for i in order),
            first=tuple(first[i] for i in order),
            prefix=tuple(np.concatenate(([0.0], np.cumsum(work))).tolist()),
            total=int(profile.total_bytes),
            delta=ps.delta,
        )

    def index(self, x: int) -> int:
        """Stream position of the tensor holding byte ``x`` (``x < total``)."""
        return bisect.bisect_right(self.ends, x)

    def piece(self, j: int, lo: int, hi: int) -> float:
        """Compute of bytes ``[lo, hi)`` of stream tensor ``j``, which is cut."""
        head = self.first[j] if lo == self.starts[j] else 0.0
        return head + self.rate[j] * (hi - lo) + self.delta

    def work_between(self, x: int, y: int) -> float:
        """Compute of stream bytes ``[x, y)`` as one partition: a tensor reaching past either
        end is cut there (a piece with ``delta``), the tensors in between are whole."""
        if y <= x:
            return 0.0
        jx, jy = self.index(x), self.index(y - 1)
        if jx == jy:
            if x == self.starts[jx] and y == self.ends[jx]:
                return self.work[jx]
            return self.piece(jx, x, y)
        head = self.work[jx] if x == self.starts[jx] else self.piece(jx, x, self.ends[jx])
        tail = self.work[jy] if y == self.ends[jy] else self.piece(jy, self.starts[jy], y)
        return head + (self.prefix[jy] - self.prefix[jx + 1]) + tail


@dataclass(frozen=True)
class IPartCuts:
    """Where the greedy may place a boundary inside a tensor."""

    allowed: bool
    align: int          # bytes of one parameter
    min_piece: int      # smallest piece of a cut tensor, bytes

    def piece_floor(self, stream: IPartStream, j: int) -> float:
        """Smallest piece of stream tensor ``j``: ``min_piece``, and at least as much compute
        as the ``delta`` it pays (``delta / rate`` bytes), so that the overhead of a cut never
        exceeds the work it lets start early."""
        if stream.delta <= 0:
            return self.min_piece
        rate = stream.rate[j]
        return max(self.min_piece, math.ceil(stream.delta / rate)) if rate > 0 else math.inf

    def snap_down(self, stream: IPartStream, j: int, lo: int, z: int) -> int | None:
        """The largest valid cut ``<= z`` inside stream tensor ``j`` whose piece starting at
        ``lo`` (``>= starts[j]``) keeps the smallest piece, or None."""
        if not self.allowed:
            return None
        start, end = stream.starts[j], stream.ends[j]
        floor = self.piece_floor(stream, j)
        if 2 * floor > end - start:
            return None
        z = min(z, end - int(floor))
        z = start + (z - start) // self.align * self.align
        if z - lo < floor or z <= start:
            return None
        return z

    def snap_up(self, stream: IPartStream, j: int, lo: int, z: int) -> int | None:
        """The smallest valid cut ``>= z`` inside stream tensor ``j`` (piece from ``lo``), or None."""
        if not self.allowed:
            return None
        start, end = stream.starts[j], stream.ends[j]
        floor = self.piece_floor(stream, j)
        if 2 * floor > end - start:
            return None
        z = max(z, lo + int(floor))
        z = start + -(-(z - start) // self.align) * self.align
        if end - z < floor or z >= end:
            return None
        return z

    def lookahead_end(self, stream: IPartStream, y: int, size: int | None) -> int:
        """End of the look-ahead partition of ``size`` bytes from boundary ``y`` (None: the
        next whole tensor): rounded up to the next valid cut when cuts are allowed, else to
        the end of the tensor it reaches into."""
        j = stream.index(y)
        if size is None:
            return stream.ends[j]
        target = y + size
        if target >= stream.total:
            return stream.total
        k = stream.index(target)
        if target == stream.starts[k]:
            return target
        z = self.snap_up(stream, k, max(stream.starts[k], y), target)
        return stream.ends[k] if z is None else z


def _largest(predicate, lo: int, hi: int) -> int | None:
    """The largest integer ``z`` in ``[lo, hi]`` with ``predicate(z)``, for a predicate true
    up to some point and false after it; None if false at ``lo``."""
    if not predicate(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if predicate(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _smallest(predicate, lo: int, hi: int) -> int | None:
    """The smallest integer ``z`` in ``[lo, hi]`` with ``predicate(z)``, for a predicate false
    up to some point and true after it; None if false at ``hi``."""
    if not predicate(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if predicate(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _pricer(cost: CommCost):
    """``c(S)`` in seconds as a plain function of an int (the greedy calls it many times)."""
    affine = cost.affine
    if affine is None:
        return lambda size: float(cost(size))
    alpha, beta = float(affine[0]), float(affine[1])
    return lambda size: alpha + beta * size if size > 0 else 0.0


# ---------------------------------------------------------------------------- push greedy
def ipart_push_greedy(problem: Problem, stream: IPartStream, cuts: IPartCuts, lookahead: int | None) -> list[int]:
    """Push-stream offsets of the push greedy (module docstring, "Push phase")."""
    cost = _pricer(problem.cost)
    total = stream.total
    x, clock, free = 0, 0.0, -math.inf
    offsets: list[int] = []
    while x < total:
        y = _push_fit(stream, cuts, x, clock, free)
        if y is None:
            y = _push_walk(cost, stream, cuts, x, clock, free, lookahead)
        ready = clock + stream.work_between(x, y)
        free = max(ready, free) + cost(y - x)
        clock = ready
        x = y
        if y < total:
            offsets.append(y)
    return offsets


def _push_fit(stream: IPartStream, cuts: IPartCuts, x: int, clock: float, free: float) -> int | None:
    """Largest partition from ``x`` whose backward is done when the channel frees."""
    if free == -math.inf:
        return None
    best = None
    j = stream.index(x)
    at = clock
    while j < len(stream.tensors):
        lo, end = max(x, stream.starts[j]), stream.ends[j]
        whole = stream.work[j] if lo == stream.starts[j] else stream.piece(j, lo, end)
        if at + whole <= free:
            best, at, j = end, at + whole, j + 1
            continue
        rate = stream.rate[j]
        if rate > 0:
            # The byte the backward reaches at ``free`` when this tensor is cut there.
            reach = lo + math.floor((free - at - stream.delta - (stream.first[j] if lo == stream.starts[j] else 0.0))
                                    / rate)
            z = cuts.snap_down(stream, j, lo, reach) if reach > lo else None
            if z is not None:
                best = z
        break
    return best if best is not None and best > x else None


def _push_walk(cost, stream: IPartStream, cuts: IPartCuts, x: int, clock: float, free: float,
               lookahead: int | None) -> int:
    """The first tensor from ``x`` whose end, or failing that a byte inside it, closes a
    partition whose push hides behind the backward of the next look-ahead."""

    def hidden(y: int) -> bool:
        ready = clock + stream.work_between(x, y)
        pushed = max(ready, free) + cost(y - x)
        return pushed <= ready + stream.work_between(y, cuts.lookahead_end(stream, y, lookahead))

    j = stream.index(x)
    while True:
        end = stream.ends[j]
        last = end >= stream.total
        if not last and hidden(end):
            return end
        lo = max(x, stream.starts[j])
        if cuts.allowed and end - lo > 1:
            # Inside a tensor that is not hidden whole: the largest partition that is.
            reach = _largest(hidden, lo + 1, end - 1)
            z = cuts.snap_down(stream, j, lo, reach) if reach is not None else None
            if z is not None and hidden(z):
                return z
        if last:
            return end
        j += 1


# ---------------------------------------------------------------------------- pull greedy
@dataclass(frozen=True)
class IPartGates:
    """When each byte of the pull stream is up to date on the servers, piecewise constant."""

    starts: list[int]        # segment starts on the pull stream, ascending, starts[0] == 0
    times: list[float]       # server-update time of each segment
    backward_end: float      # the backward's end, pieces and their deltas included

    @classmethod
    def of(cls, problem: Problem, push: Sequence[int]) -> "IPartGates":
        profile = problem.profile
        # The model's own times: the server updates of these pushes (the pull plan does not
        # change them) and the backward's end (one pull message splits no forward).
        timeline = simulate_ps(problem, PSPlan.from_offsets(profile, push=push), validate=False)
        updated = timeline.server_updated
        bounds = np.asarray(list(push), dtype=np.int64)
        push_at, pull_at = stream_offsets(profile, "push"), stream_offsets(profile, "pull")
        starts: list[int] = []
        times: list[float] = []
        for i, size in enumerate(profile.sizes.tolist()):
            lo = int(push_at[i])
            inside = bounds[(bounds > lo) & (bounds < lo + size)].tolist()
            for a in [lo] + inside:
                starts.append(int(pull_at[i]) + a - lo)
                times.append(float(updated[int(np.searchsorted(bounds, a, side="right"))]))
        return cls(starts, times, profile.B + timeline.compute_overhead)

    def steps_inside(self, lo: int, hi: int) -> list[int]:
        """Segment starts strictly inside ``(lo, hi)``: where a push partition ends."""
        return self.starts[bisect.bisect_right(self.starts, lo):bisect.bisect_left(self.starts, hi)]

    def between(self, x: int, y: int) -> float:
        """Latest update of pull-stream bytes ``[x, y)``."""
        a = bisect.bisect_right(self.starts, x) - 1
        b = bisect.bisect_right(self.starts, y - 1)
        return max(self.times[a:b])


def ipart_pull_greedy(problem: Problem, stream: IPartStream, cuts: IPartCuts, gates: IPartGates,
                 lookahead: int | None) -> list[int]:
    """Pull-stream offsets of the pull greedy (module docstring, "Pull phase")."""
    if problem.sync == "barrier":
        return []
    cost = _pricer(problem.pattern.pull)
    total = stream.total
    p, free, forward = 0, -math.inf, gates.backward_end
    offsets: list[int] = []
    while p < total:
        y = _pull_fit(cost, stream, cuts, gates, p, free, forward)
        if y is None:
            y = _pull_walk(cost, stream, cuts, gates, p, free, forward, lookahead)
        free = max(free, gates.between(p, y)) + cost(y - p)
        forward = max(forward, free) + stream.work_between(p, y)
        p = y
        if y < total:
            offsets.append(y)
    return offsets


def _pull_fit(cost, stream: IPartStream, cuts: IPartCuts, gates: IPartGates, p: int, free: float,
              forward: float) -> int | None:
    """Largest partition from ``p`` whose pull ends before the forward needs it."""

    def hidden(y: int) -> bool:
        return max(free, gates.between(p, y)) + cost(y - p) <= forward

    best = None
    j = stream.index(p)
    while j < len(stream.tensors):
        end = stream.ends[j]
        if hidden(end):
            best, j = end, j + 1
            continue
        lo = max(p, stream.starts[j])
        if cuts.allowed and end - lo > 1:
            # The byte where the pull ends exactly when the forward needs it.
            reach = _largest(hidden, lo + 1, end - 1)
            z = cuts.snap_down(stream, j, lo, reach) if reach is not None else None
            if z is not None:
                best = z
        break
    return best


def _pull_walk(cost, stream: IPartStream, cuts: IPartCuts, gates: IPartGates, p: int, free: float,
               forward: float, lookahead: int | None) -> int:
    """The first tensor from ``p`` whose end, or failing that a byte inside it, closes a
    partition whose forward hides the pull of the next look-ahead."""

    def hides(y: int) -> bool:
        pulled = max(free, gates.between(p, y)) + cost(y - p)
        done = max(forward, pulled) + stream.work_between(p, y)
        following = cuts.lookahead_end(stream, y, lookahead)
        return max(pulled, gates.between(y, following)) + cost(following - y) <= done

    j = stream.index(p)
    while True:
        end = stream.ends[j]
        last = end >= stream.total
        lo = max(p, stream.starts[j])
        if cuts.allowed:
            # Where a push partition ends inside this tensor, the bytes before it are up to
            # date earlier: a boundary like a tensor's.
            for step in gates.steps_inside(lo, end):
                if cuts.snap_up(stream, j, lo, step) == step and hides(step):
                    return step
        if not last and hides(end):
            return end
        if cuts.allowed and end - lo > 1:
            # Inside a tensor whose whole forward comes too late: the smallest partition
            # whose forward hides the next pull (the forward waits for this one).
            reach = _smallest(hides, lo + 1, end - 1)
            z = cuts.snap_up(stream, j, lo, reach) if reach is not None else None
            if z is not None and hides(z):
                return z
        if last:
            return end
        j += 1


# ---------------------------------------------------------------------------- options
def _half_performance_bytes(cost: CommCost, total: int) -> int:
    """Smallest message whose transfer costs as much as its startup: ``c(S) >= 2 c(1)``
    (``alpha / beta`` bytes for an affine cost); ``total`` when no message reaches it."""
    price = _pricer(cost)
    one = price(1)
    if one <= 0:
        return 1
    if price(total) < 2 * one:
        return total
    size = _largest(lambda s: price(s) < 2 * one, 1, total)
    return (size or 0) + 1


def _check_min_partition(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"min_partition_bytes must be a whole number of bytes >= 1, got {value!r}")
    if value < 1:
        raise ValueError(f"min_partition_bytes must be >= 1 byte, got {value!r}")
    return int(value)


def ipart_cuts(problem: Problem, direction: str, allowed: bool, min_partition: int | None) -> IPartCuts:
    profile = problem.profile
    align = profile.dtype_bytes
    if min_partition is None:
        cost = problem.cost if direction == "push" else problem.pattern.pull
        min_partition = _half_performance_bytes(cost, profile.total_bytes)
    min_piece = max(align, -(-min_partition // align) * align)
    return IPartCuts(allowed and problem.pattern.partition_compute, align, min_piece)


def ipart_lookaheads(total: int, smallest: int, count: int) -> list[int | None]:
    """The next whole tensor, then ``count - 1`` sizes from the smallest piece to the whole
    stream, spaced geometrically (bytes)."""
    sizes: list[int | None] = [NEXT_TENSOR]
    if count > 1:
        high = max(total, 1)
        low = min(max(smallest, 1), high)
        ladder = np.geomspace(low, high, count - 1) if count > 2 else np.array([high])
        for size in ladder.round().astype(np.int64).tolist():
            if int(size) not in sizes:
                sizes.append(int(size))
    return sizes


def _layer_offsets(profile) -> tuple[list[int], list[int]]:
    """Every tensor boundary of both streams: ``ps-layer``'s plan."""
    push = sorted(int(x) for x in stream_offsets(profile, "push").tolist() if x > 0)
    pull = sorted(int(x) for x in stream_offsets(profile, "pull").tolist() if x > 0)
    return push, pull


def _best_simulated(problem: Problem, candidates: Sequence[tuple[str, list[int], list[int]]]
                    ) -> tuple[str, PSPlan, dict[str, float]]:
    """The candidate the simulator times fastest (the first on a tie) and every time."""
    times: dict[str, float] = {}
    best = None
    for name, push, pull in candidates:
        plan = PSPlan.from_offsets(problem.profile, push=push, pull=pull)
        t = simulate_ps(problem, plan, validate=False).iteration_time
        times[name] = t
        if best is None or t < best[0]:
            best = (t, name, plan)
    assert best is not None
    return best[1], best[2], times


# ---------------------------------------------------------------------------- iBatch
@method("ibatch", family="paper",
        summary="iBatch: pulls batched greedily with the forward (parameter server; reconstructed)")
@declares(Needs(pattern="ps"))
def ibatch(problem: Problem, *, pushes: str = "after-backward") -> Result:
    """iBatch: pulls batched with the forward, boundaries placed greedily from the first layer.

    The pull greedy of the module docstring over **whole tensors**, with the next tensor as
    its look-ahead [reconstructed]: from the first tensor, a batch closes at the first tensor
    boundary where the next tensor's pull can end before the batch's forward does; while the
    pulls run ahead of the forward, each batch is the longest run of whole tensors whose pull
    ends before the forward needs it. A message costs ``c_pull(S)``, a startup plus a
    transfer time for :class:`~fusionopt.cost.AlphaBeta`. iBatch cuts no tensor, so
    partitioned compute splits nothing. Under barrier sync no forward overlaps a pull and the
    pull is one message.

    The result is the faster, timed by :func:`~fusionopt.model.simulate_ps`, of the
    greedy plan and ``ps-default``'s (the greedy's on a tie): ``ibatch`` is never slower
    than ``ps-default``.

    Parameters
    ----------
    problem : Problem
        A parameter-server problem, ``Problem(profile, pattern=ParameterServer(...))``.
    pushes : {"after-backward", "per-tensor"}
        The push side, which iBatch leaves as it is [our choice]. ``"after-backward"``
        (default): one push of the whole gradient after the backward, as ``ps-default``:
        BigDL's default exchange, the system iBatch changes only on the forward side (with
        no pull boundary the plan is ``ps-default``'s). ``"per-tensor"``: one push per
        tensor in backward order, as ``ps-layer``.

    Returns
    -------
    Result
        ``plan`` a :class:`~fusionopt.model.PSPlan`; ``stats``: ``pushes``, ``batches``
        (pull messages of the greedy plan), ``greedy_time`` and ``ps_default_time`` (seconds,
        simulated), ``chosen`` (``"greedy"`` or ``"ps-default"``).

    Examples
    --------
    MODEL.md section 5's profile (``f = 1 ms`` per tensor), pushes ``1 ms + 1 ms/MB``, pulls
    ``0.2 ms + 0.2 ms/MB``, layerwise sync. The push of all 7 MB runs 6 -> 14 ms. Walk: t1's
    pull would end at 15 and its forward at 16, and the next tensor's pull (t2, 0.4 ms) at
    15.4 <= 16: batch [t1] closes. Fit: [t2, t3] (0.8 ms) is pulled 15 -> 15.8, before the
    forward needs it at 16: batch [t2, t3]. Forward t1 15 -> 16, t2 and t3 16 -> 18 ms;
    ``ps-default`` pulls 14 -> 15.6 and ends at 18.6 ms.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile, ParameterServer
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> ps = ParameterServer(AlphaBeta(1e-3, 1e-9), AlphaBeta(0.2e-3, 0.2e-9))
    >>> r = ibatch(Problem(profile, pattern=ps, sync="layerwise"))
    >>> r.plan.pull.groups(), round(r.iteration_time * 1e3, 9), r.stats["chosen"]
    ([[0], [1, 2]], 18.0, 'greedy')
    >>> ibatch(Problem(profile, pattern=ps), pushes="all")
    Traceback (most recent call last):
    ...
    ValueError: pushes must be 'after-backward' or 'per-tensor', got 'all'
    """
    if not isinstance(pushes, str) or pushes not in PUSH_MODES:
        raise ValueError(f"pushes must be 'after-backward' or 'per-tensor', got {pushes!r}")
    profile = problem.profile
    push = [] if pushes == "after-backward" else _layer_offsets(profile)[0]
    stream = IPartStream.build(problem, "pull")
    whole_tensors = IPartCuts(False, profile.dtype_bytes, profile.dtype_bytes)
    pull = ipart_pull_greedy(problem, stream, whole_tensors, IPartGates.of(problem, push), NEXT_TENSOR)
    chosen, plan, times = _best_simulated(problem, [("greedy", push, pull), ("ps-default", [], [])])
    stats = {"pushes": pushes, "batches": len(pull) + 1, "greedy_time": times["greedy"],
             "ps_default_time": times["ps-default"], "chosen": chosen}
    return Outcome(plan, stats=stats)


# ---------------------------------------------------------------------------- iPart
@method("ipart", family="paper",
        summary="iPart: greedy partitions both ways with partitioned compute (parameter server; reconstructed)")
@declares(Needs(pattern="ps"))
def ipart(problem: Problem, *, min_partition_bytes: int | None = None,
          lookahead_sizes: int = DEFAULT_LOOKAHEAD_SIZES) -> Result:
    """iPart: push and pull partitions of various sizes, placed greedily, partitioned compute.

    The push and pull greedies of the module docstring [reconstructed], cutting inside
    tensors when ``problem.pattern.partition_compute`` is on, run for several look-aheads; plans
    are judged by :func:`~fusionopt.model.offsets_iteration_time`:

    1. for each look-ahead ``g`` (the next whole tensor, then ``lookahead_sizes - 1`` sizes
       spaced geometrically from the smallest piece to the whole stream) and each cut setting
       (inside tensors or not; only not without partitioned compute): the push greedy with
       ``g``, then the pull greedy with ``g`` on those pushes' server-update times;
    2. on the fastest push partition of step 1: the pull greedy with every look-ahead and
       cut setting, one pull per tensor, and one pull of everything;
    3. the fastest plan of steps 1-2 (the "greedy" plan), ``ps-default``'s and
       ``ps-layer``'s, timed by :func:`~fusionopt.model.simulate_ps`: the fastest
       is returned (in that order on a tie). So ``ipart`` is **never slower than
       ps-default or ps-layer**; ``stats["chosen"]`` says which plan it returns.

    Step 1 runs both phases with one look-ahead because the pull greedy needs the pushes'
    times; step 2 then lets the pull side choose its own ("partitions of various sizes" in
    each direction) [our choice].

    Parameters
    ----------
    problem : Problem
        A parameter-server problem, ``Problem(profile, pattern=ParameterServer(...))``.
    min_partition_bytes : int, optional
        The smallest piece in bytes the greedy cuts out of a tensor, ``>= 1``: both sides of a
        cut keep at least this, rounded up to whole parameters. Default, per direction: the
        half-performance size of its cost, the smallest ``S`` with ``c(S) >= 2 c(1 byte)``
        (about ``alpha / beta`` for ``AlphaBeta``), below which a message pays more startup
        than transfer [our choice].
    lookahead_sizes : int
        How many look-aheads to run the greedy with, ``>= 1`` (1: the next whole tensor only).

    Returns
    -------
    Result
        ``plan`` a :class:`~fusionopt.model.PSPlan`; ``stats``: ``chosen`` (``"greedy"``,
        ``"ps-default"`` or ``"ps-layer"``); ``greedy_time``, ``ps_default_time``,
        ``ps_layer_time`` (seconds, simulated); of the greedy plan: ``push_lookahead`` and
        ``pull_lookahead`` (bytes, ``"next tensor"``, or for the pull ``"per tensor"`` and
        ``"one message"``), ``push_cuts_inside`` and ``pull_cuts_inside`` (whether that
        greedy could cut inside tensors), ``push_partitions``, ``pull_partitions``,
        ``tensors_cut`` (tensors cut in either stream); ``candidates`` (plans timed).

    Examples
    --------
    One 8 MB tensor, backward and forward 8 ms, both directions ``1 ms + 1 ms/MB``,
    partitioned compute (``delta = 0``), layerwise sync, pieces of at least 1 MB. Both
    baselines send the tensor whole: push 8 -> 17, pull 17 -> 26, forward 26 -> 34 ms. The
    greedy with a 2 MB look-ahead: pushes [0, 1), [1, 3), [3, 6), [6, 8) MB run 1 -> 3,
    3 -> 6, 6 -> 10, 10 -> 13 (each piece is computed while the previous one is pushed);
    pulls of the same pieces 3 -> 5, 6 -> 9, 10 -> 14, 14 -> 17; forward pieces 8 -> 9,
    9 -> 11, 14 -> 17, 17 -> 19 ms (tests/solvers/test_ipart.py works it out step by step).

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile, ParameterServer
    >>> profile = Profile.from_arrays([8_000_000], [8e-3], [8e-3])
    >>> ps = ParameterServer(AlphaBeta(1e-3, 1e-9), partition_compute=True)
    >>> r = ipart(Problem(profile, pattern=ps, sync="layerwise"), min_partition_bytes=1_000_000)
    >>> round(r.iteration_time * 1e3, 9), round(r.stats["ps_layer_time"] * 1e3, 9), r.stats["chosen"]
    (19.0, 34.0, 'greedy')
    >>> [(c.lo, c.hi) for m in r.plan.push.messages for c in m.chunks]
    [(0, 1000000), (1000000, 3000000), (3000000, 6000000), (6000000, 8000000)]
    >>> ipart(Problem(profile, pattern=ps), lookahead_sizes=0)
    Traceback (most recent call last):
    ...
    ValueError: lookahead_sizes must be an integer >= 1, got 0
    """
    min_partition = _check_min_partition(min_partition_bytes)
    if (isinstance(lookahead_sizes, bool) or not isinstance(lookahead_sizes, numbers.Integral)
            or lookahead_sizes < 1):
        raise ValueError(f"lookahead_sizes must be an integer >= 1, got {lookahead_sizes!r}")
    profile = problem.profile
    push_stream, pull_stream = IPartStream.build(problem, "push"), IPartStream.build(problem, "pull")
    settings = [(allowed, ipart_cuts(problem, "push", allowed, min_partition),
                 ipart_cuts(problem, "pull", allowed, min_partition))
                for allowed in ((True, False) if problem.pattern.partition_compute else (False,))]
    smallest = min(ipart_cuts(problem, d, True, min_partition).min_piece for d in ("push", "pull"))
    lookaheads = ipart_lookaheads(profile.total_bytes, smallest, int(lookahead_sizes))
    layer_push, layer_pull = _layer_offsets(profile)
    evaluated = 0

    def timed(push: list[int], pull: list[int]) -> float:
        nonlocal evaluated
        evaluated += 1
        return offsets_iteration_time(problem, push, pull)

    # Step 1: one look-ahead and cut setting in both phases.
    gates_of: dict[tuple[int, ...], IPartGates] = {}
    best: tuple[float, list[int], list[int], tuple[Any, bool], tuple[Any, bool]] | None = None
    for allowed, push_cuts, pull_cuts in settings:
        for g in lookaheads:
            push = ipart_push_greedy(problem, push_stream, push_cuts, g)
            key = tuple(push)
            if key not in gates_of:
                gates_of[key] = IPartGates.of(problem, push)
            pull = ipart_pull_greedy(problem, pull_stream, pull_cuts, gates_of[key], g)
            t = timed(push, pull)
            if best is None or t < best[0]:
                best = (t, push, pull, (g, allowed), (g, allowed))
    assert best is not None
    # Step 2: every pull partition on the best pushes.
    _, push, _, push_choice, _ = best
    pulls = [(ipart_pull_greedy(problem, pull_stream, pull_cuts, gates_of[tuple(push)], g), (g, allowed))
             for allowed, _, pull_cuts in settings for g in lookaheads]
    pulls += [(layer_pull, ("per tensor", False)), ([], ("one message", False))]
    for pull, pull_choice in pulls:
        t = timed(push, pull)
        if t < best[0]:
            best = (t, push, pull, push_choice, pull_choice)
    _, push, pull, push_choice, pull_choice = best

    # Step 3: against the baselines, by the simulator.
    chosen, plan, times = _best_simulated(problem, [("greedy", push, pull), ("ps-default", [], []),
                                                     ("ps-layer", layer_push, layer_pull)])
    evaluated += 3
    greedy_plan = PSPlan.from_offsets(profile, push=push, pull=pull)
    split = problem.pattern.partition_compute
    stats = {
        "chosen": chosen,
        "greedy_time": times["greedy"],
        "ps_default_time": times["ps-default"],
        "ps_layer_time": times["ps-layer"],
        "push_lookahead": "next tensor" if push_choice[0] is NEXT_TENSOR else push_choice[0],
        "pull_lookahead": "next tensor" if pull_choice[0] is NEXT_TENSOR else pull_choice[0],
        "push_cuts_inside": bool(push_choice[1] and split),
        "pull_cuts_inside": bool(pull_choice[1] and split),
        "push_partitions": len(push) + 1,
        "pull_partitions": len(pull) + 1,
        "tensors_cut": len(_cut_tensors(greedy_plan.push) | _cut_tensors(greedy_plan.pull)),
        "candidates": evaluated,
    }
    return Outcome(plan, stats=stats)


def _cut_tensors(plan) -> set[int]:
    """Tensors that ``plan`` sends in two or more chunks."""
    seen: set[int] = set()
    cut: set[int] = set()
    for message in plan.messages:
        for chunk in message.chunks:
            (cut if chunk.tensor in seen else seen).add(chunk.tensor)
    return cut
