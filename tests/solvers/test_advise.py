"""DDP and Horovod settings derived from a plan (fusionopt.advice._allreduce)."""

import pytest
from hypothesis import given, settings

from strategies import problems

from fusionopt import zoo
from fusionopt.cost import AlphaBeta, network
from fusionopt.model import Plan, Problem, Profile, simulate, ParameterServer
from fusionopt.solvers import solve
from fusionopt.advice import DDPSettings, HorovodSettings, ddp_settings, horovod_settings

MS = 1e-3
MiB = 2**20


def example_problem(alpha: float = 3 * MS) -> Problem:
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    return Problem(profile, AlphaBeta(alpha, 1e-9))


@pytest.fixture(scope="module")
def resnet_problem() -> Problem:
    return Problem(zoo.profile("resnet50"), network("10gbe", 64))


def check_ddp(problem: Problem, s: DDPSettings, plan: Plan) -> None:
    # Each setting's T is that of the buckets the ddp model (torch's rules) builds from it.
    r = solve(problem, "ddp", **s.arguments)
    assert s.iteration_time == r.iteration_time
    assert [list(b) for b in s.buckets] == r.plan.groups()
    default = solve(problem, "ddp").iteration_time
    recommended = s.list_iteration_time if s.bucket_cap_mb_list is not None else s.cap_iteration_time
    # The defaults are kept exactly when the recommendation gains less than min_gain of them.
    gain = default - recommended
    assert s.kept_defaults == (not (gain > 1e-9 * default and gain >= (s.min_gain - 1e-9) * default))
    if s.kept_defaults:
        assert s.arguments == {} and s.iteration_time == default
    if s.bucket_cap_mb_list is not None:
        # The list reproduces the plan exactly.
        assert solve(problem, "ddp", bucket_cap_mb_list=list(s.bucket_cap_mb_list)).plan.groups() == plan.groups()
        assert s.list_iteration_time == s.plan_iteration_time == simulate(problem, plan).iteration_time
        assert s.kept_defaults or s.iteration_time == s.list_iteration_time
    single = solve(problem, "ddp") if s.bucket_cap_mb is None else solve(problem, "ddp", bucket_cap_mb=s.bucket_cap_mb)
    assert s.cap_iteration_time == single.iteration_time
    unused = solve(problem, "ddp", find_unused_parameters=True, **s.arguments)
    assert s.find_unused_iteration_time == unused.iteration_time
    # The single cap is never worse than leaving it unset.
    assert s.default_iteration_time == default
    assert s.cap_iteration_time <= default * (1 + 1e-9)


def check_horovod(problem: Problem, s: HorovodSettings) -> None:
    r = solve(problem, "horovod", cycle_time=s.cycle_time_ms / 1e3, fusion_threshold_bytes=s.fusion_threshold_bytes,
              backend=s.backend)
    assert s.iteration_time == r.iteration_time
    assert s.messages == r.num_messages
    assert s.environment == {"HOROVOD_FUSION_THRESHOLD": str(s.fusion_threshold_bytes),
                             "HOROVOD_CYCLE_TIME": f"{s.cycle_time_ms:g}"}
    default = solve(problem, "horovod", backend=s.backend).iteration_time
    assert s.default_iteration_time == default
    assert s.iteration_time <= default * (1 + 1e-9)


def test_ddp_reproduces_the_dp_plan_of_the_worked_example():
    problem = example_problem()
    plan = solve(problem, "dp")
    s = ddp_settings(problem, plan.plan)
    check_ddp(problem, s, plan.plan)
    assert s.buckets == ((2,), (1, 0))
    assert s.plan_iteration_time == plan.iteration_time
    assert s.iteration_time == plan.iteration_time
    # t3 (2e6 B) closes at a cap in (0, 2e6]; t2 + t1 at one in (1e6, 5e6]: 1 MiB fits both.
    assert s.bucket_cap_mb_list == (1.0, 1.0)


def test_settings_on_resnet50_are_their_own_simulations(resnet_problem):
    plan = solve(resnet_problem, "dp").plan
    check_ddp(resnet_problem, ddp_settings(resnet_problem, plan), plan)
    check_horovod(resnet_problem, horovod_settings(resnet_problem, plan))
    cpu = horovod_settings(resnet_problem, plan, backend="gloo")
    check_horovod(resnet_problem, cpu)
    assert cpu.backend == "gloo"


def test_ddp_beats_the_default_when_small_buckets_pay(resnet_problem):
    # One big message is best here; 25 MiB buckets expose more communication (4.4% more T,
    # under the default min_gain: any gain counts with 0).
    s = ddp_settings(resnet_problem, solve(resnet_problem, "dp").plan, min_gain=0.0)
    assert s.iteration_time < s.default_iteration_time
    assert s.bucket_cap_mb is not None and s.cap_iteration_time < s.default_iteration_time
    # Every cap of the list turns into bytes the way torch does, and lands where it should.
    assert all(int(m * MiB) >= 1 for m in s.bucket_cap_mb_list)


def test_settings_from_a_per_tensor_plan():
    problem = example_problem(alpha=MS)
    plan = solve(problem, "wfbp").plan
    s = ddp_settings(problem, plan)
    check_ddp(problem, s, plan)
    assert s.bucket_cap_mb_list is not None        # one bucket per tensor is expressible
    check_horovod(problem, horovod_settings(problem, plan))


@settings(max_examples=25, deadline=None)
@given(problems(max_n=6))
def test_settings_hold_on_any_problem(problem):
    plan = solve(problem, "dp").plan if not problem.extensions else solve(problem, "wfbp").plan
    s = ddp_settings(problem, plan)
    check_ddp(problem, s, plan)
    assert s.bucket_cap_mb_list is not None        # single dtype: every fusion plan is expressible
    check_horovod(problem, horovod_settings(problem, plan))


def test_to_dict_is_plain_json():
    import json

    problem = example_problem()
    plan = solve(problem, "dp").plan
    ddp = ddp_settings(problem, plan).to_dict()
    hvd = horovod_settings(problem, plan).to_dict()
    assert json.loads(json.dumps(ddp))["buckets"] == [[2], [1, 0]]
    assert set(json.loads(json.dumps(hvd))["environment"]) == {"HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME"}


@pytest.mark.parametrize("advise", [ddp_settings, horovod_settings])
def test_bad_input(advise):
    problem = example_problem()
    plan = solve(problem, "dp").plan
    with pytest.raises(ValueError, match="problem must be a Problem, got Plan"):
        advise(plan, plan)
    with pytest.raises(ValueError, match="^an all-reduce problem takes a Plan, got list$"):
        advise(problem, [[2], [1, 0]])
    with pytest.raises(ValueError, match="missing"):
        advise(problem, Plan.from_groups(problem.profile, [[2, 1]]))
    ps = Problem(problem.profile, pattern=ParameterServer(AlphaBeta(MS, 1e-9), servers=1, workers=2))
    with pytest.raises(ValueError, match="all-reduce problem"):
        advise(ps, plan)


def test_under_an_aligned_cost_the_advice_pads_and_says_so():
    from fusionopt.cost import Aligned

    # Sizes that break a 2 x 64-byte alignment: 4,000,004, 1,000,000 and 2,000,002 B. The DP
    # sends each alone (alpha = 1 ms); each bucket gains what rounds it up to 128 B.
    sizes = [4_000_004, 1_000_000, 2_000_002]
    profile = Profile.from_arrays(sizes, [MS] * 3, [3 * MS, 2 * MS, MS])
    cost = Aligned(AlphaBeta(MS, 1e-9), ranks=2, unit=64, slowdown=3.0, padded=True)
    problem = Problem(profile, cost)
    s = ddp_settings(problem, solve(problem, "dp").plan)
    assert s.buckets == ((2,), (1,), (0,)) and s.alignment_unit == 64
    assert s.padding == (126, 64, 124)                   # (-S) mod 128 for 2,000,002, 1,000,000, 4,000,004
    assert s.hook == "fusionopt.integrations.padded_comm_hook(unit=64)"
    # T prices the padded buckets: the plain price of the padded sizes.
    padded = Problem(profile, AlphaBeta(MS, 1e-9))
    assert s.iteration_time == pytest.approx(simulate(problem, Plan.from_groups(profile, [[2], [1], [0]]))
                                             .iteration_time, rel=1e-12)
    assert s.iteration_time > simulate(padded, Plan.from_groups(profile, [[2], [1], [0]])).iteration_time
    doc = s.to_dict()
    assert doc["padding"] == [126, 64, 124] and doc["hook"] == s.hook
    # Aligned sizes need no padding, and no hook; a plain cost says nothing of alignment.
    aligned = Profile.from_arrays([128 * 31_250, 128 * 7_813, 128 * 15_625], [MS] * 3, [3 * MS, 2 * MS, MS])
    s = ddp_settings(Problem(aligned, cost), solve(Problem(aligned, cost), "dp").plan)
    assert set(s.padding) == {0} and s.hook is None and s.alignment_unit == 64
    s = ddp_settings(Problem(profile, AlphaBeta(MS, 1e-9)), solve(Problem(profile, AlphaBeta(MS, 1e-9)), "dp").plan)
    assert s.padding == () and s.hook is None and s.alignment_unit is None


def test_ddp_settings_under_powersgd_refuse_in_one_line():
    from fusionopt.cost import PowerSGD

    prof = Profile.from_arrays([4194304, 1048576, 1024], [1e-3] * 3, [1e-3] * 3, ["w2", "w1", "b"],
                               shapes=[(1024, 1024), (256, 1024), (256,)])
    problem = Problem(prof, AlphaBeta(1e-3, 1e-9))
    hook = PowerSGD(rank=4)
    priced = hook.priced(problem)
    with pytest.raises(ValueError, match="^powersgd must be a PowerSGD, got int$"):
        ddp_settings(problem, solve(priced, "dp").plan, powersgd=4)
    # A plan of the gradients' bytes is not a plan of the priced problem: named as such.
    with pytest.raises(ValueError, match="tensor 'w2'"):
        ddp_settings(problem, solve(problem, "dp").plan, powersgd=hook)
    cut = Plan.from_groups(priced.profile, [[0], [1], [2]])       # forward order: not DDP's ready order
    with pytest.raises(ValueError, match="^the plan cuts tensors or leaves the ready order, and torch's powerSGD_hook"):
        ddp_settings(problem, cut, powersgd=hook)
    with pytest.raises(ValueError, match="copy_cost on"):
        ddp_settings(Problem(prof, AlphaBeta(1e-3, 1e-9), copy_cost=1e-9), solve(priced, "dp").plan, powersgd=hook)
