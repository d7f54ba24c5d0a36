"""``fusionopt run --backend mpi`` stopped by Ctrl-C or SIGTERM: one line, and no process of the job left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from executor_helpers import small_profile
from fusionopt.model import Plan

pytest.importorskip("mpi4py")
pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")

MARKER = "FUSIONOPT_RUN_INTERRUPT_TEST"


def job_processes(token: str) -> list[int]:
    """Processes whose environment carries ``MARKER=token``: the run, mpiexec, its proxy, the ranks."""
    wanted = f"{MARKER}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if wanted in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def ranks_of(token: str) -> list[int]:
    ranks = []
    for pid in job_processes(token):
        try:
            if b"fusionopt.executor" in Path(f"/proc/{pid}/cmdline").read_bytes():
                ranks.append(pid)
        except OSError:
            continue
    return ranks


def start_long_run(tmp_path: Path) -> tuple[subprocess.Popen, str]:
    profile = small_profile()
    profile.write(tmp_path / "profile.json")
    Plan.per_tensor(profile).write(tmp_path / "plan.json")
    token = uuid.uuid4().hex
    env = {**os.environ, MARKER: token}
    # About 7 ms a step: a million steps would run for hours.
    process = subprocess.Popen(
        [sys.executable, "-m", "fusionopt", "run", str(tmp_path / "profile.json"), "--plan",
         str(tmp_path / "plan.json"), "--alpha", "1e-4", "--beta", "1e-9", "--backend", "mpi", "--ranks", "2",
         "--iterations", "1000000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    deadline = time.monotonic() + 60
    while len(ranks_of(token)) < 2:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the MPI ranks did not start within 60 s"
        time.sleep(0.1)
    time.sleep(1.0)                                   # the ranks are in their step loop
    return process, token


def left_behind(token: str, grace: float = 2.0) -> list[int]:
    """The job's processes still alive ``grace`` seconds after the command ended (zombies aside)."""
    deadline = time.monotonic() + grace
    while True:
        alive = []
        for pid in job_processes(token):
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                alive.append(pid)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_ends_the_run_and_every_rank(tmp_path, sig, status):
    process, token = start_long_run(tmp_path)
    try:
        process.send_signal(sig)
        out, err = process.communicate(timeout=15)
        alive = left_behind(token)
    finally:
        for pid in [process.pid] + job_processes(token):   # whatever the run left, this test ends
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert alive == []
    assert process.returncode == status, err
    assert "Traceback" not in err and err.count("\n") <= 1
    if sig == signal.SIGINT:
        assert err.count("\n") == 1 and err.startswith("fusionopt: "), err
    assert left_behind(token) == []


def test_an_interrupted_local_run_stops_its_rank_threads():
    """Ctrl-C in a Python session (KeyboardInterrupt in the main thread) leaves no rank thread running."""
    import threading

    from executor_helpers import small_problem
    from fusionopt.executor import run

    problem = small_problem()
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        run(problem, Plan.per_tensor(problem.profile), "local", ranks=2, iterations=1000000)
    deadline = time.monotonic() + 5.0
    while [t for t in threading.enumerate() if t.name.startswith("fusionopt-")] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [t.name for t in threading.enumerate() if t.name.startswith("fusionopt-")] == []
