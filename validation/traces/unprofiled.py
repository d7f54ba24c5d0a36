"""Traced GPU jobs without the profiler: the step predicted from each job's traces with the
profiler's cost taken out, against the same job's step measured without the profiler.

The jobs are the seven one-rank NCCL DDP jobs traced on one H100 on 2026-11-27 (torch 2.11,
``torch.profiler`` with CPU and CUDA activities and shapes, six traced steps), kept in
``validation/data/h100-2026-11-27/traces/<precision>/<model>/``: the rank's trace,
``parameters.csv`` and ``unprofiled.json`` (the job's step measured without the profiler right
after the trace, ``ddp_plain_median``, and the traced period as the recorder read it, with
their source). Measured there: every trace, the traced period and the unprofiled step.
Predicted here, by :func:`fusionopt.integrations.predict_traced_step`: the traced
job's step (``predicted``, against the traced period) and the step without the profiler
(``predicted_unprofiled``, against ``ddp_plain_median``): each step replayed with the
profiler's cost per recorded event taken out (these jobs carry no measured cost:
the default, ``DEFAULT_PROFILER_COST``), read and simulated as the traced job.

The default cost is fitted here: ``--fit`` (part of the stored run) predicts every job at
each cost of a grid and names the cost whose largest |error| over the jobs is least; the
table shows every job's error at each. The per-step table shows each traced step and its
replay, where the host's speed from one step to the next shows.

Writes ``validation/results/traces-gpu.{json,md}`` (``--out`` to choose the folder); a run
with other arguments than the stored result's writes into ``validation/results/subset/``,
and Ctrl-C writes the jobs finished to ``traces-gpu.interrupted.{md,json}``. It needs no GPU:
the traces are read, not recorded.

    python validation/traces/unprofiled.py --fit            # the stored result
    python validation/traces/unprofiled.py --traces DIR     # job folders with unprofiled.json
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fusionopt.integrations import (  # noqa: E402
    documents_by_rank, TracedStep, folder_parameters, predict_traced_step, DEFAULT_PROFILER_COST,
    read_unprofiled_reference,
)
from fusionopt.reporting import (Progress, changed_options, command_line, interrupted_path,  # noqa: E402
                                 markdown_table, subset_location, write_result)

TRACES = ROOT / "validation" / "data" / "h100-2026-11-27" / "traces"
# The profiler's cost per recorded event tried by --fit, microseconds.
GRID_US = (0.0, 1.0, 2.0, 2.5, 2.75, 3.0, 3.25, 3.5, 4.0)
PARTS = ("forward", "backward", "update", "update_lump", "post_backward", "host_overhead", "exposed")
MEASURED = "one NVIDIA H100 80GB HBM3, 16 CPU cores, torch 2.11.0+cu130, NCCL 2.28.9, on 2026-11-27"


def job_folders(root: Path) -> list[Path]:
    """Every folder under ``root`` holding a trace and ``unprofiled.json``, sorted."""
    found = sorted(Path(folder) for folder, _, files in os.walk(root)
                   if "unprofiled.json" in files and any(f.endswith((".json.gz", ".pt.trace.json")) for f in files))
    if not found:
        raise ValueError(f"{root}: no job folder (traces with unprofiled.json) in it or below it")
    return found


def row(name: str, folder: Path, result: TracedStep) -> dict[str, Any]:
    reference = read_unprofiled_reference(folder)
    return {
        "job": name,
        "tensors": result.profile.n,
        "steps": result.profile.metadata["steps"],
        "predicted": result.predicted,
        "measured_in_trace": result.measured,
        "recorded_in_trace": reference.measured_in_trace,
        "error": result.error,
        "predicted_unprofiled": result.predicted_unprofiled,
        "measured_unprofiled": reference.seconds,
        "unprofiled_error": result.unprofiled_error,
        "replayed": result.replayed,
        "profiler_cost": {"seconds_per_event": result.profiler_cost.seconds_per_event,
                          "source": result.profiler_cost.source},
        "clock": result.profile.metadata["timeline"],
        "unprofiled_clock": result.unprofiled_profile.metadata["timeline"],
        "unprofiled_parts": {k: result.unprofiled_parts[k] for k in PARTS},
        "replays": [{"step": s.label, "traced": s.traced, "replayed": s.replayed, "host": s.host, "gpu": s.gpu,
                     "events": s.events} for steps in result.replays.values() for s in steps],
        "source": reference.source,
    }


def fit(jobs: list[tuple[str, Path]], progress: Progress) -> dict[str, Any]:
    """Every job's unprofiled error at each cost of :data:`GRID_US`, and the cost whose
    largest |error| is least."""
    progress.stage("fit", total=len(jobs))
    errors: dict[str, list[float]] = {}
    for name, folder in jobs:
        job, parameters = documents_by_rank(folder), folder_parameters(folder)
        measured = read_unprofiled_reference(folder).seconds
        errors[name] = []
        for c in GRID_US:
            predicted = predict_traced_step(job, parameters, profiler_cost=c * 1e-6).predicted_unprofiled
            errors[name].append((predicted - measured) / measured)
        progress.step(f"{name}: " + ", ".join(f"{c:g} us {100 * e:+.1f}%" for c, e in zip(GRID_US, errors[name])))
    largest = [max(abs(errors[name][k]) for name in errors) for k in range(len(GRID_US))]
    best = min(range(len(GRID_US)), key=lambda k: largest[k])
    return {"grid_us": list(GRID_US), "errors": errors, "largest": largest, "best_us": GRID_US[best]}


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1e3 * seconds:.2f}"


def _pct(error: float | None) -> str:
    return "-" if error is None else f"{100 * error:+.1f}%"


def markdown(document: dict[str, Any]) -> str:
    rows = document["results"]
    cost = document["profiler_cost"]
    lines = [
        "# Traced GPU jobs without the profiler: predicted against measured",
        "",
        f"Measured on {document['measured']}: the traces, the traced periods and the steps without the profiler. "
        f"Read and predicted here: {document['date']}, {document['host']}. Written by `{document['command']}`.",
        "",
        f"The profiler's cost taken out where a job carries none measured: {1e6 * cost['seconds_per_event']:.3g} us "
        f"per recorded event ({cost['source']}: {cost['detail']}).",
        "",
        f"**|error| of the step without the profiler: median {100 * document['summary']['unprofiled_median']:.1f}%, "
        f"largest {100 * document['summary']['unprofiled_largest']:.1f}%** over {len(rows)} jobs; "
        f"{document['summary']['unprofiled_within_10']} of {len(rows)} within 10%. The traced step: median "
        f"{100 * document['summary']['traced_median']:.1f}%, largest {100 * document['summary']['traced_largest']:.1f}%.",
        "",
    ]
    lines += markdown_table(
        ["job", "traced period, measured (ms)", "traced: predicted (ms)", "error",
         "unprofiled, measured (ms)", "unprofiled: predicted (ms)", "error", "replayed steps (ms)",
         "profiler cost (us per event)", "clock (unprofiled)"],
        [[r["job"], _ms(r["measured_in_trace"]), _ms(r["predicted"]), _pct(r["error"]), _ms(r["measured_unprofiled"]),
          _ms(r["predicted_unprofiled"]), _pct(r["unprofiled_error"]), _ms(r["replayed"]),
          f"{1e6 * r['profiler_cost']['seconds_per_event']:.3g} ({r['profiler_cost']['source']})", r["unprofiled_clock"]]
         for r in rows])
    lines += ["", "Measured: the traced period (the mean of the six traced steps, read from the trace) and the "
              "unprofiled step (`ddp_plain_median` of `unprofiled.json`: the same job's steps right after the trace, "
              "synchronised, median of 15). Predicted: both steps, from the trace alone and the profiler's cost. "
              "Replayed steps: the mean of the replayed steps' periods, which the unprofiled prediction models.", ""]
    lines += ["Where the time goes without the profiler, ms per step (predicted):", ""]
    lines += markdown_table(["job"] + list(PARTS), [[r["job"]] + [_ms(r["unprofiled_parts"][k]) for k in PARTS]
                                                     for r in rows])
    lines += ["", "Each traced step and its replay, ms (traced / replayed; the host's speed varies from step to "
              "step in these traces):", ""]
    width = max(len(r["replays"]) for r in rows)
    lines += markdown_table(["job", "unprofiled, measured"] + [f"step {k + 1}" for k in range(width)],
                            [[r["job"], _ms(r["measured_unprofiled"])]
                             + [f"{_ms(s['traced'])} / {_ms(s['replayed'])}" for s in r["replays"]] for r in rows])
    lines += ["", "What each job's own measurements imply the profiler cost, us per recorded event: (traced period "
              "- unprofiled step) / recorded events per traced step. One constant cost fits the jobs only as far as "
              "these agree. Where the GPU bounds the step the profiler's host time hides behind GPU work (the replay "
              "models that), so a small implied cost there is expected; where the host bounds it, a job whose traced "
              "steps include one no slower than its unprofiled median was measured unprofiled on a slower host than "
              "traced, and no profiler cost accounts for that.", ""]
    lines += markdown_table(["job", "events per step", "implied cost (us per event)", "fastest traced step (ms)",
                             "unprofiled, measured (ms)", "note"],
                            [[r["job"], f"{implied(r)[0]:.0f}", f"{implied(r)[1]:.2f}",
                              _ms(min(s["traced"] for s in r["replays"])), _ms(r["measured_unprofiled"]),
                              "a traced step, profiler included, ran no slower than the unprofiled median"
                              if min(s["traced"] for s in r["replays"]) <= r["measured_unprofiled"] else ""]
                             for r in rows])
    if document.get("fit"):
        fitted = document["fit"]
        lines += ["", f"The profiler's cost fitted (`--fit`): each job's unprofiled error at each cost; the least "
                      f"largest |error| is at **{fitted['best_us']:g} us**.", ""]
        lines += markdown_table(["cost (us per event)"] + list(fitted["errors"]) + ["largest |error|"],
                                [[f"{c:g}"] + [_pct(fitted["errors"][name][k]) for name in fitted["errors"]]
                                 + [f"{100 * fitted['largest'][k]:.1f}%"] for k, c in enumerate(fitted["grid_us"])])
    return "\n".join(lines) + "\n"


def implied(r: dict[str, Any]) -> tuple[float, float]:
    """A job's recorded events per traced step and the profiler cost per event (us) that its
    traced period and unprofiled step imply."""
    events = statistics.mean(s["events"] for s in r["replays"])
    return events, 1e6 * (r["measured_in_trace"] - r["measured_unprofiled"]) / events


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    unprofiled = [abs(r["unprofiled_error"]) for r in rows]
    traced = [abs(r["error"]) for r in rows]
    return {"unprofiled_median": statistics.median(unprofiled), "unprofiled_largest": max(unprofiled),
            "unprofiled_within_10": sum(e <= 0.10 for e in unprofiled),
            "traced_median": statistics.median(traced), "traced_largest": max(traced)}


def parse_arguments(argv: list[str] | None) -> tuple[argparse.Namespace, str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", default=str(TRACES), help="the job folders under this folder (default: the H100 "
                                                              "traces of 2026-11-27 kept in validation/data)")
    parser.add_argument("--fit", action="store_true", help="also predict every job at each profiler cost of a grid")
    parser.add_argument("--out", default=str(ROOT / "validation" / "results"), help="folder of the result files")
    args = parser.parse_args(argv)
    changed = changed_options(parser, args, reference={"fit": True}, leave=("out",))
    return args, subset_location(args.out, parser.get_default("out"), changed, folder=True)


def main(argv: list[str] | None = None) -> int:
    args, folder = parse_arguments(argv)
    argv = sys.argv[1:] if argv is None else argv
    root = Path(args.traces)
    try:
        jobs = [(str(job.relative_to(root)) if job != root else root.name, job) for job in job_folders(root)]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stem = "traces-gpu"
    with Progress(interrupted_path(os.path.join(folder, f"{stem}.md"))) as progress, warnings.catch_warnings():
        warnings.simplefilter("ignore")      # one-rank jobs and the default cost, said once in the result
        progress.stage("jobs", total=len(jobs))
        results = []
        for name, job in jobs:
            try:
                results.append(row(name, job, predict_traced_step(job)))
            except ValueError as exc:
                print(f"error: {name}: {exc}", file=sys.stderr)
                return 2
            r = results[-1]
            progress.keep({"interrupted": True, "results": list(results)})
            progress.step(f"{name}: traced {_ms(r['measured_in_trace'])} ms, predicted {_ms(r['predicted'])} ms; "
                          f"unprofiled {_ms(r['measured_unprofiled'])} ms, predicted "
                          f"{_ms(r['predicted_unprofiled'])} ms ({_pct(r['unprofiled_error'])})")
        document = {
            "measured": MEASURED,
            "date": datetime.date.today().isoformat(),
            "host": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
            "command": command_line("validation/traces/unprofiled.py", argv, args.out),
            "profiler_cost": {"seconds_per_event": DEFAULT_PROFILER_COST.seconds_per_event,
                              "source": DEFAULT_PROFILER_COST.source, "detail": DEFAULT_PROFILER_COST.detail},
            "results": results,
            "summary": summary(results),
        }
        if args.fit:
            document["fit"] = fit(jobs, progress)
        write_result(folder, stem, document, markdown(document))
    return progress.exit_code


if __name__ == "__main__":
    sys.exit(main())
