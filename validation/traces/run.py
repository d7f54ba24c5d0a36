"""Traced steps against the model: for each data-parallel job traced by the PyTorch profiler,
the step time fusionopt predicts from the job's own traces against the time they measured.

For each job (a folder with one trace per rank), ``fusionopt.integrations._traced_step``
reads the profile (forward, backward, the step parts), fits the all-reduce cost to the traced
collectives, takes DDP's buckets as the job launched them and simulates the step; the table
sets the predicted step against the measured one (means over the steps), part by part.

By default the script first records its own jobs: 2-rank gloo DDP of small ``torch.nn``
models on this host's CPU (``fusionopt.integrations._ddp_record``), gzip on, with and
without a profiler ``schedule``, into a scratch folder it removes afterwards (``--keep``
keeps them). ``--traces DIR`` reads the jobs under ``DIR`` instead: every folder holding
``*.json`` or ``*.json.gz`` traces is one job, its parameter list read from the traces
(``record_shapes=True`` and a ``schedule`` needed) unless the folder holds a
``parameters.csv`` (``name,size_bytes`` in forward order). Traces are only read: keep the
ones you did not make out of the repository.

``--counterfactual`` checks the prediction where it is not bookkeeping: each model's step
under other ``bucket_cap_mb`` settings predicted from the traces of its job with the setting
unset, against jobs run with those settings, in ``--rounds`` rounds (``counterfactual.py``);
it writes ``traces-counterfactual-cpu.{json,md}``.

The figures are timings of this host (named in the result with its CPU count and the
library versions); the recording is seeded, the timings are not reproducible to the digit.
Writes ``validation/results/traces-cpu.{json,md}`` (``--out`` to choose the folder); a run
with other arguments than the stored result's (``--traces``, ``--steps``) writes into
``validation/results/subset/`` instead, and Ctrl-C writes the jobs finished to
``traces-cpu.interrupted.{md,json}``.

    python validation/traces/run.py                      # record and check the jobs below
    python validation/traces/run.py --counterfactual     # other bucket settings, 3 rounds
    python validation/traces/run.py --traces DIR --out OUT_FOLDER
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fusionopt.integrations import TracedStep, predict_traced_step  # noqa: E402
from fusionopt.reporting import (Progress, changed_options, command_line, interrupted_path,  # noqa: E402
                                 markdown_table, positive_int, subset_location, write_result)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import counterfactual  # noqa: E402

# (job name, small model, batch, profiler schedule, bucket_cap_mb): two buckets or one,
# a few layers to a few dozen tensors.
JOBS = (
    ("mlp-b64", "mlp", 64, True, 0.5),
    ("mlp-b64-noschedule", "mlp", 64, False, 0.5),
    ("mlp-b256", "mlp", 256, True, None),
    ("cnn-b16", "cnn", 16, True, None),
    ("cnn-b16-noschedule", "cnn", 16, False, None),
    ("lstm-b32", "lstm", 32, True, 0.5),
)
STEPS = 42
PARTS = ("forward", "backward", "update", "update_lump", "post_backward", "host_overhead", "exposed")


def job_folders(root: Path) -> list[Path]:
    """Every folder under ``root`` (``root`` included) that holds traces, sorted."""
    found = []
    for folder, _, files in os.walk(root):
        if any(f.endswith((".json", ".json.gz")) for f in files):
            found.append(Path(folder))
    if not found:
        raise ValueError(f"{root}: no traces (*.json, *.json.gz) in it or below it")
    return sorted(found)


def row(name: str, result: TracedStep) -> dict[str, Any]:
    return {
        "job": name,
        "tensors": result.profile.n,
        "buckets": result.plan.num_messages,
        "steps": result.profile.metadata["steps"],
        "predicted": result.predicted,
        "measured": result.measured,
        "error": result.error,
        "predicted_parts": {k: result.predicted_parts[k] for k in PARTS},
        "measured_parts": {k: result.measured_parts[k] for k in PARTS},
    }


def record(folder: Path, steps: int) -> list[tuple[str, Path]]:
    from fusionopt.integrations import record_ddp_traces

    jobs = []
    for k, (name, model, batch, schedule, cap) in enumerate(JOBS, start=1):
        print(f"recording job {k}/{len(JOBS)}: {name}", file=sys.stderr, flush=True)
        record_ddp_traces(folder / name, model, batch=batch, schedule=schedule, steps=steps, bucket_cap_mb=cap)
        jobs.append((name, folder / name))
    return jobs


def markdown(document: dict[str, Any]) -> str:
    rows = document["results"]
    median = statistics.median(abs(r["error"]) for r in rows)
    ms = lambda x: f"{1e3 * x:.3f}"  # noqa: E731
    lines = [
        "# Traced steps: predicted against measured",
        "",
        f"{document['date']}; {document['host']}; {document['source']}. "
        f"Written by `{document['command']}`.",
        "",
        f"**Median |predicted - measured| / measured: {100 * median:.1f}%** over {len(rows)} jobs "
        "(timings of this host: they vary from run to run).",
        "",
    ]
    lines += markdown_table(
        ["job", "tensors", "buckets", "steps", "measured (ms)", "predicted (ms)", "error"],
        [[r["job"], r["tensors"], r["buckets"], r["steps"], ms(r["measured"]), ms(r["predicted"]),
          f"{100 * r['error']:+.1f}%"] for r in rows])
    lines += ["", "Where the time goes, ms per step, measured / predicted (the compute parts come from the same "
              "traces; the difference is the exposed communication and how the parts add up):", ""]
    lines += markdown_table(
        ["job"] + list(PARTS),
        [[r["job"]] + [f"{ms(r['measured_parts'][k])} / {ms(r['predicted_parts'][k])}" for k in PARTS] for r in rows])
    return "\n".join(lines) + "\n"


def parse_arguments(argv: list[str] | None) -> tuple[argparse.Namespace, str, str]:
    """The arguments, and the folder and stem of the result files: a run with other arguments
    than the stored result's writes into the ``subset`` folder beside it. Bad arguments exit
    with one line (status 2)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", help="read the jobs under this folder instead of recording them")
    parser.add_argument("--keep", help="record the jobs into this folder and keep them there")
    parser.add_argument("--steps", type=positive_int, default=STEPS,
                        help=f"steps per recorded job, the first 2 not traced (default {STEPS})")
    parser.add_argument("--counterfactual", action="store_true",
                        help="predict other bucket settings from the unset job's traces and run them")
    parser.add_argument("--rounds", type=positive_int,
                        help=f"rounds of jobs of --counterfactual (default {counterfactual.ROUNDS})")
    parser.add_argument("--out", default=str(ROOT / "validation" / "results"), help="folder of the result files")
    args = parser.parse_args(argv)
    if args.steps < 3:
        parser.error(f"--steps must be >= 3 (one step skipped, one warm-up, the rest traced), got {args.steps}")
    if args.traces and (args.keep or args.counterfactual or args.steps != STEPS):
        parser.error("--traces reads recorded jobs: --keep, --steps and --counterfactual record their own")
    if args.rounds is not None and not args.counterfactual:
        parser.error("--rounds applies to --counterfactual")
    if args.keep:
        root = Path(args.keep)
        if root.exists() and (not root.is_dir() or any(root.iterdir())):
            parser.error(f"--keep {root}: not an empty folder: --keep records into a new or empty folder")
    stem = "traces-counterfactual-cpu" if args.counterfactual else "traces-cpu"
    changed = changed_options(parser, args, reference={"counterfactual": args.counterfactual}, leave=("out", "keep"))
    folder = subset_location(args.out, parser.get_default("out"), changed, folder=True)
    return args, folder, stem


def host() -> str:
    import torch

    return f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, torch {torch.__version__}"


def main(argv: list[str] | None = None) -> int:
    args, folder, stem = parse_arguments(argv)
    argv = sys.argv[1:] if argv is None else argv
    scratch = None
    if args.keep:
        root = Path(args.keep)
    elif not args.traces:
        root = scratch = Path(tempfile.mkdtemp(prefix="traces-"))
    load_before = os.getloadavg()[0]
    try:
        with Progress(interrupted_path(os.path.join(folder, f"{stem}.md"))) as progress:
            if args.counterfactual:
                from fusionopt.integrations import record_ddp_traces

                rounds = args.rounds or counterfactual.ROUNDS
                progress.stage("jobs", total=rounds * len(counterfactual.MODELS) * len(counterfactual.SETTINGS))
                rows = counterfactual.run_rounds(root, record_ddp_traces, rounds=rounds, steps=args.steps,
                                                 progress=progress)
                document = {"date": datetime.date.today().isoformat(), "host": host(), "steps": args.steps,
                            "rounds": rounds, "settings": [counterfactual.setting_label(c)
                                                           for c in counterfactual.SETTINGS],
                            "command": command_line("validation/traces/run.py", argv, args.out),
                            "load_average": {"before": load_before, "after": os.getloadavg()[0]},
                            "timings": "measured on the host named, loaded by other work; not reproducible to the digit",
                            "results": rows, "summary": counterfactual.summary(rows)}
                write_result(folder, stem, document, counterfactual.markdown(document))
                return progress.exit_code
            if args.traces:
                root = Path(args.traces)
                try:
                    jobs = [(str(job.relative_to(root)) if job != root else root.name, job)
                            for job in job_folders(root)]
                except ValueError as exc:
                    print(f"error: {exc}", file=sys.stderr)
                    return 2
                source = "traces read from a folder"
            else:
                jobs = record(root, args.steps)
                source = (f"2-rank gloo DDP on this host's CPU, {args.steps} steps per job (2 not recorded with a "
                          "schedule), SGD with momentum, 1 thread per rank")
            progress.stage("jobs", total=len(jobs))
            results = []
            for name, job in jobs:
                try:
                    results.append(row(name, predict_traced_step(job)))
                except ValueError as exc:
                    print(f"error: {name}: {exc}", file=sys.stderr)
                    return 2
                r = results[-1]
                progress.keep({"source": source, "interrupted": True, "results": list(results)})
                progress.step(f"{name}: measured {1e3 * r['measured']:.3f} ms, predicted "
                              f"{1e3 * r['predicted']:.3f} ms ({100 * r['error']:+.1f}%)")
            document = {
                "date": datetime.date.today().isoformat(),
                "host": host(),
                "source": source,
                "command": command_line("validation/traces/run.py", argv, args.out),
                "timings": "measured on the host named; not reproducible to the digit",
                "results": results,
            }
            write_result(folder, stem, document, markdown(document))
        return progress.exit_code
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
