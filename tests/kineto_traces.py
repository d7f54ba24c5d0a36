"""Hand-made PyTorch profiler traces with known timestamps, shared by the trace tests."""

US = 1e-6
# Forward order; sizes match the shapes in the trace (float32): fc1 64 -> 16, fc2 16 -> 10.
PARAMS = [("fc1.weight", 4096), ("fc1.bias", 64), ("fc2.weight", 640), ("fc2.bias", 40)]
SHAPES = {"fc1.weight": [16, 64], "fc1.bias": [16], "fc2.weight": [10, 16], "fc2.bias": [10]}


def op(name, ts, dur, tid=1, cat="cpu_op", **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur, "args": args}


def seq(n):
    return {"Sequence number": n}


def accumulate(ts, dur, param, tid=1, shapes=True):
    args = {"Input Dims": [SHAPES[param]], "Input type": ["float"]} if shapes else {}
    return [
        op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", ts - 1, dur + 2, tid),
        op("torch::autograd::AccumulateGrad", ts, dur, tid, **args),
    ]


def cpu_step(t0, linear0, linear1, ready_ends, *, modules=True, shapes=True, step=1):
    """One training step of Linear(64, 16) -> ReLU -> Linear(16, 10) -> sum, starting at t0 (us).

    ``linear0``/``linear1``: the modules' durations; ``ready_ends``: when the AccumulateGrad
    of fc2.bias, fc2.weight, fc1.bias, fc1.weight end (the backward starts at t0 + 300).
    """
    s = lambda k: seq(10 * step + k)   # noqa: E731  sequence numbers grow from step to step
    events = [op(f"ProfilerStep#{step}", t0, 1000, cat="user_annotation")]
    if modules:
        events += [
            op("nn.Module: Linear_0", t0 + 10, linear0, cat="python_function"),
            op("nn.Module: ReLU_0", t0 + 120, 20, cat="python_function"),
            op("nn.Module: Linear_1", t0 + 150, linear1, cat="python_function"),
        ]
    events += [
        op("aten::linear", t0 + 12, linear0 - 10, **s(0)), op("aten::t", t0 + 13, 5, **s(0)),
        op("aten::addmm", t0 + 20, linear0 - 20, **s(1)),
        op("aten::relu", t0 + 121, 18, **s(2)),
        op("aten::linear", t0 + 151, linear1 - 2, **s(3)), op("aten::t", t0 + 152, 2, **s(3)),
        op("aten::addmm", t0 + 155, linear1 - 10, **s(4)),
        op("aten::sum", t0 + 210, 10, **s(5)),
        op("autograd::engine::evaluate_function: SumBackward0", t0 + 300, 10, **s(5)),
        op("autograd::engine::evaluate_function: AddmmBackward0", t0 + 312, 30, **s(4)),
        *accumulate(t0 + ready_ends[0] - 5, 5, "fc2.bias", shapes=shapes),
        op("autograd::engine::evaluate_function: TBackward0", t0 + ready_ends[0] + 2, 4, **s(3)),
        *accumulate(t0 + ready_ends[1] - 3, 3, "fc2.weight", shapes=shapes),
        op("autograd::engine::evaluate_function: ReluBackward0", t0 + ready_ends[1] + 2, 8, **s(2)),
        op("autograd::engine::evaluate_function: AddmmBackward0", t0 + ready_ends[1] + 12, 40, **s(1)),
        *accumulate(t0 + ready_ends[2] - 5, 5, "fc1.bias", shapes=shapes),
        op("autograd::engine::evaluate_function: TBackward0", t0 + ready_ends[2] + 2, 3, **s(0)),
        *accumulate(t0 + ready_ends[3] - 4, 4, "fc1.weight", shapes=shapes),
    ]
    return events


def two_step_trace(**options):
    meta = [{"ph": "M", "name": "thread_name", "pid": 7, "tid": 1, "args": {"name": "python"}},
            {"ph": "s", "cat": "fwdbwd", "name": "fwdbwd", "id": 1, "pid": 7, "tid": 1, "ts": 12}]
    events = meta + cpu_step(0, 100, 50, [350, 360, 420, 430], step=1, **options)
    events += cpu_step(1000, 120, 70, [360, 370, 440, 450], step=2, **options)
    return {"schemaVersion": 1, "deviceProperties": [], "traceEvents": events}


def ddp_tail(t0, backward_end, *, allreduce_us=200, copy_delay=0, elements=(1210,)):
    """What DDP adds to a step of :func:`cpu_step`: buckets of ``elements`` launched when the
    backward ends (at ``t0 + backward_end``), reduced on a gloo thread for ``allreduce_us``
    (the first; the others take no time), copied back into ``.grad`` for 20 us
    ``copy_delay`` us later; zero_grad 2 -> 7 us and the optimiser 700 -> 800 us into the step."""
    start = t0 + backward_end
    launches = [op("c10d::allreduce_", start + k, 1, **{"Input Dims": [[[count]], [], []]})
                for k, count in enumerate(elements)]
    return launches + [
        op("gloo:all_reduce", start, allreduce_us, tid=2, cat="user_annotation",
           **{"Input Dims": [[sum(elements)]], "Input type": ["float"]}),
        op("torch.distributed.ddp.reducer::copy_bucket_to_grad", start + allreduce_us + copy_delay, 20),
        op("Optimizer.zero_grad#SGD.zero_grad", t0 + 2, 5, cat="user_annotation"),
        op("Optimizer.step#SGD.step", t0 + 700, 100, cat="user_annotation"),
    ]


def ddp_job(rank, **options):
    """One rank's trace of :func:`two_step_trace` under DDP (:func:`ddp_tail` in each step)."""
    trace = two_step_trace()
    trace["traceEvents"] += ddp_tail(0, 430, **options) + ddp_tail(1000, 450, **options)
    trace["distributedInfo"] = {"rank": rank, "world_size": 2}
    return trace
