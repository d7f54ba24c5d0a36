"""``--param-dtype`` and ``--reduce-dtype``: FSDP2's MixedPrecisionPolicy from the command line,
on two tensors of 4 MB and 2 MB (no forward, 1 ms of backward each) over ``c(S) = S`` ns."""

from __future__ import annotations

import json

import pytest

from fusionopt.cli import main
from fusionopt.cost import AlphaBeta
from fusionopt.model import FullySharded, Problem, Profile
from fusionopt.solvers import solve

LINK = ["--alpha", "0", "--beta", "1e-9"]


@pytest.fixture
def profile_path(tmp_path):
    path = tmp_path / "profile.json"
    Profile.from_arrays([4e6, 2e6], [0.0, 0.0], [1e-3, 1e-3], names=["a", "b"]).write(path)
    return str(path)


def test_the_flags_give_the_python_apis_problem(profile_path, capsys):
    assert main(["solve", profile_path, "--method", "fsdp2", "--fully-sharded", *LINK, "--param-dtype", "bf16",
                 "--reduce-dtype", "fp32", "--json"]) in (None, 0)
    document = json.loads(capsys.readouterr().out)
    link = AlphaBeta(0.0, 1e-9)
    problem = Problem(Profile.read(profile_path),
                      pattern=FullySharded.mixed_precision(link, link, param_dtype="bf16", reduce_dtype="fp32"))
    expected = solve(problem, "fsdp2")
    assert document["iteration_time"] == expected.iteration_time
    # By hand: both tensors are the root's (no blocks); its all-gather carries 3 MB in bf16
    # (3 ms), the two backwards follow (to 5 ms), then its reduce-scatter of 6 MB in fp32
    # (6 ms): T = 11 ms. Whole from its backward on: 3 MB of bf16 parameters and the unit's
    # 6 MB of fp32 gradients: 9 MB.
    assert round(expected.iteration_time * 1e3, 9) == 11.0
    assert expected.timeline.peak_memory == 9_000_000


@pytest.mark.parametrize("flags, message", [
    (["--param-dtype", "bf16"], "fusionopt: error: --param-dtype is FSDP2's mixed precision and goes with "
                                "--fully-sharded\n"),
    (["--fully-sharded", "--network", "10gbe", "--workers", "8", "--replicas", "2", "--reduce-dtype", "bf16"],
     "fusionopt: error: --param-dtype and --reduce-dtype price one shard axis; with --replicas (HSDP) they are "
     "not modelled\n"),
])
def test_refused_in_one_line(profile_path, capsys, flags, message):
    link = [] if "--network" in flags else LINK
    assert main(["solve", profile_path, "--method", "wfbp", *link, *flags]) == 2
    assert capsys.readouterr().err == message
