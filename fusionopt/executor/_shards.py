"""How a sharded program's collectives map onto buffers: words, padding, shards, runs.

A collective's unsharded bytes (its chunks, concatenated) are summed or gathered as unsigned
integers of ``word_bytes`` bytes, the widest of the backend's sizes that divides every tensor
size and every chunk boundary (as :class:`~fusionopt.executor.Layout` chooses for an
all-reduce plan). Reduce-scatter and all-gather split a buffer into ``P`` equal shards, so a
collective of ``w`` words is **padded** with zero words to ``ceil(w / P) * P``; rank ``r``
owns words ``[r s, (r + 1) s)`` of it, ``s`` the shard size. The padding travels (its time is
measured) and is checked (it must stay zero), and :attr:`ShardLayout.padded_bytes` says how
much there is.

A *run* is a stretch of a shard that lies in one tensor (or in the padding): what the check
compares against its exact value.

A collective in an encoding of fewer bytes (fp16, bf16) travels as narrower words
(:mod:`fusionopt.executor._layout`): ``wire_bytes`` of each ``word_bytes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from fusionopt.executor._layout import WORD_DTYPES, Piece, carried_by, check_wire_ratio, describe_message, word_bytes
from fusionopt.model._encoding import FP32, Encoding
from fusionopt.model._allreduce_program import ALL_REDUCE
from fusionopt.model._decoupled_plan import KINDS
from fusionopt.model._step_program import CollectiveSpec
from fusionopt.model._profile import Profile

PADDING = -1    # the tensor index of a run of padding
KIND_NAMES = (*KINDS, "all-reduce")


@dataclass(frozen=True)
class Collective:
    """One collective as the sharded runner runs it (sizes in words).

    ``pieces``: its chunks in the unpadded buffer; ``words``, ``padded``, ``shard``: the
    buffer unpadded, padded to a multiple of ``P``, and one rank's share; ``out`` and
    ``source``: its offsets in the rank's output store (a reduce-scatter's shard, a gathered
    buffer) and input store (an all-gather's shard); ``encoding``: what it travels in, each
    word narrowed to ``wire_bytes`` bytes where that sends fewer bytes (None: words as they are).
    """

    index: int
    kind: int
    pieces: tuple[Piece, ...]
    words: int
    padded: int
    shard: int
    nbytes: int
    gate: str | None
    need: int
    release: float
    label: str
    out: int
    source: int
    encoding: str = "fp32"
    wire_bytes: int | None = None

    @property
    def narrowed(self) -> bool:
        """Whether its words travel narrowed (an encoding of fewer bytes): ``wire_bytes`` is set."""
        return self.wire_bytes is not None

    @property
    def kind_name(self) -> str:
        return KIND_NAMES[self.kind]


class ShardLayout:
    """The buffers of a program's collectives on ``size`` ranks.

    Examples
    --------
    Three tensors of 4, 1 and 2 KiB in one reduce-scatter over 3 ranks: 896 words of 8 B,
    padded to 897 (one word of padding), shards of 299 words.

    >>> from fusionopt.model._step_program import CollectiveSpec
    >>> profile = Profile.from_arrays([4096, 1024, 2048], [0] * 3, [1] * 3)
    >>> spec = CollectiveSpec(0, ((2, 0, 2048), (1, 0, 1024), (0, 0, 4096)), None, 0, 0.0, 0, "everything")
    >>> layout = ShardLayout(profile, [spec], size=3)
    >>> c = layout.collectives[0]
    >>> layout.word_bytes, c.words, c.padded, c.shard, layout.padded_bytes
    (8, 896, 897, 299, 8)
    >>> layout.shard_runs(c, 2)      # rank 2's shard: the end of t0, then the padding
    [(0, 214, 512, 0), (-1, 0, 1, 298)]

    The same in bf16 (``encodings``): each 8-byte word travels as its low 4 bytes.

    >>> from fusionopt.cost import BF16
    >>> c = ShardLayout(profile, [spec], size=3, encodings=[BF16]).collectives[0]
    >>> c.encoding, c.wire_bytes, c.narrowed
    ('bf16', 4, True)
    """

    def __init__(self, profile: Profile, specs: Sequence[CollectiveSpec], *, size: int,
                 word_sizes: tuple[int, ...] = (8, 4, 2, 1), encodings: Sequence[Encoding] | None = None,
                 backend: str = "this backend") -> None:
        self.profile, self.size = profile, size
        n = profile.n
        sizes = [int(s) for s in profile.sizes]
        for k, spec in enumerate(specs):
            for t, lo, hi in spec.chunks:
                if not 0 <= t < n:
                    raise ValueError(f"{spec.label}: tensor index {t} is out of range for a profile of {n} tensors")
                if not 0 <= lo <= hi <= sizes[t]:
                    raise ValueError(f"{spec.label}: tensor {profile.names[t]!r} (index {t}): bytes [{lo}, {hi}) "
                                     f"run past its size of {sizes[t]} B")
        boundaries = np.array(sizes + [b for s in specs for _, lo, hi in s.chunks for b in (lo, hi)], dtype=np.int64)
        encodings = [FP32] * len(specs) if encodings is None else list(encodings)
        if len(encodings) != len(specs):
            raise ValueError(f"{len(encodings)} encodings for {len(specs)} collectives")
        for e in encodings:
            check_wire_ratio(e)
        ratios = [e.wire_ratio for e in encodings if e.wire_ratio != 1.0]
        self.word_bytes = word_bytes(boundaries, word_sizes, ratios, backend=backend)
        self.dtype = WORD_DTYPES[self.word_bytes]
        w = self.word_bytes
        self.tensor_words = tuple(s // w for s in sizes)
        collectives, out, source = [], {0: 0, 1: 0}, 0
        for k, spec in enumerate(specs):
            pieces, offset = [], 0
            for t, lo, hi in spec.chunks:
                pieces.append(Piece(t, lo // w, hi // w, offset))
                offset += (hi - lo) // w
            e = encodings[k]
            wire = None if e.wire_ratio == 1.0 else int(w * e.wire_ratio)
            if spec.kind == ALL_REDUCE:                   # the whole buffer, summed in place: no shards
                collectives.append(Collective(k, spec.kind, tuple(pieces), offset, offset, offset, offset * w,
                                              spec.gate, spec.need, spec.release, spec.label, -1, -1, e.name, wire))
                continue
            shard = -(-offset // size)
            padded = shard * size
            collectives.append(Collective(k, spec.kind, tuple(pieces), offset, padded, shard, offset * w, spec.gate,
                                          spec.need, spec.release, spec.label, out[spec.kind],
                                          source if spec.kind == 1 else -1, e.name, wire))
            out[spec.kind] += shard if spec.kind == 0 else padded
            if spec.kind == 1:
                source += shard
        self.collectives = tuple(collectives)
        self.shard_store_words = out[0]         # every reduce-scatter's shard of this rank
        self.gather_store_words = out[1]        # every all-gather's whole buffer
        self.source_words = source              # every all-gather's input shard of this rank
        self.max_words = max((c.padded for c in collectives), default=1) or 1
        self.all_reduce = bool(collectives) and all(c.kind == ALL_REDUCE for c in collectives)
        # Per tensor, the byte ranges each all-reduce carries: (lo, hi, collective), and the
        # words a narrowed all-reduce carries with the bits it keeps: (lo, hi, mask).
        self.carriers: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
        self.masks: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
        for c in collectives:
            if c.kind == ALL_REDUCE:
                for p in c.pieces:
                    self.carriers[p.tensor].append((p.lo * w, p.hi * w, c.index))
                    if c.narrowed:
                        self.masks[p.tensor].append((p.lo, p.hi, self.mask(c)))
        # The narrowed widths, each with the most words a collective sends in it, and the most
        # words of one rank's shard of a reduce-scatter or an all-gather.
        self.wire_words: dict[int, tuple[int, int]] = {}
        for c in collectives:
            if c.narrowed:
                most, shard = self.wire_words.get(c.wire_bytes, (1, 1))
                self.wire_words[c.wire_bytes] = (max(most, c.padded),
                                                 shard if c.kind == ALL_REDUCE else max(shard, c.shard))
        self.padded_bytes = sum(c.padded - c.words for c in collectives) * w

    def mask(self, c: Collective) -> int:
        """The bits of a word that ``c`` carries: all of them, or a narrowed word's."""
        return (1 << (8 * (c.wire_bytes if c.narrowed else self.word_bytes))) - 1

    def runs(self, c: Collective, lo: int, hi: int) -> list[tuple[int, int, int, int]]:
        """Words ``[lo, hi)`` of ``c``'s padded buffer as runs ``(tensor, first, last, at)``:
        words ``[first, last)`` of ``tensor`` (``PADDING``: of the padding) at word ``at``."""
        found = []
        for p in c.pieces:
            a, b = max(lo, p.offset), min(hi, p.offset + p.hi - p.lo)
            if a < b:
                found.append((p.tensor, p.lo + a - p.offset, p.lo + b - p.offset, a))
        a, b = max(lo, c.words), hi
        if a < b:
            found.append((PADDING, a - c.words, b - c.words, a))
        return found

    def shard_runs(self, c: Collective, rank: int) -> list[tuple[int, int, int, int]]:
        """Rank ``rank``'s shard of ``c`` as runs, ``at`` counted from the shard's start."""
        base = rank * c.shard
        return [(t, a, b, at - base) for t, a, b, at in self.runs(c, base, base + c.shard)]

    def gather_runs(self, c: Collective) -> list[tuple[int, int, int, int, int]]:
        """The whole of ``c``'s padded buffer as runs ``(tensor, first, last, at, owner)``."""
        return [(t, a, b, at, q) for q in range(self.size)
                for t, a, b, at in self.runs(c, q * c.shard, (q + 1) * c.shard)]

    def carried_by(self, tensor: int, lo: int, hi: int) -> str:
        """Which all-reduces carry bytes ``[lo, hi)`` of ``tensor``, in words (as messages)."""
        return carried_by(self.carriers[tensor], lo, hi)

    def describe(self, k: int) -> str:
        """Collective ``k`` in words: its place on the channel, what it carries, its bytes (an
        all-reduce: as a message of an all-reduce plan, its chunks, bytes and tensors)."""
        c = self.collectives[k]
        if c.kind == ALL_REDUCE:
            tensors = dict.fromkeys(p.tensor for p in c.pieces)
            return describe_message(c.index, len(self.collectives), len(c.pieces), c.nbytes,
                                    [self.profile.names[t] for t in tensors], encoding=c.encoding)
        pad = f", padded to {c.padded * self.word_bytes} B" if c.padded != c.words else ""
        carried = f" in {c.encoding}" if c.narrowed else ""
        return f"collective {k} of {len(self.collectives)} ({c.label}, {c.nbytes} B{carried}{pad})"


__all__ = ["Collective", "PADDING", "ShardLayout"]
