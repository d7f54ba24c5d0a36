"""Speed of the simulator and the fusion-plan evaluators.

Measures, side by side in one run:

* the batch evaluator (``evaluate_cuts``) in plan evaluations per second on ResNet-50
  (161 tensors), against the one-plan fast path and the general simulator on the same plans,
  and ``score_cuts`` with contention and copy cost on;
* ``simulate`` on a 1,000-tensor profile (WFBP plan: 1,000 messages; single message).

Targets (the foundation issue): at least 1,000,000 evaluations per second, and
``simulate`` on 1,000 tensors under 10 ms. Writes ``benchmarks/results/evaluator.md``.

Run: ``python benchmarks/bench_evaluator.py [--plans 1000000] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
from pathlib import Path

import numpy as np

import fusionopt
from fusionopt import zoo
from fusionopt.cost import network
from fusionopt.model import Plan, Problem, Profile, evaluate_cuts, fusion_iteration_time, simulate, score_cuts
from fusionopt.reporting import write_text_atomic
from timing import timings

RESULTS = Path(__file__).resolve().parent / "results" / "evaluator.md"


def best_and_median(fn, repeats: int) -> tuple[float, float]:
    samples = timings(fn, repeats)
    return min(samples), statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=1_000_000, help="cut vectors per batch")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()[0]
    rng = np.random.default_rng(0)

    # Batch evaluator on ResNet-50, 64 workers, 10GbE ring all-reduce.
    resnet = Problem(zoo.profile("resnet50", device="h100", batch=64), network("10gbe", 64))
    n = resnet.profile.n
    cuts = rng.random((args.plans, n - 1)) < 0.1
    evaluate_cuts(resnet, cuts[:1000])  # warm-up
    batch_best, batch_median = best_and_median(lambda: evaluate_cuts(resnet, cuts), args.repeats)
    sample = cuts[:2000]
    fast_best, fast_median = best_and_median(
        lambda: [fusion_iteration_time(resnet, row) for row in sample], args.repeats)
    plans = [Plan.from_cuts(resnet.profile, row) for row in sample[:500]]
    sim_best, sim_median = best_and_median(
        lambda: [simulate(resnet, p, validate=False) for p in plans], args.repeats)
    extended = Problem(resnet.profile, resnet.cost, contention=1.5, copy_cost=1e-11)
    share = cuts[: args.plans // 4]
    extended_median = best_and_median(lambda: score_cuts(extended, share), args.repeats)[1]
    extended_rate = len(share) / extended_median
    batch_rate = args.plans / batch_median
    fast_rate = len(sample) / fast_median
    sim_rate = len(plans) / sim_median
    # The three must agree; a benchmark of a wrong answer is worthless.
    values = evaluate_cuts(resnet, sample[:500])
    reference = np.array([simulate(resnet, p).iteration_time for p in plans])
    agreement = float(np.max(np.abs(values - reference) / reference))

    # simulate on 1,000 tensors.
    big = Profile.from_arrays(rng.integers(1_000, 4_000_000, 1000), rng.random(1000) * 1e-4,
                              rng.random(1000) * 2e-4)
    big_problem = Problem(big, network("100gb-ib", 64))
    wfbp_plan = Plan.per_tensor(big)
    single_plan = Plan.from_groups(big, [list(range(999, -1, -1))])
    simulate(big_problem, wfbp_plan)
    wfbp_best, wfbp_median = best_and_median(lambda: simulate(big_problem, wfbp_plan), max(args.repeats, 20))
    single_best, single_median = best_and_median(lambda: simulate(big_problem, single_plan), max(args.repeats, 20))

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    lines = [
        "# Evaluator speed",
        "",
        f"Measured {datetime.date.today().isoformat()} by `python benchmarks/bench_evaluator.py"
        f" --plans {args.plans} --repeats {args.repeats}`",
        f"on {os.cpu_count()} cores ({platform.processor() or platform.machine()}), Python {platform.python_version()},"
        f" numpy {np.__version__}, fusionopt {fusionopt.__version__}; 1-minute load average {load_before:.2f} at the"
        f" start, {os.getloadavg()[0]:.2f} at the end. Times are medians of the repeats, timings of this host; the"
        " ResNet-50 profile is the zoo's (calibrated compute, H100, batch 64).",
        "",
        "## Fusion plans of ResNet-50 (161 tensors, 64 workers, 10GbE ring)",
        "",
        "| evaluator | plans | median time (s) | plans per second | ratio to simulate |",
        "|---|---|---|---|---|",
        f"| `evaluate_cuts` (batch) | {args.plans:,} | {batch_median:.3f} | {batch_rate:,.0f} | {batch_rate / sim_rate:,.0f}x |",
        f"| `fusion_iteration_time` (one plan) | {len(sample):,} | {fast_median:.3f} | {fast_rate:,.0f} | {fast_rate / sim_rate:,.1f}x |",
        f"| `simulate` (general) | {len(plans):,} | {sim_median:.3f} | {sim_rate:,.0f} | 1x |",
        f"| `score_cuts`, contention 1.5 and copy cost (one channel) | {len(share):,} | {extended_median:.3f} |"
        f" {extended_rate:,.0f} | {extended_rate / sim_rate:,.0f}x |",
        "",
        f"Largest relative difference between the batch evaluator and `simulate` on 500 plans: {agreement:.1e}.",
        f"Target at least 1,000,000 plans per second: **{verdict(batch_rate >= 1e6)}** ({batch_rate:,.0f}).",
        "",
        "## `simulate` on a 1,000-tensor profile",
        "",
        "| plan | messages | median (ms) | best (ms) |",
        "|---|---|---|---|",
        f"| WFBP | 1,000 | {1e3 * wfbp_median:.3f} | {1e3 * wfbp_best:.3f} |",
        f"| single message | 1 | {1e3 * single_median:.3f} | {1e3 * single_best:.3f} |",
        "",
        f"Target under 10 ms: **{verdict(max(wfbp_median, single_median) < 0.010)}**.",
        "",
    ]
    text = "\n".join(lines)
    write_text_atomic(args.output, text, make_folder=True)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
