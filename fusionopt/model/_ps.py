"""The parameter-server extension (MODEL.md section 6): its configuration, costs and plans.

A data-parallel step on a parameter server (PS) moves every gradient byte twice: workers
**push** gradients up to the servers, the servers apply the optimiser, and workers **pull**
the new parameters down. fusionopt models the two directions as two channels, each running
its own ordered messages one at a time (MODEL.md section 3), and judges them with
:func:`fusionopt.model.simulate` on a :class:`~fusionopt.model.Problem` built with
``pattern=ParameterServer(...)``:

* :func:`ps_cost`: the BytePS-style cost of one direction for ``P`` workers and ``K``
  servers, co-located with the workers or not;
* :class:`ParameterServer`: the push and pull costs, the server's update time, and the
  partitioned-compute option (iPart) with its overhead ``delta`` per compute piece;
* its plans are :class:`~fusionopt.model.PSPlan` s: a push
  :class:`~fusionopt.model.Plan` and a pull ``Plan`` of the same profile.

The timing rules are stated in :func:`fusionopt.model.simulate_ps`.

Examples
--------
>>> from fusionopt.model import Profile, PSPlan
>>> ps = ParameterServer.from_network("10gbe", workers=8, servers=8, colocated=True)
>>> round(ps.push.beta * 1.25e9, 9)                  # (P - 1) / K of the link's g
0.875
>>> p = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
>>> plan = PSPlan.from_groups(p, push=[[2], [1], [0]], pull=[[0], [1], [2]])
>>> plan.validate(p).num_messages
6
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

import numpy as np

from fusionopt.model._collectives import network_link
from fusionopt.model._bounds import ps_lower_bound
from fusionopt.model._cost import AlphaBeta, CommCost, check_flag, check_param, cost_from_dict
from fusionopt.model._pattern import Pattern
from fusionopt.model._plan import Plan
from fusionopt.model._ps_plan import PSPlan
from fusionopt.model._ps_program import ps_program
from fusionopt.model._ps_timing import simulate_ps
from fusionopt.model._step_program import Program
from fusionopt.model._timeline import Timeline

__all__ = ["ParameterServer", "ps_cost"]


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
    if check_flag("colocated", colocated):
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
class ParameterServer(Pattern):
    """The parameter-server pattern of a :class:`~fusionopt.model.Problem`: its plans
    are :class:`~fusionopt.model.PSPlan` s, its timing
    :func:`~fusionopt.model.simulate_ps`, its bound
    :func:`~fusionopt.model.ps_lower_bound`. The problem's ``cost`` is the push cost.

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
        (:func:`~fusionopt.model.simulate_ps` states the rule). Off: a tensor's
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

    name: ClassVar[str] = "ps"
    words: ClassVar[str] = "parameter-server"
    subject: ClassVar[str] = "the parameter server"
    plan_type: ClassVar[type] = PSPlan
    extension: ClassVar[str] = "ps"

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
        check_flag("partition_compute", self.partition_compute)
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
        """:meth:`from_links` on a network preset's link (:func:`~fusionopt.cost.network_link`:
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

    @property
    def collectives(self) -> dict[str, CommCost]:
        return {"push": self.push, "pull": self.pull}

    def channel_cost(self, given: Any) -> CommCost:
        if given is not None and given is not self.push and given != self.push:
            raise ValueError(f"cost {given!r} differs from the parameter server's push cost {self.push!r}: "
                             "with a parameter server, cost is the push cost; leave it out")
        return self.push

    def check(self, problem: Any) -> None:
        self.refuse_options(problem)

    def require_plan(self, plan: Any) -> None:
        if isinstance(plan, Plan):
            raise ValueError("a parameter-server problem needs a PSPlan (push and pull plans), got Plan; "
                             "PSPlan.mirror(plan) pulls its messages as they were pushed")
        super().require_plan(plan)

    def _simulate(self, problem: Any, plan: PSPlan, *, validate: bool, pieces: list | None) -> Timeline:
        return simulate_ps(problem, plan, validate=validate, pieces=pieces)

    def program(self, problem: Any, plan: PSPlan) -> Program:
        """The step program of ``plan`` (validated): pushes on one channel, pulls on another."""
        plan.validate(problem.profile)
        return ps_program(problem, plan)

    _OPTIONS: ClassVar[tuple[str, ...]] = ("update_per_byte", "update_overhead", "partition_compute", "delta",
                                           "workers", "servers", "colocated")

    def to_dict(self) -> dict[str, Any]:
        return {"push": self.push.to_dict(), "pull": self.pull.to_dict(),
                **{name: getattr(self, name) for name in self._OPTIONS}}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, source: str = "ps") -> "ParameterServer":
        """Rebuild the pattern from its :meth:`to_dict` form; one line naming ``source`` and
        the culprit otherwise."""
        if not isinstance(doc, Mapping):
            raise ValueError(f"{source}: expected a mapping, got {type(doc).__name__}")
        unknown = sorted(set(doc) - {"push", "pull", *cls._OPTIONS})
        if unknown:
            raise ValueError(f"{source}: unknown field(s) {', '.join(unknown)}")
        costs = [cost_from_dict(doc.get(way), source=f"{source}.{way}") for way in ("push", "pull")]
        if doc.get("pull") == doc.get("push"):
            costs[1] = costs[0]
        try:
            return cls(*costs, **{name: doc[name] for name in cls._OPTIONS if name in doc})
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None

    def lower_bound(self, problem: Any, space: str = "any") -> float:
        return ps_lower_bound(problem)

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
