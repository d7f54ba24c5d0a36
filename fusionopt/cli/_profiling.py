"""``fusionopt zoo``, ``profile`` and ``traced``: profiles from the zoo, from traces and from torch."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any
from fusionopt import zoo
from fusionopt.integrations._kineto_events import describe_clock
from fusionopt.integrations._kineto_parameters import read_parameter_list
from fusionopt.integrations._traced_step import COPIED_PARTS, PARAMETERS_FILE, PREDICTED_PART
from fusionopt.integrations._unprofiled import PROFILER_COST_FILE, UNPROFILED_FILE
from fusionopt.model import Profile
from fusionopt.model._profile_csv import profile_csv_text
from fusionopt.cli._common import (
    UsageError, clock_words, comma_list, plural, read_profile, write_profile,
)
from fusionopt.cli._problems import zoo_profile, zoo_settings


def cmd_zoo(args: argparse.Namespace) -> None:
    rows = [("model", "parameters", "tensors", "GFLOPs/sample", "description")]
    for name, description in zoo.models().items():
        arch = zoo.architecture(name)
        rows.append((name, f"{arch.parameters:,}", str(len(arch.tensors)), f"{arch.flops / 1e9:.2f}", description))
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    for row in rows:
        print("  ".join([row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:4], widths[1:])] + [row[4]]))


def cmd_profile(args: argparse.Namespace) -> None:
    sources = [name for name in ("model", "input", "trace", "torch") if getattr(args, name) is not None]
    if len(sources) != 1:
        raise UsageError("give exactly one of --model, --input, --trace or --torch")
    for flag in ("parameters", "timeline", "statistic"):
        if getattr(args, flag) is not None and args.trace is None:
            raise UsageError(f"--{flag} goes with --trace")
    if args.input_shape is not None and args.torch is None:
        raise UsageError("--input-shape goes with --torch")
    device, batch = zoo_settings(args, None if args.model is not None else f"--{sources[0]}")
    if args.model is not None:
        profile, _ = zoo_profile(args, device, batch)
    elif args.input is not None:
        profile = read_profile(args.input)
    elif args.trace is not None:
        profile = _profile_from_trace(args)
    else:
        profile = _profile_from_torch(args)
    if args.output:
        _refuse_writing_over_trace_folder(args, profile)
        if not args.output.lower().endswith((".json", ".csv")):
            raise UsageError(f"--output {args.output}: a profile is written as JSON or CSV: give a .json or .csv file name")
        write_profile(profile, args.output)
        print(f"wrote {args.output}: {profile!r}{clock_words(profile) if args.trace is not None else ''}")
    elif args.csv:
        sys.stdout.write(profile_csv_text(profile))
    else:
        print(profile.to_json())


def _profile_from_trace(args: argparse.Namespace) -> Profile:
    from fusionopt.integrations._kineto import profile_from_trace
    from fusionopt.integrations._kineto_ranks import profile_from_traces

    parameters = _trace_parameters(args.trace, args.parameters)
    stem = Path(args.trace).name.split(".")[0]
    options = {"timeline": args.timeline or "auto", "name": stem, "statistic": args.statistic or "median"}
    if Path(args.trace).is_dir():                 # one trace per rank
        return profile_from_traces(args.trace, parameters, **options)
    return profile_from_trace(args.trace, parameters, **options)


def _refuse_writing_over_trace_folder(args: argparse.Namespace, profile: Profile) -> None:
    """``--output`` onto a file of the recording ``profile --trace FOLDER`` read or ``traced
    FOLDER`` reads (a rank's trace, the folder's ``parameters.csv`` taken by default, the
    job's ``unprofiled.json`` and ``profiler_cost.json``) is refused: it would be lost."""
    if args.trace is None or not Path(args.trace).is_dir():
        return
    folder = Path(args.trace)
    read = [folder / name for name in profile.metadata.get("ranks", {}).values()]
    read += [folder / UNPROFILED_FILE, folder / PROFILER_COST_FILE]
    if args.parameters is None:
        read.append(folder / PARAMETERS_FILE)
    target = Path(args.output).resolve()
    for path in read:
        if path.resolve() == target and path.exists():
            raise UsageError(f"--output {args.output} is a file --trace {args.trace} read: writing it would lose "
                             "the input; give another file")


def _trace_parameters(trace: str, path: str | None) -> Any:
    """``--parameters`` for a trace; without it, a folder's ``parameters.csv`` or the list the
    trace's recorded shapes give (names ``param0, param1, ...``)."""
    from fusionopt.integrations._kineto_parameters import parameters_from_trace
    from fusionopt.integrations._traced_step import folder_parameters

    if path is not None:
        return _read_parameters(path)
    return folder_parameters(trace) or parameters_from_trace(trace)


def cmd_traced(args: argparse.Namespace) -> None:
    from fusionopt.integrations._traced_step import predict_traced_step

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

    from fusionopt.integrations._torch import profile_model, require_torch

    module_name, _, factory_name = args.torch.partition(":")
    if not module_name or not factory_name:
        raise UsageError(f"--torch takes MODULE:FACTORY (a function returning a torch.nn.Module), got {args.torch!r}")
    if args.input_shape is None:
        raise UsageError("--torch needs --input-shape, e.g. 32,3,224,224 (a float tensor of that shape)")
    shape = comma_list("--input-shape", args.input_shape, int)
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
    if not callable(factory):
        raise UsageError(f"--torch {args.torch}: {factory_name} is not callable ({type(factory).__name__}); give a "
                         "function returning a torch.nn.Module")
    try:
        model = factory()
    except Exception as exc:          # the user's code: its fault in one line, not our traceback
        raise UsageError(f"--torch {args.torch}: calling it raised {type(exc).__name__}: {exc}") from None
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"--torch {args.torch} returned {type(model).__name__}, not a torch.nn.Module")
    device = args.torch_device
    try:
        model = model.to(device)
    except (RuntimeError, AssertionError) as exc:   # an unknown device, or CUDA where torch has none
        raise UsageError(f"--torch-device {device}: {' '.join(str(exc).split())}") from None
    try:
        inputs = torch.randn(*shape, device=device)
    except RuntimeError as exc:       # a negative dimension, or more than memory holds
        raise UsageError(f"--input-shape {args.input_shape}: {' '.join(str(exc).split())}") from None
    try:
        return profile_model(model, inputs, steps=args.steps, warmup=args.warmup, device=device, name=factory_name)
    except Exception as exc:          # the model's own code on the input (a shape it cannot take, say)
        raise UsageError(f"--torch {args.torch} on --input-shape {args.input_shape}: {type(exc).__name__}: "
                         f"{' '.join(str(exc).split())}") from None


__all__ = []
