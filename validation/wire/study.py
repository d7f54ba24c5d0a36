"""What goes on the wire, across the zoo: where fp16 (or bf16) messages pay, the crossover
size, and how far the joint optimum of grouping and encodings is from the best single choice.

Each job is a zoo model on H100s (ResNet-50 and VGG-16 at batch 64, BERT-base and GPT-2 at
batch 8) on ``network(NAME, workers)``'s ring all-reduce for 10 GbE and 100 Gb InfiniBand and
``--workers`` (default 8, 64, 256 and 1024). The encodings are fp32 and fp16 as torch's
``fp16_compress_hook`` sends them (MODEL.md section 2.2), the casts priced at
``--cast-per-byte`` seconds per fp32 byte and ``--cast-per-message`` seconds a message.
The defaults are **estimates**, not measurements: a cast reads and writes 3 bytes of memory
per fp32 byte, both ways, at 2.6 TB/s of an H100's HBM3 (1.15 ps/B), and the hook launches
three kernels a message (10 us). bf16 costs what fp16 costs on the wire and in casts in
this model; it differs in its error bound (2**-8 against 2**-11) and range, so every
figure for fp16 is bf16's too.

Per job, all predicted by the simulator (seconds of a step):

* DDP's buckets in fp32 (the default) and with the hook (every bucket in fp16), the casts on
  the message's path; and the same with the part of the cast torch 2.13's ``_compress_hook``
  runs in the hook's call on the backward's stream (``buffer.to(dtype).div_(world_size)``:
  half the estimate's bytes, the cast's, and two of its three kernels) as the encoding's
  compute-stream part (MODEL.md section 2.2), the copy back in the callback on the path;
* the exact fusion DP's optimum with every message in fp32, with every message in fp16 (the
  casts on the path, and on the backward's stream as above), and jointly (``Cheapest([fp32, fp16])``: each message in its cheaper encoding);
* the joint optimum's fp16 messages and bytes, and the crossover size above which fp16 is
  the cheaper (:func:`~fusionopt.cost.crossovers`);
* the best single choice's gap to the joint optimum (the DP's fp32 or fp16 optimum,
  whichever is faster);
* an error budget per tensor: the 1-D tensors (biases and norms, by the profile's shapes)
  kept exact (``Problem(exact_tensors=...)``), every message carrying one in fp32. The joint
  DP's optimum under it is over fusion plans (messages of tensors contiguous in the ready
  order), where the 1-D tensors lie between the weights; beside it, the optimum of plans that
  may send them apart (``dp-apart``: each message a run of the 1-D tensors and a run of the
  others, as a reducer that buckets them apart would send them, DDP with them in another
  dtype among them).

A deterministic computation: rerunning reproduces every figure. Writes
``validation/results/wire-study.{json,md}``; other arguments write into
``validation/results/subset/``.

    python validation/wire/study.py
    python validation/wire/study.py --workers 8 --cast-per-message 50e-6     # into results/subset/
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fusionopt.reporting import (Progress, changed_options, command_line, counts, interrupted_path,  # noqa: E402
                                 markdown_table, subset_location, write_result)

RESULTS = ROOT / "validation" / "results"
MODELS = (("resnet50", 64), ("vgg16", 64), ("bert-base", 8), ("gpt2", 8))
NETWORKS = ("10gbe", "100gb-ib")
WORKERS = (8, 64, 256, 1024)
CAST_PER_BYTE = 3 / 2.6e12
CAST_PER_MESSAGE = 10e-6
ON_STREAM_BYTE = 1 / 2          # of the cast's bytes: the cast to fp16 (the copy back is the other half)
ON_STREAM_MESSAGE = 2 / 3       # of its launches: the cast and the division, of three kernels


def on_the_stream(fp16: Any) -> Any:
    """``fp16`` with the part of its cast the hook runs on the backward's stream moved there."""
    return fp16.with_costs(seconds_per_byte=fp16.seconds_per_byte * (1 - ON_STREAM_BYTE),
                           seconds_per_message=fp16.seconds_per_message * (1 - ON_STREAM_MESSAGE),
                           compute_per_byte=fp16.seconds_per_byte * ON_STREAM_BYTE,
                           compute_per_message=fp16.seconds_per_message * ON_STREAM_MESSAGE)


def run_job(model: str, batch: int, network_name: str, workers: int, fp16: Any) -> dict[str, Any]:
    from fusionopt import zoo
    from fusionopt.cost import network, Cheapest, Encoded
    from fusionopt.model import Problem
    from fusionopt.cost import FP32, crossovers, encodings_of
    from fusionopt.solvers import solve

    profile = zoo.profile(model, device="h100", batch=batch)
    link = network(network_name, workers)
    joint_cost = Cheapest(link, [FP32, fp16])
    stream = Problem(profile, Encoded(link, on_the_stream(fp16)))
    times = {"ddp": solve(Problem(profile, link), "ddp").iteration_time,
             "ddp_fp16": solve(Problem(profile, Encoded(link, fp16)), "ddp").iteration_time,
             "ddp_fp16_stream": solve(stream, "ddp").iteration_time,
             "dp": solve(Problem(profile, link), "dp").iteration_time,
             "dp_fp16": solve(Problem(profile, Encoded(link, fp16)), "dp").iteration_time,
             "dp_fp16_stream": solve(stream, "dp").iteration_time}
    joint = solve(Problem(profile, joint_cost), "dp")
    chosen = encodings_of(joint.plan.message_bytes, joint_cost)
    sizes = joint.plan.message_bytes.tolist()
    best_single = min(times["dp"], times["dp_fp16"])
    exact = [i for i, shape in enumerate(profile.shapes) if len(shape) == 1]
    kept = Problem(profile, joint_cost, exact_tensors=exact)
    return {"model": model, "batch": batch, "network": network_name, "workers": workers,
            "compute": profile.compute_time, **times, "joint": joint.iteration_time,
            "messages": len(sizes), "fp16_messages": chosen.count(fp16.name),
            "fp16_bytes": sum(s for s, e in zip(sizes, chosen) if e == fp16.name), "bytes": sum(sizes),
            "crossovers": crossovers(link, [FP32, fp16], upto=float(profile.sizes.sum())),
            "best_single": "fp32" if times["dp"] <= times["dp_fp16"] else "fp16",
            "single_gap": best_single / joint.iteration_time - 1.0, "exact_tensors": len(exact),
            "joint_exact": solve(kept, "dp").iteration_time,
            "exact_apart": solve(kept, "dp-apart").iteration_time}


def markdown(document: dict[str, Any]) -> str:
    ms = lambda t: f"{1e3 * t:.2f}"  # noqa: E731
    lines = ["# What goes on the wire across the zoo (predicted)", "",
             f"Zoo models on H100s, ring all-reduce on two networks; fp16 messages as torch's `fp16_compress_hook` "
             f"sends them, the casts estimated at {1e12 * document['cast_per_byte']:.3g} ps per fp32 byte and "
             f"{1e6 * document['cast_per_message']:.3g} us a message (estimates, not measurements; bf16's figures are "
             f"fp16's). Written by `{document['command']}`; every figure is the simulator's.", "",
             "Speedup: DDP's default step over the step named. Crossover: the message size above which fp16 is the "
             "cheaper. Single gap: the faster of the DP's all-fp32 and all-fp16 optima over the joint optimum. "
             "1-D exact: the biases and norms kept exact (every message carrying one in fp32), the joint optimum over "
             "fusion plans; apart: the optimum of plans that may send them apart (`dp-apart`: each message a run of "
             "them and a run of the others); each against the joint optimum without the budget.", ""]
    header = ["model", "network", "workers", "DDP fp32 (ms)", "DDP + fp16 hook", "hook, cast on the stream",
              "DP fp32", "DP fp16", "DP fp16, cast on the stream", "joint", "joint's fp16 messages", "crossover (B)",
              "best single", "single gap", "joint, 1-D exact", "1-D exact, apart"]
    rows = []
    for r in document["results"]:
        cross = ", ".join(f"{c:.3g}" for c in r["crossovers"]) or "none"
        rows.append([r["model"], r["network"], r["workers"], ms(r["ddp"]),
                     f"{ms(r['ddp_fp16'])} ({r['ddp'] / r['ddp_fp16']:.2f}x)",
                     f"{ms(r['ddp_fp16_stream'])} ({r['ddp'] / r['ddp_fp16_stream']:.2f}x)", ms(r["dp"]),
                     ms(r["dp_fp16"]), ms(r["dp_fp16_stream"]),
                     f"{ms(r['joint'])} ({r['ddp'] / r['joint']:.2f}x)",
                     f"{r['fp16_messages']} of {r['messages']} ({100 * r['fp16_bytes'] / r['bytes']:.1f}% of bytes)",
                     cross, r["best_single"], f"{100 * r['single_gap']:.3f}%",
                     f"{ms(r['joint_exact'])} (+{100 * (r['joint_exact'] / r['joint'] - 1):.1f}%)",
                     f"{ms(r['exact_apart'])} ({100 * (r['exact_apart'] / r['joint'] - 1):+.1f}%)"])
    lines += markdown_table(header, rows)
    s = document["summary"]
    lines += ["", f"* The hook alone against DDP's default: {s['hook_faster']} of {s['jobs']} jobs faster, speedups "
                  f"{s['hook_speedup'][0]:.2f}x to {s['hook_speedup'][1]:.2f}x.",
              f"* With the cast to fp16 on the backward's stream, as the hook runs it, against the whole cast on "
              f"the message's path: the hook's step {100 * s['stream_cost'][0]:+.2f}% to "
              f"{100 * s['stream_cost'][1]:+.2f}%, the DP's fp16 optimum {100 * s['stream_cost_dp'][0]:+.2f}% to "
              f"{100 * s['stream_cost_dp'][1]:+.2f}% (shorter where the channel is critical and the cast leaves it, "
              f"longer where the compute is and the cast delays the backward).",
              f"* The joint optimum against DDP's default: speedups {s['joint_speedup'][0]:.2f}x to "
              f"{s['joint_speedup'][1]:.2f}x.",
              f"* The best single choice is within {100 * s['largest_single_gap']:.3f}% of the joint optimum in every "
              f"job; it is fp16 in {s['fp16_best']} of {s['jobs']}.",
              f"* The 1-D tensors (biases, norms) kept exact: the joint optimum over fusion plans grows "
              f"{100 * s['exact_cost'][0]:.1f}% to {100 * s['exact_cost'][1]:.1f}% (every message that carries one "
              f"goes in fp32, and they lie between the weights); with plans that may send them apart, "
              f"{100 * s['apart_cost'][0]:+.1f}% to {100 * s['apart_cost'][1]:+.1f}%."]
    return "\n".join(lines) + "\n"


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    hook = [r["ddp"] / r["ddp_fp16"] for r in results]
    joint = [r["ddp"] / r["joint"] for r in results]
    stream = [r["ddp_fp16_stream"] / r["ddp_fp16"] - 1 for r in results]
    stream_dp = [r["dp_fp16_stream"] / r["dp_fp16"] - 1 for r in results]
    e = [r["joint_exact"] / r["joint"] - 1 for r in results]
    a = [r["exact_apart"] / r["joint"] - 1 for r in results]
    return {"jobs": len(results), "hook_faster": sum(h > 1 for h in hook), "hook_speedup": [min(hook), max(hook)],
            "stream_cost": [min(stream), max(stream)], "stream_cost_dp": [min(stream_dp), max(stream_dp)],
            "joint_speedup": [min(joint), max(joint)],
            "largest_single_gap": max(r["single_gap"] for r in results),
            "fp16_best": sum(r["best_single"] == "fp16" for r in results),
            "exact_cost": [min(e), max(e)], "apart_cost": [min(a), max(a)]}


def main(argv: list[str] | None = None) -> int:
    from fusionopt.cost import FP16

    argv = sys.argv[1:] if argv is None else argv
    parser = job_parser(__doc__)
    parser.add_argument("--cast-per-byte", type=float, default=CAST_PER_BYTE, metavar="S",
                        help="seconds per fp32 byte to encode and decode (default an H100 estimate, 1.15 ps)")
    parser.add_argument("--cast-per-message", type=float, default=CAST_PER_MESSAGE, metavar="S",
                        help="seconds per message to encode and decode (default 10 us)")
    args = parser.parse_args(argv)
    try:
        fp16 = FP16.with_costs(seconds_per_byte=args.cast_per_byte, seconds_per_message=args.cast_per_message)
    except ValueError as exc:
        parser.error(str(exc))
    changed = changed_options(parser, args, leave=("out",))
    folder = subset_location(args.out, parser.get_default("out"), changed, folder=True)
    document: dict[str, Any] = {
        "schema": "fusionopt.validation.wire-study", "version": 1, "cast_per_byte": args.cast_per_byte,
        "cast_per_message": args.cast_per_message, "command": command_line("validation/wire/study.py", argv, args.out),
        "results": []}
    return run_jobs(folder, "wire-study", document, args.workers, lambda *job: run_job(*job, fp16), summary, markdown,
                    lambda row: f"joint {1e3 * row['joint']:.1f} ms")


def job_parser(doc: str) -> argparse.ArgumentParser:
    """A study's parser with the options every wire study takes: ``--workers`` and ``--out``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--workers", type=counts(2, "workers a job"), default=list(WORKERS),
                        help="comma-separated worker counts (default 8,64,256,1024)")
    parser.add_argument("--out", default=str(RESULTS), help="folder of the result files")
    return parser


def run_jobs(folder: str, stem: str, document: dict[str, Any], workers: list[int], run: Any, summarise: Any,
             render: Any, said: Any) -> int:
    """``run(model, batch, network, workers)`` on each job of :data:`MODELS`, :data:`NETWORKS`
    and ``workers``, each row added to ``document``'s results and its summary, kept as it goes
    (an interruption writes what is done), then ``stem``'s JSON and ``render``'s Markdown
    written into ``folder``; the exit code."""
    jobs = [(m, b, n, w) for m, b in MODELS for n in NETWORKS for w in workers]
    with Progress(interrupted_path(str(Path(folder) / f"{stem}.md"))) as progress:
        progress.stage("jobs", total=len(jobs))
        for model, batch, name, count in jobs:
            row = run(model, batch, name, count)
            document["results"].append(row)
            document["summary"] = summarise(document["results"])
            progress.keep(document)
            progress.step(f"{model} {name} {count}: {said(row)}")
        write_result(folder, stem, document, render(document))
    return progress.exit_code


if __name__ == "__main__":
    sys.exit(main())
