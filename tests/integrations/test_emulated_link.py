"""The emulated link: one FIFO channel at the cost model's time per message, worked by hand on
a fake clock; then real jobs on it (gloo, 2 ranks, CPU): DDP with the link's comm hook gives
DDP's own gradients, bit for bit, and FSDP2 with its collectives held gives FSDP2's own
parameters, while the link logs every bucket and every all-gather and reduce-scatter."""

import json
import os
import sys
import threading

import pytest

from fusionopt.integrations import EmulatedLink, Hold
from fusionopt.cost import AlphaBeta

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with the gloo backend is not available", allow_module_level=True)

from fusionopt.integrations import free_port, join_gloo, leave_rank  # noqa: E402


class FakeClock:
    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now


def test_fifo_channel_by_hand():
    # c(S) = 1 ms + 1 us/byte. Posted at 0: 1000 B hold [0, 2 ms). Posted at 1 ms: 2000 B wait
    # for the channel, [2, 5 ms). Posted at 10 ms, the channel idle: [10, 11.5 ms).
    clock = FakeClock()
    link = EmulatedLink(AlphaBeta(1e-3, 1e-6), clock=clock)
    assert link.reserve(1000) == pytest.approx(2e-3)
    clock.now = 1e-3
    assert link.reserve(2000) == pytest.approx(5e-3)
    clock.now = 10e-3
    assert link.reserve(500) == pytest.approx(11.5e-3)
    assert [h.nbytes for h in link.log] == [1000, 2000, 500]
    assert [(round(h.start * 1e3, 9), round(h.end * 1e3, 9)) for h in link.log] == [(0, 2), (2, 5), (10, 11.5)]
    assert isinstance(link.log[0], Hold)
    # A zero-byte message costs nothing: c(0) = 0, it leaves when posted or the channel frees.
    assert link.reserve(0) == pytest.approx(11.5e-3)
    link.reset()
    assert link.log == []
    clock.now = 3e-3                            # after reset the channel is free at once
    assert link.reserve(1000) == pytest.approx(5e-3)


def test_threads_share_one_channel():
    # 4 threads post 50 messages each at the same instant: the channel carries them one after
    # another, back to back, the last leaving at the sum of their costs.
    link = EmulatedLink(AlphaBeta(1e-3, 0.0), clock=FakeClock())
    threads = [threading.Thread(target=lambda: [link.reserve(8) for _ in range(50)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    holds = sorted(link.log, key=lambda h: h.start)
    assert len(holds) == 200
    assert holds[-1].end == pytest.approx(0.2)
    assert all(b.start == a.end for a, b in zip(holds, holds[1:]))


def test_wait_until_reaches_the_time():
    link = EmulatedLink(AlphaBeta(0.0, 0.0))
    target = link.clock() + 0.02
    link.wait_until(target)
    assert link.clock() >= target
    link.wait_until(target - 1.0)                 # passed: returns at once


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="cost must be a cost model"):
        EmulatedLink(3.0)
    link = EmulatedLink(lambda nbytes: float("nan"))
    with pytest.raises(ValueError, match="cost of 8 bytes is nan"):
        link.reserve(8)
    with pytest.raises(ValueError, match="nbytes must be a whole number"):
        EmulatedLink(AlphaBeta(0, 0)).reserve(-1)


# --------------------------------------------------------------------------- real jobs
ALPHA = 5e-3       # 5 ms a message: far above a loopback collective of these sizes


def _mlp():
    nn = torch.nn
    return nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 96), nn.ReLU(), nn.Linear(96, 10))


def _ddp_part(rank, report):
    from torch.nn.parallel import DistributedDataParallel as DDP

    from fusionopt.integrations import ddp_comm_hook

    torch.manual_seed(0)
    plain = _mlp()
    torch.manual_seed(0)
    held = _mlp()
    link = EmulatedLink(AlphaBeta(ALPHA, 0.0))
    options = {"bucket_cap_mb": 0.02}             # 20,971 B: several buckets for this model
    reference, emulated = DDP(plain, **options), DDP(held, **options)
    emulated.register_comm_hook(None, ddp_comm_hook(link))
    opt_a = torch.optim.SGD(plain.parameters(), lr=0.1, momentum=0.9)
    opt_b = torch.optim.SGD(held.parameters(), lr=0.1, momentum=0.9)
    same_grads, returned_after = [], []
    for step in range(3):
        x = torch.randn(32, 64, generator=torch.Generator().manual_seed(10 * step + rank))
        reference(x).pow(2).mean().backward()
        link.reset()
        emulated(x).pow(2).mean().backward()
        returned_after.append(link.clock() >= max(h.end for h in link.log))
        same_grads.append(all(torch.equal(a.grad, b.grad) for a, b in zip(plain.parameters(), held.parameters())))
        opt_a.step(), opt_b.step(), opt_a.zero_grad(), opt_b.zero_grad()
    report["ddp"] = {
        "same_grads": same_grads, "returned_after": returned_after,
        "same_params": all(torch.equal(a, b) for a, b in zip(plain.parameters(), held.parameters())),
        "log": [list(h) for h in link.log],
        "param_bytes": [p.numel() * p.element_size() for p in held.parameters()],
    }


def _fsdp_part(rank, report):
    from torch.distributed.fsdp import fully_shard

    from fusionopt.integrations import emulate_fsdp2, tiny_transformer

    def build():
        torch.manual_seed(0)
        model = tiny_transformer()
        for block in model.layers:
            fully_shard(block)
        fully_shard(model)
        return model

    plain, held = build(), build()
    link = EmulatedLink(AlphaBeta(ALPHA, 0.0))
    heard = []
    report["installed"] = emulate_fsdp2(held, link, record=lambda *call: heard.append(call))
    try:
        emulate_fsdp2(held, link)
    except ValueError as exc:
        report["twice"] = str(exc)
    try:
        emulate_fsdp2(_mlp(), link)
    except ValueError as exc:
        report["no fsdp"] = str(exc)
    opt_a = torch.optim.SGD(plain.parameters(), lr=0.1, momentum=0.9)
    opt_b = torch.optim.SGD(held.parameters(), lr=0.1, momentum=0.9)
    per_step = []
    for step in range(3):
        tokens = torch.randint(0, 32, (64,), generator=torch.Generator().manual_seed(10 * step + rank))
        for model, opt in ((plain, opt_a), (held, opt_b)):
            opt.zero_grad()
            model(tokens).sum().backward()
            opt.step()
        per_step.append(len(link.log))
    same = all(torch.equal(a.to_local(), b.to_local()) for a, b in zip(plain.parameters(), held.parameters()))
    # An explicit asynchronous unshard: its work waits for the link too.
    before = len(link.log)
    heard_before = len(heard)
    handle = held.layers[0].unshard(async_op=True)
    recorded_before_wait = len(heard) - heard_before
    handle.wait()
    waited = link.clock() >= link.log[-1].end
    held.layers[0].reshard()
    report["heard"] = {"kinds_bytes": [[kind, nbytes] for kind, nbytes, _, _ in heard[:heard_before]],
                       "held_through": all(end >= hold.end for (_, _, _, end), hold in zip(heard, link.log)),
                       "before_wait": recorded_before_wait, "async": list(heard[-1][:2])}
    report["fsdp2"] = {"same_params": same, "per_step": per_step, "log": [list(h) for h in link.log[:before]],
                       "async": {"messages": len(link.log) - before, "nbytes": link.log[-1].nbytes,
                                 "waited": waited}}


def _rank(rank, port, out):
    join_gloo(rank, 2, port, 1)
    report = {}
    try:
        _ddp_part(rank, report)
        _fsdp_part(rank, report)
    except BaseException as exc:           # the parent reports it
        report["error"] = f"{type(exc).__name__}: {exc}"
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.barrier()
    leave_rank()


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("link")
    mp.spawn(_rank, args=(free_port(), str(out)), nprocs=2, join=True)
    documents = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [d.get("error") for d in documents] == [None, None]
    return documents


def test_ddp_hook_keeps_ddps_gradients_bit_for_bit(reports):
    for report in reports:
        ddp = report["ddp"]
        assert ddp["same_grads"] == [True, True, True]
        assert ddp["same_params"] is True
        assert ddp["returned_after"] == [True, True, True]     # backward returned after the link's last hold


def test_ddp_hook_posts_every_bucket_on_the_link(reports):
    # The last step's buckets (the link is reset before each backward), by hand: a cap of
    # 0.02 MiB = 20,971 B over the gradients in reverse order, 40 + 3,840 + 384 + 36,864 B
    # (the bucket reaches the cap), then 384 + 24,576 B; fusionopt's DDP model builds the same.
    # Each holds the channel 5 ms, one after the other: the second enters when the first leaves,
    # or when it is posted if a loaded host posts it later.
    from fusionopt.model import Profile
    from fusionopt.solvers.baselines import ddp_buckets

    sizes = [4 * 64 * 96, 4 * 96, 4 * 96 * 96, 4 * 96, 4 * 96 * 10, 4 * 10]
    profile = Profile.from_arrays(sizes, [1e-3] * 6, [1e-3] * 6)
    modelled = [sum(sizes[i] for i in bucket) for bucket in ddp_buckets(profile, bucket_cap_mb=0.02)]
    assert modelled == [41128, 24960]
    for report in reports:
        ddp = report["ddp"]
        holds = [Hold(*h) for h in ddp["log"]]
        assert ddp["param_bytes"] == sizes
        assert [h.nbytes for h in holds] == modelled
        assert holds[0].posted <= holds[1].posted
        assert holds[1].start == pytest.approx(max(holds[0].end, holds[1].posted))
        assert all(h.end - h.start == pytest.approx(ALPHA) for h in holds)


# The tiny transformer's units on 2 ranks, float32 bytes (as tests/integrations/test_fsdp2_gloo.py
# works them out): the root (embedding, norm, head) and three blocks.
ROOT, L0, L1, L2 = 4 * (512 + 32 + 544), 4 * (2 * 32 * 16 + 32 + 16), 4 * (2 * 48 * 16 + 48 + 16), \
    4 * (2 * 64 * 16 + 64 + 16)
STEP = [ROOT, L0, L1, L2, L2, L1, L2, L0, L1, L0, ROOT]     # AG x6, then RS L2, AG L0, RS L1, RS L0, RS root


def test_fsdp2_emulated_keeps_fsdp2s_parameters(reports):
    for report in reports:
        assert report["installed"] == 4
        assert report["fsdp2"]["same_params"] is True
        assert "already holds its collectives" in report["twice"]
        assert "holds no FSDP2 module" in report["no fsdp"]


def test_fsdp2_collectives_are_held_on_the_link(reports):
    for report in reports:
        fsdp = report["fsdp2"]
        assert fsdp["per_step"] == [11, 22, 33]
        holds = [Hold(*h) for h in fsdp["log"]]
        assert [h.nbytes for h in holds] == STEP * 3
        for a, b in zip(holds, holds[1:]):
            assert b.start >= a.end - 1e-12 and b.end - b.start == pytest.approx(ALPHA)
        assert fsdp["async"] == {"messages": 1, "nbytes": L0, "waited": True}
        # record= hears every collective once, in order, with its kind and bytes, each ending
        # once its hold has; the asynchronous one only when it is waited for.
        heard = report["heard"]
        assert [nbytes for _, nbytes in heard["kinds_bytes"]] == STEP * 3
        assert {kind for kind, _ in heard["kinds_bytes"]} == {"all_gather", "reduce_scatter"}
        assert heard["held_through"] is True
        assert heard["before_wait"] == 0 and heard["async"] == ["all_gather", L0]


def test_the_ddp_hook_refuses_an_encoding_it_cannot_send():
    from fusionopt.integrations import ddp_comm_hook
    from fusionopt.cost import Encoding

    link = EmulatedLink(AlphaBeta(1e-3, 0.0))
    with pytest.raises(ValueError, match=r"^encoding 'int8': the emulated DDP hook sends fp32, fp16 or bf16$"):
        ddp_comm_hook(link, Encoding("int8", wire_ratio=0.25, unit_roundoff=0.1))
    with pytest.raises(ValueError, match=r"^unknown encoding 'fp8'"):
        ddp_comm_hook(link, "fp8")


# --------------------------------------------------------------------------- CUDA, refused here in one line
class _CudaTensor:
    """What the host-holding hooks look at of a CUDA gradient: its device."""

    class device:
        type = "cuda"

    def element_size(self):
        return 4


class _Bucket:
    def buffer(self):
        return _CudaTensor()


def test_a_device_hold_needs_a_cuda_device_and_cupy(monkeypatch):
    link = EmulatedLink(AlphaBeta(1e-3, 0.0))
    with pytest.raises(ValueError, match=r"^a hold on a device needs a CUDA device, got cpu$"):
        link.device_stream("cpu")
    monkeypatch.setitem(sys.modules, "cupy", None)          # as where CuPy is not installed
    with pytest.raises(ValueError, match=r"^holding a collective on a CUDA device needs CuPy \(pip install cupy"):
        link.device_stream("cuda:0")
    with pytest.raises(ValueError, match=r"^holding a collective on a CUDA device needs CuPy"):
        link.hold_on_device(8, "cuda:0")
    assert link.log == []                                   # nothing was posted


def test_hooks_that_hold_on_the_host_refuse_cuda_gradients():
    import torch.distributed as dist

    from fusionopt.integrations import HeldGroup, padded_comm_hook

    # No process group: a hook that reached a collective would fail with torch's own message, not this one.
    assert not dist.is_initialized()
    link = EmulatedLink(AlphaBeta(1e-3, 0.0))
    said = (r"holds the emulated link on the host, faithful on CPU only: on CUDA, hold with ddp_comm_hook or "
            r"emulate_fsdp2")
    with pytest.raises(ValueError, match=r"^padded_comm_hook " + said):
        padded_comm_hook(64, link=link)(None, _Bucket())
    with pytest.raises(ValueError, match=r"^powersgd_comm_hook " + said):
        HeldGroup.allreduce(type("G", (), {"link": link})(), [_CudaTensor()], None)
    assert link.log == []                                   # refused before the link took the message


def test_fsdp2_on_one_rank_is_refused_it_would_hold_nothing():
    from torch.distributed.fsdp import fully_shard

    from dist_helpers import one_rank_group
    from fusionopt.integrations import emulate_fsdp2

    with one_rank_group():
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
        fully_shard(model[0])
        fully_shard(model)
        link = EmulatedLink(AlphaBeta(1e-3, 0.0))
        with pytest.raises(ValueError, match=r"^FSDP2 module '\(root\)' is sharded over one rank, where FSDP2 "
                                             r"\(torch 2\.13\) sends no all-gather and no reduce-scatter: the link "
                                             r"would hold nothing"):
            emulate_fsdp2(model, link)
        # The premise, on the installed torch: a custom collective installed as emulate_fsdp2 would
        # install it is never called on one rank.
        calls = []

        class Counted:
            def __init__(self, inner, kind):
                self.inner, self.kind = inner, kind

            def allocate(self, size, *, dtype, device):
                return self.inner.allocate(size, dtype=dtype, device=device)

            def __call__(self, **arguments):
                calls.append(self.kind)
                return self.inner(**arguments)

        for module in (model, model[0]):
            for group in module._get_fsdp_state()._fsdp_param_groups:
                module.set_custom_all_gather(Counted(group._all_gather_comm, "all_gather"))
                module.set_custom_reduce_scatter(Counted(group._reduce_scatter_comm, "reduce_scatter"))
                assert isinstance(group._all_gather_comm, Counted) and isinstance(group._reduce_scatter_comm, Counted)
        for _ in range(2):
            model(torch.randn(4, 8)).sum().backward()
        assert calls == [] and link.log == []
