"""The stream runner against the simulator, on a virtual device whose streams keep exact clocks.

On a GPU the stream runner queues a whole step on a compute and a communication stream
(:mod:`fusionopt.executor._streams`). Here the streams are virtual: work advances a stream's
clock by exactly its seconds, an all-reduce advances the communication stream by exactly
``c(S)`` of the cost model (and really sums the buffers over thread ranks), and waiting on
an event moves a stream's clock to the event's time. Under those rules the queued step must
reproduce MODEL.md's timeline to rounding: ``T``, every message's start and end, every
``C_i`` and every ``phi_i``, in both sync modes, for fusion and partition plans.
"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusionopt.executor import (
    CollectiveTimeout, Fault, Job, LocalGroup, run_threads, assemble, FaultyCommunicator, Streams, run_stream_rank,
)
from fusionopt.cost import AlphaBeta
from fusionopt.model import Plan, Problem, Profile, simulate
from executor_helpers import small_problem
from strategies import partition_plans, profiles


class Event:
    def __init__(self, time: float) -> None:
        self.time = time


class Stream:
    def __init__(self) -> None:
        self.clock = 0.0


class VirtualDevice(Streams):
    """Two streams with exact clocks; work and all-reduces take exactly their seconds."""

    mode = "virtual"

    def __init__(self, *, stalled: bool = False) -> None:
        self.compute, self.communication = Stream(), Stream()
        self.stalled = stalled     # a device that never completes anything

    def record(self, stream: Stream) -> Event:
        return Event(stream.clock)

    def wait(self, stream: Stream, event: Event) -> None:
        stream.clock = max(stream.clock, event.time)

    def work(self, stream: Stream, seconds: float) -> None:
        assert seconds >= 0
        stream.clock += seconds

    def elapsed(self, start: Event, end: Event) -> float:
        return end.time - start.time

    def done(self, event: Event) -> bool:
        return not self.stalled

    def transfer(self, seconds: float) -> None:
        self.communication.clock += seconds


class VirtualComm:
    """A thread rank whose all-reduce sums for real and charges ``c(S)`` to the device."""

    def __init__(self, inner, device: VirtualDevice, cost) -> None:
        self.inner, self.device, self.cost = inner, device, cost

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def allreduce(self, buffer, *, timeout, tag=None):
        self.inner.allreduce(buffer, timeout=timeout, tag=tag)
        self.device.transfer(float(self.cost(buffer.nbytes)))       # what the wire carries


def run_virtual(problem: Problem, plan: Plan, *, ranks: int = 2, iterations: int = 2, warmup: int = 1,
                fault: Fault | None = None, gate: float = 2e-3, devices=None, link=None):
    job = Job(problem, plan, iterations=iterations, warmup=warmup, timeout=5.0, fault=fault)
    group = LocalGroup(ranks)
    devices = devices or [VirtualDevice() for _ in range(ranks)]
    comms = []
    for comm, device in zip(group.communicators(), devices):
        if fault is not None:
            comm = FaultyCommunicator(comm, fault)
        comms.append(VirtualComm(comm, device, problem.cost if link is None else link))
    records = run_threads([lambda c=c, d=d: run_stream_rank(c, d, job, gate=gate)
                           for c, d in zip(comms, devices)], group)
    return assemble(job, records, backend="virtual")


def assert_matches_model(m, problem: Problem, plan: Plan) -> None:
    t = simulate(problem, plan)
    scale = t.iteration_time + 2e-3      # clocks run from the gate's start: rounding at that scale
    assert m.correct, m.errors
    np.testing.assert_allclose(m.iteration_times, t.iteration_time, rtol=0, atol=1e-12 * scale)
    for row in range(m.message_start.shape[0]):
        np.testing.assert_allclose(m.message_start[row], t.message_start, rtol=0, atol=1e-12 * scale)
        np.testing.assert_allclose(m.message_end[row], t.message_end, rtol=0, atol=1e-12 * scale)
        np.testing.assert_allclose(m.reduced[row], t.reduced, rtol=0, atol=1e-12 * scale)
        np.testing.assert_allclose(m.forward_start[row], t.forward_start, rtol=0, atol=1e-12 * scale)


@pytest.mark.parametrize("sync", ["barrier", "layerwise"])
def test_worked_example_on_the_virtual_device(sync):
    # MODEL.md section 5, kilobyte tensors, alpha 0.1 ms: plan {t2}, {t1, t0}.
    problem = small_problem(sync)
    plan = Plan.from_groups(problem.profile, [[2], [1, 0]])
    m = run_virtual(problem, plan)
    assert_matches_model(m, problem, plan)
    # By hand: t2 ready at 1 ms, 2 KiB message 1 -> 1.102048 ms; t1, t0 ready at 6 ms, 5 KiB
    # message 6 -> 6.105120 ms; then the forwards of 1 ms each.
    np.testing.assert_allclose(m.message_end[0], [1.0e-3 + 1e-4 + 2048e-9, 6e-3 + 1e-4 + 5120e-9], rtol=1e-12)
    assert m.iteration_time == pytest.approx(6e-3 + 1e-4 + 5120e-9 + 3e-3, rel=1e-12)


class SlowLaunches(VirtualDevice):
    """A host that spends ``launch`` seconds of its own on each piece of compute it queues."""

    def __init__(self, launch: float) -> None:
        super().__init__()
        self.launch, self.launches = launch, 0

    def work(self, stream: Stream, seconds: float) -> None:
        super().work(stream, seconds)
        if stream is self.compute:
            self.launches += 1
            time.sleep(self.launch)


def test_the_hosts_queueing_time_is_kept_per_timed_step():
    problem = small_problem("barrier")
    plan = Plan.from_groups(problem.profile, [[2], [1, 0]])
    devices = [SlowLaunches(0.01)]
    m = run_virtual(problem, plan, ranks=1, iterations=2, warmup=1, devices=devices)
    assert_matches_model(m, problem, plan)     # the host's pace is not the device's clock
    assert m.host_queue.shape == m.iteration_times.shape
    # Each step queues the gate's spin before its origin, then the compute pieces after it.
    per_step = devices[0].launches / m.steps - 1
    assert per_step >= 2
    assert (m.host_queue >= 0.01 * per_step).all()
    assert m.to_dict()["host_queue"] == m.host_queue.tolist()


@settings(deadline=None, max_examples=40)
@given(data=st.data(), sync=st.sampled_from(["barrier", "layerwise"]))
def test_queued_step_reproduces_the_simulator(data, sync):
    profile = data.draw(profiles(1, 6))
    plan = data.draw(partition_plans(profile))
    problem = Problem(profile, AlphaBeta(alpha=data.draw(st.floats(0, 1e-3)), beta=1e-9), sync=sync)
    m = run_virtual(problem, plan, iterations=1, warmup=0)
    assert_matches_model(m, problem, plan)


def test_tied_tensors_ready_before_the_one_carrying_their_time():
    # Six tensors ready together at 7.8125 ms, their time on t5 (the last in forward order),
    # which the ready order puts last: the message of t0..t4 cannot start before 7.8125 ms
    # (it did, at 0, when the queued backward ran b_i in the ready order).
    profile = Profile.from_arrays([1] * 6, [0.0] * 6, [0.0] * 5 + [0.0078125], ready_order=[4, 3, 2, 1, 0, 5])
    problem = Problem(profile, AlphaBeta(alpha=0.0, beta=1e-9))
    plan = Plan.from_groups(profile, [[4, 3, 2, 1, 0], [5]])
    m = run_virtual(problem, plan, iterations=1, warmup=0)
    assert_matches_model(m, problem, plan)
    assert round(simulate(problem, plan).iteration_time, 15) == 0.0078125 + 6e-9


def test_a_corrupted_chunk_fails_the_data_check():
    problem = small_problem("layerwise")
    plan = Plan.from_groups(problem.profile, [[2], [1, 0]])
    m = run_virtual(problem, plan, fault=Fault("corrupt", rank=1, message=1))
    assert not m.correct and m.steps == 1
    assert re.search(r"rank 1, step 0: tensor 't[01]'.*carried by message 1", m.errors[0])
    assert run_virtual(problem, plan).correct


def test_a_device_that_never_finishes_names_the_message():
    problem = small_problem("barrier")
    plan = Plan.from_groups(problem.profile, [[2], [1, 0]])
    device = VirtualDevice(stalled=True)
    job = Job(problem, plan, iterations=1, warmup=0, timeout=0.05)
    comm = VirtualComm(LocalGroup(1).communicators()[0], device, problem.cost)
    with pytest.raises(CollectiveTimeout, match=r"message 0 of 2 .*not complete within 0.05 s on rank 0"):
        run_stream_rank(comm, device, job)


def test_messages_in_their_encodings_reproduce_the_simulator():
    # MODEL.md section 5 on 3 ms + 1 ns/B, fp16 free to cast: the joint optimum's messages travel
    # as narrowed words, the device charged the link's time of the bytes on the wire (half), and
    # the queued step is the model's timeline with every kept bit checked.
    from fusionopt.cost import Cheapest

    link = AlphaBeta(3e-3, 1e-9)
    problem = Problem(small_problem().profile, Cheapest(link, ["fp32", "fp16"]))
    plan = Plan.from_groups(problem.profile, [[2], [1, 0]])
    m = run_virtual(problem, plan, link=link)
    assert m.encodings == ("fp16", "fp16")
    assert_matches_model(m, problem, plan)
