"""The gradient buckets real ``DistributedDataParallel`` builds for a model, read with a comm
hook: the evidence :mod:`fusionopt.solvers.baselines._ddp` is checked against."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from fusionopt.integrations._torch import default_loss, require_torch
from fusionopt.model._cost import check_count


def ddp_bucket_layout(model: Any, inputs: Any, *, loss_fn: Callable[[Any], Any] | None = None,
                      steps: int = 3, **ddp_options: Any) -> list[list[str]]:
    """Parameter names per bucket, buckets in index (reduction) order, as DDP reduces them in
    its last of ``steps`` steps (the third by default: after DDP's rebuild, and a static
    graph's). ``ddp_options`` go to ``DistributedDataParallel`` (``bucket_cap_mb``,
    ``bucket_cap_mb_list``, ``find_unused_parameters``, ``static_graph``). Needs an
    initialised ``torch.distributed`` process group; the hook returns each bucket as it is,
    so the layout, not the reduction, is what a run measures. ``inputs``: one argument, or
    a mapping of keyword arguments.
    """
    torch = require_torch()
    steps = check_count("steps", steps)
    ddp = torch.nn.parallel.DistributedDataParallel(model, **ddp_options)
    names = {p: n for n, p in model.named_parameters()}
    seen: dict[int, list[tuple[int, list[str]]]] = {}
    state = {"step": 0}

    def hook(state, bucket):                   # DDP checks the annotations: none, or its own
        seen.setdefault(state["step"], []).append((bucket.index(), [names[p] for p in bucket.parameters()]))
        future = torch.futures.Future()
        future.set_result(bucket.buffer())
        return future

    ddp.register_comm_hook(state, hook)
    for step in range(steps):
        state["step"] = step
        output = ddp(**inputs) if isinstance(inputs, Mapping) else ddp(inputs)
        (default_loss(output, torch) if loss_fn is None else loss_fn(output)).backward()
    return [bucket for _, bucket in sorted(seen[steps - 1])]
