"""A fully sharded plan (MODEL.md section 8.2): units, resharding and prefetch depths.

A :class:`ShardedPlan` holds the units (contiguous tensor ranges, FSDP's ``fully_shard``
groups or ZeRO-3's fetch buckets), whether each is resharded after its forward, the forward
and backward prefetch depths, and optionally a grouping of the reduce-scatters independent
of the units (``reduce_bounds``: DeepSpeed ZeRO-3's gradient buckets). Its JSON document
(:data:`SHARDED_SCHEMA`) is read and written here; the pattern that judges it is
:class:`~fusionopt.model.FullySharded`.

Examples
--------
>>> from fusionopt.model import Profile
>>> p = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
>>> plan = ShardedPlan.from_units(p, [[0, 1], [2]], reshard=[True, False])
>>> plan.bounds.tolist(), plan.unit_bytes(p).tolist(), plan.num_units
([0, 2, 3], [5000000, 2000000], 2)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from fusionopt.model._io import read_json_document, write_json_atomic
from fusionopt.model._profile import Profile
from fusionopt.model._cost import check_flag

__all__ = ["ShardedPlan", "SHARDED_SCHEMA", "SHARDED_VERSION"]

SHARDED_SCHEMA = "fusionopt.shardedplan"
SHARDED_VERSION = 1


def _depth(label: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{label} must be a whole number of units >= 0, got {value!r}")
    return int(value)


class ShardedPlan:
    """Units, reshard flags and prefetch depths of a fully sharded step (MODEL.md 8.2).

    Parameters
    ----------
    bounds : sequence of int
        ``0 = b_0 < b_1 < ... < b_m = n``: unit ``j`` (from 0) holds tensors
        ``b_j .. b_(j+1) - 1`` in forward order.
    reshard : sequence of bool, optional
        Per unit: its parameters are freed after its forward and gathered again for its
        backward (FSDP's ``reshard_after_forward=True``). Default: every unit.
    forward_prefetch, backward_prefetch : int
        ``d_f`` and ``d_b``, units (default 1 each). Unit ``j``'s forward all-gather is
        issued when the forward of unit ``j - d_f`` starts, its backward all-gather when the
        backward of unit ``j + d_b`` starts; ``0`` issues it when the unit before it in
        that pass ends (no prefetch).
    root : bool
        The first and the last unit are one unit, FSDP's root (the parameters outside every
        wrapped block: embeddings before the blocks, the final norm and head after them):
        gathered once, first, in one all-gather of both parts; kept whole until the end of
        the backward; reduce-scattered once, in one message, when the backward ends. Both
        parts must be kept (not resharded), and there must be at least two units.
    names : sequence of str, optional
        A label per unit (the module FSDP wraps), for settings and reports.
    reduce_bounds : sequence of int, optional
        ``0 = c_0 < c_1 < ... < c_k = n``: the gradients are reduce-scattered in ``k``
        groups of consecutive tensors (forward order), independent of the units; group ``g``
        holds tensors ``c_g .. c_(g+1) - 1``. Its reduce-scatter is issued when the last of
        its tensors' gradients is ready in the backward
        (:func:`~fusionopt.model.simulate_sharded`). None (the default): one
        group per unit, each reduce-scattered when its unit's backward ends. Not with
        ``root``.
    persistent : sequence of bool, optional
        Per tensor: kept whole all the time, outside its unit's gathers (DeepSpeed ZeRO-3's
        persistent parameters, ``stage3_param_persistence_threshold``): each is gathered
        alone once per step, after the optimiser, and the next forward waits for those
        gathers (:func:`~fusionopt.model.simulate_sharded`). Its gradient
        is reduce-scattered with its unit or group. None: no tensor is.

    >>> plan = ShardedPlan([0, 2, 3], reduce_bounds=[0, 1, 3])
    >>> plan.reduce_groups().tolist(), plan.num_messages      # 2 gathers, 2 regathers, 2 reduce-scatters
    ([0, 1, 3], 6)
    >>> ShardedPlan([0, 1, 3], root=True, reduce_bounds=[0, 3])
    Traceback (most recent call last):
    ...
    ValueError: reduce_bounds does not combine with root=True (the root's reduce-scatter is its own message)
    """

    __slots__ = ("bounds", "reshard", "forward_prefetch", "backward_prefetch", "root", "names", "reduce_bounds",
                 "persistent")

    def __init__(self, bounds: Sequence[int] | np.ndarray, reshard: Sequence[bool] | np.ndarray | None = None, *,
                 forward_prefetch: int = 1, backward_prefetch: int = 1, root: bool = False,
                 names: Sequence[str] | None = None,
                 reduce_bounds: Sequence[int] | np.ndarray | None = None,
                 persistent: Sequence[bool] | np.ndarray | None = None) -> None:
        cuts = np.asarray(bounds)
        if cuts.ndim != 1 or cuts.size < 2 or not np.issubdtype(cuts.dtype, np.integer):
            raise ValueError("bounds must list the unit boundaries 0 = b_0 < b_1 < ... < b_m = n as integers")
        cuts = cuts.astype(np.int64)
        if cuts[0] != 0:
            raise ValueError(f"bounds must start at tensor 0, got {int(cuts[0])}")
        steps = np.diff(cuts)
        if (steps <= 0).any():
            j = int(np.argmax(steps <= 0))
            raise ValueError(f"unit {j} is empty or backwards: bounds {int(cuts[j])} then {int(cuts[j + 1])}")
        m = cuts.size - 1
        check_flag("root", root)
        if root and m < 2:
            raise ValueError("a root needs at least two units: the first and the last are its two parts")
        if reshard is None:
            flags = np.ones(m, dtype=bool)
            if root:
                flags[[0, m - 1]] = False
        else:
            flags = np.asarray(reshard)
            if flags.shape != (m,) or not (flags.dtype == bool or np.isin(flags, (0, 1)).all()):
                raise ValueError(f"reshard must give True or False for each of the {m} units")
            flags = flags.astype(bool)
            if root and (flags[0] or flags[m - 1]):
                raise ValueError("the root (the first and the last unit) is kept whole until the end of the backward: "
                                 "its reshard flags must be False")
        if names is not None:
            names = tuple(str(name) for name in names)
            if len(names) != m:
                raise ValueError(f"names must give a label for each of the {m} units, got {len(names)}")
        groups = None
        if reduce_bounds is not None:
            if root:
                raise ValueError("reduce_bounds does not combine with root=True "
                                 "(the root's reduce-scatter is its own message)")
            groups = np.asarray(reduce_bounds)
            if groups.ndim != 1 or groups.size < 2 or not np.issubdtype(groups.dtype, np.integer):
                raise ValueError("reduce_bounds must list the group boundaries 0 = c_0 < c_1 < ... < c_k = n "
                                 "as integers")
            groups = groups.astype(np.int64)
            if groups[0] != 0 or groups[-1] != cuts[-1]:
                raise ValueError(f"reduce_bounds must run from tensor 0 to {int(cuts[-1])} like the units, "
                                 f"got {int(groups[0])} .. {int(groups[-1])}")
            gaps = np.diff(groups)
            if (gaps <= 0).any():
                g = int(np.argmax(gaps <= 0))
                raise ValueError(f"reduce-scatter group {g} is empty or backwards: reduce_bounds "
                                 f"{int(groups[g])} then {int(groups[g + 1])}")
            groups.setflags(write=False)
        kept = None
        if persistent is not None:
            kept = np.asarray(persistent)
            n = int(cuts[-1])
            if kept.shape != (n,) or not (kept.dtype == bool or np.isin(kept, (0, 1)).all()):
                raise ValueError(f"persistent must give True or False for each of the {n} tensors")
            kept = kept.astype(bool)
            if not kept.any():
                kept = None                               # the same plan as no persistent tensor
            else:
                kept.setflags(write=False)
        for array in (cuts, flags):
            array.setflags(write=False)
        self.bounds, self.reshard, self.names, self.root = cuts, flags, names, bool(root)
        self.reduce_bounds = groups
        self.persistent = kept
        self.forward_prefetch = _depth("forward_prefetch", forward_prefetch)
        self.backward_prefetch = _depth("backward_prefetch", backward_prefetch)

    @classmethod
    def from_units(cls, profile: Profile, units: Sequence[Sequence[int]], reshard: Sequence[bool] | None = None,
                   **options: Any) -> "ShardedPlan":
        """Units given as lists of tensors (forward indices), each a run of consecutive tensors,
        in forward order, together covering the profile."""
        bounds = [0]
        for j, unit in enumerate(units):
            tensors = [int(i) for i in unit]
            if tensors != list(range(bounds[-1], bounds[-1] + len(tensors))) or not tensors:
                raise ValueError(f"unit {j} must hold the tensors {bounds[-1]}, {bounds[-1] + 1}, ... in order, "
                                 f"got {tensors}")
            bounds.append(bounds[-1] + len(tensors))
        if bounds[-1] != profile.n:
            raise ValueError(f"the units cover tensors 0..{bounds[-1] - 1}; the profile has {profile.n}")
        return cls(bounds, reshard, **options)

    @classmethod
    def per_tensor(cls, profile: Profile, **options: Any) -> "ShardedPlan":
        """A unit per tensor."""
        return cls(np.arange(profile.n + 1), **options)

    @property
    def num_units(self) -> int:
        return self.bounds.size - 1

    @property
    def num_messages(self) -> int:
        """Collectives per step: an all-gather and a reduce-scatter per unit (the root's two
        parts count once), and a second all-gather per resharded unit; with
        ``reduce_bounds``, a reduce-scatter per group instead of per unit."""
        scatters = self.num_units - int(self.root) if self.reduce_bounds is None else self.reduce_bounds.size - 1
        if self.persistent is None:
            return self.num_units - int(self.root) + scatters + int(self.reshard.sum())
        # Units made only of persistent tensors gather nothing; each persistent tensor is a gather.
        gathering = np.add.reduceat((~self.persistent).astype(np.int64), self.bounds[:-1]) > 0
        units = int(gathering.sum())
        if self.root and gathering[0] and gathering[-1]:
            units -= 1
        return units + scatters + int((self.reshard & gathering).sum()) + int(self.persistent.sum())

    def reduce_groups(self) -> np.ndarray:
        """The reduce-scatter groups' boundaries (int64): ``reduce_bounds``, or the unit
        boundaries when it is None."""
        return self.bounds if self.reduce_bounds is None else self.reduce_bounds

    def unit_of(self) -> np.ndarray:
        """Each tensor's unit (int64, forward order)."""
        return np.repeat(np.arange(self.num_units), self.bounds[1:] - self.bounds[:-1])

    def units(self) -> list[list[int]]:
        """Each unit's tensors (forward indices)."""
        return [list(range(int(a), int(b))) for a, b in zip(self.bounds[:-1], self.bounds[1:])]

    def unit_bytes(self, profile: Profile) -> np.ndarray:
        """Each unit's unsharded size in bytes (int64)."""
        return np.add.reduceat(profile.sizes, self.bounds[:-1]).astype(np.int64, copy=False)

    def validate(self, profile: Profile) -> "ShardedPlan":
        """Check that the units cover the ``profile``'s tensors; return self."""
        if int(self.bounds[-1]) != profile.n:
            raise ValueError(f"the units cover tensors 0..{int(self.bounds[-1]) - 1}; "
                             f"profile {profile.name or 'without a name'!r} has {profile.n}")
        return self

    def replace(self, **changes: Any) -> "ShardedPlan":
        """A copy with some of ``bounds``, ``reshard``, ``forward_prefetch``,
        ``backward_prefetch``, ``root``, ``names`` and ``reduce_bounds`` changed (new
        ``bounds`` keep the ``reduce_bounds``)."""
        fields = {"bounds": self.bounds, "reshard": self.reshard, "forward_prefetch": self.forward_prefetch,
                  "backward_prefetch": self.backward_prefetch, "root": self.root, "names": self.names,
                  "reduce_bounds": self.reduce_bounds, "persistent": self.persistent}
        unknown = sorted(set(changes) - set(fields))
        if unknown:
            raise ValueError(f"unknown plan field {unknown[0]!r}; fields: {', '.join(fields)}")
        fields.update(changes)
        if "bounds" in changes and "reshard" not in changes:
            fields["reshard"] = None
        if "bounds" in changes and "names" not in changes:
            fields["names"] = None
        bounds, reshard = fields.pop("bounds"), fields.pop("reshard")
        return ShardedPlan(bounds, reshard, **fields)

    def _key(self) -> tuple:
        groups = None if self.reduce_bounds is None else self.reduce_bounds.tobytes()
        kept = None if self.persistent is None else self.persistent.tobytes()
        return (self.bounds.tobytes(), self.reshard.tobytes(), self.forward_prefetch, self.backward_prefetch, self.root,
                groups, kept)

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, ShardedPlan):
            return NotImplemented
        return self._key() == other._key()           # names are labels: the same schedule is the same plan

    def __hash__(self) -> int:
        return hash(self._key())

    def to_dict(self) -> dict[str, Any]:
        """The plan as a JSON-ready dict (schema ``fusionopt.shardedplan``, version 1; the
        optional ``reduce_bounds`` is written only when given, so a plan without it reads
        as before).

        >>> plan = ShardedPlan([0, 2, 5, 6], [False, True, False], forward_prefetch=2, root=True, names=["a", "b", "c"])
        >>> ShardedPlan.from_dict(plan.to_dict()) == plan
        True
        >>> grouped = ShardedPlan([0, 2, 5, 6], reduce_bounds=[0, 6])
        >>> grouped.to_dict()["reduce_bounds"], ShardedPlan.from_dict(grouped.to_dict()) == grouped
        ([0, 6], True)
        """
        doc: dict[str, Any] = {
            "schema": SHARDED_SCHEMA,
            "version": SHARDED_VERSION,
            "bounds": self.bounds.tolist(),
            "reshard": self.reshard.tolist(),
            "forward_prefetch": self.forward_prefetch,
            "backward_prefetch": self.backward_prefetch,
            "root": self.root,
        }
        if self.names is not None:
            doc["names"] = list(self.names)
        if self.reduce_bounds is not None:
            doc["reduce_bounds"] = self.reduce_bounds.tolist()
        if self.persistent is not None:
            doc["persistent"] = self.persistent.tolist()
        return doc

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, source: str = "sharded plan") -> "ShardedPlan":
        """Read :meth:`to_dict`'s form; anything malformed is one ``ValueError`` naming ``source``."""
        if not isinstance(doc, Mapping):
            raise ValueError(f"{source}: expected a JSON object")
        if doc.get("schema") != SHARDED_SCHEMA:
            raise ValueError(f"{source}: schema is {doc.get('schema')!r}, expected {SHARDED_SCHEMA!r}")
        if doc.get("version") != SHARDED_VERSION:
            raise ValueError(f"{source}: unsupported sharded plan version {doc.get('version')!r} "
                             f"(this fusionopt reads {SHARDED_VERSION})")
        known = {"schema", "version", "bounds", "reshard", "forward_prefetch", "backward_prefetch", "root", "names",
                 "reduce_bounds", "persistent"}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise ValueError(f"{source}: unknown key {unknown[0]!r}")
        bounds = doc.get("bounds")
        if not isinstance(bounds, list) or not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
            raise ValueError(f"{source}: 'bounds' must be a list of whole numbers")
        reshard = doc.get("reshard")
        if reshard is not None and (not isinstance(reshard, list) or not all(isinstance(r, bool) for r in reshard)):
            raise ValueError(f"{source}: 'reshard' must be a list of true/false")
        names = doc.get("names")
        if names is not None and (not isinstance(names, list) or not all(isinstance(s, str) for s in names)):
            raise ValueError(f"{source}: 'names' must be a list of strings")
        groups = doc.get("reduce_bounds")
        if groups is not None and (not isinstance(groups, list)
                                   or not all(isinstance(c, int) and not isinstance(c, bool) for c in groups)):
            raise ValueError(f"{source}: 'reduce_bounds' must be a list of whole numbers")
        kept = doc.get("persistent")
        if kept is not None and (not isinstance(kept, list) or not all(isinstance(k, bool) for k in kept)):
            raise ValueError(f"{source}: 'persistent' must be a list of true/false")
        try:
            return cls(bounds, reshard, forward_prefetch=doc.get("forward_prefetch", 1),
                       backward_prefetch=doc.get("backward_prefetch", 1), root=doc.get("root", False), names=names,
                       reduce_bounds=groups, persistent=kept)
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None

    def write(self, path: str | Path) -> None:
        """Write the plan as JSON to ``path`` atomically."""
        write_json_atomic(path, self.to_dict())

    @classmethod
    def read(cls, path: str | Path) -> "ShardedPlan":
        """Read a sharded plan JSON file; a malformed one raises ``ValueError`` naming the file."""
        return cls.from_dict(read_json_document(path), source=str(path))

    def __repr__(self) -> str:
        kept = int((~self.reshard).sum())
        root = ", the first and last one root" if self.root else ""
        groups = "" if self.reduce_bounds is None else f", {self.reduce_bounds.size - 1} reduce-scatter groups"
        persistent = "" if self.persistent is None else f", {int(self.persistent.sum())} persistent tensors"
        return (f"ShardedPlan({self.num_units} units{root}, {kept} kept after forward, "
                f"prefetch {self.forward_prefetch} forward / {self.backward_prefetch} backward{groups}{persistent})")
