"""An emulated link for real ``torch.distributed`` jobs: each collective runs for real, then
its result is held until a slower network, fusionopt's cost model, would have delivered it.

What it emulates (MODEL.md: one channel, first in, first out): a message of ``S`` bytes
posted at clock time ``t`` holds the channel from ``max(t, the channel frees)`` for ``c(S)``
seconds, and its result is handed back no sooner than the end of that hold.
:class:`EmulatedLink` keeps the channel and a log of every message; three hooks post the
messages of real jobs on it:

* :func:`ddp_comm_hook`: a ``DistributedDataParallel`` comm hook. Each bucket is posted when
  DDP hands it over; the hook all-reduces it for real (averaged, as DDP's own reduction
  averages: each gradient times ``1 / world size`` before the sum, so the gradients are
  bit-identical to DDP without a hook) and holds the result until the link's time. ``S``:
  the bucket's bytes. With ``encoding="fp16"`` or ``"bf16"`` it is torch's
  ``fp16_compress_hook`` or ``bf16_compress_hook`` instead (the bucket cast and divided by
  the world size, the cast all-reduced, copied back), ``S`` the cast's bytes: what goes on
  the wire (MODEL.md section 2.2).
* :func:`emulate_fsdp2`: FSDP2's all-gathers and reduce-scatters, through each
  ``FSDPModule``'s ``set_custom_all_gather`` / ``set_custom_reduce_scatter``. The custom
  collective calls the one FSDP2 had (the same allocation, the same call), then holds.
  ``S``: the unsharded side, the all-gather's output or the reduce-scatter's input
  (what MODEL.md section 8.2 prices, padding included).

What it does not emulate:

* contention: the hold takes no CPU, memory bandwidth or accelerator time from the compute
  beside it, as a real network's transfer would;
* the real collective's own time overlaps the hold: a message whose loopback collective
  outlasts ``c(S)`` ends when the collective ends, later than the model says;
* one channel for every message: gloo runs DDP's buckets concurrently (two worker threads)
  and FSDP2 may put its reduce-scatters on a process group of their own, but the link
  carries one message at a time, in the order they were posted on this rank;
* each rank holds on its own clock: the ranks' links are not synchronised; a message's
  real collective already waits for the last rank to post it;
* FSDP2 on one rank: sharded over one rank, FSDP2 (torch 2.13) sends no all-gather and no
  reduce-scatter, so there is nothing to hold: :func:`emulate_fsdp2` refuses it;
* on FSDP2 on CPU the hold blocks the thread that issues the collective. On CPU (gloo) FSDP2
  issues and waits for each collective on the training thread (its all-gathers are
  synchronous unless ``unshard_async_op`` is set, its reduce-scatters always), which is what
  a collective on a slow link does to that thread; so on CPU no compute overlaps a hold,
  where a GPU's streams would overlap them (as fusionopt's FSDP2 model does). An
  asynchronous all-gather (an explicit ``unshard(async_op=True)``) is held when its work is
  waited for.

On CUDA (NCCL) the hold runs on the device, not on the host: holding the host would stall
the kernels it has still to queue, which a slow network does not do. The link keeps one
CUDA stream of its own per device, its channel: each message's hold is a one-thread kernel
that spins on the GPU's nanosecond timer for ``c(S)`` (:mod:`fusionopt._cuda_hold`, compiled
by CuPy, which the CUDA path needs), queued on that stream after the message's real
collective, so holds run one at a time in the order the messages were posted, and only the
streams that consume the message wait for its hold: DDP's reducer through the future the
hook returns (its events recorded after the hold), FSDP2's all-gather and reduce-scatter
streams through an event; the compute stream and the host run on. Two differences from the
CPU path: a message's hold starts when its collective has ended, so the collective's own
time adds to ``c(S)`` instead of overlapping it (on one GPU a collective is a local copy),
and the log's ``start`` and ``end`` are NaN (the device's times are its
own; ``posted`` is the host's).

Checked against torch 2.13.0 (CPU, gloo; the CUDA path follows torch 2.13's code and has not
yet run on a GPU here): DDP's comm hook protocol
(``register_comm_hook(state, hook)``, ``GradBucket.buffer()``) and FSDP2's
(``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``: ``allocate(size, dtype=,
device=)`` and ``__call__(output_tensor=, input_tensor=, group=, async_op=)``, plus ``op=``
for the reduce-scatter). Results measured on an emulated link must say "emulated link".
"""

from __future__ import annotations

import math
import numbers
import threading
import time
from typing import Any, Callable, NamedTuple

import numpy as np

from fusionopt._cuda_hold import hold_kernel
from fusionopt.integrations._torch_import import require_torch
from fusionopt.model._encoding import encoding_named


class DeviceHold(NamedTuple):
    """A message held on a CUDA link (:meth:`EmulatedLink.hold_on_device`): ``end``, a CUDA
    event recorded after its hold (and ``then``); ``value``, what ``then`` returned; ``start``,
    with ``timed``, an event recorded when the link took it (``end`` then times too)."""

    end: Any
    value: Any = None
    start: Any = None


class Hold(NamedTuple):
    """One message on the link: ``nbytes``, the clock times (seconds) it entered and left
    the channel, and when it was posted."""

    nbytes: int
    start: float
    end: float
    posted: float = math.nan


class EmulatedLink:
    """One channel, first in, first out, at the cost model's time per message.

    Parameters
    ----------
    cost : callable
        ``cost(nbytes)``: seconds a message of ``nbytes`` bytes holds the channel (a fusionopt
        :class:`~fusionopt.cost.CommCost`, e.g. ``network("10gbe", 64)``).
    clock : callable
        The clock, in seconds; ``time.perf_counter`` by default.

    ``log`` lists every message reserved since the link was made or reset, in order.
    Thread-safe: messages may be posted from several threads.

    Examples
    --------
    >>> from fusionopt.cost import AlphaBeta
    >>> now = iter([0.0, 0.5, 4.0])
    >>> link = EmulatedLink(AlphaBeta(1.0, 0.0), clock=lambda: next(now))
    >>> link.reserve(8), link.reserve(8), link.reserve(8)     # posted at 0, 0.5 and 4 s
    (1.0, 2.0, 5.0)
    >>> link.log[1]
    Hold(nbytes=8, start=1.0, end=2.0, posted=0.5)
    """

    def __init__(self, cost: Callable[[int], float], *, clock: Callable[[], float] = time.perf_counter) -> None:
        if not callable(cost):
            raise ValueError(f"cost must be a cost model, cost(nbytes) -> seconds, got {type(cost).__name__}")
        if not callable(clock):
            raise ValueError(f"clock must be a callable returning seconds, got {type(clock).__name__}")
        self.cost, self.clock = cost, clock
        self._lock = threading.Lock()
        self._free = -math.inf
        self.log: list[Hold] = []
        self._devices: dict[int, _DeviceChannel] = {}

    def _seconds(self, nbytes: int) -> float:
        if isinstance(nbytes, bool) or not isinstance(nbytes, numbers.Integral) or nbytes < 0:
            raise ValueError(f"nbytes must be a whole number of bytes >= 0, got {nbytes!r}")
        nbytes = int(nbytes)
        seconds = float(self.cost(nbytes))
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"the link's cost of {nbytes} bytes is {seconds!r} s; it must be finite and >= 0")
        return seconds

    def reserve(self, nbytes: int) -> float:
        """Post a message of ``nbytes`` bytes now; return the clock time it leaves the channel:
        ``max(now, channel free) + cost(nbytes)``."""
        seconds = self._seconds(nbytes)
        with self._lock:
            now = float(self.clock())
            start = max(now, self._free)
            self._free = start + seconds
            self.log.append(Hold(nbytes, start, self._free, now))
            return self._free

    def device_stream(self, device: Any) -> Any:
        """The CUDA stream on which this link holds the messages posted on ``device``."""
        return self._channel(require_torch(), device).stream

    def _channel(self, torch: Any, device: Any) -> "_DeviceChannel":
        index = _device_index(torch, device)
        with self._lock:
            if index not in self._devices:
                self._devices[index] = _DeviceChannel(torch, index)
            return self._devices[index]

    def hold_on_device(self, nbytes: int, device: Any, work: Any = None,
                       then: Callable[[], Any] | None = None, *, timed: bool = False) -> DeviceHold:
        """Post a message of ``nbytes`` bytes on CUDA ``device`` now (module docstring): the
        link's stream waits for the message's collective (``work.wait()`` on it; with
        ``work`` None, for what is queued on the current stream, where the collective was
        ordered), holds for ``cost(nbytes)`` after the messages posted before it, then runs
        ``then()`` on it. Returns the events around the hold (:class:`DeviceHold`; ``timed``:
        events that time, ``start`` among them). The host does not wait."""
        torch = require_torch()
        seconds = self._seconds(nbytes)
        channel = self._channel(torch, device)
        with self._lock:
            current = torch.cuda.current_stream(channel.index)
            with torch.cuda.stream(channel.stream):
                if work is None:
                    channel.stream.wait_stream(current)
                else:
                    work.wait()                # NCCL: this stream waits for the collective, the host does not
                start = torch.cuda.Event(enable_timing=True) if timed else None
                if start is not None:
                    start.record(channel.stream)
                channel.hold(seconds)
                value = None if then is None else then()
                end = torch.cuda.Event(enable_timing=timed)
                end.record(channel.stream)
            self.log.append(Hold(nbytes, math.nan, math.nan, float(self.clock())))
        return DeviceHold(end, value, start)

    def wait_until(self, t: float) -> None:
        """Sleep until clock time ``t`` (at once if it has passed)."""
        left = t - self.clock()
        if left > 0:
            time.sleep(left)

    def reset(self) -> None:
        """Free the channel and clear the log."""
        with self._lock:
            self._free = -math.inf
            self.log = []


def _device_index(torch: Any, device: Any) -> int:
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"a hold on a device needs a CUDA device, got {device}")
    return torch.cuda.current_device() if device.index is None else int(device.index)


class _DeviceChannel:
    """The link's channel on one CUDA device: a stream of the link's own, on which each
    message's hold is a kernel of :mod:`fusionopt._cuda_hold` (CuPy compiles it)."""

    def __init__(self, torch: Any, index: int) -> None:
        try:
            import cupy
        except ImportError:
            raise ValueError("holding a collective on a CUDA device needs CuPy (pip install cupy-cuda12x or "
                             "cupy-cuda13x, as the CUDA of this torch): its hold is a CUDA kernel that CuPy "
                             "compiles") from None
        self.index = index
        self.stream = torch.cuda.Stream(device=self.index)
        self._cupy_stream = cupy.cuda.ExternalStream(self.stream.cuda_stream, self.index)
        self._kernel = hold_kernel(cupy, self.index)

    def hold(self, seconds: float) -> None:
        """Queue a hold of ``seconds`` on this channel's stream."""
        if seconds > 0:
            with self._cupy_stream:
                self._kernel((1,), (1,), (np.uint64(round(seconds * 1e9)),))


def host_hold_only(tensor: Any, what: str) -> None:
    """One line where ``tensor`` is on CUDA: ``what`` holds its messages on the host, which on a
    GPU would stall the kernels still to be queued (module docstring)."""
    if getattr(getattr(tensor, "device", None), "type", "cpu") == "cuda":
        raise ValueError(f"{what} holds the emulated link on the host, faithful on CPU only: on CUDA, hold "
                         "with ddp_comm_hook or emulate_fsdp2, which hold on the device")


def _nbytes(tensor: Any) -> int:
    return int(tensor.numel()) * int(tensor.element_size())


def device_future(torch: Any, link: EmulatedLink, value: Any, nbytes: int, work: Any,
                  then: Callable[[], None] | None = None, *, timed: bool = False) -> tuple[Any, DeviceHold]:
    """DDP's future for a bucket on CUDA: ``value`` once ``work`` has ended and the link has
    held it (then ``then()``), its events recorded on the link's stream after the hold; with
    the hold's events (``timed``: events that time)."""
    future = torch.futures.Future(devices=[value.device])

    def deliver() -> None:
        if then is not None:
            then()
        future.set_result(value)           # records its events on the link's stream, now current
    return future, link.hold_on_device(nbytes, value.device, work, deliver, timed=timed)


def ddp_comm_hook(link: EmulatedLink, encoding: Any = None) -> Callable[[Any, Any], Any]:
    """A comm hook that all-reduces each bucket for real, averaged as DDP averages, and hands
    it back no sooner than the link delivers it (module docstring). Register it with
    ``ddp.register_comm_hook(state, hook)``, ``state`` the process group DDP was given (None:
    the default group), as for torch's own ``allreduce_hook``.

    The average: each element times ``1 / world size`` before the sum, as DDP's reducer
    scales gradients into its buckets when no hook is registered, so a step's gradients are
    bit-identical to DDP's own.

    ``encoding``: ``"fp16"`` or ``"bf16"`` (or :data:`~fusionopt.cost.FP16`,
    :data:`~fusionopt.cost.BF16`) runs torch 2.13's ``_compress_hook`` as
    ``fp16_compress_hook`` and ``bf16_compress_hook`` do, the link holding the cast's bytes;
    the gradients are then bit-identical to that hook's. ``"fp32"`` or None: the plain hook.
    torch refuses its own ``bf16_compress_hook`` without CUDA and NCCL 2.10 (gloo included);
    this one runs it anywhere, to emulate such a deployment.

    On CUDA the bucket waits for the link on a stream of the link's, not on the host; the
    future returned is completed at once, its events recorded after the hold (module docstring).

    A list of encodings, one per bucket (DDP's ``bucket.index()``: the first ready is bucket
    0, as a plan's first message), sends each bucket as its own says: the advice of a problem
    priced with :class:`~fusionopt.cost.Cheapest` (``problem.cost.choose(plan.message_bytes)``)
    where it mixes encodings. A bucket past the list is refused in one line.
    """
    torch = require_torch()

    if not isinstance(link, EmulatedLink):
        raise ValueError(f"link must be an EmulatedLink, got {type(link).__name__}")
    if isinstance(encoding, (list, tuple)):
        if not encoding:
            raise ValueError("encoding: give one encoding per bucket, not an empty list")
        hooks = [ddp_comm_hook(link, each) for each in encoding]

        def by_bucket(state, bucket):
            index = bucket.index()
            if index >= len(hooks):
                raise ValueError(f"bucket {index} has no encoding: the list names {len(hooks)} bucket(s)")
            return hooks[index](state, bucket)
        return by_bucket
    import torch.distributed as dist

    name = None if encoding is None else encoding_named(encoding).name
    if name not in (None, "fp32", "fp16", "bf16"):
        raise ValueError(f"encoding {name!r}: the emulated DDP hook sends fp32, fp16 or bf16")
    if name in ("fp16", "bf16"):
        return _compressed_hook(link, {"fp16": torch.float16, "bf16": torch.bfloat16}[name])

    def hook(state, bucket):                 # DDP checks the annotations: none, or its own
        buffer = bucket.buffer()
        group = state if state is not None else dist.group.WORLD
        if buffer.is_cuda:
            buffer.mul_(1.0 / dist.get_world_size(group))
            work = dist.all_reduce(buffer, group=group, async_op=True)
            return device_future(torch, link, buffer, _nbytes(buffer), work)[0]
        until = link.reserve(_nbytes(buffer))
        buffer.mul_(1.0 / dist.get_world_size(group))
        future = dist.all_reduce(buffer, group=group, async_op=True).get_future()

        def held(done: Any) -> Any:
            reduced = done.value()[0]
            link.wait_until(until)
            return reduced
        return future.then(held)

    return hook


def _compressed_hook(link: EmulatedLink, dtype: Any) -> Callable[[Any, Any], Any]:
    """torch's ``_compress_hook`` (``default_hooks.py``, torch 2.13) with the cast held on the link."""
    torch = require_torch()
    import torch.distributed as dist

    def hook(state, bucket):
        buffer = bucket.buffer()
        group = state if state is not None else dist.group.WORLD
        compressed = buffer.to(dtype).div_(dist.get_world_size(group))
        if buffer.is_cuda:
            work = dist.all_reduce(compressed, group=group, async_op=True)
            compressed.record_stream(link.device_stream(buffer.device))   # read there after the hold
            return device_future(torch, link, buffer, _nbytes(compressed), work, lambda: buffer.copy_(compressed))[0]
        until = link.reserve(_nbytes(compressed))
        future = dist.all_reduce(compressed, group=group, async_op=True).get_future()

        def held(done: Any) -> Any:
            buffer.copy_(done.value()[0])
            link.wait_until(until)
            return buffer
        return future.then(held)

    return hook


class _HeldCollective:
    """FSDP2's collective of one kind, held on the link: ``inner`` (the collective FSDP2 had)
    allocates and runs it, then the result waits for the link's time; ``record``, where given,
    hears ``(kind, unsharded bytes, start, end)`` of each call (``time.perf_counter`` seconds,
    the end once its result is handed back)."""

    def __init__(self, inner: Any, link: EmulatedLink, unsharded: str, kind: str,
                 record: Callable[[str, int, float, float], None] | None = None) -> None:
        self.inner, self.link, self.unsharded, self.kind, self.record = inner, link, unsharded, kind, record

    def allocate(self, size: Any, *, dtype: Any, device: Any) -> Any:
        return self.inner.allocate(size, dtype=dtype, device=device)

    def __call__(self, **arguments: Any) -> Any:
        started = time.perf_counter()
        unsharded = arguments[self.unsharded]
        nbytes = _nbytes(unsharded)
        done = None if self.record is None else (lambda: self.record(self.kind, nbytes, started, time.perf_counter()))
        if unsharded.is_cuda:
            return self._on_device(unsharded, nbytes, arguments, done)
        until = self.link.reserve(nbytes)
        work = self.inner(**arguments)
        if work is None or not arguments.get("async_op", False):
            if work is not None:
                work.wait()
            self.link.wait_until(until)
            if done is not None:
                done()
            return work
        return _held_work(work, self.link, until, done)

    def _on_device(self, unsharded: Any, nbytes: int, arguments: dict[str, Any],
                   done: Callable[[], None] | None) -> Any:
        """On CUDA: the collective as FSDP2 had it, on FSDP2's current stream (its all-gather or
        reduce-scatter stream), held on the link's stream; the current stream waits for the
        hold (the host does not), or, asynchronous, whoever waits for the work returned."""
        torch = require_torch()
        work = self.inner(**arguments)
        if work is None or not arguments.get("async_op", False):
            if work is not None:
                work.wait()                      # the current stream waits for the collective
            held = self.link.hold_on_device(nbytes, unsharded.device)
            torch.cuda.current_stream(unsharded.device).wait_event(held.end)
            if done is not None:
                done()
            return work

        def delivered() -> Any:                  # on the link's stream, after the hold
            future = torch.futures.Future(devices=[unsharded.device])
            future.set_result([unsharded])
            return future
        held = self.link.hold_on_device(nbytes, unsharded.device, work, delivered)
        return _device_held_work(torch, work, held.end, held.value, unsharded.device, done)


def _held_work(work: Any, link: EmulatedLink, until: float, done: Callable[[], None] | None = None) -> Any:
    """A ``torch.distributed.Work`` (FSDP2 checks the type) whose ``wait`` holds (and then
    calls ``done``), and whose future completes no sooner than ``until`` (the hold runs on the
    thread that completes the real collective)."""
    import torch.distributed as dist

    class HeldWork(dist.Work):
        def get_future(self) -> Any:
            def held(finished: Any) -> Any:
                value = finished.value()
                link.wait_until(until)
                return value
            return work.get_future().then(held)

        def wait(self, timeout: Any = None) -> bool:
            work.wait() if timeout is None else work.wait(timeout)
            link.wait_until(until)
            if done is not None:
                done()
            return True

        def is_completed(self) -> bool:
            return work.is_completed() and link.clock() >= until

    return HeldWork()


def _device_held_work(torch: Any, work: Any, event: Any, future: Any, device: Any,
                      done: Callable[[], None] | None) -> Any:
    """A ``torch.distributed.Work`` for a collective held on a CUDA link: waiting for it makes
    the current stream wait for the hold's ``event`` (the host does not wait); its future's
    events are recorded after the hold."""
    import torch.distributed as dist

    class DeviceHeldWork(dist.Work):
        def get_future(self) -> Any:
            return future

        def wait(self, timeout: Any = None) -> bool:
            work.wait() if timeout is None else work.wait(timeout)
            torch.cuda.current_stream(device).wait_event(event)
            if done is not None:
                done()
            return True

        def is_completed(self) -> bool:
            return work.is_completed() and event.query()

    return DeviceHeldWork()


def emulate_fsdp2(model: Any, link: EmulatedLink, *,
                  record: Callable[[str, int, float, float], None] | None = None) -> int:
    """Hold every all-gather and reduce-scatter of each FSDP2 module in ``model`` (the model
    itself and its submodules that ``fully_shard`` wrapped) on ``link`` (module docstring).
    Call it after the ``fully_shard`` calls and before the first step; returns how many
    FSDP2 units (``fully_shard`` calls, of one module or several) it installed on.
    ``record(kind, nbytes, start, end)``, where given, hears each collective: ``"all_gather"``
    or ``"reduce_scatter"``, its unsharded bytes, and when it was called and when its held
    result was handed back (``time.perf_counter`` seconds; on CUDA, when the call returned, its
    hold queued). ``ValueError`` where ``model`` holds no FSDP2 module, a module is already
    emulated, is sharded over one rank (FSDP2 then skips its collectives), or its parameters
    are neither on CPU nor on CUDA (CUDA needs CuPy).
    """
    require_torch()
    from torch.distributed.fsdp import FSDPModule

    if not isinstance(link, EmulatedLink):
        raise ValueError(f"link must be an EmulatedLink, got {type(link).__name__}")
    units: dict[int, tuple[str, Any]] = {}      # one FSDP2 state per fully_shard call, of one or more modules
    for name, module in model.named_modules():
        if isinstance(module, FSDPModule):
            units.setdefault(id(module._get_fsdp_state()), (name, module))
    if not units:
        raise ValueError("the model holds no FSDP2 module: call fully_shard on it (and its units) first")
    for name, module in units.values():
        for group in module._get_fsdp_state()._fsdp_param_groups:
            if group.device.type not in ("cpu", "cuda"):
                raise ValueError(f"FSDP2 module {name or '(root)'!r} is on {group.device.type}: the emulated link "
                                 "holds collectives on CPU (the issuing thread) and CUDA (a stream) only")
            if group._all_gather_process_group.size() == 1:
                raise ValueError(f"FSDP2 module {name or '(root)'!r} is sharded over one rank, where FSDP2 (torch "
                                 "2.13) sends no all-gather and no reduce-scatter: the link would hold nothing; "
                                 "shard over two ranks or more")
            if group.device.type == "cuda":
                link.device_stream(group.device)          # one line now where CuPy is missing
            if isinstance(group._all_gather_comm, _HeldCollective):
                raise ValueError(f"FSDP2 module {name or '(root)'!r} already holds its collectives on a link")
    for _, module in units.values():
        for group in module._get_fsdp_state()._fsdp_param_groups:
            module.set_custom_all_gather(_HeldCollective(group._all_gather_comm, link, "output_tensor", "all_gather",
                                                         record))
            module.set_custom_reduce_scatter(_HeldCollective(group._reduce_scatter_comm, link, "input_tensor",
                                                             "reduce_scatter", record))
    return len(units)


__all__ = ["EmulatedLink", "Hold", "ddp_comm_hook", "emulate_fsdp2"]
