"""What a PyTorch profiler (Kineto) trace holds, as :func:`~fusionopt.integrations.profile_from_trace`
reads it: the event names and categories it looks for, the trace's events and steps
(:func:`trace_events`, :func:`step_windows`), and the GPU's clock beside the host's
(:func:`describe_clock`). Times are microseconds, as the trace writes them."""

from __future__ import annotations

import bisect
import math
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from fusionopt.integrations import _attribution
from fusionopt.model._io import read_json_document




ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"


EVALUATE_FUNCTION = "autograd::engine::evaluate_function: "


MODULE_PREFIX = "nn.Module: "


STEP_PREFIX = "ProfilerStep#"


# Event categories, lower-cased (older traces spell them "Operator", "Kernel", "Runtime", ...).
OPERATOR_CATEGORIES = ("cpu_op", "operator")


DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")


LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver", "runtime")


TIMELINES = ("auto", "cpu", "gpu")


# Names tensorboard_trace_handler gives a rank's trace; other JSON files of a job's folder
# count as traces only when they hold a 'traceEvents' list.
TRACE_SUFFIXES = (".pt.trace.json", ".pt.trace.json.gz")


# The host annotations of a process group's all-reduce (backend:collective).
ALLREDUCE_NAMES = ("gloo:all_reduce", "nccl:all_reduce", "mpi:all_reduce")


# The optimiser's annotations (torch.optim names them "Optimizer.step#SGD.step", ...).
OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")


# DDP's copy of a reduced bucket back into the parameters' .grad (torch 2.13's reducer).
POST_BACKWARD_OPS = ("torch.distributed.ddp.reducer::copy_bucket_to_grad",)


# A step whose GPU is busy for less than this share of it is host-bound: the host's clock paces it.
GPU_BOUND = 0.5


# timeline="auto", in words.
TIMELINE_RULE = (f"the GPU's clock where the trace holds GPU kernels and the steps are GPU-bound (the GPU busy "
                 f"at least {100 * GPU_BOUND:.0f}% of their host time), else the host's")


# Element sizes of the type names the profiler writes in "Input type" (c10 spellings).
ELEMENT_BYTES = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "bool": 1,
    "signed char": 1, "unsigned char": 1, "short int": 2, "int": 4, "long int": 8,
    "c10::complex<float>": 8, "c10::complex<double>": 16, "c10::complex<c10::Half>": 4,
    "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1,
}


# The same types by the names a profile gives them (torch's dtype names).
TRACE_DTYPES = {
    "float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16", "bool": "bool",
    "signed char": "int8", "unsigned char": "uint8", "short int": "int16", "int": "int32", "long int": "int64",
    "c10::complex<float>": "complex64", "c10::complex<double>": "complex128",
    "c10::Float8_e4m3fn": "float8_e4m3fn", "c10::Float8_e5m2": "float8_e5m2",
}


class Event:
    """One complete ('X') event, times in microseconds."""

    __slots__ = ("name", "cat", "tid", "ts", "dur", "end", "args", "seq")

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.name = str(raw.get("name", ""))
        self.cat = str(raw.get("cat", "")).lower()
        self.tid = raw.get("tid")
        self.ts = float(raw["ts"])
        self.dur = max(float(raw.get("dur", 0.0)), 0.0)
        self.end = self.ts + self.dur
        args = raw.get("args")
        self.args = args if isinstance(args, Mapping) else {}
        seq = self.args.get("Sequence number")
        self.seq = seq if isinstance(seq, int) and not isinstance(seq, bool) else None


class Named:
    """A trace already parsed, with the file it came from (so it is read once)."""

    def __init__(self, source: str, doc: Any) -> None:
        self.source, self.doc = source, doc


def load_trace(trace: Any) -> tuple[str, list[Event], Mapping[str, Any]]:
    if isinstance(trace, (str, Path)):
        source = str(trace)
        doc = read_json_document(trace)
    elif isinstance(trace, Named):
        source, doc = trace.source, trace.doc
    else:
        source = "trace"
        doc = trace
    if isinstance(doc, Mapping):
        raw_events = doc.get("traceEvents")
        header: Mapping[str, Any] = doc
    else:
        raw_events, header = doc, {}
    if not isinstance(raw_events, list):
        raise ValueError(f"{source}: not a chrome trace: expected an object with a 'traceEvents' list")
    events = []
    for k, raw in enumerate(raw_events):
        if not isinstance(raw, Mapping) or raw.get("ph") != "X":
            continue
        try:
            event = Event(raw)
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"{source}: traceEvents[{k}] ({raw.get('name')!r}): 'ts' and 'dur' must be numbers"
            ) from None
        if not (math.isfinite(event.ts) and math.isfinite(event.dur)):
            raise ValueError(f"{source}: traceEvents[{k}] ({event.name!r}): 'ts' and 'dur' must be finite")
        events.append(event)
    if not events:
        raise ValueError(f"{source}: no complete ('ph': 'X') events: not a PyTorch profiler trace")
    events.sort(key=lambda e: (e.ts, -e.dur))
    return source, events, header


def trace_events(doc: Any, source: str = "trace") -> list[Event]:
    """The complete (``"ph": "X"``) events of a parsed trace as :func:`profile_from_trace`
    reads them: ``name``, ``cat`` (lower-cased), ``tid``, ``ts``, ``dur``, ``end`` (microseconds)
    and ``args``, sorted by start (the longer first where two start together). ``source``
    names the trace in errors."""
    return load_trace(Named(source, doc))[1]


def step_windows(events: Sequence[Event], n_parameters: int, source: str = "trace") -> list[tuple[str, float, float]]:
    """``(label, start, end)`` in microseconds of each training step :func:`profile_from_trace`
    reads in ``events`` (:func:`trace_events`): the host's ``ProfilerStep`` annotations, else
    one step per ``n_parameters`` AccumulateGrad events (module docstring, "Steps")."""
    steps = [e for e in events if e.name.startswith(STEP_PREFIX) and not e.cat.startswith("gpu")]
    if steps:
        return [(e.name, e.ts, e.end) for e in steps]
    acc_name = ACCUMULATE_GRAD if any(e.name == ACCUMULATE_GRAD for e in events) else EVALUATE_FUNCTION + ACCUMULATE_GRAD
    with warnings.catch_warnings():             # profile_from_trace names a truncated last step
        warnings.simplefilter("ignore")
        return backward_windows(list(events), acc_name, n_parameters, source)


class GpuClock:
    """GPU work linked to its launch on the host; times in microseconds. NCCL kernels (a
    framework's collectives, launched while the backward runs) are left out: a gradient is
    ready when the compute launched before it ends, not when a collective before it does."""

    def __init__(self, events: list[Event]) -> None:
        launches: dict[Any, Event] = {}
        device: list[Event] = []
        for e in events:
            corr = e.args.get("correlation")
            if corr is None:
                continue
            if e.cat in DEVICE_CATEGORIES:
                if "nccl" not in e.name.lower():       # collectives are communication, not compute
                    device.append(e)
            elif e.cat in LAUNCH_CATEGORIES:
                launches.setdefault(corr, e)
        linked = sorted(
            ((launches[e.args["correlation"]].ts, launches[e.args["correlation"]].tid, e.ts, e.end)
             for e in device if e.args["correlation"] in launches),
            key=lambda x: x[0],
        )
        self.launch_ts = [x[0] for x in linked]
        self.linked = linked
        self.done_by = list(np.maximum.accumulate([x[3] for x in linked])) if linked else []

    def __bool__(self) -> bool:
        return bool(self.linked)

    def busy_fraction(self, windows: list[tuple[float, float]]) -> float:
        """The share of the steps' host time in which the GPU runs work launched in them
        (the union of its busy intervals over the sum of the steps' lengths)."""
        busy = total = 0.0
        for start, end in windows:
            total += end - start
            lo = bisect.bisect_left(self.launch_ts, start)
            hi = bisect.bisect_right(self.launch_ts, end)
            reach = -math.inf
            for _, _, s, e in sorted(self.linked[lo:hi], key=lambda x: x[2]):
                if e > reach:
                    busy += e - max(s, reach)
                    reach = e
        return busy / total if total > 0 else 0.0

    def finished(self, host_time: float) -> float | None:
        """When all GPU work launched up to ``host_time`` has finished."""
        k = bisect.bisect_right(self.launch_ts, host_time)
        return float(self.done_by[k - 1]) if k else None

    def first_start(self, host_from: float, host_to: float, tid: Any = None) -> float | None:
        """GPU start of the first work launched in ``[host_from, host_to]`` (from ``tid``)."""
        lo = bisect.bisect_left(self.launch_ts, host_from)
        hi = bisect.bisect_right(self.launch_ts, host_to)
        starts = [x[2] for x in self.linked[lo:hi] if tid is None or x[1] == tid]
        return min(starts) if starts else None

    def intervals(self, host_from: float, host_to: float, tid: Any) -> list[tuple[float, float]]:
        """GPU ``(start, end)`` of each piece of work launched from ``tid`` in ``[host_from, host_to]``."""
        lo = bisect.bisect_left(self.launch_ts, host_from)
        hi = bisect.bisect_right(self.launch_ts, host_to)
        return [(x[2], x[3]) for x in self.linked[lo:hi] if x[1] == tid]

    def span(self, host_from: float, host_to: float, tid: Any) -> tuple[float, float] | None:
        """GPU ``(start, end)`` of the work launched from ``tid`` in ``[host_from, host_to]``."""
        lo = bisect.bisect_left(self.launch_ts, host_from)
        hi = bisect.bisect_right(self.launch_ts, host_to)
        picked = [x for x in self.linked[lo:hi] if x[1] == tid]
        if not picked:
            return None
        return min(x[2] for x in picked), max(x[3] for x in picked)


def union_of(intervals: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Disjoint sorted intervals covering the same time."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        elif end > start:
            merged.append((start, end))
    return merged


def total_length(intervals: Sequence[tuple[float, float]]) -> float:
    return sum(end - start for start, end in union_of(intervals))


def outside_of(interval: tuple[float, float], cover: list[tuple[float, float]]) -> float:
    """The time of ``interval`` not covered by the disjoint intervals ``cover``."""
    start, end = interval
    inside = sum(max(0.0, min(end, b) - max(start, a)) for a, b in cover)
    return max(0.0, end - start - inside)


def describe_clock(metadata: Mapping[str, Any]) -> str:
    """Which clock a profile read from a trace is timed by, and why, from its metadata.

    >>> describe_clock({"timeline": "cpu", "gpu_busy_fraction": 0.38, "bound": "host"})
    "the host's clock: the GPU busy 38% of the steps' host time (host-bound, under 50%)"
    >>> describe_clock({"timeline": "gpu", "gpu_busy_fraction": 0.38, "bound": "host"})
    "the GPU's clock, as asked: the GPU busy 38% of the steps' host time"
    >>> describe_clock({"timeline": "cpu", "gpu_busy_fraction": None})
    "the host's clock: no GPU work in the trace"
    """
    busy, on_gpu = metadata.get("gpu_busy_fraction"), metadata.get("timeline") == "gpu"
    name = "the GPU's clock" if on_gpu else "the host's clock"
    if busy is None:
        return f"{name}: no GPU work in the trace"
    share = f"the GPU busy {100 * busy:.0f}% of the steps' host time"
    if on_gpu == (metadata.get("bound") == "gpu"):
        bound = "GPU-bound, at least" if on_gpu else "host-bound, under"
        return f"{name}: {share} ({bound} {100 * GPU_BOUND:.0f}%)"
    return f"{name}, as asked: {share}"


def first_names(names: list[str], indices: list[int]) -> str:
    """The first three of the named parameters, quoted.

    >>> first_names(["a", "b", "c", "d"], [3, 0, 1, 2])
    "'d', 'a', 'b', ..."
    """
    return ", ".join(repr(names[i]) for i in indices[:3]) + (", ..." if len(indices) > 3 else "")


def summed_up(rows: list[dict[str, float]], statistic: str) -> dict[str, Any]:
    """Each part's median or mean over the steps, in seconds, with the steps' periods."""
    pick = _attribution.STATISTICS[statistic]
    step: dict[str, Any] = {key: float(pick([row[key] for row in rows])) / 1e6 for key in rows[0]}
    step["periods"] = [row["period"] / 1e6 for row in rows]
    return step


def innermost(candidates: list[Event], tid: Any, t: float) -> Event | None:
    best = None
    for e in candidates:
        if e.tid == tid and e.ts <= t <= e.end and (best is None or (e.ts, -e.dur) > (best.ts, -best.dur)):
            best = e
    return best


def top_level(ops: list[Event]) -> list[Event]:
    """Operators not nested in another on their thread (``ops`` sorted by start)."""
    tops: list[Event] = []
    last_end: dict[Any, float] = {}
    for e in ops:
        if e.ts >= last_end.get(e.tid, -math.inf):
            tops.append(e)
            last_end[e.tid] = e.end
    return tops



def backward_windows(events: list[Event], acc_name: str, n: int, source: str) -> list[tuple[str, float, float]]:
    """Training steps of a trace without ProfilerStep annotations, found from the backward:
    every ``n`` AccumulateGrad events in time order close one step, which began where the
    previous one closed (the first at the start of the trace). A trailing group of fewer
    than ``n`` (a step cut off by the end of the trace) is skipped with a warning."""
    acc = sorted((e for e in events if e.name == acc_name), key=lambda e: e.end)
    start = events[0].ts
    trace_end = max(e.end for e in events)
    if len(acc) <= n:
        return [("the whole trace", start, trace_end)]
    windows = []
    for g in range(len(acc) // n):
        end = acc[(g + 1) * n - 1].end
        windows.append((f"iteration {g + 1} (found from its backward)", start, end + 1e-3))
        start = end + 1e-3
    left = len(acc) % n
    if left:
        warnings.warn(f"{source}: the last {left} AccumulateGrad events do not make a whole backward "
                      f"of {n} parameters: a truncated step, skipped", stacklevel=3)
    return windows


def _folder_traces(folder: Path) -> list[tuple[Path, Any]]:
    """The profiler traces in ``folder``, parsed: every ``*.pt.trace.json[.gz]`` and any other
    ``*.json[.gz]`` holding a ``traceEvents`` list. The rest (a parameter list, a profile
    written beside the traces) is passed over; a ``.json`` that does not parse is named in a
    warning, as it may be a damaged trace."""
    found = []
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        if path.name.endswith(TRACE_SUFFIXES):
            found.append((path, read_json_document(path)))
        elif path.name.endswith((".json", ".json.gz")):
            try:
                doc = read_json_document(path)
            except ValueError as exc:
                warnings.warn(f"{exc}: not read as a trace", stacklevel=4)
                continue
            if isinstance(doc, Mapping) and isinstance(doc.get("traceEvents"), list):
                found.append((path, doc))
    if not found:
        raise ValueError(f"{folder}: no trace files (*.pt.trace.json[.gz], or *.json[.gz] with traceEvents) "
                         "in this folder")
    return found


def _trace_documents(traces: Any) -> list[tuple[Path, Any]]:
    if isinstance(traces, (str, Path)) and Path(traces).is_dir():
        return _folder_traces(Path(traces))
    files = [Path(traces)] if isinstance(traces, (str, Path)) else [Path(t) for t in traces]
    if not files:
        raise ValueError("no trace files given")
    return [(path, read_json_document(path)) for path in files]


def _distributed_info(doc: Any, key: str) -> int | None:
    info = doc.get("distributedInfo") if isinstance(doc, Mapping) else None
    value = info.get(key) if isinstance(info, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class JobTraces(dict):
    """The parsed traces of one job, rank -> ``(file, document)``, and the job's world size
    (``None`` when the traces do not say). Where a job's traces are taken, passing this
    reads no file again."""

    world_size: int | None = None

    @property
    def missing_ranks(self) -> list[int]:
        """The ranks of the world that have no trace here (none when the world size is unknown)."""
        return [] if self.world_size is None else [r for r in range(self.world_size) if r not in self]


def documents_by_rank(traces: Any) -> JobTraces:
    """The parsed traces of one job by rank: a trace, a folder of them (the files
    :func:`profile_from_traces` names), a list of files, or a :class:`JobTraces` (returned
    as it is). A trace's rank is its own (``distributedInfo.rank``) or else its position in the
    sorted list. Refused, in one line each: two files of one rank, traces that claim
    different world sizes, a rank outside its world.

    >>> import json, pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> for rank in (0, 2):
    ...     doc = {"traceEvents": [], "distributedInfo": {"rank": rank, "world_size": 4}}
    ...     _ = (folder / f"rank{rank}.pt.trace.json").write_text(json.dumps(doc))
    >>> _ = (folder / "parameters.json").write_text('[["w", 64]]')        # not a trace
    >>> job = documents_by_rank(folder)
    >>> sorted(job), job.world_size, job.missing_ranks
    ([0, 2], 4, [1, 3])
    """
    if isinstance(traces, JobTraces):
        return traces
    job = JobTraces()
    claimed: dict[int, Path] = {}
    for position, (path, doc) in enumerate(_trace_documents(traces)):
        rank = _distributed_info(doc, "rank")
        rank = position if rank is None else rank
        if rank in job:
            raise ValueError(f"{path}: rank {rank} again (also {job[rank][0]}): give one trace per rank")
        world = _distributed_info(doc, "world_size")
        if world is not None:
            if claimed and world not in claimed:
                other, first = next(iter(claimed.items()))
                raise ValueError(f"{path}: a world of {world} ranks, but {first.name} claims {other}: "
                                 "give the traces of one job")
            claimed.setdefault(world, path)
            if not 0 <= rank < world:
                raise ValueError(f"{path}: rank {rank} outside its world of {world} ranks")
        job[rank] = (path, doc)
    job.world_size = next(iter(claimed), None)
    return job

__all__ = ["ACCUMULATE_GRAD", "EVALUATE_FUNCTION", "MODULE_PREFIX", "STEP_PREFIX", "OPERATOR_CATEGORIES", "DEVICE_CATEGORIES", "LAUNCH_CATEGORIES", "TIMELINES", "TRACE_SUFFIXES", "ALLREDUCE_NAMES", "OPTIMIZER_PREFIXES", "POST_BACKWARD_OPS", "GPU_BOUND", "TIMELINE_RULE", "ELEMENT_BYTES", "TRACE_DTYPES", "trace_events", "step_windows", "describe_clock"]
