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
* on FSDP2 the hold blocks the thread that issues the collective. On CPU (gloo) FSDP2
  issues and waits for each collective on the training thread (its all-gathers are
  synchronous unless ``unshard_async_op`` is set, its reduce-scatters always), which is what
  a collective on a slow link does to that thread; so on CPU no compute overlaps a hold,
  where a GPU's streams would overlap them (as fusionopt's FSDP2 model does). On CUDA the
  hold would block the host instead of the stream, which is not the same:
  :func:`emulate_fsdp2` refuses modules on CUDA. An asynchronous all-gather (an explicit
  ``unshard(async_op=True)``) is held when its work is waited for.

Checked against torch 2.13.0 (CPU, gloo): DDP's comm hook protocol
(``register_comm_hook(state, hook)``, ``GradBucket.buffer()``) and FSDP2's
(``torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py``: ``allocate(size, dtype=,
device=)`` and ``__call__(output_tensor=, input_tensor=, group=, async_op=)``, plus ``op=``
for the reduce-scatter). Results measured on an emulated link must say "emulated link".
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable, NamedTuple

from fusionopt.integrations._torch_import import require_torch
from fusionopt.model._encoding import encoding_named


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

    def reserve(self, nbytes: int) -> float:
        """Post a message of ``nbytes`` bytes now; return the clock time it leaves the channel:
        ``max(now, channel free) + cost(nbytes)``."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"nbytes must be a whole number of bytes >= 0, got {nbytes!r}")
        seconds = float(self.cost(nbytes))
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"the link's cost of {nbytes} bytes is {seconds!r} s; it must be finite and >= 0")
        with self._lock:
            now = float(self.clock())
            start = max(now, self._free)
            self._free = start + seconds
            self.log.append(Hold(nbytes, start, self._free, now))
            return self._free

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


def _nbytes(tensor: Any) -> int:
    return int(tensor.numel()) * int(tensor.element_size())


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
        until = link.reserve(_nbytes(buffer))
        group = state if state is not None else dist.group.WORLD
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
    import torch.distributed as dist

    def hook(state, bucket):
        buffer = bucket.buffer()
        group = state if state is not None else dist.group.WORLD
        compressed = buffer.to(dtype).div_(dist.get_world_size(group))
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
        nbytes = _nbytes(arguments[self.unsharded])
        until = self.link.reserve(nbytes)
        work = self.inner(**arguments)
        done = None if self.record is None else (lambda: self.record(self.kind, nbytes, started, time.perf_counter()))
        if work is None or not arguments.get("async_op", False):
            if work is not None:
                work.wait()
            self.link.wait_until(until)
            if done is not None:
                done()
            return work
        return _held_work(work, self.link, until, done)


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


def emulate_fsdp2(model: Any, link: EmulatedLink, *,
                  record: Callable[[str, int, float, float], None] | None = None) -> int:
    """Hold every all-gather and reduce-scatter of each FSDP2 module in ``model`` (the model
    itself and its submodules that ``fully_shard`` wrapped) on ``link`` (module docstring).
    Call it after the ``fully_shard`` calls and before the first step; returns how many
    FSDP2 units (``fully_shard`` calls, of one module or several) it installed on.
    ``record(kind, nbytes, start, end)``, where given, hears each collective: ``"all_gather"``
    or ``"reduce_scatter"``, its unsharded bytes, and when it was called and when its held
    result was handed back (``time.perf_counter`` seconds). ``ValueError`` where ``model``
    holds no FSDP2 module, a module is already emulated, or its parameters are on CUDA.
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
            if group.device.type != "cpu":
                raise ValueError(f"FSDP2 module {name or '(root)'!r} is on {group.device.type}: the emulated link "
                                 "holds collectives on the issuing thread, which is faithful on CPU only")
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
