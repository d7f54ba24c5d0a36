"""Plans trained for real: small models trained on 2 ranks (one with ``--ranks 1``, as on one GPU) with fusionopt's ``PlanReducer``
under several plans, each measured against the model's prediction.

For each model (``fusionopt.integrations.small_model``: mlp, cnn, lstm), 2 gloo
ranks on this host's CPU, one thread each:

1. both ranks measure the profile at once with ``profile_model`` (the same threads and load
   as training; with the training job's SGD-momentum optimiser, whose time is the update
   lump); rank 0's profile is shared, and the plans are solved once, on rank 0;
2. the link is emulated: each message is held on the channel for ``c(S)`` of
   ``network(--network, --workers)`` after its start (its real loopback all-reduce is far
   shorter); every figure below is of an **emulated link**;
3. the plans: ``single`` and ``wfbp`` (the in-run fit below uses them), DDP's default layout (``ddp``), the best single ``bucket_cap_mb``
   that ``advise`` gives for the DP's plan (``ddp-advised``), the exact ``dp`` plan (barrier
   sync), and ``usbyte`` and ``layerwise-opt`` (layerwise sync; the update lump spread over the
   tensors by size, since layerwise sync updates tensor by tensor); beside them, real
   ``DistributedDataParallel`` with its default layout (on a copy of the model), its buckets
   held for the same ``c(S)`` by a comm hook. They take turns in ``--rounds`` rounds, each
   round in an order rotated by one, each turn ``--steps / --rounds`` timed steps after
   ``--warmup``;
4. predicted: ``simulate`` on the profile and the emulated link's cost; measured: the median
   over the rounds of the mean step on rank 0.

The reducer's own cost is measured first, apart from the plans it predicts: before any model
trains, ``measure_reducer_overhead("plan")`` times ``PlanReducer`` on a synthetic stack of
linear layers at 1 to 16 messages with the channel critical, and on a wider stack at 1 to 8
messages with the compute critical (``fusionopt.integrations._reducer_calibration``), or
``--reducer-calibration R.json`` reads one ``fusionopt calibrate --reducer plan`` wrote. Each
plan gets three predictions: ``predicted`` (the model alone), ``predicted_with_reducer`` (that
measured cost per message on the link's cost, per step on the host overhead and per message
on the compute stream; the targets' headline) and, as a comparison only, ``calibrated``: the same two figures fitted per model on
the run's own ``single`` and ``wfbp`` plans, that is, on what is predicted.

The targets are printed with the results, met or not. Writes
``validation/results/training-cpu.{json,md}`` (``--backend nccl``, one GPU per rank:
``training-gpu``; ``--out`` to choose the folder); a run with other arguments than the stored
result's (fewer models, fewer steps) writes into ``validation/results/subset/`` instead, and
Ctrl-C writes the models finished to ``training-cpu.interrupted.{md,json}``. Timings of
this host: they vary from run to run.

    python validation/training/run.py
    python validation/training/run.py --models mlp --steps 10      # into results/subset/
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import datetime
import itertools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fusionopt.cost import network  # noqa: E402
from fusionopt.integrations import free_port  # noqa: E402
from fusionopt.integrations import (
    ReducerCalibration, measure_reducer_overhead, read_reducer_calibration, reducer_cost_words, with_reducer_overhead,
)
from fusionopt.model import Plan, Problem, Profile, simulate  # noqa: E402
from fusionopt.reporting import write_json_atomic  # noqa: E402
from fusionopt.cost import with_overhead  # noqa: E402
from fusionopt.reporting import (Progress, changed_options, command_line, interrupted_path,  # noqa: E402
                                 markdown_table, nonnegative_int, positive_int, subset_location, write_result)

MODELS = ("mlp", "cnn", "lstm")
CALIBRATION = ("single", "wfbp")      # the plans the in-run fit (``calibrated``) uses
PREDICTIONS = ("predicted", "predicted_with_reducer", "calibrated")
REAL_DDP = "real DDP"
TEARDOWN_SECONDS = 10.0    # how long ranks whose models are all measured may take to end
USBYTE_UNIT = 4096          # parameters per US-Byte unit (the models are small)


def layerwise_profile(profile: Profile) -> Profile:
    """The profile with its update lump spread over the tensors by size (layerwise sync
    updates tensor by tensor and takes no lump); the other parts kept."""
    share = profile.sizes / profile.sizes.sum()
    return dataclasses.replace(profile, update=profile.update + profile.update_lump * share, update_lump=0.0)


def solve_plans(profile: Profile, cost: Any) -> dict[str, tuple[str, Plan, float]]:
    """Each plan with its sync and predicted T (seconds)."""
    from fusionopt.solvers import solve
    from fusionopt.advice import ddp_settings

    barrier = Problem(profile, cost)
    layerwise = Problem(layerwise_profile(profile), cost, sync="layerwise")
    dp = solve(barrier, "dp").plan
    cap = ddp_settings(barrier, dp, min_gain=0.0).bucket_cap_mb      # the best single cap, however small its gain
    plans = {"ddp": ("barrier", solve(barrier, "ddp").plan),
             "ddp-advised": ("barrier", solve(barrier, "ddp", **({} if cap is None else {"bucket_cap_mb": cap})).plan),
             "dp": ("barrier", dp),
             "usbyte": ("layerwise", solve(layerwise, "usbyte", unit_parameters=USBYTE_UNIT).plan),
             "layerwise-opt": ("layerwise", solve(layerwise, "layerwise-opt").plan),
             # The calibration plans run last, once the job is warm.
             "single": ("barrier", solve(barrier, "single").plan), "wfbp": ("barrier", solve(barrier, "wfbp").plan)}
    return {name: (sync, plan, simulate(barrier if sync == "barrier" else layerwise, plan).iteration_time)
            for name, (sync, plan) in plans.items()}


def _time_steps(step: Any, warmup: int, steps: int, dist: Any, settle: Any) -> float:
    for _ in range(warmup):
        step()
    settle()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    settle()
    return (time.perf_counter() - start) / steps


def _rank(rank: int, port: int, out: str, args: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    from fusionopt.integrations import (
        SMALL_INPUTS, small_model, EmulatedLink, ddp_comm_hook, PlanReducer, profile_model,
    )

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    gpu = args["backend"] == "nccl"          # one GPU per rank
    if gpu:
        torch.cuda.set_device(rank)
    device = torch.device("cuda", rank) if gpu else torch.device("cpu")
    settle = torch.cuda.synchronize if gpu else (lambda: None)    # the device's queued work done
    dist.init_process_group(args["backend"], rank=rank, world_size=args["ranks"])
    cost = network(args["network"], args["workers"])
    report: dict[str, Any] = {}
    try:
        for name in args["models"]:
            torch.manual_seed(0)
            model = small_model(name).to(device)
            x = torch.randn(args["batch"], *SMALL_INPUTS[name], generator=torch.Generator().manual_seed(rank)).to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
            dist.barrier()
            measured = profile_model(model, x, loss_fn=lambda out: out.sum(), steps=args["profile_steps"],
                                     warmup=args["warmup"], optimizer=optimizer, name=name)
            shared: list[Any] = [None] * args["ranks"]
            dist.all_gather_object(shared, measured.to_dict())
            profile = Profile.from_dict(shared[0])
            plans: list[Any] = [None] * args["ranks"]
            dist.all_gather_object(plans, {k: (s, p.to_dict(), t) for k, (s, p, t) in solve_plans(profile, cost).items()}
                                   if rank == 0 else None)
            row: dict[str, Any] = {"profile": profile.to_dict(), "tensors": profile.n,
                                   "bytes": profile.total_bytes, "plans": {}}
            # Real DDP, its default layout, on a copy of the model (its hooks stay off the
            # original's parameters), its buckets held on one emulated link by a comm hook:
            # on CPU a bucket holds the link for c(S) from when it is posted or the link frees,
            # the later (gloo runs two buckets at once; one link carries one at a time); on a
            # GPU on a CUDA stream of the link's, from when its all-reduce ends, the host not
            # waiting (as DDP does not wait for NCCL).
            replica = copy.deepcopy(model)
            ddp = torch.nn.parallel.DistributedDataParallel(replica)
            ddp.register_comm_hook(None, ddp_comm_hook(EmulatedLink(cost)))
            ddp_optimizer = torch.optim.SGD(replica.parameters(), lr=1e-3, momentum=0.9)

            def ddp_step() -> None:
                ddp_optimizer.zero_grad()
                ddp(x).sum().backward()
                ddp_optimizer.step()

            def time_plan(sync: str, plan: Plan, steps: int) -> float:
                if sync == "barrier":
                    reducer = PlanReducer(model, plan, profile, link=cost)

                    def step() -> None:
                        optimizer.zero_grad()
                        model(x).sum().backward()
                        optimizer.step()
                else:
                    reducer = PlanReducer(model, plan, profile, sync="layerwise", link=cost,
                                          optimizer=lambda ps: torch.optim.SGD(ps, lr=1e-3, momentum=0.9))

                    def step() -> None:
                        model(x).sum().backward()
                with reducer:
                    seconds = _time_steps(step, args["warmup"], steps, dist, settle)
                    reducer.flush()
                return seconds

            # Every plan and real DDP take turns, round after round, each round in an order
            # rotated by one: a slow spell of the host falls on every setting alike.
            names = list(plans[0]) + [REAL_DDP]
            rounds: dict[str, list[float]] = {k: [] for k in names}
            per_round = max(1, args["steps"] // args["rounds"])
            for r in range(args["rounds"]):
                for key in names[r % len(names):] + names[:r % len(names)]:
                    if key == REAL_DDP:
                        rounds[key].append(_time_steps(ddp_step, args["warmup"], per_round, dist, settle))
                    else:
                        sync, plan_doc, _ = plans[0][key]
                        rounds[key].append(time_plan(sync, Plan.from_dict(plan_doc), per_round))
            for plan_name, (sync, plan_doc, predicted) in plans[0].items():
                seconds = statistics.median(rounds[plan_name])
                row["plans"][plan_name] = {"sync": sync, "messages": Plan.from_dict(plan_doc).num_messages,
                                           "predicted": predicted, "measured": seconds, "rounds": rounds[plan_name],
                                           "plan": plan_doc}
                if rank == 0:
                    print(f"{name} {plan_name}: predicted {1e3 * predicted:.2f} ms, measured {1e3 * seconds:.2f} ms",
                          file=sys.stderr, flush=True)
            row["real_ddp"] = statistics.median(rounds[REAL_DDP])
            row["real_ddp_rounds"] = rounds[REAL_DDP]
            report[name] = row
            if rank == 0:        # the models finished so far, for the parent to report as they come
                write_json_atomic(out, report)
    finally:
        dist.destroy_process_group()


def calibrate(results: dict[str, Any], cost: Any) -> None:
    """Add each plan's ``calibrated`` prediction, a comparison only: the model with the
    reducer's own cost fitted per model on this run's own two plans (``single``, ``wfbp``) as a fixed cost per
    step (added to the host overhead) and a cost per message (added to ``alpha``): the
    measured excess of ``single`` is ``a + b``, of ``wfbp`` ``a + b * messages``
    (:func:`fusionopt.cost.with_overhead` puts them into the model)."""
    for row in results.values():
        single, wfbp = row["plans"]["single"], row["plans"]["wfbp"]
        excess = [p["measured"] - p["predicted"] for p in (single, wfbp)]
        per_message = max(0.0, (excess[1] - excess[0]) / (wfbp["messages"] - 1)) if wfbp["messages"] > 1 else 0.0
        fixed = max(0.0, excess[0] - per_message)
        row["calibration"] = {"per_step": fixed, "per_message": per_message}
        profile = Profile.from_dict(row["profile"])
        for p in row["plans"].values():
            shaped = profile if p["sync"] == "barrier" else layerwise_profile(profile)
            fitted = with_overhead(Problem(shaped, cost, sync=p["sync"]), per_step=fixed, per_message=per_message)
            p["calibrated"] = simulate(fitted, Plan.from_dict(p["plan"])).iteration_time


def with_reducer(results: dict[str, Any], cost: Any, calibration: ReducerCalibration) -> None:
    """Add each plan's ``predicted_with_reducer``: the model with the reducer's own cost
    measured apart from these plans (``calibration``), per message on the link's cost, per
    step on the host overhead and per message on the compute stream (``with_reducer_overhead``)."""
    for row in results.values():
        profile = Profile.from_dict(row["profile"])
        for p in row["plans"].values():
            shaped = profile if p["sync"] == "barrier" else layerwise_profile(profile)
            problem = with_reducer_overhead(Problem(shaped, cost, sync=p["sync"]), calibration)
            p["predicted_with_reducer"] = simulate(problem, Plan.from_dict(p["plan"])).iteration_time


def targets(results: dict[str, Any], key: str) -> dict[str, Any]:
    """The three targets over every model and the plans the in-run fit does not use, with
    the ``key`` prediction (one of ``PREDICTIONS``)."""
    checked = {name: {k: p for k, p in row["plans"].items() if k not in CALIBRATION} for name, row in results.items()}
    median = statistics.median(abs(p["measured"] - p[key]) / p[key] for plans in checked.values() for p in plans.values())
    pairs = agree = 0
    for plans in checked.values():
        for (_, pa), (_, pb) in itertools.combinations(plans.items(), 2):
            if abs(pa[key] - pb[key]) > 0.1 * min(pa[key], pb[key]):
                pairs += 1
                agree += (pa[key] < pb[key]) == (pa["measured"] < pb["measured"])
    speedups = {}
    for name, row in results.items():
        predicted = row["plans"]["ddp"][key] / row["plans"]["dp"][key]
        measured = row["real_ddp"] / row["plans"]["dp"]["measured"]
        speedups[name] = {"predicted": predicted, "measured": measured, "ratio": measured / predicted}
    return {"median_error": median, "pairs": pairs, "pairs_agreeing": agree, "dp_speedup": speedups}


LABELS = {"predicted": "predicted (the model alone)",
          "predicted_with_reducer": "with reducer (the reducer's cost measured apart: the headline)",
          "calibrated": "fitted on own plans (single and wfbp of this run: a comparison only)"}


def _reducer_source(calibration: dict[str, Any]) -> str:
    source = calibration.get("source")
    if source:
        return f"read from `{source}` (`fusionopt calibrate --reducer plan`)"
    return ("measured apart, before the plans, by `measure_reducer_overhead(\"plan\")` on a synthetic stack of "
            "linear layers at 1 to 16 messages with the channel critical and on a wider one at 1 to 8 messages with "
            "the compute critical (figures below)")


def _steps(count: int) -> str:
    return f"{count} timed step{'' if count == 1 else 's'}"


def _ranks(document: dict[str, Any]) -> str:
    ranks = document.get("ranks", 2)
    return f"{ranks} rank{'' if ranks == 1 else 's'},"


def markdown(document: dict[str, Any]) -> str:
    ms = lambda s: f"{1e3 * s:.2f}"  # noqa: E731
    lines = ["# Plans trained for real: measured against predicted (emulated link)", "",
             f"{document['date']}; {document['host']}; "
             + (f"{_ranks(document)} NCCL, one GPU each; " if document.get("backend") == "nccl"
                else f"{_ranks(document)} gloo on this host's CPU, 1 thread each; ")
             +
             f"**emulated link** `network({document['network']!r}, {document['workers']})`, one message at a time; "
             + (f"{document['rounds']} rounds of {_steps(max(1, document['steps'] // document['rounds']))} after "
                f"{document['warmup']}, the settings taking turns; measured: the median of the rounds' means. "
                if document.get("rounds") else f"{document['steps']} timed steps after {document['warmup']}. ")
             + f"Written by `{document['command']}`. "
             + ("On the GPU real DDP's buckets are held on a CUDA stream of the link's, each from when its "
                "all-reduce ends, the host running on; `PlanReducer`'s messages are held by its communication "
                "thread, and the host waits for them at the end of the backward, as the reducer waits for its "
                "collectives. " if document.get("backend") == "nccl" else "")
             + "Timings of this host: they vary from run to run."
             + (f" 1-minute load average {document['load_average']['before']:.2f} before the run and "
                f"{document['load_average']['after']:.2f} after." if document.get("load_average") else ""), "",
             "`predicted` is the model on the measured profile and the link's cost. `with reducer` adds the "
             "reducer's own cost (a fixed cost per step on the host overhead and a cost per message on the link's "
             "cost: the Python hooks, packing and unpacking, the communication thread's hand-offs; and a cost per "
             "message on the compute stream, after the backward that makes the message ready: the hook's packing "
             "and the communication thread's collective taking a core from the backward), "
             f"{_reducer_source(document['reducer_calibration'])}. `fitted on own plans` adds the first two figures "
             "fitted per model on this run's plans `single` and `wfbp`, that is, on what is predicted: a comparison "
             "only. The targets are checked on the other plans, and met or missed on `with reducer`.", ""]
    for key, t in document["targets"].items():
        lines += [f"Targets, {LABELS[key]}:", "",
                  f"* median |measured - {key}| / {key} <= 10%: **{100 * t['median_error']:.1f}%** "
                  f"({'met' if t['median_error'] <= 0.10 else 'missed'});",
                  f"* orders agree for every pair of plans more than 10% apart: **{t['pairs_agreeing']} of {t['pairs']}** "
                  f"({'met' if t['pairs_agreeing'] == t['pairs'] else 'missed'});",
                  "* measured speedup of `dp` over real DDP's default >= 0.95x the predicted speedup: " + ", ".join(
                      f"{m} **{s['ratio']:.2f}x** ({'met' if s['ratio'] >= 0.95 else 'missed'})"
                      for m, s in t["dp_speedup"].items()) + ".", ""]
    rows = []
    for name, row in document["results"].items():
        for plan_name, p in row["plans"].items():
            rows.append([name, plan_name + (" (fits own plans)" if plan_name in CALIBRATION else ""), p["sync"],
                         p["messages"], ms(p["predicted"]), ms(p["predicted_with_reducer"]), ms(p["calibrated"]),
                         ms(p["measured"]), f"{p['measured'] / p['predicted_with_reducer']:.3f}"])
        rows.append([name, "real DDP (default layout)", "barrier", "", "", "", "", ms(row["real_ddp"]), ""])
    lines += markdown_table(["model", "plan", "sync", "messages", "predicted (ms)", "with reducer (ms)",
                             "fitted on own plans (ms)", "measured (ms)", "measured / with reducer"], rows)
    measured = document["reducer_calibration"]
    lines += ["", f"Reducer cost measured apart ({measured['reducer']} reducer, {len(measured['samples'])} samples with "
              "the channel critical, "
              f"{measured['ranks']} {measured['backend']} ranks): {reducer_cost_words(measured)}"
              + (f" ({len(measured['compute_samples'])} samples with the compute critical)."
                 if measured.get("compute_samples") else ".")]
    lines += ["", "Reducer cost fitted per model on its own plans (ms): " + "; ".join(
        f"{name}: {ms(row['calibration']['per_step'])} per step, {ms(row['calibration']['per_message'])} per message"
        for name, row in document["results"].items())]
    lines += ["", "Profiles (ms per step): " + "; ".join(
        f"{name}: " + ", ".join(f"{k} {1e3 * v:.2f}" for k, v in Profile.from_dict(row["profile"]).parts.items())
        for name, row in document["results"].items())]
    return "\n".join(lines) + "\n"


def parse_arguments(argv: list[str] | None) -> tuple[argparse.Namespace, list[str], str, str]:
    """The arguments, the models, and the folder and stem of the result files: a run with other
    arguments than the stored result's writes into the ``subset`` folder beside it. Bad
    arguments exit with one line (status 2)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated: mlp, cnn, lstm")
    parser.add_argument("--network", default="10gbe", help="the emulated link's network preset (default 10gbe)")
    parser.add_argument("--workers", type=positive_int, default=64, help="the emulated link's workers (default 64)")
    parser.add_argument("--batch", type=positive_int, default=32)
    parser.add_argument("--backend", default="gloo", choices=("gloo", "nccl"),
                        help="gloo on the CPU (default) or nccl with one GPU per rank")
    parser.add_argument("--ranks", type=int, default=2, choices=(1, 2),
                        help="ranks (default 2; 1 on one GPU: the plans' messages then move no data between "
                             "ranks, and the emulated link holds each for its cost)")
    parser.add_argument("--steps", type=positive_int, default=30,
                        help="timed steps per plan, over all rounds (default 30)")
    parser.add_argument("--rounds", type=positive_int, default=3,
                        help="rounds in which the plans and real DDP take turns, each timing steps / rounds steps "
                             "after its warm-up; measured is the median of a plan's rounds (default 3)")
    parser.add_argument("--warmup", type=nonnegative_int, default=10, help="untimed steps first (default 10)")
    parser.add_argument("--profile-steps", type=positive_int, default=20,
                        help="profile_model's timed steps (default 20)")
    parser.add_argument("--reducer-calibration", metavar="R.json",
                        help="the plan reducer's own cost as `fusionopt calibrate --reducer plan` wrote it (default: "
                             "measured first, in this job)")
    parser.add_argument("--out", default=str(ROOT / "validation" / "results"), help="folder of the result files")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown or not models:
        parser.error(f"--models: unknown model {unknown[0] if unknown else '(none)'!r}: choose from {', '.join(MODELS)}")
    try:
        network(args.network, args.workers)
    except ValueError as exc:
        parser.error(f"--network {args.network}: {exc}")
    stem = "training-gpu" if args.backend == "nccl" else "training-cpu"
    # The stored training-cpu result is the defaults' (gloo); a GPU result would be nccl's.
    # One GPU runs one NCCL rank: that run is the stored training-gpu result.
    reference = {"backend": args.backend, **({"ranks": 1} if args.backend == "nccl" else {})}
    changed = changed_options(parser, args, reference=reference, leave=("out",))
    folder = subset_location(args.out, parser.get_default("out"), changed, folder=True)
    return args, models, folder, stem


def document_of(results: dict[str, Any], args: argparse.Namespace, argv: list[str], host: str,
                reducer: dict[str, Any]) -> dict[str, Any]:
    """The result document of the models in ``results`` (each given its predictions with the
    reducer's cost in place); ``reducer``: the reducer calibration's document."""
    document = {
        "date": datetime.date.today().isoformat(),
        "host": host,
        "backend": args.backend,
        "ranks": args.ranks,
        "link": "emulated", "network": args.network, "workers": args.workers, "steps": args.steps,
        "rounds": args.rounds, "warmup": args.warmup,
        "command": command_line("validation/training/run.py", argv, args.out),
        "timings": "measured on the host named; not reproducible to the digit",
        "reducer_calibration": reducer,
        "results": results,
    }
    cost = network(args.network, args.workers)
    with_reducer(results, cost, reducer_of(reducer))
    calibrate(results, cost)
    document["targets"] = {key: targets(results, key) for key in PREDICTIONS}
    return document


def reducer_of(document: dict[str, Any]) -> ReducerCalibration:
    """The calibration a result document carries."""
    return ReducerCalibration(document["reducer"], per_step=document["per_step"], per_message=document["per_message"],
                              message_compute=document.get("message_compute", 0.0),
                              per_tensor=document.get("per_tensor", 0.0), per_byte=document.get("per_byte", 0.0))


def reducer_calibration(args: argparse.Namespace) -> dict[str, Any]:
    """The plan reducer's own cost: read from ``--reducer-calibration``, or measured now on
    this host's CPU (gloo, one thread per rank, as the training ranks), before any plan runs."""
    if args.reducer_calibration is not None:
        calibration = read_reducer_calibration(args.reducer_calibration)
        if calibration.reducer != "plan":
            raise ValueError(f"--reducer-calibration {args.reducer_calibration}: a {calibration.reducer} reducer "
                             "calibration; the plans train with PlanReducer: give a plan calibration "
                             "(fusionopt calibrate --reducer plan)")
        return {**calibration.to_dict(), "source": args.reducer_calibration}
    print("measuring the plan reducer's own cost apart from the plans (two synthetic models, about a minute)",
          file=sys.stderr, flush=True)
    calibration = measure_reducer_overhead("plan", args.ranks)
    print(calibration.summary(), file=sys.stderr, flush=True)
    return calibration.to_dict()


def main(argv: list[str] | None = None) -> int:
    args, models, folder, stem = parse_arguments(argv)
    argv = sys.argv[1:] if argv is None else argv
    import torch
    import torch.multiprocessing as mp

    if args.backend == "nccl" and torch.cuda.device_count() < args.ranks:
        print(f"error: --backend nccl runs one rank per GPU and needs {args.ranks} GPUs; this host has "
              f"{torch.cuda.device_count()}", file=sys.stderr)
        return 2
    host = (f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, torch {torch.__version__}"
            + (f", {torch.cuda.get_device_name(0)}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}"
               if args.backend == "nccl" else ""))
    settings = {"backend": args.backend, "ranks": args.ranks, "models": models, "network": args.network, "workers": args.workers,
                "batch": args.batch, "steps": args.steps, "rounds": args.rounds, "warmup": args.warmup,
                "profile_steps": args.profile_steps}
    results: dict[str, Any] = {}
    try:
        load_before = os.getloadavg()[0]
        reducer = reducer_calibration(args)
    except ValueError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:          # its ranks are stopped; no plan has run
        print("interrupted while measuring the reducer's own cost: nothing written", file=sys.stderr)
        return 130
    with Progress(interrupted_path(os.path.join(folder, f"{stem}.md"))) as progress:
        progress.stage("models", total=len(models))
        with tempfile.TemporaryDirectory() as scratch:
            rank0 = os.path.join(scratch, "rank0.json")
            ranks = mp.spawn(_rank, args=(free_port(), rank0, settings), nprocs=settings["ranks"], join=False)
            try:
                finished, ended = False, None
                while not finished:
                    finished = ranks.join(timeout=1.0)
                    done = json.loads(Path(rank0).read_text()) if os.path.exists(rank0) else {}
                    if len(done) == len(models):     # every model measured: the ranks only tear down
                        ended = ended or time.perf_counter()
                        # On one H100 the NCCL rank outlived its last model by over 15 s
                        # after writing its results (tearing down); they are in, so it is stopped.
                        finished = finished or time.perf_counter() - ended > TEARDOWN_SECONDS
                    for name in [m for m in done if m not in results]:
                        results[name] = done[name]
                        progress.keep(document_of(dict(results), args, argv, host, reducer))
                        progress.step(f"{name}: " + ", ".join(
                            f"{plan} {1e3 * p['predicted']:.2f} / {1e3 * p['measured']:.2f} ms"
                            for plan, p in done[name]["plans"].items())
                            + f", real DDP {1e3 * done[name]['real_ddp']:.2f} ms (predicted / measured)")
            finally:             # interrupted or failed: the ranks go too
                for process in ranks.processes:
                    if process.is_alive():
                        process.terminate()
                for process in ranks.processes:
                    process.join()
        document = document_of(results, args, argv, host, reducer)
        document["load_average"] = {"before": load_before, "after": os.getloadavg()[0]}
        write_result(folder, stem, document, markdown(document))
    return progress.exit_code


if __name__ == "__main__":
    sys.exit(main())
