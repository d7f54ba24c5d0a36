"""How far ``decoupled-cpsat`` proves optimality without interleaving (``interleave=False``).

Instances: the last ``n`` tensors of three zoo models (H100, calibrated compute, batch 32) and a
seeded random profile, each with an optimiser update per tensor (below), on 10 Gb Ethernet
over 8 workers (ring halves); both update semantics (ZeRO: update, then gather; DeAR:
``update_after_gather``) and both sync modes. ``interleave=False`` runs for every ``n``, and
``interleave=True`` beside it where it takes the problem (``n <= 10``). Every solve runs with
the method's defaults (``time_limit=10`` s, ``workers=2``) unless ``--deterministic-time``
is given; under a wall-clock limit whether a solve proves optimality depends on the machine,
so the table says which machine measured it, and its times are timings.

The update time: ``u_i = 5 us + 16 s_i / (P x 3e12)`` seconds for a gradient of ``s_i``
bytes, an Adam step over the worker's ``1/P`` share reading and writing 16 bytes per
gradient byte at 3 TB/s, plus a kernel launch (a synthetic choice, not a measurement).

Writes ``benchmarks/results/decoupled_cpsat_scale.md`` (the stored
``decoupled_cpsat_scale_deterministic.md`` is the same run with ``--deterministic-time 10``,
whose statuses do not depend on the machine).

Run: ``python benchmarks/decoupled_cpsat_scale.py [--sizes 10,20,30,40] [--deterministic-time D] [--output PATH]``
"""

from __future__ import annotations

import argparse
import collections
import datetime
import os
import platform
import sys
from pathlib import Path

import numpy as np

import fusionopt
from fusionopt import zoo
from fusionopt.model import Decoupled, Problem, Profile
from fusionopt.reporting import write_text_atomic
from fusionopt.solvers import solve
from fusionopt.solvers.exact import MAX_TENSORS

RESULTS = Path(__file__).resolve().parent / "results" / "decoupled_cpsat_scale.md"
MODELS = ("resnet50", "bert-base", "vgg16")
WORKERS = 8
NETWORK = "10gbe"


def with_updates(profile: Profile) -> Profile:
    """The profile with the update time of the module docstring."""
    update = 5e-6 + 16.0 * profile.sizes.astype(np.float64) / (WORKERS * 3e12)
    return Profile.from_arrays(profile.sizes, profile.forward, profile.backward, profile.names, update=update,
                               ready_order=list(profile.ready_order))


def random_profile(n: int, seed: int) -> Profile:
    """``n`` tensors of 10 kB to 20 MB, forward up to 1 ms and backward 10 us to 1 ms each."""
    rng = np.random.default_rng(seed)
    return Profile.from_arrays(rng.integers(10_000, 20_000_000, n), rng.uniform(0.0, 1e-3, n),
                               rng.uniform(1e-5, 1e-3, n))


def instances(n: int) -> list[tuple[str, Profile]]:
    found = []
    for model in MODELS:
        whole = zoo.profile(model, device="h100", batch=32)
        if n <= whole.n:
            found.append((f"{model} (last {n})", with_updates(whole.tail(n, name=""))))
    found.append((f"random (seed {n})", with_updates(random_profile(n, n))))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,20,30,40", help="comma-separated n")
    parser.add_argument("--deterministic-time", type=float, default=None,
                        help="CP-SAT work limit per solve instead of the default wall-clock limit")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    sizes = [int(text) for text in args.sizes.split(",")]
    options = {} if args.deterministic_time is None else {"deterministic_time": args.deterministic_time,
                                                          "time_limit": 3600.0}
    budget = ("the method's defaults (`time_limit=10`, `workers=2`)" if args.deterministic_time is None
              else f"`deterministic_time={args.deterministic_time:g}`, `workers=2`")
    command = "python benchmarks/decoupled_cpsat_scale.py --sizes " + args.sizes + (
        "" if args.deterministic_time is None else f" --deterministic-time {args.deterministic_time:g}") + (
        "" if args.output == RESULTS else f" --output benchmarks/results/{args.output.name}")
    lines = [
        "# decoupled-cpsat without interleaving: how far it proves optimality",
        "",
        f"Measured {datetime.date.today().isoformat()} by `{command}` on {os.cpu_count()} cores"
        f" ({platform.machine()}), Python {platform.python_version()}, numpy {np.__version__},"
        f" fusionopt {fusionopt.__version__}; every solve with {budget}. `{NETWORK}` halves over"
        f" {WORKERS} workers; update times as the script's docstring says. "
        + ("Under a wall-clock limit, whether a solve proves optimality depends on the machine: the"
           " statuses are this machine's, and the seconds are timings." if args.deterministic_time is None else
           "A deterministic limit stops each search at the same point on every machine: the statuses and"
           " plans reproduce; the seconds are timings."),
        "",
        "Status is the Result's (`OPTIMAL`: within the rounding bound of CP-SAT's bound); `gap` is"
        " `(T - lower bound) / T`; `T / decoupled-opt` compares with the local search's plan;"
        " `structure` says whether the plan separated by tensor 0 being last in the ready order"
        " started the search (`hint`) or was only a candidate.",
        "",
        "| n | profile | tensor 0 last | semantics | sync | interleave | status | CP-SAT status | gap |"
        " T / decoupled-opt | plan from | structure | seconds (timing) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    proved: dict[tuple[int, bool], collections.Counter] = collections.defaultdict(collections.Counter)
    for n in sizes:
        for label, profile in instances(n):
            last = int(profile.ready_order[-1]) == 0
            for after in (False, True):
                for sync in ("barrier", "layerwise"):
                    problem = Problem(profile, pattern=Decoupled.from_network(
                        NETWORK, WORKERS, update_after_gather=after), sync=sync)
                    local = solve(problem, "decoupled-opt").iteration_time
                    for interleave in (False, True):
                        if interleave and n > MAX_TENSORS:
                            continue
                        result = solve(problem, "decoupled-cpsat", interleave=interleave, **options)
                        stats = result.stats
                        status = str(result.status)
                        proved[(n, interleave)][status] += 1
                        lines.append(
                            f"| {n} | {label} | {'yes' if last else 'no'} | {'DeAR' if after else 'ZeRO'} | {sync} |"
                            f" {interleave} | {status} | {stats['cpsat_status']} | {result.gap:.1e} |"
                            f" {result.iteration_time / local:.6f} | {stats['plan_source']} | {stats['structure']} |"
                            f" {result.solve_seconds:.2f} |")
                        print(lines[-1], flush=True)
    lines += ["", "## Proved optimal, by n", "", "| n | interleave | OPTIMAL | TIME_LIMIT | other |",
              "|---|---|---|---|---|"]
    for (n, interleave), counts in sorted(proved.items()):
        other = sum(counts.values()) - counts["OPTIMAL"] - counts["TIME_LIMIT"]
        lines.append(f"| {n} | {interleave} | {counts['OPTIMAL']} | {counts['TIME_LIMIT']} | {other} |")
    lines.append("")
    text = "\n".join(lines)
    write_text_atomic(args.output, text, make_folder=True)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
