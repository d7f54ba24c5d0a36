"""Reduce-scatter groups independent of the units (``ShardedPlan(reduce_bounds=...)``,
MODEL.md 8.2 extended for DeepSpeed ZeRO-3's gradient buckets)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import costs, profiles

from fusionopt.cost import AlphaBeta
from fusionopt.model import FullySharded, Problem, Profile, ShardedPlan, compute_pieces, simulate, sharded_lower_bound

MS = 1e-3
HALF = AlphaBeta(MS, 1e-9)                               # 1 ms + 1 ns/B for each collective


def section5():
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    return Problem(profile, pattern=FullySharded(HALF, HALF))


def ms(values):
    return [round(v / MS, 9) for v in np.asarray(values).tolist()]


def test_hand_worked_groups_across_units():
    # Units {t0, t1} (5 MB) and {t2} (2 MB), kept, d_f = d_b = 1; groups {t0} (4 MB) and
    # {t1, t2} (3 MB). Forward: gather of unit 0 0-6 ms, of unit 1 issued at 6 (unit 0's
    # forward starts): 6-9; forwards 6-8 and 9-10. Backward: unit 1 10-11 (t2 ready at 11,
    # its group not complete), unit 0 11-16: t1 ready at 16 - b_0 = 13, so group {t1, t2}
    # is issued at 13: 13-17; t0 ready at 16: group {t0} issued at 16, waits for the
    # channel: 17-22. T = 22 ms.
    # Memory: unit 0's parameters 5 MB 0-16, unit 1's 2 MB 6-11; gradients t2 2 MB 10-17,
    # t1 1 MB 11-17, t0 4 MB 11-22: at 11-16, 5 + 2 + 1 + 4 = 12 MB.
    plan = ShardedPlan([0, 2, 3], [False, False], reduce_bounds=[0, 1, 3])
    t = simulate(section5(), plan)
    assert ms(t.message_ready) == [0, 6, 13, 16]
    assert ms(t.message_start) == [0, 6, 13, 17] and ms(t.message_end) == [6, 9, 17, 22]
    assert t.message_kind.tolist() == [1, 1, 0, 0] and t.message_unit.tolist() == [0, 1, 1, 0]
    assert t.message_bytes.tolist() == [5_000_000, 2_000_000, 3_000_000, 4_000_000]
    assert ms(t.reduced) == [22, 17, 17]
    assert round(t.iteration_time / MS, 9) == 22 and t.peak_memory == 12_000_000
    assert plan.num_messages == 4


def test_hand_worked_one_group_resharded_units():
    # A unit per tensor, each resharded, d_f = d_b = 1, one group of all 7 MB (8 ms).
    # Forward: gathers 0-5 (4 MB), 5-7 (issued at 5), 7-10 (issued at 7); forwards 5-6,
    # 7-8, 10-11. Backward: t2 regathered at 11: 11-14; its backward 14-15, t1's regather
    # issued at 14: 14-16; t1's backward 16-18, t0's regather issued at 16: 16-21; t0's
    # backward 21-24; the one reduce-scatter issued when t0's gradient is ready: 24-32.
    # Memory at 21-24: t0's parameters 4 MB, gradients 2 + 1 + 4 MB: 11 MB.
    problem = section5()
    plan = ShardedPlan([0, 1, 2, 3], reduce_bounds=[0, 3])
    t = simulate(problem, plan)
    assert ms(t.message_start) == [0, 5, 7, 11, 14, 16, 24] and ms(t.message_end)[-1] == 32
    assert t.message_kind.tolist() == [1, 1, 1, 1, 1, 1, 0]
    assert round(t.iteration_time / MS, 9) == 32 and t.peak_memory == 11_000_000
    backward_end = [p for p in compute_pieces(problem, plan) if p.kind == "backward"][-1].end
    assert t.message_ready[-1] == backward_end


def test_plan_fields_json_and_refusals(tmp_path):
    plan = ShardedPlan([0, 2, 5, 6], [False, True, False], forward_prefetch=3, reduce_bounds=[0, 4, 6])
    path = tmp_path / "plan.json"
    plan.write(path)
    assert ShardedPlan.read(path) == plan and ShardedPlan.read(path).reduce_bounds.tolist() == [0, 4, 6]
    assert plan != plan.replace(reduce_bounds=None) and plan.replace(reduce_bounds=None).reduce_bounds is None
    assert "2 reduce-scatter groups" in repr(plan)
    plain = ShardedPlan([0, 2, 5, 6])
    assert "reduce_bounds" not in plain.to_dict() and plain.reduce_groups().tolist() == [0, 2, 5, 6]
    old = {"schema": "fusionopt.shardedplan", "version": 1, "bounds": [0, 2, 5, 6]}
    assert ShardedPlan.from_dict(old) == plain
    with pytest.raises(ValueError, match="does not combine with root=True"):
        ShardedPlan([0, 1, 3], root=True, reduce_bounds=[0, 3])
    with pytest.raises(ValueError, match="reduce-scatter group 1 is empty"):
        ShardedPlan([0, 3], reduce_bounds=[0, 2, 2, 3])
    with pytest.raises(ValueError, match="must run from tensor 0 to 3"):
        ShardedPlan([0, 3], reduce_bounds=[0, 2])
    with pytest.raises(ValueError, match="'reduce_bounds' must be a list of whole numbers"):
        ShardedPlan.from_dict({**old, "reduce_bounds": [0, 2.5, 6]})


@st.composite
def plans(draw, n, groups="units"):
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1))) if n > 1 else []
    bounds = [0, *cuts, n]
    m = len(bounds) - 1
    reshard = draw(st.lists(st.booleans(), min_size=m, max_size=m))
    if groups == "units":
        reduce_bounds = bounds
    else:
        inner = sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1))) if n > 1 else []
        reduce_bounds = [0, *inner, n]
    return ShardedPlan(bounds, reshard, forward_prefetch=draw(st.integers(0, m + 1)),
                       backward_prefetch=draw(st.integers(0, m + 1)), reduce_bounds=reduce_bounds)


FIELDS = ("message_ready", "message_start", "message_end", "message_bytes", "message_kind", "message_unit",
          "reduced", "gathered", "forward_start", "memory_time", "memory_bytes")


@settings(deadline=None)
@given(st.data())
def test_unit_groups_are_the_default_bit_for_bit(data):
    profile = data.draw(profiles(1, 7))
    problem = Problem(profile, pattern=FullySharded(data.draw(costs), data.draw(costs)))
    grouped = data.draw(plans(profile.n))
    default = grouped.replace(reduce_bounds=None)
    a, b = simulate(problem, grouped), simulate(problem, default)
    assert a.iteration_time == b.iteration_time and a.peak_memory == b.peak_memory
    for field in FIELDS:
        assert np.array_equal(getattr(a, field), getattr(b, field)), field
    assert grouped.num_messages == default.num_messages == a.num_messages


@settings(deadline=None)
@given(st.data())
def test_any_groups_keep_the_rules_and_the_bound(data):
    profile = data.draw(profiles(1, 7))
    problem = Problem(profile, pattern=FullySharded(data.draw(costs), data.draw(costs)))
    plan = data.draw(plans(profile.n, groups="any"))
    t = simulate(problem, plan)
    starts, ends, issue = t.message_start, t.message_end, t.message_ready
    assert np.all(np.diff(issue) >= 0)
    assert np.array_equal(starts, np.maximum(issue, np.concatenate(([-math.inf], ends[:-1]))))
    kinds = t.message_kind.tolist()
    assert kinds.count(0) == plan.reduce_bounds.size - 1 and len(kinds) == plan.num_messages
    # Each group's reduce-scatter carries its bytes and is issued when its first tensor's
    # gradient is ready: at the end of that tensor's unit's backward less the backward of
    # the unit's tensors before it; the group holding tensor 0 when the backward ends.
    pieces = compute_pieces(problem, plan)
    backward = [p for p in pieces if p.kind == "backward"]
    unit_of = np.repeat(np.arange(plan.num_units), np.diff(plan.bounds))
    # A unit's backward: from its first piece's start to its last piece's end (stream order).
    unit_end = {int(unit_of[p.tensor]): p.end for p in backward}
    unit_start = {int(unit_of[p.tensor]): p.start for p in reversed(backward)}
    scatters = [k for k, kind in enumerate(kinds) if kind == 0]
    cuts = plan.reduce_bounds.tolist()
    for k in scatters:
        g = int(t.message_unit[k])
        first = cuts[g]
        j = int(unit_of[first])
        before = float(profile.backward[plan.bounds[j]:first].sum())
        assert t.message_bytes[k] == profile.sizes[cuts[g]:cuts[g + 1]].sum()
        expected = max(unit_start[j], unit_end[j] - before)
        assert issue[k] == pytest.approx(expected, rel=1e-9, abs=1e-12)
        assert np.all(t.reduced[cuts[g]:cuts[g + 1]] == ends[k])
    group0 = next(k for k in scatters if t.message_unit[k] == 0)
    assert issue[group0] == backward[-1].end
    # Memory, counted again: parameters as the units say, each tensor's gradient from its
    # unit's backward start to its group's reduce-scatter end.
    unit_bytes = plan.unit_bytes(profile).tolist()
    forward_end = {int(unit_of[p.tensor]): p.end for p in pieces if p.kind == "forward"}
    gathers = {}
    for kind, unit, start in zip(kinds, t.message_unit.tolist(), starts.tolist()):
        if kind == 1:
            gathers.setdefault(unit, []).append(start)
    intervals = []
    for j in range(plan.num_units):
        intervals.append((gathers[j][0], forward_end[j] if plan.reshard[j] else unit_end[j], unit_bytes[j]))
        if plan.reshard[j]:
            intervals.append((gathers[j][1], unit_end[j], unit_bytes[j]))
    for i in range(profile.n):
        intervals.append((unit_start[int(unit_of[i])], float(t.reduced[i]), int(profile.sizes[i])))
    peak = 0
    for moment in {s for s, _, _ in intervals}:
        peak = max(peak, sum(b for s, e, b in intervals if s <= moment < e or s == e == moment))
    assert t.peak_memory == peak
    assert t.iteration_time >= float(ends.max()) + profile.U - 1e-12
    assert t.iteration_time >= sharded_lower_bound(problem) * (1 - 1e-9) - 1e-15
