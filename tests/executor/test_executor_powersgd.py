"""Messages through torch's PowerSGD hook as the executor sends them (MODEL.md section 2.4):
the hook's three all-reduces of the model's sizes, its compute held for its price, and every
compressed gradient checked against the hook's product of the summed matrices."""

from __future__ import annotations

import numpy as np
import pytest

from executor_helpers import require_mpiexec, spy_collectives
from fusionopt.cost import AlphaBeta, PowerSGD
from fusionopt.executor import (
    CorrectnessError, Fault, Job, LocalGroup, PowerSGDMessages, ShardData, ShardLayout, rank_bytes, run,
    run_threads,
)
from fusionopt.model import Plan, Problem, Profile, allreduce_program

LINK = AlphaBeta(1e-5, 1e-8)


def two_layers(**kwargs) -> Profile:
    """Two linear layers, fp32: w1 64 x 128 and its bias, w2 32 x 64 and its bias."""
    return Profile.from_arrays([64 * 128 * 4, 64 * 4, 32 * 64 * 4, 32 * 4], [1e-4] * 4, [1e-4] * 4,
                               ["w1", "b1", "w2", "b2"], shapes=[(64, 128), (64,), (32, 64), (32,)], **kwargs)


def test_a_message_through_the_hook_sends_its_three_all_reduces(monkeypatch):
    sent = spy_collectives(monkeypatch)
    hook = PowerSGD(rank=2)
    problem = Problem(two_layers(), LINK, compressor=hook)
    plan = Plan.from_groups(problem.profile, [[3, 2, 1, 0]])
    m = run(problem, plan, ranks=2, iterations=2, warmup=1, time_scale=0.0)
    assert m.correct and m.encodings == ("powersgd",)
    # The biases as they are (32 + 64 floats in 8-byte words), then P (w2 32 x 2, w1 64 x 2)
    # and Q (64 x 2, 128 x 2) in 4-byte elements: the model's three parts of the message.
    assert sent[:3] == [("allreduce", 8, 384), ("allreduce", 4, 768), ("allreduce", 4, 1536)]
    assert len(sent) == 3 * 3
    assert hook.tensor_parts(problem.profile)[:3].sum(axis=1).tolist() == [384, 768, 1536]
    assert m.collectives == (("powersgd", 2688, 2688),)
    assert "PowerSGD's messages: with the hook's products of them" in m.summary()


def test_only_the_messages_the_model_prices_through_the_hook_take_it(monkeypatch):
    sent = spy_collectives(monkeypatch)
    problem = Problem(two_layers(), LINK, compressor=PowerSGD(rank=2))
    plan = Plan.per_tensor(problem.profile)        # b2, w2, b1, w1: the hook pays for w2 and w1 only
    m = run(problem, plan, ranks=2, iterations=1, warmup=0, time_scale=0.0)
    assert m.correct and m.encodings == ("fp32", "powersgd", "fp32", "powersgd")
    assert m.encodings == tuple(problem.message_encodings(plan.message_bytes, [list(x.tensors) for x in plan.messages]))
    # w2's message: an empty all-reduce of the uncompressed (issued, as the hook does), P, Q.
    assert sent == [("allreduce", 8, 128), ("allreduce", 8, 0), ("allreduce", 4, 256), ("allreduce", 4, 512),
                    ("allreduce", 8, 256), ("allreduce", 8, 0), ("allreduce", 4, 512), ("allreduce", 4, 1024)]


def test_each_compressed_gradient_is_the_hooks_product_of_the_summed_matrices():
    # Two ranks by hand: an 8 x 8 weight at rank 1 ((8 + 8) 2 < 64: compressed) and its bias.
    # The expected values are worked in Python's integers, modulo 2**32, from each rank's own
    # gradients: S = M_0 + M_1, P = S q, Q' = S^T P, M = P Q'^T.
    profile = Profile.from_arrays([256, 32], [0, 0], [1e-3, 1e-3], ["w", "b"], shapes=[(8, 8), (8,)])
    problem = Problem(profile, AlphaBeta(1e-6, 1e-6), compressor=PowerSGD(rank=1))     # 99 us against 289 us
    plan = Plan.from_groups(profile, [[1, 0]])
    program = allreduce_program(problem, plan)
    flags = tuple(way == "powersgd" for way in problem.message_encodings(plan.message_bytes, [[1, 0]]))
    assert flags == (True,)
    group = LocalGroup(2)
    layout = ShardLayout(profile, program.collectives, size=2)
    ranks, before = [], []
    for comm in group.communicators():
        hook = PowerSGDMessages(layout, problem.compressor, flags, size=2, xp=np,
                                allocate=lambda words, dtype=layout.dtype: np.empty(words, dtype))
        data = ShardData(layout, rank=comm.rank, size=2, xp=np, unpack=False, powersgd=hook,
                         allocate=lambda words, dtype=layout.dtype: np.empty(words, dtype))
        data.fill(step=3)
        before.append([g.copy() for g in data.gradients.grads])
        ranks.append((comm, data))
    run_threads([lambda c=comm, d=data: d.run(layout.collectives[0], c, timeout=10.0, tag=(3, 0))
                 for comm, data in ranks], group)
    mod = 2 ** 32
    matrices = [[int(v) for v in grads[0].view(np.uint32)] for grads in before]
    s = [[(matrices[0][8 * i + j] + matrices[1][8 * i + j]) % mod for j in range(8)] for i in range(8)]
    q = [int(v) for v in ranks[0][1].powersgd.messages[0].factors[0].ravel()]
    p = [sum(s[i][j] * q[j] for j in range(8)) % mod for i in range(8)]
    q2 = [sum(s[i][j] * p[i] for i in range(8)) % mod for j in range(8)]
    expected = [p[i] * q2[j] % mod for i in range(8) for j in range(8)]
    for comm, data in ranks:
        assert data.gradients.grads[0].view(np.uint32).tolist() == expected
        # The bias travels as it is: the exact sum of both ranks' words.
        bias = [(int(a) + int(b)) % 2 ** 64 for a, b in zip(before[0][1], before[1][1])]
        assert data.gradients.grads[1].tolist() == bias
        assert data.verify(step=3) == []
    ranks[1][1].gradients.grads[0][5] ^= np.uint64(1)
    (line,) = ranks[1][1].verify(step=3)
    assert line.startswith("tensor 'w' (index 0): bytes [40, 44) differ from PowerSGD's rank-1 product of the sum "
                           "over 2 ranks (4 B wrong in this tensor; carried by message 0; byte 40: got 0x")


@pytest.mark.parametrize("kind", ["corrupt", "drop"])
def test_a_fault_on_a_message_through_the_hook_is_caught(kind):
    problem = Problem(two_layers(), LINK, compressor=PowerSGD(rank=2))
    plan = Plan.from_groups(problem.profile, [[3, 2, 1, 0]])
    with pytest.raises(CorrectnessError) as failed:
        run(problem, plan, ranks=3, iterations=1, warmup=0, time_scale=0.0, fault=Fault(kind, rank=1, message=0))
    errors = failed.value.measurement.errors
    assert any("differ from PowerSGD's rank-2 product of the sum over 3 ranks" in e for e in errors)


def test_the_hooks_compute_holds_the_channel_for_its_price():
    # 5 ms a message for the hook's other work: each message lasts at least that, and the
    # prediction is c(U) + c(P) + c(Q) + 5 ms = 3 x 10 us + 2688 B x 1 us + 5 ms (7.718 ms,
    # against 41.354 ms for the 41344 B as they are).
    hook = PowerSGD(rank=2, seconds_per_message=5e-3)
    problem = Problem(two_layers(), AlphaBeta(1e-5, 1e-6), compressor=hook)
    plan = Plan.from_groups(problem.profile, [[3, 2, 1, 0]])
    m = run(problem, plan, ranks=2, iterations=3, warmup=1, time_scale=0.0)
    assert m.correct
    predicted = m.predicted.message_end - m.predicted.message_start
    assert m.encodings == ("powersgd",)
    assert predicted.tolist() == pytest.approx([3e-5 + 2688e-6 + 5e-3], rel=1e-12)
    assert (m.message_end - m.message_start).min() >= 5e-3


def test_a_job_with_the_hook_round_trips_and_counts_its_buffers():
    problem = Problem(two_layers(), LINK, compressor=PowerSGD(rank=2, seconds_per_flop=1e-12))
    plan = Plan.from_groups(problem.profile, [[3, 2, 1, 0]])
    job = Job(problem, plan)
    again = Job.from_dict(job.to_dict())
    assert again.problem.compressor == problem.compressor and again.digests() == job.digests()
    assert Job(Problem(two_layers(), LINK), plan).digests()[1] != job.digests()[1]
    # P 192 and Q 384 elements, Q's values 384, of 4 bytes; and the check's three copies of
    # the largest compressed tensor (w1, 32768 B).
    plain = rank_bytes(Job(Problem(two_layers(), LINK), plan), 2)
    assert rank_bytes(job, 2) - plain == (192 + 384 + 384) * 4 + 3 * 32768


def test_what_the_executor_cannot_send_through_the_hook_is_refused_in_one_line():
    from fusionopt.cost import Compressor

    class Halving(Compressor):
        name = "halving"

        def tensor_parts(self, profile):
            return np.array([profile.sizes / 2.0])

        def parts_seconds(self, cost, parts):
            return np.asarray(cost(parts[0]))

        def alters(self, profile):
            return np.ones(profile.n, dtype=bool)

        def least_seconds(self, cost):
            return float(cost(1.0))

    profile = two_layers()
    plan = Plan.per_tensor(profile)
    with pytest.raises(ValueError, match=r"^the executor sends messages through torch's PowerSGD hook \(PowerSGD\) "
                                         r"only, not compressor 'halving'$"):
        Job(Problem(profile, LINK, compressor=Halving()), plan)
    with pytest.raises(ValueError, match=r"^compute='spin' queues the compute on a device stream, and a message "
                                         r"through PowerSGD runs its products on the communication thread"):
        Job(Problem(profile, LINK, compressor=PowerSGD()), plan, backend="nccl", compute="spin")
    mixed = Profile.from_arrays([64 * 128 * 4, 32 * 64 * 2], [1e-4] * 2, [1e-4] * 2, ["w1", "w2"],
                                shapes=[(64, 128), (32, 64)], dtypes=["float32", "float16"])
    problem = Problem(mixed, LINK, compressor=PowerSGD(rank=2))
    with pytest.raises(ValueError, match=r"^message 0 of 1 \(2 chunks, 36864 B: 'w2', 'w1'\): its compressed tensors "
                                         r"have elements of 2 and 4 B, and torch's powerSGD_hook reduces a bucket of "
                                         r"one dtype"):
        run(problem, Plan.from_groups(mixed, [[1, 0]]), ranks=2, iterations=1, warmup=0, time_scale=0.0)
    document = Job(Problem(profile, LINK, compressor=PowerSGD()), plan).to_dict()
    document["compressor"] = {"name": "topk"}
    with pytest.raises(ValueError, match=r"^job.compressor: the executor runs torch's PowerSGD hook"):
        Job.from_dict(document)
    document["compressor"] = {"name": "powersgd", "rnak": 2}
    with pytest.raises(ValueError, match=r"^job.compressor: .*rnak"):
        Job.from_dict(document)


def test_messages_through_the_hook_on_mpi_ranks():
    require_mpiexec()
    problem = Problem(two_layers(), LINK, compressor=PowerSGD(rank=2))
    plan = Plan.per_tensor(problem.profile)
    m = run(problem, plan, "mpi", ranks=2, iterations=1, warmup=0, time_scale=0.0, timeout=20.0)
    assert m.correct and m.encodings == ("fp32", "powersgd", "fp32", "powersgd")
