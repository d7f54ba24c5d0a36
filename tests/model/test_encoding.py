"""What goes on the wire (``fusionopt.model._encoding``): encoded costs by hand, the cheapest
encoding's crossovers, and the exact fusion DP choosing grouping and encodings together,
held to brute force over every grouping and every message's encoding."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusionopt.cost import AlphaBeta, Cheapest, Encoded, Encoding
from fusionopt.model import Plan, Problem, simulate, allreduce_program
from fusionopt.cost import cost_from_dict, BF16, FP16, FP32, crossovers, encodings_of
from fusionopt.model import replay
from fusionopt.solvers import solve
from strategies import alpha_beta, profiles

LINK = AlphaBeta(25e-6, 0.8e-9)


def test_an_encoded_message_by_hand():
    fp16 = FP16.with_costs(seconds_per_byte=2e-12, seconds_per_message=10e-6)
    c = Encoded(LINK, fp16)
    # 1 MB: 25 us + 0.8 ns x 0.5 MB = 425 us on the wire, 10 us + 2 us of casts.
    assert c(1e6) == pytest.approx(437e-6) and c(0) == 0.0
    assert c.affine == pytest.approx((35e-6, 0.402e-9))
    # Per byte of 1 MB at most: 25 us / 1 MB + 0.4 ns (the wire), 10 us / 1 MB + 2 ps (the casts).
    assert c.least_seconds_per_byte(1e6) == pytest.approx(0.437e-9) == c(1e6) / 1e6
    assert c.scaled(2)(1e6) == pytest.approx(874e-6)
    assert cost_from_dict(json.loads(json.dumps(c.to_dict()))) == c


def test_the_cheapest_encoding_and_its_crossover_by_hand():
    # fp16 saves 0.4 ns/B and costs 40 us a message: it wins from 100 kB; bf16 is as cheap
    # as fp16 on the wire and listed after it, so it never wins a tie.
    fp16, bf16 = FP16.with_costs(seconds_per_message=40e-6), BF16.with_costs(seconds_per_message=40e-6)
    c = Cheapest(LINK, [FP32, fp16, bf16])
    assert c.choose([1e3, 99_999, 100_001, 1e8]) == ["fp32", "fp32", "fp16", "fp16"]
    assert c(1e6) == pytest.approx(465e-6) and c(1e4) == pytest.approx(33e-6)
    assert crossovers(LINK, [FP32, fp16, bf16], upto=1e9, tolerance=0.5) == [pytest.approx(100_000, abs=0.5)]
    assert crossovers(LINK, [FP32, fp16], upto=5e4) == []
    assert cost_from_dict(c.to_dict()) == c and encodings_of([10, 1e6], c) == ["fp32", "fp16"]
    assert encodings_of([10, 1e6], Encoded(LINK, "bf16")) == ["bf16", "bf16"]
    assert encodings_of([10], LINK) == ["fp32"]


def test_error_bounds_by_hand():
    # gamma_{P+1} = (P + 1) u / (1 - (P + 1) u): fp16 on 2 ranks, 3 roundings of 2**-11.
    assert FP16.error_bound(2) == pytest.approx(3 * 2 ** -11 / (1 - 3 * 2 ** -11))
    assert BF16.error_bound(7) == pytest.approx(8 * 2 ** -8 / (1 - 8 * 2 ** -8))
    assert BF16.error_bound(255) == float("inf") and FP32.error_bound(1024) == 0.0


def test_bad_encodings_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^unknown encoding 'int8': choose one of fp32, fp16, bf16, or give an Encoding$"):
        Encoded(LINK, "int8")
    with pytest.raises(ValueError, match=r"^encoding 'x': wire_ratio must be > 0, got 0.0$"):
        Encoding("x", wire_ratio=0)
    with pytest.raises(ValueError, match=r"^encodings must have distinct names, got \['fp16', 'fp16'\]$"):
        Cheapest(LINK, ["fp16", FP16])
    with pytest.raises(ValueError, match=r"^cost.encoding: unknown field\(s\) ratio$"):
        cost_from_dict({"kind": "encoded", "cost": LINK.to_dict(), "encoding": {"name": "y", "ratio": 1}})
    with pytest.raises(ValueError, match=r"^ranks must be an integer >= 1, got 0$"):
        FP16.error_bound(0)
    # An encoding casts fp32 gradients: a profile whose gradients are another dtype is refused.
    import dataclasses
    from fusionopt.model import Profile

    plain = Profile.from_arrays([400, 800], [1e-3] * 2, [1e-3] * 2)
    mixed = dataclasses.replace(plain, dtypes=("float32", "bfloat16"))
    with pytest.raises(ValueError, match=r"^encoding 'fp16' casts fp32 gradients, and tensor 't1' \(index 1\) holds "
                                         r"bfloat16 ones: leave the encodings out, or give a profile of fp32 gradients$"):
        Problem(mixed, Cheapest(LINK, ["fp32", "fp16"]))
    with pytest.raises(ValueError, match=r"^encoding 'bf16' casts fp32 gradients, and profile 'without a name' holds "
                                         r"2-byte ones \(dtype_bytes=2\)"):
        Problem(dataclasses.replace(plain, dtype_bytes=2), Encoded(LINK, "bf16"))
    assert Problem(mixed, LINK).cost == LINK                 # without encodings, any dtype


def groupings(n):
    """Every fusion plan's groups of ``n`` tensors in backward order (cuts between them)."""
    order = list(range(n - 1, -1, -1))
    for cuts in itertools.product([False, True], repeat=n - 1):
        groups, current = [], [order[0]]
        for tensor, cut in zip(order[1:], cuts):
            if cut:
                groups.append(current)
                current = []
            current.append(tensor)
        yield groups + [current]


@settings(deadline=None, max_examples=40)
@given(profiles(max_n=5), alpha_beta, st.floats(0.0, 2e-3), st.floats(0.0, 1e-9), st.sampled_from(["barrier",
                                                                                                   "layerwise"]))
def test_the_dp_on_the_cheapest_encoding_is_the_joint_optimum(profile, link, overhead, per_byte, sync):
    profile = profile.with_orders(ready_order=list(range(profile.n - 1, -1, -1)))
    encodings = [FP32, FP16.with_costs(seconds_per_message=overhead, seconds_per_byte=per_byte), BF16]
    problem = Problem(profile, Cheapest(link, encodings), sync=sync)
    result = solve(problem, "dp")
    # Brute force: every grouping, every message in every encoding, each step replayed by the engine.
    best = np.inf
    for groups in groupings(profile.n):
        plan = Plan.from_groups(profile, groups)
        program = allreduce_program(Problem(profile, link, sync=sync), plan)
        for chosen in itertools.product(encodings, repeat=len(groups)):
            durations = [Encoded(link, e)(float(s)) for e, s in zip(chosen, plan.message_bytes)]
            best = min(best, replay(program, durations)["iteration_time"])
    assert result.iteration_time == pytest.approx(best, rel=1e-9, abs=1e-15)
    # The plan's encodings, each message's cheapest, give its simulated step.
    chosen = encodings_of(result.plan.message_bytes, problem.cost)
    program = allreduce_program(Problem(profile, link, sync=sync), result.plan)
    durations = [Encoded(link, {e.name: e for e in encodings}[name])(float(s))
                 for name, s in zip(chosen, result.plan.message_bytes)]
    assert replay(program, durations)["iteration_time"] == pytest.approx(
        simulate(problem, result.plan).iteration_time, rel=1e-12, abs=1e-15)


def test_cpsat_and_brute_force_choose_the_encodings_as_the_dp_does():
    pytest.importorskip("ortools", reason="CP-SAT needs the solvers extra (OR-Tools)")
    from fusionopt.model import Profile

    profile = Profile.from_arrays([4e6, 1e6, 2e6, 4e3, 3e5], [1e-3] * 5, [3e-3, 2e-3, 1e-3, 1e-4, 5e-4])
    cost = Cheapest(LINK, [FP32, FP16.with_costs(seconds_per_message=40e-6), BF16.with_costs(seconds_per_message=60e-6)])
    times = {method: solve(Problem(profile, cost), method).iteration_time for method in ("dp", "cpsat", "brute")}
    assert times["cpsat"] == pytest.approx(times["dp"], rel=1e-9) == times["brute"]
    # The same plan with every message in fp32 is slower: its messages above 100 kB gain from fp16.
    fp32 = simulate(Problem(profile, LINK), solve(Problem(profile, cost), "dp").plan).iteration_time
    assert fp32 > times["dp"]


def test_an_encoded_cost_file_with_an_unknown_key_is_named():
    doc = {**Encoded(LINK, "fp16").to_dict(), "ratio": 0.5}
    with pytest.raises(ValueError, match=r"^cost: unknown key 'ratio' in a encoded cost \(its keys: schema, version, "
                                         r"kind, calibration, cost, encoding\)$"):
        cost_from_dict(doc)


def test_a_cast_on_the_compute_stream_runs_as_the_problems_per_message_compute():
    # MODEL.md section 5's profile (4, 1, 2 MB; backward 3, 2, 1 ms; forward 1 ms each) on
    # alpha 1 ms, beta 1 ns/B in fp16 (0.5 ns/B on the wire), the cast 0.1 ms + 0.5 ns an fp32
    # byte on the compute stream and 0.2 ns/B of copy back on the message's path: 0.7 ns/B.
    # The DP's {t3, t2}, {t1}: t2 ready at 3, the 3 MB cast to 4.6, sent 4.6-7.7; t1 4.6-7.6,
    # its cast to 9.7, sent 9.7-13.5; T = 16.5 ms. WFBP pays a third cast's 0.1 ms: 16.6.
    from fusionopt.model import Profile

    profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    link = AlphaBeta(1e-3, 1e-9)
    fp16 = FP16.with_costs(seconds_per_byte=0.2e-9, compute_per_byte=0.5e-9, compute_per_message=0.1e-3)
    problem = Problem(profile, Encoded(link, fp16))
    assert problem.extensions == ("message_compute",) and problem.message_compute_terms == (0.1e-3, 0.5e-9)
    assert Encoded(link, fp16)(1e6) == pytest.approx(1.7e-3)          # the path's part only
    for method in ("dp", "brute", "cpsat"):
        result = solve(problem, method)
        assert result.plan.groups() == [[2, 1], [0]] and result.iteration_time == pytest.approx(16.5e-3), method
    assert solve(problem, "wfbp").iteration_time == pytest.approx(16.6e-3)
    # The same as the path's part with the cast given to the problem as its per-message compute.
    apart = Problem(profile, Encoded(link, fp16.with_costs(compute_per_byte=0, compute_per_message=0)),
                    message_compute=0.1e-3, message_compute_per_byte=0.5e-9)
    for groups in groupings(3):
        plan = Plan.from_groups(profile, groups)
        assert simulate(problem, plan).iteration_time == simulate(apart, plan).iteration_time
    assert problem.plain().cost == apart.cost and problem.plain().extensions == ()
    assert cost_from_dict(json.loads(json.dumps(problem.cost.to_dict()))) == problem.cost
    assert "compute_per_byte" not in FP16.to_dict()                   # written where given


def test_a_cast_on_the_compute_stream_is_refused_where_it_cannot_run():
    from fusionopt.model import Decoupled, Profile

    profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    fp16 = FP16.with_costs(compute_per_byte=0.5e-9)
    with pytest.raises(ValueError, match="^Cheapest: encoding 'fp16' runs part of its cast on the compute stream"):
        Cheapest(LINK, [FP32, fp16])
    with pytest.raises(ValueError, match="reduce_scatter cost: encoding 'fp16' runs part of its cast on the compute "
                                         "stream, which a problem runs for the all-reduce's own Encoded cost only"):
        Problem(profile, pattern=Decoupled(Encoded(LINK, fp16), LINK))
    with pytest.raises(ValueError, match="^encoding 'fp16': compute_per_byte must be"):
        FP16.with_costs(compute_per_byte=-1.0)
