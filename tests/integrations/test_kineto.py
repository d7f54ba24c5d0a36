"""Kineto chrome traces -> Profile (fusionopt.integrations._kineto): hand-made traces with
known timestamps, the error cases, and a real trace from torch.profiler on CPU."""

import json

import numpy as np
import pytest

from kineto_traces import PARAMS, SHAPES, US, cpu_step, op, seq, two_step_trace

from fusionopt.integrations import profile_from_trace
from fusionopt.model import Profile, read_profile_csv, write_profile_csv


def read_trace(*args, **options):
    """The reader with each unit's own duration as its forward time, which the hand-made
    traces below were worked out for (the span attribution has tests of its own)."""
    return profile_from_trace(*args, **{"forward": "exclusive", **options})


def check_times(p, forward_us, backward_us):
    np.testing.assert_allclose(p.forward / US, forward_us, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(p.backward / US, backward_us, rtol=1e-12, atol=1e-9)


def test_two_steps_with_module_events():
    p = read_trace(two_step_trace(), PARAMS)
    assert p.names == tuple(nm for nm, _ in PARAMS)
    assert p.sizes.tolist() == [4096, 64, 640, 40]
    # Step 1: ready (from 300 us) fc1.w 130, fc1.b 120, fc2.w 60, fc2.b 50 us;
    # step 2: 150, 140, 70, 60. Medians 140, 130, 65, 55 -> gaps 10, 65, 10, 55.
    # Forward: Linear_0 100 and 120 us -> 110 on fc1.bias; Linear_1 50, 70 -> 60 on fc2.bias.
    check_times(p, [0, 110, 0, 60], [10, 65, 10, 55])
    assert p.metadata["steps"] == 2
    assert p.metadata["timeline"] == "cpu"
    assert p.metadata["forward_units"] == "nn.Module events"
    assert p.metadata["ready_order"] == ["fc2.bias", "fc2.weight", "fc1.bias", "fc1.weight"]
    assert p.metadata["forward_unmatched"] == []
    assert p.update.tolist() == [0.0] * 4


def test_outermost_operators_without_module_events():
    p = read_trace(two_step_trace(modules=False), PARAMS)
    # aten::linear lasts linear0 - 10 and linear1 - 2 us: 90, 110 -> 100; 48, 68 -> 58.
    check_times(p, [0, 100, 0, 58], [10, 65, 10, 55])
    assert p.metadata["forward_units"] == "outermost operators"


def test_one_step_without_profiler_steps_and_a_bare_event_list():
    events = [e for e in cpu_step(0, 100, 50, [350, 360, 420, 430]) if e["name"] != "ProfilerStep#1"]
    p = read_trace(events, dict(PARAMS), name="toy")
    check_times(p, [0, 100, 0, 50], [10, 60, 10, 50])
    assert (p.name, p.metadata["steps"], p.metadata["trace"]) == ("toy", 1, "dict")


def test_ready_order_and_the_envelope():
    # The gradients of fc2 arrive weight first: fc2.weight at 50 us, fc2.bias at 60 us.
    trace = {"traceEvents": cpu_step(0, 100, 50, [350, 360, 420, 430], shapes=False)}
    order = ["fc2.weight", "fc2.bias", "fc1.bias", "fc1.weight"]
    p = read_trace(trace, PARAMS, ready_order=order)
    # Forward order R = [130, 120, 50, 60]: fc2.weight counts as ready with fc2.bias, at 60.
    check_times(p, [0, 100, 0, 50], [10, 60, 0, 60])
    assert p.metadata["ready_order"] == order
    assert p.ready_times.tolist() == pytest.approx([130 * US, 120 * US, 60 * US, 60 * US], rel=1e-12)
    # A profile carries its ready order in its metadata.
    carrier = Profile.from_arrays([s for _, s in PARAMS], [0.0] * 4, [0.0] * 4, [nm for nm, _ in PARAMS],
                                  metadata={"ready_order": order})
    assert read_trace(trace, carrier) == p


def test_nested_units_subtract_their_children():
    params = [("block.scale", 4), ("block.fc.weight", 64)]
    events = [
        op("nn.Module: Block_0", 0, 100, cat="python_function"),
        op("aten::mul", 5, 10, **seq(0)),
        op("nn.Module: Linear_0", 20, 60, cat="python_function"),
        op("aten::mm", 25, 50, **seq(1)),
        op("autograd::engine::evaluate_function: MmBackward0", 200, 20, **seq(1)),
        op("torch::autograd::AccumulateGrad", 221, 4),
        op("autograd::engine::evaluate_function: MulBackward0", 226, 10, **seq(0)),
        op("torch::autograd::AccumulateGrad", 237, 3),
    ]
    p = read_trace({"traceEvents": events}, params)
    # Block_0 100 us less Linear_0's 60 -> 40 on block.scale; 60 on block.fc.weight.
    # Ready from 200 us: fc.weight 25, scale 40.
    check_times(p, [40, 60], [15, 25])


def gpu_trace():
    """One step on a GPU: forward on host thread 1, backward on the autograd thread 2,
    kernels on stream 7, far behind their launches."""
    def launch(ts, corr, tid):
        return op("cudaLaunchKernel", ts, 2, tid, cat="cuda_runtime", correlation=corr)

    def kernel(ts, dur, corr, cat="kernel"):
        return op("kernel", ts, dur, 7, cat=cat, correlation=corr, stream=7)

    events = [
        op("ProfilerStep#4", 0, 1000, cat="user_annotation"),
        op("nn.Module: Linear_0", 10, 100, cat="python_function"),
        op("aten::linear", 12, 90, **seq(0)), op("aten::addmm", 20, 80, **seq(1)),
        launch(30, 1, 1), kernel(500, 40, 1),
        op("nn.Module: Linear_1", 150, 50, cat="python_function"),
        op("aten::linear", 151, 48, **seq(3)), op("aten::addmm", 155, 40, **seq(4)),
        launch(160, 2, 1), kernel(545, 20, 2),
        op("aten::sum", 210, 10, **seq(5)),
        op("autograd::engine::evaluate_function: SumBackward0", 300, 10, 2, **seq(5)),
        launch(305, 3, 2), kernel(570, 5, 3),
        op("autograd::engine::evaluate_function: AddmmBackward0", 312, 30, 2, **seq(4)),
        launch(320, 4, 2), kernel(575, 25, 4),
        op("torch::autograd::AccumulateGrad", 345, 5, 2),
        op("autograd::engine::evaluate_function: TBackward0", 352, 4, 2, **seq(3)),
        op("torch::autograd::AccumulateGrad", 357, 3, 2),
        op("autograd::engine::evaluate_function: ReluBackward0", 362, 8, 2, **seq(2)),
        launch(365, 5, 2), kernel(600, 10, 5),
        op("autograd::engine::evaluate_function: AddmmBackward0", 372, 40, 2, **seq(1)),
        launch(380, 6, 2), kernel(610, 50, 6),
        op("torch::autograd::AccumulateGrad", 415, 5, 2),
        op("autograd::engine::evaluate_function: TBackward0", 422, 3, 2, **seq(0)),
        op("torch::autograd::AccumulateGrad", 426, 4, 2),
        launch(427, 7, 2), kernel(660, 5, 7, cat="gpu_memcpy"),
        {"ph": "X", "cat": "gpu_user_annotation", "name": "x", "pid": 0, "tid": 7, "ts": 0, "dur": 900,
         "args": {"correlation": 3}},
    ]
    return {"traceEvents": events, "deviceProperties": [{"id": 0, "name": "Some GPU"}]}


def test_gpu_clock():
    p = read_trace(gpu_trace(), PARAMS, timeline="gpu")
    # The backward starts on the GPU at 570 us (first kernel launched from it). fc2's
    # gradients are ready once the work launched before their AccumulateGrad is done (600),
    # fc1.bias at 660, fc1.weight after its copy at 665: R = [95, 90, 30, 30].
    # Forward: Linear_0's kernel 500-540, Linear_1's 545-565.
    check_times(p, [0, 40, 0, 20], [5, 60, 0, 30])
    assert p.metadata["timeline"] == "gpu"
    assert p.metadata["devices"] == ["Some GPU"]
    # The host's clock on the same trace: launch times.
    q = read_trace(gpu_trace(), PARAMS, timeline="cpu")
    check_times(q, [0, 100, 0, 50], [10, 60, 10, 50])
    assert q.metadata["timeline"] == "cpu"
    # The GPU is busy 40 + 20 + 5 + 25 + 10 + 50 + 5 = 155 us of the 1000 us step: the step
    # is host-bound, and by default the host's clock paces it.
    auto = read_trace(gpu_trace(), PARAMS)
    assert auto.metadata["bound"] == "host" and auto.metadata["gpu_busy_fraction"] == pytest.approx(0.155)
    assert auto.metadata["timeline"] == "cpu"
    check_times(auto, [0, 100, 0, 50], [10, 60, 10, 50])


def test_file_round_trip(tmp_path):
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(two_step_trace()))
    p = read_trace(path, PARAMS)
    assert p.metadata["trace"] == "trace.json"
    check_times(p, [0, 110, 0, 60], [10, 65, 10, 55])
    # What it read writes and reads back as JSON and CSV.
    p.write(tmp_path / "p.json")
    assert Profile.read(tmp_path / "p.json") == p
    # CSV carries no step parts: the writer says it leaves them out.
    with pytest.warns(UserWarning, match=r"step parts \(host_overhead = 0.00057 s\) are not written"):
        write_profile_csv(p, tmp_path / "p.csv")
    assert read_profile_csv(tmp_path / "p.csv", metadata=p.metadata) == p.with_step_parts(host_overhead=0.0)


def test_the_whole_step_in_named_parts():
    # Each step of the hand-made trace: period 1000 us, forward 10 -> 300, backward 300 ->
    # 430 (step 2: 450). Added: an all-reduce in flight 400 -> 600 on a gloo thread, DDP's
    # bucket copy 460 -> 620 (20 us of it after the all-reduce: the copy; the rest waiting),
    # zero_grad 2 -> 7 and the optimiser 700 -> 800 (update lump 105 us). Host: 1000 - 290 -
    # 130 - 190 - 105 = 285 us (step 2: 1000 - 290 - 150 - 170 - 105 = 285).
    trace = two_step_trace()
    for t0 in (0, 1000):
        trace["traceEvents"] += [
            op("gloo:all_reduce", t0 + 400, 200, tid=2, cat="user_annotation"),
            op("torch.distributed.ddp.reducer::copy_bucket_to_grad", t0 + 460, 160),
            op("Optimizer.zero_grad#SGD.zero_grad", t0 + 2, 5, cat="user_annotation"),
            op("Optimizer.step#SGD.step", t0 + 700, 100, cat="user_annotation"),
        ]
    p = profile_from_trace(trace, PARAMS)
    assert {k: round(v / US, 6) for k, v in p.step_parts.items()} == {
        "update_lump": 105.0, "post_backward": 20.0, "host_overhead": 285.0}
    step = p.metadata["step"]
    assert round(step["exposed"] / US, 6) == 160.0 and [round(t / US, 6) for t in step["periods"]] == [1000.0, 1000.0]
    # The parts (forward as spans: 290 us) and the measured wait account for the whole period.
    assert round((p.compute_time + step["exposed"]) / US, 6) == 1000.0


def test_a_single_tensor_optimizer_is_timed_per_parameter():
    # The optimiser's step 700 -> 800 us runs two operators per parameter, in the parameter
    # list's order, from 710, 730, 760 and 780 us: 20, 30, 20 and 20 us per tensor; the 10 us
    # before the first and zero_grad's 5 us stay in the lump. Operators whose shapes do not
    # follow the parameters leave the whole step in the lump.
    def optimizer_ops(t0, shapes):
        events = []
        for start, shape in zip((710, 730, 760, 780), shapes):
            for k in range(2):
                events.append(op("aten::add_", t0 + start + 6 * k, 5,
                                 **{"Input Dims": [shape, shape], "Input type": ["float", "float"]}))
        return events

    shapes = [SHAPES[name] for name, _ in PARAMS]
    for order, per_tensor, lump in ((shapes, [20.0, 30.0, 20.0, 20.0], 15.0), (shapes[::-1], [0.0] * 4, 105.0)):
        trace = two_step_trace()
        for t0 in (0, 1000):
            trace["traceEvents"] += [
                op("Optimizer.zero_grad#SGD.zero_grad", t0 + 2, 5, cat="user_annotation"),
                op("Optimizer.step#SGD.step", t0 + 700, 100, cat="user_annotation"),
                *optimizer_ops(t0, order),
            ]
        p = profile_from_trace(trace, PARAMS)
        assert (p.update / US).round(6).tolist() == per_tensor and round(p.update_lump / US, 6) == lump


@pytest.mark.parametrize("trace,params,options,message", [
    ({"traceEvents": {}}, PARAMS, {}, "trace: not a chrome trace"),
    ({"traceEvents": [{"ph": "M", "name": "x"}]}, PARAMS, {}, "trace: no complete"),
    ({"traceEvents": [op("aten::mm", "soon", 1)]}, PARAMS, {},
     r"traceEvents\[0\] \('aten::mm'\): 'ts' and 'dur' must be numbers"),
    ({"traceEvents": [op("aten::mm", 0, 5)]}, PARAMS, {}, "trace: no AccumulateGrad events"),
    (two_step_trace(), PARAMS[:3], {}, "trace: ProfilerStep#1: 4 AccumulateGrad events but 3 parameters given"),
    (two_step_trace(), PARAMS, {"ready_order": ["fc2.weight", "fc2.bias", "fc1.bias", "fc1.weight"]},
     r"AccumulateGrad 0 \(ready order\) holds a gradient of 40 bytes \(shape \[10\], float\) "
     r"but maps to parameter 'fc2.weight' of 640 bytes"),
    (two_step_trace(), PARAMS, {"ready_order": ["fc2.bias", "nope"]}, "ready_order names unknown parameters: 'nope'"),
    (two_step_trace(), PARAMS, {"ready_order": ["fc2.bias"]}, "ready_order must name each parameter once"),
    (two_step_trace(), PARAMS, {"timeline": "gpu"}, "timeline='gpu' but the trace holds no GPU work"),
    (two_step_trace(), PARAMS, {"timeline": "wall"}, "unknown timeline 'wall'"),
    (two_step_trace(), [], {}, "parameters is empty"),
    (two_step_trace(), [("a", 0)], {}, "parameter 'a': size must be a positive whole number of bytes"),
    (two_step_trace(), [("a", 4), ("a", 8)], {}, "parameter 'a': name repeated"),
    (two_step_trace(), [("a", 4, 1)], {}, r"parameters\[0\] must be a \(name, size_bytes\) pair"),
    (two_step_trace(), 5, {}, "parameters must be a torch.nn.Module, a Profile"),
])
def test_bad_input_is_named(trace, params, options, message):
    with pytest.raises(ValueError, match=message):
        read_trace(trace, params, **options)


def test_bad_files_are_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    with pytest.raises(ValueError, match="bad.json: malformed JSON at line 1"):
        read_trace(bad, PARAMS)
    empty = tmp_path / "forward_only.json"
    empty.write_text(json.dumps({"traceEvents": [op("aten::mm", 0, 5)]}))
    with pytest.raises(ValueError, match="forward_only.json: no AccumulateGrad events"):
        read_trace(empty, PARAMS)
    mismatch = tmp_path / "two.json"
    mismatch.write_text(json.dumps(two_step_trace()))
    with pytest.raises(ValueError, match="two.json: ProfilerStep#1: 4 AccumulateGrad events but 2 parameters"):
        read_trace(mismatch, PARAMS[:2])
    with pytest.raises(FileNotFoundError, match="missing.json"):
        read_trace(tmp_path / "missing.json", PARAMS)


# ---------------------------------------------------------------------------- a real trace
@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events")
@pytest.mark.parametrize("with_stack", [False, True])
def test_a_real_torch_profiler_trace(tmp_path, with_stack):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 10))
    x = torch.randn(32, 128)
    path = tmp_path / "trace.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=with_stack,
                 schedule=schedule(wait=0, warmup=1, active=1),
                 on_trace_ready=lambda prof: prof.export_chrome_trace(str(path))) as prof:
        for _ in range(2):
            model.zero_grad(set_to_none=True)
            model(x).sum().backward()
            prof.step()
    doc = json.loads(path.read_text())
    steps = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")]
    assert len(steps) == 1

    p = read_trace(path, model)   # shapes recorded: every gradient size is checked
    named = list(model.named_parameters())
    assert p.n == len(named) == 6
    assert p.names == tuple(nm for nm, _ in named)
    assert p.sizes.tolist() == [t.numel() * t.element_size() for _, t in named]
    assert (p.forward >= 0).all() and (p.backward >= 0).all()
    assert p.F > 0 and p.B > 0
    assert p.F + p.B <= steps[0]["dur"] * US
    # Each Linear's forward time sits on its bias, the last of its tensors.
    assert p.forward[0::2].tolist() == [0.0, 0.0, 0.0] and (p.forward[1::2] > 0).all()
    assert p.metadata["forward_unmatched"] == []
    assert p.metadata["forward_units"] == ("nn.Module events" if with_stack else "outermost operators")
    # Read against a wrong order, the recorded shapes give the mapping away.
    with pytest.raises(ValueError, match="trace.json: ProfilerStep#.*maps to parameter"):
        read_trace(path, [(nm, int(s)) for nm, s in zip(p.names, p.sizes[::-1])])


def strip_steps(trace):
    return {**trace, "traceEvents": [e for e in trace["traceEvents"] if not e.get("name", "").startswith("ProfilerStep")]}


def test_steps_are_found_from_the_backward_without_profiler_steps():
    # Every 4 AccumulateGrad events close a step. The first runs from the trace's start, not
    # from a step's: it is read, not counted, so the times are the second step's.
    found = read_trace(strip_steps(two_step_trace()), PARAMS)
    check_times(found, [0, 120, 0, 70], [10, 70, 10, 60])
    assert found.metadata["steps"] == 1
    assert found.metadata["steps_skipped"] == ["iteration 1 (found from its backward)"]


def test_a_truncated_last_step_is_skipped_with_a_warning():
    trace = two_step_trace()
    partial = [e for e in cpu_step(2000, 100, 50, [350, 360, 420, 430], step=3)
               if not (e["name"].endswith("AccumulateGrad") and e["ts"] > 2000 + 400)]
    trace["traceEvents"] += partial                           # step 3 ends after fc2's gradients
    with pytest.warns(UserWarning, match=r"ProfilerStep#3 holds 2 of 4 gradients: a truncated last step"):
        p = read_trace(trace, PARAMS)
    check_times(p, [0, 110, 0, 60], [10, 65, 10, 55])
    assert p.metadata["steps"] == 2 and p.metadata["steps_skipped"] == ["ProfilerStep#3"]
    # Without ProfilerSteps the cut-off backward is found the same way.
    with pytest.warns(UserWarning, match="the last 2 AccumulateGrad events do not make a whole backward"):
        q = read_trace(strip_steps(trace), PARAMS)
    check_times(q, [0, 120, 0, 70], [10, 70, 10, 60])        # the second step's (the first not counted)
    # A step in the middle that misses gradients is an error, not skipped.
    middle = two_step_trace()
    middle["traceEvents"] = [e for e in middle["traceEvents"]
                             if not (e.get("name") == "torch::autograd::AccumulateGrad" and 400 < e["ts"] < 500)]
    with pytest.raises(ValueError, match="ProfilerStep#1: 2 AccumulateGrad events but 4 parameters"):
        read_trace(middle, PARAMS)


def test_gpu_side_profiler_steps_are_not_steps():
    trace = two_step_trace()
    trace["traceEvents"] += [op("ProfilerStep#1", 5, 900, cat="gpu_user_annotation", tid=7),
                             op("ProfilerStep#2", 1005, 900, cat="gpu_user_annotation", tid=7)]
    p = read_trace(trace, PARAMS)
    assert p.metadata["steps"] == 2
    check_times(p, [0, 110, 0, 60], [10, 65, 10, 55])


def test_gzip_traces(tmp_path):
    import gzip

    path = tmp_path / "rank0.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(two_step_trace()).encode()))
    from_file = read_trace(path, PARAMS)
    check_times(from_file, [0, 110, 0, 60], [10, 65, 10, 55])
    assert from_file.metadata["trace"] == "rank0.pt.trace.json.gz"
    (tmp_path / "cut.json.gz").write_bytes(path.read_bytes()[:200])
    with pytest.raises(ValueError, match="cut.json.gz: a gzip file that does not decompress"):
        read_trace(tmp_path / "cut.json.gz", PARAMS)


@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events")
def test_a_real_gzip_trace_without_a_schedule_is_split_at_its_backwards(tmp_path):
    # Three steps under torch.profiler without a schedule (no ProfilerStep annotations),
    # written gzip-compressed by tensorboard_trace_handler, as published traces often are.
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 10))
    x = torch.randn(4, 3, 8, 8)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 on_trace_ready=tensorboard_trace_handler(str(tmp_path), use_gzip=True)):
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            model(x).sum().backward()
    [path] = list(tmp_path.glob("*.json.gz"))
    p = read_trace(path, model)
    assert p.metadata["steps"] == 2 and p.metadata["steps_skipped"] == ["iteration 1 (found from its backward)"]
    assert p.names == tuple(nm for nm, _ in model.named_parameters())
    assert p.B > 0 and p.F > 0
    # The hooks' order where ready times tie: the convolution's and batch norm's weights
    # before their biases (autograd's order on torch 2.13).
    assert p.metadata["ready_order"][-2:] == ["0.weight", "0.bias"]


def test_recorded_shapes_say_which_parameter_each_gradient_is():
    # The list puts fc1's bias before its weight; the recorded sizes still map each gradient
    # to its parameter (the last two gradients are fc1.bias, then fc1.weight).
    p = read_trace(two_step_trace(), [PARAMS[1], PARAMS[0], *PARAMS[2:]])
    assert p.metadata["ready_order"] == ["fc2.bias", "fc2.weight", "fc1.bias", "fc1.weight"]
    assert p.ready_times[1] >= p.ready_times[0]          # fc1.weight (index 1 here) ready last



def test_nccl_kernels_do_not_delay_gradient_ready_times():
    # DDP's all-reduce of fc2's bucket, launched at 358 us from the comm thread and running
    # on the GPU 610-900 us, must not make fc1's gradients "ready" at 900.
    trace = gpu_trace()
    trace["traceEvents"] += [
        op("cudaLaunchKernel", 358, 2, 3, cat="cuda_runtime", correlation=99),
        op("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 610, 290, 8, cat="kernel", correlation=99, stream=8),
    ]
    check_times(read_trace(trace, PARAMS, timeline="gpu"), [0, 40, 0, 20], [5, 60, 0, 30])


def test_batch_norm_forward_time_is_the_batch_norm_operator():
    # The profiler stamps num_batches_tracked.add_ with batch_norm's sequence number; the
    # forward time is batch_norm's 40 us, not add_'s 5.
    events = [
        op("aten::add_", 0, 5, **seq(1)), op("aten::batch_norm", 10, 40, **seq(1)),
        op("aten::sum", 60, 5, **seq(2)),
        op("autograd::engine::evaluate_function: SumBackward0", 100, 5, **seq(2)),
        op("autograd::engine::evaluate_function: NativeBatchNormBackward0", 106, 20, **seq(1)),
        op("torch::autograd::AccumulateGrad", 127, 2), op("torch::autograd::AccumulateGrad", 130, 2),
    ]
    p = read_trace(events, [("bn.weight", 64), ("bn.bias", 64)])
    assert (p.forward / US).round(9).tolist() == [0.0, 40.0]


def test_one_trace_per_rank(tmp_path):
    import gzip

    from fusionopt.integrations import profile_from_traces

    def write(rank, events, shift):
        doc = {"traceEvents": events, "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 3}}
        for e in doc["traceEvents"]:
            e["ts"] += shift
        (tmp_path / f"worker{rank}.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))

    # Ranks 0 and 1 run the same steps; rank 2 is slower everywhere. The median over the
    # ranks is then ranks 0 and 1's figures (a mean would move).
    same = lambda: cpu_step(0, 100, 50, [350, 360, 420, 430], step=1) + cpu_step(1000, 120, 70, [360, 370, 440, 450], step=2)  # noqa: E731
    write(0, same(), 0)
    write(1, same(), 5000)
    write(2, cpu_step(0, 300, 200, [400, 450, 600, 700], step=1) + cpu_step(1000, 300, 200, [400, 450, 600, 700], step=2), 9000)
    p = profile_from_traces(tmp_path, PARAMS, forward="exclusive")
    check_times(p, [0, 110, 0, 60], [10, 65, 10, 55])
    assert p.metadata["ranks"] == {str(r): f"worker{r}.pt.trace.json.gz" for r in range(3)}
    assert p.metadata["steps"] == 6
    (tmp_path / "again.json").write_bytes(gzip.decompress((tmp_path / "worker1.pt.trace.json.gz").read_bytes()))
    with pytest.raises(ValueError, match=r"worker1.pt.trace.json.gz: rank 1 again \(also .*again.json\)"):
        profile_from_traces(tmp_path, PARAMS)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty: no trace files"):
        profile_from_traces(tmp_path / "empty", PARAMS)


def test_forward_spans_count_every_operator_between_parameter_uses():
    # Step 1: Linear_0 starts at 10 us, Linear_1 at 150, the backward at 300: spans 140 and
    # 150 (ReLU and the loss included); step 2 the same. F is the measured forward, 290 us,
    # where the modules' own times add up to 150 and 190.
    p = profile_from_trace(two_step_trace(), PARAMS)
    check_times(p, [0, 140, 0, 150], [10, 65, 10, 55])
    assert p.metadata["forward_attribution"] == "span"
    assert p.F == pytest.approx(290 * US)
    with pytest.raises(ValueError, match="unknown forward attribution 'both'"):
        profile_from_trace(two_step_trace(), PARAMS, forward="both")
