"""Training with a plan (fusionopt.integrations._plan_reducer): real 2-rank gloo jobs whose
gradients are checked against real DistributedDataParallel's after every step."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from dist_helpers import free_port, one_rank_group  # noqa: E402

from fusionopt.integrations import PlanReducer  # noqa: E402
from fusionopt.model import Chunk, Message, Plan, Profile  # noqa: E402

STEPS = 3


class Embedder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(50, 8)
        self.lstm = torch.nn.LSTM(8, 12, batch_first=True)
        self.head = torch.nn.Linear(12, 3)

    def forward(self, x):
        return self.head(self.lstm(self.embed(x))[0][:, -1])


def build(name):
    nn = torch.nn
    if name == "conv":
        return nn.Sequential(nn.Conv2d(3, 6, 3), nn.BatchNorm2d(6), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 6 * 6, 4))
    if name == "lstm":
        return Embedder()
    return nn.Sequential(nn.Linear(10, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 4))


def batch(name, rank, step):
    g = torch.Generator().manual_seed(100 * rank + step)
    if name == "conv":
        return torch.randn(4, 3, 8, 8, generator=g)
    if name == "lstm":
        return torch.randint(0, 50, (4, 5), generator=g)
    return torch.randn(4, 10, generator=g)


def profile_of(model):
    named = [(n, p) for n, p in model.named_parameters()]
    return Profile.from_arrays([p.numel() * p.element_size() for _, p in named], [0.0] * len(named),
                               [0.0] * len(named), [n for n, _ in named])


def plans(profile):
    n = profile.n
    halves = []                                   # every tensor cut in two, messages in reverse
    for i in range(n):
        size = int(profile.sizes[i])
        cut = (size // 8) * 4
        halves += [Message((Chunk(i, 0, cut),)), Message((Chunk(i, cut, size),))] if cut else [Message((Chunk(i, 0, size),))]
    mixed = [Message(tuple(Chunk(i, 0, int(profile.sizes[i])) for i in range(n - 1, n // 2 - 1, -1))),
             Message(tuple(Chunk(i, 0, int(profile.sizes[i])) for i in range(n // 2)))]
    return {"wfbp": Plan.from_groups(profile, [[i] for i in range(n - 1, -1, -1)]),
            "single": Plan.from_groups(profile, [list(range(n))]),
            "partition": Plan(tuple(halves[::-1])),
            "two": Plan(tuple(mixed))}


def _worker(rank, port, out):
    import os

    import torch.distributed as dist

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    report = {}
    try:
        for name in ("conv", "lstm", "mlp"):
            for plan_name in ("wfbp", "single", "partition", "two"):
                for sync in ("barrier", "layerwise"):
                    torch.manual_seed(0)
                    reference = build(name)
                    mine = build(name)
                    mine.load_state_dict(reference.state_dict())
                    ddp = torch.nn.parallel.DistributedDataParallel(reference)
                    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
                    profile = profile_of(mine)
                    plan = plans(profile)[plan_name]
                    if sync == "barrier":
                        reducer = PlanReducer(mine, plan, profile)
                        opt = torch.optim.SGD(mine.parameters(), lr=0.1, momentum=0.9)
                    else:
                        reducer = PlanReducer(mine, plan, profile, sync="layerwise",
                                              optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9))
                    worst_grad = 0.0
                    with reducer:
                        for step in range(STEPS):
                            x = batch(name, rank, step)
                            ddp(x).pow(2).mean().backward()
                            mine(x).pow(2).mean().backward()
                            if sync == "barrier":
                                for (_, a), b in zip(reference.named_parameters(), mine.parameters()):
                                    worst_grad = max(worst_grad, float((a.grad - b.grad).abs().max()))
                                opt.step()
                                opt.zero_grad()
                            ref_opt.step()
                            ref_opt.zero_grad()
                        reducer.flush()
                        times = reducer.message_times()
                    worst_param = max(float((a - b).detach().abs().max()) for a, b in zip(reference.parameters(), mine.parameters()))
                    flat = torch.cat([p.detach().reshape(-1) for p in mine.parameters()])
                    others = [torch.zeros_like(flat) for _ in range(2)]
                    dist.all_gather(others, flat)
                    report[f"{name}/{plan_name}/{sync}"] = {
                        "grad": worst_grad, "param": worst_param, "ranks": float((others[0] - others[1]).abs().max()),
                        "messages": len(times), "plan_messages": plan.num_messages,
                        "bytes": [t["bytes"] for t in times], "plan_bytes": plan.message_bytes.tolist()}
        # Encodings: the two-message plan, its first message in fp16 or bf16, its second in fp32,
        # against DDP with torch's fp16_compress_hook, plain DDP, and bf16 worked out apart.
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        for name in ("conv", "mlp"):
            for low in ("fp16", "bf16"):
                torch.manual_seed(0)
                plain, hooked, mine = build(name), build(name), build(name)
                hooked.load_state_dict(plain.state_dict())
                mine.load_state_dict(plain.state_dict())
                ddp_plain = torch.nn.parallel.DistributedDataParallel(plain)
                ddp_hooked = torch.nn.parallel.DistributedDataParallel(hooked)
                ddp_hooked.register_comm_hook(None, default_hooks.fp16_compress_hook)
                profile = profile_of(mine)
                plan = plans(profile)["two"]
                low_tensors = set(plan.messages[0].tensors)
                x = batch(name, rank, 0)
                local = build(name)
                local.load_state_dict(plain.state_dict())
                local(x).pow(2).mean().backward()       # this rank's own gradients, for bf16 by hand
                with PlanReducer(mine, plan, profile, encodings=(low, "fp32")) as reducer:
                    ddp_plain(x).pow(2).mean().backward()
                    ddp_hooked(x).pow(2).mean().backward()
                    mine(x).pow(2).mean().backward()
                    sent = [t["encoding"] for t in reducer.message_times()]
                worst = {"low": 0.0, "fp32": 0.0}
                for i, (a, b, c, d) in enumerate(zip(plain.parameters(), hooked.parameters(), mine.parameters(),
                                                     local.parameters())):
                    if i not in low_tensors:
                        worst["fp32"] = max(worst["fp32"], float((c.grad - a.grad).abs().max()))
                    elif low == "fp16":
                        worst["low"] = max(worst["low"], float((c.grad - b.grad).abs().max()))
                    else:
                        parts = [torch.zeros_like(d.grad) for _ in range(2)]
                        dist.all_gather(parts, d.grad)
                        expected = sum(g.to(torch.bfloat16).div_(2) for g in parts).float()
                        worst["low"] = max(worst["low"], float((c.grad - expected).abs().max()))
                report[f"encodings {name} {low}"] = {**worst, "sent": sent}
        # A plan for another model, and ranks with different plans.
        model = build("mlp")
        wrong = profile_of(build("conv"))
        try:
            PlanReducer(model, plans(wrong)["single"], wrong)
        except ValueError as exc:
            report["wrong model"] = str(exc)
        profile = profile_of(model)
        mine = plans(profile)["wfbp" if rank == 0 else "single"]
        try:
            PlanReducer(model, mine, profile)
        except ValueError as exc:
            report["different plans"] = str(exc)
        # An emulated link of 50 ms per message: the one message holds the channel that long.
        from fusionopt.cost import AlphaBeta

        with PlanReducer(model, plans(profile)["single"], profile, link=AlphaBeta(0.05, 0.0)) as slow:
            model(batch("mlp", rank, 0)).sum().backward()
            held = slow.message_times()[0]
            report["emulated"] = {"flag": slow.emulated_link, "held": held["end"] - held["start"]}
        # In fp16 the one message sends 552 of its 1104 B: held 100 us a byte, 55.2 ms, not 110.4.
        with PlanReducer(model, plans(profile)["single"], profile, link=AlphaBeta(0.0, 1e-4),
                         encodings=["fp16"]) as slow:
            model(batch("mlp", rank, 0)).sum().backward()
            held = slow.message_times()[0]
            report["emulated fp16"] = held["end"] - held["start"]
        # Rank 1 never runs its backward: rank 0's first message outlives the timeout.
        import time

        reducer = PlanReducer(model, plans(profile)["single"], profile, timeout=1.0)
        if rank == 0:
            try:
                model(batch("mlp", rank, 0)).sum().backward()
            except TimeoutError as exc:
                report["timeout"] = str(exc)
        else:
            time.sleep(2.0)
        reducer.close()
    finally:
        with open(f"{out}/rank{rank}.json", "w") as f:
            json.dump(report, f)
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("reducer")
    mp.spawn(_worker, args=(free_port(), str(out)), nprocs=2, join=True)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def test_gradients_and_parameters_equal_ddp_after_every_step(reports):
    # conv + batch norm, embedding + LSTM + linear, linear + layer norm; fusion and partition
    # plans in any message order; both sync modes: DDP's gradients to fp32 summation order,
    # the same parameters after three SGD-momentum steps, equal on both ranks.
    for report in reports:
        cases = [k for k in report if k.count("/") == 2]
        assert len(cases) == 3 * 4 * 2
        for case in cases:
            r = report[case]
            assert r["grad"] < 1e-6 and r["param"] < 1e-5, case
            assert r["ranks"] == 0.0, case
            # Every message of the plan was sent, each with the plan's bytes, in the plan's order.
            assert r["messages"] == r["plan_messages"] and r["bytes"] == r["plan_bytes"], case


def test_bad_plans_are_refused_on_every_rank(reports):
    for report in reports:
        assert report["wrong model"] == ("profile tensor '4.weight' is not a trainable parameter of the module "
                                         "(Sequential); the plan is for another model")
        assert report["different plans"].startswith("ranks hold different plans: rank 1 differs from rank 0")


def test_a_collective_that_outlives_the_timeout_stops_the_rank_with_one_line(reports):
    message = reports[0]["timeout"]
    assert message == "rank 0: message 0 of 1 (1104 B) did not complete within 1 s: Operation timed out!"
    assert "\n" not in message


def test_an_emulated_link_holds_each_message_for_its_cost(reports):
    for report in reports:
        assert report["emulated"]["flag"] is True
        assert 0.05 <= report["emulated"]["held"] < 0.5
        assert 0.0552 <= report["emulated fp16"] < 0.1104


def test_each_message_travels_in_its_encoding_as_torchs_hooks_send_a_bucket(reports):
    # fp16: every averaged element is DDP's with fp16_compress_hook, bit for bit; bf16: the
    # ranks' gradients cast, halved and summed in bf16, bit for bit; the fp32 message: plain DDP's.
    for report in reports:
        for name in ("conv", "mlp"):
            for low in ("fp16", "bf16"):
                r = report[f"encodings {name} {low}"]
                assert r["sent"] == [low, "fp32"] and r["low"] == 0.0 and r["fp32"] < 1e-6, (name, low)


def test_refusals_before_any_collective():
    model = build("mlp")
    profile = profile_of(model)
    with pytest.raises(ValueError, match="needs an initialised torch.distributed process group"):
        PlanReducer(model, plans(profile)["single"], profile)


@pytest.fixture()
def one_rank():
    with one_rank_group():
        yield


def test_bad_arguments_are_named(one_rank):
    model = build("mlp")
    profile = profile_of(model)
    plan = plans(profile)["single"]
    cases = [
        (dict(sync="eager"), "unknown sync 'eager'"),
        (dict(sync="layerwise"), "sync='layerwise' runs each module's update in its forward pre-hook: give optimizer="),
        (dict(optimizer=lambda ps: torch.optim.SGD(ps, lr=1.0)), "optimizer= is for sync='layerwise'"),
        (dict(timeout=0), "timeout must be a positive number of seconds"),
        (dict(link="10gbe"), "link must be a fusionopt cost model"),
        (dict(encodings="fp16"), "encodings must list one encoding per message, got the string 'fp16'"),
        (dict(encodings=["fp16", "fp32"]), "encodings must list one encoding per message: the plan has 1 messages "
                                           "and 2 encodings were given"),
        (dict(encodings=["fp8"]), "message 0: unknown encoding 'fp8': choose one of fp32, fp16, bf16"),
    ]
    for options, message in cases:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            PlanReducer(model, plan, profile, **options)
    # A chunk boundary inside a float, and a profile whose sizes are not the module's.
    odd = Plan((Message((Chunk(0, 0, 6),)), Message((Chunk(0, 6, int(profile.sizes[0])),)),
                *[Message((Chunk(i, 0, int(profile.sizes[i])),)) for i in range(1, profile.n)]))
    with pytest.raises(ValueError, match=r"message 0: bytes \[0, 6\) of '0.weight' cut its 4-byte elements"):
        PlanReducer(model, odd, profile)
    bigger = Profile.from_arrays([int(profile.sizes[0]) + 4, *profile.sizes[1:]], [0.0] * profile.n,
                                 [0.0] * profile.n, profile.names)
    with pytest.raises(ValueError, match=r"tensor '0.weight': the profile says 644 bytes, the module's parameter holds 640"):
        PlanReducer(model, plans(bigger)["single"], bigger)
    with pytest.raises(ValueError, match=r"optimizer\(params\) must return a torch.optim.Optimizer, got list"):
        PlanReducer(model, plan, profile, sync="layerwise", optimizer=lambda ps: list(ps))
    with PlanReducer(model, plan, profile, encodings=["fp16"]) as encoded:
        with pytest.raises(ValueError, match=r"^this reducer sends messages in fp16: give switch\(plan, "
                                             r"encodings=\[\.\.\.\]\), one per message of the new plan$"):
            encoded.switch(plans(profile)["wfbp"])
        encoded.switch(plans(profile)["wfbp"], encodings=["fp32"] * profile.n)
        assert [t["encoding"] for t in encoded.message_times()] == ["fp32"] * profile.n
    half = build("mlp").half()
    with pytest.raises(ValueError, match=r"^message 0 holds torch.float16 gradients: bf16 casts fp32 ones \(send it "
                                         r"in fp32\)$"):
        PlanReducer(half, plans(profile_of(half))["single"], profile_of(half), encodings=["bf16"])
