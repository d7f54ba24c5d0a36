"""Online re-planning on real ranks: the online planner and the tuners beside it, on gloo ranks
training small models over an emulated link, when nothing changes, when the link's bandwidth
falls to a quarter and when the compute grows by about 30%.

For each rank count (``--ranks``, default 2 and 4; gloo on this host's CPU, one thread each)
and each model (``fusionopt.integrations.small_model``: mlp, cnn, lstm):

1. both batches' profiles are measured with ``profile_model`` on every rank (``--batch`` and,
   for the compute scenario, ``round(1.3 x --batch)``); rank 0's are used;
2. for each network (``--networks``, each ``network(name, --workers)``: every message is held
   on one emulated channel for its ``c(S)``, so every figure is of an **emulated link**) and
   each scenario, every method trains ``--steps`` steps of its own copy of the model with a
   :class:`~fusionopt.integrations.PlanReducer` (barrier sync, SGD with momentum),
   starting from DDP's default buckets. The methods run interleaved: step ``k`` of each
   before step ``k + 1`` of any, in an order drawn afresh each step, every step from a
   barrier of the ranks, so that the host's drift (other work, the clock, the caches) and
   what the step before left behind fall on every method alike:

   * ``stationary``: nothing changes;
   * ``bandwidth``: from step ``--change-at`` on, the link's ``beta`` is four times larger;
   * ``compute``: from step ``--change-at`` on, the batch is the larger one;

   and the methods are

   * ``default``: DDP's default buckets (``bucket_cap_mb=25``), kept;
   * ``planner``: :class:`~fusionopt.integrations.OnlinePlanner` with its defaults
     (re-planning every 5 steps over a window of 10);
   * ``grid``: :class:`~fusionopt.integrations.GridSearch`, DeepSpeed's
     autotuner's grid search over DDP's ``bucket_cap_mb`` (rank 0's step time is broadcast
     every step so that every rank takes the same decision);
   * ``optimum``: the offline optimum, an oracle: the exact DP's plan of the measured profile
     on the emulated link's cost with the reducer's own cost (measured first on as many ranks,
     apart from these models, by ``measure_reducer_overhead("plan")``, or read with
     ``--reducer-calibration``), and from the change on the plan of the new conditions.

Measured: rank 0's time of every step (forward, backward with the reducer's messages, the
optimiser's step). The reference of a phase (before the change, and after it) is the
optimum's median step over that phase less its first 20 steps. A method is *within 2%*
from the first step of a phase after which every window of 10 steps to the phase's end has a
median within 2% of the optimum's median over the same 10 steps (run beside them); "never"
otherwise. The optimum's own figure compares its windows with its phase's median: it shows
how far this host drifts within a phase. The targets (issue: stationary, within 2% of the
optimum in at most 20 steps and no switch after; after a change, within 2% of the new optimum
in at most 20 steps) are printed with the table, met or not: the planner's median step from
step 20 of each phase on against the optimum's over the same steps, and, read strictly, its
steps to within 2% by windows of 10; beside them, how each method's median over a phase
compares with the fastest median any method measured there.

Writes ``validation/results/online-cpu.{json,md}`` and ``online-cpu-<R>ranks.png`` (step time
against step, every method, each scenario and model); a run with other arguments than the
stored result's writes into ``validation/results/subset/`` instead; Ctrl-C writes what
finished to ``online-cpu.interrupted.{md,json}``. Timings of this host: they vary from run to
run.

    python validation/online/run.py
    python validation/online/run.py --models mlp --ranks 2 --steps 40 --change-at 20     # into results/subset/
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fusionopt.cost import AlphaBeta, network  # noqa: E402
from fusionopt.integrations import free_port, reducer_cost_words  # noqa: E402
from fusionopt.model import Plan, Problem, Profile  # noqa: E402
from fusionopt.reporting import write_json_atomic  # noqa: E402
from fusionopt.reporting import (Progress, changed_options, command_line, counts, interrupted_path,  # noqa: E402
                                 markdown_table, positive_int, subset_location, write_result)

MODELS = ("mlp", "cnn", "lstm")
NETWORKS = ("10gbe", "100gb-ib")
SCENARIOS = ("stationary", "bandwidth", "compute")
METHODS = ("default", "planner", "grid", "optimum")
SETTLING = 20            # steps of a phase the reference leaves out
WINDOW = 10              # steps of a window whose median is compared
TOLERANCE = 0.02         # within 2% of the reference
TARGET_STEPS = 20        # the targets: within 2% in at most this many steps
COMPUTE_GROWTH = 1.3     # the compute scenario's batch, times the first
BANDWIDTH_FALL = 4.0     # the bandwidth scenario's beta, times the first
TEARDOWN_SECONDS = 10.0


def larger_batch(batch: int) -> int:
    """The compute scenario's batch after the change."""
    return max(batch + 1, round(COMPUTE_GROWTH * batch))


def slower(cost: AlphaBeta) -> AlphaBeta:
    """The bandwidth scenario's link after the change: ``beta`` times :data:`BANDWIDTH_FALL`."""
    return AlphaBeta(cost.alpha, cost.beta * BANDWIDTH_FALL)


def within_from(steps: list[float], start: int, end: int, reference: list[float]) -> int | None:
    """Steps from ``start`` after which every window of :data:`WINDOW` steps up to ``end`` has a
    median within :data:`TOLERANCE` of the ``reference`` series' median over the same steps
    (seconds; the methods run interleaved, so the same steps are the same stretch of time);
    None if none is.

    >>> within_from([2.0] * 5 + [1.0] * 20, 0, 25, [1.0] * 25)
    1
    >>> within_from([1.0] * 20 + [2.0] * 6, 0, 26, [1.0] * 26) is None
    True
    >>> within_from([1.0] * 10 + [2.0] * 10, 0, 20, [1.0] * 10 + [2.0] * 10)      # the host slowed both
    0
    """
    first = None
    for j in range(end - WINDOW, start - 1, -1):
        if statistics.median(steps[j:j + WINDOW]) > (1 + TOLERANCE) * statistics.median(reference[j:j + WINDOW]):
            break
        first = j
    return None if first is None else first - start


def on_plan(plans: list[list[Any]] | None, plan: dict[str, Any], start: int, end: int) -> bool | None:
    """Whether every plan a method ran over steps ``[start, end)`` is ``plan`` (``plans``:
    ``[step, plan]`` from the step each took over, in order); None where the run did not
    record its plans.

    >>> a, b = {"messages": [[[0, 0, 8]]]}, {"messages": [[[0, 0, 4]], [[0, 4, 8]]]}
    >>> on_plan([[0, b], [5, a]], a, 20, 40), on_plan([[0, b], [25, a]], a, 20, 40), on_plan(None, a, 0, 1)
    (True, False, None)
    """
    if plans is None:
        return None
    ran = [p for k, (step, p) in enumerate(plans)
           if step < end and (k + 1 == len(plans) or plans[k + 1][0] > start)]
    return all(p == plan for p in ran)


def phases(scenario: str, steps: int, change_at: int) -> list[tuple[int, int]]:
    """The phases of a run: (first step, end)."""
    return [(0, steps)] if scenario == "stationary" else [(0, change_at), (change_at, steps)]


def analyse(run: dict[str, Any], steps: int, change_at: int) -> dict[str, Any]:
    """Per phase: the optimum's reference and each method's median step, steps to within 2%
    and switches after :data:`TARGET_STEPS` steps of the phase; and the method with the
    fastest median (``fastest``)."""
    out = []
    for start, end in phases(run["scenario"], steps, change_at):
        optimum = run["methods"]["optimum"]["steps"]
        reference = statistics.median(optimum[start + SETTLING: end])
        optimal = run.get("plans", {}).get("optimum" if start == 0 else "optimum_after")
        methods = {}
        for name, method in run["methods"].items():
            series = method["steps"]
            paired = [reference] * len(series) if name == "optimum" else optimum      # the optimum: against its median
            methods[name] = {"median": statistics.median(series[start + SETTLING: end]),
                             "within": within_from(series, start, end, paired),
                             "late_switches": sum(1 for s in method["switches"] if start + TARGET_STEPS <= s < end),
                             "on_optimum": None if optimal is None else on_plan(method.get("plans"), optimal,
                                                                                start + SETTLING, end)}
        fastest = min(methods, key=lambda m: methods[m]["median"])
        out.append({"start": start, "end": end, "reference": reference, "methods": methods, "fastest": fastest})
    return {"phases": out}


def targets(document: dict[str, Any]) -> dict[str, Any]:
    """The planner's targets over every run: its median step from step :data:`TARGET_STEPS`
    of each phase to the phase's end within 2% of the optimum's over the same steps, run
    beside it (``phases_within``: the phase's medians, which leave out its first
    :data:`SETTLING` steps, the same 20); the stricter reading, every window of
    :data:`WINDOW` steps within 2% from at most :data:`TARGET_STEPS` steps on
    (``phases_windows_within``); and no switch after that in a stationary run. Of the phases
    (``on_optimum``: of all) missed, ``missed_on_optimum`` ran the optimum's own plan over
    those steps."""
    phases_met = windows_met = phases_all = late = on_optimum = missed_on_optimum = 0
    for run in document["runs"]:
        for k, phase in enumerate(run["analysis"]["phases"]):
            planner = phase["methods"]["planner"]
            phases_all += 1
            met = planner["median"] <= (1 + TOLERANCE) * phase["reference"]
            phases_met += met
            on_optimum += planner.get("on_optimum") is True
            missed_on_optimum += not met and planner.get("on_optimum") is True
            windows_met += planner["within"] is not None and planner["within"] <= TARGET_STEPS
            if run["scenario"] == "stationary" and k == 0:
                late += planner["late_switches"] > 0
    return {"phases": phases_all, "phases_within": phases_met, "phases_windows_within": windows_met,
            "stationary_runs_switching_late": late, "on_optimum": on_optimum, "missed_on_optimum": missed_on_optimum}


def against_fastest(document: dict[str, Any]) -> dict[str, Any]:
    """Per method, over every phase: how often its median is the fastest measured, within 2%
    and within 5% of it, and the median of its median over the fastest."""
    found: dict[str, Any] = {}
    every = [phase for run in document["runs"] for phase in run["analysis"]["phases"]]
    for method in document["methods"]:
        ratios = [p["methods"][method]["median"] / p["methods"][p["fastest"]]["median"] for p in every]
        found[method] = {"phases": len(ratios), "fastest": sum(p["fastest"] == method for p in every),
                         "within_2": sum(r <= 1.02 for r in ratios), "within_5": sum(r <= 1.05 for r in ratios),
                         "median_ratio": statistics.median(ratios)}
    return found


def _rank(rank: int, port: int, out: str, settings: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    from fusionopt.integrations import SMALL_INPUTS, small_model, with_reducer_overhead, profile_model
    from fusionopt.solvers import solve

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=settings["ranks"])
    steps, change_at = settings["steps"], settings["change_at"]
    batches = (settings["batch"], larger_batch(settings["batch"]))
    calibration = reducer_of(settings["reducer"])
    report: dict[str, Any] = {"runs": []}
    try:
        for name in settings["models"]:
            torch.manual_seed(0)
            model = small_model(name)
            inputs = [torch.randn(b, *SMALL_INPUTS[name], generator=torch.Generator().manual_seed(rank))
                      for b in batches]
            optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
            profiles = []
            for x in inputs:
                dist.barrier()
                measured = profile_model(model, x, loss_fn=lambda out: out.sum(), steps=settings["profile_steps"],
                                         warmup=5, optimizer=optimizer, name=name)
                shared: list[Any] = [None] * settings["ranks"]
                dist.all_gather_object(shared, measured.to_dict())
                profiles.append(Profile.from_dict(shared[0]))
            report.setdefault("profiles", {})[name] = [p.to_dict() for p in profiles]
            for net in settings["networks"]:
                cost = network(net, settings["workers"])
                for scenario in settings["scenarios"]:
                    after = {"stationary": (profiles[0], cost), "bandwidth": (profiles[0], slower(cost)),
                             "compute": (profiles[1], cost)}[scenario]
                    optimum = [solve(with_reducer_overhead(Problem(*conditions), calibration), "dp").plan
                               for conditions in ((profiles[0], cost), after)]
                    default = solve(Problem(profiles[0], cost), "ddp").plan
                    run: dict[str, Any] = {"model": name, "network": net, "scenario": scenario}
                    run["methods"] = _train(settings["methods"], model, inputs, profiles[0], default, optimum, cost,
                                            scenario, steps, change_at, dist)
                    run["plans"] = {"default": default.to_dict(), "optimum": optimum[0].to_dict(),
                                    "optimum_after": optimum[1].to_dict()}
                    report["runs"].append(run)
                    if rank == 0:
                        write_json_atomic(out, report)
    finally:
        dist.destroy_process_group()


def reducer_of(document: dict[str, Any]) -> Any:
    """The plan reducer's calibration a settings or result document carries."""
    from fusionopt.integrations import ReducerCalibration

    return ReducerCalibration("plan", per_step=document["per_step"], per_message=document["per_message"],
                              message_compute=document.get("message_compute", 0.0),
                              per_tensor=document.get("per_tensor", 0.0), per_byte=document.get("per_byte", 0.0))


def reducer_calibration(path: str | None, ranks: int) -> dict[str, Any]:
    """The plan reducer's own cost on ``ranks`` ranks: read from ``path``, or measured now on
    this host (gloo, one thread per rank), before any model trains."""
    from fusionopt.integrations import measure_reducer_overhead, read_reducer_calibration

    if path is not None:
        calibration = read_reducer_calibration(path)
        if calibration.reducer != "plan":
            raise ValueError(f"--reducer-calibration {path}: a {calibration.reducer} reducer calibration; the runs "
                             "train with PlanReducer: give a plan calibration (fusionopt calibrate --reducer plan)")
        return {**calibration.to_dict(), "source": path}
    print(f"measuring the plan reducer's own cost on {ranks} ranks, apart from the models (about a minute)",
          file=sys.stderr, flush=True)
    calibration = measure_reducer_overhead("plan", ranks)
    print(calibration.summary(), file=sys.stderr, flush=True)
    return calibration.to_dict()


def _train(methods: list[str], model: Any, inputs: list[Any], profile: Profile, default: Plan,
           optimum: list[Plan], cost: AlphaBeta, scenario: str, steps: int, change_at: int,
           dist: Any) -> dict[str, dict[str, Any]]:
    """Every method's run, interleaved: each trains its own copy of ``model`` (SGD with
    momentum), and step ``k`` of every method runs before step ``k + 1`` of any, in an order
    drawn afresh each step (seeded by it), each step from a barrier, so that the host's drift
    and what the step before left behind (a tuner's collective, a rank still finishing) fall
    on every method alike.
    Per method: rank 0's step times (seconds), the steps after which it switched, each plan
    it ran from the step it took over (``plans``: ``[step, plan]``, the first from step 0) and
    its last plan's message count. ``optimum`` is the plan before the change and after it."""
    import copy
    import torch

    from fusionopt.integrations import OnlinePlanner, GridSearch, PlanReducer

    found = {method: {"steps": [], "switches": [], "plans": []} for method in methods}
    with contextlib.ExitStack() as stack:
        jobs = {}
        for method in methods:
            copied = copy.deepcopy(model)
            reducer = stack.enter_context(PlanReducer(copied, optimum[0] if method == "optimum" else default,
                                                      profile, link=cost))
            tuner: Any = None
            if method == "planner":
                tuner = OnlinePlanner(reducer)
            elif method == "grid":
                reducer.step_time = float("nan")
                tuner = GridSearch(reducer)
            jobs[method] = (copied, torch.optim.SGD(copied.parameters(), lr=1e-4, momentum=0.9), reducer, tuner)
            found[method]["plans"].append([0, reducer.plan.to_dict()])
        dist.barrier()
        x = inputs[0]
        for step in range(steps):
            if step == change_at and scenario != "stationary":
                if scenario == "compute":
                    x = inputs[1]
                for method, (_, _, reducer, _) in jobs.items():
                    if scenario == "bandwidth":
                        reducer.link = slower(cost)
                    if method == "optimum":
                        reducer.switch(optimum[1])
                        found[method]["switches"].append(step)
                        found[method]["plans"].append([step, optimum[1].to_dict()])
            for method in random.Random(step).sample(methods, len(methods)):      # the same order on every rank
                copied, optimizer, reducer, tuner = jobs[method]
                dist.barrier()                            # every rank starts the step together
                started = time.perf_counter()
                optimizer.zero_grad()
                copied(x).sum().backward()
                optimizer.step()
                seconds = time.perf_counter() - started
                found[method]["steps"].append(seconds)
                before = reducer.plan
                if method == "planner":
                    tuner.after_step()
                elif method == "grid":
                    shared = torch.tensor([seconds], dtype=torch.float64)
                    dist.broadcast(shared, src=0)         # every rank decides on rank 0's time
                    reducer.step_time = float(shared)
                    tuner.after_step()
                if reducer.plan != before:
                    found[method]["switches"].append(step + 1)
                    found[method]["plans"].append([step + 1, reducer.plan.to_dict()])
        for method, (_, _, reducer, _) in jobs.items():
            found[method]["messages"] = reducer.plan.num_messages
    return found


def markdown(document: dict[str, Any]) -> str:
    ms = lambda s: f"{1e3 * s:.2f}"  # noqa: E731
    within = lambda k: "never" if k is None else str(k)  # noqa: E731
    lines = ["# Online re-planning on real ranks (emulated link)", "",
             f"{document['date']}; {document['host']}; gloo on this host's CPU, 1 thread per rank; **emulated link** "
             f"`network(NAME, {document['workers']})`, one message at a time; {document['steps']} steps a run, the "
             f"change at step {document['change_at']}; batch {document['batch']} (compute scenario: "
             f"{larger_batch(document['batch'])} from the change). Written by `{document['command']}`. Timings of "
             "this host: they vary from run to run.", "",
             "The offline optimum is the exact DP's plan of the measured profile on the link's cost with the plan "
             "reducer's own cost: " + "; ".join(
                 f"{ranks} ranks: {reducer_cost_words(c)}"
                 + (f" (read from `{c['source']}`)" if c.get("source") else " (measured first, apart from the models)")
                 for ranks, c in document["reducer_calibration"].items()) + ".", "",
             "Measured: rank 0's step times, the methods interleaved step by step (each trains its own copy of the "
             "model; the order drawn afresh each step, each step from a barrier of the ranks). `reference`: the "
             f"offline optimum's median step over the phase less its first {SETTLING} steps. Each method: its median over the same steps, and the steps from "
             f"the phase's start after which every window of {WINDOW} steps has a median within "
             f"{100 * TOLERANCE:g}% of the optimum's median over the same steps (`never`: not within the phase). The "
             "optimum's own figure compares its windows with the reference: how far this host drifts within a "
             f"phase. Switches: the planner's switches more than {TARGET_STEPS} steps into a phase. On the optimum's "
             f"plan: whether every plan the planner ran over the phase less its first {SETTLING} steps was the "
             "offline optimum's of that phase.", ""]
    t = document["targets"]
    lines += [f"Targets: the planner's median step from step {TARGET_STEPS} of each phase to its end within "
              f"{100 * TOLERANCE:g}% of the optimum's over the same steps (the two `(ms)` columns): "
              f"**{t['phases_within']} of {t['phases']}** "
              f"({'met' if t['phases_within'] == t['phases'] else 'missed'}); read strictly, every window of "
              f"{WINDOW} steps within {100 * TOLERANCE:g}% of the optimum's same steps from step {TARGET_STEPS} on "
              f"(a median of {WINDOW} steps carries this host's noise): **{t['phases_windows_within']} of "
              f"{t['phases']}**; no switch after step {TARGET_STEPS} in a stationary run: "
              f"**{t['stationary_runs_switching_late']} runs switched late** "
              f"({'met' if t['stationary_runs_switching_late'] == 0 else 'missed'})."
              + (f" The planner ran the optimum's own plan over {t['on_optimum']} of the {t['phases']} phases, and "
                 f"over {t['missed_on_optimum']} of the {t['phases'] - t['phases_within']} it missed: there the two "
                 "columns differ by what this host measures between two copies of one job."
                 if "missed_on_optimum" in t else ""), "",
              "Against the fastest median measured in each phase (whichever method ran it):", ""]
    fastest = against_fastest(document)
    lines += markdown_table(["method", "phases", "fastest", "within 2%", "within 5%", "median ratio to the fastest"],
                            [[m, f["phases"], f["fastest"], f["within_2"], f["within_5"], f"{f['median_ratio']:.3f}"]
                             for m, f in fastest.items()])
    lines.append("")
    header = ["ranks", "model", "network", "scenario", "phase", "reference (ms)"]
    for method in document["methods"]:
        header += [f"{method} (ms)", f"{method}: steps to 2%"]
    header += ["fastest", "planner: late switches", "planner on the optimum's plan"]
    rows = []
    for run in document["runs"]:
        for k, phase in enumerate(run["analysis"]["phases"]):
            row = [run["ranks"], run["model"], run["network"], run["scenario"],
                   "before" if k == 0 and len(run["analysis"]["phases"]) > 1 else "after" if k else "all",
                   ms(phase["reference"])]
            for method in document["methods"]:
                m = phase["methods"][method]
                row += [ms(m["median"]), within(m["within"])]
            row.append(phase["fastest"])
            planner = phase["methods"].get("planner", {})
            row.append(planner.get("late_switches", "-"))
            row.append({True: "yes", False: "no"}.get(planner.get("on_optimum"), "-"))
            rows.append(row)
    lines += markdown_table(header, rows)
    for ranks in sorted({run["ranks"] for run in document["runs"]}):
        lines += ["", f"![step time against step, {ranks} ranks](online-cpu-{ranks}ranks.png)"]
    return "\n".join(lines) + "\n"


def plot(document: dict[str, Any], folder: str) -> list[str]:
    """One figure per rank count: step time against step, every method, a panel per scenario
    (rows) and model and network (columns)."""
    from fusionopt.reporting import pyplot, save_png

    plt = pyplot()
    written: list[str] = []
    if plt is None:
        return written
    for ranks in sorted({run["ranks"] for run in document["runs"]}):
        runs = [run for run in document["runs"] if run["ranks"] == ranks]
        columns = list(dict.fromkeys((run["model"], run["network"]) for run in runs))
        rows = list(dict.fromkeys(run["scenario"] for run in runs))
        fig, axes = plt.subplots(len(rows), len(columns), figsize=(3.2 * len(columns), 2.4 * len(rows)),
                                 squeeze=False, sharex=True)
        for run in runs:
            ax = axes[rows.index(run["scenario"])][columns.index((run["model"], run["network"]))]
            for method, data in run["methods"].items():
                ax.plot([1e3 * s for s in data["steps"]], label=method, linewidth=0.8)
            if run["scenario"] != "stationary":
                ax.axvline(document["change_at"], color="grey", linestyle=":", linewidth=0.8)
            ax.set_title(f"{run['model']}, {run['network']}, {run['scenario']}", fontsize=8)
            ax.tick_params(labelsize=7)
            top = max(run["analysis"]["phases"][-1]["reference"], run["analysis"]["phases"][0]["reference"])
            ax.set_ylim(0, 3e3 * top)
        for ax in axes[-1]:
            ax.set_xlabel("step", fontsize=8)
        for row in axes:
            row[0].set_ylabel("step time (ms)", fontsize=8)
        axes[0][0].legend(fontsize=7)
        fig.suptitle(f"Online re-planning, {ranks} gloo ranks, emulated link (timings of this host)", fontsize=9)
        fig.tight_layout()
        written.append(save_png(plt, fig, folder, f"online-cpu-{ranks}ranks.png"))
    return written


def parse_arguments(argv: list[str] | None) -> tuple[argparse.Namespace, str]:
    """The arguments and the folder of the result files (``subset`` for other arguments than
    the stored result's). Bad arguments exit with one line (status 2)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated: mlp, cnn, lstm")
    parser.add_argument("--networks", default=",".join(NETWORKS), help="comma-separated network presets")
    parser.add_argument("--workers", type=positive_int, default=64, help="the emulated link's workers (default 64)")
    parser.add_argument("--ranks", type=counts(2, "ranks a run (an all-reduce of one rank moves nothing)"),
                        default=[2, 4], help="comma-separated rank counts (default 2,4)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated: " + ", ".join(SCENARIOS))
    parser.add_argument("--methods", default=",".join(METHODS),
                        help="comma-separated: " + ", ".join(METHODS) + " (optimum is always run: the reference)")
    parser.add_argument("--batch", type=positive_int, default=32)
    parser.add_argument("--steps", type=positive_int, default=200, help="steps a run (default 200)")
    parser.add_argument("--change-at", type=positive_int, default=100, help="the step of the change (default 100)")
    parser.add_argument("--profile-steps", type=positive_int, default=20, help="profile_model's steps (default 20)")
    parser.add_argument("--reducer-calibration", metavar="R.json",
                        help="the plan reducer's own cost as `fusionopt calibrate --reducer plan` wrote it, for every "
                             "rank count (default: measured first on each rank count)")
    parser.add_argument("--out", default=str(ROOT / "validation" / "results"), help="folder of the result files")
    args = parser.parse_args(argv)
    for option, choices in (("models", MODELS), ("scenarios", SCENARIOS), ("methods", METHODS)):
        chosen = [v.strip() for v in getattr(args, option).split(",") if v.strip()]
        bad = [v for v in chosen if v not in choices]
        if bad or not chosen:
            parser.error(f"--{option}: unknown {bad[0] if bad else '(none)'!r}: choose from {', '.join(choices)}")
        setattr(args, option, chosen)
    if "optimum" not in args.methods:
        args.methods.append("optimum")
    args.networks = [v.strip() for v in args.networks.split(",") if v.strip()]
    for net in args.networks or ["(none)"]:
        try:
            network(net, args.workers)
        except ValueError as exc:
            parser.error(f"--networks {net}: {exc}")
    args.ranks = sorted(set(args.ranks))
    if not SETTLING + WINDOW <= args.change_at <= args.steps - SETTLING - WINDOW:
        parser.error(f"--change-at {args.change_at}: each phase needs at least {SETTLING + WINDOW} steps "
                     f"({SETTLING} settling, a window of {WINDOW}); give --steps >= 2 x {SETTLING + WINDOW} and "
                     "the change between")
    stored = {"models": list(MODELS), "networks": list(NETWORKS), "ranks": [2, 4], "scenarios": list(SCENARIOS),
              "methods": list(METHODS)}
    changed = changed_options(parser, args, reference=stored, leave=("out",))
    return args, subset_location(args.out, parser.get_default("out"), changed, folder=True)


def main(argv: list[str] | None = None) -> int:
    args, folder = parse_arguments(argv)
    argv = sys.argv[1:] if argv is None else argv
    import torch
    import torch.multiprocessing as mp

    host = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, torch {torch.__version__}"
    document: dict[str, Any] = {
        "schema": "fusionopt.validation.online", "version": 1, "date": datetime.date.today().isoformat(),
        "host": host, "link": "emulated", "workers": args.workers, "batch": args.batch, "steps": args.steps,
        "change_at": args.change_at, "methods": args.methods,
        "command": command_line("validation/online/run.py", argv, args.out),
        "timings": "measured on the host named; not reproducible to the digit", "runs": [], "profiles": {},
        "reducer_calibration": {}}
    total = len(args.ranks) * len(args.models) * len(args.networks) * len(args.scenarios)
    load_before = os.getloadavg()[0]
    with Progress(interrupted_path(os.path.join(folder, "online-cpu.md"))) as progress:
        progress.stage("runs", total=total)
        for ranks in args.ranks:
            try:
                reducer = reducer_calibration(args.reducer_calibration, ranks)
            except ValueError as exc:
                print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
                return 2
            document["reducer_calibration"][str(ranks)] = reducer
            settings = {"reducer": reducer, "ranks": ranks, "models": args.models, "networks": args.networks, "workers": args.workers,
                        "scenarios": args.scenarios, "methods": args.methods, "batch": args.batch,
                        "steps": args.steps, "change_at": args.change_at, "profile_steps": args.profile_steps}
            with tempfile.TemporaryDirectory() as scratch:
                rank0 = os.path.join(scratch, "rank0.json")
                processes = mp.spawn(_rank, args=(free_port(), rank0, settings), nprocs=ranks, join=False)
                seen = 0
                try:
                    finished, ended = False, None
                    while not finished:
                        finished = processes.join(timeout=1.0)
                        done = json.loads(Path(rank0).read_text()) if os.path.exists(rank0) else {"runs": []}
                        if len(done["runs"]) == total // len(args.ranks):     # every run in: the ranks tear down
                            ended = ended or time.perf_counter()
                            finished = finished or time.perf_counter() - ended > TEARDOWN_SECONDS
                        for run in done["runs"][seen:]:
                            run["ranks"] = ranks
                            run["analysis"] = analyse(run, args.steps, args.change_at)
                            document["runs"].append(run)
                            document["profiles"][f"{ranks}:{run['model']}"] = done["profiles"][run["model"]]
                            document["targets"] = targets(document)
                            progress.keep(document)
                            last = run["analysis"]["phases"][-1]
                            progress.step(f"{ranks} ranks {run['model']} {run['network']} {run['scenario']}: "
                                          + ", ".join(f"{m} {1e3 * v['median']:.2f} ms"
                                                      for m, v in last["methods"].items()))
                        seen = len(done["runs"])
                finally:         # interrupted or failed: the ranks go too
                    for process in processes.processes:
                        if process.is_alive():
                            process.terminate()
                    for process in processes.processes:
                        process.join()
        document["targets"] = targets(document)
        document["load_average"] = {"before": load_before, "after": os.getloadavg()[0]}
        os.makedirs(folder, exist_ok=True)
        plot(document, folder)
        write_result(folder, "online-cpu", document, markdown(document))
    return progress.exit_code


if __name__ == "__main__":
    sys.exit(main())
