"""``fusionopt.experiments._study``: what the paper reproductions share."""

import math

import pytest

from fusionopt.cost import AlphaBeta
from fusionopt.experiments import Outcome, Study, fmt_ms, solve_methods
from fusionopt.model import Problem, Profile

MS = 1e-3


def worked(sync="barrier"):
    profile = Profile.from_arrays([4e6, 1e6, 2e6], [MS] * 3, [3 * MS, 2 * MS, MS])
    return Problem(profile, AlphaBeta(3 * MS, 1e-9), sync=sync)


def test_outcomes_of_the_worked_example():
    out = solve_methods(worked(), [("w", "wfbp", {}), ("opt", "dp", {}), ("one", "dp", {"max_messages": 1})])
    # MODEL.md section 5, alpha = 3 ms: WFBP 20 ms, the DP 17 ms, one message 19 ms.
    assert [round(out[k].T / MS, 9) for k in ("w", "opt", "one")] == [20.0, 17.0, 19.0]
    assert out["opt"].status == "OPTIMAL" and out["opt"].lower_bound == out["opt"].T
    assert out["w"].messages == 3 and out["one"].messages == 1
    assert round(out["opt"].exposed / MS, 9) == 8.0              # 17 - (6 + 0 + 3)
    assert out["opt"].result is not None and out["opt"].stats == dict(out["opt"].result.stats)


def test_a_refusal_is_kept_only_where_allowed():
    out = solve_methods(worked(), [("p3", "p3", {})], may_refuse=("p3",))
    assert math.isnan(out["p3"].T) and out["p3"].error.startswith("ValueError: p3 is for sync='layerwise' only")
    with pytest.raises(ValueError, match="p3 is for sync='layerwise' only"):
        solve_methods(worked(), [("p3", "p3", {})])


def test_formats():
    assert fmt_ms(0.0999) == "99.90" and fmt_ms(0.1) == "100.0" and fmt_ms(Outcome().T) == "-"


def test_a_study_writes_its_report_and_keeps_it_on_interrupt(tmp_path):
    study = Study("Reproduce a paper.\n\nMore.", "papers/x/reproduce.py", str(tmp_path), "small")
    study.parser.add_argument("--k", type=int, default=2)
    args = study.parse(["--k", "3", "--out", str(tmp_path / "out")])
    assert args.k == 3 and not (tmp_path / "out").exists()          # made when the study starts
    tmp_path = tmp_path / "out"
    with study:
        study.progress.stage("one", total=1)
        study.progress.step("done")
        line = study.produced_by("the paper's numbers are quoted from its abstract")
        study.write("# Report\n\n" + line)
    text = (tmp_path / "RESULTS.md").read_text()
    assert text.startswith("# Report\n\nProduced by `python papers/x/reproduce.py --k 3 --out ")
    assert text.endswith("Every number below comes from that run; the paper's numbers are quoted from its abstract.\n")
    assert study.exit_code == 0

    again = Study("Reproduce a paper.", "papers/x/reproduce.py", str(tmp_path), "small")
    again.parse(["--out", str(tmp_path)])
    with again:
        again.progress.stage("one", total=2)
        again.progress.step("first")
        raise KeyboardInterrupt
    assert again.exit_code == 130
    assert (tmp_path / "RESULTS.md").read_text() == text             # the stored report is untouched
    assert "first" in (tmp_path / "RESULTS.interrupted.md").read_text()


def test_a_study_must_parse_first(tmp_path):
    with pytest.raises(RuntimeError, match="parse"):
        with Study("X.", "x.py", str(tmp_path), "small"):
            pass
