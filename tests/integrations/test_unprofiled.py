"""A traced step without the profiler: the trace replayed with the profiler's cost taken out
(fusionopt.integrations._unprofiled), hand-made traces with hand-worked replays."""

import json
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kineto_traces import PARAMS, US, ddp_job

from fusionopt.integrations import predict_traced_step
from fusionopt.integrations import (
    DEFAULT_PROFILER_COST, ProfilerCost, read_profiler_cost, read_unprofiled_reference, replay_trace,
    write_profiler_cost,
)


def event(name, ts, dur, cat="cpu_op", tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur, "args": args}


def launched(ts, correlation, kernel_start, kernel_dur, stream=7, op_dur=10):
    """An operator at ``ts`` whose runtime call (at ts + 2, 4 us) launches one kernel."""
    return [event("aten::add", ts, op_dur), event("cudaLaunchKernel", ts + 2, 4, "cuda_runtime", correlation=correlation),
            event("add_kernel", kernel_start, kernel_dur, "kernel", tid=stream, correlation=correlation, stream=stream)]


def step_of(period, *events):
    return {"traceEvents": [event("ProfilerStep#1", 0, period, "user_annotation"), *[e for group in events
                                                                                    for e in group]]}


def replayed(trace, c_us):
    doc, steps = replay_trace(trace, ProfilerCost(c_us * US), 1)
    return doc, steps[0]


def test_host_bound_step_loses_the_profilers_cost_of_each_event():
    # Kernels of 20 us launched every 100 us (5 us after their launch), a synchronisation at
    # 300 us that finds the GPU done and returns after 2 us, the step's end at 400 us: 7 events.
    trace = step_of(400, launched(0, 0, 7, 20), launched(100, 1, 107, 20), launched(200, 2, 207, 20),
                    [event("cudaDeviceSynchronize", 300, 2, "cuda_runtime", correlation=9)])
    _, step = replayed(trace, 0)
    assert round(step.replayed / US, 6) == 400.0
    doc, step = replayed(trace, 10)
    # Each event's 10 us comes out of the host time after it: the launches move to 0, 80 and
    # 160 us, the kernels run [5, 25], [85, 105], [165, 185]; the host reaches the
    # synchronisation at 240 us (300 - 60), returns at 242 and ends at 400 - 70 = 330 us.
    assert step.events == 7 and step.synchronisations == 1
    assert (round(step.replayed / US, 6), round(step.host / US, 6), round(step.gpu / US, 6)) == (330.0, 330.0, 185.0)
    kernels = sorted((e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"] if e["cat"] == "kernel")
    assert [(round(a, 6), round(b, 6)) for a, b in kernels] == [(5.0, 25.0), (85.0, 105.0), (165.0, 185.0)]
    sync = next(e for e in doc["traceEvents"] if e["name"] == "cudaDeviceSynchronize")
    assert (round(sync["ts"], 6), round(sync["dur"], 6)) == (240.0, 2.0)


def test_gpu_bound_step_keeps_its_gpu_time():
    # Three kernels of 100 us launched within 42 us, run back to back 1 us apart; the host
    # waits from 60 us until 1 us after the last one ends (310 us) and works 5 us more.
    trace = step_of(315, launched(0, 0, 7, 100), launched(20, 1, 108, 100), launched(40, 2, 209, 100),
                    [event("cudaDeviceSynchronize", 60, 250, "cuda_runtime", correlation=9)])
    _, step = replayed(trace, 0)
    assert round(step.replayed / US, 6) == 315.0
    _, step = replayed(trace, 10)
    # The first launch moves from 2 to 0 us: its kernel starts at 5; the three take 100 + 1 +
    # 100 + 1 + 100 us to 307; the synchronisation returns 1 us later, at 308, and the 5 us of
    # host work after it go to the synchronisation's own 10 us of profiler cost.
    assert (round(step.replayed / US, 6), round(step.gpu / US, 6), round(step.host / US, 6)) == (308.0, 307.0, 308.0)


def test_work_that_waited_on_another_stream_waits_for_it_in_the_replay():
    # K1 (stream 7) runs [7, 107]; K2 (stream 8), launched at 12 us, starts only when K1 ends
    # and runs [107, 157]; the host waits from 20 us until 158 us, the step ends at 200 us.
    trace = step_of(200, launched(0, 0, 7, 100), launched(10, 1, 107, 50, stream=8, op_dur=8),
                    [event("cudaDeviceSynchronize", 20, 138, "cuda_runtime", correlation=9)])
    _, step = replayed(trace, 10)
    # Both launches move to 0 us; K1 runs [5, 105] and K2 after it [105, 155] (not from 5 us:
    # [5, 55]); the synchronisation returns at 156, and the 42 us after it lose the
    # synchronisation's 10: 188 us.
    assert (round(step.gpu / US, 6), round(step.replayed / US, 6)) == (155.0, 188.0)


def test_a_wait_for_a_collective_on_the_host_is_kept():
    # The hand-made two-rank gloo DDP job: 29 events per step on the step's thread, host time
    # enough after each to take 1 us from; the all-reduce (200 us, on gloo's thread) is a wait.
    trace = ddp_job(0)
    doc, steps = replay_trace(trace, ProfilerCost(1 * US), len(PARAMS))
    assert [(s.events, round(s.traced / US, 6), round(s.replayed / US, 6)) for s in steps] == [(29, 1000.0, 971.0)] * 2
    reduces = [e for e in doc["traceEvents"] if e["name"] == "gloo:all_reduce"]
    copies = [e for e in doc["traceEvents"] if e["name"].endswith("copy_bucket_to_grad")]
    assert [round(e["dur"], 6) for e in reduces] == [200.0, 200.0]
    assert [round(c["ts"] - (r["ts"] + r["dur"]), 6) for r, c in zip(reduces, copies)] == [0.0, 0.0]


@settings(deadline=None)
@given(c=st.floats(0, 50))
def test_the_replay_is_never_longer_than_the_trace_nor_shorter_than_its_gpu_work(c):
    trace = step_of(400, launched(0, 0, 7, 20), launched(100, 1, 107, 20), launched(200, 2, 207, 20),
                    [event("cudaDeviceSynchronize", 300, 2, "cuda_runtime", correlation=9)])
    _, step = replayed(trace, c)
    assert 60.0 - 1e-9 <= step.replayed / US <= 400.0 + 1e-9
    assert step.replayed / US >= 400.0 - 7 * c - 1e-9


def write_job(folder, **files):
    folder.mkdir()
    for rank in (0, 1):
        (folder / f"rank{rank}.json").write_text(json.dumps(ddp_job(rank)))
    for name, document in files.items():
        (folder / f"{name}.json").write_text(json.dumps(document))
    return folder


def test_traced_job_predicts_its_step_without_the_profiler(tmp_path):
    # 1000 us steps, 29 events each on the step's thread: at 1 us per event the replayed step
    # is 971 us, the forward's 11 events and the backward's 14 come out of those parts, and the
    # model, whose exposed 200 us is the trace's, predicts the replayed step.
    job = write_job(tmp_path / "job", profiler_cost={"seconds_per_event": 1e-6, "detail": "by hand"},
                    unprofiled={"ddp_plain_median": 0.000950})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = predict_traced_step(job, PARAMS)
    assert caught == []
    assert r.unprofiled_note is None and r.profiler_cost == ProfilerCost(1e-6, "measured", "by hand")
    assert round(r.predicted / US, 6) == 1000.0 and round(r.predicted_unprofiled / US, 6) == 971.0
    assert round(r.replayed / US, 6) == 971.0
    parts = {k: round(v / US, 6) for k, v in r.unprofiled_parts.items()}
    assert (parts["forward"], parts["backward"], parts["exposed"]) == (279.0, 126.0, 200.0)
    assert round(r.unprofiled_profile.metadata["step"]["exposed"] / US, 6) == 200.0
    assert round(r.measured_unprofiled / US, 6) == 950.0 and round(r.unprofiled_error, 9) == round(21 / 950, 9)
    # Without the profiler's cost the replay is the trace: the same step.
    same = predict_traced_step(job, PARAMS, profiler_cost=0.0)
    assert same.predicted_unprofiled == pytest.approx(same.predicted, abs=1e-12)


def test_what_is_missing_is_named_in_one_line(tmp_path):
    job = write_job(tmp_path / "bare")
    with pytest.warns(UserWarning) as caught:
        r = predict_traced_step(job, PARAMS)
    notes = [str(w.message) for w in caught if "unprofiled" in str(w.message)]
    assert len(notes) == 1 and "\n" not in notes[0] and notes[0] == r.unprofiled_note
    assert notes[0].startswith(f"{job}: no profiler_cost.json") and "no unprofiled.json" in notes[0]
    assert r.profiler_cost is DEFAULT_PROFILER_COST and r.measured_unprofiled is None and r.unprofiled_error is None
    # At the default cost: 1000 - 29 x 3 = 913 us, still reported.
    assert round(r.predicted_unprofiled / US, 6) == round(1000.0 - 29 * DEFAULT_PROFILER_COST.seconds_per_event / US, 6)
    measured_only = write_job(tmp_path / "measured", profiler_cost={"seconds_per_event": 2e-6})
    with pytest.warns(UserWarning, match=r"measured: no unprofiled\.json \(the job's step measured without the "
                                         r"profiler\), so predicted_unprofiled is not checked") as caught:
        r = predict_traced_step(measured_only, PARAMS)
    assert "profiler_cost.json" not in r.unprofiled_note and round(r.predicted_unprofiled / US, 6) == 942.0


def test_bad_reference_files_are_refused_naming_them(tmp_path):
    job = write_job(tmp_path / "job", profiler_cost={"seconds_per_event": -1})
    with pytest.raises(ValueError, match=r"profiler_cost\.json: 'seconds_per_event' must be a finite number of "
                                         r"seconds >= 0, got -1"):
        read_profiler_cost(job)
    (job / "unprofiled.json").write_text(json.dumps({"ddp_plain_median": 0}))
    with pytest.raises(ValueError, match=r"unprofiled\.json: 'ddp_plain_median' must be a positive number of "
                                         r"seconds, got 0"):
        read_unprofiled_reference(job)
    with pytest.raises(ValueError, match=r"profiler_cost\.json: already holds a profiler cost"):
        write_profiler_cost(job, {"seconds_per_event": 1e-6})
    assert json.loads((job / "profiler_cost.json").read_text()) == {"seconds_per_event": -1}
    with pytest.raises(ValueError, match=r"the profiler's cost per event must be a finite number of seconds >= 0, "
                                         r"got nan"):
        ProfilerCost(float("nan"))
