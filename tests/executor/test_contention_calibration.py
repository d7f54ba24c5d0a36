"""The contention calibration's arithmetic on a fake device (no GPU needed).

The fake device runs the calibration's two streams as MODEL.md section 6 says a GPU slows
them: GEMMs at ``1 / kappa`` while a message transfers, a message at ``1 / mu`` while GEMMs
run, spins neither slowed nor slowing. Under those rules the calibration must find ``kappa``
and ``mu`` again, whatever the first guess of how much of the other side covers a run.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import pytest

from fusionopt.cli import main
from fusionopt.executor import (
    CONTENTION_SCHEMA, Contention, ContentionSpec, contention_factors, measure_rank, read_contention,
)
from fusionopt.executor import LocalGroup, run_threads, Streams
from fusionopt.cost import AlphaBeta
from fusionopt.model import Plan, Profile


class Event:
    def __init__(self) -> None:
        self.time: float | None = None


class ContendedDevice(Streams):
    """Two streams of queued operations, run together on a fluid clock (module docstring)."""

    mode = "gemm"

    def __init__(self, kappa: float, mu: float) -> None:
        self.kappa, self.mu = kappa, mu
        self.compute, self.communication = "compute", "communication"
        self.queues: dict[str, list] = {"compute": [], "communication": []}
        self.position = {"compute": 0, "communication": 0}
        self.left = {"compute": None, "communication": None}
        self.clock = 0.0

    def record(self, stream):
        event = Event()
        self.queues[stream].append(("record", event))
        return event

    def wait(self, stream, event):
        self.queues[stream].append(("wait", event))

    def work(self, stream, seconds):
        if seconds > 0:
            self.queues[stream].append(("gemm" if stream == "compute" else "transfer", seconds))

    def spin(self, stream, seconds):
        self.queues[stream].append(("spin", seconds))

    def transfer(self, seconds):
        self.queues["communication"].append(("transfer", seconds))

    def elapsed(self, start, end):
        self._run()
        return end.time - start.time

    def done(self, event):
        self._run()
        return event.time is not None

    def _active(self, stream):
        """The kind of work ``stream`` is doing now, after its instantaneous operations."""
        queue = self.queues[stream]
        while self.position[stream] < len(queue):
            kind, item = queue[self.position[stream]]
            if kind == "record":
                item.time = self.clock
            elif kind == "wait":
                if item.time is None:
                    return None
            else:
                if self.left[stream] is None:
                    self.left[stream] = item
                if self.left[stream] > 0:
                    return kind
                self.left[stream] = None
            self.position[stream] += 1
        return None

    def _run(self):
        while True:
            kinds = {s: self._active(s) for s in self.queues}
            if not any(kinds.values()):
                return
            rate = {"compute": 1 / self.kappa if kinds["compute"] == "gemm" and kinds["communication"] == "transfer"
                    else 1.0,
                    "communication": 1 / self.mu if kinds["communication"] == "transfer" and kinds["compute"] == "gemm"
                    else 1.0}
            step = min(self.left[s] / rate[s] for s in kinds if kinds[s])
            self.clock += step
            for s in kinds:
                if kinds[s]:
                    left = self.left[s] - step * rate[s]
                    self.left[s] = 0.0 if left <= 1e-15 else left


class FakeComm:
    """A thread rank whose all-reduce sums for real and holds its device's channel for c(S)."""

    def __init__(self, inner, device: ContendedDevice, cost) -> None:
        self.inner, self.device, self.cost = inner, device, cost

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def allreduce(self, buffer, *, timeout, tag=None):
        self.inner.allreduce(buffer, timeout=timeout, tag=tag)
        self.device.transfer(float(self.cost(buffer.nbytes)))


LINK = AlphaBeta(28e-6, 1.4e-10)
# The fake device has no launch queue: the cap on the kernels a run queues is lifted.
SPEC = ContentionSpec(sizes=(1 << 10, 1 << 16), batch_seconds=0.005, trials=2, max_launches=10**6)


def calibrate_on(devices, spec=SPEC):
    group = LocalGroup(len(devices))
    comms = [FakeComm(c, d, LINK) for c, d in zip(group.communicators(), devices)]
    records = run_threads([lambda c=c, d=d: measure_rank(c, d, spec) for c, d in zip(comms, devices)], group)
    return records, contention_factors(records)


def test_the_device_slows_both_ways():
    # The fake itself, by hand: 2 ms of GEMMs beside 3 ms of transfer, kappa 2, mu 4. Both
    # slowed until the GEMMs end: they need 4 ms, in which the transfer sends 1 ms; then the
    # transfer sends its last 2 ms alone: ends at 6 ms.
    device = ContendedDevice(2.0, 4.0)
    origin = device.record("compute")
    device.wait("communication", origin)
    device.work("compute", 2e-3)
    device.transfer(3e-3)
    gemms, messages = device.record("compute"), device.record("communication")
    assert device.elapsed(origin, gemms) == pytest.approx(4e-3, rel=1e-12)
    assert device.elapsed(origin, messages) == pytest.approx(6e-3, rel=1e-12)


@pytest.mark.parametrize("kappa, mu", [(1.0, 1.0), (1.3, 6.0), (2.5, 1.0), (1.05, 40.0)])
def test_the_calibration_finds_both_factors(kappa, mu):
    records, (found_kappa, found_mu, measured) = calibrate_on([ContendedDevice(kappa, mu)])
    assert found_kappa == pytest.approx(kappa, rel=1e-9)
    assert found_mu == pytest.approx(mu, rel=1e-9)
    for size in ("1024", "65536"):
        row = measured[size]
        assert row["contention"] == pytest.approx(kappa, rel=1e-9)
        assert row["comm_contention"] == pytest.approx(mu, rel=1e-9)
        # A batch lasts about batch_seconds alone: c(1 KiB) = 28.14 us, so 178 messages.
        assert row["messages"] == int(np.ceil(SPEC.batch_seconds / float(LINK(int(size)))))
        assert row["messages_alone"] == pytest.approx(row["messages"] * float(LINK(int(size))), rel=1e-9)
        assert row["gemms_alone"] == pytest.approx(SPEC.batch_seconds, rel=1e-9)


def test_the_slowest_rank_counts():
    _, (kappa, mu, _) = calibrate_on([ContendedDevice(1.2, 3.0), ContendedDevice(1.5, 5.0)])
    assert kappa == pytest.approx(1.5, rel=1e-9) and mu == pytest.approx(5.0, rel=1e-9)


def test_a_cover_that_never_outlasts_is_an_error():
    # mu 40 with one doubling allowed: 4 batches of GEMMs cannot outlast 40 batches of messages.
    with pytest.raises(RuntimeError, match=r"GEMMs doubled 1 times still ended before the messages"):
        calibrate_on([ContendedDevice(1.0, 40.0)], ContentionSpec(sizes=(1 << 10,), batch_seconds=0.005,
                                                                  trials=1, rounds=1, max_launches=10**6))


class GemmDevice(ContendedDevice):
    """The fake with GEMMs of 12.5 us, as ``CudaStreams`` times them on an H100."""

    gemm_seconds = 12.5e-6


def test_a_run_longer_than_the_launch_queue_is_refused():
    # c(1 KiB) = 28.14 us: 5 ms is 178 messages, 712 kernels, + the GEMMs' spin + the origin's
    # spin = 714 alone; with max_launches 700 the first run is refused before anything is queued.
    spec = ContentionSpec(sizes=(1 << 10,), batch_seconds=0.005, trials=1, max_launches=700)
    with pytest.raises(RuntimeError, match=r"a run of 178 messages and 0 ms of GEMMs queues 714 kernels, "
                                           r"more than max_launches=700"):
        calibrate_on([GemmDevice(1.0, 1.0)], spec)
    # The GEMMs count one kernel each: 2 x 5 ms covering the messages is 10 ms // 12.5 us = 799
    # GEMMs in floating point and a spin for the rest, as CudaStreams.work queues them.
    spec = ContentionSpec(sizes=(1 << 10,), batch_seconds=0.005, trials=1, max_launches=1400)
    with pytest.raises(RuntimeError, match=r"a run of 178 messages and 10 ms of GEMMs queues 1513 kernels"):
        calibrate_on([GemmDevice(1.0, 1.0)], spec)


class SlowHost(ContendedDevice):
    """A host that takes 2 ms to queue each GEMM batch: never ahead of a spin of microseconds."""

    def work(self, stream, seconds):
        time.sleep(2e-3)
        super().work(stream, seconds)


def test_a_host_that_never_gets_ahead_is_an_error_not_an_endless_spin():
    # Spins of 1, 4 and 16 us, then the error: the host took over half of each to queue.
    spec = ContentionSpec(sizes=(1 << 10,), batch_seconds=0.005, trials=1, spin=1e-6, rounds=2, max_launches=10**6)
    with pytest.raises(RuntimeError, match=r"the host still took over half the 1.6e-05 s spin to queue a run of "
                                           r"3 messages after 2 longer spins"):
        calibrate_on([SlowHost(1.0, 1.0)], spec)


def test_ratios_below_one_are_recorded_and_floored():
    # Noise can make a span under contention shorter than alone: the factor is 1, the ratio kept.
    record = {"sizes": {"8": {"messages": 1, "messages_alone": [2.0, 2.0, 2.0], "messages_under_gemms": [1.9] * 3,
                              "gemms_alone": [1.0] * 3, "gemms_under_messages": [1.1] * 3}}}
    kappa, mu, measured = contention_factors([record])
    assert (kappa, mu) == (pytest.approx(1.1), 1.0)
    assert measured["all"]["comm_contention"] == pytest.approx(0.95)


def test_the_file_round_trips_and_the_command_line_reads_it(tmp_path, capsys):
    _, (kappa, mu, measured) = calibrate_on([ContendedDevice(2.0, 2.0)])
    path = tmp_path / "contention.json"
    Contention(kappa, mu, measured, description="fake", device="Fake GPU", versions={"nccl": "0"}).write(path)
    document = json.loads(path.read_text())
    assert document["schema"] == CONTENTION_SCHEMA and document["device"] == "Fake GPU"
    assert read_contention(path) == (pytest.approx(2.0, rel=1e-9), pytest.approx(2.0, rel=1e-9))
    # MODEL.md section 6's worked example: WFBP under kappa = mu = 2 takes 19 ms.
    common = [*simulate_worked_example(tmp_path), "--json"]
    assert main([*common, "--contention-file", str(path)]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert main([*common, "--contention", "2", "--comm-contention", "2"]) == 0
    from_flags = json.loads(capsys.readouterr().out)
    assert from_file["iteration_time"] == pytest.approx(19e-3, rel=1e-9)
    assert from_flags["iteration_time"] == pytest.approx(19e-3, rel=1e-12)


def simulate_worked_example(folder) -> list[str]:
    """``fusionopt simulate`` of WFBP on MODEL.md section 5's profile, alpha 1 ms."""
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    profile.write(folder / "p.json")
    Plan.per_tensor(profile).write(folder / "plan.json")
    return ["simulate", str(folder / "p.json"), "--plan", str(folder / "plan.json"), "--alpha", "1e-3",
            "--beta", "1e-9"]


def test_bad_contention_files_and_flags_get_one_line(tmp_path, capsys):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"schema": CONTENTION_SCHEMA, "version": 1, "contention": 1.2,
                                "comm_contention": 0.5}))
    common = simulate_worked_example(tmp_path)
    assert main([*common, "--contention-file", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (f"fusionopt: error: {path}: comm_contention must be a finite "
                                               "number >= 1, got 0.5")
    # A file of another version is named as such, not read as this one's.
    for version in (2, None):
        path.write_text(json.dumps({"schema": CONTENTION_SCHEMA, "version": version, "contention": 1.2,
                                    "comm_contention": 1.1}))
        assert main([*common, "--contention-file", str(path)]) == 2
        assert capsys.readouterr().err.strip() == (f"fusionopt: error: {path}: unsupported contention version "
                                                   f"{version!r}: this fusionopt reads version 1")
    path.write_text(json.dumps({"alpha": 1.0}))
    assert main([*common, "--contention-file", str(path)]) == 2
    assert "not a contention file" in capsys.readouterr().err
    assert main([*common, "--contention-file", str(path), "--contention", "1.5"]) == 2
    assert capsys.readouterr().err.strip() == ("fusionopt: error: --contention-file gives both slowdowns: leave "
                                               "--contention out")
    assert main([*common, "--comm-contention", "0.5"]) == 2
    assert capsys.readouterr().err.strip() == "fusionopt: error: comm_contention must be >= 1, got 0.5"
    solve = ["solve", common[1], "--alpha", "1e-3", "--beta", "1e-9"]
    assert main([*solve, "--ps-servers", "2", "--comm-contention", "2"]) == 2
    assert capsys.readouterr().err.strip() == ("fusionopt: error: --ps-servers cannot be combined with "
                                               "--comm-contention or --contention-file")
    assert main([*solve, "--decoupled", "--comm-contention", "2"]) == 2
    assert capsys.readouterr().err.strip() == ("fusionopt: error: the decoupled all-reduce does not combine with "
                                               "comm_contention (comm_contention=2.0); leave one of them out")


def test_calibrate_contention_without_a_gpu_is_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "cupy", None)
    output = tmp_path / "contention.json"
    assert main(["calibrate", "--backend", "nccl", "--contention", "--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("fusionopt: error: the nccl backend needs CuPy with NCCL")
    assert not output.exists()
    assert main(["calibrate", "--backend", "local", "--contention"]) == 2
    assert capsys.readouterr().err.strip() == ("fusionopt: error: --contention measures GEMMs and collectives sharing "
                                               "a GPU: it needs --backend nccl, not local")
    assert main(["calibrate", "--backend", "nccl", "--contention", "--min-bytes", "1024"]) == 2
    assert "--min-bytes belongs to the cost sweep" in capsys.readouterr().err


def test_the_gpu_command_finds_the_contention_mode(capsys):
    # validation/gpu/run.py runs its contention stage when calibrate --help names --contention.
    assert main(["calibrate", "--help"]) == 0
    assert "--contention " in capsys.readouterr().out
