"""What the online planner costs a step, and how fast it finds the optimum, on simulated jobs.

Each job is a zoo model on H100s (ResNet-50 at batch 64, BERT-base and GPT-2 at batch 8) on
64 workers of 10 GbE or 100 Gb InfiniBand, played by the simulator
(:class:`~fusionopt.integrations.SimulatedJob`: every message's duration stretched by
a seeded 2% normal draw), starting from DDP's default buckets. The planner
(:class:`~fusionopt.integrations.OnlinePlanner`, ``every=5``, ``window=10``) runs 60
steps; at step 30 the link's bandwidth is divided by 4. Reported:

* the predicted ``T`` of DDP's default, of the optimum (``dp``) and of the plan in use at step
  30 and at step 60, on the true problem of the moment;
* the steps until the plan in use is within 2% of the optimum and stays there, from the start
  and from the change (or "never"), and the switches made;
* the same steps, and ``T`` at step 60, for DeepSpeed's autotuner's grid search over DDP's
  ``bucket_cap_mb`` (:class:`~fusionopt.integrations.GridSearch`) on the
  same job and draws: it tunes once and keeps its setting; and for Horovod's autotune
  (:class:`~fusionopt.integrations.HorovodAutotune`, its defaults: 150
  warm-up steps, then 50 steps a setting, 16,950 steps before it keeps its best);
* the planner's own seconds per step (fitting, solving and deciding every 5 steps,
  averaged; a **timing** of this host) and that as a share of the step's ``T``: target 1%.
  The simulated job plays its step when the planner asks for its messages' times (its
  ``message_times``), inside the planner's call, where a real reducer hands over what it
  recorded: that time is the step's, and is left out.

Every figure but the timing comes from seeded draws, so rerunning reproduces it exactly.
Writes ``benchmarks/results/online.md``.

Run: ``python benchmarks/bench_online.py``
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "online.md"
MODELS = (("resnet50", 64), ("bert-base", 8), ("gpt2", 8))
NETWORKS = ("10gbe", "100gb-ib")
STEPS, CHANGE, WORKERS = 60, 30, 64


def settle(gaps: list[float], start: int) -> int | None:
    """Steps from ``start`` until every later gap is within 2%, or None."""
    for k in range(start, len(gaps)):
        if all(g <= 0.02 for g in gaps[k:]):
            return k - start
    return None


def run_job(model: str, batch: int, network_name: str) -> dict:
    from fusionopt import zoo
    from fusionopt.cost import AlphaBeta, network
    from fusionopt.integrations import HorovodAutotune, OnlinePlanner, SimulatedJob, GridSearch
    from fusionopt.model import Problem, simulate
    from fusionopt.solvers import solve

    class PlayedJob(SimulatedJob):
        """The simulated job, keeping the seconds it spends playing its steps (module docstring)."""

        played = 0.0

        def message_times(self) -> list[dict[str, float]]:
            started = time.perf_counter()
            try:
                return super().message_times()
            finally:
                self.played += time.perf_counter() - started

    profile = zoo.profile(model, device="h100", batch=batch)
    before = Problem(profile, network(network_name, WORKERS))
    after = Problem(profile, AlphaBeta(before.cost.alpha, before.cost.beta * 4))
    default = solve(before, "ddp").plan
    job = PlayedJob(before, default, noise=0.02, seed=0)
    planner = OnlinePlanner(job, every=5, window=10)
    optimum = {id(before): solve(before, "dp").iteration_time, id(after): solve(after, "dp").iteration_time}
    gaps, reached = [], {}
    for step in range(STEPS):
        if step == CHANGE:
            job.problem = after
        planner.after_step()
        now = simulate(job.problem, job.plan).iteration_time
        gaps.append(now / optimum[id(job.problem)] - 1.0)
        if step + 1 in (CHANGE, STEPS):
            reached[step + 1] = now
    def tuned(make_tuner):
        """A tuner's gaps to the optimum step by step, and its job, on the same job and draws."""
        job = SimulatedJob(before, default, noise=0.02, seed=0)
        tuner = make_tuner(job)
        found = []
        for step in range(STEPS):
            if step == CHANGE:
                job.problem = after
            job.message_times()
            tuner.after_step()
            found.append(simulate(job.problem, job.plan).iteration_time / optimum[id(job.problem)] - 1.0)
        return found, job

    # DeepSpeed's autotuner's grid search over DDP's bucket_cap_mb, and Horovod's autotune.
    grid_gaps, grid = tuned(GridSearch)
    horovod_gaps, horovod = tuned(HorovodAutotune)
    return {
        "horovod_settle": settle(horovod_gaps[:CHANGE], 0), "horovod_settle_after": settle(horovod_gaps, CHANGE),
        "horovod_at_end": simulate(after, horovod.plan).iteration_time,
        "grid_settle": settle(grid_gaps[:CHANGE], 0), "grid_settle_after": settle(grid_gaps, CHANGE),
        "grid_at_end": simulate(after, grid.plan).iteration_time,
        "default": simulate(before, default).iteration_time, "optimum": optimum[id(before)],
        "optimum_after": optimum[id(after)], "at_change": reached[CHANGE], "at_end": reached[STEPS],
        "settle": settle(gaps[:CHANGE], 0), "settle_after": settle(gaps, CHANGE), "switches": job.switches,
        "seconds": (planner.seconds - job.played) / STEPS,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from fusionopt.reporting import write_text_atomic

    lines = [
        "# The online planner on simulated jobs",
        "",
        f"{datetime.date.today().isoformat()}; {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}. Written by `python benchmarks/bench_online.py`. Simulated jobs (zoo models "
        f"on H100, {WORKERS} workers, seeded 2% noise on every message), starting from DDP's default buckets; the "
        f"link's bandwidth divided by 4 at step {CHANGE} of {STEPS}. `T` in ms, predicted on the true problem of the "
        "moment. The grid search is DeepSpeed's autotuner's over DDP's `bucket_cap_mb` (a reconstruction, see "
        "`fusionopt.integrations._online_baselines`). Horovod's autotune is its parameter manager's search over the "
        "fusion threshold and the cycle time (`fusionopt.integrations._horovod_autotune`): with its defaults it warms "
        "up for 150 steps and keeps its best after 16,950, so in these 60 steps it runs its first test point (4 MiB, "
        "5 ms). The last two columns are **timings** of this host: the planner's fitting, solving and deciding, "
        "without the simulated job's playing of its step, which it does inside the planner's call where a real "
        "reducer hands over what it recorded; every other figure is reproduced exactly by rerunning.",
        "",
        "| model | network | DDP default | optimum | at step 30 | steps to 2% | optimum after | at step 60 | "
        "steps to 2% after | switches | grid search: steps to 2% | after | at step 60 | Horovod autotune: steps to "
        "2% | after | at step 60 | planner per step (ms) | share of T |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    shares = []
    for model, batch in MODELS:
        for name in NETWORKS:
            r = run_job(model, batch, name)
            share = r["seconds"] / r["at_end"]
            shares.append(share)
            never = "never"
            lines.append(
                f"| {model} | {name} | {1e3 * r['default']:.2f} | {1e3 * r['optimum']:.2f} | {1e3 * r['at_change']:.2f} | "
                f"{never if r['settle'] is None else r['settle']} | {1e3 * r['optimum_after']:.2f} | "
                f"{1e3 * r['at_end']:.2f} | {never if r['settle_after'] is None else r['settle_after']} | "
                f"{r['switches']} | {never if r['grid_settle'] is None else r['grid_settle']} | "
                f"{never if r['grid_settle_after'] is None else r['grid_settle_after']} | {1e3 * r['grid_at_end']:.2f} | "
                f"{never if r['horovod_settle'] is None else r['horovod_settle']} | "
                f"{never if r['horovod_settle_after'] is None else r['horovod_settle_after']} | "
                f"{1e3 * r['horovod_at_end']:.2f} | "
                f"{1e3 * r['seconds']:.3f} | {100 * share:.3f}% |")
    lines += ["", f"The planner's largest share of a step: {100 * max(shares):.3f}% (target 1%).", ""]
    text = "\n".join(lines)
    write_text_atomic(args.output, text, make_folder=True)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
