"""The cells of a sweep: zoo models x workers x networks x methods (x syncs, devices, batches).

A :class:`Cell` is one zoo model on one preset network, solved by one method; :func:`cells`
builds the grid and refuses, with one line, a name that is not a zoo model, a network
preset or a registered method. A method's pattern says which problem its cell solves
(:func:`cell_problem`): an all-reduce on the preset, or a decoupled all-reduce or a fully
sharded step on the preset's reduce-scatter and all-gather.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, fields
from numbers import Integral
from typing import Any, Iterable

from fusionopt import zoo
from fusionopt.model._collectives import network
from fusionopt.model._decoupled import Decoupled
from fusionopt.model._problem import Problem
from fusionopt.model._profile import Profile
from fusionopt.model._sharded import FullySharded
from fusionopt.solvers._registry import Method, default_methods, get_method

SYNCS = ("barrier", "layerwise")


@dataclass(frozen=True)
class Cell:
    """One point of a sweep: a zoo model on a preset network, solved by one method.

    Attributes
    ----------
    model : str
        A zoo model (:func:`fusionopt.zoo.models`).
    device : str
        A zoo device (:func:`fusionopt.zoo._devices`) whose calibrated compute the cell takes.
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
        A registered method (:func:`fusionopt.solvers.methods`).
    precision : {"fp32", "bf16", "none"}
        The zoo model's precision (:func:`fusionopt.zoo.profile`; default ``"fp32"``);
        ``"none"`` for a roofline estimate, which takes no precision.
    compute : {"calibrated", "roofline"}
        The zoo model's compute (default ``"calibrated"``).
    optimizer : {"none", "sgd"}
        ``"sgd"``: SGD with momentum's update time on each tensor; ``"none"`` (default): no
        update time.
    """

    model: str
    device: str
    batch: int
    network: str
    algorithm: str
    workers: int
    sync: str
    method: str
    precision: str = "fp32"
    compute: str = "calibrated"
    optimizer: str = "none"

    @property
    def label(self) -> str:
        """``"model workers network method"``, as the progress bar shows it."""
        return f"{self.model} {self.workers} {self.network} {self.method}"

CELL_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Cell))


def distinct_cells(given: Any) -> list[Cell]:
    """``given``, a sequence of :class:`Cell` (as :func:`cells` makes them), without repeats;
    anything else is refused, naming what it holds."""
    if isinstance(given, Cell) or isinstance(given, (str, bytes)) or not hasattr(given, "__iter__"):
        raise ValueError(f"cells must be a sequence of Cell (fusionopt.experiments.cells makes them), "
                         f"got {type(given).__name__}")
    given = list(given)
    odd = next((c for c in given if not isinstance(c, Cell)), None)
    if odd is not None:
        raise ValueError(f"cells must be a sequence of Cell (fusionopt.experiments.cells makes them), got a "
                         f"{type(odd).__name__} among them: {odd!r}")
    return list(dict.fromkeys(given))


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
    precision: str | None = None,
    compute: str = "calibrated",
    optimizer: str | None = None,
) -> list[Cell]:
    """The cartesian product models x workers x networks x methods, validated.

    Each method solves a problem of its own pattern (:func:`cell_problem`): all-reduce,
    decoupled all-reduce or fully sharded methods all run. Methods that cannot run on a
    sweep's problems are left out, with one line on stderr naming them and why:
    parameter-server methods (a sweep gives no server count), the layerwise-only ones under
    ``sync="barrier"``, the barrier-only ones (Megatron, ZeRO-2) under ``sync="layerwise"``
    and, under ``sync="layerwise"``, the fully sharded ones (their step has no sync to
    choose: their records say ``"barrier"``).

    Parameters
    ----------
    models : iterable of str
        Zoo model names (case-insensitive).
    workers : iterable of int
        Worker counts, each at least 1.
    networks : iterable of str
        Network preset names (case-insensitive).
    methods : iterable of str, optional
        Method names; default the registry's default all-reduce comparison for ``sync``
        (:func:`fusionopt.solvers.default_methods`).
    device : str
        Zoo device preset for the compute estimate (default ``"h100"``).
    batch : int
        Samples per worker per step (default 64).
    sync : {"barrier", "layerwise"}
    algorithm : str
        All-reduce algorithm for the network presets (default ``"ring"``; the decoupled and
        fully sharded methods take its reduce-scatter and all-gather: ring or rabenseifner).
    precision, compute, optimizer : str
        The zoo model's profile options (:func:`fusionopt.zoo.profile`): ``"fp32"`` or
        ``"bf16"`` (default None: fp32, or none for a roofline estimate, which takes no
        precision); ``"calibrated"`` or ``"roofline"``; None (or ``"none"``) or ``"sgd"``.

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
         sync='barrier', method='wfbp', precision='fp32', compute='calibrated', optimizer='none')
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
    optimizer = None if optimizer == "none" else optimizer
    roofline = str(compute).strip().lower() == "roofline"
    if precision == "none":                 # a roofline estimate's, as its cells say it
        if not roofline:
            raise ValueError("precision 'none' is a roofline estimate's (compute='roofline'); a calibrated profile "
                             "takes fp32 or bf16")
        precision = None
    # zoo.profile names an unknown model, device, precision, compute or optimizer and a bad
    # batch, listing the known ones.
    options = {"precision": precision, "compute": compute, "optimizer": optimizer}
    profiles = {model.strip().lower(): zoo.profile(model, device=device, batch=batch, **options) for model in models}
    batch = int(batch)                    # a positive integer (zoo.profile checked it), as records hold it
    device = device.strip().lower()
    optimizer = "none" if optimizer is None else optimizer
    if precision is None:
        precision = "none" if roofline else "fp32"
    for name in networks:
        for count in workers:      # fitted presets know some worker counts only
            network(name, count, algorithm=algorithm)
    networks = list(dict.fromkeys(name.lower() for name in networks))
    if methods is None:
        first = next(iter(profiles.values()))
        methods = default_methods(Problem(first, network(networks[0], workers[0], algorithm=algorithm), sync=sync))
    methods = _distinct("methods", methods)
    entries = [get_method(name) for name in methods]
    reasons = {m.name: _skipped(m, sync) for m in entries}
    notes: dict[str, list[str]] = {}
    for name, reason in reasons.items():
        if reason is not None:
            notes.setdefault(reason, []).append(name)
    notes_text = "; ".join(f"{', '.join(names)} ({reason})" for reason, names in notes.items())
    kept = [name for name in methods if reasons[name] is None]
    if not kept:
        raise ValueError(f"no method left to run: skipped {notes_text}")
    for pattern in dict.fromkeys(get_method(name).pattern for name in kept):
        if pattern == "all-reduce":
            continue
        users = ", ".join(name for name in kept if get_method(name).pattern == pattern)
        for name in networks:       # the presets' reduce-scatter and all-gather, for this algorithm
            for count in workers:
                try:
                    _pattern_problem(pattern, next(iter(profiles.values())), name, count, algorithm, sync)
                except ValueError as exc:
                    raise ValueError(f"{users} ({pattern} methods) run on the network's reduce-scatter and "
                                     f"all-gather: {exc}") from None
    if notes:
        print(f"fusionopt sweep: skipping {notes_text}", file=sys.stderr)
    return [Cell(model, device, batch, name, algorithm, count, sync, method, precision, compute, optimizer)
            for model in profiles for count in workers for name in networks for method in kept]


def _skipped(method: Method, sync: str) -> str | None:
    """Why ``method`` cannot run on a sweep's problems under ``sync`` (None: it can)."""
    needs = method.needs
    if needs.pattern == "ps":
        return "parameter-server methods: a sweep gives no server count; compare or solve them with --ps-servers"
    if needs.pattern == "fully-sharded" and sync != "barrier":
        return "fully sharded methods: their step has no sync to choose; sweep them with sync 'barrier'"
    if needs.layerwise and sync != "layerwise":
        return "layerwise-only: they need sync 'layerwise'"
    if needs.barrier and sync != "barrier":
        return "barrier-only: they need sync 'barrier'"
    return None


def cell_problem(cell: Cell, profile: Profile) -> Problem:
    """The problem ``cell`` solves on ``profile`` (its zoo model's): the pattern of its method
    on its network preset, workers and algorithm.

    >>> profile = zoo.profile("alexnet")
    >>> [cell_problem(Cell("alexnet", "h100", 64, "10gbe", "ring", 8, "barrier", m), profile).pattern.name
    ...  for m in ("dp", "megatron", "fsdp2")]
    ['all-reduce', 'decoupled', 'fully-sharded']
    """
    return _pattern_problem(get_method(cell.method).pattern, profile, cell.network, cell.workers, cell.algorithm,
                            cell.sync)


def _pattern_problem(pattern: str, profile: Profile, name: str, workers: int, algorithm: str, sync: str) -> Problem:
    if pattern == "decoupled":
        return Problem(profile, sync=sync, pattern=Decoupled.from_network(name, workers, algorithm=algorithm))
    if pattern == "fully-sharded":
        return Problem(profile, pattern=FullySharded.from_network(name, workers, algorithm=algorithm))
    return Problem(profile, network(name, workers, algorithm=algorithm), sync=sync)


def _distinct(kind: str, values: Iterable[Any]) -> list[Any]:
    if isinstance(values, (str, bytes)):
        values = [values]
    if not hasattr(values, "__iter__"):
        raise ValueError(f"{kind} must be a sequence, got {values!r}")
    values = list(dict.fromkeys(values))
    if not values:
        raise ValueError(f"{kind}: give at least one")
    if kind != "workers":
        odd = next((v for v in values if not isinstance(v, str)), None)
        if odd is not None:
            raise ValueError(f"{kind} must be names, got {odd!r}")
    return values
