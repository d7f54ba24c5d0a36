"""The decoupled all-reduce (MODEL.md section 8.1): problems, plans and their timing."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import costs, partition_plans, profiles

from fusionopt.cost import AlphaBeta, network
from fusionopt.model import Decoupled, DecoupledPlan, Plan, Problem, Profile, compute_pieces, simulate

MS = 1e-3
HALF = AlphaBeta(MS, 1e-9)                               # 1 ms + 1 ns/B each way


def section5(sync="layerwise", update=None, host=0.0):
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS], update=update,
                                  host_overhead=host)
    return Problem(profile, pattern=Decoupled(HALF, HALF), sync=sync)


def ms(values):
    return [round(v / MS, 9) for v in np.asarray(values).tolist()]


def test_hand_worked_layerwise_and_barrier():
    # Gradients ready at 1, 3, 6 ms. Reduce-scatters 1-4 (2 MB), 4-6 (1 MB), 6-11 (4 MB); no
    # update time, so v = (11, 6, 6). Per-tensor all-gathers in forward order: t0 waits for
    # v_0 = 11: 11-16, then 16-18 and 18-21.
    problem = section5()
    plan = DecoupledPlan.from_groups(problem.profile, [[2], [1], [0]], [[0], [1], [2]])
    t = simulate(problem, plan)
    assert t.message_kind.tolist() == [0, 0, 0, 1, 1, 1]
    assert ms(t.message_start) == [1, 4, 6, 11, 16, 18] and ms(t.message_end) == [4, 6, 11, 16, 18, 21]
    assert ms(t.reduced) == [11, 6, 4] and ms(t.updated) == [11, 6, 6] and ms(t.gathered) == [16, 18, 21]
    # Layerwise: forwards at 16, max(17, 18) = 18, max(19, 21) = 21; T = 22.
    assert ms(t.forward_start) == [16, 18, 21] and round(t.iteration_time / MS, 9) == 22
    # Barrier: the forward waits for the last all-gather: 21 + 3 = 24.
    barrier = simulate(section5("barrier"), plan)
    assert round(barrier.iteration_time / MS, 9) == 24 and ms(barrier.forward_start) == [21, 22, 23]
    assert t.exposed == pytest.approx(22 * MS - 9 * MS)


def test_updates_gate_the_all_gathers_and_releases_hold_messages():
    # Updates of 0.5, 2, 0.5 ms (t0, t1, t2) run after the backward in ready order (t2, t1,
    # t0): t2 from max(6, 4) to 6.5, t1 from max(6.5, 6) to 8.5, t0 from max(8.5, 11) to 11.5.
    # One all-gather of everything waits for 11.5: 11.5-19.5; T = 19.5 + 3 + 0.25 (host) = 22.75.
    problem = section5(update=[0.5 * MS, 2 * MS, 0.5 * MS], host=0.25 * MS)
    problem = Problem(problem.profile, pattern=problem.pattern, sync="layerwise")
    plan = DecoupledPlan.from_groups(problem.profile, [[2], [1], [0]], [[0, 1, 2]])
    t = simulate(problem, plan)
    assert ms(t.updated) == [11.5, 8.5, 6.5] and ms(t.message_end)[-1] == 19.5
    assert round(t.iteration_time / MS, 9) == 22.75
    pieces = compute_pieces(problem, plan)
    updates = [(p.tensor, round(p.start / MS, 9), round(p.end / MS, 9)) for p in pieces if p.kind == "update"]
    assert updates == [(2, 6, 6.5), (1, 6.5, 8.5), (0, 11, 11.5)]
    assert pieces[-1].kind == "host_overhead" and pieces[-1].end == t.iteration_time
    # A release of the first reduce-scatter at 2 ms delays it by 1 ms, and everything after.
    released = Plan.from_groups(problem.profile, [[2], [1], [0]], release=[2 * MS, 0.0, 0.0])
    later = simulate(problem, DecoupledPlan(released, plan.all_gather))
    assert ms(later.message_end)[:3] == [5, 7, 12]


def test_one_message_each_way_is_the_one_message_all_reduce():
    # Without update time, one reduce-scatter then one all-gather of everything is the
    # all-reduce of one message after the backward: c_RS + c_AG = c_AR.
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    decoupled = Decoupled.from_network("10gbe", 8)
    plan = DecoupledPlan.from_groups(profile, [[2, 1, 0]], [[0, 1, 2]])
    for sync in ("barrier", "layerwise"):
        t = simulate(Problem(profile, pattern=decoupled, sync=sync), plan)
        single = simulate(Problem(profile, network("10gbe", 8), sync=sync), Plan.from_groups(profile, [[2, 1, 0]]))
        assert t.iteration_time == pytest.approx(single.iteration_time, rel=1e-12)


def test_an_order_that_can_never_run_is_refused():
    problem = section5()
    # The all-gather of t1 first: its update waits for t2's and t1's reduce-scatters, behind it.
    plan = DecoupledPlan.from_groups(problem.profile, [[2], [1], [0]], [[1], [0], [2]], order=[1, 0, 0, 0, 1, 1])
    with pytest.raises(ValueError, match="^all-gather message 0 holds tensor 1, whose update waits for a "
                                         "reduce-scatter the plan sends after it"):
        simulate(problem, plan)
    # Interleaved where it can run: t2's all-gather right after the reduce-scatters that fix its update.
    ok = DecoupledPlan.from_groups(problem.profile, [[2], [1], [0]], [[2], [1], [0]], order=[0, 1, 0, 1, 0, 1])
    t = simulate(problem, ok)
    # t2: RS 1-4, v_2 = max(B = 6, 4) = 6, AG 6-9; t1: RS 9-11, v_1 = 11, AG 11-13; t0: RS 13-18, AG 18-23.
    assert ms(t.message_end) == [4, 9, 11, 13, 18, 23]


def test_bad_problems_and_plans_in_one_line():
    profile = Profile.from_arrays([8, 8], [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match=r"^pattern must be a Pattern \(AllReduce, ParameterServer, Decoupled or "
                                         r"FullySharded\), got AlphaBeta$"):
        Problem(profile, pattern=HALF)
    with pytest.raises(ValueError, match="^the decoupled all-reduce does not combine with channels"):
        Problem(profile, pattern=Decoupled(HALF, HALF), channels=2)
    with pytest.raises(ValueError, match="^a decoupled problem is priced by its reduce-scatter and all-gather costs"):
        Problem(profile, HALF, pattern=Decoupled(HALF, HALF))
    lump = Profile.from_arrays([8, 8], [1.0, 1.0], [1.0, 1.0], update_lump=1.0)
    with pytest.raises(ValueError, match="has update_lump time; a decoupled all-reduce updates each tensor's shard"):
        Problem(lump, pattern=Decoupled(HALF, HALF))
    problem = Problem(profile, pattern=Decoupled(HALF, HALF))
    assert problem.extensions == ("decoupled",)
    with pytest.raises(ValueError, match="^a decoupled problem takes a DecoupledPlan, got Plan$"):
        simulate(problem, Plan.per_tensor(profile))
    with pytest.raises(ValueError, match=r"^an all-reduce problem takes a Plan, got DecoupledPlan; a DecoupledPlan is "
                                         r"for Problem\(profile, pattern=Decoupled\(\.\.\.\)\)$"):
        simulate(Problem(profile, HALF), DecoupledPlan.from_groups(profile, [[0, 1]], [[0, 1]]))
    with pytest.raises(ValueError, match="^all-gather plan: "):
        simulate(problem, DecoupledPlan(Plan.per_tensor(profile), Plan.from_groups(profile, [[0]])))
    with pytest.raises(ValueError, match="^order has 1 reduce-scatter and 0 all-gather entries; the plans have 1 and 1"):
        DecoupledPlan.from_groups(profile, [[0, 1]], [[0, 1]], order=[0])
    with pytest.raises(ValueError, match="^unknown reduce_with 'allreduce': choose 'reduce_scatter' or 'all_reduce'$"):
        DecoupledPlan(Plan.per_tensor(profile), Plan.per_tensor(profile), reduce_with="allreduce")
    # Gradients reduced by an all-reduce pay both halves: c_AG(16 B) more for the one message.
    each = DecoupledPlan.from_groups(profile, [[1, 0]], [[0, 1]])
    both = DecoupledPlan(each.reduce_scatter, each.all_gather, reduce_with="all_reduce")
    assert simulate(problem, both).iteration_time == pytest.approx(
        simulate(problem, each).iteration_time + HALF(16), rel=1e-12)


@st.composite
def decoupled_cases(draw):
    profile = draw(profiles(max_n=6))
    half = draw(costs)
    problem = Problem(profile, pattern=Decoupled(half, draw(st.one_of(st.just(half), costs))),
                      sync=draw(st.sampled_from(["barrier", "layerwise"])))
    return problem, DecoupledPlan(draw(partition_plans(profile)), draw(partition_plans(profile)))


@settings(deadline=None)
@given(decoupled_cases())
def test_timing_properties(case):
    problem, plan = case
    t = simulate(problem, plan)
    profile = problem.profile
    # Nothing beats the compute; every message waits for what it needs; layerwise never
    # waits longer than the barrier.
    assert t.iteration_time >= profile.compute_time * (1 - 1e-12) - 1e-15
    kinds = t.message_kind
    assert np.all(t.message_start >= t.message_ready) and np.all(np.diff(t.message_start) >= 0)
    assert np.all(t.updated >= t.reduced) and np.all(t.updated >= profile.B)
    assert math.isclose(float(t.message_end[kinds == 1].max()), float(t.gathered.max()))
    other = Problem(profile, pattern=problem.pattern, sync="barrier" if problem.sync == "layerwise" else "layerwise")
    lw, barrier = sorted([t.iteration_time, simulate(other, plan).iteration_time])
    assert lw <= barrier
    # The compute stream ends at T and its forwards start where the timeline says.
    pieces = compute_pieces(problem, plan)
    assert pieces[-1].end == pytest.approx(t.iteration_time, rel=1e-12, abs=1e-15)
    assert [p.start for p in pieces if p.kind == "forward"] == t.forward_start.tolist()


@settings(deadline=None)
@given(decoupled_cases(), st.floats(0, 5e-3))
def test_a_later_release_never_helps(case, delay):
    problem, plan = case
    base = simulate(problem, plan).iteration_time
    rs = plan.reduce_scatter
    released = Plan.from_table(rs.tensor, rs.lo, rs.hi, rs.starts, rs.release + delay)
    assert simulate(problem, DecoupledPlan(released, plan.all_gather)).iteration_time >= base * (1 - 1e-12)


@settings(deadline=None)
@given(decoupled_cases())
def test_the_lower_bound_holds_for_every_plan(case):
    from fusionopt.model import decoupled_lower_bound
    problem, plan = case
    assert decoupled_lower_bound(problem) <= simulate(problem, plan).iteration_time * (1 + 1e-12) + 1e-15


def test_the_lower_bound_by_hand():
    from fusionopt.model import decoupled_lower_bound
    # Layerwise: t0 (4 MB) is ready at B = 6; its reduce-scatter takes >= 5 ms, so V = 11;
    # its all-gather >= 5 ms and its forward suffix 3 ms: 19; the channel after 6 ms carries
    # t0's reduce-scatter (5) and all 7 MB of all-gathers (8): 19, plus t2's forward: 20.
    assert round(decoupled_lower_bound(section5()) / MS, 9) == 20
    # Barrier: 6 + 5 + 8 + F = 22, met by one all-gather of everything after per-tensor
    # reduce-scatters (19 + 3).
    barrier = section5("barrier")
    assert round(decoupled_lower_bound(barrier) / MS, 9) == 22
    plan = DecoupledPlan.from_groups(barrier.profile, [[2], [1], [0]], [[0, 1, 2]])
    assert round(simulate(barrier, plan).iteration_time / MS, 9) == 22


def test_update_after_gather_by_hand():
    # DeAR: the all-gathers carry reduced gradients and each tensor is updated just before its
    # forward. Updates of 0.5, 2, 0.5 ms; per-tensor reduce-scatters end at 4, 6, 11 ms (D =
    # 11, 6, 4); per-tensor all-gathers in forward order wait only for them: 11-16, 16-18, 18-21.
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS], update=[0.5 * MS, 2 * MS, 0.5 * MS])
    problem = Problem(profile, pattern=Decoupled(HALF, HALF, update_after_gather=True), sync="layerwise")
    plan = DecoupledPlan.from_groups(profile, [[2], [1], [0]], [[0], [1], [2]])
    t = simulate(problem, plan)
    assert ms(t.message_end) == [4, 6, 11, 16, 18, 21]
    # Updates then forwards: t0 16 -> 16.5, forward 16.5 -> 17.5; t1 waits for 18: 18 -> 20,
    # forward 20 -> 21; t2 21 -> 21.5, forward 21.5 -> 22.5.
    assert ms(t.updated) == [16.5, 20, 21.5] and ms(t.forward_start) == [16.5, 20, 21.5]
    assert round(t.iteration_time / MS, 9) == 22.5
    # Barrier: every update after the last all-gather (21 + 3), then the forward: 27.
    barrier = Problem(profile, pattern=problem.pattern, sync="barrier")
    assert round(simulate(barrier, plan).iteration_time / MS, 9) == 27
    # Its all-gathers wait for reduce-scatters, not updates: one queued before them is refused.
    early = DecoupledPlan.from_groups(profile, [[2], [1], [0]], [[2], [1], [0]], order=[0, 1, 0, 1, 0, 1])
    assert ms(simulate(problem, early).message_end) == [4, 7, 9, 11, 16, 21]
    stuck = DecoupledPlan.from_groups(profile, [[2], [1], [0]], [[0], [1], [2]], order=[1, 0, 0, 0, 1, 1])
    with pytest.raises(ValueError, match="^all-gather message 0 holds tensor 0, whose reduce-scatter the plan sends after it"):
        simulate(problem, stuck)


@st.composite
def after_cases(draw):
    problem, plan = draw(decoupled_cases())
    halves = problem.pattern
    return Problem(problem.profile, pattern=Decoupled(halves.reduce_scatter, halves.all_gather, True),
                   sync=problem.sync), plan


@settings(deadline=None)
@given(after_cases())
def test_update_after_gather_properties(case):
    from fusionopt.model import decoupled_lower_bound
    problem, plan = case
    t = simulate(problem, plan)
    assert decoupled_lower_bound(problem) <= t.iteration_time * (1 + 1e-12) + 1e-15
    assert np.all(t.updated >= t.gathered)
    pieces = compute_pieces(problem, plan)
    assert pieces[-1].end == pytest.approx(t.iteration_time, rel=1e-12, abs=1e-15)
    # Without update time the two semantics give the same T (every reduce-scatter first).
    if problem.profile.U == 0:
        before = Problem(problem.profile, pattern=Decoupled(problem.pattern.reduce_scatter,
                                                              problem.pattern.all_gather), sync=problem.sync)
        assert simulate(before, plan).iteration_time == pytest.approx(t.iteration_time, rel=1e-12, abs=1e-15)


def test_plans_round_trip_through_json_and_bad_files_name_themselves(tmp_path):
    profile = Profile.from_arrays([8, 8], [1.0, 1.0], [1.0, 1.0])
    plan = DecoupledPlan.from_groups(profile, [[1], [0]], [[0, 1]], order=[0, 1, 0], reduce_with="all_reduce")
    path = tmp_path / "plan.json"
    plan.write(path)
    assert DecoupledPlan.read(path) == plan
    doc = plan.to_dict()
    with pytest.raises(ValueError, match=r"^x.json: schema is 'fusionopt.plan', expected 'fusionopt.decoupledplan'$"):
        DecoupledPlan.from_dict({**doc, "schema": "fusionopt.plan"}, source="x.json")
    with pytest.raises(ValueError, match=r"^x.json: 'order' must be a list of 0 \(reduce-scatter\) and 1 \(all-gather\)$"):
        DecoupledPlan.from_dict({**doc, "order": "010"}, source="x.json")
    with pytest.raises(ValueError, match=r"^x.json: order has 1 reduce-scatter and 2 all-gather entries"):
        DecoupledPlan.from_dict({**doc, "order": [0, 1, 1]}, source="x.json")
    with pytest.raises(ValueError, match=r"^x.json: no 'all_gather' plan$"):
        DecoupledPlan.from_dict({k: v for k, v in doc.items() if k != "all_gather"}, source="x.json")
    with pytest.raises(ValueError, match=r"^x.json: unknown key 'reduce-with'$"):
        DecoupledPlan.from_dict({**doc, "reduce-with": "all_reduce"}, source="x.json")
    # Release times travel with the plan, and change its T.
    released = DecoupledPlan(Plan.from_groups(profile, [[1], [0]], release=[5.0, 0.0]), plan.all_gather)
    problem = Problem(profile, pattern=Decoupled(HALF, HALF))
    back = DecoupledPlan.from_dict(released.to_dict())
    assert back == released and simulate(problem, back).iteration_time == simulate(problem, released).iteration_time
    assert simulate(problem, back).iteration_time > simulate(problem, DecoupledPlan.from_groups(
        profile, [[1], [0]], [[0, 1]])).iteration_time
    with pytest.raises(ValueError, match="^a decoupled problem is priced by its reduce-scatter and all-gather costs"):
        Problem(profile, HALF, pattern=Decoupled(HALF, HALF))


def test_the_bound_holds_when_gathers_run_before_the_backward_ends():
    # Updating after the gathers, an all-gather waits for its reduce-scatter only. t2 (4 MB) is
    # ready at 1 ms and t1 (4 MB) at 2 ms, t0 (0.1 MB) at B = 22 ms: t2 goes 1-6 and 6-11, t1
    # 11-16 and 16-21, all before B; t0 22-23.1 and 23.1-24.2; barrier T = 24.2 + 3 = 27.2 ms.
    # Only t0's bytes must cross the channel after B: the bound is B + 1.1 + 1.1 + 3 = 27.2,
    # met; counting every all-gather byte after B (35.2 ms) would exceed T.
    from fusionopt.model import decoupled_lower_bound
    profile = Profile.from_arrays([1e5, 4e6, 4e6], [MS] * 3, [20 * MS, MS, MS])
    problem = Problem(profile, pattern=Decoupled(HALF, HALF, update_after_gather=True), sync="barrier")
    plan = DecoupledPlan.from_groups(profile, [[2], [1], [0]], [[2], [1], [0]], order=[0, 1, 0, 1, 0, 1])
    t = simulate(problem, plan)
    assert ms(t.message_end) == [6, 11, 16, 21, 23.1, 24.2] and round(t.iteration_time / MS, 9) == 27.2
    assert decoupled_lower_bound(problem) == pytest.approx(t.iteration_time, rel=1e-12)
    assert profile.B + HALF(1e5) + HALF(9e6 - 0.9e6) + profile.F > t.iteration_time


@st.composite
def interleaved_after_cases(draw):
    problem, plan = draw(after_cases())
    # Each tensor's all-gather right after its reduce-scatter, in ready order: it can always run.
    profile = problem.profile
    order = list(profile.ready_order)
    pairs = DecoupledPlan.from_groups(profile, [[i] for i in order], [[i] for i in order],
                                      order=[k for _ in order for k in (0, 1)])
    return problem, pairs


@settings(deadline=None)
@given(interleaved_after_cases())
def test_the_bound_holds_for_interleaved_orders(case):
    from fusionopt.model import decoupled_lower_bound
    problem, plan = case
    assert decoupled_lower_bound(problem) <= simulate(problem, plan).iteration_time * (1 + 1e-12) + 1e-15


def test_megatron_mixed_precision_carries_what_its_buffers_hold():
    # Megatron-LM's defaults in bf16: gradients reduced in bf16, parameters gathered in bf16;
    # grad_reduce_in_fp32 carries the reduce-scatters in fp32. On c(S) = S ns, 4 MB cost 2 ms in
    # bf16 and 4 ms in fp32; the megatron plan on them is the same plan, judged on each.
    link = AlphaBeta(0.0, 1e-9)
    default = Decoupled.mixed_precision(link, link)
    fp32_grads = Decoupled.mixed_precision(link, link, grad_reduce_in_fp32=True)
    dear = Decoupled.mixed_precision(link, link, grad_reduce_in_fp32=True, update_after_gather=True)
    assert [round(c(4e6) * 1e3, 9) for c in (default.reduce_scatter, default.all_gather)] == [2.0, 2.0]
    assert [round(c(4e6) * 1e3, 9) for c in (fp32_grads.reduce_scatter, fp32_grads.all_gather)] == [4.0, 2.0]
    assert [round(c(4e6) * 1e3, 9) for c in (dear.reduce_scatter, dear.all_gather)] == [4.0, 4.0]
    assert Decoupled.mixed_precision(link, link, param_dtype="fp32") == Decoupled(link, link)
    assert Decoupled.from_dict(fp32_grads.to_dict()) == fp32_grads
    with pytest.raises(ValueError, match="^param_dtype must be one of fp32, fp16, bf16, got 'fp8'$"):
        Decoupled.mixed_precision(link, link, param_dtype="fp8")
