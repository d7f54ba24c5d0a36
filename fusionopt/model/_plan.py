"""Plans: ordered messages of tensor chunks on one channel (MODEL.md section 3).

A :class:`Chunk` is bytes ``[lo, hi)`` of one tensor (0-based forward index), a
:class:`Message` a non-empty list of chunks sent together, and a :class:`Plan` the messages
in channel order. A valid plan sends every byte of every tensor exactly once. A message may
carry a *release* time: the moment the framework posts it (Horovod's cycle tick), before
which it cannot start even when its chunks are ready (the model specification, section 3).

JSON schema (``version`` 1; ``version`` 2 when some message has a release time)::

    {"schema": "fusionopt.plan", "version": 1,
     "messages": [[[tensor, lo, hi], ...], ...],    # channel order; tensor = forward index
     "release": [0.0, 0.001, ...]}                  # version 2 only: seconds, one per message
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from fusionopt.model._io import read_json_document, write_json_atomic
from fusionopt.model._profile import Profile

PLAN_SCHEMA = "fusionopt.plan"
PLAN_VERSION = 1
PLAN_VERSION_RELEASE = 2


@dataclass(frozen=True, order=True)
class Chunk:
    """Bytes ``[lo, hi)`` of tensor ``tensor`` (0-based forward index).

    >>> Chunk(2, 0, 100).nbytes
    100
    """

    tensor: int
    lo: int
    hi: int

    def __post_init__(self) -> None:
        for label in ("tensor", "lo", "hi"):
            value = getattr(self, label)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"chunk {label} must be an integer, got {value!r}")
            object.__setattr__(self, label, int(value))
        if self.tensor < 0:
            raise ValueError(f"chunk tensor index must be >= 0, got {self.tensor}")
        if not 0 <= self.lo < self.hi:
            raise ValueError(
                f"chunk of tensor {self.tensor}: byte range [{self.lo}, {self.hi}) is empty or negative"
            )

    @property
    def nbytes(self) -> int:
        """Size of the chunk in bytes."""
        return self.hi - self.lo


@dataclass(frozen=True)
class Message:
    """A non-empty tuple of chunks reduced together as one collective call.

    ``release`` (seconds from the start of the backward, default 0) is the earliest moment
    the message may start: when its framework posts it, if that is after its chunks are
    ready.

    >>> Message((Chunk(1, 0, 10), Chunk(0, 0, 5))).nbytes
    15
    """

    chunks: tuple[Chunk, ...]
    release: float = 0.0

    def __post_init__(self) -> None:
        chunks = tuple(self.chunks)
        if not chunks:
            raise ValueError("a message must hold at least one chunk")
        for c in chunks:
            if not isinstance(c, Chunk):
                raise ValueError(f"a message holds Chunk objects, got {c!r}")
        object.__setattr__(self, "chunks", chunks)
        release = self.release
        if isinstance(release, (bool, np.bool_)) or not isinstance(release, (int, float, np.integer, np.floating)):
            raise ValueError(f"a message's release time must be a number of seconds, got {release!r}")
        if not math.isfinite(release) or release < 0:
            raise ValueError(f"a message's release time must be finite and >= 0 s, got {release!r}")
        object.__setattr__(self, "release", float(release))

    @property
    def nbytes(self) -> int:
        """Size of the message in bytes."""
        return sum(c.nbytes for c in self.chunks)

    @property
    def tensors(self) -> tuple[int, ...]:
        """Forward indices of the tensors it carries (in chunk order, without repeats)."""
        return tuple(dict.fromkeys(c.tensor for c in self.chunks))


def _chunk(tensor: int, lo: int, hi: int) -> Chunk:
    # A chunk of a checked table: its fields are known to be valid ints.
    chunk = object.__new__(Chunk)
    object.__setattr__(chunk, "tensor", tensor)
    object.__setattr__(chunk, "lo", lo)
    object.__setattr__(chunk, "hi", hi)
    return chunk


def _indices(label: str, values: Iterable[Any]) -> list[int]:
    """Tensor indices given in ``label``, integers (not bools, not floats), as ints."""
    try:
        indices = list(values)
    except TypeError:
        raise ValueError(f"{label} must be a sequence of tensor indices, got {values!r}") from None
    if all(type(i) is int for i in indices):                # the common case, checked at once
        return indices
    for i in indices:
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):
            raise ValueError(f"{label}: a tensor index must be an integer, got {i!r}")
    return [int(i) for i in indices]


def cut_vectors(given: Any, n: int, *, batch: bool = False) -> np.ndarray:
    """A cut vector over ``n`` tensors (``n - 1`` entries) or, with ``batch``, a matrix of them
    (plans, ``n - 1``), as booleans; an entry that is neither 0/1 nor a bool is refused, named
    as given with its position."""
    cuts = np.asarray(given)
    if not batch and cuts.shape != (n - 1,):
        raise ValueError(f"cut vector must have n - 1 = {n - 1} entries, got shape {cuts.shape}")
    if batch and (cuts.ndim != 2 or cuts.shape[1] != n - 1):
        raise ValueError(f"cut matrix must have shape (plans, n - 1 = {n - 1}), got {cuts.shape}")
    if cuts.dtype == bool:
        return cuts
    numeric = cuts.dtype.kind in "iuf"
    bad = ~np.isin(cuts, (0, 1)) if numeric else None
    if numeric and not bad.any():
        return cuts.astype(bool)
    entries = given.tolist() if isinstance(given, np.ndarray) else given
    # The first bad entry, as given: found at once in a numeric array, else one entry at a time.
    indices = [tuple(int(i) for i in np.argwhere(bad)[0])] if numeric else np.ndindex(cuts.shape)
    for index in indices:
        value = entries
        for i in index:
            value = value[i]
        if not _is_cut(value):
            where = index if batch else index[0]
            raise ValueError(f"cut vectors hold 0/1 or booleans, got {value!r} at position {where}")
    return cuts.astype(bool)


def _is_cut(value: Any) -> bool:
    """Whether ``value`` is a cut vector's entry: a bool, or a number equal to 0 or 1."""
    return (isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating))
            and not isinstance(value, (str, bytes)) and value in (0, 1))


def _integers(label: str, values: Any) -> np.ndarray:
    """A plan table's column ``label`` of integers (not bools, floats or strings), as int64."""
    array = np.asarray(values)
    if array.dtype == object and all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
                                     for v in array.ravel()):
        try:
            array = np.asarray(array.tolist(), dtype=np.int64)   # Python ints held as objects
        except OverflowError:
            raise ValueError(f"a plan table's {label} holds an integer beyond int64") from None
    if array.size and array.dtype.kind not in "iu":
        raise ValueError(f"a plan table's {label} must hold integers, got {array.dtype} values")
    return array.astype(np.int64)


def _whole(profile: Profile, i: int) -> Chunk:
    if not 0 <= i < profile.n:
        raise ValueError(f"tensor index {i} is out of range for a profile of {profile.n} tensors")
    return Chunk(i, 0, int(profile.sizes[i]))


class Plan:
    """An ordered list of messages for one channel, stored as a table.

    The table has one row per chunk, in channel order and chunk order within each message:
    ``tensor``, ``lo`` and ``hi`` (int64 arrays), the first row of each message
    (``starts``, ``M + 1`` entries, the last ``len(tensor)``) and each message's ``release``
    time. Plans from :meth:`from_cuts` and :meth:`from_groups` are built as tables directly,
    so a plan of 100,000 tensors costs no Python object per chunk; :attr:`messages` gives
    the same plan as :class:`Message` and :class:`Chunk` objects, built when first asked.
    ``Plan(messages)`` builds the table from messages.

    Examples
    --------
    MODEL.md section 5: groups ``{t3}, {t2, t1}`` in channel order (0-based indices).

    >>> from fusionopt.model import Profile
    >>> p = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> plan = Plan.from_groups(p, [[2], [1, 0]])
    >>> [m.nbytes for m in plan.messages]
    [2000000, 5000000]
    >>> plan.cuts(p).tolist()          # cut after the first tensor in backward order
    [True, False]
    >>> Plan.from_cuts(p, [True, False]) == plan
    True
    """

    __slots__ = ("tensor", "lo", "hi", "starts", "_release", "_messages")

    def __init__(self, messages: Iterable[Message]) -> None:
        messages = tuple(messages)
        if not messages:
            raise ValueError("a plan must hold at least one message")
        for m in messages:
            if not isinstance(m, Message):
                raise ValueError(f"a plan holds Message objects, got {m!r}")
        rows = [(c.tensor, c.lo, c.hi) for m in messages for c in m.chunks]
        table = np.array(rows, dtype=np.int64).reshape(-1, 3)
        counts = np.fromiter((len(m.chunks) for m in messages), dtype=np.int64, count=len(messages))
        self._set(table[:, 0], table[:, 1], table[:, 2], np.concatenate(([0], np.cumsum(counts))),
                  np.fromiter((m.release for m in messages), dtype=np.float64, count=len(messages)))
        object.__setattr__(self, "_messages", messages)

    def _set(self, tensor: np.ndarray, lo: np.ndarray, hi: np.ndarray, starts: np.ndarray,
             release: np.ndarray) -> None:
        for name, array in (("tensor", tensor), ("lo", lo), ("hi", hi), ("starts", starts), ("_release", release)):
            array = np.ascontiguousarray(array)
            array.setflags(write=False)
            object.__setattr__(self, name, array)
        object.__setattr__(self, "_messages", None)

    @classmethod
    def from_table(cls, tensor: Any, lo: Any, hi: Any, starts: Any, release: Any = None) -> "Plan":
        """A plan from its table (see the class docstring), checked as ``Plan(messages)``
        checks its messages: every message non-empty, every chunk ``0 <= lo < hi`` of a
        tensor ``>= 0``, release times finite and ``>= 0`` (default 0)."""
        tensor, lo, hi, starts = (_integers(label, x) for label, x in
                                  (("tensor", tensor), ("lo", lo), ("hi", hi), ("starts", starts)))
        count = len(starts) - 1
        if count < 1 or starts[0] != 0 or starts[-1] != len(tensor) or not len(tensor) == len(lo) == len(hi):
            raise ValueError("a plan table needs starts = [0, ..., rows] over rows of tensor, lo and hi "
                             "of one length, and at least one message")
        if np.any(np.diff(starts) <= 0):
            raise ValueError("a message must hold at least one chunk")
        bad = np.flatnonzero((tensor < 0) | (lo < 0) | (hi <= lo))
        if bad.size:
            Chunk(int(tensor[bad[0]]), int(lo[bad[0]]), int(hi[bad[0]]))      # raises its message
        if release is not None and np.asarray(release).size and np.asarray(release).dtype.kind not in "iuf":
            raise ValueError(f"release times must be numbers of seconds, got {np.asarray(release).dtype} values")
        release = np.zeros(count) if release is None else np.asarray(release, dtype=np.float64)
        if release.shape != (count,):
            raise ValueError(f"{release.size} release times for {count} messages")
        if not np.all(np.isfinite(release) & (release >= 0)):
            Message((Chunk(0, 0, 1),), float(release[~(np.isfinite(release) & (release >= 0))][0]))   # raises
        plan = object.__new__(cls)
        plan._set(tensor, lo, hi, starts, release)
        return plan

    @property
    def messages(self) -> tuple[Message, ...]:
        """The messages in channel order, as :class:`Message` objects."""
        if self._messages is None:
            tensor, lo, hi = self.tensor.tolist(), self.lo.tolist(), self.hi.tolist()
            starts, release = self.starts.tolist(), self._release.tolist()
            messages = tuple(Message(tuple(_chunk(tensor[r], lo[r], hi[r]) for r in range(starts[k], starts[k + 1])),
                                     release[k])
                             for k in range(len(starts) - 1))
            object.__setattr__(self, "_messages", messages)
        return self._messages

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Plan is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Plan):
            return NotImplemented
        return all(np.array_equal(a, b) for a, b in zip(self._key(), other._key()))

    def __hash__(self) -> int:
        return hash(tuple(array.tobytes() for array in self._key()))

    def _key(self) -> tuple[np.ndarray, ...]:
        return self.tensor, self.lo, self.hi, self.starts, self._release

    def __repr__(self) -> str:
        return f"Plan(messages={self.messages!r})"

    def __getstate__(self) -> tuple:
        return self._key()

    def __setstate__(self, state: tuple) -> None:
        self._set(*state)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_groups(cls, profile: Profile, groups: Iterable[Iterable[int]],
                    release: Sequence[float] | None = None) -> "Plan":
        """A plan of whole tensors: one message per group, groups in channel order.

        Parameters
        ----------
        groups : iterable of iterables of int
            0-based forward indices; each group becomes one message.
        release : sequence of float, optional
            Release time of each message in seconds (default 0 for all).
        """
        tensors: list[int] = []
        starts = [0]
        if isinstance(groups, (str, bytes)) or not hasattr(groups, "__iter__"):
            raise ValueError(f"groups must be a sequence of groups of tensor indices, got {groups!r}")
        for k, group in enumerate(groups):
            members = _indices(f"group {k}", group)
            if not members:
                raise ValueError(f"group {k} is empty")
            tensors.extend(members)
            starts.append(len(tensors))
        return cls._whole_tensors(profile, np.array(tensors, dtype=np.int64), np.array(starts, dtype=np.int64),
                                  release)

    @classmethod
    def _whole_tensors(cls, profile: Profile, tensors: np.ndarray, starts: np.ndarray,
                       release: Sequence[float] | None = None) -> "Plan":
        outside = np.flatnonzero((tensors < 0) | (tensors >= profile.n))
        if outside.size:
            _whole(profile, int(tensors[outside[0]]))                # raises its message
        if release is not None:
            if isinstance(release, (str, bytes)) or not hasattr(release, "__iter__"):
                raise ValueError(f"release must be a sequence of times, one per message, got {release!r}")
            release = list(release)
            if len(release) != len(starts) - 1:
                raise ValueError(f"{len(release)} release times for {len(starts) - 1} messages")
        if len(starts) < 2:
            raise ValueError("a plan must hold at least one message")
        hi = np.asarray(profile.sizes, dtype=np.int64)[tensors]
        if np.any(hi <= 0):
            _whole(profile, int(tensors[np.flatnonzero(hi <= 0)[0]]))     # raises its message
        return cls.from_table(tensors, np.zeros_like(tensors), hi, starts, release)

    @classmethod
    def per_tensor(cls, profile: Profile, order: Sequence[int] | None = None) -> "Plan":
        """One message per tensor, in backward order (the profile's ready order: WFBP)
        unless ``order`` is given."""
        order = profile.ready_order if order is None else _indices("order", order)
        return cls.from_groups(profile, [[i] for i in order])

    @classmethod
    def from_cuts(cls, profile: Profile, cuts: Sequence[bool] | np.ndarray) -> "Plan":
        """The fusion plan of a cut vector over backward order (the profile's ready order).

        ``cuts`` has ``n - 1`` entries; ``cuts[j]`` true means a message boundary after the
        ``(j+1)``-th tensor in backward order (forward index ``profile.ready_order[j]``,
        which is ``n - 1 - j`` by default). All false is the single message, all true is WFBP.

        >>> from fusionopt.model import Profile
        >>> p = Profile.from_arrays([8, 8, 8], [0] * 3, [1, 1, 1])
        >>> [m.tensors for m in Plan.from_cuts(p, [False, True]).messages]
        [(2, 1), (0,)]
        """
        cuts = cut_vectors(cuts, profile.n)
        starts = np.concatenate(([0], np.flatnonzero(cuts) + 1, [profile.n])).astype(np.int64)
        return cls._whole_tensors(profile, np.asarray(profile.backward_order, dtype=np.int64), starts)

    # ------------------------------------------------------------------ structure
    @property
    def num_messages(self) -> int:
        return len(self.starts) - 1

    @property
    def chunk_message(self) -> np.ndarray:
        """The message of each row of the table (channel order)."""
        return np.repeat(np.arange(self.num_messages), np.diff(self.starts))

    @property
    def message_bytes(self) -> np.ndarray:
        """Size of each message in bytes, channel order."""
        return np.add.reduceat(self.hi - self.lo, self.starts[:-1])

    def groups(self) -> list[list[int]]:
        """The tensors of each message, as forward indices (chunks of one tensor counted once)."""
        tensor, starts = self.tensor.tolist(), self.starts.tolist()
        return [list(dict.fromkeys(tensor[starts[k]:starts[k + 1]])) for k in range(len(starts) - 1)]

    @property
    def release(self) -> np.ndarray:
        """Release time of each message in seconds, channel order."""
        return self._release

    @property
    def has_release(self) -> bool:
        """True if some message has a release time after 0."""
        return bool(np.any(self._release > 0.0))

    def without_release(self) -> "Plan":
        """The same messages with every release time 0."""
        return Plan.from_table(self.tensor, self.lo, self.hi, self.starts)

    def is_fusion(self, profile: Profile) -> bool:
        """True if every message holds whole tensors, contiguous in backward order (the
        profile's ready order), the messages run in that order and none has a release time
        (MODEL.md section 3: a fusion plan)."""
        order = np.asarray(profile.backward_order)
        return bool(len(self.tensor) == len(order) and not self.has_release
                    and np.array_equal(self.tensor, order) and not np.any(self.lo)
                    and np.array_equal(self.hi, np.asarray(profile.sizes, dtype=np.int64)[order]))

    def cuts(self, profile: Profile) -> np.ndarray:
        """The cut vector (see :meth:`from_cuts`) of a fusion plan; ``ValueError`` otherwise."""
        if not self.is_fusion(profile):
            raise ValueError("plan is not a fusion plan (whole tensors, contiguous in backward order, "
                             "in backward order, no release times)")
        cuts = np.zeros(profile.n - 1, dtype=bool)
        cuts[self.starts[1:-1] - 1] = True
        return cuts

    # ------------------------------------------------------------------ validation
    def validate(self, profile: Profile) -> "Plan":
        """Check that the plan sends every byte of every tensor of ``profile`` exactly once.

        Returns the plan itself; raises ``ValueError`` naming the tensor and the byte range
        that is missing, repeated or out of bounds.

        >>> from fusionopt.model import Profile
        >>> p = Profile.from_arrays([100, 50], [0, 0], [1, 1], ["w", "b"])
        >>> Plan((Message((Chunk(1, 0, 50), Chunk(0, 0, 60))),)).validate(p)
        Traceback (most recent call last):
        ...
        ValueError: tensor 'w' (index 0): bytes [60, 100) are missing
        """
        n = profile.n
        if np.all(self.tensor < n):
            # Sorted by tensor, then byte: each tensor's pieces must tile [0, size) exactly.
            rows = np.lexsort((self.lo, self.tensor))
            tensor, lo, hi = self.tensor[rows], self.lo[rows], self.hi[rows]
            first = np.ones(len(rows), dtype=bool)
            first[1:] = tensor[1:] != tensor[:-1]
            last = np.ones(len(rows), dtype=bool)
            last[:-1] = first[1:]
            sizes = np.asarray(profile.sizes, dtype=np.int64)
            if (np.array_equal(tensor[first], np.arange(n)) and not np.any(lo[first])
                    and np.array_equal(lo[~first], hi[np.flatnonzero(~first) - 1])
                    and np.array_equal(hi[last], sizes)):
                return self
        self._explain_invalid(profile)
        raise AssertionError("validate found a fault it cannot name")     # pragma: no cover

    def _explain_invalid(self, profile: Profile) -> None:
        """Raise the ``ValueError`` that names the first fault of an invalid plan."""
        by_tensor: dict[int, list[tuple[int, int, int]]] = {}
        message = self.chunk_message.tolist()
        for k, tensor, lo, hi in zip(message, self.tensor.tolist(), self.lo.tolist(), self.hi.tolist()):
            if tensor >= profile.n:
                raise ValueError(
                    f"message {k}: tensor index {tensor} is out of range for a profile of {profile.n} tensors"
                )
            by_tensor.setdefault(tensor, []).append((lo, hi, k))
        for i in range(profile.n):
            label = f"tensor {profile.names[i]!r} (index {i})"
            size = int(profile.sizes[i])
            pieces = sorted(by_tensor.get(i, []))
            if not pieces:
                raise ValueError(f"{label}: bytes [0, {size}) are missing (the tensor is in no message)")
            covered, covered_by = 0, -1
            for lo, hi, k in pieces:
                if hi > size:
                    raise ValueError(f"{label}: message {k} sends bytes [{max(lo, size)}, {hi}) beyond its size of {size} bytes")
                if lo > covered:
                    raise ValueError(f"{label}: bytes [{covered}, {lo}) are missing")
                if lo < covered:
                    raise ValueError(
                        f"{label}: bytes [{lo}, {min(hi, covered)}) are repeated (messages {covered_by} and {k})"
                    )
                covered, covered_by = hi, k
            if covered < size:
                raise ValueError(f"{label}: bytes [{covered}, {size}) are missing")

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schema": PLAN_SCHEMA,
            "version": PLAN_VERSION_RELEASE if self.has_release else PLAN_VERSION,
            "messages": [[[c.tensor, c.lo, c.hi] for c in m.chunks] for m in self.messages],
        }
        if self.has_release:
            doc["release"] = self._release.tolist()
        return doc

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, source: str = "plan") -> "Plan":
        if not isinstance(doc, Mapping):
            raise ValueError(f"{source}: expected a JSON object")
        if doc.get("schema", PLAN_SCHEMA) != PLAN_SCHEMA:
            raise ValueError(f"{source}: schema is {doc.get('schema')!r}, expected {PLAN_SCHEMA!r}")
        unknown = [key for key in doc if key not in ("schema", "version", "messages", "release")]
        if unknown:
            raise ValueError(f"{source}: unknown key {unknown[0]!r} (a plan holds schema, version, messages, release)")
        version = doc.get("version")
        if version not in (PLAN_VERSION, PLAN_VERSION_RELEASE):
            raise ValueError(f"{source}: unsupported plan version {version!r} "
                             f"(this fusionopt reads {PLAN_VERSION} and {PLAN_VERSION_RELEASE})")
        release = doc.get("release")
        if release is not None and version != PLAN_VERSION_RELEASE:
            raise ValueError(f"{source}: 'release' needs plan version {PLAN_VERSION_RELEASE}, the file says {version!r}")
        raw = doc.get("messages")
        if not isinstance(raw, list):
            raise ValueError(f"{source}: 'messages' must be a list")
        messages = []
        for k, m in enumerate(raw):
            if not isinstance(m, list):
                raise ValueError(f"{source}: messages[{k}] must be a list of [tensor, lo, hi] chunks")
            chunks = []
            for j, c in enumerate(m):
                if not (isinstance(c, list) and len(c) == 3):
                    raise ValueError(f"{source}: messages[{k}][{j}] must be [tensor, lo, hi], got {c!r}")
                try:
                    chunks.append(Chunk(*c))
                except ValueError as exc:
                    raise ValueError(f"{source}: messages[{k}][{j}]: {exc}") from None
            try:
                messages.append(Message(tuple(chunks)))
            except ValueError as exc:
                raise ValueError(f"{source}: messages[{k}]: {exc}") from None
        if release is not None:
            if not isinstance(release, list) or len(release) != len(messages):
                raise ValueError(f"{source}: 'release' must be a list of {len(messages)} numbers, one per message")
            for k, r in enumerate(release):
                try:
                    messages[k] = Message(messages[k].chunks, r)
                except ValueError as exc:
                    raise ValueError(f"{source}: release[{k}]: {exc}") from None
        try:
            return cls(tuple(messages))
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    def write(self, path: str | Path) -> None:
        """Write the plan as JSON to ``path`` atomically."""
        write_json_atomic(path, self.to_dict())

    @classmethod
    def read(cls, path: str | Path) -> "Plan":
        """Read a plan JSON file; malformed files raise ``ValueError`` naming the file."""
        return cls.from_dict(read_json_document(path), source=str(path))
