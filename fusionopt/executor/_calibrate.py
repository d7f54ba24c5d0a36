"""Calibration: time one message against its size on a backend, fit the cost models.

The sweep is nccl-tests style: sizes double from ``min_bytes`` to ``max_bytes``; at each,
every rank runs a few warm-up messages, then ``reps`` messages back to back, and reports
its mean time per message; this is repeated in ``TRIALS`` trials after a barrier each. The
size's time is the median over the trials of the slowest rank's mean. An all-reduce message
is timed as the plan runner sends it (pack a buffer into the fused buffer, all-reduce it in
place, unpack it), so the fitted ``c(S)`` prices exactly what a plan's message costs on the
backend. ``collective="reduce_scatter"`` or ``"all_gather"`` times that collective instead,
``S`` its unsharded size (MODEL.md section 8: what ``Decoupled`` and ``FullySharded`` price):
each size is rounded down to a whole number of 8-byte words per rank. A reduce-scatter is
timed with the packing of its buffer, as the sharded runner sends one; an all-gather lands
where it is used (a fully sharded run's gather store), so nothing is unpacked after it (a
decoupled run copies its gathered words into the parameters, outside this ``c(S)``; the run
reports its copies apart, :class:`~fusionopt.executor.Measurement`).

With ``encoding`` (fp16 or bf16; all-reduce only) each message travels in it as a plan's
message does (:mod:`fusionopt.executor._layout`): packed narrowed to the encoding's share of
each word, all-reduced, widened as it is unpacked. :func:`fit_casts` then prices the encoding
on this backend: what such a message costs beyond an fp32 one of the bytes it sends.

Two models are fitted (MODEL.md section 2): :class:`~fusionopt.cost.AlphaBeta` by
least squares on relative residuals with ``alpha, beta >= 0``, and
:class:`~fusionopt.cost.PiecewiseLinear` through the measured points (repaired to be
non-decreasing). :meth:`Calibration.write` stores either as a cost JSON that ``Problem``
and ``fusionopt ... --cost COST.json`` read, with the sweep and both fits under
``"calibration"``.
"""

from __future__ import annotations

import datetime
import math
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from fusionopt.executor._communicator import Communicator, check_backend
from fusionopt.executor._job import _positive_float
from fusionopt.executor._layout import check_wire_ratio, wire_dtype
from fusionopt.model._encoding import FP32, Encoded, Encoding, encoding_named
from fusionopt.model._io import write_json_atomic
from fusionopt.model._cost import AlphaBeta, CommCost, PiecewiseLinear, check_count

CALIBRATION_SCHEMA = "fusionopt.executor.calibration-job"
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")
MESSAGES = {"all_reduce": "pack + all-reduce (sum, in place) + unpack; slowest rank's mean",
            "reduce_scatter": "pack + reduce-scatter of S bytes (each rank keeps S/P); slowest rank's mean",
            "all_gather": "all-gather to S bytes (each rank gives S/P); slowest rank's mean"}
# Back-to-back batches per size; the median batch is kept (robust to a noisy neighbour).
TRIALS = 5
COST_MODELS = ("piecewise", "alpha-beta")


@dataclass(frozen=True)
class SweepSpec:
    """The sizes and repetitions of a sweep (every rank runs the same)."""

    sizes: tuple[int, ...]
    warmup: int = 2
    iterations: int = 20
    seconds_per_size: float = 0.2
    timeout: float = 60.0
    collective: str = "all_reduce"
    wire_ratio: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"schema": CALIBRATION_SCHEMA, "version": 1, "sizes": list(self.sizes), "warmup": self.warmup,
                "iterations": self.iterations, "seconds_per_size": self.seconds_per_size,
                "timeout": self.timeout, "collective": self.collective, "wire_ratio": self.wire_ratio}


def sweep_spec_from_dict(doc: Mapping[str, Any]) -> SweepSpec:
    return SweepSpec(tuple(int(s) for s in doc["sizes"]), int(doc["warmup"]), int(doc["iterations"]),
                     float(doc["seconds_per_size"]), float(doc["timeout"]), str(doc.get("collective", "all_reduce")),
                     float(doc.get("wire_ratio", 1.0)))


def default_sizes(min_bytes: int = 256, max_bytes: int = 64 << 20) -> tuple[int, ...]:
    """Powers of two from ``min_bytes`` to ``max_bytes`` (both rounded to multiples of 8).

    >>> default_sizes(1000, 5000)
    (1000, 2000, 4000, 5000)
    """
    for label, value in (("min_bytes", min_bytes), ("max_bytes", max_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 8:
            raise ValueError(f"{label} must be an integer >= 8, got {value!r}")
    if max_bytes < min_bytes:
        raise ValueError(f"max_bytes ({max_bytes}) is below min_bytes ({min_bytes})")
    sizes, size = [], min_bytes
    while size < max_bytes:
        sizes.append(size - size % 8)
        size *= 2
    sizes.append(max_bytes - max_bytes % 8)
    return tuple(dict.fromkeys(sizes))


def time_message(comm: Communicator, source: Any, fused: Any, timeout: float, collective: str = "all_reduce") -> None:
    """One message of ``source``'s words (the unsharded size for the sharded collectives)."""
    words = source.shape[0]
    if collective == "all_reduce":
        fused[:words] = source
        comm.allreduce(fused[:words], timeout=timeout)
        source[:] = fused[:words]
    elif collective == "reduce_scatter":
        fused[:words] = source
        comm.reduce_scatter(fused[:words], source[:words // comm.size], timeout=timeout)
    else:
        comm.all_gather(fused[:words // comm.size], source, timeout=timeout)
    comm.synchronize(timeout=timeout)


def sweep_rank(comm: Communicator, spec: SweepSpec) -> dict[str, Any]:
    """This rank's mean seconds per message at each size of ``spec``, one per trial (every rank
    calls it)."""
    comm.bind_thread()
    dtype = np.dtype(np.uint64)
    largest = max(spec.sizes) // 8
    # An encoded message is packed narrowed into the fused buffer and widened back out of it.
    source, fused = comm.empty(largest, dtype), comm.empty(largest, wire_dtype(8, spec.wire_ratio))
    source[...] = 0
    times = []
    for size in spec.sizes:
        words = size // 8
        view = source[:words]
        comm.barrier(timeout=spec.timeout)
        timer = comm.step_timer()
        for _ in range(max(1, spec.warmup)):
            time_message(comm, view, fused, spec.timeout, spec.collective)
        estimate = timer.seconds(timer.mark()) / max(1, spec.warmup)
        # Every rank must run the same number of messages: agree on the slowest estimate.
        estimate = max(comm.allgather(estimate, timeout=spec.timeout))
        reps = int(min(spec.iterations, max(3, spec.seconds_per_size / TRIALS / max(estimate, 1e-9))))
        trials = []
        for _ in range(TRIALS):
            comm.barrier(timeout=spec.timeout)
            timer = comm.step_timer()
            for _ in range(reps):
                time_message(comm, view, fused, spec.timeout, spec.collective)
            trials.append(timer.seconds(timer.mark()) / reps)
        times.append(trials)
    return {"rank": comm.rank, "sizes": list(spec.sizes), "times": times}


def measured_points(sizes: Any, times: Any) -> tuple[np.ndarray, np.ndarray]:
    """Message sizes (bytes) and their times (seconds) as float arrays: two lists of one
    length, each entry a finite number > 0 (a fit of relative residuals divides by the times)."""
    try:
        s = np.asarray(sizes, dtype=np.float64)
        t = np.asarray(times, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"sizes and times must be lists of numbers, got {sizes!r} and {times!r}") from None
    if s.ndim != 1 or s.shape != t.shape:
        raise ValueError(f"sizes and times must be two lists of one length, got shapes {s.shape} and {t.shape}")
    for label, values, unit in (("size", s, "B"), ("time", t, "s")):
        bad = np.flatnonzero(~(np.isfinite(values) & (values > 0)))
        if bad.size:
            raise ValueError(f"point {bad[0]}: {label} {values[bad[0]]:g} {unit} must be a finite number > 0")
    return s, t


def fit_alpha_beta(sizes: Sequence[float], times: Sequence[float]) -> AlphaBeta:
    """``alpha + beta S`` minimising the squared relative residuals, ``alpha, beta >= 0``.

    >>> fit = fit_alpha_beta([1e3, 1e4, 1e5], [2e-5, 2.9e-5, 1.19e-4])
    >>> round(fit.alpha * 1e6, 6), round(fit.beta * 1e9, 6)
    (19.0, 1.0)
    """
    from scipy.optimize import nnls

    s, t = measured_points(sizes, times)
    if s.size < 2:
        raise ValueError("fitting alpha and beta needs at least two sizes")
    system = np.column_stack([np.ones_like(s), s]) / t[:, None]
    (alpha, beta), _ = nnls(system, np.ones_like(t))
    return AlphaBeta(float(alpha), float(beta))


@dataclass(frozen=True, eq=False)
class Calibration:
    """A sweep's points and the two fitted cost models.

    Attributes
    ----------
    sizes : ndarray
        Message sizes in bytes.
    times : ndarray
        Seconds per message at each size (the slowest rank's mean).
    alpha_beta : AlphaBeta
    piecewise : PiecewiseLinear
    """

    backend: str
    ranks: int
    description: str
    sizes: np.ndarray
    times: np.ndarray
    alpha_beta: AlphaBeta
    piecewise: PiecewiseLinear
    date: str = ""
    collective: str = "all_reduce"
    encoding: str = "fp32"

    def cost(self, model: str = "piecewise") -> CommCost:
        """The fitted model called ``model`` (``"piecewise"`` or ``"alpha-beta"``)."""
        if model not in COST_MODELS:
            raise ValueError(f"unknown cost model {model!r}; choose one of {', '.join(COST_MODELS)}")
        return self.piecewise if model == "piecewise" else self.alpha_beta

    def to_dict(self, model: str = "piecewise") -> dict[str, Any]:
        """The cost JSON of ``model``, with the sweep and both fits under ``"calibration"``."""
        doc = self.cost(model).to_dict()
        doc["calibration"] = {
            "backend": self.backend, "ranks": self.ranks, "description": self.description,
            "date": self.date, "model": model, "collective": self.collective,
            "message": MESSAGES[self.collective] + ("" if self.encoding == "fp32" else
                                                    f"; packed narrowed to {self.encoding}, unpacked widened"),
            "encoding": self.encoding,
            "points": [[int(s), float(t)] for s, t in zip(self.sizes, self.times)],
            "alpha_beta": {"alpha": self.alpha_beta.alpha, "beta": self.alpha_beta.beta},
        }
        return doc

    def write(self, path: str | Path, model: str = "piecewise") -> None:
        """Write :meth:`to_dict` to ``path`` atomically."""
        write_json_atomic(path, self.to_dict(model))

    def table(self) -> str:
        """The sweep as a table, with each fit's relative residual."""
        ab, pl = self.alpha_beta(self.sizes), self.piecewise(self.sizes)
        lines = [f"{'bytes':>12}  {'time (us)':>11}  {'algbw (GB/s)':>12}  {'alpha-beta':>10}  {'piecewise':>9}"]
        for s, t, a, p in zip(self.sizes, self.times, ab, pl):
            lines.append(f"{int(s):>12d}  {1e6 * t:>11.2f}  {s / t / 1e9:>12.3f}  {100 * (a - t) / t:>+9.1f}%  "
                         f"{100 * (p - t) / t:>+8.1f}%")
        lines.append(f"alpha-beta fit: alpha = {1e6 * self.alpha_beta.alpha:.3f} us, "
                     f"beta = {1e9 * self.alpha_beta.beta:.4f} ns/B "
                     f"({1 / self.alpha_beta.beta / 1e9 if self.alpha_beta.beta else math.inf:.3f} GB/s)")
        return "\n".join(lines)


def fit_casts(fp32: CommCost, encoded: Calibration) -> Encoding:
    """The encoding ``encoded`` was timed in, with its casts priced on this backend: the
    ``seconds_per_message + seconds_per_byte S`` (both at least 0) that best add up, with
    ``fp32`` at the bytes it sends, to the encoded sweep's times, in squared seconds (the
    casts matter where messages are large, and a small message's time is mostly noise
    beside them). Then ``Encoded(fp32, fit)`` prices an encoded message of ``S`` fp32 bytes
    as ``fp32(wire_ratio S)`` plus those casts.

    >>> from fusionopt.cost import AlphaBeta
    >>> link = AlphaBeta(20e-6, 1e-9)
    >>> sizes = np.array([1e4, 1e5, 1e6])
    >>> timed = Calibration("local", 2, "", sizes, link(sizes / 2) + 5e-6 + 0.25e-9 * sizes,
    ...                     link, link, encoding="fp16")
    >>> fit = fit_casts(link, timed)
    >>> fit.name, round(fit.seconds_per_message * 1e6, 6), round(fit.seconds_per_byte * 1e9, 6)
    ('fp16', 5.0, 0.25)
    """
    from scipy.optimize import nnls

    if encoded.encoding == "fp32":
        raise ValueError("fit_casts needs a sweep timed in an encoding (calibrate(..., encoding='fp16'))")
    encoding = encoding_named(encoded.encoding)             # the preset: its casts at 0
    sizes = np.asarray(encoded.sizes, dtype=np.float64)
    times = np.asarray(encoded.times, dtype=np.float64)
    extra = times - np.asarray(Encoded(fp32, encoding)(sizes), dtype=np.float64)      # fp32 of the bytes sent
    scale = float(sizes.max())          # both columns of order 1
    (per_message, per_byte), _ = nnls(np.column_stack([np.ones_like(sizes), sizes / scale]), extra)
    per_byte /= scale
    return encoding.with_costs(seconds_per_message=float(per_message), seconds_per_byte=float(per_byte))


def from_records(backend: str, records: Sequence[Mapping[str, Any]], description: str,
                 collective: str = "all_reduce", encoding: str = "fp32") -> Calibration:
    """Combine every rank's sweep record into a :class:`Calibration`."""
    sizes = np.array(records[0]["sizes"], dtype=np.float64)
    per_rank = np.array([r["times"] for r in records], dtype=np.float64)   # (ranks, sizes[, trials])
    slowest = per_rank.max(axis=0)
    times = np.median(slowest, axis=1) if slowest.ndim == 2 else slowest
    return Calibration(
        backend=backend, ranks=len(records), description=description, sizes=sizes, times=times,
        alpha_beta=fit_alpha_beta(sizes, times), piecewise=PiecewiseLinear(sizes, times, repair=True),
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), collective=collective,
        encoding=encoding,
    )


def calibrate(backend: str = "local", *, ranks: int = 2, sizes: Sequence[int] | None = None,
              min_bytes: int = 256, max_bytes: int = 64 << 20, iterations: int = 20, warmup: int = 2,
              seconds_per_size: float = 0.2, timeout: float = 60.0, collective: str = "all_reduce",
              encoding: str | None = None) -> Calibration:
    """Measure a message's time against its size on ``backend`` and fit the cost models.

    Parameters
    ----------
    backend : {"local", "mpi", "nccl"}
    ranks : int
        Ranks (threads, processes or GPUs).
    sizes : sequence of int, optional
        Message sizes in bytes (multiples of 8); default powers of two from ``min_bytes``
        to ``max_bytes``.
    iterations : int
        At most this many timed messages per size (fewer for large sizes: about
        ``seconds_per_size`` of them, at least 3).
    warmup : int
        Untimed messages per size first.
    timeout : float
        Seconds a collective may take.
    collective : {"all_reduce", "reduce_scatter", "all_gather"}
        What a message is (module docstring); for the sharded ones each size is rounded down
        to ``8 * ranks`` bytes' multiple.
    encoding : {"fp16", "bf16"}, optional
        Time all-reduce messages sent in it (module docstring; :func:`fit_casts`).

    Examples
    --------
    >>> cal = calibrate("local", ranks=2, sizes=[1024, 1 << 20], iterations=3)
    >>> cal.sizes.tolist(), bool(cal.times[1] > 0)
    ([1024.0, 1048576.0], True)
    >>> rs = calibrate("local", ranks=3, sizes=[1000, 1 << 20], iterations=3, collective="reduce_scatter")
    >>> rs.sizes.tolist(), rs.to_dict()["calibration"]["collective"]
    ([984.0, 1048560.0], 'reduce_scatter')
    """
    backend = check_backend(backend)
    if sizes is None:
        sizes = default_sizes(min_bytes, max_bytes)
    elif isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
        raise ValueError(f"sizes must be a sequence of message sizes in bytes, got {sizes!r}")
    else:
        sizes = tuple(sizes)
    if len(sizes) < 2:
        raise ValueError("a calibration needs at least two sizes")
    for s in sizes:
        if isinstance(s, bool) or not isinstance(s, numbers.Integral) or s <= 0 or s % 8:
            raise ValueError(f"message size {s!r} B must be a whole number of bytes, a positive multiple of 8")
    sizes = tuple(int(s) for s in sizes)
    iterations, warmup = check_count("iterations", iterations), check_count("warmup", warmup, 0)
    seconds_per_size, timeout = _positive_float("seconds_per_size", seconds_per_size), _positive_float("timeout", timeout)
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks must be an integer >= 1, got {ranks!r}")
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; choose one of {', '.join(COLLECTIVES)}")
    if collective != "all_reduce":
        grain = 8 * ranks                                 # whole words per rank
        sizes = tuple(dict.fromkeys(max(grain, s - s % grain) for s in sizes))
        if len(sizes) < 2:
            raise ValueError(f"a calibration needs at least two sizes; rounded to {grain} B they are one")
    wire = FP32 if encoding is None else encoding_named(encoding)
    if wire.wire_ratio != 1.0 and collective != "all_reduce":
        raise ValueError(f"an encoded calibration times all-reduce messages; {collective} messages are timed "
                         "in fp32 (leave the encoding out)")
    check_wire_ratio(wire)
    spec = SweepSpec(tuple(sizes), warmup, iterations, seconds_per_size, timeout, collective, wire.wire_ratio)
    if backend == "local":
        from fusionopt.executor._local import LocalGroup, run_threads
        from fusionopt.executor._runner import fast_thread_switching

        group = LocalGroup(ranks)
        comms = group.communicators()
        with fast_thread_switching():
            records = run_threads([lambda c=c: sweep_rank(c, spec) for c in comms], group, name="calibrate")
        description = comms[0].describe()
    elif backend == "mpi":
        from fusionopt.executor._mpi import launch

        limit = timeout * 4 + 60 + 2 * len(sizes) * seconds_per_size * 4
        result = launch(spec.to_dict(), ranks, limit=limit)
        records, description = result["records"], result["description"]
    else:
        from fusionopt.executor._nccl import NcclGroup
        from fusionopt.executor._local import run_threads

        group = NcclGroup(ranks)
        comms = group.communicators()
        try:
            records = run_threads([lambda c=c: sweep_rank(c, spec) for c in comms], group.host, name="calibrate")
        finally:
            group.close()
        description = comms[0].describe()
    return from_records(backend, records, description, collective, wire.name)
