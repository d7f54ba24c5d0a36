"""One rank's buffers for a step program, the collectives on them, and the check of every byte.

Values follow :mod:`fusionopt.executor._gradients`: in step ``t`` rank ``r``'s word ``e`` of
tensor ``i`` is ``v_r = 2 (g(i, e) (r + 1) + 7 t + 3 r) + 1``.

* **All-reduce.** The rank packs its gradients' chunks into the send buffer, all-reduces it
  and unpacks the sums into its gradients. Check: every word of every gradient equals the
  exact sum (:meth:`~fusionopt.executor.Gradients.verify`, as for any all-reduce
  plan).
* **Reduce-scatter.** The rank packs its gradients' chunks into a send buffer (padding
  zero) and reduce-scatters it into its slot of the *shard store*. Check: every word of its
  shard equals the exact sum ``sum_r v_r`` of the word it holds (padding: zero).
* **All-gather.** Before the step (untimed) the rank writes its shard of every all-gather
  into the *source store*: the values ``v_r`` of the words its shard holds, as a parameter
  shard it owns. The all-gather fills a whole buffer: for a fully sharded plan the
  collective's own slot of the *gather store* (the unit's flat parameters; its forward and
  its backward gather each have one), for a decoupled plan the send buffer, which is then
  unpacked into per-tensor parameter buffers. Check: every word holds ``v_q`` of the rank
  ``q`` whose shard it lies in (padding of a gather store slot: zero). Values change with
  the step, so a gather that left a word unwritten is caught.

A collective in an encoding of fewer bytes (:mod:`fusionopt.executor._layout`) packs its words
narrowed into a wire buffer of their width, runs on it, and widens what it receives: the
check then compares each word's kept bits, and that the others are zero. A message sent
through torch's PowerSGD hook runs as :mod:`fusionopt.executor._powersgd` says, and its
compressed tensors are checked against the hook's product there.
"""

from __future__ import annotations

from typing import Any, Callable

from fusionopt.executor._communicator import Communicator
from fusionopt.executor._gradients import BLOCK_WORDS, MAX_REPORTED, Gradients
from fusionopt.executor._layout import WORD_DTYPES
from fusionopt.executor._powersgd import PowerSGDMessages
from fusionopt.executor._shards import PADDING, Collective, ShardLayout
from fusionopt.model._allreduce_program import ALL_REDUCE


class ShardData:
    """Rank ``rank``'s gradients, parameters and shards for the collectives of ``layout``.

    ``allocate(words, dtype)``: an uninitialised buffer (``dtype`` defaults to the layout's).
    ``unpack``: all-gathers land in per-tensor parameter buffers (decoupled and
    parameter-server plans) instead of one gather-store slot per collective (fully sharded
    plans). ``channels``: how many channels run collectives at once, each packing into a
    send buffer of its own (and, per narrowed width, a wire buffer and a wire shard).
    ``powersgd``: the messages sent through torch's PowerSGD hook, if any.
    """

    def __init__(self, layout: ShardLayout, *, rank: int, size: int, xp: Any, allocate: Callable[..., Any],
                 unpack: bool, channels: int = 1, powersgd: PowerSGDMessages | None = None) -> None:
        self.layout, self.rank, self.size, self.xp, self.unpack = layout, rank, size, xp, unpack
        self.powersgd = powersgd
        self.gradients = Gradients(layout, rank=rank, size=size, xp=xp, allocate=allocate)

        def zeros(words: int, dtype: Any = layout.dtype) -> Any:
            buffer = allocate(max(int(words), 1), dtype)
            buffer[:] = 0
            return buffer

        self.sends = [zeros(layout.max_words) for _ in range(channels)]
        self.send = self.sends[0]
        # Per channel and narrowed width: a wire buffer and a wire shard (module docstring).
        self.wires = [{width: (zeros(most, WORD_DTYPES[width]), zeros(shard, WORD_DTYPES[width]))
                       for width, (most, shard) in layout.wire_words.items()} for _ in range(channels)]
        if layout.all_reduce:                 # the gradients are summed in place: no stores
            self.shards = self.sources = self.params = self.gathered = self._scratch = None
            return
        self.shards = zeros(layout.shard_store_words)
        self.sources = zeros(layout.source_words)
        if unpack:
            self.params = [zeros(words) for words in layout.tensor_words]
            self.gathered = None
        else:
            self.params = None
            self.gathered = zeros(layout.gather_store_words)
        self._scratch = allocate(min(BLOCK_WORDS, max(layout.max_words, 1)))

    @staticmethod
    def words(layout: ShardLayout, *, unpack: bool, channels: int = 1) -> int:
        """Words one rank's :class:`ShardData` of ``layout`` allocate (as ``__init__`` does)."""
        wire = channels * sum(-(-(most + shard) * width // layout.word_bytes)
                              for width, (most, shard) in layout.wire_words.items())
        if layout.all_reduce:
            return Gradients.words(layout) + channels * max(layout.max_words, 1) + wire
        kept = sum(max(w, 1) for w in layout.tensor_words) if unpack else max(layout.gather_store_words, 1)
        return (Gradients.words(layout) + channels * max(layout.max_words, 1) + max(layout.shard_store_words, 1)
                + max(layout.source_words, 1) + kept + min(BLOCK_WORDS, max(layout.max_words, 1)) + wire)

    # ------------------------------------------------------------------ before the step
    def fill(self, step: int) -> None:
        """This rank's gradients of ``step``, and its shard of every all-gather."""
        self.gradients.fill(step)
        grads = self.gradients.grads
        for c in self.layout.collectives:
            if c.kind == 1:
                for t, a, b, at in self.layout.shard_runs(c, self.rank):
                    target = self.sources[c.source + at: c.source + at + b - a]
                    if t == PADDING:
                        target[:] = 0
                    else:
                        target[:] = grads[t][a:b]

    # ------------------------------------------------------------------ the collectives
    def run(self, c: Collective, comm: Communicator, *, timeout: float, tag: tuple[int, int],
            mark: Callable[[], Any] = lambda: None, channel: int = 0) -> tuple[Any, Any]:
        """Run collective ``c`` on this rank's buffers (pack, collective, unpack) with
        ``channel``'s send buffer (a narrowed collective: its wire buffer, the packing
        narrowing each word and the unpacking widening it), queued work included: it has
        completed when this returns.
        Returns ``mark()`` taken just before and just after the collective itself (between the
        copies)."""
        grads = self.gradients.grads
        if self.powersgd is not None and c.index in self.powersgd.messages:
            return self.powersgd.run(c, grads, self.sends[channel], comm, timeout=timeout, tag=tag, mark=mark)
        if c.narrowed:
            send, part = self.wires[channel][c.wire_bytes]
        else:
            send, part = self.sends[channel], None
        if c.kind == ALL_REDUCE:
            buffer = send[: c.words]
            for p in c.pieces:
                buffer[p.offset: p.offset + p.hi - p.lo] = grads[p.tensor][p.lo: p.hi]
            begun = mark()
            comm.allreduce(buffer, timeout=timeout, tag=tag)
            ended = mark()
            for p in c.pieces:
                grads[p.tensor][p.lo: p.hi] = buffer[p.offset: p.offset + p.hi - p.lo]
        elif c.kind == 0:
            buffer = send[: c.padded]
            for p in c.pieces:
                buffer[p.offset: p.offset + p.hi - p.lo] = grads[p.tensor][p.lo: p.hi]
            if c.padded > c.words:
                buffer[c.words:] = 0
            shard = self.shards[c.out: c.out + c.shard]
            begun = mark()
            comm.reduce_scatter(buffer, shard if part is None else part[: c.shard], timeout=timeout, tag=tag)
            ended = mark()
            if part is not None:
                shard[:] = part[: c.shard]
        else:
            source = self.sources[c.source: c.source + c.shard]
            if part is not None:
                part[: c.shard] = source
                source = part[: c.shard]
            if self.unpack or part is not None:
                buffer = send[: c.padded]
                begun = mark()
                comm.all_gather(source, buffer, timeout=timeout, tag=tag)
                ended = mark()
                if self.unpack:
                    for p in c.pieces:
                        self.params[p.tensor][p.lo: p.hi] = buffer[p.offset: p.offset + p.hi - p.lo]
                else:
                    self.gathered[c.out: c.out + c.padded] = buffer
            else:
                begun = mark()
                comm.all_gather(source, self.gathered[c.out: c.out + c.padded], timeout=timeout, tag=tag)
                ended = mark()
        comm.synchronize(timeout=timeout)
        return begun, ended

    # ------------------------------------------------------------------ after the step
    def verify(self, step: int) -> list[str]:
        """Compare every byte each collective left on this rank with its exact value."""
        layout, problems = self.layout, []
        total_scale, total_offset = self.gradients.expected_constants(step)
        patterns = self.gradients.patterns
        names = layout.profile.names
        w = layout.word_bytes
        if layout.all_reduce:                 # every gradient summed in place: the all-reduce check
            if self.powersgd is None:
                return self.gradients.verify(step)
            problems = self.gradients.verify(step, skip=self.powersgd.tensors)
            return (problems + self.powersgd.verify(step, self.gradients))[:MAX_REPORTED]
        for c in layout.collectives:
            if c.kind == 0:
                runs = [(t, a, b, at, None) for t, a, b, at in layout.shard_runs(c, self.rank)]
            else:
                runs = layout.gather_runs(c)
            for t, a, b, at, owner in runs:
                if t == PADDING and c.kind == 1 and self.unpack:
                    continue                  # gathered padding is not kept
                if c.kind == 0:
                    got = self.shards[c.out + at: c.out + at + b - a]
                    constants = (total_scale, total_offset)
                    against = f"the exact sum over {self.size} rank{'s' * (self.size != 1)}"
                elif self.unpack:
                    got = self.params[t][a:b]
                    constants = self.gradients.rank_constants(step, owner)
                    against = f"rank {owner}'s shard"
                else:
                    got = self.gathered[c.out + at: c.out + at + b - a]
                    constants = self.gradients.rank_constants(step, owner)
                    against = f"rank {owner}'s shard"
                g = None if t == PADDING else patterns[t][a:b]
                wrong, first = self._compare(got, g, constants, layout.mask(c))
                if wrong and len(problems) < MAX_REPORTED:
                    start, stop, value, want = first
                    digits = 2 * w
                    where = ("padding" if t == PADDING
                             else f"tensor {names[t]!r} (index {t}): bytes [{(a + start) * w}, {(a + stop) * w})")
                    against_now = "zero" if t == PADDING else against
                    problems.append(
                        f"{layout.describe(c.index)}: {where} differ from {against_now} ({wrong * w} B wrong in "
                        f"this range; got 0x{value:0{digits}x}, expected 0x{want:0{digits}x})")
        return problems

    def _compare(self, got: Any, g: Any, constants: tuple[Any, Any],
                 mask: int) -> tuple[int, tuple[int, int, int, int] | None]:
        """Wrong words of ``got`` against ``(g * scale + offset) & mask`` (``g`` None: zero),
        and the first wrong stretch ``(start, stop, got, expected)``."""
        xp = self.xp
        scale, offset = constants
        narrowed = mask != (1 << (8 * self.layout.word_bytes)) - 1
        mask = self.layout.dtype.type(mask)
        wrong, first = 0, None
        for lo in range(0, got.shape[0], BLOCK_WORDS):
            hi = min(lo + BLOCK_WORDS, got.shape[0])
            expected = self._scratch[: hi - lo]
            if g is None:
                expected[:] = 0
            else:
                xp.multiply(g[lo:hi], scale, out=expected)
                expected += offset
                if narrowed:
                    expected &= mask
            block = got[lo:hi]
            if bool(xp.array_equal(block, expected)):
                continue
            bad = block != expected
            wrong += int(bad.sum())
            if first is None:
                start = int(xp.argmax(bad))
                tail = bad[start:]
                length = int(xp.argmin(tail)) if not bool(tail.all()) else int(tail.shape[0])
                first = (lo + start, lo + start + length, int(block[start]), int(expected[start]))
        return wrong, first

    def executed(self, c: Collective) -> list[Any]:
        """What the ranks' record says collective ``c`` ran: its kind, its unsharded bytes
        and the bytes it sent after padding (a message through PowerSGD:
        :meth:`PowerSGDMessages.executed`)."""
        if self.powersgd is not None and c.index in self.powersgd.messages:
            return self.powersgd.executed(c)
        return [c.kind_name, c.nbytes, c.padded * self.layout.word_bytes]

    @property
    def nbytes(self) -> int:
        """Bytes this rank checks each step: its reduce-scatter shards and what it gathered."""
        layout = self.layout
        if layout.all_reduce:
            return self.gradients.nbytes
        shards = sum(c.shard for c in layout.collectives if c.kind == 0)
        gathered = sum(c.words if self.unpack else c.padded for c in layout.collectives if c.kind == 1)
        return (shards + gathered) * layout.word_bytes


__all__ = ["ShardData"]
