"""Traced steps under other bucket settings: a DDP job's step under ``bucket_cap_mb`` = 0.05,
0.5 and 100 MiB predicted from the traces of the job with ``bucket_cap_mb`` unset, against
jobs run with those settings.

The traced prediction of a job from its own traces copies most of the step from the trace;
this is the check that counts: the profile and the all-reduce cost fitted to the unset job's
traces (:attr:`fusionopt.integrations.TracedStep.problem`), DDP's buckets for
another setting built on that profile (``solve(problem, "ddp", bucket_cap_mb=...)``), and the
step simulated, against the step a job with that setting measured. The jobs of one host vary
from job to job, so each model's four jobs run in rounds, the settings in a rotated order
each round, and the table gives the spread over the rounds beside the error.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Callable

from fusionopt.integrations import TracedStep, predict_traced_step
from fusionopt.reporting import markdown_table
from fusionopt.solvers import solve

# (small model, batch): the models and batches of the traced jobs.
MODELS = (("mlp", 64), ("cnn", 16), ("lstm", 32))
# The bucket settings, MiB; None is DDP's default (a 1 MiB first bucket, then 25 MiB), the
# setting whose traces predict the others.
SETTINGS = (None, 0.05, 0.5, 100.0)
ROUNDS = 3


def setting_label(cap: float | None) -> str:
    """``bucket_cap_mb`` as the table names it."""
    return "unset" if cap is None else f"{cap:g}"


def rotated(round_index: int) -> list[float | None]:
    """The settings in round ``round_index``'s order: rotated by one each round, so that no
    setting always runs first or after the same one.

    >>> [setting_label(c) for c in rotated(1)]
    ['0.05', '0.5', '100', 'unset']
    """
    k = round_index % len(SETTINGS)
    return list(SETTINGS[k:] + SETTINGS[:k])


def layout(plan: Any, names: tuple[str, ...]) -> list[list[str]]:
    """A plan's buckets as sorted parameter names, bucket by bucket."""
    return [sorted(names[i] for i in group) for group in plan.groups()]


def predictions(unset: TracedStep) -> dict[str, dict[str, Any]]:
    """Each setting's step (seconds) and buckets predicted from the unset job's traces."""
    out = {}
    for cap in SETTINGS:
        result = solve(unset.problem, "ddp", **({} if cap is None else {"bucket_cap_mb": cap}))
        out[setting_label(cap)] = {"predicted": result.iteration_time, "buckets": result.plan.num_messages,
                                   "layout": layout(result.plan, unset.profile.names)}
    return out


def run_rounds(root: Path, record: Callable[..., Any], *, rounds: int, steps: int,
               progress: Any) -> list[dict[str, Any]]:
    """Record and read every job (``record(folder, model, batch=, steps=, bucket_cap_mb=)``
    writes one job's traces), round by round, model by model; one row per job, with the
    prediction of its setting from the same round's unset job of its model. ``progress``
    gets a step per job and holds the rows so far (:meth:`~fusionopt.reporting.Progress.keep`)."""
    rows: list[dict[str, Any]] = []
    for r in range(rounds):
        for model, batch in MODELS:
            jobs: dict[str, tuple[TracedStep, int]] = {}
            for position, cap in enumerate(rotated(r)):
                label = setting_label(cap)
                folder = root / f"{model}-{label}-round{r + 1}"
                record(folder, model, batch=batch, steps=steps, bucket_cap_mb=cap)
                jobs[label] = (predict_traced_step(folder), position)
                traced = jobs[label][0]
                progress.step(f"round {r + 1} {model} bucket_cap_mb {label}: measured {1e3 * traced.measured:.3f} ms, "
                              f"{traced.plan.num_messages} bucket(s)")
            predicted = predictions(jobs["unset"][0])
            for label, (traced, position) in jobs.items():
                guess = predicted[label]
                rows.append({
                    "round": r + 1, "position": position, "model": model, "batch": batch, "bucket_cap_mb": label,
                    "measured": traced.measured, "predicted": guess["predicted"],
                    "error": (guess["predicted"] - traced.measured) / traced.measured,
                    "own_predicted": traced.predicted, "own_error": traced.error,
                    "buckets": traced.plan.num_messages, "buckets_predicted": guess["buckets"],
                    "layout_as_predicted": layout(traced.plan, traced.profile.names) == guess["layout"],
                    "steps": traced.profile.metadata["steps"],
                })
            progress.keep({"interrupted": True, "results": list(rows)})
    return rows


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per model and setting, over the rounds: the measured and predicted steps (min, median,
    max, seconds), the error of the medians, the errors per round, and the error of each
    job's prediction from its own traces."""
    out = []
    for model, _ in MODELS:
        for cap in SETTINGS:
            label = setting_label(cap)
            jobs = [r for r in rows if r["model"] == model and r["bucket_cap_mb"] == label]
            if not jobs:
                continue
            measured = [r["measured"] for r in jobs]
            predicted = [r["predicted"] for r in jobs]
            out.append({
                "model": model, "bucket_cap_mb": label, "rounds": len(jobs),
                "buckets": sorted({r["buckets"] for r in jobs}),
                "buckets_predicted": sorted({r["buckets_predicted"] for r in jobs}),
                "layouts_as_predicted": sum(r["layout_as_predicted"] for r in jobs),
                "measured": [min(measured), statistics.median(measured), max(measured)],
                "predicted": [min(predicted), statistics.median(predicted), max(predicted)],
                "error_of_medians": statistics.median(predicted) / statistics.median(measured) - 1,
                "errors": [min(r["error"] for r in jobs), max(r["error"] for r in jobs)],
                "own_error": statistics.median(r["own_error"] for r in jobs),
            })
    return out


def markdown(document: dict[str, Any]) -> str:
    """The result table of :func:`run_rounds`' rows, with what is measured and what predicted."""
    lines_of = summary(document["results"])
    ms = lambda x: f"{1e3 * x:.2f}"  # noqa: E731
    spread = lambda s: " / ".join(ms(x) for x in s)  # noqa: E731
    pct = lambda x: f"{100 * x:+.0f}%"  # noqa: E731
    others = [s for s in lines_of if s["bucket_cap_mb"] != "unset"]
    median_error = statistics.median(abs(s["error_of_medians"]) for s in others) if others else float("nan")
    widest = max((s["measured"][2] / s["measured"][0] - 1 for s in lines_of), default=float("nan"))
    load = document["load_average"]
    lines = [
        "# Traced steps under other bucket settings: predicted from one job's traces, against measured jobs",
        "",
        f"{document['date']}; {document['host']}; 1-minute load average {load['before']:.2f} before the run and "
        f"{load['after']:.2f} after it: other work shared the cores, and every time below is a timing of that "
        f"loaded host. Written by `{document['command']}`.",
        "",
        f"Each job: 2-rank gloo DDP on this host's CPU, 1 thread per rank, {document['steps']} steps (2 not traced), "
        f"SGD with momentum, traced by the PyTorch profiler. {document['rounds']} rounds; in each, every model runs "
        "its four settings one after another, in an order rotated by one each round.",
        "",
        "* **measured**: the mean traced step period of the job run with that `bucket_cap_mb` (min / median / max "
        "over the rounds; the spread is max / min - 1);",
        "* **predicted**: from the traces of the same round's job with `bucket_cap_mb` unset (its profile with the "
        "step parts, the all-reduce cost fitted to its collectives), DDP's buckets for the setting built on that "
        "profile and the step simulated: `solve(predict_traced_step(unset_job).problem, \"ddp\", "
        "bucket_cap_mb=...)`. Nothing of the job run with the setting goes into it;",
        "* **error of medians**: median predicted / median measured - 1; **per round**: the lowest and highest "
        "(predicted - measured) / measured of one round's pair; **own traces**: the median error of each job's "
        "step predicted from its own traces (`fusionopt traced`), for comparison;",
        "* **buckets**: DDP's buckets as the job launched them / as predicted; **layout**: rounds in which the "
        "launched buckets hold exactly the parameters predicted.",
        "",
        f"**Median |error of medians| over the settings not traced: {100 * median_error:.0f}%**; the widest "
        f"spread of one setting's measured step over the rounds: {100 * widest:.0f}%.",
        "",
    ]
    lines += markdown_table(
        ["model", "bucket_cap_mb", "buckets", "layout", "measured (ms)", "spread", "predicted (ms)",
         "error of medians", "per round", "own traces"],
        [[s["model"], s["bucket_cap_mb"],
          f"{'/'.join(map(str, s['buckets']))} / {'/'.join(map(str, s['buckets_predicted']))}",
          f"{s['layouts_as_predicted']} of {s['rounds']}", spread(s["measured"]),
          f"{100 * (s['measured'][2] / s['measured'][0] - 1):.0f}%", spread(s["predicted"]),
          pct(s["error_of_medians"]), f"{pct(s['errors'][0])} .. {pct(s['errors'][1])}", pct(s["own_error"])]
         for s in lines_of])
    lines += ["", "Jobs in the order they ran (ms):", ""]
    lines += markdown_table(
        ["round", "model", "bucket_cap_mb", "measured", "predicted from unset", "error"],
        [[r["round"], r["model"], r["bucket_cap_mb"], ms(r["measured"]), ms(r["predicted"]), pct(r["error"])]
         for r in sorted(document["results"], key=lambda r: (r["round"], [m for m, _ in MODELS].index(r["model"]),
                                                              r["position"]))])
    return "\n".join(lines) + "\n"
