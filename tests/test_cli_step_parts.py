"""A profile written by ``fusionopt profile --trace`` (optimiser lump, DDP's copies and the host's
share) on the command line under every pattern: fitted to the step (MODEL.md section 4.1), each
change said in one warning line, the times those of the profile fitted by hand."""

from __future__ import annotations

import dataclasses
import json

import pytest

from kineto_traces import PARAMS, ddp_job

from fusionopt.cli import main
from fusionopt.cost import AlphaBeta
from fusionopt.model import Decoupled, FullySharded, Problem, Profile
from fusionopt.solvers import solve
from fusionopt.advice import zero2_settings

ALPHA, BETA = "1e-5", "1e-9"
COST = AlphaBeta(1e-5, 1e-9)
DROPPED = "post_backward (0.02 ms of DDP's copies into .grad) dropped"
SPREAD = "spread over the tensors' update times in proportion to their bytes"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture
def traced(tmp_path, capsys):
    """The hand-made two-rank DDP job's profile, as ``fusionopt profile --trace`` writes it."""
    for rank in (0, 1):
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(ddp_job(rank)))
    (tmp_path / "parameters.csv").write_text("name,size_bytes\n" + "".join(f"{n},{s}\n" for n, s in PARAMS))
    path = tmp_path / "traced.json"
    status, _, err = run(capsys, "profile", "--trace", str(tmp_path), "--output", str(path))
    assert status == 0, err
    profile = Profile.read(path)
    assert profile.step_parts == pytest.approx(
        {"update_lump": 105e-6, "post_backward": 20e-6, "host_overhead": 245e-6}, abs=1e-12)
    return str(path), profile


def spread(profile: Profile, seconds: float) -> Profile:
    """``seconds`` of per-tensor work added by bytes, by hand; the lump and the copies gone."""
    update = profile.update + seconds * profile.sizes / profile.sizes.sum()
    return dataclasses.replace(profile, update=update, update_lump=0.0, post_backward=0.0)


def warnings_of(err: str, profile: Profile) -> list[str]:
    head = f"fusionopt: warning: profile {profile.name!r}: "
    lines = err.splitlines()
    assert all(line.startswith(head) for line in lines), err
    return [line.removeprefix(head) for line in lines]


def compared(capsys, traced, *flags, methods):
    path, profile = traced
    status, out, err = run(capsys, "compare", "--profile", path, "--alpha", ALPHA, "--beta", BETA, *flags,
                           "--methods", ",".join(methods), "--json")
    assert status == 0, err
    return {row["method"]: row["iteration_time"] for row in json.loads(out)}, warnings_of(err, profile)


def test_compare_fully_sharded_drops_the_copies(traced, capsys):
    profile = traced[1]
    times, notes = compared(capsys, traced, "--fully-sharded", methods=["fsdp2", "sharded-wfbp"])
    assert notes == [f"{DROPPED}: a fully sharded step does not run them"]
    by_hand = Problem(profile.with_step_parts(post_backward=0.0), pattern=FullySharded(COST, COST))
    for method, T in times.items():
        assert T == solve(by_hand, method).iteration_time, method


@pytest.mark.parametrize("sync", ["barrier", "layerwise"])
def test_compare_decoupled_spreads_the_lump(traced, capsys, sync):
    profile = traced[1]
    times, notes = compared(capsys, traced, "--decoupled", "--sync", sync, methods=["decoupled-wfbp", "decoupled-opt"])
    assert notes == [f"{DROPPED}: a decoupled all-reduce does not run them",
                     f"update_lump (0.105 ms) {SPREAD}: each shard is updated after its reduce-scatter"]
    by_hand = Problem(spread(profile, profile.update_lump), pattern=Decoupled(COST, COST), sync=sync)
    for method, T in times.items():
        assert T == pytest.approx(solve(by_hand, method).iteration_time, rel=1e-12), method


def test_compare_layerwise_spreads_the_lump_and_the_copies(traced, capsys):
    profile = traced[1]
    times, notes = compared(capsys, traced, "--sync", "layerwise", methods=["wfbp", "p3", "layerwise-opt"])
    assert notes == [f"update_lump (0.105 ms) and post_backward (0.02 ms) {SPREAD}: under layerwise sync each "
                     "tensor is updated once its own gradient is reduced"]
    by_hand = Problem(spread(profile, profile.update_lump + profile.post_backward), COST, sync="layerwise")
    for method, T in times.items():
        assert T == pytest.approx(solve(by_hand, method).iteration_time, rel=1e-12), method
    assert times["wfbp"] > by_hand.profile.compute_time


def test_barrier_all_reduce_keeps_every_part_without_a_word(traced, capsys):
    profile = traced[1]
    times, notes = compared(capsys, traced, methods=["wfbp"])
    assert notes == [] and times["wfbp"] == solve(Problem(profile, COST), "wfbp").iteration_time


def test_advise_fsdp_and_zero2_on_a_traced_profile(traced, capsys):
    path, profile = traced
    status, out, err = run(capsys, "advise", "--profile", path, "--pattern", "fsdp", "--alpha", ALPHA,
                           "--beta", BETA, "--json")
    assert status == 0 and warnings_of(err, profile) == [f"{DROPPED}: a fully sharded step does not run them"]
    by_hand = Problem(profile.with_step_parts(post_backward=0.0), pattern=FullySharded(COST, COST))
    assert json.loads(out)["fsdp2"]["default_iteration_time"] == solve(by_hand, "fsdp2").iteration_time
    status, out, err = run(capsys, "advise", "--profile", path, "--pattern", "zero2", "--network", "10gbe",
                           "--workers", "8", "--json")
    assert status == 0 and len(warnings_of(err, profile)) == 2
    hand = Problem(spread(profile, profile.update_lump), pattern=Decoupled.from_network("10gbe", 8))
    megatron = zero2_settings(hand, data_parallel_size=8)[1]
    assert json.loads(out)["megatron"]["iteration_time"] == pytest.approx(megatron.iteration_time, rel=1e-12)
    # The text form says the same lines once each.
    status, out, err = run(capsys, "advise", "--profile", path, "--pattern", "zero2", "--network", "10gbe",
                           "--workers", "8")
    assert status == 0 and "megatron  DistributedDataParallelConfig" in out and err.count("\n") == 2
