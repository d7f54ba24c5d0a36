"""DDP advice where messages travel in encodings (MODEL.md section 2.2): the rule the advised
hook applies bucket by bucket (``wire_comm_hook``: by the bucket's bytes, fp32 where it holds
a tensor kept exact) gives every advised bucket the encoding the model priced it in, and the
advice is never slower than DDP's defaults under the same budget."""

from __future__ import annotations

import fnmatch

import pytest

from fusionopt import zoo
from fusionopt.advice import ddp_settings
from fusionopt.cost import FP16, FP32, BF16, Cheapest, Encoded, network
from fusionopt.integrations import choose_encoding
from fusionopt.model import Plan, Problem, simulate
from fusionopt.solvers import solve
from fusionopt.solvers.baselines import ddp_buckets


@pytest.mark.parametrize("model, workers, casts", [("resnet50", 64, True), ("bert-base", 16, True),
                                                   ("resnet50", 64, False)])
def test_the_hooks_rule_is_the_models_choice_on_every_layout(model, workers, casts):
    profile = zoo.profile(model, batch=16)
    link = network("10gbe", workers)
    # Without cast costs fp16 pays from the first byte (every encoding ties at 0 bytes only).
    cost = (Cheapest(link, [FP32, FP16.with_costs(seconds_per_message=40e-6, seconds_per_byte=2e-11),
                            BF16.with_costs(seconds_per_message=60e-6)]) if casts else Cheapest(link, [FP32, FP16]))
    exact = [i for i, name in enumerate(profile.names) if fnmatch.fnmatchcase(name, "*bias*")
             or "norm" in name or "bn" in name]
    assert 0 < len(exact) < profile.n
    problem = Problem(profile, cost, exact_tensors=exact)
    settings = ddp_settings(problem, solve(problem, "dp").plan)
    assert settings.wire[0][0] == 0 and settings.exact_names == tuple(profile.names[i] for i in exact)
    assert casts or settings.wire == ((0, "fp16"),)
    assert settings.hook.startswith("fusionopt.integrations.wire_comm_hook([[0, ")
    for layout in (settings.buckets, ddp_buckets(profile), ddp_buckets(profile, bucket_cap_mb=1)):
        sizes = [int(profile.sizes[list(b)].sum()) for b in layout]
        priced = problem.message_encodings(sizes, [list(b) for b in layout])
        by_hook = [choose_encoding(settings.wire, s, any(t in exact for t in b)) for s, b in zip(sizes, layout)]
        assert by_hook == priced
    # Never slower than DDP's defaults under the same budget, and the budget only costs time.
    default = simulate(problem, Plan.from_groups(profile, ddp_buckets(profile))).iteration_time
    assert settings.iteration_time <= default * (1 + 1e-12)
    free = Problem(profile, cost)
    assert solve(free, "dp").iteration_time <= settings.plan_iteration_time * (1 + 1e-12)


def test_one_encoding_for_every_bucket_is_torchs_own_hook():
    profile = zoo.profile("resnet50", batch=16)
    settings = ddp_settings(Problem(profile, Encoded(network("10gbe", 64), FP16)),
                            solve(Problem(profile, Encoded(network("10gbe", 64), FP16)), "dp").plan)
    assert settings.wire == ((0, "fp16"),) and settings.exact_names == ()
    assert settings.hook == "torch.distributed.algorithms.ddp_comm_hooks.default_hooks.fp16_compress_hook"
    assert settings.to_dict()["wire"] == [[0, "fp16"]]
    # Without encodings there is no wire and no hook.
    plain = ddp_settings(Problem(profile, network("10gbe", 64)), solve(Problem(profile, network("10gbe", 64)),
                                                                         "dp").plan)
    assert plain.wire is None and plain.hook is None


def test_ddp_settings_with_the_powersgd_hook_as_one_choice_per_bucket():
    from fusionopt.cost import PowerSGD
    from fusionopt.model import Plan, simulate

    profile = zoo.profile("resnet50", batch=16)
    hook = PowerSGD(rank=1)
    problem = Problem(profile, network("10gbe", 8), compressor=hook)
    settings = ddp_settings(problem, solve(problem, "dp").plan)
    # Every T is the simulator's of its buckets, each at its cheaper way, and the advice is
    # never slower than DDP's defaults.
    layout = Plan.from_groups(profile, [list(b) for b in settings.buckets])
    assert settings.iteration_time == simulate(problem, layout).iteration_time
    assert settings.iteration_time <= settings.default_iteration_time
    # THROUGH: the tensors of the buckets whose hook price is below their price as they are.
    through = [i for b in settings.buckets for i in b
               if problem.compressed_messages([profile.sizes[list(b)].sum()], [list(b)])[0]
               < problem.cost(float(profile.sizes[list(b)].sum()))]
    assert settings.through_names == tuple(profile.names[i] for i in through) and through
    assert "powersgd=torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.PowerSGDState(" in settings.hook
    assert settings.to_dict()["through_names"] == list(settings.through_names)
    with pytest.raises(ValueError, match=r"^powersgd= puts torch's hook on every bucket, and this problem sends each "
                                         r"message through powersgd or not as it chooses: give one of the two"):
        ddp_settings(problem, solve(problem, "dp").plan, powersgd=hook)