"""``fusionopt plot timeline`` and ``plot sweep``."""

from __future__ import annotations

import argparse
from typing import Any
from fusionopt import zoo
from fusionopt.model import simulate
from fusionopt.solvers import solve
from fusionopt.cli._common import IMAGE_FILES, Parser, UsageError, output_paths
from fusionopt.cli._problems import add_cost_arguments, add_zoo_arguments, parse_options, problem_for_compare
from fusionopt.cli._solving import gradient_collective


PLOT_METHODS = {"all-reduce": "dp", "ps": "ps-dp", "decoupled": "decoupled-dp", "fully-sharded": "fsdp2"}
"""The method whose plan ``plot timeline`` draws when none is named, for each pattern."""


def cmd_plot_timeline(args: argparse.Namespace) -> None:
    from fusionopt import viz

    outputs = output_paths(args)
    problem, label = problem_for_compare(args)
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
        source = solve(problem, name, **parse_options(args.option))
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
        kinds = timeline.message_collectives(gradient_collective(source.plan if args.plan is None else source))
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
    from fusionopt.experiments import read_results

    outputs = output_paths(args)
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


def add_plot_parsers(commands: Any) -> None:
    from fusionopt.viz import SWEEP_METRICS

    plot = commands.add_parser("plot", help="draw a timeline (Gantt chart) or a sweep as PNG or SVG (extra plot)")
    kinds = plot.add_subparsers(dest="plot", parser_class=Parser, metavar="PLOT")
    kinds.required = True

    p = kinds.add_parser("timeline", help="Gantt chart of one plan: compute stream, channel(s), exposed time; "
                                          "with --fully-sharded, the memory over the step under it")
    p.add_argument("--model", help=f"a zoo model: {', '.join(zoo.models())}")
    p.add_argument("--profile", metavar="PROFILE.json|.csv", help="a profile instead of a zoo model")
    add_zoo_arguments(p)
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
    add_cost_arguments(p)
    p.set_defaults(run=cmd_plot_timeline, replaces=IMAGE_FILES)

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
    p.set_defaults(run=_cmd_plot_sweep, replaces=IMAGE_FILES)


__all__ = ["PLOT_METHODS"]
