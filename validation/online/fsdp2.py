"""FSDP2's switchable knobs re-planned online at scale, simulated: the fully sharded planner,
a grid search and FSDP2's defaults on zoo transformers at 8 to 1024 workers, with the noise
the real runs measured.

Each job is a zoo model on H100s (GPT-2 and BERT-base at batch 8) wrapped as FSDP2 wraps it
(``fsdp2_plan``: each block, then the root), on ``FullySharded.from_network(NAME, workers)``
for 10 GbE and 100 Gb InfiniBand and ``--workers`` (default 8, 64, 256 and 1024), with a
memory cap at the peak of FSDP2's defaults (the larger of the peaks before and after the change,
where the timing moves it: a setting may not take more memory than the one it replaces), played by the simulator (:class:`~fusionopt.integrations.SimulatedShardedJob`)
from FSDP2's defaults for ``--steps`` steps, the link's bandwidth divided by 4 at
``--change-at``. Every collective, the forward's and the backward's compute and every step
are stretched by draws from the relative deviations the real gloo runs measured
(``validation/results/online-cpu.json``, as ``validation/online/study.py`` reads them),
seeded. The methods, each switching only what FSDP2 can switch between steps (reshard flags
and prefetch depths; the units stay):

* ``planner``: :class:`~fusionopt.integrations.ShardedPlanner` with its defaults;
* ``grid``: DeepSpeed's autotuner's grid search over FSDP2's knobs
  (:class:`~fusionopt.integrations.ShardedGridSearch`);
* ``default``: FSDP2's defaults, kept.

The reference is **the optimum of the moment**: the best plan with the job's units over every
reshard flag vector and each pair of prefetch depths up to 3 (``sharded-brute`` with
``units=``, ``reshard="any"``) within the cap, without noise; the planner searches the last
``k`` units kept whole on these jobs (``reshard="auto"``: 12 blocks), so its gap is also the
price of that space. Reported per job and method: the steps until the plan in use is within
2% of the optimum and stays there to the phase's end, before and after the change ("never"
if not), the gap at each phase's end, and its switches. Every figure comes from seeded draws
on stored measurements, so rerunning reproduces it exactly. Writes
``validation/results/online-fsdp2.{json,md,png}``; a run with other arguments writes into
``validation/results/subset/``.

    python validation/online/fsdp2.py
    python validation/online/fsdp2.py --workers 8 --steps 60 --change-at 30      # into results/subset/
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fusionopt.reporting import command_line, markdown_table  # noqa: E402
from validation.online.study import parse_arguments, play, plot_gaps, settle  # noqa: E402

MODELS = (("gpt2", 8), ("bert-base", 8))
METHODS = ("planner", "grid", "default")
MAX_DEPTH = 3


def slower(problem: Any, factor: float) -> Any:
    """``problem`` with both collectives' bandwidth divided by ``factor``."""
    import dataclasses

    from fusionopt.cost import AlphaBeta
    from fusionopt.model import Problem

    pattern = problem.pattern
    rs, ag = (AlphaBeta(c.alpha, c.beta * factor) for c in (pattern.reduce_scatter, pattern.all_gather))
    return Problem(problem.profile, pattern=dataclasses.replace(pattern, reduce_scatter=rs, all_gather=ag))


def optimum(problem: Any, units: Any) -> Any:
    """The best plan with ``units``' units (module docstring) and FSDP2's least depths."""
    from fusionopt.advice import fsdp2_least_forward_prefetch
    from fusionopt.solvers import solve

    return solve(problem, "sharded-brute", units=units, reshard="any", max_depth=MAX_DEPTH,
                 min_forward_prefetch=fsdp2_least_forward_prefetch(problem), min_backward_prefetch=1)


def run_job(model: str, batch: int, network_name: str, workers: int, deviations: np.ndarray, steps: int,
            change_at: int, seed: int) -> dict[str, Any]:
    from fusionopt import zoo
    from fusionopt.integrations import ShardedGridSearch, ShardedPlanner, SimulatedShardedJob
    from fusionopt.model import FullySharded, Problem, simulate
    from fusionopt.solvers.baselines import fsdp2_plan

    profile = zoo.profile(model, device="h100", batch=batch)
    default = fsdp2_plan(profile)
    free = Problem(profile, pattern=FullySharded.from_network(network_name, workers))
    cap = float(max(simulate(free, default).peak_memory, simulate(slower(free, 4.0), default).peak_memory))
    before = Problem(profile, pattern=free.pattern.with_cap(cap))
    after = slower(before, 4.0)
    best = {id(before): optimum(before, default), id(after): optimum(after, default)}
    row: dict[str, Any] = {"model": model, "batch": batch, "network": network_name, "workers": workers,
                           "units": default.num_units, "memory_cap": cap,
                           "default_time": simulate(before, default).iteration_time,
                           "optimum": best[id(before)].iteration_time, "optimum_after": best[id(after)].iteration_time,
                           "optimum_plan": best[id(before)].plan.to_dict(),
                           "optimum_plan_after": best[id(after)].plan.to_dict(), "methods": {}}
    for method in METHODS:
        job = SimulatedShardedJob(before, default, noise=deviations, seed=seed)
        tuner = {"planner": ShardedPlanner, "grid": ShardedGridSearch}.get(method)
        tuner = tuner(job) if tuner is not None else None
        switches_before = job.switches                    # the grid sets its first setting at once
        gaps, peaks = [], []
        for step in range(steps):
            if step == change_at:
                job.problem = after
            if method == "planner":
                tuner.after_step()                        # it ends the job's step itself
            else:
                job.end_step()
                if tuner is not None:
                    tuner.after_step()
            timeline = simulate(job.problem, job.plan)
            gaps.append(timeline.iteration_time / best[id(job.problem)].iteration_time - 1.0)
            peaks.append(int(timeline.peak_memory))
        row["methods"][method] = {
            "gaps": gaps, "switches": job.switches - switches_before, "largest_peak": max(peaks),
            "steps_over_cap": sum(peak > cap for peak in peaks),
            "settle": settle(gaps, 0, change_at), "settle_after": settle(gaps, change_at, steps),
            "gap_at_change": gaps[change_at - 1], "gap_at_end": gaps[-1], "plan_at_end": job.plan.to_dict()}
    return row


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    found = {}
    for method in METHODS:
        ms = [r["methods"][method] for r in results]
        found[method] = {"jobs": len(ms),
                         "before": sum(m["settle"] is not None and m["settle"] <= 20 for m in ms),
                         "after": sum(m["settle_after"] is not None and m["settle_after"] <= 20 for m in ms),
                         "ever_before": sum(m["settle"] is not None for m in ms),
                         "ever_after": sum(m["settle_after"] is not None for m in ms),
                         "median_gap_at_end": float(np.median([m["gap_at_end"] for m in ms])),
                         "largest_gap_at_end": float(max(m["gap_at_end"] for m in ms)),
                         "over_cap": sum(m["steps_over_cap"] > 0 for m in ms),
                         "steps_over_cap": sum(m["steps_over_cap"] for m in ms)}
    return found


def _setting(plan: dict[str, Any]) -> str:
    kept = sum(not flag for flag in plan["reshard"])
    return f"{kept} kept, {plan['forward_prefetch']}/{plan['backward_prefetch']}"


def markdown(document: dict[str, Any]) -> str:
    never = lambda k: "never" if k is None else str(k)  # noqa: E731
    lines = ["# FSDP2's switchable knobs re-planned online, simulated", "",
             f"Zoo transformers on H100s wrapped as FSDP2 wraps them, a memory cap at the peak of FSDP2's defaults (the larger before and after the change), "
             f"played by the simulator from FSDP2's defaults for {document['steps']} steps, the link's bandwidth "
             f"divided by 4 at step {document['change_at']}, every collective, compute and step stretched by draws "
             f"from the {document['deviations']['count']} relative deviations measured in "
             f"`{document['deviations']['file']}`, seed {document['seed']}. Written by `{document['command']}`; "
             "rerunning reproduces every figure. Every figure is predicted (simulated); none is measured.", "",
             "Optimum: the best plan with the job's units over every reshard flag vector and prefetch depths up to "
             f"{MAX_DEPTH}, within the cap, without noise. Steps to 2%: from the phase's start until the plan in use "
             "is within 2% of it and stays there to the phase's end. Gap: the plan in use against it at the phase's "
             "end. Settings: units kept whole (not resharded, the root's parts included), forward / backward "
             "prefetch depth. Steps over cap: steps whose plan peaks above the cap in the model of the moment (a "
             "plan's peak moves with the timing, so a change of the link can put the plan in use over it).", ""]
    header = ["model", "network", "workers", "default (ms)", "optimum (ms)", "optimum", "after (ms)", "optimum after"]
    for method in METHODS:
        header += [f"{method}: steps to 2%", "after", "gap at end", "switches", "steps over cap"]
    rows = []
    for r in document["results"]:
        row = [r["model"], r["network"], r["workers"], f"{1e3 * r['default_time']:.1f}", f"{1e3 * r['optimum']:.1f}",
               _setting(r["optimum_plan"]), f"{1e3 * r['optimum_after']:.1f}", _setting(r["optimum_plan_after"])]
        for method in METHODS:
            m = r["methods"][method]
            row += [never(m["settle"]), never(m["settle_after"]), f"{100 * m['gap_at_end']:.2f}%", m["switches"],
                    m["steps_over_cap"]]
        rows.append(row)
    lines += markdown_table(header, rows)
    lines.append("")
    for method in METHODS:
        s = document["summary"][method]
        lines.append(f"* {method}: within 2% of the optimum in at most 20 steps in {s['before']} of {s['jobs']} jobs "
                     f"before the change and {s['after']} after it (ever: {s['ever_before']} and {s['ever_after']}); "
                     f"median gap at the end {100 * s['median_gap_at_end']:.2f}%, largest "
                     f"{100 * s['largest_gap_at_end']:.2f}%; a plan over the memory cap (out of memory on a real "
                     f"device) in {s['steps_over_cap']} steps of {s['over_cap']} jobs.")
    lines += ["", "![gap to the optimum against step](online-fsdp2.png)"]
    return "\n".join(lines) + "\n"


def plot(document: dict[str, Any], folder: str) -> None:
    plot_gaps(document, folder, "online-fsdp2.png", "gap to optimum (%)", (-2, 30),
              "FSDP2's reshard flags and prefetch depths, simulated with measured noise (gap to the optimum)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args, deviations, folder, shown = parse_arguments(__doc__, argv)
    document: dict[str, Any] = {
        "schema": "fusionopt.validation.online-fsdp2", "version": 1, "steps": args.steps,
        "change_at": args.change_at, "seed": args.seed, "methods": list(METHODS), "max_depth": MAX_DEPTH,
        "command": command_line("validation/online/fsdp2.py", argv, args.out),
        "deviations": {"file": shown, "count": int(deviations.size)},
        "results": []}
    return play(document, MODELS, args, deviations, folder, "online-fsdp2", run_job, summary, plot, markdown)


if __name__ == "__main__":
    sys.exit(main())
