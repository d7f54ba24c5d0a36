"""What goes on the wire, measured: real DDP on gloo ranks over an emulated link, its default
fp32 buckets against torch's fp16, bf16 and PowerSGD hooks and against the advice (the exact
DP's grouping and encodings, with and without the PowerSGD hook as a choice), the measured
speedups against the predicted ones.

For each model (``--models``: ``mlp``, ``cnn`` of
:func:`fusionopt.integrations.small_model`) on ``--ranks`` gloo ranks (one torch
thread each), batch ``--batch``, SGD with momentum, and each link of ``--links`` (a network
preset and the workers its all-reduce is priced for; by default 10 GbE and 1 GbE at 64):

1. measured first, apart from the steps predicted: the profile (``profile_model``, every
   rank; rank 0's is used), what each of torch's cast hooks costs this host per bucket, its
   cast of a buffer to fp16 or bf16 divided by the world size and the copy back, and what
   torch's ``powerSGD_hook`` at ``--powersgd-rank`` computes per bucket once its warm-up is
   over (its all-reduces done at once; one square matrix a bucket), each the median of
   ``REPEATS`` runs at sizes from 4 kB to 4 MB, fitted ``seconds_per_message +
   seconds_per_byte S`` (:func:`fusionopt.executor.fit_alpha_beta`: relative residuals, each
   term at least 0);
2. predicted (rank 0) on ``network(NAME, WORKERS)``'s all-reduce: DDP's default buckets in
   fp32, the same buckets in fp16 and in bf16 (``Encoded``; the fitted casts) and through the
   PowerSGD hook (:func:`~fusionopt.solvers.baselines.ddp_powersgd`, its compute the fit,
   ``start_powerSGD_iter`` :data:`START_ITER`), the advice: the exact DP on ``Cheapest([fp32,
   fp16])`` (the error budget: fp16 where it pays), its buckets as ``bucket_cap_mb_list``
   (:func:`~fusionopt.advice.ddp_settings`) and each message's encoding, and the advice with
   the hook as one more choice per message (``Problem(..., compressor=PowerSGD(...))``);
   and each again with DDP's reducer's own cost (``with_reducer_overhead``: per step, per
   bucket on the link, per bucket on the compute stream), measured apart before the ranks
   start by ``measure_reducer_overhead("ddp")`` (``--calibration-rounds``; 0: none) or read
   from a calibration measured apart (``--reducer-calibration FILE``, as ``fusionopt
   calibrate --reducer ddp`` writes it);
3. measured: a copy of the model per setting, each DDP with every bucket held on an emulated
   link of that network (:mod:`fusionopt.integrations._emulated_link`; the fp16 and bf16
   settings through its hook of that encoding, torch's ``_compress_hook`` with the link
   holding the cast bytes: torch 2.13 refuses its own bf16 hook without CUDA and NCCL; the
   PowerSGD settings through torch's own hook, each of its three all-reduces held on the link,
   each bucket on a process group of its own: :func:`~fusionopt.integrations.powersgd_comm_hook`),
   after ``--warmup`` untimed steps of each (at least the hook's warm-up), ``--rounds``
   rounds of ``--steps`` steps of each setting, the order rotated every round; a setting's
   round is its mean step on rank 0. Each speedup over the default comes with a 95%
   bootstrap interval over the paired rounds.

The advice runs as :func:`~fusionopt.integrations.apply_advice` builds it: its buckets, each
sent in the encoding its ``wire`` says or through the PowerSGD hook
(:func:`~fusionopt.integrations.wire_comm_hook` on the link), so an advice that mixes
encodings is measured too. Not modelled: a gloo all-reduce between two processes takes time
of its own, which a hold of one message overlaps; but each rank holds on its own clock, and
the hook posts its next all-reduce only once the last one is back, so in its chain of three
a rank that posted later holds the others back by that time again, which the prediction
leaves out (the link's ``log`` shows each message's posting and end). Writes ``validation/results/wire-cpu.{json,md}``; a run with other
arguments writes into ``validation/results/subset/``. Timings of this host, on an emulated
link: they vary from run to run.

    python validation/wire/run.py
    python validation/wire/run.py --models mlp --rounds 2 --steps 2      # into results/subset/
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation" / "frameworks"))

from fusionopt.reporting import read_json_document, write_json_atomic  # noqa: E402
from fusionopt.integrations import (measure_reducer_overhead, read_reducer_calibration,  # noqa: E402
                                    reducer_cost_words)
from fusionopt.reporting import (changed_options, command_line, markdown_table, nonnegative_int,  # noqa: E402
                                 positive_int, subset_location, write_result)
from harness import (build_model, calibration_files, measure_profile, measure_rounds,  # noqa: E402
                     speedup_interval, training_step)

RESULTS = ROOT / "validation" / "results"
MODELS = ("mlp", "cnn")
SETTINGS = ("default", "fp16", "bf16", "advised", "powersgd", "advised-powersgd")
SIZES = tuple(4096 * 4 ** k for k in range(6))      # 4 kB to 4 MB of fp32 gradients
REPEATS = 21
START_ITER = 2                                       # torch's least start_powerSGD_iter with error feedback
LINKS = (("10gbe", 64), ("1gbe", 64))


def parse_links(parser: argparse.ArgumentParser, text: str) -> list[tuple[str, int]]:
    """``--links``: ``[(network preset, workers), ...]``; the parser's one-line error otherwise."""
    from fusionopt.cost import network

    links = []
    for part in (p.strip() for p in text.split(",")):
        name, _, workers = part.partition(":")
        try:
            count = int(workers)
            network(name, count)
        except ValueError as error:
            parser.error(f"--links: {part!r}: {error}" if workers.strip().isdigit()
                         else f"--links: {part!r} is not NETWORK:WORKERS")
        links.append((name, count))
    return links


class _LocalGroup:
    """A group of ``size`` ranks whose all-reduce is done at once and changes nothing: what
    :func:`measure_powersgd` gives torch's hook, so that only its own compute is timed."""

    def __init__(self, size: int) -> None:
        self._size = size

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return 0

    def allreduce(self, tensors: list[Any], options: Any) -> Any:
        import torch

        future = torch.futures.Future()
        future.set_result(tensors)

        class Done:
            def get_future(self) -> Any:
                return future

            def wait(self, timeout: Any = None) -> bool:
                return True
        return Done()


class _Bucket:
    """One matrix as DDP's ``GradBucket`` shows it to the hook: the flat buffer, its view."""

    def __init__(self, n: int) -> None:
        import torch

        self._buffer = torch.randn(n * n)

    def buffer(self) -> Any:
        return self._buffer

    def gradients(self) -> list[Any]:
        n = int(round(self._buffer.numel() ** 0.5))
        return [self._buffer.view(n, n)]

    def index(self) -> int:
        return 0

    def is_last(self) -> bool:
        return True


def measure_powersgd(ranks: int, rank: int) -> dict[str, Any]:
    """What torch's ``powerSGD_hook`` at ``rank`` computes this host around a bucket of ``S``
    fp32 bytes once its warm-up is over (error feedback, the three products and two
    orthogonalisations, the copies), its all-reduces done at once: ``seconds_per_message +
    seconds_per_byte S`` fitted as :func:`measure_casts`, on one square matrix a bucket. At a
    given rank the products' flops are proportional to the bytes of a compressed matrix, so
    the per-byte term carries them (``seconds_per_flop`` 0)."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    medians = []
    for size in SIZES:
        n = int(round((size // 4) ** 0.5))
        state = psgd.PowerSGDState(process_group=_LocalGroup(ranks), matrix_approximation_rank=rank,
                                   start_powerSGD_iter=START_ITER)
        bucket = _Bucket(n)
        times = []
        for k in range(START_ITER + REPEATS):
            begin = time.perf_counter()
            psgd.powerSGD_hook(state, bucket).wait()
            if k >= START_ITER:
                times.append(time.perf_counter() - begin)
        medians.append(float(np.median(times)))
    return fitted([4 * int(round((size // 4) ** 0.5)) ** 2 for size in SIZES], medians)


def measure_casts(ranks: int, dtype: Any) -> dict[str, float]:
    """What torch's hook of ``dtype`` costs this host around a bucket of ``S`` fp32 bytes (the
    cast divided by ``ranks``, the copy back), seconds: ``seconds_per_message +
    seconds_per_byte S`` fitted on the medians at :data:`SIZES` (:func:`fitted`)."""
    import torch

    medians = []
    for size in SIZES:
        buffer = torch.randn(size // 4)
        times = []
        for _ in range(REPEATS):
            begin = time.perf_counter()
            half = buffer.to(dtype).div_(ranks)
            buffer.copy_(half)
            times.append(time.perf_counter() - begin)
        medians.append(float(np.median(times)))
    return fitted(list(SIZES), medians)


def fitted(sizes: list[int], medians: list[float]) -> dict[str, Any]:
    """``seconds_per_message + seconds_per_byte S`` through the medians (seconds) at ``sizes``
    (bytes): :func:`fusionopt.executor.fit_alpha_beta`, both terms at least 0."""
    from fusionopt.executor import fit_alpha_beta

    fit = fit_alpha_beta(sizes, medians)
    return {"seconds_per_byte": fit.beta, "seconds_per_message": fit.alpha, "sizes": sizes, "medians": medians}


def predict(profile: Any, name: str, workers: int, casts: dict[str, dict[str, float]],
            powersgd_rank: int, reducer: Any = None) -> dict[str, Any]:
    """Each setting's predicted step (seconds), the advices' DDP arguments and encodings;
    with ``reducer`` (a DDP :class:`~fusionopt.integrations.ReducerCalibration`) each step
    again with the reducer's own cost (``predicted_with_reducer``), the plans unchanged."""
    from fusionopt.advice import ddp_settings
    from fusionopt.cost import network, Cheapest, Encoded, PowerSGD
    from fusionopt.model import Plan, Problem, simulate
    from fusionopt.cost import BF16, FP16, FP32, encodings_of
    from fusionopt.integrations import with_reducer_overhead
    from fusionopt.solvers import solve
    from fusionopt.solvers.baselines import ddp_powersgd

    fp16, bf16 = (e.with_costs(seconds_per_byte=casts[e.name]["seconds_per_byte"],
                               seconds_per_message=casts[e.name]["seconds_per_message"]) for e in (FP16, BF16))
    link = network(name, workers)
    plain = Problem(profile, link, step_parts="fit")
    allowed = Cheapest(link, [FP32, fp16])
    joint = Problem(profile, allowed, step_parts="fit")
    default = solve(plain, "ddp").plan
    settings = ddp_settings(joint, solve(joint, "dp").plan)
    advised = Plan.from_groups(profile, [list(b) for b in settings.buckets])
    encodings = encodings_of(advised.message_bytes, allowed)
    hook = PowerSGD(rank=powersgd_rank, start_iter=START_ITER,
                    seconds_per_byte=casts["powersgd"]["seconds_per_byte"],
                    seconds_per_message=casts["powersgd"]["seconds_per_message"])
    choice = Problem(profile, allowed, compressor=hook, step_parts="fit")
    through = ddp_settings(choice, solve(choice, "dp").plan)
    chosen = Plan.from_groups(profile, [list(b) for b in through.buckets])
    on_ddp = ddp_powersgd(plain, hook)

    def steps(priced: Any) -> dict[str, float]:
        """Each setting's step on the problems ``priced`` turns the model's into."""
        return {"default": simulate(priced(plain), default).iteration_time,
                **{e.name: simulate(priced(Problem(profile, Encoded(link, e), step_parts="fit")),
                                    default).iteration_time for e in (fp16, bf16)},
                "advised": simulate(priced(joint), advised).iteration_time,
                "powersgd": ddp_powersgd(priced(plain), hook).iteration_time,
                "advised-powersgd": simulate(priced(choice), chosen).iteration_time}

    with_reducer = {} if reducer is None else {
        "predicted_with_reducer": steps(lambda problem: with_reducer_overhead(problem, reducer))}
    return {"predicted": steps(lambda problem: problem), **with_reducer,
            "advice": settings.to_dict(), "encodings": encodings,
            "advice_powersgd": through.to_dict(), "powersgd": hook.to_dict(),
            "encodings_powersgd": choice.message_encodings(chosen.message_bytes,
                                                           [m.tensors for m in chosen.messages]),
            "compression_rate": on_ddp.stats["compression_rate"],
            "messages": {"default": default.num_messages, "advised": advised.num_messages,
                         "advised-powersgd": chosen.num_messages}}


def _rank(rank: int, port: int, out: str, args: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args["ranks"])
    rows = []
    try:
        casts = {"fp16": measure_casts(args["ranks"], torch.float16),
                 "bf16": measure_casts(args["ranks"], torch.bfloat16),
                 "powersgd": measure_powersgd(args["ranks"], args["powersgd_rank"])}
        shared: list[Any] = [casts]
        dist.broadcast_object_list(shared, src=0)             # rank 0's casts price every prediction
        casts0 = shared[0]
        for name in args["models"]:
            profile, x = measure_profile(name, rank, args, dist)
            for network_name, workers in args["links"]:
                row = {"model": name, "network": network_name, "workers": workers, "profile": profile.to_dict(),
                       "casts": casts0}
                rows.append(row)
                _measure_link(row, x, rank, args, dist)
                if rank == 0:
                    write_json_atomic(out, rows)
    finally:
        dist.destroy_process_group()


def _measure_link(row: dict[str, Any], x: Any, rank: int, args: dict[str, Any], dist: Any) -> None:
    """One model on one link: the predictions (rank 0's, shared), then every setting measured."""
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    from fusionopt.cost import network
    from fusionopt.integrations import (apply_advice, apply_defaults, EmulatedLink, ddp_comm_hook, powersgd_comm_hook,
                                        read_reducer_calibration)
    from fusionopt.model import Profile

    reducer = None if args["reducer"] is None else read_reducer_calibration(args["reducer"])
    solved = [predict(Profile.from_dict(row["profile"]), row["network"], row["workers"], row["casts"],
                      args["powersgd_rank"], reducer) if rank == 0 else None]
    dist.broadcast_object_list(solved, src=0)
    row.update(solved[0])
    models = {}
    for setting in SETTINGS:
        torch.manual_seed(0)
        fresh, _ = build_model(row["model"])
        link = EmulatedLink(network(row["network"], row["workers"]))
        if setting == "advised":                   # its buckets, each in the encoding the advice's wire says
            wrapped = apply_advice(fresh, {"ddp": row["advice"]}, framework="ddp", link=link)
        elif setting == "advised-powersgd":        # and some through torch's PowerSGD hook
            wrapped = apply_advice(fresh, {"ddp": row["advice_powersgd"]}, framework="ddp", link=link)
        elif setting == "powersgd":                # DDP's buckets, each through the hook, a group of its own
            wrapped = apply_defaults(fresh, "ddp")
            p = row["powersgd"]
            state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=p["rank"],
                                       min_compression_rate=p["min_compression_rate"],
                                       start_powerSGD_iter=p["start_iter"])
            groups = [dist.new_group() for _ in range(row["messages"]["default"])]
            wrapped.register_comm_hook(state, powersgd_comm_hook(state, link, groups))
        else:
            wrapped = apply_defaults(fresh, "ddp")
            wrapped.register_comm_hook(None, ddp_comm_hook(link, {"default": "fp32"}.get(setting, setting)))
        models[setting] = (wrapped, torch.optim.SGD(wrapped.parameters(), lr=1e-3, momentum=0.9))
    steps = {setting: training_step(*models[setting], x) for setting in models}
    row["rounds"] = measure_rounds(steps, args, dist)
    row["measured"] = {setting: speedup_interval(row["rounds"]["default"], row["rounds"][setting])
                       for setting in row["rounds"] if setting != "default"}


def markdown(document: dict[str, Any]) -> str:
    ms = lambda t: f"{1e3 * t:.2f}"  # noqa: E731
    lines = ["# What goes on the wire, measured on gloo (CPU)", "",
             f"Real DDP on {document['ranks']} gloo ranks of this host, every bucket held on an **emulated link**, "
             "each of " + ", ".join(f"`network('{n}', {w})`" for n, w in document["links"])
             + f"; {document['rounds']} rounds of "
             f"{document['steps']} steps a setting after {document['warmup']} warm-up steps. Written by "
             f"`{document['command']}` on {document['date']}. Measured: the steps, the casts' cost and the PowerSGD "
             f"hook's compute (rank {document.get('powersgd_rank', 1)}, its all-reduces left out); predicted: the "
             "simulator's steps from the profile and the costs measured first (nothing fitted on the steps). "
             "`powersgd`: DDP's buckets, each through torch's `powerSGD_hook` (each of its three all-reduces held "
             "on the link), once its warm-up is over; `advised-powersgd`: the exact DP choosing each bucket's "
             "grouping and whether it goes in fp32, in fp16 or through the hook. Timings of this host.", ""]
    reducer = document.get("reducer")
    if reducer:
        where = (f"read from `{reducer['file']}` (measured apart)" if reducer.get("file") else
                 "measured before the ranks started by `measure_reducer_overhead(\"ddp\")` on its synthetic model")
        lines += [f"`with reducer`: the same plans with DDP's reducer's own cost, {where}: "
                  f"{reducer_cost_words(reducer)} (the channel is the link; a `powersgd` bucket pays "
                  "the cost per bucket for each of the hook's three all-reduces). The speedups are the model's "
                  "alone.", ""]
    header = ["model", "link", "setting", "casts (us + ps/B)", "buckets", "encodings", "predicted (ms)",
              *(["with reducer (ms)"] if reducer else []), "measured (ms)",
              "predicted speedup", "measured speedup (95% CI)", "measured / predicted"]
    rows = []
    for r in document["results"]:
        link = f"{r['network']} x{r['workers']}"
        for setting in SETTINGS:
            if setting not in r["predicted"]:          # a result of a run before the setting was measured
                continue
            predicted = r["predicted"][setting]
            encodings = _encodings(r, setting)
            cast = r["casts"].get("powersgd" if "powersgd" in encodings else encodings)
            casts = "-" if cast is None else \
                f"{1e6 * cast['seconds_per_message']:.1f} + {1e12 * cast['seconds_per_byte']:.1f}"
            buckets = r["messages"].get(setting, r["messages"]["default"])
            shown = [ms(predicted), *([ms(r["predicted_with_reducer"][setting])] if reducer else [])]
            if setting not in r["rounds"]:
                rows.append([r["model"], link, setting, casts, buckets, encodings, *shown, "-", "-",
                             r.get("not_measured", "-"), "-"])
                continue
            measured = float(np.mean(r["rounds"][setting]))
            if setting == "default":
                speed = ["1", "1", "-"]
            else:
                m = r["measured"][setting]
                p = r["predicted"]["default"] / predicted
                speed = [f"{p:.3f}", f"{m['speedup']:.3f} ({m['ci'][0]:.3f} to {m['ci'][1]:.3f})",
                         f"{m['speedup'] / p:.3f}"]
            rows.append([r["model"], link, setting, casts, buckets, encodings, *shown, ms(measured), *speed])
    lines += markdown_table(header, rows)
    lines += ["", *_summary(document["results"])]
    return "\n".join(lines) + "\n"


def _summary(results: list[dict[str, Any]]) -> list[str]:
    """Per model and link, the fastest setting measured and predicted; the speedups' median
    |measured / predicted - 1|."""
    lines, ratios = [], []
    for r in results:
        measured = {s: float(np.mean(r["rounds"][s])) for s in SETTINGS if s in r.get("rounds", {})}
        if not measured:
            continue
        predicted = {s: r["predicted"][s] for s in measured}
        ratios += [r["measured"][s]["speedup"] * predicted[s] / predicted["default"] for s in r["measured"]]
        fast_m = min(measured, key=measured.__getitem__)
        least = min(predicted.values())
        fast_p = [s for s in predicted if predicted[s] <= least * (1 + 1e-9)]       # ties: the same plan priced
        named = ", ".join(f"`{s}`" for s in fast_p) + (" (tied)" if len(fast_p) > 1 else "")
        slowest = max(measured[s] for s in fast_p) / measured[fast_m]
        lines.append(f"* {r['model']} on {r['network']} x{r['workers']}: fastest measured `{fast_m}`, predicted "
                     f"{named}" + ("." if fast_m in fast_p else f" (measured up to {slowest:.3f}x the fastest)."))
    if ratios:
        lines.append(f"* Measured speedup over predicted: median |ratio - 1| {100 * float(np.median(np.abs(np.array(ratios) - 1))):.1f}%, "
                     f"from {min(ratios):.3f} to {max(ratios):.3f}, over {len(ratios)} settings.")
    for key, label in (("predicted", "the model alone"), ("predicted_with_reducer", "with the reducer's cost")):
        errors = step_errors(results, key)
        if errors:
            models = sorted({r["model"] for r in results if key in r}, key=MODELS.index)
            each = "; ".join(f"{m} {min(e):.3f} to {max(e):.3f}"
                             for m in models for e in [step_errors([r for r in results if r["model"] == m], key)])
            lines.append(f"* Measured step over predicted, {label}: median |ratio - 1| "
                         f"{100 * float(np.median(np.abs(np.array(errors) - 1))):.1f}%, from {min(errors):.3f} to "
                         f"{max(errors):.3f}, over {len(errors)} settings ({each}).")
    return lines


def step_errors(results: list[dict[str, Any]], key: str = "predicted") -> list[float]:
    """Each measured setting's mean step over its step predicted under ``key``
    (``"predicted"`` or ``"predicted_with_reducer"``); none where a result has no such key."""
    return [float(np.mean(r["rounds"][s])) / r[key][s] for r in results if key in r
            for s in SETTINGS if s in r.get("rounds", {})]


def _encodings(row: dict[str, Any], setting: str) -> str:
    """The encodings a setting sends its buckets in, as the table names them."""
    if setting == "advised":
        return ", ".join(sorted(set(row["encodings"])))
    if setting == "advised-powersgd":
        return ", ".join(sorted(set(row["encodings_powersgd"])))
    return {"default": "fp32"}.get(setting, setting)


def main(argv: list[str] | None = None) -> int:
    import datetime

    import torch.multiprocessing as mp

    from fusionopt.integrations import free_port

    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated: mlp, cnn")
    parser.add_argument("--ranks", type=positive_int, default=2, help="gloo ranks (default 2)")
    parser.add_argument("--links", default=",".join(f"{n}:{w}" for n, w in LINKS),
                        help="comma-separated NETWORK:WORKERS, each link emulated in turn: a network preset and the "
                             "workers its all-reduce is priced for (default " + ",".join(f"{n}:{w}" for n, w in LINKS)
                             + ")")
    parser.add_argument("--batch", type=positive_int, default=32, help="batch per rank (default 32)")
    parser.add_argument("--rounds", type=positive_int, default=20, help="measured rounds (default 20)")
    parser.add_argument("--steps", type=positive_int, default=5, help="steps a setting each round (default 5)")
    parser.add_argument("--warmup", type=positive_int, default=3,
                        help=f"untimed steps first (default 3; at least {START_ITER}, the PowerSGD hook's warm-up)")
    parser.add_argument("--powersgd-rank", type=positive_int, default=1,
                        help="the PowerSGD hook's matrix_approximation_rank (default 1, torch's)")
    parser.add_argument("--profile-steps", type=positive_int, default=10, help="profiled steps (default 10)")
    parser.add_argument("--calibration-rounds", type=nonnegative_int, default=3,
                        help="rounds of DDP's reducer calibration, measured before the ranks start (default 3; 0: "
                             "predict without the reducer's cost)")
    parser.add_argument("--calibration-steps", type=positive_int, default=20,
                        help="timed steps per sample of that calibration (default 20)")
    parser.add_argument("--reducer-calibration", metavar="FILE",
                        help="DDP's reducer calibration measured apart (fusionopt calibrate --reducer ddp) on --ranks "
                             "ranks, instead of measuring one")
    parser.add_argument("--out", default=str(RESULTS), help="folder of the result files")
    args = parser.parse_args(argv)
    if args.warmup < START_ITER:
        parser.error(f"--warmup {args.warmup}: the PowerSGD settings compress from step {START_ITER} on, and the "
                     f"rounds must time them compressing: give at least {START_ITER}")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if not models or unknown:
        parser.error(f"--models: choose from {', '.join(MODELS)}, got {args.models!r}")
    folder = subset_location(args.out, parser.get_default("out"), changed_options(parser, args, leave=("out",)),
                             folder=True)
    settings = {key: getattr(args, key) for key in ("ranks", "batch", "rounds", "steps", "warmup", "profile_steps",
                                                    "powersgd_rank")}
    settings["links"] = parse_links(parser, args.links)
    given = None
    if args.reducer_calibration is not None:                # one line if it is not DDP's on --ranks ranks
        calibration_files(parser, [args.reducer_calibration], [args.ranks], reducers=("ddp",))
        given = read_reducer_calibration(args.reducer_calibration)
    reducer: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory() as scratch:
        out = str(Path(scratch) / "rows.json")
        path = args.reducer_calibration
        try:
            if given is None and args.calibration_rounds:
                print(f"wire: measuring DDP's reducer on {args.ranks} ranks", file=sys.stderr)
                given = measure_reducer_overhead("ddp", args.ranks, steps=args.calibration_steps,
                                                 rounds=args.calibration_rounds)
                path = str(Path(scratch) / "reducer.json")
                given.write(path)
            if given is not None:
                reducer = {**given.to_dict(), **({"file": Path(args.reducer_calibration).name}
                                                 if args.reducer_calibration else {})}
            mp.spawn(_rank, args=(free_port(), out, {**settings, "models": models,
                                                     "reducer": None if given is None else path}),
                     nprocs=args.ranks, join=True)
        except KeyboardInterrupt:
            print("wire: interrupted; nothing written", file=sys.stderr)
            return 130
        results = read_json_document(out)
    document = {"schema": "fusionopt.validation.wire-cpu", "version": 2, **settings, "reducer": reducer,
                "command": command_line("validation/wire/run.py", argv, args.out),
                "date": datetime.date.today().isoformat(), "results": results}
    write_result(folder, "wire-cpu", document, markdown(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
