"""Cross-validation of the exact methods: DP, brute force, CP-SAT and the MILP.

Five suites, written to ``validation/results/exact.md``:

1. **random**: small random problems (n = 2..12, AlphaBeta and PiecewiseLinear costs,
   both sync modes); every exact method that applies is run and their optimal times
   compared (brute force is the reference);
2. **extensions**: CP-SAT with copy cost and contention against every fusion plan simulated
   event by event (n <= 8), where the DP does not apply;
3. **zoo**: the zoo models x networks x worker counts 4..2048; the DP against CP-SAT and
   the MILP, each within its budget (agreement counted only where the solver proves
   optimality by itself; otherwise the DP must not be beaten);
4. **channels**: CP-SAT with two to four channels sharing the bandwidth against every
   fusion plan simulated event by event (n <= 10);
5. **largest n**: for CP-SAT and the MILP (and CP-SAT with two channels), the largest n
   (doubling, then bisection) whose instance, the first n tensors of BERT-base on 10GbE at
   64 workers in backward order, each proves optimal within its budget.

CP-SAT and HiGHS stop on deterministic budgets, CP-SAT's work units (``--work``) and HiGHS's
branch-and-bound nodes (``--nodes``), not on the wall clock, so every count and optimum the
run writes is the same on every machine; only the columns of seconds are timings. The time
limit (``--time-limit``) is a safeguard far out of the way.

Run: ``python validation/exact/run.py [--work 10] [--nodes 1000] [--random 200] [--quick]``
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import fusionopt
from fusionopt import zoo
from fusionopt.cost import AlphaBeta, PiecewiseLinear, network
from fusionopt.model import Plan, Problem, Profile, simulate
from fusionopt.reporting import write_text_atomic
from fusionopt.reporting import (SAFEGUARD_SECONDS, Progress, changed_options, interrupted_path, positive_float,
                                 positive_int, subset_location)
from fusionopt.solvers import Status, solve

RESULTS = Path(__file__).resolve().parents[1] / "results" / "exact.md"
MODELS = ("resnet50", "vgg16", "googlenet", "bert-base")
NETWORKS = ("10gbe", "25gbe", "100gb-ib")
WORKERS = (4, 16, 64, 256, 1024, 2048)
REL = 1e-9


def zoo_grid(quick: bool) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The zoo models and worker counts of the zoo suite (fewer with ``--quick``)."""
    return (MODELS[:2], WORKERS[::2]) if quick else (MODELS, WORKERS)


def random_problem(rng: np.random.Generator) -> Problem:
    n = int(rng.integers(2, 13))
    zeros = rng.random(n) < 0.3
    backward = np.where(zeros, 0.0, rng.random(n) * 2e-3)
    profile = Profile.from_arrays(rng.integers(1, 8_000_000, n), rng.random(n) * 1e-3, backward)
    if rng.random() < 0.7:
        cost = AlphaBeta(float(rng.random() * 2e-3), float(rng.random() * 2e-9))
    else:
        points = np.sort(rng.choice(np.arange(1, 40_000_000), size=4, replace=False))
        cost = PiecewiseLinear(points, np.cumsum(rng.random(4) * 2e-3))
    return Problem(profile, cost, sync=str(rng.choice(["barrier", "layerwise"])))


def tolerance(result) -> float:
    """Seconds within which a method's optimum counts as equal: its stated rounding bound
    (CP-SAT) or numerical tolerance (MILP)."""
    stated = result.stats.get("rounding_bound", result.stats.get("tolerance", 0.0))
    return float(stated) + REL * result.iteration_time + 1e-15


def solver_proved(result) -> bool:
    """Whether the method proved optimality by itself. ``Result.status`` may be OPTIMAL
    because the DP's bound is attached to every fusion result; a cross-check must not
    lean on the DP it is checking."""
    if result.method == "cpsat" and "rounds" in result.stats:
        # Several channels: CP-SAT's relaxation bound, tightened round by round, meets T.
        bound = result.stats["iteration_time_bound"]
        return bound is not None and result.iteration_time - bound <= tolerance(result)
    if result.method == "cpsat":
        return result.stats["cpsat_status"] == "OPTIMAL"
    if result.method == "milp":
        return result.stats["highs_status"] == 0
    return result.status is Status.OPTIMAL


class Budget:
    """The deterministic budgets of the exact solvers, with a wall-clock safeguard."""

    def __init__(self, work: float, nodes: int, safeguard: float):
        self.work, self.nodes, self.safeguard = work, nodes, safeguard

    def options(self, method: str, **extra) -> dict:
        if method == "cpsat":
            return {"deterministic_time": self.work, "time_limit": self.safeguard, **extra}
        if method == "milp":
            return {"node_limit": self.nodes, "time_limit": self.safeguard, **extra}
        return dict(extra)

    def __str__(self) -> str:
        return f"CP-SAT {self.work:g} work units, HiGHS {self.nodes} nodes"


def random_suite(count: int, budget: Budget, seed: int, progress: Progress) -> list[str]:
    rng = np.random.default_rng(seed)
    methods = ("dp", "cpsat", "milp")
    agree = {m: 0 for m in methods}
    ran = {m: 0 for m in methods}
    worst = {m: 0.0 for m in methods}
    seconds = {m: [] for m in methods + ("brute",)}
    for _ in range(count):
        problem = random_problem(rng)
        reference = solve(problem, "brute")
        seconds["brute"].append(reference.solve_seconds)
        for method in methods:
            if method == "milp" and problem.cost.affine is None:
                continue
            result = solve(problem, method, **budget.options(method))
            ran[method] += 1
            seconds[method].append(result.solve_seconds)
            difference = abs(result.iteration_time - reference.iteration_time)
            worst[method] = max(worst[method], difference)
            if solver_proved(result) and difference <= tolerance(result):
                agree[method] += 1
        progress.step(f"n = {problem.profile.n}, {problem.sync}: brute force {1e3 * reference.iteration_time:.4f} ms")
    lines = [
        f"## Random problems against brute force ({count} instances, n = 2..12)",
        "",
        "| method | instances | proved optimal by itself and equal to brute force (within its tolerance) | largest difference (s) | median solve (s, a timing) |",
        "|---|---|---|---|---|",
        f"| brute | {count} | reference | - | {statistics.median(seconds['brute']):.4f} |",
    ]
    for method in methods:
        lines.append(f"| {method} | {ran[method]} | {agree[method]} | {worst[method]:.1e} |"
                     f" {statistics.median(seconds[method]):.4f} |")
    lines += ["", "The MILP runs on the affine-cost instances only (its formulation needs an affine cost).", ""]
    return lines


def extension_suite(count: int, budget: Budget, seed: int, progress: Progress) -> list[str]:
    """CP-SAT against every fusion plan simulated event by event, with copy cost and
    contention on: where the DP does not apply, CP-SAT is the exact reference."""
    rng = np.random.default_rng(seed + 1)
    proved = agree = 0
    worst = 0.0
    seconds = []
    for _ in range(count):
        base = random_problem(rng)
        n = base.profile.n
        if n > 8:
            base = Problem(Profile.from_arrays(base.profile.sizes[:8], base.profile.forward[:8],
                                               base.profile.backward[:8]), base.cost, sync=base.sync)
            n = 8
        problem = Problem(base.profile, base.cost, sync=base.sync,
                          copy_cost=float(rng.choice([0.0, rng.random() * 2e-9])),
                          copy_on=str(rng.choice(["channel", "compute"])),
                          contention=float(rng.choice([1.0, 1.0 + 2 * rng.random()])))
        every = min(simulate(problem, Plan.from_cuts(problem.profile, np.array(
            [(code >> k) & 1 for k in range(n - 1)], dtype=bool))).iteration_time for code in range(1 << (n - 1)))
        result = solve(problem, "cpsat", **budget.options("cpsat", workers=1))
        seconds.append(result.solve_seconds)
        difference = abs(result.iteration_time - every)
        worst = max(worst, difference)
        proved += solver_proved(result)
        agree += solver_proved(result) and difference <= tolerance(result)
        progress.step(f"n = {n}: exhaustive {1e3 * every:.4f} ms, CP-SAT {1e3 * result.iteration_time:.4f} ms")
    return [
        f"## Extensions: CP-SAT against exhaustive simulation ({count} instances, n = 2..8)",
        "",
        "Random copy cost (on the channel or the compute stream) and contention `kappa` in [1, 3] on the",
        "random problems above; the reference is the best of all `2^(n-1)` fusion plans, each simulated",
        "event by event.",
        "",
        "| instances | CP-SAT proved optimal | equal to the exhaustive optimum (within its rounding bound) |"
        " largest difference (s) | median solve (s, a timing) |",
        "|---|---|---|---|---|",
        f"| {count} | {proved} | {agree} | {worst:.1e} | {statistics.median(seconds):.4f} |",
        "",
    ]


def channel_suite(count: int, budget: Budget, seed: int, progress: Progress) -> list[str]:
    """CP-SAT with several channels (processor sharing) against every fusion plan simulated
    event by event."""
    rng = np.random.default_rng(seed + 2)
    tallies: dict[str, list] = {"barrier": [], "layerwise": []}
    for _ in range(count):
        n = int(rng.integers(2, 11))
        backward = np.where(rng.random(n) < 0.3, 0.0, rng.random(n) * 2e-3)
        profile = Profile.from_arrays(rng.integers(1, 8_000_000, n), rng.random(n) * 1e-3, backward)
        sync = str(rng.choice(["barrier", "layerwise"]))
        problem = Problem(profile, AlphaBeta(float(rng.random() * 2e-3), float(rng.random() * 2e-9)), sync=sync,
                          channels=int(rng.integers(2, 5)), copy_cost=float(rng.choice([0.0, rng.random() * 2e-9])),
                          copy_on=str(rng.choice(["channel", "compute"])))
        every = min(simulate(problem, Plan.from_cuts(profile, np.array(
            [(code >> k) & 1 for k in range(n - 1)], dtype=bool))).iteration_time for code in range(1 << (n - 1)))
        result = solve(problem, "cpsat", **budget.options("cpsat", workers=1))
        difference = abs(result.iteration_time - every)
        proved = solver_proved(result)
        tallies[sync].append((proved, proved and difference <= tolerance(result), difference,
                              result.solve_seconds, result.stats["rounds"]))
        progress.step(f"n = {n}, {problem.channels} channels, {sync}: exhaustive {1e3 * every:.4f} ms, "
                      f"CP-SAT {1e3 * result.iteration_time:.4f} ms in {result.stats['rounds']} rounds")
    rows = []
    for sync, runs in tallies.items():
        if not runs:
            continue
        rounds = [r[4] for r in runs]
        rows.append(f"| {sync} | {len(runs)} | {sum(r[0] for r in runs)} | {sum(r[1] for r in runs)} |"
                    f" {max(r[2] for r in runs):.1e} | {statistics.median(r[3] for r in runs):.3f} |"
                    f" {max(r[3] for r in runs):.2f} | {statistics.median(rounds):g} | {max(rounds)} |")
    return [
        f"## Several channels: CP-SAT against exhaustive simulation ({count} instances, n = 2..10)",
        "",
        "Two to four channels sharing the bandwidth, random copy cost on the channel or the compute",
        "stream, affine costs; the reference is the best of all `2^(n-1)` fusion plans, each simulated",
        "event by event. CP-SAT solves a relaxation and adds cuts from the plans it simulates until",
        "its bound meets the best plan (`fusionopt/solvers/exact/_cpsat_channels.py`); \"rounds\" counts its solves.",
        "",
        "| sync | instances | CP-SAT proved optimal | equal to the exhaustive optimum | largest difference (s) |"
        " median solve (s) | max solve (s) | median rounds | max rounds |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def zoo_suite(budget: Budget, quick: bool, progress: Progress) -> list[str]:
    models, workers = zoo_grid(quick)
    rows = []
    tallies = {"cpsat": [0, 0, 0], "milp": [0, 0, 0]}     # optimal & agree, not proven, instances
    for model in models:
        profile = zoo.profile(model, device="h100", batch=64)
        for net in NETWORKS:
            for p in workers:
                problem = Problem(profile, network(net, p))
                exact = solve(problem, "dp")
                cells = [model, net, str(p), str(profile.n), f"{1e3 * exact.iteration_time:.3f}",
                         str(exact.num_messages), f"{exact.solve_seconds:.4f}"]
                for method in ("cpsat", "milp"):
                    result = solve(problem, method, **budget.options(method))
                    if result.iteration_time < exact.iteration_time - tolerance(result):
                        raise AssertionError(f"{method} beat the DP on {model}/{net}/{p}: the DP is wrong")
                    tallies[method][2] += 1
                    if solver_proved(result):
                        assert abs(result.iteration_time - exact.iteration_time) <= tolerance(result), (model, net, p, method)
                        tallies[method][0] += 1
                        verdict = "agrees"
                    else:
                        tallies[method][1] += 1
                        verdict = f"not proved, +{100 * (result.iteration_time / exact.iteration_time - 1):.3f}%"
                    cells += [f"{result.solve_seconds:.2f}", verdict]
                rows.append("| " + " | ".join(cells) + " |")
                progress.step(rows[-1])
    lines = [
        f"## Zoo models x networks x workers ({budget})",
        "",
        "Zoo profiles (calibrated compute) on H100 at batch 64, ring all-reduce presets. \"agrees\": the solver proved",
        "optimality by itself (CP-SAT's or HiGHS's own status) and equals the DP within its stated",
        "tolerance; otherwise its excess over the DP optimum when its budget stopped it. The columns of",
        "seconds are timings.",
        "",
    ]
    for method, (proven, open_, total) in tallies.items():
        lines.append(f"* {method}: {proven} of {total} proved optimal by the solver itself and equal to the DP;"
                     f" {open_} stopped by the budget, none better than the DP.")
    lines += [
        "",
        "| model | network | workers | n | DP T (ms) | messages | DP (s) | CP-SAT (s) | CP-SAT | MILP (s) | MILP |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]
    return lines


def prefix_problem(n: int) -> Problem:
    # The last n tensors of BERT-base in forward order: the first n in backward order.
    profile = zoo.profile("bert-base", device="h100", batch=64)
    return Problem(profile.tail(n, name=""), network("10gbe", 64))


def largest_n(method: str, budget: Budget, ceiling: int, **extensions) -> tuple[int, list[str]]:
    def proves(n: int) -> tuple[bool, float]:
        base = prefix_problem(n)
        problem = Problem(base.profile, base.cost, **extensions)
        result = solve(problem, method, **budget.options(method))
        ok = solver_proved(result)
        if ok:
            reference = "dp" if not problem.extensions else "brute" if n <= 14 else None
            if reference is not None:
                assert abs(result.iteration_time - solve(problem, reference).iteration_time) <= tolerance(result)
        return ok, result.solve_seconds

    trail = []
    good, n = 0, 8
    bad = None
    while good < ceiling:
        ok, seconds = proves(n)
        trail.append(f"n = {n}: {'proved' if ok else 'not proved'} in {seconds:.2f} s")
        if not ok:
            bad = n
            break
        good, n = n, min(n * 2, ceiling)
    if bad is None:
        return good, trail
    while bad - good > max(1, good // 16):
        middle = (good + bad) // 2
        ok, seconds = proves(middle)
        trail.append(f"n = {middle}: {'proved' if ok else 'not proved'} in {seconds:.2f} s")
        good, bad = (middle, bad) if ok else (good, middle)
    return good, trail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=positive_float, default=10.0, help="CP-SAT's budget per solve, in its work units")
    parser.add_argument("--nodes", type=positive_int, default=1000, help="HiGHS's budget per solve, in branch-and-bound nodes")
    parser.add_argument("--time-limit", type=positive_float, default=SAFEGUARD_SECONDS, help="wall-clock safeguard per solve (s)")
    parser.add_argument("--random", type=positive_int, default=200, help="random instances")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="fewer zoo instances")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.output = Path(subset_location(args.output, RESULTS, changed_options(parser, args, leave=("output",))))
    budget = Budget(args.work, args.nodes, args.time_limit)
    started = time.perf_counter()
    command = (f"python validation/exact/run.py --work {args.work:g} --nodes {args.nodes} --random {args.random}"
               f" --seed {args.seed}{' --quick' if args.quick else ''}")
    lines = [
        "# Exact methods cross-validated",
        "",
        f"Run {datetime.date.today().isoformat()} by `{command}` on {os.cpu_count()} cores"
        f" ({platform.machine()}), Python {platform.python_version()}, fusionopt {fusionopt.__version__}.",
        f"Budgets per solve: {budget} (deterministic: every count and optimum below is the same on"
        f" every machine), wall-clock safeguard {args.time_limit:g} s; columns of seconds are timings of this host.",
        "",
    ]
    ceiling = zoo.profile("bert-base").n
    runs = (("cpsat", "cpsat", {}), ("milp", "milp", {}),
            ("cpsat, 2 channels, barrier", "cpsat", {"channels": 2}),
            ("cpsat, 2 channels, layerwise", "cpsat", {"channels": 2, "sync": "layerwise"}))
    zoo_models, zoo_workers = zoo_grid(args.quick)
    zoo_cells = len(zoo_models) * len(NETWORKS) * len(zoo_workers)
    with Progress(interrupted_path(args.output)) as progress:
        progress.stage("random problems against brute force", total=args.random)
        lines += random_suite(args.random, budget, args.seed, progress)
        progress.stage("extensions against exhaustive simulation", total=max(1, args.random // 2))
        lines += extension_suite(max(1, args.random // 2), budget, args.seed, progress)
        progress.stage("channels against exhaustive simulation", total=max(1, args.random // 2))
        lines += channel_suite(max(1, args.random // 2), budget, args.seed, progress)
        progress.stage("zoo", total=zoo_cells)
        lines += zoo_suite(budget, args.quick, progress)
        lines += [f"## Largest n proved optimal within the budget ({budget})", "",
                  "Instance: the first n tensors (backward order) of BERT-base on 10GbE, 64 workers.", ""]
        progress.stage("largest n", total=len(runs))
        for label, method, extensions in runs:
            n, trail = largest_n(method, budget, ceiling, **extensions)
            lines.append(f"* **{label}**: n = {n}{' (all tensors)' if n == ceiling else ''}. Trail: "
                         + "; ".join(trail) + ".")
            progress.step(lines[-1])
        lines += ["", "With channels the instance has no DP; a proof at n <= 14 is checked against brute force."]
        lines += ["", f"Total run time {time.perf_counter() - started:.0f} s (a timing).", ""]
        text = "\n".join(lines)
        write_text_atomic(args.output, text, make_folder=True)
        print(text)
    return progress.exit_code


if __name__ == "__main__":
    sys.exit(main())
