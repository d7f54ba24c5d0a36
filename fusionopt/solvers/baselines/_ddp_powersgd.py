"""DDP with torch's ``powerSGD_hook`` registered (torch 2.13): DDP's own buckets, each sent as
the hook sends it (:class:`fusionopt.cost.PowerSGD`, MODEL.md section 2.4).

The buckets are DDP's (:func:`~fusionopt.solvers.baselines.ddp_buckets`, from the gradients'
bytes: the hook does not change them); the step is judged on the problem the hook prices
(:meth:`~fusionopt.cost.PowerSGD.priced`), so this is a function, not a method of
:func:`~fusionopt.solvers.solve`, whose methods are judged on the problem they are given. The
grouping that is best under the hook is ``solve(powersgd.priced(problem), "dp")``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Sequence

from fusionopt.model._plan import Plan
from fusionopt.model._powersgd import PowerSGD
from fusionopt.model._problem import Problem
from fusionopt.model._simulator import simulate
from fusionopt.solvers._result import Result, finish
from fusionopt.solvers.baselines._ddp import ddp_buckets


def ddp_powersgd(problem: Problem, powersgd: PowerSGD | None = None, *, steps: int | None = None,
                 bucket_cap_mb: float | None = None, bucket_cap_mb_list: Sequence[float] | None = None,
                 find_unused_parameters: bool = False, static_graph: bool = False) -> Result:
    """DDP's buckets on ``problem`` with ``powersgd`` (torch's defaults when None) registered:
    the Result of a step once the hook compresses, judged on ``powersgd.priced(problem)``.

    ``stats`` holds the buckets, ``compressed`` (the tensors the hook compresses, by name),
    ``compression_rate`` (elements before over after, torch's ``compression_stats()[0]``),
    ``plain_step`` (seconds, a step of the same buckets with the plain all-reduce: the first
    ``start_iter`` steps) and, with ``steps``, ``mean_step`` (seconds, the mean over the
    first ``steps`` steps, those included). DDP's options are its own (:func:`ddp_buckets`).

    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Profile
    >>> prof = Profile.from_arrays([1048576, 1024], [0, 0], [1e-3, 1e-3], ["w", "b"], shapes=[(256, 1024), (256,)])
    >>> r = ddp_powersgd(Problem(prof, AlphaBeta(1e-4, 1e-9)), PowerSGD(rank=4, start_iter=10), steps=20)
    >>> r.plan.groups(), r.stats["compressed"], round(r.stats["compression_rate"], 3)
    ([[1, 0]], ['w'], 48.81)
    >>> [round(r.stats[k] * 1e6, 6) for k in ("plain_step", "mean_step")], round(r.iteration_time * 1e6, 6)
    ([3149.6, 2735.552], 2321.504)
    """
    started = time.perf_counter()
    powersgd = PowerSGD() if powersgd is None else powersgd
    if not isinstance(powersgd, PowerSGD):
        raise ValueError(f"powersgd must be a PowerSGD, got {type(powersgd).__name__}")
    priced = powersgd.priced(problem)
    profile = problem.profile
    buckets = ddp_buckets(profile, bucket_cap_mb=bucket_cap_mb, bucket_cap_mb_list=bucket_cap_mb_list,
                          find_unused_parameters=find_unused_parameters, static_graph=static_graph)
    plain = simulate(problem, Plan.from_groups(profile, buckets)).iteration_time
    plan = Plan.from_groups(priced.profile, buckets)
    split = powersgd.of_profile(profile)
    result = finish(priced, plan, "ddp-powersgd", started, space="fusion" if plan.is_fusion(priced.profile) else "any",
                    stats={"buckets": [list(b) for b in buckets], "powersgd": powersgd.to_dict(),
                           "compressed": [profile.names[i] for i, c in enumerate(split.compressed) if c],
                           "compression_rate": split.compression_rate(), "plain_step": plain})
    if steps is not None:
        result = replace(result, stats={**result.stats,
                                        "mean_step": powersgd.mean_step(plain, result.iteration_time, steps)})
    return result


__all__ = ["ddp_powersgd"]
