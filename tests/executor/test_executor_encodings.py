"""Encodings on the wire (MODEL.md section 2.2) as the executor sends them: each collective in
the encoding the model prices it in, as narrowed words, every kept bit checked."""

from __future__ import annotations

import json

import numpy as np
import pytest

from executor_helpers import require_mpiexec, small_profile, spy_collectives
from fusionopt.cost import BF16, FP16, AlphaBeta, Cheapest, Encoded, Encoding
from fusionopt.executor import (
    CorrectnessError, Fault, Gradients, Job, ShardLayout, build_program, rank_bytes, run,
)
from fusionopt.model import (
    Decoupled, DecoupledPlan, FullySharded, Plan, Problem, Profile, ShardedPlan, allreduce_program,
)

LINK = AlphaBeta(1e-4, 1e-9)
# fp16 pays from 100 kB on this link: 100 us per message to cast, 0.5 ns/B saved.
FP16_CAST = FP16.with_costs(seconds_per_message=5e-5)


def wire_problem(sizes, **kwargs):
    return Problem(small_profile(sizes), Cheapest(LINK, ["fp32", FP16_CAST]), **kwargs)


@pytest.fixture
def sent(monkeypatch):
    """Every all-reduce, reduce-scatter and all-gather rank 0 posts: (kind, dtype, bytes)."""
    return spy_collectives(monkeypatch)


def test_each_message_travels_in_the_encoding_the_model_prices_it_in(sent):
    # t0 (400 kB) and t2 (8 kB) alone, t1 (200 kB) too: per tensor in the ready order t2, t1, t0.
    problem = wire_problem([400_000, 200_000, 8_000])
    plan = Plan.per_tensor(problem.profile)
    m = run(problem, plan, ranks=3, iterations=2, warmup=1, time_scale=0.0)
    assert m.correct and m.encodings == ("fp32", "fp16", "fp16")
    # 8-byte words; fp16 messages travel as their low 4 bytes: half the bytes on the wire.
    assert sent[:3] == [("allreduce", 8, 8_000), ("allreduce", 4, 100_000), ("allreduce", 4, 200_000)]
    assert len(sent) == 3 * 3                      # every step the same
    assert m.encodings == tuple(problem.message_encodings(plan.message_bytes,
                                                          [list(x.tensors) for x in plan.messages]))
    assert "100000 B fp16" not in m.summary() and "200000 B fp16" in m.summary()


def test_a_message_carrying_a_tensor_kept_exact_travels_in_fp32(sent):
    problem = wire_problem([400_000, 200_000, 8_000], exact_tensors=[2])
    plan = Plan.from_groups(problem.profile, [[2, 1], [0]])
    m = run(problem, plan, ranks=2, iterations=1, warmup=1, time_scale=0.0)
    assert m.correct and m.encodings == ("fp32", "fp16")
    assert sent[:2] == [("allreduce", 8, 208_000), ("allreduce", 4, 200_000)]


def test_a_word_that_lost_a_kept_bit_or_kept_a_dropped_one_is_caught():
    # Two ranks reduced by hand, t1 in fp16 (8-byte words narrowed to 4 bytes), t0 and t2 in
    # fp32: each fp16 word holds the exact sum's low 32 bits and zero above them.
    problem = Problem(small_profile([4096, 1024, 2048]), LINK)
    plan = Plan.per_tensor(problem.profile)
    specs = build_program(problem, plan).collectives          # t2, t1, t0
    layout = ShardLayout(problem.profile, specs, size=2, encodings=[Encoding("fp32"), FP16, Encoding("fp32")])
    assert layout.word_bytes == 8 and [c.wire_bytes for c in layout.collectives] == [None, 4, None]
    assert layout.masks == [[], [(0, 128, 2**32 - 1)], []]
    ranks = [Gradients(layout, rank=r, size=2) for r in range(2)]
    for g in ranks:
        g.fill(step=3)
    for i in range(3):
        total = ranks[0].grads[i] + ranks[1].grads[i]
        if i == 1:
            total = total.astype(np.uint32).astype(np.uint64)     # what the narrowed sum widens to
        for g in ranks:
            g.grads[i][:] = total
    assert ranks[0].verify(step=3) == []
    assert int(ranks[0].grads[1].max()) < 2**32 < int(ranks[0].grads[0].max())
    ranks[0].grads[1][5] ^= np.uint64(1 << 40)                 # a dropped bit came back
    ranks[1].grads[1][7] ^= np.uint64(1 << 3)                  # a kept bit flipped
    assert ranks[0].verify(step=3)[0].startswith("tensor 't1' (index 1): bytes [40, 48) differ from the exact sum")
    assert ranks[1].verify(step=3)[0].startswith("tensor 't1' (index 1): bytes [56, 64) differ from the exact sum")


def test_a_corrupted_fp16_message_fails_the_run_naming_it():
    problem = wire_problem([400_000, 200_000, 8_000])
    plan = Plan.per_tensor(problem.profile)
    with pytest.raises(CorrectnessError, match=r"tensor 't1' \(index 1\): bytes \[.*carried by message 1"):
        run(problem, plan, ranks=2, iterations=1, warmup=0, time_scale=0.0,
            fault=Fault("corrupt", rank=0, message=1))


def test_fully_sharded_mixed_precision_gathers_in_bf16_and_reduces_in_fp32(sent):
    profile = small_profile([4096, 1024, 2048])
    pattern = FullySharded.mixed_precision(LINK, LINK, param_dtype="bf16", reduce_dtype="fp32")
    problem = Problem(profile, pattern=pattern)
    plan = ShardedPlan([0, 2, 3])
    m = run(problem, plan, ranks=2, iterations=1, warmup=0, time_scale=0.0)
    assert m.correct
    kinds = [c[0] for c in m.collectives]
    assert m.encodings == tuple("bf16" if k == "all-gather" else "fp32" for k in kinds)
    # Each gather sends rank 0's shard (half the unit's bytes) as 4-byte words: a quarter.
    gathers = [(dtype, nbytes) for name, dtype, nbytes in sent if name == "all_gather"]
    scatters = [(dtype, nbytes) for name, dtype, nbytes in sent if name == "reduce_scatter"]
    assert {d for d, _ in gathers} == {4} and {d for d, _ in scatters} == {8}
    full = [b for k, b, _ in m.collectives if k == "all-gather"]
    assert len(full) == 4 and [nbytes for _, nbytes in gathers] == [b // 4 for b in full]
    gathered = [line for line in m.summary().splitlines() if " AG " in line]
    assert len(gathered) == 4 and all(" B bf16 " in line for line in gathered)
    assert json.loads(json.dumps(m.to_dict()))["encodings"] == list(m.encodings)


def test_megatron_mixed_precision_runs_its_decoupled_plan_in_bf16():
    profile = small_profile([4096, 1024, 2048])
    problem = Problem(profile, pattern=Decoupled.mixed_precision(LINK, LINK, param_dtype="bf16"))
    plan = DecoupledPlan.from_groups(profile, [[2], [1, 0]], [[0, 1], [2]])
    m = run(problem, plan, ranks=3, iterations=1, warmup=0, time_scale=0.0)
    assert m.correct and m.encodings == ("bf16",) * 4


def test_a_job_with_encodings_and_kept_tensors_travels_as_json():
    problem = wire_problem([400_000, 200_000, 8_000], exact_tensors=[2])
    job = Job(problem, Plan.per_tensor(problem.profile))
    again = Job.from_dict(json.loads(json.dumps(job.to_dict())))
    assert again.problem.exact_tensors == (2,) and again.problem.cost == problem.cost
    assert again.digests() == job.digests()
    assert job.scaled_problem().exact_tensors == (2,)


def test_the_wire_buffers_are_counted_in_a_ranks_memory():
    profile = small_profile([4096, 1024, 2048])
    plan = Plan.from_groups(profile, [[2], [1, 0]])
    plain = rank_bytes(Job(Problem(profile, LINK), plan), 2)
    halved = rank_bytes(Job(Problem(profile, Encoded(LINK, "fp16")), plan), 2)
    assert plain == 23552                  # the footprint's own example
    # A wire buffer of the largest message (640 words of 4 B) and a one-word wire shard,
    # counted in whole 8-byte words: 2564 B rounded up.
    assert halved - plain == 2568


def test_encodings_the_ranks_cannot_send_are_refused_in_one_line():
    profile = small_profile([4096, 1024, 2048])
    plan = Plan.per_tensor(profile)
    fp8 = Encoding("fp8", wire_ratio=0.3, unit_roundoff=2.0 ** -4)
    with pytest.raises(ValueError, match=r"^encoding 'fp8' sends 0.3 of the bytes: the executor narrows each word "
                                         r"to 0.5, 0.25, 0.125 of it, or sends it as it is$"):
        Job(Problem(profile, Encoded(LINK, fp8)), plan)
    Job(Problem(profile, Encoded(LINK, BF16)), plan, backend="nccl", compute="spin")    # GPU streams send it too
    # NCCL sums no 2-byte words: fp16 of a plan cut on 4-byte boundaries has no word to travel in.
    odd = small_profile([4092, 1024, 2048])
    specs = allreduce_program(Problem(odd, LINK), Plan.per_tensor(odd)).collectives
    with pytest.raises(ValueError, match=r"travels as words of 2 B, which nccl does not sum .* send it in fp32, or "
                                         r"keep every tensor and chunk a multiple of 8 B$"):
        ShardLayout(odd, specs, size=2, word_sizes=(8, 4, 1), encodings=[FP16] * 3, backend="nccl")


def test_an_mpi_run_sends_the_encodings_its_job_carries():
    require_mpiexec()
    problem = wire_problem([400_000, 200_000, 8_000], exact_tensors=[1])
    plan = Plan.from_groups(problem.profile, [[2], [1, 0]])
    m = run(problem, plan, "mpi", ranks=2, iterations=1, warmup=0, time_scale=0.0, timeout=20.0)
    assert m.correct and m.encodings == ("fp32", "fp32")
    m = run(wire_problem([400_000, 200_000, 8_000]), plan, "mpi", ranks=2, iterations=1, warmup=0, time_scale=0.0,
            timeout=20.0)
    assert m.correct and m.encodings == ("fp32", "fp16")


def test_a_profile_priced_for_the_powersgd_hook_is_refused_in_one_line():
    from fusionopt.cost import PowerSGD

    profile = Profile.from_arrays([4096, 1024], [1e-4, 1e-4], [1e-4, 1e-4], ["w", "b"], shapes=[(32, 32), (256,)],
                                  name="pair")
    priced = PowerSGD(rank=1).priced(Problem(profile, LINK))
    with pytest.raises(ValueError, match=r"^profile 'pair \(PowerSGD rank 1\)' is priced for torch's powerSGD_hook "
                                         r"\(PowerSGD.priced\): its sizes are prices"):
        Job(priced, Plan.per_tensor(priced.profile))
