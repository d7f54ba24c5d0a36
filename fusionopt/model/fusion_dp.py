"""The exact fusion dynamic programme (MODEL.md section 7).

For one channel and fusion plans (whole tensors, contiguous groups, backward order), with
``rho_j`` the ready time of the j-th tensor in backward order and ``Q`` the prefix sizes,

    G(0) = -inf,   G(j) = min_{1 <= i <= j} max(rho_j, G(i-1)) + c(Q_j - Q_{i-1}),

is the earliest time the channel can have sent the first ``j`` tensors, and ``E* = G(n)``.
Both sync modes then give ``T* = max(B, E*) + U + F`` (section 7: FIFO fusion plans do not
overlap the forward).

Three algorithms, all exact:

* :func:`optimal_fusion` with an affine cost (``AlphaBeta``): O(n). ``G`` is
  non-decreasing, so the candidates ``i`` with ``G(i-1) <= rho_j`` form a prefix whose best
  member is its last, and the rest form a window sliding right, where the value is
  ``alpha + beta Q_j + (G(i-1) - beta Q_{i-1})``: a monotone deque gives its minimum.
* any other cost: O(n^2), the recurrence evaluated for all ``i`` at once with numpy.
* with ``max_messages = K``: a layered recurrence over "at most k messages", O(K n^2).

``max_message_bytes`` restricts the last message to ``Q_j - Q_{i-1} <= cap``; it keeps the
complexity (the window's left end only moves right) and ``G`` non-decreasing (dropping the
last tensor of a capped plan leaves a capped plan that ends no later).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fusionopt.model.fusion import backward_arrays
from fusionopt.model.problem import Problem


@dataclass(frozen=True)
class FusionOptimum:
    """An optimal fusion plan as a cut vector over backward order, and its figures.

    ``iteration_time`` and ``communication_end`` (``E*``) in seconds.
    """

    cuts: np.ndarray
    communication_end: float
    iteration_time: float
    algorithm: str


def _check_caps(problem: Problem, max_message_bytes: float | None, max_messages: int | None) -> tuple[float, int | None]:
    profile = problem.profile
    cap = math.inf
    if max_message_bytes is not None:
        if isinstance(max_message_bytes, bool) or not isinstance(max_message_bytes, (int, float, np.integer, np.floating)):
            raise ValueError(f"max_message_bytes must be a number of bytes, got {max_message_bytes!r}")
        if math.isnan(max_message_bytes) or max_message_bytes <= 0:
            raise ValueError(f"max_message_bytes must be positive, got {max_message_bytes!r}")
        cap = float(max_message_bytes)
        largest = int(np.argmax(profile.sizes))
        if profile.sizes[largest] > cap:
            raise ValueError(
                f"infeasible: tensor {profile.names[largest]!r} has {int(profile.sizes[largest])} bytes, "
                f"more than max_message_bytes = {max_message_bytes!r}, and a fusion plan never splits a tensor"
            )
    if max_messages is not None:
        if isinstance(max_messages, bool) or not isinstance(max_messages, (int, np.integer)) or max_messages < 1:
            raise ValueError(f"max_messages must be an integer >= 1, got {max_messages!r}")
        max_messages = int(max_messages)
        if cap < math.inf and _fewest_messages(profile.sizes[::-1], cap) > max_messages:
            raise ValueError(
                f"infeasible: max_message_bytes = {max_message_bytes!r} needs at least "
                f"{_fewest_messages(profile.sizes[::-1], cap)} messages, more than max_messages = {max_messages}"
            )
        if max_messages >= profile.n:
            max_messages = None
    return cap, max_messages


def _fewest_messages(sizes_backward: np.ndarray, cap: float) -> int:
    # Greedy packing of contiguous groups is optimal for the fewest groups under a cap.
    count, current = 1, 0
    for s in sizes_backward.tolist():
        if current + s > cap:
            count, current = count + 1, 0
        current += s
    return count


def optimal_fusion(
    problem: Problem,
    *,
    max_message_bytes: float | None = None,
    max_messages: int | None = None,
    algorithm: str = "auto",
) -> FusionOptimum:
    """The optimal fusion plan of ``problem`` by the DP of MODEL.md section 7.

    Parameters
    ----------
    max_message_bytes : float, optional
        Largest message in bytes (a memory cap on the fusion buffer).
    max_messages : int, optional
        Most messages allowed.
    algorithm : {"auto", "linear", "quadratic"}
        ``"linear"`` is the O(n) algorithm for affine costs, ``"quadratic"`` the O(n^2)
        one for any cost; ``"auto"`` picks linear when the cost is affine. With
        ``max_messages`` the layered O(K n^2) recurrence is used.

    Examples
    --------
    MODEL.md section 5 with ``alpha = 3 ms``: cut after t3 only, 17 ms.

    >>> from fusionopt.model import AlphaBeta, Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> best = optimal_fusion(Problem(profile, AlphaBeta(3e-3, 1e-9)))
    >>> best.cuts.tolist(), round(best.iteration_time * 1e3, 9), best.algorithm
    ([True, False], 17.0, 'linear')
    """
    problem.require_plain("the fusion DP")
    if algorithm not in ("auto", "linear", "quadratic"):
        raise ValueError(f"unknown algorithm {algorithm!r}: choose 'auto', 'linear' or 'quadratic'")
    cap, max_messages = _check_caps(problem, max_message_bytes, max_messages)
    affine = problem.cost.affine
    if algorithm == "linear" and affine is None:
        raise ValueError("the linear-time DP needs an affine cost (AlphaBeta); use algorithm='quadratic'")
    rho, prefix = backward_arrays(problem)
    if max_messages is not None:
        last_end, parent = _layered(problem, rho, prefix, cap, max_messages)
        used = "layered"
    elif affine is not None and algorithm != "quadratic":
        last_end, parent = _linear(rho, prefix, cap, *affine)
        used = "linear"
    else:
        last_end, parent = _quadratic(problem, rho, prefix, cap)
        used = "quadratic"
    n = problem.profile.n
    cuts = np.zeros(n - 1, dtype=bool)
    j = n
    while True:
        k = parent[j]
        if k == 0:
            break
        cuts[k - 1] = True
        j = k
    profile = problem.profile
    iteration_time = max(profile.B, last_end) + profile.U + profile.F
    cuts.setflags(write=False)
    return FusionOptimum(cuts=cuts, communication_end=last_end, iteration_time=iteration_time, algorithm=used)


def _linear(rho: np.ndarray, prefix: np.ndarray, cap: float, alpha: float, beta: float) -> tuple[float, list[int]]:
    # G[k] for k = 0..n (k = i - 1 in the module docstring); H[k] = G[k] - beta Q_k.
    n = len(rho)
    r = rho.tolist()
    q = prefix.tolist()
    G = [-math.inf] * (n + 1)
    H = [-math.inf] * (n + 1)
    parent = [0] * (n + 1)
    window: list[int] = []      # candidate k, increasing k and increasing H: a monotone deque
    head = 0
    ready_prefix = 0            # largest k with G[k] <= rho_j
    lowest = 0                  # smallest k with Q_j - Q_k <= cap
    for j in range(1, n + 1):
        k_new = j - 1
        h_new = H[k_new]
        while len(window) > head and H[window[-1]] >= h_new:
            window.pop()
        window.append(k_new)
        rj, qj = r[j - 1], q[j]
        while ready_prefix + 1 <= j - 1 and G[ready_prefix + 1] <= rj:
            ready_prefix += 1
        while qj - q[lowest] > cap:
            lowest += 1
        while head < len(window) and (window[head] <= ready_prefix or window[head] < lowest):
            head += 1
        best, arg = math.inf, -1
        if ready_prefix >= lowest:
            best, arg = rj + alpha + beta * (qj - q[ready_prefix]), ready_prefix
        if head < len(window):
            k = window[head]
            value = alpha + beta * qj + H[k]
            if value < best:
                best, arg = value, k
        G[j] = best
        H[j] = best - beta * qj
        parent[j] = arg
    return G[n], parent


def _quadratic(problem: Problem, rho: np.ndarray, prefix: np.ndarray, cap: float) -> tuple[float, list[int]]:
    n = len(rho)
    G = np.full(n + 1, -np.inf)
    parent = [0] * (n + 1)
    lowest = 0
    cost = problem.cost
    for j in range(1, n + 1):
        while prefix[j] - prefix[lowest] > cap:
            lowest += 1
        previous = G[lowest:j]
        values = np.maximum(previous, rho[j - 1]) + cost(prefix[j] - prefix[lowest:j])
        k = int(np.argmin(values))
        G[j] = values[k]
        parent[j] = lowest + k
    return float(G[n]), parent


def _layered(problem: Problem, rho: np.ndarray, prefix: np.ndarray, cap: float, max_messages: int) -> tuple[float, list[int]]:
    # G_m(j): earliest end of the first j tensors in at most m messages; G_m(0) = -inf.
    n = len(rho)
    cost = problem.cost
    previous = np.full(n + 1, np.inf)
    previous[0] = -np.inf
    parents: list[np.ndarray] = []
    for _ in range(max_messages):
        current = np.full(n + 1, np.inf)
        current[0] = -np.inf
        choice = np.zeros(n + 1, dtype=np.int64)
        lowest = 0
        for j in range(1, n + 1):
            while prefix[j] - prefix[lowest] > cap:
                lowest += 1
            values = np.maximum(previous[lowest:j], rho[j - 1]) + cost(prefix[j] - prefix[lowest:j])
            k = int(np.argmin(values))
            current[j] = values[k]
            choice[j] = lowest + k
        parents.append(choice)
        previous = current
    # Walk back through the layers: the message ending at j chose k in layer m.
    parent = [0] * (n + 1)
    j, layer = n, max_messages - 1
    while j > 0:
        k = int(parents[layer][j])
        parent[j] = k
        j, layer = k, layer - 1
    return float(previous[n]), parent
