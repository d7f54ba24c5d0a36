"""What the benchmark scripts share: timing a call, and the random profile they time on."""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np


def timings(fn: Callable[[], Any], repeats: int) -> list[float]:
    """Wall-clock seconds of ``repeats`` calls of ``fn``."""
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return samples


def random_profile(n: int, seed: int) -> Any:
    """``n`` tensors of 1 kB to 4 MB with random forward (up to 0.1 ms) and backward (up to
    0.2 ms) times, from ``seed``."""
    from fusionopt.model import Profile

    rng = np.random.default_rng(seed)
    return Profile.from_arrays(rng.integers(1_000, 4_000_000, n), rng.random(n) * 1e-4, rng.random(n) * 2e-4)
