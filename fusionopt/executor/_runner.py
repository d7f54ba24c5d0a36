"""The runner: one rank's training steps of any plan, with emulated compute and real collectives.

A rank runs the model's step program of its plan (:mod:`fusionopt.model._step_program`: an
all-reduce plan's, MODEL.md sections 3 and 4, or a decoupled or fully sharded plan's, section
8), the one :func:`fusionopt.model.simulate`'s engine runs. Each step, on every rank:

1. (not timed) the rank writes its gradient values for the step (and its shard of every
   all-gather; :class:`~fusionopt.executor.ShardData`) and all ranks meet at a
   barrier;
2. the clock starts. The **compute thread** runs the program's ops on a compute clock like the
   simulator's: ``AT``/``COMPUTE`` advance the clock without waking; ``PUBLISH`` sleeps until
   the clock (an absolute deadline) and then sets a counter (a gradient emitted, an update
   done, a collective issued), ``EMIT`` does so at its own time (the backward's emissions at
   their ready times, scaled by ``time_scale``), and ``SPAN`` at each of its points; ``WAIT``
   blocks until a collective has ended and moves the clock to its measured end; ``MARK``
   records the clock. The step's measured ``T`` is when the clock's last deadline has passed;
3. a **communication thread** per channel runs that channel's collectives in order, one at a
   time, on a communicator of its own (:meth:`~fusionopt.executor.Communicator.channel`):
   each waits for its gate, its release (seconds of the run, not scaled: the prediction
   simulates the same plan) and the hold after the collectives it follows (a parameter
   server's update between a push and the pull of its bytes), then packs its chunks into one
   buffer, all-reduces, reduce-scatters (padded to a multiple of the ranks) or all-gathers it
   (:func:`~fusionopt.executor._programs.wire_collectives`), and unpacks it; a tensor is
   reduced (``C_i``) when the collective that last carries it ends. A collective the model
   prices in an encoding of fewer bytes (fp16, bf16) travels in it: its words narrowed as
   they are packed and widened as they are unpacked (:mod:`fusionopt.executor._layout`); one
   it sends through torch's PowerSGD hook runs as the hook does
   (:mod:`fusionopt.executor._powersgd`);
4. (not timed) once every rank has ended its step (a barrier, so that no rank's check runs
   during another's timed step), every byte each collective left on the rank is compared
   with its exact value; the ranks exchange their verdicts, and a failure stops the run
   after this step.

Each collective's time (start to end) is what :func:`~fusionopt.executor.calibrate`
times for ``c(S)``: pack, collective, unpack. The runner also marks when the collective
itself began and ended, so that the copies and the collective are reported apart.

Emulated compute waits until absolute deadlines (``time.sleep``), so sleep overshoot does
not accumulate; late wake-ups show up in the measured ``T``, they are not hidden.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np

from fusionopt.executor._communicator import POLL, Communicator, HostTimer, sleep_until
from fusionopt.executor._errors import CollectiveTimeout, GroupAborted, PlanMismatchError
from fusionopt.executor._gradients import Gradients
from fusionopt.executor._job import Job
from fusionopt.executor._powersgd import PowerSGDMessages
from fusionopt.executor._programs import build_program, wire_collectives, wire_encodings
from fusionopt.executor._shard_data import ShardData
from fusionopt.executor._shards import Collective, ShardLayout
from fusionopt.model._wire import compressed_collectives
from fusionopt.model._step_program import AT, CHANNEL, COMPUTE, EMIT, MARK, PUBLISH, SPAN, WAIT

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


class Step:
    """What the threads of a rank share during one step (guarded by ``cond``): the
    program's counters, and each collective's tokens and end."""

    def __init__(self, collectives: int, channels: int = 1) -> None:
        self.cond = threading.Condition()
        self.number = -1           # step the communication threads are asked to run
        self.finished = [-1] * channels   # last step each channel's thread completed
        self.stop = False
        self.failure: BaseException | None = None
        self.messages = collectives
        self.reset(-1, 0.0)

    def reset(self, number: int, t0: float) -> None:
        self.t0 = t0
        self.done = 0                               # collectives completed
        self.counters: dict[str, int] = defaultdict(int)   # each gate's value ("emitted", "updated", ...)
        self.ended = [math.nan] * self.messages     # host seconds since t0
        self.executed: list[Any] = [None] * self.messages
        self.in_flight: dict[int, tuple[int, float]] = {}   # per channel: (collective, since)
        self.start_tokens: list[Any] = [None] * self.messages
        self.end_tokens: list[Any] = [None] * self.messages
        # When the collective itself began and ended, between the packing and the unpacking.
        self.collective_tokens: list[tuple[Any, Any]] = [(None, None)] * self.messages
        self.number = number

    def has_ended(self, c: int) -> bool:
        return not math.isnan(self.ended[c])


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
            "checked_bytes": 0, "steps": 0, "collectives": [], "host_queue": [],
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
    """Runs a :class:`Job` on one rank through ``comm``: the model's step program of its plan
    (module docstring); :meth:`run` returns its record."""

    def __init__(self, comm: Communicator, job: Job) -> None:
        self.comm, self.job = comm, job
        self.problem = job.scaled_problem()
        self.profile = self.problem.profile
        self.program = build_program(self.problem, job.plan)
        self.layout = ShardLayout(self.profile, wire_collectives(self.program), size=comm.size,
                                  word_sizes=comm.word_sizes, encodings=wire_encodings(self.problem, self.program),
                                  backend=comm.name)
        self.timeout = job.timeout
        # Each channel's collectives in order, and its communicator (the same ranks).
        channel = self.program.channel
        self.channels = [[c for c in self.layout.collectives if channel[c.index] == ch]
                         for ch in range(self.program.channels)]
        self.comms = [comm.channel(ch) for ch in range(len(self.channels))]

    # ------------------------------------------------------------------ the step loop
    def run(self) -> dict[str, Any]:
        comm, job = self.comm, self.job
        record = self._record()
        self.data = record.grads
        self.state = Step(len(self.layout.collectives), len(self.channels))
        threads = [threading.Thread(target=self._communication_thread, args=(ch,), daemon=True,
                                    name=f"fusionopt-comm-{comm.rank}" + (f"-{ch}" if ch else ""))
                   for ch in range(len(self.channels))]
        for thread in threads:
            thread.start()
        try:
            for step in range(job.steps):
                if record.add(step, self._step(step)):
                    break
        finally:
            with self.state.cond:
                self.state.stop = True
                self.state.cond.notify_all()
        for thread in threads:
            thread.join(timeout=1.0)
        return record.fields

    def _record(self) -> RankRecord:
        comm, layout = self.comm, self.layout
        comm.bind_thread()           # PowerSGD's fixed factors below: on this rank's device and stream

        def allocate(words: int, dtype: Any = layout.dtype) -> Any:
            return comm.empty(words, dtype)

        compressed = compressed_collectives(self.problem, self.program)
        powersgd = None if not any(compressed) else PowerSGDMessages(
            layout, self.problem.compressor, compressed, size=comm.size, xp=comm.xp, allocate=allocate,
            word_sizes=comm.word_sizes, backend=comm.name)
        return RankRecord(comm, self.job, layout, data=lambda: ShardData(
            layout, rank=comm.rank, size=comm.size, xp=comm.xp, allocate=allocate,
            unpack=self.program.gathers_to_tensors, channels=self.program.channels, powersgd=powersgd))

    # ------------------------------------------------------------------ compute thread
    def _step(self, step: int) -> dict[str, Any]:
        comm, state, data = self.comm, self.state, self.data
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
            elif code == EMIT:
                publish(op[1], op[2], op[3])
            elif code == SPAN:
                end = clock + op[1]
                for before, gate, value in op[2]:
                    publish(gate, value, max(clock, end - before))
                clock = end
            elif code == WAIT:
                c = op[1]
                if not state.has_ended(c):
                    self._wait(lambda c=c: state.has_ended(c), self.layout.describe(c))
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
            "collectives": list(state.executed),    # in the program's order
        }

    def _wait(self, predicate, what: str) -> None:
        """Wait on the communication thread, failing on its error, an abort or a timeout."""
        state, comm = self.state, self.comm
        with state.cond:
            while not predicate():
                if state.failure is not None:
                    raise state.failure
                # A collective of this rank's past its time is this rank's timeout, even where its
                # communication thread has aborted the group and not yet recorded why.
                now = time.perf_counter()
                late = [flight for flight in state.in_flight.values() if now - flight[1] > self.timeout]
                if late:
                    k = late[0][0]
                    raise CollectiveTimeout(
                        f"{self.layout.describe(k)}: {self.layout.collectives[k].kind_name} did not complete within "
                        f"{self.timeout:g} s on rank {comm.rank} (step {state.number})")
                if comm.aborted:
                    raise GroupAborted("stopped: another rank failed")
                state.cond.wait(POLL)

    # ------------------------------------------------------------------ communication thread
    def _communication_thread(self, channel: int) -> None:
        state, comm = self.state, self.comms[channel]
        try:
            comm.bind_thread()
            while True:
                with state.cond:
                    while not state.stop and state.number <= state.finished[channel]:
                        state.cond.wait()
                    if state.stop:
                        return
                    number = state.number
                for collective in self.channels[channel]:
                    self._send(collective, number, comm, channel)
                with state.cond:
                    state.finished[channel] = number
        except BaseException as exc:  # noqa: BLE001 - the compute thread raises it
            with state.cond:
                state.failure = exc
                state.cond.notify_all()

    def _send(self, c: Collective, step: int, comm: Communicator, channel: int) -> None:
        state = self.state
        if c.gate is not None:
            # CHANNEL: collective need - 1 has ended (met by running in order on its own channel).
            met = ((lambda: state.has_ended(c.need - 1)) if c.gate == CHANNEL
                   else (lambda: state.counters[c.gate] >= c.need))
            with state.cond:
                while not met():
                    if state.stop or comm.aborted:
                        raise GroupAborted("stopped: another rank failed")
                    state.cond.wait(POLL)
        hold = max((state.ended[k] + seconds for k, seconds in self.program.after.get(c.index, ())), default=0.0)
        if max(c.release, hold) > 0.0:
            sleep_until(state.t0 + max(c.release, hold), comm)
        with state.cond:
            state.in_flight[channel] = (c.index, time.perf_counter())
            timer = state.timer
        start = timer.mark()
        try:
            collective = self.data.run(c, comm, timeout=self.timeout, tag=(step, c.index), mark=timer.mark,
                                       channel=channel)
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
            state.executed[c.index] = self.data.executed(c)
            state.in_flight.pop(channel, None)
            state.done += 1
            state.cond.notify_all()


def collective_spans(timer: Any, tokens: list[tuple[Any, Any]]) -> dict[str, list[float]]:
    """A step's ``collective_start`` and ``collective_end`` (seconds of ``timer``) from each
    message's pair of tokens."""
    return {"collective_start": [timer.seconds(a) for a, _ in tokens],
            "collective_end": [timer.seconds(b) for _, b in tokens]}



__all__ = ["RankRecord", "RankRunner", "Step", "check_agreement", "collective_spans",
           "fast_thread_switching"]
