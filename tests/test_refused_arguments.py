"""Arguments of the public API that a quick reading would take and use wrongly (a string read
as a truth value, an option that another one overrides, a bound that is not a number) are
refused in one line naming them; the same calls with good arguments still work."""

import re

import numpy as np
import pytest

from fusionopt import advice, executor, experiments, integrations, reporting, zoo
from fusionopt.advice import fsdp2_plan_of, unit_modules
from fusionopt.cost import AlphaBeta, PiecewiseLinear, cost_from_dict, read_nccl_tests, read_osu
from fusionopt.model import Plan, Problem, Profile, fit_step_parts, ps_cost
from fusionopt.solvers import compare, solve, with_bound

PROFILE = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3], names=["a.w", "b.w", "c.w"])
PROBLEM = Problem(PROFILE, AlphaBeta(3e-3, 1e-9))
OSU = "# OSU MPI Allreduce Latency Test v7.3\n# Size       Avg Latency(us)\n4     2.50\n8     2.60\n"


@pytest.mark.parametrize("call, name", [
    (lambda: ps_cost(4, 2, 1e-5, 1e-9, colocated="no"), "colocated"),
    (lambda: PiecewiseLinear([1, 2], [1e-6, 2e-6], repair="no"), "repair"),
    (lambda: read_osu(OSU, repair="no"), "repair"),
    (lambda: read_nccl_tests(OSU, in_place="no"), "in_place"),
    (lambda: fsdp2_plan_of(PROFILE, [["a"], [""]], ["no", False], {}, {}), "reshard_after_forward of call 0"),
])
def test_a_flag_is_true_or_false_not_a_string_read_as_true(call, name):
    with pytest.raises(ValueError, match=f"^{name} must be True or False, got 'no'$"):
        call()


def test_the_flags_given_as_booleans_still_price_as_before():
    # Co-located servers: beta = g (P - 1) / K = 1e-9 x 3 / 2; separate: max(g, P g / K) = 2e-9.
    assert ps_cost(4, 2, 1e-5, 1e-9, colocated=True).beta == pytest.approx(1.5e-9)
    assert ps_cost(4, 2, 1e-5, 1e-9, colocated=False).beta == pytest.approx(2e-9)
    assert read_osu(OSU, repair=False)(4) == pytest.approx(2.5e-6)


def test_ddp_takes_one_cap_or_one_list_as_torch_reads_one():
    with pytest.raises(ValueError, match="give bucket_cap_mb or bucket_cap_mb_list, not both"):
        solve(PROBLEM, "ddp", bucket_cap_mb=5, bucket_cap_mb_list=[1])
    assert solve(PROBLEM, "ddp", bucket_cap_mb_list=[2.5]).plan.groups() == [[2, 1], [0]]


def test_fsdp2_calls_name_modules_of_the_profile_and_a_flag_each():
    with pytest.raises(ValueError, match="fully_shard call 0: module 'nosuch' holds no tensor of the profile"):
        fsdp2_plan_of(PROFILE, [["nosuch"], [""]], [True, False], {}, {})
    with pytest.raises(ValueError, match="2 fully_shard calls but 1 reshard_after_forward flags"):
        fsdp2_plan_of(PROFILE, [["a"], [""]], [True], {}, {})
    assert fsdp2_plan_of(PROFILE, [["a"], ["b"], [""]], [True, True, False], {}, {}).num_units == 3


@pytest.mark.parametrize("first, stop, message", [
    (0, 99, "a unit runs over tensors first to stop - 1 with 0 <= first < stop <= 3, got first 0, stop 99"),
    (3, 1, "a unit runs over tensors first to stop - 1 with 0 <= first < stop <= 3, got first 3, stop 1"),
    (-1, 2, "a unit runs over tensors first to stop - 1 with 0 <= first < stop <= 3, got first -1, stop 2"),
    (0.0, 2, "first must be a tensor index, got 0.0"),
])
def test_a_unit_is_a_run_of_the_profiles_tensors(first, stop, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        unit_modules(PROFILE, first, stop)
    assert unit_modules(PROFILE, 0, 3) == [""] and unit_modules(PROFILE, 1, 2) == ["b"]


@pytest.mark.parametrize("pattern, sync, culprit", [("x", "barrier", "pattern"), ("ps", "layer", "sync")])
def test_step_parts_are_fitted_to_a_known_step(pattern, sync, culprit):
    with pytest.raises(ValueError, match=f"^{culprit} must be one of"):
        fit_step_parts(PROFILE, pattern=pattern, sync=sync)


def test_a_bound_is_a_number_of_seconds():
    result = solve(PROBLEM, "wfbp")
    for bound in (float("nan"), -1.0, "0.01"):
        with pytest.raises(ValueError, match="bound must be a finite number of seconds >= 0"):
            with_bound(result, bound, source="mine")
    assert with_bound(result, result.iteration_time, source="mine").stats["bound_from"] == "mine"


def test_a_comparison_under_powersgd_takes_a_powersgd():
    with pytest.raises(ValueError, match="powersgd must be a PowerSGD"):
        compare(PROBLEM, ["wfbp"], powersgd="x")


def test_max_units_goes_with_unit_parameters():
    pytest.importorskip("ortools")
    with pytest.raises(ValueError, match="max_units bounds the units of unit_parameters"):
        solve(PROBLEM, "cpsat", max_units=5)
    with pytest.raises(ValueError, match="max_units must be an integer >= 1, got 'x'"):
        solve(PROBLEM, "cpsat", unit_parameters=250_000, max_units="x")


def test_the_apart_dp_caps_messages_at_a_number_of_bytes():
    problem = Problem(PROFILE, AlphaBeta(3e-3, 1e-9), exact_tensors=[1])
    with pytest.raises(ValueError, match="max_message_bytes must be a number of bytes, got '5e6'"):
        solve(problem, "dp-apart", max_message_bytes="5e6")
    assert max(solve(problem, "dp-apart", max_message_bytes=5e6).plan.message_bytes) <= 5e6



@pytest.mark.parametrize("alpha", ["1e-3", True])
def test_a_cost_figure_is_a_number_not_a_string_or_a_bool(alpha):
    with pytest.raises(ValueError, match=f"^alpha must be a number, got {alpha!r}$"):
        AlphaBeta(alpha, 1e-9)
    with pytest.raises(ValueError, match=f"^f.json: alpha must be a number, got {alpha!r}$"):
        cost_from_dict({"kind": "alpha_beta", "alpha": alpha, "beta": 0.0}, source="f.json")
    with pytest.raises(ValueError, match="^f.json: alpha must be >= 0, got -1.0$"):
        cost_from_dict({"kind": "alpha_beta", "alpha": -1, "beta": 0.0}, source="f.json")


def test_a_fitted_network_takes_a_whole_number_of_workers_as_the_others():
    from fusionopt.cost import network

    for name in ("mgwfbp-10gbe", "10gbe"):
        with pytest.raises(ValueError, match=r"^workers must be an integer >= 1, got 8.0$"):
            network(name, 8.0)
    assert network("mgwfbp-10gbe", 8) == AlphaBeta(0.00052303, 8.5707e-10)


def test_a_benchmark_row_of_negative_size_is_refused_not_skipped():
    with pytest.raises(ValueError, match=r"^<text>, line 4: size -8 is negative: a message has 0 bytes or more$"):
        read_osu(OSU.replace("8     2.60", "-8     2.60"))
    with pytest.raises(ValueError, match=r"^<text>, line 3: size -4 is negative"):
        read_nccl_tests("#  size  count  type  redop  root  time  algbw  busbw  #wrong\n"
                        "   1024  256  float  sum  -1  20.0  0.05  0.09  0\n"
                        "   -4  1  float  sum  -1  19.0  0.00  0.00  0\n")
    assert read_osu(OSU).sizes.tolist() == [4.0, 8.0]


@pytest.mark.parametrize("cost, seconds", [(AlphaBeta(1e-3, 1e300), "2.1e+307"), (AlphaBeta(1e300, 1e-9), "3e+300"),
                                           (PiecewiseLinear([1, 7e6], [1.0, 1e300]), "3e+300")])
def test_a_cost_whose_step_cannot_be_summed_is_refused(cost, seconds):
    # Each of the 3 tensors its own message, or the 7e6 bytes in each: 1e300 s and more.
    with pytest.raises(ValueError, match=rf"^cost model {type(cost).__name__} prices the messages of a step of 3 "
                                         rf"tensors at up to {re.escape(seconds)} s, beyond the 1e\+300 s that times can be "
                                         r"summed in$"):
        Problem(PROFILE, cost)
    assert Problem(PROFILE, AlphaBeta(1e-3, 1e290)).cost.beta == 1e290


@pytest.mark.parametrize("call, message", [
    (lambda: Profile.from_arrays(8, [1.0], [1.0]), "sizes must be a sequence, one entry per tensor, got 8"),
    (lambda: Profile.from_arrays([8], [1.0], [1.0], update=0.0),
     "update must be a sequence, one entry per tensor, got 0.0"),
    (lambda: Plan.from_groups(PROFILE, 3), "groups must be a sequence of groups of tensor indices, got 3"),
    (lambda: Plan.from_groups(PROFILE, [2, 1, 0]), "group 0 must be a sequence of tensor indices, got 2"),
    (lambda: Plan.per_tensor(PROFILE, order=0), "order must be a sequence of tensor indices, got 0"),
    (lambda: Plan.from_groups(PROFILE, [[0, 1, 2]], release=0.0),
     "release must be a sequence of times, one per message, got 0.0"),
    (lambda: AlphaBeta(1e-3, 1e-9).least_seconds_per_byte(0), "upto must be a finite number of bytes > 0, got 0"),
    (lambda: PiecewiseLinear([1, 2], [1e-6, 2e-6]).least_seconds_per_byte(-1.0),
     "upto must be a finite number of bytes > 0, got -1.0"),
])
def test_a_scalar_where_a_sequence_or_a_size_goes_is_named(call, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        call()
    assert Plan.from_groups(PROFILE, [[2, 1], [0]], release=[0.0, 1e-3]).groups() == [[2, 1], [0]]
    assert AlphaBeta(1e-3, 1e-9).least_seconds_per_byte(1e6) == pytest.approx(2e-9)


def test_the_evaluators_of_cut_vectors_refuse_an_entry_as_a_plan_does():
    from fusionopt.model import evaluate_cuts, fusion_iteration_time, simulate

    with pytest.raises(ValueError, match=r"^cut vectors hold 0/1 or booleans, got 2 at position 1$"):
        fusion_iteration_time(PROBLEM, [0, 2])
    with pytest.raises(ValueError, match=r"^cut vectors hold 0/1 or booleans, got 0.5 at position \(1, 0\)$"):
        evaluate_cuts(PROBLEM, [[1, 0], [0.5, 1]])
    # The same vectors as booleans or 0/1 price alike, and as the plan of the same cuts.
    assert evaluate_cuts(PROBLEM, [[1, 0], [0, 1]]).tolist() == evaluate_cuts(PROBLEM, [[True, False],
                                                                                      [False, True]]).tolist()
    assert fusion_iteration_time(PROBLEM, [1, 0]) == pytest.approx(
        simulate(PROBLEM, Plan.from_cuts(PROFILE, [1, 0])).iteration_time, rel=1e-12)


def _grid():
    return experiments.cells(["alexnet"], [8], ["10gbe"], ["gradssa"])


def _timeline(**options):
    pytest.importorskip("matplotlib")
    from fusionopt.viz import plot_timeline

    return plot_timeline(Plan.per_tensor(PROFILE), PROBLEM, **options)


def _sweep_series(**changes):
    from fusionopt.viz import sweep_series

    record = {"model": "a", "network": "n", "method": "dp", "workers": 8, "status": "OPTIMAL",
              "scaling_efficiency": 0.9}
    return sweep_series([{**record, **changes}])


@pytest.mark.parametrize("call, message", [
    # A sweep's options: a limit that would be written as Infinity, or silently dropped.
    (lambda: experiments.run_sweep(_grid(), "x.jsonl", time_limit=float("inf")),
     "time_limit must be a positive, finite number of seconds, got inf"),
    (lambda: experiments.run_cell(_grid()[0], time_limit="abc"),
     "time_limit must be a number of seconds, got 'abc'"),
    (lambda: experiments.run_sweep(_grid(), "x.jsonl", progress="no"),
     "progress must be True or False, got 'no'"),
    (lambda: experiments.run_sweep(_grid()[0], "x.jsonl"),
     "cells must be a sequence of Cell (fusionopt.experiments.cells makes them), got Cell"),
    (lambda: experiments.cells([123], [8], ["10gbe"], ["dp"]),
     "models must be names, got 123"),
    (lambda: experiments.solve_methods(PROBLEM, [("a", "dp", {}), ("a", "wfbp", {})]),
     "method key 'a' is given twice: each outcome needs a key of its own"),
    # Pictures: a flag read as a truth value, limits that are not a pair.
    (lambda: _timeline(legend="no"), "legend must be True or False, got 'no'"),
    (lambda: _timeline(xlim=(0, 5, 9)),
     "xlim must be the start and end of the time axis in milliseconds, start < end, got (0, 5, 9)"),
    (lambda: _timeline(figsize=(0, 3)), "figsize must be the width and height in inches, each > 0, got (0, 3)"),
    (lambda: _sweep_series(workers=8.7), "sweep record of 'dp': workers must be an integer >= 1, got 8.7"),
    (lambda: _sweep_series(scaling_efficiency=-3),
     "sweep record of 'dp' at 8 workers (status 'OPTIMAL'): scaling_efficiency is -3, not a number >= 0"),
    # The zoo: a measured batch, and layers no network has.
    (lambda: zoo.measured_profile("resnet50", hardware="h100", batch=32.9),
     "batch must be an integer >= 1, got 32.9"),
    (lambda: zoo.conv2d("c", 3, 64, 7, out=112, groups=2),
     "conv 'c': groups = 2 must divide cin = 3 and cout = 64"),
    (lambda: zoo.linear("f", 4.5, 2),
     "fan_in must be a positive integer, got 4.5"),
    # Report helpers: a string split into its characters, a ragged table.
    (lambda: reporting.subset_location("r/e.md", "r/e.md", "--quick"),
     "changed must be a sequence of option names, got the string '--quick'"),
    (lambda: reporting.markdown_table(("a", "b"), [(1, 2), (1, 2, 3)]),
     "row 1 of the table has 3 cells for 2 columns: [1, 2, 3]"),
])
def test_a_study_s_arguments_are_refused_naming_them(call, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        call()
    assert not (tmp_path / "x.jsonl").exists()


def _torch():
    return pytest.importorskip("torch")


SIZES_TIMES = ([1e3, 1e4, 1e5], [2e-5, 2.9e-5, 1.19e-4])


@pytest.mark.parametrize("call, message", [
    # The executor: flags read as truth values, counts truncated, points that are no measurement.
    (lambda: executor.run(PROBLEM, Plan.per_tensor(PROFILE), ranks=1, verify="no"),
     "verify must be True or False, got 'no'"),
    (lambda: executor.run(PROBLEM, None), "plan must be a Plan for an all-reduce problem, got NoneType"),
    (lambda: executor.run(PROBLEM, Plan.per_tensor(PROFILE), fault="drop"), "fault must be a Fault or None, got 'drop'"),
    (lambda: executor.calibrate(ranks=1, sizes=[1024.9, 4096.3]), "message size 1024.9 B must be a whole number of bytes, a positive multiple of 8"),
    (lambda: executor.calibrate(ranks=1, sizes=[1024, 4096], iterations=0), "iterations must be an integer >= 1, got 0"),
    (lambda: executor.calibrate(ranks=1, sizes=[1024, 4096], timeout=float("inf")),
     "timeout must be a finite number > 0, got inf"),
    (lambda: executor.fit_alpha_beta(SIZES_TIMES[0], [2e-5, float("inf"), 1e-4]),
     "point 1: time inf s must be a finite number > 0"),
    (lambda: executor.fit_alignment(*SIZES_TIMES, 0), "ranks must be an integer >= 1, got 0"),
    # Advice: a prefetch list given as a string was counted by its characters.
    (lambda: fsdp2_plan_of(PROFILE, [["a"], [""]], [False, False], {"": "ab"}, {}),
     "forward_prefetch of '' must be a list of units, got 'ab'"),
    (lambda: fsdp2_plan_of(PROFILE, [["a"], [""]], [False, False], {"nope": ["a"]}, {}),
     "forward_prefetch of 'nope': 'nope' is no unit (a unit is named by its first module: '', 'a')"),
    (lambda: fsdp2_plan_of(PROFILE, [["a"], ["a"], [""]], [False] * 3, {}, {}),
     "module 'a' is wrapped by fully_shard calls 0 and 1"),
    (lambda: advice.gains_enough(0.99, 1.0, -5), "min_gain must be a fraction in [0, 1), got -5"),
    # Integrations: a choice outside the hook's, parameters named instead of given, a cost for a link.
    (lambda: integrations.choose_encoding([(100_000, "fp16")], 10, False),
     "choice must start at 0 bytes, got [(100000, 'fp16')]"),
    (lambda: integrations.choose_encoding([(0, "fp32")], 10, "no"), "carries_exact must be True or False, got 'no'"),
    (lambda: integrations.replay_trace({"traceEvents": []}, 1e-6, True), "n_parameters must be an integer >= 1, got True"),
    (lambda: _torch() and integrations.make_optimizer("Bogus", {}, []),
     "optimizer 'Bogus': not an optimiser class of torch.optim (SGD, Adam, AdamW, ...)"),
    (lambda: _torch() and integrations.wire_comm_hook([(0, "fp32")], exact=["0.weight"]),
     "exact must list parameters (tensors), not their names: got '0.weight'"),
    (lambda: _torch() and integrations.DDPJob(_torch().nn.Linear(4, 4), PROFILE, link=AlphaBeta(1e-3, 1e-9)),
     "link must be an EmulatedLink (fusionopt.integrations.EmulatedLink(cost) holds a cost), got AlphaBeta"),
])
def test_a_job_s_and_a_framework_s_arguments_are_refused_naming_them(call, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        call()


@pytest.mark.parametrize("call, message", [
    # Sharded advice on a problem it does not take: an AttributeError before.
    (lambda: advice.fsdp2_least_forward_prefetch(PROBLEM),
     "fsdp2_least_forward_prefetch takes a fully sharded problem, got an all-reduce one"),
    (lambda: advice.zero2_settings(None), "zero2_settings takes a decoupled Problem, got NoneType"),
    (lambda: advice.fsdp2_atoms(PROFILE, None),
     "atoms must be one of tensor, module, block, or increasing boundaries (integers) from 0 to 3, got None"),
    # The online planners' jobs and tuners: a plan that is none, settings that stop nothing.
    (lambda: integrations.SimulatedJob(PROBLEM, None), "plan must be a Plan, got NoneType"),
    (lambda: integrations.SimulatedJob(PROBLEM, Plan.per_tensor(PROFILE)).switch("dp"), "plan must be a Plan, got str"),
    (lambda: integrations.GridSearch(integrations.SimulatedJob(PROBLEM, Plan.per_tensor(PROFILE)), early_stopping=0),
     "early_stopping must be an integer >= 1, got 0"),
    (lambda: integrations.BayesianSearch(restarts=0), "restarts must be an integer >= 1, got 0"),
    (lambda: integrations.BayesianSearch(noise=float("nan")), "noise must be a finite number >= 0, got nan"),
    (lambda: integrations.BayesianSearch().next(),
     "the search has no sample yet: add a scored point before asking for the next"),
])
def test_advice_and_tuners_refuse_what_they_cannot_take(call, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        call()
    # A numpy count of bytes is a whole number of bytes.
    assert integrations.EmulatedLink(AlphaBeta(1e-3, 0.0), clock=lambda: 0.0).reserve(np.int64(8)) == pytest.approx(1e-3)


def test_what_the_review_of_these_checks_found_stays_mended(tmp_path):
    from fusionopt.solvers import atom_bounds

    # An iterator of boundaries is read once, not refused as empty.
    assert atom_bounds(PROFILE, iter([0, 2, 3])) == [0, 2, 3]
    # Precision "none" is a roofline estimate's: a calibrated cell refuses it rather than run fp32.
    with pytest.raises(ValueError, match=r"^precision 'none' is a roofline estimate's \(compute='roofline'\); a "
                                         r"calibrated profile takes fp32 or bf16$"):
        experiments.cells(["alexnet"], [8], ["10gbe"], ["wfbp"], precision="none")
    assert experiments.cells(["alexnet"], [8], ["10gbe"], ["wfbp"], compute="roofline",
                             precision="none")[0].precision == "none"
    # A cut matrix's bad entry is named as given, at its row and column.
    from fusionopt.model import evaluate_cuts

    with pytest.raises(ValueError, match=r"^cut vectors hold 0/1 or booleans, got 2 at position \(1, 1\)$"):
        evaluate_cuts(PROBLEM, [[0, 1], [1, 2]])


def test_a_footprint_counts_ranks_and_words_and_a_gain_of_no_ratio_is_a_dash():
    job = executor.Job(PROBLEM, Plan.per_tensor(PROFILE))
    with pytest.raises(ValueError, match=r"^size must be an integer >= 1, got -1$"):
        executor.rank_bytes(job, -1)
    with pytest.raises(ValueError, match=r"^word_sizes must be word sizes in bytes among 8, 4, 2 and 1, got \(3,\)$"):
        executor.rank_bytes(job, 2, word_sizes=(3,))
    with pytest.raises(ValueError, match=r"^ranks must be an integer >= 1, got 2.5$"):
        executor.check_host_memory(job, 2.5)
    # Two ranks need twice one rank's bytes, each of them sized for the two.
    assert executor.check_host_memory(job, 2, available=float("inf")) == 2 * executor.rank_bytes(job, 2)
    assert experiments.fmt_gain(experiments.ratio(1.0, 0.0)) == "-" and experiments.fmt_gain(1.94) == "+94%"
