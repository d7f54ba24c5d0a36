"""US-Byte: hand-worked layerwise cases, the static plan against the policy's own timing,
bounds, the priority search against forward order, the fitted presets and bad input."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from strategies import alpha_beta, problems

from fusionopt.cost import AlphaBeta, PiecewiseLinear, network
from fusionopt.model import Problem, Profile, simulate, fluid_bound
from fusionopt.solvers import solve, OPTIMALITY_RTOL
from fusionopt.solvers.papers import DEFAULT_UNIT_PARAMETERS, dispatch, usbyte

MS = 1e-3
MB = 1_000_000
EXACT = 1e-12          # seconds: hand-worked times hold to the digit


def blocks(schedule_or_plan) -> list[tuple[int, int, int]]:
    plan = getattr(schedule_or_plan, "plan", schedule_or_plan)
    return [(c.tensor, c.lo, c.hi) for m in plan.messages for c in m.chunks]


def in_ms(values) -> list[float]:
    return [v / MS for v in np.asarray(values).tolist()]


# --- hand-worked cases -------------------------------------------------------------------------

def promotion_case() -> Problem:
    # Forward order t1 = 1 MB, t2 = 2 MB, t3 = 2 MB; backward 3, 1, 1 ms, so t3 is ready at
    # 1 ms, t2 at 2, t1 at 5 (B); forward 2, 1, 1 ms (F = 4); alpha 2 ms, 1 ms/MB.
    profile = Profile.from_arrays([MB, 2 * MB, 2 * MB], [2 * MS, MS, MS], [3 * MS, MS, MS])
    return Problem(profile, AlphaBeta(2 * MS, 1e-9), sync="layerwise")


def test_hand_worked_promotion():
    problem = promotion_case()
    assert in_ms(problem.profile.ready_times) == pytest.approx([5, 2, 1], abs=EXACT / MS)
    unit = MB // 4                               # 1 MB units of float32: b S_p = 1 ms
    # Forward order (t1 best). At 1 t3 is pending; the next gradient (t2) is ready at 2:
    # D = 1 < alpha, so one unit: t3 [0, 1 MB) 1 -> 4. At 4 t2 (ready at 2) outranks t3;
    # the next gradient (t1) is ready at 5: D = 1 < alpha, one unit: t2 [0, 1 MB) 4 -> 7.
    # At 7 >= B, phase 2 in forward order: t1 7 -> 10, t2's last MB 10 -> 13, t3's 13 -> 16.
    # phi_1 = max(5, 10) = 10, +2 -> 12; phi_2 = max(12, 13) = 13, +1 -> 14;
    # phi_3 = max(14, 16) = 16, +1 -> T = 17.
    forward = dispatch(problem, [0, 1, 2], unit_parameters=unit)
    assert blocks(forward) == [(2, 0, MB), (1, 0, MB), (0, 0, MB), (1, MB, 2 * MB), (2, MB, 2 * MB)]
    assert forward.phases == (1, 1, 2, 2, 2)
    assert in_ms(forward.start) == pytest.approx([1, 4, 7, 10, 13], abs=EXACT / MS)
    assert in_ms(forward.end) == pytest.approx([4, 7, 10, 13, 16], abs=EXACT / MS)
    assert forward.iteration_time / MS == pytest.approx(17, abs=EXACT / MS)
    result = usbyte(problem, unit_parameters=unit, priority="forward")
    assert blocks(result.plan) == blocks(forward) and result.iteration_time == forward.iteration_time
    assert result.stats["evaluations"] == 1 and result.stats["priority_order"] == (0, 1, 2)

    # The search, l = t3: t2's phase-1 block went between t3's first and last blocks (t2 became
    # ready at 2, during t3's transmission 1 -> 16), so try t3 above t2: order t1, t3, t2.
    # At 4 t3 outranks t2: D = 1 < alpha, one unit, t3's last: 4 -> 7. Phase 2: t1 7 -> 10,
    # t2 whole (2 MB) 10 -> 14. phi_1 = 10 -> 12; phi_2 = 14 -> 15; phi_3 = max(15, 7) -> 16.
    # 16 < 17: kept. l = t2 now goes in one block: nothing preempts it, no evaluation.
    promoted = dispatch(problem, [0, 2, 1], unit_parameters=unit)
    assert blocks(promoted) == [(2, 0, MB), (2, MB, 2 * MB), (0, 0, MB), (1, 0, 2 * MB)]
    assert promoted.phases == (1, 1, 2, 2)
    assert in_ms(promoted.end) == pytest.approx([4, 7, 10, 14], abs=EXACT / MS)
    result = usbyte(problem, unit_parameters=unit)
    assert result.iteration_time / MS == pytest.approx(16, abs=EXACT / MS)
    assert blocks(result.plan) == blocks(promoted)
    assert dict(result.stats) == {
        "unit_parameters": unit, "unit_bytes": MB, "priority": "search", "priority_order": (0, 2, 1),
        "evaluations": 2, "promotions": 1, "phase1_blocks": 2, "phase2_blocks": 2,
    }
    assert in_ms(result.timeline.forward_start) == pytest.approx([10, 14, 15], abs=EXACT / MS)


def worked_example(alpha_ms: float) -> Problem:
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    return Problem(profile, AlphaBeta(alpha_ms * MS, 1e-9), sync="layerwise")


def test_hand_worked_gap_filling_blocks():
    # MODEL.md section 5 (t3 ready at 1, t2 at 3, t1 at 6 ms), alpha 0.75 ms, units of
    # 100,000 parameters = 0.4 MB (b S_p = 0.4 ms): t1 has 10 units, t2 3 (the last 0.2 MB),
    # t3 5. Forward order:
    #   t = 1:    t3; D = 3 - 1 = 2 >= alpha: ceil((2 - 0.75) / 0.4) = ceil(3.125) = 4 < 5 units:
    #             t3 [0, 1.6 MB) 1 -> 1 + 0.75 + 1.6 = 3.35 (ends after t2 arrives, as stated)
    #   t = 3.35: t2 outranks t3; D = 6 - 3.35 = 2.65: ceil(4.75) = 5 >= 3: t2 whole -> 5.1
    #   t = 5.1:  t3; D = 0.9: ceil(0.375) = 1 >= its 1 unit left: t3 [1.6, 2 MB) -> 6.25
    #   t = 6.25 >= B: phase 2, t1 whole -> 11.  phi = 11, 12, 13: T = 14.
    problem = worked_example(0.75)
    unit = 100_000
    forward = usbyte(problem, unit_parameters=unit, priority="forward")
    assert blocks(forward.plan) == [(2, 0, 1_600_000), (1, 0, MB), (2, 1_600_000, 2 * MB), (0, 0, 4 * MB)]
    assert in_ms(forward.timeline.message_end) == pytest.approx([3.35, 5.1, 6.25, 11], abs=EXACT / MS)
    assert forward.iteration_time / MS == pytest.approx(14, abs=EXACT / MS)
    # Search, l = t3: t2 preempted it (phase 1): try t1, t3, t2. At 3.35 t3's last unit
    # -> 4.5; t2, D = 1.5: ceil((1.5 - 0.75) / 0.4) = ceil(1.875) = 2 < 3 units: t2 [0, 0.8 MB)
    # 4.5 -> 6.05. Phase 2: t1 6.05 -> 10.8, t2's last 0.2 MB -> 11.75.
    # phi_1 = 10.8 -> 11.8; phi_2 = max(11.8, 11.75) -> 12.8; phi_3 -> T = 13.8 < 14: kept.
    # l = t2: only t1's phase-2 block lies between its blocks, so no trial.
    result = usbyte(problem, unit_parameters=unit)
    assert blocks(result.plan) == [(2, 0, 1_600_000), (2, 1_600_000, 2 * MB), (1, 0, 800_000), (0, 0, 4 * MB),
                                   (1, 800_000, MB)]
    assert in_ms(result.timeline.message_start) == pytest.approx([1, 3.35, 4.5, 6.05, 10.8], abs=EXACT / MS)
    assert in_ms(result.timeline.message_end) == pytest.approx([3.35, 4.5, 6.05, 10.8, 11.75], abs=EXACT / MS)
    assert result.iteration_time / MS == pytest.approx(13.8, abs=EXACT / MS)
    assert result.stats["priority_order"] == (0, 2, 1) and result.stats["evaluations"] == 2
    assert (result.stats["phase1_blocks"], result.stats["phase2_blocks"]) == (3, 2)


def test_gap_equal_to_alpha_and_free_bytes():
    # Reading 4. t2 (index 1) is ready at 1 ms, t1 at 2 ms: at 1 ms D = 1 ms.
    profile = Profile.from_arrays([8 * 4, 8 * 4], [MS, MS], [MS, MS])
    # D = alpha exactly: the formula gives 0 units; a block holds at least one.
    exact = usbyte(Problem(profile, AlphaBeta(MS, 1e-6), sync="layerwise"), unit_parameters=1)
    assert blocks(exact.plan)[0] == (1, 0, 4)
    # beta = 0: a block costs alpha whatever its size, so the whole remainder goes (1 -> 1.5);
    # the channel then idles until t1 is ready (2 -> 2.5).
    free = usbyte(Problem(profile, AlphaBeta(0.5 * MS, 0.0), sync="layerwise"), unit_parameters=1)
    assert blocks(free.plan) == [(1, 0, 32), (0, 0, 32)]
    assert in_ms(free.timeline.message_start) == pytest.approx([1, 2], abs=EXACT / MS)


def test_on_the_partition_grid_and_above_its_optimum():
    # CP-SAT's hand-worked layerwise case (tests/solvers/test_cpsat_partition.py): 14 ms is
    # optimal over every plan on the 1 MB grid. US-Byte: at 1 ms D = 1 ms = alpha, one unit of
    # t3 (1 -> 3); at 3 = B phase 2: t1 3 -> 5, t2 5 -> 7, t3's other 5 MB 7 -> 13;
    # phi = 5, 7, 13: T = 15. Nothing preempted t3 in phase 1: no trial.
    profile = Profile.from_arrays([MB, MB, 6 * MB], [2 * MS] * 3, [MS] * 3)
    problem = Problem(profile, AlphaBeta(MS, 1e-9), sync="layerwise")
    result = usbyte(problem, unit_parameters=MB // 4)
    assert blocks(result.plan) == [(2, 0, MB), (0, 0, MB), (1, 0, MB), (2, MB, 6 * MB)]
    assert result.iteration_time / MS == pytest.approx(15, abs=EXACT / MS)
    assert result.stats["evaluations"] == 1
    optimum = solve(problem, "cpsat", unit_parameters=MB // 4, workers=1)
    assert optimum.iteration_time / MS == pytest.approx(14, abs=1e-9)


# --- properties --------------------------------------------------------------------------------

@st.composite
def cases(draw):
    problem = draw(problems(max_n=8, cost=alpha_beta, sync="layerwise"))
    largest = int(problem.profile.sizes.max()) // problem.profile.dtype_bytes
    assume(largest >= 1)                          # else no unit fits: refused, tested below
    pieces = draw(st.integers(1, 12))
    unit = draw(st.one_of(st.integers(1, largest), st.just(max(1, largest // pieces))))
    return problem, unit


@settings(deadline=None)
@given(case=cases())
def test_static_plan_reproduces_the_policy(case):
    problem, unit = case
    profile = problem.profile
    unit_bytes = unit * profile.dtype_bytes
    for priority in ("forward", "search"):
        result = usbyte(problem, unit_parameters=unit, priority=priority)
        result.plan.validate(profile)                       # every byte exactly once
        schedule = dispatch(problem, result.stats["priority_order"], unit_parameters=unit)
        assert schedule.plan == result.plan
        timeline = simulate(problem, schedule.plan)
        assert timeline.iteration_time == schedule.iteration_time == result.iteration_time
        assert np.array_equal(timeline.message_start, schedule.start)
        assert np.array_equal(timeline.message_end, schedule.end)
        # Every block is one message of consecutive units of one tensor, from a unit boundary.
        for message in result.plan.messages:
            (chunk,) = message.chunks
            assert chunk.lo % unit_bytes == 0
            assert chunk.hi % unit_bytes == 0 or chunk.hi == profile.sizes[chunk.tensor]
        # Phase 1 runs before B, phase 2 once every gradient is ready, in forward order.
        phase2 = [c.tensor for c, p in zip(schedule.chunks, schedule.phases) if p == 2]
        assert phase2 == sorted(set(phase2))
        for start, phase in zip(schedule.start, schedule.phases):
            assert (start < profile.B) if phase == 1 else (start >= profile.B)
        assert result.stats["phase1_blocks"] + result.stats["phase2_blocks"] == result.num_messages
        assert result.stats["phase1_blocks"] <= 2 * profile.n


@settings(deadline=None)
@given(case=cases())
def test_bounds_and_search_against_forward_order(case):
    problem, unit = case
    forward = usbyte(problem, unit_parameters=unit, priority="forward")
    searched = usbyte(problem, unit_parameters=unit, priority="search")
    assert forward.stats["priority_order"] == tuple(range(problem.profile.n))
    assert searched.iteration_time <= forward.iteration_time
    assert 1 <= searched.stats["evaluations"] <= problem.profile.n
    assert searched.stats["promotions"] < searched.stats["evaluations"]
    bound = fluid_bound(problem)
    assert searched.iteration_time >= bound * (1 - OPTIMALITY_RTOL)
    assert forward.iteration_time >= bound * (1 - OPTIMALITY_RTOL)


@settings(deadline=None)
@given(case=cases())
def test_phase_one_blocks_end_when_the_next_gradient_arrives(case):
    # A phase-1 block cut short of its tensor's remainder ends at or after the next ready time
    # (one unit if D < a, else the ceil of the paper's formula), and one unit fewer would not.
    problem, unit = case
    alpha, beta = problem.cost.affine
    unit_cost = beta * unit * problem.profile.dtype_bytes
    ready = problem.profile.ready_times
    sizes = problem.profile.sizes
    schedule = dispatch(problem, range(problem.profile.n), unit_parameters=unit)
    tolerance = 1e-9 * max(problem.profile.B, schedule.end[-1], 1e-9)
    for chunk, phase, start, end in zip(schedule.chunks, schedule.phases, schedule.start, schedule.end):
        if phase != 1 or chunk.hi == sizes[chunk.tensor]:
            continue
        next_ready = ready[ready > start].min()
        assert end >= next_ready - tolerance
        if chunk.nbytes > unit * problem.profile.dtype_bytes:
            assert next_ready - start >= alpha and end - unit_cost < next_ready + tolerance


# --- presets -----------------------------------------------------------------------------------

@pytest.mark.parametrize("workers, a, b", [(2, 556.6e-6, 0.352e-10), (4, 948.98e-6, 1.541e-10),
                                           (8, 1318.6e-6, 2.406e-10)])
def test_usbyte_fitted_presets(workers, a, b):
    # PAPERS.md seed 3: T = a + b * parameters; FP32 gradients, so beta = b / 4 per byte.
    cost = network("usbyte", workers)
    assert cost.alpha == a
    assert cost.beta == pytest.approx(b / 4, rel=1e-15)
    parameters = 25_557_032                       # ResNet-50
    assert cost(4 * parameters) == pytest.approx(a + b * parameters, rel=1e-12)


def test_usbyte_preset_refuses_other_worker_counts():
    with pytest.raises(ValueError, match="fitted constants for workers = 2, 4, 8 only, not 16"):
        network("usbyte", 16)


def test_runs_on_the_fitted_preset():
    problem = Problem(worked_example(1).profile, network("usbyte", 8), sync="layerwise")
    result = usbyte(problem, unit_parameters=100_000)
    result.plan.validate(problem.profile)
    assert result.iteration_time == simulate(problem, result.plan).iteration_time
    assert result.iteration_time >= fluid_bound(problem) * (1 - OPTIMALITY_RTOL)


# --- bad input ---------------------------------------------------------------------------------

def test_barrier_sync_is_refused():
    problem = Problem(worked_example(1).profile, AlphaBeta(MS, 1e-9), sync="barrier")
    with pytest.raises(ValueError, match="usbyte is for sync='layerwise' only.*sync='barrier'"):
        usbyte(problem, unit_parameters=100_000)


@pytest.mark.parametrize("unit", [0, -5, 1.5, 250_000.0, True, "1000", None])
def test_bad_unit_is_refused(unit):
    with pytest.raises(ValueError, match="unit_parameters must be an integer >= 1"):
        usbyte(worked_example(1), unit_parameters=unit)


def test_a_unit_larger_than_every_tensor_sends_whole_tensors():
    problem = worked_example(1)                    # largest tensor: 4e6 bytes = 1e6 parameters
    equal = usbyte(problem, unit_parameters=1_000_000)
    larger = usbyte(problem, unit_parameters=1_000_001)
    assert equal.num_messages == larger.num_messages == 3
    assert [m.nbytes for m in larger.plan.messages] == [int(problem.profile.sizes[i]) for i in (2, 1, 0)]
    assert larger.iteration_time == equal.iteration_time
    assert DEFAULT_UNIT_PARAMETERS == 1_000_000
    small = Problem(Profile.from_arrays([4e5, 1e5], [MS] * 2, [MS] * 2), AlphaBeta(MS, 1e-9), sync="layerwise")
    assert usbyte(small).num_messages == 2          # the default unit, 4 MB, on 0.4 MB tensors


def test_non_affine_cost_and_extensions_are_refused():
    profile = worked_example(1).profile
    measured = PiecewiseLinear([1000, 10**6, 10**7], [1e-4, 1e-3, 5e-3])
    with pytest.raises(ValueError, match="usbyte needs an affine cost.*PiecewiseLinear is not affine"):
        usbyte(Problem(profile, measured, sync="layerwise"), unit_parameters=100_000)
    contended = Problem(profile, AlphaBeta(MS, 1e-9), sync="layerwise", contention=1.5)
    with pytest.raises(ValueError, match="usbyte applies to the plain model only.*contention"):
        usbyte(contended, unit_parameters=100_000)


def test_bad_priority_is_refused():
    with pytest.raises(ValueError, match="unknown priority 'backward': choose 'search' or 'forward'"):
        usbyte(worked_example(1), unit_parameters=100_000, priority="backward")
    with pytest.raises(ValueError, match=r"priority_order must be a permutation of 0..2"):
        dispatch(worked_example(1), [0, 0, 1], unit_parameters=100_000)
