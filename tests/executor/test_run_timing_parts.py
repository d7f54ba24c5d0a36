"""What a run times, part by part: the checks stay out of every rank's step, each message's
copies and collective are marked apart, and the messages' time once every rank has joined
them (a calibration's kind of time) is compared with the sum of ``c(S)``."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from executor_helpers import small_problem, small_profile
from fusionopt.executor import Job, run, time_message, assemble, RankRunner, ShardData
from fusionopt.cost import AlphaBeta
from fusionopt.model import Plan, Problem, FullySharded, ShardedPlan

HALF = AlphaBeta(alpha=1e-4, beta=1e-9)


@pytest.mark.parametrize("pattern", ["all-reduce", "fully-sharded"])
def test_no_rank_checks_its_bytes_while_another_rank_is_in_its_step(monkeypatch, pattern):
    """Rank 1 ends each step 30 ms after rank 0: rank 0's check must wait for it."""
    events: list[tuple[str, int, int, float]] = []
    lock = threading.Lock()
    runner_class, data_class = RankRunner, ShardData      # every plan runs as its step program
    step, verify = runner_class._step, data_class.verify

    def late_step(self, number):
        figures = step(self, number)
        if self.comm.rank == 1:
            time.sleep(0.03)
        with lock:
            events.append(("ended", self.comm.rank, number, time.perf_counter()))
        return figures

    def logged_verify(self, number):
        with lock:
            events.append(("check", self.rank, number, time.perf_counter()))
        return verify(self, number)

    monkeypatch.setattr(runner_class, "_step", late_step)
    monkeypatch.setattr(data_class, "verify", logged_verify)
    if pattern == "all-reduce":
        problem = small_problem()
        plan = Plan.from_groups(problem.profile, [[2], [1, 0]])
    else:
        problem = Problem(small_profile(update=2e-4), pattern=FullySharded(HALF, HALF))
        plan = ShardedPlan([0, 2, 3])
    m = run(problem, plan, ranks=2, iterations=3, warmup=1, time_scale=0.1)
    assert m.correct and m.check_times.shape == (3,) and (m.check_times > 0).all()
    for number in range(4):
        ended = max(t for kind, _, s, t in events if kind == "ended" and s == number)
        checks = [t for kind, _, s, t in events if kind == "check" and s == number]
        assert len(checks) == 2 and min(checks) >= ended


@pytest.mark.parametrize("pattern", ["all-reduce", "fully-sharded"])
def test_each_message_marks_its_collective_between_its_copies(pattern):
    if pattern == "all-reduce":
        problem = small_problem()
        plan = Plan.from_groups(problem.profile, [[2], [1, 0]])
    else:
        problem = Problem(small_profile(update=2e-4), pattern=FullySharded(HALF, HALF))
        plan = ShardedPlan([0, 2, 3])
    m = run(problem, plan, ranks=3, iterations=2, warmup=1, time_scale=0.1)
    messages = m.predicted.message_end.size
    assert m.collective_start.shape == m.collective_end.shape == m.lockstep_durations.shape == (2, messages)
    assert (m.message_start <= m.collective_start).all() and (m.collective_start <= m.collective_end).all()
    assert (m.collective_end <= m.message_end).all()
    # The last rank to join a message waited for no one: no rank's message is shorter.
    assert (m.lockstep_durations <= m.message_end - m.message_start).all() and (m.lockstep_durations > 0).all()
    assert m.predicted_message_time == pytest.approx(sum(HALF(b) for b in m.predicted.message_bytes), rel=1e-12)


def test_assemble_takes_the_shortest_message_over_the_ranks_and_the_slowest_check():
    """Two ranks, two messages, two timed steps, by hand (seconds)."""
    profile = small_profile()
    problem = Problem(profile, AlphaBeta(alpha=1e-3, beta=0.0))
    job = Job(problem, Plan.from_groups(profile, [[2], [1, 0]]), iterations=2, warmup=0)

    def record(rank, start, begun, ended, end, checks):
        return {"rank": rank, "iteration_times": [0.01, 0.012], "message_start": start, "message_end": end,
                "collective_start": begun, "collective_end": ended, "check_times": checks,
                "reduced": [[0.0] * 3] * 2, "forward_start": [[0.0] * 3] * 2, "backward_late": [0.0, 0.0],
                "errors": [], "checked_bytes": 0, "steps": 2, "collectives": []}

    # Rank 0 reaches both messages first and waits inside them for rank 1.
    zero = record(0, [[1e-3, 4e-3], [1e-3, 5e-3]], [[1.5e-3, 4.5e-3], [1.5e-3, 5.5e-3]],
                  [[3.5e-3, 6.5e-3], [4e-3, 7.5e-3]], [[4e-3, 7e-3], [4.5e-3, 8e-3]], [2e-3, 3e-3])
    one = record(1, [[2e-3, 5e-3], [2e-3, 6e-3]], [[2.5e-3, 5.5e-3], [2.5e-3, 6.5e-3]],
                 [[3.5e-3, 6.5e-3], [4e-3, 7.5e-3]], [[4e-3, 7e-3], [4.5e-3, 8e-3]], [4e-3, 1e-3])
    m = assemble(job, [one, zero], backend="local")
    np.testing.assert_allclose(m.lockstep_durations, [[2e-3, 2e-3], [2.5e-3, 2e-3]], rtol=1e-12)
    assert m.lockstep_time == pytest.approx(np.median([4e-3, 4.5e-3]))
    assert m.message_time == pytest.approx(np.median([6e-3, 6.5e-3]))           # rank 0's, with its waits
    assert m.copy_times == pytest.approx((1e-3, 1e-3))                            # pack and unpack
    assert m.check_times.tolist() == [4e-3, 3e-3] and m.check_time == pytest.approx(3.5e-3)
    assert m.predicted_message_time == pytest.approx(2e-3)                        # two messages of 1 ms
    summary = m.summary()
    assert "message time   6.250 ms in all on rank 0 (median step): pack 1.000, collective 4.250, unpack 1.000 ms" \
        in summary
    assert "4.250 ms once every rank had joined each message (as calibrate times c(S)); predicted sum of c(S) " \
           "2.000 ms, error +112.50 %" in summary
    assert "checks         3.500 ms per step, after T (not in it)" in summary
    doc = m.to_dict()
    assert doc["lockstep_time"] == pytest.approx(4.25e-3) and doc["check_times"] == [4e-3, 3e-3]


class _Recording:
    """A one-rank communicator that records the buffers a calibration's message hands it."""

    size = 1

    def __init__(self) -> None:
        self.sent = []

    def reduce_scatter(self, send, recv, *, timeout):
        self.sent.append(send)
        recv[:] = send

    def synchronize(self, *, timeout):
        pass


def test_a_calibrated_reduce_scatter_packs_its_buffer_as_the_runner_does():
    source = np.arange(16, dtype=np.uint64)
    fused = np.zeros(16, dtype=np.uint64)
    comm = _Recording()
    time_message(comm, source, fused, 1.0, "reduce_scatter")
    (sent,) = comm.sent
    assert np.shares_memory(sent, fused) and not np.shares_memory(sent, source)
    assert sent.tolist() == list(range(16))
