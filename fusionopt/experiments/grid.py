"""The cells of a sweep: zoo models x workers x networks x methods (x syncs, devices, batches).

A :class:`Cell` is one zoo model on one preset network, solved by one method; :func:`cells`
builds the grid and refuses, with one line, a name that is not a zoo model, a network
preset or a registered method.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from numbers import Integral
from typing import Any, Iterable

from fusionopt import zoo
from fusionopt.model.collectives import network
from fusionopt.model.problem import Problem
from fusionopt.solvers.registry import default_methods, get_method

SYNCS = ("barrier", "layerwise")


@dataclass(frozen=True)
class Cell:
    """One point of a sweep: a zoo model on a preset network, solved by one method.

    Attributes
    ----------
    model : str
        A zoo model (:func:`fusionopt.zoo.models`).
    device : str
        A zoo device preset for the roofline compute estimate.
    batch : int
        Samples per worker per step.
    network : str
        A network preset (:func:`fusionopt.cost.networks`).
    algorithm : str
        The all-reduce algorithm (:data:`fusionopt.cost.ALGORITHMS`).
    workers : int
        Number of workers ``P >= 1``.
    sync : {"barrier", "layerwise"}
    method : str
        A registered method (:func:`fusionopt.methods`).
    """

    model: str
    device: str
    batch: int
    network: str
    algorithm: str
    workers: int
    sync: str
    method: str

    @property
    def label(self) -> str:
        """``"model workers network method"``, as the progress bar shows it."""
        return f"{self.model} {self.workers} {self.network} {self.method}"

CELL_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Cell))


def cells(
    models: Iterable[str],
    workers: Iterable[int],
    networks: Iterable[str],
    methods: Iterable[str] | None = None,
    *,
    device: str = "h100",
    batch: int = 64,
    sync: str = "barrier",
    algorithm: str = "ring",
) -> list[Cell]:
    """The cartesian product models x workers x networks x methods, validated.

    Methods the registry runs on other problems only are left out, with one line on
    stderr naming them: parameter-server methods (a sweep solves all-reduce problems) and,
    under ``sync="barrier"``, the layerwise-only ones.

    Parameters
    ----------
    models : iterable of str
        Zoo model names (case-insensitive).
    workers : iterable of int
        Worker counts, each at least 1.
    networks : iterable of str
        Network preset names (case-insensitive).
    methods : iterable of str, optional
        Method names; default the registry's default comparison for ``sync``
        (:func:`fusionopt.solvers.default_methods`).
    device : str
        Zoo device preset for the compute estimate (default ``"h100"``).
    batch : int
        Samples per worker per step (default 64).
    sync : {"barrier", "layerwise"}
    algorithm : str
        All-reduce algorithm for the network presets (default ``"ring"``).

    Returns
    -------
    list of Cell
        In the order models, then workers, then networks, then methods (the last varies
        fastest); repeated names are counted once.

    Raises
    ------
    ValueError
        For an unknown model, device, network, algorithm, method or sync, a worker count
        below 1, a batch that is not a positive integer, an empty list, or when no method
        is left to run; the message names the culprit and, for names, lists the known ones.

    Examples
    --------
    >>> grid = cells(["resnet18", "alexnet"], [8, 64], ["10gbe"], ["wfbp", "dp"])
    >>> len(grid), grid[0].label, grid[-1].label
    (8, 'resnet18 8 10gbe wfbp', 'alexnet 64 10gbe dp')
    >>> grid[0]   # doctest: +NORMALIZE_WHITESPACE
    Cell(model='resnet18', device='h100', batch=64, network='10gbe', algorithm='ring', workers=8,
         sync='barrier', method='wfbp')
    >>> cells(["resnet18"], [0], ["10gbe"], ["wfbp"])
    Traceback (most recent call last):
    ...
    ValueError: workers must be integers >= 1, got 0
    >>> cells(["resnet18"], [8], ["10gbe"], ["wfpb"])
    Traceback (most recent call last):
    ...
    ValueError: unknown method 'wfpb'; known methods: ...
    """
    models = _distinct("models", models)
    workers = _distinct("workers", workers)
    networks = _distinct("networks", networks)
    if sync not in SYNCS:
        raise ValueError(f"unknown sync {sync!r}; known: {', '.join(SYNCS)}")
    for count in workers:
        if isinstance(count, bool) or not isinstance(count, Integral) or count < 1:
            raise ValueError(f"workers must be integers >= 1, got {count!r}")
    workers = [int(count) for count in workers]
    # zoo.profile names an unknown model or device and a bad batch, listing the known ones.
    profiles = {model.strip().lower(): zoo.profile(model, device=device, batch=batch) for model in models}
    device = device.strip().lower()
    for name in networks:
        for count in workers:      # fitted presets know some worker counts only
            network(name, count, algorithm=algorithm)
    networks = list(dict.fromkeys(name.lower() for name in networks))
    if methods is None:
        first = next(iter(profiles.values()))
        methods = default_methods(Problem(first, network(networks[0], workers[0], algorithm=algorithm), sync=sync))
    methods = _distinct("methods", methods)
    entries = [get_method(name) for name in methods]
    other = [m.name for m in entries if m.pattern != "all-reduce"]
    layerwise = [m.name for m in entries if m.layerwise_only and m.pattern == "all-reduce" and sync != "layerwise"]
    notes = []
    if layerwise:
        notes.append(f"{', '.join(layerwise)} (layerwise-only: they need sync 'layerwise')")
    if other:
        notes.append(f"{', '.join(other)} (parameter-server, decoupled or fully sharded methods: a sweep solves "
                     "all-reduce problems)")
    kept = [name for name in methods if name not in other and name not in layerwise]
    if not kept:
        raise ValueError(f"no method left to run: skipped {'; '.join(notes)}")
    if notes:
        print(f"fusionopt sweep: skipping {'; '.join(notes)}", file=sys.stderr)
    return [Cell(model, device, batch, name, algorithm, count, sync, method)
            for model in profiles for count in workers for name in networks for method in kept]


def _distinct(kind: str, values: Iterable[Any]) -> list[Any]:
    if isinstance(values, (str, bytes)):
        values = [values]
    values = list(dict.fromkeys(values))
    if not values:
        raise ValueError(f"{kind}: give at least one")
    return values
