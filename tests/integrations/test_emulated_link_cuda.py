"""The emulated link on one GPU (NCCL, one rank): DDP's buckets are held on a CUDA stream of the
link's, so the host and the compute stream run on while each bucket waits for its ``c(S)``,
the reducer waits for the hold, and the gradients are those of DDP without the link. (FSDP2
sends no collective on one rank, and NCCL takes one rank per device: its CUDA path needs two
GPUs.) Skipped without a GPU, CuPy or NCCL."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cupy", reason="the gpu extra (CuPy) is not installed")
if not torch.cuda.is_available():
    pytest.skip("no GPU", allow_module_level=True)

import torch.distributed as dist  # noqa: E402

from fusionopt.cost import AlphaBeta  # noqa: E402
from fusionopt.integrations import EmulatedLink, ddp_comm_hook, free_port  # noqa: E402

HOLD = 0.02                  # 20 ms a bucket: far above a one-rank collective and the model's kernels


@pytest.fixture(scope="module")
def nccl_rank():
    if not dist.is_nccl_available():
        pytest.skip("this torch has no NCCL")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    try:
        yield torch.device("cuda", 0)
    finally:
        dist.destroy_process_group()


def _mlp(device):
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                         nn.Linear(512, 10)).to(device)


def _ddp_step(model, x):
    """The host's seconds to queue a step's forward and backward, and the compute stream's
    seconds to run them (its events: after the backward, once DDP's reducer has waited)."""
    model.zero_grad(set_to_none=True)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    started = time.perf_counter()
    begin.record()
    model(x).sum().backward()
    end.record()
    host = time.perf_counter() - started
    torch.cuda.synchronize()
    return host, begin.elapsed_time(end) / 1e3


@pytest.mark.parametrize("encoding", [None, "fp16"])
def test_ddp_buckets_wait_on_the_device_and_keep_the_gradients(nccl_rank, encoding):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    x = torch.randn(32, 256, device=nccl_rank, generator=torch.Generator(nccl_rank).manual_seed(1))
    # Buckets of at most 0.5 MB (the first too, bucket_cap_mb being given): the 1 MiB and 0.5 MiB
    # weights travel apart.
    plain = DDP(_mlp(nccl_rank), bucket_cap_mb=0.5)
    if encoding == "fp16":
        plain.register_comm_hook(None, default_hooks.fp16_compress_hook)
    link = EmulatedLink(AlphaBeta(HOLD, 0.0))
    held = DDP(_mlp(nccl_rank), bucket_cap_mb=0.5)
    held.register_comm_hook(None, ddp_comm_hook(link, encoding))
    for _ in range(3):                               # from the second step on, the buckets are the rebuilt ones
        _ddp_step(plain, x)
        link.reset()
        host, compute = _ddp_step(held, x)
    messages = len(link.log)
    assert messages >= 2
    # The holds run one at a time on the link's stream, and the compute stream waits for them
    # (DDP's reducer waits for each bucket's future): it lasts them all; the host did not wait.
    assert compute >= messages * HOLD * (1 - 1e-3)
    assert host < HOLD
    for a, b in zip(plain.parameters(), held.parameters()):
        assert torch.equal(a.grad, b.grad)


def test_ddp_job_times_its_buckets_with_cuda_events(nccl_rank):
    from fusionopt.integrations import DDPJob
    from fusionopt.model import Profile

    model = _mlp(nccl_rank)
    names, sizes = zip(*[(n, p.numel() * p.element_size()) for n, p in model.named_parameters()])
    profile = Profile.from_arrays(sizes=list(sizes), forward=[1e-4] * len(sizes), backward=[1e-4] * len(sizes),
                                  names=list(names))
    job = DDPJob(model, profile, link=EmulatedLink(AlphaBeta(HOLD, 0.0)), bucket_cap_mb=0.5)
    x = torch.randn(32, 256, device=nccl_rank, generator=torch.Generator(nccl_rank).manual_seed(3))
    assert job.completed_times() is None                    # no step yet
    for _ in range(3):
        job(x).sum().backward()
    times = job.message_times()                             # waits for the last step's holds
    record = job.completed_times()
    assert record[0] == 3 and record[1] == job.plan and record[2] == times
    assert len(times) == job.plan.num_messages >= 2
    for before, after in zip(times, times[1:]):               # one channel, first in first out
        assert after["start"] >= before["end"] - 1e-4
    for message in times:                                   # each held its c(S), after it was ready
        assert HOLD * (1 - 1e-3) <= message["end"] - message["start"] < HOLD + 5e-3
        assert message["ready"] <= message["start"] + 1e-4
    assert times[0]["ready"] == 0.0                         # DDP hands bucket 0 over first


def test_the_planner_rewraps_ddp_on_the_gpu_without_changing_its_parameters(nccl_rank):
    from torch.nn.parallel import DistributedDataParallel as DDP

    from fusionopt.integrations import DDPJob, OnlinePlanner
    from fusionopt.model import Profile

    reference, mine = DDP(_mlp(nccl_rank)), _mlp(nccl_rank)
    names, sizes = zip(*[(n, p.numel() * p.element_size()) for n, p in mine.named_parameters()])
    profile = Profile.from_arrays(sizes=list(sizes), forward=[1e-4] * len(sizes), backward=[1e-4] * len(sizes),
                                  names=list(names))
    tiny = [size / 2**20 for size in reversed(sizes)]        # a bucket per tensor, 20 ms each on the link
    job = DDPJob(mine, profile, link=EmulatedLink(AlphaBeta(HOLD, 0.0)), bucket_cap_mb_list=tiny)
    planner = OnlinePlanner(job, every=3, window=3)
    optimizers = [torch.optim.SGD(m.parameters(), lr=1e-2) for m in (reference, mine)]
    buckets = []
    for step in range(7):
        x = torch.randn(32, 256, device=nccl_rank, generator=torch.Generator(nccl_rank).manual_seed(10 + step))
        for model, optimizer in zip((reference, job), optimizers):
            model(x).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        torch.cuda.synchronize()                            # each step's holds ended: the planner sees every step
        planner.after_step()
        buckets.append(job.plan.num_messages)
    assert buckets[1:3] == [len(sizes)] * 2, buckets           # a bucket per tensor until the first re-planning
    assert job.switches >= 1 and buckets[-1] < len(sizes), buckets
    for a, b in zip(reference.parameters(), mine.parameters()):
        assert torch.allclose(a, b, rtol=0, atol=1e-6)
