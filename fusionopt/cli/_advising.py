"""``fusionopt advise``: settings for DDP, Horovod, FSDP2, DeepSpeed ZeRO and Megatron-LM."""

from __future__ import annotations

import argparse
import json
from typing import Any
from fusionopt.advice import gains_enough
from fusionopt.advice._sharded import OverMemoryCap, fsdp2_advice, zero2_settings, zero3_settings
from fusionopt.solvers import solve
from fusionopt.cli._common import UsageError, plural
from fusionopt.cli._problems import powersgd_from_flags, powersgd_words, priced_for_powersgd, problem_for_compare, \
    reducer_words
from fusionopt.solvers._comparison import NOT_UNDER_POWERSGD
from fusionopt.solvers.baselines import ddp_powersgd


def cmd_advise(args: argparse.Namespace) -> None:
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
    from fusionopt.advice._allreduce import ddp_settings, horovod_settings

    problem, label = problem_for_compare(args)
    hook = powersgd_from_flags(args)
    judged = problem if hook is None else priced_for_powersgd(problem, hook)
    if hook is not None and args.method in NOT_UNDER_POWERSGD:
        raise UsageError(f"--powersgd-rank: {args.method}: {NOT_UNDER_POWERSGD[args.method]}")
    plan_result = solve(judged, args.method) if hook is None or args.method != "ddp" else ddp_powersgd(problem, hook)
    if not judged.pattern.is_a("all-reduce") or not plan_result.plan.is_fusion(judged.profile):
        raise UsageError(f"method {args.method!r} gives a plan that is not a fusion plan (it cuts tensors, reorders "
                         "them or sets release times), which DDP and Horovod cannot build: advise on a fusion "
                         "method (dp, wfbp, mgwfbp, ddp, ...)")
    ddp = ddp_settings(problem, plan_result.plan, min_gain=args.min_gain, powersgd=hook)
    hvd, horovod_out = None, None if hook is None else NOT_UNDER_POWERSGD["horovod"]
    if hook is None:
        try:
            hvd = horovod_settings(problem, plan_result.plan, backend=args.horovod_backend, min_gain=args.min_gain)
        except ValueError as exc:              # Horovod cannot send the messages as the cost prices them
            if not str(exc).startswith("horovod: "):
                raise
            horovod_out = str(exc)[len("horovod: "):]
    apart = None if hook is not None else _apart(problem, ddp)
    if args.json:
        print(json.dumps({"method": args.method, "iteration_time": plan_result.iteration_time,
                          "messages": plan_result.num_messages, "ddp": ddp.to_dict(),
                          "horovod": None if hvd is None else hvd.to_dict(),
                          **({} if horovod_out is None else {"horovod_left_out": horovod_out}),
                          **({} if apart is None else {"apart": apart})}, indent=1))
        return
    print(f"workload  {label}: {plural(problem.profile.n, 'tensor')}")
    if args.reducer_calibration is not None:
        print(f"reducer   {reducer_words(args)}")
    if hook is not None:
        print(f"hook      {powersgd_words(hook)}; every T below is of such a step")
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
    if ddp.alignment_unit is not None and any(ddp.padding) and hook is None:
        padded = sum(p > 0 for p in ddp.padding)
        ranks = problem.cost.ranks
        print(f"          pad: register {ddp.hook}: each bucket all-reduced as a multiple of {ranks} x "
              f"{ddp.alignment_unit} B, the alignment the cost's cliff needs ({padded} of "
              f"{plural(len(ddp.padding), 'bucket')} padded, {sum(ddp.padding)} B in all); every T above is of the "
              f"padded buckets")
    elif ddp.alignment_unit is not None:
        print(f"          no padding: every bucket is already a multiple of {problem.cost.ranks} x "
              f"{ddp.alignment_unit} B, the alignment the cost's cliff needs")
    if hook is not None:
        _print_powersgd(ddp)
        return
    if ddp.wire is not None or ddp.through_names:
        _print_wire(problem, ddp)
    if apart is not None:
        print(f"apart     the {plural(len(problem.exact_tensors), 'tensor')} kept exact sent apart (dp-apart: each "
              f"message a run of them and a run of the others, {plural(apart['messages'], 'message')}): "
              f"T = {ms * apart['iteration_time']:.3f} ms, which "
              "DDP's buckets cannot send (each is a contiguous run of the gradients): train it with "
              "fusionopt.integrations.PlanReducer(model, plan, profile, encodings=...) (--json gives its plan and "
              "encodings)")
    if hvd is None:
        print(f"horovod   left out: {horovod_out}")
        return
    print(f"horovod   HOROVOD_FUSION_THRESHOLD={hvd.fusion_threshold_bytes} "
          f"HOROVOD_CYCLE_TIME={hvd.environment['HOROVOD_CYCLE_TIME']} ({hvd.backend}): "
          f"T = {1e3 * hvd.iteration_time:.3f} ms (defaults: {1e3 * hvd.default_iteration_time:.3f} ms"
          + (f"; kept: no pair is predicted {args.min_gain:.0%} faster)" if hvd.kept_defaults else ")"))
    if hvd.compression != "none":
        print(f"          hvd.DistributedOptimizer(..., compression=hvd.Compression.{hvd.compression}): the "
              f"horovod T above sends every gradient in {hvd.compression}")


def _apart(problem: Any, ddp: Any) -> dict[str, Any] | None:
    """Where tensors are kept exact (barrier sync): ``dp-apart``'s plan, which may send them
    apart from the others, when it is predicted ``min_gain`` faster than the DDP advice's
    step; else None. DDP's contiguous buckets cannot send it; fusionopt's plan reducer can."""
    if not problem.restricts_encodings or problem.sync != "barrier":
        return None
    result = solve(problem, "dp-apart")
    if not gains_enough(result.iteration_time, ddp.iteration_time, ddp.min_gain):
        return None
    return {"iteration_time": result.iteration_time, "messages": result.num_messages,
            "encodings": result.stats["encodings"], "plan": result.plan.to_dict()}


def _print_wire(problem: Any, ddp: Any) -> None:
    """Each advised bucket's encoding, and the hook that sends it so."""
    sizes = [int(problem.profile.sizes[list(b)].sum()) for b in ddp.buckets]
    chosen = problem.message_encodings(sizes, [list(b) for b in ddp.buckets])
    counts = {name: chosen.count(name) for name in dict.fromkeys(chosen)}
    print(f"          wire: {', '.join(plural(k, 'bucket') + ' in ' + name for name, k in counts.items())}"
          + (f"; {plural(len(ddp.exact_names), 'tensor')} kept exact" if ddp.exact_names else ""))
    if ddp.hook is None:
        return
    print(f"          register: ddp.register_comm_hook(None, {ddp.hook})")
    for label, names in (("EXACT", ddp.exact_names), ("THROUGH", ddp.through_names)):
        if names:
            shown = ", ".join(repr(n) for n in names[:6]) + (", ..." if len(names) > 6 else "")
            print(f"          {label} = {{{shown}}} (--json lists them all)")
    if ddp.through_names:
        print("          on gloo, torch's powerSGD_hook issues its later all-reduces from callbacks, and with several "
              "of its buckets ranks may issue them in different orders, which gloo aborts on (torch 2.13)")


def _print_powersgd(ddp: Any) -> None:
    """The hook's registration, the step without it, and Horovod's absence."""
    ms = 1e3
    print(f"          register the hook: ddp.register_comm_hook({ddp.hook_state}, {ddp.hook})")
    plain = ddp.plain_iteration_time
    verdict = (f"the hook is predicted slower than DDP's defaults without it ({ms * plain:.3f} ms): leave it out"
               if ddp.iteration_time > plain * (1 + 1e-9) else
               f"DDP's defaults without the hook: T = {ms * plain:.3f} ms")
    print(f"          {verdict}")
    print(f"horovod   left out: {NOT_UNDER_POWERSGD['horovod']}")


def _advise_pattern_flags(args: argparse.Namespace) -> None:
    """Refuse the all-reduce advice's flags under another --pattern."""
    if getattr(args, "powersgd_rank", None) is not None:
        raise UsageError(f"--powersgd-rank is torch's comm hook on DDP's buckets; --pattern {args.pattern} has none")
    if args.method != "dp":
        raise UsageError(f"--method picks the all-reduce plan to follow; --pattern {args.pattern} plans its own")
    if args.horovod_backend != "nccl":
        raise UsageError(f"--horovod-backend judges Horovod settings, which --pattern {args.pattern} does not give")


def _advise_fsdp(args: argparse.Namespace) -> None:
    """FSDP2's calls for the best plan FSDP2 can build, and DeepSpeed ZeRO-3's sizes."""
    _advise_pattern_flags(args)
    args.fully_sharded = True
    problem, label = problem_for_compare(args)
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
    if args.reducer_calibration is not None:
        print(f"reducer   {reducer_words(args)}")
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
    problem, label = problem_for_compare(args)
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


__all__ = []
