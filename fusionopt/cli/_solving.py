"""``fusionopt methods``, ``solve``, ``simulate`` and ``compare``: plans and their times."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import json
import sys
import threading
from pathlib import Path
from typing import Any, Mapping
from fusionopt.cost import AlphaBeta, Cheapest, Encoded, PiecewiseLinear, PowerSGD
from fusionopt import model, solvers
from fusionopt.model import Plan, Problem, Profile
from fusionopt.model._encoding import encoding_table
from fusionopt.model._decoupled_plan import DecoupledPlan
from fusionopt.model._sharded_plan import ShardedPlan
from fusionopt.model._ps_plan import PSPlan
from fusionopt.solvers import format_table, methods, solve
from fusionopt.solvers._comparison import NOT_UNDER_POWERSGD
from fusionopt.solvers._result import Interrupted, Result
from fusionopt.solvers.baselines import ddp_powersgd
from fusionopt.cli._common import Kept, UsageError, comma_list, json_output, plural, read_profile
from fusionopt.cli._problems import (
    parse_options, powersgd_from_flags, powersgd_words, priced_for_powersgd, problem_for_compare, problem_from_flags,
    reducer_words, with_reducer_calibration,
)


def _result_document(result: Result, problem: Problem | None = None, ranks: int | None = None) -> dict[str, Any]:
    timeline = result.timeline
    wire = _wire(result, problem)
    bounds = {} if wire is None or ranks is None else _error_bounds(problem, wire, ranks)
    return {
        **({} if wire is None else {"encodings": wire}),
        **({} if not bounds else {"error_bounds": bounds}),
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


def _wire(result: Result, problem: Problem | None) -> list[str] | None:
    """Each message's encoding where the problem's cost has encodings (MODEL.md section 2.2) or
    a compressor (its name where a message goes through it, section 2.4)."""
    if problem is None or not isinstance(result.plan, Plan) or \
            (not isinstance(problem.cost, (Encoded, Cheapest)) and problem.compressor is None):
        return None
    plan = result.plan
    return problem.message_encodings(plan.message_bytes, [m.tensors for m in plan.messages])


def _error_bounds(problem: Problem, wire: list[str], ranks: int) -> dict[str, dict[str, float]]:
    """Per lossy encoding the plan sends: its messages and the bound on each averaged element's
    error at ``ranks`` ranks (MODEL.md section 2.2), relative to the ranks' mean magnitude
    (``Encoding.error_bound``) plus an absolute part (``error_floor``); a compressor's messages
    with no bound (None: PowerSGD's error depends on the gradients' spectra, section 2.4)."""
    known = encoding_table(problem.cost)
    return {name: {"messages": wire.count(name), "relative": known[name].error_bound(ranks),
                   "absolute": known[name].error_floor(ranks)} if name in known else
            {"messages": wire.count(name), "relative": None, "absolute": None}
            for name in dict.fromkeys(wire) if name not in known or not known[name].lossless}


def _print_result(result: Result, profile: Profile, problem: Problem | None = None,
                  ranks: int | None = None) -> None:
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
    wire = _wire(result, problem)
    for k, message in enumerate(result.plan.messages[:20]):
        tensors = message.tensors
        names = ", ".join(profile.names[i] for i in tensors[:4])
        if len(tensors) > 4:
            names += f", ... ({len(tensors)} tensors, {profile.names[tensors[-1]]} last)"
        encoding = "" if wire is None else f"  {wire[k]}"
        print(f"  {k:>4}  {message.nbytes:>12d} B{encoding}  [{names}]")
    if result.num_messages > 20:
        print(f"  ... {plural(result.num_messages - 20, 'more message')} (use --json for all)")
    if wire is not None and any(name != "fp32" for name in wire) and ranks is None:
        print("error bound     give --network and --workers: the bound on the averaged gradients' error "
              "depends on the ranks")
    elif wire is not None and ranks is not None:
        for name, b in _error_bounds(problem, wire, ranks).items():
            if b["relative"] is None:
                print(f"error bound     {name} ({plural(b['messages'], 'message')}): none stated, the low-rank "
                      "approximation's error depends on the gradients' spectra (MODEL.md 2.4)")
                continue
            print(f"error bound     {name} ({plural(b['messages'], 'message')}): each averaged element within "
                  f"{b['relative']:.3g} x the {ranks} ranks' mean |g| + {b['absolute']:.3g} (MODEL.md 2.2)")


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


# ---------------------------------------------------------------------- commands
def cmd_methods(args: argparse.Namespace) -> None:
    from fusionopt.solvers._registry import FAMILIES, get_method

    listing = methods()
    width = max(len(name) for name in listing)
    for family, about in FAMILIES.items():
        members = [name for name in listing if get_method(name).family == family]
        print(f"{family} methods: {about}")
        for name in members:
            _print_method(name, listing[name], width, args.options)


def _print_method(name: str, summary: str, width: int, options_too: bool) -> None:
    from fusionopt.solvers._registry import get_method

    print(f"  {name.ljust(width)}  {summary}")
    if options_too:
        options = get_method(name).options
        for option, default in options.items():
            print(f"  {'':{width}}    --option {option}=...  (default {default!r})")
        if not options:
            print(f"  {'':{width}}    (no options)")
        print(f"  {'':{width}}    takes: {get_method(name).needs.describe()}")


@contextlib.contextmanager
def _announce_search(method: str, options: Mapping[str, Any]):
    """A line on stderr when a solve is still running after a second: how long it may take."""
    from fusionopt.solvers._registry import get_method

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


def cmd_solve(args: argparse.Namespace) -> None:
    json_output(args.output, "the plan")
    profile = read_profile(args.profile)
    problem = problem_from_flags(profile, args)
    hook = powersgd_from_flags(args)
    priced = None if hook is None else priced_for_powersgd(problem, hook)
    options = parse_options(args.option)
    stopped = None
    with _announce_search(args.method, options):
        try:
            result = solve(problem, args.method, **options) if hook is None else \
                _solve_under_powersgd(problem, hook, priced, args.method, options)
        except Interrupted as stop:     # Ctrl-C in an anytime search: its best plan so far, judged
            result = stopped = stop.result
            if hook is not None:
                result = _in_gradient_bytes(result, profile, priced.profile, args.method)
    if args.output:
        result.plan.write(args.output)
    if args.json:
        print(json.dumps({**_result_document(result, problem, args.workers),
                          **({} if hook is None else {"powersgd": hook.to_dict()})}, indent=1))
    else:
        if hook is not None:
            print(f"hook            {powersgd_words(hook)}")
        _print_result(result, profile, problem, args.workers)
    if stopped is not None:
        written = f" and written to {args.output}" if args.output else ""
        raise Kept(f"the best plan {args.method} found so far is printed (status {stopped.status}){written}")


def _solve_under_powersgd(problem: Problem, hook: PowerSGD, priced: Problem, method: str,
                          options: Mapping[str, Any]) -> Result:
    """``method``'s plan for ``problem`` under the hook, judged on ``priced`` (the problem the
    hook prices), its messages in the gradients' bytes: DDP's buckets come from the
    gradients' bytes (:func:`~fusionopt.solvers.baselines.ddp_powersgd`), every other method
    solves ``priced``."""
    if method in NOT_UNDER_POWERSGD:
        raise UsageError(f"--powersgd-rank: {method}: {NOT_UNDER_POWERSGD[method]}")
    if method == "ddp":
        known = [name for name, p in inspect.signature(ddp_powersgd).parameters.items() if p.kind is p.KEYWORD_ONLY]
        for name in options:
            if name not in known:
                raise UsageError(f"unknown option {name!r} for method 'ddp' under --powersgd-rank; its options: "
                                 f"{', '.join(known)}")
        result = ddp_powersgd(problem, hook, **options)
    else:
        result = solve(priced, method, **options)
    return _in_gradient_bytes(result, problem.profile, priced.profile, method)


def _in_gradient_bytes(result: Result, profile: Profile, priced: Profile, method: str) -> Result:
    """``result``, a plan of ``priced`` judged under the hook, with its messages in the
    gradients' bytes (``profile``'s)."""
    try:
        PowerSGD.require_buckets(result.plan, priced, method)
    except ValueError as exc:
        raise UsageError(f"--powersgd-rank: {exc}") from None
    return dataclasses.replace(result, plan=Plan.from_groups(profile, result.plan.groups()))


def read_problem_and_plan(args: argparse.Namespace) -> tuple[Profile, Problem, Plan]:
    """The profile, problem and validated plan named by ``args`` (errors name the plan file).
    With ``--powersgd-rank``, the problem the hook prices and the plan's buckets on it."""
    profile = read_profile(args.profile)
    problem = with_reducer_calibration(problem_from_flags(profile, args), args)
    plan = problem.pattern.plan_type.read(args.plan)
    try:
        plan.validate(profile)
    except ValueError as exc:
        raise ValueError(f"{args.plan}: {exc}") from None
    hook = powersgd_from_flags(args)
    if hook is not None:
        try:
            hook.require_buckets(plan, profile, args.plan)
        except ValueError as exc:
            raise UsageError(f"--powersgd-rank: {exc}") from None
        problem = priced_for_powersgd(problem, hook)
        plan = Plan.from_groups(problem.profile, plan.groups())
    return profile, problem, plan


def cmd_simulate(args: argparse.Namespace) -> None:
    profile, problem, plan = read_problem_and_plan(args)
    timeline = model.simulate(problem, plan, validate=False)
    hook = powersgd_from_flags(args)
    sent = timeline.message_bytes if hook is None else Plan.from_groups(profile, plan.groups()).message_bytes
    document = {
        "iteration_time": timeline.iteration_time,
        "exposed": timeline.exposed,
        "compute_time": timeline.compute_time,
        "communication_end": timeline.communication_end,
        "busy": timeline.busy,
        "messages": [
            {"ready": r, "start": s, "end": e, "bytes": int(b), "kind": kind}
            for r, s, e, b, kind in zip(timeline.message_ready, timeline.message_start, timeline.message_end,
                                        sent, timeline.message_collectives(gradient_collective(plan)))
        ],
    }
    if hook is not None:
        document["powersgd"] = hook.to_dict()
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
        print(f"reducer         {reducer_words(args)}")
    if hook is not None:
        print(f"hook            {powersgd_words(hook)}; bytes below are the gradients'")
    print(f"iteration time  {1e3 * timeline.iteration_time:.6f} ms")
    if timeline.peak_memory is not None:
        over = "" if cap is None else (f", over the cap of {cap / 2**20:.3f} MiB: infeasible" if timeline.peak_memory > cap
                                       else f", within the cap of {cap / 2**20:.3f} MiB")
        print(f"peak memory     {timeline.peak_memory / 2**20:.3f} MiB of unsharded parameters and gradients{over}")
    print(f"compute         {1e3 * timeline.compute_time:.6f} ms")
    print(f"exposed         {1e3 * timeline.exposed:.6f} ms")
    print(f"messages        {timeline.num_messages}")
    _print_collectives(document["messages"], timeline, sharded=problem.pattern.is_a("fully-sharded"))


def gradient_collective(plan: Any) -> str:
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


def cmd_compare(args: argparse.Namespace) -> None:
    problem, label = problem_for_compare(args)
    names = comma_list("--methods", args.methods) if args.methods is not None else None
    hook = powersgd_from_flags(args)
    if hook is not None:
        priced_for_powersgd(problem, hook)                # its refusal, in the flag's words
    rows = solvers.compare(problem, names, powersgd=hook)
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
        words = {"exact_tensors": _exact_words, "compressor": _compressor_words}
        extras = "".join(f", {words[name](problem)}" if name in words else f", {name} {getattr(problem, name)}"
                         for name in problem.extensions)
        print(f"network   {_cost_words(problem.cost, args.cost)}, sync {problem.sync}{extras}")
        if hook is not None:
            print(f"hook      {powersgd_words(hook)}")
    print()
    print(format_table(rows))
    print()
    print("gap to bound: to the best lower bound proven for each plan: over its method's own plan space for")
    print("the fusion methods, ps-dp and the exact methods, and the optimum of an exact method in the table for")
    print("the plans of its space; else over any plan. OPTIMAL: gap 0.")


def _exact_words(problem: Problem) -> str:
    """The tensors kept exact, as a header says them (the first four by name)."""
    names = [problem.profile.names[i] for i in problem.exact_tensors]
    shown = ", ".join(names[:4]) + (f", ... ({len(names)} in all)" if len(names) > 4 else "")
    return f"{plural(len(names), 'tensor')} exact (every message carrying one in a lossless encoding): {shown}"


def _compressor_words(problem: Problem) -> str:
    """The compressor as a header says it."""
    hook = problem.compressor                       # the command line's is torch's PowerSGD hook
    return (f"or each message of whole tensors through torch's powerSGD_hook where cheaper (rank {hook.rank}, "
            f"min_compression_rate {hook.min_compression_rate:g}; a step once it compresses)")


def _cost_words(cost: Any, path: str | None) -> str:
    """A cost as a table's header shows it: ``alpha + beta S`` by its two numbers; a measured
    curve by its kind, sizes and file, not its every point."""
    if isinstance(cost, AlphaBeta):
        return repr(cost)
    if isinstance(cost, (Encoded, Cheapest)):
        encodings = (cost.encoding,) if isinstance(cost, Encoded) else cost.encodings
        return (f"{_cost_words(cost.cost, path)}, each message in "
                f"{' or '.join(e.name for e in encodings)}{' (the cheapest)' * (len(encodings) > 1)}")
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


__all__ = []
