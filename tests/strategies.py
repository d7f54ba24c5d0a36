"""Hypothesis strategies for random profiles, cost models, problems and plans."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from fusionopt.cost import AlphaBeta, PiecewiseLinear
from fusionopt.model import Chunk, Message, Plan, Problem, Profile, ShardedPlan

# Compute times: exact zeros (biases) mixed with positive times up to 10 ms.
times = st.one_of(st.just(0.0), st.floats(min_value=1e-6, max_value=1e-2, allow_nan=False))
sizes = st.integers(min_value=1, max_value=10_000_000)


@st.composite
def profiles(draw, min_n: int = 1, max_n: int = 8, with_updates: bool = True) -> Profile:
    n = draw(st.integers(min_n, max_n))
    update = draw(st.lists(times, min_size=n, max_size=n)) if with_updates and draw(st.booleans()) else None
    profile = Profile.from_arrays(
        draw(st.lists(sizes, min_size=n, max_size=n)),
        draw(st.lists(times, min_size=n, max_size=n)),
        draw(st.lists(times, min_size=n, max_size=n)),
        update=update,
    )
    if not draw(st.booleans()):
        return profile
    # A ready order other than reverse forward order: shuffle each run of tensors that are
    # ready at the same moment (as autograd orders a layer's weight and bias).
    order: list[int] = []
    run: list[int] = []
    ready = profile.ready_times
    for i in range(n - 1, -1, -1):
        if run and ready[i] != ready[run[0]]:
            order.extend(draw(st.permutations(run)))
            run = []
        run.append(i)
    order.extend(draw(st.permutations(run)))
    return profile.with_orders(ready_order=order)


alpha_beta = st.builds(
    AlphaBeta,
    alpha=st.one_of(st.just(0.0), st.floats(1e-7, 5e-3)),
    beta=st.one_of(st.just(0.0), st.floats(1e-12, 1e-8)),
)


@st.composite
def piecewise_linear(draw) -> PiecewiseLinear:
    k = draw(st.integers(1, 5))
    points = sorted(set(draw(st.lists(st.integers(1, 20_000_000), min_size=k, max_size=k))))
    increments = draw(st.lists(st.floats(0.0, 2e-3), min_size=len(points), max_size=len(points)))
    return PiecewiseLinear(points, np.cumsum(increments))


costs = st.one_of(alpha_beta, piecewise_linear())


@st.composite
def problems(draw, min_n: int = 1, max_n: int = 8, cost=costs, sync=None) -> Problem:
    profile = draw(profiles(min_n, max_n))
    chosen_sync = draw(st.sampled_from(["barrier", "layerwise"])) if sync is None else sync
    return Problem(profile, draw(cost), sync=chosen_sync)


def cut_vectors(n: int):
    return st.lists(st.booleans(), min_size=n - 1, max_size=n - 1).map(lambda c: np.array(c, dtype=bool))


@st.composite
def partition_plans(draw, profile: Profile) -> Plan:
    """Any valid plan: tensors cut into up to 3 chunks, chunks shuffled, grouped into messages."""
    chunks = []
    for i, size in enumerate(profile.sizes.tolist()):
        cuts = sorted(set(draw(st.lists(st.integers(1, max(1, size - 1)), max_size=2)))) if size > 1 else []
        bounds = [0] + cuts + [size]
        chunks.extend(Chunk(i, lo, hi) for lo, hi in zip(bounds, bounds[1:]))
    order = draw(st.permutations(range(len(chunks))))
    shuffled = [chunks[k] for k in order]
    breaks = draw(st.lists(st.booleans(), min_size=len(shuffled) - 1, max_size=len(shuffled) - 1))
    messages, current = [], [shuffled[0]]
    for chunk, new_message in zip(shuffled[1:], breaks):
        if new_message:
            messages.append(Message(tuple(current)))
            current = []
        current.append(chunk)
    messages.append(Message(tuple(current)))
    return Plan(tuple(messages))


@st.composite
def sharded_plans(draw, n: int) -> ShardedPlan:
    """A fully sharded plan of ``n`` tensors (MODEL.md 8.2): random units, reshard flags,
    depths up to one past the units, a root half the time, persistent tensors half the time."""
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1))) if n > 1 else []
    bounds = [0, *cuts, n]
    m = len(bounds) - 1
    root = m >= 2 and draw(st.booleans())
    reshard = draw(st.lists(st.booleans(), min_size=m, max_size=m))
    if root:
        reshard[0] = reshard[-1] = False
    persistent = draw(st.lists(st.booleans(), min_size=n, max_size=n)) if draw(st.booleans()) else None
    return ShardedPlan(bounds, reshard, forward_prefetch=draw(st.integers(0, m + 1)),
                       backward_prefetch=draw(st.integers(0, m + 1)), root=root, persistent=persistent)
