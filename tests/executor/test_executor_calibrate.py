"""Calibration: the sweep, the two fits and the cost JSON that Problem and the CLI read."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fusionopt.cli import main
from fusionopt.executor import calibrate, fit_alpha_beta, Calibration, default_sizes, from_records
from fusionopt.cost import AlphaBeta, PiecewiseLinear, cost_from_dict


def test_alpha_beta_fit_recovers_an_exact_line_and_stays_non_negative():
    sizes = np.array([256, 4096, 65536, 1 << 20], dtype=float)
    fit = fit_alpha_beta(sizes, 2e-5 + 3e-10 * sizes)
    assert fit.alpha == pytest.approx(2e-5, rel=1e-9) and fit.beta == pytest.approx(3e-10, rel=1e-9)
    # Times falling with size would need a negative beta: it is clamped to 0.
    flat = fit_alpha_beta([1e3, 1e6], [2e-3, 1e-3])
    assert flat.beta == 0.0 and flat.alpha > 0
    with pytest.raises(ValueError, match="at least two sizes"):
        fit_alpha_beta([1e3], [1e-3])


def test_records_combine_to_the_slowest_rank_and_both_fits():
    records = [{"rank": 0, "sizes": [1024, 2048, 4096], "times": [1e-5, 2e-5, 3e-5]},
               {"rank": 1, "sizes": [1024, 2048, 4096], "times": [2e-5, 1.5e-5, 4e-5]}]
    cal = from_records("local", records, "test")
    assert cal.times.tolist() == [2e-5, 2e-5, 4e-5]
    assert cal.piecewise == PiecewiseLinear([1024, 2048, 4096], [2e-5, 2e-5, 4e-5])
    doc = cal.to_dict("alpha-beta")
    assert doc["kind"] == "alpha_beta" and doc["calibration"]["points"][2] == [4096, 4e-5]
    assert cost_from_dict(doc) == cal.alpha_beta
    assert cost_from_dict(cal.to_dict()) == cal.piecewise
    with pytest.raises(ValueError, match="unknown cost model 'linear'"):
        cal.cost("linear")


def test_default_sizes_double_and_bad_bounds_are_named():
    assert default_sizes(256, 4096) == (256, 512, 1024, 2048, 4096)
    with pytest.raises(ValueError, match=r"max_bytes \(100\) is below min_bytes \(256\)"):
        default_sizes(256, 100)


def test_local_calibration_measures_and_writes_a_cost_problem_reads(tmp_path):
    cal = calibrate("local", ranks=3, sizes=[1024, 65536, 1 << 20], iterations=3, warmup=1)
    assert isinstance(cal, Calibration) and cal.ranks == 3 and cal.backend == "local"
    assert (cal.times > 0).all()
    assert isinstance(cal.alpha_beta, AlphaBeta)
    path = tmp_path / "cost.json"
    cal.write(path)
    assert cost_from_dict(json.loads(path.read_text())) == cal.piecewise
    with pytest.raises(ValueError, match="message size 1001 B must be a whole number of bytes, a positive multiple of 8"):
        calibrate("local", sizes=[1001, 2048])


def test_cli_calibrate_writes_json_that_simulate_accepts(tmp_path, capsys):
    cost = tmp_path / "cost.json"
    status = main(["calibrate", "--backend", "local", "--ranks", "2", "--min-bytes", "1024",
                   "--max-bytes", "8192", "--iterations", "3", "--output", str(cost), "--model", "alpha-beta"])
    out = capsys.readouterr().out
    assert status == 0 and "alpha-beta fit: alpha =" in out and f"wrote {cost}" in out
    doc = json.loads(cost.read_text())
    assert doc["kind"] == "alpha_beta" and len(doc["calibration"]["points"]) == 4
    from fusionopt.model import Profile

    profile = tmp_path / "p.json"
    Profile.from_arrays([4096, 1024], [1e-3, 1e-3], [1e-3, 1e-3]).write(profile)
    plan = tmp_path / "plan.json"
    assert main(["solve", str(profile), "--cost", str(cost), "--output", str(plan)]) == 0
    assert main(["simulate", str(profile), "--plan", str(plan), "--cost", str(cost)]) == 0


def test_mpi_calibration_with_two_processes():
    pytest.importorskip("mpi4py")
    cal = calibrate("mpi", ranks=2, sizes=[1024, 1 << 16], iterations=3, warmup=1, timeout=20.0)
    assert cal.backend == "mpi" and cal.ranks == 2 and (cal.times > 0).all()
    assert cal.description.startswith("mpi, 2 processes")


def test_calibrate_alignment_writes_the_price_it_found(tmp_path, capsys):
    # On threads of this host: the sizes around powers of two are timed and a cost is written
    # that problems read: the padded price where a cliff was found, else the aligned price.
    out = tmp_path / "aligned.json"
    assert main(["calibrate", "--alignment", "--ranks", "2", "--min-bytes", "4096", "--max-bytes", "8192",
                 "--iterations", "3", "--output", str(out), "--json"]) in (None, 0)
    document = json.loads(capsys.readouterr().out)
    assert document == json.loads(out.read_text())
    calibration = document["calibration"]
    assert calibration["model"] == "alignment" and len(calibration["points"]) == 2 * 6
    cost = cost_from_dict(document)
    assert document["kind"] in ("alpha_beta", "aligned") and (document["kind"] == "alpha_beta" or cost.padded)


@pytest.mark.parametrize("flags, message", [
    (["--model", "alpha-beta"], "--alignment writes its own fit (the alpha-beta price, padded where a cliff was "
                                "found): leave --model out"),
    (["--collective", "all_gather"], "--alignment times all-reduce messages; leave --collective out"),
    (["--min-bytes", "0"], "argument --min-bytes: must be a whole number >= 1, got '0'"),
])
def test_calibrate_alignment_refusals(capsys, flags, message):
    assert main(["calibrate", "--alignment", *flags]) == 2
    assert capsys.readouterr().err == f"fusionopt: error: {message}\n"


def test_an_encoded_calibration_sends_narrowed_words_and_prices_the_casts(tmp_path, capsys, monkeypatch):
    from fusionopt.executor import LocalGroup

    kind = type(LocalGroup(1).communicators()[0])
    original, widths = kind.allreduce, set()

    def spy(self, buffer, **kwargs):
        widths.add(buffer.dtype.itemsize)
        return original(self, buffer, **kwargs)
    monkeypatch.setattr(kind, "allreduce", spy)
    cal = calibrate("local", ranks=2, sizes=[4096, 1 << 16], iterations=3, encoding="bf16")
    assert widths == {4} and cal.encoding == "bf16" and cal.to_dict()["calibration"]["encoding"] == "bf16"
    widths.clear()
    out = tmp_path / "cost.json"
    assert main(["calibrate", "--ranks", "2", "--min-bytes", "4096", "--max-bytes", "16384", "--iterations", "3",
                 "--encoding", "fp16", "--output", str(out)]) in (None, 0)
    printed = capsys.readouterr().out
    assert widths == {8, 4}                        # the fp32 sweep, then the fp16 one
    doc = json.loads(out.read_text())
    casts = doc["calibration"]["casts"]
    assert casts["encoding"]["name"] == "fp16" and len(casts["points"]) == 3
    assert casts["encoding"]["seconds_per_message"] >= 0 and casts["encoding"]["seconds_per_byte"] >= 0
    assert f"--cast-per-byte {casts['encoding']['seconds_per_byte']:.4g})" in printed
    assert doc["kind"] == "piecewise_linear" and cost_from_dict(doc)(4096) > 0      # the fp32 fit, as without it


@pytest.mark.parametrize("flags, flag", [(["--alignment"], "--alignment"), (["--contention"], "--contention"),
                                         (["--collective", "all_gather"], "--collective")])
def test_calibrate_encoding_refusals(capsys, flags, flag):
    assert main(["calibrate", "--encoding", "fp16", *flags]) == 2
    assert capsys.readouterr().err == (f"fusionopt: error: --encoding times all-reduce messages sent in it beside fp32 "
                                       f"ones; leave {flag} out\n")
