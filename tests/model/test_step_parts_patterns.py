"""A traced profile's step parts under each pattern (MODEL.md section 4.1): the optimiser lump
spread over the tensors' updates by bytes where the step updates tensor by tensor, DDP's
copies dropped where the step runs none, the host's share kept everywhere."""

import warnings

import numpy as np
import pytest

from fusionopt.cost import AlphaBeta
from fusionopt.model import (
    Decoupled, DecoupledPlan, FullySharded, ParameterServer, Plan, Problem, Profile, PSPlan, ShardedPlan, simulate,
)
from fusionopt.model import fit_step_parts

MS = 1e-3
HALF = AlphaBeta(MS, 1e-9)                      # each half of the all-reduce: 1 ms + 1 ns/B
SIZES = [4e6, 1e6, 2e6]                         # MODEL.md section 5: ready at 6, 3 and 1 ms


def section5(**options):
    return Profile.from_arrays(SIZES, [MS] * 3, [3 * MS, 2 * MS, MS], name="traced", **options)


def fitted(*args, **kwargs):
    """A problem with step_parts='fit', and the lines it warned."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        problem = Problem(*args, step_parts="fit", **kwargs)
    return problem, [str(w.message) for w in caught]


def ms(seconds):
    return round(seconds / MS, 9)


@pytest.mark.parametrize("parts, spread, T", [
    # u = 0.7 ms * (4, 1, 2) / 7 = (0.4, 0.1, 0.2) ms.
    ({"update_lump": 0.7 * MS}, [0.4, 0.1, 0.2], 15.8),
    # With the copies, 1.05 ms spread: (0.6, 0.15, 0.3) ms.
    ({"update_lump": 0.7 * MS, "post_backward": 0.35 * MS}, [0.6, 0.15, 0.3], 15.95),
])
def test_layerwise_sync_spreads_the_lump_by_bytes(parts, spread, T):
    # alpha = 1 ms, beta = 1 ns/B, messages {t2} 1-4, {t0} 6-11, {t1} 11-13 (C = 11, 13, 4).
    # phi_0 = max(6, 11) + u_0, forward 1 ms; phi_1 = max(phi_0 + 1, 13) + u_1; phi_2 =
    # max(phi_1 + 1, 4) + u_2; T = phi_2 + 1 + 0.5 (host). Lump only: phi = 11.4, 13.1, 14.3,
    # T = 15.8 (the whole lump on t0 would give 11.7, 13, 14: 15.5). With the copies: 11.6,
    # 13.15, 14.45: 15.95.
    traced = section5(host_overhead=0.5 * MS, **parts)
    with pytest.raises(ValueError, match="cannot run tensor by tensor under sync='layerwise'"):
        Problem(traced, AlphaBeta(MS, 1e-9), sync="layerwise")
    problem, notes = fitted(traced, AlphaBeta(MS, 1e-9), sync="layerwise")
    assert [ms(u) for u in problem.profile.update] == spread
    assert problem.profile.step_parts == {"update_lump": 0.0, "post_backward": 0.0, "host_overhead": 0.5 * MS}
    assert len(notes) == 1 and "spread over the tensors' update times in proportion to their bytes" in notes[0]
    assert notes[0].startswith("profile 'traced': update_lump (0.7 ms)")
    t = simulate(problem, Plan.from_groups(problem.profile, [[2], [0], [1]]))
    assert ms(t.iteration_time) == pytest.approx(T, abs=1e-9)
    # The step's compute is the same, moved: B + F + U + W.
    assert problem.profile.compute_time == pytest.approx(traced.compute_time, abs=1e-15)


def test_barrier_sync_keeps_every_part_and_says_nothing():
    traced = section5(update_lump=0.7 * MS, post_backward=0.35 * MS, host_overhead=0.5 * MS)
    problem, notes = fitted(traced, AlphaBeta(MS, 1e-9))
    assert notes == [] and problem.profile == traced
    # {t2} 1-4, {t0} 6-11, {t1} 11-13; then 0.35 + 0.7 + 3 forward + 0.5 host: 17.55 ms.
    assert ms(simulate(problem, Plan.from_groups(traced, [[2], [0], [1]])).iteration_time) == pytest.approx(17.55)


SHARDED_PLANS = [ShardedPlan([0, 3]), ShardedPlan([0, 3], [False]), ShardedPlan([0, 1, 2, 3]),
                 ShardedPlan([0, 2, 3], [False, True], forward_prefetch=0), ShardedPlan([0, 1, 2, 3], root=True)]


@pytest.mark.parametrize("channels", ["one", "two"])
def test_fully_sharded_keeps_the_lump_and_drops_the_copies(channels):
    traced = section5(update_lump=0.5 * MS, post_backward=0.25 * MS, host_overhead=0.25 * MS)
    by_hand = section5(update_lump=0.5 * MS, host_overhead=0.25 * MS)
    halves = FullySharded(HALF, HALF, channels=channels)
    with pytest.raises(ValueError, match="post_backward time .* step_parts='fit'"):
        Problem(traced, pattern=halves)
    problem, notes = fitted(traced, pattern=halves)
    assert problem.profile == by_hand
    assert notes == ["profile 'traced': post_backward (0.25 ms of DDP's copies into .grad) dropped: a fully "
                     "sharded step does not run them"]
    reference = Problem(by_hand, pattern=halves)
    for plan in SHARDED_PLANS:
        assert simulate(problem, plan).iteration_time == simulate(reference, plan).iteration_time, plan
    # One unit of 7 MB (8 ms each way), resharded: 8 + F 3 + 8 + B 6 + 8 + lump 0.5 + host 0.25.
    assert ms(simulate(problem, ShardedPlan([0, 3])).iteration_time) == pytest.approx(33.75)


DECOUPLED_PLANS = [([[2], [1], [0]], [[0], [1], [2]]), ([[0, 1, 2]], [[0, 1, 2]]), ([[2, 1], [0]], [[0], [1, 2]])]


@pytest.mark.parametrize("sync", ["barrier", "layerwise"])
@pytest.mark.parametrize("after", [False, True])
def test_decoupled_spreads_the_lump_and_drops_the_copies(sync, after):
    traced = section5(update_lump=0.7 * MS, post_backward=0.25 * MS, host_overhead=0.5 * MS)
    by_hand = section5(update=[0.4 * MS, 0.1 * MS, 0.2 * MS], host_overhead=0.5 * MS)
    halves = Decoupled(HALF, HALF, update_after_gather=after)
    with pytest.raises(ValueError, match="has update_lump and post_backward time; a decoupled all-reduce"):
        Problem(traced, pattern=halves, sync=sync)
    problem, notes = fitted(traced, pattern=halves, sync=sync)
    assert np.allclose(problem.profile.update, by_hand.update, rtol=0, atol=1e-15)
    assert problem.profile.step_parts == by_hand.step_parts
    assert [note.split(":")[1].strip() for note in notes] == [
        "post_backward (0.25 ms of DDP's copies into .grad) dropped", "update_lump (0.7 ms) spread over the "
        "tensors' update times in proportion to their bytes"]
    reference = Problem(by_hand, pattern=halves, sync=sync)
    for rs, ag in DECOUPLED_PLANS:
        plan = DecoupledPlan.from_groups(traced, rs, ag)
        assert simulate(problem, plan).iteration_time == pytest.approx(simulate(reference, plan).iteration_time,
                                                                       rel=1e-12), (rs, ag)


def test_decoupled_hand_worked():
    # Reduce-scatters 1-4 (t2), 4-6 (t1), 6-11 (t0). Updates from B = 6 in ready order with the
    # spread lump: t2 6-6.2, t1 6.2-6.3, t0 max(6.3, 11) = 11-11.4. All-gathers in forward
    # order: t0 11.4-16.4, t1 16.4-18.4, t2 18.4-21.4. Layerwise: forwards at 16.4, 18.4, 21.4,
    # T = 22.4 + 0.5 (host); barrier: 21.4 + 3 + 0.5.
    traced = section5(update_lump=0.7 * MS, post_backward=0.25 * MS, host_overhead=0.5 * MS)
    plan = DecoupledPlan.from_groups(traced, [[2], [1], [0]], [[0], [1], [2]])
    for sync, T in (("layerwise", 22.9), ("barrier", 24.9)):
        problem, _ = fitted(traced, pattern=Decoupled(HALF, HALF), sync=sync)
        t = simulate(problem, plan)
        assert [ms(v) for v in t.updated] == pytest.approx([11.4, 6.3, 6.2])
        assert ms(t.iteration_time) == pytest.approx(T)


def test_the_parameter_server_under_layerwise_sync_spreads_too():
    traced = section5(update_lump=0.7 * MS, host_overhead=0.5 * MS)
    by_hand = section5(update=[0.4 * MS, 0.1 * MS, 0.2 * MS], host_overhead=0.5 * MS)
    ps = ParameterServer(AlphaBeta(MS, 1e-9))
    problem, notes = fitted(traced, pattern=ps, sync="layerwise")
    plan = PSPlan.from_groups(traced, push=[[2], [1], [0]], pull=[[0], [1], [2]])
    assert len(notes) == 1
    assert simulate(problem, plan).iteration_time == pytest.approx(
        simulate(Problem(by_hand, pattern=ps, sync="layerwise"), plan).iteration_time, rel=1e-12)


def test_fit_and_spread_refuse_what_they_cannot_do():
    with pytest.raises(ValueError, match="unknown step_parts 'drop': choose 'refuse' or 'fit'"):
        Problem(section5(), AlphaBeta(MS, 1e-9), step_parts="drop")
    with pytest.raises(ValueError, match="host_overhead is time the step waits for the host"):
        section5(host_overhead=MS).spread_step_parts("host_overhead")
    with pytest.raises(ValueError, match="unknown step part 'lump'"):
        section5().spread_step_parts("lump")
    with pytest.raises(ValueError, match="name the step parts to spread"):
        section5().spread_step_parts()
    unnamed = Profile.from_arrays([8], [0.0], [1.0], post_backward=MS)
    assert fit_step_parts(unnamed, pattern="fully-sharded", sync="barrier")[1][0].startswith("profile: post_backward")
