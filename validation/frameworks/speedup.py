"""The advice applied for real: ``advise``'s DDP and FSDP2 settings against each framework's
defaults, trained on gloo ranks over an emulated link; the measured speedup against the
predicted one, and FSDP2's measured peak of unsharded bytes against the predicted ``M_peak``.

For each number of ranks (``--ranks``: 2 and 4 gloo ranks on this host's CPU, one torch
thread each) and each model (``--models``: ``mlp``, ``cnn`` (two convolutions with batch
norm) and ``lstm`` of :func:`fusionopt.integrations.small_model`, and
``transformer``, :func:`fusionopt.integrations.tiny_transformer` with four blocks
of inner widths 256 to 640 over 128), batch ``--batch``, SGD with momentum:

1. every rank measures the profile at once with ``profile_model`` (the training job's
   optimiser; the same threads and load as the training that follows); rank 0's is shared;
2. for each network (``--networks``, priced for ``--workers`` workers) the advice is solved
   on rank 0 with the functions ``fusionopt advise`` calls, as the document
   ``advise --json`` prints: DDP's ``ddp_settings`` for the DP's plan (the all-reduce of
   ``network(NAME, WORKERS)``), FSDP2's ``fsdp2_advice`` (its ring reduce-scatter and
   all-gather, the same price per message, each blocking the training thread as gloo's
   collectives do under FSDP2 on CPU: ``FullySharded(blocking=True)``, ``advise --pattern fsdp
   --blocking-collectives``); ``simulate`` predicts the step of each
   framework's defaults and of the advice on that profile (predicted speedup = predicted
   default / predicted advised). Nothing is fitted on the steps it predicts;
3. two copies of the model, built once, are wrapped once each: one with the framework's
   defaults (``DistributedDataParallel(model)``; ``fully_shard`` on each block, then on the
   model), one with the advice (``bucket_cap_mb_list``; the advised ``fully_shard`` calls
   and prefetch lists). Every collective runs for real and is then held on an **emulated
   link** (:mod:`fusionopt.integrations._emulated_link`: one channel, first in, first out,
   ``c(S)`` per message);
4. measured: ``--rounds`` rounds after ``--warmup`` untimed steps of each, each round
   ``--steps`` steps of one setting then ``--steps`` of the other, the order swapped every
   round, so that drift in the host's load hits both alike; a setting's step is the mean over
   its steps on rank 0. The speedup is the mean default step over the mean advised step, its
   95% interval a bootstrap over the rounds (paired: a round's two blocks stay together;
   ``harness.BOOTSTRAP`` resamples, a fixed seed);
5. FSDP2's memory: on the same steps, the unsharded parameter and gradient bytes whole at
   once, counted as MODEL.md section 8.2 counts ``M_peak``, from what the FSDP2 job did
   (``harness.UnshardedBytes``). Once more with ``--memory-cap``: the FSDP2 advice for
   ``--capped-model`` under a cap of ``--cap-fraction`` times its parameter bytes, whose
   measured peak must stay under the cap.

The reducers' own cost (a fixed cost per step and one per message, DDP's also its compute
per message, FSDP2's also one per parameter tensor and one per byte of each collective, added to every prediction as ``advise
--reducer-calibration`` adds it) is measured by ``measure_reducer_overhead`` with the
training job's optimiser (``harness.OPTIMIZER``) before each number of ranks
(``--calibration-rounds``), or read
from a calibration measured apart (``--reducer-calibration FILE``, as ``fusionopt calibrate
--reducer`` writes it), for the reducer and number of ranks the file names.

The targets, printed met or missed with the results: the advised setting is never slower
than the default beyond its interval (the interval's upper end >= 1; where the advice keeps
the defaults the same job runs twice, which checks the measurement instead); the measured speedup
is at least 0.9 of the predicted; FSDP2's measured peak is within 5% of the predicted
``M_peak``; under the cap, the measured peak is at most the cap.

With ``--backend nccl`` the ranks are NCCL processes, one GPU each (default one rank, the
link standing for the other workers; the GPU command runs it so): models and inputs on the
GPU, each hold on a CUDA stream of the link's, the device synchronised before a round's
clock starts and stops; FSDP2 predicted with its collectives on the GPU's streams (not
blocking) and its peak not counted (the counter times the host's events); FSDP2 left out on
one rank, where it sends no collective; the reducers' cost only from
``--reducer-calibration`` (its calibration runs on gloo). It writes ``speedup-gpu``.

Writes ``validation/results/speedup-cpu.{json,md}`` (``--out`` to choose the folder); a run
with other arguments than the stored result's writes into ``validation/results/subset/``, and
Ctrl-C writes the cases finished to ``speedup-cpu.interrupted.{md,json}``. Timings of this
host: they vary from run to run.

    python validation/frameworks/speedup.py
    python validation/frameworks/speedup.py --models mlp --ranks 2 --rounds 4    # into results/subset/
    python validation/frameworks/speedup.py --backend nccl --models mlp,transformer --networks 10gbe \\
        --rounds 12 --steps 2                                                    # one GPU: speedup-gpu
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation" / "frameworks"))

from fusionopt.cost import network  # noqa: E402
from fusionopt.integrations import (  # noqa: E402
    apply_advice, apply_defaults, free_port, EmulatedLink, make_optimizer, measure_reducer_overhead,
    read_reducer_calibration, reducer_cost_words, with_reducer_overhead,
)
from fusionopt.model import Plan, Problem, Profile, simulate  # noqa: E402
from fusionopt.reporting import write_json_atomic  # noqa: E402
from fusionopt.model import FullySharded  # noqa: E402
from fusionopt.reporting import (Progress, changed_options, command_line, interrupted_path,  # noqa: E402
                                 fraction, markdown_table, nonnegative_int, positive_float, positive_int,
                                 subset_location, write_result)
from fusionopt.solvers import solve  # noqa: E402
from fusionopt.advice import MIN_GAIN, ddp_settings, OverMemoryCap, fsdp2_advice  # noqa: E402
from harness import (OPTIMIZER, TOKENS, UnshardedBytes, build_model, calibration_files,  # noqa: E402
                     measure_loopback, measure_profile, measure_rounds, speedup_interval, training_step)

MODELS = ("mlp", "cnn", "lstm", "transformer")
FRAMEWORKS = ("ddp", "fsdp2")
# The GPU command's stage (validation/gpu/run.py), within its share of the budget.
GPU_MODELS, GPU_NETWORKS, GPU_ROUNDS, GPU_STEPS = ("mlp", "transformer"), ("10gbe",), 12, 2
SPEEDUP_SHARE = 0.9               # the measured speedup is at least this share of the predicted
MEMORY_TOLERANCE = 0.05           # the measured peak within this fraction of M_peak


# --- the predictions --------------------------------------------------------------------

def _problems(problem: Problem, calibration: Any) -> tuple[Problem, Problem]:
    """``problem`` with the reducer's measured cost (:func:`with_reducer_overhead`; as
    ``advise --reducer-calibration`` takes it), and without it."""
    return (problem if calibration is None else with_reducer_overhead(problem, calibration)), problem


def ddp_case(profile: Profile, name: str, workers: int, calibration: Any = None, *,
             min_gain: float = MIN_GAIN) -> dict[str, Any]:
    """The DDP advice for ``profile`` on ``network(name, workers)`` with the reducer's cost
    ``calibration`` (a :class:`ReducerCalibration` of DDP, or None), as ``advise --json``
    prints it (the DP's plan; no Horovod part), with the predicted steps (seconds) of DDP's
    default layout and of the advised one: ``predicted`` on the problem the advice was
    solved on, ``predicted_plain`` without the reducer's cost."""
    problem, plain = _problems(Problem(profile, network(name, workers), step_parts="fit"), calibration)
    result = solve(problem, "dp")
    settings = ddp_settings(problem, result.plan, min_gain=min_gain)
    layouts = {"default": solve(problem, "ddp").plan,
               "advised": Plan.from_groups(problem.profile, [list(b) for b in settings.buckets])}
    predicted = {}
    for key, on in (("predicted", problem), ("predicted_plain", plain)):
        steps = {setting: simulate(on, layout).iteration_time for setting, layout in layouts.items()}
        predicted[key] = {**steps, "speedup": steps["default"] / steps["advised"],
                          "messages": {setting: layout.num_messages for setting, layout in layouts.items()}}
    return {"advice": {"method": "dp", "iteration_time": result.iteration_time, "messages": result.num_messages,
                       "ddp": settings.to_dict()},
            "advised_is_default": not settings.arguments,
            "setting": settings.arguments or "defaults", **predicted}


def fsdp2_case(profile: Profile, name: str, workers: int, memory_cap: float | None = None,
               calibration: Any = None, *, min_gain: float = MIN_GAIN, blocking: bool = True) -> dict[str, Any]:
    """The FSDP2 advice for ``profile`` on ``name``'s ring reduce-scatter and all-gather for
    ``workers`` workers under ``memory_cap`` (bytes; None: no cap), each collective blocking the
    training thread (``blocking``: FSDP2 on CPU; False: on a GPU's streams), with the reducer's cost
    ``calibration`` (of FSDP2, or None), as ``advise --pattern fsdp --json`` prints it (no
    ZeRO-3 part), with the predicted steps (seconds) and peaks ``M_peak`` (bytes) of FSDP2's
    defaults and of the advice (``predicted``; ``predicted_plain`` without the reducer's
    cost). :class:`OverMemoryCap` where nothing fits the cap."""
    halves = FullySharded.from_network(name, workers, memory_cap=memory_cap, blocking=blocking)
    problem, plain = _problems(Problem(profile, pattern=halves, step_parts="fit"), calibration)
    advice = fsdp2_advice(problem, min_gain=min_gain)
    plans = {"default": solve(problem, "fsdp2").plan, "advised": advice.settings.plan}
    predicted = {}
    for key, on in (("predicted", problem), ("predicted_plain", plain)):
        timelines = {setting: simulate(on, plan) for setting, plan in plans.items()}
        predicted[key] = {**{setting: t.iteration_time for setting, t in timelines.items()},
                          "speedup": timelines["default"].iteration_time / timelines["advised"].iteration_time,
                          **{f"{setting}_peak": int(t.peak_memory) for setting, t in timelines.items()},
                          "messages": {setting: len(t.message_start) for setting, t in timelines.items()}}
    settings = advice.settings
    return {"advice": {"fsdp2": advice.to_dict()},
            "advised_is_default": advice.defaults,
            "setting": "defaults" if advice.defaults else
            {"units": settings.units, "reshard_after_forward": settings.reshard_after_forward,
             "forward_prefetch": settings.forward_prefetch, "backward_prefetch": settings.backward_prefetch},
            **predicted}


def link_cost(framework: str, name: str, workers: int) -> Any:
    """The emulated link's price per message: DDP's all-reduce, or FSDP2's ring halves, which
    price a reduce-scatter and an all-gather of ``S`` bytes alike (one link carries both)."""
    if framework == "ddp":
        return network(name, workers)
    halves = FullySharded.from_network(name, workers)
    if halves.reduce_scatter.affine != halves.all_gather.affine:
        raise ValueError(f"network {name!r}: its reduce-scatter and all-gather cost differ, and one emulated "
                         "link prices both")
    return halves.all_gather


# --- the statistics ---------------------------------------------------------------------

def targets(case: dict[str, Any]) -> dict[str, Any]:
    """The case's targets, each True (met) or False (missed); None where it does not apply.

    Where the advice keeps the defaults the two settings are one, measured twice (an A/A
    comparison): "not slower" does not apply, and ``same_within`` says whether the interval
    holds 1, as at 95% it fails to one time in twenty by chance alone."""
    measured, predicted = case["measured"], case["predicted"]
    ratio = measured["speedup"] / predicted["speedup"]
    same = bool(case.get("advised_is_default", False))
    within = measured["ci"][0] <= 1.0 <= measured["ci"][1]
    checks: dict[str, Any] = {"not_slower": None if same else measured["ci"][1] >= 1.0,
                              "same_within": within if same else None,
                              "speedup_ratio": ratio, "speedup": ratio >= SPEEDUP_SHARE,
                              "memory": None, "memory_error": None, "cap": None}
    if case["framework"] == "fsdp2" and "memory" in case:
        peak, measured_peak = predicted["advised_peak"], case["memory"]["advised_peak"]
        checks["memory_error"] = (measured_peak - peak) / peak
        checks["memory"] = abs(checks["memory_error"]) <= MEMORY_TOLERANCE
        if case["memory_cap"] is not None:
            checks["cap"] = measured_peak <= case["memory_cap"]
    return checks


# --- the ranks ----------------------------------------------------------------------------

def _wrapped(name: str, framework: str, advice: dict[str, Any] | None, cost: Any,
             device: Any = "cpu") -> tuple[Any, Any]:
    """A fresh copy of the model (seed 0) on ``device``, wrapped by ``framework`` with
    ``advice`` (None: the defaults), its collectives held on a link of its own; with the link."""
    import torch

    torch.manual_seed(0)
    model = build_model(name)[0].to(device)
    link = EmulatedLink(cost)
    if advice is None:
        return apply_defaults(model, framework, link=link), link
    return apply_advice(model, advice, framework=framework, link=link), link


def _rank(rank: int, port: int, out: str, args: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    gpu = args["backend"] == "nccl"                  # one GPU per rank
    if gpu:
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)
    device = torch.device("cuda", rank) if gpu else torch.device("cpu")
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group(args["backend"], rank=rank, world_size=args["ranks"])
    cases: list[dict[str, Any]] = []
    calibrations = {framework: None if path is None else read_reducer_calibration(path)
                    for framework, path in args["calibrations"].items()}
    try:
        times = None if gpu else measure_loopback(dist)      # on one GPU no collective leaves the device
        for name in args["models"]:
            profile, x = measure_profile(name, rank, args, dist, device)
            for case in args["cases"]:
                if case["model"] != name:
                    continue
                solved: list[Any] = [None]
                cap = None if case["cap_fraction"] is None else case["cap_fraction"] * profile.total_bytes
                if rank == 0:
                    calibration = calibrations[case["framework"]]
                    try:
                        solved[0] = (ddp_case(profile, case["network"], args["workers"], calibration,
                                              min_gain=args["min_gain"])
                                     if case["framework"] == "ddp" else
                                     fsdp2_case(profile, case["network"], args["workers"], cap, calibration,
                                                min_gain=args["min_gain"], blocking=not gpu))
                    except (OverMemoryCap, ValueError) as exc:
                        solved[0] = {"error": f"advice: {exc}"}
                dist.broadcast_object_list(solved, src=0)
                row = {**case, "ranks": args["ranks"], "profile": profile.to_dict(), **solved[0], "memory_cap": cap,
                       "loopback": times}
                if "error" not in row:
                    try:
                        row.update(_run_case(case, row, x, args, dist, device))
                    except (ValueError, RuntimeError) as exc:    # the same on every rank: wrapping the model
                        row["error"] = f"{case['framework']}: {exc}"
                cases.append(row)
                if rank == 0:        # the cases finished so far, for the parent to report as they come
                    write_json_atomic(out, cases)
    finally:
        dist.destroy_process_group()


def _run_case(case: dict[str, Any], row: dict[str, Any], x: Any, args: dict[str, Any], dist: Any,
              device: Any) -> dict[str, Any]:
    """Build the default and the advised job on ``device``, measure them paired, and on CPU
    count FSDP2's bytes (:class:`UnshardedBytes` times the host's events, which on a GPU run
    ahead of the device)."""
    import torch

    framework, gpu = case["framework"], device.type == "cuda"
    cost = link_cost(framework, case["network"], args["workers"])
    default, default_link = _wrapped(case["model"], framework, None, cost, device)
    advised, advised_link = _wrapped(case["model"], framework, row["advice"], cost, device)
    optimizers = {key: make_optimizer(*OPTIMIZER, model.parameters())
                  for key, model in (("default", default), ("advised", advised))}
    models = {"default": default, "advised": advised}

    counters = ({"default": UnshardedBytes(default, default_link), "advised": UnshardedBytes(advised, advised_link)}
                if framework == "fsdp2" and not gpu else {})
    links = {"default": default_link, "advised": advised_link}
    rounds = measure_rounds({key: training_step(models[key], optimizers[key], x) for key in models}, args, dist,
                            links, counters, torch.cuda.synchronize if gpu else (lambda: None))
    steps = args["rounds"] * args["steps"]
    result: dict[str, Any] = {"rounds": rounds, "measured": speedup_interval(rounds["default"], rounds["advised"]),
                              "messages_per_step": {key: len(link.log) / steps for key, link in links.items()}}
    if counters:
        result["memory"] = {"default_peak": counters["default"].peak, "advised_peak": counters["advised"].peak}
    dist.barrier()
    return result


# --- the document -------------------------------------------------------------------------

def cases_of(models: list[str], networks: list[str], capped: str | None, cap_fraction: float,
             frameworks: tuple[str, ...] = FRAMEWORKS) -> list[dict[str, Any]]:
    """The cases of one number of ranks, in the order they run: per model, network and
    framework; the capped FSDP2 case after the model's others (where FSDP2 is among
    ``frameworks``)."""
    cases = [{"model": m, "network": n, "framework": f, "cap_fraction": None}
             for m in models for n in networks for f in frameworks]
    if capped is not None and "fsdp2" in frameworks:
        at = max(k for k, c in enumerate(cases) if c["model"] == capped) + 1
        cases.insert(at, {"model": capped, "network": networks[0], "framework": "fsdp2", "cap_fraction": cap_fraction})
    return cases


def document_of(cases: list[dict[str, Any]], calibrations: dict[str, Any], args: argparse.Namespace,
                argv: list[str], host: str, load: dict[str, str | None]) -> dict[str, Any]:
    """The result document of the finished ``cases`` (each given its targets in place), the
    reducer ``calibrations`` (per number of ranks, per framework) and the host's ``load``
    average at the start and at the end."""
    for case in cases:
        if "measured" in case:
            case["targets"] = targets(case)
    return {
        "date": datetime.date.today().isoformat(),
        "host": host, "cpus": os.cpu_count(), "load_average": load, "backend": args.backend, "ranks": args.ranks,
        "link": "emulated", "networks": args.networks, "workers": args.workers, "batch": args.batch,
        "rounds": args.rounds, "steps": args.steps, "warmup": args.warmup, "profile_steps": args.profile_steps,
        "memory_cap": {"model": args.capped_model, "fraction": args.cap_fraction}, "min_gain": args.min_gain,
        "command": command_line("validation/frameworks/speedup.py", argv, args.out),
        "timings": "measured on the host named, shared with other work; not reproducible to the digit",
        "calibrations": calibrations,
        "cases": cases,
    }


def _setting(case: dict[str, Any]) -> str:
    setting = case.get("setting")
    if setting in (None, "defaults"):
        return "defaults"
    if case["framework"] == "ddp":
        return ", ".join(f"{k}={v}" for k, v in setting.items())
    calls = "; ".join(f"{'+'.join(m or 'model' for m in unit)}{'' if r else ' (kept)'}"
                      for unit, r in zip(setting["units"], setting["reshard_after_forward"]))
    prefetch = [k for k in ("forward_prefetch", "backward_prefetch") if setting[k]]
    return f"fully_shard: {calls}" + (f"; {', '.join(prefetch)} lists" if prefetch else "")


def markdown(document: dict[str, Any]) -> str:
    ms = lambda s: f"{1e3 * s:.2f}"  # noqa: E731
    mib = lambda b: f"{b / 2**20:.3f}"  # noqa: E731
    met = lambda ok: "met" if ok else "**missed**"  # noqa: E731
    cases = document["cases"]
    done = [c for c in cases if "measured" in c]
    gpu = document.get("backend", "gloo") == "nccl"
    loopback = {c["ranks"]: c["loopback"] for c in cases if c.get("loopback")}
    where = ("NCCL ranks, one GPU each (on one GPU one rank: the link stands for the other workers); each hold runs "
             "on a CUDA stream of the link's, the host and the compute stream running on" if gpu else
             "gloo ranks on this host's CPU, one torch thread each")
    lines = ["# The advice applied for real: DDP and FSDP2 defaults against the advice (emulated link)", "",
             f"{document['date']}; {document['host']}. Written by `{document['command']}`.", "",
             f"{where}; **emulated link**: every collective runs "
             f"for real, then is held on one channel, first in, first out, for `c(S)` of the network named for "
             f"{document['workers']} workers. Per setting {document['rounds']} rounds of {document['steps']} "
             f"steps after {document['warmup']} untimed ones, the two settings alternating, the order swapped "
             f"each round. **Timings of this host** ({document['cpus']} CPUs shared with other work; load average "
             f"{document['load_average']['start']} at the start, {document['load_average']['end']} at the end): "
             f"they vary from run to run; the ratios of the two settings, measured side by side, are what the "
             f"targets judge.", "",
             "*Predicted*: `simulate` on the profile the ranks measured at the start of each model (with the "
             "training job's optimiser), the defaults' layout and the advice's, on the network's cost; the advice "
             f"is what `fusionopt advise --min-gain {document.get('min_gain', 0.05):g}` "
             + ("(`--pattern fsdp` for FSDP2, its collectives on the GPU's streams) " if gpu else
                "(`--pattern fsdp --blocking-collectives` for FSDP2: gloo's collectives block FSDP2's training "
                "thread on CPU) ")
             + "gives for that profile. *Measured*: the mean "
             "step on rank 0 of each setting" + (" (the device synchronised before a round's clock starts and "
                                                 "before it stops)" if gpu else "")
             + "; speedup = mean default / mean advised, with its 95% bootstrap "
             "interval over the rounds. " + (
                 "FSDP2's peak is not measured on a GPU: its counter times the host's events, which run ahead of "
                 "the device." if gpu else
                 "FSDP2's *measured peak*: the unsharded parameters and gradients whole at "
                 "once on the real job, counted as `M_peak` counts them (a unit's parameters from the start of its "
                 "all-gather's hold until FSDP2 frees them, its gradients from the start of its backward until the "
                 "end of its reduce-scatter's hold)."), ""]
    if 1 in document.get("ranks", []):
        lines += ["FSDP2 is left out on one rank: sharded over one rank, FSDP2 (torch 2.13) sends no all-gather and "
                  "no reduce-scatter, so the link would hold nothing (one GPU runs one rank: NCCL takes one rank "
                  "per device).", ""]
    if done:
        counts = {key: (sum(1 for c in done if c["targets"][key]), sum(1 for c in done if c["targets"][key] is not None))
                  for key in ("not_slower", "same_within", "speedup", "memory", "cap")}
        lines += ["Targets:", "",
                  f"* the advice never slower than the default beyond its interval: **{counts['not_slower'][0]} of "
                  f"{counts['not_slower'][1]}** cases where it changes a setting "
                  f"({met(counts['not_slower'][0] == counts['not_slower'][1])}); where it keeps the defaults the "
                  f"same job runs twice, and the interval holds 1 in **{counts['same_within'][0]} of "
                  f"{counts['same_within'][1]}** (a check of the measurement: a 95% interval misses one time in "
                  "twenty by chance);",
                  f"* measured speedup >= {SPEEDUP_SHARE} x predicted: **{counts['speedup'][0]} of "
                  f"{counts['speedup'][1]}** ({met(counts['speedup'][0] == counts['speedup'][1])});",
                  *(["* FSDP2's peak: not measured on a GPU (above).", ""] if gpu else [
                      f"* FSDP2's measured peak within {100 * MEMORY_TOLERANCE:.0f}% of `M_peak`: "
                      f"**{counts['memory'][0]} of {counts['memory'][1]}** "
                      f"({met(counts['memory'][0] == counts['memory'][1])});",
                      f"* under `--memory-cap`, the measured peak at most the cap: **{counts['cap'][0]} of "
                      f"{counts['cap'][1]}** ({met(counts['cap'][0] == counts['cap'][1])}).", ""])]
    rows = []
    for c in cases:
        label = [c["ranks"], c["model"], c["network"], c["framework"] + ("" if c["memory_cap"] is None else " (capped)")]
        if "measured" not in c:
            rows.append(label + [c.get("error", "not run")] + [""] * 11)
            continue
        p, m, t = c["predicted"], c["measured"], c["targets"]
        messages = f"{p['messages']['default']} / {p['messages']['advised']}"
        measured_messages = f"{c['messages_per_step']['default']:g} / {c['messages_per_step']['advised']:g}"
        rows.append(label + [_setting(c), messages, measured_messages, ms(p["default"]), ms(p["advised"]),
                             f"{p['speedup']:.3f}", f"{c['predicted_plain']['speedup']:.3f}",
                             ms(m["default"]), ms(m["advised"]),
                             f"{m['speedup']:.3f} [{m['ci'][0]:.3f}, {m['ci'][1]:.3f}]",
                             f"{t['speedup_ratio']:.3f}",
                             met(t["not_slower"]) if t["not_slower"] is not None else
                             "same setting" + ("" if t.get("same_within", True) else ", outside its interval"),
                             met(t["speedup"])])
    lines += markdown_table(["ranks", "model", "network", "framework", "advice", "messages per step, predicted",
                             "measured", "predicted default (ms)", "predicted advised (ms)", "predicted speedup",
                             "without the reducer's cost", "measured default (ms)", "measured advised (ms)",
                             "measured speedup [95%]", "measured / predicted", "not slower",
                             f">= {SPEEDUP_SHARE} x predicted"], rows)
    memory = [c for c in done if c["framework"] == "fsdp2" and "memory" in c]
    if memory:
        lines += ["", "FSDP2's unsharded parameters and gradients, MiB (`M_peak` predicted for the advice against the "
                  "peak measured on its steps; the defaults' beside them):", ""]
        rows = [[c["ranks"], c["model"], c["network"], "" if c["memory_cap"] is None else mib(c["memory_cap"]),
                 mib(c["predicted"]["advised_peak"]), mib(c["memory"]["advised_peak"]),
                 f"{100 * c['targets']['memory_error']:+.1f}%", met(c["targets"]["memory"]),
                 "" if c["targets"]["cap"] is None else met(c["targets"]["cap"]),
                 mib(c["predicted"]["default_peak"]), mib(c["memory"]["default_peak"])] for c in memory]
        lines += markdown_table(["ranks", "model", "network", "cap", "advised M_peak", "advised measured",
                                 "error", f"within {100 * MEMORY_TOLERANCE:.0f}%", "<= cap",
                                 "defaults' M_peak", "defaults' measured"], rows)
    if document["calibrations"]:
        lines += ["", "The reducers' own cost, measured by `measure_reducer_overhead` on its synthetic model before "
                  "each number of ranks, with the training job's optimiser (a fixed cost per step and a cost per "
                  "message, fitted on 1 to 16 messages per step; DDP's also its compute per message, fitted on a "
                  "backward long enough for the compute to be critical; FSDP2's also a cost per parameter tensor and "
                  "per byte of each collective, fitted on stacks of 4 to 64 layers and of 4 to 64 KiB tensors at one "
                  "unit; each message held on the calibration's own emulated link, 5 ms, longer than a loopback "
                  "collective of 2 ranks; of 4 ranks the loopback may outlast it, and its excess per message then "
                  "holds the overrun), or read from the file named (`--reducer-calibration`, measured apart); "
                  "`predicted` adds it, as `advise --reducer-calibration` does: " + "; ".join(
                      f"{framework} on {ranks} ranks, "
                      + reducer_cost_words(c)
                      + (f" (read from `{c['file']}`)" if c.get("file") else "")
                      for ranks, by in document["calibrations"].items() for framework, c in by.items()) + "."]
    lines += ["", "The emulated link's hold of a 1 MB message (a DDP bucket's all-reduce; an FSDP2 all-gather or "
              "reduce-scatter): " + "; ".join(
                  f"{name} {ms(link_cost('ddp', name, document['workers'])(1e6))} ms and "
                  f"{ms(link_cost('fsdp2', name, document['workers'])(1e6))} ms" for name in document["networks"])
              + (". On a GPU a message's hold starts when its real collective has ended, which adds that collective's "
                 "time, a local copy on one rank (the emulated link's documented limit)." if gpu else
                 ". A message whose real loopback collective outlasts its hold ends when the collective ends, "
                 "later than the model says (the emulated link's documented limit); the loopback collectives, timed "
                 "bare on the ranks before the cases and not priced (rank 0, the mean of 10 after one untimed; ms "
                 "at 64 KiB, 1 MiB and 8 MiB): " + "; ".join(
                     f"{ranks} ranks: " + ", ".join(
                         f"{kind.replace('_', '-')} " + " / ".join(ms(t) for size, t in points
                                                                  if size in (2**16, 2**20, 2**23))
                         for kind, points in times.items())
                     for ranks, times in loopback.items()) + "." if loopback else
                 ". A message whose real loopback collective outlasts its hold ends when the collective ends, "
                 "later than the model says (the emulated link's documented limit).")]
    profiles = {(c["ranks"], c["model"]): c["profile"] for c in cases if "profile" in c}
    if profiles:
        lines += ["", "Profiles measured (ms per step, rank 0): " + "; ".join(
            f"{model} on {ranks} ranks: " + ", ".join(f"{k} {1e3 * v:.2f}"
                                                      for k, v in Profile.from_dict(doc).parts.items() if v)
            for (ranks, model), doc in profiles.items())]
    return "\n".join(lines) + "\n"


# --- the command line ---------------------------------------------------------------------

def _names(parser: argparse.ArgumentParser, flag: str, text: str, allowed: tuple[str, ...] | None) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if allowed is not None and n not in allowed]
    if unknown or not names:
        parser.error(f"{flag}: unknown name {unknown[0] if unknown else '(none)'!r}"
                     + (f": choose from {', '.join(allowed)}" if allowed else ""))
    if len(set(names)) < len(names):
        parser.error(f"{flag}: {text!r} names one twice")
    return names


def parse_arguments(argv: list[str] | None) -> tuple[argparse.Namespace, str]:
    """The arguments (``models``, ``networks`` and ``ranks`` as lists) and the folder of the
    result files: a run with other arguments than the stored result's writes into the
    ``subset`` folder beside it. Bad arguments exit with one line (status 2)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated: {', '.join(MODELS)}")
    parser.add_argument("--networks", default="10gbe,25gbe",
                        help="the emulated link's network presets, comma-separated (default 10gbe,25gbe: their "
                             "3.15 ms startup at 64 workers outlasts a loopback gloo collective of these models on "
                             "a 2-core host, 1 to 2.5 ms, so the link, not the loopback, sets each message's time)")
    parser.add_argument("--workers", type=positive_int, default=64, help="the networks' workers (default 64)")
    parser.add_argument("--backend", default="gloo", choices=("gloo", "nccl"),
                        help="gloo ranks on the CPU (default), or nccl with one GPU per rank (on one GPU, one rank: "
                             "the emulated link stands for the other workers)")
    parser.add_argument("--ranks", default=None, help="ranks, comma-separated (default 2,4 on gloo, 1 on nccl)")
    parser.add_argument("--batch", type=positive_int, default=32, help="samples per rank and step (default 32; "
                        f"the transformer takes {TOKENS} tokens)")
    parser.add_argument("--rounds", type=positive_int, default=20, help="paired rounds (default 20)")
    parser.add_argument("--steps", type=positive_int, default=4, help="steps per setting and round (default 4)")
    parser.add_argument("--warmup", type=nonnegative_int, default=5, help="untimed steps of each setting (default 5)")
    parser.add_argument("--profile-steps", type=positive_int, default=10,
                        help="profile_model's timed steps (default 10)")
    parser.add_argument("--calibration-rounds", type=nonnegative_int, default=None,
                        help="rounds of each reducer calibration, measured on gloo ranks (default 3 on gloo, 0 on "
                             "nccl; 0: predict without the reducers' cost)")
    parser.add_argument("--calibration-steps", type=positive_int, default=20,
                        help="timed steps per sample of each reducer calibration (default 20)")
    parser.add_argument("--reducer-calibration", action="append", default=None, metavar="FILE",
                        help="a reducer calibration measured apart (fusionopt calibrate --reducer), used for its "
                             "reducer (ddp or fsdp2) and number of ranks instead of measuring one; repeatable")
    parser.add_argument("--capped-model", default=None,
                        help="the model of the FSDP2 case under a memory cap (default: the transformer when it is "
                             "among --models; 'none': no such case)")
    parser.add_argument("--cap-fraction", type=positive_float, default=1.0,
                        help="that cap, as a fraction of the model's parameter bytes (default 1.0)")
    parser.add_argument("--min-gain", type=fraction, default=MIN_GAIN,
                        help=f"advise's --min-gain: the least predicted gain for which the advice replaces a default "
                             f"(default {MIN_GAIN:g}; 0: any gain, as advise chose before it had one)")
    parser.add_argument("--out", default=str(ROOT / "validation" / "results"), help="folder of the result files")
    args = parser.parse_args(argv)
    args.models = _names(parser, "--models", args.models, MODELS)
    args.networks = _names(parser, "--networks", args.networks, None)
    for name in args.networks:
        try:
            for framework in FRAMEWORKS:
                link_cost(framework, name, args.workers)
        except ValueError as exc:
            parser.error(f"--networks {name}: {exc}")
    gpu = args.backend == "nccl"
    if args.ranks is None:
        args.ranks = "1" if gpu else "2,4"
    if args.calibration_rounds is None:
        args.calibration_rounds = 0 if gpu else 3
    elif gpu and args.calibration_rounds:
        parser.error("--calibration-rounds: the reducer calibration runs on gloo ranks, not on the GPU; on nccl give "
                     "0, or a calibration measured apart with --reducer-calibration")
    ranks = _names(parser, "--ranks", args.ranks, None)
    least = 1 if gpu else 2
    if not all(r.isdigit() and int(r) >= least for r in ranks):
        parser.error(f"--ranks: {args.ranks!r}: each must be a whole number >= {least}"
                     + (" (one GPU each)" if gpu else " (data parallelism; one rank runs on nccl, a GPU)"))
    args.ranks = [int(r) for r in ranks]
    if args.capped_model not in (None, "none", *args.models):
        parser.error(f"--capped-model {args.capped_model!r}: not among --models ({', '.join(args.models)}); "
                     "'none' for no capped case")
    args.reducer_calibration = calibration_files(parser, args.reducer_calibration or [], args.ranks,
                                             reducers=FRAMEWORKS)
    # The stored result of each backend: speedup-cpu with the defaults; speedup-gpu as the GPU command runs it.
    reference = ({"backend": "nccl", "models": list(GPU_MODELS), "networks": list(GPU_NETWORKS), "ranks": [1],
                  "calibration_rounds": 0, "rounds": GPU_ROUNDS, "steps": GPU_STEPS} if gpu else
                 {"models": list(MODELS), "networks": ["10gbe", "25gbe"], "ranks": [2, 4], "calibration_rounds": 3})
    changed = changed_options(parser, args, leave=("out",), reference={**reference, "reducer_calibration": {}})
    folder = subset_location(args.out, parser.get_default("out"), changed, folder=True)
    if args.capped_model is None:
        args.capped_model = "transformer" if "transformer" in args.models else "none"
    if args.capped_model == "none":
        args.capped_model = None
    return args, folder


def main(argv: list[str] | None = None) -> int:
    args, folder = parse_arguments(argv)
    argv = sys.argv[1:] if argv is None else argv
    import torch
    import torch.multiprocessing as mp

    if args.backend == "nccl" and torch.cuda.device_count() < max(args.ranks):
        print(f"error: --backend nccl runs one rank per GPU and needs {max(args.ranks)} GPU(s); this host has "
              f"{torch.cuda.device_count()}", file=sys.stderr)
        return 2
    host = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, torch {torch.__version__}"
    if args.backend == "nccl":
        host += f", {torch.cuda.get_device_name(0)}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}"
    load = {"start": _load_average(), "end": None}
    cases: list[dict[str, Any]] = []
    calibrations: dict[str, Any] = {}
    stem = "speedup-gpu" if args.backend == "nccl" else "speedup-cpu"
    # FSDP2 on one rank sends no collective (torch 2.13 skips them): nothing to measure on the link.
    plan = [(ranks, cases_of(args.models, args.networks,
                             args.capped_model if ranks == args.ranks[0] else None, args.cap_fraction,
                             FRAMEWORKS if ranks > 1 else ("ddp",)))
            for ranks in args.ranks]
    with Progress(interrupted_path(os.path.join(folder, f"{stem}.md"))) as progress:
        with tempfile.TemporaryDirectory() as scratch:
            for ranks, ranks_cases in plan:
                paths = {framework: args.reducer_calibration.get((framework, ranks)) for framework in FRAMEWORKS}
                for framework, path in paths.items():
                    if path is not None:
                        calibrations.setdefault(str(ranks), {})[framework] = {
                            **read_reducer_calibration(path).to_dict(), "file": os.path.basename(path)}
                measure = [f for f in FRAMEWORKS if paths[f] is None] if args.calibration_rounds else []
                if measure:
                    progress.stage(f"reducer calibrations on {ranks} ranks", total=len(measure))
                    for framework in measure:
                        calibration = measure_reducer_overhead(framework, ranks, steps=args.calibration_steps,
                                                               warmup=max(1, args.warmup),
                                                               rounds=args.calibration_rounds, optimizer=OPTIMIZER[0],
                                                               optimizer_options=OPTIMIZER[1])
                        paths[framework] = os.path.join(scratch, f"{framework}-{ranks}.json")
                        calibration.write(paths[framework])
                        calibrations.setdefault(str(ranks), {})[framework] = calibration.to_dict()
                        progress.step(calibration.summary())
                settings = {"backend": args.backend, "ranks": ranks, "models": args.models, "cases": ranks_cases,
                            "workers": args.workers,
                            "batch": args.batch, "rounds": args.rounds, "steps": args.steps, "warmup": args.warmup,
                            "profile_steps": args.profile_steps, "calibrations": paths, "min_gain": args.min_gain}
                progress.stage(f"cases on {ranks} ranks", total=len(ranks_cases))
                rank0 = os.path.join(scratch, f"ranks{ranks}.json")
                context = mp.spawn(_rank, args=(free_port(), rank0, settings), nprocs=ranks, join=False)
                seen = 0
                try:
                    finished = False
                    while not finished:
                        finished = context.join(timeout=1.0)
                        done = json.loads(Path(rank0).read_text()) if os.path.exists(rank0) else []
                        for case in done[seen:]:
                            cases.append(case)
                            progress.keep(document_of(list(cases), calibrations, args, argv, host,
                                                      {**load, "end": _load_average()}))
                            progress.step(_line(case))
                        seen = len(done)
                finally:             # interrupted or failed: the ranks go too
                    for process in context.processes:
                        if process.is_alive():
                            process.terminate()
                    for process in context.processes:
                        process.join()
        load["end"] = _load_average()
        document = document_of(cases, calibrations, args, argv, host, load)
        write_result(folder, stem, document, markdown(document))
    return progress.exit_code


def _load_average() -> str:
    """The host's 1, 5 and 15 minute load averages."""
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def _line(case: dict[str, Any]) -> str:
    label = (f"{case['ranks']} ranks, {case['model']}, {case['network']}, {case['framework']}"
             + ("" if case["memory_cap"] is None else " (capped)"))
    if "measured" not in case:
        return f"{label}: {case.get('error')}"
    p, m = case["predicted"], case["measured"]
    return (f"{label}: predicted {1e3 * p['default']:.2f} -> {1e3 * p['advised']:.2f} ms ({p['speedup']:.3f}x), "
            f"measured {1e3 * m['default']:.2f} -> {1e3 * m['advised']:.2f} ms ({m['speedup']:.3f}x, "
            f"95% {m['ci'][0]:.3f} to {m['ci'][1]:.3f})")


if __name__ == "__main__":
    sys.exit(main())
