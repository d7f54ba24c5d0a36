"""Speed of the exact methods.

* the O(n) fusion DP on n = 100,000 tensors (target: under 0.2 s on 2 cores), in a
  latency-bound and a bandwidth-bound regime;
* the O(n^2) fusion DP on n = 5,000 tensors with a PiecewiseLinear cost (target: under 2 s);
* CP-SAT and the MILP: time to a proven optimum against n, beside the DP on the same
  instances, until a method needs more than its time limit.

Writes ``benchmarks/results/exact.md``.

Run: ``python benchmarks/bench_exact.py [--time-limit 10] [--repeats 5]``
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
from fusionopt.cost import AlphaBeta, PiecewiseLinear
from fusionopt.model import Problem
from fusionopt.reporting import write_text_atomic
from fusionopt.model import optimal_fusion
from fusionopt.solvers import solve
from timing import random_profile, timings

RESULTS = Path(__file__).resolve().parent / "results" / "exact.md"
SIZES = (5, 10, 20, 40, 80, 160, 320)


def median_time(fn, repeats: int) -> float:
    return statistics.median(timings(fn, repeats))


# A measured-looking curve with protocol switches (seconds against bytes).
PIECEWISE = PiecewiseLinear([8, 65_536, 1 << 20, 1 << 24, 1 << 28], [2e-5, 4e-5, 1.5e-4, 1.6e-3, 2.5e-2])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=10.0, help="CP-SAT/MILP limit per solve, seconds")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    lines = [
        "# Exact methods: speed",
        "",
        f"Measured {datetime.date.today().isoformat()} by `python benchmarks/bench_exact.py"
        f" --time-limit {args.time_limit:g} --repeats {args.repeats}` on {os.cpu_count()} cores"
        f" ({platform.machine()}), Python {platform.python_version()}, numpy {np.__version__},"
        f" fusionopt {fusionopt.__version__}. Random profiles (sizes 1 KB to 4 MB, backward up to"
        " 0.2 ms, forward up to 0.1 ms per tensor); DP times are medians of the repeats.",
        "",
        "## Fusion DP",
        "",
        "| algorithm | n | cost | regime | median (s) | target |",
        "|---|---|---|---|---|---|",
    ]
    big = random_profile(100_000, 0)
    regimes = (("latency-bound", AlphaBeta(5e-5, 1e-10)), ("bandwidth-bound", AlphaBeta(1e-6, 1e-9)),
               ("compute-bound", AlphaBeta(1e-6, 1e-12)))
    for label, cost in regimes:
        problem = Problem(big, cost)
        seconds = median_time(lambda: optimal_fusion(problem, algorithm="linear"), args.repeats)
        messages = int(optimal_fusion(problem).cuts.sum()) + 1
        lines.append(f"| O(n), linear | 100,000 | AlphaBeta | {label} ({messages:,} messages) | {seconds:.3f} |"
                     f" < 0.2 s: {'met' if seconds < 0.2 else 'NOT met'} |")
    problem = Problem(random_profile(5_000, 1), PIECEWISE)
    seconds = median_time(lambda: optimal_fusion(problem), max(1, args.repeats // 2))
    lines.append(f"| O(n^2), quadratic | 5,000 | PiecewiseLinear | 5 points | {seconds:.3f} |"
                 f" < 2 s: {'met' if seconds < 2.0 else 'NOT met'} |")

    lines += [
        "",
        f"## CP-SAT and MILP: time to a proven optimum (limit {args.time_limit:g} s per solve)",
        "",
        "AlphaBeta cost `alpha = 50 us`, `beta = 1 ns/B`; the same instance for every method.",
        "Status is the solver's own (not the Result's, which also knows the DP's bound); CP-SAT's",
        "`T - DP` is within its stated rounding bound when it proves optimality.",
        "",
        "| n | DP (s) | CP-SAT (s) | CP-SAT's own status | CP-SAT T - DP (s) | MILP (s) | HiGHS's own status | MILP T - DP (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    alive = {"cpsat": True, "milp": True}
    for n in SIZES:
        problem = Problem(random_profile(n, 100 + n), AlphaBeta(5e-5, 1e-9))
        exact = solve(problem, "dp")
        cells = [f"{n}", f"{exact.solve_seconds:.4f}"]
        for method in ("cpsat", "milp"):
            if not alive[method]:
                cells += ["-", "not run", "-"]
                continue
            result = solve(problem, method, time_limit=args.time_limit)
            proved = (result.stats["cpsat_status"] == "OPTIMAL" if method == "cpsat"
                      else result.stats["highs_status"] == 0)
            cells += [f"{result.solve_seconds:.2f}", "proved optimal" if proved else "not proved",
                      f"{result.iteration_time - exact.iteration_time:.1e}"]
            if not proved:
                alive[method] = False
        lines.append("| " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
        if not any(alive.values()):
            break
    lines.append("")
    text = "\n".join(lines)
    write_text_atomic(args.output, text, make_folder=True)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
