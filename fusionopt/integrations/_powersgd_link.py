"""torch's ``powerSGD_hook`` on an emulated link: each of its all-reduces held for the link's time.

``powerSGD_hook`` sends a bucket as three all-reduces, one after the other (the uncompressed
gradients, then the ``P`` factors, then the ``Q`` factors, with products between: MODEL.md
section 2.4), so the link cannot hold the bucket as one message, as
:func:`~fusionopt.integrations.ddp_comm_hook` does. It holds each of the three instead:

* :class:`HeldGroup` stands in for the process group the hook is given. torch 2.13's
  ``torch.distributed.all_reduce`` hands the collective to ``group.allreduce([tensor], opts)``
  on whatever group it is given, and ``powerSGD_hook`` asks only ``size()`` of it; the held
  group runs each all-reduce on a real process group and posts it on the link when it is
  issued, and its future is complete no sooner than the link delivers it. A bucket's
  ``P`` all-reduce is issued when its uncompressed one is delivered and its ``Q`` one after
  the products that follow, so the link sees the hook's chain as the model prices it: three
  messages in a row with the hook's compute between them.
* :func:`powersgd_comm_hook` registers torch's hook with its state's process group set, before
  each bucket, to that bucket's held group.

One process group per bucket: on gloo ``powerSGD_hook`` issues a bucket's later all-reduces
from the callbacks of its earlier ones, so with several buckets on one group the ranks may
issue them in different orders, which gloo aborts on (``tests/integrations/
test_powersgd_gloo.py``). Each bucket on a group of its own (``groups``: made by the caller
with ``torch.distributed.new_group``, on every rank in the same order) keeps every group's
order the same on every rank; the link is still one channel for all of them, in the order
the messages are posted on this rank.

What it does not emulate is :mod:`~fusionopt.integrations._emulated_link`'s list (contention,
the loopback collective's own time overlapping the hold, each rank on its own clock); and the
held future's hold runs on the thread that completes the real collective, gloo's, as the
link's DDP hook's does. Checked against torch 2.13.0 (CPU, gloo): ``all_reduce``'s call of
``group.allreduce`` and ``powerSGD_hook``'s use of its state's ``process_group``.
Results measured so must say "emulated link".
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from fusionopt.integrations._emulated_link import EmulatedLink, _held_work, _nbytes, host_hold_only
from fusionopt.integrations._torch_import import require_torch


class HeldGroup:
    """A process group for torch's hooks whose every all-reduce is held on ``link`` (module
    docstring): it runs on ``group`` (a real ``torch.distributed`` process group) and is
    posted on the link, its bytes those of the tensors it reduces, when it is issued.

    Only what ``powerSGD_hook`` and ``torch.distributed.all_reduce`` ask of a group:
    ``size()``, ``rank()`` and ``allreduce(tensors, options)``.
    """

    def __init__(self, link: EmulatedLink, group: Any) -> None:
        if not isinstance(link, EmulatedLink):
            raise ValueError(f"link must be an EmulatedLink, got {type(link).__name__}")
        if group is None or isinstance(group, HeldGroup) or not callable(getattr(group, "allreduce", None)):
            raise ValueError(f"group must be a torch.distributed process group, got {type(group).__name__}")
        self.link, self.group = link, group

    def size(self) -> int:
        return int(self.group.size())

    def rank(self) -> int:
        return int(self.group.rank())

    def allreduce(self, tensors: Sequence[Any], options: Any) -> Any:
        for tensor in tensors:
            host_hold_only(tensor, "powersgd_comm_hook")
        until = self.link.reserve(sum(_nbytes(t) for t in tensors))
        return _held_work(self.group.allreduce(tensors, options), self.link, until)


def powersgd_comm_hook(state: Any, link: EmulatedLink | None = None,
                       groups: Sequence[Any] = ()) -> Callable[[Any, Any], Any]:
    """torch's ``powerSGD_hook(state, bucket)`` for each bucket; with ``link``, each of its
    all-reduces held on the link, bucket ``i``'s on ``groups[i]`` (module docstring; a
    bucket past the list on ``groups[i % len(groups)]``; no groups: every bucket on the
    state's own process group, safe with one bucket). The hook sets ``state.process_group``
    before each bucket. Register it with ``ddp.register_comm_hook(state, hook)``.

    Without ``link`` it is torch's hook as it is (``groups`` then is refused).
    """
    require_torch()
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    if not isinstance(state, psgd.PowerSGDState):
        raise ValueError(f"state must be torch's PowerSGDState, got {type(state).__name__}")
    if link is None:
        if groups:
            raise ValueError("groups are the process groups whose all-reduces the link holds: give link too")
        return psgd.powerSGD_hook
    if not isinstance(link, EmulatedLink):
        raise ValueError(f"link must be an EmulatedLink, got {type(link).__name__}")
    own = state.process_group if state.process_group is not None else dist.group.WORLD
    held = [HeldGroup(link, group) for group in (list(groups) or [own])]

    def hook(_, bucket):                     # DDP checks the annotations: none, or its own
        state.process_group = held[bucket.index() % len(held)]
        return psgd.powerSGD_hook(state, bucket)

    return hook
