"""A DDP comm hook that sends each bucket in the encoding the model chooses for it (MODEL.md
section 2.2): what ``fusionopt advise`` tells a job to register where messages may travel in
fp32, fp16 or bf16 (``--encodings``) and some tensors must travel exactly
(``--exact-tensors``).

The model's rule is by the message alone: a message carrying a tensor kept exact goes in
fp32; any other goes in the cheapest encoding at its bytes, which changes at the cost's
crossover sizes (:func:`~fusionopt.cost.crossovers`). The hook applies the same rule to each
bucket DDP hands it: its fp32 bytes (``bucket.buffer()``) against ``choice``, and its
parameters (``bucket.parameters()``) against ``exact``. Deciding per bucket, not per bucket
index, keeps the rule through DDP's first step, whose buckets follow the registration order
before DDP rebuilds them in the ready order.

Each encoding is torch's own hook: ``allreduce_hook``, ``fp16_compress_hook`` and
``bf16_compress_hook`` (``torch.distributed.algorithms.ddp_comm_hooks.default_hooks``; torch
2.13 refuses its bf16 hook without CUDA and NCCL 2.10), or, with an
:class:`~fusionopt.integrations.EmulatedLink`, the link's
:func:`~fusionopt.integrations.ddp_comm_hook` of that encoding, which gives the same
gradients bit for bit and holds each bucket for the link's time.

With ``powersgd`` (a torch ``PowerSGDState``) and ``through`` (parameters), a bucket holding
one of ``through`` goes through torch's ``powerSGD_hook`` instead: what the model prices
where a problem has PowerSGD as one choice per message (``Problem(compressor=PowerSGD(...))``,
MODEL.md section 2.4; ``through`` holds the tensors of the messages it sends through the
hook). torch's hook counts the steps (``state.iter``, which ends its warm-up) on the bucket
DDP marks last; where that bucket goes another way, this hook counts it
(``maybe_increase_iter``), so the warm-up lasts ``start_powerSGD_iter`` steps as under
torch's hook alone.

Checked on torch 2.13.0 (CPU, gloo): ``GradBucket.buffer()``, ``parameters()``,
``is_last()``, the hooks' registration, and the mix of ``powerSGD_hook`` on the bucket DDP
marks last with fp16 on the others (``tests/integrations/test_powersgd_gloo.py``). On gloo
``powerSGD_hook`` issues its later all-reduces from callbacks, so a mix whose hook bucket is
not the last may issue collectives in different orders on different ranks (one bucket
through the hook alone, or the last, is safe). On an emulated link, each bucket through the
hook may have a process group of its own (``groups``), which keeps the orders the same.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Iterable, Sequence

from fusionopt.integrations._emulated_link import EmulatedLink, ddp_comm_hook
from fusionopt.integrations._powersgd_link import powersgd_comm_hook
from fusionopt.integrations._torch_import import require_torch
from fusionopt.model._cost import check_flag

WIRE_ENCODINGS = ("fp32", "fp16", "bf16")


def check_choice(choice: Any) -> tuple[tuple[int, str], ...]:
    """``choice`` as ``((from_bytes, encoding), ...)``: the first from 0 bytes, the sizes
    increasing, each encoding one of fp32, fp16, bf16; one line naming what is wrong
    otherwise."""
    try:
        steps = tuple((int(size), str(name)) for size, name in choice)
    except (TypeError, ValueError):
        raise ValueError(f"choice must list (from bytes, encoding) pairs, got {choice!r}") from None
    if not steps or steps[0][0] != 0:
        raise ValueError(f"choice must start at 0 bytes, got {choice!r}")
    for (size, _), (later, _) in zip(steps, steps[1:]):
        if later <= size:
            raise ValueError(f"choice's sizes must increase, got {size} then {later}")
    for _, name in steps:
        if name not in WIRE_ENCODINGS:
            raise ValueError(f"choice: encoding {name!r}: the hook sends {', '.join(WIRE_ENCODINGS)}")
    return steps


def _pointers(label: str, tensors: Iterable[Any]) -> set[int]:
    """The storage addresses of the parameters ``tensors``; one line naming ``label`` when an
    entry is not a tensor (a parameter's name, say)."""
    if isinstance(tensors, (str, bytes)):
        raise ValueError(f"{label} must list parameters (tensors), got the string {tensors!r}")
    pointers = set()
    for tensor in tensors:
        if not hasattr(tensor, "data_ptr"):
            raise ValueError(f"{label} must list parameters (tensors), not their names: got {tensor!r}")
        pointers.add(int(tensor.data_ptr()))
    return pointers


def choose_encoding(choice: Sequence[tuple[int, str]], nbytes: int, carries_exact: bool) -> str:
    """The encoding of a bucket of ``nbytes`` fp32 bytes (module docstring): fp32 where it
    carries an exact tensor, else that of the last step of ``choice`` at or below its bytes.

    >>> choose_encoding([(0, "fp32"), (100_000, "fp16")], 99_999, False), \\
    ...     choose_encoding([(0, "fp32"), (100_000, "fp16")], 100_000, False), \\
    ...     choose_encoding([(0, "fp32"), (100_000, "fp16")], 10**6, True)
    ('fp32', 'fp16', 'fp32')
    """
    steps = check_choice(choice)
    if check_flag("carries_exact", carries_exact):
        return "fp32"
    if isinstance(nbytes, bool) or not isinstance(nbytes, numbers.Integral) or nbytes < 0:
        raise ValueError(f"nbytes must be a whole number of bytes >= 0, got {nbytes!r}")
    name = steps[0][1]
    for size, step in steps:
        if nbytes >= size:
            name = step
    return name


def wire_comm_hook(choice: Sequence[tuple[int, str]], exact: Iterable[Any] = (), *,
                   link: EmulatedLink | None = None, powersgd: Any = None,
                   through: Iterable[Any] = (), groups: Sequence[Any] = ()) -> Callable[[Any, Any], Any]:
    """A comm hook that sends each bucket as the model chooses (module docstring).

    ``choice``: ``[(from_bytes, encoding), ...]``, the encoding of a bucket from that many fp32
    bytes on (``DDPSettings.wire``: ``[(0, "fp32"), (100000, "fp16")]`` sends buckets of
    100 kB and more in fp16). ``exact``: the parameters kept exact (for example
    ``[p for n, p in model.named_parameters() if n in names]``); a bucket holding one goes in
    fp32. ``link``: an :class:`~fusionopt.integrations.EmulatedLink` to hold each bucket on
    (None: torch's own hooks, nothing held). The hook's ``sent`` lists ``(encoding, fp32
    bytes)`` of every bucket it handled. Register it with ``ddp.register_comm_hook(state,
    hook)``, ``state`` the process group DDP was given (None: the default group).
    ``powersgd`` and ``through``: a ``PowerSGDState`` and the parameters whose buckets go
    through ``powerSGD_hook(powersgd, bucket)`` (module docstring); those are listed in
    ``sent`` as ``"powersgd"``. With ``link`` too, the hook's three all-reduces of a bucket are
    each held on it, bucket ``i``'s on ``groups[i]``
    (:func:`~fusionopt.integrations.powersgd_comm_hook`).
    """
    require_torch()
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    steps = check_choice(choice)
    if link is not None and not isinstance(link, EmulatedLink):
        raise ValueError(f"link must be an EmulatedLink, got {type(link).__name__}")
    kept, compressed = _pointers("exact", exact), _pointers("through", through)
    if compressed and powersgd is None:
        raise ValueError("through names the parameters whose buckets go through powerSGD_hook: give its "
                         "PowerSGDState as powersgd")
    if powersgd is not None:
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

        if not isinstance(powersgd, psgd.PowerSGDState):
            raise ValueError(f"powersgd must be torch's PowerSGDState, got {type(powersgd).__name__}")
        if compressed & kept:
            raise ValueError("a parameter is both kept exact (exact) and sent through powerSGD_hook (through)")
    elif groups:
        raise ValueError("groups are the process groups of the buckets through powerSGD_hook: give powersgd too")
    through_hook = None if powersgd is None else powersgd_comm_hook(powersgd, link, groups)
    names = {name for _, name in steps} | {"fp32"}
    if link is not None:
        hooks = {name: ddp_comm_hook(link, name) for name in names}
    else:
        own = {"fp32": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
               "bf16": default_hooks.bf16_compress_hook}
        hooks = {name: own[name] for name in names}
    sent: list[tuple[str, int]] = []

    def hook(state, bucket):
        buffer = bucket.buffer()
        nbytes = buffer.numel() * buffer.element_size()
        pointers = {int(p.data_ptr()) for p in bucket.parameters()}
        if pointers & compressed:
            sent.append(("powersgd", nbytes))
            return through_hook(powersgd, bucket)
        name = choose_encoding(steps, nbytes, bool(pointers & kept))
        sent.append((name, nbytes))
        if powersgd is not None:
            powersgd.maybe_increase_iter(bucket)       # torch's hook counts a step on the last bucket
        return hooks[name](state, bucket)

    hook.sent = sent  # type: ignore[attr-defined]
    return hook


__all__ = ["check_choice", "choose_encoding", "wire_comm_hook"]
