"""What the fully sharded online planner costs a step, on simulated FSDP2 jobs.

Each job is a zoo transformer on H100s (BERT-base and GPT-2 at batch 8) wrapped as FSDP2 wraps
it, on ``FullySharded.from_network(NAME, 64)`` for 10 GbE and 100 Gb InfiniBand, played by the
simulator (:class:`~fusionopt.integrations.SimulatedShardedJob`, seeded 2% noise) from FSDP2's
defaults for 60 steps, the link's bandwidth divided by 4 at step 30. The planner
(:class:`~fusionopt.integrations.ShardedPlanner`, ``every=5``, ``window=10``; on these jobs
it searches the last ``k`` of 12 blocks kept whole and the prefetch depths up to 3) is timed:
its own seconds per step (fitting, solving and deciding every 5 steps, averaged; a **timing**
of this host) and that as a share of the step's ``T`` at step 60: target 1%. Also timed, for
the price of the larger space: one solve over every reshard flag vector
(``reshard="any"``, 4096 vectors) of the same fitted problem.

Writes ``benchmarks/results/online-fsdp2.md``; ``--output`` elsewhere.

Run: ``python benchmarks/bench_online_sharded.py``
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "online-fsdp2.md"
MODELS = (("bert-base", 8), ("gpt2", 8))
NETWORKS = ("10gbe", "100gb-ib")
STEPS, CHANGE, WORKERS = 60, 30, 64


def run_job(model: str, batch: int, network_name: str) -> dict:
    import dataclasses

    from fusionopt import zoo
    from fusionopt.advice import fsdp2_least_forward_prefetch
    from fusionopt.cost import AlphaBeta
    from fusionopt.integrations import ShardedPlanner, SimulatedShardedJob
    from fusionopt.model import FullySharded, Problem, simulate
    from fusionopt.solvers import solve
    from fusionopt.solvers.baselines import fsdp2_plan

    profile = zoo.profile(model, device="h100", batch=batch)
    default = fsdp2_plan(profile)
    before = Problem(profile, pattern=FullySharded.from_network(network_name, WORKERS))
    pattern = before.pattern
    rs, ag = (AlphaBeta(c.alpha, 4 * c.beta) for c in (pattern.reduce_scatter, pattern.all_gather))
    after = Problem(profile, pattern=dataclasses.replace(pattern, reduce_scatter=rs, all_gather=ag))
    job = SimulatedShardedJob(before, default, noise=0.02, seed=0)
    planner = ShardedPlanner(job, every=5, window=10)
    for step in range(STEPS):
        if step == CHANGE:
            job.problem = after
        planner.after_step()
    fitted, _ = planner.fitted_problem()
    started = time.perf_counter()
    solve(fitted, "sharded-brute", units=default, reshard="any", min_forward_prefetch=fsdp2_least_forward_prefetch(
        fitted), min_backward_prefetch=1)
    return {"seconds": planner.seconds / STEPS, "at_end": simulate(after, job.plan).iteration_time,
            "default": simulate(after, default).iteration_time, "switches": job.switches,
            "any": time.perf_counter() - started}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from fusionopt.reporting import write_text_atomic

    lines = [
        "# The fully sharded online planner's cost, on simulated FSDP2 jobs",
        "",
        f"{datetime.date.today().isoformat()}; {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}. Written by `python benchmarks/bench_online_sharded.py`. Simulated jobs (zoo "
        f"transformers on H100, {WORKERS} workers, FSDP2's units, seeded 2% noise), starting from FSDP2's defaults; "
        f"the link's bandwidth divided by 4 at step {CHANGE} of {STEPS}. `T` in ms, predicted on the true problem "
        "at step 60. The planner's seconds, its share and the solve over every flag are **timings** of this host.",
        "",
        "| model | network | FSDP2 defaults at step 60 | planner's plan at step 60 | switches | planner per step (ms) "
        "| share of T | one solve over every flag (ms) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    shares = []
    for model, batch in MODELS:
        for name in NETWORKS:
            r = run_job(model, batch, name)
            share = r["seconds"] / r["at_end"]
            shares.append(share)
            lines.append(f"| {model} | {name} | {1e3 * r['default']:.2f} | {1e3 * r['at_end']:.2f} | {r['switches']} | "
                         f"{1e3 * r['seconds']:.3f} | {100 * share:.3f}% | {1e3 * r['any']:.0f} |")
    lines += ["", f"The planner's largest share of a step: {100 * max(shares):.3f}% (target 1%).", ""]
    text = "\n".join(lines)
    write_text_atomic(args.output, text, make_folder=True)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
