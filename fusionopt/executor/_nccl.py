"""The ``nccl`` backend: CuPy's NCCL bindings, one GPU per rank, ranks as threads of one process.

This module imports without CuPy; selecting the backend without it raises an ImportError
naming the ``gpu`` extra.

* Communicators come from ``cupy.cuda.nccl.NcclCommunicator.initAll(devices)`` (one process
  driving several GPUs, one thread per GPU, as NCCL allows). Each rank has its own
  non-blocking stream; packing, ``ncclAllReduce`` (sum, in place, unsigned integers) and
  unpacking are queued on it, and the host waits for it by polling ``Stream.done`` against
  the timeout. The sharded patterns use ``ncclReduceScatter`` (sum) and ``ncclAllGather``
  on the same stream (``reduceScatter`` and ``allGather`` of CuPy's communicator).
* Message start and end times come from CUDA events recorded on the rank's stream,
  measured (``cupy.cuda.get_elapsed_time``) from an event recorded when the step starts.
* Emulated link (``emulate_link=True``, one GPU): NCCL runs on a single rank (its
  all-reduce is a copy), and a spin kernel then holds the stream for ``c(S)`` of the cost
  model (``c_RS(S)`` or ``c_AG(S)`` of the unsharded size for the sharded patterns), timed by the GPU's global nanosecond timer. Such measurements test the executor's
  own overheads and ordering on a real stream, not a network: they are labelled emulated.
* Barriers and small all-gathers between steps go through the host (a
  :class:`~fusionopt.executor.LocalGroup`).
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import numpy as np

from fusionopt._cuda_hold import hold_kernel
from fusionopt.executor._communicator import Communicator, missing_extra, shard_words
from fusionopt.executor._errors import CollectiveTimeout
from fusionopt.executor._local import LocalGroup
from fusionopt.model._cost import CommCost

_NCCL_TYPES = {1: "NCCL_UINT8", 4: "NCCL_UINT32", 8: "NCCL_UINT64"}


def import_cupy() -> tuple[Any, Any]:
    """``(cupy, cupy.cuda.nccl)``, or an ImportError naming the ``gpu`` extra."""
    try:
        import cupy
        from cupy.cuda import nccl
    except ImportError as exc:
        raise missing_extra("nccl", "CuPy with NCCL", exc) from None
    if not getattr(nccl, "available", True):
        raise missing_extra("nccl", "CuPy built with NCCL (this CuPy has no NCCL)")
    return cupy, nccl


class _EventTimer:
    """Seconds since the step started, from CUDA events on the rank's stream."""

    def __init__(self, cupy: Any, stream: Any) -> None:
        self._cupy, self._stream = cupy, stream
        self.start = cupy.cuda.Event()
        self.start.record(stream)

    def mark(self) -> Any:
        event = self._cupy.cuda.Event()
        event.record(self._stream)
        return event

    def seconds(self, event: Any) -> float:
        event.synchronize()
        return self._cupy.cuda.get_elapsed_time(self.start, event) / 1e3


class NcclGroup:
    """``ranks`` GPUs (devices ``0`` to ``ranks - 1`` unless ``devices`` is given) in one process.

    With ``link_cost`` (emulated link, one GPU), every all-reduce then holds the stream for
    ``link_cost(bytes)`` seconds; ``link_costs`` (``{"reduce_scatter": c_RS, "all_gather":
    c_AG}``) does the same for the sharded collectives, on their unsharded bytes.
    """

    def __init__(self, ranks: int, *, devices: list[int] | None = None,
                 link_cost: CommCost | None = None, link_costs: Mapping[str, CommCost] | None = None) -> None:
        cupy, nccl = import_cupy()
        self.cupy, self.nccl = cupy, nccl
        emulated = link_cost is not None or bool(link_costs)
        if emulated and ranks != 1:
            raise ValueError(f"an emulated link runs on one GPU: ranks must be 1, got {ranks}")
        devices = list(range(ranks)) if devices is None else list(devices)
        if len(devices) != ranks:
            raise ValueError(f"{ranks} ranks need {ranks} devices, got {devices}")
        count = cupy.cuda.runtime.getDeviceCount()
        if count < len(set(devices)) or max(devices) >= count:
            raise RuntimeError(f"the nccl backend needs {ranks} GPU(s) for {ranks} ranks; "
                               f"this machine has {count} (use emulate_link with one GPU)")
        self.devices = devices
        self.link_cost = link_cost
        self.link_costs = dict(link_costs or {})
        if link_cost is not None:
            self.link_costs.setdefault("all_reduce", link_cost)
        self.comms = nccl.NcclCommunicator.initAll(devices)
        self.host = LocalGroup(ranks)
        self._hold = {}

    def hold_kernel(self, device: int) -> Any:
        if device not in self._hold:
            self._hold[device] = hold_kernel(self.cupy, device)
        return self._hold[device]

    def communicators(self) -> list["NcclCommunicator"]:
        return [NcclCommunicator(self, r) for r in range(len(self.devices))]

    def close(self) -> None:
        for comm in self.comms:
            try:
                comm.destroy()
            except Exception:  # noqa: BLE001 - best effort at teardown
                pass


class NcclCommunicator(Communicator):
    """Rank ``rank`` of an :class:`NcclGroup`: its GPU, stream and NCCL communicator."""

    name = "nccl"
    word_sizes = (8, 4, 1)

    def __init__(self, group: NcclGroup, rank: int) -> None:
        self.group, self._rank = group, rank
        cupy = group.cupy
        self.xp = cupy
        self.device_id = group.devices[rank]
        with cupy.cuda.Device(self.device_id):
            self.stream = cupy.cuda.Stream(non_blocking=True)
        self.emulated = bool(group.link_costs)
        self._host = group.host.communicators()[rank]

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return len(self.group.devices)

    @property
    def aborted(self) -> bool:
        return self._host.aborted

    def bind_thread(self) -> None:
        self.group.cupy.cuda.Device(self.device_id).use()
        self.stream.use()

    def _type(self, buffer: Any) -> int:
        kind = getattr(self.group.nccl, _NCCL_TYPES.get(buffer.dtype.itemsize, ""), None)
        if kind is None:
            raise ValueError(f"no NCCL type for {buffer.dtype} buffers")
        return kind

    def _hold(self, collective: str, nbytes: int) -> None:
        """Emulated link: hold the stream for the cost of ``nbytes`` (unsharded) of ``collective``."""
        cost = self.group.link_costs.get(collective)
        if cost is not None:
            seconds = float(cost(nbytes))
            self.group.hold_kernel(self.device_id)((1,), (1,), (np.uint64(round(seconds * 1e9)),))

    def allreduce(self, buffer: Any, *, timeout: float, tag: tuple[int, int] | None = None) -> None:
        nccl = self.group.nccl
        self.group.comms[self._rank].allReduce(buffer.data.ptr, buffer.data.ptr, buffer.size, self._type(buffer),
                                               nccl.NCCL_SUM, self.stream.ptr)
        self._hold("all_reduce", buffer.nbytes)

    def reduce_scatter(self, send: Any, recv: Any, *, timeout: float, tag: tuple[int, int] | None = None) -> None:
        shard_words(send, recv, self.size, "reduce-scatter")
        nccl = self.group.nccl
        self.group.comms[self._rank].reduceScatter(send.data.ptr, recv.data.ptr, recv.size, self._type(recv),
                                                   nccl.NCCL_SUM, self.stream.ptr)
        self._hold("reduce_scatter", send.nbytes)

    def all_gather(self, send: Any, recv: Any, *, timeout: float, tag: tuple[int, int] | None = None) -> None:
        shard_words(recv, send, self.size, "all-gather")
        self.group.comms[self._rank].allGather(send.data.ptr, recv.data.ptr, send.size, self._type(send),
                                               self.stream.ptr)
        self._hold("all_gather", recv.nbytes)

    def synchronize(self, *, timeout: float) -> None:
        deadline = time.perf_counter() + timeout
        while not self.stream.done:
            if time.perf_counter() > deadline:
                raise CollectiveTimeout(f"GPU stream did not finish within {timeout:g} s")
            time.sleep(2e-5)

    def step_timer(self) -> _EventTimer:
        return _EventTimer(self.group.cupy, self.stream)

    def empty(self, words: int, dtype: np.dtype) -> Any:
        with self.group.cupy.cuda.Device(self.device_id):
            return self.group.cupy.empty(int(words), dtype=dtype)

    def barrier(self, *, timeout: float) -> None:
        self.synchronize(timeout=timeout)
        self._host.barrier(timeout=timeout)

    def allgather(self, value: Any, *, timeout: float) -> list[Any]:
        return self._host.allgather(value, timeout=timeout)

    def abort(self, reason: str) -> None:
        self._host.abort(reason)
        try:
            self.group.comms[self._rank].abort()
        except Exception:  # noqa: BLE001 - the group is being torn down anyway
            pass

    def describe(self) -> str:
        cupy = self.group.cupy
        props = cupy.cuda.runtime.getDeviceProperties(self.device_id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        mode = ", EMULATED link (one GPU holds its stream for c(S))" if self.emulated else ""
        return f"nccl, {self.size} GPU(s) ({name}, NCCL {self.group.nccl.get_version()}){mode}"
