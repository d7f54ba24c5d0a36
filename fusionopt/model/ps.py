"""The parameter-server extension (MODEL.md section 6): its configuration, costs and plans.

A data-parallel step on a parameter server (PS) moves every gradient byte twice: workers
**push** gradients up to the servers, the servers apply the optimiser, and workers **pull**
the new parameters down. fusionopt models the two directions as two channels, each running
its own ordered messages one at a time (MODEL.md section 3), and judges them with
:func:`fusionopt.model.simulate` on a :class:`~fusionopt.model.problem.Problem` built with
``ps=ParameterServer(...)``:

* :func:`ps_cost`: the BytePS-style cost of one direction for ``P`` workers and ``K``
  servers, co-located with the workers or not;
* :class:`ParameterServer`: the push and pull costs, the server's update time, and the
  partitioned-compute option (iPart) with its overhead ``delta`` per compute piece;
* :class:`PSPlan`: a push :class:`~fusionopt.model.plan.Plan` and a pull ``Plan`` of the
  same profile, serialisable to JSON, with the byte-offset encoding searches use
  (:meth:`PSPlan.from_offsets`).

The timing rules are stated in :func:`fusionopt.model.ps_timing.simulate_ps`.

Examples
--------
>>> from fusionopt.model.profile import Profile
>>> ps = ParameterServer.from_network("10gbe", workers=8, servers=8, colocated=True)
>>> round(ps.push.beta * 1.25e9, 9)                  # (P - 1) / K of the link's g
0.875
>>> p = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
>>> plan = PSPlan.from_groups(p, push=[[2], [1], [0]], pull=[[0], [1], [2]])
>>> plan.validate(p).num_messages
6
"""

from __future__ import annotations

import bisect
import json
import math
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from fusionopt.model._io import read_json_document, write_json_atomic
from fusionopt.model.collectives import network_link
from fusionopt.model.cost import AlphaBeta, CommCost, check_param
from fusionopt.model.plan import PLAN_SCHEMA, PLAN_VERSION, Chunk, Message, Plan
from fusionopt.model.profile import Profile

__all__ = ["PSPLAN_SCHEMA", "PSPLAN_VERSION", "ParameterServer", "PSPlan", "ps_cost", "stream_offsets"]

PSPLAN_SCHEMA = "fusionopt.psplan"
PSPLAN_VERSION = 1
DIRECTIONS = ("push", "pull")


def _count(label: str, value: object) -> int:
    # bool is an int subclass, but servers=True is a mistake, not one server.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{label} must be an integer >= 1, got {value!r}")
    if value < 1:
        raise ValueError(f"{label} must be >= 1, got {value!r}")
    return int(value)


def _seconds(label: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{label} must be a number, got {value!r}")
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{label} must be finite, got {value!r}")
    if value < 0:
        raise ValueError(f"{label} must be >= 0, got {value!r}")
    return value


def ps_cost(workers: int, servers: int, latency: float, inverse_bandwidth: float, *,
            server_inverse_bandwidth: float | None = None, colocated: bool = False) -> AlphaBeta:
    """Cost of one PS direction (a push, or a pull) of a message over ``P`` workers and ``K`` servers.

    The message's bytes are spread evenly over the ``K`` servers (BytePS's partitioning), the
    requests to the servers go out in parallel, and the slowest link sets the time
    (Jiang et al., BytePS, OSDI 2020, section 3). A message of ``S`` bytes costs
    ``alpha + beta S`` with ``alpha = a`` (one startup per message) and

    * **separate servers** (``colocated=False``): a worker sends (or receives) ``S`` bytes
      on its link, a server receives (or sends) ``P S / K`` on its own:
      ``beta = max(g, P g_server / K)``, MODEL.md section 2's ``beta_eff``;
    * **co-located servers** (``colocated=True``, ``K <= P``): the servers run on ``K`` of
      the worker machines, on the same links ``g``. A server receives ``S / K`` from each of
      the ``P - 1`` other workers (its own worker's share stays local); a worker sends
      ``S`` (``(K - 1) / K * S`` on a machine that holds a server), so
      ``beta = g (P - 1) / K`` for every ``K <= P`` (``g (P - 1) / P`` at ``K = P``: BytePS's
      figure for co-located PS, one direction). With ``P = 1`` nothing crosses a link and
      the cost is zero, as for all-reduce.

    A pull mirrors a push byte for byte, so one formula prices both directions. Links are
    full duplex and the two directions are separate channels. With co-located servers a
    machine's uplink carries both its worker's pushes and its server's pull replies; the
    model does not charge that sharing (our simplification: exact when pushes and pulls do
    not overlap in time, optimistic otherwise).

    Parameters
    ----------
    workers : int
        ``P >= 1``.
    servers : int
        ``K >= 1`` (and ``K <= P`` when co-located).
    latency : float
        Per-message startup ``a`` in seconds, ``>= 0``.
    inverse_bandwidth : float
        A worker link's inverse bandwidth ``g`` in seconds per byte, ``>= 0``.
    server_inverse_bandwidth : float, optional
        A server link's ``g_server`` (separate servers only); default ``g``.
    colocated : bool
        Servers on worker machines (BigDL, BytePS co-located mode) or on machines of their own.

    Returns
    -------
    AlphaBeta

    Examples
    --------
    >>> c = ps_cost(8, 2, latency=1e-5, inverse_bandwidth=1e-9)        # 8 workers, 2 servers
    >>> round(c.alpha, 12), round(c.beta, 15)                             # servers bottleneck
    (1e-05, 4e-09)
    >>> round(ps_cost(8, 8, 1e-5, 1e-9, colocated=True).beta, 15)
    8.75e-10
    >>> ps_cost(8, 0, 1e-5, 1e-9)
    Traceback (most recent call last):
    ...
    ValueError: servers must be >= 1, got 0
    """
    p = _count("workers", workers)
    k = _count("servers", servers)
    a = check_param("latency", latency)
    g = check_param("inverse_bandwidth", inverse_bandwidth)
    if colocated:
        if server_inverse_bandwidth is not None:
            raise ValueError("co-located servers share the workers' links: give inverse_bandwidth only, "
                             "not server_inverse_bandwidth")
        if k > p:
            raise ValueError(f"co-located servers run on worker machines: servers ({k}) must be <= workers ({p})")
        if p == 1:
            return AlphaBeta(0.0, 0.0)              # one machine: nothing crosses a link
        return AlphaBeta(a, g * (p - 1) / k)
    g_server = g if server_inverse_bandwidth is None else check_param("server_inverse_bandwidth",
                                                                       server_inverse_bandwidth)
    return AlphaBeta(a, max(g, p * g_server / k))


@dataclass(frozen=True, eq=False)
class ParameterServer:
    """The parameter-server option of a :class:`~fusionopt.model.problem.Problem`.

    Parameters
    ----------
    push : CommCost
        ``c_push(S)``: seconds for a push message of ``S`` bytes on the push (up) channel.
    pull : CommCost, optional
        ``c_pull(S)`` on the pull (down) channel; default the push cost.
    update_per_byte : float
        Server update time in seconds per byte of a push message, ``>= 0``: the optimiser
        step the servers apply to a pushed message's bytes once every worker's copy has
        arrived. With the bytes spread over ``K`` servers updating in parallel, this is one
        server's seconds per byte divided by ``K``.
    update_overhead : float
        Seconds added to the server update of every push message, ``>= 0``.
    partition_compute : bool
        iPart's partitioned compute: a tensor pushed (pulled) in several chunks has its
        backward (forward) split into pieces aligned with those chunks, each piece costing
        its byte share of the tensor's time plus ``delta``
        (:func:`~fusionopt.model.ps_timing.simulate_ps` states the rule). Off: a tensor's
        chunks are all ready when its backward ends, and its forward waits for all of them.
    delta : float
        Seconds of overhead per compute piece of a split tensor, ``>= 0``.
    workers, servers : int, optional
        ``P`` and ``K`` when the costs come from :meth:`from_links`; informative otherwise.
    colocated : bool, optional
        Whether the servers run on worker machines, when known.

    Examples
    --------
    >>> ps = ParameterServer(AlphaBeta(1e-4, 1e-9), update_per_byte=1e-10)
    >>> ps.pull is ps.push, round(ps.server_update(1e6), 9)
    (True, 0.0001)
    >>> ParameterServer(AlphaBeta(1e-4, 1e-9), partition_compute=True, delta=-1e-6)
    Traceback (most recent call last):
    ...
    ValueError: delta must be >= 0, got -1e-06
    """

    push: CommCost
    pull: CommCost | None = None
    update_per_byte: float = 0.0
    update_overhead: float = 0.0
    partition_compute: bool = False
    delta: float = 0.0
    workers: int | None = None
    servers: int | None = None
    colocated: bool | None = None

    def __post_init__(self) -> None:
        for label in ("push", "pull"):
            cost = getattr(self, label)
            if label == "pull" and cost is None:
                object.__setattr__(self, "pull", self.push)
            elif not isinstance(cost, CommCost):
                raise ValueError(f"{label} cost must be a CommCost (e.g. AlphaBeta), got {type(cost).__name__}")
        for label in ("update_per_byte", "update_overhead", "delta"):
            object.__setattr__(self, label, _seconds(label, getattr(self, label)))
        if not isinstance(self.partition_compute, (bool, np.bool_)):
            raise ValueError(f"partition_compute must be True or False, got {self.partition_compute!r}")
        object.__setattr__(self, "partition_compute", bool(self.partition_compute))
        for label in ("workers", "servers"):
            if getattr(self, label) is not None:
                object.__setattr__(self, label, _count(label, getattr(self, label)))
        if self.colocated is not None and not isinstance(self.colocated, (bool, np.bool_)):
            raise ValueError(f"colocated must be True, False or None, got {self.colocated!r}")
        if self.colocated and None not in (self.workers, self.servers) and self.servers > self.workers:
            raise ValueError(f"co-located servers run on worker machines: servers ({self.servers}) "
                             f"must be <= workers ({self.workers})")

    @classmethod
    def from_links(cls, workers: int, servers: int, *, latency: float, inverse_bandwidth: float,
                   server_inverse_bandwidth: float | None = None, colocated: bool = False,
                   **options: Any) -> "ParameterServer":
        """Push and pull costs from :func:`ps_cost` (both directions alike).

        ``options``: ``update_per_byte``, ``update_overhead``, ``partition_compute``, ``delta``.

        >>> ps = ParameterServer.from_links(4, 2, latency=1e-5, inverse_bandwidth=1e-9)
        >>> ps.push == ps.pull, round(ps.pull.beta, 15), ps.servers
        (True, 2e-09, 2)
        """
        cost = ps_cost(workers, servers, latency, inverse_bandwidth,
                       server_inverse_bandwidth=server_inverse_bandwidth, colocated=colocated)
        return cls(cost, cost, workers=workers, servers=servers, colocated=bool(colocated), **options)

    @classmethod
    def from_network(cls, name: str, workers: int, servers: int, *, colocated: bool = False,
                     **options: Any) -> "ParameterServer":
        """:meth:`from_links` on a network preset's link (:func:`~fusionopt.model.collectives.network_link`:
        nominal latency, line-rate bandwidth), every machine on that link.

        >>> ps = ParameterServer.from_network("10gbe", 8, 2)
        >>> round(ps.push.alpha * 1e6, 9), round(ps.push.beta * 1.25e9, 9)   # 25 us, P / K
        (25.0, 4.0)
        """
        latency, inverse_bandwidth = network_link(name)
        return cls.from_links(workers, servers, latency=latency, inverse_bandwidth=inverse_bandwidth,
                              colocated=colocated, **options)

    def server_update(self, size: Any) -> Any:
        """Server update time in seconds of a push message of ``size`` bytes (0 for 0 bytes)."""
        sizes = np.asarray(size, dtype=np.float64)
        times = np.where(sizes > 0, self.update_overhead + self.update_per_byte * sizes, 0.0)
        return float(times) if times.ndim == 0 else times

    def __repr__(self) -> str:
        parts = [f"push={self.push!r}"]
        if self.pull is not self.push:
            parts.append(f"pull={self.pull!r}")
        for name in ("update_per_byte", "update_overhead", "partition_compute", "delta",
                     "workers", "servers", "colocated"):
            value = getattr(self, name)
            if value != getattr(ParameterServer, name):
                parts.append(f"{name}={value!r}")
        return f"ParameterServer({', '.join(parts)})"


# ---------------------------------------------------------------------------- streams
def stream_offsets(profile: Profile, direction: str) -> np.ndarray:
    """Where each tensor starts in a direction's byte stream, in bytes, indexed by tensor.

    The **push stream** lays the tensors out in backward order (``n-1`` first), the **pull
    stream** in forward order (``0`` first), each tensor's bytes in ascending order. A
    cut at offset ``x`` of a stream is a message boundary (:meth:`PSPlan.from_offsets`);
    the offsets of every tensor boundary cut the plan into one message per tensor.

    >>> p = Profile.from_arrays([4, 1, 2], [0] * 3, [1] * 3)
    >>> stream_offsets(p, "push").tolist(), stream_offsets(p, "pull").tolist()
    ([3, 2, 0], [0, 4, 5])
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}: choose 'push' or 'pull'")
    sizes = profile.sizes
    if direction == "pull":
        return np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    after = np.cumsum(sizes[::-1])[::-1]           # bytes of tensors i..n-1
    return (after - sizes).astype(np.int64)


def check_offsets(profile: Profile, offsets: Iterable[int], direction: str) -> np.ndarray:
    """The cut offsets of one stream (``direction``: push or pull) as an int64 array, checked
    to be whole numbers of bytes, strictly inside the stream and strictly increasing; a
    ``ValueError`` naming the offset otherwise."""
    total = profile.total_bytes
    values = []
    for k, x in enumerate(offsets):
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral):
            raise ValueError(f"{direction} offset {k} must be a whole number of bytes, got {x!r}")
        values.append(int(x))
    for k, x in enumerate(values):
        if not 0 < x < total:
            raise ValueError(f"{direction} offset {k} ({x}) must lie strictly inside the stream (0, {total})")
        if k and x <= values[k - 1]:
            raise ValueError(f"{direction} offsets must increase strictly: offset {k} ({x}) follows {values[k - 1]}")
    return np.array(values, dtype=np.int64)


def _stream_plan(profile: Profile, offsets: np.ndarray, direction: str) -> Plan:
    order = range(profile.n - 1, -1, -1) if direction == "push" else range(profile.n)
    starts = stream_offsets(profile, direction)
    bounds = offsets.tolist() + [profile.total_bytes]
    messages: list[Message] = []
    current: list[Chunk] = []
    b = 0
    for i in order:
        lo, size = int(starts[i]), int(profile.sizes[i])
        position = lo
        while position < lo + size:
            hi = min(lo + size, bounds[b])
            current.append(Chunk(i, position - lo, hi - lo))
            position = hi
            if position == bounds[b]:
                messages.append(Message(tuple(current)))
                current, b = [], b + 1
    return Plan(tuple(messages))


# ---------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class PSPlan:
    """A parameter-server plan: the ordered messages of the push and of the pull channel.

    Each of ``push`` and ``pull`` is a :class:`~fusionopt.model.plan.Plan` that sends every
    byte of every tensor exactly once. Pushes and pulls run on separate channels, each in
    its own plan order; a pull message waits for the pushes (and server updates) of all its
    bytes, so a pull can never overtake its push in time.

    JSON schema (``version`` 1)::

        {"schema": "fusionopt.psplan", "version": 1,
         "push": [[[tensor, lo, hi], ...], ...],     # push channel order
         "pull": [[[tensor, lo, hi], ...], ...]}     # pull channel order

    Examples
    --------
    One push message after the backward, one pull message before the forward (default PS):

    >>> p = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> plan = PSPlan.from_offsets(p)
    >>> plan.push.groups(), plan.pull.groups()
    ([[2, 1, 0]], [[0, 1, 2]])
    >>> PSPlan.from_json(plan.to_json()) == plan
    True
    >>> PSPlan(plan.push, Plan.from_groups(p, [[0, 1]])).validate(p)
    Traceback (most recent call last):
    ...
    ValueError: pull plan: tensor 't2' (index 2): bytes [0, 2000000) are missing (the tensor is in no message)
    """

    push: Plan
    pull: Plan

    def __post_init__(self) -> None:
        for label in DIRECTIONS:
            if not isinstance(getattr(self, label), Plan):
                raise ValueError(f"the {label} plan must be a Plan, got {type(getattr(self, label)).__name__}")
            if getattr(self, label).has_release:
                raise ValueError(f"the {label} plan has release times: the parameter-server model "
                                 "sends each message when its bytes are ready and has no release times")

    # ------------------------------------------------------------------ constructors
    @classmethod
    def mirror(cls, plan: Plan) -> "PSPlan":
        """Pull the messages of ``plan`` as they were pushed: same messages, same order."""
        return cls(plan, plan)

    @classmethod
    def from_groups(cls, profile: Profile, push: Iterable[Iterable[int]],
                    pull: Iterable[Iterable[int]]) -> "PSPlan":
        """Whole tensors: one message per group of forward indices, groups in channel order."""
        return cls(Plan.from_groups(profile, push), Plan.from_groups(profile, pull))

    @classmethod
    def from_offsets(cls, profile: Profile, push: Iterable[int] = (), pull: Iterable[int] = ()) -> "PSPlan":
        """Contiguous messages cut from the push and pull byte streams (:func:`stream_offsets`).

        ``push`` and ``pull`` are strictly increasing byte offsets inside ``(0, total)``: each
        is a message boundary, anywhere, inside a tensor or between two. No offsets is one
        message per direction; every tensor boundary is one message per tensor. Message
        ``k`` holds the stream's bytes between the ``k``-th and ``(k+1)``-th boundary, as one
        chunk per tensor it touches. This is the plan space of iBatch and iPart (partitions
        in the order of each phase) and the input of the fast evaluator
        :func:`~fusionopt.model.ps_timing.offsets_iteration_time`.

        >>> p = Profile.from_arrays([4, 1, 2], [0] * 3, [1] * 3)
        >>> plan = PSPlan.from_offsets(p, push=[1, 5], pull=[4])
        >>> [[(c.tensor, c.lo, c.hi) for c in m.chunks] for m in plan.push.messages]
        [[(2, 0, 1)], [(2, 1, 2), (1, 0, 1), (0, 0, 2)], [(0, 2, 4)]]
        >>> plan.pull.groups()
        [[0], [1, 2]]
        """
        push_offsets = check_offsets(profile, push, "push")
        pull_offsets = check_offsets(profile, pull, "pull")
        return cls(_stream_plan(profile, push_offsets, "push"), _stream_plan(profile, pull_offsets, "pull"))

    @classmethod
    def from_steps(cls, profile: Profile, steps: Iterable[tuple[str, Any]]) -> "PSPlan":
        """A worker's program: ``("push" | "pull", message)`` steps in the order it issues them.

        A message is a :class:`~fusionopt.model.plan.Message` or a sequence of
        ``(tensor, lo, hi)`` chunks. The pushes, in program order, form the push plan and the
        pulls the pull plan (the interleaving of the two does not change the timing: the
        channels are separate). A program that pulls bytes before pushing them would read
        the previous step's parameters, and is rejected naming the step, the tensor and the
        bytes; both plans are then validated.

        >>> p = Profile.from_arrays([100, 50], [0, 0], [1, 1], ["w", "b"])
        >>> plan = PSPlan.from_steps(p, [("push", [(1, 0, 50), (0, 0, 100)]), ("pull", [(0, 0, 100)]),
        ...                             ("pull", [(1, 0, 50)])])
        >>> plan.push.groups(), plan.pull.groups()
        ([[1, 0]], [[0], [1]])
        >>> PSPlan.from_steps(p, [("push", [(1, 0, 50), (0, 0, 40)]), ("pull", [(0, 0, 100)]),
        ...                       ("push", [(0, 40, 100)]), ("pull", [(1, 0, 50)])])
        Traceback (most recent call last):
        ...
        ValueError: step 1 pulls tensor 'w' (index 0) bytes [40, 100) before they are pushed (at step 2)
        """
        program: list[tuple[str, Message]] = []
        for k, step in enumerate(steps):
            try:
                direction, message = step
            except (TypeError, ValueError):
                raise ValueError(f"step {k} must be a (direction, message) pair, got {step!r}") from None
            if direction not in DIRECTIONS:
                raise ValueError(f"step {k}: unknown direction {direction!r}: choose 'push' or 'pull'")
            if not isinstance(message, Message):
                try:
                    message = Message(tuple(c if isinstance(c, Chunk) else Chunk(*c) for c in message))
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"step {k}: {exc}") from None
            program.append((direction, message))
        pushed: dict[int, list[tuple[int, int, int]]] = {}
        for k, (direction, message) in enumerate(program):
            for c in message.chunks:
                if direction == "push":
                    bisect.insort(pushed.setdefault(c.tensor, []), (c.lo, c.hi, k))
                    continue
                gap = _first_gap(pushed.get(c.tensor, []), c.lo, c.hi)
                if gap is not None:
                    later = [j for j, (d, m) in enumerate(program) if j > k and d == "push"
                             and any(x.tensor == c.tensor and x.lo < gap[1] and x.hi > gap[0] for x in m.chunks)]
                    name = profile.names[c.tensor] if c.tensor < profile.n else "?"
                    culprit = f"step {k} pulls tensor {name!r} (index {c.tensor}) bytes [{gap[0]}, {gap[1]})"
                    if later:
                        raise ValueError(f"{culprit} before they are pushed (at step {later[0]})")
                    raise ValueError(f"{culprit}, which no step pushes")
        for direction in DIRECTIONS:
            if not any(d == direction for d, _ in program):
                raise ValueError(f"the program has no {direction} step")
        plan = cls(Plan(tuple(m for d, m in program if d == "push")),
                   Plan(tuple(m for d, m in program if d == "pull")))
        return plan.validate(profile)

    # ------------------------------------------------------------------ structure
    @property
    def num_messages(self) -> int:
        """Messages on both channels together."""
        return self.push.num_messages + self.pull.num_messages

    def validate(self, profile: Profile) -> "PSPlan":
        """Check that each channel sends every byte of every tensor exactly once.

        Returns the plan; ``ValueError`` names the channel, the tensor and the bytes.
        """
        for label in DIRECTIONS:
            try:
                getattr(self, label).validate(profile)
            except ValueError as exc:
                raise ValueError(f"{label} plan: {exc}") from None
        return self

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": PSPLAN_SCHEMA,
            "version": PSPLAN_VERSION,
            "push": self.push.to_dict()["messages"],
            "pull": self.pull.to_dict()["messages"],
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, source: str = "psplan") -> "PSPlan":
        if not isinstance(doc, Mapping):
            raise ValueError(f"{source}: expected a JSON object")
        if doc.get("schema", PSPLAN_SCHEMA) != PSPLAN_SCHEMA:
            raise ValueError(f"{source}: schema is {doc.get('schema')!r}, expected {PSPLAN_SCHEMA!r}")
        if doc.get("version") != PSPLAN_VERSION:
            raise ValueError(f"{source}: unsupported PS plan version {doc.get('version')!r} "
                             f"(this fusionopt reads {PSPLAN_VERSION})")
        parts = {}
        for label in DIRECTIONS:
            if label not in doc:
                raise ValueError(f"{source}: no {label!r} messages")
            parts[label] = Plan.from_dict({"schema": PLAN_SCHEMA, "version": PLAN_VERSION, "messages": doc[label]},
                                          source=f"{source}: {label}")
        return cls(parts["push"], parts["pull"])

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> "PSPlan":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"psplan: malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
        return cls.from_dict(doc)

    def write(self, path: str | Path) -> None:
        """Write the plan as JSON to ``path`` atomically."""
        write_json_atomic(path, self.to_dict())

    @classmethod
    def read(cls, path: str | Path) -> "PSPlan":
        """Read a PS plan JSON file; malformed files raise ``ValueError`` naming the file."""
        return cls.from_dict(read_json_document(path), source=str(path))


def _first_gap(intervals: Sequence[tuple[int, int, int]], lo: int, hi: int) -> tuple[int, int] | None:
    """The first sub-range of ``[lo, hi)`` no interval covers (intervals sorted by start)."""
    covered = lo
    for start, end, _ in intervals:
        if start > covered:
            break
        covered = max(covered, end)
        if covered >= hi:
            return None
    if covered >= hi:
        return None
    next_start = min((start for start, _, _ in intervals if start > covered), default=hi)
    return covered, min(hi, next_start)
