"""The plan runner: one rank's training steps with emulated compute and real collectives.

Each step, on every rank (MODEL.md sections 3 and 4):

1. (not timed) the rank writes its gradient values for the step
   (:class:`~fusionopt.executor.gradients.Gradients`) and all ranks meet at a barrier;
2. the clock starts: the compute thread emulates the backward, emitting tensor ``i``'s
   gradient at ``r_i`` (times ``time_scale``), in the profile's ready order (it wakes only at
   the emissions that make a message ready, the only ones the run can observe);
3. the communication thread runs the plan's messages **in plan order**, one at a time: it
   waits until every chunk of message ``k`` is emitted and its release time has passed
   (seconds of the run, not scaled: the prediction simulates the same plan), packs the chunks into one fused
   buffer, all-reduces it, unpacks it; tensor ``i`` is reduced (``C_i``) when its last
   message ends;
4. the compute thread runs the next forward per ``sync``: after every ``C_i`` and the
   updates (barrier), or tensor by tensor, each after its own ``C_i`` and update
   (layerwise); the step's measured ``T`` is when that forward ends;
5. (not timed) once every rank has ended its step (a barrier, so that no rank's check
   runs during another's timed step), every byte of every tensor is compared with the
   exact sum; the ranks exchange their verdicts, and a failure stops the run after this step.

Each message's time (start to end) is what :func:`~fusionopt.executor.calibrate.calibrate`
times for ``c(S)``: pack, all-reduce, unpack. The runner also marks when the collective
itself began and ended, so that the copies and the collective are reported apart.

Emulated compute waits until absolute deadlines (``time.sleep``), so sleep overshoot does
not accumulate. The forward keeps a compute clock ``phi`` like the simulator's and waits
until it has passed: late wake-ups show up in the measured ``T``, they are not hidden.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np

from fusionopt.executor.communicator import Communicator, HostTimer
from fusionopt.executor.errors import CollectiveTimeout, GroupAborted, PlanMismatchError
from fusionopt.executor.gradients import Gradients
from fusionopt.executor.job import Job
from fusionopt.executor.layout import Layout, MessageLayout
from fusionopt.model.sync import barrier_forward

# Emulated compute sleeps in slices of at most this, to notice a failed group.
POLL = 0.05
# While ranks run, the interpreter switches threads this often (default 5 ms): a thread that
# holds the lock must not delay another's deadline by more.
SWITCH_INTERVAL = 1e-4


@contextmanager
def fast_thread_switching() -> Iterator[None]:
    """Lower the interpreter's thread switch interval while the block runs."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(min(previous, SWITCH_INTERVAL))
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def sleep_until(deadline: float, comm: Communicator) -> None:
    while True:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            return
        if comm.aborted:
            raise GroupAborted("stopped: another rank failed")
        time.sleep(min(remaining, POLL))


class Step:
    """What the two threads of a rank share during one step (guarded by ``cond``)."""

    def __init__(self, n: int, messages: int) -> None:
        self.cond = threading.Condition()
        self.number = -1           # step the communication thread is asked to run
        self.finished = -1         # last step it completed
        self.stop = False
        self.failure: BaseException | None = None
        self.n, self.messages = n, messages
        self.reset(-1, 0.0)

    def reset(self, number: int, t0: float) -> None:
        self.t0 = t0
        self.emitted = 0                            # tensors emitted, in backward order
        self.done = 0                               # messages completed
        self.reduced = np.full(self.n, math.nan)    # host seconds since t0
        self.in_flight: tuple[int, float] | None = None
        self.start_tokens: list[Any] = [None] * self.messages
        self.end_tokens: list[Any] = [None] * self.messages
        # When the collective itself began and ended, between the packing and the unpacking.
        self.collective_tokens: list[tuple[Any, Any]] = [(None, None)] * self.messages
        self.number = number


def check_agreement(comm: Communicator, job: Job) -> None:
    """Raise :class:`PlanMismatchError` on every rank if any rank holds a different plan or settings."""
    mine = job.digests()
    everyone = comm.allgather(mine, timeout=job.timeout)
    for what, index in (("plan", 0), ("run settings (profile, cost, sync, steps, options)", 1)):
        values = [d[index] for d in everyone]
        if len(set(values)) > 1:
            other = next(r for r, v in enumerate(values) if v != values[0])
            raise PlanMismatchError(
                f"ranks disagree on the {what}: rank 0 has sha256 {values[0][:12]}..., "
                f"rank {other} has {values[other][:12]}... (checked before the first step)")


class RankRecord:
    """One rank's buffers and record over a run: set-up, and the check after every step.

    Set-up binds the rank's device, checks that every rank holds the same plan and settings,
    and allocates the gradients and the fused buffer (or, given ``data``, calls it for the
    buffers: any object with ``verify(step)`` and ``nbytes``). :meth:`add` waits until every
    rank has ended the step, checks its bytes (timed: ``check_times``), shares the verdict
    with every rank and keeps the step's figures once warm-up is over; ``fields`` is the
    record the runners return (plain lists, JSON-ready).
    """

    def __init__(self, comm: Communicator, job: Job, layout: Any, *, data: Callable[[], Any] | None = None) -> None:
        self.comm, self.job = comm, job
        comm.bind_thread()
        check_agreement(comm, job)
        if data is None:
            self.grads = Gradients(layout, rank=comm.rank, size=comm.size, xp=comm.xp,
                                   allocate=lambda words: comm.empty(words, layout.dtype))
            self.fused = comm.empty(layout.max_words, layout.dtype)
        else:
            # Another runner's buffers (the sharded runner's): anything with verify, nbytes.
            self.grads, self.fused = data(), None
        self.fields: dict[str, Any] = {
            "rank": comm.rank, "iteration_times": [], "message_start": [], "message_end": [],
            "collective_start": [], "collective_end": [], "check_times": [],
            "reduced": [], "forward_start": [], "backward_late": [], "errors": [],
            "checked_bytes": 0, "steps": 0, "collectives": [],
        }

    def add(self, step: int, figures: dict[str, Any]) -> bool:
        """Check step ``step`` and keep its figures; True when a check failed (stop the run)."""
        job, fields = self.job, self.fields
        # A rank that ended its step first would otherwise check its bytes while another
        # rank's step is still timed, and slow it down (on shared cores, or the interpreter's
        # lock with thread ranks): the checks are not part of T.
        self.comm.barrier(timeout=job.timeout)
        started = time.perf_counter()
        errors = self.grads.verify(step) if job.verify else []
        if job.verify:
            fields["checked_bytes"] += self.grads.nbytes
        if step >= job.warmup:
            fields["check_times"].append(time.perf_counter() - started)
        fields["steps"] = step + 1
        verdicts = self.comm.allgather(errors, timeout=job.timeout)
        for r, rank_errors in enumerate(verdicts):
            fields["errors"].extend(f"rank {r}, step {step}: {e}" for e in rank_errors)
        executed = figures.pop("collectives", None)
        if executed is not None:
            if step == 0:
                fields["collectives"] = executed
            elif executed != fields["collectives"]:
                raise RuntimeError(f"rank {self.comm.rank} ran other collectives in step {step} than in step 0")
        if step >= job.warmup:
            for key, value in figures.items():
                fields[key].append(value)
        return bool(fields["errors"])


class RankRunner:
    """Runs a :class:`Job` on one rank through ``comm``; :meth:`run` returns its record."""

    def __init__(self, comm: Communicator, job: Job) -> None:
        self.comm, self.job = comm, job
        self.problem = job.scaled_problem()
        self.profile = self.problem.profile
        self.layout = Layout(self.profile, job.plan, word_sizes=comm.word_sizes)
        self.timeout = job.timeout
        # Emission counts at which some message becomes ready, increasing.
        self.wake_points = sorted({m.need for m in self.layout.messages})

    # ------------------------------------------------------------------ the step loop
    def run(self) -> dict[str, Any]:
        comm, job = self.comm, self.job
        record = self._record()
        self.grads, self.fused = record.grads, record.fused
        self.state = self._new_state()
        thread = threading.Thread(target=self._communication_thread, daemon=True,
                                  name=f"fusionopt-comm-{comm.rank}")
        thread.start()
        try:
            for step in range(job.steps):
                if record.add(step, self._step(step)):
                    break
        finally:
            with self.state.cond:
                self.state.stop = True
                self.state.cond.notify_all()
        thread.join(timeout=1.0)
        return record.fields

    def _record(self) -> RankRecord:
        return RankRecord(self.comm, self.job, self.layout)

    def _new_state(self) -> Step:
        return Step(self.profile.n, len(self.layout.messages))

    def _messages(self):
        """What the communication thread sends each step, in order."""
        return self.layout.messages

    def _in_flight(self, k: int) -> str:
        """Message ``k`` and its collective, for a timeout's message."""
        return f"{self.layout.describe(k)}: all-reduce"

    def _step(self, step: int) -> dict[str, Any]:
        comm, state, profile = self.comm, self.state, self.profile
        self.grads.fill(step)
        comm.barrier(timeout=self.timeout)
        timer = comm.step_timer()
        # On the host clock, step times and message times share their origin exactly.
        t0 = timer.start if isinstance(timer, HostTimer) else time.perf_counter()
        with state.cond:
            state.reset(step, t0)
            state.timer = timer
            state.cond.notify_all()

        # Backward: tensor i's gradient is emitted at r_i, in backward order n-1 .. 0. Only the
        # emissions that make a message ready are observable, so the thread wakes for those
        # alone (a wake-up per tensor costs the communication thread time on a busy host).
        ready = profile.ready_times
        order = profile.ready_order
        late = 0.0
        for need in self.wake_points:
            deadline = t0 + ready[order[need - 1]]
            sleep_until(deadline, comm)
            late = max(late, time.perf_counter() - deadline)
            with state.cond:
                state.emitted = need
                state.cond.notify_all()

        # Forward of the next step, per sync (MODEL.md section 4), on a compute clock.
        forward, update = profile.forward, profile.update
        phi = np.empty(profile.n)
        if self.problem.sync == "barrier":
            self._wait(lambda: state.done == state.messages, "every message")
            phi, end = barrier_forward(profile, float(np.nanmax(state.reduced)))
            sleep_until(t0 + end, comm)
        else:
            # The forward of tensor i may start once its own gradient is reduced; a tensor's
            # forward has no effect the run can observe, so the clock is kept and the thread
            # waits only for reductions not yet done and for the end of the forward.
            clock = profile.B
            for i in range(profile.n):
                if self.layout.sent[i]:
                    self._wait(lambda i=i: not math.isnan(state.reduced[i]), f"tensor {i}")
                    clock = max(clock, float(state.reduced[i]))
                clock += update[i]
                phi[i] = clock
                clock += forward[i]
            sleep_until(t0 + clock + profile.host_overhead, comm)      # the host's share (MODEL.md 4)
        iteration_time = time.perf_counter() - t0
        self._wait(lambda: state.done == state.messages, "every message")
        timer = state.timer
        return {
            "iteration_times": iteration_time,
            "message_start": [timer.seconds(t) for t in state.start_tokens],
            "message_end": [timer.seconds(t) for t in state.end_tokens],
            **collective_spans(timer, state.collective_tokens),
            "reduced": state.reduced.tolist(),
            "forward_start": phi.tolist(),
            "backward_late": late,
        }

    def _wait(self, predicate, what: str) -> None:
        """Wait on the communication thread, failing on its error, an abort or a timeout."""
        state, comm = self.state, self.comm
        with state.cond:
            while not predicate():
                if state.failure is not None:
                    raise state.failure
                if comm.aborted:
                    raise GroupAborted("stopped: another rank failed")
                now = time.perf_counter()
                if state.in_flight is not None and now - state.in_flight[1] > self.timeout:
                    k = state.in_flight[0]
                    raise CollectiveTimeout(
                        f"{self._in_flight(k)} did not complete within "
                        f"{self.timeout:g} s on rank {comm.rank} (step {state.number})")
                state.cond.wait(POLL)

    # ------------------------------------------------------------------ communication thread
    def _communication_thread(self) -> None:
        state = self.state
        try:
            self.comm.bind_thread()
            while True:
                with state.cond:
                    while not state.stop and state.number <= state.finished:
                        state.cond.wait()
                    if state.stop:
                        return
                    number = state.number
                for message in self._messages():
                    self._send(message, number)
                with state.cond:
                    state.finished = number
        except BaseException as exc:  # noqa: BLE001 - the compute thread raises it
            with state.cond:
                state.failure = exc
                state.cond.notify_all()

    def _send(self, message: MessageLayout, step: int) -> None:
        state, comm, grads = self.state, self.comm, self.grads.grads
        with state.cond:
            while state.emitted < message.need:
                if state.stop or comm.aborted:
                    raise GroupAborted("stopped: another rank failed")
                state.cond.wait(POLL)
        if message.release > 0.0:
            # The framework posts it then: seconds of the run, like the simulated prediction.
            sleep_until(state.t0 + message.release, comm)
        with state.cond:
            state.in_flight = (message.index, time.perf_counter())
            timer = state.timer
        start = timer.mark()
        fused = self.fused[: message.words]
        for p in message.pieces:
            fused[p.offset: p.offset + p.hi - p.lo] = grads[p.tensor][p.lo: p.hi]
        try:
            begun = timer.mark()
            comm.allreduce(fused, timeout=self.timeout, tag=(step, message.index))
            ended = timer.mark()
            for p in message.pieces:
                grads[p.tensor][p.lo: p.hi] = fused[p.offset: p.offset + p.hi - p.lo]
            comm.synchronize(timeout=self.timeout)
        except CollectiveTimeout as exc:
            raise CollectiveTimeout(f"{self.layout.describe(message.index)}: {exc} on rank {comm.rank} "
                                    f"(step {step})") from None
        end = timer.mark()
        now = time.perf_counter() - state.t0
        with state.cond:
            state.start_tokens[message.index] = start
            state.end_tokens[message.index] = end
            state.collective_tokens[message.index] = (begun, ended)
            state.in_flight = None
            for i in message.completes:
                state.reduced[i] = now
            state.done += 1
            state.cond.notify_all()


def collective_spans(timer: Any, tokens: list[tuple[Any, Any]]) -> dict[str, list[float]]:
    """A step's ``collective_start`` and ``collective_end`` (seconds of ``timer``) from each
    message's pair of tokens."""
    return {"collective_start": [timer.seconds(a) for a, _ in tokens],
            "collective_end": [timer.seconds(b) for _, b in tokens]}


def run_rank(comm: Communicator, job: Job) -> dict[str, Any]:
    """Run ``job`` on this rank; returns its record (plain lists, JSON-ready)."""
    if job.fault is not None:
        from fusionopt.executor.faults import FaultyCommunicator

        comm = FaultyCommunicator(comm, job.fault)
    return RankRunner(comm, job).run()


__all__ = ["RankRecord", "RankRunner", "check_agreement", "collective_spans", "fast_thread_switching", "run_rank"]
