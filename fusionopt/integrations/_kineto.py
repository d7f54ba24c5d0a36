"""Read a :class:`~fusionopt.model.Profile` from a PyTorch profiler (Kineto) trace.

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
    device time; never below 0."""

from __future__ import annotations

import bisect
import math
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from fusionopt.integrations import _attribution
from fusionopt.integrations._kineto_events import (
    Event, GpuClock, Named, backward_windows, first_names, innermost, load_trace, outside_of, summed_up, top_level,
    total_length, union_of,
)
from fusionopt.integrations._kineto_parameters import (
    checked_parameter_list, gradient_bytes, match_sizes, ready_positions,
)
from fusionopt.integrations._kineto_events import (
    ACCUMULATE_GRAD, ALLREDUCE_NAMES, DEVICE_CATEGORIES, EVALUATE_FUNCTION, GPU_BOUND, LAUNCH_CATEGORIES,
    MODULE_PREFIX, OPERATOR_CATEGORIES, OPTIMIZER_PREFIXES, POST_BACKWARD_OPS, STEP_PREFIX, TIMELINES, TRACE_DTYPES,
)
from fusionopt.model._profile import DTYPE_BYTES, STEP_PARTS, Profile




def _step_parts(inside: list[Event], window: tuple[float, float], forward_start: float, backward_start: float,
                backward: float, gpu: "GpuClock | None") -> dict[str, float]:
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
        post_backward = total_length(copy_work)
        post_end = max([anchor] + [end for _, end in copy_work])
        update_lump = total_length([iv for e in optimizer for iv in gpu.intervals(e.ts, e.end, e.tid)])
    else:
        # A copy that runs while a collective is in flight waits for it (or competes with it
        # for the host): that share is communication, the rest is the copy.
        anchor = w_start if any(e.end <= backward_start for e in copies) else backward_end
        collectives = union_of([(e.ts, e.end) for e in inside if e.name in ALLREDUCE_NAMES])
        copies = [e for e in copies if e.end > anchor]
        post_backward = sum(outside_of((max(e.ts, anchor), e.end), collectives) for e in copies)
        post_end = max([anchor] + [e.end for e in copies])
        update_lump = total_length([(e.ts, e.end) for e in optimizer])
    period = w_end - w_start
    forward = backward_start - forward_start
    exposed = max(0.0, post_end - anchor - post_backward)
    host = max(0.0, period - forward - backward - (post_end - anchor) - update_lump)
    return {"period": period, "forward": forward, "backward": backward, "exposed": exposed,
            "post_backward": post_backward, "update_lump": update_lump, "host_overhead": host}


def _update_per_tensor(inside: list[Event], sizes: list[int]) -> np.ndarray | None:
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
    ops = top_level([e for e in inside if e.tid == step.tid and e.cat in OPERATOR_CATEGORIES
                      and step.ts <= e.ts and e.end <= step.end])
    n = len(sizes)
    if not ops or len(ops) % n:
        return None
    per = len(ops) // n
    runs = [ops[k * per:(k + 1) * per] for k in range(n)]
    if any(gradient_bytes(e) != sizes[k] for k, run in enumerate(runs) for e in run):
        return None
    starts = [run[0].ts for run in runs] + [step.end]
    return np.diff(np.array(starts))


# A thread launching fewer than this share of its typical step's kernels in a step lost some
# (a training loop launches alike in every step).
SHORT_STEP = 0.75


def _missing_gpu_work(events: list[Event], windows: list[tuple[str, float, float]], source: str) -> None:
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
                             f"steps show ({first_names(names, lost)}): part of the step is not in the trace (a "
                             "trace cut off?)")
    unmatched = sorted(set(range(len(names))) - seen)
    if unmatched:
        warnings.warn(f"{source}: no forward operator found for {len(unmatched)} of {len(names)} parameters "
                      f"({first_names(names, unmatched)}): their forward time is 0", stacklevel=3)
    return [names[i] for i in unmatched]


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
    names, sizes, carried = checked_parameter_list(parameters)
    n = len(names)
    given = ready_order if ready_order is not None else carried
    positions = ready_positions(names, given)
    first_positions: list[int] | None = None
    source, events, header = load_trace(trace)

    acc_name = ACCUMULATE_GRAD
    if not any(e.name == acc_name for e in events):
        acc_name = EVALUATE_FUNCTION + ACCUMULATE_GRAD
        if not any(e.name == acc_name for e in events):
            raise ValueError(
                f"{source}: no AccumulateGrad events: the trace holds no backward pass "
                "(profile the training step, loss.backward() included, with ProfilerActivity.CPU)"
            )
    gpu = GpuClock(events)
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
        windows = backward_windows(events, acc_name, n, source)
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

        recorded = [gradient_bytes(e) for e in acc]
        step_positions = positions if given is not None else match_sizes(recorded, positions, sizes)
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
        producers: dict[Any, list[Event]] = {}
        for e in evaluations:
            if e.seq is not None and ACCUMULATE_GRAD not in e.name:
                producers.setdefault(e.tid, []).append(e)
        for tid in producers:
            producers[tid].sort(key=lambda e: e.end)
        producer_ends = {tid: [e.end for e in evs] for tid, evs in producers.items()}
        made_by: list[Event | None] = []
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
        first_with_seq: dict[int, Event] = {}
        for e in forward_ops:
            if e.seq is not None and (e.seq not in first_with_seq or e.dur > first_with_seq[e.seq].dur):
                first_with_seq[e.seq] = e
        modules = [e for e in inside if e.ts < backward_start and e.name.startswith(MODULE_PREFIX)]
        units_kind = "nn.Module events" if modules else "outermost operators"
        tops = None if modules else top_level(forward_ops)

        unit_of: dict[int, Event] = {}
        for k, e in enumerate(acc):
            i = step_positions[k]
            use = first_with_seq.get(made_by[k].seq) if made_by[k] is not None else None
            unit = None
            if use is not None:
                unit = innermost(modules, use.tid, use.ts) if modules else innermost(tops, use.tid, use.ts)
            if unit is not None:
                unit_of[i] = unit
        found_rows.append((label, set(unit_of)))
        units: list[Event] = []
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
    step = summed_up(parts_rows, statistic)
    metadata: dict[str, Any] = {
        "source": "fusionopt.integrations.profile_from_trace",
        "trace": Path(source).name if isinstance(trace, (str, Path, Named)) else "dict",
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


__all__ = ["profile_from_trace"]
