"""``method="layerwise-opt"``: the best layerwise plan fusionopt finds, by local search.

With ``sync="layerwise"`` a plan can win by cutting tensors into blocks and by sending the
blocks the next forward needs first (MODEL.md section 4). The published schedulers each
fix one shape of plan (P3's small slices, ByteScheduler's partitions and credit, US-Byte's
gap-filling blocks) and the fusion DP another (contiguous groups in backward order). This
method starts from the best of them and improves it:

1. **Starts.** ``dp``, ``wfbp``, ``p3``, ``bytescheduler``, ``bytescheduler-tuned`` and
   ``usbyte`` (when its unit fits the model), each simulated; the fastest is the start.
   So the result is never slower than any of them, US-Byte included.
2. **Iterated local search** over general plans (ordered messages of chunks): a
   first-improvement descent until a full pass finds nothing, then ``kicks`` random
   perturbations (a message moved elsewhere, two neighbours merged, or a message cut at a
   random point; every other kick two of them) each followed by a descent, keeping what is
   faster. The descent tries, for
   each message ``k`` in channel order:

   * *swap* ``k`` and ``k + 1`` (order);
   * *merge* ``k`` and ``k + 1`` into one message (fusion across tensors: saves a latency);
   * *move* one chunk from the end of ``k`` to ``k + 1`` or from the start of ``k + 1`` to
     ``k`` (block boundaries, chunks ordered by forward index);
   * *split* ``k`` in two at half its bytes (between chunks, or inside a lone chunk at a
     multiple of the dtype size), the half with the smaller forward indices first, or last;
   * *shift* the boundary between a chunk of ``k`` and the next piece of the same tensor,
     in whichever message it is, by half of either piece.

   A move is kept when it lowers ``T`` by more than a relative ``1e-12``, and a merge also
   when it does not raise ``T`` (one message fewer, so the search cannot cycle). Plans are
   scored by the model: :func:`~fusionopt.model.block_iteration_time` on the plain
   model, :func:`~fusionopt.model.simulate` with an extension on; :func:`~fusionopt.solvers.finish` re-simulates the result.

The moves, their order and the acceptance rule are our design; the search is a heuristic
(no optimality claim): its ``Result`` carries the fluid bound and the gap to it, and
``cpsat`` with ``unit_parameters`` is the exact reference on small instances.
"""

from __future__ import annotations

import time

import numpy as np

from fusionopt.model._blocks import Block, BlockTimes
from fusionopt.model._plan import Chunk, Message, Plan
from fusionopt.model._problem import Problem
from fusionopt.model._simulator import simulate
from fusionopt.solvers._result import Interrupted, Outcome, Result, Status
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._catalogue import deadline as solve_deadline, get_method, method
import fusionopt.solvers._warm as warm

STARTS = ("dp", "wfbp", "p3", "bytescheduler", "bytescheduler-tuned", "usbyte")
_IMPROVEMENT = 1e-12



@method("layerwise-opt", family="search", summary="ours: the best layerwise start improved by local search (layerwise)")
@declares(Needs(layerwise=True))
def layerwise_opt(problem: Problem, *, time_limit: float = 2.0, kicks: int = 200, rng: int | None = 0,
                  starts: tuple[str, ...] | None = None) -> Result:
    """The best layerwise plan found from the published schedulers by local search.

    Parameters
    ----------
    time_limit : float
        Seconds for the whole solve, its starts included (positive, finite): the solve's
        :func:`~fusionopt.solvers.deadline`, checked between moves.
    kicks : int
        Perturbations after the first descent (iterated local search), each followed by a
        descent; the result is kept if it is faster. ``0``: one descent only. The search is deterministic for a
        given ``rng`` unless ``time_limit`` stops it first.
    rng : int or None
        Seed of the kicks.
    starts : tuple of str, optional
        Methods whose plans compete for the start (default :data:`STARTS`). A start that
        refuses the problem (e.g. US-Byte on a cost that is not affine) is skipped.

    Returns
    -------
    Result
        ``stats``: ``start`` (the method whose plan was the start), ``start_times`` (each
        start's ``T``, seconds), ``moves`` (kept moves by kind), ``kicks`` and
        ``kicks_kept``, ``evaluations`` and ``search_seconds``.

    Raises
    ------
    Interrupted
        On Ctrl-C once a start is solved: its ``result`` is the best plan evaluated so far
        (or the best start), status ``INTERRUPTED``. Before that, a plain ``KeyboardInterrupt``.

    Examples
    --------
    The three-tensor case of ``tests/solvers/test_cpsat_partition.py``: the fusion DP takes
    17 ms and US-Byte 15 ms; sending 1 MB of t3 first, then ``{t1, t2}``, then the rest of
    t3 takes 14 ms, the optimum, which the search reaches from US-Byte's plan.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Problem, Profile
    >>> profile = Profile.from_arrays([1e6, 1e6, 6e6], [2e-3] * 3, [1e-3] * 3)
    >>> problem = Problem(profile, AlphaBeta(1e-3, 1e-9), sync="layerwise")
    >>> result = layerwise_opt(problem)
    >>> round(result.iteration_time * 1e3, 9), result.stats["start"]
    (14.0, 'usbyte')
    """
    if isinstance(kicks, bool) or not isinstance(kicks, (int, np.integer)) or kicks < 0:
        raise ValueError(f"kicks must be an integer >= 0, got {kicks!r}")
    if isinstance(starts, str):          # "wfbp,dp" from the command line: the method names
        starts = tuple(name.strip() for name in starts.split(",") if name.strip())
    names = STARTS if starts is None else tuple(starts)
    if not names:
        raise ValueError("starts must name at least one method")
    start_times: dict[str, float] = {}
    best: tuple[float, str, Plan] | None = None
    interrupted = False
    for name in names:
        method = get_method(name)
        if (method.plain_only and problem.extensions) or (name == "dp" and problem.extensions):
            continue
        try:
            result = warm.start(problem, name)
        except ValueError:
            continue                                # this start refuses the problem
        except KeyboardInterrupt:
            if best is None:
                raise
            interrupted = True                      # Ctrl-C: the best start so far is the result
            break
        start_times[name] = result.iteration_time
        if best is None or result.iteration_time < best[0]:
            best = (result.iteration_time, name, result.plan)
    if best is None:
        raise ValueError(f"none of the starts {names} accepts this problem")
    _, start_name, start_plan = best

    evaluate = LayerwiseEvaluator(problem)
    generator = np.random.default_rng(rng)
    dtype_bytes = problem.profile.dtype_bytes
    moves = {"swap": 0, "merge": 0, "move": 0, "split": 0, "shift": 0}
    search_started, deadline = time.perf_counter(), solve_deadline()
    messages = [sorted((c.tensor, c.lo, c.hi) for c in m.chunks) for m in start_plan.messages]
    tried = kept = 0
    try:
        if not interrupted:
            messages, current = _descend(messages, evaluate(messages), evaluate, dtype_bytes, deadline, moves)
        while not interrupted and tried < kicks and time.perf_counter() < deadline:
            tried += 1
            candidate = _kick(messages, generator, dtype_bytes)
            if generator.random() < 0.5:                    # every other kick is a double one
                candidate = _kick(candidate, generator, dtype_bytes)
            candidate, value = _descend(candidate, evaluate(candidate), evaluate, dtype_bytes, deadline, moves)
            if value < current * (1 - _IMPROVEMENT):
                messages, current = candidate, value
                kept += 1
    except KeyboardInterrupt:
        # Ctrl-C: the best plan evaluated so far (the start when none was), judged below.
        interrupted = True
        if evaluate.best is not None:
            messages = evaluate.best[1]
    plan = _plan(messages)
    stats = {
        "start": start_name,
        "start_times": start_times,
        "moves": moves,
        "kicks": tried,
        "kicks_kept": kept,
        "evaluations": evaluate.count,
        "search_seconds": time.perf_counter() - search_started,
    }
    if interrupted:
        raise Interrupted(Outcome(plan, stats=stats, space="any",
                                  status=Status.INTERRUPTED)) from None
    return Outcome(plan, stats=stats, space="any")


def _descend(messages: list[list[Block]], current: float, evaluate: "LayerwiseEvaluator", dtype_bytes: int,
             deadline: float, moves: dict[str, int]) -> tuple[list[list[Block]], float]:
    """First-improvement local search from ``messages`` until a pass finds nothing."""
    improved = True
    while improved and time.perf_counter() < deadline:
        improved = False
        k = 0
        while k < len(messages) and time.perf_counter() < deadline:
            for kind, candidate in _neighbours(messages, k, dtype_bytes):
                value = evaluate(candidate)
                # A merge that costs nothing is kept too (one message fewer: no cycling).
                if value < current * (1 - _IMPROVEMENT) or (kind == "merge" and value <= current):
                    messages, current = candidate, value
                    moves[kind] += 1
                    improved = True
                    k = max(k - 1, 0) - 1               # look again around the change
                    break
            k += 1
    return messages, current


def _kick(messages: list[list[Block]], generator: np.random.Generator, dtype_bytes: int) -> list[list[Block]]:
    """A random perturbation: move a random message to a random place, merge two random
    neighbours, or cut a random message at a random point (a random chunk, at a multiple
    of the dtype size inside it)."""
    k = int(generator.integers(len(messages)))
    draw = generator.random()
    if len(messages) > 1 and draw < 0.25:
        rest = messages[:k] + messages[k + 1:]
        j = int(generator.integers(len(rest) + 1))
        return rest[:j] + [messages[k]] + rest[j:]
    if len(messages) > 1 and draw < 0.5:
        k = min(k, len(messages) - 2)
        return messages[:k] + [sorted(messages[k] + messages[k + 1])] + messages[k + 2:]
    message = messages[k]
    j = int(generator.integers(len(message)))
    tensor, lo, hi = message[j]
    units = (hi - lo) // dtype_bytes
    if units >= 2:
        cut = lo + int(generator.integers(1, units)) * dtype_bytes
        first = message[:j] + [(tensor, lo, cut)]
        second = [(tensor, cut, hi)] + message[j + 1:]
    elif 0 < j:
        first, second = message[:j], message[j:]
    else:
        return [list(m) for m in messages]
    pair = [first, second] if generator.random() < 0.5 else [second, first]
    return messages[:k] + pair + messages[k + 1:]


def _neighbours(messages: list[list[Block]], k: int, dtype_bytes: int):
    """Candidate plans around message ``k``: (kind, messages)."""
    following = k + 1 < len(messages)
    if following:
        swapped = messages[:k] + [messages[k + 1], messages[k]] + messages[k + 2:]
        yield "swap", swapped
        yield "merge", messages[:k] + [sorted(messages[k] + messages[k + 1])] + messages[k + 2:]
        if len(messages[k]) > 1:
            yield "move", messages[:k] + [messages[k][:-1], sorted([messages[k][-1]] + messages[k + 1])] + messages[k + 2:]
        if len(messages[k + 1]) > 1:
            yield "move", messages[:k] + [sorted(messages[k] + [messages[k + 1][0]]), messages[k + 1][1:]] + messages[k + 2:]
    halves = _halves(messages[k], dtype_bytes)
    if halves is not None:
        first, second = halves
        yield "split", messages[:k] + [first, second] + messages[k + 1:]
        yield "split", messages[:k] + [second, first] + messages[k + 1:]
    yield from _shifts(messages, k, dtype_bytes)


def _shifts(messages: list[list[Block]], k: int, dtype_bytes: int):
    """Move the boundary between a chunk of message ``k`` and the next piece of the same
    tensor, wherever that is in the plan, by half of either piece (at a multiple of the
    dtype size)."""
    starts = {(tensor, lo): (m, j) for m, message in enumerate(messages) for j, (tensor, lo, _) in enumerate(message)}
    for j, (tensor, lo, hi) in enumerate(messages[k]):
        after = starts.get((tensor, hi))
        if after is None:
            continue
        m, i = after
        _, _, next_hi = messages[m][i]
        for boundary in (lo + (hi - lo) // 2 // dtype_bytes * dtype_bytes,
                         hi + (next_hi - hi) // 2 // dtype_bytes * dtype_bytes):
            if not lo < boundary < next_hi or boundary == hi:
                continue
            shifted = [list(message) for message in messages]
            shifted[k][j] = (tensor, lo, boundary)
            shifted[m][i] = (tensor, boundary, next_hi)
            yield "shift", shifted


def _halves(message: list[Block], dtype_bytes: int) -> tuple[list[Block], list[Block]] | None:
    """A message cut at half its bytes: between chunks, or inside a lone chunk."""
    if len(message) > 1:
        sizes = np.array([hi - lo for _, lo, hi in message])
        cut = int(np.searchsorted(np.cumsum(sizes), sizes.sum() / 2)) + 1
        cut = min(max(cut, 1), len(message) - 1)
        return message[:cut], message[cut:]
    tensor, lo, hi = message[0]
    middle = lo + ((hi - lo) // 2 // dtype_bytes) * dtype_bytes
    if not lo < middle < hi:
        return None
    return [(tensor, lo, middle)], [(tensor, middle, hi)]


def _plan(messages: list[list[Block]]) -> Plan:
    return Plan(tuple(Message(tuple(Chunk(*block) for block in m)) for m in messages))


class LayerwiseEvaluator:
    """``T`` of a plan given as lists of ``(tensor, lo, hi)``, asked of the model (the
    byte-range fast path on the plain model, else the simulator); counts its calls."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.count = 0
        self.fast = None if problem.extensions else BlockTimes(problem)
        self.best: tuple[float, list[list[Block]]] | None = None    # (T, plan): the fastest asked of it

    def __call__(self, messages: list[list[Block]]) -> float:
        self.count += 1
        if self.fast is None:
            value = simulate(self.problem, _plan(messages), validate=False).iteration_time
        else:
            value = self.fast(messages)
        if self.best is None or value < self.best[0]:
            self.best = (value, messages)       # one assignment: a Ctrl-C never leaves it half-made
        return value
