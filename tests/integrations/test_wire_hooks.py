"""torch's ``fp16_compress_hook`` (torch 2.13) on real DDP, 2 gloo ranks: what it puts on the
wire is what ``fusionopt.model.encoding.FP16`` says (fp16, half of every bucket's fp32 bytes),
and its averaged gradients stay within ``FP16.error_bound(2)`` of the exact mean. The
emulated link's fp16 hook gives that hook's gradients bit for bit, holding each bucket for
the cost of its fp16 bytes."""

import json
import os

import numpy as np
import pytest

from fusionopt.model.encoding import FP16

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with the gloo backend is not available", allow_module_level=True)

from fusionopt.integrations.ddp_record import free_port, join_gloo  # noqa: E402
from fusionopt.integrations.rank_processes import leave_rank  # noqa: E402


def _mlp():
    nn = torch.nn
    return nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 96), nn.ReLU(), nn.Linear(96, 10))


def _rank(rank, port, out):
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    join_gloo(rank, 2, port, 1)
    from fusionopt.integrations.emulated_link import EmulatedLink, ddp_comm_hook
    from fusionopt.model.cost import AlphaBeta

    report = {"wire": [], "worst": [], "same": [], "held": []}   # per step: the wire; per tensor: error / bound
    try:
        sent, sink = dist.all_reduce, []

        def logged(tensor, *args, **kwargs):          # what a hook hands the process group
            sink.append([str(tensor.dtype).replace("torch.", ""), tensor.numel() * tensor.element_size()])
            return sent(tensor, *args, **kwargs)

        dist.all_reduce = logged
        torch.manual_seed(0)
        local, hooked, held = _mlp(), _mlp(), _mlp()
        hooked.load_state_dict(local.state_dict())
        held.load_state_dict(local.state_dict())
        ddp = DDP(hooked, bucket_cap_mb=0.02)
        ddp.register_comm_hook(None, fp16_compress_hook)
        link = EmulatedLink(AlphaBeta(2e-3, 1e-8))
        emulated = DDP(held, bucket_cap_mb=0.02)
        emulated.register_comm_hook(None, ddp_comm_hook(link, "fp16"))
        for step in range(3):
            x = torch.randn(32, 64, generator=torch.Generator().manual_seed(10 * step + rank))
            local.zero_grad(), ddp.zero_grad(), emulated.zero_grad()
            local(x).pow(2).mean().backward()
            sink = []
            ddp(x).pow(2).mean().backward()
            report["wire"].append(sink)
            sink = []
            link.reset()
            emulated(x).pow(2).mean().backward()
            report["same"].append(all(torch.equal(a.grad, b.grad) for a, b in zip(hooked.parameters(),
                                                                                   held.parameters())))
            report["held"].append([[h.nbytes, h.end - h.start] for h in link.log])
            for mine, averaged in zip(local.parameters(), hooked.parameters()):
                everyone = [torch.empty_like(mine.grad) for _ in range(2)]
                dist.all_gather(everyone, mine.grad)
                stacked = np.stack([g.double().numpy() for g in everyone])
                exact, scale = stacked.mean(axis=0), np.abs(stacked).mean(axis=0)
                error = np.abs(averaged.grad.double().numpy() - exact)
                # The error over its bound, elementwise (1 where it meets it exactly).
                ratio = error / (FP16.error_bound(2) * scale + FP16.error_floor(2))
                report["worst"].append(float(ratio.max()))
        dist.all_reduce = sent
        report["param_bytes"] = sum(p.numel() * p.element_size() for p in hooked.parameters())
    except BaseException as exc:           # the parent reports it
        report["error"] = f"{type(exc).__name__}: {exc}"
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)
    dist.barrier()
    leave_rank()


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    import torch.multiprocessing as mp

    out = tmp_path_factory.mktemp("wire")
    mp.spawn(_rank, args=(free_port(), str(out)), nprocs=2, join=True)
    documents = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [d.get("error") for d in documents] == [None, None]
    return documents


def test_the_hook_sends_every_bucket_in_fp16_at_half_its_bytes(reports):
    for report in reports:
        # DDP's first step has one bucket (its first bucket takes 1 MiB), later steps the two it
        # rebuilt at 0.02 MB; every step sends each gradient once, in fp16.
        assert [len(step) for step in report["wire"]] == [1, 2, 2]
        for step in report["wire"]:
            assert {dtype for dtype, _ in step} == {"float16"}
            assert sum(nbytes for _, nbytes in step) == FP16.wire_ratio * report["param_bytes"]


def test_the_emulated_links_fp16_hook_is_torchs_held_for_the_fp16_bytes(reports):
    for report in reports:
        assert report["same"] == [True, True, True]
        for wire, held in zip(report["wire"], report["held"]):
            # The link carried each bucket's fp16 bytes, each for 2 ms + 10 ns/B of them.
            assert [nbytes for nbytes, _ in held] == [nbytes for _, nbytes in wire]
            assert [seconds for _, seconds in held] == pytest.approx([2e-3 + 1e-8 * n for _, n in wire], rel=1e-6)


def test_the_hooks_average_is_within_the_error_bound(reports):
    for report in reports:
        assert len(report["worst"]) == 3 * 6 and 0 < max(report["worst"]) <= 1.0
