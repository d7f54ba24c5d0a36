"""Contiguous groupings of a decoupled all-reduce's tensors: as cut vectors and back (what
``decoupled-brute`` enumerates and ``decoupled-opt`` searches), and DeAR's module groups
(``dear``'s, and one of ``decoupled-opt``'s starts) (MODEL.md section 8.1)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fusionopt.model._problem import Problem

DEAR_THRESHOLD_MB = 25.0
"""DeAR's fusion buffer threshold (MB): its default."""


def cuts_of(groups: list[list[int]], order: list[int]) -> np.ndarray | None:
    """The cut vector over ``order`` of ``groups``, or None if they are not contiguous runs of it."""
    owner = {i: g for g, tensors in enumerate(groups) for i in tensors}
    sequence = [owner[i] for i in order]
    runs = [g for k, g in enumerate(sequence) if k == 0 or g != sequence[k - 1]]
    if len(runs) != len(set(runs)):
        return None
    return np.array([sequence[k] != sequence[k + 1] for k in range(len(order) - 1)], dtype=bool)


def groups_of(order: list[int], cuts: Any) -> list[list[int]]:
    groups: list[list[int]] = [[order[0]]]
    for i, cut in zip(order[1:], cuts):
        if cut:
            groups.append([])
        groups[-1].append(i)
    return groups


def dear_groups(problem: Problem, threshold_mb: float = DEAR_THRESHOLD_MB) -> list[list[int]]:
    """DeAR's fusion groups (tensors, forward indices), in forward order.

    Modules are the tensors' name prefixes before the last dot (``layer1.0.conv1`` for
    ``layer1.0.conv1.weight``), in the forward order of their first tensor, each sized at
    4 bytes per element in MB (2^20 bytes) as DeAR's code sizes them. A module joins the
    current group while the group is empty or stays under ``threshold_mb``; otherwise it
    starts a new group (``_generate_groups_with_threshold``).

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Decoupled, Profile
    >>> mb = 2 ** 20
    >>> profile = Profile.from_arrays([10 * mb, 2 * mb, 20 * mb, 8 * mb], [0.0] * 4, [1e-3] * 4,
    ...                               names=["a.weight", "a.bias", "b.weight", "c.weight"])
    >>> dear_groups(Problem(profile, pattern=Decoupled(AlphaBeta(0, 1e-9), AlphaBeta(0, 1e-9))))
    [[0, 1], [2], [3]]
    """
    if isinstance(threshold_mb, bool) or not isinstance(threshold_mb, (int, float)) or not (
            math.isfinite(threshold_mb) and threshold_mb > 0):
        raise ValueError(f"threshold_mb must be a positive number of MB, got {threshold_mb!r}")
    profile = problem.profile
    modules: dict[str, list[int]] = {}
    for i, name in enumerate(profile.names):
        modules.setdefault(name.rsplit(".", 1)[0], []).append(i)
    element_bytes = profile.element_bytes
    groups: list[list[int]] = []
    total = 0.0
    for tensors in modules.values():
        size = sum(-(-int(profile.sizes[i]) // int(element_bytes[i])) for i in tensors) * 4 / 1024 / 1024
        if not groups or not (total == 0 or total + size < threshold_mb):
            groups.append([])
            total = 0.0
        groups[-1].extend(tensors)
        total += size
    return groups


__all__ = ["DEAR_THRESHOLD_MB", "cuts_of", "dear_groups", "groups_of"]
