"""Switching real FSDP2's reshard flags and prefetch lists between steps
(``fusionopt.integrations.FSDP2Job``) and the fully sharded planner on it, 2 gloo ranks, the
small transformer of ``tiny_transformer`` (a root of embedding, norm and head, three blocks):
a job that switches, by hand or by the planner, keeps the parameters of plain FSDP2 that
never switches to 1e-6; a switch inside a step, to other units, or that the ranks disagree
on, is refused in one line; on an emulated link of 5 ms a message the planner keeps the
blocks whole (no all-gather again in the backward), every rank alike."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not hasattr(pytest.importorskip("torch.distributed.fsdp"), "fully_shard"):  # pragma: no cover - before FSDP2
    pytest.skip("this torch has no FSDP2 (torch.distributed.fsdp.fully_shard)", allow_module_level=True)

from dist_helpers import gloo_rank, spawn_gloo  # noqa: E402

from fusionopt.cost import AlphaBeta  # noqa: E402
from fusionopt.integrations import EmulatedLink, FSDP2Job, ShardedPlanner, tiny_transformer  # noqa: E402
from fusionopt.model import ALL_GATHER, REDUCE_SCATTER, FullySharded, Problem, Profile, ShardedPlan, simulate  # noqa: E402
from fusionopt.solvers.baselines import fsdp2_plan  # noqa: E402

STEPS = 6


def profile_of(model):
    named = list(model.named_parameters())
    return Profile.from_arrays([p.numel() * p.element_size() for _, p in named], [1e-4] * len(named),
                               [2e-4] * len(named), [n for n, _ in named])


def fresh():
    torch.manual_seed(0)
    return tiny_transformer()


def batch(rank, step):
    return torch.randint(0, 32, (64,), generator=torch.Generator().manual_seed(100 * rank + step))


def train(model, rank, step, optimizer):
    optimizer.zero_grad()
    model(batch(rank, step)).pow(2).mean().backward()
    optimizer.step()


def parameters(model):
    return {name: p.full_tensor().detach().clone() for name, p in model.named_parameters()}


def largest_difference(a, b):
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def _worker(rank, port, out):
    from torch.distributed.fsdp import fully_shard

    with gloo_rank(rank, port, out) as report:
        # Plain FSDP2, never switched: each block, then the root.
        model = fresh()
        for block in model.layers:
            fully_shard(block)
        fully_shard(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
        for step in range(STEPS):
            train(model, rank, step, optimizer)
        reference = parameters(model)

        profile = profile_of(fresh())
        problem = Problem(profile, pattern=FullySharded(AlphaBeta(1e-4, 1e-9), AlphaBeta(1e-4, 1e-9), blocking=True))
        start = fsdp2_plan(profile, forward_prefetch=0)
        report["start"] = [start.reshard.tolist(), start.forward_prefetch, start.backward_prefetch, start.root]

        # By hand: every unit whole and two ahead each way after step 1, FSDP2's defaults
        # again after step 3; a switch mid-step, to other units, or disagreed on, refused.
        model = fresh()
        job = FSDP2Job(model, problem, start)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
        whole = start.replace(reshard=[False] * start.num_units, forward_prefetch=2, backward_prefetch=2)
        counts = []
        for step in range(STEPS):
            optimizer.zero_grad()
            loss = job(batch(rank, step)).pow(2).mean()
            if step == 2:
                try:
                    job.switch(whole)
                except ValueError as exc:
                    report["mid-step"] = str(exc)
            loss.backward()
            optimizer.step()
            record = job.end_step()
            counts.append(sum(kind == "all_gather" for kind, _, _ in record["collectives"]))
            if step == 1:
                job.switch(whole)
            if step == 3:
                job.switch(start)
        report["gathers"] = counts
        report["hand"] = largest_difference(reference, parameters(model))
        try:
            job.switch(ShardedPlan([0, profile.n]))
        except ValueError as exc:
            report["units"] = str(exc)
        try:
            job.switch(whole if rank == 0 else start)
        except ValueError as exc:
            report["disagree"] = str(exc)
        report["after"] = [job.plan.reshard.tolist(), job.plan.forward_prefetch, job.plan.backward_prefetch]

        # The planner, on an emulated link of 5 ms a message.
        model = fresh()
        job = FSDP2Job(model, problem, start, link=EmulatedLink(AlphaBeta(5e-3, 0.0)))
        planner = ShardedPlanner(job, every=2, window=2)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
        for step in range(STEPS):
            optimizer.zero_grad()
            job(batch(rank, step)).pow(2).mean().backward()
            optimizer.step()
            planner.after_step()
        report["planned"] = [job.plan.reshard.tolist(), job.switches]
        report["decisions"] = [[d.step, d.switched, d.plan.reshard.tolist()] for d in planner.history]
        # The first fit saw two steps of the start plan: each cost at its kind's mean size
        # there (where a least-squares line meets the mean of what it fits).
        first = simulate(problem, start)
        report["fitted"] = [float(cost(first.message_bytes[first.message_kind == kind].mean()))
                            for cost, kind in ((planner.history[0].all_gather, ALL_GATHER),
                                               (planner.history[0].reduce_scatter, REDUCE_SCATTER))]
        report["planner"] = largest_difference(reference, parameters(model))


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    return spawn_gloo(_worker, tmp_path_factory.mktemp("fsdp2-switch"))


def test_the_start_is_fsdp2s_own_plan_on_cpu(reports):
    # The root (embedding before the blocks, norm and head after) kept, the blocks
    # resharded, no forward prefetch (the collectives block), one back.
    assert reports[0]["start"] == [[False, True, True, True, False], 0, 1, True]


def test_switches_by_hand_keep_plain_fsdp2s_parameters(reports):
    for report in reports:
        assert report["hand"] < 1e-6
        # The root and the three blocks gathered in the forward, and with FSDP2's defaults
        # each block again for its backward: 7; with every unit whole, 4. The model's steps
        # of the two plans say the same.
        assert report["gathers"] == [7, 7, 4, 4, 7, 7], report["gathers"]
    profile = profile_of(fresh())
    problem = Problem(profile, pattern=FullySharded(AlphaBeta(1e-4, 1e-9), AlphaBeta(1e-4, 1e-9), blocking=True))
    start = fsdp2_plan(profile, forward_prefetch=0)
    whole = start.replace(reshard=[False] * start.num_units, forward_prefetch=2, backward_prefetch=2)
    assert [int((simulate(problem, plan).message_kind == ALL_GATHER).sum()) for plan in (start, whole)] == [7, 4]


def test_refusals_in_one_line(reports):
    for report in reports:
        assert report["mid-step"] == "switch(plan) between steps only: a step is running (call it after end_step())"
        assert report["units"].startswith("FSDP2 fixes a job's units when fully_shard wraps them: the plan's units "
                                          "start at [0] (root False)")
        assert report["disagree"].startswith("ranks disagree on the plan: rank 1 switches to ")
        assert report["after"] == reports[0]["start"][:3]  # neither rank switched


def test_the_planner_keeps_the_blocks_whole_on_a_slow_link(reports):
    for report in reports:
        assert report["planner"] < 1e-6
        flags, switches = report["planned"]
        assert flags == [False] * 5 and switches == 1
        # Every message holds the link 5 ms: the fitted costs see it.
        assert all(seconds >= 5e-3 for seconds in report["fitted"]), report["fitted"]
    assert reports[0]["decisions"] == reports[1]["decisions"]
