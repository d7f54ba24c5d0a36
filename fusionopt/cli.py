"""The ``fusionopt`` command: the public API on the command line, nothing more.

Bad arguments and bad input files exit with status 2 and a one-line message.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import math
import os
import re
import warnings
import sys
import threading
from pathlib import Path
from typing import Any, Mapping, Sequence

from fusionopt import zoo
from fusionopt import __version__
from fusionopt.cost import PiecewiseLinear, cost_from_dict, network, networks, ALGORITHMS
from fusionopt.integrations.kineto import TIMELINE_RULE, describe_clock, read_parameter_list
from fusionopt.integrations.reducer_calibration import REDUCERS, measure_reducer_overhead, read_reducer_calibration, \
    with_reducer_overhead
from fusionopt.integrations.traced_step import COPIED_PARTS, PARAMETERS_FILE, PREDICTED_PART
from fusionopt.integrations.unprofiled import DEFAULT_PROFILER_COST, PROFILER_COST_FILE
from fusionopt.model import AlphaBeta, Plan, Problem, Profile, simulate
from fusionopt.model.decoupled import Decoupled
from fusionopt.model.decoupled_plan import DecoupledPlan
from fusionopt.model.hsdp import HSDP
from fusionopt.model.sharded import FullySharded
from fusionopt.model.sharded_plan import ShardedPlan
from fusionopt.reporting import fraction
from fusionopt.advice.allreduce import MIN_GAIN
from fusionopt.advice.sharded import OverMemoryCap, fsdp2_advice, zero2_settings, zero3_settings
from fusionopt.model.ps import ParameterServer
from fusionopt.model.ps_plan import PSPlan
from fusionopt.model._io import read_json_document
from fusionopt.solvers import compare, format_table, methods, solve
from fusionopt.solvers.result import Interrupted, Result
from fusionopt.model.profile_csv import profile_csv_text, read_profile_csv, write_profile_csv

# --timeline auto's rule for the help, whose text argparse formats with % (50% becomes 50%%).
TIMELINE_HELP = TIMELINE_RULE.replace("%", "%%")


class UsageError(Exception):
    """A bad command line or input file: reported in one line, exit status 2."""


INTERRUPTED = 130
"""The exit status after Ctrl-C (SIGINT): 128 + 2, what a shell reports for it."""


class Kept(KeyboardInterrupt):
    """Ctrl-C after the command kept its work so far; the message says what and where
    (printed after ``fusionopt: interrupted``)."""


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Negative numbers, 1e-3 forms included, are values (``--alpha -1e-3``), so the
        # option's own check speaks, not "expected one argument".
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")

    def error(self, message: str) -> None:  # argparse prints usage and two lines otherwise
        commands = [a for a in self._actions if isinstance(a, argparse._SubParsersAction)]
        if commands and message == f"the following arguments are required: {commands[0].metavar}":
            # No command given: the commands to choose from, as --help lists them.
            self.print_help(sys.stderr)
            raise SystemExit(2)
        raise UsageError(message)


# ---------------------------------------------------------------------- shared arguments
def _add_cost_arguments(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    group = parser.add_argument_group("communication cost (one of)")
    group.add_argument("--alpha", type=float, help="AlphaBeta startup latency per message, seconds")
    group.add_argument("--beta", type=float, help="AlphaBeta transfer time per byte, seconds/byte")
    group.add_argument("--cost", metavar="COST.json", help="a cost model written as JSON")
    group.add_argument("--network", help=f"a network preset: {', '.join(networks())}")
    group.add_argument("--workers", type=int, help="number of workers for --network")
    group.add_argument("--algorithm", help=f"the collective's algorithm for --network: {', '.join(ALGORITHMS)} "
                                           "(default ring; with --decoupled, ring or rabenseifner)")
    parser.add_argument("--sync", default="barrier", choices=("barrier", "layerwise"),
                        help="when the next forward may start (default barrier)")
    extensions = parser.add_argument_group("model extensions (default off)")
    extensions.add_argument("--copy-cost", type=float, default=0.0, metavar="GAMMA",
                            help="seconds per byte to pack a message of several tensors")
    extensions.add_argument("--copy-on", choices=("channel", "compute"),
                            help="where packing runs, with --copy-cost (default channel)")
    extensions.add_argument("--contention", type=float, default=1.0, metavar="KAPPA",
                            help="compute slowdown while a message is in flight (>= 1)")
    extensions.add_argument("--comm-contention", type=float, default=1.0, metavar="MU",
                            help="message slowdown while the compute stream computes (>= 1)")
    extensions.add_argument("--contention-file", metavar="CONTENTION.json",
                            help="both slowdowns as fusionopt calibrate --contention measured them")
    extensions.add_argument("--channels", type=int, default=1, metavar="K",
                            help="concurrent channels sharing the bandwidth (default 1)")
    server = parser.add_argument_group("parameter server instead of all-reduce (default off)")
    server.add_argument("--ps-servers", type=int, metavar="K",
                        help="K servers: push and pull channels (with --network, the BytePS-style terms)")
    server.add_argument("--ps-colocated", action="store_true", help="servers run on the workers' machines")
    server.add_argument("--ps-update-per-byte", type=float, default=0.0, metavar="S",
                        help="server update time, seconds per byte pushed")
    server.add_argument("--ps-update-overhead", type=float, default=0.0, metavar="S",
                        help="server update time, seconds per push message")
    server.add_argument("--ps-partition-compute", action="store_true",
                        help="split a tensor's backward and forward along its pushed and pulled chunks")
    server.add_argument("--ps-delta", type=float, default=0.0, metavar="S",
                        help="seconds of overhead per compute piece with --ps-partition-compute")
    sharded = parser.add_argument_group("decoupled all-reduce instead (default off)")
    sharded.add_argument("--decoupled", action="store_true",
                         help="reduce-scatter gradients, update shards, all-gather (ZeRO, Megatron, DeAR); with "
                              "--network, its reduce-scatter and all-gather; with --alpha/--beta or --cost, "
                              "that cost for each half")
    sharded.add_argument("--update-after-gather", action="store_true",
                         help="with --decoupled: gather the reduced gradients and update before each forward (DeAR)")
    halves = parser.add_argument_group("measured collectives, with --decoupled or --fully-sharded (instead of "
                                       "another cost)")
    halves.add_argument("--reduce-scatter-cost", metavar="RS.json",
                        help="the reduce-scatter's cost model (fusionopt calibrate --collective reduce_scatter)")
    halves.add_argument("--all-gather-cost", metavar="AG.json",
                        help="the all-gather's cost model (fusionopt calibrate --collective all_gather)")
    full = parser.add_argument_group("fully sharded instead (default off)")
    full.add_argument("--fully-sharded", action="store_true",
                      help="parameters sharded between uses, gathered per unit (FSDP, ZeRO-3); with --network, its "
                           "reduce-scatter and all-gather; with --alpha/--beta or --cost, that cost for each")
    full.add_argument("--memory-cap", metavar="BYTES",
                      help="with --fully-sharded: the most bytes of unsharded parameters and gradients at once "
                           "(a number, or with a unit: 512MB, 8GiB)")
    full.add_argument("--replicas", type=int, metavar="R",
                      help="with --fully-sharded and --network: hybrid sharding (HSDP), the --workers split into R "
                           "replica groups, each unit sharded over the P / R workers of a group and its reduced "
                           "shard all-reduced over the R groups (MODEL.md section 8.3)")
    full.add_argument("--shard-network", metavar="NAME",
                      help="with --replicas: the preset network of the shard groups (default --network, which then "
                           "carries the replicate axis)")
    full.add_argument("--blocking-collectives", action="store_true",
                      help="with --fully-sharded: each collective blocks the training thread from its issue to its "
                           "end, so no compute overlaps it (FSDP2 on CPU with gloo); one channel")


def _problem(profile: Profile, args: argparse.Namespace) -> Problem:
    """The problem the arguments describe; the profile's step parts are fitted to its pattern's
    step (MODEL.md section 4.1), each change said in a warning line."""
    if args.copy_on is not None and not args.copy_cost:
        raise UsageError("--copy-on says where packing runs and goes with --copy-cost GAMMA")
    if args.update_after_gather and not args.decoupled:
        raise UsageError("--update-after-gather is a decoupled all-reduce option and goes with --decoupled")
    if args.ps_servers is None:
        given = [f"--{name.replace('_', '-')}" for name in ("ps_colocated", "ps_partition_compute")
                 if getattr(args, name)]
        given += [f"--{name.replace('_', '-')}" for name in ("ps_update_per_byte", "ps_update_overhead", "ps_delta")
                  if getattr(args, name) != 0.0]
        if given:
            raise UsageError(f"{given[0]} is a parameter-server option and goes with --ps-servers K")
    if args.memory_cap is not None and not args.fully_sharded:
        raise UsageError("--memory-cap is a fully sharded option and goes with --fully-sharded")
    if args.blocking_collectives and not args.fully_sharded:
        raise UsageError("--blocking-collectives is a fully sharded option and goes with --fully-sharded")
    if getattr(args, "replicas", None) is not None and not args.fully_sharded:
        raise UsageError("--replicas is a fully sharded option (HSDP) and goes with --fully-sharded")
    if getattr(args, "shard_network", None) is not None and getattr(args, "replicas", None) is None:
        raise UsageError("--shard-network prices HSDP's shard groups and goes with --replicas R")
    if args.fully_sharded:
        for flag, given in (("--decoupled", args.decoupled), ("--ps-servers", args.ps_servers is not None)):
            if given:
                raise UsageError(f"--fully-sharded and {flag} are two patterns: give one")
        if args.sync != "barrier":
            raise UsageError("--sync does not apply to --fully-sharded (its step runs forward, backward, optimiser)")
        if args.channels not in (1, 2):
            raise UsageError(f"--channels with --fully-sharded is 1 (one communicator, the default) or 2 (the "
                             f"all-gathers and the reduce-scatters on their own, sharing the bandwidth), not {args.channels}")
        if args.blocking_collectives and args.channels != 1:
            raise UsageError("--blocking-collectives runs the collectives one at a time on the training thread: "
                             "leave out --channels 2")
        return Problem(profile, pattern=_fully_sharded(args), copy_cost=args.copy_cost,
                       copy_on=args.copy_on or "channel", **_contention(args), step_parts="fit")
    if args.decoupled:
        if args.ps_servers is not None:
            raise UsageError("--decoupled and --ps-servers are two patterns: give one")
        return Problem(profile, sync=args.sync, pattern=_decoupled(args), copy_cost=args.copy_cost,
                       copy_on=args.copy_on or "channel", **_contention(args), channels=args.channels,
                       step_parts="fit")
    _measured_halves(args)                                # refuses them here, with the reason
    if args.ps_servers is None:
        return Problem(profile, _cost(args), sync=args.sync, copy_cost=args.copy_cost,
                       copy_on=args.copy_on or "channel", **_contention(args), channels=args.channels,
                       step_parts="fit")
    return Problem(profile, sync=args.sync, pattern=_parameter_server(args), step_parts="fit")


def _with_reducer_calibration(problem: Problem, args: argparse.Namespace) -> Problem:
    """The problem with --reducer-calibration's cost per message and per step, where given."""
    path = getattr(args, "reducer_calibration", None)
    if path is None:
        return problem
    calibration = read_reducer_calibration(path)
    try:
        return with_reducer_overhead(problem, calibration)
    except ValueError as exc:
        raise UsageError(f"--reducer-calibration {path}: {exc}") from None


def _reducer_words(args: argparse.Namespace) -> str | None:
    """What --reducer-calibration added, in words (None when not given)."""
    path = getattr(args, "reducer_calibration", None)
    if path is None:
        return None
    c = read_reducer_calibration(path)
    return (f"{path}: {c.reducer}, {1e3 * c.per_message:.3f} ms per message on the channel, "
            f"{1e3 * c.per_step:.3f} ms per step on the host"
            + ("" if c.reducer == "fsdp2" else f", {1e3 * c.message_compute:.3f} ms of compute per message"))


def _contention(args: argparse.Namespace) -> dict[str, float]:
    """``contention`` and ``comm_contention``: the flags, or a calibration's file."""
    if args.contention_file is None:
        return {"contention": args.contention, "comm_contention": args.comm_contention}
    given = [flag for flag, value in (("--contention", args.contention), ("--comm-contention", args.comm_contention))
             if value != 1.0]
    if given:
        raise UsageError(f"--contention-file gives both slowdowns: leave {' and '.join(given)} out")
    from fusionopt.executor.contention import read_contention

    kappa, mu = read_contention(args.contention_file)
    return {"contention": kappa, "comm_contention": mu}


def _decoupled(args: argparse.Namespace) -> Decoupled:
    measured = _measured_halves(args)
    if measured is not None:                              # --workers: the data-parallel size (Megatron's rule)
        return Decoupled(*measured, update_after_gather=args.update_after_gather, workers=args.workers)
    if args.network is not None and args.alpha is None and args.beta is None and args.cost is None:
        if args.workers is None:
            raise UsageError("--network needs --workers")
        return Decoupled.from_network(args.network, args.workers, algorithm=args.algorithm or "ring",
                                      update_after_gather=args.update_after_gather)
    half = _cost(args)
    return Decoupled(half, half, update_after_gather=args.update_after_gather)


def _measured_halves(args: argparse.Namespace) -> tuple[Any, Any] | None:
    """The reduce-scatter and all-gather cost files, when given (both, and no other cost)."""
    given = [args.reduce_scatter_cost is not None, args.all_gather_cost is not None]
    if not any(given):
        return None
    if not all(given):
        raise UsageError("--reduce-scatter-cost and --all-gather-cost go together")
    if not (args.decoupled or args.fully_sharded):
        raise UsageError("--reduce-scatter-cost and --all-gather-cost price --decoupled or --fully-sharded problems")
    others = [flag for flag, on in (("--alpha/--beta", args.alpha is not None or args.beta is not None),
                                    ("--cost", args.cost is not None), ("--network", args.network is not None),
                                    ("--algorithm", args.algorithm is not None),
                                    ("--workers", args.workers is not None and args.fully_sharded)) if on]
    if others:
        raise UsageError(f"--reduce-scatter-cost and --all-gather-cost are the cost; leave out {others[0]}")
    return (_read_cost(args.reduce_scatter_cost, ("reduce_scatter",), "--reduce-scatter-cost"),
            _read_cost(args.all_gather_cost, ("all_gather",), "--all-gather-cost"))


def _read_cost(path: str, allowed: tuple[str, ...], flag: str):
    """A cost JSON; one that a calibration of another collective than ``allowed`` wrote is
    refused (a calibration without ``collective`` timed all-reduces)."""
    document = read_json_document(path)
    calibration = document.get("calibration") if isinstance(document, dict) else None
    if isinstance(calibration, dict):
        measured = calibration.get("collective", "all_reduce")
        if measured not in allowed:
            wanted = " or ".join(c.replace("_", "-") for c in allowed)
            raise UsageError(f"{flag} {path}: a calibration of {str(measured).replace('_', '-')}, and {flag} takes "
                             f"{wanted} (fusionopt calibrate --collective {allowed[0]})")
    return cost_from_dict(document, source=path)


def _fully_sharded(args: argparse.Namespace) -> FullySharded:
    cap = None if args.memory_cap is None else parse_bytes("--memory-cap", args.memory_cap)
    channels = "two" if args.channels == 2 else "one"
    blocking = bool(args.blocking_collectives)
    measured = _measured_halves(args)
    if getattr(args, "replicas", None) is not None:
        return _hsdp(args, measured is not None, memory_cap=cap, channels=channels, blocking=blocking)
    if measured is not None:
        return FullySharded(*measured, memory_cap=cap, channels=channels, blocking=blocking)
    if args.network is not None and args.alpha is None and args.beta is None and args.cost is None:
        if args.workers is None:
            raise UsageError("--network needs --workers")
        return FullySharded.from_network(args.network, args.workers, algorithm=args.algorithm or "ring",
                                         memory_cap=cap, channels=channels, blocking=blocking)
    half = _cost(args)
    return FullySharded(half, half, memory_cap=cap, channels=channels, blocking=blocking)


def _hsdp(args: argparse.Namespace, measured: bool, **options: Any) -> HSDP:
    """HSDP on preset networks: --workers P in --replicas R groups of P / R."""
    replicas = args.replicas
    if measured or args.network is None or args.alpha is not None or args.beta is not None or args.cost is not None:
        raise UsageError("--replicas prices each axis on a preset network: give --network (and --shard-network "
                         "for the shard groups' link), not --alpha/--beta, --cost or measured collectives")
    if args.workers is None:
        raise UsageError("--network needs --workers")
    if replicas < 1 or args.workers % replicas:
        raise UsageError(f"--replicas {replicas} must divide --workers {args.workers} into whole shard groups")
    return HSDP.from_network(args.network, replicas=replicas, shards=args.workers // replicas,
                             shard_network=args.shard_network, algorithm=args.algorithm or "ring", **options)


BYTE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
              "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(flag: str, text: str) -> float:
    """A size in bytes from ``text``: a number, or a number and a unit (``512MB``, ``8 GiB``).

    >>> parse_bytes("--memory-cap", "8GiB"), parse_bytes("--memory-cap", "1.5e9")
    (8589934592.0, 1500000000.0)
    >>> parse_bytes("--memory-cap", "8 parsecs")
    Traceback (most recent call last):
    ...
    fusionopt.cli.UsageError: --memory-cap: '8 parsecs' is not a size (give bytes, or a unit: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)
    >>> parse_bytes("--memory-cap", "inf")
    Traceback (most recent call last):
    ...
    fusionopt.cli.UsageError: --memory-cap must be a finite size, got 'inf' (leave --memory-cap out for no cap)
    """
    stripped = text.strip()
    number, unit = stripped, "b"
    for suffix in sorted(BYTE_UNITS, key=len, reverse=True):
        if stripped.lower().endswith(suffix) and stripped[:-len(suffix)].strip():
            number, unit = stripped[:-len(suffix)].strip(), suffix
            break
    try:
        value = float(number) * BYTE_UNITS[unit]
    except ValueError:
        value = math.nan
    if math.isnan(value):
        raise UsageError(f"{flag}: {text!r} is not a size (give bytes, or a unit: B, KB, MB, GB, TB, KiB, MiB, "
                         "GiB, TiB)")
    if math.isinf(value) and value > 0:
        raise UsageError(f"{flag} must be a finite size, got {text!r} (leave {flag} out for no cap)")
    if not value > 0:
        raise UsageError(f"{flag} must be a positive size, got {text!r}")
    return value


def _parameter_server(args: argparse.Namespace) -> ParameterServer:
    if args.copy_cost != 0.0 or args.contention != 1.0 or args.channels != 1:
        raise UsageError("--ps-servers cannot be combined with --copy-cost, --contention or --channels")
    if args.comm_contention != 1.0 or args.contention_file is not None:
        raise UsageError("--ps-servers cannot be combined with --comm-contention or --contention-file")
    options = {"update_per_byte": args.ps_update_per_byte, "update_overhead": args.ps_update_overhead,
               "partition_compute": args.ps_partition_compute, "delta": args.ps_delta}
    if args.network is not None and args.alpha is None and args.beta is None and args.cost is None:
        if args.workers is None:
            raise UsageError("--network needs --workers")
        return ParameterServer.from_network(args.network, args.workers, args.ps_servers,
                                            colocated=args.ps_colocated, **options)
    return ParameterServer(_cost(args), servers=args.ps_servers, workers=args.workers,
                           colocated=args.ps_colocated, **options)


def _cost(args: argparse.Namespace):
    chosen = [name for name, given in (
        ("--alpha/--beta", args.alpha is not None or args.beta is not None),
        ("--cost", args.cost is not None),
        ("--network", args.network is not None),
    ) if given]
    if len(chosen) != 1:
        raise UsageError("give exactly one cost: --alpha and --beta, --cost COST.json, or --network with --workers")
    if args.network is None:
        if args.algorithm is not None:
            raise UsageError("--algorithm chooses --network's all-reduce and goes with --network")
        if args.workers is not None and getattr(args, "ps_servers", None) is None:
            raise UsageError(f"--workers sets --network's worker count and changes nothing with {chosen[0]}")
    if args.alpha is not None or args.beta is not None:
        if args.alpha is None or args.beta is None:
            raise UsageError("--alpha and --beta go together")
        return AlphaBeta(args.alpha, args.beta)
    if args.cost is not None:
        halves = getattr(args, "decoupled", False) or getattr(args, "fully_sharded", False)
        return _read_cost(args.cost, ("reduce_scatter", "all_gather") if halves else ("all_reduce",), "--cost")
    if args.workers is None:
        raise UsageError("--network needs --workers")
    return network(args.network, args.workers, algorithm=args.algorithm or "ring")


def _parse_options(pairs: Sequence[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--option takes KEY=VALUE, got {pair!r}")
        if key in options:
            raise UsageError(f"--option {key} is given twice; give each option once")
        options[key] = option_value(text)
    return options


KEYWORDS = {"True": True, "true": True, "False": False, "false": False, "None": None, "none": None, "null": None}
LITERALS = (bool, int, float, str, list, tuple, dict, type(None))


def option_value(text: str) -> Any:
    """The value of ``--option KEY=VALUE``: what ``fusionopt methods --options`` prints as a
    default reads back as that default.

    ``True``, ``False`` and ``None`` (also ``true``, ``false``, ``none``, ``null``); a number
    (``25``, ``1e-09``, ``25.0`` stays a float); a list (``[1, 2.5]``, JSON or Python); a
    quoted string (``'current'``); any other text is the string itself.

    >>> option_value("True"), option_value("none"), option_value("1e-09"), option_value("'current'")
    (True, None, 1e-09, 'current')
    >>> option_value("[25, 50.0]"), option_value("['dp', None]"), option_value("best-baseline")
    ([25, 50.0], ['dp', None], 'best-baseline')
    """
    stripped = text.strip()
    if stripped in KEYWORDS:
        return KEYWORDS[stripped]
    try:
        return json.loads(stripped)
    except ValueError:
        pass
    try:
        value = ast.literal_eval(stripped)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    return value if isinstance(value, LITERALS) else text


def _result_document(result: Result) -> dict[str, Any]:
    timeline = result.timeline
    return {
        "method": result.method,
        "status": str(result.status),
        "iteration_time": result.iteration_time,
        "lower_bound": result.lower_bound,
        "gap": result.gap,
        "exposed": timeline.exposed if timeline is not None else None,
        "messages": result.num_messages,
        "solve_seconds": result.solve_seconds,
        "stats": dict(result.stats),
        "plan": result.plan.to_dict(),
    }


def plural(number: int, noun: str) -> str:
    """``number`` and ``noun``, the noun plural unless the number is one.

    >>> plural(1, "message"), plural(2, "more message"), plural(0, "bucket")
    ('1 message', '2 more messages', '0 buckets')
    """
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _print_result(result: Result, profile: Profile) -> None:
    timeline = result.timeline
    bound = "-" if result.lower_bound is None else f"{1e3 * result.lower_bound:.6f} ms"
    print(f"method          {result.method}")
    print(f"status          {result.status}")
    print(f"iteration time  {1e3 * result.iteration_time:.6f} ms")
    print(f"lower bound     {bound}")
    print(f"exposed         {1e3 * timeline.exposed:.6f} ms")
    print(f"messages        {result.num_messages}")
    if isinstance(result.plan, PSPlan):
        print(f"  push {result.plan.push.num_messages}, pull {result.plan.pull.num_messages} (use --json for all)")
        return
    if isinstance(result.plan, DecoupledPlan):
        print(f"  reduce-scatter {result.plan.reduce_scatter.num_messages}, all-gather "
              f"{result.plan.all_gather.num_messages} (use --json for all)")
        return
    if isinstance(result.plan, ShardedPlan):
        _print_units(result.plan, timeline, profile)
        return
    for k, message in enumerate(result.plan.messages[:20]):
        tensors = message.tensors
        names = ", ".join(profile.names[i] for i in tensors[:4])
        if len(tensors) > 4:
            names += f", ... ({len(tensors)} tensors, {profile.names[tensors[-1]]} last)"
        print(f"  {k:>4}  {message.nbytes:>12d} B  [{names}]")
    if result.num_messages > 20:
        print(f"  ... {plural(result.num_messages - 20, 'more message')} (use --json for all)")


def _print_units(plan: ShardedPlan, timeline: Any, profile: Profile) -> None:
    print(f"peak memory     {timeline.peak_memory / 2**20:.3f} MiB of unsharded parameters and gradients")
    print(f"prefetch        {plan.forward_prefetch} unit(s) ahead in the forward, {plan.backward_prefetch} in the backward")
    sizes = plan.unit_bytes(profile).tolist()
    for j, tensors in enumerate(plan.units()[:20]):
        label = plan.names[j] if plan.names is not None else f"{profile.names[tensors[0]]} .. {profile.names[tensors[-1]]}"
        root = plan.root and j in (0, plan.num_units - 1)
        kept = "root" if root else ("resharded" if plan.reshard[j] else "kept")
        print(f"  {j:>4}  {sizes[j]:>12d} B  {kept:<9}  {len(tensors)} tensor(s)  [{label}]")
    if plan.num_units > 20:
        print(f"  ... {plural(plan.num_units - 20, 'more unit')} (use --json for all)")


def _read_profile(path: str) -> Profile:
    """A profile file: CSV (``.csv``, named after the file) or JSON (anything else)."""
    if path.lower().endswith(".csv"):
        return read_profile_csv(path, name=Path(path).stem)
    return Profile.read(path)


def _write_profile(profile: Profile, path: str) -> None:
    if path.lower().endswith(".csv"):
        write_profile_csv(profile, path)
    else:
        profile.write(path)


# ---------------------------------------------------------------------- commands
def _cmd_methods(args: argparse.Namespace) -> None:
    from fusionopt.solvers.registry import FAMILIES, get_method

    listing = methods()
    width = max(len(name) for name in listing)
    for family, about in FAMILIES.items():
        members = [name for name in listing if get_method(name).family == family]
        print(f"{family} methods: {about}")
        for name in members:
            _print_method(name, listing[name], width, args.options)


def _print_method(name: str, summary: str, width: int, options_too: bool) -> None:
    from fusionopt.solvers.registry import get_method

    print(f"  {name.ljust(width)}  {summary}")
    if options_too:
        options = get_method(name).options
        for option, default in options.items():
            print(f"  {'':{width}}    --option {option}=...  (default {default!r})")
        if not options:
            print(f"  {'':{width}}    (no options)")
        print(f"  {'':{width}}    takes: {get_method(name).needs.describe()}")


def _refuse_writing_over(output: str | None, args: argparse.Namespace, *inputs: str) -> None:
    """An ``--output`` that is one of the command's input files is refused: it would be lost."""
    if output is None:
        return
    target = Path(output).resolve()
    for name in inputs:
        given = getattr(args, name, None)
        if given and Path(given).resolve() == target:
            label = "the profile" if name == "profile" else f"the --{name.replace('_', '-')}"
            raise UsageError(f"--output {output} is {label} file itself: writing it would lose the input; "
                             "give another file")


def _json_output(path: str | None, what: str) -> None:
    """An ``--output`` that is written as JSON must say so by its name."""
    if path is not None and not path.lower().endswith(".json"):
        raise UsageError(f"--output {path}: {what} is written as JSON: give a .json file name")


@contextlib.contextmanager
def _announce_search(method: str, options: Mapping[str, Any]):
    """A line on stderr when a solve is still running after a second: how long it may take."""
    from fusionopt.solvers.registry import get_method

    try:
        limit = options.get("time_limit", get_method(method).options.get("time_limit"))
    except ValueError:
        limit = None
    bound = f"up to {limit:g} s in all (--option time_limit=S to change)" if isinstance(limit, (int, float)) \
        else "no time limit"
    timer = threading.Timer(1.0, lambda: print(f"fusionopt: {method}: still searching, {bound}",
                                                 file=sys.stderr, flush=True))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _cmd_solve(args: argparse.Namespace) -> None:
    _refuse_writing_over(args.output, args, "profile", "cost")
    _json_output(args.output, "the plan")
    profile = _read_profile(args.profile)
    problem = _problem(profile, args)
    options = _parse_options(args.option)
    stopped = None
    with _announce_search(args.method, options):
        try:
            result = solve(problem, args.method, **options)
        except Interrupted as stop:     # Ctrl-C in an anytime search: its best plan so far, judged
            result = stopped = stop.result
    if args.output:
        result.plan.write(args.output)
    if args.json:
        print(json.dumps(_result_document(result), indent=1))
    else:
        _print_result(result, profile)
    if stopped is not None:
        written = f" and written to {args.output}" if args.output else ""
        raise Kept(f"the best plan {args.method} found so far is printed (status {stopped.status}){written}")


def _read_problem_and_plan(args: argparse.Namespace) -> tuple[Profile, Problem, Plan]:
    """The profile, problem and validated plan named by ``args`` (errors name the plan file)."""
    profile = _read_profile(args.profile)
    problem = _with_reducer_calibration(_problem(profile, args), args)
    plan = problem.pattern.plan_type.read(args.plan)
    try:
        plan.validate(profile)
    except ValueError as exc:
        raise ValueError(f"{args.plan}: {exc}") from None
    return profile, problem, plan


def _cmd_simulate(args: argparse.Namespace) -> None:
    profile, problem, plan = _read_problem_and_plan(args)
    timeline = simulate(problem, plan, validate=False)
    document = {
        "iteration_time": timeline.iteration_time,
        "exposed": timeline.exposed,
        "compute_time": timeline.compute_time,
        "communication_end": timeline.communication_end,
        "busy": timeline.busy,
        "messages": [
            {"ready": r, "start": s, "end": e, "bytes": int(b), "kind": kind}
            for r, s, e, b, kind in zip(timeline.message_ready, timeline.message_start, timeline.message_end,
                                        timeline.message_bytes, timeline.message_collectives(_reduce_with(plan)))
        ],
    }
    cap = problem.pattern.memory_cap
    if timeline.peak_memory is not None:
        document["peak_memory"] = timeline.peak_memory
        if cap is not None:
            document["memory_cap"] = cap
            document["over_memory_cap"] = max(0.0, timeline.peak_memory - cap)
        for k, unit in enumerate(timeline.message_unit.tolist()):
            document["messages"][k]["unit"] = unit
    if args.reducer_calibration is not None:
        document["reducer_calibration"] = args.reducer_calibration
    if args.json:
        print(json.dumps(document, indent=1))
        return
    if args.reducer_calibration is not None:
        print(f"reducer         {_reducer_words(args)}")
    print(f"iteration time  {1e3 * timeline.iteration_time:.6f} ms")
    if timeline.peak_memory is not None:
        over = "" if cap is None else (f", over the cap of {cap / 2**20:.3f} MiB: infeasible" if timeline.peak_memory > cap
                                       else f", within the cap of {cap / 2**20:.3f} MiB")
        print(f"peak memory     {timeline.peak_memory / 2**20:.3f} MiB of unsharded parameters and gradients{over}")
    print(f"compute         {1e3 * timeline.compute_time:.6f} ms")
    print(f"exposed         {1e3 * timeline.exposed:.6f} ms")
    print(f"messages        {timeline.num_messages}")
    _print_collectives(document["messages"], timeline, sharded=problem.pattern.is_a("fully-sharded"))


def _reduce_with(plan: Any) -> str:
    """The collective a plan's gradient messages use (a decoupled plan may reduce with all-reduces)."""
    return getattr(plan, "reduce_with", "reduce_scatter")


def _print_collectives(messages: list[dict[str, Any]], timeline: Any, *, sharded: bool) -> None:
    """The timeline's table, message by message, in ms: from the start of the step's forward
    on a fully sharded step (its ready time is when it is issued), else of the backward. A
    decoupled or fully sharded step names each collective (and the unit it carries)."""
    kinds = timeline.message_kind is not None
    ready = "issued ms" if sharded else "ready ms"
    print(f"  times from the start of the {'forward' if sharded else 'backward'}")
    header = f"  {'k':>4}  " + (f"{'collective':<14}  " if kinds else "") + (f"{'unit':>4}  " if sharded else "")
    print(f"{header}{'bytes':>12}  {ready:>10}  {'start ms':>10}  {'end ms':>10}")
    shown = messages[:20]
    for k, m in enumerate(shown):
        row = f"  {k:>4}  " + (f"{m['kind']:<14}  " if kinds else "") + (f"{m['unit']:>4}  " if sharded else "")
        print(f"{row}{m['bytes']:>12d}  {1e3 * m['ready']:>10.3f}  {1e3 * m['start']:>10.3f}  {1e3 * m['end']:>10.3f}")
    if timeline.num_messages > len(shown):
        print(f"  ... {plural(timeline.num_messages - len(shown), 'more message')} (use --json for all)")


ZOO_DEVICE, ZOO_BATCH = "h100", 64
# The options of a zoo model's profile beside --device and --batch (fusionopt.zoo.profile's).
ZOO_COMPUTE_OPTIONS = ("precision", "compute", "optimizer")


def _add_zoo_arguments(parser: argparse.ArgumentParser) -> None:
    """--device, --batch and the zoo's compute options, for a command that takes --model."""
    parser.add_argument("--device", help=f"device of the zoo model: {', '.join(zoo.devices())} (default h100)")
    parser.add_argument("--batch", type=int, help="per-worker batch of the zoo model (default 64)")
    parser.add_argument("--precision", help="fp32 (default) or bf16 (autocast mixed precision) for the zoo model")
    parser.add_argument("--compute", help="the zoo model's compute: calibrated (default; from measured training "
                                          "steps) or roofline (an estimate from FLOPs at 40%% of peak)")
    parser.add_argument("--optimizer", help="sgd: add SGD with momentum's update time to each tensor of the zoo "
                                            "model (default: no update time)")


def _zoo_settings(args: argparse.Namespace, source: str | None) -> tuple[str, int]:
    """--device and --batch for a zoo model (their defaults when not given); refused, like the
    zoo's compute options, with another ``source`` of the profile, which they would not change."""
    if source is not None:
        for option in ("device", "batch", *ZOO_COMPUTE_OPTIONS):
            if getattr(args, option, None) is not None:
                raise UsageError(f"--{option} is for a zoo model and changes nothing with {source}")
    return args.device or ZOO_DEVICE, args.batch if args.batch is not None else ZOO_BATCH


def _zoo_profile(args: argparse.Namespace, device: str, batch: int) -> tuple[Profile, str]:
    """The zoo model's profile with the command's options, and a label saying what it is."""
    options = {option: getattr(args, option) for option in ZOO_COMPUTE_OPTIONS
               if getattr(args, option, None) is not None}
    profile = zoo.profile(args.model, device=device, batch=batch, **options)
    meta = profile.metadata
    if meta.get("compute") == "calibrated":
        update = ", with SGD's update" if args.optimizer else ""
        what = f"{meta.get('precision', 'fp32')}, compute calibrated on measured steps{update}"
    else:
        what = "roofline estimate"
    return profile, f"{args.model} on {device}, batch {batch} ({what})"


def _problem_for_compare(args: argparse.Namespace) -> tuple[Problem, str]:
    if (args.model is None) == (args.profile is None):
        raise UsageError("give exactly one of --model NAME or --profile PROFILE.json")
    device, batch = _zoo_settings(args, "--profile" if args.profile is not None else None)
    if args.profile is not None:
        profile = _read_profile(args.profile)
        label = args.profile
    else:
        profile, label = _zoo_profile(args, device, batch)
    return _with_reducer_calibration(_problem(profile, args), args), label


def _cmd_compare(args: argparse.Namespace) -> None:
    problem, label = _problem_for_compare(args)
    names = _comma_list("--methods", args.methods) if args.methods is not None else None
    rows = compare(problem, names)
    if args.json:
        print(json.dumps([row.__dict__ for row in rows], indent=1))
        for name in rows.refused:        # refusals no declaration foresaw; the rows say what ran
            print(f"fusionopt: compare: left out: {rows.left_out[name]}", file=sys.stderr)
        return
    profile = problem.profile
    print(f"workload  {label}: {plural(profile.n, 'tensor')}, {profile.total_bytes / 2**20:.1f} MiB of gradients")
    print(f"compute   B = {1e3 * profile.B:.3f} ms, F = {1e3 * profile.F:.3f} ms")
    if problem.pattern.is_a("decoupled") or problem.pattern.is_a("fully-sharded"):
        halves = problem.pattern
        both = (f"reduce-scatter {_cost_words(halves.reduce_scatter, args.reduce_scatter_cost or args.cost)}, "
                f"all-gather {_cost_words(halves.all_gather, args.all_gather_cost or args.cost)}")
        if halves.is_a("hsdp"):
            both = (f"HSDP, {halves.replicas} replica groups x {halves.shards} shards: shard reduce-scatter "
                    f"{halves.shard_reduce_scatter!r}, all-gather {halves.all_gather!r}, replicate all-reduce "
                    f"{halves.replicate_all_reduce!r}")
        if problem.pattern.is_a("decoupled"):
            after = ", updates after the gathers" if halves.update_after_gather else ""
            print(f"network   {both}, sync {problem.sync}{after}")
        else:
            cap = "no memory cap" if halves.memory_cap is None else f"memory cap {halves.memory_cap / 2**20:.1f} MiB"
            lanes = ", all-gathers and reduce-scatters on two channels" if halves.channels == "two" else ""
            lanes += ", collectives blocking the training thread" if halves.blocking else ""
            print(f"network   {both}, {cap}{lanes}")
    else:
        extras = "".join(f", {name} {getattr(problem, name)}" for name in problem.extensions)
        print(f"network   {_cost_words(problem.cost, args.cost)}, sync {problem.sync}{extras}")
    print()
    print(format_table(rows))
    print()
    print("gap to bound: to the best lower bound proven for each plan: over its method's own plan space for")
    print("the fusion methods, ps-dp and the exact methods, and the optimum of an exact method in the table for")
    print("the plans of its space; else over any plan. OPTIMAL: gap 0.")


def _cost_words(cost: Any, path: str | None) -> str:
    """A cost as a table's header shows it: ``alpha + beta S`` by its two numbers; a measured
    curve by its kind, sizes and file, not its every point."""
    if isinstance(cost, AlphaBeta):
        return repr(cost)
    if isinstance(cost, PiecewiseLinear):
        sizes = cost.sizes
        words = (f"piecewise linear through {len(sizes)} points, {_size_words(sizes[0])} to "
                 f"{_size_words(sizes[-1])}")
    elif cost.affine is not None:
        words = f"{type(cost).__name__}, alpha = {cost.affine[0]:.6g} s, beta = {cost.affine[1]:.6g} s/B"
    else:
        words = type(cost).__name__
    return f"measured ({Path(path).name}: {words})" if path else words


def _size_words(nbytes: float) -> str:
    """``nbytes`` in the largest binary unit it fills: ``256 B``, ``64 MiB``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes:.4g} B"


def _cmd_advise(args: argparse.Namespace) -> None:
    if args.update_after_gather:
        raise UsageError("--update-after-gather does not apply to advise: the frameworks it judges update in the "
                         "optimiser step, before gathering parameters (DeepSpeed ZeRO-2 and Megatron-LM, --pattern "
                         "zero2), or gather parameters before each use (FSDP2 and ZeRO-3, --pattern fsdp)")
    if args.pattern == "fsdp":
        _advise_fsdp(args)
        return
    if args.pattern == "zero2":
        _advise_zero2(args)
        return
    if args.memory_cap is not None or args.atoms is not None:
        raise UsageError(f"{'--memory-cap' if args.memory_cap is not None else '--atoms'} goes with --pattern fsdp")
    from fusionopt.advice.allreduce import ddp_settings, horovod_settings

    problem, label = _problem_for_compare(args)
    plan_result = solve(problem, args.method)
    if not problem.pattern.is_a("all-reduce") or not plan_result.plan.is_fusion(problem.profile):
        raise UsageError(f"method {args.method!r} gives a plan that is not a fusion plan (it cuts tensors, reorders "
                         "them or sets release times), which DDP and Horovod cannot build: advise on a fusion "
                         "method (dp, wfbp, mgwfbp, ddp, ...)")
    ddp = ddp_settings(problem, plan_result.plan, min_gain=args.min_gain)
    hvd = horovod_settings(problem, plan_result.plan, backend=args.horovod_backend, min_gain=args.min_gain)
    if args.json:
        print(json.dumps({"method": args.method, "iteration_time": plan_result.iteration_time,
                          "messages": plan_result.num_messages,
                          "ddp": ddp.to_dict(), "horovod": hvd.to_dict()}, indent=1))
        return
    print(f"workload  {label}: {plural(problem.profile.n, 'tensor')}")
    if args.reducer_calibration is not None:
        print(f"reducer   {_reducer_words(args)}")
    print(f"plan      {args.method}: T = {1e3 * plan_result.iteration_time:.3f} ms, "
          f"{plural(plan_result.num_messages, 'message')}")
    ms = 1e3
    slower = ddp.list_iteration_time is not None and ddp.list_iteration_time > ddp.default_iteration_time * (1 + 1e-9)
    label = "ddp"
    if ddp.kept_defaults and not slower:
        print(f"ddp       keep DDP's defaults: T = {ms * ddp.default_iteration_time:.3f} ms; no setting below is "
              f"predicted {ddp.min_gain:.0%} faster (--min-gain)")
        label = ""
    if ddp.bucket_cap_mb_list is not None:
        caps = ", ".join(f"{m:g}" for m in ddp.bucket_cap_mb_list)
        print(f"{label:<9} bucket_cap_mb_list=[{caps}] "
              f"({plural(len(ddp.bucket_cap_mb_list), 'bucket')}, the plan's): T = {ms * ddp.list_iteration_time:.3f} ms"
              + (f"; slower than DDP's defaults ({ms * ddp.default_iteration_time:.3f} ms): leave it unset"
                 if slower else ""))
    else:
        print(f"{label:<9} no bucket_cap_mb_list reproduces this plan (not "
              "contiguous in the gradient-ready order, or it mixes dtypes)")
    single = ("leave bucket_cap_mb unset" if ddp.bucket_cap_mb is None
              else f"bucket_cap_mb={ddp.bucket_cap_mb:g} (every bucket, the first too)")
    print(f"          best single cap: {single}: T = {ms * ddp.cap_iteration_time:.3f} ms "
          f"(unset, 1 MiB first then 25 MiB: {ms * ddp.default_iteration_time:.3f} ms)")
    print(f"          find_unused_parameters=True (no bucket rebuild; registration order): "
          f"T = {ms * ddp.find_unused_iteration_time:.3f} ms")
    print(f"horovod   HOROVOD_FUSION_THRESHOLD={hvd.fusion_threshold_bytes} "
          f"HOROVOD_CYCLE_TIME={hvd.environment['HOROVOD_CYCLE_TIME']} ({hvd.backend}): "
          f"T = {1e3 * hvd.iteration_time:.3f} ms (defaults: {1e3 * hvd.default_iteration_time:.3f} ms"
          + (f"; kept: no pair is predicted {args.min_gain:.0%} faster)" if hvd.kept_defaults else ")"))


def _advise_pattern_flags(args: argparse.Namespace) -> None:
    """Refuse the all-reduce advice's flags under another --pattern."""
    if args.method != "dp":
        raise UsageError(f"--method picks the all-reduce plan to follow; --pattern {args.pattern} plans its own")
    if args.horovod_backend != "nccl":
        raise UsageError(f"--horovod-backend judges Horovod settings, which --pattern {args.pattern} does not give")


def _advise_fsdp(args: argparse.Namespace) -> None:
    """FSDP2's calls for the best plan FSDP2 can build, and DeepSpeed ZeRO-3's sizes."""
    _advise_pattern_flags(args)
    args.fully_sharded = True
    problem, label = _problem_for_compare(args)
    advice: dict[str, Any] = {}
    unmet: dict[str, str] = {}                            # per framework, why no setting fits the cap
    left_out: dict[str, str] = {}                         # per framework, why it is not judged
    frameworks = [("fsdp2", lambda: fsdp2_advice(problem, args.atoms, min_gain=args.min_gain))]
    if problem.pattern.blocking:
        left_out["zero3"] = ("not judged with --blocking-collectives: its reduce-scatter buckets would split a "
                             "unit's backward on the training thread, which the model does not time")
    else:
        frameworks.append(("zero3", lambda: zero3_settings(problem, min_gain=args.min_gain)))
    for name, advise in frameworks:
        try:
            advice[name] = advise()
        except OverMemoryCap as exc:
            unmet[name] = str(exc)
    if len(unmet) == len(frameworks):
        raise UsageError(f"--memory-cap {args.memory_cap}: " + (
            f"FSDP2 does not fit it: {unmet['fsdp2']}" if len(unmet) == 1 else
            f"neither FSDP2 nor DeepSpeed ZeRO-3 fits it: {unmet['fsdp2']}; {unmet['zero3']}"))
    if args.json:
        print(json.dumps({**{name: setting.to_dict() for name, setting in advice.items()},
                          **({"over_memory_cap": unmet} if unmet else {}),
                          **({"left_out": left_out} if left_out else {})}, indent=1))
        return
    cap = problem.pattern.memory_cap
    print(f"workload  {label}: {plural(problem.profile.n, 'tensor')}, {problem.profile.total_bytes / 2**20:.1f} MiB")
    print(f"memory    {'no cap' if cap is None else f'cap {cap / 2**20:.1f} MiB'} on unsharded parameters and gradients")
    if problem.pattern.blocking:
        print("threads   each collective blocks the training thread (--blocking-collectives): FSDP2's forward "
              "prefetches nothing by default")
    if "fsdp2" in unmet:
        print(f"fsdp2     no setting fits the cap: {unmet['fsdp2']}")
    else:
        fsdp = advice["fsdp2"]
        over = "" if fsdp.default_feasible else ", over the cap"
        print(f"fsdp2     defaults (fully_shard per block, then the model): T = "
              f"{1e3 * fsdp.default_iteration_time:.3f} ms, peak {fsdp.default_peak_memory / 2**20:.1f} MiB{over}")
        built = fsdp.settings
        which = "the defaults, no plan searched being faster" if fsdp.defaults else \
            f"{plural(len(built.units), 'fully_shard call')}"
        if args.atoms is None and fsdp.atoms == "module":
            which += ", units of modules: no plan of whole blocks fits the cap"
        bound = "" if fsdp.lower_bound is None else f" (bound {1e3 * fsdp.lower_bound:.3f} ms)"
        print(f"          advised ({which}): T = {1e3 * built.iteration_time:.3f} ms, peak "
              f"{built.peak_memory / 2**20:.1f} MiB{bound}")
        for line in built.code().splitlines():
            print(f"            {line}")
    if "zero3" in left_out:
        print(f"deepspeed ZeRO-3 (zero_optimization): {left_out['zero3']}")
    elif "zero3" in unmet:
        print(f"deepspeed ZeRO-3 (zero_optimization): no setting fits the cap: {unmet['zero3']}")
    else:
        _print_grid("deepspeed", "ZeRO-3 (zero_optimization)", advice["zero3"])


def _advise_zero2(args: argparse.Namespace) -> None:
    """DeepSpeed ZeRO-2's and Megatron-LM's bucket sizes on the decoupled all-reduce."""
    _advise_pattern_flags(args)
    if args.memory_cap is not None or args.atoms is not None:
        raise UsageError(f"{'--memory-cap' if args.memory_cap is not None else '--atoms'} goes with --pattern fsdp")
    args.decoupled = True
    problem, label = _problem_for_compare(args)
    zero2, megatron = zero2_settings(problem, data_parallel_size=args.workers, min_gain=args.min_gain)
    if args.json:
        print(json.dumps({"zero2": None if zero2 is None else zero2.to_dict(), "megatron": megatron.to_dict()},
                         indent=1))
        return
    print(f"workload  {label}: {plural(problem.profile.n, 'tensor')}, {problem.profile.total_bytes / 2**20:.1f} MiB, "
          f"sync {problem.sync}")
    if zero2 is None:
        print("deepspeed ZeRO-2 gathers in its step (sync barrier only): not judged under layerwise sync")
    else:
        _print_grid("deepspeed", "ZeRO-2 (zero_optimization)", zero2)
    _print_grid("megatron", "DistributedDataParallelConfig", megatron)
    print("(peak memory: the decoupled all-reduce keeps every parameter whole; it is not modelled)")


def _print_grid(label: str, where: str, setting: Any) -> None:
    shown = ", ".join([f"{key}={json.dumps(value)}" if isinstance(value, bool)          # as in a JSON config
                       else f"{key}={value:g}" if isinstance(value, (int, float)) else f"{key}={value}"
                       for key, value in setting.options.items()]
                      + ([f"leave {', '.join(setting.grid)} unset"] if setting.unset else []))
    memory = "" if setting.peak_memory is None else f", peak {setting.peak_memory / 2**20:.1f} MiB"
    default_memory = "" if setting.default_peak_memory is None else f", peak {setting.default_peak_memory / 2**20:.1f} MiB"
    over = "" if setting.default_feasible else ", over the cap"
    print(f"{label:<9} {where}: {shown}: T = {1e3 * setting.iteration_time:.3f} ms{memory} "
          f"(defaults: {1e3 * setting.default_iteration_time:.3f} ms{default_memory}{over}; {setting.tried} tried)")


def _cmd_zoo(args: argparse.Namespace) -> None:
    rows = [("model", "parameters", "tensors", "GFLOPs/sample", "description")]
    for name, description in zoo.models().items():
        arch = zoo.architecture(name)
        rows.append((name, f"{arch.parameters:,}", str(len(arch.tensors)), f"{arch.flops / 1e9:.2f}", description))
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    for row in rows:
        print("  ".join([row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:4], widths[1:])] + [row[4]]))


def _cmd_profile(args: argparse.Namespace) -> None:
    sources = [name for name in ("model", "input", "trace", "torch") if getattr(args, name) is not None]
    if len(sources) != 1:
        raise UsageError("give exactly one of --model, --input, --trace or --torch")
    for flag in ("parameters", "timeline", "statistic"):
        if getattr(args, flag) is not None and args.trace is None:
            raise UsageError(f"--{flag} goes with --trace")
    if args.input_shape is not None and args.torch is None:
        raise UsageError("--input-shape goes with --torch")
    device, batch = _zoo_settings(args, None if args.model is not None else f"--{sources[0]}")
    if args.model is not None:
        profile, _ = _zoo_profile(args, device, batch)
    elif args.input is not None:
        profile = _read_profile(args.input)
    elif args.trace is not None:
        profile = _profile_from_trace(args)
    else:
        profile = _profile_from_torch(args)
    if args.output:
        _refuse_writing_over(args.output, args, "input", "parameters", "trace")
        _refuse_writing_over_trace_folder(args, profile)
        if not args.output.lower().endswith((".json", ".csv")):
            raise UsageError(f"--output {args.output}: a profile is written as JSON or CSV: give a .json or .csv file name")
        _write_profile(profile, args.output)
        print(f"wrote {args.output}: {profile!r}{_clock(profile) if args.trace is not None else ''}")
    elif args.csv:
        sys.stdout.write(profile_csv_text(profile))
    else:
        print(profile.to_json())


def _profile_from_trace(args: argparse.Namespace) -> Profile:
    from fusionopt.integrations.kineto import profile_from_trace, profile_from_traces

    parameters = _trace_parameters(args.trace, args.parameters)
    stem = Path(args.trace).name.split(".")[0]
    options = {"timeline": args.timeline or "auto", "name": stem, "statistic": args.statistic or "median"}
    if Path(args.trace).is_dir():                 # one trace per rank
        return profile_from_traces(args.trace, parameters, **options)
    return profile_from_trace(args.trace, parameters, **options)


def _clock(profile: Profile) -> str:
    """Which clock timed a profile read from a trace, and why."""
    return f"; timed by {describe_clock(profile.metadata)}"


def _refuse_writing_over_trace_folder(args: argparse.Namespace, profile: Profile) -> None:
    """``--output`` onto a file ``profile --trace FOLDER`` read (a rank's trace, or the
    folder's ``parameters.csv`` taken by default) is refused: it would be lost."""
    if args.trace is None or not Path(args.trace).is_dir():
        return
    folder = Path(args.trace)
    read = [folder / name for name in profile.metadata.get("ranks", {}).values()]
    if args.parameters is None:
        read.append(folder / PARAMETERS_FILE)
    target = Path(args.output).resolve()
    for path in read:
        if path.resolve() == target:
            raise UsageError(f"--output {args.output} is a file --trace {args.trace} read: writing it would lose "
                             "the input; give another file")


def _trace_parameters(trace: str, path: str | None) -> Any:
    """``--parameters`` for a trace; without it, a folder's ``parameters.csv`` or the list the
    trace's recorded shapes give (names ``param0, param1, ...``)."""
    from fusionopt.integrations.kineto import parameters_from_trace
    from fusionopt.integrations.traced_step import folder_parameters

    if path is not None:
        return _read_parameters(path)
    return folder_parameters(trace) or parameters_from_trace(trace)


def _cmd_traced(args: argparse.Namespace) -> None:
    from fusionopt.integrations.traced_step import predict_traced_step

    if args.profiler_cost is not None and not (math.isfinite(args.profiler_cost) and args.profiler_cost >= 0):
        raise UsageError(f"--profiler-cost must be a finite number of seconds >= 0, got {args.profiler_cost:g}")
    result = predict_traced_step(args.traces, _trace_parameters(args.traces, args.parameters),
                                 statistic=args.statistic, timeline=args.timeline, profiler_cost=args.profiler_cost)
    clock = describe_clock(result.profile.metadata)
    cost = result.profiler_cost
    if args.json:
        print(json.dumps({"predicted": result.predicted, "measured": result.measured, "error": result.error,
                          "predicted_parts": result.predicted_parts, "measured_parts": result.measured_parts,
                          "copied_parts": list(COPIED_PARTS), "predicted_part": PREDICTED_PART,
                          "exposed_error": result.exposed_error, "exposed_difference": result.exposed_difference,
                          "copied_difference": result.copied_difference,
                          "buckets": [m.nbytes for m in result.plan.messages], "timeline": result.profile.metadata["timeline"],
                          "clock": clock,
                          "predicted_unprofiled": result.predicted_unprofiled,
                          "unprofiled_parts": result.unprofiled_parts, "replayed_unprofiled": result.replayed,
                          "measured_unprofiled": result.measured_unprofiled,
                          "unprofiled_error": result.unprofiled_error,
                          "profiler_cost": {"seconds_per_event": cost.seconds_per_event, "source": cost.source,
                                            "detail": cost.detail},
                          "unprofiled_clock": describe_clock(result.unprofiled_profile.metadata),
                          "unprofiled_note": result.unprofiled_note},
                         indent=1))
        return
    print(f"{args.traces}: {plural(result.profile.n, 'tensor')}, {plural(result.plan.num_messages, 'bucket')}, "
          f"{result.profile.metadata['steps']} steps ({args.statistic}s), {result.profile.metadata['timeline']} clock")
    exposed = "none measured" if result.exposed_error is None else f"error {100 * result.exposed_error:+.1f}%"
    exposed = f"{exposed} ({1e3 * result.exposed_difference:+.3f} ms)"
    print(f"{'part':<15} {'measured ms':>12} {'predicted ms':>13}   predicted by")
    for part, measured in result.measured_parts.items():
        source = f"the model: {exposed}" if part == PREDICTED_PART else "(copied from the trace)"
        print(f"{part:<15} {1e3 * measured:>12.3f} {1e3 * result.predicted_parts[part]:>13.3f}   {source}")
    print(f"{'step':<15} {1e3 * result.measured:>12.3f} {1e3 * result.predicted:>13.3f}   "
          f"error {100 * result.error:+.1f}%")
    print(f"Only {PREDICTED_PART} (the communication the step waits for) is predicted, from the all-reduce cost "
          f"fitted to the traces and the job's buckets; the {len(COPIED_PARTS)} other parts are the trace's own "
          f"measurements. The step's error, {1e3 * (result.predicted - result.measured):+.3f} ms, is the "
          f"{PREDICTED_PART} part's {1e3 * result.exposed_difference:+.3f} ms and "
          f"{round(1e3 * result.copied_difference, 3) + 0.0:+.3f} ms from the copied parts (where the measured "
          "parts do not add up to the measured period).")
    print(f"Timed by {clock}.")
    print(f"Without the profiler (predicted: the traces replayed with its cost, {cost.describe()}, taken out of the "
          "host's time, then read and simulated as above):")
    print(f"{'part':<15} {'unprofiled ms':>14}")
    for part, seconds in result.unprofiled_parts.items():
        print(f"{part:<15} {1e3 * seconds:>14.3f}")
    check = ("not measured" if result.measured_unprofiled is None else
             f"measured {1e3 * result.measured_unprofiled:.3f} ms, error {100 * result.unprofiled_error:+.1f}%")
    print(f"{'step':<15} {1e3 * result.predicted_unprofiled:>14.3f}   {check}")
    print(f"The replayed steps last {1e3 * result.replayed:.3f} ms; timed by "
          f"{describe_clock(result.unprofiled_profile.metadata)}.")


def _read_parameters(path: str) -> Profile | list[tuple[str, int]]:
    """``--parameters``: a profile file, or just the parameters' names and bytes in forward
    order: a CSV with ``name`` and ``size_bytes`` columns, or a JSON list of ``[name, bytes]``
    pairs or object of ``name: bytes`` (what ``profile_from_trace`` reads from a path)."""
    return read_parameter_list(path)


def _profile_from_torch(args: argparse.Namespace) -> Profile:
    import importlib

    from fusionopt.integrations.torch import profile_model, require_torch

    module_name, _, factory_name = args.torch.partition(":")
    if not module_name or not factory_name:
        raise UsageError(f"--torch takes MODULE:FACTORY (a function returning a torch.nn.Module), got {args.torch!r}")
    if args.input_shape is None:
        raise UsageError("--torch needs --input-shape, e.g. 32,3,224,224 (a float tensor of that shape)")
    shape = _comma_list("--input-shape", args.input_shape, int)
    try:
        torch = require_torch()
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    here = os.getcwd()                # a module in the current folder, as `python -c` would find it
    sys.path.insert(0, here)
    try:
        factory = getattr(importlib.import_module(module_name), factory_name)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"--torch {args.torch}: {exc}") from None
    finally:
        sys.path.remove(here)
    model = factory()
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"--torch {args.torch} returned {type(model).__name__}, not a torch.nn.Module")
    device = args.torch_device
    inputs = torch.randn(*shape, device=device)
    return profile_model(model.to(device), inputs, steps=args.steps, warmup=args.warmup, device=device,
                         name=factory_name)


# ---------------------------------------------------------------------- sweep
def _comma_list(option: str, text: str, convert: Any = str) -> list[Any]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise UsageError(f"{option} needs at least one comma-separated value")
    try:
        return [convert(item) for item in items]
    except ValueError:
        raise UsageError(f"{option} takes comma-separated integers, got {text!r}") from None


def _cmd_sweep(args: argparse.Namespace) -> None:
    from fusionopt import sweep

    device, batch = _zoo_settings(args, None)
    options = {option: getattr(args, option) for option in ZOO_COMPUTE_OPTIONS if getattr(args, option) is not None}
    grid = sweep.cells(_comma_list("--models", args.models), _comma_list("--workers", args.workers, int),
                       _comma_list("--networks", args.networks),
                       _comma_list("--methods", args.methods) if args.methods is not None else None,
                       device=device, batch=batch, sync=args.sync, algorithm=args.algorithm, **options)
    to_run = len(sweep.pending_cells(grid, args.output, retry_errors=args.retry_errors, time_limit=args.time_limit))
    try:
        with contextlib.ExitStack() as stack:
            executor = _dask_executor(args, stack) if (args.dask or args.scheduler) and to_run else None
            records = sweep.run_sweep(grid, args.output, jobs=args.jobs, time_limit=args.time_limit,
                                      progress=not args.no_progress, retry_errors=args.retry_errors,
                                      executor=executor)
    except RuntimeError as exc:     # a worker died or a task was lost: status 1, the file is kept
        _fail(exc)
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


def _add_sweep_parser(commands: Any) -> None:
    p = commands.add_parser("sweep", help="solve models x workers x networks x methods in parallel; resumable")
    p.add_argument("--models", required=True, help="comma-separated zoo models (`fusionopt zoo`)")
    p.add_argument("--workers", required=True, help="comma-separated worker counts, e.g. 8,64,512")
    p.add_argument("--networks", required=True, help=f"comma-separated network presets: {', '.join(networks())}")
    p.add_argument("--methods", help="comma-separated methods (default: the all-reduce comparison for --sync); "
                                     "decoupled and fully sharded methods solve their own pattern on each network "
                                     "preset's reduce-scatter and all-gather")
    p.add_argument("--output", required=True, metavar="RESULTS.jsonl|RESULTS.csv",
                   help="results file, one record per cell; run again on it to resume")
    _add_zoo_arguments(p)
    p.add_argument("--sync", default="barrier", choices=("barrier", "layerwise"),
                   help="when the next forward may start (default barrier)")
    p.add_argument("--algorithm", default="ring", help=f"all-reduce algorithm: {', '.join(ALGORITHMS)} (ring or "
                                                       "rabenseifner for decoupled and fully sharded methods)")
    p.add_argument("--jobs", type=int, help="worker processes (default: the number of CPUs)")
    p.add_argument("--time-limit", type=float, metavar="S",
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
def _cmd_run(args: argparse.Namespace) -> None:
    from fusionopt.executor import CorrectnessError, run

    profile, problem, plan = _read_problem_and_plan(args)
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
        _fail(exc)
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
        _fail(failure)


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


def _fail(exc: BaseException) -> None:
    """Report a run that failed (not a usage error) in one line; exit status 1."""
    print(f"fusionopt: error: {' '.join(str(exc).split())}", file=sys.stderr)
    raise SystemExit(1)


def _cmd_calibrate(args: argparse.Namespace) -> None:
    from fusionopt.executor import calibrate

    if args.reducer is not None:
        _calibrate_reducer(args)
        return
    if args.contention:
        _calibrate_contention(args)
        return
    for flag, given in (("--emulate-network", args.emulate_network), ("--workers", args.workers)):
        if given is not None:
            raise UsageError(f"{flag} names the emulated link of a contention calibration and goes with --contention")
    if args.ranks is None:
        args.ranks = 2
    _json_output(args.output, "the cost")
    from fusionopt.executor.calibrate import SweepSpec, default_sizes

    count = len(default_sizes(args.min_bytes, args.max_bytes))
    # Each size is timed for about seconds_per_size, after as long again of warm-up and set-up.
    print(f"fusionopt calibrate: timing {count} message sizes on {args.backend} with {args.ranks} ranks, "
          f"about {count * SweepSpec.seconds_per_size * 2:.0f} s", file=sys.stderr, flush=True)
    try:
        result = calibrate(args.backend, ranks=args.ranks, min_bytes=args.min_bytes, max_bytes=args.max_bytes,
                           iterations=args.iterations, timeout=args.timeout, collective=args.collective)
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    except RuntimeError as exc:
        _fail(exc)
    if args.output:
        result.write(args.output, args.model)
    if args.json:
        print(json.dumps(result.to_dict(args.model), indent=1))
        return
    print(f"backend  {result.description}")
    print(result.table())
    if args.output:
        flag = {"all_reduce": "--cost", "reduce_scatter": "--reduce-scatter-cost",
                "all_gather": "--all-gather-cost"}[args.collective]
        print(f"wrote {args.output}: the {args.model} fit (read it with {flag} {args.output})")


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
    _json_output(args.output, "the reducer calibration")
    print(f"fusionopt calibrate: the {args.reducer} reducer's own cost on {ranks} gloo ranks, about a minute "
          "(Ctrl-C stops it)", file=sys.stderr, flush=True)
    try:
        result = measure_reducer_overhead(args.reducer, ranks)
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    except RuntimeError as exc:
        _fail(exc)
    if args.output:
        result.write(args.output)
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
        return
    print(result.summary())
    if args.output:
        print(f"wrote {args.output}: read it with --reducer-calibration {args.output} (simulate, advise)")


def _calibrate_contention(args: argparse.Namespace) -> None:
    """``calibrate --contention``: both slowdowns measured on the GPU(s), written as JSON."""
    from fusionopt.executor.contention import DEFAULT_LINK, ContentionSpec, calibrate_contention, check_gpus

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
    _json_output(args.output, "the contention")
    network_name = args.emulate_network or DEFAULT_LINK[0]
    workers = args.workers if args.workers is not None else DEFAULT_LINK[1]
    link = network(network_name, workers) if ranks == 1 else None
    spec = ContentionSpec(timeout=args.timeout)
    try:
        check_gpus(ranks)
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    except RuntimeError as exc:
        _fail(exc)
    where = f"an emulated {network_name} link of {workers} workers" if ranks == 1 else f"NCCL over {ranks} GPUs"
    print(f"fusionopt calibrate: contention of GEMMs and messages ({where}) at {len(spec.sizes)} message sizes, "
          "about 10 s", file=sys.stderr, flush=True)
    try:
        result = calibrate_contention(ranks=ranks, link=link, spec=spec,
                                      link_name={"network": network_name, "workers": workers, "cost": repr(link)})
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    except RuntimeError as exc:
        _fail(exc)
    if args.output:
        result.write(args.output)
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
        return
    print(f"device   {result.device}: {result.description}")
    print(result.table())
    if args.output:
        print(f"wrote {args.output}: read it with --contention-file {args.output} (contention "
              f"{result.contention:.4g}, comm_contention {result.comm_contention:.4g})")


def _add_executor_parsers(commands: Any) -> None:
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
    _add_cost_arguments(p)
    p.set_defaults(run=_cmd_run)

    p = commands.add_parser("calibrate", help="time a collective against size on a backend; fit cost models")
    p.add_argument("--backend", default="local", choices=("local", "mpi", "nccl"))
    p.add_argument("--ranks", type=int, help="number of ranks (default 2; 1 with --contention)")
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
    p.add_argument("--min-bytes", type=int, default=256, help="smallest message (default 256)")
    p.add_argument("--max-bytes", type=int, default=64 << 20, help="largest message (default 64 MiB)")
    p.add_argument("--iterations", type=int, default=20, help="timed messages per size, at most (default 20)")
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
    p.add_argument("--json", action="store_true", help="print the cost JSON instead of a table")
    p.set_defaults(run=_cmd_calibrate)


# ---------------------------------------------------------------------- plot (timeline, sweep)
def _outputs(args: argparse.Namespace) -> list[str]:
    """The --output files, their formats checked before any work is done."""
    from fusionopt.viz import image_format

    for path in args.output:
        image_format(path)
    return args.output


PLOT_METHODS = {"all-reduce": "dp", "ps": "ps-dp", "decoupled": "decoupled-dp", "fully-sharded": "fsdp2"}
"""The method whose plan ``plot timeline`` draws when none is named, for each pattern."""


def _cmd_plot_timeline(args: argparse.Namespace) -> None:
    from fusionopt import viz

    outputs = _outputs(args)
    problem, label = _problem_for_compare(args)
    if args.plan is not None:
        if args.method is not None or args.option:
            raise UsageError("give --method (with --option) or --plan, not both")
        plan = problem.pattern.plan_type.read(args.plan)
        try:
            plan.validate(problem.profile)
        except ValueError as exc:
            raise ValueError(f"{args.plan}: {exc}") from None
        source, name = plan, args.plan
    else:
        name = args.method or PLOT_METHODS[problem.pattern.step]
        source = solve(problem, name, **_parse_options(args.option))
    setting = (f"{args.workers} workers, {args.network}" if args.network is not None
               else f"{problem.cost!r}" if problem.cost is not None else "")
    halves = problem.pattern
    if halves.is_a("decoupled") or halves.is_a("fully-sharded"):
        if args.network is None:
            setting = f"reduce-scatter {halves.reduce_scatter!r}, all-gather {halves.all_gather!r}"
        setting += f"; {halves.words}"
        if halves.is_a("fully-sharded"):
            cap = problem.pattern.memory_cap
            setting += "" if cap is None else f", memory cap {cap / 2**20:.4g} MiB"
            setting += ", two channels" if problem.pattern.channels == "two" else ""
            setting += ", blocking collectives" if problem.pattern.blocking else ""
    plan_note = f"; plan {args.plan}" if args.plan is not None else ""
    title = args.title if args.title is not None else f"{label}; {setting}{plan_note}"
    try:
        written = viz.save_timeline(source, problem, outputs, title=title, color_by=args.color_by, dpi=args.dpi)
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    timeline = source.timeline if args.plan is None else simulate(problem, source, validate=False)
    count = timeline.num_messages
    what = f"{count} message{'s' if count != 1 else ''}"
    if timeline.message_kind is not None:                  # decoupled or fully sharded: its collectives
        kinds = timeline.message_collectives(_reduce_with(source.plan if args.plan is None else source))
        what = f"{count} collective{'s' if count != 1 else ''} (" + ", ".join(
            f"{kinds.count(kind)} {kind}{'s' if kinds.count(kind) != 1 else ''}"
            for kind in ("all-gather", "reduce-scatter", "all-reduce") if kind in kinds) + ")"
    if timeline.peak_memory is not None:
        what += f", peak memory {timeline.peak_memory / 2**20:.3f} MiB"
    print(f"{name}: T = {1e3 * timeline.iteration_time:.6f} ms, exposed {1e3 * timeline.exposed:.6f} ms, {what}")
    for path in written:
        print(f"wrote {path}")


def _cmd_plot_sweep(args: argparse.Namespace) -> None:
    from fusionopt import viz
    from fusionopt.sweep import read_results

    outputs = _outputs(args)
    records = read_results(args.results)
    try:
        written = viz.save_sweep(records, outputs, metric=args.metric, model=args.model, network=args.network,
                                 title=args.title, dpi=args.dpi, log_y=args.log_y)
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    errors = sum(1 for r in records if str(r.get("status")).upper() == "ERROR")
    if errors:
        print(f"skipped {errors} record{'s' if errors != 1 else ''} with status ERROR (no numbers)")
    for path in written:
        print(f"wrote {path}")


def _add_plot_parsers(commands: Any) -> None:
    from fusionopt.viz import SWEEP_METRICS

    plot = commands.add_parser("plot", help="draw a timeline (Gantt chart) or a sweep as PNG or SVG (extra plot)")
    kinds = plot.add_subparsers(dest="plot", parser_class=_Parser, metavar="PLOT")
    kinds.required = True

    p = kinds.add_parser("timeline", help="Gantt chart of one plan: compute stream, channel(s), exposed time; "
                                          "with --fully-sharded, the memory over the step under it")
    p.add_argument("--model", help=f"a zoo model: {', '.join(zoo.models())}")
    p.add_argument("--profile", metavar="PROFILE.json|.csv", help="a profile instead of a zoo model")
    _add_zoo_arguments(p)
    p.add_argument("--method", help="the method whose plan to draw (default dp; ps-dp on a parameter server, "
                                    "decoupled-dp with --decoupled, fsdp2 with --fully-sharded)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a method option, VALUE as `fusionopt methods --options` prints it: True, None, "
                        "25, 1e-09, [1, 2], 'text' or text (repeatable)")
    p.add_argument("--plan", metavar="PLAN.json", help="draw this plan instead of solving")
    p.add_argument("--output", action="append", required=True, metavar="FILE.png|FILE.svg",
                   help="image to write, format by extension (repeatable)")
    p.add_argument("--title", help="first title line (default: the workload, network and method)")
    p.add_argument("--color-by", default="kind", choices=("kind", "tensor"),
                   help="colour bars by what they are or by tensor (default kind)")
    p.add_argument("--dpi", type=float, default=110, help="PNG resolution (default 110)")
    _add_cost_arguments(p)
    p.set_defaults(run=_cmd_plot_timeline)

    p = kinds.add_parser("sweep", help="a sweep's metric against workers, one line per method")
    p.add_argument("results", metavar="RESULTS.jsonl|RESULTS.csv", help="results of `fusionopt sweep`")
    p.add_argument("--metric", default="scaling_efficiency", choices=SWEEP_METRICS,
                   help="y axis (default scaling_efficiency)")
    p.add_argument("--model", help="draw only this model (default: one panel per model and network)")
    p.add_argument("--network", help="draw only this network")
    p.add_argument("--output", action="append", required=True, metavar="FILE.png|FILE.svg",
                   help="image to write, format by extension (repeatable)")
    p.add_argument("--title", help="figure title (default: the metric)")
    p.add_argument("--log-y", action="store_true", help="a logarithmic y axis in every panel")
    p.add_argument("--dpi", type=float, default=110, help="PNG resolution (default 110)")
    p.set_defaults(run=_cmd_plot_sweep)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fusionopt", description="Tensor fusion and partition schedules for data-parallel training.")
    parser.add_argument("--version", action="version", version=f"fusionopt {__version__}")
    commands = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    commands.required = True

    p = commands.add_parser("methods", help="list the methods with a one-line description")
    p.add_argument("--options", action="store_true", help="also list each method's options and their defaults")
    p.set_defaults(run=_cmd_methods)

    p = commands.add_parser("solve", help="solve a profile with one method")
    p.add_argument("profile", metavar="PROFILE.json|.csv")
    p.add_argument("--method", default="wfbp", help="a name from `fusionopt methods` (default wfbp)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a method option, VALUE as `fusionopt methods --options` prints it: True, None, "
                        "25, 1e-09, [1, 2], 'text' or text (repeatable)")
    p.add_argument("--output", metavar="PLAN.json", help="write the plan as JSON")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    _add_cost_arguments(p)
    p.set_defaults(run=_cmd_solve)

    p = commands.add_parser("simulate", help="simulate a plan on a profile")
    p.add_argument("profile", metavar="PROFILE.json|.csv")
    p.add_argument("--plan", required=True, metavar="PLAN.json")
    p.add_argument("--json", action="store_true", help="print the timeline as JSON")
    p.add_argument("--reducer-calibration", metavar="R.json",
                   help="add a reducer's own cost per message and per step, as fusionopt calibrate --reducer "
                        "measured it")
    _add_cost_arguments(p)
    p.set_defaults(run=_cmd_simulate)

    p = commands.add_parser("compare", help="compare methods on a zoo model or a profile")
    p.add_argument("--model", help=f"a zoo model: {', '.join(zoo.models())}")
    p.add_argument("--profile", metavar="PROFILE.json|.csv", help="a profile instead of a zoo model")
    _add_zoo_arguments(p)
    p.add_argument("--methods", help="comma-separated method names (default: all)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    _add_cost_arguments(p)
    p.set_defaults(run=_cmd_compare)

    p = commands.add_parser("advise", help="framework settings: DDP and Horovod closest to a method's plan; "
                                           "ZeRO-2 and Megatron, or FSDP2 and ZeRO-3 (--pattern)")
    p.add_argument("--model", help=f"a zoo model: {', '.join(zoo.models())}")
    p.add_argument("--profile", metavar="PROFILE.json|.csv", help="a profile instead of a zoo model")
    _add_zoo_arguments(p)
    p.add_argument("--method", default="dp", help="the method whose plan to follow (default dp)")
    p.add_argument("--horovod-backend", default="nccl", choices=("nccl", "gloo", "mpi"),
                   help="judge Horovod settings under GPU (nccl, default) or CPU (gloo, mpi) behaviour")
    p.add_argument("--pattern", default="allreduce", choices=("allreduce", "zero2", "fsdp"),
                   help="allreduce (DDP, Horovod; default), zero2 (DeepSpeed ZeRO-2 and Megatron-LM bucket sizes) "
                        "or fsdp (FSDP2 calls and DeepSpeed ZeRO-3 sizes, with --memory-cap)")
    p.add_argument("--atoms", choices=("block", "module"),
                   help="with --pattern fsdp: what a fully_shard call may wrap: whole blocks or any run of modules "
                        "(default: whole blocks, modules where no plan of whole blocks fits --memory-cap)")
    p.add_argument("--json", action="store_true", help="print the settings as JSON")
    p.add_argument("--min-gain", type=fraction, default=MIN_GAIN, metavar="FRACTION",
                   help=f"replace a framework's default only with a setting predicted at least this fraction "
                        f"faster (default {MIN_GAIN:g}: below it the model's error on real jobs is larger than the "
                        f"gain; 0: any gain)")
    p.add_argument("--reducer-calibration", metavar="R.json",
                   help="add a reducer's own cost per message and per step, as fusionopt calibrate --reducer "
                        "measured it (a ddp or plan calibration for --pattern allreduce, fsdp2 for --pattern fsdp)")
    _add_cost_arguments(p)
    p.set_defaults(run=_cmd_advise)

    p = commands.add_parser("zoo", help="list the zoo models")
    p.set_defaults(run=_cmd_zoo)

    p = commands.add_parser("profile", help="a profile from a zoo model, a file, a PyTorch trace or a PyTorch model")
    source = p.add_argument_group("source (exactly one)")
    source.add_argument("--model", help=f"a zoo model: {', '.join(zoo.models())}")
    source.add_argument("--input", metavar="PROFILE.json|PROFILE.csv", help="a profile file (to convert it)")
    source.add_argument("--trace", metavar="TRACE.json[.gz]|FOLDER",
                        help="a PyTorch profiler (Kineto) chrome trace of training steps, or a folder of "
                             "one per rank")
    source.add_argument("--torch", metavar="MODULE:FACTORY",
                        help="measure a PyTorch model: MODULE.FACTORY() returns it; needs --input-shape (extra torch)")
    _add_zoo_arguments(p)
    p.add_argument("--parameters", metavar="PARAMS.json|PARAMS.csv",
                   help="for --trace: the parameters' names and bytes in forward order: a CSV with name and "
                        "size_bytes columns, a JSON list of [name, bytes] or object of name: bytes, or a profile "
                        "(default: the folder's parameters.csv, else read from the trace's recorded shapes)")
    p.add_argument("--timeline", choices=("auto", "cpu", "gpu"),
                   help=f"for --trace: which clock times the steps (default auto: {TIMELINE_HELP})")
    p.add_argument("--statistic", choices=("median", "mean"),
                   help="for --trace: how the traced steps (and ranks) are summed up, per tensor and part (default "
                        "median: figures for planning that one odd step does not move; `traced` takes means, as it "
                        "predicts the mean period, whose parts means add up to)")
    p.add_argument("--input-shape", metavar="D0,D1,...", help="for --torch: shape of a random float input")
    p.add_argument("--torch-device", default="cpu", help="for --torch: cpu or cuda (default cpu)")
    p.add_argument("--steps", type=int, default=10, help="for --torch: timed steps, medians taken (default 10)")
    p.add_argument("--warmup", type=int, default=3, help="for --torch: untimed steps first (default 3)")
    p.add_argument("--output", metavar="PROFILE.json|PROFILE.csv", help="write the profile (format by extension)")
    p.add_argument("--csv", action="store_true", help="print CSV instead of JSON when there is no --output")
    p.set_defaults(run=_cmd_profile)

    p = commands.add_parser("traced", help="a traced DDP job's step: predicted from its traces against measured")
    p.add_argument("traces", metavar="FOLDER|TRACE.json[.gz]", help="the job's traces, one per rank")
    p.add_argument("--parameters", metavar="PARAMS.json|PARAMS.csv",
                   help="the parameters' names and bytes in forward order (as for `profile --trace`; default: "
                        "the folder's parameters.csv, else read from the trace's recorded shapes)")
    p.add_argument("--statistic", default="mean", choices=("mean", "median"),
                   help="how steps, ranks and repeats are summed up (default mean: the mean period is a "
                        "throughput, and means add up; `profile --trace` takes medians by default)")
    p.add_argument("--timeline", default="auto", choices=("auto", "cpu", "gpu"),
                   help=f"which clock times the steps (default auto: {TIMELINE_HELP})")
    p.add_argument("--profiler-cost", type=float, metavar="SECONDS",
                   help=f"the profiler's host cost per recorded event, for the step without the profiler (default: "
                        f"the folder's {PROFILER_COST_FILE}, measured when the job was recorded, else "
                        f"{DEFAULT_PROFILER_COST.seconds_per_event:g}, fitted to H100 traces)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(run=_cmd_traced)

    _add_executor_parsers(commands)
    _add_plot_parsers(commands)
    _add_sweep_parser(commands)
    return parser


def _show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
    print(f"fusionopt: warning: {' '.join(str(message).split())}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status. Warnings print as one line each."""
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            args = build_parser().parse_args(argv)
            for flag in ("decoupled", "fully_sharded"):
                if getattr(args, flag, False) and args.run is _cmd_advise:
                    raise UsageError(f"--{flag.replace('_', '-')}: advise takes --pattern zero2 (decoupled) or "
                                     "--pattern fsdp (fully sharded) instead")
                if getattr(args, flag, False) and args.run not in (_cmd_solve, _cmd_simulate, _cmd_compare, _cmd_run,
                                                                   _cmd_plot_timeline):
                    raise UsageError(f"--{flag.replace('_', '-')} is taken by solve, simulate, compare, run and plot "
                                     "timeline; this command plans or runs all-reduce problems only")
            args.run(args)
            sys.stdout.flush()          # a closed pipe shows here, not at the interpreter's exit
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt as exc:
        kept = f"; {exc}" if isinstance(exc, Kept) else ""
        print(f"fusionopt: interrupted{kept}", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        # The reader left (`fusionopt methods | head -2`): stop without a word, as the Python
        # documentation advises, and keep the interpreter's last flush off the closed pipe.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (UsageError, ValueError, KeyError, OSError) as exc:
        message = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"fusionopt: error: {' '.join(message.split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
