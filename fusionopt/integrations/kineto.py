"""Read a :class:`~fusionopt.model.profile.Profile` from a PyTorch profiler (Kineto) trace.

:func:`profile_from_trace` reads the chrome-trace JSON that
``torch.profiler.profile(...).export_chrome_trace(path)`` writes, with the parameter list
(names and gradient sizes in bytes, forward order) from the user. It needs no torch.

The mapping (timestamps ``ts`` and durations ``dur`` of ``"ph": "X"`` events, microseconds)
-------------------------------------------------------------------------------------------
* **Steps.** Each host-side ``ProfilerStep#k`` event (written when the profiler runs with
  a ``schedule`` and ``prof.step()`` is called each step; the copy a GPU trace keeps on the
  device's timeline is ignored) is one training step: the events that start inside it are
  its events. A trace without them is split at its backward passes: every ``n``
  AccumulateGrad events close a step. A last step with fewer gradients than parameters (cut
  off by the end of the trace) is skipped with a warning, and named in
  ``metadata["steps_skipped"]``; so is the first of the steps found from the backward when
  there are others (it starts at the trace's start, not at a step's: it is read and checked,
  not counted). Every time is the median over the steps (the ready times after the envelope
  below, tensor by tensor), or with ``statistic="mean"`` the mean (means add up: the mean
  period is the sum of the mean parts, as a throughput figure wants). Traces may be gzip-compressed
  (``.json.gz``, as ``tensorboard_trace_handler`` writes them).
* **Backward.** Each ``torch::autograd::AccumulateGrad`` event (or, in traces without it,
  ``autograd::engine::evaluate_function: torch::autograd::AccumulateGrad``) accumulates the
  gradient of one parameter; it ends when the gradient is ready. The ``k``-th of them in a
  step, in time order, is the ``k``-th parameter in backward ready order: the reverse of
  the forward order (MODEL.md section 1), unless ``ready_order`` says otherwise, or, when
  the trace recorded shapes (``record_shapes=True``), the first of the next few parameters
  in that order whose size is the gradient's (a convolution's weight arrives before its
  bias; equal-sized tensors of one layer keep reverse forward order). A step must hold one
  per parameter, and each AccumulateGrad's recorded gradient size is checked against its
  parameter's. A parameter's ready
  time is measured from the start of the step's first ``autograd::engine::evaluate_function``
  event; ready times become backward times by the rule of
  :mod:`fusionopt.integrations._attribution` (each tensor gets the gap from the ready event
  before it; out-of-order ready times are enveloped, never moved earlier).
* **Forward.** The autograd node that ran just before a parameter's AccumulateGrad, on the
  same thread, made its gradient; that node's ``Sequence number`` is also carried by the
  forward operator that created it, which used the parameter (of the operators stamped with
  that number, the longest: batch norm's ``num_batches_tracked.add_`` carries its number
  too). The *unit* of that operator
  is the innermost ``nn.Module: ...`` event holding it (traces taken with
  ``with_stack=True``) or else the outermost operator holding it (``aten::linear``, say).
  By default (``forward="span"``) a unit's forward time is its **span**, from its start to
  the next unit's start (the last unit's: to the start of the backward), so the operators
  between parameter uses (activations, pooling, residual additions, the loss) count for the
  layer before them and ``F`` is the forward as measured, from the first layer's start to
  the backward's; ``forward="exclusive"`` takes a unit's own duration less that of the units
  nested in it, leaving the rest out of ``F``. The time goes to the last of the unit's
  parameters in forward order. Parameters whose unit is not found in any step get forward
  time 0, are named in a warning and listed in ``metadata["forward_unmatched"]``.
* **A trace cut short.** A truncated file does not parse (its gzip stream or JSON ends
  early) and is refused. A trace that lost whole threads (the profiler writes them one
  after another, so a cut drops the last ones) is refused in one line naming the trace and
  what is missing: a step with no forward found for any parameter (``F`` would read 0), or
  without the forward of parameters other steps show; a step with no backward; GPU
  ``ProfilerStep`` copies without the host's, or AccumulateGrad events outside every
  ``ProfilerStep``; kernel launches in the steps without their kernels, or a thread's
  launches stopping or thinning out in a step (with ``timeline="cpu"`` the host's events
  are read alone, and these GPU checks are not made).
* **GPU.** When the trace holds GPU work (``kernel``, ``gpu_memcpy``, ``gpu_memset`` events
  linked by ``correlation`` to their ``cuda_runtime`` or ``cuda_driver`` launch) and the
  steps are **GPU-bound** (the GPU busy, NCCL aside, for at least half of the steps' host
  time: ``metadata["gpu_busy_fraction"]``, ``metadata["bound"]``), the GPU's clock is used;
  a **host-bound** step is paced by the host, whose timestamps are then used. On the GPU's
  clock a gradient is ready
  when all GPU work launched up to the end of its AccumulateGrad has finished (NCCL
  kernels left out: a collective is communication, not the gradient's compute), the backward
  starts with the first GPU work launched from it, and a unit lasts from the start of the
  first to the end of the last GPU work launched inside it. ``timeline="cpu"`` or ``"gpu"``
  forces one clock; ``metadata["timeline"]`` says which one the times come from
  (:func:`describe_clock` says it in words, with the reason).
* **The whole step** (MODEL.md section 4's step parts), per step on the same clock, each the
  median (or mean) over the steps; ``metadata["step"]`` keeps every part, the measured ``exposed``
  wait and the steps' ``periods`` (host lengths, seconds):

  - ``post_backward``: DDP's copies of the reduced buckets into ``.grad`` (the reducer's
    ``copy_bucket_to_grad`` ops) after the backward; on the host's clock less the time a
    collective of the step was in flight (waiting for it, or competing with it for the
    host, is communication), on the GPU's the device work they launched;
  - ``update``, per tensor, where the trace shows it: on the host's clock, an optimiser step
    whose operators split into one equal run per parameter with the parameter's shapes (a
    single-tensor optimiser, :func:`_update_per_tensor`), in every counted step;
  - ``update_lump``: the rest of the optimiser's ``Optimizer.step#...`` and all of
    ``Optimizer.zero_grad#...`` annotations (host time, or the device work launched in
    them): the whole step for a ``foreach`` or fused optimiser;
  - ``exposed``: from the backward's end to the end of the post-backward copies, less the
    copies: the wait for communication the model predicts (not a profile field);
  - ``host_overhead``: the step's period less its forward (first unit to the backward),
    backward, post-backward window and update lump: data loading, Python, launches, idle
    device time; never below 0.
"""

from __future__ import annotations

import bisect
import math
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from fusionopt.integrations import _attribution
from fusionopt.model._io import read_csv_rows, read_json_document
from fusionopt.model.profile import DTYPE_BYTES, STEP_PARTS, Profile
from fusionopt.model.profile_csv import read_profile_csv

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


class _Event:
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


def _parameter_list(parameters: Any) -> tuple[list[str], list[int], list[str] | None]:
    """Names and byte sizes (forward order) and any ready order a profile carries."""
    carried = None
    if isinstance(parameters, (str, Path)):
        parameters = read_parameter_list(parameters)
    if isinstance(parameters, Profile):
        names, sizes = list(parameters.names), [int(s) for s in parameters.sizes]
        order = parameters.metadata.get("ready_order")
        if isinstance(order, list) and sorted(map(str, order)) == sorted(names):
            carried = [str(x) for x in order]
        elif not parameters.has_default_orders:
            carried = [names[i] for i in parameters.ready_order]
        return names, sizes, carried
    if hasattr(parameters, "named_parameters"):   # a torch.nn.Module, duck-typed
        pairs = [(nm, p.numel() * p.element_size()) for nm, p in parameters.named_parameters() if p.requires_grad]
    elif isinstance(parameters, Mapping):
        pairs = list(parameters.items())
    elif isinstance(parameters, (list, tuple)):
        pairs = []
        for k, item in enumerate(parameters):
            if not isinstance(item, (list, tuple)) or len(item) != 2:
                raise ValueError(f"parameters[{k}] must be a (name, size_bytes) pair, got {item!r}")
            pairs.append((item[0], item[1]))
    else:
        raise ValueError(
            "parameters must be a torch.nn.Module, a Profile, a dict of name -> size_bytes, a "
            f"list of (name, size_bytes) pairs or a file of them, got {type(parameters).__name__}"
        )
    if not pairs:
        raise ValueError("parameters is empty: give every trainable parameter, in forward order")
    names, sizes = [], []
    for nm, size in pairs:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size <= 0:
            raise ValueError(f"parameter {nm!r}: size must be a positive whole number of bytes, got {size!r}")
        names.append(str(nm))
        sizes.append(int(size))
    seen: set[str] = set()
    for nm in names:
        if nm in seen:
            raise ValueError(f"parameter {nm!r}: name repeated")
        seen.add(nm)
    return names, sizes, carried


def _ready_positions(names: list[str], ready_order: Sequence[str] | None) -> list[int]:
    """Forward index of the k-th parameter to become ready."""
    n = len(names)
    if ready_order is None:
        return list(range(n - 1, -1, -1))
    order = [str(x) for x in ready_order]
    index = {nm: i for i, nm in enumerate(names)}
    unknown = [nm for nm in order if nm not in index]
    if unknown:
        raise ValueError(f"ready_order names unknown parameters: {', '.join(map(repr, unknown))}")
    missing = [nm for nm in names if nm not in set(order)]
    if missing or len(order) != n:
        listed = ", ".join(map(repr, missing)) or "none"
        raise ValueError(f"ready_order must name each parameter once; missing: {listed}")
    return [index[nm] for nm in order]


# How far ahead of reverse forward order a gradient may arrive within its layer (an LSTM
# layer's four tensors), when the trace's shapes say which parameter it is.
MATCH_WINDOW = 4


def _gradient_bytes(event: _Event) -> int | None:
    """Bytes of the gradient an AccumulateGrad event holds, when the trace recorded shapes."""
    dims, types = event.args.get("Input Dims"), event.args.get("Input type")
    if isinstance(dims, list) and dims and isinstance(dims[0], list) and isinstance(types, list) and types:
        elem = ELEMENT_BYTES.get(types[0])
        if elem is not None:
            return math.prod(int(d) for d in dims[0]) * elem
    return None


def _match_sizes(recorded: list[int | None], positions: list[int], sizes: list[int]) -> list[int]:
    """The parameter of each AccumulateGrad (time order): the first of the next
    ``MATCH_WINDOW`` parameters in reverse forward order whose size is the recorded
    gradient's (a convolution's weight arrives before its bias); the next one where the size
    is unknown or matches none (then the size check names the fault). Tensors of equal size
    within a layer (a norm's weight and bias) cannot be told apart: they keep reverse forward
    order unless ``ready_order`` is given.

    >>> _match_sizes([864, 32, None], [2, 1, 0], [32, 864, 64])
    [1, 0, 2]
    """
    remaining = list(positions)
    matched = []
    for nbytes in recorded:
        pick = 0
        if nbytes is not None:
            pick = next((j for j, i in enumerate(remaining[:MATCH_WINDOW]) if sizes[i] == nbytes), 0)
        matched.append(remaining.pop(pick))
    return matched


def _backward_windows(events: list[_Event], acc_name: str, n: int, source: str) -> list[tuple[str, float, float]]:
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


class _Named:
    """A trace already parsed, with the file it came from (so it is read once)."""

    def __init__(self, source: str, doc: Any) -> None:
        self.source, self.doc = source, doc


def _load(trace: Any) -> tuple[str, list[_Event], Mapping[str, Any]]:
    if isinstance(trace, (str, Path)):
        source = str(trace)
        doc = read_json_document(trace)
    elif isinstance(trace, _Named):
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
            event = _Event(raw)
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


def trace_events(doc: Any, source: str = "trace") -> list[_Event]:
    """The complete (``"ph": "X"``) events of a parsed trace as :func:`profile_from_trace`
    reads them: ``name``, ``cat`` (lower-cased), ``tid``, ``ts``, ``dur``, ``end`` (microseconds)
    and ``args``, sorted by start (the longer first where two start together). ``source``
    names the trace in errors."""
    return _load(_Named(source, doc))[1]


def step_windows(events: Sequence[_Event], n_parameters: int, source: str = "trace") -> list[tuple[str, float, float]]:
    """``(label, start, end)`` in microseconds of each training step :func:`profile_from_trace`
    reads in ``events`` (:func:`trace_events`): the host's ``ProfilerStep`` annotations, else
    one step per ``n_parameters`` AccumulateGrad events (module docstring, "Steps")."""
    steps = [e for e in events if e.name.startswith(STEP_PREFIX) and not e.cat.startswith("gpu")]
    if steps:
        return [(e.name, e.ts, e.end) for e in steps]
    acc_name = ACCUMULATE_GRAD if any(e.name == ACCUMULATE_GRAD for e in events) else EVALUATE_FUNCTION + ACCUMULATE_GRAD
    with warnings.catch_warnings():             # profile_from_trace names a truncated last step
        warnings.simplefilter("ignore")
        return _backward_windows(list(events), acc_name, n_parameters, source)


class _GpuClock:
    """GPU work linked to its launch on the host; times in microseconds. NCCL kernels (a
    framework's collectives, launched while the backward runs) are left out: a gradient is
    ready when the compute launched before it ends, not when a collective before it does."""

    def __init__(self, events: list[_Event]) -> None:
        launches: dict[Any, _Event] = {}
        device: list[_Event] = []
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


def _union(intervals: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Disjoint sorted intervals covering the same time."""
    merged: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        elif end > start:
            merged.append((start, end))
    return merged


def _length(intervals: Sequence[tuple[float, float]]) -> float:
    return sum(end - start for start, end in _union(intervals))


def _outside(interval: tuple[float, float], cover: list[tuple[float, float]]) -> float:
    """The time of ``interval`` not covered by the disjoint intervals ``cover``."""
    start, end = interval
    inside = sum(max(0.0, min(end, b) - max(start, a)) for a, b in cover)
    return max(0.0, end - start - inside)


def _step_parts(inside: list[_Event], window: tuple[float, float], forward_start: float, backward_start: float,
                backward: float, gpu: "_GpuClock | None") -> dict[str, float]:
    """The parts of one step (module docstring, "The whole step"), in microseconds, on the
    GPU's clock when ``gpu`` is given, else the host's; ``backward_start`` on that clock.

    The post-backward copies follow the step's backward, or, in a window found from the
    backward (which closes at a backward's end), open the window: they then follow the
    previous step's backward, which ended where the window starts."""
    w_start, w_end = window
    backward_end = backward_start + backward
    copies = [e for e in inside if e.name in POST_BACKWARD_OPS]
    optimizer = [e for e in inside if e.name.startswith(OPTIMIZER_PREFIXES) and not e.cat.startswith("gpu")]
    if gpu is not None:
        copy_work = [iv for e in copies for iv in gpu.intervals(e.ts, e.end, e.tid)]
        before = [iv for iv in copy_work if iv[0] < backward_start]
        anchor = (gpu.finished(w_start) or min(iv[0] for iv in before)) if before else backward_end
        post_backward = _length(copy_work)
        post_end = max([anchor] + [end for _, end in copy_work])
        update_lump = _length([iv for e in optimizer for iv in gpu.intervals(e.ts, e.end, e.tid)])
    else:
        # A copy that runs while a collective is in flight waits for it (or competes with it
        # for the host): that share is communication, the rest is the copy.
        anchor = w_start if any(e.end <= backward_start for e in copies) else backward_end
        collectives = _union([(e.ts, e.end) for e in inside if e.name in ALLREDUCE_NAMES])
        copies = [e for e in copies if e.end > anchor]
        post_backward = sum(_outside((max(e.ts, anchor), e.end), collectives) for e in copies)
        post_end = max([anchor] + [e.end for e in copies])
        update_lump = _length([(e.ts, e.end) for e in optimizer])
    period = w_end - w_start
    forward = backward_start - forward_start
    exposed = max(0.0, post_end - anchor - post_backward)
    host = max(0.0, period - forward - backward - (post_end - anchor) - update_lump)
    return {"period": period, "forward": forward, "backward": backward, "exposed": exposed,
            "post_backward": post_backward, "update_lump": update_lump, "host_overhead": host}


def _update_per_tensor(inside: list[_Event], sizes: list[int]) -> np.ndarray | None:
    """Host time of the optimiser's step per parameter (forward order, microseconds), where the
    trace shows it: one ``Optimizer.step#...`` annotation whose top-level operators split into
    one equal run per parameter, in the parameter list's order (``model.parameters()``, which
    a single-tensor optimiser walks), each run's first inputs the parameter's size. A run
    lasts from its first operator to the next run's (the last: to the annotation's end); the
    time before the first run stays in the lump. ``None`` otherwise (a multi-tensor
    ``foreach`` or fused optimiser, no shapes)."""
    steps = [e for e in inside if e.name.startswith(OPTIMIZER_PREFIXES[0]) and not e.cat.startswith("gpu")]
    if len(steps) != 1:
        return None
    step = steps[0]
    ops = _top_level([e for e in inside if e.tid == step.tid and e.cat in OPERATOR_CATEGORIES
                      and step.ts <= e.ts and e.end <= step.end])
    n = len(sizes)
    if not ops or len(ops) % n:
        return None
    per = len(ops) // n
    runs = [ops[k * per:(k + 1) * per] for k in range(n)]
    if any(_gradient_bytes(e) != sizes[k] for k, run in enumerate(runs) for e in run):
        return None
    starts = [run[0].ts for run in runs] + [step.end]
    return np.diff(np.array(starts))


# A thread launching fewer than this share of its typical step's kernels in a step lost some
# (a training loop launches alike in every step).
SHORT_STEP = 0.75


def _missing_gpu_work(events: list[_Event], windows: list[tuple[str, float, float]], source: str) -> None:
    """Refuse a trace whose steps lost GPU work: kernel launches (host side) in the steps
    whose kernels are not on the GPU's timeline, or a thread whose launches stop before the
    last step or that launches under ``SHORT_STEP`` of a typical step's kernels in one (a
    cut drops the device's events and the host's launches thread by thread; in a whole
    trace every launch has its kernel, and each thread launches alike in every step)."""
    device = {e.args.get("correlation") for e in events if e.cat in DEVICE_CATEGORIES}
    launches = sorted((e.ts, e.tid, e.args["correlation"]) for e in events if e.cat in LAUNCH_CATEGORIES
                      and "LaunchKernel" in e.name and e.args.get("correlation") is not None)
    times = [x[0] for x in launches]
    per_step = [launches[bisect.bisect_left(times, start):bisect.bisect_left(times, end)] for _, start, end in windows]
    launched = sum(map(len, per_step))
    lost = sum(1 for step in per_step for _, _, corr in step if corr not in device)
    hint = ("the device's events are not all in the trace (a trace cut off?); timeline='cpu' reads the host's "
            "clock alone")
    if lost:
        raise ValueError(f"{source}: {lost} of the {launched} kernel launches in the steps have no kernel on the GPU's "
                         f"timeline: {hint}")
    start, end = min(w[1] for w in windows), max(w[2] for w in windows)
    if not launched and any(e.cat in DEVICE_CATEGORIES and start <= e.ts < end for e in events):
        raise ValueError(f"{source}: GPU work in the steps but no kernel launch on the host: the host's launches are "
                         "not in the trace (a trace cut off?); timeline='cpu' reads the host's clock alone")
    counts = [Counter(tid for _, tid, _ in step) for step in per_step]
    for tid in set().union(*counts) if counts else ():
        per = [c[tid] for c in counts]
        last = max(k for k, count in enumerate(per) if count)
        if last < len(windows) - 1:
            raise ValueError(f"{source}: thread {tid} launches kernels up to {windows[last][0]} and none in "
                             f"{windows[last + 1][0]}: {hint}")
        typical = float(np.median(per))
        short = next((k for k, count in enumerate(per) if count < SHORT_STEP * typical), None)
        if short is not None:
            raise ValueError(f"{source}: thread {tid} launches {per[short]} kernels in {windows[short][0]}, "
                             f"{typical:g} in a typical step: {hint}")


def _first_names(names: list[str], indices: list[int]) -> str:
    """The first three of the named parameters, quoted.

    >>> _first_names(["a", "b", "c", "d"], [3, 0, 1, 2])
    "'d', 'a', 'b', ..."
    """
    return ", ".join(repr(names[i]) for i in indices[:3]) + (", ..." if len(indices) > 3 else "")


def _forward_found(source: str, names: list[str], found: list[tuple[str, set[int]]]) -> list[str]:
    """Refuse a step in which no parameter's forward operator was found (``F`` would read 0),
    or in which parameters whose forward other steps show have none: the step's forward is
    not all in the trace (a cut loses whole threads). Warn of the parameters found in no
    step; they are returned (forward order) and get forward time 0."""
    seen: set[int] = set().union(*(f for _, f in found)) if found else set()
    for label, f in found:
        if not f:
            raise ValueError(f"{source}: {label}: no forward operator found for any of the {len(names)} parameters "
                             "(the operators that made the backward's nodes): the step's forward is not in the trace "
                             "(a trace cut off?)")
        lost = sorted(seen - f)
        if lost:
            raise ValueError(f"{source}: {label}: no forward found for {len(lost)} parameters whose forward other "
                             f"steps show ({_first_names(names, lost)}): part of the step is not in the trace (a "
                             "trace cut off?)")
    unmatched = sorted(set(range(len(names))) - seen)
    if unmatched:
        warnings.warn(f"{source}: no forward operator found for {len(unmatched)} of {len(names)} parameters "
                      f"({_first_names(names, unmatched)}): their forward time is 0", stacklevel=3)
    return [names[i] for i in unmatched]


def _summed_up(rows: list[dict[str, float]], statistic: str) -> dict[str, Any]:
    """Each part's median or mean over the steps, in seconds, with the steps' periods."""
    pick = _attribution.STATISTICS[statistic]
    step: dict[str, Any] = {key: float(pick([row[key] for row in rows])) / 1e6 for key in rows[0]}
    step["periods"] = [row["period"] / 1e6 for row in rows]
    return step


def _innermost(candidates: list[_Event], tid: Any, t: float) -> _Event | None:
    best = None
    for e in candidates:
        if e.tid == tid and e.ts <= t <= e.end and (best is None or (e.ts, -e.dur) > (best.ts, -best.dur)):
            best = e
    return best


def _top_level(ops: list[_Event]) -> list[_Event]:
    """Operators not nested in another on their thread (``ops`` sorted by start)."""
    tops: list[_Event] = []
    last_end: dict[Any, float] = {}
    for e in ops:
        if e.ts >= last_end.get(e.tid, -math.inf):
            tops.append(e)
            last_end[e.tid] = e.end
    return tops


def profile_from_trace(
    trace: Any,
    parameters: Any,
    *,
    ready_order: Sequence[str] | None = None,
    timeline: str = "auto",
    name: str = "",
    dtype_bytes: int | None = None,
    forward: str = "span",
    statistic: str = "median",
) -> Profile:
    """A profile from a PyTorch profiler chrome trace and the model's parameter list.

    Parameters
    ----------
    trace : str, Path or dict
        The trace file (``export_chrome_trace``), or its parsed JSON.
    parameters : torch.nn.Module, Profile, dict, list of (name, size_bytes), str or Path
        The trainable parameters in forward order, with gradient sizes in bytes. A module
        gives its ``named_parameters()`` with ``requires_grad`` in registration order,
        taken as the forward order; a profile gives its names and sizes (and its
        ``metadata["ready_order"]`` when ``ready_order`` is not given); a path is read by
        :func:`read_parameter_list` (the files ``fusionopt profile --parameters`` takes).
    ready_order : sequence of str, optional
        Parameter names in the order their gradients become ready in the backward;
        default: the reverse of the forward order.
    timeline : {"auto", "cpu", "gpu"}
        Which clock to read (module docstring): the GPU's when the trace has linked GPU
        work (``"auto"``), or always the host's or the GPU's.
    name : str
        The profile's name.
    dtype_bytes : int, optional
        Bytes per gradient element; default: the greatest common divisor of the recorded
        gradients' element sizes, 4 when the trace recorded no types.
    forward : {"span", "exclusive"}
        How a unit's forward time is measured (module docstring): its span to the next unit,
        or its own duration.
    statistic : {"median", "mean"}
        How the steps are summed up (module docstring).

    Returns
    -------
    Profile
        Forward and backward times in seconds (medians over the trace's steps), update
        times 0, the step parts ``update_lump``, ``post_backward`` and ``host_overhead``;
        ``metadata`` says where they came from (``source``, ``trace``, ``steps``,
        ``timeline``, ``forward_units``, ``ready_order``, ``forward_unmatched``, ``step``).

    Raises
    ------
    ValueError
        Naming the file (or ``trace`` for a dict) and the problem: malformed JSON, no
        complete events, no AccumulateGrad event, a step whose AccumulateGrad count is not
        the number of parameters, a gradient size that does not match its parameter, a bad
        parameter list or ``ready_order``.

    Examples
    --------
    A hand-made trace of one step of a model with two parameters: ``w`` (used by
    ``aten::mm`` in module ``Linear_0``, 30 us) and ``v`` (``aten::add`` in ``Linear_1``,
    10 us). The backward starts at 100 us; ``v``'s gradient is ready at 120 us and ``w``'s
    at 150 us. ``w``'s forward spans 0 to 40 us (the next layer's start) and ``v``'s 40 to
    100 us (the loss included); their own durations are 30 and 10 us.

    >>> op = lambda name, ts, dur, **args: {"ph": "X", "cat": "cpu_op", "name": name, "tid": 1,
    ...                                    "ts": ts, "dur": dur, "args": args}
    >>> module = lambda name, ts, dur: dict(op(name, ts, dur), cat="python_function")
    >>> events = [
    ...     module("nn.Module: Linear_0", 0, 30), op("aten::mm", 5, 20, **{"Sequence number": 1}),
    ...     module("nn.Module: Linear_1", 40, 10), op("aten::add", 42, 5, **{"Sequence number": 2}),
    ...     op("autograd::engine::evaluate_function: AddBackward0", 100, 15, **{"Sequence number": 2}),
    ...     op("torch::autograd::AccumulateGrad", 116, 4),
    ...     op("autograd::engine::evaluate_function: MmBackward0", 121, 25, **{"Sequence number": 1}),
    ...     op("torch::autograd::AccumulateGrad", 147, 3),
    ... ]
    >>> p = profile_from_trace({"traceEvents": events}, [("w", 4096), ("v", 64)])
    >>> p.names, (p.forward * 1e6).round(6).tolist(), (p.backward * 1e6).round(6).tolist()
    (('w', 'v'), [40.0, 60.0], [30.0, 20.0])
    >>> own = profile_from_trace({"traceEvents": events}, [("w", 4096), ("v", 64)], forward="exclusive")
    >>> (own.forward * 1e6).round(6).tolist()
    [30.0, 10.0]
    """
    if timeline not in TIMELINES:
        raise ValueError(f"unknown timeline {timeline!r}: choose one of {', '.join(map(repr, TIMELINES))}")
    if forward not in ("span", "exclusive"):
        raise ValueError(f"unknown forward attribution {forward!r}: choose 'span' or 'exclusive'")
    if statistic not in _attribution.STATISTICS:
        raise ValueError(f"unknown statistic {statistic!r}: choose 'median' or 'mean'")
    attribution = forward
    names, sizes, carried = _parameter_list(parameters)
    n = len(names)
    given = ready_order if ready_order is not None else carried
    positions = _ready_positions(names, given)
    first_positions: list[int] | None = None
    source, events, header = _load(trace)

    acc_name = ACCUMULATE_GRAD
    if not any(e.name == acc_name for e in events):
        acc_name = EVALUATE_FUNCTION + ACCUMULATE_GRAD
        if not any(e.name == acc_name for e in events):
            raise ValueError(
                f"{source}: no AccumulateGrad events: the trace holds no backward pass "
                "(profile the training step, loss.backward() included, with ProfilerActivity.CPU)"
            )
    gpu = _GpuClock(events)
    if timeline == "gpu" and not gpu:
        raise ValueError(f"{source}: timeline='gpu' but the trace holds no GPU work linked to its launch")

    # The host's ProfilerStep annotations (a GPU trace repeats them on the device's timeline).
    step_events = [e for e in events if e.name.startswith(STEP_PREFIX) and not e.cat.startswith("gpu")]
    if not step_events and any(e.name.startswith(STEP_PREFIX) for e in events):
        raise ValueError(f"{source}: ProfilerStep annotations on the GPU's timeline but none on the host's: the "
                         "host thread that ran the steps is not in the trace (a trace cut off?)")
    if step_events:
        windows = [(e.name, e.ts, e.end) for e in step_events]
        outside = sum(1 for e in events if e.name == acc_name and not any(s <= e.ts < t for _, s, t in windows))
        if outside:
            raise ValueError(f"{source}: {outside} AccumulateGrad events lie outside every ProfilerStep (about "
                             f"{outside / n:.3g} backward passes): the host thread that ran the steps is not all "
                             "in the trace (a trace cut off?)")
    else:
        windows = _backward_windows(events, acc_name, n, source)
    uncounted = 1 if not step_events and len(windows) > 1 else 0
    if timeline != "cpu":
        _missing_gpu_work(events, windows[uncounted:], source)
    busy = gpu.busy_fraction([(w_start, w_end) for _, w_start, w_end in windows]) if gpu else None
    bound = None if busy is None else ("gpu" if busy >= GPU_BOUND else "host")
    use_gpu = bool(gpu) and (timeline == "gpu" or (timeline == "auto" and bound == "gpu"))
    starts = [e.ts for e in events]

    ready_rows, forward_rows, parts_rows, update_rows = [], [], [], []
    found_rows: list[tuple[str, set[int]]] = []     # per step, the parameters whose forward was found
    units_kind = None
    skipped: list[str] = []
    for number, (label, w_start, w_end) in enumerate(windows):
        lo = bisect.bisect_left(starts, w_start)
        hi = bisect.bisect_left(starts, w_end)
        inside = [e for e in events[lo:hi] if not e.name.startswith(STEP_PREFIX)]
        acc = sorted((e for e in inside if e.name == acc_name), key=lambda e: e.end)
        if len(acc) != n:
            message = (f"{source}: {label}: {len(acc)} AccumulateGrad events but {n} parameters given "
                       "(one per trainable parameter and step: check the parameter list, and that each "
                       "ProfilerStep holds one backward)")
            if not acc and not (number == len(windows) - 1 and ready_rows):
                raise ValueError(f"{source}: {label} holds no backward (no AccumulateGrad event), though the trace "
                                 "holds others: this step's backward is not in the trace (its thread lost: a trace "
                                 "cut off?)")
            if len(acc) < n and number == len(windows) - 1 and ready_rows:
                warnings.warn(f"{source}: {label} holds {len(acc)} of {n} gradients: a truncated last step, "
                              "skipped", stacklevel=2)
                skipped.append(label)
                continue
            raise ValueError(message)
        evaluations = [e for e in inside if e.name.startswith(EVALUATE_FUNCTION)]
        backward_start = min(e.ts for e in evaluations + acc)

        recorded = [_gradient_bytes(e) for e in acc]
        step_positions = positions if given is not None else _match_sizes(recorded, positions, sizes)
        if first_positions is None:
            first_positions = step_positions
            traced_types = {step_positions[k]: TRACE_DTYPES.get((e.args.get("Input type") or [None])[0])
                            for k, e in enumerate(acc)}
        for k, (e, nbytes) in enumerate(zip(acc, recorded)):
            i = step_positions[k]
            if nbytes is not None and nbytes != sizes[i]:
                dims, types = e.args["Input Dims"], e.args["Input type"]
                raise ValueError(
                    f"{source}: {label}: AccumulateGrad {k} (ready order) holds a gradient of "
                    f"{nbytes} bytes (shape {dims[0]}, {types[0]}) but maps to parameter {names[i]!r} "
                    f"of {sizes[i]} bytes: give the parameters in forward order, or ready_order"
                )

        # The autograd node that ran just before each AccumulateGrad, on its thread, made its gradient.
        producers: dict[Any, list[_Event]] = {}
        for e in evaluations:
            if e.seq is not None and ACCUMULATE_GRAD not in e.name:
                producers.setdefault(e.tid, []).append(e)
        for tid in producers:
            producers[tid].sort(key=lambda e: e.end)
        producer_ends = {tid: [e.end for e in evs] for tid, evs in producers.items()}
        made_by: list[_Event | None] = []
        for e in acc:
            j = bisect.bisect_right(producer_ends.get(e.tid, []), e.ts + 1e-3) - 1
            made_by.append(producers[e.tid][j] if j >= 0 else None)

        ready = np.zeros(n)
        gpu_start = gpu.first_start(backward_start, w_end) if use_gpu else None
        if gpu_start is not None:
            for k, e in enumerate(acc):
                done = gpu.finished(e.end)
                ready[step_positions[k]] = max((done if done is not None else gpu_start) - gpu_start, 0.0) / 1e6
        else:
            for k, e in enumerate(acc):
                ready[step_positions[k]] = (e.end - backward_start) / 1e6
        # The gradients one node made (a layer's) are ready together, when the last of them is.
        for node in {id(m): m for m in made_by if m is not None}.values():
            group = [step_positions[k] for k, m in enumerate(made_by) if m is node]
            ready[group] = ready[group].max()
        ready_rows.append(ready)

        # Forward: AccumulateGrad -> the node before it -> its forward operator -> its unit.
        forward_ops = [e for e in inside if e.ts < backward_start and e.cat in OPERATOR_CATEGORIES]
        # The forward operator that made an autograd node: of the operators recorded with the
        # node's sequence number, the longest (batch norm's, not the num_batches_tracked.add_
        # before it that the profiler stamps with the same number).
        first_with_seq: dict[int, _Event] = {}
        for e in forward_ops:
            if e.seq is not None and (e.seq not in first_with_seq or e.dur > first_with_seq[e.seq].dur):
                first_with_seq[e.seq] = e
        modules = [e for e in inside if e.ts < backward_start and e.name.startswith(MODULE_PREFIX)]
        units_kind = "nn.Module events" if modules else "outermost operators"
        tops = None if modules else _top_level(forward_ops)

        unit_of: dict[int, _Event] = {}
        for k, e in enumerate(acc):
            i = step_positions[k]
            use = first_with_seq.get(made_by[k].seq) if made_by[k] is not None else None
            unit = None
            if use is not None:
                unit = _innermost(modules, use.tid, use.ts) if modules else _innermost(tops, use.tid, use.ts)
            if unit is not None:
                unit_of[i] = unit
        found_rows.append((label, set(unit_of)))
        units: list[_Event] = []
        for u in unit_of.values():
            if not any(u is v for v in units):
                units.append(u)
        parents = []
        for u in units:
            outer = [v for v in units if v is not u and v.tid == u.tid and v.ts <= u.ts and u.end <= v.end]
            parents.append(units.index(max(outer, key=lambda v: (v.ts, -v.dur))) if outer else None)
        if use_gpu:
            spans = [gpu.span(u.ts, u.end, u.tid) for u in units]
            forward_end = gpu_start if gpu_start is not None else backward_start
        else:
            spans = [(u.ts, u.end) for u in units]
            forward_end = backward_start
        if attribution == "span":
            own = _attribution.span_times(spans, forward_end) / 1e6
        else:
            own = _attribution.exclusive_times([s or (0.0, 0.0) for s in spans], parents) / 1e6
        members = [[i for i, u in unit_of.items() if u is v] for v in units]
        forward_rows.append(_attribution.forward_times(n, members, own))
        first_use = min((span[0] for span in spans if span), default=forward_end)
        parts = _step_parts(inside, (w_start, w_end), first_use, forward_end, float(ready.max()) * 1e6,
                            gpu if gpu_start is not None else None)
        per_tensor = None if gpu_start is not None else _update_per_tensor(inside, sizes)
        if per_tensor is not None:
            parts["update_lump"] -= float(per_tensor.sum())
            per_tensor = per_tensor / 1e6
        update_rows.append(per_tensor)
        parts_rows.append(parts)

    if uncounted:
        skipped.insert(0, windows[0][0])
        ready_rows, forward_rows, parts_rows, update_rows = ready_rows[1:], forward_rows[1:], parts_rows[1:], update_rows[1:]
        found_rows = found_rows[1:]
    unmatched = _forward_found(source, names, found_rows)
    _, backward = _attribution.step_backward(ready_rows, statistic=statistic)
    forward = _attribution.STATISTICS[statistic](np.array(forward_rows), axis=0)
    if update_rows and all(row is not None for row in update_rows):
        update = _attribution.STATISTICS[statistic](np.array(update_rows), axis=0)
    else:                   # the optimiser's time in a lump, where a step's does not split by tensor
        for parts, row in zip(parts_rows, update_rows):
            if row is not None:
                parts["update_lump"] += float(row.sum()) * 1e6
        update = np.zeros(n)
    step = _summed_up(parts_rows, statistic)
    metadata: dict[str, Any] = {
        "source": "fusionopt.integrations.kineto.profile_from_trace",
        "trace": Path(source).name if isinstance(trace, (str, Path, _Named)) else "dict",
        "steps": len(ready_rows),
        "steps_skipped": skipped,
        "timeline": "gpu" if use_gpu else "cpu",
        "gpu_busy_fraction": busy,
        "bound": bound,
        "forward_units": units_kind,
        "forward_attribution": attribution,
        "statistic": statistic,
        "ready_order": [names[i] for i in first_positions],
        "forward_unmatched": unmatched,
        "step": step,
    }
    properties = header.get("deviceProperties")
    if isinstance(properties, list) and properties:
        metadata["devices"] = [str(p.get("name")) for p in properties if isinstance(p, Mapping)]
    # The gradients' dtypes, when the trace recorded every one (DDP buckets one dtype at a time).
    dtypes = [traced_types.get(i) for i in range(n)]
    dtypes = dtypes if all(dtypes) else None
    if dtype_bytes is None:
        dtype_bytes = math.gcd(*(DTYPE_BYTES[d] for d in dtypes)) if dtypes else 4
    try:
        profile = Profile.from_arrays(sizes, forward, backward, names, update=update, name=name, dtype_bytes=dtype_bytes,
                                      metadata=metadata, dtypes=dtypes, **{part: step[part] for part in STEP_PARTS})
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None
    # The ready order: the given one where the corrected ready times tie, theirs elsewhere.
    rank = {i: k for k, i in enumerate(first_positions)}
    ready_times = profile.ready_times
    return profile.with_orders(ready_order=sorted(range(n), key=lambda i: (float(ready_times[i]), rank[i])))


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


def read_parameter_csv(path: str | Path) -> list[tuple[str, int]]:
    """A parameter list from a CSV file: a header with ``name`` and ``size_bytes`` columns
    (in any order, other columns ignored), then one row per trainable parameter in forward
    order; errors name the file and the line."""
    rows = read_csv_rows(path)
    header = [h.strip() for h in rows[0][1]] if rows else []
    if "name" not in header or "size_bytes" not in header:
        raise ValueError(f"{path}: a parameter list needs 'name' and 'size_bytes' columns, "
                         f"got {', '.join(header) or 'no header'}")
    at, pairs = (header.index("name"), header.index("size_bytes")), []
    for line, row in rows[1:]:
        try:
            pairs.append((row[at[0]].strip(), int(row[at[1]])))
        except (IndexError, ValueError):
            raise ValueError(f"{path}: line {line}: size_bytes must be a whole number of bytes") from None
    return pairs


def read_parameter_list(path: str | Path) -> Profile | list[tuple[str, int]]:
    """The parameter list in a file: a CSV with ``name`` and ``size_bytes`` columns
    (:func:`read_parameter_csv`) or a CSV profile (with ``forward_s``/``backward_s``
    columns); a JSON profile, a JSON list of ``[name, bytes]`` pairs or a JSON object of
    ``name: bytes``. What :func:`profile_from_trace` takes as ``parameters``, read from disk."""
    path = Path(path)
    if path.name.lower().endswith(".csv"):
        rows = read_csv_rows(path)
        header = [h.strip() for h in rows[0][1]] if rows else []
        if "forward_s" in header or "backward_s" in header:
            return read_profile_csv(path, name=path.stem)
        return read_parameter_csv(path)
    document = read_json_document(path)
    if isinstance(document, Mapping) and "tensors" in document:
        return Profile.read(path)
    if isinstance(document, Mapping):
        return dict(document)
    if isinstance(document, list):
        return [tuple(item) if isinstance(item, list) else item for item in document]
    raise ValueError(f"{path}: expected a profile, a list of [name, bytes] pairs or an object of name: bytes")


def parameters_from_trace(trace: Any) -> list[tuple[str, int]]:
    """The parameter list of a traced model from the trace alone, for traces taken with
    ``record_shapes=True`` and a ``schedule`` (one ``ProfilerStep`` per step): the gradient
    sizes the first step's AccumulateGrad events hold, in forward order (the reverse of the
    order they became ready), named ``param0, param1, ...``.

    Use it when the model's own parameter list is not at hand (a trace someone published);
    its profile then has the reverse of the trace's ready order as its forward order. A
    folder or list of a job's traces gives the lowest rank's list.
    """
    if isinstance(trace, JobTraces) or (not isinstance(trace, (Mapping, _Named))
                                        and (not isinstance(trace, (str, Path)) or Path(trace).is_dir())):
        by_rank = documents_by_rank(trace)
        path, doc = by_rank[min(by_rank)]
        trace = _Named(str(path), doc)
    source, events, _ = _load(trace)
    steps = sorted((e for e in events if e.name.startswith(STEP_PREFIX) and not e.cat.startswith("gpu")),
                   key=lambda e: e.ts)
    if not steps:
        raise ValueError(f"{source}: no ProfilerStep annotations: give the model's parameter list (names and bytes, "
                         "forward order) to read a trace without them")
    acc_name = ACCUMULATE_GRAD if any(e.name == ACCUMULATE_GRAD for e in events) else EVALUATE_FUNCTION + ACCUMULATE_GRAD
    first = steps[0]
    acc = sorted((e for e in events if e.name == acc_name and first.ts <= e.ts < first.end), key=lambda e: e.end)
    if not acc:
        raise ValueError(f"{source}: {first.name} holds no AccumulateGrad event: the trace holds no backward pass")
    sizes = [_gradient_bytes(e) for e in acc]
    if any(size is None for size in sizes):
        raise ValueError(f"{source}: AccumulateGrad events without input shapes: record the trace with "
                         "record_shapes=True, or give the model's parameter list")
    return [(f"param{i}", int(size)) for i, size in enumerate(reversed(sizes))]


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


def describe_ranks(ranks: Sequence[int]) -> str:
    """``"rank 1"``, ``"ranks 1, 3"``.

    >>> describe_ranks([1]), describe_ranks([1, 3])
    ('rank 1', 'ranks 1, 3')
    """
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def profile_from_traces(traces: Any, parameters: Any, **options: Any) -> Profile:
    """One profile from the traces of several ranks of one job: a folder of them, a list of
    files or a :class:`JobTraces`; ``options`` (``ready_order``, ``timeline``, ``name``,
    ``dtype_bytes``, ``forward``, ``statistic``) as for :func:`profile_from_trace`.

    In a folder, the traces are the files named ``*.pt.trace.json`` or ``*.pt.trace.json.gz``
    (as ``tensorboard_trace_handler`` writes one per rank) and any other ``*.json[.gz]``
    holding a ``traceEvents`` list; other files beside them (``parameters.csv``, a profile
    written there) are not traces. Each trace is read by :func:`profile_from_trace`; its
    rank is the trace's own (``distributedInfo.rank``, which torch writes under
    ``torch.distributed``) or else its position in the sorted list (:func:`documents_by_rank`:
    two files of one rank, or ranks that claim different world sizes, are refused). Ranks of
    the world without a trace are named in a warning: the profile is then the others'. The
    profile's ready
    times and forward times are the medians over the ranks, tensor by tensor (medians of
    non-increasing ready times stay non-increasing), and so are its step parts; its ready
    order is the lowest rank's where the medians tie. ``metadata``: ``ranks`` (rank -> file),
    ``steps`` (over all ranks), ``step`` (each part's median over the ranks, the periods of
    every rank's steps) and the per-rank figures of the lowest rank otherwise. With
    ``statistic="mean"`` every median over the ranks is a mean too.
    """
    job = documents_by_rank(traces)
    if job.missing_ranks:
        warnings.warn(f"{describe_ranks(job.missing_ranks)} of a world of {job.world_size} have no trace here: "
                      f"the profile is {describe_ranks(sorted(job))}'s", stacklevel=2)
    by_rank = {rank: (path, profile_from_trace(_Named(str(path), doc), parameters, **options))
               for rank, (path, doc) in job.items()}
    pick = _attribution.STATISTICS[options.get("statistic", "median")]
    ranks = sorted(by_rank)
    first = by_rank[ranks[0]][1]
    ready = pick(np.array([by_rank[r][1].ready_times for r in ranks]), axis=0)
    forward = pick(np.array([by_rank[r][1].forward for r in ranks]), axis=0)
    steps = [by_rank[r][1].metadata["step"] for r in ranks]
    step: dict[str, Any] = {key: float(pick([st[key] for st in steps])) for key in steps[0] if key != "periods"}
    step["periods"] = [t for st in steps for t in st["periods"]]
    metadata = dict(first.metadata)
    metadata.update(source="fusionopt.integrations.kineto.profile_from_traces",
                    ranks={str(r): by_rank[r][0].name for r in ranks},
                    steps=sum(by_rank[r][1].metadata["steps"] for r in ranks), step=step)
    update = pick(np.array([by_rank[r][1].update for r in ranks]), axis=0)
    profile = Profile.from_arrays(first.sizes, forward, _attribution.backward_times(ready), first.names,
                                  update=update, name=first.name, dtype_bytes=first.dtype_bytes, metadata=metadata, dtypes=first.dtypes,
                                  **{part: step[part] for part in STEP_PARTS})
    position = {i: k for k, i in enumerate(first.ready_order)}
    ready_times = profile.ready_times
    return profile.with_orders(ready_order=sorted(range(profile.n),
                                                  key=lambda i: (float(ready_times[i]), position[i])))

