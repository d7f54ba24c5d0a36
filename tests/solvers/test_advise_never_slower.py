"""No advice is slower than leaving the framework alone: for every pattern advise covers
(DDP and Horovod on the all-reduce, DeepSpeed ZeRO-2 and Megatron-LM on the decoupled
all-reduce, FSDP2 and DeepSpeed ZeRO-3 fully sharded), the model's T of each advised setting
is at most that of the framework's defaults, each recomputed here by the framework's own
method, over zoo models, worker counts and networks."""

import pytest

from fusionopt import zoo
from fusionopt.cost import PowerSGD, network
from fusionopt.model import Decoupled, FullySharded, Problem, sharded_memory_floor
from fusionopt.solvers import solve
from fusionopt.solvers.baselines import ddp_powersgd
from fusionopt.advice import ddp_settings, horovod_settings, OverMemoryCap, fsdp2_advice, zero2_settings, zero3_settings

TIE = 1e-9                                               # the advice's tolerance on T, relative

# The audit's cases (bert-large and vgg16 at 256 and 1024 workers on 10 GbE), and a sample of
# the zoo's families on the faster network.
CASES = [(model, workers, "10gbe") for model in ("bert-large", "vgg16") for workers in (256, 1024)]
CASES += [("resnet50", 64, "100gb-ib"), ("gpt2", 64, "100gb-ib"), ("vit-b16", 64, "100gb-ib"),
          ("lstm-lm", 8, "10gbe")]


@pytest.fixture(scope="module", params=sorted({model for model, _, _ in CASES}))
def profile(request):
    return request.param, zoo.profile(request.param, batch=16)


def cases_of(model):
    return [(workers, net) for name, workers, net in CASES if name == model]


def test_ddp_and_horovod_advice_is_never_slower_than_the_defaults(profile):
    model, prof = profile
    for workers, net in cases_of(model):
        problem = Problem(prof, network(net, workers))
        plan = solve(problem, "dp").plan
        ddp = ddp_settings(problem, plan)
        default = solve(problem, "ddp").iteration_time
        advised = solve(problem, "ddp", **ddp.arguments).iteration_time
        assert advised == ddp.iteration_time and advised <= default * (1 + TIE), (model, workers, net)
        hvd = horovod_settings(problem, plan)
        advised = solve(problem, "horovod", cycle_time=hvd.cycle_time_ms / 1e3,
                        fusion_threshold_bytes=hvd.fusion_threshold_bytes).iteration_time
        assert advised <= solve(problem, "horovod").iteration_time * (1 + TIE), (model, workers, net)


@pytest.mark.parametrize("rank", [1, 4])
def test_ddp_advice_under_powersgd_is_never_slower_than_ddps_defaults_under_it(profile, rank):
    # The hook's buckets come from the gradients' bytes: each advised setting is rebuilt by
    # ddp_powersgd, which judges DDP's own layout under the hook.
    model, prof = profile
    hook = PowerSGD(rank=rank)
    for workers, net in cases_of(model):
        problem = Problem(prof, network(net, workers))
        ddp = ddp_settings(problem, solve(hook.priced(problem), "dp").plan, powersgd=hook)
        default = ddp_powersgd(problem, hook)
        advised = ddp_powersgd(problem, hook, **ddp.arguments)
        assert ddp.default_iteration_time == default.iteration_time, (model, workers, net)
        assert [list(b) for b in ddp.buckets] == advised.plan.groups(), (model, workers, net)
        assert advised.iteration_time == ddp.iteration_time <= default.iteration_time * (1 + TIE), (model, workers, net)
        assert ddp.plain_iteration_time == solve(problem, "ddp").iteration_time


def test_zero2_and_megatron_advice_is_never_slower_than_the_defaults(profile):
    model, prof = profile
    for workers, net in cases_of(model):
        problem = Problem(prof, pattern=Decoupled.from_network(net, workers))
        zero2, megatron = zero2_settings(problem, data_parallel_size=workers)
        for setting, fixed in ((zero2, {}), (megatron, {"data_parallel_size": workers})):
            default = solve(problem, setting.method, **fixed).iteration_time
            advised = solve(problem, setting.method, **setting.options).iteration_time
            assert advised == setting.iteration_time, (model, workers, net, setting.method)
            assert advised <= default * (1 + TIE), (model, workers, net, setting.method, setting.options)
            assert setting.unset == (setting.options == fixed)


def test_megatron_advice_leaves_the_bucket_size_to_megatron_where_its_default_wins():
    # Megatron-LM's max(4e7, 1e6 x dp) parameters: 1.024e9 at 1024 ranks, one bucket for
    # bert-large's 335M parameters, which the model predicts faster than every size tried.
    problem = Problem(zoo.profile("bert-large"), pattern=Decoupled.from_network("10gbe", 1024))
    _, megatron = zero2_settings(problem, data_parallel_size=1024)
    default = solve(problem, "megatron", data_parallel_size=1024)
    assert default.stats["bucket_size"] == 1_024_000_000 and default.stats["buckets"] == 1
    assert megatron.unset and megatron.options == {"data_parallel_size": 1024}
    assert megatron.iteration_time == megatron.default_iteration_time == default.iteration_time
    for size in (40_000_000, 100_000_000):
        assert solve(problem, "megatron", data_parallel_size=1024, bucket_size=size).iteration_time \
            > default.iteration_time


@pytest.mark.parametrize("share", [None, 0.6])
def test_fsdp2_and_zero3_advice_is_never_slower_than_the_defaults(profile, share):
    # Without a cap, and with one at 60% of the model's bytes (or just above the least any
    # plan needs, where that is more), which FSDP2's defaults often exceed. Advice that fits
    # no setting of its framework is refused only where the defaults do not fit either.
    model, prof = profile
    workers, net = cases_of(model)[0]
    free = Problem(prof, pattern=FullySharded.from_network(net, workers))
    cap = None if share is None else max(share * prof.total_bytes, 1.05 * sharded_memory_floor(free)[0])
    problem = Problem(prof, pattern=FullySharded.from_network(net, workers, memory_cap=cap))
    for method, advise in (("fsdp2", fsdp2_advice), ("zero3", zero3_settings)):
        default = solve(problem, method)
        default_fits = default.status.name != "INFEASIBLE"
        try:
            advice = advise(problem)
        except OverMemoryCap:
            assert cap is not None and not default_fits, (model, method)
            continue
        if method == "fsdp2":
            advised = advice.settings.iteration_time, advice.settings.peak_memory
            assert advice.default_iteration_time == default.iteration_time
        else:
            again = solve(problem, "zero3", **advice.options)
            advised = again.iteration_time, again.timeline.peak_memory
            assert advised == (advice.iteration_time, advice.peak_memory)
        assert cap is None or advised[1] <= cap, (model, method)
        if default_fits:
            assert advised[0] <= default.iteration_time * (1 + TIE), (model, method)
