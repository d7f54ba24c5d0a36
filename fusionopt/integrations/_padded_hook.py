"""A DDP comm hook that pads each bucket to an alignment before its all-reduce: what
``fusionopt advise`` tells a job to register where the calibrated cost has an alignment
cliff (:class:`~fusionopt.cost.Aligned`, MODEL.md section 2.3).

DDP has no padding of its own: a bucket's flat buffer holds its gradients' elements and
nothing more. Megatron-LM pads its buckets' ends to ``lcm(dp, 128)`` elements for the same
reason (``param_layout.bucket_end_divisor``, read at ``d98e8a6``); this hook does it per
message: the bucket is copied into a zeroed buffer whose size is the least multiple of
``world size x unit`` bytes at or above it, averaged as DDP averages (each element times
``1 / world size`` before the sum), all-reduced, and copied back. The zeros add nothing to
the sum, so the gradients are bit-identical to DDP's own.

Checked on torch 2.13.0 (CPU, gloo): the comm hook protocol (``GradBucket.buffer()``, a
future of the bucket's tensor).
"""

from __future__ import annotations

from typing import Any, Callable

from fusionopt.integrations._emulated_link import EmulatedLink, host_hold_only
from fusionopt.integrations._torch_import import require_torch


def padded_comm_hook(unit: int, *, link: EmulatedLink | None = None) -> Callable[[Any, Any], Any]:
    """A comm hook that all-reduces each bucket padded to a multiple of ``world size x unit``
    bytes (module docstring). ``unit``: the alignment of each rank's part (bytes), a whole
    multiple of the gradients' element size. ``link``: an
    :class:`~fusionopt.integrations.EmulatedLink` that holds each padded message for its
    time (None: none). The hook's ``sent`` lists the bytes of every all-reduce it made.
    Register it with ``ddp.register_comm_hook(state, hook)``, ``state`` the process group
    DDP was given (None: the default group)."""
    require_torch()
    import torch.distributed as dist

    if isinstance(unit, bool) or not isinstance(unit, int) or unit < 1:
        raise ValueError(f"unit must be a whole number of bytes >= 1, got {unit!r}")
    if link is not None and not isinstance(link, EmulatedLink):
        raise ValueError(f"link must be an EmulatedLink, got {type(link).__name__}")
    sent: list[int] = []

    def hook(state, bucket):                 # DDP checks the annotations: none, or its own
        buffer = bucket.buffer()
        if link is not None:
            host_hold_only(buffer, "padded_comm_hook")
        size = int(buffer.element_size())
        if unit % size:
            raise ValueError(f"unit {unit} B is not a whole number of the bucket's {size}-byte elements")
        group = state if state is not None else dist.group.WORLD
        world = dist.get_world_size(group)
        step = world * unit // size                      # elements
        count = int(buffer.numel())
        padded = buffer.new_zeros(-(-count // step) * step)
        padded[:count].copy_(buffer).mul_(1.0 / world)
        nbytes = int(padded.numel()) * size
        sent.append(nbytes)
        until = None if link is None else link.reserve(nbytes)
        future = dist.all_reduce(padded, group=group, async_op=True).get_future()

        def back(done: Any) -> Any:
            buffer.copy_(done.value()[0][:count])
            if until is not None:
                link.wait_until(until)
            return buffer
        return future.then(back)

    hook.sent = sent                         # type: ignore[attr-defined]
    return hook


__all__ = ["padded_comm_hook"]
