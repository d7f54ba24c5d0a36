"""All-reduce costs from profiler traces (fusionopt.integrations._collective_trace)."""

import json

import numpy as np
import pytest

from fusionopt.integrations import collective_samples, fit_collective_cost


def allreduce(ts, dur, elements, backend="nccl"):
    return {"ph": "X", "cat": "user_annotation", "name": f"{backend}:all_reduce", "ts": ts, "dur": dur,
            "args": {"Input Dims": [[elements]], "Input type": ["float"]}}


def write(folder, rank, events):
    doc = {"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": 2}}
    (folder / f"rank{rank}.json").write_text(json.dumps(doc))


def test_ranks_give_latest_entry_to_latest_exit(tmp_path):
    # Rank 1 enters the 1 MB all-reduce 300 us late: rank 0's 500 us were mostly waiting;
    # the collective itself ran from 300 to 520 us: 220 us. The 4 MB one: 600-1100, both in.
    write(tmp_path, 0, [allreduce(0, 500, 250_000), allreduce(600, 500, 1_000_000)])
    write(tmp_path, 1, [allreduce(300, 220, 250_000), allreduce(600, 500, 1_000_000)])
    sizes, seconds, how = collective_samples(tmp_path)
    assert how == "ranks" and sizes.tolist() == [1e6, 4e6]
    assert (seconds * 1e6).round(6).tolist() == [220.0, 500.0]
    # One rank alone: its durations, waiting included.
    sizes, seconds, how = collective_samples(tmp_path / "rank0.json")
    assert how == "one rank" and (seconds * 1e6).round(6).tolist() == [500.0, 500.0]


def test_fit_keeps_the_fastest_repeat_and_reports_residuals():
    # 1 MB at 120 us (and a slow repeat at 900), 2 MB at 220, 4 MB at 420: 20 us + 100 us/MB.
    fit = fit_collective_cost([1e6, 1e6, 2e6, 4e6], [120e-6, 900e-6, 220e-6, 420e-6])
    assert fit.affine.alpha == pytest.approx(20e-6) and fit.affine.beta == pytest.approx(1e-10)
    assert np.allclose(fit.affine_residuals, 0.0, atol=1e-15)
    assert fit.curve(3e6) == pytest.approx(320e-6)
    with pytest.raises(ValueError, match="give as many sizes as times"):
        fit_collective_cost([1e6], [])


def test_refusals_name_the_fault(tmp_path):
    write(tmp_path, 0, [allreduce(0, 500, 250_000)])
    write(tmp_path, 1, [allreduce(0, 500, 250_000), allreduce(600, 500, 10)])
    with pytest.raises(ValueError, match=r"different numbers of all-reduces \(rank 0: 1, rank 1: 2\)"):
        collective_samples(tmp_path)
    write(tmp_path, 1, [allreduce(0, 500, 999)])
    with pytest.raises(ValueError, match=r"the ranks disagree on the all-reduces of 1000000 bytes \(rank 0: 1, rank 1: 0\)"):
        collective_samples(tmp_path)
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "nccl:all_reduce", "ts": 0, "dur": 1}]}))
    with pytest.raises(ValueError, match="no input shape: record the trace with record_shapes=True"):
        collective_samples(bare)


def _traced_ddp_rank(rank, folder, port):
    # One rank of a 2-process gloo DDP job, three steps traced without a schedule, gzip on.
    import os

    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.5)
    x = torch.randn(16, 256)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 on_trace_ready=tensorboard_trace_handler(folder, worker_name=f"rank{rank}", use_gzip=True)):
        for _ in range(3):
            ddp.zero_grad()
            ddp(x).sum().backward()
    dist.destroy_process_group()


def test_real_ddp_traces_of_two_ranks(tmp_path):
    # The all-reduces two real gloo ranks recorded are DDP's buckets: one bucket of every
    # parameter in the first step, then the rebuilt layout the ddp model predicts, twice.
    torch = pytest.importorskip("torch")
    import torch.multiprocessing as mp

    from fusionopt.integrations import free_port

    from fusionopt.integrations import profile_from_traces
    from fusionopt.solvers.baselines import ddp_buckets

    mp.spawn(_traced_ddp_rank, args=(str(tmp_path), free_port()), nprocs=2, join=True)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10))
    profile = profile_from_traces(tmp_path, model)
    assert sorted(profile.metadata["ranks"]) == ["0", "1"] and profile.metadata["steps"] == 4   # 2 of 3 per rank
    assert profile.B > 0 and profile.F > 0
    layout = [int(profile.sizes[b].sum()) for b in ddp_buckets(profile, bucket_cap_mb=0.5)]
    sizes, seconds, how = collective_samples(tmp_path)
    assert how == "ranks" and (seconds >= 0).all()
    # Steps 2 and 3 may run their two buckets on two gloo threads in either order.
    assert sizes[0] == profile.total_bytes
    assert sorted(sizes[1:3].astype(int).tolist()) == sorted(layout) == sorted(sizes[3:].astype(int).tolist())


def test_two_all_reduces_in_either_order_on_two_threads(tmp_path):
    # Rank 1 ran the 4 MB all-reduce before the 1 MB one: they still pair by size.
    write(tmp_path, 0, [allreduce(0, 100, 250_000), allreduce(50, 400, 1_000_000)])
    write(tmp_path, 1, [allreduce(10, 400, 1_000_000), allreduce(20, 150, 250_000)])
    sizes, seconds, how = collective_samples(tmp_path)
    assert sizes.tolist() == [1e6, 4e6]
    # In flight 20 -> 170 and 50 -> 450, together from 50 to 170, when each has half the link:
    # 30 + 120 / 2 = 90 us and 120 / 2 + 280 = 340 us.
    assert (seconds * 1e6).round(6).tolist() == [90.0, 340.0]
