"""The ``fusionopt`` command's parser and :func:`main`.

Bad arguments and bad input files exit with status 2 and a one-line message."""

from __future__ import annotations

import argparse
import os
import warnings
import sys
from typing import Sequence
from fusionopt import zoo, __version__
from fusionopt.integrations._unprofiled import DEFAULT_PROFILER_COST, PROFILER_COST_FILE
from fusionopt.reporting import fraction
from fusionopt.advice._allreduce import MIN_GAIN
from fusionopt.cli._advising import cmd_advise
from fusionopt.cli._common import (INTERRUPTED, PLAN_FILES, PROFILE_FILES, Kept, Parser, TIMELINE_HELP, UsageError,
                                   refuse_writing_over, show_warning)
from fusionopt.cli._plotting import add_plot_parsers, cmd_plot_timeline
from fusionopt.cli._problems import add_cost_arguments, add_zoo_arguments
from fusionopt.cli._profiling import cmd_profile, cmd_traced, cmd_zoo
from fusionopt.cli._running import add_executor_parsers, add_sweep_parser, cmd_run
from fusionopt.cli._solving import cmd_compare, cmd_methods, cmd_simulate, cmd_solve


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="fusionopt", description="Tensor fusion and partition schedules for data-parallel training.")
    parser.add_argument("--version", action="version", version=f"fusionopt {__version__}")
    commands = parser.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND")
    commands.required = True

    p = commands.add_parser("methods", help="list the methods with a one-line description")
    p.add_argument("--options", action="store_true", help="also list each method's options and their defaults")
    p.set_defaults(run=cmd_methods)

    p = commands.add_parser("solve", help="solve a profile with one method")
    p.add_argument("profile", metavar="PROFILE.json|.csv")
    p.add_argument("--method", default="wfbp", help="a name from `fusionopt methods` (default wfbp)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a method option, VALUE as `fusionopt methods --options` prints it: True, None, "
                        "25, 1e-09, [1, 2], 'text' or text (repeatable)")
    p.add_argument("--output", metavar="PLAN.json", help="write the plan as JSON")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_cost_arguments(p, powersgd=True)
    p.set_defaults(run=cmd_solve, replaces=PLAN_FILES)

    p = commands.add_parser("simulate", help="simulate a plan on a profile")
    p.add_argument("profile", metavar="PROFILE.json|.csv")
    p.add_argument("--plan", required=True, metavar="PLAN.json")
    p.add_argument("--json", action="store_true", help="print the timeline as JSON")
    p.add_argument("--reducer-calibration", metavar="R.json",
                   help="add a reducer's own cost per message and per step, as fusionopt calibrate --reducer "
                        "measured it")
    add_cost_arguments(p, powersgd=True)
    p.set_defaults(run=cmd_simulate)

    p = commands.add_parser("compare", help="compare methods on a zoo model or a profile")
    p.add_argument("--model", help=f"a zoo model: {', '.join(zoo.models())}")
    p.add_argument("--profile", metavar="PROFILE.json|.csv", help="a profile instead of a zoo model")
    add_zoo_arguments(p)
    p.add_argument("--methods", help="comma-separated method names (default: all)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    add_cost_arguments(p, powersgd=True)
    p.set_defaults(run=cmd_compare)

    p = commands.add_parser("advise", help="framework settings: DDP and Horovod closest to a method's plan; "
                                           "ZeRO-2 and Megatron, or FSDP2 and ZeRO-3 (--pattern)")
    p.add_argument("--model", help=f"a zoo model: {', '.join(zoo.models())}")
    p.add_argument("--profile", metavar="PROFILE.json|.csv", help="a profile instead of a zoo model")
    add_zoo_arguments(p)
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
    add_cost_arguments(p, powersgd=True)
    p.set_defaults(run=cmd_advise)

    p = commands.add_parser("zoo", help="list the zoo models")
    p.set_defaults(run=cmd_zoo)

    p = commands.add_parser("profile", help="a profile from a zoo model, a file, a PyTorch trace or a PyTorch model")
    source = p.add_argument_group("source (exactly one)")
    source.add_argument("--model", help=f"a zoo model: {', '.join(zoo.models())}")
    source.add_argument("--input", metavar="PROFILE.json|PROFILE.csv", help="a profile file (to convert it)")
    source.add_argument("--trace", metavar="TRACE.json[.gz]|FOLDER",
                        help="a PyTorch profiler (Kineto) chrome trace of training steps, or a folder of "
                             "one per rank")
    source.add_argument("--torch", metavar="MODULE:FACTORY",
                        help="measure a PyTorch model: MODULE.FACTORY() returns it; needs --input-shape (extra torch)")
    add_zoo_arguments(p)
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
    p.set_defaults(run=cmd_profile, replaces=PROFILE_FILES)

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
    p.set_defaults(run=cmd_traced)

    add_executor_parsers(commands)
    add_plot_parsers(commands)
    add_sweep_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status. Warnings print as one line each."""
    try:
        with warnings.catch_warnings():
            warnings.showwarning = show_warning
            args = build_parser().parse_args(argv)
            refuse_writing_over(args, sys.argv[1:] if argv is None else [str(a) for a in argv])
            for flag in ("decoupled", "fully_sharded"):
                if getattr(args, flag, False) and args.run is cmd_advise:
                    raise UsageError(f"--{flag.replace('_', '-')}: advise takes --pattern zero2 (decoupled) or "
                                     "--pattern fsdp (fully sharded) instead")
                if getattr(args, flag, False) and args.run not in (cmd_solve, cmd_simulate, cmd_compare, cmd_run,
                                                                   cmd_plot_timeline):
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


__all__ = ["build_parser", "main"]
