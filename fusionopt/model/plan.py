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
from fusionopt.model.profile import Profile

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


def _whole(profile: Profile, i: int) -> Chunk:
    if not 0 <= i < profile.n:
        raise ValueError(f"tensor index {i} is out of range for a profile of {profile.n} tensors")
    return Chunk(i, 0, int(profile.sizes[i]))


@dataclass(frozen=True)
class Plan:
    """An ordered list of messages for one channel.

    Examples
    --------
    MODEL.md section 5: groups ``{t3}, {t2, t1}`` in channel order (0-based indices).

    >>> from fusionopt.model.profile import Profile
    >>> p = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> plan = Plan.from_groups(p, [[2], [1, 0]])
    >>> [m.nbytes for m in plan.messages]
    [2000000, 5000000]
    >>> plan.cuts(p).tolist()          # cut after the first tensor in backward order
    [True, False]
    >>> Plan.from_cuts(p, [True, False]) == plan
    True
    """

    messages: tuple[Message, ...]

    def __post_init__(self) -> None:
        messages = tuple(self.messages)
        if not messages:
            raise ValueError("a plan must hold at least one message")
        for m in messages:
            if not isinstance(m, Message):
                raise ValueError(f"a plan holds Message objects, got {m!r}")
        object.__setattr__(self, "messages", messages)

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
        messages = []
        for k, group in enumerate(groups):
            chunks = tuple(_whole(profile, int(i)) for i in group)
            if not chunks:
                raise ValueError(f"group {k} is empty")
            messages.append(Message(chunks))
        if release is not None:
            release = list(release)
            if len(release) != len(messages):
                raise ValueError(f"{len(release)} release times for {len(messages)} messages")
            messages = [Message(m.chunks, r) for m, r in zip(messages, release)]
        return cls(tuple(messages))

    @classmethod
    def per_tensor(cls, profile: Profile, order: Sequence[int] | None = None) -> "Plan":
        """One message per tensor, in backward order (the profile's ready order: WFBP)
        unless ``order`` is given."""
        if order is None:
            order = profile.ready_order
        return cls.from_groups(profile, [[i] for i in order])

    @classmethod
    def from_cuts(cls, profile: Profile, cuts: Sequence[bool] | np.ndarray) -> "Plan":
        """The fusion plan of a cut vector over backward order (the profile's ready order).

        ``cuts`` has ``n - 1`` entries; ``cuts[j]`` true means a message boundary after the
        ``(j+1)``-th tensor in backward order (forward index ``profile.ready_order[j]``,
        which is ``n - 1 - j`` by default). All false is the single message, all true is WFBP.

        >>> from fusionopt.model.profile import Profile
        >>> p = Profile.from_arrays([8, 8, 8], [0] * 3, [1, 1, 1])
        >>> [m.tensors for m in Plan.from_cuts(p, [False, True]).messages]
        [(2, 1), (0,)]
        """
        cuts = np.asarray(cuts)
        if cuts.shape != (profile.n - 1,):
            raise ValueError(f"cut vector must have n - 1 = {profile.n - 1} entries, got shape {cuts.shape}")
        cuts = cuts.astype(bool)
        groups: list[list[int]] = [[]]
        for j, i in enumerate(profile.ready_order):
            groups[-1].append(i)
            if j < profile.n - 1 and cuts[j]:
                groups.append([])
        return cls.from_groups(profile, groups)

    # ------------------------------------------------------------------ structure
    @property
    def num_messages(self) -> int:
        return len(self.messages)

    @property
    def message_bytes(self) -> np.ndarray:
        """Size of each message in bytes, channel order."""
        return np.array([m.nbytes for m in self.messages], dtype=np.int64)

    def groups(self) -> list[list[int]]:
        """The tensors of each message, as forward indices (chunks of one tensor counted once)."""
        return [list(m.tensors) for m in self.messages]

    @property
    def release(self) -> np.ndarray:
        """Release time of each message in seconds, channel order."""
        return np.array([m.release for m in self.messages], dtype=np.float64)

    @property
    def has_release(self) -> bool:
        """True if some message has a release time after 0."""
        return any(m.release > 0.0 for m in self.messages)

    def without_release(self) -> "Plan":
        """The same messages with every release time 0."""
        return Plan(tuple(Message(m.chunks) for m in self.messages))

    def is_fusion(self, profile: Profile) -> bool:
        """True if every message holds whole tensors, contiguous in backward order (the
        profile's ready order), the messages run in that order and none has a release time
        (MODEL.md section 3: a fusion plan)."""
        order = profile.ready_order
        position = 0
        for m in self.messages:
            if m.release > 0.0:
                return False
            for c in m.chunks:
                if (position >= len(order) or c.tensor != order[position] or c.lo != 0
                        or c.hi != int(profile.sizes[c.tensor])):
                    return False
                position += 1
        return position == len(order)

    def cuts(self, profile: Profile) -> np.ndarray:
        """The cut vector (see :meth:`from_cuts`) of a fusion plan; ``ValueError`` otherwise."""
        if not self.is_fusion(profile):
            raise ValueError("plan is not a fusion plan (whole tensors, contiguous in backward order, "
                             "in backward order, no release times)")
        cuts = np.zeros(profile.n - 1, dtype=bool)
        position = 0
        for m in self.messages[:-1]:
            position += len(m.chunks)
            cuts[position - 1] = True
        return cuts

    # ------------------------------------------------------------------ validation
    def validate(self, profile: Profile) -> "Plan":
        """Check that the plan sends every byte of every tensor of ``profile`` exactly once.

        Returns the plan itself; raises ``ValueError`` naming the tensor and the byte range
        that is missing, repeated or out of bounds.

        >>> from fusionopt.model.profile import Profile
        >>> p = Profile.from_arrays([100, 50], [0, 0], [1, 1], ["w", "b"])
        >>> Plan((Message((Chunk(1, 0, 50), Chunk(0, 0, 60))),)).validate(p)
        Traceback (most recent call last):
        ...
        ValueError: tensor 'w' (index 0): bytes [60, 100) are missing
        """
        by_tensor: dict[int, list[tuple[int, int, int]]] = {}
        for k, m in enumerate(self.messages):
            for c in m.chunks:
                if c.tensor >= profile.n:
                    raise ValueError(
                        f"message {k}: tensor index {c.tensor} is out of range for a profile of {profile.n} tensors"
                    )
                by_tensor.setdefault(c.tensor, []).append((c.lo, c.hi, k))
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
        return self

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schema": PLAN_SCHEMA,
            "version": PLAN_VERSION_RELEASE if self.has_release else PLAN_VERSION,
            "messages": [[[c.tensor, c.lo, c.hi] for c in m.chunks] for m in self.messages],
        }
        if self.has_release:
            doc["release"] = [m.release for m in self.messages]
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
