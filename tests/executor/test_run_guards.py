"""What ``run`` refuses before it starts: a plan over the memory cap, a run too big for the host's
memory, ``--workers`` that disagree with ``--ranks``; each in one line."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from executor_helpers import small_profile
from fusionopt.cli import main
from fusionopt.executor import Job, run, check_host_memory, rank_bytes, LocalGroup, RankRunner
from fusionopt.cost import AlphaBeta
from fusionopt.model import Plan, Problem, Profile, simulate, Decoupled, DecoupledPlan, FullySharded, ShardedPlan

AB = ["--alpha", "1e-4", "--beta", "1e-9"]
HALF = AlphaBeta(alpha=1e-4, beta=1e-9)


def run_cli(capsys, *argv):
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def one_line(err: str) -> bool:
    return err.count("\n") == 1 and err.startswith("fusionopt: error: ")


# ---------------------------------------------------------------------- the memory cap (fully sharded)
@pytest.fixture
def sharded_files(tmp_path):
    profile = small_profile(update=2e-4)
    profile.write(tmp_path / "profile.json")
    ShardedPlan([0, 3], [False]).write(tmp_path / "plan.json")       # one unit, 7 KiB gathered at once
    return tmp_path / "profile.json", tmp_path / "plan.json"


def test_a_plan_over_the_memory_cap_is_refused_as_simulate_judges_it(sharded_files, capsys):
    profile, plan = sharded_files
    cap = ["--fully-sharded", *AB, "--memory-cap", "10000"]
    _, out, _ = run_cli(capsys, "simulate", profile, "--plan", plan, *cap, "--json")
    peak = json.loads(out)["peak_memory"]
    assert peak == 2 * 7168 and json.loads(out)["over_memory_cap"] == peak - 10000    # parameters and gradients
    status, out, err = run_cli(capsys, "run", profile, "--plan", plan, *cap, "--iterations", "1")
    assert status == 2 and out == "" and one_line(err)
    assert f"peak of 14 KiB ({peak} B)" in err and "memory cap of 9.766 KiB (10000 B)" in err


def test_a_plan_within_the_memory_cap_runs(sharded_files, capsys):
    profile, plan = sharded_files
    status, out, err = run_cli(capsys, "run", profile, "--plan", plan, "--fully-sharded", *AB, "--memory-cap",
                               "14336", "--iterations", "1", "--warmup", "0", "--time-scale", "0")
    assert status == 0 and err == "" and "correctness    ok" in out


def test_the_python_api_refuses_a_plan_over_the_cap():
    problem = Problem(small_profile(), pattern=FullySharded(HALF, HALF, memory_cap=14335))
    plan = ShardedPlan([0, 3], [False])
    assert simulate(problem, plan).peak_memory == 14336
    with pytest.raises(ValueError, match=r"peak of 14 KiB \(14336 B\) .* over the memory cap"):
        run(problem, plan, iterations=1)


# ---------------------------------------------------------------------- host memory
def huge_profile() -> Profile:
    """The small profile's shape with sizes 1e11 times larger: 400, 100 and 200 TB."""
    return Profile.from_arrays([4e14, 1e14, 2e14], [1e-3] * 3, [3e-3, 2e-3, 1e-3])


def test_a_run_too_big_for_the_host_is_refused_before_allocating(tmp_path, capsys):
    profile = huge_profile()
    profile.write(tmp_path / "profile.json")
    Plan.from_groups(profile, [[2], [1, 0]]).write(tmp_path / "plan.json")
    status, out, err = run_cli(capsys, "run", tmp_path / "profile.json", "--plan", tmp_path / "plan.json", *AB,
                               "--ranks", "2", "--iterations", "1")
    # Per rank: gradients and their patterns 2 x 7e14 B, the check's scratch block of 2**20 words
    # (8 MiB), the fused buffer of the larger message 5e14 B.
    per_rank = 2 * 7 * 10**14 + 8 * 2**20 + 5 * 10**14
    assert status == 1 and out == "" and one_line(err)
    assert f"needs 3.375 PiB ({2 * per_rank} B) of memory on this host: 2 ranks x 1.688 PiB" in err


@pytest.mark.parametrize("pattern", ["decoupled", "fully-sharded"])
def test_sharded_runs_too_big_are_refused_too(pattern):
    profile = huge_profile()
    if pattern == "decoupled":
        problem, plan = Problem(profile, pattern=Decoupled(HALF, HALF)), DecoupledPlan.from_groups(profile, [[2], [1, 0]], [[0, 1], [2]])
    else:
        problem, plan = Problem(profile, pattern=FullySharded(HALF, HALF)), ShardedPlan.per_tensor(profile)
    with pytest.raises(MemoryError, match=r"^the run needs .* of memory on this host: 3 ranks x .* is available"):
        run(problem, plan, ranks=3, iterations=1)


def test_the_check_compares_with_the_available_memory():
    profile = small_profile()
    job = Job(Problem(profile, HALF), Plan.from_groups(profile, [[2], [1, 0]]))
    assert rank_bytes(job, 2) == 2 * 7168 + 4096 + 5120
    assert check_host_memory(job, 2, available=2 * 23552) == 2 * 23552
    with pytest.raises(MemoryError, match=r"needs 46 KiB \(47104 B\) .* 2 ranks x 23 KiB .* 46 KiB is available"):
        check_host_memory(job, 2, available=2 * 23552 - 1)


def allocated_by_set_up(runner_class, job) -> int:
    """Bytes a rank's set-up allocates, as tracemalloc sees numpy's buffers (one rank of one)."""
    comm = LocalGroup(1).communicators()[0]
    runner = runner_class(comm, job)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        record = runner._record()
        allocated = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert record is not None
    return allocated


@pytest.mark.parametrize("pattern", ["all-reduce", "decoupled", "fully-sharded"])
def test_rank_bytes_is_what_a_rank_allocates(pattern):
    profile = small_profile(sizes=[4 << 20, 1 << 20, 2 << 20], update=2e-4)
    if pattern == "all-reduce":
        job = Job(Problem(profile, HALF), Plan.from_groups(profile, [[2], [1, 0]]))
    elif pattern == "decoupled":
        job = Job(Problem(profile, pattern=Decoupled(HALF, HALF)), DecoupledPlan.from_groups(profile, [[2], [1, 0]], [[0, 1], [2]]))
    else:
        job = Job(Problem(profile, pattern=FullySharded(HALF, HALF)), ShardedPlan([0, 2, 3]))
    expected = rank_bytes(job, 1)
    allocated = allocated_by_set_up(RankRunner, job)
    assert expected <= allocated <= expected + (64 << 10)        # Python objects aside, the same bytes


# ---------------------------------------------------------------------- --workers and --ranks
@pytest.fixture
def files(tmp_path):
    profile = small_profile()
    profile.write(tmp_path / "profile.json")
    Plan.from_groups(profile, [[2], [1, 0]]).write(tmp_path / "plan.json")
    return tmp_path / "profile.json", tmp_path / "plan.json"


def test_workers_other_than_the_ranks_are_refused(files, capsys):
    profile, plan = files
    status, out, err = run_cli(capsys, "run", profile, "--plan", plan, "--network", "10gbe", "--workers", "4",
                               "--ranks", "2")
    assert status == 2 and out == "" and one_line(err)
    assert "--workers 4 describes 4 workers, but run measures real collectives over --ranks 2" in err
    status, _, err = run_cli(capsys, "run", profile, "--plan", plan, "--network", "10gbe", "--workers", "4")
    assert status == 2 and "over --ranks 2" in err                   # the default ranks


def test_workers_equal_to_the_ranks_run(files, capsys):
    profile, plan = files
    status, out, err = run_cli(capsys, "run", profile, "--plan", plan, "--network", "10gbe", "--workers", "3",
                               "--ranks", "3", "--iterations", "1", "--warmup", "0", "--time-scale", "0")
    assert status == 0 and err == "" and "local, 3 ranks" in out
