"""Horovod's autotune as its parameter manager runs it: the test points in order, the chain of
on/off settings as an odometer over whole Bayesian searches, the scores of samples, the best
setting kept; the Gaussian process and the expected improvement by hand."""

import math

import numpy as np
import pytest

from fusionopt.cost import AlphaBeta
from fusionopt.integrations import TEST_POINTS, BayesianSearch, GaussianProcess, HorovodAutotune, SimulatedJob
from fusionopt.model import Problem, Profile, simulate
from fusionopt.solvers import solve


def job() -> SimulatedJob:
    profile = Profile.from_arrays([4e6, 1e6, 2e6, 3e6], forward=[1e-3] * 4, backward=[3e-3, 2e-3, 1e-3, 2e-3])
    problem = Problem(profile, AlphaBeta(2e-3, 1e-9))
    return SimulatedJob(problem, solve(problem, "ddp").plan)


def run(tuner: HorovodAutotune, steps: int) -> list:
    settings = []
    for _ in range(steps):
        tuner.job.message_times()              # the step runs: its time is drawn
        settings.append(tuple(tuner.setting))
        tuner.after_step()
    return settings


def test_the_chain_is_an_odometer_over_whole_searches():
    # One step a sample, one sample a setting, one warm-up, a search of 5 scores (4 test
    # points and one proposal), two on/off settings: 2**2 searches of 5, then the best is kept.
    tuner = HorovodAutotune(job(), warmups=1, steps_per_sample=1, samples=1, max_samples=4, categorical=2)
    settings = run(tuner, 20)
    assert not tuner.done and len(tuner.scores) == 19
    run(tuner, 1)
    assert tuner.done and len(tuner.scores) == 20
    # The warm-up and the first search run the test points in Horovod's order, then a proposal
    # within the bounds; each search starts again from the first test point.
    assert settings[:5] == [TEST_POINTS[0]] * 2 + list(TEST_POINTS[1:])
    assert 0 <= settings[5][0] <= 64 and 1 <= settings[5][1] <= 100
    assert settings[6:10] == list(TEST_POINTS)
    # Kept: the setting of the highest score, the one whose step is shortest here (no noise).
    problem = tuner.job.problem
    tried = {s: simulate(problem, tuner.plan_of(np.array(s))).iteration_time for s in settings}
    assert simulate(problem, tuner.job.plan).iteration_time == min(tried.values())
    assert tuner.job.plan == tuner.plan_of(tuner.best)


def test_horovods_defaults_take_about_seventeen_thousand_steps():
    # 3 warm-up settings, then 2**4 searches of 21 scores, each setting 5 samples of 10 steps.
    tuner = HorovodAutotune(job())
    assert (tuner.warmups_left, tuner.steps_per_sample, tuner.samples, tuner.max_samples, len(tuner.values)) == (
        3, 10, 5, 20, 4)
    # The figure the module docstring and the README give, from the tuner's own settings.
    assert (tuner.warmups_left + 2 ** len(tuner.values) * (tuner.max_samples + 1)) * tuner.samples * \
        tuner.steps_per_sample == 16_950


def test_a_score_is_the_bytes_per_microsecond_of_a_sample():
    tuner = HorovodAutotune(job(), warmups=0, steps_per_sample=2, samples=1, max_samples=4, categorical=0)
    times = []
    for _ in range(2):
        tuner.job.message_times()
        times.append(tuner.job.step_time)
        tuner.after_step()
    assert tuner.scores == [pytest.approx(2 * 10e6 / (1e6 * sum(times)), rel=1e-12)]


def test_a_threshold_of_nothing_sends_each_tensor_alone():
    tuner = HorovodAutotune(job())
    assert tuner.plan_of(np.array([0.0, 1.0])).num_messages == 4
    # 64 MiB and a 100 ms cycle: every gradient is ready (by 8 ms) before the tick that sends them.
    assert tuner.plan_of(np.array([64.0, 100.0])).num_messages == 1


def test_bad_settings_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^steps_per_sample must be a whole number >= 1, got 0$"):
        HorovodAutotune(job(), steps_per_sample=0)


def test_the_gaussian_process_by_hand():
    process = GaussianProcess(alpha=1e-4)
    process.x, process.y = np.array([[0.0, 0.0], [1.0, 0.0]]), np.array([1.0, -1.0])
    # k(x, x') = exp(-|x - x'|^2 / 2): at the samples the mean is the sample (noise 1e-4).
    mean, sd = process.predict(process.x)
    np.testing.assert_allclose(mean, [1.0, -1.0], atol=1e-6)
    np.testing.assert_allclose(sd, [0.0, 0.0], atol=1e-3)
    # Halfway the two cancel; far away the prior: mean 0, sd sigma_f = 1.
    mean, sd = process.predict(np.array([[0.5, 0.0], [50.0, 50.0]]))
    assert abs(mean[0]) < 1e-9 and abs(mean[1]) < 1e-12 and sd[1] == pytest.approx(1.0, abs=1e-6)
    assert process.kernel(np.zeros((1, 2)), np.array([[1.0, 1.0]]), 1.0, 2.0)[0, 0] == pytest.approx(4 * math.exp(-1))


def test_the_expected_improvement_prefers_the_unknown_near_the_best():
    search = BayesianSearch(noise=0.1, restarts=5, seed=1)
    for x, y in (((4.0, 5.0), 1.0), ((32.0, 50.0), -1.0), ((16.0, 25.0), 0.0)):
        search.add(x, y)
    proposal = search.next()
    assert 0 <= proposal[0] <= 64 and 1 <= proposal[1] <= 100
    ei = search.expected_improvement(np.array([proposal, [32.0, 50.0]]))
    assert ei[0] >= ei[1] >= 0.0 and ei[0] > 0.0
