"""Online re-planning at scale, simulated: the online planner and the tuners beside it on zoo
jobs at 8 to 1024 workers, with the noise the real runs measured.

Each job is a zoo model on H100s (ResNet-50 at batch 64, BERT-base and GPT-2 at batch 8) on
``network(NAME, workers)`` for 10 GbE and 100 Gb InfiniBand and ``--workers`` (default 8, 64,
256 and 1024), played by the simulator
(:class:`~fusionopt.integrations.SimulatedJob`), starting from DDP's default buckets,
for ``--steps`` steps with the link's bandwidth divided by 4 at ``--change-at``. Every
message's duration and every whole step is stretched by a draw from the **measured**
relative deviations of ``validation/results/online-cpu.json`` (each stationary run's
offline-optimum steps after its first 20, over their median, less 1: the step-to-step noise
of real gloo ranks on that host), seeded. The methods:

* ``planner``: :class:`~fusionopt.integrations.OnlinePlanner` with its defaults;
* ``grid``: DeepSpeed's autotuner's grid search over DDP's ``bucket_cap_mb``
  (:class:`~fusionopt.integrations.GridSearch`);
* ``horovod``: Horovod's autotune (:class:`~fusionopt.integrations.HorovodAutotune`,
  its defaults: it warms up for 150 steps and runs 50 a setting);
* ``default``: DDP's default buckets, kept.

Reported per job and method: the steps until the plan in use is within 2% of the true
optimum of the moment and stays there to the phase's end, before and after the change
("never" if not), its gap at each phase's end, and its switches. Every figure comes from
seeded draws on the stored measurements, so rerunning reproduces it exactly. Writes
``validation/results/online-study.{json,md}`` and ``online-study.png``; a run with other
arguments writes into ``validation/results/subset/``.

    python validation/online/study.py
    python validation/online/study.py --workers 8 --steps 60 --change-at 30      # into results/subset/
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fusionopt.reporting import read_json_document  # noqa: E402
from fusionopt.reporting import (Progress, changed_options, command_line, counts, interrupted_path,  # noqa: E402
                                 markdown_table, nonnegative_int, positive_int, pyplot, save_png, subset_location,
                                 write_result)

RESULTS = ROOT / "validation" / "results"
MODELS = (("resnet50", 64), ("bert-base", 8), ("gpt2", 8))
NETWORKS = ("10gbe", "100gb-ib")
WORKERS = (8, 64, 256, 1024)
METHODS = ("planner", "grid", "horovod", "default")
SETTLING = 20            # steps of a measured run its deviations leave out
TOLERANCE = 0.02


def measured_deviations(path: str | Path) -> np.ndarray:
    """The relative deviations of the measured runs' steps (module docstring); a
    ``ValueError`` naming the file if it holds none."""
    document = read_json_document(path)
    found: list[float] = []
    for run in document.get("runs", []) if isinstance(document, dict) else []:
        if run.get("scenario") != "stationary" or "optimum" not in run.get("methods", {}):
            continue
        steps = run["methods"]["optimum"]["steps"][SETTLING:]
        if steps:
            median = statistics.median(steps)
            found += [s / median - 1.0 for s in steps]
    if not found:
        raise ValueError(f"{path}: no stationary run's optimum steps (a validation/online/run.py result)")
    return np.array(found)


def settle(gaps: list[float], start: int, end: int) -> int | None:
    """Steps from ``start`` after which every gap up to ``end`` is within 2%, or None.

    >>> settle([0.5, 0.01, 0.3, 0.0, 0.01], 0, 5), settle([0.0, 0.5], 0, 2)
    (3, None)
    """
    first = None
    for k in range(end - 1, start - 1, -1):
        if gaps[k] > TOLERANCE:
            break
        first = k
    return None if first is None else first - start


def run_job(model: str, batch: int, network_name: str, workers: int, deviations: np.ndarray, steps: int,
            change_at: int, seed: int) -> dict[str, Any]:
    from fusionopt import zoo
    from fusionopt.cost import AlphaBeta, network
    from fusionopt.integrations import HorovodAutotune, OnlinePlanner, SimulatedJob, GridSearch
    from fusionopt.model import Problem, simulate
    from fusionopt.solvers import solve

    profile = zoo.profile(model, device="h100", batch=batch)
    before = Problem(profile, network(network_name, workers))
    after = Problem(profile, AlphaBeta(before.cost.alpha, before.cost.beta * 4))
    default = solve(before, "ddp").plan
    optimum = {id(before): solve(before, "dp").iteration_time, id(after): solve(after, "dp").iteration_time}
    makers = {"planner": OnlinePlanner, "grid": GridSearch, "horovod": HorovodAutotune, "default": None}
    row: dict[str, Any] = {"model": model, "batch": batch, "network": network_name, "workers": workers,
                           "optimum": optimum[id(before)], "optimum_after": optimum[id(after)],
                           "default_time": simulate(before, default).iteration_time, "methods": {}}
    for method, make in makers.items():
        job = SimulatedJob(before, default, noise=deviations, seed=seed)
        tuner = make(job) if make is not None else None
        switches_before = job.switches                    # a tuner may set its first setting at once
        gaps = []
        for step in range(steps):
            if step == change_at:
                job.problem = after
            if method == "planner":
                tuner.after_step()                        # it reads the step's messages itself
            else:
                job.message_times()
                if tuner is not None:
                    tuner.after_step()
            gaps.append(simulate(job.problem, job.plan).iteration_time / optimum[id(job.problem)] - 1.0)
        row["methods"][method] = {
            "gaps": gaps, "switches": job.switches - switches_before,
            "settle": settle(gaps, 0, change_at), "settle_after": settle(gaps, change_at, steps),
            "gap_at_change": gaps[change_at - 1], "gap_at_end": gaps[-1]}
    return row


def markdown(document: dict[str, Any]) -> str:
    never = lambda k: "never" if k is None else str(k)  # noqa: E731
    lines = ["# Online re-planning at scale, simulated", "",
             f"Zoo jobs on H100s played by the simulator, {document['steps']} steps, the link's bandwidth divided by 4 "
             f"at step {document['change_at']}, every message and step stretched by draws from the "
             f"{document['deviations']['count']} relative deviations measured in `{document['deviations']['file']}` "
             f"(median {100 * document['deviations']['median']:+.1f}%, 10th to 90th percentile "
             f"{100 * document['deviations']['p10']:+.1f}% to {100 * document['deviations']['p90']:+.1f}%), seed "
             f"{document['seed']}. Written by `{document['command']}`; rerunning reproduces every figure.", "",
             "Steps to 2%: from the phase's start until the plan in use is within 2% of the true optimum and stays "
             "there to the phase's end. Gap: the plan in use against the true optimum at the phase's end.", ""]
    header = ["model", "network", "workers", "optimum (ms)", "optimum after (ms)"]
    for method in document["methods"]:
        header += [f"{method}: steps to 2%", "after", "gap at end", "switches"]
    rows = []
    for r in document["results"]:
        row = [r["model"], r["network"], r["workers"], f"{1e3 * r['optimum']:.2f}", f"{1e3 * r['optimum_after']:.2f}"]
        for method in document["methods"]:
            m = r["methods"][method]
            row += [never(m["settle"]), never(m["settle_after"]), f"{100 * m['gap_at_end']:.2f}%", m["switches"]]
        rows.append(row)
    lines += markdown_table(header, rows)
    lines.append("")
    for method in document["methods"]:
        s = document["summary"][method]
        lines.append(f"* {method}: within 2% in at most 20 steps before the change in {s['before_20']} of "
                     f"{s['jobs']} jobs and after it in {s['after_20']}; within 2% at all before the change in "
                     f"{s['before']} and after it in {s['after']}.")
    lines += ["", "![gap to the optimum against step](online-study.png)"]
    return "\n".join(lines) + "\n"


def summary(results: list[dict[str, Any]], methods: list[str]) -> dict[str, Any]:
    found = {}
    for method in methods:
        ms = [r["methods"][method] for r in results]
        found[method] = {"jobs": len(ms),
                         "before": sum(m["settle"] is not None for m in ms),
                         "after": sum(m["settle_after"] is not None for m in ms),
                         "before_20": sum(m["settle"] is not None and m["settle"] <= 20 for m in ms),
                         "after_20": sum(m["settle_after"] is not None and m["settle_after"] <= 20 for m in ms)}
    return found


def plot(document: dict[str, Any], folder: str) -> None:
    plot_gaps(document, folder, "online-study.png", "gap to optimum (%)", (0, 40),
              "Online re-planning, simulated with measured noise (gap of the plan in use to the true optimum)")


def plot_gaps(document: dict[str, Any], folder: str, name: str, ylabel: str, ylim: tuple[float, float],
              title: str) -> None:
    """Each job's gap (percent) against step, a panel per model and network (columns) and
    worker count (rows), a line per method; written as ``folder/name``."""
    plt = pyplot()
    if plt is None:
        return
    results = document["results"]
    columns = list(dict.fromkeys((r["model"], r["network"]) for r in results))
    rows = list(dict.fromkeys(r["workers"] for r in results))
    fig, axes = plt.subplots(len(rows), len(columns), figsize=(3.0 * len(columns), 2.2 * len(rows)),
                             squeeze=False, sharex=True)
    for r in results:
        ax = axes[rows.index(r["workers"])][columns.index((r["model"], r["network"]))]
        for method, m in r["methods"].items():
            ax.plot([100 * g for g in m["gaps"]], label=method, linewidth=0.8)
        ax.axvline(document["change_at"], color="grey", linestyle=":", linewidth=0.8)
        if ylim[0] < 0:
            ax.axhline(0, color="grey", linewidth=0.5)
        ax.set_ylim(*ylim)
        ax.set_title(f"{r['model']}, {r['network']}, {r['workers']} workers", fontsize=7)
        ax.tick_params(labelsize=6)
    for ax in axes[-1]:
        ax.set_xlabel("step", fontsize=7)
    for row in axes:
        row[0].set_ylabel(ylabel, fontsize=7)
    axes[0][0].legend(fontsize=6)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_png(plt, fig, folder, name)


def parse_arguments(doc: str, argv: list[str]) -> tuple[argparse.Namespace, np.ndarray, str, str]:
    """A simulated study's arguments (``--workers``, ``--steps``, ``--change-at``, ``--seed``,
    ``--noise-from``, ``--out``), checked: the arguments (``workers`` a list), the measured
    deviations, the folder to write into (``results/subset/`` when any differs from the
    defaults) and the noise file as the result names it."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--workers", type=counts(2, "workers a job"), default=list(WORKERS),
                        help="comma-separated worker counts (default 8,64,256,1024)")
    parser.add_argument("--steps", type=positive_int, default=200, help="steps a job (default 200)")
    parser.add_argument("--change-at", type=positive_int, default=100, help="the step of the change (default 100)")
    parser.add_argument("--seed", type=nonnegative_int, default=0, help="the noise's seed (default 0)")
    parser.add_argument("--noise-from", default=str(RESULTS / "online-cpu.json"), metavar="ONLINE.json",
                        help="the measured runs whose deviations are the noise (default results/online-cpu.json)")
    parser.add_argument("--out", default=str(RESULTS), help="folder of the result files")
    args = parser.parse_args(argv)
    if not 1 <= args.change_at < args.steps:
        parser.error(f"--change-at {args.change_at}: must fall within the {args.steps} steps")
    try:
        deviations = measured_deviations(args.noise_from)
    except ValueError as exc:
        parser.error(f"--noise-from: {exc}")
    changed = changed_options(parser, args, leave=("out",))
    folder = subset_location(args.out, parser.get_default("out"), changed, folder=True)
    shown = Path(args.noise_from).resolve()
    return args, deviations, folder, str(shown.relative_to(ROOT)) if shown.is_relative_to(ROOT) else shown.name


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args, deviations, folder, shown = parse_arguments(__doc__, argv)
    document: dict[str, Any] = {
        "schema": "fusionopt.validation.online-study", "version": 1, "steps": args.steps, "change_at": args.change_at,
        "seed": args.seed, "methods": list(METHODS),
        "command": command_line("validation/online/study.py", argv, args.out),
        "deviations": {"file": shown,
                       "count": int(deviations.size), "median": float(np.median(deviations)),
                       "p10": float(np.percentile(deviations, 10)), "p90": float(np.percentile(deviations, 90))},
        "results": []}
    return play(document, MODELS, args, deviations, folder, "online-study", run_job,
                lambda rows: summary(rows, list(METHODS)), plot, markdown)


def play(document: dict[str, Any], models: Any, args: argparse.Namespace, deviations: np.ndarray, folder: str,
         stem: str, run: Any, summarise: Any, draw: Any, table: Any) -> int:
    """Play every job of ``models`` (model and batch) on :data:`NETWORKS` and ``args.workers``
    with ``run`` (``run_job``'s arguments), keeping each row and the ``summarise`` of the rows
    in ``document`` as they come (Ctrl-C keeps them beside the result); then ``draw`` the plot
    and write ``folder/stem.{json,md}`` (``table``: the markdown). The exit status."""
    jobs = [(m, b, n, w) for m, b in models for n in NETWORKS for w in args.workers]
    with Progress(interrupted_path(str(Path(folder) / f"{stem}.md"))) as progress:
        progress.stage("jobs", total=len(jobs))
        for model, batch, name, count in jobs:
            row = run(model, batch, name, count, deviations, args.steps, args.change_at, args.seed)
            document["results"].append(row)
            document["summary"] = summarise(document["results"])
            progress.keep(document)
            progress.step(f"{model} {name} {count}: " + ", ".join(
                f"{m} {100 * v['gap_at_end']:.1f}%" for m, v in row["methods"].items()))
        Path(folder).mkdir(parents=True, exist_ok=True)
        draw(document, folder)
        write_result(folder, stem, document, table(document))
    return progress.exit_code


if __name__ == "__main__":
    sys.exit(main())
