"""Online re-planning: a job that finds its own optimal plan while it trains, from its own
timings, and follows the network or the compute when they change.

:class:`OnlinePlanner` sits beside a :class:`~fusionopt.integrations.PlanReducer`
(either sync), real DDP (:class:`DDPJob`) or a simulated job (:class:`SimulatedJob`). After
each step it reads the job's own timestamps (no profiler; on a GPU, :class:`DDPJob`'s are
CUDA events) of the newest step whose messages have all ended (under layerwise sync, or on a
GPU, the step before may still be reducing): when each
message was packed (its last gradient ready, from the step's first gradient) and how long
its all-reduce held the channel. Every ``every`` steps it fits, over the last
``window`` steps (so a change of the link or of the compute replaces the old figures within
a window):

* **the collective's cost** ``c(S) = alpha + beta S``, least squares over every message's
  bytes and seconds in the window, whatever plan sent it (a message's seconds depend on its
  bytes, not on the plan). Where the window holds one size only (a plan of one message, or of
  equal ones), ``beta`` is the last one the window could identify and ``alpha`` is fitted
  around it, so that a fused plan still prices the plans it does not run;
* **the compute each message costs** (``message_compute``: the hook packing it and the
  communication thread taking a core from the backward, MODEL.md section 6): the slope of the
  last message's ready time against the messages before it, least squares over the window's
  steps, whatever plan sent them. A plan of ``m`` messages stretches the backward by
  ``(m - 1)`` of them, so two plans with other message counts identify it; until the window
  holds two, it is the last one identified (0 at first). Until it is first identified, a
  re-planning that does not switch, on a plan of ``m > 1`` messages, *probes* where the
  starting profile suggests the cost: each message's ready time runs later than the
  profile's backward says by a slope over the message's place in the channel (least
  squares), and ``m - 1`` times that slope is above ``min_gain`` of the step (a profile
  without backward times suggests nothing, and the planner then never probes). It then
  switches, once, to the exact DP's plan of at most ``m // 2`` messages
  (``probe=False``: never), so that the next window holds two message counts. An unknown
  cost per message can only favour fewer messages (a plan of one message does not pay it),
  so the probe goes that way, and the next re-planning judges both plans with the cost
  fitted;
* **the backward**: the median ready time of each message's last tensor in the ready order,
  less the compute of the messages before it; the tensors between two observed ones share
  the time between them in the proportions the starting profile gives (equally where it
  gives none). The first gradient's own backward,
  before any hook fires, is not observable and keeps the profile's value; under barrier sync
  it, the forward and the update shift every plan's ``T`` alike. Where the fit gives time to
  tensors that the profile's ready order reorders (tensors it has ready at one moment), the
  fitted profile takes the default ready order.

It then solves the fitted problem with the exact fusion DP (``method="dp"``, MODEL.md
section 7) and switches (:meth:`PlanReducer.switch`; under layerwise sync after applying the
step's updates with ``flush()``, so the step ends there) only when the model predicts the new
plan faster than the current one by more than ``min_gain`` of the step and by more than
``confidence`` times the measured spread of the communication's end from step to step: a
switch is never made on noise. Rank 0 fits and decides; its decision is broadcast over the
reducer's process group, so every rank switches at the same step to the same plan.

The fit and the solve take milliseconds every ``every`` steps; :attr:`OnlinePlanner.seconds`
says how long they took in all.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusionopt.integrations._emulated_link import device_future
from fusionopt.model._cost import AlphaBeta
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._profile import Profile
from fusionopt.model._simulator import simulate
from fusionopt.solvers import solve
from fusionopt.solvers.baselines._ddp import bucket_caps


@dataclass(frozen=True)
class Decision:
    """One re-planning: at ``step``, the fitted cost, the predicted ``T`` of the plan in use
    and of the optimum (seconds), the measured spread (seconds), whether it switched, the
    plan in use after it, and whether the switch was the probe (module docstring)."""

    step: int
    cost: AlphaBeta
    current: float
    best: float
    spread: float
    switched: bool
    plan: Plan
    probe: bool = False


class OnlinePlanner:
    """Re-plan a :class:`~fusionopt.integrations.PlanReducer`'s job from its own
    timings (module docstring). Make it on every rank (with several ranks it makes a process
    group of its own for its decisions) and call :meth:`after_step` after each step there.

    Parameters
    ----------
    reducer : PlanReducer or DDPJob or SimulatedJob
        The job: a :class:`~fusionopt.integrations.PlanReducer` (``sync="barrier"``),
        real DDP (:class:`DDPJob`: only plans whose buckets DDP can build are switched to), or
        a simulated one.
    every : int
        Steps between two re-plannings.
    window : int
        Steps the fit looks back over (the oldest are dropped, so drift is followed).
    min_gain : float
        The least predicted gain, a fraction of the step, that a switch needs.
    confidence : float
        A switch also needs a predicted gain above this many times the measured spread.
    method : str
        The exact method that solves the fitted problem.
    probe : bool
        Whether to probe a plan of fewer messages once, while the compute each message costs
        is not yet identified (module docstring).
    """

    def __init__(self, reducer: Any, *, every: int = 5, window: int = 10, min_gain: float = 0.01,
                 confidence: float = 2.0, method: str = "dp", probe: bool = True) -> None:
        check_planner_options(every, window, min_gain, confidence)
        if reducer.sync != "barrier" and not hasattr(reducer, "flush"):
            raise ValueError(f"the online planner switches plans between steps; a job under sync={reducer.sync!r} "
                             "has them only after flush(): use a PlanReducer, or sync='barrier'")
        self.reducer, self.every, self.window = reducer, every, window
        self.min_gain, self.confidence, self.method = float(min_gain), float(confidence), method
        if not isinstance(probe, bool):
            raise ValueError(f"probe must be True or False, got {probe!r}")
        self.probe = probe
        self._probed = False                              # the probe ran (or the cost was identified)
        self.prior: Profile = reducer.profile
        self.steps = 0
        self.seconds = 0.0                                # spent fitting, solving and deciding
        self.history: list[Decision] = []
        self._seen: deque[list[dict[str, float]]] = deque(maxlen=window)     # this plan's steps
        self._sent: deque[list[tuple[float, float]]] = deque(maxlen=window)   # (bytes, seconds), any plan
        self._beta: float | None = None                   # the last beta a window identified
        self._spans: deque[tuple[int, float]] = deque(maxlen=window)  # (messages, last ready), any plan
        self._message_compute = 0.0                       # the last one a window identified
        self._plan: Plan | None = None                    # the plan of the steps in _seen
        self._generation = 0                              # the reducer's last step read
        self._group = None
        if reducer.world > 1:                             # every rank makes its planner: a collective call
            import torch.distributed as dist

            self._group = dist.new_group(ranks=dist.get_process_group_ranks(reducer.group))

    def after_step(self) -> Decision | None:
        """Record the step just ended; every ``every`` steps, re-plan (a collective call:
        every rank must make it). Returns the decision made, or None."""
        started = time.perf_counter()
        times = self._completed()
        plan = self.reducer.plan
        if plan != self._plan:                            # another plan (DDP rebuilds its buckets after a step)
            self._seen.clear()
            self._plan = plan
        if times is not None:
            self._seen.append(times)
            self._sent.append([(m["bytes"], m["end"] - m["start"]) for m in times])
            self._spans.append((len(times), max(m["ready"] for m in times)))
        self.steps += 1
        decision = None
        if self.steps % self.every == 0 and len(self._seen) >= 2:
            mine = self._decide() if self.reducer.rank == 0 else None
            decision = self._share(mine)
            if decision.switched:
                if self.reducer.sync == "layerwise":
                    self.reducer.flush()                  # the step's updates, now: the step ends here
                self.reducer.switch(decision.plan)
            self.history.append(decision)
        self.seconds += time.perf_counter() - started
        return decision

    def _completed(self) -> list[dict[str, float]] | None:
        """The newest step whose messages have all ended and that the planner has not seen
        (a reducer under layerwise sync may still be reducing the step just run), or None."""
        completed = getattr(self.reducer, "completed_times", None)
        if completed is None:
            return self.reducer.message_times()
        record = completed()
        if record is None or record[0] == self._generation or record[1] != self.reducer.plan:
            return None                                   # nothing new, or a step of the plan before a switch
        self._generation = record[0]
        return record[2]

    # ------------------------------------------------------------------ the fit
    def fitted_problem(self) -> tuple[Problem, float]:
        """The problem fitted on the steps seen (module docstring) and the measured spread
        of the communication's end from step to step (seconds)."""
        steps = list(self._seen)
        sent = np.array([pair for step in self._sent for pair in step], dtype=np.float64).reshape(-1, 2)
        cost = _affine(sent[:, 0], sent[:, 1], self._beta)
        if np.ptp(sent[:, 0]) > 0:
            self._beta = cost.beta
        spans = np.array(self._spans, dtype=np.float64).reshape(-1, 2)
        if np.ptp(spans[:, 0]) > 0:
            self._message_compute = _slope(spans[:, 0] - 1, spans[:, 1])
            self._probed = True                           # identified: nothing left to probe
        plan = self.reducer.plan
        profile = self.prior
        ready = np.array([[m["ready"] for m in step] for step in steps])
        before = np.arange(ready.shape[1]) * self._message_compute          # the messages' compute before each
        backward = _backward(profile, plan, np.median(ready, axis=0) - before)
        try:
            fitted = profile.with_backward(backward)
        except ValueError:                                # the fit parts tensors the profile's ready order ties
            fitted = profile.with_backward(backward, keep_order=False)
        ends = [max(m["end"] for m in step) for step in steps]
        spread = statistics.stdev(ends) if len(ends) > 1 else 0.0
        return Problem(fitted, cost, sync=self.reducer.sync, message_compute=self._message_compute), spread

    def _decide(self) -> Decision:
        problem, spread = self.fitted_problem()
        current = simulate(problem, self.reducer.plan).iteration_time
        best = solve(problem, self.method)
        realise = getattr(self.reducer, "realise", None)
        runnable = best.plan if realise is None else realise(best.plan)
        gain = current - best.iteration_time
        switched = runnable is not None and gain > self.min_gain * current and gain > self.confidence * spread
        messages = self.reducer.plan.num_messages
        if not switched and self.probe and not self._probed and messages > 1 \
                and (messages - 1) * self._suspected_message_compute() > self.min_gain * current:
            self._probed = True
            probe = solve(problem, "dp", max_messages=max(1, messages // 2)).plan
            if (probe if realise is None else realise(probe)) is not None:
                return Decision(self.steps, problem.cost, current, best.iteration_time, spread, True, probe, True)
        return Decision(self.steps, problem.cost, current, best.iteration_time, spread, switched,
                        best.plan if switched else self.reducer.plan)

    def _suspected_message_compute(self) -> float:
        """From the plan in use alone: the least-squares slope, over each message's place in
        the channel, of its median ready time less the starting profile's (seconds a message,
        0 where it falls, and where the profile has no backward time); module docstring."""
        ready = np.median(np.array([[m["ready"] for m in step] for step in self._seen]), axis=0)
        profile, plan = self.prior, self.reducer.plan
        if len(ready) < 2 or not profile.backward.any():
            return 0.0
        order = profile.backward_order
        spans = profile.ready_times[order] - profile.ready_times[order[0]]      # from the first gradient
        slope = np.polyfit(np.arange(len(ready), dtype=np.float64), ready - spans[_last_positions(profile, plan)], 1)[0]
        return max(0.0, float(slope))

    def _share(self, mine: Decision | None) -> Decision:
        """Rank 0's decision on every rank, over the planner's own process group: the job's
        may still be reducing the step (layerwise sync), and two threads' collectives on one
        group could meet in another order on each rank."""
        reducer = self.reducer
        if reducer.world == 1:
            assert mine is not None
            return mine
        import torch.distributed as dist

        box = [mine]
        dist.broadcast_object_list(box, src=dist.get_global_rank(self._group, 0), group=self._group)
        return box[0]


def check_planner_options(every: Any, window: Any, min_gain: Any, confidence: Any) -> None:
    """Refuse, in one line, a planner's period, window, least gain or confidence out of range."""
    for name, value, least in (("every", every, 1), ("window", window, 2)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be a whole number of steps >= {least}, got {value!r}")
    if isinstance(min_gain, bool) or not isinstance(min_gain, (int, float)) or not 0 <= min_gain < 1:
        raise ValueError(f"min_gain must be a fraction in [0, 1), got {min_gain!r}")
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not confidence >= 0:
        raise ValueError(f"confidence must be a number >= 0, got {confidence!r}")


class Noise:
    """Seeded relative deviations for a job the simulator plays: ``noise`` a relative spread
    in ``[0, 1)`` (normal draws of that spread), or a sequence of relative deviations (a
    measured job's steps over their median, less 1), drawn from with replacement."""

    def __init__(self, noise: Any = 0.0, seed: int = 0) -> None:
        self.spread, self.deviations = 0.0, None
        if isinstance(noise, (list, tuple, np.ndarray)):
            deviations = np.asarray(noise, dtype=np.float64).ravel()
            if deviations.size == 0 or not np.all(np.isfinite(deviations)) or deviations.min() <= -1:
                raise ValueError("noise as deviations must be finite relative deviations above -1, at least one")
            self.deviations = deviations
        elif isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0 <= noise < 1:
            raise ValueError(f"noise must be a relative spread in [0, 1) or a sequence of relative deviations, "
                             f"got {noise!r}")
        else:
            self.spread = float(noise)
        self.random = np.random.default_rng(seed)

    def draw(self, count: int) -> np.ndarray:
        """``count`` relative deviations."""
        if self.deviations is None:
            return self.spread * self.random.standard_normal(count)
        return self.random.choice(self.deviations, size=count)


def _check_plan(plan: Any, profile: Profile) -> None:
    """``plan``, a fusion :class:`Plan` of ``profile``'s tensors; one line otherwise."""
    if not isinstance(plan, Plan):
        raise ValueError(f"plan must be a Plan, got {type(plan).__name__}")
    plan.validate(profile)


class SimulatedJob:
    """A job the simulator plays, with the face of a
    :class:`~fusionopt.integrations.PlanReducer` (``sync``, ``rank``, ``world``,
    ``profile``, ``plan``, :meth:`message_times`, :meth:`switch`): each step is ``problem``'s
    timeline of the plan in use, every message's duration stretched by a seeded normal draw
    of relative spread ``noise`` (or, given a sequence of relative deviations, such as a
    measured job's steps over their median less 1, by draws from it with replacement), its
    times from the step's first gradient as the reducer records them. ``profile`` is what the
    planner starts from: the true one's sizes and forward with no backward time (set
    ``prior`` to give another). Assign ``problem`` to
    change the link or the compute mid-run; ``step_time`` is the last step's ``T`` with the
    same noise, what a tuner that times whole steps measures. For studies and tests of the
    planner at any scale, without a process group."""

    sync, rank, world = "barrier", 0, 1

    def __init__(self, problem: Problem, plan: Plan, *, noise: Any = 0.0, seed: int = 0,
                 prior: Profile | None = None) -> None:
        self.noise = Noise(noise, seed)
        if not isinstance(problem, Problem):
            raise ValueError(f"problem must be a Problem, got {type(problem).__name__}")
        _check_plan(plan, problem.profile)
        if prior is not None and (not isinstance(prior, Profile) or prior.names != problem.profile.names
                                  or prior.sizes.tolist() != problem.profile.sizes.tolist()):
            raise ValueError("prior must be a Profile of the problem's tensors (the same names and sizes), got "
                             f"{prior!r}")
        self.problem, self.plan = problem, plan
        true = problem.profile
        self.profile = prior if prior is not None else dataclasses.replace(true, backward=np.zeros(true.n))
        self.switches = 0
        self.step_time = math.nan

    def message_times(self) -> list[dict[str, float]]:
        """This step's messages in plan order: ``ready``, ``start`` and ``end`` (seconds from
        the step's first gradient) and ``bytes``."""
        t = simulate(self.problem, self.plan)
        profile = self.problem.profile
        origin = float(profile.ready_times[profile.backward_order[0]])
        stretch = 1.0 + self.noise.draw(len(t.message_end))
        self.step_time = t.iteration_time * (1.0 + float(self.noise.draw(1)[0]))
        start = t.message_start - origin
        end = start + (t.message_end - t.message_start) * stretch
        return [{"ready": float(r - origin), "start": float(a), "end": float(b), "bytes": int(size)}
                for r, a, b, size in zip(t.message_ready, start, end, t.message_bytes)]

    def switch(self, plan: Plan) -> None:
        """Run ``plan`` from the next step on."""
        _check_plan(plan, self.problem.profile)
        self.plan = plan
        self.switches += 1


class DDPJob:
    """Real ``DistributedDataParallel`` with the face the planner reads
    (:class:`OnlinePlanner`): call it as the model; :meth:`switch` re-wraps the module between
    steps with the ``bucket_cap_mb_list`` that makes DDP build the plan's buckets
    (:func:`~fusionopt.advice._allreduce.plan_bucket_caps`) and ``init_sync=False``, so no
    parameter is broadcast again; the optimiser, which holds the module's parameters, is
    unchanged.

    A comm hook times every bucket: when DDP hands it over (``ready``), when the link takes it
    (``start``) and when its all-reduce has ended and the link delivered it (``end``),
    seconds from the step's first bucket; ``plan`` is the buckets DDP ran last, as a plan.
    The all-reduce averages as DDP's own (each gradient times ``1 / world size`` before the
    sum). ``link`` (an :class:`~fusionopt.integrations.EmulatedLink`) holds each
    bucket for a slower network's time; without one a link of no cost only keeps the order.

    On CUDA the link holds each bucket on a stream of its own (the emulated link's module
    docstring) and the times are CUDA events: ``ready`` recorded on the compute stream when
    DDP hands the bucket over, ``start`` and ``end`` on the link's stream around its hold; no
    host clock, no profiler. A step's times are read once its last hold has ended on the
    device, without waiting for it: :meth:`completed_times` gives the newest step that has
    (the planner reads it so; :meth:`message_times` waits for the last step instead).

    Checked on torch 2.13.0 (CPU, gloo): ``DistributedDataParallel(..., bucket_cap_mb_list=,
    init_sync=)`` and the comm hook protocol; a job that switches keeps real DDP's
    parameters (``tests/integrations/test_online_gloo.py``). The CUDA path follows torch
    2.13's code and has not yet run on a GPU here.
    """

    sync = "barrier"

    def __init__(self, module: Any, profile: Profile, *, link: Any = None, **ddp_options: Any) -> None:
        from fusionopt.integrations._torch_import import require_torch
        from fusionopt.integrations._emulated_link import EmulatedLink

        torch = require_torch()
        import torch.distributed as dist

        if "bucket_cap_mb_list" in ddp_options and "bucket_cap_mb" in ddp_options:
            raise ValueError("give bucket_cap_mb or bucket_cap_mb_list, not both")
        from fusionopt.integrations._plan_reducer import match_parameters

        if not isinstance(profile, Profile):
            raise ValueError(f"profile must be a fusionopt Profile, got {type(profile).__name__}")
        if link is not None and not isinstance(link, EmulatedLink):
            raise ValueError(f"link must be an EmulatedLink (fusionopt.integrations.EmulatedLink(cost) holds a cost), "
                             f"got {type(link).__name__}")
        bucket_caps(ddp_options.get("bucket_cap_mb"), ddp_options.get("bucket_cap_mb_list"))   # one line if bad
        match_parameters(module, profile, "the profile")  # the profile's tensors are the module's, by name and size
        self._torch, self._dist = torch, dist
        self.module, self.profile = module, profile
        self.link = link if link is not None else EmulatedLink(lambda nbytes: 0.0)
        self.group = ddp_options.get("process_group") or dist.group.WORLD
        self.rank, self.world = dist.get_rank(self.group), dist.get_world_size(self.group)
        self.options = dict(ddp_options)
        self.names = {p: n for n, p in module.named_parameters()}
        self.index = {n: i for i, n in enumerate(profile.names)}
        self.switches = 0
        self._buckets: dict[int, tuple[Any, Any, Any, int, list[int]]] = {}
        self._last: list[tuple[Any, Any, Any, int, list[int]]] = []
        self._steps = 0
        self._pending: deque = deque(maxlen=8)          # CUDA: steps whose holds may still run on the device
        self._completed: tuple[int, Plan, list[dict[str, float]]] | None = None
        if any(p.is_cuda for p in module.parameters()):
            self.completed_times = self._completed_on_device
        self.ddp = self._wrap(self.options)

    def _wrap(self, options: dict) -> Any:
        ddp = self._torch.nn.parallel.DistributedDataParallel(self.module, **options)
        ddp.register_comm_hook(self.group, self._hook)
        return ddp

    def _hook(self, state, bucket):                       # DDP checks the annotations: none, or its own
        dist, link = self._dist, self.link
        buffer = bucket.buffer()
        nbytes = int(buffer.numel()) * int(buffer.element_size())
        tensors = [self.index[self.names[p]] for p in bucket.parameters()]
        index = bucket.index()
        if buffer.is_cuda:
            torch = self._torch
            ready = torch.cuda.Event(enable_timing=True)
            ready.record()                                # the bucket's gradients, on the compute stream
            buffer.mul_(1.0 / self.world)
            work = dist.all_reduce(buffer, group=state, async_op=True)
            future, held = device_future(torch, link, buffer, nbytes, work, timed=True)
            self._buckets[index] = (ready, held.start, held.end, nbytes, tensors)
            return future
        until = link.reserve(nbytes)
        hold = link.log[-1]
        buffer.mul_(1.0 / self.world)
        future = dist.all_reduce(buffer, group=state, async_op=True).get_future()

        def held(done: Any) -> Any:
            reduced = done.value()[0]
            link.wait_until(until)
            self._buckets[index] = (hold.posted, hold.start, link.clock(), nbytes, tensors)
            return reduced
        return future.then(held)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._settle()                                    # the last step's buckets, complete by now
        return self.ddp(*args, **kwargs)

    def message_times(self) -> list[dict[str, float]]:
        """The last step's buckets in DDP's order: ``ready``, ``start`` and ``end`` (seconds
        from the step's first bucket) and ``bytes``. On CUDA it waits for the step's last hold."""
        return _bucket_times(self._current(), wait=True)

    def _completed_on_device(self) -> tuple[int, Plan, list[dict[str, float]]] | None:
        """On CUDA, the planner's :meth:`completed_times`: the newest step whose holds have all
        ended on the device (asked without waiting), its number (from 1), the plan it ran and
        its buckets' times; None before the first."""
        self._settle()
        while self._pending:
            number, plan, last = self._pending[0]
            times = _bucket_times(last, wait=False)
            if times is None:
                break
            self._pending.popleft()
            self._completed = (number, plan, times)
        return self._completed

    @property
    def plan(self) -> Plan:
        """The buckets DDP ran last, as a plan (tensors in the order DDP packed them)."""
        return Plan.from_groups(self.profile, [tensors for *_, tensors in self._current()])

    def _settle(self) -> None:
        """Keep the buckets timed since the last call as the last step's, in DDP's order."""
        if self._buckets:
            self._last = [self._buckets[k] for k in sorted(self._buckets)]
            self._buckets = {}
            self._steps += 1
            if not isinstance(self._last[0][0], float):   # CUDA events: read once they have happened
                self._pending.append((self._steps, Plan.from_groups(self.profile, [b[4] for b in self._last]),
                                      self._last))

    def _current(self) -> list[tuple[float, float, float, int, list[int]]]:
        self._settle()
        if not self._last:
            raise ValueError("no step has run yet: DDP's buckets are timed as it reduces them")
        return self._last

    def realise(self, plan: Plan) -> Plan | None:
        """``plan`` if DDP can build its buckets (a ``bucket_cap_mb_list`` makes them), else None."""
        from fusionopt.advice._allreduce import plan_bucket_caps

        return plan if plan_bucket_caps(self.profile, plan) is not None else None

    def switch(self, plan: Plan) -> None:
        """Reduce by ``plan`` from the next step on: re-wrap the module in DDP with the list
        of caps that builds it, without a parameter broadcast. Between steps, on every rank."""
        from fusionopt.advice._allreduce import plan_bucket_caps

        caps = plan_bucket_caps(self.profile, plan)
        if caps is None:
            raise ValueError("DDP cannot build this plan's buckets (a partition plan, messages out of DDP's order, "
                             "or dtypes DDP keeps apart): no bucket_cap_mb_list makes them")
        self._current()
        options = {k: v for k, v in self.options.items() if k not in ("bucket_cap_mb", "bucket_cap_mb_list")}
        self.ddp = None                                   # DDP's reducer leaves the parameters' hooks with it
        self.ddp = self._wrap({**options, "bucket_cap_mb_list": list(caps), "init_sync": False})
        self.switches += 1


def _bucket_times(last: list[tuple[Any, Any, Any, int, list[int]]], *, wait: bool) -> list[dict[str, float]] | None:
    """A step's buckets ``(ready, start, end, bytes, tensors)`` as :meth:`DDPJob.message_times`
    gives them, seconds from the first ready. Host clock times as they are; CUDA events
    through their elapsed times, once the last bucket's end has happened (``wait``: waited
    for; else None where it has not)."""
    if isinstance(last[0][0], float):
        origin = min(b[0] for b in last)
        return [{"ready": posted - origin, "start": start - origin, "end": end - origin, "bytes": nbytes}
                for posted, start, end, nbytes, _ in last]
    final = last[-1][2]                                   # one channel, first in first out: the last ends last
    if wait:
        final.synchronize()
    elif not final.query():
        return None
    first = last[0][0]
    seconds = [[first.elapsed_time(event) / 1e3 for event in b[:3]] for b in last]
    origin = min(ready for ready, _, _ in seconds)
    return [{"ready": r - origin, "start": s - origin, "end": e - origin, "bytes": b[3]}
            for (r, s, e), b in zip(seconds, last)]


def _affine(sizes: np.ndarray, seconds: np.ndarray, beta: float | None) -> AlphaBeta:
    """``alpha + beta S`` fitted to messages of ``sizes`` bytes taking ``seconds``, least
    squares, both kept >= 0; with one size only, ``alpha`` around the given ``beta`` (0 when
    None)."""
    if sizes.size == 0:
        raise ValueError("no message was timed: run a step with the reducer first")
    if np.ptp(sizes) == 0:
        held = beta or 0.0
        return AlphaBeta(max(float(np.mean(seconds - held * sizes)), 0.0), held)
    beta, alpha = np.polyfit(sizes, seconds, 1)
    if alpha < 0:
        return AlphaBeta(0.0, max(float(np.dot(sizes, seconds) / np.dot(sizes, sizes)), 0.0))
    if beta < 0:
        return AlphaBeta(max(float(np.mean(seconds)), 0.0), 0.0)
    return AlphaBeta(float(alpha), float(beta))


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    """The least-squares slope of ``y`` on ``x`` where it is above twice its standard error
    and a nanosecond, else 0 (a cost per message the window cannot tell from noise)."""
    slope, intercept = np.polyfit(x, y, 1)
    residual = y - (slope * x + intercept)
    spread = float(((x - x.mean()) ** 2).sum())
    error = math.sqrt(float(residual @ residual) / max(len(x) - 2, 1) / spread) if len(x) > 2 else 0.0
    return float(slope) if slope > max(2.0 * error, 1e-9) else 0.0


def _last_positions(profile: Profile, plan: Plan) -> np.ndarray:
    """Per message of ``plan``, the ready-order position of its last tensor to be ready."""
    position = np.empty(profile.n, dtype=np.int64)
    position[profile.backward_order] = np.arange(profile.n)
    return np.maximum.reduceat(position[plan.tensor], plan.starts[:-1])


def _backward(profile: Profile, plan: Plan, ready: np.ndarray) -> np.ndarray:
    """Per tensor, its backward seconds from each message's ready time (``ready[k]``, seconds
    from the step's first gradient; module docstring)."""
    order = profile.backward_order
    n = profile.n
    last = _last_positions(profile, plan)
    observed: dict[int, float] = {}
    for p, r in zip(last.tolist(), ready.tolist()):
        observed[p] = min(observed.get(p, r), r)
    prior = profile.backward[order]
    fitted = prior.astype(np.float64).copy()
    before, at = 0, 0.0                                   # position 0's hook is the step's origin
    for p in sorted(observed):
        if p == 0:
            continue
        span = max(observed[p] - at, 0.0)
        share = prior[before + 1: p + 1]
        weights = share / share.sum() if share.sum() > 0 else np.full(p - before, 1.0 / (p - before))
        fitted[before + 1: p + 1] = span * weights
        before, at = p, max(observed[p], at)
    out = np.empty(n)
    out[order] = fitted
    return out


__all__ = ["DDPJob", "Decision", "Noise", "OnlinePlanner", "SimulatedJob"]
