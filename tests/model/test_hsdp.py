"""HSDP, the pattern added on the pattern core: each axis's costs, the fully sharded step and
methods unchanged, its own refusals."""

import json

import pytest
from hypothesis import given, settings, strategies as st

from fusionopt.executor import Job
from fusionopt.model import HSDP, FullySharded, Problem, Profile, ShardedPlan, compute_pieces, simulate
from fusionopt.cost import AlphaBeta, network
from fusionopt.solvers import compare, solve

MS = 1e-3


def one_tensor() -> Profile:
    # 8 MB, forward 1 ms, backward 2 ms.
    return Profile.from_arrays([8_000_000], [MS], [2 * MS])


def test_one_unit_by_hand():
    # Shard axis: RS 1 ms + 1 ns/B, AG 0.5 ms + 1 ns/B; replicate axis: AR 3 ms + 2 ns/B over
    # the 8 MB / S = 2 MB each worker holds (S = 4).
    hsdp = HSDP(AlphaBeta(MS, 1e-9), AlphaBeta(0.5 * MS, 1e-9), AlphaBeta(3 * MS, 2e-9), shards=4, replicas=2)
    problem = Problem(one_tensor(), pattern=hsdp)
    plan = ShardedPlan.from_units(problem.profile, [[0]], reshard=[False])
    t = simulate(problem, plan)
    # AG 0 -> 8.5 ms, forward 8.5 -> 9.5, backward 9.5 -> 11.5, RS 11.5 -> 20.5, AR 20.5 -> 27.5
    # (3 + 2e-9 * 2e6 = 7 ms), then the optimiser (0 s): T = 27.5 ms.
    assert t.iteration_time == pytest.approx(27.5 * MS, rel=1e-12)
    assert t.message_end.tolist() == pytest.approx([8.5 * MS, 27.5 * MS], rel=1e-12)
    assert [p.kind for p in compute_pieces(problem, plan)][:2] == ["forward", "backward"]
    assert problem.pattern.workers == 8 and problem.extensions == ("hsdp",)


@settings(deadline=None, max_examples=20)
@given(shards=st.integers(1, 8), sizes=st.lists(st.integers(1, 4_000_000), min_size=1, max_size=5),
       name=st.sampled_from(["10gbe", "100gb-ib", "nvlink-h100"]))
def test_one_replica_is_fsdp_over_the_shard_group(shards, sizes, name):
    # A replicate group of one worker all-reduces nothing: HSDP is then FSDP over the S workers.
    profile = Profile.from_arrays(sizes, [1e-4] * len(sizes), [2e-4] * len(sizes))
    hsdp = Problem(profile, pattern=HSDP.from_network(name, replicas=1, shards=shards))
    fsdp = Problem(profile, pattern=FullySharded.from_network(name, shards))
    plan = solve(fsdp, "fsdp2").plan
    assert simulate(hsdp, plan).iteration_time == pytest.approx(simulate(fsdp, plan).iteration_time, rel=1e-12)


def test_more_replicas_add_the_replicate_all_reduce_to_every_reduce_scatter():
    hsdp = HSDP.from_network("100gb-ib", replicas=4, shards=8, shard_network="nvlink-h100")
    size = 64e6
    assert hsdp.reduce_scatter(size) == pytest.approx(
        network("nvlink-h100", 8, collective="reduce_scatter")(size) + network("100gb-ib", 4)(size / 8), rel=1e-12)
    assert hsdp.all_gather(size) == network("nvlink-h100", 8, collective="all_gather")(size)
    assert set(hsdp.collectives) == {"reduce_scatter", "all_gather", "all_reduce"}


def test_the_fully_sharded_methods_take_it_and_the_exact_search_bounds_them():
    profile = Profile.from_arrays([4e6, 1e6, 2e6, 3e6], [1e-3] * 4, [2e-3] * 4)
    problem = Problem(profile, pattern=HSDP.from_network("25gbe", replicas=2, shards=4))
    fsdp2, best = solve(problem, "fsdp2"), solve(problem, "sharded-brute")
    assert best.iteration_time <= fsdp2.iteration_time * (1 + 1e-12)
    assert best.lower_bound <= best.iteration_time * (1 + 1e-12)
    assert str(best.status) == "OPTIMAL"
    names = [row.method for row in compare(problem)]
    assert "fsdp2" in names and "sharded-wfbp" in names and "wfbp" not in names
    with pytest.raises(ValueError, match="^method 'wfbp' is an all-reduce method and this problem is a hybrid "
                                         r"sharded problem \(pattern=HSDP\(\.\.\.\)\); methods for it: "):
        solve(problem, "wfbp")


def test_it_travels_as_json_and_refuses_what_it_cannot_be():
    hsdp = HSDP(AlphaBeta(MS, 1e-9), AlphaBeta(MS, 1e-9), AlphaBeta(2 * MS, 1e-9), shards=2, replicas=3,
                memory_cap=1e9, blocking=True)
    assert HSDP.from_dict(hsdp.to_dict()) == hsdp and hsdp.with_cap(None).memory_cap is None
    assert hsdp.without_cap() == HSDP(AlphaBeta(MS, 1e-9), AlphaBeta(MS, 1e-9), AlphaBeta(2 * MS, 1e-9), shards=2,
                                      replicas=3, blocking=True)
    problem = Problem(one_tensor(), pattern=hsdp)
    with pytest.raises(ValueError, match="^the executor runs the plain model .*, and this problem has hsdp on"):
        Job(problem, ShardedPlan.from_units(problem.profile, [[0]]))
    with pytest.raises(ValueError, match=r"^HSDP does not combine with contention \(contention=2.0\)"):
        Problem(one_tensor(), pattern=hsdp, contention=2.0)
    with pytest.raises(ValueError, match="^replicas must be a whole number >= 1, got 0$"):
        HSDP.from_network("10gbe", replicas=0, shards=2)


def test_the_command_line_builds_the_same_problem(capsys):
    from fusionopt import zoo
    from fusionopt.cli import main

    argv = ["compare", "--model", "alexnet", "--network", "100gb-ib", "--workers", "16", "--fully-sharded",
            "--replicas", "2", "--shard-network", "nvlink-h100", "--methods", "fsdp2", "--json"]
    assert main(argv) == 0
    [printed] = json.loads(capsys.readouterr().out)
    profile = zoo.profile("alexnet")
    problem = Problem(profile, pattern=HSDP.from_network("100gb-ib", replicas=2, shards=8, shard_network="nvlink-h100"),
                      step_parts="fit")
    assert printed["iteration_time"] == solve(problem, "fsdp2").iteration_time
    for extra, line in ((["--replicas", "3"], "--replicas 3 must divide --workers 16 into whole shard groups"),
                        (["--replicas", "2", "--alpha", "1e-5", "--beta", "1e-9"],
                         "--replicas prices each axis on a preset network: give --network")):
        argv = ["compare", "--model", "alexnet", "--network", "100gb-ib", "--workers", "16", "--fully-sharded", *extra]
        assert main(argv) == 2
        assert capsys.readouterr().err.startswith(f"fusionopt: error: {line}")
    assert main(["compare", "--model", "alexnet", "--network", "10gbe", "--workers", "8", "--replicas", "2"]) == 2
    assert capsys.readouterr().err.strip() == ("fusionopt: error: --replicas is a fully sharded option (HSDP) and goes "
                                               "with --fully-sharded")
