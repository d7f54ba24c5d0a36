"""torch's ``fp16_compress_hook`` and ``bf16_compress_hook`` (torch 2.13) on real DDP, 2 gloo
ranks: what each puts on the wire is what ``fusionopt.cost.FP16`` and ``BF16`` say
(half of every bucket's fp32 bytes, in their format), and the averaged gradients stay within
the encoding's ``error_bound(2)`` (plus its ``error_floor(2)``) of the exact mean. The
emulated link's hook gives each hook's gradients bit for bit, holding each bucket for the
cost of its cast bytes."""


import re

import numpy as np
import pytest

from fusionopt.cost import ENCODINGS

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with the gloo backend is not available", allow_module_level=True)

from dist_helpers import gloo_rank, spawn_gloo  # noqa: E402


def _mlp():
    nn = torch.nn
    return nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 96), nn.ReLU(), nn.Linear(96, 10))


def _run(rank, name, report):
    """Train three copies three steps: alone (the exact mean's inputs), with torch's ``name``
    compress hook, and with the emulated link's; record what the hooks sent and how far off.
    torch refuses its own bf16 hook without CUDA and NCCL: then only the emulated one runs,
    and it stands in for torch's (what was sent, and the error, are the emulated hook's)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    from fusionopt.integrations import EmulatedLink, ddp_comm_hook
    from fusionopt.cost import AlphaBeta

    encoding = ENCODINGS[name]
    sent, sink = dist.all_reduce, []

    def logged(tensor, *args, **kwargs):          # what a hook hands the process group
        sink.append([str(tensor.dtype).replace("torch.", ""), tensor.numel() * tensor.element_size()])
        return sent(tensor, *args, **kwargs)

    dist.all_reduce = logged
    try:
        torch.manual_seed(0)
        local, hooked, held = _mlp(), _mlp(), _mlp()
        hooked.load_state_dict(local.state_dict())
        held.load_state_dict(local.state_dict())
        ddp = DDP(hooked, bucket_cap_mb=0.02)
        try:
            ddp.register_comm_hook(None, getattr(default_hooks, f"{name}_compress_hook"))
        except TypeError as exc:
            report["refused"] = str(exc)
            ddp, hooked = None, held
        link = EmulatedLink(AlphaBeta(2e-3, 1e-8))
        emulated = DDP(held, bucket_cap_mb=0.02)
        emulated.register_comm_hook(None, ddp_comm_hook(link, name))
        for step in range(3):
            x = torch.randn(32, 64, generator=torch.Generator().manual_seed(10 * step + rank))
            local.zero_grad(), emulated.zero_grad()
            local(x).pow(2).mean().backward()
            if ddp is not None:
                ddp.zero_grad()
                sink = []
                ddp(x).pow(2).mean().backward()
            report["wire"].append(sink)
            sink = []
            link.reset()
            emulated(x).pow(2).mean().backward()
            if ddp is None:
                report["wire"][-1] = sink
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
                ratio = error / (encoding.error_bound(2) * scale + encoding.error_floor(2))
                report["worst"].append(float(ratio.max()))
        report["param_bytes"] = sum(p.numel() * p.element_size() for p in hooked.parameters())
    finally:
        dist.all_reduce = sent


def _mixed(rank, report):
    """Three copies three steps at 0.02 MB buckets: the emulated hook with fp16 on bucket 0 and
    fp32 on bucket 1, and each alone; what went on the wire, and whose gradients each got."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from fusionopt.integrations import EmulatedLink, ddp_comm_hook
    from fusionopt.cost import AlphaBeta

    sent, sink = dist.all_reduce, []

    def logged(tensor, *args, **kwargs):
        sink.append([str(tensor.dtype).replace("torch.", ""), tensor.numel() * tensor.element_size()])
        return sent(tensor, *args, **kwargs)

    from fusionopt.integrations import wire_comm_hook

    torch.manual_seed(0)
    models = [_mlp() for _ in range(5)]
    for model in models[1:]:
        model.load_state_dict(models[0].state_dict())
    link = EmulatedLink(AlphaBeta(2e-3, 1e-8))
    wrapped = [DDP(model, bucket_cap_mb=0.02) for model in models]
    for ddp, encoding in zip(wrapped, (["fp16", "fp32"], "fp16", None)):
        ddp.register_comm_hook(None, ddp_comm_hook(link, encoding))
    # The model's rule (fusionopt advise's wire_comm_hook): fp16 from 1 byte on, but the last
    # layer's bias kept exact; on the link, and with torch's own hooks.
    wired = [wire_comm_hook([(0, "fp32"), (1, "fp16")], exact=[models[k][4].bias], link=held)
             for k, held in ((3, link), (4, None))]
    for ddp, hook in zip(wrapped[3:], wired):
        ddp.register_comm_hook(None, hook)
    dist.all_reduce = logged
    try:
        for step in range(3):
            x = torch.randn(32, 64, generator=torch.Generator().manual_seed(10 * step + rank))
            for k, ddp in enumerate(wrapped):
                ddp.zero_grad()
                sink.clear()
                ddp(x).pow(2).mean().backward()
                if k == 0:
                    report["wire"].append(list(sink))
            for key, mine in (("whose", models[0]), ("whose_wired", models[3]), ("whose_torch", models[4])):
                report[key].append([("fp16" if torch.equal(a.grad, b.grad) else "")
                                    + ("fp32" if torch.equal(a.grad, c.grad) else "")
                                    for a, b, c in zip(mine.parameters(), models[1].parameters(),
                                                       models[2].parameters())])
        report["sent"] = [hook.sent for hook in wired]
        report["param_bytes"] = sum(p.numel() * p.element_size() for p in models[0].parameters())
    finally:
        dist.all_reduce = sent


def _rank(rank, port, folder):
    with gloo_rank(rank, port, folder, report_errors=True) as reports:
        for name in ("fp16", "bf16"):
            reports[name] = {"wire": [], "worst": [], "same": [], "held": []}
            _run(rank, name, reports[name])
        reports["mixed"] = {"wire": [], "whose": [], "whose_wired": [], "whose_torch": []}
        _mixed(rank, reports["mixed"])


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    documents = spawn_gloo(_rank, tmp_path_factory.mktemp("wire"))
    assert [d.get("error") for d in documents] == [None, None]
    return documents


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_the_hook_sends_every_bucket_in_its_format_at_half_its_bytes(reports, name):
    for report in (r[name] for r in reports):
        # DDP's first step has one bucket (its first bucket takes 1 MiB), later steps the two it
        # rebuilt at 0.02 MB; every step sends each gradient once, in fp16.
        assert [len(step) for step in report["wire"]] == [1, 2, 2]
        for step in report["wire"]:
            assert {dtype for dtype, _ in step} == {"float16" if name == "fp16" else "bfloat16"}
            assert sum(nbytes for _, nbytes in step) == ENCODINGS[name].wire_ratio * report["param_bytes"]


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_the_emulated_links_hook_is_torchs_held_for_the_cast_bytes(reports, name):
    for report in (r[name] for r in reports):
        # torch 2.13 runs its fp16 hook on gloo and refuses its bf16 one without CUDA and NCCL.
        assert report.get("refused", "").startswith("BF16 all reduce communication hook required CUDA 11+ and "
                                                    "NCCL 2.10+") == (name == "bf16")
        if name == "fp16":                  # bf16: torch's hook did not run, nothing to compare
            assert report["same"] == [True, True, True]
        for wire, held in zip(report["wire"], report["held"]):
            # The link carried each bucket's fp16 bytes, each for 2 ms + 10 ns/B of them.
            assert [nbytes for nbytes, _ in held] == [nbytes for _, nbytes in wire]
            assert [seconds for _, seconds in held] == pytest.approx([2e-3 + 1e-8 * n for _, n in wire], rel=1e-6)


@pytest.mark.parametrize("name", ["fp16", "bf16"])
def test_the_hooks_average_is_within_the_error_bound(reports, name):
    for report in (r[name] for r in reports):
        assert len(report["worst"]) == 3 * 6 and 0 < max(report["worst"]) <= 1.0


def test_a_hook_per_bucket_sends_each_bucket_as_its_encoding_says(reports):
    for report in (r["mixed"] for r in reports):
        # Step 1 has DDP's one first bucket (index 0: fp16); later steps its two rebuilt ones,
        # bucket 0 in fp16 and bucket 1 in fp32: every gradient sent once, in its bucket's format.
        wire = report["wire"]
        assert [[dtype for dtype, _ in step] for step in wire] == [["float16"], ["float16", "float32"],
                                                                   ["float16", "float32"]]
        for step in wire[1:]:
            half, whole = step[0][1], step[1][1]
            assert 2 * half + whole == report["param_bytes"]
        # Each parameter's gradient is bit for bit the fp16 hook's or the plain hook's, as its
        # bucket says: all fp16 in the first step, both kinds after it.
        first, *later = report["whose"]
        assert set(first) <= {"fp16", "fp16fp32"}
        for step in later:
            assert set(step) == {"fp16", "fp32"}


def test_the_wire_hook_sends_a_bucket_with_an_exact_tensor_in_fp32(reports):
    for report in (r["mixed"] for r in reports):
        # Step 1: DDP's one first bucket holds the bias kept exact: fp32. Later steps: the
        # rebuilt bucket 0 holds it (fp32), bucket 1 goes in fp16 (the reverse of the list
        # [fp16, fp32] above), on the link and with torch's own hooks alike.
        for sent in report["sent"]:
            assert [name for name, _ in sent] == ["fp32", "fp32", "fp16", "fp32", "fp16"]
            assert sum(nbytes for _, nbytes in sent[:1]) == report["param_bytes"]
        first, *later = report["whose"]
        for key in ("whose_wired", "whose_torch"):
            assert set(report[key][0]) <= {"fp32", "fp16fp32"}
            for mixed, wired in zip(later, report[key][1:]):
                assert wired == [{"fp16": "fp32", "fp32": "fp16"}.get(w, w) for w in mixed]


def test_the_wire_hooks_choice_is_checked_in_one_line():
    from fusionopt.integrations import wire_comm_hook

    for choice, message in (([(1, "fp16")], "choice must start at 0 bytes"),
                            ([(0, "fp32"), (0, "fp16")], "choice's sizes must increase, got 0 then 0"),
                            ([(0, "int8")], "choice: encoding 'int8': the hook sends fp32, fp16, bf16"),
                            ([0], "choice must list (from bytes, encoding) pairs")):
        with pytest.raises(ValueError, match="^" + re.escape(message)):
            wire_comm_hook(choice)


def test_a_hook_per_bucket_refuses_a_bucket_past_its_list():
    from fusionopt.cost import AlphaBeta
    from fusionopt.integrations import EmulatedLink, ddp_comm_hook

    link = EmulatedLink(AlphaBeta(1e-3, 1e-9))
    hook = ddp_comm_hook(link, ["fp16", "fp32"])

    class Bucket:
        def index(self):
            return 2

    with pytest.raises(ValueError, match=r"^bucket 2 has no encoding: the list names 2 bucket\(s\)$"):
        hook(None, Bucket())
    with pytest.raises(ValueError, match="^encoding: give one encoding per bucket, not an empty list$"):
        ddp_comm_hook(link, [])
