"""Ctrl-C in a terminal, for the tests of the validation scripts: a command run in a session of
its own whose whole process group is interrupted when it reports a given stage."""

from __future__ import annotations

import os
import signal
import subprocess
import time


def interrupt_on(command: list[str], trigger: str, *, read_for: float = 240.0, exit_within: float = 120.0,
                 gone_within: float = 15.0) -> tuple[int | None, list[str], list[str]]:
    """Run ``command`` and send SIGINT to its process group once a line of its standard error
    starts with ``trigger`` (reading at most ``read_for`` seconds). Returns its exit status
    (None where it did not exit within ``exit_within`` s), its standard error's lines and the
    processes of its group still there ``gone_within`` s after it exited (``ps`` rows, zombies
    left out). Whatever remains is killed before returning."""
    process = subprocess.Popen(command, start_new_session=True, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                               text=True)
    lines: list[str] = []
    status: int | None = None
    left: list[str] = []
    try:
        deadline = time.monotonic() + read_for
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
            if line.startswith(trigger):
                os.killpg(process.pid, signal.SIGINT)
                break
        lines += process.stderr.read().splitlines()
        try:
            status = process.wait(timeout=exit_within)
        except subprocess.TimeoutExpired:
            return None, lines, left
        # multiprocessing's resource tracker leaves a moment after the script
        deadline = time.monotonic() + gone_within
        while True:
            table = subprocess.run(["ps", "-eo", "pgid=,args="], capture_output=True, text=True).stdout
            left = [row for row in table.splitlines() if row.split()[0] == str(process.pid) and "<defunct>" not in row]
            if not left or time.monotonic() >= deadline:
                return status, lines, left
            time.sleep(0.5)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
