"""From measured events to per-tensor times: the rules both profile readers share (no torch).

MODEL.md section 1 describes a backward that runs ``n, ..., 1`` and makes tensor ``i``
ready at ``r_i = sum_{k >= i} b_k``: ready times fall with the forward index. A measured
backward gives each gradient its own ready time ``R_i`` (seconds from the start of the
backward), in whatever order autograd ran. :func:`backward_times` turns them into ``b``:

* ``r_i = max_{k >= i} R_k``: a tensor counts as ready once it *and every tensor after it*
  in forward order are ready. When the ready order is the reverse of the forward order
  (plain feed-forward models) this is ``R_i`` exactly; otherwise it never claims a gradient
  earlier than it was measured, and ``B = max R``.
* ``b_i = r_i - r_{i+1}`` (``r_{n+1} = 0``): each tensor gets the gap from the ready event
  before it, the first one from the start of the backward. Gradients of one layer that
  become ready together keep their measured gaps: the first gets the layer's backward
  compute and the next the few microseconds between them, so the profile's ready times are
  the measured ones. Splitting the layer's gap by size instead would claim that the first
  gradient was ready before it was.

Forward times come per *unit* (a module call, or an operator) and go to the last of the
unit's tensors in forward order (MODEL.md: a layer puts its compute time on one tensor and 0
on the others). The last, so that with ``sync="layerwise"`` the layer's forward waits for
all of its tensors to be reduced.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np


# How the reader sums up the steps it measured: each figure's median or mean over them.
STATISTICS = {"median": np.median, "mean": np.mean}


def enveloped_ready_times(ready: Sequence[float]) -> np.ndarray:
    """``r_i = max_{k >= i} R_k``: measured ready times (forward order, seconds) made
    non-increasing in the forward index without moving any earlier.

    >>> enveloped_ready_times([6.0, 3.0, 1.0]).tolist()
    [6.0, 3.0, 1.0]
    >>> enveloped_ready_times([6.0, 1.0, 3.0]).tolist()   # tensor 1 waits for tensor 2
    [6.0, 3.0, 3.0]
    """
    measured = np.asarray(ready, dtype=np.float64)
    return np.maximum.accumulate(measured[::-1])[::-1].copy()


def layer_consistent_ready_times(ready: Sequence[float], sequence: Sequence[int],
                                 unit_of: Sequence[int]) -> np.ndarray:
    """Enveloped ready times (forward order, seconds) under which the hooks' order within
    each layer is a ready order: along ``sequence`` (forward indices in the order the hooks
    fired), a tensor counts as ready no earlier than the tensors of its layer (``unit_of``)
    whose hooks fired before it. Raising never moves a time earlier; the envelope and this
    rule are applied until neither changes anything.

    An LSTM layer's gradients arrive ``weight_ih, weight_hh, bias_hh, bias_ih`` (forward
    order ``weight_ih, weight_hh, bias_ih, bias_hh``), microseconds apart: the envelope
    alone would put ``bias_hh`` strictly first; with the rule the four tie, in hook order.

    >>> layer_consistent_ready_times([4.0, 5.0, 7.0, 6.0], [0, 1, 3, 2], [0, 0, 0, 0]).tolist()
    [7.0, 7.0, 7.0, 7.0]
    >>> layer_consistent_ready_times([6.0, 1.0, 3.0], [1, 2, 0], [0, 1, 2]).tolist()
    [6.0, 3.0, 3.0]
    """
    r = enveloped_ready_times(ready)
    while True:
        raised = r.copy()
        latest: dict[int, float] = {}
        for i in sequence:
            unit = unit_of[i]
            if unit in latest and latest[unit] > raised[i]:
                raised[i] = latest[unit]
            latest[unit] = max(latest.get(unit, -np.inf), raised[i])
        raised = enveloped_ready_times(raised)
        if np.array_equal(raised, r):
            return r
        r = raised


def backward_times(ready: Sequence[float]) -> np.ndarray:
    """Backward time ``b_i`` of each tensor (seconds, forward order) from ready times
    ``r_i`` that are already non-increasing (see :func:`enveloped_ready_times`).

    >>> backward_times([6.0, 3.0, 1.0]).tolist()
    [3.0, 2.0, 1.0]
    >>> backward_times(enveloped_ready_times([6.0, 1.0, 3.0])).tolist()
    [3.0, 0.0, 3.0]
    """
    r = np.asarray(ready, dtype=np.float64)
    nxt = np.append(r[1:], 0.0)
    return np.maximum(r - nxt, 0.0)


def step_backward(ready_per_step: Iterable[Sequence[float]], sequence: Sequence[int] | None = None,
                  unit_of: Sequence[int] | None = None, *, statistic: str = "median") -> tuple[np.ndarray, np.ndarray]:
    """Median (or mean) over steps of the enveloped ready times, and the backward times they give.

    Each step's measured ready times (forward order, seconds from the start of its
    backward) are enveloped (with ``sequence`` and ``unit_of``, made consistent with the
    hooks' order within each layer: :func:`layer_consistent_ready_times`), then the median
    (``statistic="mean"``: the mean) is taken tensor by tensor; medians and means of
    non-increasing vectors are non-increasing, so every ``b_i >= 0``, and tensors tied in
    every step stay tied.

    >>> r, b = step_backward([[6.0, 3.0, 1.0], [8.0, 3.0, 2.0], [7.0, 5.0, 1.0]])
    >>> r.tolist(), b.tolist()
    ([7.0, 3.0, 1.0], [4.0, 2.0, 1.0])
    >>> step_backward([[6.0, 3.0, 1.0], [8.0, 3.0, 2.0], [7.0, 6.0, 3.0]], statistic="mean")[0].tolist()
    [7.0, 4.0, 2.0]
    """
    if sequence is not None and unit_of is not None:
        table = np.array([layer_consistent_ready_times(step, sequence, unit_of) for step in ready_per_step],
                         dtype=np.float64)
    else:
        table = np.array([enveloped_ready_times(step) for step in ready_per_step], dtype=np.float64)
    ready = STATISTICS[statistic](table, axis=0)
    return ready, backward_times(ready)


def ready_order(ready: Sequence[float]) -> list[int]:
    """Forward indices in the order their gradients became ready (ties: higher index first).

    >>> ready_order([6.0, 1.0, 3.0])
    [1, 2, 0]
    """
    measured = np.asarray(ready, dtype=np.float64)
    n = len(measured)
    return sorted(range(n), key=lambda i: (measured[i], n - i))


def is_reverse_forward(order: Sequence[int]) -> bool:
    """Whether ``order`` (forward indices, ready order) is ``n-1, ..., 0``.

    >>> is_reverse_forward([2, 1, 0]), is_reverse_forward([1, 2, 0])
    (True, False)
    """
    return list(order) == list(range(len(order) - 1, -1, -1))


def exclusive_times(spans: Sequence[tuple[float, float]], parents: Sequence[int | None]) -> np.ndarray:
    """Time of each unit (seconds) less the time of the units nested directly in it.

    ``spans[k]`` is unit ``k``'s ``(start, end)``; ``parents[k]`` the unit it is nested in,
    or ``None``.

    >>> exclusive_times([(0.0, 10.0), (2.0, 5.0), (6.0, 7.0)], [None, 0, 0]).tolist()
    [6.0, 3.0, 1.0]
    """
    inclusive = np.array([max(end - start, 0.0) for start, end in spans], dtype=np.float64)
    own = inclusive.copy()
    for k, parent in enumerate(parents):
        if parent is not None:
            own[parent] -= inclusive[k]
    return np.maximum(own, 0.0)


def span_times(spans: Sequence[tuple[float, float]], forward_end: float) -> np.ndarray:
    """Per unit, the span from its start to the next unit's start (the last one's to
    ``forward_end``): every moment from the first unit's start to the end of the forward goes
    to the unit running, or last started, then. Units whose span is ``None`` get 0.

    >>> span_times([(0.0, 30.0), (40.0, 50.0), None], 100.0).tolist()
    [40.0, 60.0, 0.0]
    """
    timed = sorted((s[0], k) for k, s in enumerate(spans) if s is not None)
    out = np.zeros(len(spans), dtype=np.float64)
    for (start, k), following in zip(timed, timed[1:] + [(forward_end, None)]):
        out[k] = max(following[0] - start, 0.0)
    return out


def forward_times(n: int, unit_tensors: Sequence[Sequence[int]], unit_times: Sequence[float]) -> np.ndarray:
    """Per-tensor forward times (seconds, forward order): each unit's time goes to the last
    of its tensors in forward order; units without tensors are left out.

    >>> forward_times(4, [[0, 1], [2, 3], []], [5.0, 2.0, 9.0]).tolist()
    [0.0, 5.0, 0.0, 2.0]
    """
    f = np.zeros(n, dtype=np.float64)
    for tensors, t in zip(unit_tensors, unit_times):
        if len(tensors):
            f[max(tensors)] += float(t)
    return f
