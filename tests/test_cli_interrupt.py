"""The command line stopped from outside: Ctrl-C (SIGINT) and a reader that leaves the pipe.

Ctrl-C ends every command with one line on stderr and exit status 130; an anytime search
(``sharded-opt``, ``layerwise-opt``, ``gradssa``) first prints, and with ``--output``
writes, its best plan so far, certified like any result, status ``INTERRUPTED``. A closed
stdout (``fusionopt methods | head -2``) ends the command without a word, status 1, as the
Python documentation's recipe for ``BrokenPipeError`` does."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from fusionopt import cli, experiments, model, solvers
from fusionopt.cost import AlphaBeta
from fusionopt.model import FullySharded, Plan, Problem, Profile, ShardedPlan, simulate

ENDLESS = "1000000000"
# Each search with a budget it does not reach before the interrupt: the flags of its
# problem, its options, and the same problem built here to re-simulate the printed plan.
SEARCHES = {
    "gradssa": (["--alpha", "5e-4", "--beta", "2e-10"], [f"iterations={ENDLESS}"],
                lambda profile: Problem(profile, AlphaBeta(5e-4, 2e-10))),
    "layerwise-opt": (["--alpha", "3e-4", "--beta", "1e-9", "--sync", "layerwise"],
                      [f"kicks={ENDLESS}", "time_limit=1000000"],
                      lambda profile: Problem(profile, AlphaBeta(3e-4, 1e-9), sync="layerwise")),
    "sharded-opt": (["--alpha", "2e-4", "--beta", "1e-9", "--fully-sharded"],
                    [f"kicks={ENDLESS}", f"max_evaluations={ENDLESS}", "time_limit=1000000", "atoms=tensor"],
                    lambda profile: Problem(profile, pattern=FullySharded(AlphaBeta(2e-4, 1e-9),
                                                                                AlphaBeta(2e-4, 1e-9)))),
}


def profile_file(folder: Path, n: int = 40) -> Path:
    rng = np.random.default_rng(7)
    profile = Profile.from_arrays(rng.integers(1, 50, n) * 100_000, rng.uniform(0.1, 1.0, n) * 1e-3,
                                  rng.uniform(0.2, 2.0, n) * 1e-3)
    path = folder / "profile.json"
    profile.write(path)
    return path


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (Linux's /proc; a pool's workers may hang below a server)."""
    try:
        children = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    return children + [d for child in children for d in _descendants(child)]


def _sigint_as_usual() -> None:
    # A test run started in the background has SIGINT ignored; the command must see it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt_when(argv: list[str], ready: str, stdout_path: Path) -> tuple[int, list[str]]:
    """Run ``fusionopt ARGV``, send SIGINT once a stderr line contains ``ready``; returns the
    exit status and every stderr line (stdout goes to ``stdout_path``)."""
    with open(stdout_path, "w") as stdout:
        process = subprocess.Popen([sys.executable, "-m", "fusionopt", *argv], stdout=stdout,
                                   stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_as_usual)
    watchdog = threading.Timer(120, process.kill)          # a command that never gets ready fails, not hangs
    watchdog.start()
    try:
        lines = []
        while not lines or ready not in lines[-1]:
            line = process.stderr.readline()
            assert line, f"the command ended before {ready!r}: {lines}"
            lines.append(line.rstrip("\n"))
        process.send_signal(signal.SIGINT)
        lines += process.stderr.read().splitlines()
        status = process.wait()
    finally:
        watchdog.cancel()
        if process.poll() is None:
            process.kill()
    return status, lines


@pytest.mark.parametrize("method", sorted(SEARCHES))
def test_ctrl_c_in_a_search_prints_and_writes_its_best_plan_so_far(tmp_path, method):
    flags, options, problem_of = SEARCHES[method]
    profile_path = profile_file(tmp_path)
    plan_path, out_path = tmp_path / "plan.json", tmp_path / "out.json"
    argv = ["solve", str(profile_path), "--method", method, *flags, "--json", "--output", str(plan_path)]
    for option in options:
        argv += ["--option", option]
    status, lines = interrupt_when(argv, "still searching", out_path)

    assert status == 130, lines
    # The search's own notice, then one line for the interrupt; no traceback.
    assert len(lines) == 2 and lines[0].startswith(f"fusionopt: {method}: still searching"), lines
    assert lines[1] == (f"fusionopt: interrupted; the best plan {method} found so far is printed "
                        f"(status INTERRUPTED) and written to {plan_path}")
    document = json.loads(out_path.read_text())
    assert document["status"] == "INTERRUPTED" and document["method"] == method
    written = json.loads(plan_path.read_text())
    assert written == document["plan"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "plan.json", "profile.json"]
    # The plan is valid and re-simulates to the printed T, at or above the printed bound.
    problem = problem_of(Profile.read(profile_path))
    plan = (ShardedPlan if method == "sharded-opt" else Plan).read(plan_path)
    assert simulate(problem, plan, validate=True).iteration_time == document["iteration_time"]
    assert document["lower_bound"] <= document["iteration_time"]


def in_process(capsys, *argv) -> tuple[int, str, str]:
    try:
        status = cli.main([str(a) for a in argv])
    except KeyboardInterrupt:
        pytest.fail("the interrupt went through main() as a traceback")
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def interrupting(*args, **kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_in_any_command_is_one_line_and_status_130(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(solvers, "compare", interrupting)
    status, out, err = in_process(capsys, "compare", "--model", "alexnet", "--network", "10gbe", "--workers", 8)
    assert (status, out, err) == (130, "", "fusionopt: interrupted\n")
    monkeypatch.setattr(model, "simulate", interrupting)
    profile = profile_file(tmp_path)
    Plan.per_tensor(Profile.read(profile)).write(tmp_path / "plan.json")
    status, out, err = in_process(capsys, "simulate", profile, "--plan", tmp_path / "plan.json",
                                  "--alpha", "1e-3", "--beta", "1e-9")
    assert (status, out, err) == (130, "", "fusionopt: interrupted\n")


def test_ctrl_c_in_a_sweep_says_where_its_cells_are(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(experiments, "run_sweep", interrupting)
    output = tmp_path / "cells.jsonl"
    status, out, err = in_process(capsys, "sweep", "--models", "alexnet", "--workers", "8", "--networks", "10gbe",
                                  "--methods", "wfbp", "--output", output, "--no-progress")
    assert status == 130 and out == ""
    assert err == f"fusionopt: interrupted; the finished cells are in {output}: run the same command again to go on\n"


@pytest.mark.parametrize("argv", [
    ["methods", "--options"],
    ["compare", "--model", "resnet50", "--network", "10gbe", "--workers", "8"],
])
def test_a_closed_stdout_ends_the_command_quietly(argv):
    process = subprocess.Popen([sys.executable, "-m", "fusionopt", *argv], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    process.stdout.close()                  # the reader left before the first line (`| head -0`)
    err = process.stderr.read()
    assert process.wait(timeout=120) == 1
    assert err == ""



def test_ctrl_c_in_a_sweep_of_several_jobs_leaves_no_cell_running(tmp_path):
    # Four CP-SAT cells of up to 40 s, two at a time: Ctrl-C once they run ends the command at
    # once, the running cells with it (the interpreter's exit would otherwise wait for them).
    pytest.importorskip("ortools")
    output = tmp_path / "cells.jsonl"
    process = subprocess.Popen([sys.executable, "-m", "fusionopt", "sweep", "--models", "gpt2,bert-large",
                                "--workers", "64,128", "--networks", "10gbe", "--methods", "cpsat", "--jobs", "2",
                                "--time-limit", "40", "--output", str(output), "--no-progress"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_as_usual)
    try:
        # The first two cells are solving once the pool's two workers run (the interpreter
        # starts slowly on a loaded host: a fixed wait could interrupt its imports instead).
        deadline = time.monotonic() + 60
        while len(_descendants(process.pid)) < 2 and time.monotonic() < deadline:
            assert process.poll() is None
            time.sleep(0.2)
        time.sleep(2)
        assert process.poll() is None
        process.send_signal(signal.SIGINT)
        started = time.monotonic()
        _, err = process.communicate(timeout=30)
        assert time.monotonic() - started < 10
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130
    assert err == f"fusionopt: interrupted; the finished cells are in {output}: run the same command again to go on\n"


def test_ctrl_c_while_the_commands_load_is_one_line():
    # The `fusionopt` command imports only fusionopt.cli's face before its handler runs; Ctrl-C
    # while the commands load (about a second: the model, the solvers) is one line, status 130.
    code = ("import importlib.abc, sys\n"
            "class Interrupt(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'fusionopt.cli._main':\n"
            "            raise KeyboardInterrupt\n"
            "sys.meta_path.insert(0, Interrupt())\n"
            "from fusionopt.cli import main\n"
            "assert 'fusionopt.model' not in sys.modules and 'numpy' not in sys.modules\n"
            "sys.exit(main(['methods']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "fusionopt: interrupted\n")
