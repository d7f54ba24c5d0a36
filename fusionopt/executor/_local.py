"""The ``local`` backend: N ranks as threads of one process, numpy buffers, no dependencies.

The all-reduce is a real collective over the ranks' own buffers, done like a ring's two
phases without the ring: every rank publishes its buffer, sums its own ``1/N`` segment of
every buffer into its buffer (reduce-scatter), then copies the other ranks' finished
segments (all-gather). Three barriers separate the phases. The reduce-scatter and the
all-gather of the sharded patterns are each one of those phases on their own. numpy releases the interpreter
lock while it adds and copies, so ranks run in parallel on as many cores as there are.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import numpy as np

from fusionopt.executor._communicator import Communicator, shard_words
from fusionopt.executor._errors import CollectiveTimeout, GroupAborted


class LocalGroup:
    """The shared state of ``size`` thread ranks: a barrier and one slot per rank."""

    def __init__(self, size: int) -> None:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"ranks must be an integer >= 1, got {size!r}")
        self.size = int(size)
        self._barrier = threading.Barrier(self.size)
        self._slots: list[Any] = [None] * self.size
        self._abort = threading.Event()
        self._reason = ""
        self._lock = threading.Lock()
        self._channels: list[LocalGroup] = [self]     # the group of each channel, shared by all of them

    def channel(self, index: int) -> "LocalGroup":
        """The group of the same ranks for channel ``index`` (made on first asking): its own
        barrier and slots, so its collectives run while this group's do; an abort of any
        channel stops them all."""
        with self._lock:
            channels = self._channels
            while len(channels) <= index:
                group = LocalGroup(self.size)
                group._channels = channels
                group._abort, group._lock = self._abort, self._lock
                channels.append(group)
            return channels[index]

    @property
    def aborted(self) -> bool:
        return self._abort.is_set()

    def abort(self, reason: str) -> None:
        with self._lock:
            if not self._abort.is_set():
                for group in self._channels:
                    group._reason = reason
                self._abort.set()
            channels = list(self._channels)
        for group in channels:
            group._barrier.abort()

    def wait(self, timeout: float, what: str) -> None:
        """Wait for every rank; a timeout or an abort breaks the barrier for all of them."""
        if self._abort.is_set():
            raise GroupAborted(f"stopped: {self._reason}")
        try:
            self._barrier.wait(timeout)
        except threading.BrokenBarrierError:
            if self._abort.is_set():
                raise GroupAborted(f"stopped: {self._reason}") from None
            message = f"{what} did not complete within {timeout:g} s"
            self.abort(message)
            raise CollectiveTimeout(message) from None

    def communicators(self) -> list["LocalCommunicator"]:
        return [LocalCommunicator(self, r) for r in range(self.size)]


def _segment(words: int, parts: int, index: int) -> tuple[int, int]:
    return words * index // parts, words * (index + 1) // parts


class LocalCommunicator(Communicator):
    """Rank ``rank`` of a :class:`LocalGroup`.

    Examples
    --------
    >>> group = LocalGroup(1)
    >>> comm = group.communicators()[0]
    >>> buffer = np.arange(4, dtype=np.uint64)
    >>> comm.allreduce(buffer, timeout=1.0)
    >>> buffer.tolist()
    [0, 1, 2, 3]
    """

    name = "local"

    def __init__(self, group: LocalGroup, rank: int) -> None:
        self.group = group
        self._rank = rank

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self.group.size

    @property
    def aborted(self) -> bool:
        return self.group.aborted

    def allreduce(self, buffer: Any, *, timeout: float, tag: tuple[int, int] | None = None) -> None:
        group, rank, size = self.group, self._rank, self.group.size
        if size == 1:
            return
        group._slots[rank] = buffer
        group.wait(timeout, "all-reduce")
        slots = list(group._slots)
        for q, other in enumerate(slots):
            if other.shape != buffer.shape or other.dtype != buffer.dtype:
                # Every rank sees the same slots, so every rank raises this.
                raise ValueError(
                    f"ranks disagree on the all-reduce buffer: rank 0 has {slots[0].nbytes} B of "
                    f"{slots[0].dtype}, rank {q} has {other.nbytes} B of {other.dtype}")
        lo, hi = _segment(buffer.shape[0], size, rank)
        mine = buffer[lo:hi]
        for q in range(size):
            if q != rank:
                np.add(mine, slots[q][lo:hi], out=mine)
        group.wait(timeout, "all-reduce")
        for q in range(size):
            if q != rank:
                a, b = _segment(buffer.shape[0], size, q)
                buffer[a:b] = slots[q][a:b]
        group.wait(timeout, "all-reduce")
        group._slots[rank] = None

    def _publish(self, buffer: Any, timeout: float, what: str) -> list[Any]:
        """Publish ``buffer`` and return every rank's, checking that they match."""
        group = self.group
        group._slots[self._rank] = buffer
        group.wait(timeout, what)
        slots = list(group._slots)
        for q, other in enumerate(slots):
            if other.shape != buffer.shape or other.dtype != buffer.dtype:
                raise ValueError(
                    f"ranks disagree on the {what} buffer: rank 0 has {slots[0].nbytes} B of "
                    f"{slots[0].dtype}, rank {q} has {other.nbytes} B of {other.dtype}")
        return slots

    def reduce_scatter(self, send: Any, recv: Any, *, timeout: float, tag: tuple[int, int] | None = None) -> None:
        """Sum this rank's shard of every rank's ``send`` into ``recv`` (one pass, two barriers)."""
        shard = shard_words(send, recv, self.size, "reduce-scatter")
        if self.size == 1:
            recv[:] = send
            return
        slots = self._publish(send, timeout, "reduce-scatter")
        lo = self._rank * shard
        np.copyto(recv, slots[0][lo: lo + shard])
        for other in slots[1:]:
            np.add(recv, other[lo: lo + shard], out=recv)
        self.group.wait(timeout, "reduce-scatter")      # no rank reuses its buffer before all have read it
        self.group._slots[self._rank] = None

    def all_gather(self, send: Any, recv: Any, *, timeout: float, tag: tuple[int, int] | None = None) -> None:
        """Copy every rank's ``send`` into its place in ``recv`` (two barriers)."""
        shard = shard_words(recv, send, self.size, "all-gather")
        if self.size == 1:
            recv[:] = send
            return
        slots = self._publish(send, timeout, "all-gather")
        for q, other in enumerate(slots):
            recv[q * shard: (q + 1) * shard] = other
        self.group.wait(timeout, "all-gather")
        self.group._slots[self._rank] = None

    def channel(self, index: int) -> "LocalCommunicator":
        return self if index == 0 else LocalCommunicator(self.group.channel(index), self._rank)

    def barrier(self, *, timeout: float) -> None:
        self.group.wait(timeout, "barrier")

    def allgather(self, value: Any, *, timeout: float) -> list[Any]:
        group = self.group
        group._slots[self._rank] = value
        group.wait(timeout, "all-gather")
        values = list(group._slots)
        group.wait(timeout, "all-gather")
        return values

    def abort(self, reason: str) -> None:
        self.group.abort(reason)

    def describe(self) -> str:
        return f"local, {self.size} ranks as threads of one process"


def run_threads(targets: Sequence[Callable[[], Any]], group: LocalGroup, *,
                name: str = "rank") -> list[Any]:
    """Run ``targets[r]`` on a thread per rank; return their results in rank order.

    When a rank fails, the group is aborted so the others stop instead of waiting for it;
    the first failure that is not a consequence of another (:class:`GroupAborted`) is
    raised, the lowest rank's first. An interrupt while waiting (``KeyboardInterrupt``)
    aborts the group too, so no rank thread runs on, and propagates.
    """
    results: list[Any] = [None] * len(targets)
    failures: list[BaseException | None] = [None] * len(targets)

    def body(r: int) -> None:
        try:
            results[r] = targets[r]()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            failures[r] = exc
            group.abort(f"rank {r} failed: {exc}")

    threads = [threading.Thread(target=body, args=(r,), name=f"fusionopt-{name}-{r}", daemon=True)
               for r in range(len(targets))]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except BaseException:
        group.abort("interrupted")
        raise
    raised = [exc for exc in failures if exc is not None]
    if raised:
        primary = [exc for exc in raised if not isinstance(exc, GroupAborted)]
        raise (primary or raised)[0]
    return results
