"""ZeRO-3's adaptive prefetch bucket (DeepSpeed PR #8431) at scale, simulated, against the best
bucket of the moment.

Each job is a zoo model on H100s (GPT-2 and BERT-base at batch 8, ResNet-50 at batch 64)
under ZeRO-3 with its defaults on ``FullySharded.from_network(NAME, workers)`` for 10 GbE
and 100 Gb InfiniBand and ``--workers`` (default 8, 64, 256 and 1024), played by the
simulator (:class:`~fusionopt.integrations.SimulatedZero3Job`) for
``--steps`` steps, the link's bandwidth divided by 4 at ``--change-at``. Every fetch's wait
and every step are stretched by draws from the relative deviations the real gloo runs
measured (``validation/results/online-cpu.json``, as ``validation/online/study.py`` reads
them), seeded. The methods:

* ``adaptive``: PR #8431's controller
  (:class:`~fusionopt.integrations.AdaptivePrefetch`) from ZeRO-3's
  default bucket of 5e7 elements, between its bounds of 1e7 and 5e8;
* ``default``: ZeRO-3's 5e7 elements, kept;
* ``advised``: ``fusionopt advise``'s ZeRO-3 settings
  (:func:`~fusionopt.advice.zero3_settings`: the prefetch bucket with the live
  parameters, reuse distance and reduce bucket it chose beside it) for the job before the
  change, kept (not re-advised after it).

The reference is the **best bucket of the moment**: the fastest ZeRO-3 plan over 0 and
``10**e`` elements for ``e`` from 5 to 9 in steps of 0.25, the advice's grid, the default and
the advised bucket, the other knobs at ZeRO-3's defaults, simulated without noise (a bucket
the controller reaches between them can be a little faster, and the advice's other knobs
can be faster still: a gap below 0). Reported
per job and method: the steps until the bucket in use is within 2% of it and stays there to
the phase's end, before and after the change ("never" if not), the gap at each phase's end,
and the bucket then. Every figure comes from seeded draws on stored measurements, so
rerunning reproduces it exactly. Writes ``validation/results/online-prefetch.{json,md,png}``;
a run with other arguments writes into ``validation/results/subset/``.

    python validation/online/prefetch.py
    python validation/online/prefetch.py --workers 8 --steps 60 --change-at 30      # into results/subset/
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

MODELS = (("gpt2", 8), ("bert-base", 8), ("resnet50", 64))
METHODS = ("adaptive", "default", "advised")
GRID = (0, *(int(round(10 ** e)) for e in np.arange(5.0, 9.01, 0.25)))


def candidates(advised: int) -> list[int]:
    """The buckets the best is chosen from: :data:`GRID`, ZeRO-3's grid of advice and
    default, and ``advised``."""
    from fusionopt.advice import ZERO3_GRID
    from fusionopt.solvers.baselines import PREFETCH_BUCKET_SIZE

    return sorted({*GRID, *ZERO3_GRID["prefetch_bucket_size"], PREFETCH_BUCKET_SIZE, advised})


def slower(problem: Any, factor: float) -> Any:
    """``problem`` with both collectives' bandwidth divided by ``factor``."""
    from fusionopt.cost import AlphaBeta
    from fusionopt.model import Problem, FullySharded

    pattern = problem.pattern
    halves = [AlphaBeta(c.alpha, c.beta * factor) for c in (pattern.reduce_scatter, pattern.all_gather)]
    return Problem(problem.profile, pattern=FullySharded(*halves))


def run_job(model: str, batch: int, network_name: str, workers: int, deviations: np.ndarray, steps: int,
            change_at: int, seed: int) -> dict[str, Any]:
    from fusionopt import zoo
    from fusionopt.advice import zero3_settings
    from fusionopt.integrations import AdaptivePrefetch, SimulatedZero3Job
    from fusionopt.model import Problem, FullySharded
    from fusionopt.solvers.baselines import PREFETCH_BUCKET_SIZE

    profile = zoo.profile(model, device="h100", batch=batch)
    before = Problem(profile, pattern=FullySharded.from_network(network_name, workers))
    phases = {id(before): before, id(after := slower(before, 4.0)): after}
    options = dict(zero3_settings(before).options)
    advised = int(options.pop("prefetch_bucket_size", PREFETCH_BUCKET_SIZE))
    reference = SimulatedZero3Job(before)
    best = {}
    for key, problem in phases.items():
        reference.problem = problem
        times = {b: reference.time(b) for b in candidates(advised)}
        best[key] = min(times.items(), key=lambda item: (item[1], item[0]))
    row: dict[str, Any] = {"model": model, "batch": batch, "network": network_name, "workers": workers,
                           "best": best[id(before)][1], "best_bucket": best[id(before)][0],
                           "best_after": best[id(after)][1], "best_bucket_after": best[id(after)][0],
                           "advised_bucket": advised, "advised_options": options, "methods": {}}
    for method in METHODS:
        job = SimulatedZero3Job(before, advised if method == "advised" else PREFETCH_BUCKET_SIZE,
                                options=options if method == "advised" else None, deviations=deviations, seed=seed)
        controller = AdaptivePrefetch(job.bucket) if method == "adaptive" else None
        gaps, buckets = [], []
        for step in range(steps):
            if step == change_at:
                job.problem = after
            fetches = job.step()
            gaps.append(job.time() / best[id(job.problem)][1] - 1.0)
            buckets.append(job.bucket)
            if controller is not None:
                job.bucket = controller.end_step(fetches if controller.sampling else ())
        row["methods"][method] = {
            "gaps": gaps, "buckets": buckets, "settle": settle(gaps, 0, change_at),
            "settle_after": settle(gaps, change_at, steps), "gap_at_change": gaps[change_at - 1],
            "gap_at_end": gaps[-1], "bucket_at_change": buckets[change_at - 1], "bucket_at_end": buckets[-1]}
    return row


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    found = {}
    for method in METHODS:
        ms = [r["methods"][method] for r in results]
        found[method] = {"jobs": len(ms),
                         "before": sum(m["settle"] is not None for m in ms),
                         "after": sum(m["settle_after"] is not None for m in ms),
                         "median_gap_at_change": float(np.median([m["gap_at_change"] for m in ms])),
                         "median_gap_at_end": float(np.median([m["gap_at_end"] for m in ms])),
                         "largest_gap_at_end": float(max(m["gap_at_end"] for m in ms))}
    return found


def markdown(document: dict[str, Any]) -> str:
    never = lambda k: "never" if k is None else str(k)  # noqa: E731
    elements = lambda b: f"{b:.3g}"  # noqa: E731
    lines = ["# ZeRO-3's adaptive prefetch bucket (DeepSpeed PR #8431), simulated", "",
             f"Zoo jobs on H100s under ZeRO-3 with its defaults, played by the simulator, {document['steps']} steps, "
             f"the link's bandwidth divided by 4 at step {document['change_at']}, every fetch's wait and every step "
             f"stretched by draws from the {document['deviations']['count']} relative deviations measured in "
             f"`{document['deviations']['file']}`, seed {document['seed']}. Written by `{document['command']}`; "
             "rerunning reproduces every figure. Buckets in elements.", "",
             "Best: the fastest ZeRO-3 plan over 0 and 10^e elements, e from 5 to 9 in steps of 0.25, the advice's "
             "grid, the default and the advised bucket, the other knobs at ZeRO-3's defaults, without noise (a bucket "
             "between them can be a little faster, and the advice's other knobs faster still: a gap below 0). "
             "Steps to 2%: from the phase's start until the bucket in use is within 2% of the best and stays there "
             "to the phase's end. Gap: the bucket in use against the best at the phase's end.", ""]
    header = ["model", "network", "workers", "best (ms)", "best bucket", "best after (ms)", "best bucket after"]
    for method in METHODS:
        header += [f"{method}: steps to 2%", "after", "gap at change", "gap at end", "bucket at end"]
    rows = []
    for r in document["results"]:
        row = [r["model"], r["network"], r["workers"], f"{1e3 * r['best']:.1f}", elements(r["best_bucket"]),
               f"{1e3 * r['best_after']:.1f}", elements(r["best_bucket_after"])]
        for method in METHODS:
            m = r["methods"][method]
            row += [never(m["settle"]), never(m["settle_after"]), f"{100 * m['gap_at_change']:.2f}%",
                    f"{100 * m['gap_at_end']:.2f}%", elements(m["bucket_at_end"])]
        rows.append(row)
    lines += markdown_table(header, rows)
    lines.append("")
    for method in METHODS:
        s = document["summary"][method]
        lines.append(f"* {method}: within 2% of the best by the change in {s['before']} of {s['jobs']} jobs and by the "
                     f"end in {s['after']}; median gap {100 * s['median_gap_at_change']:.2f}% at the change and "
                     f"{100 * s['median_gap_at_end']:.2f}% at the end, largest at the end "
                     f"{100 * s['largest_gap_at_end']:.2f}%.")
    lines += ["", "![gap to the best bucket against step](online-prefetch.png)"]
    return "\n".join(lines) + "\n"


def plot(document: dict[str, Any], folder: str) -> None:
    plot_gaps(document, folder, "online-prefetch.png", "gap to best bucket (%)", (-10, 20),
              "ZeRO-3's prefetch bucket, simulated with measured noise (gap to the best bucket of the moment)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args, deviations, folder, shown = parse_arguments(__doc__, argv)
    document: dict[str, Any] = {
        "schema": "fusionopt.validation.online-prefetch", "version": 1, "steps": args.steps,
        "change_at": args.change_at, "seed": args.seed, "methods": list(METHODS), "grid": list(GRID),
        "command": command_line("validation/online/prefetch.py", argv, args.out),
        "deviations": {"file": shown,
                       "count": int(deviations.size)},
        "results": []}
    return play(document, MODELS, args, deviations, folder, "online-prefetch", run_job, summary, plot, markdown)


if __name__ == "__main__":
    sys.exit(main())
