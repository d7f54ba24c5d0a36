"""The step's program (MODEL.md 8): its ops and gates on the model's clock, hand-worked."""

from __future__ import annotations

import math

import pytest

from fusionopt.cost import AlphaBeta
from fusionopt.model import (
    Problem, Profile, Decoupled, DecoupledPlan, simulate_decoupled, FullySharded, ShardedPlan, sharded_program,
    simulate_sharded,
)
from fusionopt.model import (
    AT, CHANNEL, COMPUTE, FORWARD, MARK, PUBLISH, SPAN, WAIT, Fifo, Program, replay, run_program as run,
)

MS = 1e-3


def program_of(*collectives, ops=()):
    """Collectives as ``(kind, gate, need, release)``, each of one 8-byte tensor."""
    program = Program("test", [8])
    for c, (kind, gate, need, release) in enumerate(collectives):
        program.collective(kind, c, 8, gate, need, release, ("collective {}", c), (0,))
    program.ops.extend(ops)
    return program


def test_a_gate_reached_while_the_collective_queued_is_its_issue_time():
    # c0 needs "g" 3, c1 needs "g" 1 (all-gathers in forward order need ever fewer updates).
    # "g" reaches 1 at 1 ms and 3 at 5 ms: c0 is issued at 5 ms and runs 5-7; c1 was ready
    # at 1 ms and waits for the channel, 7-9 ms.
    program = program_of((1, "g", 3, 0.0), (1, "g", 1, 0.0),
                         ops=[(AT, 1 * MS), (PUBLISH, "g", 1), (AT, 5 * MS), (PUBLISH, "g", 3), (WAIT, 1)])
    fifo = Fifo(program, [2 * MS, 2 * MS])
    clock, _ = run(program, fifo)
    assert [round(t / MS, 12) for t in fifo.issue] == [5, 1]
    assert [round(t / MS, 12) for t in fifo.start] == [5, 7]
    assert round(clock / MS, 12) == 9


def test_the_channel_gate_waits_for_an_earlier_collective_and_a_release_holds_a_collective_back():
    # c0 ungated, released at 2 ms: 2-5 ms. c1 waits for c0's end (CHANNEL, need 1) and its
    # release at 4 ms: ready at 5, runs 5-6. c2, released at 10 ms, runs 10-11; the program
    # computes 3 ms, then waits for c2: T = 11 ms.
    program = program_of((0, None, 0, 2 * MS), (1, CHANNEL, 1, 4 * MS), (1, None, 0, 10 * MS),
                         ops=[(COMPUTE, 3 * MS), (WAIT, 2)])
    fifo = Fifo(program, [3 * MS, 1 * MS, 1 * MS])
    clock, _ = run(program, fifo)
    assert [round(t / MS, 12) for t in fifo.issue] == [2, 5, 10]
    assert [round(t / MS, 12) for t in fifo.end] == [5, 6, 11]
    assert round(clock / MS, 12) == 11


def test_a_span_publishes_before_its_end_never_before_its_start_and_marks_record_the_clock():
    # From 1 ms, a span of 4 ms publishes c0 1 ms before its end (at 4 ms) and c1 9 ms
    # before it (held at the span's start, 1 ms). c0 runs 4-6, c1 is issued at 1 ms but
    # queues behind c0: 6-8.
    program = program_of((0, "issued", 1, 0.0), (0, "issued", 2, 0.0),
                         ops=[(COMPUTE, 1 * MS), (MARK, FORWARD, 0),
                              (SPAN, 4 * MS, ((1 * MS, "issued", 1), (9 * MS, "issued", 2))), (WAIT, 1)])
    fifo = Fifo(program, [2 * MS, 2 * MS])
    clock, marks = run(program, fifo)
    assert [round(t / MS, 12) for t in fifo.issue] == [4, 1]
    assert [round(t / MS, 12) for t in fifo.end] == [6, 8]
    assert marks[FORWARD] == {0: 1 * MS} and round(clock / MS, 12) == 8


def test_waiting_for_a_collective_whose_gate_is_never_published_is_refused_naming_it():
    program = program_of((0, "emitted", 2, 0.0), ops=[(PUBLISH, "emitted", 1), (WAIT, 0)])
    with pytest.raises(RuntimeError, match=r"^collective 0 waits for emitted 2, which the program never publishes"):
        run(program, Fifo(program, [1.0]))
    with pytest.raises(ValueError, match="unknown op"):
        run(program_of(ops=[("sleep", 1.0)]), Fifo(program_of(), []))


def test_the_decoupled_timeline_reports_when_each_gather_became_ready_not_when_it_reached_the_channel():
    # MODEL.md section 5's profile, halves of 1 ms + 1 ns/B, update 1 ms per tensor. Reduce-
    # scatters per tensor: t2 1-4, t1 4-6, t0 6-11 ms. Updates in ready order from the
    # backward's end, B = 6: v2 = max(6, 4) + 1 = 7, v1 = max(7, 6) + 1 = 8, v0 = 11 + 1 = 12.
    # All-gathers per tensor in forward order: {t0} waits for v0, 12-17; {t1} was ready at
    # v1 = 8 and {t2} at v2 = 7 (every update before it in the ready order done), both
    # queued behind it: 17-19, 19-22.
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3], update=[1e-3] * 3)
    half = AlphaBeta(1e-3, 1e-9)
    problem = Problem(profile, pattern=Decoupled(half, half), sync="layerwise")
    t = simulate_decoupled(problem, DecoupledPlan.from_groups(profile, [[2], [1], [0]], [[0], [1], [2]]))
    assert [round(v / MS, 9) for v in t.message_ready] == [1, 3, 6, 12, 8, 7]
    assert [round(v / MS, 9) for v in t.message_end] == [4, 6, 11, 17, 19, 22]
    assert [round(v / MS, 9) for v in t.updated] == [12, 8, 7]


def test_the_fully_sharded_program_is_what_the_simulator_times():
    # MODEL.md 8.2's two units {t0, t1}, {t2}, kept: collectives in issue order, their bytes
    # and the program replayed with the timeline's durations give the timeline itself.
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    half = AlphaBeta(1e-3, 1e-9)
    problem = Problem(profile, pattern=FullySharded(half, half))
    plan = ShardedPlan([0, 2, 3], [False, False])
    program = sharded_program(problem, plan)
    t = simulate_sharded(problem, plan)
    assert [(s.kind, s.unit, s.nbytes) for s in program.collectives] == [(1, 0, 5_000_000), (1, 1, 2_000_000),
                                                                        (0, 1, 2_000_000), (0, 0, 5_000_000)]
    r = replay(program, (t.message_end - t.message_start).tolist())
    assert r["iteration_time"] == t.iteration_time == pytest.approx(22 * MS)
    assert r["start"] == t.message_start.tolist() and r["forward_start"] == t.forward_start.tolist()
    assert not any(math.isnan(v) for v in r["forward_start"])
