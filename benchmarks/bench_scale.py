"""Speed of solving and simulating at scale, against an earlier revision side by side.

Measures in one run, on one machine (timings: best of ``--repeats``):

* ``solve(problem, "dp")`` end to end on 100,000 tensors, and the DP core alone
  (``fusionopt.model.optimal_fusion``) on the same instance: target, end to end
  within 2x of the core and under 0.1 s;
* ``simulate`` of a 100,000-message plan (one message per tensor): target under 10 ms;
* ``Plan.validate`` of that plan: target under 20 ms;
* ``simulate`` on the zoo's GPT-2 (H100, batch 8, 10GbE, 64 workers): of FSDP2's plan and
  of a unit per tensor (``sharded-wfbp``) on a fully sharded problem, beside the all-reduce
  ``simulate`` of DDP's plan and of a message per tensor on the same profile (a revision
  without full sharding leaves those rows out); target: the fully sharded one within 2x of
  the all-reduce one, plan for plan. A fully sharded timeline computes its memory account
  when first asked; a row times FSDP2's plan with its ``peak_memory`` read;
* the default ``compare`` of zoo models (ResNet-50 at batch 64, BERT-base and GPT-2 at batch
  8; H100, this tree's zoo compute, 10GbE, 64 workers), barrier and layerwise sync: target
  at least 2x faster than the baseline revision (barrier, a few milliseconds: the best of
  five times the repeats).

The zoo profiles are built once, by this tree, and handed to both sides as
``Profile.to_dict`` documents: a revision with another zoo compute model then still compares
the same problems.

``--baseline REF`` runs the same measurements on a git revision of this repository (checked
out into a temporary worktree) in a child process, so the two columns come from one run.
Writes ``benchmarks/results/scale.md``.

Run: ``python benchmarks/bench_scale.py [--baseline b111989] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from timing import random_profile, timings  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "scale.md"
TENSORS = 100_000
COMPARE_MODELS = ("resnet50", "bert-base", "gpt2")


def best(fn, repeats: int) -> float:
    return min(timings(fn, repeats))


def compare_profiles() -> dict[str, dict]:
    """The zoo profiles that ``compare`` is timed on, as ``Profile.to_dict`` documents."""
    from fusionopt import zoo

    return {model: zoo.profile(model, device="h100", batch=64 if model.startswith("resnet") else 8).to_dict()
            for model in COMPARE_MODELS}


def measure(repeats: int, profiles: dict[str, dict]) -> dict[str, float]:
    """Seconds per operation, with the fusionopt that ``sys.path`` finds first; ``compare``
    on ``profiles`` (:func:`compare_profiles`)."""
    from fusionopt.cost import AlphaBeta, network
    from fusionopt.model import Plan, Problem, Profile, simulate
    from fusionopt.solvers import compare, solve
    try:
        from fusionopt.model import optimal_fusion
    except ImportError:                          # a revision from before the public faces
        from fusionopt.model.fusion_dp import optimal_fusion

    profile = random_profile(TENSORS, 0)
    cost = AlphaBeta(2e-5, 1e-10)
    wfbp = Plan.per_tensor(profile)
    cuts = np.ones(TENSORS - 1, dtype=bool)                     # the cut vector of the same plan
    problem = Problem(profile, cost)
    out = {
        # A fresh Problem per solve: nothing cached from the one before.
        "dp_core": best(lambda: optimal_fusion(Problem(profile, cost)), repeats),
        "from_cuts": best(lambda: Plan.from_cuts(profile, cuts), repeats),
        "solve_dp": best(lambda: solve(Problem(profile, cost), "dp"), repeats),
        "simulate": best(lambda: simulate(problem, wfbp, validate=False), repeats),
        "validate": best(lambda: wfbp.validate(profile), repeats),
    }
    out.update(sharded_simulate(Profile.from_dict(profiles["gpt2"])))
    for model in COMPARE_MODELS:
        zoo_profile = Profile.from_dict(profiles[model])
        for sync in ("barrier", "layerwise"):
            # A barrier compare takes milliseconds: the best of more runs, as a host's jitter is of that order.
            runs = repeats * 5 if sync == "barrier" else max(1, repeats // 2)
            out[f"compare_{model}_{sync}"] = best(
                lambda: compare(Problem(zoo_profile, network("10gbe", 64), sync=sync)), runs)
    return out


def sharded_simulate(profile: Any, calls: int = 200) -> dict[str, float]:
    """Seconds per ``simulate`` call (best of 5 runs of ``calls`` calls) on ``profile``: DDP's
    and WFBP's plans on the all-reduce, FSDP2's and a unit per tensor on full sharding; only
    the all-reduce rows on a revision without ``FullySharded``."""
    from fusionopt.solvers import solve
    from fusionopt.cost import network
    from fusionopt.model import Problem, simulate

    def per_call(problem: Any, plan: Any) -> float:
        return best(lambda: [simulate(problem, plan, validate=False) for _ in range(calls)], 5) / calls

    allreduce = Problem(profile, network("10gbe", 64))
    out = {"simulate_ddp": per_call(allreduce, solve(allreduce, "ddp").plan),
           "simulate_wfbp": per_call(allreduce, solve(allreduce, "wfbp").plan)}
    try:
        from fusionopt.model import FullySharded
    except ImportError:
        return out
    sharded = Problem(profile, pattern=FullySharded.from_network("10gbe", 64))
    fsdp2 = solve(sharded, "fsdp2").plan
    out["simulate_fsdp2"] = per_call(sharded, fsdp2)
    out["simulate_fsdp2_memory"] = best(lambda: [simulate(sharded, fsdp2, validate=False).peak_memory
                                                 for _ in range(calls)], 5) / calls
    out["simulate_sharded_wfbp"] = per_call(sharded, solve(sharded, "sharded-wfbp").plan)
    return out


def measure_revision(ref: str, repeats: int, profiles: dict[str, dict]) -> dict[str, float]:
    """:func:`measure` on a git revision of this repository, in a child process."""
    with tempfile.TemporaryDirectory(prefix="bench-") as scratch:
        tree = Path(scratch) / "tree"
        profiles_file = Path(scratch) / "profiles.json"
        profiles_file.write_text(json.dumps(profiles))
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), ref], check=True)
        try:
            code = ("import json, sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(1, sys.argv[2]); "
                    "import bench_scale; profiles = json.load(open(sys.argv[4])); "
                    "print(json.dumps(bench_scale.measure(int(sys.argv[3]), profiles)))")
            done = subprocess.run([sys.executable, "-c", code, str(tree), str(ROOT / "benchmarks"), str(repeats),
                                   str(profiles_file)],
                                  check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tree)})
            return json.loads(done.stdout.strip().splitlines()[-1])
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="b111989", help="git revision to measure beside this tree")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    sys.path.insert(0, str(ROOT))
    profiles = compare_profiles()
    now = measure(args.repeats, profiles)
    before = measure_revision(args.baseline, args.repeats, profiles)
    rows = [
        ("`solve(problem, \"dp\")`, 100,000 tensors", "solve_dp", "<= 2x the DP core and < 0.1 s"),
        ("the DP core alone (`optimal_fusion`), same instance", "dp_core", "-"),
        ("`Plan.from_cuts`, 100,000 messages", "from_cuts", "-"),
        ("`simulate`, 100,000 messages", "simulate", "< 10 ms"),
        ("`Plan.validate`, 100,000 chunks", "validate", "< 20 ms"),
        ("`simulate`, GPT-2, DDP's plan (all-reduce)", "simulate_ddp", "-"),
        ("`simulate`, GPT-2, FSDP2's plan (fully sharded)", "simulate_fsdp2", "<= 2x DDP's"),
        ("the same, reading its `peak_memory` (the memory account)", "simulate_fsdp2_memory", "-"),
        ("`simulate`, GPT-2, a message per tensor (all-reduce)", "simulate_wfbp", "-"),
        ("`simulate`, GPT-2, a unit per tensor (fully sharded)", "simulate_sharded_wfbp", "<= 2x a message per tensor"),
    ] + [(f"`compare`, {model}, {sync}", f"compare_{model}_{sync}", ">= 2x faster")
         for model in COMPARE_MODELS for sync in ("barrier", "layerwise")]
    lines = [
        "# Solving and simulating at scale",
        "",
        f"{datetime.date.today().isoformat()}; {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}. Written by `python benchmarks/bench_scale.py --baseline {args.baseline} "
        f"--repeats {args.repeats}`. **Timings** of this host (best of the repeats; they vary from run to run): "
        f"this tree beside revision `{args.baseline}`, measured in the same run. Both sides time `compare` on "
        f"the same zoo profiles, built by this tree ({profiles[COMPARE_MODELS[0]]['metadata'].get('compute', 'zoo')} "
        f"compute on H100).",
        "",
        "| operation | this tree (ms) | " + f"`{args.baseline}` (ms) | speed-up | target |",
        "|---|---|---|---|---|",
    ]
    for label, key, target in rows:
        if key not in before:
            lines.append(f"| {label} | {1e3 * now[key]:.3f} | - | - | {target} |")
            continue
        digits = 3 if now[key] < 1e-3 else 2
        lines.append(f"| {label} | {1e3 * now[key]:.{digits}f} | {1e3 * before[key]:.{digits}f} | "
                     f"{before[key] / now[key]:.1f}x | {target} |")
    lines += ["", f"End to end over the DP core: {now['solve_dp'] / now['dp_core']:.2f}x (target <= 2x). "
              f"Fully sharded `simulate` over the all-reduce one on GPT-2: FSDP2's plan over DDP's "
              f"{now['simulate_fsdp2'] / now['simulate_ddp']:.1f}x, a unit per tensor over a message per tensor "
              f"{now['simulate_sharded_wfbp'] / now['simulate_wfbp']:.1f}x (target <= 2x each).", ""]
    text = "\n".join(lines)
    from fusionopt.reporting import write_text_atomic

    write_text_atomic(args.output, text, make_folder=True)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
