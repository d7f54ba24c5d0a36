"""Advice applied to real models (gloo, 2 ranks, CPU): DDP built by ``apply_advice`` has the
buckets ``fusionopt advise --json`` printed; FSDP2 has the advised units, reshard flags and
prefetch lists, and issues the messages of the advised plan; the defaults are torch's
(DDP) and fusionopt's model of FSDP2's (a unit per block, then the root). Bad input gets
one line naming it."""

import contextlib
import io
import json
import os
import re
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with the gloo backend is not available", allow_module_level=True)

from fusionopt.cli import main  # noqa: E402
from fusionopt.integrations import (  # noqa: E402
    apply_advice, apply_defaults, read_advice, free_port, join_gloo, EmulatedLink, leave_rank, tiny_transformer,
)
from fusionopt.cost import AlphaBeta  # noqa: E402
from fusionopt.model import FullySharded, Problem, Profile, ShardedPlan  # noqa: E402
from fusionopt.advice import fsdp2_settings  # noqa: E402
from fusionopt.solvers.baselines import ddp_buckets  # noqa: E402


def mlp():
    nn = torch.nn
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def profile_of(model):
    """The model's tensors, sizes and names, with made-up times (1 ms forward, 2 ms backward)."""
    names = [n for n, _ in model.named_parameters()]
    sizes = [p.numel() * p.element_size() for p in model.parameters()]
    return Profile.from_arrays(sizes, [1e-3] * len(sizes), [2e-3] * len(sizes), names=names)


def advise(tmp, model, *flags):
    """What `fusionopt advise --profile ... --json` prints for the model, written to a file."""
    path = tmp / "profile.json"
    path.write_text(json.dumps(profile_of(model).to_dict()))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["advise", "--profile", str(path), "--alpha", "2e-3", "--beta", "1e-8", "--json", *flags]) in (0, None)
    advice = tmp / ("advice" + "-".join(flags) + ".json")
    advice.write_text(out.getvalue())
    return advice


def hand_fsdp2_advice(model):
    """FSDP2 settings for a plan of a root (the embedding; norm and head), ``layers.0``
    resharded, ``layers.1`` and ``layers.2`` together kept, prefetching 3 ahead in the
    forward and 2 in the backward: a unit of two modules and both prefetch lists."""
    problem = Problem(profile_of(model), pattern=FullySharded(AlphaBeta(1e-3, 1e-9), AlphaBeta(1e-3, 1e-9)))
    plan = ShardedPlan([0, 1, 5, 13, 17], [False, True, False, False], forward_prefetch=3, backward_prefetch=2,
                       root=True)
    return {"fsdp2": {**fsdp2_settings(problem, plan).to_dict(), "defaults": False}}


@pytest.fixture(scope="module")
def advices(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("advice")
    return {"ddp": advise(tmp, mlp()), "fsdp": advise(tmp, tiny_transformer(), "--pattern", "fsdp"),
            "hand": hand_fsdp2_advice(tiny_transformer()),
            "two": advise(tmp, tiny_transformer(), "--pattern", "fsdp", "--channels", "2")}


# --------------------------------------------------------------------------- the ranks
def _ddp_layout(ddp, model, x, steps=3):
    """Parameter names per bucket in the last of ``steps`` steps (after DDP's rebuild)."""
    names = {p: n for n, p in model.named_parameters()}
    seen = {}

    def hook(state, bucket):
        seen.setdefault(state["step"], []).append((bucket.index(), [names[p] for p in bucket.parameters()]))
        future = torch.futures.Future()
        future.set_result(bucket.buffer())
        return future

    state = {"step": 0}
    ddp.register_comm_hook(state, hook)
    for step in range(steps):
        state["step"] = step
        ddp(x).sum().backward()
    return [bucket for _, bucket in sorted(seen[steps - 1])]


def _fsdp_structure(model):
    from torch.distributed.fsdp import FSDPModule

    names = {id(m): n for n, m in model.named_modules()}
    units = {}
    for name, module in model.named_modules():
        if isinstance(module, FSDPModule):
            state = module._get_fsdp_state()
            groups = state._fsdp_param_groups
            units[name] = {
                "state": names[id(state._modules[0])],
                "reshard": [g.post_forward_mesh_info is not None for g in groups],
                "forward": [names[id(s._modules[0])] for s in state._states_to_forward_prefetch],
                "backward": [names[id(s._modules[0])] for s in state._states_to_backward_prefetch or []],
            }
    return units


def _own_reduce_scatter(model):
    """Per FSDP2 unit: whether each of its parameter groups reduce-scatters on a group of its own."""
    from torch.distributed.fsdp import FSDPModule

    return {name: [g.mesh_info.reduce_scatter_process_group is not None
                   for g in module._get_fsdp_state()._fsdp_param_groups]
            for name, module in model.named_modules() if isinstance(module, FSDPModule)}


def _train(model, steps, rank, link):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    per_step = []
    for step in range(steps):
        tokens = torch.randint(0, 32, (64,), generator=torch.Generator().manual_seed(10 * step + rank))
        link.reset()
        optimizer.zero_grad()
        model(tokens).sum().backward()
        optimizer.step()
        per_step.append([h.nbytes for h in link.log])
    return per_step


def _rank(rank, port, out, advices):
    join_gloo(rank, 2, port, 1)
    report = {}
    try:
        x = torch.randn(16, 64, generator=torch.Generator().manual_seed(rank))
        model = mlp()
        report["ddp advised"] = _ddp_layout(apply_advice(model, advices["ddp"], framework="ddp"), model, x)
        model = mlp()
        report["ddp default"] = _ddp_layout(apply_defaults(model, "ddp"), model, x)
        link = EmulatedLink(AlphaBeta(0.0, 0.0))
        model = mlp()
        ddp = apply_advice(model, advices["ddp"], framework="ddp", link=link)
        for _ in range(2):                  # DDP rebuilds its buckets after the first step
            link.reset()
            ddp(x).sum().backward()
        report["ddp link"] = [h.nbytes for h in link.log]
        for key in ("hand", "fsdp"):
            torch.manual_seed(0)
            model = apply_advice(tiny_transformer(), advices[key], framework="fsdp2", link=link)
            report[f"{key} messages"] = _train(model, 2, rank, link)
            report[f"{key} units"] = _fsdp_structure(model)
        report["two groups"] = _own_reduce_scatter(apply_advice(tiny_transformer(), advices["two"], framework="fsdp2"))
        report["one groups"] = _own_reduce_scatter(apply_advice(tiny_transformer(), advices["fsdp"], framework="fsdp2"))
        torch.manual_seed(0)
        model = apply_defaults(tiny_transformer(), "fsdp2", link=link)
        report["default messages"] = _train(model, 2, rank, link)
        report["default units"] = _fsdp_structure(model)
    except BaseException as exc:           # the parent reports it
        report["error"] = f"{type(exc).__name__}: {exc}"
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.barrier()
    leave_rank()


@pytest.fixture(scope="module")
def reports(tmp_path_factory, advices):
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("apply")
    documents = {k: (str(v) if not isinstance(v, dict) else v) for k, v in advices.items()}
    mp.spawn(_rank, args=(free_port(), str(out), documents), nprocs=2, join=True)
    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r.get("error") for r in reports] == [None, None]
    return reports


# --------------------------------------------------------------------------- DDP
def test_ddp_has_the_advised_buckets(reports, advices):
    advice = read_advice(advices["ddp"])
    names = [n for n, _ in mlp().named_parameters()]
    advised = [[names[i] for i in bucket] for bucket in advice["ddp"]["buckets"]]
    # alpha 2 ms, beta 10 ns/B: the DP sends the layers two tensors at a time, in four messages.
    assert advice["ddp"]["arguments"] == {"bucket_cap_mb_list": [0.001, 0.1, 0.1, 0.01]}
    assert advised == [["6.bias", "6.weight"], ["4.bias", "4.weight"], ["2.bias", "2.weight"], ["0.bias", "0.weight"]]
    for report in reports:
        assert report["ddp advised"] == advised
        assert report["ddp link"] == [sum(p.numel() * 4 for n, p in mlp().named_parameters() if n in bucket)
                                      for bucket in advised]


def test_ddp_defaults_are_torchs(reports):
    # torch's default layout, as fusionopt models it: the 466 KB model fits the 1 MiB first bucket.
    profile = profile_of(mlp())
    default = [[profile.names[i] for i in bucket] for bucket in ddp_buckets(profile)]
    assert len(default) == 1
    for report in reports:
        assert report["ddp default"] == default


# --------------------------------------------------------------------------- FSDP2
# The tiny transformer's float32 bytes: embedding 2,048; each block's fc1, fc2 with biases;
# norm 128; head 2,176 (no padding on 2 ranks: every dim 0 is even).
EMBED, NORM, HEAD = 4 * 32 * 16, 4 * 2 * 16, 4 * (32 * 16 + 32)
L0, L1, L2 = (4 * (2 * h * 16 + h + 16) for h in (32, 48, 64))


def messages_of(plan, sizes):
    """Per step, the bytes of the messages a plan's units send, as a multiset: each unit one
    all-gather in the forward, another in the backward when resharded, one reduce-scatter.
    A root's two parts are one unit."""
    bounds = plan["bounds"]
    units = [sum(sizes[bounds[j]:bounds[j + 1]]) for j in range(len(bounds) - 1)]
    reshard = list(plan["reshard"])
    if plan["root"]:
        units = [units[0] + units[-1]] + units[1:-1]
        reshard = [reshard[0]] + reshard[1:-1]
    return Counter({size: 2 + flag for size, flag in zip(units, reshard)})


def test_fsdp2_has_the_advised_units_flags_and_prefetch(reports):
    for report in reports:
        assert report["hand units"] == {
            "": {"state": "", "reshard": [False], "forward": ["layers.0", "layers.1"],
                 "backward": ["layers.1", "layers.0"]},
            "layers.0": {"state": "layers.0", "reshard": [True], "forward": ["layers.1"], "backward": []},
            # one fully_shard call on two modules: one unit, one state
            "layers.1": {"state": "layers.1", "reshard": [False], "forward": [], "backward": ["layers.0"]},
            "layers.2": {"state": "layers.1", "reshard": [False], "forward": [], "backward": ["layers.0"]},
        }


def test_fsdp2_sends_the_advised_plans_messages(reports, advices):
    sizes = [p.numel() * 4 for p in tiny_transformer().parameters()]
    hand = messages_of(advices["hand"]["fsdp2"]["plan"], sizes)
    assert hand == Counter({EMBED + NORM + HEAD: 2, L0: 3, L1 + L2: 2})
    cli = read_advice(advices["fsdp"])["fsdp2"]
    for report in reports:
        for step in report["hand messages"]:
            assert Counter(step) == hand
        assert report["fsdp units"].keys() == {m for unit in cli["units"] for m in unit}
        for step in report["fsdp messages"]:
            assert Counter(step) == messages_of(cli["plan"], sizes)


def test_fsdp2_defaults_are_a_unit_per_block(reports):
    # fusionopt's FSDP2 defaults: each block resharded, the root kept; 4 all-gathers in the
    # forward, the last block's again and two prefetched in the backward, 4 reduce-scatters.
    for report in reports:
        units = report["default units"]
        assert sorted(units) == ["", "layers.0", "layers.1", "layers.2"]
        assert [units[k]["reshard"] for k in sorted(units)] == [[False], [True], [True], [True]]
        assert all(units[k]["forward"] == [] for k in units)
        for step in report["default messages"]:
            assert Counter(step) == Counter({EMBED + NORM + HEAD: 2, L0: 3, L1: 3, L2: 3})


# --------------------------------------------------------------------------- bad input
def test_bad_advice_files_are_named(tmp_path, advices):
    text = tmp_path / "notes.json"
    text.write_text("bucket_cap_mb = 25\n")
    with pytest.raises(ValueError, match=r"advice file '.*notes.json' is not JSON \(Expecting value, line 1\)"):
        apply_advice(mlp(), text)
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps(profile_of(mlp()).to_dict()))
    with pytest.raises(ValueError, match="is not a `fusionopt advise --json` document: no 'ddp' or 'fsdp2' section"):
        apply_advice(mlp(), profile)
    with pytest.raises(ValueError, match="missing.json': No such file"):
        apply_advice(mlp(), tmp_path / "missing.json")
    with pytest.raises(ValueError, match="unknown framework 'fsdp'"):
        apply_advice(mlp(), advices["ddp"], framework="fsdp")


def test_advice_of_the_other_pattern_names_the_flag(advices):
    with pytest.raises(ValueError, match=r"no ddp section \(it is `fusionopt advise --pattern fsdp`'s\): rerun "
                                         r"`fusionopt advise --json` for ddp"):
        apply_advice(mlp(), advices["fsdp"], framework="ddp")
    with pytest.raises(ValueError, match=r"no fsdp2 section \(it is `fusionopt advise --pattern allreduce`'s\): "
                                         r"rerun `fusionopt advise --pattern fsdp --json` for fsdp2"):
        apply_advice(tiny_transformer(), advices["ddp"], framework="fsdp2")


def test_advice_for_another_model_is_refused(advices):
    with pytest.raises(ValueError, match="advice is for a model of 8 trainable parameter tensors; this model has 17"):
        apply_advice(tiny_transformer(), advices["ddp"], framework="ddp")
    with pytest.raises(ValueError, match="fsdp2 unit 'layers.0' is not a module of this model"):
        apply_advice(mlp(), advices["hand"], framework="fsdp2")
    bigger = tiny_transformer(hidden=(32, 48, 64, 80))           # a fourth block
    with pytest.raises(ValueError, match="advice is for a model of 17 trainable parameter tensors; this model has 21"):
        apply_advice(bigger, advices["hand"], framework="fsdp2")
    wrong = json.loads(json.dumps(advices["hand"]))
    wrong["fsdp2"]["units"][0] = ["layers.7"]
    with pytest.raises(ValueError, match="fsdp2 unit 'layers.7' is not a module of this model"):
        apply_advice(tiny_transformer(), wrong, framework="fsdp2")


def test_settings_this_torch_lacks_and_conflicts_are_named(advices, monkeypatch):
    with pytest.raises(ValueError, match="bucket_cap_mb= overrides the advice's bucket layout"):
        apply_advice(mlp(), advices["ddp"], bucket_cap_mb=25)
    with pytest.raises(ValueError, match="link must be an EmulatedLink"):
        apply_advice(mlp(), advices["ddp"], link=AlphaBeta(1e-3, 0.0))
    with pytest.raises(ValueError, match="need an initialised torch.distributed process group"):
        apply_advice(mlp(), advices["ddp"])

    class OldDDP:                         # a torch release before bucket_cap_mb_list
        def __init__(self, module, process_group=None, bucket_cap_mb=None):
            pass

    monkeypatch.setattr(torch.nn.parallel, "DistributedDataParallel", OldDDP)
    with pytest.raises(ValueError, match=re.escape(f"torch {torch.__version__}'s DistributedDataParallel has no "
                                                   "bucket_cap_mb_list= argument, which the advice sets")):
        apply_advice(mlp(), advices["ddp"])


def test_a_two_channel_advice_gives_the_reduce_scatters_their_own_group(reports, advices):
    # `advise --pattern fsdp --channels 2` plans the reduce-scatters on a channel of their own,
    # and FSDP2 then runs them on a process group of their own in every unit; the one-channel
    # advice leaves every unit on the shared group.
    assert json.loads(Path(advices["two"]).read_text())["fsdp2"]["separate_reduce_scatter_group"] is True
    assert json.loads(Path(advices["fsdp"]).read_text())["fsdp2"]["separate_reduce_scatter_group"] is False
    for report in reports:
        assert report["two groups"] and all(all(groups) for groups in report["two groups"].values())
        assert report["one groups"] and not any(any(groups) for groups in report["one groups"].values())


def test_an_exact_tensor_the_model_lacks_is_named(advices):
    wired = json.loads(Path(advices["ddp"]).read_text())
    wired["ddp"].update(wire=[[0, "fp32"], [1000, "fp16"]], exact_names=["nope.bias"],
                        hook="fusionopt.integrations.wire_comm_hook([[0, 'fp32'], [1000, 'fp16']], exact=...)")
    with pytest.raises(ValueError, match=r"^the advice keeps 'nope.bias' exact, which is no trainable parameter "
                                         r"of the model$"):
        apply_advice(mlp(), wired, framework="ddp")
    wired["ddp"].update(exact_names=[], through_names=["0.weight", "nope.weight"])
    with pytest.raises(ValueError, match=r"^the advice sends 'nope.weight' through powerSGD_hook, which is no trainable "
                                         r"parameter of the model$"):
        apply_advice(mlp(), wired, framework="ddp")
