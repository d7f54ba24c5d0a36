"""A problem from the command line's flags: the cost (``--alpha/--beta``, ``--cost``,
``--network``), the pattern (``--ps-servers``, ``--decoupled``, ``--fully-sharded``,
``--replicas``), the extensions, and the zoo's profiles (``--model``)."""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import math
from typing import Any, Sequence
from fusionopt import zoo
from fusionopt.cost import ALGORITHMS, AlphaBeta, Cheapest, Encoded, PowerSGD, cost_from_dict, network, networks
from fusionopt.integrations._reducer_calibration import (
    read_reducer_calibration, reducer_cost_words, with_reducer_overhead,
)
from fusionopt.model import Problem, Profile
from fusionopt.model._decoupled import Decoupled
from fusionopt.model._encoding import encoding_named
from fusionopt.model._hsdp import HSDP
from fusionopt.model._sharded import FullySharded
from fusionopt.model._ps import ParameterServer
from fusionopt.model._io import read_json_document
from fusionopt.cli._common import UsageError, comma_list, read_profile


# ---------------------------------------------------------------------- shared arguments
def add_cost_arguments(parser: argparse.ArgumentParser, *, required: bool = True, powersgd: bool = False) -> None:
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
    wire = parser.add_argument_group("what goes on the wire (default: every message in fp32)")
    wire.add_argument("--encodings", metavar="LIST",
                      help="the encodings a message may travel in, of fp32, fp16, bf16 (torch's compress hooks); "
                           "with several, each message takes its cheapest (MODEL.md section 2.2)")
    wire.add_argument("--cast-per-byte", type=float, metavar="S",
                      help="with --encodings: seconds per fp32 byte to encode and decode fp16 or bf16 (default 0)")
    wire.add_argument("--cast-per-message", type=float, metavar="S",
                      help="with --encodings: seconds per message to encode and decode fp16 or bf16 (default 0)")
    wire.add_argument("--cast-compute-per-byte", type=float, metavar="S",
                      help="with --encodings of one lossy encoding: seconds per fp32 byte of the cast the hook runs "
                           "on the backward's stream before it posts the message (DDP's compress hooks), which "
                           "delays the rest of the backward; --cast-per-byte then prices the rest, on the "
                           "message's path (default 0)")
    wire.add_argument("--cast-compute-per-message", type=float, metavar="S",
                      help="with --encodings of one lossy encoding: seconds per message of that cast (default 0)")
    wire.add_argument("--exact-tensors", metavar="LIST",
                      help="with --encodings of fp32 and a lossy one: the tensors that must travel exactly, every "
                           "message carrying one sent in fp32 (an error budget: at most the others compressed); "
                           "comma-separated names, forward indices or name patterns (*.bias, *norm*)")
    if powersgd:
        hook = parser.add_argument_group("torch's PowerSGD comm hook on every DDP bucket (MODEL.md section 2.4; "
                                         "default off)")
        hook.add_argument("--powersgd-rank", type=int, metavar="R",
                          help="price every message as powerSGD_hook sends it once it compresses, at "
                               "matrix_approximation_rank R; the ddp method builds its buckets from the gradients' bytes")
        for flag, what in (("--powersgd-min-compression-rate", "min_compression_rate (default 2)"),
                           ("--powersgd-start-iter", "start_powerSGD_iter, the plain steps first (default 1000)"),
                           ("--powersgd-per-byte", "seconds per byte of a bucket for the hook's passes over it "
                                                   "(default 0)"),
                           ("--powersgd-per-flop", "seconds per flop of the hook's matrix products (default 0)"),
                           ("--powersgd-per-message", "seconds per bucket for the hook's other work (default 0)")):
            hook.add_argument(flag, type=int if flag.endswith("iter") else float, metavar="N" if flag.endswith("iter")
                              else "X", help=f"with --powersgd-rank: {what}")
        hook.add_argument("--powersgd-as-choice", action="store_true",
                          help="with --powersgd-rank: the hook is one choice per message instead, beside --encodings "
                               "(each message of whole tensors at the cheaper of the two; --exact-tensors keeps the "
                               "tensors the hook would compress off it), as wire_comm_hook(powersgd=, through=) sends it")
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
    for flag, what in (("--param-dtype", "the unsharded parameters and the all-gathers in DTYPE"),
                       ("--reduce-dtype", "the gradients reduced in DTYPE (default --param-dtype)")):
        full.add_argument(flag, choices=("fp32", "fp16", "bf16"), metavar="DTYPE",
                          help=f"with --fully-sharded: FSDP2's MixedPrecisionPolicy, {what}; fp32, fp16 or bf16 "
                               "(default: the profile's fp32)")


def problem_from_flags(profile: Profile, args: argparse.Namespace) -> Problem:
    """The problem the arguments describe; the profile's step parts are fitted to its pattern's
    step (MODEL.md section 4.1), each change said in a warning line."""
    casts = ("cast_per_byte", "cast_per_message", "cast_compute_per_byte", "cast_compute_per_message")
    if args.encodings is None and any(getattr(args, flag) is not None for flag in casts):
        raise UsageError("--cast-per-byte, --cast-per-message, --cast-compute-per-byte and --cast-compute-per-message "
                         "price the casts of --encodings and go with it")
    if args.encodings is not None and (args.decoupled or args.fully_sharded or args.ps_servers is not None):
        raise UsageError("--encodings prices all-reduce messages; the decoupled, fully sharded and "
                         "parameter-server patterns do not take it yet")
    exact = exact_tensors_from_flags(profile, args)
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
    for flag, given in (("--param-dtype", getattr(args, "param_dtype", None)),
                        ("--reduce-dtype", getattr(args, "reduce_dtype", None))):
        if given is not None and not args.fully_sharded:
            raise UsageError(f"{flag} is FSDP2's mixed precision and goes with --fully-sharded")
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
        compressor = compressor_from_flags(args)
        try:
            return Problem(profile, _encoded(_cost(args), args), sync=args.sync, copy_cost=args.copy_cost,
                           copy_on=args.copy_on or "channel", **_contention(args), channels=args.channels,
                           step_parts="fit", exact_tensors=exact, compressor=compressor)
        except ValueError as exc:
            if exact and "exact_tensors" in str(exc):
                raise UsageError(f"--exact-tensors {args.exact_tensors}: {exc}") from None
            if compressor is not None and ("compressor" in str(exc) or "PowerSGD" in str(exc)):
                raise UsageError(f"--powersgd-as-choice: {exc}") from None
            raise
    return Problem(profile, sync=args.sync, pattern=_parameter_server(args), step_parts="fit")


POWERSGD_FLAGS = {"powersgd_min_compression_rate": "min_compression_rate", "powersgd_start_iter": "start_iter",
                  "powersgd_per_byte": "seconds_per_byte", "powersgd_per_flop": "seconds_per_flop",
                  "powersgd_per_message": "seconds_per_message"}
"""The PowerSGD flags besides ``--powersgd-rank``, each with the :class:`~fusionopt.cost.PowerSGD` field it sets."""


def powersgd_from_flags(args: argparse.Namespace) -> PowerSGD | None:
    """The PowerSGD hook ``--powersgd-rank`` and its flags describe on every DDP bucket (None
    without it, and with ``--powersgd-as-choice``, where the problem carries it:
    :func:`compressor_from_flags`)."""
    hook, as_choice = _powersgd_hook(args)
    return None if as_choice else hook


def compressor_from_flags(args: argparse.Namespace) -> PowerSGD | None:
    """The hook ``--powersgd-rank R --powersgd-as-choice`` makes one choice per message (the
    problem's ``compressor``; None otherwise)."""
    hook, as_choice = _powersgd_hook(args)
    return hook if as_choice else None


def _powersgd_hook(args: argparse.Namespace) -> tuple[PowerSGD | None, bool]:
    """The hook the PowerSGD flags describe (None without ``--powersgd-rank``) and whether it
    is one choice per message (``--powersgd-as-choice``); their refusals in one line."""
    rank = getattr(args, "powersgd_rank", None)
    as_choice = getattr(args, "powersgd_as_choice", False)
    if as_choice and rank is None:
        raise UsageError("--powersgd-as-choice makes torch's PowerSGD hook a choice per message and goes with "
                         "--powersgd-rank R")
    given = {field: getattr(args, flag) for flag, field in POWERSGD_FLAGS.items() if getattr(args, flag, None) is not None}
    if rank is None:
        if given:
            flag = next(f for f, field in POWERSGD_FLAGS.items() if field in given)
            raise UsageError(f"--{flag.replace('_', '-')} sets torch's PowerSGD hook and goes with --powersgd-rank R")
        return None, False
    for flag, other in (("--encodings", args.encodings is not None and not as_choice),
                        ("--ps-servers", args.ps_servers is not None), ("--decoupled", args.decoupled),
                        ("--fully-sharded", args.fully_sharded)):
        if other:
            every = "a choice per message" if as_choice else "one hook for every bucket"
            raise UsageError(f"--powersgd-rank prices DDP's all-reduce under torch's powerSGD_hook, {every}, and "
                             f"goes without {flag}")
    try:
        return PowerSGD(rank=rank, **given), as_choice
    except ValueError as exc:
        raise UsageError(f"--powersgd-rank: {exc}") from None


def priced_for_powersgd(problem: Problem, hook: PowerSGD) -> Problem:
    """``problem`` priced as the hook sends its messages; the model's refusal in one line."""
    try:
        return hook.priced(problem)
    except ValueError as exc:
        raise UsageError(f"--powersgd-rank: {exc}") from None


def powersgd_words(hook: PowerSGD) -> str:
    """The hook as a header line says it."""
    return (f"torch's powerSGD_hook on every DDP bucket, rank {hook.rank}, min_compression_rate "
            f"{hook.min_compression_rate:g}: a step once it compresses (the first {hook.start_iter} steps "
            f"all-reduce in full)")


def exact_tensors_from_flags(profile: Profile, args: argparse.Namespace) -> tuple[int, ...]:
    """The tensors ``--exact-tensors`` names (forward indices), each item a name, a forward
    index or a name pattern (``fnmatch``); one line naming an item that matches no tensor, or
    the flag without a choice of encodings it restricts."""
    text = getattr(args, "exact_tensors", None)
    if text is None:
        return ()
    encodings = [] if args.encodings is None else comma_list("--encodings", args.encodings)
    if len(encodings) < 2 or all(name == "fp32" for name in encodings):
        raise UsageError("--exact-tensors keeps tensors out of a lossy encoding and goes with --encodings of fp32 "
                         "and fp16 or bf16 (each message in its cheapest)")
    names = list(profile.names)
    found: set[int] = set()
    for item in comma_list("--exact-tensors", text):
        if item.isdigit():
            matched = [int(item)] if int(item) < profile.n else []
        elif any(mark in item for mark in "*?["):
            matched = [i for i, name in enumerate(names) if fnmatch.fnmatchcase(name, item)]
        else:
            matched = [names.index(item)] if item in names else []
        if not matched:
            raise UsageError(f"--exact-tensors: {item!r} is no tensor of profile {profile.name or 'without a name'!r} "
                             f"(names such as {names[0]!r}, or forward indices 0 to {profile.n - 1})")
        found.update(matched)
    return tuple(sorted(found))


def _encoded(cost: Any, args: argparse.Namespace) -> Any:
    """``cost`` with the messages' encodings of ``--encodings`` (MODEL.md section 2.2): one, every
    message in it; several, each message in its cheapest."""
    if args.encodings is None:
        return cost
    names = comma_list("--encodings", args.encodings)
    try:
        encodings = [encoding_named(name) for name in names]
        casts = {"seconds_per_byte": args.cast_per_byte, "seconds_per_message": args.cast_per_message,
                 "compute_per_byte": args.cast_compute_per_byte, "compute_per_message": args.cast_compute_per_message}
        if all(e.lossless for e in encodings) and any(value is not None for value in casts.values()):
            raise UsageError(f"--encodings {args.encodings} casts nothing: the --cast-* prices are for fp16 or bf16")
        encodings = [e if e.lossless else e.with_costs(**casts) for e in encodings]
        return Encoded(cost, encodings[0]) if len(encodings) == 1 else Cheapest(cost, encodings)
    except ValueError as exc:
        raise UsageError(f"--encodings {args.encodings}: {exc}") from None


def with_reducer_calibration(problem: Problem, args: argparse.Namespace) -> Problem:
    """The problem with --reducer-calibration's cost per message and per step, where given."""
    path = getattr(args, "reducer_calibration", None)
    if path is None:
        return problem
    calibration = read_reducer_calibration(path)
    try:
        return with_reducer_overhead(problem, calibration)
    except ValueError as exc:
        raise UsageError(f"--reducer-calibration {path}: {exc}") from None


def reducer_words(args: argparse.Namespace) -> str | None:
    """What --reducer-calibration added, in words (None when not given)."""
    path = getattr(args, "reducer_calibration", None)
    if path is None:
        return None
    c = read_reducer_calibration(path)
    return f"{path}: {c.reducer}, {reducer_cost_words(c.to_dict())}"


def _contention(args: argparse.Namespace) -> dict[str, float]:
    """``contention`` and ``comm_contention``: the flags, or a calibration's file."""
    if args.contention_file is None:
        return {"contention": args.contention, "comm_contention": args.comm_contention}
    given = [flag for flag, value in (("--contention", args.contention), ("--comm-contention", args.comm_contention))
             if value != 1.0]
    if given:
        raise UsageError(f"--contention-file gives both slowdowns: leave {' and '.join(given)} out")
    from fusionopt.executor._contention import read_contention

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
    dtypes = {"param_dtype": getattr(args, "param_dtype", None), "reduce_dtype": getattr(args, "reduce_dtype", None)}
    if getattr(args, "replicas", None) is not None:
        if dtypes != {"param_dtype": None, "reduce_dtype": None}:
            raise UsageError("--param-dtype and --reduce-dtype price one shard axis; with --replicas (HSDP) they "
                             "are not modelled")
        return _hsdp(args, measured is not None, memory_cap=cap, channels=channels, blocking=blocking)
    if measured is not None:
        return FullySharded.mixed_precision(*measured, **dtypes, memory_cap=cap, channels=channels, blocking=blocking)
    if args.network is not None and args.alpha is None and args.beta is None and args.cost is None:
        if args.workers is None:
            raise UsageError("--network needs --workers")
        return FullySharded.from_network(args.network, args.workers, algorithm=args.algorithm or "ring",
                                         memory_cap=cap, channels=channels, blocking=blocking, **dtypes)
    half = _cost(args)
    return FullySharded.mixed_precision(half, half, **dtypes, memory_cap=cap, channels=channels, blocking=blocking)


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
    fusionopt.cli._common.UsageError: --memory-cap: '8 parsecs' is not a size (give bytes, or a unit: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)
    >>> parse_bytes("--memory-cap", "inf")
    Traceback (most recent call last):
    ...
    fusionopt.cli._common.UsageError: --memory-cap must be a finite size, got 'inf' (leave --memory-cap out for no cap)
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
    if args.ps_delta != 0.0 and not args.ps_partition_compute:
        raise UsageError("--ps-delta is the overhead of each compute piece and goes with --ps-partition-compute")
    if args.algorithm is not None:
        raise UsageError(f"--algorithm {args.algorithm} names an all-reduce algorithm; a parameter server's pushes "
                         "and pulls take none: leave it out with --ps-servers")
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


def parse_options(pairs: Sequence[str]) -> dict[str, Any]:
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


ZOO_DEVICE, ZOO_BATCH = "h100", 64


# The options of a zoo model's profile beside --device and --batch (fusionopt.zoo.profile's).
ZOO_COMPUTE_OPTIONS = ("precision", "compute", "optimizer")


def add_zoo_arguments(parser: argparse.ArgumentParser) -> None:
    """--device, --batch and the zoo's compute options, for a command that takes --model."""
    parser.add_argument("--device", help=f"device of the zoo model: {', '.join(zoo.devices())} (default h100)")
    parser.add_argument("--batch", type=int, help="per-worker batch of the zoo model (default 64)")
    parser.add_argument("--precision", help="fp32 (default) or bf16 (autocast mixed precision) for the zoo model")
    parser.add_argument("--compute", help="the zoo model's compute: calibrated (default; from measured training "
                                          "steps) or roofline (an estimate from FLOPs at 40%% of peak)")
    parser.add_argument("--optimizer", help="sgd: add SGD with momentum's update time to each tensor of the zoo "
                                            "model (default: no update time)")


def zoo_settings(args: argparse.Namespace, source: str | None) -> tuple[str, int]:
    """--device and --batch for a zoo model (their defaults when not given); refused, like the
    zoo's compute options, with another ``source`` of the profile, which they would not change."""
    if source is not None:
        for option in ("device", "batch", *ZOO_COMPUTE_OPTIONS):
            if getattr(args, option, None) is not None:
                raise UsageError(f"--{option} is for a zoo model and changes nothing with {source}")
    return args.device or ZOO_DEVICE, args.batch if args.batch is not None else ZOO_BATCH


def zoo_profile(args: argparse.Namespace, device: str, batch: int) -> tuple[Profile, str]:
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


def problem_for_compare(args: argparse.Namespace) -> tuple[Problem, str]:
    if (args.model is None) == (args.profile is None):
        raise UsageError("give exactly one of --model NAME or --profile PROFILE.json")
    device, batch = zoo_settings(args, "--profile" if args.profile is not None else None)
    if args.profile is not None:
        profile = read_profile(args.profile)
        label = args.profile
    else:
        profile, label = zoo_profile(args, device, batch)
    return with_reducer_calibration(problem_from_flags(profile, args), args), label


__all__ = ["BYTE_UNITS", "parse_bytes", "KEYWORDS", "LITERALS", "option_value", "ZOO_COMPUTE_OPTIONS"]
