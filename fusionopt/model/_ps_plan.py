"""A parameter server's plan: a push and a pull :class:`~fusionopt.model.Plan`.

A :class:`PSPlan` holds the push plan and the pull plan of one profile, serialisable to JSON
(:data:`PSPLAN_SCHEMA`), with the byte-offset encoding searches use
(:meth:`PSPlan.from_offsets`, :func:`stream_offsets`); the pattern that judges it is
:class:`~fusionopt.model.ParameterServer`.

Examples
--------
>>> from fusionopt.model import Profile
>>> p = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
>>> plan = PSPlan.from_groups(p, push=[[2], [1], [0]], pull=[[0], [1], [2]])
>>> plan.validate(p).num_messages
6
"""

from __future__ import annotations

import bisect
import json
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from fusionopt.model._io import read_json_document, write_json_atomic
from fusionopt.model._plan import PLAN_SCHEMA, PLAN_VERSION, Chunk, Message, Plan
from fusionopt.model._profile import Profile

__all__ = ["PSPLAN_SCHEMA", "PSPLAN_VERSION", "PSPlan", "stream_offsets", "check_offsets"]

PSPLAN_SCHEMA = "fusionopt.psplan"
PSPLAN_VERSION = 1
DIRECTIONS = ("push", "pull")


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

    Each of ``push`` and ``pull`` is a :class:`~fusionopt.model.Plan` that sends every
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
        :func:`~fusionopt.model.offsets_iteration_time`.

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

        A message is a :class:`~fusionopt.model.Message` or a sequence of
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
