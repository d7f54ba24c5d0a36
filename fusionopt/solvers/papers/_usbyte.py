"""``method="usbyte"``: US-Byte, unequal-sized tensor blocks for layerwise sync (Gao, Hu,
Mashhadi, Jin, Xiao, Wu; IEEE TPDS 35(1), 2024).

The algorithm, as the authors' code runs it (docs/methods.md, section usbyte):

* tensors are cut into **units** of ``S_p`` parameters; a **block** is ``k`` consecutive
  units of one tensor and costs ``a + b S_p k``. Here a block is one message of one chunk
  and costs ``c(bytes) = alpha + beta * bytes`` (``problem.cost.affine``), which is the
  paper's cost with ``a = alpha`` and ``b = beta * dtype_bytes`` per parameter, so
  ``b S_p = beta * unit_bytes``;
* **phase 1, during the backward**: whenever the channel would idle before the next
  gradient is ready (gap ``D``), send the pending tensor of best priority ``P1`` (smallest
  rank) as one block of ``1`` unit if ``D < a``, of ``ceil((D - a) / (b S_p))`` units if
  that is less than its remainder (the block ends when the next gradient arrives), else of
  its whole remainder;
* **phase 2, after the backward**: each tensor's remainder as one block, in forward order
  (earliest due date, optimal for a fixed set of messages: MODEL.md section 7);
* **priority search** (the paper's "low-complexity algorithm"): start from ``P1`` = forward
  order; for ``l = n .. 2``, find the tensors that would become ready and preempt ``l``
  during its whole transmission, try promoting ``l`` above them, and keep the change if
  ``T`` drops.

The policy is dynamic; :func:`dispatch` simulates it block by block and the solver emits
the blocks, in the order sent, as a static :class:`~fusionopt.model.Plan` (one
message per block), which :func:`~fusionopt.model.simulate` times to the same ``T``,
bit for bit (the tests pin it).

Our readings
------------
The paper and code leave these choices to us; each is **our reading**, not the paper's words.

1. *Units.* A tensor of ``s_i`` bytes is cut from byte 0 into units of
   ``unit_bytes = S_p * dtype_bytes`` bytes; its last unit holds what is left and may be
   shorter. Blocks take units from the front, so only a tensor's last block can hold the
   short unit. "Remainder" counts units: ``ceil(unsent bytes / unit_bytes)``.
2. *Pending tensor.* At time ``t`` a tensor is pending when its gradient is ready,
   ``r_i <= t`` (a gradient ready at the very moment the channel frees counts), and it has
   bytes not yet sent.
3. *The next gradient and the channel would idle.* Phase 1 acts at each moment ``t`` the
   channel is free (the end of the previous block; at first the earliest ready time)
   while some gradient is not ready yet: the next gradient is ready at
   ``r_next = min { r_j : r_j > t }`` (tensors with equal ready times, i.e. zero backward
   time between them, arrive together) and ``D = r_next - t > 0``, the time the channel
   would idle waiting for it. If nothing is pending, the channel does idle until
   ``r_next``.
4. *Block length.* ``D < a``: 1 unit (the block overruns ``r_next``, as stated). Otherwise
   ``k = ceil((D - a) / (b S_p))``, at least 1 (``D = a`` exactly gives 0 by the formula;
   a block holds at least one unit); with ``b S_p = 0`` (``beta = 0``) the formula is
   unbounded and the whole remainder goes. ``k`` is compared with the remainder in units:
   ``k <`` remainder sends ``k`` units, else the whole remainder. A block whose whole
   remainder finishes before ``r_next`` leaves the channel free again before ``r_next``:
   phase 1 then fills the rest of the gap with the next pending tensor.
5. *When phase 2 starts.* When no gradient is left to wait for: the first moment the
   channel is free at or after ``B`` (the last gradient, tensor 1's, is ready). A block of
   phase 1 that overruns ``B`` is finished first (blocks are not preempted). Phase 2
   sends the remainders in forward order, whatever the priorities.
6. *Ties in priority* cannot occur: ``P1`` is a strict ranking (a permutation).
7. *Preempting tensors in the search.* For tensor ``l`` under the current priorities, its
   transmission runs from the start of its first block to the end of its last one; the
   tensors that "become ready and preempt ``l``" are those with a phase-1 block sent
   between ``l``'s first and last blocks. Each of them outranks ``l`` (``l`` was pending
   when the block was chosen) and became ready after ``l``'s first block started (else it
   would have been sent first). Phase-2 blocks do not count: phase 2 ignores priorities,
   so no promotion can move them. If ``l`` has no preempting tensor (e.g. it went in one
   block), ``l`` is skipped without an evaluation.
8. *Promotion.* ``l`` moves in the ranking to just above the best-ranked of its
   preempting tensors, so it outranks all of them; everyone else keeps their relative
   order. One trial per ``l``; it is kept only if ``T`` drops by more than float rounding
   (relative ``1e-12``: the same time added up in another order is no drop). Later ``l``
   are examined on the schedule of the priorities kept so far. The scan runs once, as stated
   (``l = n .. 2``, i.e. 0-based ``n - 1 .. 1``).
9. *Unit size.* US-Byte's README says its partition size comes from Bayesian optimisation
   and points to ByteScheduler's tuning for manual settings; no fixed value is stated.
   The default here is ByteScheduler's default partition, ``1_000_000`` parameters
   (``BYTESCHEDULER_PARTITION``, 1M parameters). A unit larger than every
   tensor is refused: nothing would be cut.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from fusionopt.model._plan import Chunk, Message, Plan
from fusionopt.model._problem import Problem
from fusionopt.model._sync import layerwise_forward
from fusionopt.solvers._result import Outcome, Result
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._catalogue import method

DEFAULT_UNIT_PARAMETERS = 1_000_000
USBYTE_NEEDS = Needs(plain=True, layerwise=True)
PRIORITY_MODES = ("search", "forward")
# A promotion is kept when T drops by more than this relative amount: equal times that the
# two schedules add up in different orders are not a drop (reading 8).
IMPROVEMENT_RTOL = 1e-12


@dataclass(frozen=True, eq=False)
class BlockSchedule:
    """The blocks US-Byte sends under one priority ranking, as its dynamic policy times them.

    Times in seconds from the start of the backward; per-block arrays in the order sent.

    Attributes
    ----------
    priority_order : tuple of int
        Tensors (0-based forward indices) from best priority (smallest rank) to worst.
    chunks : tuple of Chunk
        Each block: bytes ``[lo, hi)`` of one tensor.
    phases : tuple of int
        1 for a block of phase 1 (during the backward), 2 for phase 2.
    start, end : ndarray
        When each block starts and ends on the channel.
    iteration_time : float
        ``T`` under layerwise sync (MODEL.md section 4), computed by the policy itself.
    """

    priority_order: tuple[int, ...]
    chunks: tuple[Chunk, ...]
    phases: tuple[int, ...]
    start: np.ndarray
    end: np.ndarray
    iteration_time: float

    @property
    def plan(self) -> Plan:
        """The static plan: one message per block, in the order sent."""
        return Plan(tuple(Message((chunk,)) for chunk in self.chunks))

    def count(self, phase: int) -> int:
        """Number of blocks sent in ``phase`` (1 or 2)."""
        return sum(1 for p in self.phases if p == phase)


def _check_problem(problem: Problem, unit_parameters: Any) -> tuple[float, float, int]:
    """Validate the input; return ``(alpha, beta, unit_bytes)``."""
    USBYTE_NEEDS.check(problem, "usbyte")
    affine = problem.cost.affine
    if affine is None:
        raise ValueError(
            f"usbyte needs an affine cost c(S) = alpha + beta S (e.g. AlphaBeta): its block sizes "
            f"come from the block cost a + b S_p k, and {type(problem.cost).__name__} is not affine"
        )
    if (isinstance(unit_parameters, bool) or not isinstance(unit_parameters, (int, np.integer))
            or unit_parameters < 1):
        raise ValueError(f"unit_parameters must be an integer >= 1, got {unit_parameters!r}")
    profile = problem.profile
    # A unit larger than every tensor cuts nothing: each tensor is then one (short) unit and
    # the phases schedule whole tensors.
    unit_bytes = int(unit_parameters) * profile.dtype_bytes
    return float(affine[0]), float(affine[1]), unit_bytes


def _check_order(priority_order: Sequence[int], n: int) -> list[int]:
    order = [int(i) for i in priority_order]
    if sorted(order) != list(range(n)):
        raise ValueError(f"priority_order must be a permutation of 0..{n - 1}, got {list(priority_order)!r}")
    return order


def dispatch(problem: Problem, priority_order: Sequence[int], *,
             unit_parameters: int = DEFAULT_UNIT_PARAMETERS) -> BlockSchedule:
    """Run US-Byte's two phases under one priority ranking (module docstring, readings 1-6).

    Parameters
    ----------
    problem : Problem
        Plain model, ``sync="layerwise"``, affine cost.
    priority_order : sequence of int
        A permutation of the tensors' 0-based forward indices, best priority first
        (``range(n)`` is forward order).
    unit_parameters : int
        ``S_p``, parameters per unit.

    Returns
    -------
    BlockSchedule

    Examples
    --------
    MODEL.md section 5, layerwise, ``alpha = 0.75 ms``, ``beta = 1 ms/MB`` and units of
    100,000 float32 parameters (0.4 MB, ``b S_p = 0.4 ms``), forward order. t3 is ready at
    1 ms, t2 at 3, t1 at 6 (``B``). At 1, ``D = 2``: t3 sends ``ceil(1.25 / 0.4) = 4`` of its
    5 units (1 -> 3.35). At 3.35, ``D = 2.65``: t2 outranks t3 and goes whole (-> 5.1). At
    5.1, ``D = 0.9``: t3's last unit (-> 6.25). Phase 2: t1 6.25 -> 11.
    ``T = 11 + 3 = 14`` ms.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(0.75e-3, 1e-9), sync="layerwise")
    >>> s = dispatch(problem, [0, 1, 2], unit_parameters=100_000)
    >>> [(c.tensor, c.lo, c.hi) for c in s.chunks], s.phases
    ([(2, 0, 1600000), (1, 0, 1000000), (2, 1600000, 2000000), (0, 0, 4000000)], (1, 1, 1, 2))
    >>> (s.end * 1e3).round(9).tolist(), round(s.iteration_time * 1e3, 9)
    ([3.35, 5.1, 6.25, 11.0], 14.0)
    """
    alpha, beta, unit_bytes = _check_problem(problem, unit_parameters)
    order = _check_order(priority_order, problem.profile.n)
    return _dispatch(problem, order, alpha, beta, unit_bytes)


def _dispatch(problem: Problem, order: list[int], alpha: float, beta: float, unit_bytes: int) -> BlockSchedule:
    profile = problem.profile
    n = profile.n
    ready = profile.ready_times.tolist()
    sizes = profile.sizes.tolist()
    rank = [0] * n
    for position, i in enumerate(order):
        rank[i] = position
    unit_cost = beta * unit_bytes                    # the paper's b S_p, seconds per unit
    durations: dict[int, float] = {}

    def cost(nbytes: int) -> float:
        # The problem's own cost, so the static plan's simulation adds the same numbers.
        if nbytes not in durations:
            durations[nbytes] = float(problem.cost(nbytes))
        return durations[nbytes]

    sent = [0] * n                                   # bytes of each tensor sent so far
    chunks: list[Chunk] = []
    phases: list[int] = []
    starts: list[float] = []
    ends: list[float] = []

    def send(i: int, hi: int, t: float, phase: int) -> float:
        end = t + cost(hi - sent[i])
        chunks.append(Chunk(i, sent[i], hi))
        phases.append(phase)
        starts.append(t)
        ends.append(end)
        sent[i] = hi
        return end

    # Gradients arrive in the profile's ready order (ready times non-decreasing along it).
    releases = list(profile.ready_order)
    released = 0
    pending: list[tuple[int, int]] = []              # heap of (rank, tensor)
    t = ready[releases[0]]
    while True:
        while released < n and ready[releases[released]] <= t:
            heapq.heappush(pending, (rank[releases[released]], releases[released]))
            released += 1
        if released == n:
            break                                    # no gradient left to wait for: phase 2
        next_ready = ready[releases[released]]
        if not pending:
            t = next_ready                           # nothing to send: the channel idles
            continue
        i = pending[0][1]
        gap = next_ready - t
        remainder = -(-(sizes[i] - sent[i]) // unit_bytes)      # units left, the last maybe short
        if gap < alpha:
            units = 1
        elif unit_cost == 0:
            units = remainder
        else:
            units = max(1, math.ceil((gap - alpha) / unit_cost))
        if units < remainder:
            t = send(i, sent[i] + units * unit_bytes, t, 1)
        else:
            t = send(i, sizes[i], t, 1)
            heapq.heappop(pending)
    for i in range(n):                               # phase 2: remainders, forward order
        if sent[i] < sizes[i]:
            t = send(i, sizes[i], t, 2)

    # Layerwise sync (MODEL.md section 4), in the simulator's order of operations.
    reduced = [-math.inf] * n
    for chunk, end in zip(chunks, ends):
        reduced[chunk.tensor] = max(reduced[chunk.tensor], end)
    clock = layerwise_forward(profile, np.array(reduced))[1]
    start_array, end_array = np.array(starts), np.array(ends)
    start_array.setflags(write=False)
    end_array.setflags(write=False)
    return BlockSchedule(tuple(order), tuple(chunks), tuple(phases), start_array, end_array, float(clock))


def _preempting(schedule: BlockSchedule, l: int) -> list[int]:
    """Tensors with a phase-1 block between tensor ``l``'s first and last blocks (reading 7)."""
    positions = [k for k, c in enumerate(schedule.chunks) if c.tensor == l]
    between = range(positions[0] + 1, positions[-1])
    return sorted({schedule.chunks[k].tensor for k in between
                   if schedule.phases[k] == 1 and schedule.chunks[k].tensor != l})


@method("usbyte", family="paper",
        summary="US-Byte: unequal blocks in gaps, priority search (layerwise)",
        in_default_comparison=False)
@declares(USBYTE_NEEDS)
def usbyte(
    problem: Problem,
    *,
    unit_parameters: int = DEFAULT_UNIT_PARAMETERS,
    priority: str = "search",
) -> Result:
    """US-Byte's block schedule (docs/methods.md, section usbyte), emitted as a static plan.

    Phase 1 fills the channel's idle gaps during the backward with blocks of the pending
    tensor of best priority, sized to end when the next gradient arrives; phase 2 sends
    every remainder after the backward in forward order; the priority search promotes
    tensors that others preempt when that lowers ``T``. The module docstring states the
    algorithm and every choice the paper leaves open (our readings).

    Parameters
    ----------
    problem : Problem
        Plain model with ``sync="layerwise"`` and an affine cost (``AlphaBeta``);
        ``ValueError`` otherwise.
    unit_parameters : int, keyword-only
        ``S_p``, parameters per unit (``S_p * dtype_bytes`` bytes); default 1,000,000,
        ByteScheduler's default partition (reading 9). Must not exceed every tensor.
    priority : {"search", "forward"}, keyword-only
        ``"search"``: the paper's low-complexity search from forward order; ``"forward"``:
        forward order (tensor 1 first), no search.

    Returns
    -------
    Result
        ``stats``: ``unit_parameters``, ``unit_bytes``, ``priority``, ``priority_order``
        (0-based forward indices, best first), ``evaluations`` (policy simulations run,
        the first included: 1 for ``"forward"``), ``promotions`` (changes kept),
        ``phase1_blocks`` and ``phase2_blocks``.

    Examples
    --------
    MODEL.md section 5, layerwise, ``alpha = 0.75 ms``, ``beta = 1 ms/MB``, units of
    100,000 parameters (0.4 MB). In forward order (:func:`dispatch`'s example) t2 preempts
    t3, and ``T = 14`` ms. The search promotes t3 above t2: t3's last unit goes at 3.35
    (-> 4.5), t2 fills 4.5 -> 6.05 with ``ceil(0.75 / 0.4) = 2`` of its 3 units; phase 2
    sends t1 (6.05 -> 10.8) and t2's last 0.2 MB (-> 11.75), and
    ``T = 10.8 + 1 + 1 + 1 = 13.8`` ms.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(0.75e-3, 1e-9), sync="layerwise")
    >>> round(usbyte(problem, unit_parameters=100_000, priority="forward").iteration_time * 1e3, 9)
    14.0
    >>> result = usbyte(problem, unit_parameters=100_000)
    >>> round(result.iteration_time * 1e3, 9), result.stats["priority_order"]
    (13.8, (0, 2, 1))
    >>> result.stats["evaluations"], result.stats["phase1_blocks"], result.stats["phase2_blocks"]
    (2, 3, 2)
    >>> usbyte(Problem(profile, AlphaBeta(0.75e-3, 1e-9)))
    Traceback (most recent call last):
    ...
    ValueError: usbyte is for sync='layerwise' only (...), and this problem has sync='barrier'
    """
    alpha, beta, unit_bytes = _check_problem(problem, unit_parameters)
    if priority not in PRIORITY_MODES:
        raise ValueError(f"unknown priority {priority!r}: choose 'search' or 'forward'")
    n = problem.profile.n
    order = list(range(n))
    best = _dispatch(problem, order, alpha, beta, unit_bytes)
    evaluations, promotions = 1, 0
    if priority == "search":
        for l in range(n - 1, 0, -1):
            preempting = _preempting(best, l)
            if not preempting:
                continue
            top = min(order.index(j) for j in preempting)
            trial_order = [i for i in order if i != l]
            trial_order.insert(top, l)
            trial = _dispatch(problem, trial_order, alpha, beta, unit_bytes)
            evaluations += 1
            if trial.iteration_time < best.iteration_time * (1 - IMPROVEMENT_RTOL):
                best, order = trial, trial_order
                promotions += 1
    def check(result: Result) -> None:
        if result.iteration_time != best.iteration_time:
            raise AssertionError(f"usbyte: the policy timed T = {best.iteration_time!r} s but its plan simulates to "
                                 f"{result.iteration_time!r} s")

    return Outcome(best.plan, space="any", stats={
        "unit_parameters": int(unit_parameters),
        "unit_bytes": unit_bytes,
        "priority": priority,
        "priority_order": best.priority_order,
        "evaluations": evaluations,
        "promotions": promotions,
        "phase1_blocks": best.count(1),
        "phase2_blocks": best.count(2),
    }, check=check)
