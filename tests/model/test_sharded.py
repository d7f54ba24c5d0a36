"""Fully sharded data parallelism (MODEL.md section 8.2): problems, plans, timing and memory."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import costs, profiles, sharded_plans

from fusionopt.cost import AlphaBeta, network
from fusionopt.model import (FullySharded, Plan, Problem, Profile, ShardedPlan, compute_pieces, sharded_lower_bound,
                             sharded_memory_floor, simulate)

MS = 1e-3
HALF = AlphaBeta(MS, 1e-9)                               # 1 ms + 1 ns/B for each collective


def section5(cap=None, update=None, **parts):
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS], update=update, **parts)
    return Problem(profile, pattern=FullySharded(HALF, HALF, memory_cap=cap))


def ms(values):
    return [round(v / MS, 9) for v in np.asarray(values).tolist()]


@pytest.mark.parametrize("workers", [2, 8])
@pytest.mark.parametrize("resharded", [True, False])
def test_worked_check_one_unit(workers, resharded):
    # MODEL.md 8.2: one unit, ring costs: T = c_AG(S) + F + [c_AG(S)] + B + c_RS(S) + U.
    profile = Profile.from_arrays([3e6, 5e6], [2 * MS, MS], [MS, 4 * MS], update=[0.5 * MS, 0.25 * MS])
    halves = FullySharded.from_network("10gbe", workers)
    S = 8e6
    ag, rs = float(halves.all_gather(S)), float(halves.reduce_scatter(S))
    a, g = 25e-6, 1 / 1.25e9                              # the 10gbe preset's per-link figures
    assert ag == pytest.approx((workers - 1) * a + (workers - 1) / workers * g * S, rel=1e-12)
    t = simulate(Problem(profile, pattern=halves), ShardedPlan([0, 2], [resharded]))
    expected = ag + 3 * MS + (ag if resharded else 0.0) + 5 * MS + rs + 0.75 * MS
    assert t.iteration_time == pytest.approx(expected, rel=1e-12)
    assert t.message_kind.tolist() == ([1, 1, 0] if resharded else [1, 0])


def test_two_units_hide_the_second_gather():
    # Units {t1, t2} (5 MB) and {t3} (2 MB), kept: the second all-gather (3 ms) runs 6-9 behind
    # the first unit's forward (6-8), the second unit's forward 9-10, backward 10-11 then
    # 11-16, reduce-scatters 11-14 and 16-22 ms.
    t = simulate(section5(), ShardedPlan([0, 2, 3], [False, False]))
    assert ms(t.message_start) == [0, 6, 11, 16] and ms(t.message_end) == [6, 9, 14, 22]
    assert ms(t.message_ready) == [0, 6, 11, 16]
    assert t.message_unit.tolist() == [0, 1, 1, 0] and t.message_kind.tolist() == [1, 1, 0, 0]
    assert ms(t.forward_start) == [6, 7, 9]
    assert round(t.iteration_time / MS, 9) == 22
    # One unit of everything, kept: 0-8, forward 8-11, backward 11-17, reduce-scatter 17-25.
    assert round(simulate(section5(), ShardedPlan([0, 3], [False])).iteration_time / MS, 9) == 25


def test_root_is_one_gather_and_one_reduce_scatter():
    # Root {t1} + {t3} (6 MB): 0-7; unit {t2} gathered 7-9 when the root's first part starts;
    # forwards 7-8, 9-10, 10-11; t2's second gather issued when t3's backward starts (11): 11-13;
    # backward 11-12 (t3), 13-15 (t2), 15-18 (t1); reduce-scatters of t2 15-17 and the root 18-25.
    t = simulate(section5(), ShardedPlan([0, 1, 2, 3], root=True))
    assert ms(t.message_start) == [0, 7, 11, 15, 18] and ms(t.message_end) == [7, 9, 13, 17, 25]
    assert t.message_bytes.tolist() == [6_000_000, 1_000_000, 1_000_000, 1_000_000, 6_000_000]
    assert round(t.iteration_time / MS, 9) == 25
    # Root parameters (6 MB) whole 0-18; at 15-17 also t3's gradients (2 MB, 11-25), t2's
    # (1 MB, 13-17) and t1's (4 MB, 15-25): 13 MB.
    assert t.peak_memory == 13_000_000


def test_no_prefetch_waits_for_each_unit():
    # d_f = d_b = 0, a unit per tensor, all resharded: every gather waits for the unit before.
    t = simulate(section5(), ShardedPlan([0, 1, 2, 3], forward_prefetch=0, backward_prefetch=0))
    assert ms(t.message_start) == [0, 6, 9, 13, 17, 20, 24, 26, 34]
    assert t.message_kind.tolist() == [1, 1, 1, 1, 0, 1, 0, 1, 0]
    assert round(t.iteration_time / MS, 9) == 39
    assert t.peak_memory == 8_000_000                     # t1's parameters and gradients at once


def test_update_and_step_parts_follow_the_last_reduce_scatter():
    problem = section5(update=[MS, 0, 2 * MS], update_lump=0.5 * MS, host_overhead=0.25 * MS)
    t = simulate(problem, ShardedPlan([0, 2, 3], [False, False]))
    assert round(t.iteration_time / MS, 9) == 22 + 3 + 0.75
    pieces = compute_pieces(problem, ShardedPlan([0, 2, 3], [False, False]))
    assert pieces[-1].end == t.iteration_time
    assert [p.kind for p in pieces][-2:] == ["update_lump", "host_overhead"]


def test_prefetch_deeper_than_the_units_changes_nothing():
    problem = section5()
    base = simulate(problem, ShardedPlan([0, 1, 2, 3], forward_prefetch=2, backward_prefetch=2))
    deep = simulate(problem, ShardedPlan([0, 1, 2, 3], forward_prefetch=9, backward_prefetch=9))
    assert deep.iteration_time == base.iteration_time and deep.peak_memory == base.peak_memory


def _independent_peak(t, plan, problem):
    """The most bytes whole at once, from the timeline's messages and the compute stream read
    again: at every moment some interval starts, count what is whole then."""
    m = plan.num_units
    profile = problem.profile
    kept = np.zeros(profile.n, bool) if plan.persistent is None else plan.persistent
    grads = plan.unit_bytes(profile).tolist()
    unit_bytes = np.add.reduceat(np.where(kept, 0, profile.sizes), plan.bounds[:-1]).tolist()
    pieces = compute_pieces(problem, plan)
    unit_of = np.repeat(np.arange(m), np.diff(plan.bounds))
    fwd_end = {j: max(p.end for p in pieces if p.kind == "forward" and unit_of[p.tensor] == j) for j in range(m)}
    bwd = {j: [p for p in pieces if p.kind == "backward" and unit_of[p.tensor] == j] for j in range(m)}
    bwd_start = {j: min(p.start for p in bwd[j]) for j in range(m)}
    bwd_end = {j: max(p.end for p in bwd[j]) for j in range(m)}
    gathers = {}
    scatter_end = {}
    alone = int(kept.sum())                               # the persistent tensors' gathers come first
    for kind, unit, start, end in list(zip(t.message_kind, t.message_unit, t.message_start, t.message_end))[alone:]:
        if kind == 1:
            gathers.setdefault(int(unit), []).append(start)
        else:
            scatter_end[int(unit)] = end
    intervals = [(0.0, t.iteration_time, int(profile.sizes[kept].sum()))] if alone else []
    for j in range(m):
        gathered = unit_bytes[j] + (unit_bytes[-1] if plan.root and j == 0 else 0)
        if plan.root and j == m - 1:
            scatter_end[j] = scatter_end[0]
        elif gathered:
            first = gathers[j][0]
            until = bwd_end[j] if (not plan.reshard[j] or (plan.root and j == 0)) else fwd_end[j]
            intervals.append((first, until, gathered))
            if plan.reshard[j]:
                intervals.append((gathers[j][1], bwd_end[j], unit_bytes[j]))
    for j in range(m):
        intervals.append((bwd_start[j], scatter_end[j], grads[j]))
    peak = 0
    for moment in {s for s, _, _ in intervals}:
        whole = sum(b for s, e, b in intervals if s <= moment < e or s == e == moment)
        peak = max(peak, whole)
    return peak


@settings(deadline=None)
@given(st.data())
def test_timeline_keeps_every_rule(data):
    # Every start is the latest of what it waits for, every rule holds, memory agrees with an
    # independent count, and no plan beats the bound.
    profile = data.draw(profiles(1, 7))
    halves = FullySharded(data.draw(costs), data.draw(costs))
    problem = Problem(profile, pattern=halves)
    plan = data.draw(sharded_plans(profile.n))
    t = simulate(problem, plan)
    starts, ends, issue = t.message_start, t.message_end, t.message_ready
    assert np.all(starts >= issue) and np.all(np.diff(issue) >= 0)
    free = np.concatenate(([-math.inf], ends[:-1]))
    assert np.array_equal(starts, np.maximum(issue, free))
    kinds = t.message_kind.tolist()
    assert kinds.count(0) == plan.num_units - int(plan.root)
    if plan.persistent is not None:                       # each persistent tensor's gather, first and alone
        alone = int(plan.persistent.sum())
        assert kinds[:alone] == [1] * alone
        assert t.message_bytes[:alone].tolist() == profile.sizes[plan.persistent].tolist()
        assert t.forward_start[0] >= t.message_end[alone - 1] - 1e-12
    assert len(kinds) == plan.num_messages
    pieces = compute_pieces(problem, plan)
    assert pieces[-1].end == pytest.approx(t.iteration_time, rel=1e-12, abs=1e-15)
    for before, after in zip(pieces, pieces[1:]):
        assert after.start >= before.end - 1e-12
    # Each unit's first forward waits for its gather; the last reduce-scatter precedes the update.
    for i, phi in enumerate(t.forward_start.tolist()):
        assert phi >= t.gathered[i] - 1e-12
    assert t.iteration_time >= float(ends.max()) + profile.U - 1e-12
    assert t.peak_memory == _independent_peak(t, plan, problem)
    assert t.iteration_time >= sharded_lower_bound(problem) * (1 - 1e-9) - 1e-15


def test_plan_json_and_errors(tmp_path):
    plan = ShardedPlan([0, 2, 3, 5], [False, True, False], forward_prefetch=3, backward_prefetch=0, root=True,
                       names=["root", "h.0", "root"])
    path = tmp_path / "plan.json"
    plan.write(path)
    assert ShardedPlan.read(path) == plan
    with pytest.raises(ValueError, match="unit 1 is empty"):
        ShardedPlan([0, 2, 2, 3])
    with pytest.raises(ValueError, match="must start at tensor 0"):
        ShardedPlan([1, 3])
    with pytest.raises(ValueError, match="root .* reshard flags must be False"):
        ShardedPlan([0, 1, 2], [True, False], root=True)
    with pytest.raises(ValueError, match="at least two units"):
        ShardedPlan([0, 3], root=True)
    with pytest.raises(ValueError, match="forward_prefetch must be a whole number"):
        ShardedPlan([0, 3], forward_prefetch=-1)
    with pytest.raises(ValueError, match="the units cover tensors 0..1; profile .* has 3"):
        simulate(section5(), ShardedPlan([0, 2]))
    with pytest.raises(ValueError, match="unknown key 'prefetch'"):
        ShardedPlan.from_dict({**plan.to_dict(), "prefetch": 2})
    with pytest.raises(ValueError, match="unit 1 must hold the tensors 1, 2"):
        ShardedPlan.from_units(section5().profile, [[0], [2, 1]])


def test_problem_refuses_what_does_not_apply():
    profile = section5().profile
    halves = FullySharded(HALF, HALF)
    with pytest.raises(ValueError, match="sync does not apply"):
        Problem(profile, pattern=halves, sync="layerwise")
    with pytest.raises(ValueError, match="leave cost out"):
        Problem(profile, HALF, pattern=halves)
    with pytest.raises(ValueError, match="post_backward"):
        Problem(profile.with_step_parts(post_backward=MS), pattern=halves)
    with pytest.raises(ValueError, match="does not combine with contention"):
        Problem(profile, pattern=halves, contention=1.5)
    with pytest.raises(ValueError, match="memory_cap must be a positive number"):
        FullySharded(HALF, HALF, memory_cap=float("nan"))
    problem = Problem(profile, pattern=halves)
    assert problem.pattern.name == "fully-sharded" and problem.extensions == ("fully_sharded",)
    with pytest.raises(ValueError, match="takes a ShardedPlan"):
        simulate(problem, Plan.from_groups(profile, [[0, 1, 2]]))


def test_bound_worked_value_and_network_presets():
    # ag(4 MB) + F + B + rs(4 MB) = 5 + 3 + 6 + 5 = 19 ms.
    assert round(sharded_lower_bound(section5()) / MS, 9) == 19
    halves = FullySharded.from_network("100gb-ib", 64)
    ring = network("100gb-ib", 64)
    S = 3e7
    assert float(halves.all_gather(S) + halves.reduce_scatter(S)) == pytest.approx(float(ring(S)), rel=1e-12)


@settings(deadline=None, max_examples=300)
@given(st.data())
def test_the_capped_bound_holds_for_every_plan_within_the_cap(data):
    # A plan whose peak is within the cap is never faster than the bound for that cap: the
    # message counts the cap forces, and the regathers it forces (MODEL.md 8.2).
    profile = data.draw(profiles(1, 7))
    halves = FullySharded(data.draw(costs), data.draw(costs))
    plan = data.draw(sharded_plans(profile.n))
    if not plan.root and data.draw(st.booleans()):
        cuts = sorted(data.draw(st.sets(st.integers(1, profile.n - 1), max_size=profile.n - 1))) if profile.n > 1 else []
        plan = plan.replace(reduce_bounds=[0, *cuts, profile.n])
    peak = simulate(Problem(profile, pattern=halves), plan).peak_memory
    cap = max(peak, 1) * data.draw(st.sampled_from([1.0, 1.0001, 1.5, 3.0]))
    problem = Problem(profile, pattern=halves.with_cap(cap))
    t = simulate(problem, plan)
    assert t.iteration_time >= sharded_lower_bound(problem) * (1 - 1e-9) - 1e-15


def test_the_cap_forces_regathers_into_the_bound():
    # 3 tensors of 4, 1 and 2 MB (N = 7 MB), a cap of 5 MB (below the 8 MB t0 needs, so no
    # plan fits, but the bound is the bound): at most 5 MB are kept after the forward, so at
    # least 2 MB are gathered twice.
    problem = section5(cap=5e6)
    gathered = 7e6 + (7e6 - 5e6)                          # N + (N - M): 2 MB gathered twice
    # ceil(2 x 9 MB / 5 MB) = 4 gathers, ceil(7 / 5) = 2 reduce-scatters, 1 ms each, 1 ns/B.
    assert sharded_lower_bound(problem) == pytest.approx(4 * MS + 2 * MS + 1e-9 * (gathered + 7e6), rel=1e-12)


def test_persistent_tensors_are_gathered_alone_first_and_stay_whole():
    # t1 persistent: gathered alone 0-2 ms (1 MB), then the unit of t0 and t2 carries 6 MB:
    # 2-9; forward 9-12; backward 12-18; reduce-scatter of all 7 MB 18-26 ms. t1's 1 MB is
    # whole all step, the unit's 6 MB from 2 to 18, the 7 MB of gradients from 12: 14 MB.
    problem = section5()
    plan = ShardedPlan([0, 3], [False], persistent=[False, True, False])
    t = simulate(problem, plan)
    assert ms(t.message_start) == [0, 2, 18] and ms(t.message_end) == [2, 9, 26]
    assert t.message_bytes.tolist() == [1_000_000, 6_000_000, 7_000_000]
    assert round(t.iteration_time / MS, 9) == 26 and t.peak_memory == 14_000_000
    assert plan.num_messages == 3 and ShardedPlan.from_dict(plan.to_dict()) == plan
    # Resharded, the unit's regather carries its 6 MB only (12-19), and the backward waits.
    t = simulate(problem, plan.replace(reshard=[True]))
    assert ms(t.message_start) == [0, 2, 12, 25] and t.message_bytes[2] == 6_000_000
    # Every tensor persistent: no unit gather at all.
    t = simulate(problem, ShardedPlan([0, 1, 3], persistent=[True] * 3))
    assert t.message_kind.tolist() == [1, 1, 1, 0, 0] and ms(t.forward_start)[0] == 5 + 2 + 3
    with pytest.raises(ValueError, match="persistent must give True or False for each of the 3 tensors"):
        ShardedPlan([0, 3], persistent=[True])


# ------------------------------------------------------------- mixed precision (FSDP2's policy)
def test_mixed_precision_by_hand():
    # Two units of 4 MB and 2 MB of fp32 parameters, 1 ms of backward each, c(S) = S ns on the
    # wire, one channel. FSDP2 with param_dtype=bf16, reduce_dtype=fp32: the all-gathers carry
    # 2 MB and 1 MB (2 and 1 ms), the reduce-scatters 4 MB and 2 MB (4 and 2 ms); parameters are
    # whole at half their fp32 bytes and gradients at their full fp32 bytes.
    profile = Profile.from_arrays([4e6, 2e6], [0.0, 0.0], [1e-3, 1e-3], names=["a", "b"])
    plain = AlphaBeta(0.0, 1e-9)
    fp32 = Problem(profile, pattern=FullySharded(plain, plain))
    mixed = Problem(profile, pattern=FullySharded.mixed_precision(plain, plain, param_dtype="bf16",
                                                                 reduce_dtype="fp32"))
    plan = ShardedPlan.from_units(profile, [[0], [1]], reshard=[False, False])
    a, b = simulate(fp32, plan), simulate(mixed, plan)
    assert (a.message_kind.tolist(), b.message_kind.tolist()) == ([1, 1, 0, 0], [1, 1, 0, 0])
    assert ((b.message_end - b.message_start) * 1e3).round(9).tolist() == [2.0, 1.0, 2.0, 4.0]
    assert ((a.message_end - a.message_start) * 1e3).round(9).tolist() == [4.0, 2.0, 2.0, 4.0]
    # fp32: all-gathers 0-4 and 4-6 ms, b's backward 6-7, its reduce-scatter 7-9, a's backward
    # 7-8. While a's backward runs, a's parameters (4 MB), b's gradients (2 MB, reduced until 9)
    # and a's (4 MB) are whole; b's parameters went at 7 ms: 10 MB. With bf16 parameters the
    # same moment (a's backward, 4-5 ms) holds 2 + 2 + 4 MB: 8 MB.
    assert (a.peak_memory, b.peak_memory) == (10_000_000, 8_000_000)
    assert sharded_lower_bound(mixed) <= b.iteration_time
    floors = [sharded_memory_floor(p) for p in (fp32, mixed)]
    assert floors == [(8_000_000, 0), (6_000_000, 0)]          # tensor a: 4 MB + 4 MB, then 2 MB + 4 MB
    bf16 = Problem(profile, pattern=FullySharded.mixed_precision(plain, plain, param_dtype="bf16"))
    assert simulate(bf16, plan).peak_memory == 5_000_000       # gradients in bf16 too: 2 + 1 + 2 MB


def test_mixed_precision_round_trips_and_refusals():
    plain = AlphaBeta(1e-5, 1e-9)
    pattern = FullySharded.from_network("10gbe", 8, param_dtype="bf16", reduce_dtype="fp32", memory_cap=1e9)
    assert FullySharded.from_dict(pattern.to_dict()) == pattern
    assert (pattern.gather_dtype, pattern.scatter_dtype, pattern.whole_widths) == ("bf16", "fp32", (0.5, 1.0))
    assert pattern.with_cap(None).param_dtype == "bf16" and pattern.with_cap(None).memory_cap is None
    assert "param_dtype" not in FullySharded(plain, plain).to_dict()
    with pytest.raises(ValueError, match=r"^param_dtype='bf16' and reduce_dtype=None carry the all-gather in bf16, "
                                         r"but its cost carries fp32: give all_gather=Encoded\(cost, 'bf16'\), or "
                                         r"build it with FullySharded.mixed_precision$"):
        FullySharded(plain, plain, param_dtype="bf16")
    with pytest.raises(ValueError, match="^reduce_dtype must be one of fp32, fp16, bf16 or None, got 'fp8'$"):
        FullySharded.mixed_precision(plain, plain, param_dtype=None, reduce_dtype="fp8")
    half = Profile.from_arrays([4e6], [0.0], [1e-3], dtypes=["float16"])
    with pytest.raises(ValueError, match=r"^param_dtype and reduce_dtype recast a profile of fp32 tensors: profile "
                                         r"'without a name' has tensors of \[2\] bytes an element$"):
        Problem(half, pattern=FullySharded.mixed_precision(plain, plain, param_dtype="bf16"))
