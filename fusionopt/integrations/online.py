"""Online re-planning: a job that finds its own optimal plan while it trains, from its own
timings, and follows the network or the compute when they change.

:class:`OnlinePlanner` sits beside a :class:`~fusionopt.integrations.plan_reducer.PlanReducer`
(barrier sync). After each step it reads the reducer's own timestamps (no profiler): when
each message was packed (its last gradient ready, from the step's first gradient) and how
long its all-reduce held the channel. Every ``every`` steps it fits, over the last
``window`` steps (so a change of the link or of the compute replaces the old figures within
a window):

* **the collective's cost** ``c(S) = alpha + beta S``, least squares over every message's
  bytes and seconds in the window, whatever plan sent it (a message's seconds depend on its
  bytes, not on the plan). Where the window holds one size only (a plan of one message, or of
  equal ones), ``beta`` is the last one the window could identify and ``alpha`` is fitted
  around it, so that a fused plan still prices the plans it does not run;
* **the backward**: the median ready time of each message's last tensor in the ready order;
  the tensors between two observed ones share the time between them in the proportions the
  starting profile gives (equally where it gives none). The first gradient's own backward,
  before any hook fires, is not observable and keeps the profile's value; under barrier sync
  it, the forward and the update shift every plan's ``T`` alike. Where the fit gives time to
  tensors that the profile's ready order reorders (tensors it has ready at one moment), the
  fitted profile takes the default ready order.

It then solves the fitted problem with the exact fusion DP (``method="dp"``, MODEL.md
section 7) and switches (:meth:`PlanReducer.switch`) only when the model predicts the new
plan faster than the current one by more than ``min_gain`` of the step and by more than
``confidence`` times the measured spread of the communication's end from step to step: a
switch is never made on noise. Rank 0 fits and decides; its decision is broadcast over the
reducer's process group, so every rank switches at the same step to the same plan.

The fit and the solve take milliseconds every ``every`` steps; :attr:`OnlinePlanner.seconds`
says how long they took in all.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusionopt.model.cost import AlphaBeta
from fusionopt.model.plan import Plan
from fusionopt.model.problem import Problem
from fusionopt.model.profile import Profile
from fusionopt.model.simulator import simulate
from fusionopt.solvers import solve


@dataclass(frozen=True)
class Decision:
    """One re-planning: at ``step``, the fitted cost, the predicted ``T`` of the plan in use
    and of the optimum (seconds), the measured spread (seconds), and whether it switched."""

    step: int
    cost: AlphaBeta
    current: float
    best: float
    spread: float
    switched: bool
    plan: Plan


class OnlinePlanner:
    """Re-plan a :class:`~fusionopt.integrations.plan_reducer.PlanReducer`'s job from its own
    timings (module docstring). Call :meth:`after_step` after each step, on every rank.

    Parameters
    ----------
    reducer : PlanReducer
        The job's reducer, ``sync="barrier"``.
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
    """

    def __init__(self, reducer: Any, *, every: int = 5, window: int = 10, min_gain: float = 0.01,
                 confidence: float = 2.0, method: str = "dp") -> None:
        for name, value, least in (("every", every, 1), ("window", window, 2)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be a whole number of steps >= {least}, got {value!r}")
        if isinstance(min_gain, bool) or not isinstance(min_gain, (int, float)) or not 0 <= min_gain < 1:
            raise ValueError(f"min_gain must be a fraction in [0, 1), got {min_gain!r}")
        if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not confidence >= 0:
            raise ValueError(f"confidence must be a number >= 0, got {confidence!r}")
        if reducer.sync != "barrier":
            raise ValueError("the online planner switches plans between steps, which sync='layerwise' has only "
                             "after flush(): use it with sync='barrier'")
        self.reducer, self.every, self.window = reducer, every, window
        self.min_gain, self.confidence, self.method = float(min_gain), float(confidence), method
        self.prior: Profile = reducer.profile
        self.steps = 0
        self.seconds = 0.0                                # spent fitting, solving and deciding
        self.history: list[Decision] = []
        self._seen: deque[list[dict[str, float]]] = deque(maxlen=window)     # this plan's steps
        self._sent: deque[list[tuple[float, float]]] = deque(maxlen=window)   # (bytes, seconds), any plan
        self._beta: float | None = None                   # the last beta a window identified

    def after_step(self) -> Decision | None:
        """Record the step just ended; every ``every`` steps, re-plan (a collective call:
        every rank must make it). Returns the decision made, or None."""
        started = time.perf_counter()
        times = self.reducer.message_times()
        self._seen.append(times)
        self._sent.append([(m["bytes"], m["end"] - m["start"]) for m in times])
        self.steps += 1
        decision = None
        if self.steps % self.every == 0 and len(self._seen) >= 2:
            mine = self._decide() if self.reducer.rank == 0 else None
            decision = self._share(mine)
            if decision.switched:
                self.reducer.switch(decision.plan)
                self._seen.clear()                        # the new plan's messages are other messages
            self.history.append(decision)
        self.seconds += time.perf_counter() - started
        return decision

    # ------------------------------------------------------------------ the fit
    def fitted_problem(self) -> tuple[Problem, float]:
        """The problem fitted on the steps seen (module docstring) and the measured spread
        of the communication's end from step to step (seconds)."""
        steps = list(self._seen)
        sent = np.array([pair for step in self._sent for pair in step], dtype=np.float64).reshape(-1, 2)
        cost = _affine(sent[:, 0], sent[:, 1], self._beta)
        if np.ptp(sent[:, 0]) > 0:
            self._beta = cost.beta
        plan = self.reducer.plan
        profile = self.prior
        ready = np.array([[m["ready"] for m in step] for step in steps])
        backward = _backward(profile, plan, np.median(ready, axis=0))
        try:
            fitted = dataclasses.replace(profile, backward=backward)
        except ValueError:                                # the fit parts tensors the profile's ready order ties
            fitted = dataclasses.replace(profile, backward=backward, ready_order=None)
        ends = [max(m["end"] for m in step) for step in steps]
        spread = statistics.stdev(ends) if len(ends) > 1 else 0.0
        return Problem(fitted, cost, sync="barrier"), spread

    def _decide(self) -> Decision:
        problem, spread = self.fitted_problem()
        current = simulate(problem, self.reducer.plan).iteration_time
        best = solve(problem, self.method)
        gain = current - best.iteration_time
        switched = gain > self.min_gain * current and gain > self.confidence * spread
        return Decision(self.steps, problem.cost, current, best.iteration_time, spread, switched,
                        best.plan if switched else self.reducer.plan)

    def _share(self, mine: Decision | None) -> Decision:
        """Rank 0's decision on every rank (over the reducer's process group)."""
        reducer = self.reducer
        if reducer.world == 1:
            assert mine is not None
            return mine
        import torch.distributed as dist

        box = [mine]
        dist.broadcast_object_list(box, src=dist.get_global_rank(reducer.group, 0), group=reducer.group)
        return box[0]


class SimulatedJob:
    """A job the simulator plays, with the face of a
    :class:`~fusionopt.integrations.plan_reducer.PlanReducer` (``sync``, ``rank``, ``world``,
    ``profile``, ``plan``, :meth:`message_times`, :meth:`switch`): each step is ``problem``'s
    timeline of the plan in use, every message's duration stretched by a seeded normal draw
    of relative spread ``noise``, its times from the step's first gradient as the reducer
    records them. ``profile`` is what the planner starts from: the true one's sizes and
    forward with no backward time (set ``prior`` to give another). Assign ``problem`` to
    change the link or the compute mid-run. For studies and tests of the planner at any
    scale, without a process group."""

    sync, rank, world = "barrier", 0, 1

    def __init__(self, problem: Problem, plan: Plan, *, noise: float = 0.0, seed: int = 0,
                 prior: Profile | None = None) -> None:
        if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0 <= noise < 1:
            raise ValueError(f"noise must be a relative spread in [0, 1), got {noise!r}")
        self.problem, self.plan, self.noise = problem, plan, float(noise)
        true = problem.profile
        self.profile = prior if prior is not None else dataclasses.replace(true, backward=np.zeros(true.n))
        self.random = np.random.default_rng(seed)
        self.switches = 0

    def message_times(self) -> list[dict[str, float]]:
        """This step's messages in plan order: ``ready``, ``start`` and ``end`` (seconds from
        the step's first gradient) and ``bytes``."""
        t = simulate(self.problem, self.plan)
        profile = self.problem.profile
        origin = float(profile.ready_times[profile.backward_order[0]])
        stretch = 1.0 + self.noise * self.random.standard_normal(len(t.message_end))
        start = t.message_start - origin
        end = start + (t.message_end - t.message_start) * stretch
        return [{"ready": float(r - origin), "start": float(a), "end": float(b), "bytes": int(size)}
                for r, a, b, size in zip(t.message_ready, start, end, t.message_bytes)]

    def switch(self, plan: Plan) -> None:
        """Run ``plan`` from the next step on."""
        self.plan = plan
        self.switches += 1


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


def _backward(profile: Profile, plan: Plan, ready: np.ndarray) -> np.ndarray:
    """Per tensor, its backward seconds from each message's ready time (``ready[k]``, seconds
    from the step's first gradient; module docstring)."""
    order = profile.backward_order
    n = profile.n
    position = np.empty(n, dtype=np.int64)
    position[order] = np.arange(n)
    last = np.maximum.reduceat(position[plan.tensor], plan.starts[:-1])
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


__all__ = ["Decision", "OnlinePlanner", "SimulatedJob"]
