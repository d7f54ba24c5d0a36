"""Each method's declared needs (fusionopt.solvers.needs) are what it refuses."""

import pytest

from fusionopt import zoo
from fusionopt.cost import network
from fusionopt.model import Problem
from fusionopt.model.ps import ParameterServer
from fusionopt.solvers import solve
from fusionopt.solvers.registry import _REGISTRY, default_methods, get_method

pytest.importorskip("ortools")

PROFILE = zoo.profile("resnet18", device="h100", batch=32).tail(8, name="")      # small enough for ps-brute
SMALL = {"brute": {}, "cpsat": {"time_limit": 5.0}, "ps-brute": {}, "ps-cpsat": {"time_limit": 5.0}}


def problem(**kind):
    if kind.pop("ps", False):
        return Problem(PROFILE, ps=ParameterServer.from_network("10gbe", 4, 4, colocated=True), **kind)
    return Problem(PROFILE, network("10gbe", 8), **kind)


@pytest.mark.parametrize("name", sorted(_REGISTRY))
def test_a_method_refuses_what_it_declares_it_cannot_solve(name):
    needs = get_method(name).needs
    options = SMALL.get(name, {})
    # The other kind of problem (all-reduce against parameter server) is always refused.
    with pytest.raises(ValueError):
        solve(problem(ps=not needs.ps, sync="layerwise"), name, **options)
    if needs.ps:
        solve(problem(ps=True, sync="layerwise"), name, **options)
        return
    if needs.layerwise:
        with pytest.raises(ValueError, match="layerwise"):
            solve(problem(), name, **options)
    else:
        solve(problem(), name, **options)
    if needs.plain:
        with pytest.raises(ValueError):
            solve(problem(sync="layerwise", copy_cost=1e-11), name, **options)
    else:
        # ByteScheduler's Horovod fusion models no extension: the unfused policy does, as it says.
        unfused = {"fusion_threshold_bytes": 0, "cycle_time": 0} if name.startswith("bytescheduler") else {}
        solve(problem(sync="layerwise", copy_cost=1e-11), name, **options, **unfused)


def test_the_default_comparison_follows_the_declarations():
    assert "dp" not in default_methods(problem(copy_cost=1e-11))
    assert "p3" not in default_methods(problem()) and "p3" in default_methods(problem(sync="layerwise"))
    assert default_methods(problem(ps=True)) == [n for n in _REGISTRY if get_method(n).needs.ps
                                                  and get_method(n).in_default_comparison]
