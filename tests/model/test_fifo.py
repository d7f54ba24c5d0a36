"""The FIFO recursion in array passes is the sequential loop, bit for bit."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusionopt.model import fifo_ends


def loop(a, d, free_at=-math.inf):
    out, free = [], free_at
    for ak, dk in zip(a, d):
        free = max(ak, free) + dk
        out.append(free)
    return np.array(out)


def test_hand_worked():
    # Job 1 waits for job 0 (ends 2 + 2 = 4); job 2 finds the server idle and starts at 5.
    assert fifo_ends(np.array([0.0, 1.0, 5.0]), np.array([2.0, 2.0, 1.0])).tolist() == [2.0, 4.0, 6.0]
    assert fifo_ends(np.array([0.0, 1.0]), np.array([2.0, 2.0]), free_at=3.0).tolist() == [5.0, 7.0]


def test_busy_periods_summed_in_order():
    # Periods start at jobs 0 and 2: 1 + 0.1 + 0.2, then 10 + 0.3 + 0.4 + 0.5, each in order.
    d = np.array([0.1, 0.2, 0.3, 0.4, 0.5])
    available = np.array([1.0, 0.0, 10.0, 9.9, 9.9])
    ends = fifo_ends(available, d, vector_min=1)           # the array passes
    assert ends.tolist() == [1.0 + 0.1, 1.0 + 0.1 + 0.2, 10.0 + 0.3, 10.0 + 0.3 + 0.4, 10.0 + 0.3 + 0.4 + 0.5]


def test_rejects_mismatched_arrays():
    with pytest.raises(ValueError, match="one length"):
        fifo_ends(np.zeros(3), np.zeros(2))


queues = st.integers(1, 400).flatmap(lambda n: st.tuples(
    st.lists(st.sampled_from([0.0, 0.1, 0.3, 1.0 / 3, 2.5, 7.0, 1e-9, -math.inf]), min_size=n, max_size=n),
    st.lists(st.sampled_from([0.0, 0.1, 0.2, 1.0 / 7, 1e-7, 3.0]), min_size=n, max_size=n),
    st.sampled_from([-math.inf, 0.0, 0.25]),
    st.booleans(),
))


@settings(deadline=None)
@given(queues)
def test_array_passes_equal_the_loop(case):
    a, d, free_at, sort = case
    a = np.sort(a) if sort else np.array(a)
    d = np.array(d)
    expected = loop(a.tolist(), d.tolist(), free_at)
    got = fifo_ends(a, d, free_at, vector_min=1)           # the array passes, even on short queues
    assert np.array_equal(got, expected)


@pytest.mark.parametrize("seed", range(4))
def test_long_queues_equal_the_loop(seed):
    rng = np.random.default_rng(seed)
    n = 20_000
    a = np.cumsum(rng.exponential(1e-4, n)) if seed % 2 else np.repeat(np.sort(rng.random(n // 5)), 5)
    d = rng.exponential(1e-4, n) * (rng.random(n) < 0.9)
    got = fifo_ends(a, d, free_at=0.01 * seed)
    assert np.array_equal(got, loop(a.tolist(), d.tolist(), 0.01 * seed))
    # The same when no guess is tried at all: the loop finishes the queue.
    assert np.array_equal(fifo_ends(a, d, free_at=0.01 * seed, rounds=0), got)
