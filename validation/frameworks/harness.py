"""Measuring a framework for real on ranks, shared by ``speedup.py`` and
``validation/wire/run.py``: the models and their inputs, the profile every rank measures at
once, the loopback collectives timed bare, the paired rounds of two or more settings and the
speedup's bootstrap interval, FSDP2's unsharded bytes counted as ``M_peak`` counts them, and
the ``--reducer-calibration`` files a run is given.

The measuring runs on the ranks the scripts start (gloo on CPU, NCCL on a GPU), the interval
and the files' checks in the parent; nothing here starts a rank.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any, Callable

import numpy as np

from fusionopt.integrations import (SMALL_INPUTS, make_optimizer, profile_model, read_reducer_calibration,
                                    small_model, tiny_transformer)
from fusionopt.model import Profile

TRANSFORMER = {"vocab": 256, "dim": 128, "hidden": (256, 384, 512, 640)}
TOKENS = 64                       # the transformer's batch: tokens per step
BOOTSTRAP = 2000                  # resamples of the rounds for the speedup's interval
SEED = 0
OPTIMIZER = ("SGD", {"lr": 1e-3, "momentum": 0.9})
"""The training job's optimiser, ``torch.optim`` class and options: the profile's, the cases'
and the reducer calibrations' (FSDP2 steps it on DTensor shards, at a cost per tensor)."""
LOOPBACK_SIZES = tuple(2**k for k in range(14, 24))   # 16 KiB to 8 MiB: the loopback collectives timed
LOOPBACK_REPEATS = 10


def speedup_interval(default: list[float], advised: list[float], *, resamples: int = BOOTSTRAP,
                     seed: int = SEED) -> dict[str, Any]:
    """The speedup of the paired rounds: ``default[r]`` and ``advised[r]`` are round ``r``'s
    mean steps (seconds) of each setting, over the same number of steps. Returns the means,
    the speedup (mean default / mean advised) and its 95% bootstrap interval: the rounds
    resampled with replacement, ``resamples`` times with a generator seeded ``seed``, the
    2.5th and 97.5th percentiles of the resampled speedups.

    >>> s = speedup_interval([2.0, 2.2], [1.0, 1.1])
    >>> round(s["speedup"], 6), s["ci"][0] <= s["speedup"] <= s["ci"][1]
    (2.0, True)
    """
    d, a = np.asarray(default, dtype=float), np.asarray(advised, dtype=float)
    if d.shape != a.shape or d.ndim != 1 or len(d) == 0:
        raise ValueError(f"the rounds must pair up: {len(d)} default against {len(a)} advised")
    picks = np.random.default_rng(seed).integers(0, len(d), size=(resamples, len(d)))
    ratios = d[picks].mean(axis=1) / a[picks].mean(axis=1)
    return {"default": float(d.mean()), "advised": float(a.mean()), "speedup": float(d.mean() / a.mean()),
            "ci": [float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))]}


def peak_of(intervals: list[tuple[float, float, int]]) -> int:
    """The most bytes whole at once over ``(start, end, bytes)`` intervals, counted as
    ``M_peak`` is (MODEL.md section 8.2): at one moment what ends is freed before what
    starts is counted, and a zero-length interval counts at its moment.

    >>> peak_of([(0, 2, 5), (2, 3, 7), (1, 1, 4)])
    9
    """
    events = []
    for start, end, size in intervals:
        events.append((start, 1, size))
        events.append((end, 0 if end > start else 2, -size))
    level = peak = 0
    for _, _, delta in sorted(events, key=lambda e: (e[0], e[1])):
        level += delta
        peak = max(peak, level)
    return peak


class UnshardedBytes:
    """The unsharded parameter and gradient bytes of an FSDP2 model whole over time, counted as
    MODEL.md section 8.2 counts ``M_peak``, from what each ``FSDPParamGroup`` (one
    ``fully_shard`` call's unit) does on the real job; a unit's bytes are its parameters'
    (unpadded):

    * its parameters are whole from the start of its all-gather on the emulated link (the
      hold the gather put on ``link``) until FSDP2 frees them (``reshard``: after the forward
      when resharded, else after its backward), and again from the start of a second
      all-gather before its backward;
    * its gradients from the start of its backward until the end of its reduce-scatter's
      hold. A unit's backward starts once its ``pre_backward`` has returned (its parameters
      are whole) and the wrapped unit after it in forward order has ended its own
      (``post_backward`` has returned): FSDP2 runs ``pre_backward`` early for a unit that
      holds a module whose forward never runs (a ``ModuleList``), at the model's output. The
      root's tensors count in parts, as the model's root has a first part and a last one: those
      before a wrapped unit start with that unit's end, the others with the root's
      ``pre_backward``.

    Installed by wrapping the groups' own methods; counts only between :meth:`start` and
    :meth:`stop`. On CPU FSDP2 holds each collective on the training thread, so a gather's
    hold is the one the link logged while ``unshard`` ran."""

    def __init__(self, model: Any, link: Any) -> None:
        from torch.distributed.fsdp import FSDPModule

        self.link = link
        self.intervals: list[tuple[float, float, int]] = []
        self._on = False
        self._whole: dict[int, float] = {}          # group -> when its parameters became whole
        self._grads: dict[Any, float] = {}          # part -> when its backward started
        self._heard: dict[Any, set[Any]] = {}       # part -> the signals it has had this step
        order = {id(p): k for k, p in enumerate(model.parameters())}
        groups: list[tuple[bool, Any]] = []          # (the root's?, group), each once: fully_shard([a, b])
        for module in model.modules():                # gives its modules one group
            if isinstance(module, FSDPModule):
                for group in module._get_fsdp_state()._fsdp_param_groups:
                    if all(group is not g for _, g in groups):
                        groups.append((module is model, group))
        wrapped = sorted((min(order[id(p.sharded_param)] for p in g.fsdp_params), id(g))
                         for root, g in groups if not root and g.fsdp_params)
        # A part: (group, the wrapped group after it in forward order, or None) -> its bytes;
        # it waits for its group's pre_backward and for that next group's post_backward.
        parts: dict[int, dict[Any, int]] = {}
        for root, group in groups:
            first = None if root or not group.fsdp_params else \
                min(order[id(p.sharded_param)] for p in group.fsdp_params)
            for p in group.fsdp_params:
                index = order[id(p.sharded_param)] if root else first
                after = next((g for start, g in wrapped if start > index), None)
                share = parts.setdefault(id(group), {})
                share[(id(group), after)] = share.get((id(group), after), 0) + \
                    math.prod(p._orig_size) * p.sharded_param.element_size()
        self._needs = {part: {("pre", part[0])} | ({("post", part[1])} if part[1] is not None else set())
                       for share in parts.values() for part in share}
        for _, group in groups:
            self._wrap(group, parts.get(id(group), {}))

    def _signal(self, signal: tuple[str, int]) -> None:
        """A group's ``pre_backward`` or ``post_backward`` returned: start the backward of each
        part that has now had all it waits for."""
        for part, needs in self._needs.items():
            if signal in needs and part not in self._grads:
                heard = self._heard.setdefault(part, set())
                heard.add(signal)
                if heard >= needs:
                    self._grads[part] = self.link.clock()

    def _wrap(self, group: Any, parts: dict[Any, int]) -> None:
        key, size, clock = id(group), sum(parts.values()), self.link.clock
        unshard, reshard, pre_backward, post_backward = (group.unshard, group.reshard, group.pre_backward,
                                                         group.post_backward)

        def gathered(first: int) -> None:
            holds = self.link.log[first:]
            self._whole[key] = holds[0].start if holds else clock()

        def unshard_counted(*args: Any, **kwargs: Any) -> Any:
            first, before = len(self.link.log), group._all_gather_result
            out = unshard(*args, **kwargs)
            if self._on and before is None and group._all_gather_result is not None and key not in self._whole:
                gathered(first)
            return out

        def reshard_counted(*args: Any, **kwargs: Any) -> Any:
            whole = group.is_unsharded
            out = reshard(*args, **kwargs)
            if self._on and whole and not group.is_unsharded and key in self._whole:
                self.intervals.append((self._whole.pop(key), clock(), size))
            return out

        def pre_backward_counted(*args: Any, **kwargs: Any) -> Any:
            first = len(self.link.log)
            out = pre_backward(*args, **kwargs)
            if self._on:
                if key not in self._whole and group.is_unsharded:     # gathered again for the backward
                    gathered(first)
                self._signal(("pre", key))
            return out

        def post_backward_counted(*args: Any, **kwargs: Any) -> Any:
            first = len(self.link.log)
            out = post_backward(*args, **kwargs)
            if self._on:
                holds = self.link.log[first:]
                end = holds[-1].end if holds else clock()
                for part, nbytes in parts.items():
                    if part in self._grads:
                        self.intervals.append((self._grads.pop(part), end, nbytes))
                    self._heard.pop(part, None)
                if key in self._whole and not group.is_unsharded:
                    self.intervals.append((self._whole.pop(key), clock(), size))
                self._signal(("post", key))
            return out

        group.unshard, group.reshard = unshard_counted, reshard_counted
        group.pre_backward, group.post_backward = pre_backward_counted, post_backward_counted

    def start(self) -> None:
        self._on = True

    def stop(self) -> None:
        self._on = False
        self._whole.clear()
        self._grads.clear()
        self._heard.clear()

    @property
    def peak(self) -> int:
        """The most bytes whole at once over the counted steps."""
        return peak_of(self.intervals)


def build_model(name: str) -> tuple[Any, Callable[[int, int], Any]]:
    """The model called ``name`` and its batch maker ``(batch, seed) -> input``."""
    import torch

    if name == "transformer":
        model = tiny_transformer(**TRANSFORMER)
        return model, lambda batch, seed: torch.randint(0, TRANSFORMER["vocab"], (TOKENS,),
                                                        generator=torch.Generator().manual_seed(seed))
    return small_model(name), lambda batch, seed: torch.randn(batch, *SMALL_INPUTS[name],
                                                               generator=torch.Generator().manual_seed(seed))


def measure_profile(name: str, rank: int, args: dict[str, Any], dist: Any,
                    device: Any = "cpu") -> tuple[Profile, Any]:
    """Every rank profiles the model ``name`` at once with ``profile_model`` (the training
    job's optimiser; the same threads and load as the training that follows) on ``device``:
    rank 0's profile, shared, and this rank's input there (``args``: ``batch``,
    ``profile_steps``, ``warmup``)."""
    import torch

    torch.manual_seed(0)
    model, make_input = build_model(name)
    model, x = model.to(device), make_input(args["batch"], rank).to(device)
    optimizer = make_optimizer(*OPTIMIZER, model.parameters())
    dist.barrier()
    measured = profile_model(model, x, loss_fn=lambda out: out.sum(), steps=args["profile_steps"],
                             warmup=args["warmup"], optimizer=optimizer, name=name)
    shared: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(shared, measured.to_dict())
    return Profile.from_dict(shared[0]), x


def measure_loopback(dist: Any, repeats: int = LOOPBACK_REPEATS) -> dict[str, list[list[float]]]:
    """Every rank times the collectives the emulated link holds, bare, on their process group,
    at each of :data:`LOOPBACK_SIZES` bytes ``S`` (an all-reduce of ``S``, an all-gather into
    ``S``, a reduce-scatter of ``S``: the sizes the model prices; fp32, ``S`` rounded down to
    a multiple of the ranks): ``[[S, seconds], ...]`` by collective, the mean of ``repeats``
    calls after one untimed, on this rank. Reported beside the holds, not priced: where a
    loopback collective outlasts its hold the emulated link hands the message back later than
    the model says (its documented limit). Pricing each message at the slower of the two
    would count that overrun twice where the reducer calibration's own 5 ms holds did not
    hide it either (4 gloo ranks on 2 cores: the stored run's loopback all-reduces and
    reduce-scatters took 5.3 ms or more at each size its table prints, 64 KiB, 1 MiB and
    8 MiB), its excess per message already holding it."""
    import torch

    world = dist.get_world_size()
    # torch 2.13 names them *_single (the *_tensor names warn that they are deprecated); earlier
    # releases have only the *_tensor names.
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    times: dict[str, list[list[float]]] = {"all_reduce": [], "all_gather": [], "reduce_scatter": []}
    for size in LOOPBACK_SIZES:
        count = size // 4 // world * world
        whole, part = torch.zeros(count), torch.zeros(count // world)
        calls = {"all_reduce": lambda: dist.all_reduce(whole),
                 "all_gather": lambda: all_gather(whole, part),
                 "reduce_scatter": lambda: reduce_scatter(part, whole)}
        for kind, call in calls.items():
            call()
            dist.barrier()
            begin = time.perf_counter()
            for _ in range(repeats):
                call()
            times[kind].append([4.0 * count, (time.perf_counter() - begin) / repeats])
    return times


def training_step(model: Any, optimizer: Any, x: Any) -> Callable[[], None]:
    """One training step of ``model`` on ``x`` (the loss: the output's sum), as a function of nothing."""
    def step() -> None:
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
    return step


def measure_rounds(steps: dict[str, Callable[[], None]], args: dict[str, Any], dist: Any,
                   links: dict[str, Any] | None = None, counters: dict[str, Any] | None = None,
                   settle: Callable[[], None] = lambda: None) -> dict[str, list[float]]:
    """Warm every setting up, then the paired rounds: each round's mean step (seconds) per
    setting, on this rank's clock, the settings' order rotated every round (two settings:
    swapped). The ``links``' logs hold the rounds' messages only; ``counters`` count over
    the rounds. ``settle`` waits for the device's queued work (``torch.cuda.synchronize`` on
    a GPU), before a round's clock starts and before it stops."""
    links, counters = links or {}, counters or {}
    for _ in range(args["warmup"]):
        for step in steps.values():
            step()
    for link in links.values():
        link.reset()
    keys = list(steps)
    rounds: dict[str, list[float]] = {key: [] for key in keys}
    for counter in counters.values():
        counter.start()
    for r in range(args["rounds"]):
        for key in keys[r % len(keys):] + keys[: r % len(keys)]:
            settle()
            dist.barrier()
            begin = time.perf_counter()
            for _ in range(args["steps"]):
                steps[key]()
            settle()
            rounds[key].append((time.perf_counter() - begin) / args["steps"])
    for counter in counters.values():
        counter.stop()
    return rounds


def calibration_files(parser: argparse.ArgumentParser, paths: list[str], ranks: list[int], *,
                      reducers: tuple[str, ...]) -> dict[tuple[str, int], str]:
    """``--reducer-calibration``'s files by (reducer, ranks); one line naming the file where
    one cannot be read, is of a reducer not among ``reducers`` (those the script runs), was
    measured on a number of ranks not among ``--ranks``, or repeats another's reducer and
    ranks."""
    files: dict[tuple[str, int], str] = {}
    for path in paths:
        try:
            calibration = read_reducer_calibration(path)
        except (OSError, ValueError) as exc:
            parser.error(f"--reducer-calibration: {exc}")
        key = (calibration.reducer, calibration.ranks)
        if calibration.reducer not in reducers:
            parser.error(f"--reducer-calibration {path}: a calibration of the {calibration.reducer!r} reducer; "
                         f"this script runs {' and '.join(reducers)}")
        if calibration.ranks not in ranks:
            parser.error(f"--reducer-calibration {path}: measured on {calibration.ranks} ranks, not among --ranks "
                         f"({', '.join(map(str, ranks))})")
        if key in files:
            parser.error(f"--reducer-calibration {path}: {files[key]} is already the {key[0]} calibration on "
                         f"{key[1]} ranks")
        files[key] = path
    return files
