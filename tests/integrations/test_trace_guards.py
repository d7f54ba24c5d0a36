"""What the trace readers refuse or say: files in a job's folder that are not traces, traces
cut short, incomplete rank sets, one-rank jobs; and what `traced` and `profile --trace` say
about their figures (which parts are measured, which clock, which statistic)."""

import gzip
import json
import subprocess
import sys
import textwrap

import pytest

from kineto_traces import PARAMS, US, cpu_step, ddp_job, ddp_tail, op, two_step_trace

from fusionopt.cli import main
from fusionopt.integrations import (
    collective_samples, documents_by_rank, profile_from_traces, profile_from_trace, COPIED_PARTS,
    predict_traced_step,
)
from fusionopt.model import Profile, read_profile_csv


def run(capsys, *argv):
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def write_parameters(folder):
    path = folder / "params.csv"
    path.write_text("name,size_bytes\n" + "".join(f"{n},{s}\n" for n, s in PARAMS))
    return path


def write_job(folder, ranks=(0, 1), world_size=2, **options):
    """The hand-made two-rank DDP job of tests/kineto_traces.py, with its parameters.csv."""
    folder.mkdir(exist_ok=True)
    for rank in ranks:
        trace = ddp_job(rank, **options)
        trace["distributedInfo"]["world_size"] = world_size
        (folder / f"rank{rank}.json").write_text(json.dumps(trace))
    (folder / "parameters.csv").write_text("name,size_bytes\n" + "".join(f"{n},{s}\n" for n, s in PARAMS))
    return folder


# ---------------------------------------------------------------- 1. a job folder's own files
def test_files_fusionopt_writes_into_a_job_folder_are_not_rank_traces(tmp_path, capsys):
    # The job: 1000 us per step measured, 900 us predicted (the copy 100 us late).
    job = write_job(tmp_path / "job", copy_delay=100)
    assert run(capsys, "profile", "--trace", job, "--output", job / "profile.json")[0] == 0
    (job / "parameters.json").write_text(json.dumps(PARAMS))
    (job / "notes.json").write_text("{not json")
    with pytest.warns(UserWarning, match=r"notes.json: malformed JSON .*: not read as a trace"):
        r = predict_traced_step(job)
        assert sorted(documents_by_rank(job)) == [0, 1]
    assert round(r.measured / US, 6) == 1000.0 and round(r.predicted / US, 6) == 900.0
    status, out, err = run(capsys, "traced", job)
    assert status == 0 and "step                   1.000         0.900   error -10.0%" in out
    # One line for the unreadable file; one naming what the step without the profiler lacks.
    assert err.count("\n") == 2 and "notes.json" in err and "no profiler_cost.json" in err


def test_profile_never_writes_over_a_file_it_read_from_a_trace_folder(tmp_path, capsys):
    job = write_job(tmp_path / "job")
    listing = (job / "parameters.csv").read_text()
    trace = (job / "rank0.json").read_text()
    for target in ("parameters.csv", "rank0.json"):
        status, out, err = run(capsys, "profile", "--trace", job, "--output", job / target)
        assert status == 2 and out == ""
        assert err == f"fusionopt: error: --output {job / target} is a file of the recording --trace {job}: writing " \
                      "it would lose the input; give another file\n"
    assert (job / "parameters.csv").read_text() == listing and (job / "rank0.json").read_text() == trace
    # The job's step measured without the profiler is part of the recording too, empty or not.
    for text in ("{}", ""):
        (job / "unprofiled.json").write_text(text)
        status, out, err = run(capsys, "profile", "--trace", job, "--output", job / "unprofiled.json")
        assert status == 2 and (job / "unprofiled.json").read_text() == text
    assert err.splitlines()[-1] == f"fusionopt: error: --output {job / 'unprofiled.json'} is a file --trace {job} " \
                                   "read: writing it would lose the input; give another file"
    # A profile in the folder, named by no file of the recording, may be replaced.
    (tmp_path / "params.csv").write_text(listing)
    for _ in range(2):
        assert run(capsys, "profile", "--trace", job, "--parameters", tmp_path / "params.csv",
                   "--output", job / "profile.csv")[0] == 0
    assert read_profile_csv(job / "profile.csv").names == tuple(n for n, _ in PARAMS)


# ---------------------------------------------------------------- 2. a trace cut short
def threaded(trace):
    """``trace`` with its backward on an autograd thread of its own (tid 2), as torch runs it."""
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and ("autograd" in e["name"]):
            e["tid"] = 2
    return trace


def cut(trace, tid, at):
    """``trace`` less thread ``tid``'s events from ``at`` us on (a cut drops a thread's tail)."""
    return dict(trace, traceEvents=[e for e in trace["traceEvents"]
                                    if not (e.get("tid") == tid and e.get("ts", 0) >= at)])


def three_step_trace():
    trace = two_step_trace()
    trace["traceEvents"] += cpu_step(2000, 110, 60, [355, 365, 430, 440], step=3)
    return threaded(trace)


def test_a_trace_that_lost_its_forward_is_refused(tmp_path):
    # Without the forward thread the reader found no forward operator and read F = 0.
    trace = threaded(two_step_trace())
    backward_only = dict(trace, traceEvents=[e for e in trace["traceEvents"] if e.get("tid") != 1])
    with pytest.raises(ValueError, match=r"^trace: iteration 2 \(found from its backward\): no forward operator found "
                                         r"for any of the 4 parameters .*\(a trace cut off\?\)$"):
        profile_from_trace(backward_only, PARAMS)
    # The main thread cut inside step 2's forward (after Linear_0, before Linear_1).
    with pytest.raises(ValueError, match=r"^trace: ProfilerStep#2: no forward found for 2 parameters whose forward "
                                         r"other steps show \('fc2.weight', 'fc2.bias'\): part of the step is not"):
        profile_from_trace(cut(trace, 1, 1140), PARAMS)
    # The main thread cut before step 2: its backward lies outside every ProfilerStep.
    with pytest.raises(ValueError, match=r"^trace: 4 AccumulateGrad events lie outside every ProfilerStep \(about 1 "
                                         r"backward passes\): the host thread that ran the steps is not all"):
        profile_from_trace(cut(trace, 1, 1000), PARAMS)
    # The whole trace reads as before: F = 290 us.
    assert profile_from_trace(trace, PARAMS).F == pytest.approx(290 * US)


def test_a_step_without_its_backward_is_named():
    trace = three_step_trace()
    with pytest.raises(ValueError, match=r"^trace: ProfilerStep#2 holds no backward \(no AccumulateGrad event\), "
                                         r"though the trace holds others: this step's backward is not in the trace"):
        profile_from_trace(cut(trace, 2, 1000), PARAMS)


def test_parameters_whose_forward_no_step_shows_are_named():
    # fc2's forward operators (sequence numbers k3 and k4 of each step) are not in the trace.
    trace = two_step_trace()
    trace["traceEvents"] = [e for e in trace["traceEvents"]
                            if not (e.get("cat") == "cpu_op" and e["args"].get("Sequence number") in (13, 14, 23, 24)
                                    and not e["name"].startswith("autograd"))]
    with pytest.warns(UserWarning, match=r"^trace: no forward operator found for 2 of 4 parameters \('fc2.weight', "
                                         r"'fc2.bias'\): their forward time is 0$"):
        p = profile_from_trace(trace, PARAMS)
    assert p.metadata["forward_unmatched"] == ["fc2.weight", "fc2.bias"]
    assert (p.forward / US).round(6).tolist()[2:] == [0.0, 0.0]


def gpu_job():
    """:func:`three_step_trace` on a GPU: each step launches a kernel from the forward (tid 1,
    300 us) and one from the backward (tid 2, 400 us), so the GPU is busy 70% of each step."""
    trace = three_step_trace()
    for k, t0 in enumerate((0, 1000, 2000)):
        trace["traceEvents"] += [
            op("cudaLaunchKernel", t0 + 25, 2, tid=1, cat="cuda_runtime", correlation=10 * k + 1),
            op("gemm", t0 + 30, 300, tid=7, cat="kernel", correlation=10 * k + 1),
            op("cudaLaunchKernel", t0 + 315, 2, tid=2, cat="cuda_runtime", correlation=10 * k + 2),
            op("gemm_backward", t0 + 340, 400, tid=7, cat="kernel", correlation=10 * k + 2),
        ]
    return trace


def test_a_trace_that_lost_gpu_events_is_refused():
    whole = profile_from_trace(gpu_job(), PARAMS)
    assert whole.metadata["timeline"] == "gpu" and whole.metadata["gpu_busy_fraction"] == pytest.approx(0.7)
    # The device's thread cut in step 3: its launches have no kernel.
    with pytest.raises(ValueError, match=r"^trace: 2 of the 6 kernel launches in the steps have no kernel on the "
                                         r"GPU's timeline: .*timeline='cpu' reads the host's clock alone$"):
        profile_from_trace(cut(gpu_job(), 7, 2000), PARAMS)
    # The autograd thread's launches cut after step 2 (its operators kept).
    lost_launches = gpu_job()
    lost_launches["traceEvents"] = [e for e in lost_launches["traceEvents"]
                                    if not (e.get("cat") == "cuda_runtime" and e["tid"] == 2 and e["ts"] >= 2000)]
    with pytest.raises(ValueError, match=r"^trace: thread 2 launches kernels up to ProfilerStep#2 and none in "
                                         r"ProfilerStep#3: the device's events are not all in the trace"):
        profile_from_trace(lost_launches, PARAMS)
    # Every launch gone, the kernels kept.
    no_launches = gpu_job()
    no_launches["traceEvents"] = [e for e in no_launches["traceEvents"] if e.get("cat") != "cuda_runtime"]
    with pytest.raises(ValueError, match=r"^trace: GPU work in the steps but no kernel launch on the host"):
        profile_from_trace(no_launches, PARAMS)
    # On the host's clock the host's events, all there, are read.
    host = profile_from_trace(cut(gpu_job(), 7, 2000), PARAMS, timeline="cpu")
    assert host.metadata["timeline"] == "cpu" and host.metadata["steps"] == 3


def test_truncated_files_do_not_parse(tmp_path):
    text = json.dumps(two_step_trace())
    (tmp_path / "cut.pt.trace.json").write_text(text[: len(text) // 2])
    (tmp_path / "cut.pt.trace.json.gz").write_bytes(gzip.compress(text.encode())[:300])
    with pytest.raises(ValueError, match=r"cut.pt.trace.json: malformed JSON at line 1"):
        profile_from_trace(tmp_path / "cut.pt.trace.json", PARAMS)
    with pytest.raises(ValueError, match=r"cut.pt.trace.json.gz: a gzip file that does not decompress .*truncated"):
        profile_from_trace(tmp_path / "cut.pt.trace.json.gz", PARAMS)


# ---------------------------------------------------------------- 3. what `traced` predicts
def test_traced_names_the_measured_parts_and_the_predicted_ones_error(tmp_path, capsys):
    # Measured exposed wait 300 us (the copy 100 us after the 200 us all-reduce), predicted
    # 200 us: that part is off by -1/3, the step (1000 us) by -10%.
    job = write_job(tmp_path / "job", copy_delay=100)
    r = predict_traced_step(job)
    assert round(r.exposed_error, 9) == round(-1 / 3, 9) and round(r.exposed_difference / US, 6) == -100.0
    assert round(r.error, 9) == -0.1 and round(r.copied_difference / US, 6) == 0.0
    assert all(r.predicted_parts[part] == pytest.approx(r.measured_parts[part], abs=1e-12) for part in COPIED_PARTS)
    status, out, _ = run(capsys, "traced", job)
    assert status == 0
    assert "forward                0.290         0.290   (copied from the trace)" in out
    assert "exposed                0.300         0.200   the model: error -33.3% (-0.100 ms)" in out
    assert "The step's error, -0.100 ms, is the exposed part's -0.100 ms and +0.000 ms from the copied parts" in out
    assert "\nTimed by the host's clock: no GPU work in the trace.\nWithout the profiler" in out
    status, out, _ = run(capsys, "traced", job, "--json")
    doc = json.loads(out)
    assert round(doc["exposed_error"], 9) == round(-1 / 3, 9) and doc["predicted_part"] == "exposed"
    assert doc["copied_parts"] == list(COPIED_PARTS) and doc["clock"] == "the host's clock: no GPU work in the trace"
    # The copy on time: the measured wait is the all-reduce's 200 us, as predicted.
    on_time = predict_traced_step(write_job(tmp_path / "on-time", copy_delay=0))
    assert on_time.measured_parts["exposed"] == pytest.approx(200 * US) and on_time.exposed_error == pytest.approx(0.0)


# ---------------------------------------------------------------- 4. incomplete rank sets
def test_traced_refuses_an_incomplete_job(tmp_path, capsys):
    alone = write_job(tmp_path / "alone", ranks=(0,))
    with pytest.raises(ValueError, match=r"alone: rank 1 of a world of 2 missing \(traces of rank 0 only\): give "
                                         r"every rank's trace$"):
        predict_traced_step(alone)
    status, _, err = run(capsys, "traced", alone)
    assert status == 2 and err.count("\n") == 1 and "rank 1 of a world of 2 missing" in err
    with pytest.warns(UserWarning, match=r"rank 1 of a world of 2 have no trace here: the profile is rank 0's"):
        profile_from_traces(alone, PARAMS)
    mixed = write_job(tmp_path / "mixed")
    trace = ddp_job(1)
    trace["distributedInfo"]["world_size"] = 4
    (mixed / "rank1.json").write_text(json.dumps(trace))
    with pytest.raises(ValueError, match=r"rank1.json: a world of 4 ranks, but rank0.json claims 2: give the traces "
                                         r"of one job$"):
        predict_traced_step(mixed)
    outside = write_job(tmp_path / "outside", ranks=(0, 3))
    with pytest.raises(ValueError, match=r"rank3.json: rank 3 outside its world of 2 ranks$"):
        predict_traced_step(outside)


# ---------------------------------------------------------------- 5. statistic and clock
def test_profile_says_its_clock_and_takes_the_statistic_traced_takes(tmp_path, capsys):
    # Three steps whose backwards last 130, 150 and 180 us: median 150, mean 153.333 us.
    job = tmp_path / "job"
    job.mkdir()
    for rank in (0, 1):
        trace = two_step_trace()
        trace["traceEvents"] += cpu_step(2000, 110, 60, [355, 365, 450, 480], step=3)
        trace["traceEvents"] += ddp_tail(0, 430) + ddp_tail(1000, 450) + ddp_tail(2000, 480)
        trace["distributedInfo"] = {"rank": rank, "world_size": 2}
        (job / f"rank{rank}.json").write_text(json.dumps(trace))
    status, out, _ = run(capsys, "profile", "--trace", job, "--parameters", write_parameters(tmp_path),
                         "--statistic", "mean", "--output", tmp_path / "mean.json")
    assert status == 0 and out.rstrip().endswith("; timed by the host's clock: no GPU work in the trace")
    mean = Profile.read(tmp_path / "mean.json")
    assert round(mean.B / US, 6) == round(460 / 3, 6) and mean.metadata["statistic"] == "mean"
    traced = predict_traced_step(job, PARAMS).profile
    assert mean.B == pytest.approx(traced.B, abs=1e-12) and mean.parts == pytest.approx(traced.parts, abs=1e-12)
    assert run(capsys, "profile", "--trace", job, "--parameters", write_parameters(tmp_path),
               "--output", tmp_path / "median.json")[0] == 0
    median = Profile.read(tmp_path / "median.json")
    assert round(median.B / US, 6) == 150.0 and median.metadata["statistic"] == "median"
    for flag, value in (("--statistic", "mean"), ("--timeline", "cpu")):
        status, _, err = run(capsys, "profile", "--model", "resnet18", flag, value)
        assert status == 2 and err == f"fusionopt: error: {flag} goes with --trace\n"


def test_the_help_states_the_clock_rule(capsys):
    # A host-bound GPU trace is read on the host's clock: "GPU kernels if present" was not the rule.
    for command in ("profile", "traced"):
        status, out, _ = run(capsys, command, "--help")
        assert status == 0
        assert "where the trace holds GPU kernels and the steps are GPU-bound (the GPU busy at least 50% of their " \
               "host time), else the host's" in " ".join(out.split())


# ---------------------------------------------------------------- 6. recording
def test_recording_needs_no_main_guard_and_refuses_a_used_folder(tmp_path):
    pytest.importorskip("torch")
    from fusionopt.integrations import record_ddp_traces

    script = tmp_path / "record.py"        # no `if __name__ == "__main__":`
    script.write_text(textwrap.dedent(f"""
        from fusionopt.integrations import record_ddp_traces
        files = record_ddp_traces({str(tmp_path / "job")!r}, "mlp", batch=4, steps=3)
        print(sorted(f.name.split(".")[0] for f in files))
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "['parameters', 'profiler_cost', 'rank0', 'rank1', 'unprofiled']"
    with pytest.raises(ValueError, match=r"job: already holds a recording \(parameters.csv, profiler_cost.json, "
                                         r"\.\.\.\): a second "
                                         r"job's traces would read as one job with it; record into a new folder$"):
        record_ddp_traces(tmp_path / "job", "mlp", batch=4, steps=3)


# ---------------------------------------------------------------- 7. a parameter file
def test_the_readers_take_a_parameter_file_as_the_command_line_does(tmp_path):
    trace = two_step_trace()
    (tmp_path / "params.csv").write_text("name,size_bytes\n" + "".join(f"{n},{s}\n" for n, s in PARAMS))
    (tmp_path / "params.json").write_text(json.dumps(PARAMS))
    given = profile_from_trace(trace, PARAMS)
    assert profile_from_trace(trace, tmp_path / "params.csv") == given
    assert profile_from_trace(trace, str(tmp_path / "params.json")) == given
    job = write_job(tmp_path / "job")
    assert profile_from_traces(job, job / "parameters.csv") == profile_from_traces(job, PARAMS)
    (tmp_path / "bad.csv").write_text("name,bytes\nfc1.weight,4096\n")
    with pytest.raises(ValueError, match=r"bad.csv: a parameter list needs 'name' and 'size_bytes' columns"):
        profile_from_trace(trace, tmp_path / "bad.csv")


# ---------------------------------------------------------------- 8. a one-rank job
def test_a_one_rank_jobs_collectives_are_named_as_no_communication(tmp_path):
    job = write_job(tmp_path / "job", ranks=(0,), world_size=1)
    with pytest.warns(UserWarning, match=r"rank0.json: a job of one rank \(world size 1\): its all-reduces move no "
                                         r"data between ranks, so their times are local overhead, not communication"):
        sizes, seconds, how = collective_samples(job)
    assert how == "one rank" and sizes.tolist() == [4840.0, 4840.0]
