"""Default comparison tables: methods that do not apply are left out with their reason, an
exact method's optimum bounds the plans of its space, a bound that says nothing about the
communication gives no gap, measured costs are named briefly, and sweeps run the decoupled
and fully sharded methods.

The hand-worked profile is MODEL.md section 5's: tensors of 4, 1 and 2 MB (forward order),
forward 1 ms each, backward 3, 2, 1 ms: ready at 6, 3 and 1 ms, B = 6 ms, F = 3 ms.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusionopt import zoo
from fusionopt.cli import main
from fusionopt.cost import AlphaBeta, PiecewiseLinear
from fusionopt.model import Decoupled, FullySharded, Problem, Profile, ParameterServer
from fusionopt.solvers import compare, format_table, solve, INFORMATIVE_SHARE
from fusionopt.solvers.exact import in_grouping_space
from fusionopt.solvers import comparison_candidates, with_bound
from fusionopt.experiments import cells, run_cell
from tests.strategies import alpha_beta, costs, profiles

MS = 1e-3
# A measured curve: 0.1 ms at 1 kB, 100 ms at 100 MB, straight between (about 1 ns/B).
CURVE = PiecewiseLinear([1e3, 1e8], [1e-4, 0.1])


def section5(update=None) -> Profile:
    return Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS], update=update,
                               names=["a.weight", "b.weight", "c.weight"])


def curve(nbytes: float) -> float:
    """CURVE by hand for 1 kB or more: 0.1 ms plus the slope of its one segment."""
    return 1e-4 + (nbytes - 1e3) * (0.1 - 1e-4) / (1e8 - 1e3)


def run(capsys, *argv) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def write_curve(path, collective: str):
    """CURVE as a cost file that ``fusionopt calibrate --collective`` would write."""
    document = CURVE.to_dict()
    document["calibration"] = {"backend": "local", "ranks": 4, "collective": collective}
    path.write_text(json.dumps(document))
    return path


def assert_rule(table, problem) -> None:
    """Every candidate of the default table is a row or left out with a line naming it."""
    ran = [r.method for r in table]
    assert set(ran).isdisjoint(table.left_out)
    assert sorted(ran + list(table.left_out)) == sorted(comparison_candidates(problem))
    for name, reason in table.left_out.items():
        assert reason.startswith(name) and "\n" not in reason
    noted = [line.split()[2].rstrip(":") for line in format_table(table).splitlines() if line.startswith("left out: ")]
    assert noted == list(table.left_out)


# ---------------------------------------------------------------------- methods that do not apply
def test_update_after_gather_leaves_megatron_and_zero2_out_instead_of_failing():
    # Updates of 0.1 ms after the gathers: Megatron and ZeRO-2 update in the optimiser step.
    problem = Problem(section5(update=[1e-4] * 3), pattern=Decoupled(AlphaBeta(MS, 1e-9), AlphaBeta(MS, 1e-9),
                                                                       update_after_gather=True))
    table = compare(problem)
    assert_rule(table, problem)
    assert {"megatron", "zero2"} <= set(table.left_out)
    assert "updates after the gathers" in table.left_out["megatron"]
    assert table.refused == ("megatron", "zero2")
    assert [r.method for r in table] == ["decoupled-wfbp", "decoupled-opt", "decoupled-dp"]


def test_a_method_named_explicitly_that_does_not_apply_is_refused():
    problem = Problem(section5(update=[1e-4] * 3), pattern=Decoupled(AlphaBeta(MS, 1e-9), AlphaBeta(MS, 1e-9),
                                                                       update_after_gather=True))
    with pytest.raises(ValueError, match="megatron updates in the optimiser step"):
        compare(problem, ["decoupled-wfbp", "megatron"])


def patterns() -> list[tuple[str, Problem]]:
    half = AlphaBeta(MS, 1e-9)
    timed = section5(update=[1e-4] * 3)
    return [
        ("all-reduce", Problem(section5(), half)),
        ("all-reduce, layerwise, copy cost", Problem(section5(), half, sync="layerwise", copy_cost=1e-11)),
        ("parameter server", Problem(section5(), pattern=ParameterServer(half, servers=2))),
        ("decoupled", Problem(timed, pattern=Decoupled(half, half))),
        ("decoupled, layerwise, updates after gathers",
         Problem(timed, sync="layerwise", pattern=Decoupled(half, half, update_after_gather=True))),
        ("decoupled, layerwise, updates in the step", Problem(timed, sync="layerwise", pattern=Decoupled(half, half))),
        ("fully sharded, measured", Problem(section5(), pattern=FullySharded(CURVE, CURVE))),
    ]


@pytest.mark.parametrize("label, problem", patterns(), ids=[label for label, _ in patterns()])
def test_every_default_table_runs_or_notes_each_candidate(label, problem):
    table = compare(problem)
    assert_rule(table, problem)
    assert len(table) >= 2


def test_the_declarations_and_the_refusals_give_their_reasons():
    half = AlphaBeta(MS, 1e-9)
    timed = section5(update=[1e-4] * 3)
    layerwise = compare(Problem(section5(), half, sync="layerwise", copy_cost=1e-11))
    assert layerwise.left_out["dp"] == "dp: plain model only, and this problem has copy_cost"
    barrier = compare(Problem(section5(), half))
    assert barrier.left_out["p3"] == "p3: for sync='layerwise' only" and barrier.refused == ()
    # DeAR updates each module after its gather: with updates in the step it refuses.
    step = compare(Problem(timed, sync="layerwise", pattern=Decoupled(half, half)))
    assert step.refused == ("dear",) and "update_after_gather=True" in step.left_out["dear"]


def test_inductor_is_left_out_on_a_measured_cost_and_the_table_still_runs():
    problem = Problem(zoo.profile("alexnet"), pattern=FullySharded(CURVE, CURVE))
    table = compare(problem)
    assert "inductor" in table.refused and "bucket_cap_mb" in table.left_out["inductor"]
    assert {"sharded-wfbp", "fsdp2", "zero3"} <= {r.method for r in table}
    # with a cap given it runs on the same measured cost
    assert solve(problem, "inductor", bucket_cap_mb=25).iteration_time > 0


def test_the_measured_cost_workflow_of_the_command_line(capsys, tmp_path):
    rs = write_curve(tmp_path / "RS.json", "reduce_scatter")
    ag = write_curve(tmp_path / "AG.json", "all_gather")
    for pattern in ("--fully-sharded", "--decoupled"):
        status, out, err = run(capsys, "compare", "--model", "alexnet", pattern,
                               "--reduce-scatter-cost", rs, "--all-gather-cost", ag)
        assert status == 0, err
        network = next(line for line in out.splitlines() if line.startswith("network"))
        assert "measured (RS.json: piecewise linear through 2 points, 1000 B to 95.37 MiB)" in network
        assert "measured (AG.json:" in network and len(network) < 250
    status, out, err = run(capsys, "compare", "--model", "alexnet", "--fully-sharded",
                           "--reduce-scatter-cost", rs, "--all-gather-cost", ag, "--json")
    assert status == 0 and "fsdp2" in {row["method"] for row in json.loads(out)}
    assert err.startswith("fusionopt: compare: left out: inductor:") and err.count("\n") == 1


def test_the_update_after_gather_table_of_the_command_line(capsys, tmp_path):
    path = tmp_path / "timed.json"
    section5(update=[1e-4] * 3).write(path)
    status, out, err = run(capsys, "compare", "--profile", path, "--decoupled", "--update-after-gather",
                           "--alpha", "0.001", "--beta", "1e-9")
    assert status == 0, err
    assert "left out: megatron updates in the optimiser step" in out
    status, out, err = run(capsys, "compare", "--profile", path, "--decoupled", "--update-after-gather",
                           "--alpha", "0.001", "--beta", "1e-9", "--methods", "decoupled-wfbp,megatron")
    assert status == 2 and err.startswith("fusionopt: error: megatron updates") and err.count("\n") == 1


# ---------------------------------------------------------------------- the decoupled table
def test_the_decoupled_tables_hold_decoupled_dp_and_dear():
    half = AlphaBeta(MS, 1e-9)
    barrier = compare(Problem(section5(), pattern=Decoupled(half, half)))
    assert "decoupled-dp" in {r.method for r in barrier} and "dear" in barrier.left_out
    layerwise = compare(Problem(section5(), sync="layerwise", pattern=Decoupled(half, half)))
    assert {"decoupled-dp", "dear"} <= {r.method for r in layerwise}


def test_decoupled_dp_is_left_out_with_its_reason_where_the_groupings_do_not_separate():
    # Tensor 0 takes no backward time: ready with tensor 1 at 3 ms, and after it in the
    # ready order; layerwise sync, so the DP does not apply.
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [0.0, 2 * MS, MS], ready_order=[2, 0, 1])
    half = AlphaBeta(MS, 1e-9)
    table = compare(Problem(profile, sync="layerwise", pattern=Decoupled(half, half)))
    assert "decoupled-dp" in table.refused
    assert table.left_out["decoupled-dp"].startswith("decoupled-dp is exact where the groupings separate")


def test_the_exact_optimum_bounds_the_plans_of_its_space_by_hand():
    # Barrier, no update time, measured halves: decoupled-dp's optimum is E + c(7 MB) + F with
    # E the end of the best reduce-scatters: t2 at 1 ms, t1 after it, t0 at 6 ms.
    problem = Problem(section5(), pattern=Decoupled(CURVE, CURVE))
    end = 6 * MS + curve(4e6)                        # t2 and t1 are done before t0 is ready
    assert 1 * MS + curve(2e6) + curve(1e6) < 6 * MS
    optimum = end + curve(7e6) + 3 * MS
    assert optimum == pytest.approx(20.187 * MS, abs=1e-6)
    rows = {r.method: r for r in compare(problem)}
    assert rows["decoupled-dp"].iteration_time == pytest.approx(optimum, rel=1e-12)
    opt = rows["decoupled-opt"]
    assert opt.iteration_time == pytest.approx(optimum, rel=1e-12)
    assert (opt.status, opt.gap, opt.bound_from) == ("OPTIMAL", 0.0, "decoupled-dp")
    wfbp = rows["decoupled-wfbp"]              # one message per tensor: in the space, above the optimum
    assert wfbp.bound_from == "decoupled-dp" and wfbp.status == "FEASIBLE"
    assert wfbp.gap == pytest.approx((wfbp.iteration_time - optimum) / optimum, rel=1e-9)
    # Megatron's gathers are released after the step: not a plan of the space, its own bound
    # (the model's: after B = 6 ms the reduce-scatters of t0's 4 MB and the all-gathers of all
    # 7 MB, each at least its bytes times the curve's least cost per byte, which on this one
    # rising segment is that of the whole, c(4 MB) and c(7 MB); then F), not the optimum's
    # label, though here it meets it.
    megatron = rows["megatron"]
    assert megatron.bound_from is None
    assert megatron.lower_bound == pytest.approx(6 * MS + curve(4e6) + curve(7e6) + 3 * MS, rel=1e-12)


@settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(profiles(max_n=5), st.one_of(alpha_beta, costs), st.one_of(alpha_beta, costs),
       st.sampled_from(["barrier", "layerwise"]), st.booleans())
def test_an_exact_bound_is_the_brute_force_optimum_for_the_plans_of_the_space(profile, rs, ag, sync, after):
    problem = Problem(profile, sync=sync, pattern=Decoupled(rs, ag, update_after_gather=after))
    table = compare(problem)
    optimum = solve(problem, "decoupled-brute").iteration_time
    for row in table:
        plan = solve(problem, row.method).plan
        if row.bound_from is not None:                    # an exact method's optimum, over its space
            assert in_grouping_space(problem, plan)
            assert row.lower_bound == pytest.approx(optimum, rel=1e-9)
        if in_grouping_space(problem, plan) and "decoupled-dp" not in table.left_out:
            assert row.lower_bound == pytest.approx(optimum, rel=1e-9)
            assert (row.status == "OPTIMAL") == (row.iteration_time <= optimum * (1 + 1e-9))
        elif row.bound_from is None:
            assert row.lower_bound == solve(problem, row.method).lower_bound


def test_a_plan_below_a_bound_claimed_for_it_is_an_error():
    problem = Problem(section5(), AlphaBeta(MS, 1e-9))
    result = solve(problem, "wfbp")
    with pytest.raises(AssertionError, match="below the bound"):
        with_bound(result, result.iteration_time * 1.01, source="nowhere")


# ---------------------------------------------------------------------- bounds that say nothing
def test_a_bound_that_misses_the_communication_gives_no_gap():
    # The parameter server's channel bound counts the 7 MB pushed on the measured curve,
    # c(7 MB) = 7.09 ms from the first ready tensor at 1 ms, but under layerwise sync only the
    # last tensor's forward (1 ms) surely follows: 9.19 ms, below the last chunk's bound
    # B + 2 c(1) + F = 9.2 ms, which covers 0.2 of the best plan's 9.29 ms of communication,
    # so those gaps say nothing and are shown as "-".
    measured = compare(Problem(section5(), pattern=ParameterServer(CURVE), sync="layerwise"))
    rows = {r.method: r for r in measured}
    best = min(r.iteration_time for r in measured)
    compute = 9 * MS                                          # B + F
    assert measured.compute_time == pytest.approx(compute)
    assert rows["ipart"].lower_bound == pytest.approx(compute + 2 * 1e-4, rel=1e-12)
    assert rows["ipart"].lower_bound - compute < INFORMATIVE_SHARE * (best - compute)
    assert not rows["ipart"].informative and rows["ps-dp"].informative
    text = format_table(measured)
    ipart_line = next(line for line in text.splitlines() if line.startswith("ipart "))
    assert ipart_line.split()[-2] == "-" and "FEASIBLE" in ipart_line
    assert "gap -: the lower bound of ps-default, ps-layer, ibatch, ipart" in text
    # The decoupled bounds count the bytes of a measured curve as of alpha + beta S: every gap
    # is shown.
    for half in (CURVE, AlphaBeta(1e-4, 1e-9)):
        table = compare(Problem(section5(), pattern=Decoupled(half, half)))
        assert all(r.informative for r in table) and "gap -" not in format_table(table)
    affine = compare(Problem(section5(), pattern=Decoupled(AlphaBeta(1e-4, 1e-9), AlphaBeta(1e-4, 1e-9))))
    assert next(r for r in affine if r.method == "megatron").gap == pytest.approx(23.2 / 20.2 - 1, rel=1e-9)


# ---------------------------------------------------------------------- sweeps
def test_a_sweep_runs_decoupled_and_fully_sharded_methods_on_their_pattern(capsys):
    grid = cells(["alexnet"], [8], ["10gbe"], ["wfbp", "megatron", "decoupled-dp", "fsdp2", "ps-dp"])
    assert [c.method for c in grid] == ["wfbp", "megatron", "decoupled-dp", "fsdp2"]
    assert "ps-dp (parameter-server methods: a sweep gives no server count" in capsys.readouterr().err
    profile = zoo.profile("alexnet")
    problems = {"megatron": Problem(profile, pattern=Decoupled.from_network("10gbe", 8)),
                "decoupled-dp": Problem(profile, pattern=Decoupled.from_network("10gbe", 8)),
                "fsdp2": Problem(profile, pattern=FullySharded.from_network("10gbe", 8))}
    for cell in grid[1:]:
        record = run_cell(cell)
        assert record["status"] != "ERROR", record["error"]
        assert record["iteration_time"] == solve(problems[cell.method], cell.method).iteration_time


def test_a_sweep_says_which_methods_its_sync_leaves_out(capsys):
    grid = cells(["alexnet"], [8], ["10gbe"], ["wfbp", "megatron", "megatron-overlap", "fsdp2"], sync="layerwise")
    assert [c.method for c in grid] == ["wfbp", "megatron-overlap"]
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "megatron (barrier-only" in err and "fsdp2 (fully sharded methods: their step has no sync" in err
    with pytest.raises(ValueError, match="fsdp2 .fully-sharded methods. run on the network's reduce-scatter"):
        cells(["alexnet"], [8], ["10gbe"], ["fsdp2"], algorithm="double_binary_tree")


def test_the_sweep_command_records_decoupled_cells(capsys, tmp_path):
    output = tmp_path / "sweep.jsonl"
    status, out, err = run(capsys, "sweep", "--models", "alexnet", "--workers", "8", "--networks", "10gbe",
                           "--methods", "megatron,zero3", "--output", output, "--jobs", "1", "--no-progress")
    assert status == 0, err
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [(r["method"], r["status"]) for r in records] == [("megatron", "FEASIBLE"), ("zero3", "FEASIBLE")]
    assert all(math.isfinite(r["iteration_time"]) for r in records)


def test_a_table_under_powersgd_judges_every_row_under_the_hook():
    # resnet50 at 64 workers of 10 GbE, torch's hook at rank 1: every row's T is its plan's on
    # the priced problem, the ddp row is DDP's buckets from the gradients' bytes (they differ
    # from the buckets DDP's rule would cut from the priced sizes), Horovod is left out.
    from fusionopt.cost import PowerSGD, network
    from fusionopt.model import Plan, simulate
    from fusionopt.solvers.baselines import ddp_buckets, ddp_powersgd

    problem = Problem(zoo.profile("resnet50", "h100", 64), network("10gbe", 64))
    hook = PowerSGD(rank=1)
    priced = hook.priced(problem)
    table = compare(problem, powersgd=hook)
    rows = {row.method: row for row in table}
    assert "horovod" not in rows and "DDP comm hook" in table.left_out["horovod"]
    ddp = ddp_powersgd(problem, hook)
    assert rows["ddp"].iteration_time == ddp.iteration_time and rows["ddp"].messages == len(ddp_buckets(problem.profile))
    assert ddp_buckets(priced.profile) != ddp_buckets(problem.profile)
    assert rows["dp"].iteration_time == solve(priced, "dp").iteration_time <= min(r.iteration_time for r in table)
    assert rows["wfbp"].iteration_time == simulate(priced, Plan.from_groups(priced.profile, [[i] for i in
                                                   priced.profile.backward_order.tolist()])).iteration_time
    with pytest.raises(ValueError, match="^horovod: Horovod has no PowerSGD"):
        compare(problem, ["dp", "horovod"], powersgd=hook)
    with pytest.raises(ValueError, match="p3 cuts tensors or leaves the ready order"):
        compare(Problem(problem.profile, problem.cost, sync="layerwise"), ["p3"], powersgd=hook)
