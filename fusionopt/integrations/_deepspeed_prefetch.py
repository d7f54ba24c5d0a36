"""ZeRO-3's adaptive prefetch bucket (DeepSpeed PR #8431) and a ZeRO-3 job the simulator plays.

:class:`AdaptivePrefetch` is the controller PR #8431 adds to DeepSpeed's
``PartitionedParameterCoordinator`` (opt-in, ``stage3_adaptive_prefetch_bucket_size``). It
is reconstructed from the PR's description (head ``481c21a7``) and from the unit tests of
the follow-up commit ``6e70233`` posted in its thread; the PR is not merged, and its code
was not available to read. What those say:

* each parameter fetch of a module's hook (``_fetch_sub_module_impl``) is timed: the
  **wait**, from the hook's call to the module's parameters being available (blocked on
  in-flight all-gathers), and the **interval** since the previous fetch ended (compute and
  wait). A fetch with no previous one is not timed;
* forward and backward fetches keep separate exponential moving averages, ``alpha = 0.1``,
  of the wait and of the interval (started at the first sample); the stall ratio is the
  larger of the two passes' ``wait / interval``, so backward stalls are not diluted by the
  forward's (the follow-up's test);
* every 10 steps, at the iteration boundary (``reset_step``): a ratio above 0.15 grows the
  bucket by 25%, one below 0.05 shrinks it by 10%, anything between keeps it; the bucket is
  an integer (elements) clamped to ``[minimum, maximum]``, the maximum capped by
  ``stage3_max_live_parameters``, and a bucket of 0 that grows becomes 1. An initial bucket
  outside the bounds is clamped at once. Ranks agree on one decision.

Reconstructed where they are silent: the fetches of the step just before each decision are
the ones sampled (the follow-up samples on flagged steps only), a step's first fetch is
untimed (no previous fetch in that step), and with one rank the agreement is moot. The
bounds default to the follow-up tests' coordinator (1e7 and 5e8 elements).

:class:`SimulatedZero3Job` plays ZeRO-3 with its defaults
(:func:`~fusionopt.solvers.baselines.zero3_plan`) on a fully sharded problem: each
step the plan of the bucket in use, simulated, and each module's fetch timed on the model's
compute stream (:func:`fetch_events`).

Examples
--------
The follow-up's own cases: a stall ratio of 0.3 for ten steps grows 5e7 to 6.25e7, 0.01
shrinks it to 4.5e7, 0.09 keeps it.

>>> for ratio in (0.3, 0.01, 0.09):
...     c = AdaptivePrefetch(50_000_000)
...     for _ in range(10):
...         bucket = c.end_step([(0.0, 0.01 * (1 - ratio), 0.01, True)] if c.sampling else [])
...     print(bucket)
62500000
45000000
50000000
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, Sequence

import numpy as np

from fusionopt.integrations._online import Noise
from fusionopt.model import Problem, compute_pieces, simulate
from fusionopt.model._names import module_of
from fusionopt.solvers.baselines._zero3 import MAX_LIVE_PARAMETERS, PREFETCH_BUCKET_SIZE, zero3_plan

PERIOD = 10           # steps between decisions
ALPHA = 0.1           # the moving averages' weight of a new sample
GROW, SHRINK = 1.25, 0.9
HIGH, LOW = 0.15, 0.05
MINIMUM, MAXIMUM = 10_000_000, 500_000_000

class Fetch(NamedTuple):
    """One timed fetch, seconds: the previous fetch's end, the hook's call, the parameters
    available, and the pass (True: forward)."""

    previous_end: float
    start: float
    end: float
    forward: bool


class AdaptivePrefetch:
    """PR #8431's controller of ZeRO-3's prefetch bucket (module docstring), from
    ``bucket`` elements; :meth:`end_step` at every iteration boundary, with the step's timed
    fetches when :attr:`sampling` was true for it."""

    def __init__(self, bucket: int = PREFETCH_BUCKET_SIZE, *, minimum: int = MINIMUM, maximum: int = MAXIMUM,
                 max_live_parameters: int = MAX_LIVE_PARAMETERS) -> None:
        for label, value in (("bucket", bucket), ("minimum", minimum), ("maximum", maximum),
                             ("max_live_parameters", max_live_parameters)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"{label} must be a whole number of elements >= 0, got {value!r}")
        if minimum > maximum:
            raise ValueError(f"minimum ({minimum}) must be at most maximum ({maximum})")
        self.maximum = min(int(maximum), int(max_live_parameters))
        self.minimum = min(int(minimum), self.maximum)
        self.bucket = self._clamp(int(bucket))
        self.steps = 0
        self.wait: dict[bool, float] = {}           # per pass (forward True): the moving averages
        self.interval: dict[bool, float] = {}
        self.history: list[int] = [self.bucket]     # the bucket in use at each step

    @property
    def sampling(self) -> bool:
        """Whether the coming step's fetches are sampled (the last step before a decision)."""
        return self.steps % PERIOD == PERIOD - 1

    @property
    def ratio(self) -> float:
        """The stall ratio: the larger pass's ``wait / interval`` (NaN before any sample)."""
        ratios = [self.wait[p] / self.interval[p] for p in self.wait if self.interval[p] > 0]
        return max(ratios, default=math.nan)

    def end_step(self, fetches: Sequence[Fetch] = ()) -> int:
        """The iteration boundary: fold in the step's ``fetches`` if it was sampled, decide
        every :data:`PERIOD` steps; the bucket for the next step."""
        if self.sampling:
            for previous_end, start, end, forward in fetches:
                for averages, sample in ((self.wait, end - start), (self.interval, end - previous_end)):
                    averages[forward] = sample if forward not in averages else \
                        (1 - ALPHA) * averages[forward] + ALPHA * sample
        self.steps += 1
        if self.steps % PERIOD == 0 and not math.isnan(self.ratio):
            if self.ratio > HIGH:
                self.bucket = self._clamp(max(int(self.bucket * GROW), 1))
            elif self.ratio < LOW:
                self.bucket = self._clamp(int(self.bucket * SHRINK))
        self.history.append(self.bucket)
        return self.bucket

    def _clamp(self, bucket: int) -> int:
        return min(max(bucket, self.minimum), self.maximum)


def fetch_events(problem: Problem, plan: Any) -> list[Fetch]:
    """The timed fetches of one step of ``plan`` on a fully sharded ``problem``, seconds from
    the step's start: one per module per pass, at the first of its tensors on the model's
    compute stream (:func:`~fusionopt.model.compute_pieces`): the hook is called when the
    stream reaches the module (the previous task's end) and returns when its compute starts.
    The step's first fetch is not timed (module docstring)."""
    names = problem.profile.names
    events: list[Fetch] = []
    previous_end, last_module, last_task_end = None, None, 0.0
    for piece in compute_pieces(problem, plan):
        if piece.kind not in ("forward", "backward"):
            last_task_end = piece.end
            continue
        module = (piece.kind, module_of(names[piece.tensor]))
        if module != last_module:
            if previous_end is not None:
                events.append(Fetch(previous_end, last_task_end, piece.start, piece.kind == "forward"))
            previous_end, last_module = piece.start, module
        last_task_end = piece.end
    return events


class SimulatedZero3Job:
    """ZeRO-3 on a fully sharded ``problem``, played by the simulator: its defaults, or
    ``options`` (:func:`~fusionopt.solvers.baselines.zero3_plan`'s other keywords), the
    prefetch bucket (elements) settable between steps. :meth:`step` runs one step of the
    bucket in use and returns its timed fetches (:func:`fetch_events`), each wait stretched
    by a draw from ``deviations`` (relative, seeded; none: exact); ``step_time`` is its
    ``T``, stretched the same way. Assign ``problem`` to change the link mid-run."""

    def __init__(self, problem: Problem, bucket: int = PREFETCH_BUCKET_SIZE, *, options: dict | None = None,
                 deviations: Sequence[float] | None = None, seed: int = 0) -> None:
        if not problem.pattern.is_a("fully-sharded"):
            raise ValueError(f"a ZeRO-3 job runs a fully sharded problem, not {problem.pattern.article()} "
                             f"{problem.pattern.words} one")
        self.problem, self.bucket = problem, bucket
        self.options = dict(options or {})
        if "prefetch_bucket_size" in self.options:
            raise ValueError("options holds prefetch_bucket_size: give the prefetch bucket as bucket")
        self.noise = Noise(0.0 if deviations is None else deviations, seed)
        self._plans: dict[int, Any] = {}
        self.step_time = math.nan

    def plan(self, bucket: int | None = None) -> Any:
        """ZeRO-3's plan of ``bucket`` (default: the one in use) on this job's profile."""
        bucket = self.bucket if bucket is None else bucket
        if bucket not in self._plans:
            self._plans[bucket] = zero3_plan(self.problem.profile, prefetch_bucket_size=bucket, **self.options)
        return self._plans[bucket]

    def time(self, bucket: int | None = None) -> float:
        """``T`` in seconds of the plan of ``bucket`` on the job's problem now, without noise."""
        return simulate(self.problem, self.plan(bucket)).iteration_time

    def step(self) -> list[Fetch]:
        events = fetch_events(self.problem, self.plan())
        stretch = self.noise.draw(len(events) + 1)
        self.step_time = self.time() * (1.0 + stretch[-1])
        return [Fetch(p, s, s + (e - s) * (1.0 + d), f) for (p, s, e, f), d in zip(events, stretch)]


__all__ = ["AdaptivePrefetch", "Fetch", "SimulatedZero3Job", "fetch_events"]
