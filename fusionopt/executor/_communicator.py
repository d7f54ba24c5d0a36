"""The one small interface every backend implements: :class:`Communicator`.

A communicator is one rank's handle on a group of ``size`` ranks. The plan runners need
these collective operations of it, all called by every rank in the same order:

* :meth:`~Communicator.allreduce`: sum a buffer of unsigned integers over the ranks, in
  place (modulo ``2**bits``, so the sums are exact);
* :meth:`~Communicator.reduce_scatter` and :meth:`~Communicator.all_gather` of a flat buffer
  whose length is a multiple of ``size`` (the sharded patterns of MODEL.md section 8): rank
  ``r`` holds words ``[r s, (r + 1) s)`` of the sum, or contributes them to the gather;
* :meth:`~Communicator.barrier` and :meth:`~Communicator.allgather` (small Python values:
  plan hashes, verdicts, timings), between steps;
* :meth:`~Communicator.abort`: give up, waking or ending every rank.

Buffers are arrays of the backend's array module ``xp`` (numpy on the host, CuPy on a GPU).
A backend whose work is asynchronous (a GPU stream) makes :meth:`~Communicator.synchronize`
wait for it and supplies a :meth:`~Communicator.step_timer` that times on the device.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Any, Callable

import numpy as np

from fusionopt.executor._errors import GroupAborted

BACKENDS = ("local", "mpi", "nccl")
# Emulated work sleeps in slices of at most this, to notice a failed group.
POLL = 0.05

# Which extra of pyproject.toml installs each backend's dependencies.
EXTRAS = {"local": None, "mpi": "mpi", "nccl": "gpu"}


class HostTimer:
    """Seconds since the start of a step, on the host's monotonic clock."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.start = clock()

    def mark(self) -> Any:
        """A token for "now" (a float here; a device event on a GPU)."""
        return self._clock()

    def seconds(self, token: Any) -> float:
        """Seconds from the start of the step to ``token``."""
        return float(token - self.start)


class Communicator(ABC):
    """One rank's view of a group of ``size`` ranks.

    Attributes
    ----------
    name : str
        The backend (``"local"``, ``"mpi"``, ``"nccl"``).
    rank, size : int
    xp : module
        The array module of its buffers (``numpy`` or ``cupy``).
    emulated : bool
        True when the transfers are not real (a single GPU holding its stream for the cost
        model's duration): such measurements test the runner, not the network.
    word_sizes : tuple of int
        Unsigned integer widths in bytes its all-reduce sums (NCCL has no 16-bit integers).
    """

    name: str = "?"
    xp: Any = np
    emulated: bool = False
    # Word sizes (bytes) its all-reduce can sum as unsigned integers, widest first.
    word_sizes: tuple[int, ...] = (8, 4, 2, 1)

    @property
    @abstractmethod
    def rank(self) -> int: ...

    @property
    @abstractmethod
    def size(self) -> int: ...

    @abstractmethod
    def allreduce(self, buffer: Any, *, timeout: float, tag: tuple[int, int] | None = None) -> None:
        """Sum ``buffer`` over every rank, in place.

        ``timeout`` in seconds: raise :class:`~fusionopt.executor.CollectiveTimeout`
        when the backend can tell that the collective did not complete in time (the plan
        runner's watchdog covers backends that cannot). ``tag`` is ``(step, message)``, for
        fault injection and messages; backends may ignore it.
        """

    def reduce_scatter(self, send: Any, recv: Any, *, timeout: float, tag: tuple[int, int] | None = None) -> None:
        """Sum ``send`` (``size * len(recv)`` words) over every rank; ``recv`` gets this
        rank's shard of the sum, words ``[rank * len(recv), (rank + 1) * len(recv))``.

        The default runs an all-reduce of a copy and keeps the shard (a backend without a
        native reduce-scatter); every backend here overrides it.
        """
        shard = shard_words(send, recv, self.size, "reduce-scatter")
        buffer = send.copy()
        self.allreduce(buffer, timeout=timeout, tag=tag)
        recv[:] = buffer[self.rank * shard: (self.rank + 1) * shard]

    def all_gather(self, send: Any, recv: Any, *, timeout: float, tag: tuple[int, int] | None = None) -> None:
        """Every rank's ``send`` (its shard), in rank order, into ``recv`` (``size * len(send)`` words).

        The default sums a zeroed buffer holding this rank's shard (an all-reduce); every
        backend here overrides it.
        """
        shard = shard_words(recv, send, self.size, "all-gather")
        recv[:] = 0
        recv[self.rank * shard: (self.rank + 1) * shard] = send
        self.allreduce(recv, timeout=timeout, tag=tag)

    @abstractmethod
    def barrier(self, *, timeout: float) -> None:
        """Wait until every rank arrives."""

    @abstractmethod
    def allgather(self, value: Any, *, timeout: float) -> list[Any]:
        """Every rank's ``value`` (small, picklable), in rank order."""

    def abort(self, reason: str) -> None:
        """Stop the group after a failure on this rank; other ranks' waits end with an error."""

    @property
    def aborted(self) -> bool:
        """True once :meth:`abort` was called on any rank of the group (where it can be seen)."""
        return False

    def channel(self, index: int) -> "Communicator":
        """This rank's communicator on channel ``index`` of the same ranks, whose collectives
        may run while another channel's do (a parameter server's pulls beside its pushes);
        channel 0 is this one. Every rank asks for the same channels. A backend that runs one
        channel refuses in one line."""
        if index == 0:
            return self
        raise ValueError(f"the {self.name} backend runs one channel per rank; this plan runs {index + 1} at once "
                         "(a parameter server's pushes and pulls): use the local or mpi backend")

    def bind_thread(self) -> None:
        """Make this rank's device and stream current in the calling thread (GPU backends)."""

    def synchronize(self, *, timeout: float) -> None:
        """Wait until the work queued so far (packing, reduction, unpacking) has completed."""

    def step_timer(self) -> HostTimer:
        """A timer started now, for one step's message start and end times."""
        return HostTimer()

    def empty(self, words: int, dtype: np.dtype) -> Any:
        """An uninitialised buffer of ``words`` elements of ``dtype`` in the backend's memory."""
        return self.xp.empty(int(words), dtype=dtype)

    def close(self) -> None:
        """Release the backend's resources."""

    def describe(self) -> str:
        """The backend in words, for reports."""
        return f"{self.name}, {self.size} ranks"


def sleep_until(deadline: float, comm: Communicator) -> None:
    """Sleep until ``deadline`` (``time.perf_counter`` seconds), in slices of :data:`POLL`;
    :class:`~fusionopt.executor.GroupAborted` as soon as ``comm``'s group has failed."""
    while True:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            return
        if comm.aborted:
            raise GroupAborted("stopped: another rank failed")
        time.sleep(min(remaining, POLL))


def shard_words(whole: Any, shard: Any, size: int, what: str) -> int:
    """Words of one shard; ``ValueError`` unless ``whole`` is ``size`` shards of ``shard``."""
    words = int(shard.shape[0])
    if int(whole.shape[0]) != size * words or whole.dtype != shard.dtype:
        raise ValueError(f"{what}: the whole buffer must be {size} shards of {words} words of {shard.dtype}, "
                         f"got {int(whole.shape[0])} words of {whole.dtype}")
    return words


def missing_extra(backend: str, what: str, cause: BaseException | None = None) -> ImportError:
    """The ImportError for a backend whose dependencies are not installed, naming its extra."""
    extra = EXTRAS.get(backend)
    hint = f"install the {extra!r} extra: pip install 'fusionopt[{extra}]'" if extra else ""
    if extra == "gpu":                    # CuPy's wheels are built per CUDA major version
        hint += " (CUDA 12; with CUDA 13: pip install 'fusionopt[gpu-cuda13]')"
    detail = f" ({cause})" if cause is not None else ""
    return ImportError(f"the {backend} backend needs {what}{detail}; {hint}")


def check_backend(backend: str) -> str:
    """``backend`` if it names a backend, else ``ValueError`` listing them."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    return backend
