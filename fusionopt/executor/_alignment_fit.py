"""Finding an alignment cliff in a calibration (MODEL.md section 2.3): the sizes to time around
powers of two, and the cliff the times show, if any.

A sweep of :func:`alignment_sizes` times each power of two's ``ranks``-fold (every rank's part
aligned to it) and the same size grown by a few bytes a rank (parts misaligned at 16, 32, ...
bytes). :func:`fit_alignment` fits the aligned price on the sizes aligned to every candidate
unit, then looks for the unit whose misaligned sizes are all slower, by more than the noise,
than every aligned one: that unit and the median slowdown make an
:class:`~fusionopt.cost.Aligned` cost. Where no unit separates the times, the fitted price is
returned as it is: a calibration keeps only the cliffs it finds.
"""

from __future__ import annotations

import math
import numbers
from typing import Sequence

import numpy as np

from fusionopt.executor._calibrate import fit_alpha_beta, measured_points
from fusionopt.model._alignment import Aligned
from fusionopt.model._cost import CommCost, check_count

UNITS = (16, 32, 64, 128, 256)
"""The alignments looked for, bytes a rank (from 16: the executor times whole 8-byte words, so the
least offset it can give a rank's part is 8 bytes)."""

MARGIN = 0.2
"""A cliff is kept when every misaligned size is this much slower (relatively) than the slowest
aligned one."""

__all__ = ["MARGIN", "UNITS", "alignment_sizes", "fit_alignment"]


def alignment_sizes(ranks: int, min_bytes: int = 4096, max_bytes: int = 64 << 20,
                    units: Sequence[int] = UNITS) -> tuple[int, ...]:
    """Each power of two ``p`` from ``min_bytes`` to ``max_bytes``, as ``ranks x p`` bytes (every
    part aligned) and as ``ranks x (p + u / 2)`` for each unit ``u`` (parts misaligned at ``u``,
    aligned at ``u / 2``).

    >>> alignment_sizes(2, 4096, 8192, units=(8, 16))
    (8192, 8200, 8208, 16384, 16392, 16400)
    """
    for label, value in (("ranks", ranks), ("min_bytes", min_bytes), ("max_bytes", max_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a whole number >= 1, got {value!r}")
    if max_bytes < min_bytes:
        raise ValueError(f"max_bytes ({max_bytes}) is below min_bytes ({min_bytes})")
    if not units or any(isinstance(u, bool) or not isinstance(u, int) or u < 2 or u % 2 for u in units):
        raise ValueError(f"units must be even whole numbers of bytes >= 2, got {list(units)!r}")
    sizes, power = [], 1 << max(0, (min_bytes - 1).bit_length())
    while power <= max_bytes:
        sizes += [ranks * power] + [ranks * (power + u // 2) for u in units]
        power *= 2
    return tuple(sizes)


def fit_alignment(sizes: Sequence[int], times: Sequence[float], ranks: int, *,
                  units: Sequence[int] = UNITS, margin: float = MARGIN) -> CommCost:
    """The aligned price (``alpha + beta S`` on the sizes aligned to every unit), with the
    cliff the times show: an :class:`~fusionopt.cost.Aligned` at the first unit whose
    misaligned sizes are all more than ``margin`` slower, relative to that price, than every
    aligned one, its ``slowdown`` their median over the aligned sizes' median; else the
    price alone.

    Examples
    --------
    Times of ``10 us + 1 ns/B`` that triple where a part breaks 16-byte alignment:

    >>> from fusionopt.cost import AlphaBeta
    >>> sizes = alignment_sizes(2, 4096, 1 << 20)
    >>> base = AlphaBeta(1e-5, 1e-9)
    >>> times = [base(s) * (1 if s % 32 == 0 else 3) for s in sizes]
    >>> fit = fit_alignment(sizes, times, 2)
    >>> fit.unit, round(fit.slowdown, 9), round(fit.cost.alpha * 1e6, 9), round(fit.cost.beta * 1e9, 9)
    (16, 3.0, 10.0, 1.0)
    >>> type(fit_alignment(sizes, [base(s) for s in sizes], 2)).__name__     # no cliff kept
    'AlphaBeta'
    """
    given, t = measured_points(sizes, times)
    s = given.astype(np.int64)
    if (s != given).any():
        raise ValueError(f"sizes must be whole numbers of bytes, got {given[s != given][0]:g}")
    ranks = check_count("ranks", ranks)
    units = tuple(units)
    if not units or any(isinstance(u, bool) or not isinstance(u, numbers.Integral) or u < 1 for u in units):
        raise ValueError(f"units must be alignments in bytes, integers >= 1, got {units!r}")
    if isinstance(margin, bool) or not isinstance(margin, numbers.Real) or not 0 <= margin < math.inf:
        raise ValueError(f"margin must be a finite number >= 0, got {margin!r}")
    widest = ranks * max(units)
    whole = s % widest == 0
    if whole.sum() < 2:
        raise ValueError(f"fitting the aligned price needs two sizes aligned to {max(units)} bytes a rank "
                         f"(multiples of {widest} bytes): use alignment_sizes")
    base = fit_alpha_beta(s[whole], t[whole])
    ratio = t / base.of_sizes(s.astype(np.float64))
    for unit in sorted(units):
        misaligned = s % (ranks * unit) != 0
        if not misaligned.any() or misaligned.all():
            continue
        slow, fast = ratio[misaligned], ratio[~misaligned]
        if slow.min() > fast.max() * (1.0 + margin):
            return Aligned(base, ranks=ranks, unit=unit, slowdown=float(np.median(slow) / np.median(fast)))
    return base
