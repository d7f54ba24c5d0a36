"""Parameter-server baselines (docs/methods.md, sections ps-default to ps-cpsat).

Each method is a plain function ``f(problem) -> Result`` on a problem with
``pattern=ParameterServer(...)``; its :class:`~fusionopt.model.PSPlan` is re-evaluated by the
simulator through :func:`fusionopt.solvers.finish`, as every method's plan is.

Neither baseline's system publishes the schedule as fusionopt states it; both are our
reading of iPart's and iBatch's abstracts [reconstructed]: the "default PS" pushes the
whole gradient after the backward and pulls every parameter before the forward (BigDL's
synchronous parameter exchange), and "layer-by-layer" sends each layer as its own
message in both directions, overlapping pushes with the backward and pulls with the
forward. fusionopt's unit is the tensor, not the layer: a layer's weight and bias are two
messages in ``ps-layer`` (group them in the profile to model one message per layer).
Neither baseline cuts a tensor, so partitioned compute, if on, never splits a piece.
"""

from __future__ import annotations


from fusionopt.model._problem import Problem
from fusionopt.model._ps_plan import PSPlan
from fusionopt.solvers._needs import Needs, declares
from fusionopt.solvers._result import Outcome, Result
from fusionopt.solvers._catalogue import method

__all__ = ["ps_default", "ps_layer"]


@method("ps-default", family="framework baseline",
        summary="parameter server: one push after the backward, one pull before the forward")
@declares(Needs(pattern="ps"))
def ps_default(problem: Problem) -> Result:
    """Default parameter server: one push after the backward, one pull before the forward.

    The push message carries every gradient (backward order) and is ready when the
    backward ends; the pull message carries every parameter (forward order) and waits for
    the push and its server update; the forward waits for the pull (in both sync modes:
    one pull brings every tensor back at once). [reconstructed]

    Examples
    --------
    MODEL.md section 5's profile, ``alpha = 1 ms``, ``beta = 1 ns/B`` both ways: push
    6 -> 14, pull 14 -> 22, forward 22 -> 25 ms.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile, ParameterServer
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> r = ps_default(Problem(profile, pattern=ParameterServer(AlphaBeta(1e-3, 1e-9))))
    >>> round(r.iteration_time * 1e3, 9), r.plan.push.groups(), r.plan.pull.groups()
    (25.0, [[2, 1, 0]], [[0, 1, 2]])
    """
    return Outcome(PSPlan.from_offsets(problem.profile))


@method("ps-layer", family="framework baseline",
        summary="parameter server: one push and one pull per tensor, overlapping the compute")
@declares(Needs(pattern="ps"))
def ps_layer(problem: Problem) -> Result:
    """Layer-by-layer parameter server: one push per tensor, one pull per tensor.

    Pushes run in backward order, each as soon as its gradient is ready and the push
    channel is free (WFBP on the push channel); pulls run in forward order, each as soon as
    its tensor is pushed and updated and the pull channel is free. Under layerwise sync
    tensor ``i``'s forward waits only for its own pull, so pulls overlap the forward; under
    barrier sync the forward waits for every pull. [reconstructed]

    Examples
    --------
    The profile of :func:`ps_default`, layerwise sync: pushes end at 4, 6 and 11 ms, pulls
    (t1, t2, t3) at 16, 18 and 21, forwards t1 16 -> 17, t2 18 -> 19, t3 21 -> 22 ms.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Profile, ParameterServer
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> ps = ParameterServer(AlphaBeta(1e-3, 1e-9))
    >>> r = ps_layer(Problem(profile, pattern=ps, sync="layerwise"))
    >>> round(r.iteration_time * 1e3, 9), r.plan.push.groups(), r.plan.pull.groups()
    (22.0, [[2], [1], [0]], [[0], [1], [2]])
    >>> round(ps_layer(Problem(profile, pattern=ps)).iteration_time * 1e3, 9)   # barrier: 21 + 3
    24.0
    """
    n = problem.profile.n
    plan = PSPlan.from_groups(problem.profile, push=[[i] for i in range(n - 1, -1, -1)],
                              pull=[[i] for i in range(n)])
    return Outcome(plan)
