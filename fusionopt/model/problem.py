"""A scheduling problem: a workload, a cost model and a synchronisation rule."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from fusionopt.model.cost import CommCost
from fusionopt.model.decoupled import Decoupled
from fusionopt.model.profile import Profile
from fusionopt.model.ps import ParameterServer
from fusionopt.model.sharded import FullySharded
from fusionopt.model.step_parts import fit_step_parts

SYNC_MODES = ("barrier", "layerwise")
COPY_PLACES = ("channel", "compute")
STEP_PART_RULES = ("refuse", "fit")


def _finite(label: str, value: float, *, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{label} must be a number, got {value!r}")
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{label} must be finite, got {value!r}")
    if value < minimum:
        raise ValueError(f"{label} must be >= {minimum:g}, got {value!r}")
    return float(value)


@dataclass(frozen=True, eq=False)
class Problem:
    """Everything a plan is judged on: ``profile``, communication ``cost`` and ``sync``.

    Parameters
    ----------
    profile : Profile
        The workload (MODEL.md section 1).
    cost : CommCost
        Time of a message of ``S`` bytes on the channel (MODEL.md section 2). With ``ps``
        it is the push channel's cost and may be left out (it defaults to ``ps.push``).
    sync : {"barrier", "layerwise"}
        When the next forward may start (MODEL.md section 4): after every gradient is
        reduced (``"barrier"``: DDP, Horovod, MG-WFBP) or tensor by tensor as each gradient
        is reduced (``"layerwise"``: P3, ByteScheduler, US-Byte). A profile with an
        ``update_lump`` or ``post_backward`` (work that waits for every gradient) takes
        barrier sync only, unless ``step_parts="fit"``.
    step_parts : {"refuse", "fit"}
        What to do with a profile's step parts that the pattern's step has no place for
        (MODEL.md section 4.1): refuse the problem, naming them (default), or fit the profile
        to the step with :func:`~fusionopt.model.step_parts.fit_step_parts` (``post_backward``
        dropped by the decoupled and fully sharded steps, which run no DDP copies;
        ``update_lump``, and under layerwise sync ``post_backward``, spread over the tensors'
        update times in proportion to their bytes), warning once per change (``UserWarning``).
        :attr:`profile` is then the fitted profile. A profile that fits is kept as it is.

    Extensions (MODEL.md section 6; each off by default; with any of them on, the plain
    model's closed forms and the fusion DP no longer apply and :func:`simulate` runs an
    event-driven simulation):

    copy_cost : float
        ``gamma``, seconds per byte to pack a message carrying more than one tensor into a
        fused buffer.
    copy_on : {"channel", "compute"}
        Where packing runs: on the channel, before the message's transfer (default), or on
        the compute stream, right after the backward that makes the message ready (it
        then delays the rest of the backward).
    message_compute : float
        ``eta``, seconds of compute-stream work per message, every message alike (one tensor
        or many): a reducer's hook packing the message and its communication thread taking
        a core from the backward (MODEL.md section 2.1). It runs where packing runs with
        ``copy_on="compute"``, right after the backward that makes the message ready, after
        that packing, and the message is ready when it ends.
    contention : float
        ``kappa >= 1``: compute runs ``kappa`` times slower while a message is in flight
        (collectives take SMs).
    comm_contention : float
        ``mu >= 1``: a message in flight progresses ``mu`` times slower while the compute
        stream computes (compute kernels hold the SMs a collective's kernels need), in both
        its startup and its transfer (MODEL.md section 6). With ``contention`` it makes the
        contention two-way; ``fusionopt calibrate --contention`` measures both on a GPU.
    channels : int
        ``K >= 1`` concurrent channels: up to ``K`` messages in flight, dispatched in plan
        order; each pays its own startup ``alpha`` in full and the bytes of the messages
        in transfer share the bandwidth equally (processor sharing). Needs an affine cost.
    ps : ParameterServer, optional
        A parameter server instead of all-reduce (:mod:`fusionopt.model.ps`): a push and a
        pull channel, server updates and optionally partitioned compute. Plans are then
        :class:`~fusionopt.model.ps_plan.PSPlan` s and ``sync`` applies to the pulls. It does not
        combine with the other extensions.
    decoupled : Decoupled, optional
        A decoupled all-reduce instead (ZeRO-1/2, DeAR; MODEL.md section 8.1,
        :mod:`fusionopt.model.decoupled`): reduce-scatters during the backward, sharded
        updates, all-gathers before the forward. Plans are then
        :class:`~fusionopt.model.decoupled_plan.DecoupledPlan` s; ``sync`` says whether the forward
        waits for every all-gather (``"barrier"``) or for its own tensor's (``"layerwise"``).
        ``cost`` defaults to the all-reduce the two halves make. It does not combine with the
        other extensions, nor with a profile's ``update_lump`` or ``post_backward`` (the
        sharded update is per tensor) unless ``step_parts="fit"``.
    fully_sharded : FullySharded, optional
        Fully sharded data parallelism instead (FSDP, ZeRO-3; MODEL.md section 8.2,
        :mod:`fusionopt.model.sharded`): parameters all-gathered per unit before its forward
        and its backward, gradients reduce-scattered per unit, an optional memory cap. Plans
        are then :class:`~fusionopt.model.sharded_plan.ShardedPlan` s. The step has its own order
        (forward, backward, optimiser), so ``sync`` stays ``"barrier"``; ``cost`` defaults to
        the all-reduce the two collectives make. It does not combine with the other
        extensions, nor with a profile's ``post_backward`` (DDP's copies into ``.grad``) unless
        ``step_parts="fit"``.

    Examples
    --------
    >>> from fusionopt.model.cost import AlphaBeta
    >>> p = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> Problem(p, AlphaBeta(1e-3, 1e-9)).sync
    'barrier'
    >>> Problem(p, AlphaBeta(1e-3, 1e-9), sync="eager")
    Traceback (most recent call last):
    ...
    ValueError: unknown sync 'eager': choose one of 'barrier', 'layerwise'
    >>> from fusionopt.model.ps import ParameterServer
    >>> Problem(p, ps=ParameterServer(AlphaBeta(1e-4, 1e-9))).extensions
    ('ps',)

    A traced profile's optimiser lump under layerwise sync, spread by bytes:

    >>> import warnings
    >>> traced = p.with_step_parts(update_lump=7e-3)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     fitted = Problem(traced, AlphaBeta(1e-3, 1e-9), sync="layerwise", step_parts="fit")
    >>> fitted.profile.update.round(9).tolist(), fitted.profile.update_lump, len(caught)
    ([0.004, 0.001, 0.002], 0.0, 1)
    """

    profile: Profile
    cost: CommCost | None = None
    sync: str = "barrier"
    copy_cost: float = 0.0
    copy_on: str = "channel"
    contention: float = 1.0
    channels: int = 1
    ps: ParameterServer | None = None
    decoupled: Decoupled | None = None
    fully_sharded: FullySharded | None = None
    step_parts: str = "refuse"
    comm_contention: float = 1.0
    message_compute: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.profile, Profile):
            raise ValueError(f"profile must be a Profile, got {type(self.profile).__name__}")
        if self.ps is not None:
            if not isinstance(self.ps, ParameterServer):
                raise ValueError(f"ps must be a ParameterServer, got {type(self.ps).__name__}")
            if self.cost is None:
                object.__setattr__(self, "cost", self.ps.push)
        if self.decoupled is not None:
            if not isinstance(self.decoupled, Decoupled):
                raise ValueError(f"decoupled must be a Decoupled, got {type(self.decoupled).__name__}")
            if self.ps is not None:
                raise ValueError("the decoupled all-reduce does not combine with ps; leave one of them out")
            if self.cost is not None:
                raise ValueError("a decoupled problem is priced by its reduce-scatter and all-gather costs: "
                                 "leave cost out (it is the all-reduce they make)")
            object.__setattr__(self, "cost", self.decoupled.all_reduce)
        if self.fully_sharded is not None:
            if not isinstance(self.fully_sharded, FullySharded):
                raise ValueError(f"fully_sharded must be a FullySharded, got {type(self.fully_sharded).__name__}")
            for other in ("ps", "decoupled"):
                if getattr(self, other) is not None:
                    raise ValueError(f"fully_sharded does not combine with {other}; leave one of them out")
            if self.cost is not None:
                raise ValueError("a fully sharded problem is priced by its reduce-scatter and all-gather costs: "
                                 "leave cost out (it is the all-reduce they make)")
            object.__setattr__(self, "cost", self.fully_sharded.all_reduce)
        if not isinstance(self.cost, CommCost):
            raise ValueError(f"cost must be a CommCost (e.g. AlphaBeta), got {type(self.cost).__name__}")
        if self.sync not in SYNC_MODES:
            choices = ", ".join(repr(s) for s in SYNC_MODES)
            raise ValueError(f"unknown sync {self.sync!r}: choose one of {choices}")
        if self.step_parts not in STEP_PART_RULES:
            raise ValueError(f"unknown step_parts {self.step_parts!r}: choose 'refuse' or 'fit'")
        if self.step_parts == "fit":
            fitted, notes = fit_step_parts(self.profile, pattern=self.pattern, sync=self.sync)
            object.__setattr__(self, "profile", fitted)
            for note in notes:
                warnings.warn(note, UserWarning, stacklevel=3)
        whole = [part for part in ("update_lump", "post_backward") if getattr(self.profile, part)]
        if self.sync == "layerwise" and whole and self.decoupled is None:     # the decoupled check says why
            raise ValueError(
                f"profile {self.profile.name or 'without a name'!r} has {' and '.join(whole)} time, which waits for "
                "every gradient (MODEL.md section 4), so it cannot run tensor by tensor under sync='layerwise': "
                "use sync='barrier', or step_parts='fit' to spread it over the tensors' update times"
            )
        object.__setattr__(self, "copy_cost", _finite("copy_cost", self.copy_cost, minimum=0.0))
        if self.copy_on not in COPY_PLACES:
            raise ValueError(f"unknown copy_on {self.copy_on!r}: choose 'channel' or 'compute'")
        object.__setattr__(self, "message_compute", _finite("message_compute", self.message_compute, minimum=0.0))
        object.__setattr__(self, "contention", _finite("contention", self.contention, minimum=1.0))
        object.__setattr__(self, "comm_contention", _finite("comm_contention", self.comm_contention, minimum=1.0))
        if isinstance(self.channels, bool) or not isinstance(self.channels, (int, np.integer)) or self.channels < 1:
            raise ValueError(f"channels must be an integer >= 1, got {self.channels!r}")
        object.__setattr__(self, "channels", int(self.channels))
        if self.channels > 1 and self.cost.affine is None:
            raise ValueError(
                f"channels = {self.channels} needs an affine cost (AlphaBeta): processor sharing "
                f"splits a message into its startup and its bytes, and {type(self.cost).__name__} has no such split"
            )
        check_cost(self.cost, self.profile)
        if self.ps is not None:
            self._check_ps()
        if self.decoupled is not None:
            self._check_decoupled()
        if self.fully_sharded is not None:
            self._check_sharded()

    def _check_sharded(self) -> None:
        if self.sync != "barrier":
            raise ValueError(f"a fully sharded step has its own order (MODEL.md section 8.2: forward, backward, "
                             f"optimiser), so sync does not apply; leave it at 'barrier', not {self.sync!r}")
        others = {"copy_cost": self.copy_cost != 0.0, "message_compute": self.message_compute != 0.0,
                  "contention": self.contention != 1.0, "comm_contention": self.comm_contention != 1.0,
                  "channels": self.channels != 1}
        for name, on in others.items():
            if on:
                raise ValueError(f"fully_sharded does not combine with {name} "
                                 f"({name}={getattr(self, name)!r}); leave one of them out")
        if self.profile.post_backward:
            raise ValueError(
                f"profile {self.profile.name or 'without a name'!r} has post_backward time (DDP's copies of the "
                "reduced buckets), which a fully sharded step does not run: drop it with step_parts='fit'")
        for half in ("reduce_scatter", "all_gather"):
            try:
                check_cost(getattr(self.fully_sharded, half), self.profile)
            except ValueError as exc:
                raise ValueError(f"{half} cost: {exc}") from None

    def _check_decoupled(self) -> None:
        others = {"ps": self.ps is not None, "copy_cost": self.copy_cost != 0.0,
                  "message_compute": self.message_compute != 0.0, "contention": self.contention != 1.0,
                  "comm_contention": self.comm_contention != 1.0, "channels": self.channels != 1}
        for name, on in others.items():
            if on:
                raise ValueError(f"the decoupled all-reduce does not combine with {name} "
                                 f"({name}={getattr(self, name)!r}); leave one of them out")
        whole = [part for part in ("update_lump", "post_backward") if getattr(self.profile, part)]
        if whole:
            raise ValueError(
                f"profile {self.profile.name or 'without a name'!r} has {' and '.join(whole)} time; a decoupled "
                "all-reduce updates each tensor's shard after its reduce-scatter (MODEL.md section 8.1) and runs no "
                "DDP copies: step_parts='fit' spreads the lump over the tensors' update times and drops the copies")
        for half in ("reduce_scatter", "all_gather"):
            try:
                check_cost(getattr(self.decoupled, half), self.profile)
            except ValueError as exc:
                raise ValueError(f"{half} cost: {exc}") from None

    def _check_ps(self) -> None:
        ps = self.ps
        if self.cost is not ps.push and self.cost != ps.push:
            raise ValueError(f"cost {self.cost!r} differs from the parameter server's push cost {ps.push!r}: "
                             "with ps, cost is the push cost; leave it out")
        others = {"copy_cost": self.copy_cost != 0.0, "message_compute": self.message_compute != 0.0,
                  "contention": self.contention != 1.0, "comm_contention": self.comm_contention != 1.0,
                  "channels": self.channels != 1}
        for name, on in others.items():
            if on:
                raise ValueError(f"the parameter server does not combine with {name} "
                                 f"({name}={getattr(self, name)!r}); leave one of them out")
        if ps.pull is not ps.push:
            try:
                check_cost(ps.pull, self.profile)
            except ValueError as exc:
                raise ValueError(f"pull cost: {exc}") from None

    @property
    def extensions(self) -> tuple[str, ...]:
        """Names of the extensions switched on (empty for the plain model of MODEL.md 1-4)."""
        on = []
        if self.copy_cost > 0:
            on.append("copy_cost")
        if self.message_compute > 0:
            on.append("message_compute")
        if self.contention != 1.0:
            on.append("contention")
        if self.comm_contention != 1.0:
            on.append("comm_contention")
        if self.channels > 1:
            on.append("channels")
        if self.ps is not None:
            on.append("ps")
        if self.decoupled is not None:
            on.append("decoupled")
        if self.fully_sharded is not None:
            on.append("fully_sharded")
        return tuple(on)

    def compute_per_message(self, tensors: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """Seconds of compute-stream work of messages of ``tensors`` tensors and ``sizes`` bytes
        each: the packing ``gamma S`` of a multi-tensor message when ``copy_on="compute"``,
        plus ``message_compute`` for every message; 0 for all with neither on.

        >>> from fusionopt.model.cost import AlphaBeta
        >>> p = Profile.from_arrays([4, 8], [0, 0], [1, 1])
        >>> Problem(p, AlphaBeta(0, 1), copy_cost=0.5, copy_on="compute", message_compute=2.0
        ...         ).compute_per_message(np.array([1, 2]), np.array([4.0, 12.0])).tolist()
        [2.0, 8.0]
        """
        sizes = np.asarray(sizes, dtype=np.float64)
        work = np.full(sizes.shape, self.message_compute)
        if self.copy_on == "compute":
            work = work + self.copy_cost * sizes * (np.asarray(tensors) > 1)
        return work

    @property
    def pattern(self) -> str:
        """The communication pattern: ``"all-reduce"``, ``"ps"`` (a parameter server) or
        ``"decoupled"`` (reduce-scatter and all-gather, MODEL.md section 8.1) or
        ``"fully-sharded"`` (MODEL.md section 8.2)."""
        if self.ps is not None:
            return "ps"
        if self.fully_sharded is not None:
            return "fully-sharded"
        return "decoupled" if self.decoupled is not None else "all-reduce"

    def plain(self) -> "Problem":
        """The same profile, cost and sync without extensions (for a parameter server: the
        all-reduce problem whose channel costs what its push channel costs)."""
        return Problem(self.profile, self.cost, sync=self.sync)

    def require_plain(self, what: str, *, allowing: tuple[str, ...] = ()) -> None:
        """Raise ``ValueError`` if an extension other than those ``allowing`` names is on:
        ``what`` needs the plain model (with those)."""
        others = [name for name in self.extensions if name not in allowing]
        if others:
            raise ValueError(
                f"{what} applies to the plain model only, and this problem has "
                f"{', '.join(others)} on; use simulate, or cpsat (one channel)"
            )

    def require_layerwise(self, what: str) -> None:
        """Raise ``ValueError`` unless ``sync="layerwise"``: ``what`` reorders and cuts
        messages so that the next forward can start tensor by tensor."""
        if self.sync != "layerwise":
            raise ValueError(
                f"{what} is for sync='layerwise' only (it reorders and cuts messages so that the "
                f"next forward starts early), and this problem has sync={self.sync!r}"
            )

    def __repr__(self) -> str:
        names = ("copy_cost", "copy_on", "message_compute", "contention", "comm_contention", "channels", "ps",
                 "decoupled", "fully_sharded", "step_parts")
        extras = "".join(f", {name}={getattr(self, name)!r}" for name in names
                         if getattr(self, name) != getattr(Problem, name))
        return f"Problem({self.profile!r}, {self.cost!r}, sync={self.sync!r}{extras})"


def check_cost(cost: CommCost, profile: Profile) -> None:
    """Probe ``cost`` for MODEL.md section 2's rules on the sizes ``profile`` can send.

    The built-in models enforce ``c(0) = 0``, ``c >= 0`` and monotonicity by construction;
    a user's own ``CommCost`` is probed at 0, at every tensor size, at the total and on a
    geometric grid up to it, and rejected with the first violation named.

    >>> from fusionopt.model.cost import AlphaBeta
    >>> class Decreasing(AlphaBeta):
    ...     def _evaluate(self, sizes):
    ...         return np.where(sizes > 0, 1.0 / (1.0 + sizes), 0.0)
    >>> p = Profile.from_arrays([4, 8], [0, 0], [1, 1])
    >>> Problem(p, Decreasing(0, 0))
    Traceback (most recent call last):
    ...
    ValueError: cost model Decreasing is not monotone: c(1 B) = 0.5 s > c(2 B) = 0.333333 s
    """
    total = max(profile.total_bytes, 1)
    label = type(cost).__name__
    grid = np.unique(np.concatenate((
        [0.0, 1.0, float(total)],
        profile.sizes.astype(np.float64),
        np.round(np.geomspace(1.0, float(total), num=256)),
    )))
    times = np.asarray(cost(grid), dtype=np.float64)
    if times.shape != grid.shape:
        raise ValueError(f"cost model {label} returned {times.shape} times for {grid.shape} sizes")
    bad = ~np.isfinite(times)
    if bad.any():
        k = int(np.argmax(bad))
        raise ValueError(f"cost model {label}: c({grid[k]:.0f} B) = {times[k]!r} is not finite")
    if times[0] != 0.0:
        raise ValueError(f"cost model {label}: c(0) = {times[0]:.6g} s, must be 0")
    if (times < 0).any():
        k = int(np.argmax(times < 0))
        raise ValueError(f"cost model {label}: c({grid[k]:.0f} B) = {times[k]:.6g} s is negative")
    drops = np.flatnonzero(np.diff(times) < 0)
    if drops.size:
        k = int(drops[0])
        raise ValueError(
            f"cost model {label} is not monotone: c({grid[k]:.0f} B) = {times[k]:.6g} s > "
            f"c({grid[k + 1]:.0f} B) = {times[k + 1]:.6g} s"
        )
