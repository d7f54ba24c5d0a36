"""The step a traced job takes without the profiler: its trace replayed with the profiler's
host cost taken out (no torch needed).

``torch.profiler`` costs the host time for every event it records: its callbacks around each
operator (the shapes with ``record_shapes=True``) and, with CUDA activities, around each
runtime call. A host-bound step is slowed by all of it; a GPU-bound one hides it behind the
GPU's work. :func:`replay_trace` tells the two apart by replaying each traced step along its
critical path, with one constant ``c`` (:class:`ProfilerCost`, seconds per recorded event):

* **Host.** The events recorded on the step's threads (those that ran operators in it) in
  time order. Each costs the profiler ``c``; the replay takes that time out of the host time
  that follows it (a debt paid from the gaps between consecutive event boundaries, never
  below 0, and dropped at a synchronisation), so every later host event moves earlier. Time
  in which a collective runs on another thread (gloo's) is a wait, not work: it is kept.
* **Synchronisations** (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``,
  ``cudaEventSynchronize``, a synchronous ``cudaMemcpy``, their driver calls) wait for the
  replayed GPU work they waited for in the trace (the work launched before them that had
  ended when they returned, launched in this step), then return as late after it as they
  did.
* **GPU.** Each kernel, copy and set keeps its measured duration and starts at the latest of
  its launch's replayed time plus the launch latency, the end of the work before it on its
  stream plus the gap between back-to-back work, and the end of the work on another stream
  it waited for (where it started in the trace later than the first two allow: the work on
  another stream that ended last before it). Latency and gap are the trace's own medians
  (:func:`gpu_latency_and_gap`).
* **The step** starts with the GPU idle and ends at the later of the host's end and the
  GPU's: the step as a training loop that synchronises after each step measures it.

With ``c = 0`` the replay gives back each step's traced period, but for GPU work that ran
into the step from the one before (the replay starts each step with the GPU idle).

What is measured and what is predicted: every event time and duration is the trace's; ``c``
is measured on the host that recorded the job, with and without the profiler
(:mod:`fusionopt.integrations._profiler_calibration` writes it into the job's folder as
:data:`PROFILER_COST_FILE`), or is :data:`DEFAULT_PROFILER_COST`, fitted to the H100 traces
of ``validation/traces/unprofiled.py``. The unprofiled step itself is predicted: a measured
unprofiled step (:data:`UNPROFILED_FILE`, :func:`read_unprofiled_reference`) is read only to
be set against the prediction.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from fusionopt.integrations._kineto_events import (
    DEVICE_CATEGORIES, JobTraces, LAUNCH_CATEGORIES, OPERATOR_CATEGORIES, STEP_PREFIX, step_windows, trace_events,
)
from fusionopt.model._cost import check_count
from fusionopt.model._io import read_json_document, write_json_atomic

# A job folder's measured profiler cost and measured unprofiled step, when it has them.
PROFILER_COST_FILE = "profiler_cost.json"
UNPROFILED_FILE = "unprofiled.json"
# The host's events: the profiler's callbacks run for each of these.
HOST_CATEGORIES = OPERATOR_CATEGORIES + ("user_annotation", "python_function") + LAUNCH_CATEGORIES
# Runtime and driver calls that block the host until GPU work ends.
SYNCHRONIZING = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
                 "cudaMemcpy2D", "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize")
# A process group's backends, as their collectives' annotations begin ("gloo:all_reduce").
COLLECTIVE_PREFIXES = ("gloo:", "nccl:", "mpi:", "ucc:")
# How far apart the host's and the GPU's clocks of one trace may read one instant (us): a
# synchronisation waited for the work that had ended by then.
CLOCK_SLACK_US = 1.0


@dataclass(frozen=True)
class ProfilerCost:
    """The profiler's host time per recorded event, and where the figure comes from.

    Attributes
    ----------
    seconds_per_event : float
        Host seconds the profiler adds per event it records (``>= 0``).
    source : str
        ``"measured"`` (on the recording host, :data:`PROFILER_COST_FILE`), ``"default"``
        (:data:`DEFAULT_PROFILER_COST`) or ``"given"``.
    detail : str
        How it was measured or fitted, in words.
    """

    seconds_per_event: float
    source: str = "given"
    detail: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.seconds_per_event, bool) or not isinstance(self.seconds_per_event, (int, float)) \
                or not math.isfinite(self.seconds_per_event) or self.seconds_per_event < 0:
            raise ValueError(f"the profiler's cost per event must be a finite number of seconds >= 0, "
                             f"got {self.seconds_per_event!r}")

    def describe(self) -> str:
        """``"2.7 us per recorded event (default: fitted ...)"``.

        >>> ProfilerCost(1.5e-6, "measured", "on this host").describe()
        '1.5 us per recorded event (measured: on this host)'
        """
        detail = f": {self.detail}" if self.detail else ""
        return f"{1e6 * self.seconds_per_event:.3g} us per recorded event ({self.source}{detail})"


DEFAULT_PROFILER_COST = ProfilerCost(
    3.0e-6, "default",
    "fitted to the seven one-rank NCCL DDP jobs traced on one H100 on 2026-11-27 with CPU and CUDA activities and "
    "shapes (validation/traces/unprofiled.py); measure it where the job runs for a better figure")


@dataclass(frozen=True)
class UnprofiledReference:
    """A measured unprofiled step of a traced job (:data:`UNPROFILED_FILE`): the same job,
    without the profiler, timed as a synchronised training loop. A check of the prediction,
    never an input to it.

    Attributes
    ----------
    seconds : float
        The measured unprofiled step (``ddp_plain_median``: the median of its steps), seconds.
    measured_in_trace : float or None
        The traced steps' period as the recorder measured it, seconds.
    source : dict
        Where the figure comes from (file, date, machine).
    """

    seconds: float
    measured_in_trace: float | None = None
    source: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class StepReplay:
    """One traced step and its replay without the profiler, times in seconds.

    ``traced``: the step's traced period (host); ``replayed``: the later of ``host`` and
    ``gpu``, the ends of the replayed host work and GPU work from the step's start;
    ``events``: the host events charged the profiler's cost; ``synchronisations``: the
    host's waits for the GPU replayed."""

    label: str
    traced: float
    replayed: float
    host: float
    gpu: float
    events: int
    synchronisations: int


def read_profiler_cost(folder: Any) -> ProfilerCost | None:
    """The profiler cost measured for a job (its folder's :data:`PROFILER_COST_FILE`), or
    ``None`` when there is none; a file that does not hold one is refused, naming it."""
    if not isinstance(folder, (str, Path)) or not Path(folder).is_dir():
        return None
    path = Path(folder) / PROFILER_COST_FILE
    if not path.exists():
        return None
    document = read_json_document(path)
    value = document.get("seconds_per_event") if isinstance(document, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{path}: 'seconds_per_event' must be a finite number of seconds >= 0, got {value!r}")
    return ProfilerCost(float(value), "measured", str(document.get("detail", "")))


def write_profiler_cost(folder: str | Path, document: Mapping[str, Any]) -> Path:
    """Write a measured profiler cost (a mapping with ``seconds_per_event`` and how it was
    measured) into ``folder`` as :data:`PROFILER_COST_FILE`, atomically; a file already
    there is refused, never overwritten. Returns the file."""
    path = Path(folder) / PROFILER_COST_FILE
    if not isinstance(document, Mapping) or "seconds_per_event" not in document:
        raise ValueError(f"a profiler cost is a mapping with seconds_per_event, got {document!r}")
    ProfilerCost(document["seconds_per_event"])         # refuses a bad figure before anything is written
    if path.exists():
        raise ValueError(f"{path}: already holds a profiler cost: record into a new folder")
    write_json_atomic(path, dict(document))
    return path


def read_unprofiled_reference(folder: Any) -> UnprofiledReference | None:
    """The measured unprofiled step of a job (its folder's :data:`UNPROFILED_FILE`:
    ``ddp_plain_median`` in seconds, optionally ``measured_in_trace`` and ``source``), or
    ``None`` when there is none; a file that does not hold one is refused, naming it."""
    if not isinstance(folder, (str, Path)) or not Path(folder).is_dir():
        return None
    path = Path(folder) / UNPROFILED_FILE
    if not path.exists():
        return None
    document = read_json_document(path)
    if not isinstance(document, Mapping):
        raise ValueError(f"{path}: expected an object with 'ddp_plain_median' (seconds)")
    figures = {}
    for key in ("ddp_plain_median", "measured_in_trace"):
        value = document.get(key)
        if value is None and key == "measured_in_trace":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{path}: {key!r} must be a positive number of seconds, got {value!r}")
        figures[key] = float(value)
    source = document.get("source")
    return UnprofiledReference(figures["ddp_plain_median"], figures.get("measured_in_trace"),
                               dict(source) if isinstance(source, Mapping) else None)


def gpu_latency_and_gap(events: Sequence[Any]) -> tuple[float, float]:
    """The trace's launch latency and back-to-back gap of GPU work, microseconds: medians
    over the work that found its stream idle (from its launch's start to its own) and over
    the work queued behind the work before it on its stream (from that one's end to its
    start); 0 where the trace has none."""
    launches = _launches(events)
    work = sorted((e for e in events if e.cat in DEVICE_CATEGORIES), key=lambda e: e.ts)
    ends_by_stream: dict[Any, list[float]] = defaultdict(list)
    for e in work:
        ends_by_stream[_stream(e)].append(e.end)
    for ends in ends_by_stream.values():
        ends.sort()
    last_end: dict[Any, float] = {}
    latencies, gaps = [], []
    for e in work:
        stream = _stream(e)
        launch = launches.get(e.args.get("correlation"))
        before = last_end.get(stream)
        if launch is not None:
            if before is None or before < launch.ts:
                # Work that started as work on another stream ended waited for that, not for its launch.
                if not any(_ended_within(ends, max(launch.ts, e.ts - CLOCK_SLACK_US), e.ts + CLOCK_SLACK_US)
                           for other, ends in ends_by_stream.items() if other != stream):
                    latencies.append(max(0.0, e.ts - launch.ts))
            elif before <= e.ts:
                gaps.append(e.ts - before)
        last_end[stream] = max(e.end, before if before is not None else e.end)
    latency = statistics.median(latencies) if latencies else 0.0
    gap = statistics.median(gaps) if gaps else 0.0
    return latency, gap


def _ended_within(ends: list[float], after: float, by: float) -> bool:
    """Whether one of the sorted ``ends`` lies in ``(after, by]``."""
    k = bisect.bisect_right(ends, by)
    return bool(k) and ends[k - 1] > after


def _launches(events: Sequence[Any]) -> dict[Any, Any]:
    launches: dict[Any, Any] = {}
    for e in events:
        corr = e.args.get("correlation")
        if corr is not None and e.cat in LAUNCH_CATEGORIES:
            launches.setdefault(corr, e)
    return launches


def _stream(e: Any) -> Any:
    stream = e.args.get("stream")
    return stream if stream is not None else e.tid


def _raw(e: Any, ts: float, dur: float) -> dict[str, Any]:
    return {"ph": "X", "cat": e.cat, "name": e.name, "tid": e.tid, "ts": ts, "dur": max(dur, 0.0), "args": e.args}


class _Gpu:
    """The GPU work launched in one step, replayed in the order it started (times in us)."""

    def __init__(self, work: list[Any], launch_of: dict[int, Any], trace_before: Mapping[int, float], latency: float,
                 gap: float) -> None:
        self.work, self.launch_of, self.latency, self.gap = work, launch_of, latency, gap
        self.start: list[float | None] = [None] * len(work)
        self.end: list[float | None] = [None] * len(work)
        self.done = 0
        by_stream: dict[Any, list[int]] = defaultdict(list)
        for k, e in enumerate(work):
            by_stream[_stream(e)].append(k)
        self.by_stream = dict(by_stream)
        self.stream_ends = {s: [work[k].end for k in ks] for s, ks in self.by_stream.items()}
        self.stream_launches = {s: [launch_of[id(work[k])].ts for k in ks] for s, ks in self.by_stream.items()}
        # In the replay the GPU starts the step idle: the work before each on its stream, this step's.
        self.previous: list[int | None] = [None] * len(work)
        for ks in self.by_stream.values():
            for before, k in zip(ks, ks[1:]):
                self.previous[k] = before
        # The work each waited for on another stream, where its start in the trace says so.
        self.waited_for: list[int | None] = [None] * len(work)
        for k, e in enumerate(work):
            ready = max(launch_of[id(e)].ts + latency, trace_before.get(id(e), -math.inf) + gap)
            if e.ts > ready + CLOCK_SLACK_US:
                self.waited_for[k] = self._last_ended_elsewhere(e)

    def _last_ended_elsewhere(self, e: Any) -> int | None:
        best, best_end = None, -math.inf
        for stream, ks in self.by_stream.items():
            if stream == _stream(e):
                continue
            j = bisect.bisect_right(self.stream_ends[stream], e.ts + CLOCK_SLACK_US) - 1
            if j >= 0 and self.stream_ends[stream][j] > best_end:
                best, best_end = ks[j], self.stream_ends[stream][j]
        return best

    def replay_launched_by(self, t: float, new_time: Mapping[float, float]) -> None:
        """Replay, in start order, the work whose launch started at or before ``t``."""
        while self.done < len(self.work):
            e = self.work[self.done]
            launch = self.launch_of[id(e)]
            if launch.ts > t:
                return
            k = self.done
            start = new_time[launch.ts] + self.latency
            before = self.previous[k]
            if before is not None:
                start = max(start, self.end[before] + self.gap)
            waited = self.waited_for[k]
            if waited is not None and self.end[waited] is not None:
                start = max(start, self.end[waited])
            self.start[k], self.end[k] = start, start + e.dur
            self.done += 1

    def waited_end(self, sync: Any) -> float | None:
        """The replayed end of the work ``sync`` waited for: launched before it and ended by
        the time it returned (on each stream, the last such work)."""
        latest = None
        for stream, ks in self.by_stream.items():
            j = min(bisect.bisect_right(self.stream_launches[stream], sync.ts),
                    bisect.bisect_right(self.stream_ends[stream], sync.end + CLOCK_SLACK_US))
            if j and self.end[ks[j - 1]] is not None:
                latest = self.end[ks[j - 1]] if latest is None else max(latest, self.end[ks[j - 1]])
        return latest


def _previous_on_stream(work: Sequence[Any]) -> dict[int, float]:
    """For each piece of GPU work, the end of the work before it on its stream (trace order)."""
    last: dict[Any, float] = {}
    before: dict[int, float] = {}
    for e in sorted(work, key=lambda e: e.ts):
        stream = _stream(e)
        if stream in last:
            before[id(e)] = last[stream]
        last[stream] = max(e.end, last.get(stream, e.end))
    return before


def _union(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        elif b > a:
            merged.append((a, b))
    return merged


def _covered(a: float, b: float, spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in spans if x < b and y > a)


def replay_trace(doc: Any, cost: ProfilerCost, n_parameters: int, *, source: str = "trace") \
        -> tuple[dict[str, Any], list[StepReplay]]:
    """Replay each step of one trace without the profiler (module docstring).

    Parameters
    ----------
    doc : dict
        The parsed chrome trace.
    cost : ProfilerCost or float
        The profiler's host cost per recorded event (a float: seconds).
    n_parameters : int
        The model's trainable parameters: steps are found from the backward with it where
        the trace has no ``ProfilerStep`` annotations.

    Returns
    -------
    (dict, list of StepReplay)
        A trace of the replayed steps, laid end to end (host events, the GPU work they
        launched, the steps' annotations; what lay outside the steps is left out), which
        :func:`~fusionopt.integrations.profile_from_trace` reads like the traced one,
        and each step's figures.

    Examples
    --------
    One step of 320 us in which the host launches a kernel every 100 us (each launch a
    recorded runtime call inside a recorded operator: 2 events), each kernel runs 20 us from
    5 us after its launch. At 10 us per event, the six events' 60 us come out of the host's
    time; the GPU's work ends long before the host's.

    >>> op = lambda name, ts, dur, cat="cpu_op", **args: {"ph": "X", "cat": cat, "name": name, "tid": 1,
    ...                                                   "ts": ts, "dur": dur, "args": args}
    >>> events = [op("ProfilerStep#1", 0, 320, "user_annotation")]
    >>> for k in range(3):
    ...     events += [op("aten::add", 100 * k, 10), op("cudaLaunchKernel", 100 * k + 2, 4, "cuda_runtime", correlation=k),
    ...                dict(op("add_kernel", 100 * k + 7, 20, "kernel", correlation=k, stream=7), tid=7)]
    >>> _, steps = replay_trace({"traceEvents": events}, ProfilerCost(0.0), 1)
    >>> round(steps[0].replayed * 1e6, 6)          # no cost: the traced step
    320.0
    >>> _, steps = replay_trace({"traceEvents": events}, ProfilerCost(10e-6), 1)
    >>> steps[0].events, round(steps[0].replayed * 1e6, 6), round(steps[0].gpu * 1e6, 6)
    (6, 260.0, 185.0)
    """
    if not isinstance(cost, ProfilerCost):
        cost = ProfilerCost(cost)                 # seconds per event, as predict_traced_step takes it
    n_parameters = check_count("n_parameters", n_parameters)
    events = trace_events(doc, source)
    windows = step_windows(events, n_parameters, source)
    c = cost.seconds_per_event * 1e6
    launches = _launches(events)
    work_all = [e for e in events if e.cat in DEVICE_CATEGORIES and e.args.get("correlation") in launches]
    latency, gap = gpu_latency_and_gap(events)
    starts = [e.ts for e in events]
    ends_before = sorted(e.end for e in work_all)
    trace_before = _previous_on_stream(work_all)

    def returned_after(sync: Any) -> float:
        k = bisect.bisect_right(ends_before, sync.end + CLOCK_SLACK_US)
        return max(0.0, sync.end - max(sync.ts, ends_before[k - 1] if k else -math.inf))

    # A synchronisation whose work is not in the trace (launched before it began) returns at most as late
    # as the trace's synchronisations do at the median.
    typical_return = statistics.median([returned_after(e) for e in events if e.cat in LAUNCH_CATEGORIES
                                        and e.name in SYNCHRONIZING and e.dur > 0] or [0.0])
    replayed: list[dict[str, Any]] = []
    steps: list[StepReplay] = []
    base = windows[0][1] if windows else 0.0
    previous_end = None
    for label, w_start, w_end in windows:
        if previous_end is not None:
            base += max(0.0, w_start - previous_end)
        previous_end = w_end
        inside = events[bisect.bisect_left(starts, w_start):bisect.bisect_left(starts, w_end)]
        step_event = next((e for e in inside if e.name == label and e.name.startswith(STEP_PREFIX)
                           and e.ts == w_start), None)
        host = [e for e in inside if e.cat in HOST_CATEGORIES and e is not step_event]
        threads = {e.tid for e in host if e.cat in OPERATOR_CATEGORIES}
        charged = Counter(e.ts for e in host if e.tid in threads)
        waits = _union([(e.ts, e.end) for e in host if e.tid not in threads and e.name.startswith(COLLECTIVE_PREFIXES)])
        syncs = {}
        for e in host:
            if e.tid in threads and e.cat in LAUNCH_CATEGORIES and e.name in SYNCHRONIZING and e.dur > 0:
                if e.ts not in syncs or e.end > syncs[e.ts].end:
                    syncs[e.ts] = e
        launched_here = {id(e) for e in host if e.cat in LAUNCH_CATEGORIES}
        work = [e for e in work_all if id(launches[e.args["correlation"]]) in launched_here]
        gpu = _Gpu(work, {id(e): launches[e.args["correlation"]] for e in work}, trace_before, latency, gap)

        times = sorted({w_start, w_end} | {e.ts for e in host} | {e.end for e in host})
        new_time: dict[float, float] = {}
        now, debt, previous = 0.0, 0.0, w_start
        sync_open: tuple[Any, float, float] | None = None       # (event, replayed start, replayed end)
        replayed_syncs = 0
        for t in times:
            if sync_open is not None:
                event, at, until = sync_open
                if t < event.end:
                    new_time[t] = min(at + (t - event.ts), until)
                    debt += c * charged.get(t, 0)       # another thread's events, taken after the wait
                    continue
                now, previous, sync_open = until, event.end, None
                if t == event.end:
                    new_time[t] = now
                    debt += c * charged.get(t, 0)
                    continue
            span = t - previous
            free = span - _covered(previous, t, waits) if waits else span
            paid = min(free, debt)
            debt -= paid
            now += span - paid
            new_time[t] = now
            previous = t
            debt += c * charged.get(t, 0)
            sync = syncs.get(t)
            if sync is not None:
                gpu.replay_launched_by(t, new_time)
                waited = gpu.waited_end(sync)
                after = min(returned_after(sync), typical_return)
                until = max(now, waited if waited is not None else now) + after
                sync_open = (sync, now, until)
                # The cost not yet taken out before the wait is lost in it; the wait's own is taken after it.
                debt = c * charged.get(t, 0)
                replayed_syncs += 1
        gpu.replay_launched_by(math.inf, new_time)
        host_end = new_time[w_end]
        gpu_end = max((x for x in gpu.end if x is not None), default=0.0)
        period = max(host_end, gpu_end)
        if step_event is not None:
            replayed.append(_raw(step_event, base, period))
        for e in host:
            replayed.append(_raw(e, base + new_time[e.ts], new_time[e.end] - new_time[e.ts]))
        for k, e in enumerate(work):
            replayed.append(_raw(e, base + gpu.start[k], e.dur))
        steps.append(StepReplay(label, (w_end - w_start) / 1e6, period / 1e6, host_end / 1e6, gpu_end / 1e6,
                                sum(charged.values()), replayed_syncs))
        base += max([period] + list(new_time.values()))
    header = {key: value for key, value in (doc.items() if isinstance(doc, Mapping) else ()) if key != "traceEvents"}
    return {**header, "traceEvents": replayed}, steps


def replay_job(job: JobTraces, cost: ProfilerCost, n_parameters: int) -> tuple[JobTraces, dict[int, list[StepReplay]]]:
    """:func:`replay_trace` on every rank's trace of a job: the replayed job (each rank's
    replayed trace under its own file name) and each rank's steps."""
    replayed = JobTraces()
    replayed.world_size = job.world_size
    by_rank: dict[int, list[StepReplay]] = {}
    for rank, (path, doc) in job.items():
        replayed_doc, by_rank[rank] = replay_trace(doc, cost, n_parameters, source=str(path))
        replayed[rank] = (path, replayed_doc)
    return replayed, by_rank
