"""Each method's declared needs (fusionopt.solvers._needs) are what it refuses."""

import pytest

from fusionopt import zoo
from fusionopt.cost import network
from fusionopt.model import Decoupled, FullySharded, Problem, ParameterServer
from fusionopt.solvers import solve, catalogue, default_methods, get_method

pytest.importorskip("ortools")

PROFILE = zoo.profile("resnet18", device="h100", batch=32).tail(8, name="")      # small enough for ps-brute
SHORT = {"decoupled-brute": PROFILE.tail(6, name=""),   # 2^10 plans a solve instead of 2^14
         "ps-brute": PROFILE.tail(6, name="")}
SMALL = {"brute": {}, "cpsat": {"time_limit": 5.0}, "ps-brute": {}, "ps-cpsat": {"time_limit": 5.0},
         "sharded-brute": {"atoms": "module"}}       # its default tensor atoms take 25 s on this profile


def problem(pattern="all-reduce", profile=PROFILE, **kind):
    if kind.pop("ps", False) or pattern == "ps":
        return Problem(profile, pattern=ParameterServer.from_network("10gbe", 4, 4, colocated=True), **kind)
    if pattern == "decoupled":
        return Problem(profile, pattern=Decoupled.from_network("10gbe", 8), **kind)
    if pattern == "fully-sharded":
        return Problem(profile, pattern=FullySharded.from_network("10gbe", 8), **kind)
    return Problem(profile, network("10gbe", 8), **kind)


def another(pattern):
    return "ps" if pattern == "all-reduce" else "all-reduce"


@pytest.mark.parametrize("name", sorted(m.name for m in catalogue()))
def test_a_method_refuses_what_it_declares_it_cannot_solve(name):
    needs = get_method(name).needs
    options, mine = SMALL.get(name, {}), SHORT.get(name, PROFILE)
    # A problem of another pattern (all-reduce, parameter server, decoupled) is always refused.
    with pytest.raises(ValueError):
        solve(problem(another(needs.pattern), sync="layerwise"), name, **options)
    if needs.pattern == "all-reduce":
        with pytest.raises(ValueError):
            solve(problem("decoupled", sync="layerwise"), name, **options)
        with pytest.raises(ValueError, match="this problem is a fully sharded problem"):
            solve(problem("fully-sharded"), name, **options)
    if needs.pattern == "ps":
        solve(problem("ps", profile=mine, sync="layerwise"), name, **options)
        return
    own = needs.pattern
    if needs.layerwise:
        with pytest.raises(ValueError, match="layerwise"):
            solve(problem(own), name, **options)
    else:
        solve(problem(own, profile=mine), name, **options)
    if needs.barrier:
        with pytest.raises(ValueError, match="is for sync='barrier' only"):
            solve(problem(own, sync="layerwise"), name, **options)
        return
    if own == "decoupled":
        solve(problem(own, profile=mine, sync="layerwise"), name, **options)
        return
    if own == "fully-sharded":
        with pytest.raises(ValueError, match="sync does not apply"):
            problem(own, sync="layerwise")
        return
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
    assert default_methods(problem(ps=True)) == [n for n in (m.name for m in catalogue()) if get_method(n).needs.pattern == "ps"
                                                  and get_method(n).in_default_comparison]
    assert default_methods(problem("decoupled")) == ["decoupled-wfbp", "megatron", "zero2", "decoupled-opt",
                                                     "decoupled-dp"]
    assert default_methods(problem("decoupled", sync="layerwise")) == ["decoupled-wfbp", "megatron-overlap", "dear",
                                                                       "decoupled-opt", "decoupled-dp"]
    assert default_methods(problem("fully-sharded"))[:3] == ["sharded-wfbp", "fsdp2", "sharded-opt"]


DECLARED = sorted(name for name in (m.name for m in catalogue()) if hasattr(get_method(name).function, "needs"))


@pytest.mark.parametrize("name", DECLARED)
def test_the_declaration_is_checked_on_a_direct_call(name):
    # Called without the registry, the function still refuses what its declaration rules out,
    # in one line naming the method.
    needs, function = get_method(name).needs, get_method(name).function
    with pytest.raises(ValueError, match=f"^{name} (needs a parameter-server problem|needs a decoupled problem"
                                         "|needs a fully sharded problem|is an all-reduce method)"):
        function(problem(another(needs.pattern), sync="layerwise"))
    if needs.pattern != "fully-sharded":
        with pytest.raises(ValueError, match=f"^{name} (is an? [a-z -]+ method and this problem is a fully sharded problem"
                                             "|needs a (parameter-server|decoupled) problem)"):
            function(problem("fully-sharded"))
    if needs.layerwise:
        with pytest.raises(ValueError, match=f"^{name} is for sync='layerwise' only"):
            function(problem(needs.pattern))
    if needs.barrier:
        with pytest.raises(ValueError, match=f"^{name} is for sync='barrier' only"):
            function(problem(needs.pattern, sync="layerwise"))
    if needs.plain:
        with pytest.raises(ValueError, match=f"^{name} applies to the plain model only, and this problem has copy_cost on"):
            function(problem(sync="layerwise", copy_cost=1e-11))
    with pytest.raises(ValueError, match="^problem must be a Problem, got str"):
        function("resnet18")


def test_a_declared_size_limit():
    brute = get_method("brute").needs
    assert brute.tensor_limit(problem()) == 20 and brute.tensor_limit(problem(channels=2)) == 14
    assert "n <= 20 (14 with several channels)" in brute.describe()
    large = Problem(zoo.profile("resnet18", device="h100", batch=32).tail(21, name=""), network("10gbe", 8))
    with pytest.raises(ValueError, match=r"^brute enumerates 2\^\(n-1\) plans and refuses n = 21 > 20; use method='dp'$"):
        get_method("brute").function(large)
    with pytest.raises(ValueError, match=r"refuses n = 15 > 14$"):
        solve(Problem(large.profile.tail(15, name=""), network("10gbe", 8), channels=2), "brute")


def test_the_methods_page_gives_each_method_its_registered_family():
    # docs/methods.md's table and the registry must agree on every method's family.
    import re
    from pathlib import Path
    page = (Path(__file__).resolve().parents[2] / "docs" / "methods.md").read_text()
    rows = dict(re.findall(r"^\| \[([a-z0-9-]+)\]\(#[a-z0-9-]+\) \| ([a-z ]+) \|", page, re.M))
    assert rows == {name: get_method(name).family for name in (m.name for m in catalogue())}


def test_every_method_registers_itself_and_has_its_place():
    # Each solver registers itself with the decorator beside its definition; the dispatcher's
    # ORDER places every one of them (a comparison's rows follow it), and names no other.
    from fusionopt.solvers import register, ORDER

    assert [m.name for m in catalogue()] == list(ORDER)
    assert all(get_method(name).function.__module__.startswith("fusionopt.solvers.") for name in ORDER)
    with pytest.raises(ValueError, match="^method 'dp' is already registered$"):
        register("dp", lambda problem: None, "again", family="exact")
    with pytest.raises(ValueError, match="^method 'mine': its solver must be a function, got str$"):
        register("mine", "fusionopt.solvers.exact._dp:dp", "by path", family="exact")
    with pytest.raises(ValueError, match="^unknown family 'heuristic' for method 'mine'"):
        register("mine", lambda problem: None, "mine", family="heuristic")
    assert "mine" not in [m.name for m in catalogue()]
