"""All-reduce costs read from PyTorch profiler traces of a data-parallel job (no torch needed).

torch records each collective a process group runs as a host annotation named after the
backend and the collective, ``gloo:all_reduce`` or ``nccl:all_reduce``, whose first input's
shape and type give the message size. A kernel's or an annotation's duration includes the
time the rank waited for its peers, so it overstates the collective's cost (an 8 MB
all-reduce can take longer than a 31 MB one that found every rank ready). Hence:

* **Traces of several ranks** (one file per rank, as :func:`collective_samples` takes them):
  the ``j``-th all-reduce of a given size on every rank is one collective (a backend may run
  two on two threads, in either order). It cannot
  start before the last rank has entered it, so its cost is from the latest entry to the
  latest exit. The ranks' clocks must agree (one host, or synchronised hosts).
* **One rank**: its durations, each an upper bound on the cost; the fit keeps their lower
  envelope (the fastest repeat of each size). A job of one rank (``world_size`` 1) moves no
  data between ranks: its all-reduces' times are local overhead, not communication, and
  :func:`collective_samples` says so in a warning (a cost fitted to them has ``beta`` 0
  or close to it).
* **Collectives in flight together** (gloo runs two at once, on two threads) share the
  link: every instant is divided equally among the collectives holding it
  (:func:`shared_seconds`), so a sample is the time the collective would have held the link
  alone, and one channel running them back to back is busy as long as the job's was.

:func:`fit_collective_cost` fits ``AlphaBeta`` (least squares over the lower envelope, with
``alpha, beta >= 0``) and a ``PiecewiseLinear`` through that envelope, and reports each
fit's residuals. :func:`recorded_buckets` reads which gradients each all-reduce of a DDP
step carried, from the order and sizes in which the job launched them.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from fusionopt.integrations._kineto_events import ALLREDUCE_NAMES, documents_by_rank, ELEMENT_BYTES
from fusionopt.model._cost import AlphaBeta, PiecewiseLinear
from fusionopt.model._profile import Profile

# The dispatcher's all-reduce op, on the launching thread in launch order (its first input
# is the list of tensors reduced).
LAUNCH_OP = "c10d::allreduce_"



def _allreduces(doc: Any, source: str) -> list[tuple[int, float, float]]:
    """``(bytes, start, end)`` of each all-reduce annotation, host side, in time order (us)."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise ValueError(f"{source}: not a chrome trace: expected an object with a 'traceEvents' list")
    found = []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X" or e.get("name") not in ALLREDUCE_NAMES:
            continue
        if str(e.get("cat", "")).lower().startswith("gpu"):
            continue
        args = e.get("args") or {}
        dims, types = args.get("Input Dims"), args.get("Input type")
        if not (isinstance(dims, list) and dims and isinstance(dims[0], list) and isinstance(types, list) and types):
            raise ValueError(f"{source}: {e['name']} at {e.get('ts')} us has no input shape: "
                             "record the trace with record_shapes=True")
        element = ELEMENT_BYTES.get(types[0])
        if element is None:
            raise ValueError(f"{source}: {e['name']} at {e.get('ts')} us: unknown element type {types[0]!r}")
        found.append((math.prod(int(d) for d in dims[0]) * element, float(e["ts"]), float(e["ts"]) + float(e["dur"])))
    found.sort(key=lambda x: x[1])
    return found


def collective_samples(traces: Any) -> tuple[np.ndarray, np.ndarray, str]:
    """``(bytes, seconds, how)`` of every all-reduce in the traces of one job: a trace, a
    folder of them, a list of files or a :class:`~fusionopt.integrations._kineto_events.JobTraces`
    (module docstring). ``how`` is ``"ranks"`` (latest entry to latest exit over the ranks)
    or ``"one rank"`` (durations). A job whose world is one rank is named in a warning."""
    job = documents_by_rank(traces)
    by_rank = {rank: (path, _allreduces(doc, str(path))) for rank, (path, doc) in job.items()}
    ranks = sorted(by_rank)
    counts = {r: len(by_rank[r][1]) for r in ranks}
    if not any(counts.values()):
        raise ValueError(f"{by_rank[ranks[0]][0]}: no all-reduce annotations ({', '.join(ALLREDUCE_NAMES)}) in the trace")
    if job.world_size == 1:
        warnings.warn(f"{by_rank[ranks[0]][0]}: a job of one rank (world size 1): its all-reduces move no data "
                      "between ranks, so their times are local overhead, not communication", stacklevel=2)
    if len(ranks) == 1:
        calls = by_rank[ranks[0]][1]
        return (np.array([c[0] for c in calls], dtype=np.float64),
                shared_seconds([(c[1], c[2]) for c in calls]) / 1e6, "one rank")
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"rank {r}: {counts[r]}" for r in ranks)
        raise ValueError(f"the ranks' traces hold different numbers of all-reduces ({listed}): "
                         "trace the same steps on every rank")
    # The j-th all-reduce of a size on one rank is the j-th of that size on every rank (a
    # backend may run two of them on two threads, in either order).
    per_size = [{} for _ in ranks]
    for slot, r in enumerate(ranks):
        for call in by_rank[r][1]:
            per_size[slot].setdefault(call[0], []).append(call)
    for size in per_size[0]:
        numbers = [len(calls.get(size, [])) for calls in per_size]
        if len(set(numbers)) > 1:
            raise ValueError(f"the ranks disagree on the all-reduces of {size} bytes "
                             f"({', '.join(f'rank {r}: {k}' for r, k in zip(ranks, numbers))})")
    matched = sorted((min(c[1] for c in group), size, group)
                     for size in per_size[0]
                     for group in zip(*(calls[size] for calls in per_size)))
    sizes = [size for _, size, _ in matched]
    spans = [(max(c[1] for c in group), max(c[2] for c in group)) for _, _, group in matched]
    return np.array(sizes, dtype=np.float64), shared_seconds(spans) / 1e6, "ranks"


def shared_seconds(spans: Sequence[tuple[float, float]]) -> np.ndarray:
    """Each interval's length with every instant divided equally among the intervals that
    hold it: the time each collective held the link alone, when collectives in flight
    together share it (processor sharing). Units as given; an empty interval gives 0.

    >>> shared_seconds([(0, 4), (2, 6), (10, 11)]).tolist()     # 2 + 2/2, 2/2 + 2, alone
    [3.0, 3.0, 1.0]
    """
    points = sorted({t for span in spans for t in span})
    out = np.zeros(len(spans))
    for lo, hi in zip(points, points[1:]):
        holding = [k for k, (a, b) in enumerate(spans) if a <= lo and hi <= b]
        for k in holding:
            out[k] += (hi - lo) / len(holding)
    return out


@dataclass(frozen=True)
class CollectiveFit:
    """Costs fitted to measured all-reduces: ``affine`` (``AlphaBeta``) and ``curve``
    (``PiecewiseLinear`` through the lower envelope), with their residuals in seconds at the
    envelope's points (measured minus model) and the envelope itself."""

    affine: AlphaBeta
    curve: PiecewiseLinear
    sizes: np.ndarray
    seconds: np.ndarray
    affine_residuals: np.ndarray
    curve_residuals: np.ndarray


def fit_collective_cost(sizes: Sequence[float], seconds: Sequence[float], *,
                        statistic: str = "min") -> CollectiveFit:
    """Fit the lower envelope of ``(bytes, seconds)`` samples (the fastest of each size), or
    with ``statistic="median"`` or ``"mean"`` the median or mean of each size.

    >>> fit = fit_collective_cost([1e6, 1e6, 2e6, 4e6], [3e-3, 2e-3, 3e-3, 5e-3])
    >>> round(fit.affine.alpha * 1e3, 9), round(fit.affine.beta * 1e9, 9)
    (1.0, 1.0)
    >>> fit.sizes.tolist(), (fit.affine_residuals * 1e3).round(9).tolist()
    ([1000000.0, 2000000.0, 4000000.0], [0.0, 0.0, 0.0])
    >>> (fit_collective_cost([1e6, 1e6, 1e6], [1e-3, 5e-3, 2e-3], statistic="median").seconds * 1e3).tolist()
    [2.0]
    """
    sizes = np.asarray(sizes, dtype=np.float64)
    seconds = np.asarray(seconds, dtype=np.float64)
    if sizes.shape != seconds.shape or sizes.ndim != 1 or sizes.size == 0:
        raise ValueError("give as many sizes as times, at least one")
    if (sizes <= 0).any() or not np.isfinite(sizes).all() or (seconds < 0).any() or not np.isfinite(seconds).all():
        raise ValueError("sizes must be positive bytes and times finite seconds >= 0")
    picks = {"min": min, "median": lambda ts: float(np.median(ts)), "mean": lambda ts: float(np.mean(ts))}
    if statistic not in picks:
        raise ValueError(f"unknown statistic {statistic!r}: choose 'min', 'median' or 'mean'")
    repeats: dict[float, list[float]] = {}
    for s, t in zip(sizes.tolist(), seconds.tolist()):
        repeats.setdefault(s, []).append(t)
    pick = picks[statistic]
    envelope = {s: pick(ts) for s, ts in repeats.items()}
    xs = np.array(sorted(envelope))
    ys = np.array([envelope[x] for x in xs])
    if xs.size == 1:
        alpha, beta = 0.0, float(ys[0] / xs[0])
    else:
        beta, alpha = np.polyfit(xs, ys, 1)
        if alpha < 0:                                  # through the origin instead
            alpha, beta = 0.0, float(xs @ ys / (xs @ xs))
        if beta < 0:                                   # a flat cost
            alpha, beta = float(ys.mean()), 0.0
    affine = AlphaBeta(float(alpha), float(beta))
    curve = PiecewiseLinear(xs, ys, repair=True)
    return CollectiveFit(affine, curve, xs, ys, ys - np.asarray(affine(xs)), ys - np.asarray(curve(xs)))


def _launched_counts(doc: Any, source: str) -> list[int]:
    """Elements of each all-reduce the rank launched, in launch order: the dispatcher's
    ``c10d::allreduce_`` ops, else the backend's annotations by start."""
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise ValueError(f"{source}: not a chrome trace: expected an object with a 'traceEvents' list")
    launches, annotated = [], []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X" or str(e.get("cat", "")).lower().startswith("gpu"):
            continue
        dims = (e.get("args") or {}).get("Input Dims")
        if e.get("name") == LAUNCH_OP and isinstance(dims, list) and dims and isinstance(dims[0], list):
            tensors = dims[0]
            if tensors and all(isinstance(t, list) for t in tensors):
                launches.append((float(e["ts"]), sum(math.prod(int(d) for d in t) for t in tensors)))
        elif e.get("name") in ALLREDUCE_NAMES and isinstance(dims, list) and dims and isinstance(dims[0], list):
            annotated.append((float(e["ts"]), math.prod(int(d) for d in dims[0])))
    chosen = launches or annotated
    if not chosen:
        raise ValueError(f"{source}: no all-reduce with its input shape ({LAUNCH_OP} or "
                         f"{', '.join(ALLREDUCE_NAMES)}): record the trace with record_shapes=True")
    return [count for _, count in sorted(chosen)]


def recorded_buckets(traces: Any, profile: Profile) -> list[list[int]]:
    """The buckets of the last complete step a DDP job traced, as groups of forward indices in
    launch order (a :meth:`~fusionopt.model.Plan.from_groups` input).

    The lowest rank's all-reduces, in launch order, are cut into steps of the profile's total
    element count; each one's element count must then close a run of the profile's ready
    order (DDP fills its buckets, after its rebuild, in the order the gradients became
    ready, and launches them in that order). The last complete step is taken: DDP's first
    step runs its initial, registration-order buckets.

    >>> import json, pathlib, tempfile
    >>> launch = lambda ts, n: {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "ts": ts, "dur": 1,
    ...                         "args": {"Input Dims": [[[n]], [], []]}}
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "rank0.json").write_text(json.dumps({"traceEvents": [launch(0, 8), launch(9, 4), launch(10, 4)]}))
    >>> profile = Profile.from_arrays([8, 8, 16], [0.0] * 3, [1e-3] * 3)     # 2, 2 and 4 floats
    >>> recorded_buckets(folder, profile)          # step 1: one bucket; step 2: {t2}, {t1, t0}
    [[2], [1, 0]]
    """
    by_rank = documents_by_rank(traces)
    rank = min(by_rank)
    path, doc = by_rank[rank]
    counts = _launched_counts(doc, str(path))
    elements = (profile.sizes // profile.element_bytes).astype(np.int64)
    total = int(elements.sum())
    steps: list[list[int]] = [[]]
    filled = 0
    for count in counts:
        steps[-1].append(count)
        filled += count
        if filled == total:
            steps.append([])
            filled = 0
        elif filled > total:
            raise ValueError(f"{path}: the all-reduces do not add up to the profile's {total} gradient elements "
                             f"per step (a step's run reaches {filled}): is the profile this job's model?")
    complete = [step for step in steps if step and sum(step) == total]
    if not complete:
        raise ValueError(f"{path}: no complete step of all-reduces ({sum(counts)} elements traced, "
                         f"{total} per step)")
    groups: list[list[int]] = []
    order = [int(i) for i in profile.backward_order]
    k = 0
    for number, count in enumerate(complete[-1]):
        group, held = [], 0
        while held < count and k < len(order):
            group.append(order[k])
            held += int(elements[order[k]])
            k += 1
        if held != count:
            raise ValueError(f"{path}: all-reduce {number} of the last step holds {count} elements, which does not "
                             "close a run of the profile's ready order: the buckets do not follow it")
        groups.append(group)
    return groups
