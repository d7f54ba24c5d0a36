"""The sharded runner: one rank's steps of a decoupled or fully sharded plan (MODEL.md 8).

It is the plan runner of :mod:`fusionopt.executor.runner` (same two threads, same step
loop, record, check and watchdog) with two parts replaced:

* the **compute thread** runs the step's :class:`~fusionopt.model.step_program.Program` (the
  model's, the one the simulator runs) on a compute clock like the simulator's:
  ``AT``/``COMPUTE`` advance the clock without waking; ``PUBLISH`` sleeps until the clock (an
  absolute deadline) and then sets a counter (a gradient emitted, an update done, a
  collective issued), and ``SPAN`` does so at each of its points; ``WAIT`` blocks until a
  collective has ended and moves the clock to its measured end; ``MARK`` records the clock. The step's measured ``T`` is when the
  clock's last deadline has passed. Late wake-ups show in ``T``; they are not hidden.
* the **communication thread** runs the program's collectives in channel order: each waits
  for its gate and its release, then packs, reduce-scatters or all-gathers (padded to a
  multiple of the ranks) and unpacks (:class:`~fusionopt.executor.shard_data.ShardData`).

After every step every byte each collective left on the rank is checked
(:meth:`ShardData.verify`), as for an all-reduce.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from fusionopt.executor.communicator import Communicator, HostTimer
from fusionopt.executor.errors import CollectiveTimeout, GroupAborted
from fusionopt.executor.job import Job
from fusionopt.executor.programs import build_program
from fusionopt.executor.runner import POLL, RankRecord, RankRunner, Step, collective_spans, sleep_until
from fusionopt.executor.shard_data import ShardData
from fusionopt.executor.shards import Collective, ShardLayout
from fusionopt.model.step_program import AT, CHANNEL, COMPUTE, MARK, PUBLISH, SPAN, WAIT


class _ShardStep(Step):
    """The shared step state, with the program's counters and each collective's end."""

    def reset(self, number: int, t0: float) -> None:
        super().reset(number, t0)
        self.counters = {"emitted": 0, "updated": 0, "issued": 0}
        self.ended = [math.nan] * self.messages
        self.executed: list[list[Any]] = []


class ShardedRankRunner(RankRunner):
    """Runs a :class:`Job` of a decoupled or fully sharded plan on one rank."""

    def __init__(self, comm: Communicator, job: Job) -> None:
        self.comm, self.job = comm, job
        self.problem = job.scaled_problem()
        self.profile = self.problem.profile
        self.program = build_program(self.problem, job.plan)
        self.layout = ShardLayout(self.profile, self.program.collectives, size=comm.size,
                                  word_sizes=comm.word_sizes)
        self.timeout = job.timeout

    def _record(self) -> RankRecord:
        comm, layout = self.comm, self.layout
        return RankRecord(comm, self.job, layout, data=lambda: ShardData(
            layout, rank=comm.rank, size=comm.size, xp=comm.xp,
            allocate=lambda words: comm.empty(words, layout.dtype), unpack=self.program.pattern == "decoupled"))

    def _new_state(self) -> _ShardStep:
        return _ShardStep(self.profile.n, len(self.layout.collectives))

    def _messages(self):
        return self.layout.collectives

    def _in_flight(self, k: int) -> str:
        return f"{self.layout.describe(k)}: {self.layout.collectives[k].kind_name}"

    # ------------------------------------------------------------------ compute thread
    def _step(self, step: int) -> dict[str, Any]:
        comm, state, data = self.comm, self.state, self.grads
        data.fill(step)
        comm.barrier(timeout=self.timeout)
        timer = comm.step_timer()
        t0 = timer.start if isinstance(timer, HostTimer) else time.perf_counter()
        with state.cond:
            state.reset(step, t0)
            state.timer = timer
            state.cond.notify_all()

        clock, late = 0.0, 0.0
        marks: dict[str, dict[int, float]] = {}

        def publish(gate: str, value: int, at: float) -> None:
            nonlocal late
            deadline = t0 + at
            sleep_until(deadline, comm)
            late = max(late, time.perf_counter() - deadline)
            with state.cond:
                state.counters[gate] = value
                state.cond.notify_all()

        for op in self.program.ops:
            code = op[0]
            if code == COMPUTE:
                clock += op[1]
            elif code == AT:
                clock = max(clock, op[1])
            elif code == PUBLISH:
                publish(op[1], op[2], clock)
            elif code == SPAN:
                end = clock + op[1]
                for before, gate, value in op[2]:
                    publish(gate, value, max(clock, end - before))
                clock = end
            elif code == WAIT:
                c = op[1]
                if state.done <= c:
                    self._wait(lambda c=c: state.done > c, self.layout.describe(c))
                clock = max(clock, state.ended[c])
            elif code == MARK:
                marks.setdefault(op[1], {})[op[2]] = clock
        sleep_until(t0 + clock, comm)
        iteration_time = time.perf_counter() - t0
        self._wait(lambda: state.done == state.messages, "every collective")
        ended = np.asarray(state.ended + [math.nan])
        return {
            "iteration_times": iteration_time,
            "message_start": [timer.seconds(t) for t in state.start_tokens],
            "message_end": [timer.seconds(t) for t in state.end_tokens],
            **collective_spans(timer, state.collective_tokens),
            "reduced": ended[list(self.program.reduced_by)].tolist(),
            "forward_start": self.program.forward_start(marks).tolist(),
            "backward_late": late,
            "collectives": list(state.executed),
        }

    # ------------------------------------------------------------------ communication thread
    def _send(self, c: Collective, step: int) -> None:
        state, comm = self.state, self.comm
        if c.gate is not None and c.gate != CHANNEL:          # CHANNEL: met by running in order
            with state.cond:
                while state.counters[c.gate] < c.need:
                    if state.stop or comm.aborted:
                        raise GroupAborted("stopped: another rank failed")
                    state.cond.wait(POLL)
        if c.release > 0.0:
            sleep_until(state.t0 + c.release, comm)
        with state.cond:
            state.in_flight = (c.index, time.perf_counter())
            timer = state.timer
        start = timer.mark()
        try:
            collective = self.grads.run(c, comm, timeout=self.timeout, tag=(step, c.index), mark=timer.mark)
        except CollectiveTimeout as exc:
            raise CollectiveTimeout(f"{self.layout.describe(c.index)}: {exc} on rank {comm.rank} "
                                    f"(step {step})") from None
        end = timer.mark()
        now = time.perf_counter() - state.t0
        with state.cond:
            state.start_tokens[c.index] = start
            state.end_tokens[c.index] = end
            state.collective_tokens[c.index] = collective
            state.ended[c.index] = now
            state.executed.append([c.kind_name, c.nbytes, c.padded * self.layout.word_bytes])
            state.in_flight = None
            state.done += 1
            state.cond.notify_all()


def run_sharded_rank(comm: Communicator, job: Job) -> dict[str, Any]:
    """Run ``job`` (a decoupled or fully sharded plan) on this rank; returns its record."""
    return ShardedRankRunner(comm, job).run()


__all__ = ["ShardedRankRunner", "run_sharded_rank"]
