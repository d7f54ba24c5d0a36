"""Online re-planning (``fusionopt.integrations._online``) against a job the simulator plays:
the planner sees only what a reducer records (each message's ready time from the step's
first gradient, its start and end), with seeded noise on every duration; it must reach the
optimum of the true problem, stay there while nothing changes, and follow a change of the
link. The real-torch job is ``test_online_gloo.py``."""

from __future__ import annotations

import numpy as np
import pytest

from fusionopt.integrations import OnlinePlanner, SimulatedJob
from fusionopt.model import Plan, Problem, Profile, simulate
from fusionopt.cost import AlphaBeta
from fusionopt.solvers import solve

MS = 1e-3


def resnet_like(n: int = 24) -> Profile:
    rng = np.random.default_rng(7)
    sizes = rng.integers(10_000, 4_000_000, n) * 4
    return Profile.from_arrays(sizes, rng.uniform(0.2, 2.0, n) * MS, rng.uniform(0.4, 4.0, n) * MS)


def gap(job: SimulatedJob) -> float:
    best = solve(job.problem, "dp").iteration_time
    return simulate(job.problem, job.plan).iteration_time / best - 1.0


def test_it_reaches_the_optimum_and_stays_there():
    profile = resnet_like()
    problem = Problem(profile, AlphaBeta(2 * MS, 2e-10))
    job = SimulatedJob(problem, Plan.per_tensor(profile), noise=0.02)
    planner = OnlinePlanner(job, every=5, window=10)
    before = gap(job)
    for _ in range(20):
        planner.after_step()
    assert before > 0.05                        # a message per tensor is far from the optimum here
    assert gap(job) < 0.02                      # within 2% of the true optimum after 20 steps
    settled = job.switches
    for _ in range(40):
        planner.after_step()
    assert job.switches == settled              # nothing changed: no switch on noise
    assert planner.history and all(d.best <= d.current for d in planner.history)


def test_it_follows_a_slower_link():
    profile = resnet_like()
    fast = Problem(profile, AlphaBeta(0.05 * MS, 2e-10))
    job = SimulatedJob(fast, Plan.per_tensor(profile), noise=0.02, seed=1)
    planner = OnlinePlanner(job, every=5, window=10)
    for _ in range(30):
        planner.after_step()
    assert gap(job) < 0.02
    job.problem = Problem(profile, AlphaBeta(8 * MS, 2e-10))     # the link's startup grows 160-fold
    assert gap(job) > 0.02
    for _ in range(20):
        planner.after_step()
    assert gap(job) < 0.02                      # back within 2% of the new optimum in 20 steps


def test_the_fit_recovers_the_link_and_the_backward():
    profile = resnet_like(12)
    problem = Problem(profile, AlphaBeta(1 * MS, 1e-9))
    job = SimulatedJob(problem, Plan.per_tensor(profile), noise=0.0)
    planner = OnlinePlanner(job, every=100, window=4)
    for _ in range(3):
        planner.after_step()
    fitted, spread = planner.fitted_problem()
    assert fitted.cost.alpha == pytest.approx(1 * MS, rel=1e-6) and fitted.cost.beta == pytest.approx(1e-9, rel=1e-6)
    assert spread == 0.0
    order = profile.backward_order
    # Every tensor but the first in the ready order (the step's origin) is observed exactly.
    assert np.allclose(fitted.profile.backward[order[1:]], profile.backward[order[1:]], rtol=1e-9, atol=1e-15)


def test_bad_settings_are_named():
    profile = resnet_like(4)
    job = SimulatedJob(Problem(profile, AlphaBeta(MS, 0.0)), Plan.per_tensor(profile))
    with pytest.raises(ValueError, match=r"every must be a whole number of steps >= 1, got 0"):
        OnlinePlanner(job, every=0)
    with pytest.raises(ValueError, match=r"min_gain must be a fraction in \[0, 1\), got 2"):
        OnlinePlanner(job, min_gain=2)
    job.sync = "layerwise"
    with pytest.raises(ValueError, match=r"has them only after flush\(\): use a PlanReducer, or sync='barrier'"):
        OnlinePlanner(job)


def test_it_follows_a_faster_link_from_a_fused_plan():
    # From the optimum of a slow link (few messages: one size per message, the cost's beta
    # held from the first window), the link's startup falls 160-fold: the planner must find
    # the plan of more messages, refining the backward it sees as it goes.
    profile = resnet_like()
    slow = Problem(profile, AlphaBeta(8 * MS, 2e-10))
    job = SimulatedJob(slow, Plan.per_tensor(profile), noise=0.02, seed=2)
    planner = OnlinePlanner(job, every=5, window=10)
    for _ in range(30):
        planner.after_step()
    assert gap(job) < 0.02
    fused = job.plan.num_messages
    job.problem = Problem(profile, AlphaBeta(0.05 * MS, 2e-10))
    assert gap(job) > 0.02
    for _ in range(40):
        planner.after_step()
    assert gap(job) < 0.02 and job.plan.num_messages > fused


def test_the_grid_search_keeps_the_fastest_cap_it_measured():
    # Without noise the measured means are the plans' T: the search keeps the grid's fastest
    # cap, after the experiments DeepSpeed's rules run (5 steps each, early stop 5 after the best).
    from fusionopt.integrations import DDP_CAPS_MB, GridSearch

    profile = resnet_like()
    problem = Problem(profile, AlphaBeta(2 * MS, 2e-10))
    job = SimulatedJob(problem, Plan.per_tensor(profile))
    search = GridSearch(job)
    steps = 0
    while search.best is None:
        job.message_times()                    # a step runs
        search.after_step()
        steps += 1
    times = [simulate(problem, search.plan_of(cap)).iteration_time for cap in DDP_CAPS_MB]
    first_best = min(range(len(times)), key=times.__getitem__)
    assert search.best == DDP_CAPS_MB[first_best]
    assert steps == 5 * min(len(DDP_CAPS_MB), first_best + 5)
    assert job.plan == search.plan_of(search.best)
    assert search.metrics == pytest.approx(times[:len(search.metrics)], rel=1e-12)


def test_it_prices_the_compute_each_message_costs():
    # Each message costs 0.6 ms on the compute stream (a reducer's hooks and thread). From DDP's
    # default buckets (7 messages), the first re-planning cannot see that cost and splits to a
    # message per tensor; once those steps are in the window beside the first plan's, the
    # planner fits the cost from the last message's ready time against the message count, and
    # reaches the true optimum.
    profile = resnet_like()
    problem = Problem(profile, AlphaBeta(0.05 * MS, 2e-10), message_compute=0.6 * MS)
    job = SimulatedJob(problem, solve(problem, "ddp").plan, noise=0.0)
    planner = OnlinePlanner(job, every=5, window=10)
    for _ in range(30):
        planner.after_step()
    assert planner.history[0].switched and planner.history[0].plan.num_messages > 1
    assert planner.fitted_problem()[0].message_compute == pytest.approx(0.6 * MS, rel=1e-9)
    assert gap(job) < 0.02
    # From one plan only, the cost is not identified: without the probe, a message per tensor
    # stays unpriced, and the planner stays on it.
    stuck = OnlinePlanner(SimulatedJob(problem, Plan.per_tensor(profile), prior=profile), every=5, window=10,
                          probe=False)
    for _ in range(30):
        stuck.after_step()
    assert stuck.fitted_problem()[0].message_compute == 0.0 and stuck.reducer.plan.num_messages == profile.n
    # With it, the ready times run 0.6 ms a message later than the profile says: the first
    # re-planning (which sees no gain) probes the DP's plan of at most 12 messages; the next
    # window holds both counts, fits the cost and reaches the optimum.
    probing = OnlinePlanner(SimulatedJob(problem, Plan.per_tensor(profile), prior=profile), every=5, window=10)
    for _ in range(30):
        probing.after_step()
    first = probing.history[0]
    assert first.probe and first.switched and first.plan.num_messages <= profile.n // 2
    assert not any(d.probe for d in probing.history[1:])
    assert probing.fitted_problem()[0].message_compute == pytest.approx(0.6 * MS, rel=1e-9)
    assert gap(probing.reducer) < 0.02
    # Without the compute per message in the fit, the optimum of the fitted problem is other.
    blind = Problem(profile, AlphaBeta(0.05 * MS, 2e-10))
    assert simulate(problem, solve(blind, "dp").plan).iteration_time > 1.02 * solve(problem, "dp").iteration_time


def test_no_probe_where_the_profile_shows_no_cost_per_message():
    # On the optimum already (several messages), the ready times run as the profile says:
    # nothing suggests a cost per message, so the planner neither probes nor switches; nor
    # from a profile without backward times, which suggests nothing.
    profile = resnet_like()
    problem = Problem(profile, AlphaBeta(2 * MS, 2e-10))
    best = solve(problem, "dp").plan
    assert best.num_messages > 1
    for prior in (profile, None):
        job = SimulatedJob(problem, best, noise=0.02, seed=4, prior=prior)
        planner = OnlinePlanner(job, every=5, window=10)
        for _ in range(30):
            planner.after_step()
        assert not any(d.probe for d in planner.history) and len(planner.history) == 6
        if prior is profile:                     # with the true profile it stays on the optimum
            assert job.switches == 0


def test_a_simulated_job_draws_measured_deviations():
    profile = resnet_like(6)
    problem = Problem(profile, AlphaBeta(MS, 1e-9))
    job = SimulatedJob(problem, Plan.per_tensor(profile), noise=[-0.25, 0.0, 0.5], seed=3)
    t = simulate(problem, job.plan)
    for _ in range(5):
        times = job.message_times()
        assert min(abs(job.step_time / t.iteration_time - 1 - d) for d in (-0.25, 0.0, 0.5)) < 1e-12
        for m, start, end in zip(times, t.message_start, t.message_end):
            stretch = (m["end"] - m["start"]) / (end - start)
            assert min(abs(stretch - 1 - d) for d in (-0.25, 0.0, 0.5)) < 1e-9
    for bad in ([], [-1.0], [float("nan")]):
        with pytest.raises(ValueError, match=r"^noise as deviations must be finite relative deviations above -1"):
            SimulatedJob(problem, job.plan, noise=bad)
