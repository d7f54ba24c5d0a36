"""A real FSDP2 job that a :class:`~fusionopt.integrations.ShardedPlanner` can re-plan: wrapped
as a plan's settings say, its collectives timed, its reshard flags and prefetch lists
switched between steps.

Checked on torch 2.13.0 (CPU, gloo), ``torch/distributed/fsdp/_fully_shard/_fully_shard.py``:

* ``fully_shard(module, reshard_after_forward=)`` on each unit of
  :func:`~fusionopt.advice.fsdp2_settings`, then on the model (the root);
* between steps, ``FSDPModule.set_reshard_after_forward(flag, recurse=False)`` sets the
  unit's post-forward mesh (its parameter group reads it at the next forward), and
  ``set_modules_to_forward_prefetch`` / ``set_modules_to_backward_prefetch`` set the lists
  its next pre-forward and pre-backward read. A unit without a backward list in the
  settings gets the unit before it, which torch's docstring says gives the default
  (implicit) prefetch, so a switch back to depth 1 is possible through the public API;
* every all-gather and reduce-scatter goes through the unit's ``set_custom_all_gather`` /
  ``set_custom_reduce_scatter`` collective: the one FSDP2 had, held on an
  :class:`~fusionopt.integrations.EmulatedLink` and timed
  (:func:`~fusionopt.integrations.emulate_fsdp2` with ``record``; a link of no cost by
  default). On CPU FSDP2 issues and waits for each
  collective on the training thread, so a collective's seconds are the time it held that
  thread, and the compute is the rest (``FullySharded(blocking=True)`` models this job; a
  GPU's streams would need CUDA events, which this job does not take: it refuses a module
  on CUDA, though :func:`~fusionopt.integrations.emulate_fsdp2` holds CUDA collectives on
  a stream).

The step is timed from the root's forward (a pre-hook ahead of FSDP2's own, so before the
root's all-gather) to :meth:`FSDP2Job.end_step`, which the training loop calls after the
optimiser's step (the planner's ``after_step`` calls it).
"""

from __future__ import annotations

import math
import time
from typing import Any

from fusionopt.integrations._emulated_link import EmulatedLink, emulate_fsdp2
from fusionopt.integrations._online_sharded import _check_job, _units_refusal, same_units
from fusionopt.integrations._torch_import import require_torch
from fusionopt.model._problem import Problem
from fusionopt.model._sharded_plan import ShardedPlan


class FSDP2Job:
    """Real FSDP2 with the face :class:`~fusionopt.integrations.ShardedPlanner` reads: call it
    as the model, call :meth:`end_step` after the optimiser's step (or let the planner),
    :meth:`switch` between steps.

    Parameters
    ----------
    model : torch.nn.Module
        Not yet sharded; its trainable parameters are ``problem``'s profile's tensors, by
        name and size. The job calls ``fully_shard`` on it.
    problem : Problem
        A ``FullySharded`` problem of the model: its profile is what the planner starts from,
        its pattern's memory cap and options what it plans within (on CPU,
        ``blocking=True``: the collectives block the training thread).
    plan : ShardedPlan
        The first plan: its units are the job's for good; FSDP2 must be able to build it
        (:func:`~fusionopt.advice.fsdp2_settings` says what to change if not).
    link : EmulatedLink, optional
        Holds every collective for a slower network's time (none: a link of no cost).
    """

    def __init__(self, model: Any, problem: Problem, plan: ShardedPlan, *, link: EmulatedLink | None = None) -> None:
        require_torch()
        import torch.distributed as dist
        from torch.distributed.fsdp import fully_shard

        from fusionopt.advice._sharded import fsdp2_settings
        from fusionopt.integrations._plan_reducer import match_parameters

        _check_job(problem.pattern, plan)
        match_parameters(model, problem.profile, "the profile")
        if any(p.device.type != "cpu" for p in model.parameters()):
            raise ValueError("FSDP2Job times collectives on the training thread, which is faithful on CPU only; the "
                             "model's parameters are on another device")
        settings = fsdp2_settings(problem, plan)
        self._dist = dist
        self.model, self.problem = model, problem
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.units: dict[str, Any] = {}                   # a fully_shard call's first module name -> its module
        for modules, reshard in zip(settings.units, settings.reshard_after_forward):
            targets = [model if name == "" else model.get_submodule(name) for name in modules]
            fully_shard(targets[0] if len(targets) == 1 else targets, reshard_after_forward=reshard)
            self.units[modules[0]] = targets[0]
        if "" not in self.units:
            raise ValueError("the plan's settings do not wrap the model itself last (the root)")
        self.link = link if link is not None else EmulatedLink(lambda nbytes: 0.0)
        emulate_fsdp2(model, self.link, record=self._timed)
        self._apply(settings)
        self.plan = settings.plan
        self.switches = 0
        self.step_time = math.nan                         # the last step's seconds
        self._collectives: list[tuple[str, int, float, float]] = []
        self._started: float | None = None
        self._forward_end: float | None = None
        model.register_forward_pre_hook(self._pre_forward, prepend=True)
        model.register_forward_hook(self._post_forward)

    @property
    def profile(self) -> Any:
        """The problem's profile: what the planner starts from."""
        return self.problem.profile

    @property
    def pattern(self) -> Any:
        """The problem's pattern: what the planner plans within."""
        return self.problem.pattern

    # ------------------------------------------------------------------ timing
    def _pre_forward(self, module: Any, args: Any) -> None:
        if self._started is None:
            self._started = time.perf_counter()
            self._collectives = []

    def _post_forward(self, module: Any, args: Any, output: Any) -> None:
        self._forward_end = time.perf_counter()

    def _timed(self, kind: str, nbytes: int, start: float, end: float) -> None:
        self._collectives.append((kind, nbytes, start, end))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.model(*args, **kwargs)

    def end_step(self) -> dict[str, Any]:
        """Close the step run since the last call; its record: ``collectives``
        (``(kind, bytes, seconds)`` in issue order), ``forward`` and ``backward`` (the
        compute seconds between them) and ``step`` (seconds, the root's forward to now)."""
        now = time.perf_counter()
        if self._started is None or self._forward_end is None:
            raise ValueError("end_step(): no step ran since the last one (call the job's model, backward and the "
                             "optimiser's step first)")
        started, forward_end, collectives = self._started, self._forward_end, self._collectives
        self._started = self._forward_end = None
        self._collectives = []
        self.step_time = now - started
        inside = sum(end - start for _, _, start, end in collectives if end <= forward_end)
        after = [c for c in collectives if c[3] > forward_end]
        backward_end = max((end for *_, end in after), default=forward_end)
        return {"collectives": [(kind, nbytes, end - start) for kind, nbytes, start, end in collectives],
                "forward": max(forward_end - started - inside, 0.0),
                "backward": max(backward_end - forward_end - sum(end - start for *_, start, end in after), 0.0),
                "step": self.step_time}

    # ------------------------------------------------------------------ switching
    def _apply(self, settings: Any) -> None:
        for modules, reshard in zip(settings.units, settings.reshard_after_forward):
            self.units[modules[0]].set_reshard_after_forward(bool(reshard), recurse=False)
        order = list(self.units)                          # forward order, the root last
        for k, key in enumerate(order):
            module = self.units[key]
            module.set_modules_to_forward_prefetch([self.units[t] for t in settings.forward_prefetch.get(key, [])])
            if key in settings.backward_prefetch:
                targets = settings.backward_prefetch[key]
            else:                                         # depth 1: the unit before, FSDP2's default
                targets = [order[k - 1]] if k >= 1 else []
            module.set_modules_to_backward_prefetch([self.units[t] for t in targets])

    def switch(self, plan: ShardedPlan) -> None:
        """Run ``plan`` from the next step on: its reshard flags and prefetch lists on the
        job's units. Between steps only (after :meth:`end_step`), on every rank with the same
        plan (checked: ranks that disagree keep the plan they had); ``plan`` must have the
        job's units."""
        from fusionopt.advice._sharded import fsdp2_settings

        _check_job(self.pattern, plan)
        if self._started is not None:
            raise ValueError("switch(plan) between steps only: a step is running (call it after end_step())")
        if not same_units(plan, self.plan):
            raise _units_refusal(plan, self.plan)
        settings = fsdp2_settings(self.problem, plan)
        mine = (plan.reshard.tolist(), plan.forward_prefetch, plan.backward_prefetch)
        every: list[Any] = [None] * self.world
        self._dist.all_gather_object(every, mine)
        odd = [r for r, other in enumerate(every) if other != every[0]]
        if odd:
            raise ValueError(f"ranks disagree on the plan: rank {odd[0]} switches to {every[odd[0]]}, rank 0 to "
                             f"{every[0]} (reshard flags, forward and backward depths); every rank keeps its plan")
        self._apply(settings)
        self.plan = settings.plan
        self.switches += 1


__all__ = ["FSDP2Job"]
