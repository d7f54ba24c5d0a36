"""Horovod's autotune (``HOROVOD_AUTOTUNE=1``) as a tuner beside the online planner, in the
same harness: a job with ``problem`` (the conditions the job runs under now), ``switch(plan)``
and a measured ``step_time`` per step (:class:`~fusionopt.integrations.SimulatedJob`).

Read in horovod/horovod at ``2626dc8`` (``horovod/common/parameter_manager.{h,cc}``,
``optim/bayesian_optimization.cc``, ``optim/gaussian_process.cc``, ``controller.cc``,
``operations.cc``), and reproduced here:

* **What is tuned.** The fusion threshold (0 to 64 MiB) and the background thread's cycle
  time (1 to 100 ms) jointly by Bayesian optimisation; then four on/off settings in a chain
  (hierarchical all-reduce, hierarchical all-gather, torus all-reduce, the response cache;
  in an NCCL build where the environment sets none of them, all four are tunable:
  ``categorical=4``). While tuning, the joint pair starts at the first of four test points,
  (4 MiB, 5 ms), then (32, 50), (16, 25), (8, 10), then the optimiser's proposals.
* **The score** of a setting: bytes all-reduced per microsecond over a *sample* of
  ``steps_per_sample = 10`` steps; a setting runs ``SAMPLES = 5`` samples and is scored by
  their median (50 steps). The first ``warmups = 3`` settings' scores are dropped.
* **The chain** (``ParameterManager::Tune``): each score goes first to the joint pair, which
  adds it to its samples and moves to its next point; once it has taken more than
  ``max_samples = 20`` it is done, returns to its initial point and *restarts* its search,
  and the score goes on to the next setting of the chain, which moves to its next value
  (or, when it has tried both, returns to its first and hands on). Tuning ends when every
  member of the chain is done in one call: an odometer whose fastest digit is the whole
  Bayesian search. With four on/off settings that is ``2**4 x 21`` scores after the warm-up,
  16,950 steps, before the best setting is kept.
* **The optimiser**: a Gaussian process with a squared-exponential kernel (one length for
  both variables, in their raw units) and noise ``alpha = 0.8``, its length and amplitude
  fitted by L-BFGS on the negative log-likelihood from (1, 1); the scores normalised to mean
  0 and standard deviation 1 once there are 3; the next point maximises the expected
  improvement (``xi = 0.01``) over 25 L-BFGS starts drawn uniformly in the bounds.
* **The best** (``UpdateBestValue``): the setting whose score was highest (strictly); its
  value is kept once tuning ends.

**Reconstructed**: the four on/off settings change nothing in fusionopt's model of one
all-reduce channel; their rounds run as Horovod runs them, at the joint pair's current value.
The plan a setting makes is Horovod's own grouping (``solve(problem, "horovod",
fusion_threshold_bytes=, cycle_time=)``) on the job's current conditions, rebuilt every step
as Horovod's background thread forms its responses at run time. Horovod's L-BFGS (LBFGSpp
with an infinite objective outside the bounds) is scipy's L-BFGS-B with the bounds; its
random starts come from a seeded generator, not ``std::mt19937``'s. A threshold under one
byte sends each tensor alone, as Horovod's threshold 0 does.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

import numpy as np

from fusionopt.model._cost import check_count
from fusionopt.model._plan import Plan

MIB = 1024 * 1024
BOUNDS = ((0.0, 64.0), (1.0, 100.0))
"""The joint pair's bounds: fusion threshold (MiB) and cycle time (ms)."""
TEST_POINTS = ((4.0, 5.0), (32.0, 50.0), (16.0, 25.0), (8.0, 10.0))
"""The joint pair's first points, in order (MiB, ms)."""


class GaussianProcess:
    """Horovod's Gaussian process regressor: squared-exponential kernel of one ``length`` and
    amplitude ``sigma_f``, noise ``alpha`` on the diagonal."""

    def __init__(self, alpha: float) -> None:
        self.alpha = float(alpha)
        self.length, self.sigma_f = 1.0, 1.0
        self.x = np.empty((0, 2))
        self.y = np.empty(0)

    def kernel(self, a: np.ndarray, b: np.ndarray, length: float, sigma_f: float) -> np.ndarray:
        squared = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T
        return sigma_f * sigma_f * np.exp(-0.5 / (length * length) * squared)

    def fit(self, x: np.ndarray, y: np.ndarray) -> None:
        """Fit ``length`` and ``sigma_f`` to the samples by the negative log-likelihood."""
        from scipy.optimize import minimize

        self.x, self.y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        m = len(self.y)

        def nll(p: np.ndarray) -> float:
            k = self.kernel(self.x, self.x, p[0], p[1]) + self.alpha ** 2 * np.eye(m)
            try:
                lower = np.linalg.cholesky(k)
            except np.linalg.LinAlgError:
                return math.inf
            return float(np.log(np.diag(lower)).sum() + 0.5 * self.y @ np.linalg.solve(k, self.y)
                         + 0.5 * m * math.log(2 * math.pi))

        found = minimize(nll, np.ones(2), method="L-BFGS-B", options={"maxiter": 100})
        if np.all(np.isfinite(found.x)):
            self.length, self.sigma_f = float(found.x[0]), float(found.x[1])

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The posterior mean and standard deviation at ``x`` (rows)."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        k = self.kernel(self.x, self.x, self.length, self.sigma_f) + self.alpha ** 2 * np.eye(len(self.y))
        k_s = self.kernel(self.x, x, self.length, self.sigma_f)
        k_ss = self.kernel(x, x, self.length, self.sigma_f) + 1e-8 * np.eye(len(x))
        solved = np.linalg.solve(k, k_s)
        mean = solved.T @ self.y
        variance = np.diag(k_ss - k_s.T @ solved)
        return mean, np.sqrt(np.maximum(variance, 0.0))


class BayesianSearch:
    """Horovod's ``BayesianOptimization``: samples of (point, score); the next point maximises
    the expected improvement over the fitted process (module docstring)."""

    def __init__(self, bounds: tuple[tuple[float, float], ...] = BOUNDS, *, noise: float = 0.8, xi: float = 0.01,
                 restarts: int = 25, seed: int = 0) -> None:
        restarts = check_count("restarts", restarts)
        for name, value in (("noise", noise), ("xi", xi)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        try:
            pairs = [(float(lo), float(hi)) for lo, hi in bounds]
        except (TypeError, ValueError):
            pairs = []
        if not pairs or not all(math.isfinite(lo) and math.isfinite(hi) and lo < hi for lo, hi in pairs):
            raise ValueError(f"bounds must be (low, high) pairs of finite numbers, low < high, got {bounds!r}")
        self.bounds, self.xi, self.restarts = tuple(pairs), float(xi), restarts
        self.process = GaussianProcess(noise)
        self.random = np.random.default_rng(seed)
        self.x: list[np.ndarray] = []
        self.y: list[float] = []

    def add(self, x: Any, score: float) -> None:
        self.x.append(np.asarray(x, dtype=np.float64))
        self.y.append(float(score))

    def clear(self) -> None:
        self.x, self.y = [], []

    def expected_improvement(self, x: np.ndarray) -> np.ndarray:
        from scipy.stats import norm

        mean, sigma = self.process.predict(x)
        best = float(self.process.predict(np.array(self.x))[0].max())
        improvement = mean - best - self.xi
        with np.errstate(divide="ignore", invalid="ignore"):
            z = improvement / sigma
            ei = improvement * norm.cdf(z) + sigma * norm.pdf(z)
        return np.where(sigma != 0, ei, 0.0)

    def next(self) -> np.ndarray:
        """The next point to try (``NextSample``, normalised scores)."""
        from scipy.optimize import minimize

        if not self.y:
            raise ValueError("the search has no sample yet: add a scored point before asking for the next")
        y = np.array(self.y)
        if len(y) >= 3:
            sd = float(y.std())
            y = (y - y.mean()) / (sd if sd > 0 else 1.0)
        self.process.fit(np.array(self.x), y)
        best_x, best_f = np.array([b[0] for b in self.bounds]), math.inf
        for _ in range(self.restarts):
            start = np.array([self.random.uniform(lo, hi) for lo, hi in self.bounds])
            found = minimize(lambda p: -float(self.expected_improvement(p)[0]), start, method="L-BFGS-B",
                             bounds=self.bounds, options={"maxiter": 100})
            if found.fun < best_f:
                best_f, best_x = float(found.fun), found.x
        return np.asarray(best_x, dtype=np.float64)


class HorovodAutotune:
    """Horovod's autotune on a job (module docstring). Call :meth:`after_step` after each
    step; :attr:`setting` is the (fusion threshold MiB, cycle time ms) in use, :attr:`best`
    the one kept once :attr:`done`, :attr:`scores` every score given to the chain.

    Parameters
    ----------
    job : SimulatedJob or alike
        ``problem`` (its conditions now), ``switch(plan)``, ``plan`` and ``step_time``.
    warmups, steps_per_sample, samples, max_samples : int
        Horovod's ``HOROVOD_AUTOTUNE_WARMUP_SAMPLES`` (3), ``..._STEPS_PER_SAMPLE`` (10),
        ``SAMPLES`` (5) and ``HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES`` (20).
    categorical : int
        On/off settings tuned after the joint pair (4 in an NCCL build, module docstring).
    noise : float
        ``HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE`` (0.8).
    seed : int
        The optimiser's random starts.
    """

    def __init__(self, job: Any, *, warmups: int = 3, steps_per_sample: int = 10, samples: int = 5,
                 max_samples: int = 20, categorical: int = 4, noise: float = 0.8, seed: int = 0) -> None:
        for name, value, least in (("warmups", warmups, 0), ("steps_per_sample", steps_per_sample, 1),
                                   ("samples", samples, 1), ("max_samples", max_samples, 0),
                                   ("categorical", categorical, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")
        self.job = job
        self.warmups_left, self.steps_per_sample, self.samples = warmups, steps_per_sample, samples
        self.max_samples = max_samples
        self.search = BayesianSearch(noise=noise, seed=seed)
        self.initial = np.array(TEST_POINTS[0])
        self.setting = self.initial.copy()
        self.iteration = 0
        self.best = self.initial.copy()
        self.best_score = 0.0
        self.values = [0] * categorical          # each on/off setting's index among its two values
        self.done = False
        self.scores: list[float] = []
        self._times: list[float] = []
        self._sample_scores: list[float] = []
        self._apply()

    # ------------------------------------------------------------------ the job
    def plan_of(self, setting: np.ndarray) -> Plan:
        """The plan Horovod's background thread forms with ``setting`` on the job's conditions."""
        from fusionopt.solvers import solve

        threshold = max(1, int(setting[0] * MIB))
        return solve(self.job.problem, "horovod", fusion_threshold_bytes=threshold,
                     cycle_time=float(setting[1]) * 1e-3).plan

    def _apply(self) -> None:
        plan = self.plan_of(self.best if self.done else self.setting)
        if plan != self.job.plan:
            self.job.switch(plan)

    def after_step(self) -> None:
        """Count the step's time; at each setting's last sample, score it and tune."""
        if not self.done:
            self._times.append(self.job.step_time)
            if len(self._times) == self.steps_per_sample:
                total = float(self.job.problem.profile.sizes.sum()) * self.steps_per_sample
                self._sample_scores.append(total / (1e6 * sum(self._times)))
                self._times = []
            if len(self._sample_scores) == self.samples:
                score = statistics.median(self._sample_scores)
                self._sample_scores = []
                self._tune(score)
        self._apply()                             # the job's conditions may have changed

    # ------------------------------------------------------------------ ParameterManager::Tune
    def _tune(self, score: float) -> None:
        if self.warmups_left > 0:
            self.warmups_left -= 1
            return
        self.scores.append(score)
        # The joint pair, then each on/off setting: the chain stops at the first not done. The
        # on/off settings' own best values change nothing here, so only their positions are kept.
        if score > self.best_score:
            self.best_score, self.best = score, self.setting.copy()
        self.search.add(self.setting, score)
        self.iteration += 1
        if self.iteration < len(TEST_POINTS):
            self.setting = np.array(TEST_POINTS[self.iteration])
        elif self.iteration <= self.max_samples:
            self.setting = self.search.next()
        if self.iteration <= self.max_samples:
            return
        self.setting, self.iteration = self.initial.copy(), 0        # CompleteTuning: back to the start
        self.search.clear()
        for k in range(len(self.values)):
            self.values[k] += 1
            if self.values[k] < 2:
                return                                               # this one tries its other value
            self.values[k] = 0
        self.done = True


__all__ = ["BayesianSearch", "GaussianProcess", "HorovodAutotune"]
