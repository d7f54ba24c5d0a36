"""fusionopt's DDP buckets against real DistributedDataParallel, for every zoo model torch
can build here.

For each model (built as in ``validation/models.py``: torch.nn, torchvision, transformers;
no download), the script wraps it in ``DistributedDataParallel`` on a one-process gloo group
on the CPU, records with a comm hook which parameters each bucket holds in the third step
(after DDP's rebuild), and compares that with ``fusionopt.solvers.baselines.ddp_buckets`` on the
zoo's profile of the model: for ``bucket_cap_mb`` unset, 1, 5, 25 and 100 MiB, with
``find_unused_parameters=True``, and for the ``bucket_cap_mb_list`` and single cap that
``advise`` prints for the DP's plan (``--network``, ``--workers``). Layouts depend on sizes,
orders and dtypes only, so the inputs are tiny. A second table, from the model alone, gives
what ``advise`` prints for every zoo model on four networks and the T of each setting.
Writes ``validation/results/frameworks.{json,md}``.

    python validation/frameworks/run.py                       # every model torch can build here
    python validation/frameworks/run.py --models lstm-lm      # one
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation"))

from fusionopt import zoo  # noqa: E402
from fusionopt.cost import network  # noqa: E402
from fusionopt.integrations import ddp_bucket_layout, free_port, require_torch  # noqa: E402
from fusionopt.model import Problem  # noqa: E402
from fusionopt.reporting import (Progress, changed_options, interrupted_path, positive_int,  # noqa: E402
                                 subset_location, write_result)
from fusionopt.solvers import solve  # noqa: E402
from fusionopt.advice import ddp_settings  # noqa: E402
from fusionopt.solvers.baselines import ddp_buckets  # noqa: E402
from models import HUGGINGFACE, buildable, loss_of, zoo_names  # noqa: E402

ADVICE_NETWORKS = ("10gbe", "25gbe", "100gb-ib", "nvlink-h100")


def advice_rows(workers: int) -> list[dict[str, Any]]:
    """What ``advise`` prints for the DP's plan on every zoo model and network (the model
    alone, no torch): whether the list reproduces the plan, and each setting's T."""
    from fusionopt.advice import horovod_settings

    rows = []
    for name in zoo.models():
        profile = zoo.profile(name)
        for net in ADVICE_NETWORKS:
            problem = Problem(profile, network(net, workers))
            plan = solve(problem, "dp").plan
            # Every setting however small its gain (min_gain 0): these rows judge layouts, not advice.
            s = ddp_settings(problem, plan, min_gain=0.0)
            h = horovod_settings(problem, plan, min_gain=0.0)
            rows.append({"model": name, "network": net, "plan": s.plan_iteration_time,
                         "list": s.list_iteration_time, "list_caps": None if s.bucket_cap_mb_list is None
                         else list(s.bucket_cap_mb_list), "cap": s.bucket_cap_mb, "cap_time": s.cap_iteration_time,
                         "unset": s.default_iteration_time, "find_unused": s.find_unused_iteration_time,
                         "horovod": h.iteration_time, "horovod_defaults": h.default_iteration_time})
    return rows


SETTINGS = [("unset", {}), ("1 MiB", {"bucket_cap_mb": 1}), ("5 MiB", {"bucket_cap_mb": 5}),
            ("25 MiB", {"bucket_cap_mb": 25}), ("100 MiB", {"bucket_cap_mb": 100}),
            ("find_unused", {"find_unused_parameters": True})]


def tiny_inputs(name: str, torch: Any) -> Any:
    """The smallest input each model takes (layouts do not depend on it)."""
    if name == "lstm-lm":
        return torch.randint(0, 10000, (4, 1))
    if name in HUGGINGFACE:
        return {"input_ids": torch.randint(0, 1000, (1, 8))}
    side = 299 if name == "inception-v3" else 224
    return torch.randn(2, 3, side, side)       # two samples: batch norm needs more than one value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(zoo.models()))
    parser.add_argument("--network", default="10gbe", help="network preset for the advised settings")
    parser.add_argument("--workers", type=positive_int, default=64)
    parser.add_argument("--output-dir", default=str(ROOT / "validation" / "results"))
    args = parser.parse_args(argv)
    try:
        models = zoo_names(args.models)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        network(args.network, args.workers)
    except ValueError as exc:
        parser.error(f"--network {args.network}: {exc}")
    args.output_dir = subset_location(args.output_dir, parser.get_default("output_dir"),
                                      changed_options(parser, args, leave=("output_dir",)), folder=True)

    advice = advice_rows(args.workers)
    torch = require_torch()
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    with Progress(interrupted_path(Path(args.output_dir) / "frameworks.md")) as progress:
        progress.stage("models", total=len(models))
        rows, skipped = [], []
        try:
            for name, build, _ in buildable(models, torch, progress, skipped):
                model = build().train()
                inputs = tiny_inputs(name, torch)
                profile = zoo.profile(name, order="cpu")      # the real DDP below runs on the CPU
                problem = Problem(profile, network(args.network, args.workers))
                advised = ddp_settings(problem, solve(problem, "dp").plan, min_gain=0.0)   # any gain: layouts
                settings = list(SETTINGS)
                if advised.bucket_cap_mb_list is not None:
                    settings.append(("advised list", {"bucket_cap_mb_list": list(advised.bucket_cap_mb_list)}))
                if advised.bucket_cap_mb is not None:
                    settings.append((f"advised cap {advised.bucket_cap_mb:g} MiB", {"bucket_cap_mb": advised.bucket_cap_mb}))
                for label, options in settings:
                    built = ddp_bucket_layout(model, inputs, loss_fn=loss_of, **options)
                    predicted = [[profile.names[i] for i in bucket] for bucket in ddp_buckets(profile, **options)]
                    rows.append({"model": name, "setting": label, "options": options, "buckets_torch": len(built),
                                 "buckets_fusionopt": len(predicted), "identical": built == predicted})
                    print(f"{name:14s} {label:24s} torch {len(built):3d} buckets, fusionopt {len(predicted):3d}: "
                          f"{'identical' if built == predicted else 'DIFFERENT'}", file=sys.stderr, flush=True)
                progress.keep({"schema": "fusionopt.validation.frameworks", "interrupted": True, "results": list(rows)})
                progress.step(f"{name}: " + ", ".join(f"{r['setting']} {'identical' if r['identical'] else 'DIFFERENT'}"
                                                      for r in rows if r["model"] == name))
        finally:
            dist.destroy_process_group()

        document = {
            "schema": "fusionopt.validation.frameworks", "version": 1, "torch": torch.__version__,
            "libraries": {m: _version(m) for m in ("torch", "torchvision", "transformers")},
            "python": platform.python_version(), "network": args.network, "workers": args.workers,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "results": rows, "skipped": skipped, "advice": advice,
        }
        write_result(args.output_dir, "frameworks", document, markdown(document))
    if progress.interrupted:
        return progress.exit_code
    return 0 if all(r["identical"] for r in rows) else 1


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except (ImportError, RuntimeError):
        return None


def markdown(document: dict) -> str:
    identical = sum(r["identical"] for r in document["results"])
    lines = [
        "# DDP bucket layouts: fusionopt against real DistributedDataParallel",
        "",
        f"{document['date']}; " + ", ".join(f"{k} {v}" for k, v in document["libraries"].items() if v)
        + "; gloo, CPU, world size 1; the layout of the third step (after DDP's rebuild). "
        f"Advised settings for the DP's plan on `{document['network']}`, {document['workers']} workers. "
        "Written by `validation/frameworks/run.py`.",
        "",
        f"**{identical} of {len(document['results'])} layouts identical**, bucket by bucket and parameter by parameter.",
        "",
        "| model | setting | buckets (torch) | buckets (fusionopt) | identical |",
        "|---|---|---:|---:|---|",
    ]
    for r in document["results"]:
        lines.append(f"| {r['model']} | {r['setting']} | {r['buckets_torch']} | {r['buckets_fusionopt']} | "
                     f"{'yes' if r['identical'] else 'NO'} |")
    if document["skipped"]:
        lines += ["", f"Not built here (torchvision or transformers missing or unusable): "
                      f"{', '.join(document['skipped'])}."]
    advice = document["advice"]
    exact = sum(r["list"] is not None and r["list"] == r["plan"] for r in advice)
    lines += ["", f"## What `advise` prints for the DP's plan ({document['workers']} workers)", "",
              f"On {len(advice)} cases (every zoo model x {', '.join(ADVICE_NETWORKS)}; calibrated zoo "
              f"profiles on H100, batch 64), the printed `bucket_cap_mb_list` makes the ddp model (checked above against "
              f"torch) build the DP's plan exactly in **{exact} of {len(advice)}**. T in ms:", "",
              "| model | network | DP plan | `bucket_cap_mb_list` | best single cap | T (cap) | unset | "
              "find_unused (list) | Horovod advised (NCCL) | Horovod defaults (NCCL) |",
              "|---|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in advice:
        cap = "unset" if r["cap"] is None else f"{r['cap']:g} MiB"
        listed = "-" if r["list"] is None else f"{1e3 * r['list']:.2f}"
        lines.append(f"| {r['model']} | {r['network']} | {1e3 * r['plan']:.2f} | {listed} | {cap} | "
                     f"{1e3 * r['cap_time']:.2f} | {1e3 * r['unset']:.2f} | {1e3 * r['find_unused']:.2f} | "
                     f"{1e3 * r['horovod']:.2f} | {1e3 * r['horovod_defaults']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
