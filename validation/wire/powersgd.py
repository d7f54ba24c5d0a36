"""PowerSGD across the zoo: where torch's ``powerSGD_hook`` beats the fp16 hook and DDP's
default, and what the grouping that is best under the hook adds.

The jobs are ``validation/wire/study.py``'s: zoo models on H100s (ResNet-50 and VGG-16 at batch
64, BERT-base and GPT-2 at batch 8), on ``network(NAME, workers)``'s ring all-reduce for 10 GbE
and 100 Gb InfiniBand, at ``--workers`` (default 8, 64, 256 and 1024). The hook runs at each
of ``--ranks`` (default 1 and 4) with torch's other defaults (``min_compression_rate`` 2),
priced as MODEL.md section 2.4 says. Its compute is **estimated**, not measured; each estimate
is an option:

* ``--per-byte``: 4.2 ps per byte of a bucket. That is 11 passes over it at 2.6 TB/s of an
  H100's HBM3: error feedback reads two and writes one, the copy two, the error three, and the
  three products read the matrix once each.
* ``--per-flop``: 1/60 ps, 60 TFLOP/s of fp32.
* ``--per-message``: 50 us a bucket, the launches of the products and orthogonalisations.

The fp16 hook is priced as in ``study.py``.

Each job's figures are the simulator's (seconds of a step):

* DDP's buckets: in fp32 (the default), with the fp16 hook, and with the PowerSGD hook at each
  rank, once its warm-up steps are over;
* the fusion DP's optimum under the hook at each rank (``solve(PowerSGD.priced(problem), "dp")``);
* the joint optimum: the fusion DP choosing each message's grouping and whether it goes in
  fp32, in fp16 or through the hook at that rank (``Problem(profile, Cheapest(link, [fp32,
  fp16]), compressor=hook)``, MODEL.md section 2.4), with the messages it sends through the
  hook, against the best single choice (the DP's optimum in fp32, in fp16, or under the hook);
* the step's compression rate (torch's ``compression_stats``);
* which of the three hooks is fastest on DDP's buckets.

The computation is deterministic: rerunning it reproduces every figure. It writes
``validation/results/wire-powersgd.{json,md}``; other arguments write into
``validation/results/subset/``.

    python validation/wire/powersgd.py
    python validation/wire/powersgd.py --workers 8 --ranks 2       # into results/subset/
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fusionopt.reporting import changed_options, command_line, counts, markdown_table, subset_location  # noqa: E402
from validation.wire.study import CAST_PER_BYTE, CAST_PER_MESSAGE, job_parser, run_jobs  # noqa: E402

RANKS = (1, 4)
PER_BYTE = 11 / 2.6e12
PER_FLOP = 1 / 60e12
PER_MESSAGE = 50e-6


def run_job(model: str, batch: int, network_name: str, workers: int, ranks: list[int],
            prices: dict[str, float]) -> dict[str, Any]:
    from fusionopt import zoo
    from fusionopt.cost import FP16, FP32, Cheapest, Encoded, PowerSGD, network
    from fusionopt.model import Problem
    from fusionopt.solvers import solve
    from fusionopt.solvers.baselines import ddp_powersgd

    profile = zoo.profile(model, device="h100", batch=batch)
    link = network(network_name, workers)
    problem = Problem(profile, link)
    fp16 = FP16.with_costs(seconds_per_byte=CAST_PER_BYTE, seconds_per_message=CAST_PER_MESSAGE)
    row: dict[str, Any] = {"model": model, "batch": batch, "network": network_name, "workers": workers,
                           "compute": profile.compute_time, "ddp": solve(problem, "ddp").iteration_time,
                           "ddp_fp16": solve(Problem(profile, Encoded(link, fp16)), "ddp").iteration_time,
                           "dp": solve(problem, "dp").iteration_time,
                           "dp_fp16": solve(Problem(profile, Encoded(link, fp16)), "dp").iteration_time,
                           "powersgd": []}
    for rank in ranks:
        hook = PowerSGD(rank=rank, **prices)
        on_ddp = ddp_powersgd(problem, hook)
        choice = Problem(profile, Cheapest(link, [FP32, fp16]), compressor=hook)
        joint = solve(choice, "dp")
        plan = joint.plan
        sent = choice.message_encodings(plan.message_bytes, [m.tensors for m in plan.messages])
        row["powersgd"].append({"rank": rank, "ddp": on_ddp.iteration_time,
                                "dp": solve(hook.priced(problem), "dp").iteration_time,
                                "compression_rate": on_ddp.stats["compression_rate"],
                                "compressed": len(on_ddp.stats["compressed"]),
                                "joint": joint.iteration_time, "joint_messages": len(sent),
                                "joint_through": sent.count(hook.name)})
    hooks = {"fp32": row["ddp"], "fp16": row["ddp_fp16"],
             **{f"powersgd-{p['rank']}": p["ddp"] for p in row["powersgd"]}}
    row["fastest"] = min(hooks, key=hooks.__getitem__)
    return row


def markdown(document: dict[str, Any]) -> str:
    ms = lambda t: f"{1e3 * t:.2f}"  # noqa: E731
    p = document["prices"]
    lines = ["# PowerSGD across the zoo (predicted)", "",
             f"Zoo models on H100s, ring all-reduce on two networks; torch's `powerSGD_hook` as MODEL.md section 2.4 "
             f"prices it. Its compute is estimated at {1e12 * p['seconds_per_byte']:.3g} ps per bucket byte, "
             f"{1e12 * p['seconds_per_flop']:.3g} ps per flop and {1e6 * p['seconds_per_message']:.3g} us per bucket. "
             f"These are estimates, not measurements, and the fp16 hook is priced as in `wire-study.md`. Written by "
             f"`{document['command']}`; every figure is the simulator's, a step once the hook's warm-up is over.", "",
             "The speedups are over DDP's default step (fp32). `DP r` is the fusion DP's grouping under the hook at "
             "rank r. `rate` is the step's compression rate, elements before over after. `joint r` is the fusion "
             "DP choosing each message's grouping and whether it travels in fp32, in fp16 or through the hook at rank "
             "r (through: the messages sent through the hook, of all); its gain is over the best single choice, the "
             "DP's optimum in fp32, in fp16 or under the hook.", ""]
    ranks = [q["rank"] for q in document["results"][0]["powersgd"]] if document["results"] else []
    header = ["model", "network", "workers", "DDP fp32 (ms)", "DDP + fp16 hook"]
    for r in ranks:
        header += [f"DDP + PowerSGD r={r}", f"DP r={r}", f"rate r={r}", f"joint r={r}", "through", "over best single"]
    header.append("fastest hook")
    rows = []
    for row in document["results"]:
        cells = [row["model"], row["network"], row["workers"], ms(row["ddp"]),
                 f"{ms(row['ddp_fp16'])} ({row['ddp'] / row['ddp_fp16']:.2f}x)"]
        for q in row["powersgd"]:
            cells += [f"{ms(q['ddp'])} ({row['ddp'] / q['ddp']:.2f}x)", f"{ms(q['dp'])} ({row['ddp'] / q['dp']:.2f}x)",
                      f"{q['compression_rate']:.1f}", f"{ms(q['joint'])} ({row['ddp'] / q['joint']:.2f}x)",
                      f"{q['joint_through']} of {q['joint_messages']}", f"{_best_single(row, q) / q['joint']:.3f}x"]
        cells.append(row["fastest"])
        rows.append(cells)
    lines += markdown_table(header, rows)
    s = document["summary"]
    lines += ["", f"* The fastest hook on DDP's buckets, of {s['jobs']} jobs: "
                  + ", ".join(f"{name} in {count}" for name, count in s["fastest"].items()) + "."]
    for r, (low, high) in s["dp_over_ddp"].items():
        lines.append(f"* At rank {r}, the DP's grouping under the hook against DDP's buckets under it: "
                     f"{low:.3f}x to {high:.3f}x.")
    for r, (low, high, mixed) in s["joint_over_single"].items():
        lines.append(f"* At rank {r}, the joint optimum against the best single choice: {low:.3f}x to {high:.3f}x; "
                     f"it mixes the hook with fp32 or fp16 messages in {mixed} of {s['jobs']} jobs.")
    return "\n".join(lines) + "\n"


def _best_single(row: dict[str, Any], q: dict[str, Any]) -> float:
    """The best single choice's step: the DP's optimum in fp32, in fp16 or under the hook."""
    return min(row["dp"], row["dp_fp16"], q["dp"])


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    fastest: dict[str, int] = {}
    for row in results:
        fastest[row["fastest"]] = fastest.get(row["fastest"], 0) + 1
    gains: dict[str, list[float]] = {}
    joint: dict[str, list[float]] = {}
    mixed: dict[str, int] = {}
    for row in results:
        for q in row["powersgd"]:
            gains.setdefault(str(q["rank"]), []).append(q["ddp"] / q["dp"])
            joint.setdefault(str(q["rank"]), []).append(_best_single(row, q) / q["joint"])
            mixed[str(q["rank"])] = mixed.get(str(q["rank"]), 0) + int(0 < q["joint_through"] < q["joint_messages"])
    return {"jobs": len(results), "fastest": dict(sorted(fastest.items())),
            "dp_over_ddp": {r: [min(g), max(g)] for r, g in gains.items()},
            "joint_over_single": {r: [min(g), max(g), mixed[r]] for r, g in joint.items()}}


def main(argv: list[str] | None = None) -> int:
    from fusionopt.cost import PowerSGD

    argv = sys.argv[1:] if argv is None else argv
    parser = job_parser(__doc__)
    parser.add_argument("--ranks", type=counts(1, "PowerSGD ranks"), default=list(RANKS),
                        help="comma-separated matrix approximation ranks (default 1,4)")
    parser.add_argument("--per-byte", type=float, default=PER_BYTE, metavar="S",
                        help="the hook's seconds per byte of a bucket (default an H100 estimate, 4.2 ps)")
    parser.add_argument("--per-flop", type=float, default=PER_FLOP, metavar="S",
                        help="the hook's seconds per flop of its products (default 1/60 ps)")
    parser.add_argument("--per-message", type=float, default=PER_MESSAGE, metavar="S",
                        help="the hook's seconds per bucket besides (default 50 us)")
    args = parser.parse_args(argv)
    prices = {"seconds_per_byte": args.per_byte, "seconds_per_flop": args.per_flop,
              "seconds_per_message": args.per_message}
    try:
        PowerSGD(**prices)
    except ValueError as exc:
        parser.error(str(exc))
    changed = changed_options(parser, args, leave=("out",))
    folder = subset_location(args.out, parser.get_default("out"), changed, folder=True)
    document: dict[str, Any] = {
        "schema": "fusionopt.validation.wire-powersgd", "version": 1, "prices": prices,
        "command": command_line("validation/wire/powersgd.py", argv, args.out), "results": []}
    return run_jobs(folder, "wire-powersgd", document, args.workers, lambda *job: run_job(*job, args.ranks, prices),
                    summary, markdown, lambda row: f"fastest {row['fastest']}")


if __name__ == "__main__":
    sys.exit(main())
