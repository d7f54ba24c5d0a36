"""Gradients with known sums: what every rank sends, and the check that nothing was lost.

In step ``t``, rank ``r`` of ``P`` fills word ``e`` of tensor ``i`` with

    v = 2 * (g(i, e) * (r + 1) + 7 t + 3 r) + 1        (mod 2**bits)

where ``g(i, e)`` is a fixed pattern that differs between tensors and elements. The exact
all-reduced value is therefore

    sum_r v = 2 * (g(i, e) * P (P + 1) / 2 + 7 t P + 3 P (P - 1) / 2) + P   (mod 2**bits).

Every contribution is odd, so a contribution that is missing changes the sum by an odd
number and can never go unnoticed; one that arrives twice, or from the wrong offset, tensor,
rank or step, changes it for all but a vanishing share of the words.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusionopt.executor._layout import Layout

# Verification works through tensors in blocks of this many words (bounded scratch memory).
BLOCK_WORDS = 1 << 20
# At most this many wrong byte ranges are reported per rank and step.
MAX_REPORTED = 4

_PATTERN_MULTIPLIER = 0x9E3779B97F4A7C15
_PATTERN_TENSOR = 0xBF58476D1CE4E5B9


def pattern(xp: Any, dtype: np.dtype, tensor: int, words: int) -> Any:
    """``g(tensor, e)`` for ``e < words``: an odd-multiplier hash of the index, per tensor."""
    bits = 8 * dtype.itemsize
    values = xp.arange(words, dtype=dtype)
    values *= dtype.type(_PATTERN_MULTIPLIER % 2**bits)
    values += dtype.type(((tensor + 1) * _PATTERN_TENSOR) % 2**bits)
    return values


class Gradients:
    """One rank's gradient buffers (one per tensor) with fill and check.

    Examples
    --------
    Two ranks, each reduced by hand: the check passes, then fails on a corrupted word.

    >>> from fusionopt.model import Plan, Profile
    >>> profile = Profile.from_arrays([16, 8], [0, 0], [1, 1])
    >>> layout = Layout(profile, Plan.per_tensor(profile))
    >>> ranks = [Gradients(layout, rank=r, size=2) for r in range(2)]
    >>> for g in ranks:
    ...     g.fill(step=0)
    >>> for i in range(2):
    ...     total = ranks[0].grads[i] + ranks[1].grads[i]
    ...     for g in ranks:
    ...         g.grads[i][:] = total
    >>> ranks[0].verify(step=0)
    []
    >>> ranks[1].grads[0][1] += np.uint64(1)
    >>> ranks[1].verify(step=0)[0]
    "tensor 't0' (index 0): bytes [8, 16) differ from the exact sum over 2 ranks (8 B wrong in this tensor; carried by message 1; byte 8: got 0x..., expected 0x...)"
    """

    def __init__(self, layout: Layout, *, rank: int, size: int, xp: Any = np,
                 allocate: Any = None) -> None:
        self.layout, self.rank, self.size, self.xp = layout, rank, size, xp
        dtype = layout.dtype
        self._bits = 8 * dtype.itemsize
        allocate = allocate or (lambda words: xp.empty(words, dtype=dtype))
        self.grads = [allocate(words) for words in layout.tensor_words]
        self._pattern = [pattern(xp, dtype, i, words) for i, words in enumerate(layout.tensor_words)]
        self._scratch = allocate(min(BLOCK_WORDS, max(layout.tensor_words)))

    @staticmethod
    def words(layout: Layout) -> int:
        """Words one rank's :class:`Gradients` of ``layout`` allocate: every tensor's
        gradient and its pattern ``g``, and the check's scratch block."""
        tensors = sum(layout.tensor_words)
        return 2 * tensors + min(BLOCK_WORDS, max(layout.tensor_words))

    def _word(self, value: int) -> Any:
        return self.layout.dtype.type(value % 2**self._bits)

    @property
    def patterns(self) -> list[Any]:
        """``g(i, .)`` of every tensor ``i`` (read only by convention)."""
        return self._pattern

    def rank_constants(self, step: int, rank: int) -> tuple[Any, Any]:
        """``(scale, offset)`` with rank ``rank``'s value of ``step`` ``= g * scale + offset``."""
        return self._word(2 * (rank + 1)), self._word(2 * (7 * step + 3 * rank) + 1)

    def rank_values(self, tensor: int, step: int, rank: int, *, out: Any) -> Any:
        """Rank ``rank``'s values of tensor ``tensor`` in ``step``, written into ``out`` (a
        buffer of its words) and returned."""
        scale, offset = self.rank_constants(step, rank)
        self.xp.multiply(self._pattern[tensor], scale, out=out)
        out += offset
        return out

    def fill(self, step: int) -> None:
        """Write this rank's gradient values of ``step`` into every tensor."""
        for i, grad in enumerate(self.grads):
            self.rank_values(i, step, self.rank, out=grad)

    def expected_constants(self, step: int) -> tuple[Any, Any]:
        """``(scale, offset)`` with exact sum ``= g * scale + offset`` (mod ``2**bits``)."""
        p = self.size
        scale = self._word(p * (p + 1))
        offset = self._word(2 * (7 * step * p + 3 * p * (p - 1) // 2) + p)
        return scale, offset

    def verify(self, step: int, *, skip: frozenset[int] = frozenset()) -> list[str]:
        """Compare every byte with the exact sum; one line per wrong range (first few). A word
        a narrowed message carried (the layout's ``masks``) holds the exact sum's low bits and
        zero above them. The tensors ``skip`` lists are left to another check (those a
        compressor changed)."""
        xp, layout = self.xp, self.layout
        scale, offset = self.expected_constants(step)
        w = layout.word_bytes
        problems: list[str] = []
        for i, (grad, g) in enumerate(zip(self.grads, self._pattern)):
            if i in skip:
                continue
            first: tuple[int, int, int, int] | None = None
            wrong_words = 0
            for lo in range(0, grad.shape[0], BLOCK_WORDS):
                hi = min(lo + BLOCK_WORDS, grad.shape[0])
                expected = self._scratch[: hi - lo]
                xp.multiply(g[lo:hi], scale, out=expected)
                expected += offset
                for a, b, mask in layout.masks[i]:    # words a narrowed message carried: its bits
                    if a < hi and b > lo:
                        expected[max(a, lo) - lo: min(b, hi) - lo] &= self._word(mask)
                block = grad[lo:hi]
                if bool(xp.array_equal(block, expected)):
                    continue
                bad = block != expected
                wrong_words += int(bad.sum())
                if first is None:
                    start = int(xp.argmax(bad))
                    tail = bad[start:]
                    length = int(xp.argmin(tail)) if not bool(tail.all()) else int(tail.shape[0])
                    first = (lo + start, lo + start + length, int(block[start]), int(expected[start]))
            if first is not None and len(problems) < MAX_REPORTED:
                a, b, got, want = first
                name = layout.profile.names[i]
                digits = 2 * w
                problems.append(
                    f"tensor {name!r} (index {i}): bytes [{a * w}, {b * w}) differ from the exact sum over "
                    f"{self.size} rank{'s' * (self.size != 1)} ({wrong_words * w} B wrong in this tensor; "
                    f"{layout.carried_by(i, a * w, b * w)}; byte {a * w}: got 0x{got:0{digits}x}, "
                    f"expected 0x{want:0{digits}x})")
        return problems

    @property
    def nbytes(self) -> int:
        """Bytes of gradients this rank holds (and checks each step)."""
        return sum(int(g.nbytes) for g in self.grads)
