"""How a plan maps onto buffers: the word size, each message's pieces in its fused buffer.

Gradients are summed as unsigned integers of ``word_bytes`` bytes, the widest of 8, 4, 2
and 1 that divides every tensor size and every chunk boundary of the plan, so that no chunk
splits a word. Integer sums wrap modulo ``2**(8 * word_bytes)``: they are exact, whatever
the order of addition, on every backend.

**Encodings** (MODEL.md section 2.2). A collective the model prices in an encoding of
``wire_ratio`` ``1/2``, ``1/4`` or ``1/8`` (fp16 and bf16: ``1/2``) travels as words of
``wire_ratio * word_bytes`` bytes: each word is narrowed to its low bits as it is packed and
widened back as it is unpacked. The bytes on the wire and the passes over memory that
narrow and widen them are real; the rounding is not: keeping the low bits commutes with the
sum (``Z/2^32 -> Z/2^16`` is a ring map), so every word's kept bits still equal those of
the exact sum, and the check compares them
(:attr:`~fusionopt.executor.ShardLayout.masks`) and that the dropped ones came back zero. :func:`word_bytes` then also needs each narrowed width to be one the
backend sums.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from fusionopt.model._plan import Plan
from fusionopt.model._profile import Profile

WORD_DTYPES = {8: np.dtype(np.uint64), 4: np.dtype(np.uint32), 2: np.dtype(np.uint16), 1: np.dtype(np.uint8)}
# The shares of a word an encoding may keep on the wire (module docstring).
WIRE_RATIOS = (1.0, 0.5, 0.25, 0.125)


def word_bytes(boundaries: np.ndarray, word_sizes: tuple[int, ...], ratios: Sequence[float] = (),
               *, backend: str = "this backend") -> int:
    """The widest of ``word_sizes`` (and 1) that divides every one of ``boundaries`` (bytes)
    and that every wire ratio of ``ratios`` narrows to a width of ``word_sizes``; one line
    naming the width missing where none does.

    >>> word_bytes(np.array([8, 16]), (8, 4, 2, 1), [0.5])
    8
    >>> word_bytes(np.array([4, 12]), (8, 4, 1), [0.5], backend="nccl")
    Traceback (most recent call last):
    ...
    ValueError: a message in an encoding of 0.5 of the bytes travels as words of 2 B, which nccl does not sum (it sums words of 8, 4, 1 B), and the chunks fall on 4 B boundaries: send it in fp32, or keep every tensor and chunk a multiple of 8 B
    """
    ratios = sorted({float(r) for r in ratios if r != 1.0})       # each of WIRE_RATIOS (check_wire_ratio)
    widths = sorted(set(word_sizes) | {1}, reverse=True)
    aligned = [w for w in widths if not np.any(boundaries % w)]
    for w in aligned:
        if all(w * r in word_sizes for r in ratios):
            return w
    r = next(r for r in ratios if aligned[0] * r not in word_sizes)
    wider = next((w for w in widths if w > aligned[0] and w * r in word_sizes), None)
    fix = f", or keep every tensor and chunk a multiple of {wider} B" if wider else ""
    raise ValueError(f"a message in an encoding of {r:g} of the bytes travels as words of {aligned[0] * r:g} B, "
                     f"which {backend} does not sum (it sums words of {', '.join(map(str, word_sizes))} B), and the "
                     f"chunks fall on {aligned[0]} B boundaries: send it in fp32{fix}")


def check_wire_ratio(encoding: Any) -> None:
    """Refuse, in one line naming it, an encoding whose share of the bytes is not one of
    :data:`WIRE_RATIOS` (no whole word narrows to it).

    >>> from fusionopt.cost import Encoding
    >>> check_wire_ratio(Encoding("fp8", wire_ratio=0.3, unit_roundoff=2.0 ** -4))
    Traceback (most recent call last):
    ...
    ValueError: encoding 'fp8' sends 0.3 of the bytes: the executor narrows each word to 0.5, 0.25, 0.125 of it, or sends it as it is
    """
    if encoding.wire_ratio not in WIRE_RATIOS:
        raise ValueError(f"encoding {encoding.name!r} sends {encoding.wire_ratio:g} of the bytes: the executor narrows "
                         f"each word to {', '.join(f'{r:g}' for r in WIRE_RATIOS[1:])} of it, or sends it as it is")


def wire_dtype(word: int, ratio: float) -> np.dtype:
    """The unsigned integer a word of ``word`` bytes travels as in an encoding of ``ratio``."""
    return WORD_DTYPES[int(word * ratio)]


@dataclass(frozen=True)
class Piece:
    """Words ``[lo, hi)`` of tensor ``tensor``, at word ``offset`` of its message's fused buffer."""

    tensor: int
    lo: int
    hi: int
    offset: int


@dataclass(frozen=True)
class MessageLayout:
    """One message as the runner sends it.

    Attributes
    ----------
    pieces : tuple of Piece
        Its chunks in plan order, in words, with their place in the fused buffer.
    words, nbytes : int
        Size of the fused buffer.
    need : int
        How many tensors the backward must have emitted (in the profile's ready order)
        before the message is ready: one past the latest ready position of its tensors.
    release : float
        Seconds from the start of the backward before which the message may not start (the
        plan's release time; 0 when it has none).
    completes : tuple of int
        The tensors whose last message (in channel order) this is: they are reduced at its end.
    """

    index: int
    pieces: tuple[Piece, ...]
    words: int
    nbytes: int
    need: int
    completes: tuple[int, ...]
    release: float = 0.0



def describe_message(k: int, messages: int, chunks: int, nbytes: int, names: list[str], *,
                     encoding: str = "fp32") -> str:
    """Message ``k`` of ``messages`` in words: its chunks, bytes (and the encoding they travel
    in, where not fp32) and (the first three of) its tensors' ``names``."""
    shown = ", ".join(repr(x) for x in names[:3]) + (f", ... ({len(names)} tensors)" if len(names) > 3 else "")
    carried = "" if encoding == "fp32" else f" in {encoding}"
    return f"message {k} of {messages} ({chunks} chunk{'s' * (chunks != 1)}, {nbytes} B{carried}: {shown})"


def carried_by(carriers: list[tuple[int, int, int]], lo: int, hi: int) -> str:
    """Which of a tensor's ``carriers`` (``(lo, hi, message)`` byte ranges) hold bytes of
    ``[lo, hi)``, in words."""
    ks = sorted({k for a, b, k in carriers if a < hi and b > lo})
    if not ks:
        return "carried by no message"
    if len(ks) == 1:
        return f"carried by message {ks[0]}"
    return f"carried by messages {', '.join(map(str, ks[:-1]))} and {ks[-1]}"


class Layout:
    """The buffers a plan needs on ``profile``; checks only what indexing needs.

    ``word_sizes`` are the integer widths the backend can sum (the widest that fits is used).

    Chunks must name existing tensors and stay within their sizes (``ValueError``
    otherwise); missing and repeated bytes are allowed here, so that a plan that bypassed
    :meth:`Plan.validate` runs and the data check catches it.

    Examples
    --------
    >>> profile = Profile.from_arrays([16, 8], [0, 0], [1, 1])
    >>> layout = Layout(profile, Plan.from_groups(profile, [[1, 0]]))
    >>> layout.word_bytes, layout.messages[0].words, layout.messages[0].need
    (8, 3, 2)
    >>> layout.describe(0)
    "message 0 of 1 (2 chunks, 24 B: 't1', 't0')"
    """

    def __init__(self, profile: Profile, plan: Plan, *, word_sizes: tuple[int, ...] = (8, 4, 2, 1)) -> None:
        self.profile = profile
        self.plan = plan
        n = profile.n
        sizes = [int(s) for s in profile.sizes]
        for k, message in enumerate(plan.messages):
            for c in message.chunks:
                if c.tensor >= n:
                    raise ValueError(f"message {k}: tensor index {c.tensor} is out of range for a profile "
                                     f"of {n} tensors")
                if c.hi > sizes[c.tensor]:
                    raise ValueError(f"message {k}: tensor {profile.names[c.tensor]!r} (index {c.tensor}): "
                                     f"bytes [{c.lo}, {c.hi}) run past its size of {sizes[c.tensor]} B")
        boundaries = np.array(sizes + [b for m in plan.messages for c in m.chunks for b in (c.lo, c.hi)],
                              dtype=np.int64)
        self.word_bytes = word_bytes(boundaries, word_sizes)
        self.dtype = WORD_DTYPES[self.word_bytes]
        w = self.word_bytes
        self.tensor_words = tuple(s // w for s in sizes)
        # No message is narrowed here (encodings: ShardLayout), so every word keeps all its bits.
        self.masks: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]

        last: dict[int, int] = {}
        for k, message in enumerate(plan.messages):
            for c in message.chunks:
                last[c.tensor] = k
        self.sent = tuple(i in last for i in range(n))
        self.carriers: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
        messages = []
        position = {i: p for p, i in enumerate(profile.ready_order)}
        for k, message in enumerate(plan.messages):
            pieces, offset = [], 0
            for c in message.chunks:
                pieces.append(Piece(c.tensor, c.lo // w, c.hi // w, offset))
                offset += (c.hi - c.lo) // w
                self.carriers[c.tensor].append((c.lo, c.hi, k))
            completes = tuple(sorted({c.tensor for c in message.chunks if last[c.tensor] == k}))
            need = 1 + max(position[c.tensor] for c in message.chunks)
            messages.append(MessageLayout(k, tuple(pieces), offset, offset * w, need, completes,
                                          message.release))
        self.messages = tuple(messages)
        self.max_words = max(m.words for m in messages)

    def describe(self, k: int) -> str:
        """Message ``k`` in words: its place, chunks, bytes and tensors."""
        message = self.plan.messages[k]
        return describe_message(k, len(self.messages), len(message.chunks), message.nbytes,
                                [self.profile.names[i] for i in message.tensors])

    def carried_by(self, tensor: int, lo: int, hi: int) -> str:
        """Which messages carry bytes of ``[lo, hi)`` of ``tensor``, in words."""
        return carried_by(self.carriers[tensor], lo, hi)
