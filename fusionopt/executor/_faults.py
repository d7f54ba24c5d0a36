"""A communicator that breaks on purpose (:class:`~fusionopt.executor.Fault`), for tests.

It wraps a real communicator and misbehaves on one rank for one message of one step:
it drops the reduced values of half the message, corrupts one word, or stalls. For the
sharded patterns "message" is the collective's place on the channel, and the fault hits its
reduce-scatter (this rank's shard) or its all-gather (the gathered buffer). The plan
runner must then fail with a message naming the tensor and byte range, or the message that
timed out.
"""

from __future__ import annotations

import time
from typing import Any

from fusionopt.executor._communicator import Communicator
from fusionopt.executor._errors import GroupAborted
from fusionopt.executor._job import Fault


class FaultyCommunicator(Communicator):
    """``inner`` with ``fault`` injected (only on ``fault.rank``; others pass through)."""

    def __init__(self, inner: Communicator, fault: Fault) -> None:
        self.inner, self.fault = inner, fault
        self.name, self.xp, self.emulated = inner.name, inner.xp, inner.emulated
        self.word_sizes = inner.word_sizes
        self._timeout = 1.0

    @property
    def rank(self) -> int:
        return self.inner.rank

    @property
    def size(self) -> int:
        return self.inner.size

    @property
    def aborted(self) -> bool:
        return self.inner.aborted

    def channel(self, index: int) -> Communicator:
        return self if index == 0 else FaultyCommunicator(self.inner.channel(index), self.fault)

    def _hit(self, tag: tuple[int, int] | None) -> bool:
        f = self.fault
        return self.inner.rank == f.rank and tag == (f.step, f.message)

    def allreduce(self, buffer: Any, *, timeout: float, tag: tuple[int, int] | None = None) -> None:
        if not self._hit(tag):
            self.inner.allreduce(buffer, timeout=timeout, tag=tag)
            return
        kind = self.fault.kind
        if kind == "stall":
            # Never join; wait to be stopped (another rank's timeout aborts the group).
            deadline = time.monotonic() + 10 * timeout + 10
            while not self.inner.aborted and time.monotonic() < deadline:
                time.sleep(0.01)
            raise GroupAborted(f"rank {self.rank} stalled on purpose (fault {kind!r})")
        half = max(1, buffer.shape[0] // 2)
        kept = buffer[:half].copy() if kind == "drop" else None
        self.inner.allreduce(buffer, timeout=timeout, tag=tag)
        if kind == "drop":
            buffer[:half] = kept
        else:
            middle = buffer.shape[0] // 2
            buffer[middle] ^= buffer.dtype.type(1 << 3)

    def _stall(self) -> None:
        # Never join; wait to be stopped (another rank's timeout aborts the group).
        deadline = time.monotonic() + 10 * self._timeout + 10
        while not self.inner.aborted and time.monotonic() < deadline:
            time.sleep(0.01)
        raise GroupAborted(f"rank {self.rank} stalled on purpose (fault {self.fault.kind!r})")

    def reduce_scatter(self, send: Any, recv: Any, *, timeout: float, tag: tuple[int, int] | None = None) -> None:
        """``drop``: the first half of this rank's shard keeps its own contribution;
        ``corrupt``: one word of its shard has a bit flipped; ``stall``: it never joins."""
        if not self._hit(tag):
            self.inner.reduce_scatter(send, recv, timeout=timeout, tag=tag)
            return
        self._timeout = timeout
        if self.fault.kind == "stall":
            self._stall()
        shard = recv.shape[0]
        half = max(1, shard // 2)
        mine = send[self.rank * shard: self.rank * shard + half].copy()
        self.inner.reduce_scatter(send, recv, timeout=timeout, tag=tag)
        if self.fault.kind == "drop":
            recv[:half] = mine
        else:
            recv[shard // 2] ^= recv.dtype.type(1 << 3)

    def all_gather(self, send: Any, recv: Any, *, timeout: float, tag: tuple[int, int] | None = None) -> None:
        """``drop``: the first half of the gathered buffer is not received (it keeps what it
        held); ``corrupt``: one word of it has a bit flipped; ``stall``: it never joins."""
        if not self._hit(tag):
            self.inner.all_gather(send, recv, timeout=timeout, tag=tag)
            return
        self._timeout = timeout
        if self.fault.kind == "stall":
            self._stall()
        half = max(1, recv.shape[0] // 2)
        kept = recv[:half].copy()
        self.inner.all_gather(send, recv, timeout=timeout, tag=tag)
        if self.fault.kind == "drop":
            recv[:half] = kept
        else:
            recv[recv.shape[0] // 2] ^= recv.dtype.type(1 << 3)

    def barrier(self, *, timeout: float) -> None:
        self.inner.barrier(timeout=timeout)

    def allgather(self, value: Any, *, timeout: float) -> list[Any]:
        return self.inner.allgather(value, timeout=timeout)

    def abort(self, reason: str) -> None:
        self.inner.abort(reason)

    def bind_thread(self) -> None:
        self.inner.bind_thread()

    def synchronize(self, *, timeout: float) -> None:
        self.inner.synchronize(timeout=timeout)

    def step_timer(self):
        return self.inner.step_timer()

    def empty(self, words: int, dtype):
        return self.inner.empty(words, dtype)

    def close(self) -> None:
        self.inner.close()

    def describe(self) -> str:
        return f"{self.inner.describe()}, fault {self.fault.kind!r} on rank {self.fault.rank}"
