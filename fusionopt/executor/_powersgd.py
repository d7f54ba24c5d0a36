"""torch's ``powerSGD_hook`` as the ranks run it (MODEL.md section 2.4): a message the model
sends through :class:`~fusionopt.cost.PowerSGD` travels as the hook sends a DDP bucket
(``torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py``, torch 2.13; the sizes as
:mod:`fusionopt.model._powersgd` reads them). On every rank, for each such message:

1. its uncompressed tensors (vectors, small matrices: :meth:`~fusionopt.cost.PowerSGD.split`)
   are packed and all-reduced as one buffer, as they are (an empty one is issued too, as the
   hook issues it);
2. each compressed tensor, viewed as its ``n x m`` matrix ``M`` of elements
   (``tensor.view(shape[0], -1)``), gives ``P = M Q`` (``Q``: ``m x r'``); the message's
   ``P`` factors are all-reduced as one buffer of ``sum n r'`` elements;
3. ``Q = M^T P`` with the summed ``P``; the ``Q`` factors are all-reduced as one buffer of
   ``sum m r'`` elements;
4. ``M = P Q^T`` replaces each compressed gradient;
5. the channel is held until the hook's priced compute
   (:meth:`~fusionopt.cost.PowerSGD.compute_seconds` of the message's bytes and flops) has
   passed over steps 2 to 4, as the emulated backward holds for its compute: the products
   themselves, which make the bytes, count toward it.

The bytes on the wire (three all-reduces of those sizes, in elements of the tensors' width)
are the hook's. The arithmetic is not: the executor's gradients are integers whose sums are
exact (:mod:`fusionopt.executor._gradients`), and the products are taken in the ring of
integers modulo ``2**(8 e)`` (``e`` bytes an element), where they commute with the sums as
the real products do with the real sums: ``sum_r M_r Q = (sum_r M_r) Q``. There is no
orthogonalisation (no such ring has one) and no error feedback: each step starts from the
gradients alone and from the same ``Q`` (a fixed pattern per tensor, where torch's warm
start keeps the last step's). Every step compresses: the hook's ``start_iter`` plain steps
are not run, as the model's price of a message through the hook is that of the steps after
them. Each compressed gradient therefore ends as ``P Q'^T`` with
``P = S Q`` and ``Q' = S^T P``, ``S`` the sum of every rank's matrix, which every rank
computes alone after the step and compares element for element
(:meth:`PowerSGDMessages.verify`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from fusionopt.executor._communicator import Communicator, sleep_until
from fusionopt.executor._gradients import MAX_REPORTED, Gradients, pattern
from fusionopt.executor._layout import WORD_DTYPES, Piece
from fusionopt.executor._shards import Collective, ShardLayout
from fusionopt.model._powersgd import PowerSGD

@dataclass(frozen=True)
class _Matrix:
    """A compressed tensor of a message: its ``n x m`` view, rank ``r`` (``r'`` of the module
    docstring), and where its factors lie in the message's ``P`` and ``Q`` buffers
    (elements)."""

    tensor: int
    n: int
    m: int
    r: int
    p_at: int
    q_at: int


@dataclass
class _Message:
    """One message sent through the hook: its uncompressed pieces repacked from word 0, its
    matrices, its element width, its factors' buffers (``p``, ``q``: the ``P`` and ``Q``
    all-reduces, of no element where it has no matrix), ``Q``'s fixed values (``factors``)
    and its priced compute (seconds)."""

    plain: tuple[Piece, ...]
    plain_words: int
    matrices: tuple[_Matrix, ...]
    element: Any
    p: Any
    q: Any
    factors: tuple[Any, ...]
    compute: float
    wire_bytes: int


class PowerSGDMessages:
    """One rank's side of every message of ``layout`` that ``compressed`` (per
    collective, :func:`~fusionopt.model._wire.compressed_collectives`) sends through
    ``compressor`` (module docstring). ``allocate(words, dtype)``: a buffer in the backend's
    memory; ``word_sizes``: the element widths the backend sums (one line naming the message
    where one of its matrices' is not)."""

    def __init__(self, layout: ShardLayout, compressor: PowerSGD, compressed: Sequence[bool], *, size: int,
                 xp: Any, allocate: Callable[..., Any], word_sizes: tuple[int, ...] = (8, 4, 2, 1),
                 backend: str = "this backend") -> None:
        self.layout, self.size, self.xp = layout, size, xp
        profile = layout.profile
        split = compressor.of_profile(profile)
        element_bytes = profile.element_bytes.tolist()
        self.messages: dict[int, _Message] = {}
        for c in layout.collectives:
            if not compressed[c.index]:
                continue
            tensors = list(dict.fromkeys(p.tensor for p in c.pieces))
            plain, offset = [], 0
            for p in c.pieces:
                if not split.compressed[p.tensor]:
                    plain.append(Piece(p.tensor, p.lo, p.hi, offset))
                    offset += p.hi - p.lo
            matrices, p_at, q_at = [], 0, 0
            for t in tensors:
                if split.compressed[t]:
                    n = int(profile.shapes[t][0])
                    m, r = split.numel[t] // n, split.p[t] // n
                    matrices.append(_Matrix(t, n, m, r, p_at, q_at))
                    p_at, q_at = p_at + n * r, q_at + m * r
            widths = sorted({int(element_bytes[x.tensor]) for x in matrices})
            if len(widths) > 1:
                raise ValueError(f"{layout.describe(c.index)}: its compressed tensors have elements of "
                                 f"{' and '.join(map(str, widths))} B, and torch's powerSGD_hook reduces a bucket of "
                                 "one dtype (DDP buckets gradients by dtype): keep each dtype's tensors in messages "
                                 "of their own")
            width = widths[0] if widths else layout.word_bytes
            if width not in word_sizes:
                raise ValueError(f"{layout.describe(c.index)}: its PowerSGD factors are elements of {width} B, which "
                                 f"{backend} does not sum (it sums {', '.join(map(str, word_sizes))} B)")
            element = WORD_DTYPES[width]
            factors = tuple(pattern(xp, element, x.tensor, x.m * x.r).reshape(x.m, x.r) for x in matrices)
            nbytes = sum(int(profile.sizes[t]) for t in tensors)
            flops = sum(split.flops[t] for t in tensors)
            self.messages[c.index] = _Message(
                tuple(plain), offset, tuple(matrices), element, allocate(max(p_at, 1), element)[:p_at],
                allocate(max(q_at, 1), element)[:q_at], factors, float(compressor.compute_seconds(nbytes, flops)),
                offset * layout.word_bytes + (p_at + q_at) * width)
        self.tensors = frozenset(x.tensor for msg in self.messages.values() for x in msg.matrices)

    def words(self) -> int:
        """The words of the layout's width that this rank's side takes (rounded up): the
        factors' buffers, ``Q``'s values, and the check's three tensors' worth of scratch."""
        nbytes = sum((max(msg.p.shape[0], 1) + max(msg.q.shape[0], 1) + sum(q.size for q in msg.factors))
                     * msg.element.itemsize for msg in self.messages.values())
        largest = max((int(self.layout.profile.sizes[t]) for t in self.tensors), default=0)
        return -(-(nbytes + 3 * largest) // self.layout.word_bytes)

    def executed(self, c: Collective) -> list[Any]:
        """What the ranks' record says a compressed message ran: ``["powersgd", bytes, bytes]``,
        its three all-reduces' bytes on the wire."""
        sent = self.messages[c.index].wire_bytes
        return ["powersgd", sent, sent]

    # ------------------------------------------------------------------ the step
    def run(self, c: Collective, grads: Sequence[Any], send: Any, comm: Communicator, *, timeout: float,
            tag: tuple[int, int], mark: Callable[[], Any]) -> tuple[Any, Any]:
        """Send message ``c`` as the hook does (module docstring, steps 1 to 5) from and into
        the gradients ``grads``, packing its uncompressed tensors in ``send``. Returns
        ``mark()`` just before its first all-reduce and just after its last."""
        xp, msg = self.xp, self.messages[c.index]
        buffer = send[: msg.plain_words]
        for p in msg.plain:
            buffer[p.offset: p.offset + p.hi - p.lo] = grads[p.tensor][p.lo: p.hi]
        begun = mark()
        self._allreduce(buffer, comm, timeout, tag)
        for p in msg.plain:
            grads[p.tensor][p.lo: p.hi] = buffer[p.offset: p.offset + p.hi - p.lo]
        started, wire = time.perf_counter(), 0.0
        views = [grads[x.tensor].view(msg.element).reshape(x.n, x.m) for x in msg.matrices]
        p_of = [msg.p[x.p_at: x.p_at + x.n * x.r].reshape(x.n, x.r) for x in msg.matrices]
        q_of = [msg.q[x.q_at: x.q_at + x.m * x.r].reshape(x.m, x.r) for x in msg.matrices]
        for view, q, p in zip(views, msg.factors, p_of):
            xp.matmul(view, q, out=p)
        wire += self._allreduce(msg.p, comm, timeout, tag)
        for view, p, q in zip(views, p_of, q_of):
            xp.matmul(view.T, p, out=q)
        wire += self._allreduce(msg.q, comm, timeout, tag)
        ended = mark()
        for view, p, q in zip(views, p_of, q_of):
            xp.matmul(p, q.T, out=view)
        comm.synchronize(timeout=timeout)
        sleep_until(started + wire + msg.compute, comm)
        return begun, ended

    @staticmethod
    def _allreduce(buffer: Any, comm: Communicator, timeout: float, tag: tuple[int, int]) -> float:
        """All-reduce ``buffer`` (issued empty too, as the hook does; a fault's tag only on
        one with elements) and wait for it: its seconds."""
        started = time.perf_counter()
        comm.allreduce(buffer, timeout=timeout, tag=tag if buffer.shape[0] else None)
        comm.synchronize(timeout=timeout)
        return time.perf_counter() - started

    # ------------------------------------------------------------------ after the step
    def verify(self, step: int, gradients: Gradients) -> list[str]:
        """Compare every compressed gradient with ``P Q'^T`` of the sum of every rank's
        matrix (module docstring), element for element; one line per wrong tensor (first
        few)."""
        xp, layout, problems = self.xp, self.layout, []
        for msg in self.messages.values():
            for x, q in zip(msg.matrices, msg.factors):
                g = gradients.patterns[x.tensor]      # its words' shape
                total = xp.zeros(x.n * x.m, dtype=msg.element)
                word = xp.empty_like(g)
                for rank in range(self.size):
                    total += gradients.rank_values(x.tensor, step, rank, out=word).view(msg.element)
                s = total.reshape(x.n, x.m)
                p = s @ q
                expected = (p @ (s.T @ p).T).reshape(-1)
                got = gradients.grads[x.tensor].view(msg.element)
                if bool(xp.array_equal(got, expected)):
                    continue
                bad = got != expected
                start = int(xp.argmax(bad))
                tail = bad[start:]
                stop = start + (int(xp.argmin(tail)) if not bool(tail.all()) else int(tail.shape[0]))
                if len(problems) < MAX_REPORTED:
                    e = msg.element.itemsize
                    digits = 2 * e
                    problems.append(
                        f"tensor {layout.profile.names[x.tensor]!r} (index {x.tensor}): bytes [{start * e}, "
                        f"{stop * e}) differ from PowerSGD's rank-{x.r} product of the sum over {self.size} "
                        f"rank{'s' * (self.size != 1)} ({int(bad.sum()) * e} B wrong in this tensor; "
                        f"{layout.carried_by(x.tensor, start * e, stop * e)}; byte {start * e}: got "
                        f"0x{int(got[start]):0{digits}x}, expected 0x{int(expected[start]):0{digits}x})")
        return problems


__all__ = ["PowerSGDMessages"]
