"""``fusionopt sweep``, ``run`` and ``calibrate``: grids of problems, plans on real ranks, costs
measured."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Any, Callable
from fusionopt.cost import network, networks, ALGORITHMS
from fusionopt.integrations._reducer_calibration import (DEFAULT_OPTIMIZER_OPTIONS, REDUCERS, check_optimizer,
                                                         measure_reducer_overhead)
from fusionopt.cli._common import Kept, UsageError, comma_list, fail, json_output, plural
from fusionopt.cli._problems import ZOO_COMPUTE_OPTIONS, add_cost_arguments, add_zoo_arguments, powersgd_from_flags, \
    zoo_settings
from fusionopt.cli._solving import read_problem_and_plan
from fusionopt.reporting import positive_float, positive_int, write_json_atomic


def _cmd_sweep(args: argparse.Namespace) -> None:
    from fusionopt import experiments

    device, batch = zoo_settings(args, None)
    options = {option: getattr(args, option) for option in ZOO_COMPUTE_OPTIONS if getattr(args, option) is not None}
    grid = experiments.cells(comma_list("--models", args.models), comma_list("--workers", args.workers, int),
                       comma_list("--networks", args.networks),
                       comma_list("--methods", args.methods) if args.methods is not None else None,
                       device=device, batch=batch, sync=args.sync, algorithm=args.algorithm, **options)
    to_run = len(experiments.pending_cells(grid, args.output, retry_errors=args.retry_errors,
                                           time_limit=args.time_limit))
    try:
        with contextlib.ExitStack() as stack:
            executor = _dask_executor(args, stack) if (args.dask or args.scheduler) and to_run else None
            records = experiments.run_sweep(grid, args.output, jobs=args.jobs, time_limit=args.time_limit,
                                      progress=not args.no_progress, retry_errors=args.retry_errors,
                                      executor=executor)
    except RuntimeError as exc:     # a worker died or a task was lost: status 1, the file is kept
        fail(exc)
    except KeyboardInterrupt:
        raise Kept(f"the finished cells are in {args.output}: run the same command again to go on") from None
    errors = [r for r in records if r["status"] == "ERROR"]
    print(f"sweep: {plural(len(grid), 'cell')}: {to_run} run now, {len(grid) - to_run} skipped as already done, "
          f"{len(errors)} error(s)")
    for r in errors[:3]:
        print(f"  ERROR {r['model']} {r['workers']} {r['network']} {r['method']}: {r['error']}")
    if len(errors) > 3:
        print(f"  ... and {len(errors) - 3} more (status ERROR in the results)")
    print(f"results: {args.output}")
    if errors:      # the records are kept; the exit status says the sweep is not all done
        raise SystemExit(1)


def _dask_executor(args: argparse.Namespace, stack: contextlib.ExitStack) -> Any:
    """A Dask client's executor: a local cluster of ``--jobs`` workers, or ``--scheduler``'s."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise UsageError("--dask and --scheduler need Dask: pip install 'fusionopt[dask]'") from None
    if args.scheduler:
        try:
            client = stack.enter_context(Client(args.scheduler, timeout=10))
        except OSError as exc:
            raise UsageError(f"--scheduler {args.scheduler}: no Dask scheduler answered ({exc})") from None
        except ValueError as exc:               # not an address: Dask's message names neither flag nor forms
            from distributed.comm.registry import backends

            raise UsageError(f"--scheduler {args.scheduler}: not a Dask scheduler address ({exc}); give "
                             f"SCHEME://HOST:PORT, e.g. tcp://HOST:8786, with SCHEME one of "
                             f"{', '.join(sorted(backends))}") from None
    else:
        workers = args.jobs or os.cpu_count() or 1
        cluster = stack.enter_context(LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None))
        client = stack.enter_context(Client(cluster))
    return client.get_executor()


def add_sweep_parser(commands: Any) -> None:
    p = commands.add_parser("sweep", help="solve models x workers x networks x methods in parallel; resumable")
    p.add_argument("--models", required=True, help="comma-separated zoo models (`fusionopt zoo`)")
    p.add_argument("--workers", required=True, help="comma-separated worker counts, e.g. 8,64,512")
    p.add_argument("--networks", required=True, help=f"comma-separated network presets: {', '.join(networks())}")
    p.add_argument("--methods", help="comma-separated methods (default: the all-reduce comparison for --sync); "
                                     "decoupled and fully sharded methods solve their own pattern on each network "
                                     "preset's reduce-scatter and all-gather")
    p.add_argument("--output", required=True, metavar="RESULTS.jsonl|RESULTS.csv",
                   help="results file, one record per cell; run again on it to resume")
    add_zoo_arguments(p)
    p.add_argument("--sync", default="barrier", choices=("barrier", "layerwise"),
                   help="when the next forward may start (default barrier)")
    p.add_argument("--algorithm", default="ring", help=f"all-reduce algorithm: {', '.join(ALGORITHMS)} (ring or "
                                                       "rabenseifner for decoupled and fully sharded methods)")
    p.add_argument("--jobs", type=int, help="worker processes (default: the number of CPUs)")
    p.add_argument("--time-limit", type=positive_float, metavar="S",
                   help="seconds per solve for the methods that take a time limit (the searches)")
    p.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    engine = p.add_mutually_exclusive_group()
    engine.add_argument("--dask", action="store_true",
                        help="run the cells on a local Dask cluster of --jobs workers (extra dask)")
    engine.add_argument("--scheduler", metavar="tcp://HOST:8786",
                        help="run the cells on the Dask cluster of this scheduler (extra dask)")
    p.add_argument("--retry-errors", action="store_true",
                   help="solve again the cells whose record has status ERROR (default: they count as done)")
    p.set_defaults(run=_cmd_sweep)


# ---------------------------------------------------------------------- executor (run, calibrate)
def cmd_run(args: argparse.Namespace) -> None:
    from fusionopt.executor import CorrectnessError, run

    if powersgd_from_flags(args) is not None:
        raise UsageError("--powersgd-rank: run sends a message through torch's PowerSGD hook where the model prices "
                         "it cheaper than its encoding, and every other as it is: add --powersgd-as-choice")
    profile, problem, plan = read_problem_and_plan(args)
    workers = _run_workers(args)
    try:
        measurement = run(problem, plan, args.backend, ranks=args.ranks, iterations=args.iterations,
                          warmup=args.warmup, time_scale=args.time_scale, timeout=args.timeout,
                          emulate_link=args.emulate_link, compute=args.compute)
        failure = None
    except CorrectnessError as exc:
        measurement, failure = exc.measurement, exc
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    except (RuntimeError, MemoryError) as exc:     # the run itself failed (a rank, a GPU, memory): status 1
        fail(exc)
    if args.json:
        document = measurement.to_dict()
        if workers is not None:
            document["network_workers"] = workers
        print(json.dumps(document, indent=1))
    else:
        if workers is not None:
            print(f"network        {args.network} priced for {workers} workers (--workers); the emulated "
                  f"link holds each message that long on the {measurement.ranks} GPU rank(s) that run (--ranks)")
        print(measurement.summary())
    if failure is not None:
        fail(failure)


def _run_workers(args: argparse.Namespace) -> int | None:
    """--workers for run: the workers the cost model prices, which only an emulated link
    can stand for with fewer ranks; real collectives run over --ranks, and the two must agree."""
    if args.workers is None:
        return None
    ranks = args.ranks if args.ranks is not None else (1 if args.emulate_link else 2)
    if args.emulate_link or args.workers == ranks:
        return args.workers if args.emulate_link and args.network else None
    raise UsageError(f"--workers {args.workers} describes {args.workers} workers, but run measures "
                     f"real collectives over --ranks {ranks}: give --ranks {args.workers} (or leave --workers out), "
                     f"or --backend nccl --emulate-link to emulate {args.workers} workers' network")


def _calibration_files(args: argparse.Namespace) -> tuple[str, ...]:
    """The files ``calibrate --output`` may replace: a calibration of the kind this run makes."""
    if args.reducer is not None:
        return ("fusionopt.reducer_calibration",)
    return ("fusionopt.contention",) if args.contention else ("fusionopt.cost",)


def _cmd_calibrate(args: argparse.Namespace) -> None:
    from fusionopt.executor import calibrate

    if args.encoding is not None:
        for flag, given in (("--reducer", args.reducer is not None), ("--contention", args.contention),
                            ("--alignment", args.alignment), ("--collective", args.collective != "all_reduce")):
            if given:
                raise UsageError(f"--encoding times all-reduce messages sent in it beside fp32 ones; leave {flag} out")
    if args.reducer is not None:
        _calibrate_reducer(args)
        return
    for flag, given in (("--optimizer", args.optimizer), ("--optimizer-option", args.optimizer_option)):
        if given is not None:
            raise UsageError(f"{flag} names the optimiser a reducer calibration steps with and goes with --reducer")
    if args.contention:
        _calibrate_contention(args)
        return
    for flag, given in (("--emulate-network", args.emulate_network), ("--workers", args.workers)):
        if given is not None:
            raise UsageError(f"{flag} names the emulated link of a contention calibration and goes with --contention")
    if args.ranks is None:
        args.ranks = 2
    json_output(args.output, "the cost")
    if args.alignment:
        _calibrate_alignment(args)
        return
    from fusionopt.executor._calibrate import SweepSpec, default_sizes

    count = len(default_sizes(args.min_bytes, args.max_bytes))
    # Each size is timed for about seconds_per_size, after as long again of warm-up and set-up.
    print(f"fusionopt calibrate: timing {count} message sizes on {args.backend} with {args.ranks} ranks, "
          f"about {count * SweepSpec.seconds_per_size * 2:.0f} s", file=sys.stderr, flush=True)
    result = measured(lambda: calibrate(args.backend, ranks=args.ranks, min_bytes=args.min_bytes,
                                        max_bytes=args.max_bytes, iterations=args.iterations, timeout=args.timeout,
                                        collective=args.collective))
    document = result.to_dict(args.model)
    casts = None
    if args.encoding is not None:
        from fusionopt.executor import fit_casts

        encoded = measured(lambda: calibrate(args.backend, ranks=args.ranks, min_bytes=args.min_bytes,
                                             max_bytes=args.max_bytes, iterations=args.iterations,
                                             timeout=args.timeout, encoding=args.encoding))
        casts = fit_casts(result.cost(args.model), encoded)
        document["calibration"]["casts"] = {
            "encoding": casts.to_dict(), "description": encoded.description,
            "points": [[int(s), float(t)] for s, t in zip(encoded.sizes, encoded.times)]}
    if args.output:
        write_json_atomic(args.output, document)
    if args.json:
        print(json.dumps(document, indent=1))
        return
    print(f"backend  {result.description}")
    print(result.table())
    if casts is not None:
        print(f"\n{args.encoding}: the same messages packed narrowed to {args.encoding} and unpacked widened")
        print(encoded.table())
        print(f"{args.encoding} casts on this backend, beyond an fp32 message of the bytes sent: "
              f"{1e6 * casts.seconds_per_message:.3f} us + {1e9 * casts.seconds_per_byte:.4f} ns per fp32 byte "
              f"(price them with --encodings fp32,{args.encoding} --cast-per-message {casts.seconds_per_message:.4g} "
              f"--cast-per-byte {casts.seconds_per_byte:.4g})")
    if args.output:
        flag = {"all_reduce": "--cost", "reduce_scatter": "--reduce-scatter-cost",
                "all_gather": "--all-gather-cost"}[args.collective]
        print(f"wrote {args.output}: the {args.model} fit (read it with {flag} {args.output})")


def _calibrate_alignment(args: argparse.Namespace) -> None:
    """``calibrate --alignment``: the cost sweep around powers of two, and the cliff it shows."""
    from fusionopt.cost import Aligned
    from fusionopt.executor import alignment_sizes, calibrate, fit_alignment

    if args.model != "piecewise":
        raise UsageError("--alignment writes its own fit (the alpha-beta price, padded where a cliff was found): "
                         "leave --model out")
    if args.collective != "all_reduce":
        raise UsageError("--alignment times all-reduce messages; leave --collective out")
    try:
        sizes = alignment_sizes(args.ranks, args.min_bytes, args.max_bytes)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(f"fusionopt calibrate: timing {len(sizes)} message sizes around powers of two on {args.backend} with "
          f"{args.ranks} ranks", file=sys.stderr, flush=True)
    result = measured(lambda: calibrate(args.backend, ranks=args.ranks, sizes=sizes, iterations=args.iterations,
                                        timeout=args.timeout))
    fit = fit_alignment(result.sizes.astype(int), result.times, args.ranks)
    cost = fit.with_padding() if isinstance(fit, Aligned) else fit
    document = cost.to_dict()
    document["calibration"] = {**result.to_dict("alpha-beta")["calibration"], "model": "alignment"}
    if args.output:
        write_json_atomic(args.output, document)
    if args.json:
        print(json.dumps(document, indent=1))
        return
    print(f"backend  {result.description}")
    print(result.table())
    if isinstance(fit, Aligned):
        print(f"alignment: messages whose part on each rank is not a multiple of {fit.unit} bytes take "
              f"{fit.slowdown:.2f}x as long; the cost is the padded price")
    else:
        print("alignment: no cliff (no alignment from 16 to 256 bytes a rank separates the sizes' times by more "
              "than 20%); the cost is the alpha-beta price of the sizes aligned to all of them")
    if args.output:
        print(f"wrote {args.output}: read it with --cost {args.output}")


def _calibrate_reducer(args: argparse.Namespace) -> None:
    """``calibrate --reducer``: a reducer's own cost per step and per message, measured on gloo
    ranks of this host on a synthetic model, written as JSON (for --reducer-calibration)."""
    defaults = {"backend": "local", "model": "piecewise", "min_bytes": 256, "max_bytes": 64 << 20, "iterations": 20,
                "collective": "all_reduce", "timeout": 60.0, "contention": False, "emulate_network": None,
                "workers": None}
    for name, default in defaults.items():
        if getattr(args, name) != default:
            raise UsageError(f"--{name.replace('_', '-')} does not apply to --reducer, which times gloo ranks of "
                             "this host on a synthetic model")
    ranks = 2 if args.ranks is None else args.ranks
    if ranks < 2:
        raise UsageError(f"--ranks {ranks}: --reducer measures a reducer between ranks: give 2 or more")
    optimizer, options = args.optimizer or "SGD", _optimizer_options(args.optimizer_option)
    try:
        measured(lambda: check_optimizer(optimizer, options))
    except ValueError as exc:
        raise UsageError(f"--optimizer: {exc}") from None
    json_output(args.output, "the reducer calibration")
    print(f"fusionopt calibrate: the {args.reducer} reducer's own cost on {ranks} gloo ranks, about a minute "
          "(Ctrl-C stops it)", file=sys.stderr, flush=True)
    result = measured(lambda: measure_reducer_overhead(args.reducer, ranks, optimizer=optimizer,
                                                       optimizer_options=options))
    if written(args, result):
        return
    print(result.summary())
    if args.output:
        print(f"wrote {args.output}: read it with --reducer-calibration {args.output} (simulate, advise)")


def _optimizer_options(given: list[str] | None) -> dict[str, Any]:
    """``--optimizer-option KEY=VALUE`` pairs as keyword arguments (each value JSON: a number,
    true or false, a list) over the calibration's default options."""
    options = dict(DEFAULT_OPTIMIZER_OPTIONS)
    for pair in given or []:
        key, sep, text = pair.partition("=")
        try:
            if not sep or not key.isidentifier():
                raise ValueError
            options[key] = json.loads(text)
        except ValueError:
            raise UsageError(f"--optimizer-option {pair!r}: give KEY=VALUE, VALUE in JSON (momentum=0.9, "
                             "betas=[0.9,0.999], nesterov=true)") from None
    return options


def measured(measure: Callable[[], Any]) -> Any:
    """What ``measure()`` returns; a missing extra is a usage error, a measurement that failed
    (a rank, a GPU) one line with exit status 1."""
    try:
        return measure()
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    except RuntimeError as exc:
        fail(exc)


def written(args: argparse.Namespace, result: Any) -> bool:
    """Write ``result`` to ``--output`` and print it as ``--json``; True when printed so."""
    if args.output:
        result.write(args.output)
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    return bool(args.json)


def _calibrate_contention(args: argparse.Namespace) -> None:
    """``calibrate --contention``: both slowdowns measured on the GPU(s), written as JSON."""
    from fusionopt.executor._contention import DEFAULT_LINK, ContentionSpec, calibrate_contention, check_gpus

    if args.backend != "nccl":
        raise UsageError(f"--contention measures GEMMs and collectives sharing a GPU: it needs --backend nccl, "
                         f"not {args.backend}")
    defaults = {"model": "piecewise", "min_bytes": 256, "max_bytes": 64 << 20, "iterations": 20,
                "collective": "all_reduce"}
    for name, default in defaults.items():
        if getattr(args, name) != default:
            raise UsageError(f"--{name.replace('_', '-')} belongs to the cost sweep; --contention does not take it")
    ranks = 1 if args.ranks is None else args.ranks
    if ranks != 1 and (args.emulate_network is not None or args.workers is not None):
        raise UsageError(f"--emulate-network and --workers name the link one GPU emulates; with --ranks {ranks} "
                         "the collectives are real")
    json_output(args.output, "the contention")
    network_name = args.emulate_network or DEFAULT_LINK[0]
    workers = args.workers if args.workers is not None else DEFAULT_LINK[1]
    link = network(network_name, workers) if ranks == 1 else None
    spec = ContentionSpec(timeout=args.timeout)
    measured(lambda: check_gpus(ranks))
    where = f"an emulated {network_name} link of {workers} workers" if ranks == 1 else f"NCCL over {ranks} GPUs"
    print(f"fusionopt calibrate: contention of GEMMs and messages ({where}) at {len(spec.sizes)} message sizes, "
          "about 10 s", file=sys.stderr, flush=True)
    result = measured(lambda: calibrate_contention(ranks=ranks, link=link, spec=spec, link_name={
        "network": network_name, "workers": workers, "cost": repr(link)}))
    if written(args, result):
        return
    print(f"device   {result.device}: {result.description}")
    print(result.table())
    if args.output:
        print(f"wrote {args.output}: read it with --contention-file {args.output} (contention "
              f"{result.contention:.4g}, comm_contention {result.comm_contention:.4g})")


def add_executor_parsers(commands: Any) -> None:
    p = commands.add_parser("run", help="run a plan with real collectives; measured vs predicted")
    p.add_argument("profile", metavar="PROFILE.json|.csv")
    p.add_argument("--plan", required=True, metavar="PLAN.json")
    p.add_argument("--backend", default="local", choices=("local", "mpi", "nccl"),
                   help="local: threads; mpi: processes under mpiexec (extra mpi); nccl: GPUs (extra gpu)")
    p.add_argument("--ranks", type=int, help="number of ranks (default 2; 1 with --emulate-link)")
    p.add_argument("--iterations", type=int, default=10, help="timed steps (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    p.add_argument("--time-scale", type=float, default=1.0, metavar="X",
                   help="emulated compute runs X times the profile's seconds (default 1)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="seconds a collective may take (default 60)")
    p.add_argument("--emulate-link", action="store_true",
                   help="nccl on one GPU: hold the stream for the cost model's time per message")
    p.add_argument("--compute", default="host", choices=("host", "spin", "gemm"),
                   help="emulated compute: host sleeps (default), or for nccl the whole step queued on GPU "
                        "streams with spin kernels (exact) or GEMMs (contending with NCCL)")
    p.add_argument("--json", action="store_true", help="print the measurement as JSON")
    add_cost_arguments(p, powersgd=True)
    p.set_defaults(run=cmd_run)

    p = commands.add_parser("calibrate", help="time a collective against size on a backend; fit cost models")
    p.add_argument("--backend", default="local", choices=("local", "mpi", "nccl"))
    p.add_argument("--ranks", type=positive_int, help="number of ranks (default 2; 1 with --contention)")
    p.add_argument("--output", metavar="COST.json",
                   help="write the fitted cost model (for --cost), or with --contention the two slowdowns "
                        "(for --contention-file)")
    p.add_argument("--contention", action="store_true",
                   help="instead of a cost sweep, measure on the GPU how much GEMMs slow while messages run and "
                        "messages while GEMMs run (--contention and --comm-contention of the model; nccl only)")
    p.add_argument("--emulate-network", metavar="NAME",
                   help="with --contention on one GPU: the network preset whose link is emulated (default "
                        "100gb-ib, as the stored GPU runs)")
    p.add_argument("--workers", type=int, help="with --contention on one GPU: the workers of --emulate-network "
                                               "(default 8)")
    p.add_argument("--model", default="piecewise", choices=("piecewise", "alpha-beta"),
                   help="which fit --output holds (both are recorded; default piecewise)")
    p.add_argument("--min-bytes", type=positive_int, default=256, help="smallest message (default 256)")
    p.add_argument("--max-bytes", type=positive_int, default=64 << 20, help="largest message (default 64 MiB)")
    p.add_argument("--iterations", type=positive_int, default=20,
                   help="timed messages per size, at most (default 20)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="SECONDS",
                   help="seconds a collective may take (default 60)")
    p.add_argument("--collective", default="all_reduce", choices=("all_reduce", "reduce_scatter", "all_gather"),
                   help="the collective timed (default all_reduce); the sharded ones price --decoupled and "
                        "--fully-sharded problems through --reduce-scatter-cost and --all-gather-cost")
    p.add_argument("--reducer", choices=REDUCERS,
                   help="instead of a cost sweep, measure a gradient reducer's own cost per step and per message "
                        "beyond the link, and (DDP, PlanReducer) per message on the compute stream (DDP, FSDP2 or "
                        "fusionopt's PlanReducer) on gloo ranks of this host; "
                        "--output writes it for --reducer-calibration")
    p.add_argument("--optimizer", metavar="NAME",
                   help="with --reducer: the torch.optim class every calibration step runs, as the training job's "
                        "(default SGD; FSDP2 steps DTensor shards, dearer per tensor than plain ones)")
    p.add_argument("--optimizer-option", action="append", metavar="KEY=VALUE",
                   help="with --reducer: a keyword of --optimizer, VALUE in JSON (default lr=0.001); repeatable")
    p.add_argument("--encoding", choices=("fp16", "bf16"),
                   help="time all-reduce messages sent in this encoding too (narrowed as they are packed, widened "
                        "as they are unpacked, as fusionopt run sends them) and fit what its casts cost beyond an fp32 "
                        "message of the bytes sent; printed as the --cast-per-message and --cast-per-byte to give "
                        "with --encodings, and kept in --output's calibration (the cost written is the fp32 fit)")
    p.add_argument("--alignment", action="store_true",
                   help="time sizes around powers of two (each rank's part aligned, and grown by 8-128 bytes) and "
                        "keep the alignment cliff the times show: --output then holds the alpha-beta price, padded "
                        "to the alignment where a cliff was found (MODEL.md section 2.3)")
    p.add_argument("--json", action="store_true", help="print the cost JSON instead of a table")
    p.set_defaults(run=_cmd_calibrate, replaces=_calibration_files)


__all__ = []
