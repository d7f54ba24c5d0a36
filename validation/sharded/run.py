"""Fully sharded data parallelism (MODEL.md section 8.2): the search against the exact
optimum, the frameworks' defaults against the bound at scale, and the memory-time trade-off.

1. Random problems (seeded): ``sharded-opt`` against ``sharded-brute`` (every plan over the
   tensors), with no cap and with caps between the least possible peak and the free
   optimum's, and how far the optimum is from ``sharded_lower_bound``.
2. Scale: GPT-2 (124M, 355M) and BERT (base, large) on 8, 64 and 1024 workers over 10 GbE
   and 100 Gb InfiniBand: FSDP2's defaults, DeepSpeed ZeRO-3's, TorchInductor's bucketing
   and ``sharded-opt``, each with its gap to the bound and its solve time (a timing); and
   ``sharded-opt`` with ``reduce_groups=True`` (reduce-scatter groups searched apart from the
   units), which must never be slower than without.
3. The memory-time trade-off of GPT-2 medium and BERT-large on 64 workers of 100 Gb
   InfiniBand: the best T found under each memory cap (``sharded-opt``, and restricted to
   what FSDP2 can set), the bound under that cap, and the frameworks' defaults as points;
   a picture, ``validation/results/sharded-memory.png``.

Every figure but the seconds comes from seeded problems and deterministic budgets
(``sharded-opt``'s evaluation budget; the wall clock only a safeguard), so rerunning the
command reproduces it exactly; the seconds are timings of the machine.

Writes ``validation/results/sharded.md`` and the picture.

Run: ``python validation/sharded/run.py [--quick]``
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
from fusionopt.cost import AlphaBeta, PiecewiseLinear
from fusionopt.model import FullySharded, Problem, Profile
from fusionopt.reporting import write_text_atomic
from fusionopt.model import sharded_lower_bound, sharded_memory_floor
from fusionopt.reporting import (SAFEGUARD_SECONDS, Progress, changed_options, interrupted_path, markdown_table,
                                 pyplot, save_png, subset_location)
from fusionopt.solvers import solve
from fusionopt.advice import FSDP2_MIN_BACKWARD_PREFETCH, FSDP2_MIN_FORWARD_PREFETCH

RESULTS = Path(__file__).resolve().parents[1] / "results" / "sharded.md"
RANDOM_PROBLEMS = 200
MODELS = (("gpt2", 8), ("gpt2-medium", 8), ("bert-base", 32), ("bert-large", 32))
NETWORKS = ("10gbe", "100gb-ib")
WORKERS = (8, 64, 1024)
FRAMEWORKS = (("fsdp2", "FSDP2"), ("zero3", "ZeRO-3"), ("inductor", "Inductor"))
TRADE_OFF = (("gpt2-medium", 8), ("bert-large", 32))
CAPS = 12
SEARCH = {"time_limit": SAFEGUARD_SECONDS}            # its default 20,000-evaluation budget decides
RTOL = 1e-9
MiB = 2**20


def random_problem(rng: np.random.Generator) -> Problem:
    n = int(rng.integers(1, 7))
    sizes = rng.integers(1, 10_000_000, n).tolist()
    forward, backward = (rng.uniform(0, 1e-2, n).tolist() for _ in range(2))
    update = rng.uniform(0, 2e-3, n).tolist() if rng.random() < 0.5 else None
    profile = Profile.from_arrays(sizes, forward, backward, update=update)

    def cost():
        if rng.random() < 0.7:
            return AlphaBeta(float(rng.uniform(0, 5e-3)), float(rng.uniform(0, 1e-8)))
        points = np.unique(rng.integers(1, 20_000_000, 3))
        return PiecewiseLinear(points.tolist(), np.cumsum(rng.uniform(0, 2e-3, points.size)).tolist())

    return Problem(profile, pattern=FullySharded(cost(), cost()))


def cross_checks(count: int, progress: Progress) -> dict:
    rng = np.random.default_rng(0)
    out = {"problems": 0, "capped": 0, "equal": 0, "gaps": [], "bound_gaps": [], "capped_bound_gaps": []}
    for k in range(count):
        free = random_problem(rng)
        optimum = solve(free, "sharded-brute")
        floor, _ = sharded_memory_floor(free)
        peak = optimum.timeline.peak_memory
        problems = [(free, optimum)]
        if peak > floor:                                  # a cap between the floor and the free optimum's peak
            cap = floor + float(rng.uniform(0, 1)) * (peak - floor)
            capped = Problem(free.profile, pattern=free.pattern.with_cap(cap))
            try:
                problems.append((capped, solve(capped, "sharded-brute")))
            except ValueError:                            # the floor is a bound; no plan may reach it
                pass
        for problem, exact in problems:
            found = solve(problem, "sharded-opt", atoms="tensor", **SEARCH)
            if found.iteration_time < exact.iteration_time * (1 - RTOL):
                raise AssertionError(f"random problem {k}: sharded-opt {found.iteration_time!r} s beats brute force "
                                     f"{exact.iteration_time!r} s")
            capped = problem.pattern.memory_cap is not None
            out["problems"] += 1
            out["capped"] += capped
            out["equal"] += found.iteration_time <= exact.iteration_time * (1 + RTOL)
            out["gaps"].append(found.iteration_time / exact.iteration_time - 1)
            key = "capped_bound_gaps" if capped else "bound_gaps"
            out[key].append(exact.iteration_time / sharded_lower_bound(problem) - 1)
        if (k + 1) % 50 == 0:
            progress.step(f"{k + 1} profiles, {out['problems']} problems: sharded-opt at the optimum on {out['equal']}")
    return out


def scale_cell(model: str, batch: int, net: str, workers: int) -> dict:
    problem = Problem(zoo.profile(model, device="h100", batch=batch), pattern=FullySharded.from_network(net, workers))
    row = {"model": model, "net": net, "workers": workers, "bound": sharded_lower_bound(problem), "T": {}, "seconds": {},
           "peak": {}}
    for name, label in FRAMEWORKS + (("sharded-opt", "sharded-opt"),):
        result = solve(problem, name, **(SEARCH if name == "sharded-opt" else {}))
        row["T"][label] = result.iteration_time
        row["seconds"][label] = result.solve_seconds
        row["peak"][label] = result.timeline.peak_memory
    grouped = solve(problem, "sharded-opt", reduce_groups=True, **SEARCH)
    if grouped.iteration_time > row["T"]["sharded-opt"]:
        raise AssertionError(f"{model} {net} P={workers}: sharded-opt with reduce groups {grouped.iteration_time!r} s "
                             f"is slower than without {row['T']['sharded-opt']!r} s")
    row["grouped"] = {"T": grouped.iteration_time, "seconds": grouped.solve_seconds,
                      "peak": grouped.timeline.peak_memory, "own groups": grouped.plan.reduce_bounds is not None}
    return row


def trade_off(model: str, batch: int, progress: Progress, caps: int) -> dict:
    free = Problem(zoo.profile(model, device="h100", batch=batch), pattern=FullySharded.from_network("100gb-ib", 64))
    defaults = {label: solve(free, name) for name, label in FRAMEWORKS}
    unlimited = solve(free, "sharded-opt", **SEARCH)
    floor, _ = sharded_memory_floor(free)
    top = max(unlimited.timeline.peak_memory, *(r.timeline.peak_memory for r in defaults.values()))
    points = []
    for cap in np.geomspace(floor, top, caps).tolist():
        problem = Problem(free.profile, pattern=free.pattern.with_cap(cap))
        point = {"cap": cap, "bound": sharded_lower_bound(problem)}
        for label, options in (("sharded-opt", {}),
                               ("FSDP2-settable", {"atoms": "block", "min_forward_prefetch": FSDP2_MIN_FORWARD_PREFETCH,
                                                   "min_backward_prefetch": FSDP2_MIN_BACKWARD_PREFETCH})):
            try:
                result = solve(problem, "sharded-opt", **options, **SEARCH)
                point[label] = (result.iteration_time, result.timeline.peak_memory)
            except ValueError:
                point[label] = None
        points.append(point)
        found = point["sharded-opt"]
        progress.step(f"{model} cap {cap / MiB:.0f} MiB: " + ("no plan found" if found is None
                                                            else f"T {1e3 * found[0]:.2f} ms"))
    return {"model": model, "floor": floor, "points": points, "unlimited": unlimited,
            "defaults": {label: (r.iteration_time, r.timeline.peak_memory) for label, r in defaults.items()}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="40 random profiles, two models, one network, 5 caps")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    args.output = Path(subset_location(args.output, RESULTS, changed_options(parser, args, leave=("output",))))
    started = time.perf_counter()
    models = MODELS[::2] if args.quick else MODELS
    networks = NETWORKS[1:] if args.quick else NETWORKS
    cells = [(m, b, net, p) for m, b in models for net in networks for p in WORKERS]
    trades = TRADE_OFF[:1] if args.quick else TRADE_OFF
    caps = 5 if args.quick else CAPS
    with Progress(interrupted_path(args.output)) as progress:
        count = 40 if args.quick else RANDOM_PROBLEMS
        progress.stage("random problems", total=count // 50 or None)
        checks = cross_checks(count, progress)
        progress.stage("scale", total=len(cells))
        rows = []
        for cell in cells:
            rows.append(scale_cell(*cell))
            r = rows[-1]
            progress.step(f"{cell[0]} {cell[2]} P={cell[3]}: sharded-opt "
                          f"+{100 * (r['T']['sharded-opt'] / r['bound'] - 1):.2f}% over the bound")
        progress.stage("memory-time trade-off", total=caps * len(trades))
        curves = [trade_off(m, b, progress, caps) for m, b in trades]
        args.output.parent.mkdir(parents=True, exist_ok=True)
        picture = plot(curves, args.output.parent)
        write(args, checks, rows, curves, picture, started)
    return progress.exit_code


def pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def plot(curves: list[dict], folder: Path) -> str | None:
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(1, len(curves), figsize=(6.4 * len(curves), 4.4), squeeze=False)
    for ax, curve in zip(axes[0], curves):
        caps = [p["cap"] / MiB for p in curve["points"]]
        for label, style in (("sharded-opt", "-o"), ("FSDP2-settable", "--s")):
            xs = [c for c, p in zip(caps, curve["points"]) if p[label] is not None]
            ys = [1e3 * p[label][0] for p in curve["points"] if p[label] is not None]
            ax.plot(xs, ys, style, label=f"best found ({label})", markersize=4)
        ax.plot(caps, [1e3 * p["bound"] for p in curve["points"]], ":", color="grey", label="lower bound")
        for (label, (t, peak)), (marker, size, fill) in zip(curve["defaults"].items(),
                                                          (("^", 12, "full"), ("v", 9, "full"), ("D", 8, "none"))):
            ax.plot([peak / MiB], [1e3 * t], marker, markersize=size, fillstyle=fill, markeredgewidth=1.5,
                    label=f"{label} defaults")
        ax.axvline(curve["floor"] / MiB, color="red", linewidth=0.8, label="no plan below")
        ax.set_xscale("log")
        ax.set_xticks([t for t in (100, 150, 200, 300, 500, 700, 1000, 1500, 2000, 3000, 5000)
                       if min(caps) * 0.9 <= t <= max(caps) * 1.1])
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda value, _: f"{value:g}"))
        ax.xaxis.set_minor_formatter(plt.NullFormatter())
        ax.set_xlabel("memory cap: unsharded parameters and gradients (MiB)")
        ax.set_ylabel("iteration time (ms)")
        ax.set_title(f"{curve['model']}, 64 workers, 100 Gb IB (H100, calibrated compute)")
        ax.legend(fontsize=7)
    return save_png(plt, fig, str(folder), "sharded-memory.png")


def write(args: argparse.Namespace, checks: dict, rows: list[dict], curves: list[dict], picture: str | None,
          started: float) -> None:
    gaps = sorted(checks["gaps"])
    free, capped = sorted(checks["bound_gaps"]), sorted(checks["capped_bound_gaps"])
    lines = [
        "# Fully sharded: the search against the optimum, the frameworks at scale, memory against time",
        "",
        f"Run {datetime.date.today().isoformat()} by `python validation/sharded/run.py{' --quick' if args.quick else ''}`"
        f" on {os.cpu_count()} cores ({platform.machine()}), Python {platform.python_version()},"
        f" fusionopt {fusionopt.__version__}, in {time.perf_counter() - started:.0f} s (a timing). Every other"
        " figure but the seconds comes from seeded problems and deterministic budgets: rerunning reproduces it exactly.",
        "",
        "## The search against the exact optimum",
        "",
        f"{checks['problems']} problems from random profiles (seed 0; 1-6 tensors, affine or piecewise-linear costs for"
        f" each collective, half with update time), {checks['capped']} of them under a memory cap drawn between the"
        " least peak any plan can have and the free optimum's peak:",
        "",
        f"* `sharded-opt` (atoms: tensors) reaches the `sharded-brute` optimum on **{checks['equal']} of"
        f" {checks['problems']}** (median gap {pct(statistics.median(gaps))}, largest {pct(gaps[-1])}), and never beats it;",
        f"* the optimum is above `sharded_lower_bound` by {pct(statistics.median(free))} on the median problem without"
        f" a cap (largest {pct(free[-1])})"
        + (f" and {pct(statistics.median(capped))} under a cap (largest {pct(capped[-1])})" if capped else "") + ".",
        "",
        "## Scale",
        "",
        "Zoo profiles (calibrated compute) on H100 (GPT-2 at batch 8, BERT at 32), ring reduce-scatter and all-gather"
        " presets, no memory cap. T in ms and, in brackets, the gap to `sharded_lower_bound`; then the peak memory of"
        " unsharded parameters and gradients (MiB) and the seconds each method took to solve (timings, on the machine named above).",
        "",
    ]
    labels = list(rows[0]["T"])
    table = []
    for r in rows:
        cells = [f"{1e3 * r['T'][k]:.2f} ({pct(r['T'][k] / r['bound'] - 1)})" for k in labels]
        peaks = "/".join(f"{r['peak'][k] / MiB:.0f}" for k in labels)
        seconds = "/".join(f"{r['seconds'][k]:.2f}" for k in labels)
        grouped = f"{1e3 * r['grouped']['T']:.2f} ({pct(r['grouped']['T'] / r['bound'] - 1)})"
        table.append([r["model"], r["net"], r["workers"], f"{1e3 * r['bound']:.2f}", *cells, grouped, peaks, seconds])
    lines += markdown_table(["model", "network", "P", "bound", *labels, "sharded-opt, groups", "peak MiB", "solve s"],
                            table)
    slowest = max(r["seconds"]["sharded-opt"] for r in rows)
    over = [min(r["T"][label] for _, label in FRAMEWORKS) / r["T"]["sharded-opt"] for r in rows]
    lines += ["", f"`sharded-opt` over the best framework default: median {statistics.median(over):.3f}x, largest"
                  f" {max(over):.3f}x, over {len(rows)} instances. Every method returned within its limit; the slowest"
                  f" `sharded-opt` took {slowest:.2f} s (limit {SAFEGUARD_SECONDS:g} s, a timing).", ""]
    faster = [r for r in rows if r["grouped"]["T"] < r["T"]["sharded-opt"]]
    gains = [1 - r["grouped"]["T"] / r["T"]["sharded-opt"] for r in rows]
    widest = [r for r in rows if r["workers"] == max(WORKERS)]
    peaks = "/".join(f"{r['grouped']['peak'] / MiB:.0f}" for r in rows)
    lines += [f"`sharded-opt, groups` is `sharded-opt` with `reduce_groups=True`: reduce-scatter groups searched apart"
              f" from the units (DeepSpeed ZeRO-3's gradient buckets, which FSDP2 cannot set), from the plain search's"
              f" best plans. It is faster on {len(faster)} of {len(rows)} instances and slower on none (median gain"
              f" {pct(statistics.median(gains))}, largest {pct(max(gains))}); {sum(r['grouped']['own groups'] for r in rows)}"
              f" of its plans reduce-scatter in groups of their own. At {max(WORKERS)} workers its gap to the bound is"
              f" {pct(min(r['grouped']['T'] / r['bound'] - 1 for r in widest))} to"
              f" {pct(max(r['grouped']['T'] / r['bound'] - 1 for r in widest))}, against"
              f" {pct(min(r['T']['sharded-opt'] / r['bound'] - 1 for r in widest))} to"
              f" {pct(max(r['T']['sharded-opt'] / r['bound'] - 1 for r in widest))} without. Its peaks:"
              f" {peaks} MiB, in the table's order; the slowest"
              f" took {max(r['grouped']['seconds'] for r in rows):.2f} s (a timing).", ""]
    lines += ["## Memory against time", "",
              "64 workers of 100 Gb InfiniBand. Under each cap (geometric, from the least peak any plan can have to the"
              " largest peak below): the best T `sharded-opt` found over module atoms, and restricted to what FSDP2 can"
              " set (whole blocks, forward prefetch at least 2, backward at least 1), each with its peak; the bound under"
              " that cap. The frameworks' defaults are points (T, peak)."
              + ("" if picture is None else f" Picture: `{Path(picture).name}`."), ""]
    for curve in curves:
        lines += [f"### {curve['model']}", ""]
        table = []
        for p in curve["points"]:
            cells = []
            for label in ("sharded-opt", "FSDP2-settable"):
                found = p[label]
                cells.append("-" if found is None else f"{1e3 * found[0]:.2f} ({found[1] / MiB:.0f} MiB)")
            best = p["sharded-opt"]
            cells.append("-" if best is None else pct(best[0] / p["bound"] - 1))
            table.append([f"{p['cap'] / MiB:.0f}", f"{1e3 * p['bound']:.2f}", *cells])
        lines += markdown_table(["cap MiB", "bound ms", "sharded-opt ms (peak)", "FSDP2-settable ms (peak)",
                                 "gap to bound"], table)
        defaults = ", ".join(f"{label} {1e3 * t:.2f} ms at {peak / MiB:.0f} MiB"
                             for label, (t, peak) in curve["defaults"].items())
        best = curve["unlimited"]
        lines += ["", f"Defaults: {defaults}. With no cap `sharded-opt` finds {1e3 * best.iteration_time:.2f} ms at"
                      f" {best.timeline.peak_memory / MiB:.0f} MiB (gap {pct(best.gap)}); no plan fits below"
                      f" {curve['floor'] / MiB:.0f} MiB.", ""]
    write_text_atomic(args.output, "\n".join(lines) + "\n", make_folder=True)
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
