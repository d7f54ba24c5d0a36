"""What every rank runs: a :class:`Job` (problem, plan, options), its JSON form and its hashes.

A job travels to per-rank processes as JSON (``python -m fusionopt.executor JOB.json``).
Before the first step the ranks exchange two SHA-256 digests, of the plan and of the run
settings, and stop with :class:`~fusionopt.executor.PlanMismatchError` if any rank
disagrees: ranks that run different plans would otherwise wait for one another forever or
sum unrelated bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Mapping

from fusionopt.executor._communicator import check_backend
from fusionopt.model._cost import check_flag, cost_from_dict
from fusionopt.model._decoupled_plan import DECOUPLED_SCHEMA, DecoupledPlan
from fusionopt.model._decoupled import Decoupled
from fusionopt.executor._layout import check_wire_ratio
from fusionopt.executor._programs import ENCODED_PATTERNS
from fusionopt.model._encoding import Cheapest, Encoded, encoding_table
from fusionopt.model._plan import Plan
from fusionopt.model._powersgd import PowerSGD
from fusionopt.model._problem import Problem
from fusionopt.model._profile import Profile
from fusionopt.model._ps import ParameterServer
from fusionopt.model._ps_plan import PSPLAN_SCHEMA, PSPlan
from fusionopt.model._sharded_plan import SHARDED_SCHEMA, ShardedPlan
from fusionopt.model._sharded import FullySharded

# The patterns the ranks run, and the extensions.
RUN_PATTERNS = ("all-reduce", "decoupled", "fully-sharded", "ps")
RUN_EXTENSIONS = ("decoupled", "fully_sharded", "ps", "exact_tensors", "compressor")

JOB_SCHEMA = "fusionopt.executor.job"
COMPUTE_MODES = ("host", "spin", "gemm")
JOB_VERSION = 1
FAULT_KINDS = ("drop", "corrupt", "stall")


@dataclass(frozen=True)
class Fault:
    """A deliberate fault, to show that the executor's checks catch it (tests only).

    ``kind``: ``"drop"`` (rank ``rank`` keeps its own values for the first half of message
    ``message`` in step ``step``, as if its reduced chunk were lost), ``"corrupt"`` (it flips
    a bit of one word of that message after the reduction) or ``"stall"`` (it never joins
    that message's all-reduce, so the others time out).

    >>> Fault("corrupt", rank=1, message=2)
    Fault(kind='corrupt', rank=1, message=2, step=0)
    >>> Fault("lose", rank=0, message=0)
    Traceback (most recent call last):
    ...
    ValueError: unknown fault 'lose': choose one of drop, corrupt, stall
    """

    kind: str
    rank: int
    message: int
    step: int = 0

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {self.kind!r}: choose one of {', '.join(FAULT_KINDS)}")
        for label in ("rank", "message", "step"):
            value = getattr(self, label)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"fault {label} must be an integer >= 0, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "rank": self.rank, "message": self.message, "step": self.step}


def _positive_int(label: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{label} must be an integer >= {minimum}, got {value!r}")
    return value


def _positive_float(label: str, value: Any, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{label} must be a finite number {bound}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Job:
    """One run of a plan, as every rank executes it.

    Attributes
    ----------
    problem : Problem
        The plain model (MODEL.md sections 1 to 4), a decoupled all-reduce
        (``pattern=Decoupled(...)``, MODEL.md 8.1), a fully sharded problem (``pattern=FullySharded(...)``,
        MODEL.md 8.2) or a parameter server (``pattern=ParameterServer(...)``, section 6); the
        executor emulates no other extension. An all-reduce, fully sharded or decoupled
        problem's collectives travel in the encodings its costs price them in (section 2.2, tensors kept
        exact included; :mod:`fusionopt.executor._layout` says how), and an all-reduce's messages
        that the model sends through its ``compressor`` (torch's PowerSGD hook, section 2.4) as
        the hook sends them (:mod:`fusionopt.executor._powersgd`).
    plan : Plan, DecoupledPlan, ShardedPlan or PSPlan
        The plan type of the problem's pattern.
    iterations, warmup : int
        Timed steps, and steps run first and not timed.
    time_scale : float
        Emulated compute runs ``time_scale`` times the profile's seconds.
    timeout : float
        Seconds a collective may take before the run fails naming it.
    verify : bool
        Check every byte of every tensor after every step.
    fault : Fault or None
        A deliberate fault (tests of the checks).
    emulate_link : bool
        GPU backend with one device: hold the stream for ``c(S)`` per message (results are
        labelled emulated).
    compute : {"host", "spin", "gemm"}
        How compute is emulated: ``"host"``, by the host sleeping until each deadline (every
        backend; :mod:`fusionopt.executor._runner`); ``"spin"`` or ``"gemm"``, by device work
        queued on a compute stream (``nccl`` only; :mod:`fusionopt.executor._streams`).
    """

    problem: Problem
    plan: Plan
    iterations: int = 10
    warmup: int = 2
    time_scale: float = 1.0
    timeout: float = 60.0
    verify: bool = True
    fault: Fault | None = None
    emulate_link: bool = False
    backend: str = "local"
    compute: str = "host"

    def __post_init__(self) -> None:
        if not isinstance(self.problem, Problem):
            raise ValueError(f"problem must be a Problem, got {type(self.problem).__name__}")
        others = [e for e in self.problem.extensions if e not in RUN_EXTENSIONS]
        if others:
            raise ValueError(
                f"the executor runs the plain model (MODEL.md sections 1-4), and this problem has "
                f"{', '.join(others)} on (of the extensions it runs decoupled, fully_sharded (section 8), "
                "ps (section 6), exact_tensors (section 2.2) and compressor (section 2.4) only)")
        compressor = self.problem.compressor
        if compressor is not None and not isinstance(compressor, PowerSGD):
            raise ValueError(f"the executor sends messages through torch's PowerSGD hook (PowerSGD) only, not "
                             f"compressor {compressor.name!r}")
        if compressor is not None and self.compute != "host":
            raise ValueError(f"compute={self.compute!r} queues the compute on a device stream, and a message through "
                             "PowerSGD runs its products on the communication thread: use compute='host'")
        if "powersgd" in self.problem.profile.metadata:
            raise ValueError(f"profile {self.problem.profile.name!r} is priced for torch's powerSGD_hook "
                             "(PowerSGD.priced): its sizes are prices, not the gradients' bytes; run the gradients' "
                             "profile")
        pattern = self.problem.pattern
        self._check_encodings()
        if pattern.name not in RUN_PATTERNS:
            raise ValueError(f"the executor does not run {pattern.article()} {pattern.words} problem: it runs "
                             f"{', '.join(RUN_PATTERNS)} plans")
        if not isinstance(self.plan, pattern.plan_type):
            raise ValueError(f"plan must be a {pattern.plan_type.__name__} for {pattern.article()} {pattern.words} "
                             f"problem, got {type(self.plan).__name__}")
        check_flag("verify", self.verify)
        check_flag("emulate_link", self.emulate_link)
        check_backend(self.backend)
        if self.fault is not None and not isinstance(self.fault, Fault):
            raise ValueError(f"fault must be a Fault or None, got {self.fault!r}")
        _positive_int("iterations", self.iterations, 1)
        _positive_int("warmup", self.warmup, 0)
        _positive_float("time_scale", self.time_scale, allow_zero=True)
        _positive_float("timeout", self.timeout)
        if self.compute not in COMPUTE_MODES:
            raise ValueError(f"unknown compute mode {self.compute!r}: choose one of {', '.join(COMPUTE_MODES)}")
        if self.compute != "host" and self.pattern != "all-reduce":
            raise ValueError(f"compute={self.compute!r} runs all-reduce plans only; a {self.pattern} plan "
                             "runs with compute='host'")
        if self.compute != "host" and self.backend != "nccl":
            raise ValueError(f"compute={self.compute!r} queues device work: it needs the nccl backend, "
                             f"not {self.backend!r} (use compute='host')")

    def _check_encodings(self) -> None:
        """Refuse, in one line, encodings the ranks cannot send (MODEL.md section 2.2;
        :mod:`fusionopt.executor._layout`)."""
        pattern = self.problem.pattern
        encoded = [cost for cost in pattern.costs if isinstance(cost, (Encoded, Cheapest))]
        if not encoded:
            return
        if pattern.name not in ENCODED_PATTERNS:
            raise ValueError(f"the executor sends the collectives of {pattern.article()} {pattern.words} problem as "
                             "they are: a cost with encodings (MODEL.md section 2.2) runs on all-reduce, fully "
                             "sharded and decoupled problems; leave the encodings out")
        for cost in encoded:
            for e in encoding_table(cost).values():
                check_wire_ratio(e)

    @property
    def steps(self) -> int:
        return self.warmup + self.iterations

    @property
    def pattern(self) -> str:
        """``"all-reduce"``, ``"decoupled"`` or ``"fully-sharded"``."""
        return self.problem.pattern.name

    def scaled_problem(self) -> Problem:
        """The problem the ranks actually run: compute times multiplied by ``time_scale``."""
        problem = self.problem
        profile = scale_compute(problem.profile, self.time_scale)
        return Problem(profile, sync=problem.sync, pattern=problem.pattern, exact_tensors=problem.exact_tensors,
                       compressor=problem.compressor)

    # ------------------------------------------------------------------ JSON and hashes
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": JOB_SCHEMA, "version": JOB_VERSION, "backend": self.backend,
            "profile": self.problem.profile.to_dict(), "cost": self.problem.cost.to_dict(),
            "sync": self.problem.sync, "plan": self.plan.to_dict(),
            "iterations": self.iterations, "warmup": self.warmup, "time_scale": self.time_scale,
            "timeout": self.timeout, "verify": self.verify,
            "fault": None if self.fault is None else self.fault.to_dict(),
            "emulate_link": self.emulate_link, "compute": self.compute,
            **_pattern_to_dict(self.problem),
            **({"exact_tensors": list(self.problem.exact_tensors)} if self.problem.exact_tensors else {}),
            **({"compressor": {"name": self.problem.compressor.name, **self.problem.compressor.to_dict()}}
               if self.problem.compressor is not None else {}),
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, source: str = "job") -> "Job":
        if not isinstance(doc, Mapping) or doc.get("schema") != JOB_SCHEMA:
            raise ValueError(f"{source}: not a {JOB_SCHEMA} document")
        if doc.get("version") != JOB_VERSION:
            raise ValueError(f"{source}: unsupported job version {doc.get('version')!r}")
        profile = Profile.from_dict(doc["profile"], source=f"{source}.profile")
        problem = _problem_from_dict(doc, profile, source)
        plan = _plan_from_dict(doc["plan"], source=f"{source}.plan")
        fault = None if doc.get("fault") is None else Fault(**doc["fault"])
        return cls(problem, plan, iterations=doc["iterations"], warmup=doc["warmup"],
                   time_scale=doc["time_scale"], timeout=doc["timeout"], verify=doc["verify"],
                   fault=fault, emulate_link=doc.get("emulate_link", False),
                   backend=doc.get("backend", "local"), compute=doc.get("compute", "host"))

    def digests(self) -> tuple[str, str]:
        """SHA-256 of the plan, and of every other setting that shapes the collectives."""
        doc = self.to_dict()
        plan = _digest(doc.pop("plan"))
        doc.pop("fault")        # a fault is injected on one rank only, by design
        return plan, _digest(doc)


def _pattern_to_dict(problem: Problem) -> dict[str, Any]:
    """The pattern's part of a job document (nothing for the all-reduce, whose cost is the
    document's ``cost``)."""
    pattern = problem.pattern
    return {} if pattern.extension is None else {pattern.extension: pattern.to_dict()}


def _problem_from_dict(doc: Mapping[str, Any], profile: Profile, source: str) -> Problem:
    for cls in (Decoupled, FullySharded, ParameterServer):
        part = doc.get(cls.extension)
        if part is not None:
            return Problem(profile, sync=doc["sync"], pattern=cls.from_dict(part, source=f"{source}.{cls.extension}"))
    return Problem(profile, cost_from_dict(doc["cost"], source=f"{source}.cost"), sync=doc["sync"],
                   exact_tensors=doc.get("exact_tensors", ()), compressor=_compressor_from_dict(doc, source))


def _compressor_from_dict(doc: Mapping[str, Any], source: str) -> PowerSGD | None:
    """A job document's compressor (torch's PowerSGD hook), or None; one line where it is
    another or its fields are wrong."""
    part = doc.get("compressor")
    if part is None:
        return None
    if not isinstance(part, Mapping) or part.get("name") != PowerSGD.name:
        raise ValueError(f"{source}.compressor: the executor runs torch's PowerSGD hook (name 'powersgd') only")
    try:
        return PowerSGD(**{k: v for k, v in part.items() if k != "name"})
    except TypeError as exc:
        raise ValueError(f"{source}.compressor: {exc}") from None


def _plan_from_dict(doc: Mapping[str, Any], *, source: str) -> Plan | DecoupledPlan | ShardedPlan:
    schema = doc.get("schema") if isinstance(doc, Mapping) else None
    if schema == DECOUPLED_SCHEMA:
        return DecoupledPlan.from_dict(doc, source=source)
    if schema == SHARDED_SCHEMA:
        return ShardedPlan.from_dict(doc, source=source)
    if schema == PSPLAN_SCHEMA:
        return PSPlan.from_dict(doc, source=source)
    return Plan.from_dict(doc, source=source)


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def scale_compute(profile: Profile, factor: float) -> Profile:
    """``profile`` with its forward, backward and update times multiplied by ``factor``.

    >>> p = scale_compute(Profile.from_arrays([8], [1e-3], [2e-3]), 0.5)
    >>> p.F, p.B
    (0.0005, 0.001)
    """
    if factor == 1.0:
        return profile
    return profile.scaled(factor)
