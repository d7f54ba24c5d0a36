"""Hold fusionopt's FSDP2 model against reality: real ``fully_shard`` (FSDP2) on CPU, gloo,
two processes, a small transformer-shaped model (an embedding, three blocks ``layers.0..2``
of different sizes, a final LayerNorm and a head) wrapped as ``fsdp2_plan`` groups it (each
block, then the root), two training steps; the all-gathers and reduce-scatters it issues
(kind, unsharded bytes, order) must be the messages ``simulate`` gives for ``fsdp2_plan`` of
the model's measured profile, in issue order.

Checked on torch 2.13.0, where the step issues (bytes; R the root, L0..L2 the blocks):
AG R 4352, AG L0 4288, AG L1 6400, AG L2 8512 (forward), then AG L2 8512 (the last block
is gathered again for its backward), AG L1 6400 (prefetched one ahead), RS L2 8512,
AG L0 4288, RS L1 6400, RS L0 4288, RS R 4352 (last), identical in both steps and on
both ranks.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with the gloo backend is not available", allow_module_level=True)
if not hasattr(pytest.importorskip("torch.distributed.fsdp"), "fully_shard"):  # pragma: no cover - before FSDP2
    pytest.skip("this torch has no FSDP2 (torch.distributed.fsdp.fully_shard)", allow_module_level=True)

from fusionopt.integrations import profile_model  # noqa: E402
from fusionopt.integrations import (
    KIND_CODES, CollectiveRecorder, fsdp2_blocks, padded_bytes, record_fsdp2_collectives, tiny_transformer,
)
from fusionopt.cost import AlphaBeta  # noqa: E402
from fusionopt.model import FullySharded, Problem, simulate, ALL_GATHER, REDUCE_SCATTER, block_of  # noqa: E402
from fusionopt.solvers.baselines import fsdp2_plan  # noqa: E402

AG, RS = KIND_CODES["all_gather"], KIND_CODES["reduce_scatter"]
# The tiny model's units, float32 bytes: root (embed 32x16, norm 2x16, head 32x16 + 32) and
# blocks of inner width 32, 48, 64 over dim 16 (fc1 and fc2 with biases).
ROOT, L0, L1, L2 = 4 * (512 + 32 + 544), 4 * (2 * 32 * 16 + 32 + 16), 4 * (2 * 48 * 16 + 48 + 16), \
    4 * (2 * 64 * 16 + 64 + 16)
EXPECTED = [(AG, ROOT), (AG, L0), (AG, L1), (AG, L2), (AG, L2), (AG, L1), (RS, L2), (AG, L0), (RS, L1), (RS, L0),
            (RS, ROOT)]


@pytest.fixture(scope="module")
def job(timeline):
    # Wrapped as the plan says: fully_shard on each of its block units, then on the root.
    _, plan, _ = timeline
    return record_fsdp2_collectives(tiny_transformer, blocks=[n for n in plan.names if n != "(root)"], ranks=2, steps=2)


@pytest.fixture(scope="module")
def timeline():
    torch.manual_seed(0)
    model = tiny_transformer()
    profile = profile_model(model, torch.randint(0, 32, (64,)), steps=1, warmup=0)
    plan = fsdp2_plan(profile)
    problem = Problem(profile, pattern=FullySharded(AlphaBeta(1e-4, 1e-9), AlphaBeta(1e-4, 1e-9)))
    return profile, plan, simulate(problem, plan)


def issued(step):
    return [(c.code, c.bytes) for c in step]


def test_kind_codes_are_the_timelines():
    assert (KIND_CODES["all_gather"], KIND_CODES["reduce_scatter"]) == (ALL_GATHER, REDUCE_SCATTER) == (1, 0)


def test_every_rank_and_step_issues_the_same_sequence(job):
    assert job.world_size == 2 and job.blocks == ["layers.0", "layers.1", "layers.2"]
    assert len(job.steps) == 2 and all(len(steps) == 2 for steps in job.steps)
    first = issued(job.steps[0][0])
    for rank_steps in job.steps:
        for step in rank_steps:
            assert issued(step) == first
    # The sharded side is each rank's half.
    assert all(2 * c.shard_bytes == c.bytes for steps in job.steps for step in steps for c in step)


def test_fsdp2_issues_the_expected_sequence(job):
    # The unit sizes are also the model's own parameters', padded as FSDP2 pads them (no
    # padding here: every dim 0 is even).
    params = job.parameters
    unit_of = {name: block_of(name) or "(root)" for name, _, _ in params}
    sizes: dict[str, int] = {}
    for name, shape, element in params:
        sizes[unit_of[name]] = sizes.get(unit_of[name], 0) + padded_bytes(shape, element, job.world_size)
    assert sizes == {"(root)": ROOT, "layers.0": L0, "layers.1": L1, "layers.2": L2}
    assert len({ROOT, L0, L1, L2}) == 4                    # distinct, so the order is checked
    assert issued(job.steps[0][1]) == EXPECTED


def test_simulated_fsdp2_plan_matches_the_real_collectives(job, timeline):
    profile, plan, t = timeline
    assert plan.names == ("(root)", "layers.0", "layers.1", "layers.2", "(root)") and plan.root
    assert plan.reshard.tolist() == [False, True, True, True, False]
    assert (plan.forward_prefetch, plan.backward_prefetch) == (2, 1)
    assert profile.n == len(job.parameters) and sorted(profile.names) == sorted(n for n, _, _ in job.parameters)
    predicted = list(zip(t.message_kind.tolist(), t.message_bytes.tolist()))
    real = issued(job.steps[0][1])                          # the steady-state step
    for kind in (AG, RS):                                   # per kind, in order
        assert [b for k, b in predicted if k == kind] == [b for k, b in real if k == kind]
    assert predicted == real                                # and interleaved
    # The units behind the messages: the root (units 0 and 4 together) first and last.
    names = [plan.names[u] for u in t.message_unit.tolist()]
    assert names == ["(root)", "layers.0", "layers.1", "layers.2", "layers.2", "layers.1", "layers.2", "layers.0",
                     "layers.1", "layers.0", "(root)"]


def test_recorder_counts_each_call_once_and_restores_torch():
    before = (dist.all_gather_single, dist.reduce_scatter_single)
    recorder = CollectiveRecorder()
    with recorder:
        assert dist.all_gather_single is not before[0] and dist.all_gather_single.__wrapped__ is before[0]
        inner = dist.all_gather_single
        # A wrapped function calling another wrapped one (an alias forwarding) counts once.
        outer = recorder._wrap("all_gather_into_tensor",
                               lambda output_tensor, input_tensor, **kw: inner(output_tensor, input_tensor, **kw))
        with pytest.raises(Exception):                      # no process group: the call itself fails
            outer(torch.empty(8), torch.empty(4))
        recorder.next_step()
        with pytest.raises(Exception):
            dist.reduce_scatter_single(torch.empty(3), torch.empty(6))
    assert (dist.all_gather_single, dist.reduce_scatter_single) == before
    assert [[(c.kind, c.bytes, c.shard_bytes) for c in s] for s in recorder.steps] == \
        [[("all_gather", 32, 16)], [("reduce_scatter", 24, 12)]]


def test_blocks_are_the_plans_units():
    model = tiny_transformer()
    assert [name for name, _ in fsdp2_blocks(model)] == ["layers.0", "layers.1", "layers.2"]
    assert padded_bytes((31, 16), 4, 2) == 32 * 16 * 4 and np.prod((31, 16)) * 4 < padded_bytes((31, 16), 4, 2)


# ------------------------------------------------------------- FSDP2's MixedPrecisionPolicy
@pytest.mark.parametrize("reduce_dtype", ["fp32", None])
def test_fsdp2_mixed_precision_carries_what_the_model_prices(job, timeline, reduce_dtype):
    # MixedPrecisionPolicy(param_dtype=bfloat16): every all-gather carries half the bytes of the
    # fp32 job's; the reduce-scatters too unless reduce_dtype=float32, in the same order. The
    # model prices each on the fp32 message, carried as its dtype says: the same ratios.
    _, plan, t = timeline
    mixed = record_fsdp2_collectives(tiny_transformer, blocks=[n for n in plan.names if n != "(root)"], ranks=2,
                                     steps=2, param_dtype="bf16", reduce_dtype=reduce_dtype)
    fp32 = job.steps[0][1]
    step = mixed.steps[0][1]
    assert [c.kind for c in step] == [c.kind for c in fp32]
    scatter = 1.0 if reduce_dtype == "fp32" else 0.5
    assert [c.bytes for c in step] == [int(c.bytes * (0.5 if c.kind == "all_gather" else scatter)) for c in fp32]
    plain = AlphaBeta(0.0, 1.0)                              # one second a byte: the price is the bytes
    pattern = FullySharded.mixed_precision(plain, plain, param_dtype="bf16", reduce_dtype=reduce_dtype)
    priced = {"all_gather": pattern.all_gather, "reduce_scatter": pattern.reduce_scatter}
    assert [round(float(priced[c.kind](c.bytes))) for c in fp32] == [c.bytes for c in step]


def test_bad_mixed_precision_is_refused_in_one_line():
    with pytest.raises(ValueError, match="^param_dtype must be one of fp32, fp16, bf16 or None, got 'int8'$"):
        record_fsdp2_collectives(param_dtype="int8")
