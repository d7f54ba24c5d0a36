"""Two-way contention on a GPU (MODEL.md section 6): how much compute slows while a collective
runs (``kappa``, ``Problem(contention=...)``) and a collective while compute runs (``mu``,
``Problem(comm_contention=...)``).

Measured on the executor's own two streams (:class:`~fusionopt.executor.CudaStreams`
in GEMM mode): the compute stream runs fp16 GEMMs, the communication stream runs messages as
the stream runner sends them (pack into the fused buffer, all-reduce, unpack; with one GPU
the emulated link's hold kernel then holds the stream for ``c(S)``). Each run starts both
streams at one origin event, after a spin that keeps the device busy while the host queues
the run, and times each stream's span from the origin by events. For each message size
``S``, in each trial:

* ``messages alone``: a batch of messages of ``S`` bytes, about ``batch_seconds`` long;
* ``GEMMs alone``: about ``batch_seconds`` of GEMMs (by the idle calibration);
* ``messages under GEMMs``: the same batch while GEMMs run throughout it;
* ``GEMMs under messages``: the same GEMMs while messages run throughout them.

"Throughout" is checked: the other stream's span must outlast the timed one's; if it does
not, the other side is doubled and the pair run again. A run whose host took more than half
the spin to queue is run again with a longer spin (the device would have waited for the
host). Every rank runs the same, agreeing on each decision; a size's span is the slowest
rank's, and its median over the trials is kept. Then

    mu = sum_S (messages under GEMMs) / sum_S (messages alone),
    kappa = sum_S (GEMMs under messages) / sum_S (GEMMs alone),

each batch weighing about the same, and per size the same ratios. A ratio below 1 (no
slowdown, within noise) is recorded and the factor set to 1. :func:`read_contention` reads
the written file back for ``Problem`` (the command line's ``--contention-file``).

This module imports without CuPy; :func:`calibrate_contention` needs it and a GPU.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import math
import platform
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from fusionopt.executor._communicator import Communicator
from fusionopt.executor._cuda_streams import CudaStreams
from fusionopt.executor._errors import CollectiveTimeout
from fusionopt.executor._local import run_threads
from fusionopt.executor._nccl import NcclGroup, import_cupy
from fusionopt.executor._streams import Streams
from fusionopt.model._io import read_json_document, write_json_atomic
from fusionopt.model._cost import CommCost

CONTENTION_SCHEMA = "fusionopt.contention"
CONTENTION_VERSION = 1
DEFAULT_SIZES = (1 << 16, 1 << 18, 1 << 20)
# The link the stored GPU runs emulated (validation/hardware/run.py --emulate-network 100gb-ib --workers 8).
DEFAULT_LINK = ("100gb-ib", 8)
_WARM_MESSAGES = 3
# Kernels a message queues on the communication stream: pack, collective, hold, unpack.
_LAUNCHES_PER_MESSAGE = 4


@dataclass(frozen=True)
class ContentionSpec:
    """What a contention calibration runs: message ``sizes`` (bytes, multiples of 8), each
    side of a pair about ``batch_seconds`` alone, ``trials`` of each, a ``spin`` (seconds)
    before each origin, at most ``rounds`` doublings of the covering side and at most
    ``rounds`` longer spins, and at most ``max_launches`` kernels queued by one run.

    A run is queued whole before the device reaches its origin, and CUDA blocks the host
    once about a thousand launches are pending; a run of more kernels than that would wait
    on the device it is timing, so it is refused (one line) rather than run. A GEMM is about
    12.5 us on an H100 (``CudaStreams``), hence the short batches and the sizes up to 1 MiB:
    on one H100 the first defaults (20 ms batches, 16 MiB messages) queued thousands of
    kernels a run, and their spin grew without end.
    """

    sizes: tuple[int, ...] = DEFAULT_SIZES
    batch_seconds: float = 0.002
    trials: int = 3
    spin: float = 0.02
    rounds: int = 6
    timeout: float = 60.0
    max_launches: int = 900

    def __post_init__(self) -> None:
        if not self.sizes or any(isinstance(s, bool) or int(s) != s or s < 8 or s % 8 for s in self.sizes):
            raise ValueError(f"message sizes must be positive multiples of 8 bytes, got {list(self.sizes)}")
        for label in ("batch_seconds", "spin", "timeout"):
            value = getattr(self, label)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{label} must be a positive number of seconds, got {value!r}")
        for label in ("trials", "rounds", "max_launches"):
            value = getattr(self, label)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{label} must be an integer >= 1, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"sizes": [int(s) for s in self.sizes], "batch_seconds": self.batch_seconds, "trials": self.trials,
                "spin": self.spin, "rounds": self.rounds, "max_launches": self.max_launches}


class _Run:
    """One rank's buffers and the runs of a calibration on ``streams``."""

    def __init__(self, comm: Communicator, streams: Streams, spec: ContentionSpec) -> None:
        self.comm, self.streams, self.spec = comm, streams, spec
        words = max(spec.sizes) // 8
        self.source = comm.empty(words, np.dtype(np.uint64))
        self.fused = comm.empty(words, np.dtype(np.uint64))
        self.source[...] = 0
        self.spin = spec.spin
        self.product = float(getattr(streams, "gemm_seconds", float("nan")))     # one GEMM's seconds

    def launches(self, sizes: Sequence[int], gemm_seconds: float) -> int:
        """Kernels one run queues: each message's, each GEMM (and a spin for the rest), the
        spin before the origin."""
        gemms = int(gemm_seconds // self.product) + 1 if self.product > 0 and gemm_seconds > 0 else 1
        return _LAUNCHES_PER_MESSAGE * len(sizes) + gemms + 1

    def agree(self, flag: bool) -> bool:
        """Whether any rank says so (every rank then takes the same branch)."""
        return any(self.comm.allgather(bool(flag), timeout=self.spec.timeout))

    def spans(self, sizes: Sequence[int], gemm_seconds: float) -> dict[str, float]:
        """Queue ``gemm_seconds`` of GEMMs and the messages of ``sizes`` from one origin; the
        seconds from the origin to each stream's end (slowest rank)."""
        launches = self.launches(sizes, gemm_seconds)
        if launches > self.spec.max_launches:
            raise RuntimeError(f"contention calibration: a run of {len(sizes)} messages and {gemm_seconds * 1e3:.3g} ms "
                               f"of GEMMs queues {launches} kernels, more than max_launches={self.spec.max_launches} "
                               "the host can queue ahead of the GPU; give fewer or smaller sizes or a shorter "
                               "batch_seconds")
        for _ in range(self.spec.rounds + 1):
            timed = self._once(sizes, gemm_seconds)
            if not self.agree(timed.pop("host") > self.spin / 2):
                return {key: max(self.comm.allgather(value, timeout=self.spec.timeout)) for key, value in timed.items()}
            self.spin *= 4                       # the device may have waited for the host
        raise RuntimeError(f"contention calibration: the host still took over half the {self.spin / 4:.3g} s spin "
                           f"to queue a run of {len(sizes)} messages after {self.spec.rounds} longer spins; "
                           "lower batch_seconds or max_launches")

    def _once(self, sizes: Sequence[int], gemm_seconds: float) -> dict[str, float]:
        comm, streams, timeout = self.comm, self.streams, self.spec.timeout
        compute, channel = streams.compute, streams.communication
        comm.barrier(timeout=timeout)
        streams.spin(compute, self.spin)
        origin = streams.record(compute)
        streams.wait(channel, origin)
        queued = time.perf_counter()
        streams.work(compute, gemm_seconds)
        compute_end = streams.record(compute)
        with streams.on_communication():
            for size in sizes:
                words = size // 8
                self.fused[:words] = self.source[:words]
                comm.allreduce(self.fused[:words], timeout=timeout)
                self.source[:words] = self.fused[:words]
        channel_end = streams.record(channel)
        host = time.perf_counter() - queued
        deadline = time.perf_counter() + timeout
        for event in (compute_end, channel_end):
            while not streams.done(event):
                if time.perf_counter() > deadline:
                    raise CollectiveTimeout(f"contention calibration: a run did not finish within {timeout:g} s "
                                            f"on rank {comm.rank}")
                time.sleep(2e-5)
        return {"compute": streams.elapsed(origin, compute_end),
                "communication": streams.elapsed(origin, channel_end), "host": host}

    def batch(self, size: int) -> list[int]:
        """Messages of ``size`` bytes lasting about ``batch_seconds`` alone (at least one)."""
        warm = self.spans([size] * _WARM_MESSAGES, 0.0)["communication"] / _WARM_MESSAGES
        return [size] * max(1, math.ceil(self.spec.batch_seconds / max(warm, 1e-9)))

    def covered(self, sizes: list[int], gemm_seconds: float, timed: str) -> dict[str, float]:
        """Run the pair until the side other than ``timed`` outlasts it, doubling that side."""
        for _ in range(self.spec.rounds + 1):
            spans = self.spans(sizes, gemm_seconds)
            other = "compute" if timed == "communication" else "communication"
            if not self.agree(spans[other] <= spans[timed]):
                return spans
            if timed == "communication":
                gemm_seconds *= 2
            else:
                sizes = sizes * 2
        what = "GEMMs" if timed == "communication" else "messages"
        raise RuntimeError(f"contention calibration: {what} doubled {self.spec.rounds} times still ended before "
                           f"the {'messages' if what == 'GEMMs' else 'GEMMs'} they were to cover; "
                           "raise ContentionSpec.rounds")


def measure_rank(comm: Communicator, streams: Streams, spec: ContentionSpec) -> dict[str, Any]:
    """This rank's part of a contention calibration (every rank calls it, module docstring):
    per size, the trials' spans in seconds (the slowest rank's, so every rank returns the same)."""
    comm.bind_thread()
    run = _Run(comm, streams, spec)
    gemms = spec.batch_seconds
    sizes: dict[str, Any] = {}
    for size in spec.sizes:
        batch = run.batch(size)
        trials = {"messages_alone": [], "messages_under_gemms": [], "gemms_alone": [], "gemms_under_messages": []}
        for _ in range(spec.trials):
            trials["messages_alone"].append(run.spans(batch, 0.0)["communication"])
            trials["gemms_alone"].append(run.spans([], gemms)["compute"])
            trials["messages_under_gemms"].append(run.covered(batch, 2 * gemms, "communication")["communication"])
            trials["gemms_under_messages"].append(run.covered(batch * 2, gemms, "compute")["compute"])
        sizes[str(size)] = {"messages": len(batch), **trials}
    return {"rank": comm.rank, "sizes": sizes}


@dataclass(frozen=True, eq=False)
class Contention:
    """A contention calibration: the two factors and what they come from.

    Attributes
    ----------
    contention : float
        ``kappa >= 1``: GEMM time under messages over GEMM time alone.
    comm_contention : float
        ``mu >= 1``: message time under GEMMs over message time alone.
    measured : dict
        Per size (bytes, as a string): the batch's message count, the median spans (seconds)
        and the two ratios; ``"all"``: the sums' ratios before the floor at 1.
    """

    contention: float
    comm_contention: float
    measured: dict[str, Any]
    description: str = ""
    device: str = ""
    versions: dict[str, str] = field(default_factory=dict)
    link: dict[str, Any] | None = None
    spec: ContentionSpec = ContentionSpec()
    ranks: int = 1
    date: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"schema": CONTENTION_SCHEMA, "version": CONTENTION_VERSION, "contention": self.contention,
                "comm_contention": self.comm_contention, "device": self.device, "description": self.description,
                "ranks": self.ranks, "link": self.link, "versions": self.versions, "date": self.date,
                "spec": self.spec.to_dict(), "measured": self.measured,
                "how": ("contention = GEMM time while messages run / alone; comm_contention = message time "
                        "while GEMMs run / alone; sums over the sizes of each size's median (slowest rank)")}

    def write(self, path: str | Path) -> None:
        """Write :meth:`to_dict` to ``path`` atomically."""
        write_json_atomic(path, self.to_dict())

    def table(self) -> str:
        """Per size: the spans alone and under the other stream, and the ratios."""
        lines = [f"{'bytes':>10}  {'msgs':>5}  {'msgs alone':>10}  {'under GEMMs':>11}  {'mu':>6}  "
                 f"{'GEMMs alone':>11}  {'under msgs':>10}  {'kappa':>6}"]
        for size, row in self.measured.items():
            if size == "all":
                continue
            lines.append(f"{int(size):>10d}  {row['messages']:>5d}  {1e3 * row['messages_alone']:>8.3f}ms  "
                         f"{1e3 * row['messages_under_gemms']:>9.3f}ms  {row['comm_contention']:>6.3f}  "
                         f"{1e3 * row['gemms_alone']:>9.3f}ms  {1e3 * row['gemms_under_messages']:>8.3f}ms  "
                         f"{row['contention']:>6.3f}")
        every = self.measured["all"]
        lines.append(f"all sizes: comm_contention (mu) = {self.comm_contention:.4g}"
                     + (f" (measured {every['comm_contention']:.4g})" if every["comm_contention"] < 1 else "")
                     + f", contention (kappa) = {self.contention:.4g}"
                     + (f" (measured {every['contention']:.4g})" if every["contention"] < 1 else ""))
        return "\n".join(lines)


def contention_factors(records: Sequence[Mapping[str, Any]]) -> tuple[float, float, dict[str, Any]]:
    """``(kappa, mu, measured)`` from every rank's :func:`measure_rank` record (module docstring).

    >>> record = {"sizes": {"8": {"messages": 4, "messages_alone": [1.0, 1.1, 0.9], "messages_under_gemms": [3.0] * 3,
    ...                           "gemms_alone": [2.0] * 3, "gemms_under_messages": [2.5, 2.4, 2.6]}}}
    >>> kappa, mu, measured = contention_factors([record])
    >>> kappa, mu, measured["8"]["comm_contention"]
    (1.25, 3.0, 3.0)
    """
    spans = ("messages_alone", "messages_under_gemms", "gemms_alone", "gemms_under_messages")
    measured: dict[str, Any] = {}
    totals = dict.fromkeys(spans, 0.0)
    for size in records[0]["sizes"]:
        row: dict[str, Any] = {"messages": int(records[0]["sizes"][size]["messages"])}
        for span in spans:
            slowest = np.max([r["sizes"][size][span] for r in records], axis=0)
            row[span] = float(statistics.median(slowest.tolist()))
            totals[span] += row[span]
        row["comm_contention"] = row["messages_under_gemms"] / row["messages_alone"]
        row["contention"] = row["gemms_under_messages"] / row["gemms_alone"]
        measured[size] = row
    every = {"comm_contention": totals["messages_under_gemms"] / totals["messages_alone"],
             "contention": totals["gemms_under_messages"] / totals["gemms_alone"]}
    measured["all"] = every
    return max(1.0, every["contention"]), max(1.0, every["comm_contention"]), measured


def read_contention(path: str | Path) -> tuple[float, float]:
    """``(contention, comm_contention)`` from a file :meth:`Contention.write` wrote; a
    ``ValueError`` naming the file and what is wrong otherwise."""
    document = read_json_document(path)
    if not isinstance(document, dict) or document.get("schema") != CONTENTION_SCHEMA:
        raise ValueError(f"{path}: not a contention file (schema {CONTENTION_SCHEMA!r}, written by "
                         "fusionopt calibrate --contention)")
    if document.get("version") != CONTENTION_VERSION:
        raise ValueError(f"{path}: unsupported contention version {document.get('version')!r}: this fusionopt reads "
                         f"version {CONTENTION_VERSION}")
    factors = []
    for key in ("contention", "comm_contention"):
        value = document.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
            raise ValueError(f"{path}: {key} must be a finite number >= 1, got {value!r}")
        factors.append(float(value))
    return factors[0], factors[1]


def _versions(group: Any) -> dict[str, str]:
    found = {"python": platform.python_version()}
    for package in ("fusionopt", "numpy", "cupy", "cupy-cuda12x", "cupy-cuda13x", "torch"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    runtime = group.cupy.cuda.runtime
    found["nccl"] = str(group.nccl.get_version())
    for name, call in (("cuda_runtime", "runtimeGetVersion"), ("cuda_driver", "driverGetVersion")):
        try:
            found[name] = str(getattr(runtime, call)())
        except Exception:  # noqa: BLE001 - a version we cannot read is left out, not fatal
            pass
    return found


def check_gpus(ranks: int) -> None:
    """Raise, in one line, unless CuPy with NCCL and ``ranks`` GPUs are here: an ``ImportError``
    naming the ``gpu`` extra, or a ``RuntimeError`` saying how many GPUs there are."""
    cupy, _ = import_cupy()
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - CuPy's CUDA errors: no driver, no device
        raise RuntimeError(f"a contention calibration needs a CUDA GPU, and CUDA finds none here "
                           f"({' '.join(str(exc).split())})") from None
    if count < ranks:
        raise RuntimeError(f"a contention calibration on {ranks} rank(s) needs {ranks} GPU(s); "
                           f"this machine has {count}")


def calibrate_contention(*, ranks: int = 1, link: CommCost | None = None, link_name: dict[str, Any] | None = None,
                         spec: ContentionSpec | None = None) -> Contention:
    """Measure ``kappa`` and ``mu`` on ``ranks`` GPUs (module docstring).

    With one rank the collective is the executor's emulated link (``link``, the cost it holds
    each message for; ``link_name`` says which network it is, for the record); with several,
    real NCCL all-reduces among the GPUs. Needs CuPy with NCCL and the GPUs.
    """
    spec = spec or ContentionSpec()
    if ranks == 1 and link is None:
        raise ValueError("a contention calibration on one GPU runs the emulated link: give its cost (link)")
    group = NcclGroup(ranks, link_cost=link if ranks == 1 else None)
    comms = group.communicators()

    def rank(comm: Any) -> tuple[dict[str, Any], str]:
        comm.bind_thread()
        streams = CudaStreams(comm, "gemm")
        return measure_rank(comm, streams, spec), streams.describe()

    try:
        results = run_threads([lambda c=c: rank(c) for c in comms], group.host, name="contention")
        versions = _versions(group)
        props = group.cupy.cuda.runtime.getDeviceProperties(group.devices[0])
    finally:
        group.close()
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    kappa, mu, measured = contention_factors([record for record, _ in results])
    return Contention(kappa, mu, measured, description=f"{comms[0].describe()}; {results[0][1]}", device=name,
                      versions=versions, link=link_name if ranks == 1 else None, spec=spec, ranks=ranks,
                      date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


__all__ = ["CONTENTION_SCHEMA", "Contention", "ContentionSpec", "calibrate_contention", "check_gpus",
           "contention_factors", "measure_rank", "read_contention"]
