"""A reducer's own cost: the fit, where the model puts it, the file, and a short real run."""

import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from fusionopt.integrations import (
    REDUCER_CALIBRATION_SCHEMA, ReducerCalibration, Sample, fit_overhead, fit_reducer_cost, read_reducer_calibration,
    reducer_cost_words, with_reducer_overhead,
)
from fusionopt.cost import AlphaBeta
from fusionopt.model import FullySharded, Plan, Problem, Profile, simulate
from fusionopt.cost import PiecewiseLinear, with_message_overhead, with_overhead
from fusionopt.solvers.baselines import fsdp2_plan


# ---------------------------------------------------------------------- the fit
def test_fit_recovers_exact_figures():
    # excess = 0.5 ms + 0.25 ms per message, no noise.
    messages = [1, 2, 4, 8, 16]
    per_step, per_message = fit_overhead(messages, [5e-4 + 2.5e-4 * m for m in messages])
    assert per_step == pytest.approx(5e-4, abs=1e-15)
    assert per_message == pytest.approx(2.5e-4, abs=1e-15)


def test_fit_is_least_squares_by_hand():
    # x = 1, 2, 3; y = 2, 3, 5: mean x 2, mean y 10/3; slope ((-1)(-4/3) + 0 + (1)(5/3)) / 2 = 1.5,
    # intercept 10/3 - 3 = 1/3.
    per_step, per_message = fit_overhead([1, 2, 3], [2.0, 3.0, 5.0])
    assert per_message == pytest.approx(1.5)
    assert per_step == pytest.approx(1 / 3)


def test_fit_keeps_both_figures_non_negative():
    # Free fit (-2, 1). Through the origin: slope (1*-1 + 3*1) / (1 + 9) = 0.2, residual
    # 1.2^2 + 0.4^2 = 1.6; flat at the mean 0: residual 2. The origin wins.
    assert fit_overhead([1, 3], [-1.0, 1.0]) == (0.0, pytest.approx(0.2))
    # Falling excess: free slope -1; flat at the mean 2 (residual 2) beats the origin's.
    assert fit_overhead([1, 2, 3], [3.0, 2.0, 1.0]) == (pytest.approx(2.0), 0.0)
    assert fit_overhead([1, 2], [-1.0, -2.0]) == (0.0, 0.0)


def test_joint_fit_recovers_the_four_figures_from_the_regimes_that_vary_them():
    # The channel regime varies the messages (16 tensors, 64 KiB a step), the shape regime the
    # tensors (4 and 64 layers of 4 KiB) and the bytes (16 layers of 16 and 64 KiB), one message.
    truth = (4e-4, 1.5e-3, 1e-4, 2e-10)
    shapes = [(m, 16, 65536) for m in (1, 2, 4, 8)] + [(1, 4, 16384), (1, 64, 262144), (1, 16, 262144),
                                                       (1, 16, 1048576)]
    samples = [Sample(m, 1e-3 + truth[0] + truth[1] * m + truth[2] * n + truth[3] * b, 1e-3, 0.0, n, b)
               for m, n, b in shapes]
    assert fit_reducer_cost(samples) == pytest.approx(truth, rel=1e-9)


def test_joint_fit_with_one_shape_is_the_two_figure_fit():
    # Every sample of one shape (a file before version 3): the tensors and bytes are left out, the
    # intercept takes in their share, and the fit is fit_overhead's, bounds included.
    samples = [Sample(m, e, 0.0, 0.0, 16, 65536) for m, e in ((1, 2.0), (2, 3.0), (3, 5.0))]
    assert fit_reducer_cost(samples) == pytest.approx((1 / 3, 1.5, 0.0, 0.0))
    falling = [Sample(m, e, 0.0, 0.0) for m, e in ((1, 3.0), (2, 2.0), (3, 1.0))]
    assert fit_reducer_cost(falling) == pytest.approx((*fit_overhead([1, 2, 3], [3.0, 2.0, 1.0]), 0.0, 0.0))


@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from([1, 2, 4, 8, 16, 32]), st.floats(-1.0, 1.0)), min_size=2, max_size=8),
       st.sampled_from([1e-3, 1.0]))
def test_joint_fit_of_one_shape_is_fit_overhead(points, scale):
    # The non-negative least squares of four figures, with the tensors and bytes constant, and the
    # closed form with its bounds: the same residual, so the same fit wherever the optimum is unique.
    messages, excess = [m for m, _ in points], [e * scale for _, e in points]
    two = fit_overhead(messages, excess)
    four = fit_reducer_cost([Sample(m, e, 0.0, 0.0, 16, 4096) for m, e in zip(messages, excess)])
    residual = lambda c, s: sum((c + s * m - e) ** 2 for m, e in zip(messages, excess))  # noqa: E731
    assert four[2:] == (0.0, 0.0) and min(four[:2]) >= 0.0
    assert residual(*four[:2]) == pytest.approx(residual(*two), rel=1e-9, abs=1e-15 * scale ** 2)


def test_joint_fit_keeps_every_figure_non_negative():
    # The excess falls with the tensors: the best fit with per_tensor >= 0 has it at 0, and the
    # intercept is then the mean of the two shapes' excesses at one message each.
    samples = [Sample(1, 5e-3, 0.0, 0.0, 4, 1000), Sample(1, 3e-3, 0.0, 0.0, 64, 1000)]
    per_step, per_message, per_tensor, per_byte = fit_reducer_cost(samples)
    assert (per_tensor, per_byte) == (0.0, 0.0) and per_step + per_message == pytest.approx(4e-3)
    with pytest.raises(ValueError, match="at least one sample"):
        fit_reducer_cost([])


def test_sample_excess_is_step_less_plain_and_link():
    assert Sample(messages=4, step=30e-3, plain=2e-3, link=20e-3).excess == pytest.approx(8e-3)


# ---------------------------------------------------------------------- where the model puts it
def two_tensors() -> Profile:
    # Backward 1 ms per tensor, forward 1 ms each; each tensor 1 MB.
    return Profile.from_arrays([1e6, 1e6], [1e-3, 1e-3], [1e-3, 1e-3])


def test_one_message_grows_by_exactly_its_overhead_where_the_channel_is_critical():
    # One message of 2 MB, ready at B = 2 ms, c = 3 ms + 2 ms = 5 ms: T = 2 + 5 + F 2 = 9 ms.
    # With 0.4 ms per message and 0.7 ms per step: 2 + 5.4 + 2 + 0.7 = 10.1 ms.
    profile, cost = two_tensors(), AlphaBeta(3e-3, 1e-9)
    single = Plan.from_cuts(profile, [False])
    plain = simulate(Problem(profile, cost), single).iteration_time
    slower = simulate(with_overhead(Problem(profile, cost), per_step=7e-4, per_message=4e-4), single).iteration_time
    assert plain == pytest.approx(9e-3, abs=1e-12)
    assert slower == pytest.approx(10.1e-3, abs=1e-12)


def test_every_message_pays_it_on_a_critical_channel():
    # WFBP: tensor 1 ready at 1 ms, c = 4 ms (3 + 1), ends 5; tensor 0 then 5 to 9 ms; T = 9 + 2 = 11 ms.
    # With 0.5 ms per message: 1 -> 5.5, 5.5 -> 10; T = 12 ms: two messages, 1 ms more.
    profile, cost = two_tensors(), AlphaBeta(3e-3, 1e-9)
    wfbp = Plan.from_cuts(profile, [True])
    assert simulate(Problem(profile, cost), wfbp).iteration_time == pytest.approx(11e-3, abs=1e-12)
    slower = with_overhead(Problem(profile, cost), per_step=0.0, per_message=5e-4)
    assert simulate(slower, wfbp).iteration_time == pytest.approx(12e-3, abs=1e-12)


def test_per_step_overhead_is_host_overhead():
    problem = with_overhead(Problem(two_tensors(), AlphaBeta(1e-3, 0.0)), per_step=2.5e-3, per_message=0.0)
    assert problem.profile.host_overhead == 2.5e-3
    assert problem.cost == AlphaBeta(1e-3, 0.0)


def test_message_overhead_on_a_measured_curve():
    curve = PiecewiseLinear([1e3, 1e6], [1e-5, 1e-3])
    c = with_message_overhead(curve, 2e-4)
    assert float(c(0)) == 0.0
    assert float(c(1e3)) == pytest.approx(2.1e-4)
    assert float(c(1e6)) == pytest.approx(1.2e-3)


def test_fully_sharded_collectives_each_pay_it():
    # Every all-gather and reduce-scatter of the FSDP2 plan pays the figure: with the
    # channel critical (startups far above the compute), T grows by collectives x figure.
    profile = Profile.from_arrays([4e3] * 4, [1e-5] * 4, [1e-5] * 4, names=[f"layers.{i}.weight" for i in range(4)])
    sharded = FullySharded(reduce_scatter=AlphaBeta(5e-3, 0.0), all_gather=AlphaBeta(5e-3, 0.0))
    problem = Problem(profile, pattern=sharded)
    plan = fsdp2_plan(profile)
    plain = simulate(problem, plan)
    slower = simulate(with_overhead(problem, per_step=0.0, per_message=1e-3), plan)
    assert slower.iteration_time - plain.iteration_time == pytest.approx(1e-3 * plain.num_messages, rel=1e-9)


def test_reducer_figures_go_where_their_pattern_is():
    problem = Problem(two_tensors(), AlphaBeta(1e-3, 1e-9))
    slower = with_reducer_overhead(problem, ReducerCalibration("plan", per_step=1e-3, per_message=2e-4))
    assert slower.cost.affine == pytest.approx((1.2e-3, 1e-9))
    assert slower.profile.host_overhead == pytest.approx(1e-3)
    with pytest.raises(ValueError, match="fsdp2 reducer calibration prices fully-sharded problems"):
        with_reducer_overhead(problem, ReducerCalibration("fsdp2", per_step=0.0, per_message=0.0))


def test_advice_prefers_fewer_messages_when_each_costs_more():
    # Four 1 MB tensors, backward 2 ms each, c = 0.1 ms + 1 ms per message: WFBP hides every
    # message but the last (T = 8 + 1.1 + F 4 = 13.1 ms), the only plan that fast. With 50 ms
    # more per message one message is best: 8 + 54.1 + 4 = 66.1 ms, any second costs 50 ms more.
    from fusionopt.solvers import solve

    profile = Profile.from_arrays([1e6] * 4, [1e-3] * 4, [2e-3] * 4)
    problem = Problem(profile, AlphaBeta(1e-4, 1e-9))
    plain = solve(problem, "dp")
    heavy = solve(with_overhead(problem, per_step=0.0, per_message=5e-2), "dp")
    assert (plain.num_messages, plain.iteration_time) == (4, pytest.approx(13.1e-3))
    assert (heavy.num_messages, heavy.iteration_time) == (1, pytest.approx(66.1e-3))


# ---------------------------------------------------------------------- the file
def document(**changes):
    doc = {"schema": REDUCER_CALIBRATION_SCHEMA, "version": 1, "reducer": "ddp", "per_step": 1e-3,
           "per_message": 2e-5, "samples": [{"messages": 1, "step": 7e-3, "plain": 1e-3, "link": 5e-3}]}
    doc.update(changes)
    return doc


def test_file_round_trip(tmp_path):
    path = tmp_path / "ddp.json"
    ReducerCalibration("plan", per_step=1e-3, per_message=2e-4, samples=(Sample(2, 13e-3, 1e-3, 10e-3, 16, 8192),),
                       message_compute=3e-4, compute_samples=(Sample(4, 40e-3, 30e-3, 1e-3),),
                       torch_version="2.13.0", ranks=2, threads=1, per_tensor=5e-5, per_byte=1e-10).write(path)
    assert json.loads(path.read_text())["version"] == 3
    read = read_reducer_calibration(path)
    assert (read.reducer, read.per_step, read.per_message, read.message_compute) == ("plan", 1e-3, 2e-4, 3e-4)
    assert (read.per_tensor, read.per_byte) == (5e-5, 1e-10)
    assert (read.samples[0].tensors, read.samples[0].nbytes) == (16, 8192)
    assert read.samples[0].excess == pytest.approx(2e-3)
    assert read.compute_samples[0].excess == pytest.approx(9e-3)


def test_a_version_2_file_reads_with_no_cost_per_tensor_or_byte(tmp_path):
    # Written before the shape regime: per_step took in the calibration model's tensors, and the
    # model prices it as it did.
    path = tmp_path / "r.json"
    path.write_text(json.dumps(document(version=2, message_compute=0.0)))
    read = read_reducer_calibration(path)
    assert (read.per_tensor, read.per_byte, read.samples[0].tensors) == (0.0, 0.0, 0.0)
    problem = with_reducer_overhead(Problem(two_tensors(), AlphaBeta(1e-3, 1e-9)), read)
    assert (problem.profile.host_overhead, problem.cost) == (1e-3, AlphaBeta(1e-3 + 2e-5, 1e-9))


def test_the_cost_per_tensor_counts_the_profiles_tensors_and_the_cost_per_byte_each_message():
    # Two 1 MB tensors, one message of 2 MB on c = 3 ms + 1 ms/MB, ready at B = 2 ms:
    # T = 2 + 5 + F 2 = 9 ms. With 0.3 ms per step, 0.1 ms per tensor (two: 0.2 ms) and
    # 0.5 ms per MB of the message (1 ms): 2 + 6 + 2 + 0.5 = 10.5 ms.
    profile, cost = two_tensors(), AlphaBeta(3e-3, 1e-9)
    single = Plan.from_cuts(profile, [False])
    assert simulate(Problem(profile, cost), single).iteration_time == pytest.approx(9e-3, abs=1e-12)
    slower = with_reducer_overhead(Problem(profile, cost), ReducerCalibration(
        "ddp", per_step=3e-4, per_message=0.0, per_tensor=1e-4, per_byte=5e-10))
    assert simulate(slower, single).iteration_time == pytest.approx(10.5e-3, abs=1e-12)
    # On a fully sharded problem both collectives pay the bytes: each 2 MB unit's all-gather and
    # reduce-scatter 1 ms more.
    halves = FullySharded(AlphaBeta(1e-3, 1e-9), AlphaBeta(1e-3, 1e-9), blocking=True)
    sharded = with_reducer_overhead(Problem(profile, pattern=halves), ReducerCalibration(
        "fsdp2", per_step=0.0, per_message=0.0, per_tensor=0.0, per_byte=5e-10))
    assert sharded.pattern.all_gather(2e6) == pytest.approx(halves.all_gather(2e6) + 1e-3)
    assert sharded.pattern.reduce_scatter(2e6) == pytest.approx(halves.reduce_scatter(2e6) + 1e-3)


def test_a_version_1_file_reads_with_no_compute_per_message(tmp_path):
    # Written before the compute regime: its figures price the model as they did, eta = 0.
    path = tmp_path / "r.json"
    path.write_text(json.dumps(document()))
    read = read_reducer_calibration(path)
    assert (read.per_step, read.per_message, read.message_compute, read.compute_samples) == (1e-3, 2e-5, 0.0, ())
    problem = with_reducer_overhead(Problem(two_tensors(), AlphaBeta(1e-3, 1e-9)), read)
    assert problem.message_compute == 0.0 and problem.extensions == ()


@pytest.mark.parametrize("version, given, figure", [
    (2, {}, "message_compute"),                                        # the compute per message
    (3, {"message_compute": 0.0, "per_tensor": 1e-4}, "per_byte"),     # the costs per tensor and per byte
    (3, {"message_compute": 0.0, "per_byte": 1e-10}, "per_tensor"),
])
def test_a_file_must_carry_the_figures_of_its_version(tmp_path, version, given, figure):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(document(version=version, **given)))
    with pytest.raises(ValueError, match=f"{figure} must be a finite number of seconds >= 0, got None"):
        read_reducer_calibration(path)
    path.write_text(json.dumps(document(version=version, **given, **{figure: -1.0})))
    with pytest.raises(ValueError, match=f"{figure} must be a finite number of seconds >= 0, got -1.0"):
        read_reducer_calibration(path)
    path.write_text(json.dumps(document(version=version, **given, **{figure: 0.0}, compute_samples=[{"step": 1}])))
    with pytest.raises(ValueError, match="compute_samples must be a list of objects"):
        read_reducer_calibration(path)


def test_the_compute_per_message_goes_on_the_compute_stream():
    # Two 1 MB tensors, backward 1 ms each, forward 1 ms each, c = 0.1 ms + 1 ms/MB, WFBP without
    # eta: tensor 1 sent 1 -> 2.1, tensor 0 (ready 2) 2.1 -> 3.2; T = 3.2 + 2 = 5.2 ms.
    # With 0.5 ms of compute per message: tensor 1 ready 1.5 (sent to 2.6), tensor 0's backward
    # 1.5 -> 2.5, ready 3 (sent to 4.1); T = 4.1 + 2 + 0.2 per step = 6.3 ms: both messages' 0.5 ms.
    profile, cost = two_tensors(), AlphaBeta(1e-4, 1e-9)
    wfbp = Plan.from_cuts(profile, [True])
    assert simulate(Problem(profile, cost), wfbp).iteration_time == pytest.approx(5.2e-3, abs=1e-12)
    slower = with_reducer_overhead(Problem(profile, cost),
                                   ReducerCalibration("plan", per_step=2e-4, per_message=0.0, message_compute=5e-4))
    assert slower.message_compute == 5e-4
    assert simulate(slower, wfbp).iteration_time == pytest.approx(6.3e-3, abs=1e-12)
    with pytest.raises(ValueError, match="fsdp2 reducer calibration prices fully-sharded problems"):
        with_reducer_overhead(Problem(profile, cost), ReducerCalibration("fsdp2", per_step=0.0, per_message=0.0))


@pytest.mark.parametrize("changes, message", [
    ({"schema": "fusionopt.cost"}, "not a reducer calibration"),
    ({"reducer": "horovod"}, "unknown reducer 'horovod'"),
    ({"per_message": -1e-3}, "per_message must be a finite number of seconds >= 0"),
    ({"per_step": "fast"}, "per_step must be a finite number"),
    ({"version": 7}, "unsupported reducer calibration version 7"),
    ({"samples": [{"messages": 1}]}, "samples must be a list"),
])
def test_bad_files_name_the_file_and_the_fault(tmp_path, changes, message):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(document(**changes)))
    with pytest.raises(ValueError, match=message) as caught:
        read_reducer_calibration(path)
    assert str(caught.value).startswith(str(path))


def test_malformed_json_names_the_file(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("{\"schema\": ")
    with pytest.raises(ValueError, match="r.json: malformed JSON"):
        read_reducer_calibration(path)


def test_the_figures_in_words_name_what_was_measured():
    # 2^20 B x 5e-10 s/B = 0.524288 ms per MiB; FSDP2 sends collectives and has no compute per message.
    plan = ReducerCalibration("plan", per_step=7e-4, per_message=4e-4, message_compute=2.5e-4, ranks=4,
                              samples=(Sample(1, 0.01, 0.005, 0.005),), torch_version="2.13.0")
    assert plan.summary() == ("plan: 0.700 ms per step on the host, 0.400 ms per message on the channel, 0.250 ms of "
                              "compute per message; samples: 1 with the channel critical, 0 with the compute critical; "
                              "4 gloo ranks, torch 2.13.0")
    sharded = ReducerCalibration("fsdp2", per_step=1e-3, per_message=2e-3, per_byte=5e-10,
                                 model={"shapes": [[4, 64]]}, torch_version="2.13.0")
    assert sharded.summary() == ("fsdp2: 1.000 ms per step and 0.000 ms per parameter tensor on the host, 2.000 ms "
                                 "per collective and 0.524 ms per MiB of it on the channel; samples: 0 with the "
                                 "channel critical; 2 gloo ranks, torch 2.13.0")
    # A result's part of a calibration: what it lacks counts as 0, and a cost of 0 it did not measure is not named.
    assert reducer_cost_words({"reducer": "ddp", "per_step": 1e-3, "per_message": 0.0}) == (
        "1.000 ms per step on the host, 0.000 ms per bucket on the channel, 0.000 ms of compute per bucket "
        "(not measured)")


# ---------------------------------------------------------------------- a short real run
@pytest.mark.parametrize("reducer", ["plan", "ddp", "fsdp2"])
def test_short_gloo_calibration_gives_finite_non_negative_figures(reducer):
    torch = pytest.importorskip("torch")
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    from fusionopt.integrations import measure_reducer_overhead

    compute = {} if reducer == "fsdp2" else {"compute_counts": (1, 2), "compute_layers": 2, "compute_width": 16,
                                             "compute_batch": 8, "compute_link": AlphaBeta(2e-4, 0.0)}
    result = measure_reducer_overhead(reducer, 2, message_counts=(1, 2), layers=2, width=8, steps=2, warmup=1,
                                      rounds=1, link=AlphaBeta(1e-3, 0.0), tensor_counts=(3,), widths=(16,),
                                      optimizer="SGD", optimizer_options={"lr": 1e-3, "momentum": 0.9}, **compute)
    assert result.reducer == reducer and result.ranks == 2 and result.backend == "gloo"
    for figure in (result.per_step, result.per_message, result.per_tensor, result.per_byte):
        assert math.isfinite(figure) and figure >= 0
    assert result.model["optimizer"] == {"name": "SGD", "options": {"lr": 1e-3, "momentum": 0.9}}
    per_count = 2 if reducer == "fsdp2" else 1      # FSDP2: an all-gather and a reduce-scatter per unit
    # The channel regime's two message counts on 2 layers 8 wide, then the shape regime's one
    # message on 3 layers 8 wide and on 2 layers 16 wide.
    assert [s.messages for s in result.samples] == [per_count * 1, per_count * 2, per_count, per_count]
    assert [s.tensors for s in result.samples] == [2, 2, 3, 2]
    # The bytes the link carried per step: the layers' fp32 weights once per collective.
    assert [s.nbytes for s in result.samples] == [per_count * 4 * w * w * n for n, w in ((2, 8), (2, 8), (3, 8),
                                                                                          (2, 16))]
    # Each sample's link time is its messages' 1 ms holds.
    assert [s.link for s in result.samples] == pytest.approx([1e-3 * s.messages for s in result.samples], rel=1e-6)
    assert math.isfinite(result.message_compute) and result.message_compute >= 0
    if reducer == "fsdp2":
        assert result.compute_samples == () and result.message_compute == 0.0
    else:
        # The compute regime keeps one message's link time: the last one's 0.2 ms hold.
        assert [s.messages for s in result.compute_samples] == [1, 2]
        assert [s.link for s in result.compute_samples] == pytest.approx([2e-4, 2e-4], rel=1e-6)


def test_bad_arguments_are_refused_before_any_rank_starts():
    pytest.importorskip("torch")
    from fusionopt.integrations import measure_reducer_overhead

    with pytest.raises(ValueError, match="unknown reducer 'horovod'"):
        measure_reducer_overhead("horovod")
    with pytest.raises(ValueError, match="message_counts must hold at least two divisors of layers"):
        measure_reducer_overhead("plan", message_counts=(1, 3), layers=4)
    with pytest.raises(ValueError, match=r"compute_counts must hold at least two divisors of layers \(8\)"):
        measure_reducer_overhead("plan", compute_counts=(1, 3))
    with pytest.raises(ValueError, match="the fsdp2 reducer has no compute regime"):
        measure_reducer_overhead("fsdp2", compute_counts=(1, 2))
    with pytest.raises(ValueError, match=r"^ranks: FSDP2 sharded over one rank sends no all-gather and no "
                                         r"reduce-scatter \(torch 2\.13\), so there is no message to measure"):
        measure_reducer_overhead("fsdp2", 1)
    with pytest.raises(ValueError, match="compute_width must be a whole number >= 1, got 0"):
        measure_reducer_overhead("ddp", compute_width=0)
    with pytest.raises(ValueError, match=r"tensor_counts must hold whole numbers >= 1, got \[0\]"):
        measure_reducer_overhead("ddp", tensor_counts=(0,))
    with pytest.raises(ValueError, match="optimizer 'Adagrad2': not an optimiser class of torch.optim"):
        measure_reducer_overhead("ddp", optimizer="Adagrad2")
    with pytest.raises(ValueError, match=r"^optimizer SGD\(lr=0.1, betas=\[0.9, 0.99\]\): .*betas"):
        measure_reducer_overhead("ddp", optimizer_options={"lr": 0.1, "betas": [0.9, 0.99]})
    with pytest.raises(ValueError, match="optimizer_options must be JSON"):
        measure_reducer_overhead("ddp", optimizer_options={"lr": object()})
