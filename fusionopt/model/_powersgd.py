"""PowerSGD on the wire (MODEL.md section 2.4): torch's ``powerSGD_hook`` as the model prices it.

Read in ``torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py`` of torch 2.13 and
checked against it on real DDP (2 gloo ranks, ``tests/integrations/test_powersgd_gloo.py``).
For each DDP bucket, once ``start_powerSGD_iter`` steps have run with the plain all-reduce,
the hook

* views each gradient as the matrix ``tensor.view(shape[0], -1)``, ``n x m``, and clips the
  rank to ``r' = min(n, m, matrix_approximation_rank)``;
* compresses it where ``(n + m) r' min_compression_rate < n m`` (``_should_compress``); a
  vector (a bias: ``m = 1``) never passes, nor does a small matrix;
* all-reduces the uncompressed gradients as one flat tensor, then the ``P`` factors
  (``n r'`` elements a matrix), then the ``Q`` factors (``m r'``): three all-reduces, one after
  the other, in the bucket's dtype, each issued whether or not it has elements;
* computes ``P = M Q``, ``Q = M^T P`` and ``M = P Q^T`` (``2 n m r'`` flops each) with
  orthogonalisations between, and with error feedback adds the last step's error to the
  bucket and keeps a copy of it.

A bucket then costs ``c(U) + c(P) + c(Q) + compute`` (:meth:`PowerSGD.message_seconds`), with
``U``, ``P``, ``Q`` its three all-reduces' bytes and ``compute = seconds_per_message +
seconds_per_byte B + seconds_per_flop F`` (``B`` the bucket's bytes, ``F`` its products'
flops). The compute lies on the message's path: exact where it runs on the communication
stream, optimistic where it delays the backward (the first product runs in the hook's call,
on the thread and stream of the backward, where section 2.2 can put a cast). The hook issues all three
all-reduces, an empty one included, so each pays its startup: an empty one costs ``alpha``
where ``c`` is affine and ``c(1 B)`` otherwise, and a bucket's startups are ``3 alpha``.

The error is the rank-``r'`` approximation's, which depends on the gradients' spectra: the
model states no bound (with error feedback the part left out is added to the next step's
gradient).

:meth:`PowerSGD.priced` turns an all-reduce problem with an affine cost into one whose every
simulator, bound and solver prices each message as PowerSGD sends it: each tensor's size is
what it adds to a bucket's time, in bytes of the link (``wire + compute / beta``, to the
nearest byte), and the cost ``alpha' = 3 alpha + seconds_per_message``, ``beta`` as it was.

Examples
--------
A 256 x 1024 weight at rank 4 sends ``(256 + 1024) 4`` elements, a 51.2x compression; its
bias of 256 travels as it is:

>>> p = PowerSGD(rank=4)
>>> p.split([(256, 1024), (256,)])
TensorSplit(numel=(262144, 256), p=(1024, 0), q=(4096, 0), flops=(6291456, 0))
>>> p.split([(256, 1024), (256,)]).uncompressed
(0, 256)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from fusionopt.model._compressor import Compressor
from fusionopt.model._cost import AlphaBeta, CommCost, check_param
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._profile import Profile


@dataclass(frozen=True)
class TensorSplit:
    """Per tensor, what :class:`PowerSGD` makes of it: its ``numel``, the elements it puts in
    the ``P`` and the ``Q`` all-reduce (none where it is not compressed), and the ``flops`` of
    its three products (``6 n m r'`` where compressed, else 0)."""

    numel: tuple[int, ...]
    p: tuple[int, ...]
    q: tuple[int, ...]
    flops: tuple[int, ...]

    @property
    def compressed(self) -> tuple[bool, ...]:
        """Whether each tensor is compressed: it sends ``P`` factors."""
        return tuple(p > 0 for p in self.p)

    @property
    def uncompressed(self) -> tuple[int, ...]:
        """The elements each tensor puts in the uncompressed all-reduce: all of them where it
        is not compressed."""
        return tuple(0 if p > 0 else n for n, p in zip(self.numel, self.p))

    def of(self, tensors: Sequence[int]) -> "TensorSplit":
        """The split of the tensors at positions ``tensors`` (a bucket's)."""
        pick = [int(i) for i in tensors]
        return TensorSplit(*(tuple(getattr(self, f)[i] for i in pick) for f in ("numel", "p", "q", "flops")))

    @property
    def elements(self) -> tuple[int, int, int]:
        """The three all-reduces' elements when these tensors form one bucket: the
        uncompressed, the ``P`` and the ``Q`` all-reduce."""
        return sum(self.uncompressed), sum(self.p), sum(self.q)

    def compression_rate(self) -> float:
        """Elements before over elements after over these tensors: torch's
        ``PowerSGDState.compression_stats()[0]`` after one step of them."""
        return sum(self.numel) / sum(self.elements)


def _startup(cost: CommCost) -> float:
    """What an issued all-reduce costs however few its bytes: ``alpha`` on an affine cost,
    ``c(1 B)`` otherwise."""
    affine = cost.affine
    return affine[0] if affine is not None else float(cost(1.0))


def _check_count(label: str, value: Any, least: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"PowerSGD: {label} must be an integer >= {least}, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class PowerSGD(Compressor):
    """torch's ``PowerSGDState`` (torch 2.13) with the hook's compute priced (module docstring).
    As a :class:`~fusionopt.model.Compressor` (``Problem(..., compressor=PowerSGD(...))``) it
    is one choice per message among the cost's encodings (MODEL.md section 2.4).

    Parameters
    ----------
    rank : int
        ``matrix_approximation_rank`` (torch's default 1).
    min_compression_rate : float
        ``min_compression_rate`` (default 2): a matrix is compressed where its elements exceed
        this many times its factors' elements.
    start_iter : int
        ``start_powerSGD_iter`` (default 1000): the steps run with the plain all-reduce
        first. torch refuses ``<= 1`` with error feedback or warm start, and so does this.
    use_error_feedback, warm_start : bool
        torch's switches (default on). They change the error, not the price: the model's
        compute is priced per byte and per flop as given.
    seconds_per_byte : float
        The hook's passes over the bucket (error feedback, the copies), seconds per byte of it.
    seconds_per_flop : float
        The three products, seconds per flop.
    seconds_per_message : float
        What else a bucket's hook costs (launches, the orthogonalisations), seconds.
    """

    rank: int = 1
    min_compression_rate: float = 2.0
    start_iter: int = 1000
    use_error_feedback: bool = True
    warm_start: bool = True
    seconds_per_byte: float = 0.0
    seconds_per_flop: float = 0.0
    seconds_per_message: float = 0.0

    name = "powersgd"

    def __post_init__(self) -> None:
        object.__setattr__(self, "rank", _check_count("rank", self.rank, 1))
        object.__setattr__(self, "start_iter", _check_count("start_iter", self.start_iter, 0))
        for label in ("use_error_feedback", "warm_start"):
            if not isinstance(getattr(self, label), (bool, np.bool_)):
                raise ValueError(f"PowerSGD: {label} must be True or False, got {getattr(self, label)!r}")
        for label in ("min_compression_rate", "seconds_per_byte", "seconds_per_flop", "seconds_per_message"):
            object.__setattr__(self, label, check_param(f"PowerSGD: {label}", getattr(self, label)))
        if (self.use_error_feedback or self.warm_start) and self.start_iter <= 1:
            raise ValueError(f"PowerSGD: start_iter must be > 1 with error feedback or warm start (as torch "
                             f"requires), got {self.start_iter}")

    # ------------------------------------------------------------------ what each tensor sends
    def split(self, shapes: Sequence[Sequence[int]], names: Sequence[str] | None = None) -> TensorSplit:
        """What the hook makes of tensors of ``shapes`` (module docstring), in the same order.
        A 0-d tensor, which the hook cannot view as a matrix, is refused in one line naming it
        (by ``names``, else its position)."""
        numel, p, q, flops = [], [], [], []
        for k, shape in enumerate(shapes):
            dims = tuple(int(d) for d in shape)
            if not dims:
                raise ValueError(f"PowerSGD: tensor {k if names is None else names[k]!r} is 0-d: torch's powerSGD_hook views each gradient as "
                                 "tensor.view(shape[0], -1) and fails on it")
            n = dims[0]
            m = math.prod(dims[1:])
            r = min(n, m, self.rank)
            yes = (n + m) * r * self.min_compression_rate < n * m
            numel.append(n * m)
            p.append(n * r if yes else 0)
            q.append(m * r if yes else 0)
            flops.append(6 * n * m * r if yes else 0)
        return TensorSplit(tuple(numel), tuple(p), tuple(q), tuple(flops))

    def of_profile(self, profile: Profile) -> TensorSplit:
        """:meth:`split` of ``profile``'s tensors, which must have shapes; one line naming the
        profile otherwise."""
        if not isinstance(profile, Profile):
            raise ValueError(f"PowerSGD: expected a Profile, got {type(profile).__name__}")
        if profile.shapes is None:
            raise ValueError(f"PowerSGD: profile {profile.name or '(unnamed)'!r} has no tensor shapes, and the hook "
                             "compresses each gradient as a matrix of its shape")
        return self.split(profile.shapes, profile.names)

    # ------------------------------------------------------------------ what a bucket costs
    def compute_seconds(self, nbytes: Any, flops: Any) -> Any:
        """The hook's compute for a bucket of ``nbytes`` bytes whose products take ``flops``
        (numbers, or arrays of them, bucket by bucket)."""
        return self.seconds_per_message + self.seconds_per_byte * nbytes + self.seconds_per_flop * flops

    def message_seconds(self, cost: CommCost, profile: Profile, tensors: Sequence[int]) -> float:
        """Seconds a bucket of ``profile``'s ``tensors`` (forward indices) takes under the hook
        on ``cost``, any cost: ``c(U) + c(P) + c(Q)``, an empty one at its startup, plus
        :meth:`compute_seconds` (module docstring).

        >>> from fusionopt.cost import AlphaBeta
        >>> prof = Profile.from_arrays([1048576, 1024], [0, 0], [1e-3, 1e-3], ["w", "b"], shapes=[(256, 1024), (256,)])
        >>> round(PowerSGD(rank=4).message_seconds(AlphaBeta(1e-4, 1e-9), prof, [0, 1]) * 1e6, 6)  # 3 x 100 + 21504 B
        321.504
        """
        if not tensors:
            return 0.0
        parts = self.tensor_parts(profile)[:, list(tensors)].sum(axis=1, keepdims=True)
        return float(self.parts_seconds(cost, parts)[0])

    def alters(self, profile: Profile) -> np.ndarray:
        """Per tensor of ``profile``, whether the hook compresses it (:meth:`split`); the
        others travel as they are, in the uncompressed all-reduce."""
        return np.array(self.of_profile(profile).compressed, dtype=bool)

    def least_seconds(self, cost: CommCost) -> float:
        """A bucket's three all-reduces each cost at least an empty one's startup (``alpha``
        on an affine cost, ``c(1 B)`` otherwise), and its compute at least
        ``seconds_per_message``."""
        return 3 * _startup(cost) + self.seconds_per_message

    def tensor_parts(self, profile: Profile) -> np.ndarray:
        """Per tensor (columns, forward indices), what it adds to a bucket under the hook: the
        bytes it puts in the uncompressed, the ``P`` and the ``Q`` all-reduce, its own bytes
        and its products' flops (rows, in that order), float64."""
        split = self.of_profile(profile)
        element = profile.element_bytes.astype(np.float64)
        return np.array([np.asarray(split.uncompressed) * element, np.asarray(split.p) * element,
                         np.asarray(split.q) * element, profile.sizes.astype(np.float64),
                         np.asarray(split.flops, dtype=np.float64)])

    def parts_seconds(self, cost: CommCost, parts: np.ndarray) -> np.ndarray:
        """Seconds of buckets whose :meth:`tensor_parts` add up to the columns of ``parts``, on
        ``cost``: ``c(U) + c(P) + c(Q)`` (an empty all-reduce at its startup: ``alpha`` where
        ``cost`` is affine, ``c(1 B)`` otherwise) plus :meth:`compute_seconds`; 0 for a bucket
        of no bytes."""
        parts = np.asarray(parts, dtype=np.float64)
        wire = parts[:3]
        priced = np.asarray(cost(np.maximum(wire, 0.0).ravel()), dtype=np.float64).reshape(wire.shape)
        seconds = np.where(wire > 0, priced, _startup(cost)).sum(axis=0) + self.compute_seconds(parts[3], parts[4])
        return np.where(parts[3] > 0, seconds, 0.0)

    def priced(self, problem: Problem) -> Problem:
        """``problem`` with every message priced as the hook sends it (module docstring): the
        same tensors, times and orders, each tensor's size the bytes of the link it adds to a
        bucket's time (its wire bytes plus its compute over ``beta``, to the nearest byte), on
        ``AlphaBeta(3 alpha + seconds_per_message, beta)``, with ``problem``'s compute per
        message (a reducer's, section 2.1) on each bucket as before. Its sizes are prices, not
        payloads: a layout that depends on the bytes (DDP's buckets) is computed on
        ``problem`` and judged on this one. One line where ``problem`` is not a plain
        all-reduce, its cost is not affine, or its profile has no shapes.

        >>> from fusionopt.cost import AlphaBeta
        >>> prof = Profile.from_arrays([1048576, 1024], [0, 0], [1e-3, 1e-3], ["w", "b"], shapes=[(256, 1024), (256,)])
        >>> priced = PowerSGD(rank=4, seconds_per_flop=1e-12).priced(Problem(prof, AlphaBeta(1e-4, 1e-9)))
        >>> priced.profile.sizes.tolist(), round(priced.cost.alpha * 1e6, 9)   # 20480 B + 6.29 us at 1 ns/B
        ([26771, 1024], 300.0)
        """
        if not isinstance(problem, Problem):
            raise ValueError(f"PowerSGD: expected a Problem, got {type(problem).__name__}")
        per_message = problem.message_compute_terms == (problem.message_compute, 0.0)
        others = [e for e in problem.extensions if not (e == "message_compute" and per_message)]
        if others:
            raise ValueError(f"PowerSGD prices the plain all-reduce's messages (a compute per message aside), and "
                             f"this problem has {', '.join(others)} on")
        affine = problem.cost.affine
        if affine is None:
            raise ValueError(f"PowerSGD: a problem priced for the hook needs an affine cost (alpha + beta S), and "
                             f"{type(problem.cost).__name__} is not; price a bucket on any cost with message_seconds")
        alpha, beta = affine
        profile = problem.profile
        parts = self.tensor_parts(profile)
        wire = parts[:3].sum(axis=0)
        compute = self.seconds_per_byte * parts[3] + self.seconds_per_flop * parts[4]     # per message: in alpha'
        if beta == 0 and compute.any():
            raise ValueError("PowerSGD: the hook's compute is priced in bytes of the link, and this cost has no "
                             "per-byte term (beta = 0)")
        sizes = np.rint(wire + (compute / beta if beta > 0 else 0.0)).astype(np.int64)
        priced = Profile(
            names=profile.names, sizes=sizes, forward=profile.forward, backward=profile.backward,
            update=profile.update, name=f"{profile.name} (PowerSGD rank {self.rank})".strip(),
            metadata={**profile.metadata, "powersgd": self.to_dict()}, ready_order=profile.ready_order,
            registration_order=profile.registration_order, **profile.step_parts)
        return Problem(priced, AlphaBeta(3 * alpha + self.seconds_per_message, beta), sync=problem.sync,
                       message_compute=problem.message_compute)

    @staticmethod
    def require_buckets(plan: Any, profile: Profile, what: str) -> None:
        """Raise a one-line ``ValueError`` unless ``plan`` (``what``, for the message) is a fusion
        plan of ``profile``: whole tensors in the ready order, as DDP's buckets are, which the
        hook compresses gradient by gradient."""
        if not isinstance(plan, Plan) or not plan.is_fusion(profile):
            raise ValueError(f"{what} cuts tensors or leaves the ready order, and torch's powerSGD_hook compresses "
                             "each whole gradient of a DDP bucket")

    def mean_step(self, plain: float, compressed: float, steps: int) -> float:
        """Seconds a step on average over the first ``steps`` steps: the first ``start_iter``
        take ``plain`` (the hook's plain all-reduce), the rest ``compressed``.

        >>> PowerSGD(start_iter=10).mean_step(2.0, 1.0, 20)
        1.5
        """
        steps = _check_count("steps", steps, 1)
        warm = min(steps, self.start_iter)
        return (warm * check_param("plain", plain) + (steps - warm) * check_param("compressed", compressed)) / steps

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "min_compression_rate": self.min_compression_rate, "start_iter": self.start_iter,
                "use_error_feedback": self.use_error_feedback, "warm_start": self.warm_start,
                "seconds_per_byte": self.seconds_per_byte, "seconds_per_flop": self.seconds_per_flop,
                "seconds_per_message": self.seconds_per_message}


__all__ = ["PowerSGD", "TensorSplit"]
