"""The least channel time of N bytes bounds every split of them into messages, for measured
(piecewise linear) and composite costs as for affine ones."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusionopt.model import Problem, Profile, least_channel_time, ps_lower_bound
from fusionopt.cost import AlphaBeta, Composite, PiecewiseLinear
from fusionopt.model import ParameterServer


@st.composite
def measured_costs(draw):
    count = draw(st.integers(1, 6))
    sizes = sorted(draw(st.lists(st.integers(1, 10**7), min_size=count, max_size=count, unique=True)))
    steps = draw(st.lists(st.floats(0.0, 1e-3), min_size=count, max_size=count))
    return PiecewiseLinear(sizes, np.cumsum(steps))


@st.composite
def splits(draw):
    parts = draw(st.lists(st.integers(1, 3 * 10**7), min_size=1, max_size=8))
    return parts


@settings(deadline=None)
@given(cost=measured_costs(), parts=splits(), with_pull=st.booleans())
def test_every_split_costs_at_least_the_least_channel_time(cost, parts, with_pull):
    if with_pull:
        cost = Composite([(cost, 1.0), (AlphaBeta(2e-5, 1e-10), 0.5)])
    total = sum(parts)
    assert float(np.sum(cost(np.array(parts, dtype=float)))) >= least_channel_time(cost, total) * (1 - 1e-12)


def test_a_measured_curve_bounds_the_bytes_not_only_one_message():
    # Past the last point the curve runs on at 1 ns/B from 110 us at 1e5 B, so one 1 MB
    # message costs 1.01 ms, the least per byte (1.01 ns/B) of any message up to 1 MB: every
    # split of 1 MB costs at least 1.01 ms, where c(1) = 10 us alone said almost nothing.
    measured = PiecewiseLinear([1e3, 1e4, 1e5], [1e-5, 2e-5, 1.1e-4])
    assert least_channel_time(measured, 10**6) == pytest.approx(1.0e6 * (1.1e-4 + 1e-9 * 9e5) / 1e6, rel=1e-12)
    assert least_channel_time(measured, 10**6) <= measured(1e6)
    assert least_channel_time(measured, 500) == pytest.approx(1e-5)        # below the first point: c(1)
    assert least_channel_time(AlphaBeta(1e-3, 1e-9), 10**6) == pytest.approx(2e-3)


def test_the_parameter_servers_bound_counts_the_bytes_of_a_measured_push():
    # Pushes on a measured curve (100 us at 1 kB, 100 ms at 100 MB, linear between) of
    # 7 MB in all: whatever the split, the push channel carries 7 MB in at least
    # c(7 MB) = 1e-4 + (7e6 - 1e3) * (0.1 - 1e-4) / (1e8 - 1e3) s. With partitioned compute
    # and delta = 0 the first chunk may be ready at 0; the last push's update (0) and pull
    # (c(1) = 100 us) and U + F + W = 3 ms follow. Charging one smallest push gave only
    # B + 2 c(1) + F = 9.2 ms.
    curve = PiecewiseLinear([1e3, 1e8], [1e-4, 0.1])
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    problem = Problem(profile, pattern=ParameterServer(curve, partition_compute=True))
    push = 1e-4 + (7e6 - 1e3) * (0.1 - 1e-4) / (1e8 - 1e3)
    assert ps_lower_bound(problem) == pytest.approx(push + 1e-4 + 3e-3, rel=1e-12)
    assert ps_lower_bound(problem) > 9.2e-3
