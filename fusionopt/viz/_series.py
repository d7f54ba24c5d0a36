"""What a sweep's plot draws, without matplotlib: :func:`sweep_series`, one line per method."""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any, Iterable, Mapping

import numpy as np



SWEEP_METRICS = ("scaling_efficiency", "throughput", "iteration_time")


# ============================================================================ sweeps
METRIC_LABELS = {          # (axis label, figure title)
    "scaling_efficiency": ("scaling efficiency", "Scaling efficiency (B + F + U) / T against workers"),
    "throughput": ("throughput (one-worker steps)", "Throughput in one worker's steps, P (B + F + U + W) / T, against workers"),
    "iteration_time": ("iteration time T (ms)", "Iteration time T against workers"),
}


_VARIANT_KEYS = ("device", "batch", "precision", "compute", "optimizer", "algorithm", "sync")


def is_error(record: Mapping[str, Any]) -> bool:
    return str(record.get("status", "")).upper() == "ERROR"


def check_metric(metric: str) -> None:
    if metric not in SWEEP_METRICS:
        raise ValueError(f"unknown metric {metric!r}: choose one of {', '.join(repr(m) for m in SWEEP_METRICS)}")


def select_records(records: Iterable[Mapping[str, Any]], model: str | None, network: str | None) -> list[Mapping[str, Any]]:
    records = list(records)
    for r in records:
        if not isinstance(r, Mapping):
            raise ValueError(f"a sweep record is a mapping (dict), got {type(r).__name__}")
        for key in ("model", "network", "method", "workers"):
            if key not in r:
                raise ValueError(f"sweep record without {key!r}: {dict(r)!r}")
    chosen = []
    for key, wanted in (("model", model), ("network", network)):
        if wanted is None:
            continue
        values = sorted({str(r[key]) for r in records})
        if str(wanted) not in values:
            raise ValueError(f"no sweep record has {key} {wanted!r}: the records hold {', '.join(map(repr, values))}")
    for r in records:
        if model is not None and str(r["model"]) != str(model):
            continue
        if network is not None and str(r["network"]) != str(network):
            continue
        chosen.append(r)
    return chosen


def panel_keys(records: list[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The (model, network) pairs in order of first appearance."""
    return list(dict.fromkeys((str(r["model"]), str(r["network"])) for r in records))


def sweep_series(records: Iterable[Mapping[str, Any]], metric: str = "scaling_efficiency", *,
                 model: str | None = None, network: str | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One line per method of a sweep: the workers and the metric's values.

    Parameters
    ----------
    records : iterable of dict
        Rows of a sweep (``fusionopt.sweep.read_results``), each with at least ``model``,
        ``network``, ``method``, ``workers``, ``status`` and the metric. Records with status
        ``"ERROR"`` carry no numbers and are skipped.
    metric : {"scaling_efficiency", "throughput", "iteration_time"}
        The value drawn: ``(B + F + U) / T`` (a fraction), the throughput in one worker's steps
        ``P (B + F + U) / T``, or ``T`` in seconds.
    model, network : str, optional
        Keep only the records of this model and network. Without them, the records must
        hold a single model and a single network (``ValueError`` lists the choices).

    Returns
    -------
    dict
        ``{label: (workers, values)}``, labels in order of first appearance, workers
        ascending (int), values as float. The label is the method; when the records differ
        in ``device``, ``batch``, ``precision``, ``compute``, ``optimizer``, ``algorithm`` or
        ``sync``, those values follow it in parentheses, so that every line is one setting.

    Examples
    --------
    >>> records = [
    ...     {"model": "resnet50", "network": "10gbe", "method": "dp", "workers": 8, "status": "OPTIMAL",
    ...      "scaling_efficiency": 0.9},
    ...     {"model": "resnet50", "network": "10gbe", "method": "dp", "workers": 4, "status": "OPTIMAL",
    ...      "scaling_efficiency": 0.95},
    ...     {"model": "resnet50", "network": "10gbe", "method": "wfbp", "workers": 4, "status": "ERROR",
    ...      "scaling_efficiency": None},
    ... ]
    >>> {k: (w.tolist(), v.tolist()) for k, (w, v) in sweep_series(records).items()}
    {'dp': ([4, 8], [0.95, 0.9])}
    >>> sweep_series(records + [dict(records[0], model="vgg16")])
    Traceback (most recent call last):
    ...
    ValueError: the records hold 2 models: 'resnet50', 'vgg16'; choose one with model=
    """
    check_metric(metric)
    chosen = select_records(records, model, network)
    for key in ("model", "network"):
        values = list(dict.fromkeys(str(r[key]) for r in chosen))
        if len(values) > 1:
            raise ValueError(f"the records hold {len(values)} {key}s: {', '.join(map(repr, values))}; "
                             f"choose one with {key}=")
    return method_series(chosen, metric)


def method_series(records: list[Mapping[str, Any]], metric: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    valid = [r for r in records if not is_error(r)]
    varying = [k for k in _VARIANT_KEYS if len({str(r.get(k)) for r in valid}) > 1]
    points: dict[str, dict[int, float]] = {}
    for r in valid:
        label = str(r["method"])
        if varying:
            label += " (" + ", ".join(f"{k} {r.get(k)}" for k in varying) + ")"
        workers = r["workers"]
        if isinstance(workers, bool) or not isinstance(workers, Integral) or workers < 1:
            raise ValueError(f"sweep record of {r['method']!r}: workers must be an integer >= 1, got {workers!r}")
        workers = int(workers)
        # Records of older sweeps called the throughput "speedup".
        value = r.get(metric) if metric != "throughput" or "throughput" in r else r.get("speedup")
        if isinstance(value, bool) or not isinstance(value, Real) or not 0 <= value < math.inf:
            raise ValueError(f"sweep record of {r['method']!r} at {workers} workers (status "
                             f"{r.get('status')!r}): {metric} is {value!r}, not a number >= 0")
        value = float(value)
        line = points.setdefault(label, {})
        if workers in line:
            raise ValueError(f"two sweep records of {label!r} at {workers} workers ({r['model']}, {r['network']}): "
                             "the records differ in a field other than model, network, device, batch, "
                             "precision, compute, optimizer, algorithm and sync")
        line[workers] = value
    out = {}
    for label, line in points.items():
        workers = np.array(sorted(line), dtype=np.int64)
        out[label] = (workers, np.array([line[w] for w in workers.tolist()], dtype=np.float64))
    return out


__all__ = ["SWEEP_METRICS", "sweep_series"]
