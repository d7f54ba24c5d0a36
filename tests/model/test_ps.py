"""The parameter-server model (MODEL.md section 6): hand-worked cases, plans, costs, bad input."""

import json

import numpy as np
import pytest

from fusionopt.checks import longest_path_time
from fusionopt.cost import AlphaBeta, PiecewiseLinear
from fusionopt.model import (
    Chunk, Message, Plan, Problem, Profile, simulate, optimal_fusion, ParameterServer, ps_cost, PSPlan,
    stream_offsets, offsets_iteration_time, simulate_ps, ps_lower_bound,
)

MS = 1e-3
MB = 1e6


def ms(values):
    return [round(float(v) / MS, 9) for v in values]


# ---------------------------------------------------------------------------- hand-worked
def two_tensors() -> Profile:
    # Forward order: t0 (4 MB, b 4 ms, f 2 ms), t1 (2 MB, b 2 ms, f 2 ms).
    return Profile.from_arrays([4 * MB, 2 * MB], [2 * MS, 2 * MS], [4 * MS, 2 * MS], ["t0", "t1"])


def two_tensor_server(partition_compute: bool = True) -> ParameterServer:
    # push 0.5 ms + 1 ms/MB, pull 0.5 ms + 0.5 ms/MB, server update 0.1 ms + 0.25 ms/MB,
    # delta 0.2 ms per compute piece.
    return ParameterServer(AlphaBeta(0.5 * MS, 1e-9), AlphaBeta(0.5 * MS, 0.5e-9),
                           update_per_byte=0.25e-9, update_overhead=0.1 * MS,
                           partition_compute=partition_compute, delta=0.2 * MS)


def two_tensor_plan(profile: Profile) -> PSPlan:
    # Push: t1 whole, then t0 in two halves. Pull: t0 [0, 1 MB), t0 [1, 4 MB), t1 whole:
    # the pull chunks of t0 do not match its push chunks.
    return PSPlan(
        Plan((Message((Chunk(1, 0, 2_000_000),)), Message((Chunk(0, 0, 2_000_000),)),
              Message((Chunk(0, 2_000_000, 4_000_000),)))),
        Plan((Message((Chunk(0, 0, 1_000_000),)), Message((Chunk(0, 1_000_000, 4_000_000),)),
              Message((Chunk(1, 0, 2_000_000),)))),
    )


def test_two_tensor_ps_with_partitioned_compute_by_hand():
    # Backward: t1 whole 0 -> 2 (push 0 ready at 2). t0 is pushed in two chunks, so its
    # backward is two pieces of 4 * 0.5 + 0.2 = 2.2 ms: 2 -> 4.2 (push 1), 4.2 -> 6.4 (push 2).
    # Push (0.5 + 2 = 2.5 ms each): 2 -> 4.5, 4.5 -> 7.0, 7.0 -> 9.5.
    # Server updates (0.1 + 0.5 ms each): 5.1, 7.6, 10.1.
    # Pull 0, t0 [0, 1 MB): needs push 1 only, 7.6 -> 8.6 (0.5 + 0.5).
    # Pull 1, t0 [1, 4 MB): needs pushes 1 and 2, 10.1 -> 12.1 (0.5 + 1.5).
    # Pull 2, t1: needs push 0 (5.1), waits for the channel, 12.1 -> 13.6 (0.5 + 1.0).
    # Forward (layerwise): t0 is pulled in two chunks, so two pieces: 2 * 0.25 + 0.2 = 0.7 ms
    # after pull 0, 8.6 -> 9.3; 2 * 0.75 + 0.2 = 1.7 ms after pull 1, 12.1 -> 13.8.
    # t1 whole after its pull and t0: 13.8 -> 15.8. T = 15.8 ms; deltas paid 4 * 0.2.
    profile = two_tensors()
    problem = Problem(profile, sync="layerwise", pattern=two_tensor_server())
    plan = two_tensor_plan(profile)
    t = simulate(problem, plan)
    assert ms(t.message_ready) == [2.0, 4.2, 6.4]
    assert ms(t.message_start) == [2.0, 4.5, 7.0]
    assert ms(t.message_end) == [4.5, 7.0, 9.5]
    assert ms(t.server_updated) == [5.1, 7.6, 10.1]
    assert ms(t.pull_ready) == [7.6, 10.1, 5.1]
    assert ms(t.pull_start) == [7.6, 10.1, 12.1]
    assert ms(t.pull_end) == [8.6, 12.1, 13.6]
    assert ms(t.reduced) == [12.1, 13.6]
    assert ms(t.forward_start) == [8.6, 13.8]
    assert round(t.iteration_time / MS, 9) == 15.8
    assert round(t.compute_overhead / MS, 9) == 0.8
    assert round(t.exposed / MS, 9) == 5.8                 # T - (B + F) = 15.8 - 10
    assert t.message_bytes.tolist() == [2_000_000] * 3
    assert t.pull_bytes.tolist() == [1_000_000, 3_000_000, 2_000_000]
    assert t.num_messages == 6 and round(t.communication_end / MS, 9) == 13.6
    assert round(t.busy / MS, 9) == 7.5 and round(t.pull_busy / MS, 9) == 4.5
    # The graph search, and the fast evaluator on the same plan as stream offsets.
    assert round(longest_path_time(problem, plan) / MS, 9) == 15.8
    assert PSPlan.from_offsets(profile, push=[2_000_000, 4_000_000], pull=[1_000_000, 4_000_000]) == plan
    assert round(offsets_iteration_time(problem, [2_000_000, 4_000_000], [1_000_000, 4_000_000]) / MS, 9) == 15.8


def test_two_tensor_ps_barrier_and_without_partitioned_compute():
    profile = two_tensors()
    plan = two_tensor_plan(profile)
    # Barrier: same channels; the forward waits for every pull: 13.6 + 2 + 2 = 17.6 ms.
    barrier = simulate(Problem(profile, pattern=two_tensor_server()), plan)
    assert ms(barrier.pull_end) == [8.6, 12.1, 13.6]
    assert round(barrier.iteration_time / MS, 9) == 17.6
    assert round(barrier.compute_overhead / MS, 9) == 0.4      # the forward is not split
    # Whole compute: t1 0 -> 2, t0 2 -> 6, both of t0's chunks ready at 6.
    # Pushes 2 -> 4.5, 6 -> 8.5, 8.5 -> 11; updated 5.1, 9.1, 11.6.
    # Pulls 9.1 -> 10.1, 11.6 -> 13.6, 13.6 -> 15.1. Forward: t0 after both of its pulls,
    # 13.6 -> 15.6; t1 15.6 -> 17.6.
    problem = Problem(profile, sync="layerwise", pattern=two_tensor_server(partition_compute=False))
    t = simulate(problem, plan)
    assert ms(t.message_end) == [4.5, 8.5, 11.0]
    assert ms(t.pull_end) == [10.1, 13.6, 15.1]
    assert ms(t.forward_start) == [13.6, 15.6]
    assert round(t.iteration_time / MS, 9) == 17.6
    assert t.compute_overhead == 0.0
    assert round(longest_path_time(problem, plan) / MS, 9) == 17.6


def test_backward_pieces_follow_the_push_order_inside_a_tensor():
    # One 4-byte tensor, b = 4 ms, pushed as [2, 4) then [0, 2): pieces of 2 ms (delta 0),
    # so [2, 4) is ready at 2 and [0, 2) at 4; with free pushes the messages end there.
    profile = Profile.from_arrays([4], [0.0], [4 * MS])
    ps = ParameterServer(AlphaBeta(0.0, 0.0), partition_compute=True)
    push = Plan((Message((Chunk(0, 2, 4),)), Message((Chunk(0, 0, 2),))))
    t = simulate(Problem(profile, pattern=ps), PSPlan.mirror(push))
    assert ms(t.message_ready) == [2.0, 4.0]


# ---------------------------------------------------------------------------- costs
def test_bytes_ps_cost_terms():
    # Separate servers: max(g, P g_server / K); co-located: g (P - 1) / K.
    g = 1e-9
    assert ps_cost(4, 4, 1e-5, g).beta == pytest.approx(g)
    assert ps_cost(8, 2, 1e-5, g).beta == pytest.approx(4 * g)
    assert ps_cost(8, 16, 1e-5, g).beta == pytest.approx(g)                 # workers' links bind
    assert ps_cost(8, 4, 1e-5, g, server_inverse_bandwidth=g / 4).beta == pytest.approx(g)
    assert ps_cost(8, 8, 1e-5, g, colocated=True).beta == pytest.approx(7 / 8 * g)
    assert ps_cost(8, 2, 1e-5, g, colocated=True).beta == pytest.approx(7 / 2 * g)
    assert ps_cost(1, 1, 1e-5, g, colocated=True)(1e6) == 0.0               # all local
    assert ps_cost(8, 2, 3e-5, g).alpha == 3e-5
    ps = ParameterServer.from_network("100gb-ib", 16, 4, colocated=True, delta=1e-5)
    assert ps.push.beta == pytest.approx(15 / 4 / 12.5e9) and ps.pull == ps.push
    assert (ps.workers, ps.servers, ps.colocated, ps.delta) == (16, 4, True, 1e-5)


@pytest.mark.parametrize("servers", [0, -2])
def test_servers_must_be_positive(servers):
    message = f"servers must be >= 1, got {servers}"
    with pytest.raises(ValueError, match=message):
        ps_cost(8, servers, 1e-5, 1e-9)
    with pytest.raises(ValueError, match=message):
        ParameterServer.from_network("10gbe", 8, servers)
    with pytest.raises(ValueError, match=message):
        ParameterServer(AlphaBeta(1e-5, 1e-9), servers=servers)


def test_other_bad_server_settings():
    with pytest.raises(ValueError, match="servers must be an integer >= 1, got 2.5"):
        ps_cost(8, 2.5, 1e-5, 1e-9)
    with pytest.raises(ValueError, match="workers must be >= 1, got 0"):
        ps_cost(0, 1, 1e-5, 1e-9)
    with pytest.raises(ValueError, match=r"servers \(9\) must be <= workers \(8\)"):
        ps_cost(8, 9, 1e-5, 1e-9, colocated=True)
    with pytest.raises(ValueError, match="share the workers' links"):
        ps_cost(8, 4, 1e-5, 1e-9, server_inverse_bandwidth=1e-9, colocated=True)
    with pytest.raises(ValueError, match="latency must be >= 0"):
        ps_cost(8, 4, -1e-5, 1e-9)
    with pytest.raises(ValueError, match="pull cost must be a CommCost"):
        ParameterServer(AlphaBeta(1e-5, 1e-9), pull=1e-9)
    with pytest.raises(ValueError, match="partition_compute must be True or False"):
        ParameterServer(AlphaBeta(1e-5, 1e-9), partition_compute="yes")


@pytest.mark.parametrize("name", ["delta", "update_per_byte", "update_overhead"])
def test_negative_overheads_are_refused(name):
    with pytest.raises(ValueError, match=f"^{name} must be >= 0, got -1e-06$"):
        ParameterServer(AlphaBeta(1e-5, 1e-9), **{name: -1e-6})
    with pytest.raises(ValueError, match=f"^{name} must be finite, got nan$"):
        ParameterServer(AlphaBeta(1e-5, 1e-9), **{name: float("nan")})


# ---------------------------------------------------------------------------- the problem
def test_problem_with_a_parameter_server():
    profile = two_tensors()
    ps = two_tensor_server()
    problem = Problem(profile, pattern=ps)
    assert problem.cost is ps.push and problem.extensions == ("ps",)
    assert problem.plain().pattern.name == "all-reduce" and problem.plain().cost is ps.push
    assert Problem(profile, AlphaBeta(0.5 * MS, 1e-9), pattern=ps).cost == ps.push
    with pytest.raises(ValueError, match="differs from the parameter server's push cost"):
        Problem(profile, AlphaBeta(1 * MS, 1e-9), pattern=ps)
    with pytest.raises(ValueError, match=r"does not combine with contention \(contention=2.0\)"):
        Problem(profile, pattern=ps, contention=2.0)
    with pytest.raises(ValueError, match="does not combine with channels"):
        Problem(profile, pattern=ps, channels=2)
    with pytest.raises(ValueError, match=r"pattern must be a Pattern \(AllReduce, ParameterServer, Decoupled or FullySharded\), got dict"):
        Problem(profile, pattern={"servers": 2})
    with pytest.raises(ValueError, match="cost must be a CommCost"):
        Problem(profile)
    with pytest.raises(ValueError, match=r"^pull cost: cost model Broken: c\(1 B\) = -1 s is negative$"):
        class Broken(PiecewiseLinear):
            def _evaluate(self, sizes):
                return np.where(sizes > 0, -1.0, 0.0)
        Problem(profile, pattern=ParameterServer(AlphaBeta(0, 0), Broken([1], [1.0])))
    # Plain-model solvers refuse it.
    with pytest.raises(ValueError, match="has ps on"):
        optimal_fusion(problem)
    assert "pattern=ParameterServer(" in repr(problem)


def test_simulate_wants_a_psplan_for_a_parameter_server_and_only_then():
    profile = two_tensors()
    ps_problem = Problem(profile, pattern=two_tensor_server())
    plan = Plan.per_tensor(profile)
    with pytest.raises(ValueError, match=r"needs a PSPlan \(push and pull plans\), got Plan; PSPlan.mirror"):
        simulate(ps_problem, plan)
    with pytest.raises(ValueError, match=r"an all-reduce problem takes a Plan, got PSPlan; a PSPlan is for Problem\(profile, pattern=ParameterServer"):
        simulate(Problem(profile, AlphaBeta(1e-3, 1e-9)), PSPlan.mirror(plan))
    assert simulate(ps_problem, PSPlan.mirror(plan)).iteration_time > 0


# ---------------------------------------------------------------------------- plans
def test_a_pull_plan_that_misses_or_repeats_bytes_is_named():
    profile = Profile.from_arrays([100, 50], [0, 0], [1, 1], ["w", "b"])
    push = Plan.from_groups(profile, [[1, 0]])
    problem = Problem(profile, pattern=ParameterServer(AlphaBeta(1e-3, 1e-9)))
    missing = PSPlan(push, Plan((Message((Chunk(1, 0, 50), Chunk(0, 0, 60))),)))
    with pytest.raises(ValueError, match=r"^pull plan: tensor 'w' \(index 0\): bytes \[60, 100\) are missing$"):
        simulate(problem, missing)
    repeated = PSPlan(push, Plan((Message((Chunk(1, 0, 50), Chunk(0, 0, 60))), Message((Chunk(0, 40, 100),)))))
    with pytest.raises(ValueError, match=r"^pull plan: tensor 'w' \(index 0\): bytes \[40, 60\) are repeated "
                                         r"\(messages 0 and 1\)$"):
        simulate(problem, repeated)
    bad_push = PSPlan(Plan.from_groups(profile, [[1]]), push)
    with pytest.raises(ValueError, match=r"^push plan: tensor 'w' \(index 0\): bytes \[0, 100\) are missing"):
        bad_push.validate(profile)


def test_a_program_that_pulls_before_pushing_is_named():
    profile = Profile.from_arrays([100, 50], [0, 0], [1, 1], ["w", "b"])
    with pytest.raises(ValueError, match=r"^step 0 pulls tensor 'b' \(index 1\) bytes \[0, 50\) before they "
                                         r"are pushed \(at step 1\)$"):
        PSPlan.from_steps(profile, [("pull", [(1, 0, 50)]), ("push", [(1, 0, 50), (0, 0, 100)]),
                                    ("pull", [(0, 0, 100)])])
    with pytest.raises(ValueError, match=r"^step 2 pulls tensor 'w' \(index 0\) bytes \[80, 100\), which no step pushes$"):
        PSPlan.from_steps(profile, [("push", [(1, 0, 50), (0, 0, 80)]), ("pull", [(1, 0, 50)]),
                                    ("pull", [(0, 0, 100)])])
    with pytest.raises(ValueError, match="step 1: unknown direction 'fetch'"):
        PSPlan.from_steps(profile, [("push", [(0, 0, 100)]), ("fetch", [(0, 0, 100)])])
    with pytest.raises(ValueError, match="the program has no pull step"):
        PSPlan.from_steps(profile, [("push", [(1, 0, 50), (0, 0, 100)])])
    # Pulls may follow their pushes anywhere later; the interleaving is not part of the plan.
    plan = PSPlan.from_steps(profile, [("push", [(1, 0, 50)]), ("push", [(0, 0, 30)]), ("pull", [(0, 0, 30)]),
                                       ("push", [(0, 30, 100)]), ("pull", [(0, 30, 100), (1, 0, 50)])])
    assert plan.push.groups() == [[1], [0], [0]] and plan.pull.groups() == [[0], [0, 1]]


def test_stream_offsets_build_contiguous_messages():
    profile = Profile.from_arrays([4, 1, 2], [0] * 3, [1] * 3)
    assert stream_offsets(profile, "push").tolist() == [3, 2, 0]
    layer = PSPlan.from_offsets(profile, push=[2, 3], pull=[4, 5])
    assert layer == PSPlan.from_groups(profile, push=[[2], [1], [0]], pull=[[0], [1], [2]])
    default = PSPlan.from_offsets(profile)
    assert default.push.groups() == [[2, 1, 0]] and default.pull.groups() == [[0, 1, 2]]
    cut = PSPlan.from_offsets(profile, pull=[2, 6])
    assert [[(c.tensor, c.lo, c.hi) for c in m.chunks] for m in cut.pull.messages] == \
        [[(0, 0, 2)], [(0, 2, 4), (1, 0, 1), (2, 0, 1)], [(2, 1, 2)]]
    with pytest.raises(ValueError, match=r"push offsets must increase strictly: offset 1 \(2\) follows 3"):
        PSPlan.from_offsets(profile, push=[3, 2])
    with pytest.raises(ValueError, match=r"pull offset 0 \(7\) must lie strictly inside the stream \(0, 7\)"):
        PSPlan.from_offsets(profile, pull=[7])
    with pytest.raises(ValueError, match="push offset 0 must be a whole number of bytes, got 1.5"):
        PSPlan.from_offsets(profile, push=[1.5])
    with pytest.raises(ValueError, match="unknown direction 'up'"):
        stream_offsets(profile, "up")


def test_psplan_json_round_trip_and_errors(tmp_path):
    profile = two_tensors()
    plan = two_tensor_plan(profile)
    path = tmp_path / "plan.json"
    plan.write(path)
    assert PSPlan.read(path) == plan
    doc = json.loads(path.read_text())
    assert doc["schema"] == "fusionopt.psplan" and doc["push"][0] == [[1, 0, 2_000_000]]
    Plan.per_tensor(profile).write(tmp_path / "allreduce.json")
    with pytest.raises(ValueError, match="schema is 'fusionopt.plan', expected 'fusionopt.psplan'"):
        PSPlan.read(tmp_path / "allreduce.json")
    with pytest.raises(ValueError, match="no 'pull' messages"):
        PSPlan.from_dict({"version": 1, "push": doc["push"]})
    with pytest.raises(ValueError, match=r"psplan: pull: messages\[0\]\[0\]: chunk of tensor 0: byte range \[5, 5\)"):
        PSPlan.from_dict({"version": 1, "push": doc["push"], "pull": [[[0, 5, 5]]]})
    with pytest.raises(ValueError, match="the pull plan must be a Plan, got list"):
        PSPlan(plan.push, [])


def test_fast_evaluator_and_bound_refuse_plain_problems():
    problem = Problem(two_tensors(), AlphaBeta(1e-3, 1e-9))
    with pytest.raises(ValueError, match="offsets_iteration_time needs a parameter-server problem"):
        offsets_iteration_time(problem)
    with pytest.raises(ValueError, match="ps_lower_bound needs a parameter-server problem"):
        ps_lower_bound(problem)
    with pytest.raises(ValueError, match="simulate_ps needs a parameter-server problem"):
        simulate_ps(problem, PSPlan.from_offsets(problem.profile))


def test_a_pull_waits_for_the_slowest_update_not_the_last_push():
    # One 1000-byte tensor pushed as [0, 900) and [900, 1000) on a nearly free channel;
    # updates take 1 us/B, so the first push is updated last: 1 ms + 0.9 ms vs 1 ms + 0.1 ms.
    # The single pull waits for the first: 1.9 -> 1.9 ms (free pull); forward 1.9 -> 2.9 ms.
    profile = Profile.from_arrays([1000], [MS], [MS])
    ps = ParameterServer(AlphaBeta(0.0, 0.0), AlphaBeta(0.0, 0.0), update_per_byte=1e-6)
    problem = Problem(profile, pattern=ps)
    t = simulate(problem, PSPlan.from_offsets(profile, push=[900]))
    assert ms(t.server_updated) == [1.9, 1.1] and ms(t.pull_ready) == [1.9]
    assert round(t.iteration_time / MS, 9) == 2.9
    assert round(offsets_iteration_time(problem, push=[900]) / MS, 9) == 2.9
    assert round(offsets_iteration_time(problem, push=[100, 900], pull=[50, 950]) / MS, 9) == \
        round(simulate(problem, PSPlan.from_offsets(profile, [100, 900], [50, 950])).iteration_time / MS, 9)
