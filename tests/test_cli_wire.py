"""``--encodings``: what goes on the wire from the command line (MODEL.md section 2.2), on four
tensors of 4 MB, 1 MB, 2 MB and 4 kB (backward 3, 2, 1 and 0.1 ms; forward 1 ms each) over
a link of 25 us and 0.8 ns per byte."""

from __future__ import annotations

import json

import pytest

from fusionopt.model import Profile
from fusionopt.cli import main

LINK = ["--alpha", "25e-6", "--beta", "0.8e-9"]


@pytest.fixture
def profile_path(tmp_path):
    path = tmp_path / "profile.json"
    Profile.from_arrays([4e6, 1e6, 2e6, 4e3], [1e-3] * 4, [3e-3, 2e-3, 1e-3, 1e-4]).write(path)
    return str(path)


def test_the_dp_chooses_each_messages_encoding(profile_path, capsys):
    assert main(["solve", profile_path, "--method", "dp", *LINK, "--encodings", "fp32,fp16",
                 "--cast-per-message", "40e-6", "--json"]) in (None, 0)
    document = json.loads(capsys.readouterr().out)
    # t3's 4 kB travels in fp32 (below the 100 kB crossover), the rest in fp16; by hand: the
    # backward ends at 6.1 ms; t0's 4 MB in fp16 then takes 25 + 40 + 1600 us = 1.665 ms, and the
    # forward 4 ms: T = 11.765 ms.
    assert document["encodings"] == ["fp32", "fp16", "fp16", "fp16"]
    assert document["iteration_time"] == pytest.approx(11.765e-3)
    assert main(["solve", profile_path, "--method", "dp", *LINK, "--encodings", "fp32,fp16",
                 "--cast-per-message", "40e-6"]) in (None, 0)
    assert "     0          4000 B  fp32  [t3]" in capsys.readouterr().out


def test_one_encoding_sends_every_message_in_it(profile_path, capsys):
    assert main(["solve", profile_path, "--method", "ddp", *LINK, "--encodings", "bf16", "--json"]) in (None, 0)
    document = json.loads(capsys.readouterr().out)
    assert set(document["encodings"]) == {"bf16"}


@pytest.mark.parametrize("flags, message", [
    (["--encodings", "fp32,int8"], "--encodings fp32,int8: unknown encoding 'int8'"),
    (["--cast-per-byte", "1e-12"], "--cast-per-byte, --cast-per-message, --cast-compute-per-byte and "
                                   "--cast-compute-per-message price the casts of --encodings"),
    (["--cast-compute-per-byte", "1e-12"], "price the casts of --encodings and go with it"),
    (["--encodings", "fp32", "--cast-per-byte", "1e-12"], "--encodings fp32 casts nothing"),
    (["--encodings", "fp32,fp16", "--cast-compute-per-byte", "1e-12"],
     "Cheapest: encoding 'fp16' runs part of its cast on the compute stream"),
    (["--encodings", "fp16", "--decoupled"], "--encodings prices all-reduce messages"),
    (["--encodings", "fp16", "--cast-per-message", "-1"], "seconds_per_message must be"),
])
def test_bad_wire_flags_are_named_in_one_line(profile_path, capsys, flags, message):
    assert main(["solve", profile_path, "--method", "dp", *LINK, *flags]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("fusionopt: error: ") and message in error and "\n" not in error


def test_a_cast_on_the_compute_stream_delays_the_backward(profile_path, capsys):
    # fp16, the cast 0.5 ns an fp32 byte on the compute stream, WFBP: t3's 4 kB cast ends at
    # 0.102 ms, then t2 (2 MB, 1 ms) 0.102-1.102 and its cast to 2.102, t1 (1 MB) 2.102-4.102
    # and its cast to 4.602, t0 (4 MB) 4.602-7.602 and its cast to 9.602: sent in
    # 25 us + 1.6 ms, T = 11.227 + 4 (forward) = 15.227 ms. On the message's path instead, the
    # backward ends at 6.1 ms and t0's message takes 25 us + 4 MB at 0.4 + 0.5 ns/B:
    # 6.1 + 3.625 + 4 = 13.725 ms.
    document = json.loads(_solve(capsys, profile_path, "wfbp", "--encodings", "fp16",
                                 "--cast-compute-per-byte", "0.5e-9"))
    assert document["iteration_time"] == pytest.approx(15.227e-3, rel=1e-12)
    document = json.loads(_solve(capsys, profile_path, "wfbp", "--encodings", "fp16", "--cast-per-byte", "0.5e-9"))
    assert document["iteration_time"] == pytest.approx(13.725e-3, rel=1e-12)


def _solve(capsys, profile_path, method, *flags):
    assert main(["solve", profile_path, "--method", method, *LINK, *flags, "--json"]) in (None, 0)
    return capsys.readouterr().out


def test_compare_says_which_encodings_the_messages_may_take(profile_path, capsys):
    assert main(["compare", "--profile", profile_path, *LINK, "--encodings", "fp32,fp16", "--methods", "dp,ddp"]) in (
        None, 0)
    assert ("network   AlphaBeta(alpha=2.5e-05, beta=8e-10), each message in fp32 or fp16 (the cheapest), "
            "sync barrier") in capsys.readouterr().out


def test_exact_tensors_travel_in_fp32(profile_path, capsys):
    # t0 kept exact: its 4 MB go in fp32, 25 + 3200 us from 6.1 ms, so T = 9.325 + 4 = 13.325 ms
    # (11.765 ms free to choose, above); the others keep fp16 where it pays.
    assert main(["solve", profile_path, "--method", "dp", *LINK, "--encodings", "fp32,fp16",
                 "--cast-per-message", "40e-6", "--exact-tensors", "t0", "--json"]) in (None, 0)
    document = json.loads(capsys.readouterr().out)
    assert document["iteration_time"] == pytest.approx(13.325e-3)
    carried = [[chunk[0] for chunk in m] for m in document["plan"]["messages"]]      # [tensor, lo, bytes]
    assert [e for e, tensors in zip(document["encodings"], carried) if 0 in tensors] == ["fp32"]
    assert "fp16" in document["encodings"]
    # A pattern and an index name the same tensors; t2 exact costs nothing here (its fp32
    # message ends before t1 is ready).
    assert main(["solve", profile_path, "--method", "dp", *LINK, "--encodings", "fp32,fp16",
                 "--cast-per-message", "40e-6", "--exact-tensors", "2", "--json"]) in (None, 0)
    assert json.loads(capsys.readouterr().out)["iteration_time"] == pytest.approx(11.765e-3)
    assert main(["compare", "--profile", profile_path, *LINK, "--encodings", "fp32,fp16",
                 "--cast-per-message", "40e-6", "--exact-tensors", "t[02]", "--methods", "wfbp,dp"]) in (None, 0)
    out = capsys.readouterr().out
    assert "2 tensors exact (every message carrying one in a lossless encoding): t0, t2" in out
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines() if line.split()[:1] in (["wfbp"], ["dp"])}
    assert rows == {"wfbp": "13.325", "dp": "13.325"}


@pytest.mark.parametrize("flags, message", [
    (["--exact-tensors", "t0"], "--exact-tensors keeps tensors out of a lossy encoding and goes with --encodings"),
    (["--encodings", "fp16", "--exact-tensors", "t0"], "goes with --encodings of fp32 and fp16 or bf16"),
    (["--encodings", "fp16,bf16", "--exact-tensors", "t0"],
     "--exact-tensors t0: exact_tensors: tensor 0 must travel exactly, and every encoding of the cost (fp16, bf16) "
     "is lossy: add fp32"),
    (["--encodings", "fp32,fp16", "--exact-tensors", "conv*"], "--exact-tensors: 'conv*' is no tensor of profile"),
    (["--encodings", "fp32,fp16", "--exact-tensors", "7"], "--exact-tensors: '7' is no tensor of profile"),
])
def test_bad_exact_tensors_are_named_in_one_line(profile_path, capsys, flags, message):
    assert main(["solve", profile_path, "--method", "dp", *LINK, *flags]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("fusionopt: error: ") and message in error and "\n" not in error


@pytest.mark.parametrize("encodings, line", [
    ("fp32,fp16", "horovod   left out: Horovod's DistributedOptimizer sends every gradient with one compression "
                  "(hvd.Compression.none or fp16), not an encoding chosen per message: price it with one encoding"),
    ("bf16", "horovod   left out: Horovod compresses to fp16 only (hvd.Compression.fp16), not bf16"),
    ("fp16", "          hvd.DistributedOptimizer(..., compression=hvd.Compression.fp16): the horovod T above sends "
             "every gradient in fp16"),
])
def test_horovod_is_advised_only_with_the_compression_it_has(profile_path, capsys, encodings, line):
    assert main(["advise", "--profile", profile_path, *LINK, "--encodings", encodings]) in (None, 0)
    out = capsys.readouterr().out
    assert line in out.splitlines()
    assert main(["advise", "--profile", profile_path, *LINK, "--encodings", encodings, "--json"]) in (None, 0)
    document = json.loads(capsys.readouterr().out)
    if encodings == "fp16":
        assert document["horovod"]["compression"] == "fp16" and "horovod_left_out" not in document
        # DDP sends the same buckets through torch's own hook.
        assert document["ddp"]["hook"].endswith("default_hooks.fp16_compress_hook")
    else:
        assert document["horovod"] is None and document["horovod_left_out"] == line.split("left out: ")[1]


def test_solve_states_the_error_bound_of_each_lossy_encoding(profile_path, capsys):
    assert main(["solve", profile_path, "--method", "dp", "--network", "10gbe", "--workers", "8",
                 "--encodings", "fp32,fp16", "--json"]) in (None, 0)
    document = json.loads(capsys.readouterr().out)
    # gamma_{P+1} for fp16 at P = 8: 9 u / (1 - 9 u), u = 2^-11; the subnormal part
    # 2 P 2^-25 (1 + gamma).
    gamma = 9 * 2.0 ** -11 / (1 - 9 * 2.0 ** -11)
    assert document["error_bounds"] == {"fp16": {"messages": document["encodings"].count("fp16"),
                                                 "relative": pytest.approx(gamma, rel=1e-15),
                                                 "absolute": pytest.approx(16 * 2.0 ** -25 * (1 + gamma), rel=1e-15)}}
    assert document["error_bounds"]["fp16"]["messages"] >= 1
    assert main(["solve", profile_path, "--method", "dp", *LINK, "--encodings", "fp32,fp16",
                 "--cast-per-message", "40e-6"]) in (None, 0)
    assert ("error bound     give --network and --workers: the bound on the averaged gradients' error depends on "
            "the ranks") in capsys.readouterr().out


def test_a_comparison_that_keeps_tensors_exact_also_sends_them_apart(profile_path, capsys):
    # dp-apart joins the default table where tensors are kept exact, never slower than dp.
    base = ["compare", "--profile", profile_path, *LINK, "--encodings", "fp32,fp16", "--cast-per-message", "40e-6"]
    assert main([*base, "--exact-tensors", "t1", "--json"]) in (None, 0)
    rows = {r["method"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["dp-apart"]["iteration_time"] <= rows["dp"]["iteration_time"] * (1 + 1e-12)
    assert main([*base, "--json"]) in (None, 0)
    assert "dp-apart" not in {r["method"] for r in json.loads(capsys.readouterr().out)}


def test_advise_points_to_the_plan_that_sends_the_exact_tensor_apart(tmp_path, capsys):
    # t0 and t2 of 4 MB, t1 of 100 kB kept exact, on 3 ms + 2 ns/B with free fp16: DDP's best is
    # each tensor alone, 21.2 ms; t1 alone first, then t2 and t0 in one fp16 message, 20.2 ms
    # (tests/model/test_apart_dp.py works both out). Without a tensor kept exact, no such line.
    from fusionopt.model import Profile

    path = tmp_path / "p.json"
    Profile.from_arrays([4e6, 1e5, 4e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3]).write(path)
    base = ["advise", "--profile", str(path), "--alpha", "3e-3", "--beta", "2e-9", "--encodings", "fp32,fp16",
            "--exact-tensors", "t1", "--method", "dp"]
    assert main(base) in (None, 0)
    out = capsys.readouterr().out
    assert "apart     the 1 tensor kept exact sent apart (dp-apart: each message a run of them and a run of the " \
           "others, 2 messages): T = 20.200 ms" in out and "PlanReducer(model, plan, profile, encodings=...)" in out
    assert main([*base, "--json"]) in (None, 0)
    apart = json.loads(capsys.readouterr().out)["apart"]
    assert apart["encodings"] == ["fp32", "fp16"] and apart["iteration_time"] == pytest.approx(20.2e-3)
    assert [[c[0] for c in m] for m in apart["plan"]["messages"]] == [[1], [2, 0]]
    assert main([*base[:-4], "--method", "dp"]) in (None, 0)
    assert "\napart " not in capsys.readouterr().out
