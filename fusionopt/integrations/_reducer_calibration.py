"""A gradient reducer's own cost, measured apart from the jobs it is used to predict: a
fixed cost per step, a cost per parameter tensor and step, and a cost per message and per
byte of each message beyond the link (the Python or C++ hooks, packing and unpacking, the
hand-offs to the communication thread, the optimiser's step on the reducer's tensors).

:func:`measure_reducer_overhead` runs ``ranks`` gloo processes on this host, each training a
small synthetic model (a stack of ``layers`` bias-free ``width x width`` linear layers, one
gradient tensor each) with one of the reducers, and varies how many messages a step sends:

* ``"plan"``: fusionopt's :class:`~fusionopt.integrations.PlanReducer` with a
  fusion plan of ``m`` equal messages in backward order;
* ``"ddp"``: ``DistributedDataParallel`` with ``bucket_cap_mb`` set to ``layers / m`` layers'
  bytes, so ``m`` buckets;
* ``"fsdp2"``: ``fully_shard`` on ``m`` equal groups of layers and then on the model, with
  ``reshard_after_forward=False``: one all-gather and one reduce-scatter per group and step
  (a "message" is one collective).

Every step runs the training job's optimiser (``optimizer``, a class of ``torch.optim``, and
its ``optimizer_options``; by default ``SGD(lr=1e-3)``): FSDP2 steps it on DTensor shards,
each op dispatched per tensor through DTensor (torch 2.13), and a momentum buffer or Adam's
moments add ops per tensor, so the cost per tensor depends on the optimiser.

Each message is held on an emulated link of cost ``link``
(:class:`~fusionopt.integrations.EmulatedLink`; ``PlanReducer``'s own ``link``),
by default ``AlphaBeta(5 ms, 0)``, longer than the real loopback collective of these small
buffers, which it hides: the way an emulated link is held in training; the messages of a
step are counted on the link. Each message count is timed
``rounds`` times, interleaved with the same model's step without any reducer (the *plain*
step, same ranks, same load). A sample's *excess* is its mean step less the plain step's and
less the link's time of its messages; :func:`fit_overhead` fits ``excess = per_step +
per_message * messages`` by least squares, both figures kept ``>= 0``. The synthetic model's
backward is far shorter than the link's time per message, so the channel is critical and
each message's own cost adds to the step in full, as the model adds it (MODEL.md section 2.1).

The *shape* regime varies the model at one message per step: stacks of ``tensor_counts``
layers (as many parameter tensors) and stacks of ``layers`` layers ``widths`` wide (the
bytes of each message). Each sample keeps its parameter tensors ``n`` and the bytes ``B``
its messages carry per step (as the link counted them: DDP's buckets, FSDP2's unsharded
side of each collective); :func:`fit_reducer_cost` fits the channel and shape regimes'
samples at once, by non-negative least squares:
``excess = per_step + per_message * m + per_tensor * n + per_byte * B``. ``per_tensor``
is what a step costs per parameter tensor (the optimiser's step on it, FSDP2's per-parameter
work), ``per_byte`` what a message costs per byte beyond the link (copies into and out of
its buffer). It runs by default for FSDP2 only, whose collectives block the training thread
on CPU, so that all of that work adds to the step as the model adds it. DDP and the plan
reducer reduce in the backward, behind the link's earlier messages: there a step's excess
falls as messages are added (the backward hides behind the channel), and a fit of four
figures on it trades the cost per byte against the fixed cost rather than measuring either;
give ``tensor_counts`` and ``widths`` to measure them anyway.

That regime cannot see what a message costs the compute stream (the hook packing it in the
backward's thread, the communication thread's collective taking a core from the backward):
the channel's backlog hides it. A second regime measures it (``plan`` and ``ddp``; FSDP2's
problems take no compute per message): a stack of ``compute_layers`` wider layers
(``compute_width``, a batch of ``compute_batch`` rows) whose backward per layer is far longer
than a message's time on the link ``compute_link``, sending ``compute_counts`` messages spread
through the backward. The compute is then critical, and a step of ``m`` messages takes the
plain step, the fixed costs, one message's link time after the backward and ``m`` times the
compute per message: with a sample's *excess* there its mean step less the plain step's and
less one message's link time, :func:`fit_overhead`'s slope is ``message_compute`` (the
intercept, the fixed costs and the last message's own cost, is not kept).
What no regime tells apart: a real collective that outlasts its hold from the reducer's own
cost (the holds are chosen longer than the loopback collectives of these buffers; where one
is not, as with 4 gloo ranks on 2 cores, the overrun counts in the excess as the
reducer's), and how the costs per tensor and per byte grow beyond the shapes measured (64
layers, 64 KiB tensors by default).

:func:`read_reducer_calibration` reads the JSON document :meth:`ReducerCalibration.write`
writes; :func:`with_reducer_overhead` puts the figures into a problem
(:func:`fusionopt.cost.with_overhead`). The ranks run as processes of their own
(``python -m fusionopt.integrations._reducer_calibration``): the calling script needs no
``if __name__ == "__main__":`` guard, and Ctrl-C or a failed rank stops every rank.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np

from fusionopt.integrations._ddp_record import free_port, join_gloo
from fusionopt.integrations._emulated_link import EmulatedLink, ddp_comm_hook, emulate_fsdp2
from fusionopt.integrations._rank_processes import leave_rank, run_rank_processes
from fusionopt.integrations._torch import require_torch
from fusionopt.model._cost import AlphaBeta, CommCost, cost_from_dict
from fusionopt.model._overhead import with_overhead
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._profile import Profile
from fusionopt.model._io import read_json_document, write_json_atomic

__all__ = ["REDUCERS", "REDUCER_CALIBRATION_SCHEMA", "DEFAULT_LINK", "Sample", "ReducerCalibration", "fit_overhead",
           "fit_reducer_cost", "DEFAULT_OPTIMIZER_OPTIONS", "check_optimizer", "make_optimizer",
           "measure_reducer_overhead", "read_reducer_calibration", "with_reducer_overhead"]

REDUCERS = ("ddp", "fsdp2", "plan")
REDUCER_CALIBRATION_SCHEMA = "fusionopt.reducer_calibration"
REDUCER_CALIBRATION_VERSION = 3          # 3: per_tensor and per_byte; 2: message_compute; 1 had neither
DEFAULT_LINK = AlphaBeta(5e-3, 0.0)
"""The emulated link of a ``plan`` or ``ddp`` calibration: 5 ms per message, longer than a loopback
gloo all-reduce of the synthetic model's buffers on a loaded host (1 to 2.5 ms on 2 cores)."""
DEFAULT_OPTIMIZER_OPTIONS: Mapping[str, Any] = MappingProxyType({"lr": 1e-3})
"""The options of a calibration's optimiser where none are given (``SGD(lr=1e-3)`` by default)."""
COMPUTE_LINK = AlphaBeta(1e-3, 0.0)
"""The emulated link of the compute regime: 1 ms per message, a third of the wide synthetic
model's backward per layer on one core (about 3 ms)."""

# Which problems each reducer's figures price (MODEL.md section 2.1).
_PATTERNS = {"ddp": "all-reduce", "plan": "all-reduce", "fsdp2": "fully-sharded"}
# What one message is to each reducer, in words.
_UNITS = MappingProxyType({"ddp": "bucket", "fsdp2": "collective", "plan": "message"})


@dataclass(frozen=True)
class Sample:
    """One timed setting: ``messages`` per step, the mean ``step`` with the reducer, the
    ``plain`` step of the same round and model without one, and the ``link`` seconds its
    messages held the emulated link per step (all seconds); the model's parameter
    ``tensors`` and the ``nbytes`` its messages carried per step (0 where not recorded: files
    before version 3)."""

    messages: float
    step: float
    plain: float
    link: float
    tensors: float = 0.0
    nbytes: float = 0.0

    @property
    def excess(self) -> float:
        """Seconds the reducer added beyond the link: ``step - plain - link``."""
        return self.step - self.plain - self.link


def fit_overhead(messages: Sequence[float], excess: Sequence[float]) -> tuple[float, float]:
    """``(per_step, per_message)``: least squares of ``excess = per_step + per_message * messages``
    with both ``>= 0`` (where the free fit is negative in one, the best fit with it at 0).

    >>> fit_overhead([1, 2, 4], [3.0, 5.0, 9.0])
    (1.0, 2.0)
    >>> fit_overhead([1, 3], [-1.0, 1.0])          # free fit (-2, 1): through the origin instead
    (0.0, 0.2)
    """
    x = [float(m) for m in messages]
    y = [float(e) for e in excess]
    if len(x) != len(y) or not x:
        raise ValueError(f"fit_overhead needs as many excesses as message counts, at least one (got {len(x)} "
                         f"and {len(y)})")
    if not all(math.isfinite(v) for v in x + y) or min(x) <= 0:
        raise ValueError("fit_overhead needs finite excesses and message counts > 0")
    n = len(x)
    mean_x, mean_y = sum(x) / n, sum(y) / n
    spread = sum((v - mean_x) ** 2 for v in x)
    if spread > 0:
        slope = sum((a - mean_x) * (b - mean_y) for a, b in zip(x, y)) / spread
        intercept = mean_y - slope * mean_x
        if slope >= 0 and intercept >= 0:
            return intercept, slope
    # A bound is active: the best fit with per_step = 0 or with per_message = 0, the better one.
    through_origin = max(0.0, sum(a * b for a, b in zip(x, y)) / sum(a * a for a in x))
    flat = max(0.0, mean_y)
    residual = lambda c, s: sum((c + s * a - b) ** 2 for a, b in zip(x, y))  # noqa: E731
    return (0.0, through_origin) if residual(0.0, through_origin) < residual(flat, 0.0) else (flat, 0.0)


def fit_reducer_cost(samples: Sequence[Sample]) -> tuple[float, float, float, float]:
    """``(per_step, per_message, per_tensor, per_byte)``: the least squares fit of each
    sample's excess, ``per_step + per_message * messages + per_tensor * tensors + per_byte *
    nbytes``, with every figure ``>= 0``. A regressor the samples hold constant (the tensors or
    the bytes where every sample has one shape, as in files before version 3) is left out, its
    figure 0: ``per_step`` takes in its share. With ``tensors`` and ``nbytes`` constant this is
    :func:`fit_overhead`.

    >>> made = [Sample(m, 1e-3 + 2e-3 * m + 1e-4 * n + 1e-9 * b, 0.0, 0.0, n, b)
    ...         for m, n, b in [(1, 16, 6e4), (4, 16, 6e4), (1, 4, 1.5e4), (1, 64, 2.4e5), (1, 16, 1e6)]]
    >>> [round(v, 12) for v in fit_reducer_cost(made)]
    [0.001, 0.002, 0.0001, 1e-09]
    """
    from scipy.optimize import nnls

    if not samples:
        raise ValueError("fit_reducer_cost needs at least one sample")
    columns = np.array([[1.0, s.messages, s.tensors, s.nbytes] for s in samples], dtype=float)
    excess = np.array([s.excess for s in samples], dtype=float)
    if not (np.isfinite(columns).all() and np.isfinite(excess).all()) or columns[:, 1].min() <= 0:
        raise ValueError("fit_reducer_cost needs finite excesses, tensors and bytes, and message counts > 0")
    kept = [0] + [j for j in (1, 2, 3) if np.ptp(columns[:, j]) > 0]
    scale = np.abs(columns[:, kept]).max(axis=0)
    solution, _ = nnls(columns[:, kept] / scale, excess)
    figures = [0.0, 0.0, 0.0, 0.0]
    for j, value in zip(kept, solution / scale):
        figures[j] = float(value)
    return figures[0], figures[1], figures[2], figures[3]


@dataclass(frozen=True)
class ReducerCalibration:
    """A reducer's own cost on one host: ``per_step`` seconds, ``per_tensor`` seconds per
    parameter tensor and step, ``per_message`` seconds and ``per_byte`` seconds per byte of
    each message (FSDP2: each all-gather or reduce-scatter) on the channel,
    ``message_compute`` seconds per message on the compute stream, the samples they were
    fitted on (``compute_samples``: the compute regime's, whose ``link`` is one message's),
    and where they were measured (``model``: the synthetic model and the optimiser)."""

    reducer: str
    per_step: float
    per_message: float
    samples: tuple[Sample, ...] = ()
    message_compute: float = 0.0
    compute_samples: tuple[Sample, ...] = ()
    link: dict[str, Any] | None = None
    torch_version: str = ""
    backend: str = "gloo"
    ranks: int = 2
    threads: int = 1
    host: str = ""
    date: str = ""
    model: dict[str, Any] | None = None
    per_tensor: float = 0.0
    per_byte: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"schema": REDUCER_CALIBRATION_SCHEMA, "version": REDUCER_CALIBRATION_VERSION,
                "reducer": self.reducer, "per_step": self.per_step, "per_message": self.per_message,
                "per_tensor": self.per_tensor, "per_byte": self.per_byte,
                "message_compute": self.message_compute, "units": "seconds", "torch": self.torch_version,
                "backend": self.backend, "ranks": self.ranks, "threads": self.threads, "host": self.host,
                "date": self.date, "model": self.model, "link": self.link,
                "samples": [_sample_dict(s) for s in self.samples],
                "compute_samples": [_sample_dict(s) for s in self.compute_samples]}

    def write(self, path: str | Path) -> None:
        """Write :meth:`to_dict` as JSON, atomically."""
        write_json_atomic(path, self.to_dict())

    def summary(self) -> str:
        """One line: the reducer, its figures in milliseconds (:func:`reducer_cost_words`) and
        what they were measured on."""
        return (f"{self.reducer}: {reducer_cost_words(self.to_dict())}; samples: {len(self.samples)} with the "
                "channel critical" + ("" if self.reducer == "fsdp2" else
                                      f", {len(self.compute_samples)} with the compute critical")
                + f"; {self.ranks} {self.backend} ranks, torch {self.torch_version}")


def reducer_cost_words(figures: Mapping[str, Any]) -> str:
    """A reducer's own cost in words, in milliseconds: per step (and per parameter tensor) on
    the host, per message (and per MiB of it) on the channel, and the compute per message.

    ``figures``: a calibration's :meth:`ReducerCalibration.to_dict`, or the part of it a result
    keeps: ``reducer``, ``per_step``, ``per_message`` (seconds) and, where measured,
    ``per_tensor`` (seconds), ``per_byte`` (seconds per byte) and ``message_compute``
    (seconds); a missing one counts as 0. A message is named as the reducer sends it: a
    bucket of DDP's, a collective of FSDP2's (which has no compute per message: its problems
    take none). The per-tensor and per-MiB figures are named where not 0, or where the
    calibration measured them (its ``model`` has ``shapes``); a compute per message of 0 with no
    sample of the compute critical is said to be not measured.

    >>> print(reducer_cost_words({"reducer": "ddp", "per_step": 7e-4, "per_message": 4e-4, "per_byte": 5e-10}))
    0.700 ms per step on the host, 0.400 ms per bucket and 0.524 ms per MiB of it on the channel,
    0.000 ms of compute per bucket (not measured)
    """
    reducer = figures.get("reducer")
    unit = _UNITS.get(reducer, "message")
    compute = reducer != "fsdp2"
    shaped = bool((figures.get("model") or {}).get("shapes"))

    def ms(key: str, scale: float = 1.0) -> str:
        return f"{1e3 * scale * float(figures.get(key) or 0.0):.3f} ms"

    return (f"{ms('per_step')} per step"
            + (f" and {ms('per_tensor')} per parameter tensor" if shaped or figures.get("per_tensor") else "")
            + f" on the host, {ms('per_message')} per {unit}"
            + (f" and {ms('per_byte', 2**20)} per MiB of it" if shaped or figures.get("per_byte") else "")
            + " on the channel" + (f", {ms('message_compute')} of compute per {unit}" if compute else "")
            + (" (not measured)" if compute and not figures.get("message_compute")
               and not figures.get("compute_samples") else ""))


def _sample_dict(sample: Sample) -> dict[str, float]:
    return {"messages": sample.messages, "step": sample.step, "plain": sample.plain, "link": sample.link,
            "tensors": sample.tensors, "nbytes": sample.nbytes}


def _samples(path: str | Path, document: dict[str, Any], key: str) -> tuple[Sample, ...]:
    try:
        return tuple(Sample(float(s["messages"]), float(s["step"]), float(s["plain"]), float(s["link"]),
                            float(s.get("tensors", 0.0)), float(s.get("nbytes", 0.0)))
                     for s in document.get(key, []))
    except (TypeError, KeyError, ValueError, AttributeError):
        raise ValueError(f"{path}: {key} must be a list of objects with messages, step, plain and link") from None


def read_reducer_calibration(path: str | Path) -> ReducerCalibration:
    """The calibration in the JSON file at ``path``; a ``ValueError`` naming the file and the
    fault otherwise. A version 1 file, written before the compute per message was measured,
    reads with ``message_compute = 0``, and a file before version 3 with ``per_tensor = 0``
    and ``per_byte = 0`` (the model each was made for); a later version must carry them."""
    document = read_json_document(path)
    if not isinstance(document, dict) or document.get("schema") != REDUCER_CALIBRATION_SCHEMA:
        found = document.get("schema") if isinstance(document, dict) else type(document).__name__
        raise ValueError(f"{path}: not a reducer calibration (schema {found!r}, expected "
                         f"{REDUCER_CALIBRATION_SCHEMA!r}; fusionopt calibrate --reducer writes one)")
    version = document.get("version")
    if version not in (1, 2, REDUCER_CALIBRATION_VERSION) or isinstance(version, bool):
        raise ValueError(f"{path}: unsupported reducer calibration version {version!r}")
    reducer = document.get("reducer")
    if reducer not in REDUCERS:
        raise ValueError(f"{path}: unknown reducer {reducer!r}: expected one of {', '.join(REDUCERS)}")
    figures = {}
    for key in (("per_step", "per_message") + (("message_compute",) if version >= 2 else ())
                + (("per_tensor", "per_byte") if version >= 3 else ())):
        value = document.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{path}: {key} must be a finite number of seconds >= 0, got {value!r}")
        figures[key] = float(value)
    return ReducerCalibration(reducer=reducer, samples=_samples(path, document, "samples"),
                              compute_samples=_samples(path, document, "compute_samples"), link=document.get("link"),
                              torch_version=str(document.get("torch", "")), backend=str(document.get("backend", "")),
                              ranks=int(document.get("ranks", 0) or 0), threads=int(document.get("threads", 0) or 0),
                              host=str(document.get("host", "")), date=str(document.get("date", "")),
                              model=document.get("model"), **figures)


def with_reducer_overhead(problem: Problem, calibration: ReducerCalibration) -> Problem:
    """``problem`` with the reducer's cost: ``per_message`` and ``per_byte`` on every
    message's cost (on both collectives' of a fully sharded problem), ``per_step`` and
    ``per_tensor`` for each of the profile's tensors on its ``host_overhead``, and
    ``message_compute`` on the problem's compute per message
    (:func:`fusionopt.cost.with_overhead`). A DDP or plan
    calibration prices an all-reduce problem, an FSDP2 one a fully sharded problem.

    >>> from fusionopt.model import simulate
    >>> profile = Profile.from_arrays([4e6], [1e-3], [2e-3])
    >>> problem = Problem(profile, AlphaBeta(1e-3, 1e-9))
    >>> slower = with_reducer_overhead(problem, ReducerCalibration("ddp", per_step=5e-4, per_message=2.5e-4))
    >>> slower.cost, slower.profile.host_overhead
    (AlphaBeta(alpha=0.00125, beta=1e-09), 0.0005)
    >>> with_reducer_overhead(problem, ReducerCalibration("plan", per_step=0.0, per_message=0.0,
    ...                                                   message_compute=3e-4)).message_compute
    0.0003
    >>> per_tensor = with_reducer_overhead(problem, ReducerCalibration("ddp", per_step=5e-4, per_message=0.0,
    ...                                                              per_tensor=1e-4, per_byte=1e-9))
    >>> round(per_tensor.profile.host_overhead, 12), per_tensor.cost      # one tensor
    (0.0006, AlphaBeta(alpha=0.001, beta=2e-09))
    """
    wanted = _PATTERNS[calibration.reducer]
    if not problem.pattern.is_a(wanted):
        raise ValueError(f"a {calibration.reducer} reducer calibration prices {wanted} problems, and this one is "
                         f"{problem.pattern.name}")
    return with_overhead(problem, per_step=calibration.per_step + calibration.per_tensor * problem.profile.n,
                         per_message=calibration.per_message, per_message_compute=calibration.message_compute,
                         per_byte=calibration.per_byte)


# ---------------------------------------------------------------------- measuring
def measure_reducer_overhead(reducer: str, ranks: int = 2, *, message_counts: Sequence[int] = (1, 2, 4, 8, 16),
                             layers: int = 16, width: int = 32, batch: int = 4, steps: int = 20, warmup: int = 5,
                             rounds: int = 3, threads: int = 1, link: CommCost | None = DEFAULT_LINK,
                             compute_counts: Sequence[int] | None = None, compute_layers: int = 8,
                             compute_width: int = 256, compute_batch: int = 512,
                             compute_link: CommCost = COMPUTE_LINK, tensor_counts: Sequence[int] | None = None,
                             widths: Sequence[int] | None = None, optimizer: str = "SGD",
                             optimizer_options: Mapping[str, Any] | None = None,
                             timeout: float = 300.0) -> ReducerCalibration:
    """Measure ``reducer``'s own cost (module docstring) on ``ranks`` gloo processes of this
    host with ``threads`` intra-op threads each; ``link`` is the emulated link
    every message is held on (None: no emulation, the real loopback collectives, whose own
    time then counts in the per-message and per-byte figures).
    The shape regime times one message per step on stacks of each of ``tensor_counts``
    layers ``width`` wide and of ``layers`` layers each of ``widths`` wide (default ``(4, 64)``
    and ``(64, 128)`` for ``fsdp2``, ``()`` and ``()`` for ``ddp`` and ``plan``: none, leaving
    ``per_tensor`` and ``per_byte`` 0; module docstring). Every step runs
    ``torch.optim.<optimizer>(parameters, **optimizer_options)`` (default ``{"lr": 1e-3}``):
    give the training job's own.
    The compute regime sends ``compute_counts`` messages (default ``(1, 2, 4, 8)`` for
    ``plan`` and ``ddp``, none for ``fsdp2``; ``()`` skips it, leaving ``message_compute`` 0)
    on a stack of ``compute_layers`` layers ``compute_width`` wide, a batch of
    ``compute_batch`` rows, each message held on ``compute_link``.
    ``timeout``: seconds the whole job may take. Raises ``ValueError`` for bad arguments and
    ``RuntimeError`` naming the rank that failed."""
    torch = require_torch()
    if reducer not in REDUCERS:
        raise ValueError(f"unknown reducer {reducer!r}: choose {', '.join(REDUCERS)}")
    for label, value, least in (("ranks", ranks, 1), ("layers", layers, 1), ("width", width, 1), ("batch", batch, 1),
                                ("steps", steps, 1), ("warmup", warmup, 0), ("rounds", rounds, 1),
                                ("threads", threads, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{label} must be a whole number >= {least}, got {value!r}")
    if reducer == "fsdp2" and ranks < 2:
        raise ValueError("ranks: FSDP2 sharded over one rank sends no all-gather and no reduce-scatter (torch 2.13), "
                         "so there is no message to measure; give ranks >= 2")
    counts = _message_counts("message_counts", message_counts, layers)
    if compute_counts is None:
        compute_counts = () if reducer == "fsdp2" else (1, 2, 4, 8)
    elif reducer == "fsdp2" and len(compute_counts):
        raise ValueError("compute_counts: the fsdp2 reducer has no compute regime (a fully sharded problem takes no "
                         "compute per message); leave compute_counts out")
    for label, value in (("compute_layers", compute_layers), ("compute_width", compute_width),
                         ("compute_batch", compute_batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a whole number >= 1, got {value!r}")
    compute = _message_counts("compute_counts", compute_counts, compute_layers) if len(compute_counts) else []
    sharded = reducer == "fsdp2"
    shapes = ([[n, width] for n in _whole_numbers("tensor_counts", ((4, 64) if sharded else ())
                                                  if tensor_counts is None else tensor_counts)]
              + [[layers, w] for w in _whole_numbers("widths", ((64, 128) if sharded else ())
                                                     if widths is None else widths)])
    options = dict(DEFAULT_OPTIMIZER_OPTIONS if optimizer_options is None else optimizer_options)
    check_optimizer(optimizer, options)
    if link is not None and not isinstance(link, CommCost):
        raise ValueError(f"link must be a CommCost or None, got {type(link).__name__}")
    if not isinstance(compute_link, CommCost):
        raise ValueError(f"compute_link must be a CommCost, got {type(compute_link).__name__}")
    job = {"reducer": reducer, "ranks": ranks, "counts": counts, "layers": layers, "width": width, "batch": batch,
           "steps": steps, "warmup": warmup, "rounds": rounds, "threads": threads, "shapes": shapes,
           "optimizer": {"name": optimizer, "options": options}, "link": None if link is None else link.to_dict(),
           "compute": {"counts": compute, "layers": compute_layers, "width": compute_width, "batch": compute_batch,
                       "link": compute_link.to_dict()} if compute else None}
    rows = _run_job(job, timeout)
    samples = tuple(Sample(**row) for row in rows["channel"])
    per_step, per_message, per_tensor, per_byte = fit_reducer_cost(samples)
    compute_samples = tuple(Sample(**row) for row in rows["compute"])
    message_compute = (fit_overhead([s.messages for s in compute_samples], [s.excess for s in compute_samples])[1]
                       if compute_samples else 0.0)
    host = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    model = {"layers": layers, "width": width, "batch": batch, "bias": False, "steps": steps, "warmup": warmup,
             "rounds": rounds, "message_counts": counts, "shapes": shapes,
             "optimizer": {"name": optimizer, "options": options},
             "compute": None if not compute else {"layers": compute_layers, "width": compute_width,
                                                  "batch": compute_batch, "message_counts": compute,
                                                  "link": compute_link.to_dict()}}
    return ReducerCalibration(reducer=reducer, per_step=per_step, per_message=per_message, samples=samples,
                              message_compute=message_compute, compute_samples=compute_samples,
                              link=None if link is None else {"emulated": True, "cost": link.to_dict()},
                              torch_version=torch.__version__, backend="gloo", ranks=ranks, threads=threads, host=host,
                              date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                              model=model, per_tensor=per_tensor, per_byte=per_byte)


def _whole_numbers(label: str, values: Sequence[int]) -> list[int]:
    """``values`` as a list of whole numbers ``>= 1``; else a ``ValueError`` naming ``label``."""
    chosen = list(values)
    if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in chosen):
        raise ValueError(f"{label} must hold whole numbers >= 1, got {chosen}")
    return chosen


def check_optimizer(name: str, options: dict[str, Any]) -> None:
    """A ``ValueError`` naming the fault unless ``torch.optim.<name>(params, **options)`` makes
    an optimiser and ``options`` is JSON (the ranks get it as JSON)."""
    torch = require_torch()
    _optimizer_class(torch, name)
    try:
        json.dumps(options, allow_nan=False)
    except (TypeError, ValueError):
        raise ValueError(f"optimizer_options must be JSON numbers, strings and lists, got {options!r}") from None
    try:
        make_optimizer(name, options, [torch.zeros(1, requires_grad=True)])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"optimizer {name}({', '.join(f'{k}={v!r}' for k, v in options.items())}): {exc}") from None


def _message_counts(label: str, counts: Sequence[int], layers: int) -> list[int]:
    """``counts`` sorted, each a divisor of ``layers``, at least two of them; else a ``ValueError``."""
    chosen = sorted({int(m) for m in counts})
    if len(chosen) < 2 or chosen[0] < 1 or chosen[-1] > layers or any(layers % m for m in chosen):
        raise ValueError(f"{label} must hold at least two divisors of layers ({layers}), got {list(counts)}")
    return chosen


def _run_job(job: dict[str, Any], timeout: float) -> dict[str, list[dict[str, float]]]:
    """Run every rank of ``job`` as a process of its own and return rank 0's samples; when a
    rank fails, or on Ctrl-C, stop every rank (none is left behind). The samples are
    ``{"channel": [...], "compute": [...]}``, one dict per :class:`Sample`."""
    with tempfile.TemporaryDirectory() as scratch:
        job = dict(job, port=free_port(), out=str(Path(scratch) / "samples.json"))
        run_rank_processes(__name__, job, job["ranks"], what=f"the {job['reducer']} reducer calibration",
                           timeout=timeout)
        return json.loads(Path(job["out"]).read_text())


def _synthetic_model(torch: Any, layers: int, width: int, groups: int | None = None) -> Any:
    """``layers`` bias-free linear layers; with ``groups``, in that many sequential groups
    (FSDP2's units)."""
    torch.manual_seed(0)
    nn = torch.nn
    stack = [nn.Linear(width, width, bias=False) for _ in range(layers)]
    if groups is None:
        return nn.Sequential(*stack)
    per = layers // groups
    return nn.Sequential(*[nn.Sequential(*stack[g * per:(g + 1) * per]) for g in range(groups)])


def _mean_step(step: Any, warmup: int, steps: int, dist: Any) -> float:
    for _ in range(warmup):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def _rank(rank: int, job: dict[str, Any]) -> None:
    torch = require_torch()
    import torch.distributed as dist

    join_gloo(rank, job["ranks"], job["port"], job["threads"])
    link = None if job["link"] is None else cost_from_dict(job["link"])
    x = torch.randn(job["batch"], job["width"], generator=torch.Generator().manual_seed(rank))
    rows: dict[str, list[dict[str, float]]] = {"channel": [], "compute": []}
    wide = None if job["compute"] is None else dict(job, **job["compute"])
    try:
        for _ in range(job["rounds"]):
            plain = _plain_step(torch, job, x, dist)
            for count in job["counts"]:
                messages, step, held, nbytes = _REDUCER_STEPS[job["reducer"]](torch, dist, job, x, count, link)
                rows["channel"].append({"messages": messages, "step": step, "plain": plain, "link": held,
                                        "tensors": job["layers"], "nbytes": nbytes})
            # The shape regime: one message per step, other numbers of tensors and bytes.
            for layers, width in job["shapes"]:
                shaped = dict(job, layers=layers, width=width)
                shaped_x = torch.randn(job["batch"], width, generator=torch.Generator().manual_seed(rank))
                shaped_plain = _plain_step(torch, shaped, shaped_x, dist)
                messages, step, held, nbytes = _REDUCER_STEPS[job["reducer"]](torch, dist, shaped, shaped_x, 1, link)
                rows["channel"].append({"messages": messages, "step": step, "plain": shaped_plain, "link": held,
                                        "tensors": layers, "nbytes": nbytes})
            if wide is None:
                continue
            # The compute regime: only the last message's link time follows the backward.
            wide_x = torch.randn(wide["batch"], wide["width"], generator=torch.Generator().manual_seed(rank))
            wide_link = cost_from_dict(wide["link"])
            plain = _plain_step(torch, wide, wide_x, dist)
            for count in wide["counts"]:
                messages, step, held, nbytes = _REDUCER_STEPS[job["reducer"]](torch, dist, wide, wide_x, count,
                                                                              wide_link)
                rows["compute"].append({"messages": messages, "step": step, "plain": plain,
                                        "link": held / messages if messages else 0.0, "tensors": wide["layers"],
                                        "nbytes": nbytes})
        if rank == 0:
            write_json_atomic(job["out"], rows)
        dist.barrier()
    except BaseException:
        dist.destroy_process_group()
        raise
    leave_rank()


def make_optimizer(name: str, options: Mapping[str, Any], parameters: Any) -> Any:
    """``torch.optim.<name>(parameters, **options)``: a training job's optimiser, as a
    calibration runs it (:func:`check_optimizer` says what is wrong with ``name`` or
    ``options`` in one line)."""
    return _optimizer_class(require_torch(), name)(parameters, **options)


def _optimizer_class(torch: Any, name: Any) -> Any:
    """``torch.optim.<name>``, an optimiser class; one line naming ``name`` otherwise."""
    kind = getattr(torch.optim, name, None) if isinstance(name, str) else None
    if not (isinstance(kind, type) and issubclass(kind, torch.optim.Optimizer)):
        raise ValueError(f"optimizer {name!r}: not an optimiser class of torch.optim (SGD, Adam, AdamW, ...)")
    return kind


def _optimizer(job: dict[str, Any], parameters: Any) -> Any:
    """The job's optimiser over ``parameters``."""
    return make_optimizer(job["optimizer"]["name"], job["optimizer"]["options"], parameters)


def _plain_step(torch: Any, job: dict[str, Any], x: Any, dist: Any) -> float:
    model = _synthetic_model(torch, job["layers"], job["width"])
    optimizer = _optimizer(job, model.parameters())

    def step() -> None:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
    return _mean_step(step, job["warmup"], job["steps"], dist)


def _plan_step(torch: Any, dist: Any, job: dict[str, Any], x: Any, count: int,
               link: CommCost | None) -> tuple[float, float, float, float]:
    from fusionopt.integrations._plan_reducer import PlanReducer

    model = _synthetic_model(torch, job["layers"], job["width"])
    named = [(name, p.numel() * p.element_size()) for name, p in model.named_parameters()]
    profile = Profile.from_arrays([s for _, s in named], [0.0] * len(named), [0.0] * len(named),
                                  [name for name, _ in named])
    per = job["layers"] // count
    plan = Plan.from_cuts(profile, [(j + 1) % per == 0 for j in range(len(named) - 1)])
    optimizer = _optimizer(job, model.parameters())

    def step() -> None:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
    with PlanReducer(model, plan, profile, link=link):
        seconds = _mean_step(step, job["warmup"], job["steps"], dist)
    held = 0.0 if link is None else sum(float(link(m.nbytes)) for m in plan.messages)
    return float(plan.num_messages), seconds, held, float(sum(m.nbytes for m in plan.messages))


def _ddp_step(torch: Any, dist: Any, job: dict[str, Any], x: Any, count: int,
              link: CommCost | None) -> tuple[float, float, float, float]:
    model = _synthetic_model(torch, job["layers"], job["width"])
    layer_bytes = job["width"] * job["width"] * 4
    # Every bucket, the first too, closes at the cap: layers / count layers each.
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=layer_bytes * (job["layers"] // count) / 2**20)
    held = EmulatedLink(link if link is not None else AlphaBeta(0.0, 0.0))
    ddp.register_comm_hook(None, ddp_comm_hook(held))
    optimizer = _optimizer(job, ddp.parameters())

    def step() -> None:
        optimizer.zero_grad()
        ddp(x).sum().backward()
        optimizer.step()
    return _held_steps(step, held, job, dist)


def _fsdp2_step(torch: Any, dist: Any, job: dict[str, Any], x: Any, count: int,
                link: CommCost | None) -> tuple[float, float, float, float]:
    from torch.distributed.fsdp import fully_shard

    model = _synthetic_model(torch, job["layers"], job["width"], groups=count)
    for group in model:
        fully_shard(group, reshard_after_forward=False)
    fully_shard(model, reshard_after_forward=False)
    held = EmulatedLink(link if link is not None else AlphaBeta(0.0, 0.0))
    emulate_fsdp2(model, held)
    optimizer = _optimizer(job, model.parameters())

    def step() -> None:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
    return _held_steps(step, held, job, dist)


def _held_steps(step: Any, link: EmulatedLink, job: dict[str, Any],
                dist: Any) -> tuple[float, float, float, float]:
    """Messages per step, the mean step, the link's seconds and its bytes per step, counted on
    ``link``'s log over the timed steps (after the warm-up: DDP rebuilds its buckets after
    the first step)."""
    for _ in range(job["warmup"]):
        step()
    link.reset()
    seconds = _mean_step(step, 0, job["steps"], dist)
    holds = list(link.log)
    return (len(holds) / job["steps"], seconds, sum(h.end - h.start for h in holds) / job["steps"],
            sum(h.nbytes for h in holds) / job["steps"])


_REDUCER_STEPS = {"plan": _plan_step, "ddp": _ddp_step, "fsdp2": _fsdp2_step}


if __name__ == "__main__":            # one rank of a calibration job
    _rank(int(sys.argv[2]), json.loads(sys.argv[1]))
