"""The step parts that belong to no tensor (MODEL.md section 4): update lump, post-backward
work and host overhead. They run on the compute stream while the channel is idle, so every
plan's ``T`` grows by exactly ``W``; every evaluator, bound and solver must agree."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, partition_plans, problems

from fusionopt.checks import longest_path_time
from fusionopt.cost import AlphaBeta
from fusionopt.model import (
    Plan, Problem, Profile, compute_pieces, simulate, best_bound, fusion_iteration_time, ParameterServer, PSPlan,
)
from fusionopt.solvers import solve
from fusionopt.model import read_profile_csv, write_profile_csv

MS = 1e-3


def worked(**parts):
    return Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS], **parts)


def test_worked_example_with_every_part():
    # MODEL.md section 5, alpha = 3 ms, {t3}, {t2, t1}: 17 ms. The second message ends at
    # 14 ms; post-backward 0.5 and update lump 1 ms follow, the forwards run 15.5 -> 18.5, and
    # the host's 2 ms end the step at 20.5 ms.
    profile = worked(post_backward=0.5 * MS, update_lump=MS, host_overhead=2 * MS)
    problem = Problem(profile, AlphaBeta(3 * MS, 1e-9))
    plan = Plan.from_groups(profile, [[2], [1, 0]])
    t = simulate(problem, plan)
    assert round(t.iteration_time / MS, 9) == 20.5
    assert (t.forward_start / MS).round(9).tolist() == [15.5, 16.5, 17.5]
    assert round(t.compute_time / MS, 9) == 12.5 and round(t.exposed / MS, 9) == 8.0
    assert round(longest_path_time(problem, plan) / MS, 9) == 20.5
    pieces = [(p.kind, round(p.start / MS, 9), round(p.end / MS, 9)) for p in compute_pieces(problem, plan)]
    assert pieces[3:5] == [("post_backward", 14.0, 14.5), ("update_lump", 14.5, 15.5)]
    assert pieces[-1] == ("host_overhead", 18.5, 20.5)
    assert profile.parts == pytest.approx({"forward": 3 * MS, "backward": 6 * MS, "update": 0.0,
                                           "update_lump": MS, "post_backward": 0.5 * MS, "host_overhead": 2 * MS})
    assert sum(profile.parts.values()) == pytest.approx(profile.compute_time)


def test_layerwise_takes_the_host_share_and_refuses_whole_step_work():
    # Layerwise, WFBP at alpha = 1 ms: t3 1-4, t2 4-6, t1 6-11; forwards 11-14; host 14-15.5.
    host = Problem(worked(host_overhead=1.5 * MS), AlphaBeta(MS, 1e-9), sync="layerwise")
    wfbp = Plan.from_groups(host.profile, [[2], [1], [0]])
    assert round(simulate(host, wfbp).iteration_time / MS, 9) == 15.5
    bare = Problem(worked(), host.cost, sync="layerwise")
    for method, options in (("p3", {}), ("usbyte", {"unit_parameters": 250_000}), ("layerwise-opt", {})):
        gained = solve(host, method, **options).iteration_time - solve(bare, method, **options).iteration_time
        assert round(gained / MS, 9) == 1.5, method
    with pytest.raises(ValueError, match=r"has update_lump time, which waits for every gradient .* use sync='barrier'"):
        Problem(worked(update_lump=MS), AlphaBeta(MS, 1e-9), sync="layerwise")


def test_profile_json_keeps_the_parts_and_csv_refuses_them(tmp_path):
    profile = worked(update_lump=MS, host_overhead=2 * MS)
    path = tmp_path / "p.json"
    profile.write(path)
    doc = json.loads(path.read_text())
    assert doc["step"] == {"update_lump": MS, "host_overhead": 2 * MS}
    assert Profile.read(path) == profile and Profile.read(path) != worked()
    with pytest.warns(UserWarning, match=r"step parts \(update_lump = 0.001 s, host_overhead = 0.002 s\) are not written"):
        write_profile_csv(profile, tmp_path / "p.csv")
    assert read_profile_csv(tmp_path / "p.csv") == worked()
    doc["step"]["idle"] = 1.0
    with pytest.raises(ValueError, match=r"'step' has an unknown part 'idle'"):
        Profile.from_dict(doc)
    with pytest.raises(ValueError, match=r"host_overhead must be a finite number of seconds >= 0, got -1.0"):
        worked(host_overhead=-1.0)
    assert profile.scaled(2.0).W == pytest.approx(6 * MS) and profile.tail(2).W == 0.0
    assert profile.with_step_parts(update_lump=0.0).W == pytest.approx(2 * MS)


@st.composite
def with_parts(draw, problem):
    """The same problem with random step parts (layerwise: the host's share only)."""
    part = st.one_of(st.just(0.0), st.floats(1e-6, 1e-2))
    parts = {"host_overhead": draw(part)}
    if problem.sync == "barrier":
        parts.update(update_lump=draw(part), post_backward=draw(part))
    return Problem(problem.profile.with_step_parts(**parts), problem.cost, sync=problem.sync)


def shifted(a, b, w):
    return a + w == pytest.approx(b, rel=1e-9, abs=1e-12)


@settings(deadline=None, max_examples=40)
@given(data=st.data(), problem=problems(max_n=6))
def test_every_evaluator_shifts_by_w(data, problem):
    parted = data.draw(with_parts(problem))
    w = parted.profile.W
    plan = data.draw(partition_plans(problem.profile))
    assert shifted(simulate(problem, plan).iteration_time, simulate(parted, plan).iteration_time, w)
    assert shifted(compute_pieces(problem, plan)[-1].end, compute_pieces(parted, plan)[-1].end, w)
    assert shifted(longest_path_time(problem, plan), longest_path_time(parted, plan), w)
    assert shifted(best_bound(problem, space="any"), best_bound(parted, space="any"), w)
    cuts = np.ones(problem.profile.n - 1, dtype=bool)
    assert shifted(fusion_iteration_time(problem, cuts), fusion_iteration_time(parted, cuts), w)
    contended = Problem(parted.profile, parted.cost, sync=parted.sync, contention=1.5)
    plain = Problem(problem.profile, problem.cost, sync=problem.sync, contention=1.5)
    assert shifted(simulate(plain, plan).iteration_time, simulate(contended, plan).iteration_time, w)


EXACT = ["dp", "brute", "milp", "cpsat"]
BASELINES = ["wfbp", "single", "ddp", "horovod", "mgwfbp"]
LAYERWISE = ["p3", "bytescheduler"]


@settings(deadline=None, max_examples=15)
@given(data=st.data(), problem=problems(max_n=5, cost=alpha_beta))
def test_solvers_shift_by_w_and_the_exact_ones_still_agree(data, problem):
    parted = data.draw(with_parts(problem))
    w = parted.profile.W
    methods = EXACT + BASELINES + (LAYERWISE if problem.sync == "layerwise" else [])
    optimum = None
    for method in methods:
        before, after = solve(problem, method), solve(parted, method)
        assert shifted(before.iteration_time, after.iteration_time, w), method
        assert shifted(simulate(parted, after.plan).iteration_time, after.iteration_time, 0.0), method
        if method in EXACT:
            # MILP and CP-SAT prove optimality with a layerwise slack only where they meet the DP.
            assert str(after.status) == str(before.status), method
            assert method not in ("dp", "brute") or str(after.status) == "OPTIMAL"
            optimum = after.iteration_time if optimum is None else optimum
            if str(after.status) == "OPTIMAL":
                assert shifted(optimum, after.iteration_time, 0.0), method
            assert shifted(before.lower_bound, after.lower_bound, w), method


@settings(deadline=None, max_examples=15)
@given(data=st.data(), problem=problems(max_n=4, cost=alpha_beta))
def test_parameter_server_shifts_by_w(data, problem):
    ps = ParameterServer(problem.cost)
    plain = Problem(problem.profile, pattern=ps, sync=problem.sync)
    parted = Problem(data.draw(with_parts(problem)).profile, pattern=ps, sync=problem.sync)
    w = parted.profile.W
    plan = PSPlan.from_groups(plain.profile, push=[[i] for i in range(plain.profile.n - 1, -1, -1)],
                              pull=[[i] for i in range(plain.profile.n)])
    assert shifted(simulate(plain, plan).iteration_time, simulate(parted, plan).iteration_time, w)
    assert shifted(longest_path_time(plain, plan), longest_path_time(parted, plan), w)
    for method in ("ps-default", "ps-dp", "ps-cpsat", "ipart"):
        assert shifted(solve(plain, method).iteration_time, solve(parted, method).iteration_time, w), method
