"""``dear``: DeAR's fusion of modules up to a buffer threshold, reduce-scatters from the
backward hooks, all-gathers one group ahead from the forward pre-hooks (MODEL.md section 8.1;
docs/methods.md).
"""

from __future__ import annotations

from fusionopt.model._decoupled_plan import DecoupledPlan
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.solvers.baselines._megatron import gathered_one_ahead, gradients_reduced
from fusionopt.solvers._catalogue import method
from fusionopt.solvers._groupings import DEAR_THRESHOLD_MB, dear_groups
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._result import Outcome, Result




@method("dear", family="paper",
        summary="DeAR: 25 MB module groups, reduce-scatters in the backward, gathers one ahead in the forward (layerwise)")
@declares(Needs(pattern="decoupled", layerwise=True))
def dear(problem: Problem, *, threshold_mb: float = DEAR_THRESHOLD_MB) -> Result:
    """DeAR (Zhang, Shi et al., ICDCS 2023) as its code runs it: fused reduce-scatters during
    the backward, fused all-gathers of the reduced gradients overlapping the next forward.

    Checked against ``dear/dopt_rsag.py`` of ``lzhangbv/dear_pytorch`` (July 2023), which its
    training scripts use (the Bayesian-optimised threshold of ``dopt_rsag_bo.py`` is opt-in):

    * groups of :func:`dear_groups` (25 MB by default; the scripts' ``--threshold`` does not
      reach the optimiser);
    * a group's reduce-scatter is issued from the backward hook of its last gradient;
    * ``step()`` waits for every reduce-scatter (``_bp_barrier``) and issues the first
      group's all-gather; the forward pre-hook of a group's first module waits for that
      group's all-gather and issues the next group's (one outstanding);
    * each module is updated in its pre-hook, after its all-gather: the problem must say so
      (``Decoupled(..., update_after_gather=True)``) unless it has no update time.

    The all-gather dispatch times are read from the simulator's own compute stream and given
    to the plan as release times. ``sync="layerwise"`` only.

    Reconstructed, not measured: a module's tensors are found by name, and the buffers'
    padding to a multiple of the world size is left out.

    Examples
    --------
    MODEL.md section 5's tensors as three modules of 3.8, 1 and 1.9 MB with a 4 MB
    threshold: groups ``{t0}``, ``{t1, t2}``. Reduce-scatters: ``{t1, t2}`` at 3 ms, 3-7;
    ``{t0}`` at 6 ms, 7-12. The first all-gather ``{t0}`` goes at 12, 12-17; the forward
    reaches t0 at 17 (no update time) and dispatches ``{t1, t2}``, 17-21; forwards at 17,
    21 and 22 ms: ``T = 23`` ms.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Decoupled, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> half = AlphaBeta(1e-3, 1e-9)
    >>> r = dear(Problem(profile, pattern=Decoupled(half, half), sync="layerwise"), threshold_mb=4)
    >>> r.plan.all_gather.groups(), (r.plan.all_gather.release * 1e3).round(9).tolist(), round(r.iteration_time * 1e3, 9)
    ([[0], [1, 2]], [12.0, 17.0], 23.0)
    """
    profile = problem.profile
    if not problem.pattern.update_after_gather and profile.U > 0:
        raise ValueError("dear updates each module after its all-gather (in the forward pre-hook): build the "
                         "problem with Decoupled(..., update_after_gather=True)")
    groups = dear_groups(problem, threshold_mb)
    position = {int(i): k for k, i in enumerate(profile.ready_order)}
    rs_order = sorted(range(len(groups)), key=lambda g: max(position[i] for i in groups[g]))
    reduce_scatter = Plan.from_groups(profile, [sorted(groups[g], key=position.get) for g in rs_order])
    # step() waits for every reduce-scatter and issues the first group's all-gather.
    all_gather = gathered_one_ahead(problem, reduce_scatter, groups, gradients_reduced(problem, reduce_scatter))
    return Outcome(DecoupledPlan(reduce_scatter, all_gather),
                   stats={"threshold_mb": float(threshold_mb), "groups": len(groups)})


__all__ = ["DEAR_THRESHOLD_MB", "dear_groups", "dear"]
