"""The exact fusion dynamic programme (MODEL.md section 7).

For one channel and fusion plans (whole tensors, contiguous groups, backward order), with
``rho_j`` the ready time of the j-th tensor in backward order and ``Q`` the prefix sizes,

    G(0) = -inf,   G(j) = min_{1 <= i <= j} max(rho_j, G(i-1)) + c(Q_j - Q_{i-1}),

is the earliest time the channel can have sent the first ``j`` tensors, and ``E* = G(n)``.
Both sync modes then give ``T* = max(B, E*) + U + F + W`` (section 7: FIFO fusion plans do not
overlap the forward).

Three algorithms, all exact:

* :func:`optimal_fusion` with an affine cost (``AlphaBeta``): O(n). ``G`` is
  non-decreasing, so the candidates ``i`` with ``G(i-1) <= rho_j`` form a prefix whose best
  member is its last, and the rest form a window sliding right, where the value is
  ``alpha + beta Q_j + (G(i-1) - beta Q_{i-1})``: a monotone deque gives its minimum.
* any other cost: O(n^2), the recurrence evaluated for all ``i`` at once with numpy.
* with ``max_messages = K``: a layered recurrence over "at most k messages", O(K n^2).
* with ``message_compute = eta > 0`` (MODEL.md section 2.1): message ``m`` is ready at
  ``rho_j + m eta`` (the ``eta`` of every message so far ran on the compute stream), so the
  recurrence counts messages exactly: ``G_m(j) = min_i max(rho_j + m eta, G_{m-1}(i-1)) +
  c(Q_j - Q_{i-1})`` with ``G_0(0) = -inf``, ``E* = min_m G_m(n)``, O(n^2) per layer; a layer
  stops the search once ``rho_n + m eta`` reaches the best ``E`` found. The backward and its
  ``eta`` s end at ``R_M <= E``, so ``T* = E* + U + F + W``. Under layerwise sync it needs a
  zero layerwise slack.
* with ``message_compute_per_byte = eta_B > 0`` (section 2.1): every message's ``eta_B S``
  runs on the compute stream too, and the messages up to the one ending at position ``j``
  carry ``Q_j`` bytes whatever the grouping, so that message is ready at ``rho_j + eta_B Q_j``
  (plus ``m eta``): each recurrence above runs on those ready times, exactly.

``max_message_bytes`` restricts the last message to ``Q_j - Q_{i-1} <= cap``; it keeps the
complexity (the window's left end only moves right) and ``G`` non-decreasing (dropping the
last tensor of a capped plan leaves a capped plan that ends no later).

Layerwise sync with a ready order whose last tensor ``l`` has update or forward work before
it (:func:`~fusionopt.model.layerwise_slack` > 0; a first layer's weight ready
before its bias) breaks ``T = max(B, E) + U + F + W``: tensors of earlier messages may be
updated and run forward while the last message is on the channel. Only messages holding a
tensor of the last group ``L`` (the positions ready at ``B``, forward indices ``0..g``) can
decide ``T``: any other message ends earlier and gates less work. Those messages start at
``B`` or later, back to back, so with ``V(p)`` the least ``max_k (sum of costs up to
message k + tail(min index of message k))`` over splits of positions ``p..n-1``,

    T* = min_{a <= s <= e} max(B + U + F + W, max(G(a), B) + c(Q_{e+1} - Q_a) + max(tail(a..e), V(e+1))),

where ``s`` is the first position of ``L``, the first message holding ``L`` spans positions
``a..e``, and ``tail_i = sum_{k >= i} (u_k + f_k)``. ``O(n |L| + |L|^2)`` after the DP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fusionopt.model._fusion import backward_arrays, layerwise_slack, time_after_channel
from fusionopt.model._problem import Problem


@dataclass(frozen=True)
class FusionOptimum:
    """An optimal fusion plan as a cut vector over backward order, and its figures.

    ``iteration_time`` and ``communication_end`` (``E*``) in seconds.
    """

    cuts: np.ndarray
    communication_end: float
    iteration_time: float
    algorithm: str


def check_caps(problem: Problem, max_message_bytes: float | None, max_messages: int | None) -> tuple[float, int | None]:
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
        if cap < math.inf and fewest_messages(profile.sizes[profile.backward_order], cap) > max_messages:
            raise ValueError(
                f"infeasible: max_message_bytes = {max_message_bytes!r} needs at least "
                f"{fewest_messages(profile.sizes[profile.backward_order], cap)} messages, more than max_messages = {max_messages}"
            )
        if max_messages >= profile.n:
            max_messages = None
    return cap, max_messages


def fewest_messages(sizes_backward: np.ndarray, cap: float) -> int:
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

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> best = optimal_fusion(Problem(profile, AlphaBeta(3e-3, 1e-9)))
    >>> best.cuts.tolist(), round(best.iteration_time * 1e3, 9), best.algorithm
    ([True, False], 17.0, 'linear')
    """
    problem.require_plain("the fusion DP", allowing=("message_compute", "exact_tensors", "compressor"))
    if algorithm not in ("auto", "linear", "quadratic"):
        raise ValueError(f"unknown algorithm {algorithm!r}: choose 'auto', 'linear' or 'quadratic'")
    cap, max_messages = check_caps(problem, max_message_bytes, max_messages)
    rho, prefix = backward_arrays(problem)
    if problem.computes_per_message:
        if layerwise_slack(problem) > 0.0:
            raise ValueError("the fusion DP with message_compute needs a zero layerwise slack (MODEL.md section 7): "
                             "use cpsat, or sync='barrier'")
        rho = rho + problem.message_compute_terms[1] * prefix[1:]      # the casts of every message so far
    if problem.message_compute_terms[0] > 0:
        return _with_message_compute(problem, rho, prefix, cap, max_messages)
    affine = None if problem.prices_by_content else problem.cost.affine
    if algorithm == "linear" and affine is None:
        raise ValueError("the linear-time DP needs an affine cost (AlphaBeta) that prices a message by its bytes "
                         "alone; use algorithm='quadratic'")
    n = problem.profile.n
    layers: list[np.ndarray] = []
    parents: list[np.ndarray] = []
    if max_messages is not None:
        layers, parents = _layered(problem, rho, prefix, cap, max_messages)
        G = layers[-1].tolist()
        parent = _walk_layers(parents, n, max_messages - 1)
        used = "layered"
    elif affine is not None and algorithm != "quadratic":
        G, parent = _linear(rho, prefix, cap, *affine)
        used = "linear"
    else:
        G, parent = _quadratic(problem, rho, prefix, cap)
        used = "quadratic"
    profile = problem.profile
    if layerwise_slack(problem) > 0.0:
        def prefix_end(a: int, budget: int | None) -> float:
            if a == 0:
                return -math.inf
            if budget is None:
                return float(G[a])
            return float(layers[budget - 1][a]) if budget > 0 else math.inf

        iteration_time, last_end, a, e, ends, k_prefix = _layerwise_tail(
            problem, rho, prefix, cap, prefix_end, max_messages)
        if k_prefix is not None and a > 0:
            parent = _walk_layers(parents, a, k_prefix - 1)
        cuts = _cuts_of(parent, a, n)
        for position in [a - 1, e] + ends[:-1]:
            if 0 <= position < n - 1:
                cuts[position] = True
    else:
        last_end = float(G[n])
        cuts = _cuts_of(parent, n, n)
        iteration_time = max(profile.B, last_end) + profile.U + profile.F + profile.W
    cuts.setflags(write=False)
    return FusionOptimum(cuts=cuts, communication_end=last_end, iteration_time=iteration_time, algorithm=used)


def _with_message_compute(problem: Problem, rho: np.ndarray, prefix: np.ndarray, cap: float,
                          max_messages: int | None) -> FusionOptimum:
    """The DP by exact message count of the module docstring (``message_compute > 0``), on
    the ready times ``rho`` with the per-byte compute of every message so far."""
    eta = problem.message_compute_terms[0]
    n = problem.profile.n
    tails, heads = np.triu_indices(n + 1, k=1)
    sizes = prefix[heads] - prefix[tails]
    durations = np.full((n + 1, n + 1), np.inf)          # [i - 1, j]: the message of positions i..j
    durations[tails, heads] = np.where(sizes <= cap, problem.arc_cost(tails, heads, sizes), np.inf)
    previous = np.full(n + 1, np.inf)
    previous[0] = -np.inf
    parents: list[np.ndarray] = []
    best, best_count = math.inf, 0
    for m in range(1, (n if max_messages is None else max_messages) + 1):
        if rho[-1] + m * eta >= best:
            break                                    # more messages end later still
        values = np.maximum(previous[:, None], np.concatenate(([np.inf], rho + m * eta))[None, :]) + durations
        choice = np.argmin(values, axis=0)
        current = values[choice, np.arange(n + 1)]
        current[0] = np.inf
        parents.append(choice)
        previous = current
        if current[n] < best:
            best, best_count = float(current[n]), m
    parent = _walk_layers(parents, n, best_count - 1)
    cuts = _cuts_of(parent, n, n)
    cuts.setflags(write=False)
    return FusionOptimum(cuts=cuts, communication_end=best, iteration_time=time_after_channel(problem.profile, best),
                         algorithm="by message count")


def _linear(rho: np.ndarray, prefix: np.ndarray, cap: float, alpha: float, beta: float) -> tuple[list[float], list[int]]:
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
    return G, parent


def _quadratic(problem: Problem, rho: np.ndarray, prefix: np.ndarray, cap: float) -> tuple[list[float], list[int]]:
    n = len(rho)
    G = np.full(n + 1, -np.inf)
    parent = [0] * (n + 1)
    lowest = 0
    for j in range(1, n + 1):
        while prefix[j] - prefix[lowest] > cap:
            lowest += 1
        previous = G[lowest:j]
        values = np.maximum(previous, rho[j - 1]) + problem.arc_cost(np.arange(lowest, j), j,
                                                                     prefix[j] - prefix[lowest:j])
        k = int(np.argmin(values))
        G[j] = values[k]
        parent[j] = lowest + k
    return G.tolist(), parent


def _layered(problem: Problem, rho: np.ndarray, prefix: np.ndarray, cap: float,
             max_messages: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    # G_m(j): earliest end of the first j tensors in at most m messages; G_m(0) = -inf.
    n = len(rho)
    previous = np.full(n + 1, np.inf)
    previous[0] = -np.inf
    parents: list[np.ndarray] = []
    layers: list[np.ndarray] = []
    for _ in range(max_messages):
        current = np.full(n + 1, np.inf)
        current[0] = -np.inf
        choice = np.zeros(n + 1, dtype=np.int64)
        lowest = 0
        for j in range(1, n + 1):
            while prefix[j] - prefix[lowest] > cap:
                lowest += 1
            values = (np.maximum(previous[lowest:j], rho[j - 1])
                      + problem.arc_cost(np.arange(lowest, j), j, prefix[j] - prefix[lowest:j]))
            k = int(np.argmin(values))
            current[j] = values[k]
            choice[j] = lowest + k
        parents.append(choice)
        layers.append(current)
        previous = current
    return layers, parents


def _walk_layers(parents: list[np.ndarray], j: int, layer: int) -> list[int]:
    # Walk back through the layers: the message ending at j chose k in layer m.
    parent = [0] * (len(parents[0]))
    while j > 0:
        k = int(parents[layer][j])
        parent[j] = k
        j, layer = k, layer - 1
    return parent


def _cuts_of(parent: list[int], j: int, n: int) -> np.ndarray:
    # The cuts of the best prefix of j positions, from the parent of each message's end.
    cuts = np.zeros(n - 1, dtype=bool)
    while j > 0:
        k = parent[j]
        if k == 0:
            break
        cuts[k - 1] = True
        j = k
    return cuts


def _layerwise_tail(problem: Problem, rho: np.ndarray, prefix: np.ndarray, cap: float,
                    prefix_end, max_messages: int | None) -> tuple[float, float, int, int, list[int], int]:
    """The module docstring's ``T*`` when the layerwise slack is positive.

    ``prefix_end(a, budget)`` is ``G(a)`` with at most ``budget`` messages (``None``: no
    limit). Returns ``(T*, E, a, e, suffix message ends, prefix budget)``.
    """
    profile = problem.profile
    n = profile.n
    order = profile.backward_order
    B = profile.B
    # What follows a tensor's reduction: its and later updates and forwards, and the step
    # parts (under layerwise sync only the host's, MODEL.md section 4).
    tail = (profile.update + profile.forward)[::-1].cumsum()[::-1] + profile.W
    s = int(np.searchsorted(rho, B, side="left"))
    cost = problem.arc_cost                      # of the message of positions tail .. head - 1
    budgets = [None] if max_messages is None else list(range(max_messages + 1))
    # V[(p, k)]: best suffix value for positions p..n-1 in at most k messages, and the
    # end position of its first message.
    V: dict[tuple[int, int | None], tuple[float, int]] = {}
    for k in budgets:
        V[(n, k)] = (-math.inf, n)
    for p in range(n - 1, s - 1, -1):
        lows = []
        least = n
        for e in range(p, n):
            least = min(least, int(order[e]))
            size = prefix[e + 1] - prefix[p]
            if size > cap:
                break
            lows.append((e, float(cost(p, e + 1, size)), float(tail[least])))
        for k in budgets:
            if k == 0:
                V[(p, k)] = (math.inf, n)
                continue
            best = (math.inf, n)
            for e, c, t in lows:
                value = c + max(t, V[(e + 1, None if k is None else k - 1)][0])
                if value < best[0]:
                    best = (value, e)
            V[(p, k)] = best
    before = np.minimum.accumulate(order[:s][::-1])[::-1] if s else np.zeros(0, dtype=np.int64)
    found = (math.inf, math.inf, -1, -1, None)
    for e in range(s, n):
        least_in_l = int(order[s:e + 1].min())
        a_values = np.arange(0, s + 1)
        sizes = prefix[e + 1] - prefix[a_values]
        allowed = sizes <= cap
        if not allowed.any():
            continue
        durations = cost(a_values, e + 1, sizes)
        least = np.array([min(least_in_l, int(before[a])) if a < s else least_in_l for a in a_values])
        for k_prefix in budgets:
            if k_prefix is None:
                k_suffix = None
            else:
                k_suffix = max_messages - 1 - k_prefix
                if k_suffix < 0:
                    continue
            after = V[(e + 1, k_suffix)][0]
            if after == math.inf:
                continue
            for a in np.flatnonzero(allowed).tolist():
                g = prefix_end(a, k_prefix)
                if g == math.inf:
                    continue
                start = max(g, B)
                value = max(B + tail[0], start + durations[a] + max(float(tail[least[a]]), after))
                if value < found[0]:
                    found = (value, start + durations[a], a, e, k_prefix)
    value, first_end, a, e, k_prefix = found
    ends = []
    end = first_end
    p, k = e + 1, (None if k_prefix is None else max_messages - 1 - k_prefix)
    while p < n:
        _, last = V[(p, k)]
        end += float(cost(p, last + 1, prefix[last + 1] - prefix[p]))
        ends.append(last)
        p, k = last + 1, (None if k is None else k - 1)
    return value, end, a, e, ends, k_prefix
