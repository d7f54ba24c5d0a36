"""Fully sharded steps whose collectives block the training thread (MODEL.md section 8.2's
option, ``FullySharded(blocking=True)``: FSDP2 on CPU with gloo)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import alpha_beta, profiles, sharded_plans

from fusionopt.cost import AlphaBeta
from fusionopt.executor import build_program
from fusionopt.model import FullySharded, Problem, Profile, ShardedPlan, compute_pieces, simulate, sharded_lower_bound
from fusionopt.solvers import solve
from fusionopt.advice import fsdp2_plan_of, fsdp2_settings

MS = 1e-3
HALF = AlphaBeta(MS, 1e-9)                               # 1 ms + 1 ns/B for each collective


def section5(blocking=True, cap=None):
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    return Problem(profile, pattern=FullySharded(HALF, HALF, memory_cap=cap, blocking=blocking))


def ms(values):
    return [round(v / MS, 9) for v in np.asarray(values).tolist()]


def test_each_collective_holds_the_stream_from_its_issue_to_its_end():
    # Units {t1, t2} (5 MB, 6 ms each way) and {t3} (2 MB, 3 ms), both kept, prefetch 1 each way.
    # The first gather 0-6; at unit 0's forward start the second gather is issued and the
    # stream waits for it, 6-9; forwards 9-11 and 11-12; unit 1's backward 12-13, its
    # reduce-scatter 13-16; unit 0's backward 16-21, its reduce-scatter 21-27: T = 27 ms, the
    # compute (9 ms) plus every collective (18 ms). Overlapped (the docstring's case): 22 ms.
    # Memory: unit 0's parameters 0-21 and gradients 16-27 (5 MB each), unit 1's parameters
    # 6-13 and gradients 12-16 (2 MB each): at most 10 MB, during 16-21.
    plan = ShardedPlan([0, 2, 3], [False, False])
    t = simulate(section5(), plan)
    assert ms(t.message_ready) == ms(t.message_start) == [0, 6, 13, 21]
    assert ms(t.message_end) == [6, 9, 16, 27]
    assert ms(t.forward_start) == [9, 10, 11]
    assert round(t.iteration_time / MS, 9) == 27 and t.peak_memory == 10_000_000
    assert round(simulate(section5(False), plan).iteration_time / MS, 9) == 22
    pieces = compute_pieces(section5(), plan)
    assert [(p.kind, p.tensor, round(p.start / MS, 9)) for p in pieces if p.kind == "backward"] == \
        [("backward", 2, 12), ("backward", 1, 16), ("backward", 0, 18)]


def test_a_resharded_unit_is_gathered_again_before_its_backward():
    # One unit of 7 MB (8 ms each way), resharded: gather 0-8, forward 8-11, regather 11-19,
    # backward 19-25, reduce-scatter 25-33: 33 ms, as overlapped (nothing could overlap).
    plan = ShardedPlan([0, 3])
    for blocking in (True, False):
        t = simulate(section5(blocking), plan)
        assert ms(t.message_start) == [0, 11, 25] and round(t.iteration_time / MS, 9) == 33
        assert t.peak_memory == 14_000_000


@settings(deadline=None, max_examples=300)
@given(st.data())
def test_blocking_serialises_the_step_and_is_never_faster(data):
    # Nothing overlaps: T is the compute plus every collective's cost, each collective starting
    # at its issue. Blocking only adds waits, so T is never below the overlapped step's, and
    # the bound of every plan holds.
    profile = data.draw(profiles(1, 7))
    rs, ag = data.draw(alpha_beta), data.draw(alpha_beta)
    plan = data.draw(sharded_plans(profile.n))
    blocking = Problem(profile, pattern=FullySharded(rs, ag, blocking=True))
    t = simulate(blocking, plan)
    costs = [(rs if k == 0 else ag)(float(b)) for k, b in zip(t.message_kind.tolist(), t.message_bytes.tolist())]
    serial = math.fsum([profile.F, profile.B, profile.U, profile.update_lump, profile.host_overhead, *costs])
    assert t.iteration_time == pytest.approx(serial, rel=1e-12, abs=1e-15)
    assert np.array_equal(t.message_start, t.message_ready)
    assert np.all(t.message_start[1:] >= t.message_end[:-1])
    overlapped = simulate(Problem(profile, pattern=FullySharded(rs, ag)), plan)
    assert t.iteration_time >= overlapped.iteration_time * (1 - 1e-12)
    assert t.iteration_time >= sharded_lower_bound(blocking) * (1 - 1e-9) - 1e-15
    assert compute_pieces(blocking, plan)[-1].end == pytest.approx(t.iteration_time, rel=1e-12, abs=1e-15)
    # The executor runs the same program: it waits where the model does.
    program = build_program(blocking, plan)
    waits = [op for op in program.ops if op[0] == "wait"]
    assert len(waits) >= plan.num_messages


def test_fsdp2_on_a_blocking_thread_prefetches_nothing_ahead():
    # FSDP2 on CPU: a unit's all-gather is issued by its own pre-forward (depth 0); a forward
    # list of k units gathers them right after the unit's own (depth k), where a GPU's
    # streams, with the CPU ahead, give depth k + 1.
    names = ["emb.weight", "h.0.w", "h.1.w", "h.2.w", "ln.weight"]
    profile = Profile.from_arrays([4e6] * 5, [MS] * 5, [2 * MS] * 5, names=names)
    problem = Problem(profile, pattern=FullySharded(HALF, HALF, blocking=True))
    default = solve(problem, "fsdp2")
    assert default.plan.forward_prefetch == 0 and default.plan.backward_prefetch == 1
    units = [["h.0"], ["h.1"], ["h.2"], [""]]
    reshard = [True, True, True, False]
    assert fsdp2_plan_of(profile, units, reshard, {}, {}, blocking=True).forward_prefetch == 0
    assert fsdp2_plan_of(profile, units, reshard, {"h.0": ["h.1"]}, {}, blocking=True).forward_prefetch == 1
    assert fsdp2_plan_of(profile, units, reshard, {"h.0": ["h.1"]}, {}).forward_prefetch == 2
    one_ahead = default.plan.replace(forward_prefetch=1)
    settings = fsdp2_settings(problem, one_ahead)
    assert settings.forward_prefetch == {"": ["h.0"], "h.0": ["h.1"], "h.1": ["h.2"]}
    assert settings.plan.forward_prefetch == 1
    assert settings.iteration_time == simulate(problem, one_ahead).iteration_time


def test_refusals():
    with pytest.raises(ValueError, match="blocking must be True or False, got 'yes'"):
        FullySharded(HALF, HALF, blocking="yes")
    with pytest.raises(ValueError, match="channels must be 'one', got 'two'"):
        FullySharded(HALF, HALF, channels="two", blocking=True)
    grouped = ShardedPlan([0, 2, 3], [False, False], reduce_bounds=[0, 1, 3])
    with pytest.raises(ValueError, match="reduce-scatter groups"):
        simulate(section5(), grouped)
    assert section5(cap=1e7).pattern.with_cap(None).blocking
