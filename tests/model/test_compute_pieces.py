"""compute_pieces: the compute stream as the general simulators run it.

Hand-worked cases use MODEL.md section 5: three tensors of 4, 1 and 2 MB (forward order),
forward 1 ms each, backward 3, 2, 1 ms (ready at 6, 3, 1 ms; B = 6, F = 3 ms).
"""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ps_strategies import ps_plans, ps_problems
from strategies import alpha_beta, partition_plans, problems

from fusionopt.cost import AlphaBeta
from fusionopt.model import (
    Chunk, ComputePiece, Message, Plan, Problem, Profile, compute_pieces, simulate, simulate_events, ParameterServer,
    PSPlan, simulate_ps,
)

MS = 1e-3


def worked_profile(update=None) -> Profile:
    return Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS], update=update)


def rounded(pieces):
    """(kind, tensor, start ms, end ms, message) of each piece."""
    return [(p.kind, p.tensor, round(p.start / MS, 9), round(p.end / MS, 9), p.message) for p in pieces]


# ============================================================================ hand-worked
def test_worked_example_barrier():
    # alpha 3 ms, {t3}, {t2, t1}: t2 sent 1 -> 6, {t1, t0} 6 -> 14; forwards 14 -> 17, T = 17.
    profile = worked_profile()
    problem = Problem(profile, AlphaBeta(3 * MS, 1e-9))
    pieces = compute_pieces(problem, Plan.from_groups(profile, [[2], [1, 0]]))
    assert rounded(pieces) == [
        ("backward", 2, 0.0, 1.0, None), ("backward", 1, 1.0, 3.0, None), ("backward", 0, 3.0, 6.0, None),
        ("update", 0, 14.0, 14.0, None), ("update", 1, 14.0, 14.0, None), ("update", 2, 14.0, 14.0, None),
        ("forward", 0, 14.0, 15.0, None), ("forward", 1, 15.0, 16.0, None), ("forward", 2, 16.0, 17.0, None),
    ]
    assert all(isinstance(p, ComputePiece) for p in pieces)
    assert pieces[-1].duration == pytest.approx(MS, rel=1e-12)


def test_worked_example_layerwise_with_updates():
    # alpha 1 ms, plan t2, t0, t1 with updates of 0.5 ms: t2 sent 1 -> 4, t0 6 -> 11, t1 11 -> 13.
    # Update t0 11 -> 11.5, forward 11.5 -> 12.5; t1 waits for 13: 13 -> 13.5 -> 14.5;
    # t2 (reduced at 4) 14.5 -> 15 -> 16. T = 16 ms.
    profile = worked_profile(update=[0.5 * MS] * 3)
    problem = Problem(profile, AlphaBeta(MS, 1e-9), sync="layerwise")
    plan = Plan.from_groups(profile, [[2], [0], [1]])
    pieces = compute_pieces(problem, plan)
    assert rounded(pieces)[3:] == [
        ("update", 0, 11.0, 11.5, None), ("forward", 0, 11.5, 12.5, None),
        ("update", 1, 13.0, 13.5, None), ("forward", 1, 13.5, 14.5, None),
        ("update", 2, 14.5, 15.0, None), ("forward", 2, 15.0, 16.0, None),
    ]
    assert simulate(problem, plan).iteration_time == pytest.approx(16 * MS, rel=1e-12)


def test_contention_stretches_the_backward():
    # kappa 2, alpha 1 ms, WFBP (test_extensions): t1's 2 ms of backward run 1 -> 4.5, t0's
    # 3 ms 4.5 -> 8.5 (t2 in flight 1 -> 4, t1 4.5 -> 6.5); t0 sent 8.5 -> 13.5, then the
    # forward at full speed 13.5 -> 16.5.
    profile = worked_profile()
    pieces = compute_pieces(Problem(profile, AlphaBeta(MS, 1e-9), contention=2.0), Plan.per_tensor(profile))
    assert rounded(p for p in pieces if p.kind == "backward") == [
        ("backward", 2, 0.0, 1.0, None), ("backward", 1, 1.0, 4.5, None), ("backward", 0, 4.5, 8.5, None)]
    assert rounded(p for p in pieces if p.kind == "forward") == [
        ("forward", 0, 13.5, 14.5, None), ("forward", 1, 14.5, 15.5, None), ("forward", 2, 15.5, 16.5, None)]


def test_packing_on_the_compute_stream_is_a_piece_after_its_backward():
    # gamma 1 ms/MB on compute, alpha 0, beta 1 us/MB, plan {t3, t2}, {t1} (test_extensions):
    # backward t2 0-1, t1 1-3, packing of message 0 (3 MB) 3-6, t0 6-9; message 1 ends at
    # 9.004, the forward runs 9.004 -> 12.004.
    profile = worked_profile()
    problem = Problem(profile, AlphaBeta(0.0, 1e-12), copy_cost=1e-9, copy_on="compute")
    pieces = compute_pieces(problem, Plan.from_groups(profile, [[2, 1], [0]]))
    assert rounded(pieces[:4]) == [
        ("backward", 2, 0.0, 1.0, None), ("backward", 1, 1.0, 3.0, None), ("pack", 1, 3.0, 6.0, 0),
        ("backward", 0, 6.0, 9.0, None)]
    assert rounded(p for p in pieces if p.kind == "forward") == [
        ("forward", 0, 9.004, 10.004, None), ("forward", 1, 10.004, 11.004, None),
        ("forward", 2, 11.004, 12.004, None)]


def test_parameter_server_layerwise():
    # simulate_ps's example: pulls end at 16, 18, 21; forwards 16, 18, 21 -> 22 ms.
    profile = worked_profile()
    problem = Problem(profile, pattern=ParameterServer(AlphaBeta(MS, 1e-9)), sync="layerwise")
    pieces = compute_pieces(problem, PSPlan.from_groups(profile, push=[[2], [1], [0]], pull=[[0], [1], [2]]))
    assert rounded(pieces) == [
        ("backward", 2, 0.0, 1.0, None), ("backward", 1, 1.0, 3.0, None), ("backward", 0, 3.0, 6.0, None),
        ("update", 0, 16.0, 16.0, None), ("forward", 0, 16.0, 17.0, None),
        ("update", 1, 18.0, 18.0, None), ("forward", 1, 18.0, 19.0, None),
        ("update", 2, 21.0, 21.0, None), ("forward", 2, 21.0, 22.0, None),
    ]


def test_parameter_server_barrier_runs_the_updates_back_to_back():
    # Same pushes (1 -> 4, 4 -> 6, 6 -> 11), pulls in forward order 11 -> 16, 16 -> 18,
    # 18 -> 21; barrier: updates of 0.5 ms from 21 to 22.5, forwards 22.5 -> 25.5 ms.
    profile = worked_profile(update=[0.5 * MS] * 3)
    problem = Problem(profile, pattern=ParameterServer(AlphaBeta(MS, 1e-9)))
    plan = PSPlan.from_groups(profile, push=[[2], [1], [0]], pull=[[0], [1], [2]])
    pieces = compute_pieces(problem, plan)
    assert rounded(pieces[3:]) == [
        ("update", 0, 21.0, 21.5, None), ("update", 1, 21.5, 22.0, None), ("update", 2, 22.0, 22.5, None),
        ("forward", 0, 22.5, 23.5, None), ("forward", 1, 23.5, 24.5, None), ("forward", 2, 24.5, 25.5, None)]
    assert pieces[5].end == pieces[6].start
    assert pieces[-1].end == simulate(problem, plan).iteration_time


def test_parameter_server_partitioned_compute_follows_the_chunks():
    # t0 (4 MB, 3 ms) pushed in two halves, delta 0.5 ms: pieces of 1.5 + 0.5 ms, 3 -> 5 and
    # 5 -> 7, one per push message. Pushes: t2 1 -> 4, t1 4 -> 6, halves 6 -> 9 and 9 -> 12.
    # Pulls, each after the push of its bytes: t0's halves (messages 0 and 1) 9 -> 12 and
    # 12 -> 15, t1 15 -> 17, t2 17 -> 20. Layerwise: t0's forward pieces (0.5 + 0.5 ms) at
    # 12 -> 13 and, after the second half's pull, 15 -> 16; t1 17 -> 18, t2 20 -> 21 ms.
    profile = worked_profile()
    ps = ParameterServer(AlphaBeta(MS, 1e-9), partition_compute=True, delta=0.5 * MS)
    problem = Problem(profile, pattern=ps, sync="layerwise")
    halves = (Chunk(0, 0, 2_000_000), Chunk(0, 2_000_000, 4_000_000))
    push = Plan((Message((Chunk(2, 0, 2_000_000),)), Message((Chunk(1, 0, 1_000_000),)),
                 Message((halves[0],)), Message((halves[1],))))
    pull = Plan((Message((halves[0],)), Message((halves[1],)), Message((Chunk(1, 0, 1_000_000),)),
                 Message((Chunk(2, 0, 2_000_000),))))
    pieces = compute_pieces(problem, PSPlan(push, pull))
    assert rounded(pieces) == [
        ("backward", 2, 0.0, 1.0, None), ("backward", 1, 1.0, 3.0, None),
        ("backward", 0, 3.0, 5.0, 2), ("backward", 0, 5.0, 7.0, 3),
        ("update", 0, 12.0, 12.0, None), ("forward", 0, 12.0, 13.0, 0), ("forward", 0, 15.0, 16.0, 1),
        ("update", 1, 17.0, 17.0, None), ("forward", 1, 17.0, 18.0, None),
        ("update", 2, 20.0, 20.0, None), ("forward", 2, 20.0, 21.0, None),
    ]
    timeline = simulate(problem, PSPlan(push, pull))
    assert timeline.iteration_time == pytest.approx(21 * MS, rel=1e-12)
    assert timeline.compute_overhead == pytest.approx(4 * 0.5 * MS, rel=1e-12)


def test_compute_pieces_checks_its_inputs():
    profile = worked_profile()
    problem = Problem(profile, AlphaBeta(MS, 1e-9))
    with pytest.raises(ValueError, match=r"an all-reduce problem takes a Plan, got PSPlan; a PSPlan is for Problem\(profile, pattern=ParameterServer"):
        compute_pieces(problem, PSPlan.mirror(Plan.per_tensor(profile)))
    t0_missing = Plan((Message((Chunk(2, 0, 2_000_000),)), Message((Chunk(1, 0, 1_000_000),))))
    with pytest.raises(ValueError, match=r"tensor 't0' \(index 0\): bytes \[0, 4000000\) are missing"):
        compute_pieces(problem, t0_missing)


# ============================================================================ properties
def same_timeline(a, b) -> bool:
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if x is None or y is None or not np.array_equal(x, y):
                return False
        elif x != y:
            return False
    return True


def union(starts, ends) -> list[tuple[float, float]]:
    """The union of the intervals ``[s, e)``, sorted and disjoint."""
    merged: list[list[float]] = []
    for s, e in sorted(zip(starts, ends)):
        if e <= s:
            continue
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s, e) for s, e in merged]


def overlap(start: float, end: float, intervals) -> float:
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in intervals)


def backward_work(profile) -> np.ndarray:
    """The backward pieces' work in the ready order: each ready time less the one before
    (the profile's backward times unless ``ready_order`` reorders tensors ready together)."""
    return np.diff(profile.ready_times[profile.backward_order], prepend=0.0)


def assert_a_stream(pieces) -> None:
    """In order, no overlap, nothing runs backwards."""
    clock = 0.0
    for p in pieces:
        assert p.start >= clock and p.end >= p.start
        clock = p.end


extended_problems = st.tuples(
    problems(cost=alpha_beta), st.one_of(st.just(0.0), st.floats(1e-12, 1e-9)),
    st.one_of(st.just(1.0), st.floats(1.0, 3.0)), st.integers(1, 3), st.sampled_from(["channel", "compute"]),
).map(lambda a: Problem(a[0].profile, a[0].cost, sync=a[0].sync, copy_cost=a[1], contention=a[2],
                        channels=a[3], copy_on=a[4]))


@settings(deadline=None)
@given(data=st.data(), problem=st.one_of(problems(), extended_problems))
def test_allreduce_pieces_are_the_simulated_stream(data, problem):
    profile = problem.profile
    n = profile.n
    plan = data.draw(partition_plans(profile))
    timeline = simulate(problem, plan)
    events = simulate_events(problem, plan)     # the run that records the pieces (timeline's to rounding)
    pieces = compute_pieces(problem, plan)
    assert_a_stream(pieces)

    # The backward in the ready order from 0 with the packings in between, back to back; then
    # the updates and forwards in sync order.
    head = [p for p in pieces if p.kind in ("backward", "pack")]
    assert pieces[:len(head)] == head
    assert [p.tensor for p in head if p.kind == "backward"] == profile.backward_order.tolist()
    assert head[0].start == 0.0
    assert all(after.start == before.end for before, after in zip(head, head[1:]))
    tail = [(p.kind, p.tensor) for p in pieces[len(head):]]
    if problem.sync == "barrier":
        assert tail == [("update", i) for i in range(n)] + [("forward", i) for i in range(n)]
    else:
        assert tail == [(kind, i) for i in range(n) for kind in ("update", "forward")]

    # Packing: one piece per fused message, after the backward of its last-ready tensor; the
    # message is ready when its packing ends.
    packs = [p for p in pieces if p.kind == "pack"]
    packing = problem.copy_on == "compute" and problem.copy_cost > 0
    fused = [k for k, m in enumerate(plan.messages) if len(m.tensors) > 1]
    position = {int(t): q for q, t in enumerate(profile.backward_order)}
    last_ready = {k: max(m.tensors, key=position.get) for k, m in enumerate(plan.messages)}
    assert [p.message for p in packs] == (sorted(fused, key=lambda k: position[last_ready[k]])
                                          if packing else [])
    for p in packs:
        assert p.tensor == last_ready[p.message]
        assert events.message_ready[p.message] == p.end

    # The gates: an update after the messages it waits for.
    updates = [p for p in pieces if p.kind == "update"]
    if problem.sync == "barrier":
        assert updates[0].start >= events.message_end.max()
    else:
        assert all(p.start >= events.reduced[p.tensor] for p in updates)

    # The last piece ends at T; each forward starts at phi_i (the plain model's recursion to rounding).
    forwards = [p for p in pieces if p.kind == "forward"]
    if problem.extensions:
        assert pieces[-1].end == timeline.iteration_time
        assert [p.start for p in forwards] == timeline.forward_start.tolist()
    else:
        assert pieces[-1].end == pytest.approx(timeline.iteration_time, rel=1e-12, abs=1e-15)
        assert [p.start for p in forwards] == pytest.approx(timeline.forward_start.tolist(), rel=1e-12, abs=1e-15)

    # Nothing delays the backward without contention and packing on compute: it ends at B.
    scale = profile.compute_time + float(np.sum(timeline.message_end - timeline.message_start)) + 1e-300
    if problem.contention == 1.0 and not packing:
        assert head[-1].end == pytest.approx(profile.B, rel=1e-12, abs=1e-15)
        assert [p.duration for p in head] == pytest.approx(backward_work(profile).tolist(), abs=1e-12 * scale)

    # Contention: each piece's work at full speed is its duration less the slowed part, the
    # fraction 1 - 1/kappa of the time it overlaps a message in flight.
    busy = union(events.message_start.tolist(), events.message_end.tolist())
    slowed = 1.0 - 1.0 / problem.contention
    work = {("backward", int(i)): w for i, w in zip(profile.backward_order, backward_work(profile))}
    work.update({("update", i): profile.update[i] for i in range(n)})
    work.update({("forward", i): profile.forward[i] for i in range(n)})
    done = [p.duration - slowed * overlap(p.start, p.end, busy) for p in pieces]
    expected = [problem.copy_cost * plan.messages[p.message].nbytes if p.kind == "pack" else work[p.kind, p.tensor]
                for p in pieces]
    assert done == pytest.approx(expected, abs=1e-9 * scale)
    # Hence T = the work + the slowed part + the waits (the gaps between pieces).
    waits = sum(b.start - a.end for a, b in zip(pieces, pieces[1:]))
    stretch = sum(slowed * overlap(p.start, p.end, busy) for p in pieces)
    assert sum(expected) + stretch + waits == pytest.approx(timeline.iteration_time, rel=1e-9, abs=1e-12 * scale)


@settings(deadline=None)
@given(data=st.data(), problem=st.one_of(problems(), extended_problems))
def test_recording_the_pieces_changes_no_event_timeline_number(data, problem):
    plan = data.draw(partition_plans(problem.profile))
    pieces: list = []
    assert same_timeline(simulate_events(problem, plan, pieces=pieces), simulate_events(problem, plan))
    assert len(pieces) >= 3 * problem.profile.n


@settings(deadline=None)
@given(data=st.data(), problem=ps_problems())
def test_parameter_server_pieces_are_the_simulated_stream(data, problem):
    profile, ps = problem.profile, problem.pattern
    n = profile.n
    plan = data.draw(ps_plans(profile))
    pieces: list = []
    timeline = simulate_ps(problem, plan, pieces=pieces)
    assert same_timeline(timeline, simulate_ps(problem, plan))
    assert compute_pieces(problem, plan) == pieces
    assert_a_stream(pieces)

    # The backward n-1 .. 0 from 0, back to back, one piece per push chunk of a split tensor.
    split = ps.partition_compute
    chunks = {"backward": [[] for _ in range(n)], "forward": [[] for _ in range(n)]}
    for direction, p in (("backward", plan.push), ("forward", plan.pull)):
        for k, message in enumerate(p.messages):
            for c in message.chunks:
                chunks[direction][c.tensor].append((k, c.hi - c.lo))
    backward = [p for p in pieces if p.kind == "backward"]
    assert pieces[:len(backward)] == backward
    expected, work = [], []
    for i in range(n - 1, -1, -1):
        if split and len(chunks["backward"][i]) > 1:
            expected += [(i, k) for k, _ in chunks["backward"][i]]
            work += [profile.backward[i] * size / profile.sizes[i] + ps.delta for _, size in chunks["backward"][i]]
        else:
            expected.append((i, None))
            work.append(profile.backward[i])
    assert [(p.tensor, p.message) for p in backward] == expected
    assert backward[0].start == 0.0
    assert all(after.start == before.end for before, after in zip(backward, backward[1:]))
    assert [p.duration for p in backward] == pytest.approx(work, rel=1e-9, abs=1e-15)
    if not split:
        assert backward[-1].end == pytest.approx(profile.B, rel=1e-12, abs=1e-15)

    # Updates and forwards: in sync order, each forward piece after its own pull.
    rest = pieces[len(backward):]
    forwards = [p for p in rest if p.kind == "forward"]
    if problem.sync == "barrier":
        assert [(p.kind, p.tensor) for p in rest] == ([("update", i) for i in range(n)]
                                                       + [("forward", i) for i in range(n)])
        assert rest[0].start == max(backward[-1].end, timeline.pull_end.max())
        assert rest[n - 1].end == rest[n].start
    else:
        for i in range(n):
            update = [p for p in rest if p.tensor == i and p.kind == "update"]
            own = [p for p in forwards if p.tensor == i]
            assert len(update) == 1 and rest.index(update[0]) + 1 == rest.index(own[0])
            if split and len(chunks["forward"][i]) > 1:
                # The update under the first piece's gate, each piece after its own chunk's pull.
                assert [p.message for p in own] == [m for m, _ in chunks["forward"][i]]
                assert update[0].start >= timeline.pull_end[own[0].message]
                assert all(p.start >= timeline.pull_end[p.message] for p in own)
            else:
                assert [p.message for p in own] == [None]
                assert update[0].start >= timeline.reduced[i]

    # The last piece ends at T, the first forward piece of each tensor at phi_i; the waits
    # (gaps between pieces) and the deltas make up the exposed time.
    assert pieces[-1].end == timeline.iteration_time
    first = {}
    for p in forwards:
        first.setdefault(p.tensor, p.start)
    assert [first[i] for i in range(n)] == timeline.forward_start.tolist()
    waits = sum(b.start - a.end for a, b in zip(pieces, pieces[1:]))
    assert waits + timeline.compute_overhead == pytest.approx(timeline.exposed, rel=1e-9, abs=1e-12)
