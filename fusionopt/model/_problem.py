"""A scheduling problem: a workload, a cost model and a synchronisation rule."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fusionopt.model._compressor import Compressor
from fusionopt.model._cost import AlphaBeta, CommCost
from fusionopt.model._encoding import (Cheapest, Encoded, buried_encoding, compute_encodings, encoding_table,
                                       encodings_of, lossy_encodings, wire_link)
from fusionopt.model._profile import Profile
from fusionopt.model._pattern import Pattern
from fusionopt.model._step_parts import SYNC_MODES, fit_step_parts

COPY_PLACES = ("channel", "compute")
STEP_PART_RULES = ("refuse", "fit")
PRICING_EXTENSIONS = ("exact_tensors", "compressor")
"""The extensions that change what a message costs, not how a step runs."""


def _finite(label: str, value: float, *, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{label} must be a number, got {value!r}")
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{label} must be finite, got {value!r}")
    if value < minimum:
        raise ValueError(f"{label} must be >= {minimum:g}, got {value!r}")
    return float(value)


def _pattern_from_keywords(pattern: Pattern | None, keywords: dict[str, Pattern | None]) -> Pattern | None:
    """The pattern of the deprecated keywords ``ps=``, ``decoupled=`` and ``fully_sharded=``
    (each warns once), checked against ``pattern`` and each other."""
    given = {keyword: value for keyword, value in keywords.items() if value is not None}
    for keyword, value in given.items():
        warnings.warn(f"Problem({keyword}=...) is deprecated: write Problem(profile, pattern=...)",
                      DeprecationWarning, stacklevel=4)
        if not isinstance(value, Pattern) or value.extension != keyword:
            wanted = {"ps": "ParameterServer", "decoupled": "Decoupled", "fully_sharded": "FullySharded"}[keyword]
            raise ValueError(f"{keyword} must be a {wanted}, got {type(value).__name__}")
    if len(given) > 1:
        first, second = list(given)[:2]
        raise ValueError(f"{second} does not combine with {first}; leave one of them out")
    if given and pattern is not None:
        raise ValueError(f"pattern and {next(iter(given))} both say the pattern; give pattern only")
    return next(iter(given.values()), pattern)



@dataclass(frozen=True, eq=False)
class Problem:
    """Everything a plan is judged on: ``profile``, the communication ``pattern`` and ``sync``.

    Parameters
    ----------
    profile : Profile
        The workload (MODEL.md section 1).
    cost : CommCost, optional
        Time in seconds of an all-reduce of ``S`` bytes (MODEL.md section 2):
        ``Problem(profile, cost)`` is ``Problem(profile, pattern=AllReduce(cost))``. With
        another pattern, leave it out: :attr:`cost` is then the pattern's channel cost (a
        parameter server's push cost; the all-reduce that a reduce-scatter and an all-gather
        make).
    pattern : Pattern, keyword only
        How gradients and parameters move (:mod:`fusionopt.model._pattern`):
        :class:`~fusionopt.model.AllReduce` (the default, with ``cost``),
        :class:`~fusionopt.model.ParameterServer` (a push and a pull channel, server updates,
        optionally partitioned compute; ``sync`` applies to the pulls),
        :class:`~fusionopt.model.Decoupled` (ZeRO-1/2, DeAR; MODEL.md section 8.1:
        ``sync`` says whether the forward waits for every all-gather or for its own tensor's)
        or :class:`~fusionopt.model.FullySharded` (FSDP, ZeRO-3; section 8.2: the step
        has its own order, so ``sync`` stays ``"barrier"``). The pattern owns its plan type, its
        timing, its lower bound and its refusals: the extensions below are all-reduce
        extensions, and the other patterns refuse them.
    sync : {"barrier", "layerwise"}
        When the next forward may start (MODEL.md section 4): after every gradient is
        reduced (``"barrier"``: DDP, Horovod, MG-WFBP) or tensor by tensor as each gradient
        is reduced (``"layerwise"``: P3, ByteScheduler, US-Byte). A profile with an
        ``update_lump`` or ``post_backward`` (work that waits for every gradient) takes
        barrier sync only, unless ``step_parts="fit"``.
    step_parts : {"refuse", "fit"}
        What to do with a profile's step parts that the pattern's step has no place for
        (MODEL.md section 4.1): refuse the problem, naming them (default), or fit the profile
        to the step with :func:`~fusionopt.model.fit_step_parts` (``post_backward``
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
    message_compute_per_byte : float, keyword only
        ``eta_B``, seconds of compute-stream work per byte of every message, run with
        ``message_compute``: a message of ``S`` bytes costs the compute stream ``eta +
        eta_B S``. A comm hook that encodes each bucket on the backward's stream (DDP's
        ``fp16_compress_hook`` casts it there) puts its encoding here (MODEL.md section 2.2).
        Either on switches the ``"message_compute"`` extension on.
    exact_tensors : sequence of int, keyword only
        Tensors (profile indices) whose gradients must reach every rank as they are: an
        error budget of "at most the other tensors compressed" (MODEL.md section 2.2). Every
        message that carries any part of one of them is sent in the cheapest of the cost's
        lossless encodings (:attr:`exact_cost`); the others in the cheapest of all. It
        restricts a :class:`~fusionopt.cost.Cheapest` choice, which needs a lossless encoding
        (fp32) among its own; on a cost that sends every message losslessly it changes
        nothing. Where it restricts a choice it switches the ``"exact_tensors"`` extension on:
        the event simulator, the fusion DP, CP-SAT and brute force honour it, and a method
        that needs the plain model refuses it. It only ever raises a message's price, so the
        plain model's bounds stay bounds.
    compressor : Compressor, keyword only
        A compressor each message may be sent through instead, such as
        :class:`~fusionopt.cost.PowerSGD` (torch's ``powerSGD_hook``; MODEL.md section 2.4):
        a message that carries whole tensors, none of them kept exact and altered by it,
        costs the cheaper of the cost's price and the compressor's price of its tensors on
        the cost's link (the cost without its encodings). It switches the ``"compressor"``
        extension on; the event simulator, the fusion DP, CP-SAT and brute force honour it,
        as for ``exact_tensors``. It may lower a message's price, so the bounds that price
        bytes on the channel are left out (:func:`~fusionopt.model.best_bound`). All-reduce
        on one channel only.
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
    ps, decoupled, fully_sharded : Pattern, optional
        Deprecated spellings of ``pattern=`` (each warns with a ``DeprecationWarning``), as are
        the properties of the same names.

    Examples
    --------
    >>> from fusionopt.cost import AlphaBeta
    >>> p = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> Problem(p, AlphaBeta(1e-3, 1e-9)).sync
    'barrier'
    >>> Problem(p, AlphaBeta(1e-3, 1e-9), sync="eager")
    Traceback (most recent call last):
    ...
    ValueError: unknown sync 'eager': choose one of 'barrier', 'layerwise'
    >>> from fusionopt.model import ParameterServer
    >>> Problem(p, pattern=ParameterServer(AlphaBeta(1e-4, 1e-9))).extensions
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
    cost: CommCost = field(init=False)
    sync: str = "barrier"
    copy_cost: float = 0.0
    copy_on: str = "channel"
    contention: float = 1.0
    channels: int = 1
    step_parts: str = "refuse"
    comm_contention: float = 1.0
    message_compute: float = 0.0
    pattern: Pattern | None = None
    message_compute_per_byte: float = 0.0
    exact_tensors: tuple[int, ...] = ()
    compressor: Compressor | None = None

    def __init__(self, profile: Profile, cost: CommCost | None = None, sync: str = "barrier", copy_cost: float = 0.0,
                 copy_on: str = "channel", contention: float = 1.0, channels: int = 1, ps: Pattern | None = None,
                 decoupled: Pattern | None = None, fully_sharded: Pattern | None = None, step_parts: str = "refuse",
                 comm_contention: float = 1.0, message_compute: float = 0.0, *, pattern: Pattern | None = None,
                 message_compute_per_byte: float = 0.0, exact_tensors: Any = (),
                 compressor: Compressor | None = None) -> None:
        if not isinstance(profile, Profile):
            raise ValueError(f"profile must be a Profile, got {type(profile).__name__}")
        pattern = _pattern_from_keywords(pattern, {"ps": ps, "decoupled": decoupled, "fully_sharded": fully_sharded})
        if pattern is None:
            pattern, cost = Pattern.of_cost(cost), None
        elif not isinstance(pattern, Pattern):
            raise ValueError(f"pattern must be a Pattern (AllReduce, ParameterServer, Decoupled or FullySharded), "
                             f"got {type(pattern).__name__}")
        if cost is not None and not isinstance(cost, CommCost):
            raise ValueError(f"cost must be a CommCost (e.g. AlphaBeta), got {type(cost).__name__}")
        values = {"profile": profile, "pattern": pattern, "cost": pattern.channel_cost(cost), "sync": sync,
                  "copy_cost": copy_cost, "copy_on": copy_on, "contention": contention, "channels": channels,
                  "step_parts": step_parts, "comm_contention": comm_contention, "message_compute": message_compute,
                  "message_compute_per_byte": message_compute_per_byte, "exact_tensors": exact_tensors,
                  "compressor": compressor}
        for name, value in values.items():
            object.__setattr__(self, name, value)
        self._check()

    def _check(self) -> None:
        if self.sync not in SYNC_MODES:
            choices = ", ".join(repr(s) for s in SYNC_MODES)
            raise ValueError(f"unknown sync {self.sync!r}: choose one of {choices}")
        if self.step_parts not in STEP_PART_RULES:
            raise ValueError(f"unknown step_parts {self.step_parts!r}: choose 'refuse' or 'fit'")
        if self.step_parts == "fit":
            fitted, notes = fit_step_parts(self.profile, pattern=self.pattern.step, sync=self.sync)
            object.__setattr__(self, "profile", fitted)
            for note in notes:
                warnings.warn(note, UserWarning, stacklevel=4)
        object.__setattr__(self, "copy_cost", _finite("copy_cost", self.copy_cost, minimum=0.0))
        if self.copy_on not in COPY_PLACES:
            raise ValueError(f"unknown copy_on {self.copy_on!r}: choose 'channel' or 'compute'")
        object.__setattr__(self, "message_compute", _finite("message_compute", self.message_compute, minimum=0.0))
        object.__setattr__(self, "message_compute_per_byte",
                           _finite("message_compute_per_byte", self.message_compute_per_byte, minimum=0.0))
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
        for label, cost in self.pattern.collectives.items():
            if cost is not self.cost:
                try:
                    check_cost(cost, self.profile)
                except ValueError as exc:
                    raise ValueError(f"{label} cost: {exc}") from None
            buried = buried_encoding(cost)
            if buried is not None:
                raise ValueError(f"{label} cost: {type(cost).__name__} wraps {buried!r}, whose encoding its messages "
                                 "would be priced in but never sent in: put the encodings outside, around the link "
                                 "(Cheapest(Aligned(link, ...), [...]), not Aligned(Cheapest(link, [...]), ...))")
            for encoded in compute_encodings(cost):
                if encoded is not self.cost or self.pattern.extension is not None:
                    raise ValueError(f"{label} cost: encoding {encoded.encoding.name!r} runs part of its cast on the "
                                     "compute stream, which a problem runs for the all-reduce's own Encoded cost only")
        self.pattern.check(self)
        self._check_gradients_cast()         # after the pattern's own, which may say it in its words
        self._check_exact_tensors()
        self._check_compressor()
        whole = [part for part in ("update_lump", "post_backward") if getattr(self.profile, part)]
        if self.sync == "layerwise" and whole:
            raise ValueError(
                f"profile {self.profile.name or 'without a name'!r} has {' and '.join(whole)} time, which waits for "
                "every gradient (MODEL.md section 4), so it cannot run tensor by tensor under sync='layerwise': "
                "use sync='barrier', or step_parts='fit' to spread it over the tensors' update times"
            )

    def _check_gradients_cast(self) -> None:
        """An encoding casts fp32 gradients (MODEL.md section 2.2): refuse, in one line, a
        profile whose gradients are not fp32 under a cost that encodes."""
        cast = next((e for cost in self.pattern.costs for e in encoding_table(cost).values() if e.name != "fp32"), None)
        if cast is None:
            return
        profile = self.profile
        if profile.dtypes is not None:
            odd = next((i for i, d in enumerate(profile.dtypes) if d != "float32"), None)
            if odd is not None:
                raise ValueError(f"encoding {cast.name!r} casts fp32 gradients, and tensor {profile.names[odd]!r} "
                                 f"(index {odd}) holds {profile.dtypes[odd]} ones: leave the encodings out, or give a "
                                 "profile of fp32 gradients")
        elif profile.dtype_bytes != 4:
            raise ValueError(f"encoding {cast.name!r} casts fp32 gradients, and profile "
                             f"{profile.name or 'without a name'!r} holds {profile.dtype_bytes}-byte ones "
                             f"(dtype_bytes={profile.dtype_bytes}): leave the encodings out, or give a profile of fp32 "
                             "gradients")

    def _check_exact_tensors(self) -> None:
        given = self.exact_tensors
        if isinstance(given, (str, bytes)) or not hasattr(given, "__iter__"):
            raise ValueError(f"exact_tensors must be a sequence of tensor indices, got {given!r}")
        tensors = []
        for t in given:
            if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= t < self.profile.n:
                raise ValueError(f"exact_tensors: {t!r} is not a tensor index of profile "
                                 f"{self.profile.name or 'without a name'!r} (0 to {self.profile.n - 1})")
            tensors.append(int(t))
        object.__setattr__(self, "exact_tensors", tuple(sorted(set(tensors))))
        if not self.exact_tensors:
            return
        if self.pattern.extension is not None:
            raise ValueError(f"exact_tensors restricts the all-reduce's choice of encodings, and this problem is "
                             f"{self.pattern.article()} {self.pattern.words} problem")
        below = self.cost.cost if isinstance(self.cost, Cheapest) else self.cost     # not the choice itself
        nested = [e.name for e in lossy_encodings(below)]
        if nested:
            raise ValueError(f"exact_tensors restricts a choice of encodings (Cheapest), and the cost "
                             f"{type(self.cost).__name__} sends every message in {nested[0]!r}: give "
                             f"Cheapest(link, ['fp32', {nested[0]!r}]) to let the others travel in it")
        if isinstance(self.cost, Cheapest) and not any(e.lossless for e in self.cost.encodings):
            names = ", ".join(e.name for e in self.cost.encodings)
            raise ValueError(f"exact_tensors: tensor {self.exact_tensors[0]} must travel exactly, and every "
                             f"encoding of the cost ({names}) is lossy: add fp32")

    def _check_compressor(self) -> None:
        compressor = self.compressor
        if compressor is None:
            return
        if not isinstance(compressor, Compressor):
            raise ValueError(f"compressor must be a Compressor (e.g. PowerSGD), got {type(compressor).__name__}")
        if self.pattern.extension is not None:
            raise ValueError(f"compressor {compressor.name!r} sends an all-reduce's messages (a DDP comm hook), and this "
                             f"problem is {self.pattern.article()} {self.pattern.words} problem")
        if self.channels > 1:
            raise ValueError(f"compressor {compressor.name!r} prices a message by its tensors on one channel, and this "
                             f"problem has channels = {self.channels}")
        cast = compute_encodings(self.cost)
        if cast:
            raise ValueError(f"compressor {compressor.name!r}: encoding {cast[0].encoding.name!r} casts on the compute "
                             "stream every message, and a message through the compressor is not cast; give the "
                             "encoding's casts on the message's path")
        parts = np.asarray(compressor.tensor_parts(self.profile), dtype=np.float64)
        blocked = np.asarray(compressor.alters(self.profile), dtype=bool) & np.isin(
            np.arange(self.profile.n), self.exact_tensors)
        order = self.profile.backward_order
        zero = np.zeros((parts.shape[0], 1))
        self.__dict__["_compressor_tables"] = (
            parts, blocked, np.concatenate((zero, np.cumsum(parts[:, order], axis=1)), axis=1),
            np.concatenate(([0], np.cumsum(blocked[order]))))

    @property
    def prices_by_content(self) -> bool:
        """Whether a message's price depends on the tensors it carries, not on its bytes
        alone (:attr:`exact_tensors` restricts a choice, or a :attr:`compressor` is given)."""
        return self.restricts_encodings or self.compressor is not None

    def compressed_messages(self, sizes: Any, tensors: Any) -> np.ndarray:
        """Seconds of each message (``sizes`` bytes, carrying the tensors, profile indices,
        that ``tensors`` lists for it) sent through :attr:`compressor`; ``inf`` for a message
        that cannot be: one that carries part of a tensor (its bytes fall short of its
        tensors') or a tensor kept exact that the compressor alters."""
        sizes = np.asarray(sizes, dtype=np.float64).ravel()
        parts, blocked, _, _ = self.__dict__["_compressor_tables"]
        out = np.full(sizes.shape, np.inf)
        for k, carried in enumerate(tensors):
            unique = np.unique(np.atleast_1d(np.asarray(carried, dtype=np.int64)))
            if float(self.profile.sizes[unique].sum()) == sizes[k] and not blocked[unique].any():
                out[k] = float(self.compressor.parts_seconds(wire_link(self.cost),
                                                             parts[:, unique].sum(axis=1, keepdims=True))[0])
        return out

    def compressed_arcs(self, tails: Any, heads: Any) -> np.ndarray:
        """Seconds of the messages of ready-order positions ``tails .. heads - 1`` sent through
        :attr:`compressor` (``inf`` where one carries a tensor kept exact that it alters)."""
        _, _, prefix, blocked = self.__dict__["_compressor_tables"]
        tails, heads = np.broadcast_arrays(np.asarray(tails, dtype=np.int64), np.asarray(heads, dtype=np.int64))
        seconds = self.compressor.parts_seconds(wire_link(self.cost), prefix[:, heads] - prefix[:, tails])
        return np.where(blocked[heads] > blocked[tails], np.inf, seconds)

    @property
    def exact_cost(self) -> CommCost:
        """The cost of a message that carries an :attr:`exact_tensors` tensor: the cheapest of
        the cost's lossless encodings (the cost itself where it has no lossy one). Never below
        :attr:`cost` at any size."""
        if not self.exact_tensors or not isinstance(self.cost, Cheapest) \
                or all(e.lossless for e in self.cost.encodings):
            return self.cost
        cached = self.__dict__.get("_exact_cost")
        if cached is None:
            lossless = [e for e in self.cost.encodings if e.lossless]
            cached = Encoded(self.cost.cost, lossless[0]) if len(lossless) == 1 else Cheapest(self.cost.cost, lossless)
            self.__dict__["_exact_cost"] = cached
        return cached

    @property
    def restricts_encodings(self) -> bool:
        """Whether :attr:`exact_tensors` changes any message's price (its extension is on)."""
        return self.exact_cost is not self.cost

    def exact_messages(self, tensors: Any) -> np.ndarray:
        """For each message, given by the tensors (profile indices) it carries, whether it
        carries an :attr:`exact_tensors` tensor."""
        exact = set(self.exact_tensors)
        return np.array([bool(exact.intersection(np.atleast_1d(t).tolist())) for t in tensors], dtype=bool)

    def exact_arcs(self, tails: Any, heads: Any) -> np.ndarray:
        """For each message of the ready-order positions ``tails .. heads - 1``, whether it
        carries an :attr:`exact_tensors` tensor."""
        counts = self.__dict__.get("_exact_prefix")
        if counts is None:
            marked = np.isin(self.profile.backward_order, self.exact_tensors)
            counts = np.concatenate(([0], np.cumsum(marked)))
            self.__dict__["_exact_prefix"] = counts
        return counts[np.asarray(heads)] > counts[np.asarray(tails)]

    def message_cost(self, sizes: Any, tensors: Any = None) -> np.ndarray:
        """Seconds on the channel of messages of ``sizes`` bytes (MODEL.md section 2.2), each
        carrying the tensors (profile indices) ``tensors`` lists for it: :attr:`exact_cost`
        for those that carry an :attr:`exact_tensors` tensor, :attr:`cost` for the others
        (and for all when ``tensors`` is None); with a :attr:`compressor`, the cheaper of
        that and :meth:`compressed_messages`."""
        sizes = np.asarray(sizes, dtype=np.float64)
        if tensors is None or not self.prices_by_content:
            return np.asarray(self.cost(sizes), dtype=np.float64)
        times = self._priced(sizes, np.reshape(self.exact_messages(tensors), sizes.shape))
        if self.compressor is None:
            return times
        return np.minimum(times, self.compressed_messages(sizes, tensors).reshape(sizes.shape))

    def arc_cost(self, tails: Any, heads: Any, sizes: Any) -> np.ndarray:
        """Seconds on the channel of the messages of ready-order positions ``tails .. heads - 1``
        of ``sizes`` bytes: :attr:`exact_cost` for those that carry an :attr:`exact_tensors`
        tensor (:meth:`exact_arcs`), :attr:`cost` for the others; with a :attr:`compressor`,
        the cheaper of that and :meth:`compressed_arcs`."""
        sizes = np.asarray(sizes, dtype=np.float64)
        if not self.prices_by_content:
            return np.asarray(self.cost(sizes), dtype=np.float64)
        times = self._priced(sizes, np.broadcast_to(self.exact_arcs(tails, heads), sizes.shape))
        if self.compressor is None:
            return times
        return np.minimum(times, self.compressed_arcs(tails, heads))

    def message_encodings(self, sizes: Any, tensors: Any = None) -> list[str]:
        """Each message's encoding (its name), as :meth:`message_cost` prices it: the cheapest
        of :attr:`exact_cost`'s for a message that carries an :attr:`exact_tensors` tensor, of
        :attr:`cost`'s for the others (``"fp32"`` on a cost without encodings); the
        :attr:`compressor`'s name where it is strictly cheaper."""
        names = encodings_of(sizes, self.cost)
        if tensors is None or not self.prices_by_content:
            return names
        if self.restricts_encodings:
            exact = self.exact_messages(tensors)
            kept = encodings_of(sizes, self.exact_cost)
            names = [k if e else n for n, k, e in zip(names, kept, exact.tolist())]
        if self.compressor is not None:
            sizes = np.asarray(sizes, dtype=np.float64).ravel()
            through = self.compressed_messages(sizes, tensors) < self._priced(sizes, self.exact_messages(tensors))
            names = [self.compressor.name if c else n for n, c in zip(names, through.tolist())]
        return names

    def _priced(self, sizes: np.ndarray, exact: np.ndarray) -> np.ndarray:
        times = np.asarray(self.cost(sizes), dtype=np.float64)
        if not exact.any():
            return times
        return np.where(exact, np.asarray(self.exact_cost(sizes), dtype=np.float64), times)

    @property
    def ps(self) -> Pattern | None:
        """Deprecated: the pattern when it is a parameter server, else None; use :attr:`pattern`."""
        return self._deprecated_keyword("ps")

    @property
    def decoupled(self) -> Pattern | None:
        """Deprecated: the pattern when it is a decoupled all-reduce, else None; use :attr:`pattern`."""
        return self._deprecated_keyword("decoupled")

    @property
    def fully_sharded(self) -> Pattern | None:
        """Deprecated: the pattern when it is fully sharded, else None; use :attr:`pattern`."""
        return self._deprecated_keyword("fully_sharded")

    def _deprecated_keyword(self, keyword: str) -> Pattern | None:
        warnings.warn(f"Problem.{keyword} is deprecated: use Problem.pattern", DeprecationWarning, stacklevel=3)
        return self.pattern if self.pattern.extension == keyword else None

    @property
    def extensions(self) -> tuple[str, ...]:
        """Names of the extensions switched on (empty for the plain model of MODEL.md 1-4)."""
        on = []
        if self.copy_cost > 0:
            on.append("copy_cost")
        if self.computes_per_message:
            on.append("message_compute")
        if self.contention != 1.0:
            on.append("contention")
        if self.comm_contention != 1.0:
            on.append("comm_contention")
        if self.channels > 1:
            on.append("channels")
        if self.pattern.extension is not None:
            on.append(self.pattern.extension)
        if self.restricts_encodings:
            on.append("exact_tensors")
        if self.compressor is not None:
            on.append("compressor")
        return tuple(on)

    @property
    def timing_extensions(self) -> tuple[str, ...]:
        """The :attr:`extensions` that change how a step runs, not only what a message costs:
        all but ``"exact_tensors"`` and ``"compressor"``, which every engine that prices a
        message through :meth:`message_cost` or :meth:`arc_cost` takes as they are."""
        return tuple(name for name in self.extensions if name not in PRICING_EXTENSIONS)

    @property
    def message_compute_terms(self) -> tuple[float, float]:
        """``(eta, eta_B)``: seconds of compute-stream work per message and per byte of every
        message, the problem's ``message_compute`` and ``message_compute_per_byte`` plus the
        compute-stream part of its cost's encoding (an :class:`~fusionopt.cost.Encoded`
        whose cast runs on the backward's stream, MODEL.md section 2.2)."""
        eta, eta_byte = self.message_compute, self.message_compute_per_byte
        if isinstance(self.cost, Encoded):
            per_message, per_byte = self.cost.compute_terms
            eta, eta_byte = eta + per_message, eta_byte + per_byte
        return eta, eta_byte

    @property
    def computes_per_message(self) -> bool:
        """Whether each message costs the compute stream time of its own
        (:attr:`message_compute_terms` not both 0)."""
        return any(term > 0 for term in self.message_compute_terms)

    def compute_per_message(self, tensors: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """Seconds of compute-stream work of messages of ``tensors`` tensors and ``sizes`` bytes
        each: the packing ``gamma S`` of a multi-tensor message when ``copy_on="compute"``,
        plus ``eta + eta_B S`` for every message (:attr:`message_compute_terms`); 0 for all
        with none on.

        >>> from fusionopt.cost import AlphaBeta
        >>> p = Profile.from_arrays([4, 8], [0, 0], [1, 1])
        >>> Problem(p, AlphaBeta(0, 1), copy_cost=0.5, copy_on="compute", message_compute=2.0
        ...         ).compute_per_message(np.array([1, 2]), np.array([4.0, 12.0])).tolist()
        [2.0, 8.0]
        >>> Problem(p, AlphaBeta(0, 1), message_compute=2.0, message_compute_per_byte=0.25
        ...         ).compute_per_message(np.array([1, 2]), np.array([4.0, 12.0])).tolist()
        [3.0, 5.0]
        """
        sizes = np.asarray(sizes, dtype=np.float64)
        eta, eta_byte = self.message_compute_terms
        work = eta + eta_byte * sizes
        if self.copy_on == "compute":
            work = work + self.copy_cost * sizes * (np.asarray(tensors) > 1)
        return work

    def plain(self) -> "Problem":
        """The same profile, cost and sync without extensions (for a parameter server: the
        all-reduce problem whose channel costs what its push channel costs); an encoding's
        compute-stream part is left out with them. A :attr:`compressor` stays: it may lower a
        message's price, so the problem without it would bound nothing."""
        cost = self.cost.on_path_only() if isinstance(self.cost, Encoded) else self.cost
        return Problem(self.profile, cost, sync=self.sync, compressor=self.compressor)

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
        defaults = {"copy_cost": 0.0, "copy_on": "channel", "message_compute": 0.0, "message_compute_per_byte": 0.0,
                    "contention": 1.0, "comm_contention": 1.0, "channels": 1, "step_parts": "refuse"}
        defaults["exact_tensors"] = ()
        defaults["compressor"] = None
        extras = "".join(f", {name}={getattr(self, name)!r}" for name, default in defaults.items()
                         if getattr(self, name) != default)
        if self.pattern.extension is not None:
            return f"Problem({self.profile!r}, sync={self.sync!r}{extras}, pattern={self.pattern!r})"
        return f"Problem({self.profile!r}, {self.cost!r}, sync={self.sync!r}{extras})"


def check_cost(cost: CommCost, profile: Profile) -> None:
    """Probe ``cost`` for MODEL.md section 2's rules on the sizes ``profile`` can send.

    The built-in models enforce ``c(0) = 0``, ``c >= 0`` and monotonicity by construction;
    a user's own ``CommCost`` is probed at 0, at every tensor size, at the total and on a
    geometric grid up to it, and rejected with the first violation named.

    >>> from fusionopt.cost import AlphaBeta
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
    if type(cost) is AlphaBeta and all(math.isfinite(v) and v >= 0 for v in (cost.alpha, cost.beta)):
        # alpha + beta S: zero at 0, finite, non-negative and monotone
        _check_summable(label, (cost.alpha + cost.beta * total) * profile.n, profile)
        return
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
            f"c({grid[k + 1]:.0f} B) = {times[k + 1]:.6g} s{getattr(cost, 'monotone_hint', '')}"
        )
    _check_summable(label, float(times[-1]) * profile.n, profile)


MAX_STEP_SECONDS = 1e300
"""The most seconds a cost may price a step's messages at (each tensor its own message, or
the whole gradient in each): beyond it, sums of times and their milliseconds overflow."""


def _check_summable(label: str, seconds: float, profile: Profile) -> None:
    if not seconds <= MAX_STEP_SECONDS:
        raise ValueError(f"cost model {label} prices the messages of a step of {profile.n} tensors at up to "
                         f"{seconds:.6g} s, beyond the {MAX_STEP_SECONDS:g} s that times can be summed in")
