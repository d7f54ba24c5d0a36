"""fusionopt.viz: the bars of a timeline chart, the series of a sweep plot, the files written.

Numbers come from the MODEL.md section 5 worked example: three tensors of 4, 1 and 2 MB
(forward order), forward 1 ms each, backward 3, 2, 1 ms, so the gradients are ready at
r = 6, 3, 1 ms, B = 6 ms and F = 3 ms; AlphaBeta(alpha, 1e-9) costs alpha + S * 1 ns.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from fusionopt.solvers import solve
from fusionopt.cli import main
from fusionopt.cost import AlphaBeta
from fusionopt.model import Chunk, Message, Plan, Problem, Profile, simulate, ParameterServer, PSPlan
from fusionopt.viz import Bar, image_format, sweep_series, timeline_bars

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def example_profile() -> Profile:
    return Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])


def example_problem(alpha: float = 3e-3, **options) -> Problem:
    return Problem(example_profile(), AlphaBeta(alpha, 1e-9), **options)


def rows(bars: list[Bar], row: str, kind: str | None = None) -> list[Bar]:
    return [b for b in bars if b.row == row and (kind is None or b.kind == kind)]


def ms(values) -> list[float]:
    return [round(1e3 * v, 9) for v in values]


# ====================================================================== timeline_bars
def test_barrier_bars_match_the_worked_example():
    """alpha = 3 ms, {t3}, {t2, t1}: t2 runs 1 -> 6 ms, {t1, t0} 6 -> 14 ms; the forward
    waits from B = 6 to 14 ms (exposed 8 ms) and runs 14 -> 17 ms."""
    problem = example_problem()
    plan = Plan.from_groups(problem.profile, [[2], [1, 0]])
    timeline = simulate(problem, plan)
    bars = timeline_bars(plan, problem)

    channel = rows(bars, "channel")
    assert [b.label for b in channel] == ["m0: t2", "m1: t0-t1"]
    assert [b.fused for b in channel] == [False, True]
    assert [b.start for b in channel] == timeline.message_start.tolist()
    assert [b.end for b in channel] == timeline.message_end.tolist()

    backward = rows(bars, "compute", "backward")
    assert [b.tensor for b in backward] == [2, 1, 0]             # backward order
    assert ms(b.start for b in backward) == [0.0, 1.0, 3.0]
    assert ms(b.end for b in backward) == [1.0, 3.0, 6.0]
    forward = rows(bars, "compute", "forward")
    assert ms(b.start for b in forward) == [14.0, 15.0, 16.0]
    assert [b.start for b in forward] == pytest.approx(timeline.forward_start.tolist(), abs=1e-15)

    exposed = rows(bars, "compute", "exposed")
    assert [(round(1e3 * b.start, 9), round(1e3 * b.end, 9)) for b in exposed] == [(6.0, 14.0)]
    assert sum(b.duration for b in exposed) == pytest.approx(timeline.exposed, abs=1e-15)
    assert {b.row for b in bars} == {"compute", "channel"}


def test_layerwise_bars_put_each_forward_at_its_own_start():
    """Messages t2, t0, t1: t2 1 -> 4, t0 6 -> 11, t1 11 -> 13 ms. Layerwise: forward t0 at
    11, t1 waits for 13, t2 at 14; T = 15. The compute stream waits 6 -> 11 and 12 -> 13:
    6 ms, the exposed time."""
    problem = example_problem(alpha=1e-3, sync="layerwise")
    plan = Plan.from_groups(problem.profile, [[2], [0], [1]])
    timeline = simulate(problem, plan)
    assert timeline.iteration_time == pytest.approx(15e-3)
    bars = timeline_bars(plan, problem)
    forward = rows(bars, "compute", "forward")
    assert ms(b.start for b in forward) == [11.0, 13.0, 14.0]
    exposed = rows(bars, "compute", "exposed")
    assert [(round(1e3 * b.start, 9), round(1e3 * b.end, 9)) for b in exposed] == [(6.0, 11.0), (12.0, 13.0)]
    assert sum(b.duration for b in exposed) == pytest.approx(timeline.exposed, abs=1e-15)
    assert [b.label for b in rows(bars, "channel")] == ["m0: t2", "m1: t0", "m2: t1"]


@pytest.mark.parametrize("method", ["wfbp", "dp", "single", "mgwfbp"])
@pytest.mark.parametrize("sync", ["barrier", "layerwise"])
def test_zoo_bars_tile_the_backward_and_sum_to_exposed(method, sync):
    from fusionopt import zoo
    from fusionopt.cost import network

    profile = zoo.profile("resnet18", device="v100", batch=32)
    problem = Problem(profile, network("25gbe", 16), sync=sync)
    result = solve(problem, method)
    bars = timeline_bars(result, problem)
    timeline = result.timeline

    channel = rows(bars, "channel")
    assert len(channel) == result.num_messages
    assert np.array_equal([b.start for b in channel], timeline.message_start)
    assert np.array_equal([b.end for b in channel], timeline.message_end)
    assert [b.index for b in channel] == list(range(result.num_messages))

    backward = rows(bars, "compute", "backward")
    assert backward[0].start == 0.0
    assert backward[-1].end == pytest.approx(profile.B, rel=1e-12)
    for before, after in zip(backward, backward[1:]):
        assert after.start == before.end                         # no gap, no overlap
    assert sum(b.duration for b in backward) == pytest.approx(profile.B, rel=1e-12)

    forward = rows(bars, "compute", "forward")
    assert forward[-1].end == pytest.approx(timeline.iteration_time, rel=1e-12)
    exposed = sum(b.duration for b in rows(bars, "compute", "exposed"))
    assert exposed == pytest.approx(timeline.exposed, rel=1e-9, abs=1e-12)


def test_contention_slows_the_compute_bars_and_the_waits_make_up_the_rest():
    """With kappa = 2, WFBP's messages overlap the backward: the backward stretches, and the
    waits plus the stretch equal T - (B + F + U)."""
    problem = example_problem(alpha=1e-3, contention=2.0)
    plan = Plan.per_tensor(problem.profile, [2, 1, 0])
    timeline = simulate(problem, plan)
    bars = timeline_bars(plan, problem)
    compute = [b for b in rows(bars, "compute") if b.kind != "exposed"]
    waits = sum(b.duration for b in rows(bars, "compute", "exposed"))
    stretch = sum(b.duration for b in compute) - problem.profile.compute_time
    assert stretch > 1e-4                                        # the backward did slow down
    assert waits + stretch == pytest.approx(timeline.exposed, rel=1e-9)
    assert rows(bars, "compute", "forward")[-1].end == pytest.approx(timeline.iteration_time, rel=1e-12)


def test_packing_on_the_compute_stream_is_a_bar_after_its_backward():
    """copy_cost 1 ns/B on compute: {t1, t0} (5 MB) is packed for 5 ms after the backward of t0."""
    problem = example_problem(alpha=1e-3, copy_cost=1e-9, copy_on="compute")
    plan = Plan.from_groups(problem.profile, [[2], [1, 0]])
    bars = timeline_bars(plan, problem)
    (pack,) = rows(bars, "compute", "pack")
    assert ms([pack.start, pack.end]) == [6.0, 11.0]
    assert rows(bars, "channel")[1].start == pytest.approx(pack.end)


def test_several_channels_get_one_row_each_and_no_row_overlaps():
    problem = example_problem(alpha=1e-3, channels=2)
    plan = Plan.per_tensor(problem.profile, [2, 1, 0])
    bars = timeline_bars(plan, problem)
    comm = [b for b in bars if b.kind == "message"]
    assert len(comm) == 3
    assert {b.row for b in comm} <= {"channel 1", "channel 2"}
    for row in ("channel 1", "channel 2"):
        on_row = sorted((b.start, b.end) for b in comm if b.row == row)
        assert all(e <= s for (_, e), (s, _) in zip(on_row, on_row[1:]))


def test_parameter_server_bars_have_push_and_pull_rows():
    """simulate_ps's docstring example: pushes 1 -> 4, 4 -> 6, 6 -> 11; pulls 11 -> 16,
    16 -> 18, 18 -> 21; forwards at 16, 18, 21; T = 22 ms."""
    profile = example_profile()
    problem = Problem(profile, pattern=ParameterServer(AlphaBeta(1e-3, 1e-9)), sync="layerwise")
    plan = PSPlan.from_groups(profile, push=[[2], [1], [0]], pull=[[0], [1], [2]])
    timeline = simulate(problem, plan)
    bars = timeline_bars(plan, problem)
    push, pull = rows(bars, "push"), rows(bars, "pull")
    assert [b.kind for b in push + pull] == ["push"] * 3 + ["pull"] * 3
    assert [b.end for b in push] == timeline.message_end.tolist()
    assert [b.start for b in pull] == timeline.pull_start.tolist()
    assert ms(b.end for b in pull) == [16.0, 18.0, 21.0]
    assert [b.label for b in pull] == ["m0: t0", "m1: t1", "m2: t2"]
    assert ms(b.start for b in rows(bars, "compute", "forward")) == [16.0, 18.0, 21.0]
    assert sum(b.duration for b in rows(bars, "compute", "exposed")) == pytest.approx(timeline.exposed)


def test_parameter_server_partitioned_compute_splits_the_backward_along_the_pushes():
    """t0 (4 MB, 3 ms) pushed in two halves with delta = 0.5 ms: two backward pieces of 2 ms."""
    profile = example_profile()
    ps = ParameterServer(AlphaBeta(1e-3, 1e-9), partition_compute=True, delta=5e-4)
    problem = Problem(profile, pattern=ps, sync="layerwise")
    push = Plan((Message((Chunk(2, 0, 2_000_000),)), Message((Chunk(1, 0, 1_000_000),)),
                 Message((Chunk(0, 0, 2_000_000),)), Message((Chunk(0, 2_000_000, 4_000_000),))))
    plan = PSPlan(push, Plan.from_groups(profile, [[0], [1], [2]]))
    bars = timeline_bars(plan, problem)
    pieces = [b for b in rows(bars, "compute", "backward") if b.tensor == 0]
    assert ms(b.duration for b in pieces) == [2.0, 2.0]
    assert [b.label for b in rows(bars, "push")][2:] == ["m2: part of t0", "m3: part of t0"]


def test_bars_of_a_result_a_plan_and_a_timeline_agree():
    problem = example_problem()
    result = solve(problem, "dp")
    from_result = timeline_bars(result, problem)
    assert timeline_bars(result.plan, problem) == from_result
    assert timeline_bars(result.timeline, problem, plan=result.plan) == from_result


def test_bars_refuse_a_timeline_without_its_plan_or_of_another_plan():
    problem = example_problem()
    plan = Plan.from_groups(problem.profile, [[2], [1, 0]])
    timeline = simulate(problem, plan)
    with pytest.raises(ValueError, match="pass plan="):
        timeline_bars(timeline, problem)
    with pytest.raises(ValueError, match="do not belong together"):
        timeline_bars(timeline, problem, plan=Plan.from_groups(problem.profile, [[2, 1, 0]]))
    with pytest.raises(ValueError, match="do not belong together"):
        timeline_bars(timeline, problem, plan=Plan.from_groups(problem.profile, [[2, 1], [0]]))
    slower = Profile.from_arrays([4e6, 1e6, 2e6], [2e-3] * 3, [3e-3, 2e-3, 1e-3])   # F = 6 ms, not 3
    with pytest.raises(ValueError, match="ends at 0.02 s, the timeline at T = 0.017 s"):
        timeline_bars(timeline, Problem(slower, problem.cost), plan=plan)
    with pytest.raises(ValueError, match="needs the Problem"):
        timeline_bars(plan, None)


# ====================================================================== sweep_series
def record(method, workers, value, *, model="resnet50", network="10gbe", status="FEASIBLE", **extra):
    r = {"model": model, "device": "h100", "batch": 64, "network": network, "algorithm": "ring",
         "workers": workers, "sync": "barrier", "method": method, "iteration_time": None,
         "compute_time": 0.01, "scaling_efficiency": value, "throughput": None if value is None else workers * value,
         "lower_bound": None, "status": status, "messages": 3, "solve_seconds": 0.0}
    if value is not None:
        r["iteration_time"] = 0.01 / value
    r.update(extra)
    return r


RECORDS = [
    record("dp", 8, 0.5, status="OPTIMAL"), record("wfbp", 4, 0.75), record("dp", 4, 0.8, status="OPTIMAL"),
    record("wfbp", 8, 0.25), record("wfbp", 16, None, status="ERROR"), record("dp", 16, 0.4, status="OPTIMAL"),
]


def test_sweep_series_sorts_workers_and_skips_error_records():
    series = sweep_series(RECORDS)
    assert list(series) == ["dp", "wfbp"]
    assert series["dp"][0].tolist() == [4, 8, 16]
    assert series["dp"][1].tolist() == [0.8, 0.5, 0.4]
    assert series["wfbp"][0].tolist() == [4, 8]                  # the ERROR record at 16 is left out
    assert series["wfbp"][1].tolist() == [0.75, 0.25]
    throughput = sweep_series(RECORDS, "throughput")
    assert throughput["dp"][1].tolist() == [3.2, 4.0, 6.4]
    # A record of an older sweep names the throughput "speedup": it reads the same.
    older = [{**{k: v for k, v in r.items() if k != "throughput"}, "speedup": r["throughput"]} for r in RECORDS]
    assert sweep_series(older, "throughput")["dp"][1].tolist() == [3.2, 4.0, 6.4]
    times = sweep_series(RECORDS, "iteration_time")
    assert times["wfbp"][1].tolist() == [0.01 / 0.75, 0.01 / 0.25]


def test_sweep_series_needs_one_model_and_network_or_a_filter():
    mixed = RECORDS + [record("dp", 4, 0.9, model="vgg16"), record("dp", 4, 0.7, network="100gb-ib")]
    with pytest.raises(ValueError, match=r"2 models: 'resnet50', 'vgg16'; choose one with model="):
        sweep_series(mixed)
    with pytest.raises(ValueError, match=r"2 networks: '10gbe', '100gb-ib'; choose one with network="):
        sweep_series(mixed, model="resnet50")
    assert sweep_series(mixed, model="vgg16")["dp"][1].tolist() == [0.9]
    assert sweep_series(mixed, model="resnet50", network="10gbe")["dp"][1].tolist() == [0.8, 0.5, 0.4]
    with pytest.raises(ValueError, match="no sweep record has model 'gpt2'.*'resnet50', 'vgg16'"):
        sweep_series(mixed, model="gpt2")


def test_sweep_series_labels_settings_that_differ_and_refuses_duplicates():
    tree = [dict(r, algorithm="tree") for r in RECORDS]
    series = sweep_series(RECORDS + tree)
    assert sorted(series) == ["dp (algorithm ring)", "dp (algorithm tree)", "wfbp (algorithm ring)",
                              "wfbp (algorithm tree)"]
    bf16 = [dict(r, precision="bf16") for r in RECORDS]
    series = sweep_series([dict(r, precision="fp32") for r in RECORDS] + bf16)
    assert series["dp (precision bf16)"][1].tolist() == [0.8, 0.5, 0.4] and "wfbp (precision fp32)" in series
    with pytest.raises(ValueError, match="two sweep records of 'dp' at 4 workers"):
        sweep_series(RECORDS + [record("dp", 4, 0.1)])
    with pytest.raises(ValueError, match="unknown metric 'speedup'"):
        sweep_series(RECORDS, "speedup")             # "speedup" is a ratio of two times, not a sweep metric
    with pytest.raises(ValueError, match="scaling_efficiency is None, not a number"):
        sweep_series([record("dp", 4, None, status="FEASIBLE")])


def test_image_format_by_extension():
    assert image_format("a/b.png") == "png"
    assert image_format(Path("b.SVG")) == "svg"
    with pytest.raises(ValueError, match=r"b.jpeg: unknown image format .jpeg"):
        image_format("b.jpeg")
    with pytest.raises(ValueError, match=r"unknown image format \(no extension\)"):
        image_format("timeline")


# ====================================================================== drawing (matplotlib)
def drawn_bars(ax) -> dict[str, list[tuple[float, float, str | None]]]:
    """Per row name, every rectangle drawn with broken_barh: (left, right, hatch), in ms."""
    ticks = {round(float(t), 6): label.get_text() for t, label in zip(ax.get_yticks(), ax.get_yticklabels())}
    out: dict[str, list[tuple[float, float, str | None]]] = {}
    for collection in ax.collections:
        for path in collection.get_paths():
            vertices = path.vertices
            row = ticks[round(float(vertices[:, 1].min() + vertices[:, 1].max()) / 2, 6)]
            out.setdefault(row, []).append((float(vertices[:, 0].min()), float(vertices[:, 0].max()),
                                            collection.get_hatch()))
    return out


@pytest.fixture
def plt():
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    yield plt
    plt.close("all")


def test_plot_timeline_draws_one_bar_per_message_and_the_exposed_band(plt):
    from fusionopt.viz import plot_timeline

    problem = example_problem()
    result = solve(problem, "wfbp")
    fig = plot_timeline(result, problem, title="worked example")
    ax = fig.axes[0]
    drawn = drawn_bars(ax)
    channel = sorted(drawn["channel"])
    assert len(channel) == result.num_messages == 3
    assert [left for left, _, _ in channel] == pytest.approx(1e3 * result.timeline.message_start)
    assert [right for _, right, _ in channel] == pytest.approx(1e3 * result.timeline.message_end)
    hatched = [(left, right) for left, right, hatch in drawn["compute"] if hatch]
    assert sum(right - left for left, right in hatched) == pytest.approx(1e3 * result.timeline.exposed)
    assert ax.get_title().splitlines() == ["worked example", "wfbp: T = 20 ms, exposed 11 ms, 3 messages, barrier sync"]
    texts = [t.get_text() for t in ax.texts]
    assert "T = 20 ms " in texts
    assert ax.get_xlim()[1] == pytest.approx(20 * 1.02)


def test_plot_timeline_labels_only_wide_messages(plt):
    from fusionopt.viz import plot_timeline

    profile = Profile.from_arrays([1e9, 1e3], [1e-3, 1e-3], [1e-3, 1e-3])
    problem = Problem(profile, AlphaBeta(1e-6, 1e-12))          # t1: 1 us, t0: 1 s
    plan = Plan.per_tensor(profile, [1, 0])
    fig = plot_timeline(plan, problem, figsize=(8, 3))
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "m1: t0" in texts                                     # a bar across the whole axis
    assert not any(t.startswith("m0") or t == "1 kB" for t in texts)   # 1 us of 1 s: no room


def test_plot_timeline_into_given_axes_and_by_tensor(plt):
    from fusionopt.viz import plot_timeline

    problem = example_problem(alpha=1e-3, sync="layerwise")
    fig, axes = plt.subplots(2, 1)
    assert plot_timeline(solve(problem, "wfbp"), problem, ax=axes[1], color_by="tensor", xlim=(0, 40)) is fig
    assert axes[1].get_xlim() == (0, 40)
    assert len(axes[0].collections) == 0
    with pytest.raises(ValueError, match="unknown color_by 'rainbow'"):
        plot_timeline(solve(problem, "wfbp"), problem, color_by="rainbow")


def test_save_timeline_writes_png_and_svg_atomically_and_leaves_no_figure(plt, tmp_path):
    from fusionopt.viz import save_timeline

    problem = example_problem()
    before = plt.get_fignums()
    written = save_timeline(solve(problem, "dp"), problem, [tmp_path / "t.png", tmp_path / "t.svg"])
    assert written == [str(tmp_path / "t.png"), str(tmp_path / "t.svg")]
    assert (tmp_path / "t.png").read_bytes().startswith(PNG_SIGNATURE)
    root = ET.parse(tmp_path / "t.svg").getroot()
    assert root.tag.endswith("svg")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.png", "t.svg"]   # no temporary left
    assert plt.get_fignums() == before
    again = tmp_path / "again.svg"
    save_timeline(solve(problem, "dp"), problem, again)
    assert again.read_bytes() == (tmp_path / "t.svg").read_bytes()   # SVG output is reproducible


def test_save_refuses_an_unknown_format_before_drawing(plt, tmp_path):
    from fusionopt.viz import save_sweep, save_timeline

    problem = example_problem()
    with pytest.raises(ValueError, match=r"t.pdf: unknown image format .pdf: write .png or .svg"):
        save_timeline(solve(problem, "dp"), problem, [tmp_path / "t.png", tmp_path / "t.pdf"])
    with pytest.raises(ValueError, match=r"s.gif: unknown image format .gif"):
        save_sweep(RECORDS, tmp_path / "s.gif")
    with pytest.raises(ValueError, match=r"dpi must be a number in \(0, 2400\], got 100000"):
        save_timeline(solve(problem, "dp"), problem, tmp_path / "t.png", dpi=100000)
    assert list(tmp_path.iterdir()) == []


def test_plot_sweep_one_line_per_method_and_a_note_on_errors(plt):
    from fusionopt.viz import plot_sweep

    fig = plot_sweep(RECORDS)
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert sorted(lines) == ["dp", "wfbp"]
    assert lines["dp"].get_xdata().tolist() == [4, 8, 16]
    assert lines["dp"].get_ydata().tolist() == [0.8, 0.5, 0.4]
    assert lines["wfbp"].get_marker() != lines["dp"].get_marker()
    assert ax.get_xscale() == "log"
    assert any("skipped 1 record with status ERROR: wfbp at 16" in t.get_text() for t in fig.texts)
    times = plot_sweep(RECORDS, metric="iteration_time")
    dp = next(line for line in times.axes[0].get_lines() if line.get_label() == "dp")
    assert dp.get_ydata().tolist() == pytest.approx([12.5, 20.0, 25.0])      # ms


def test_plot_sweep_small_multiples_or_one_axes(plt):
    from fusionopt.viz import plot_sweep

    mixed = RECORDS + [record("dp", 4, 0.9, model="vgg16"), record("dp", 4, 0.7, network="100gb-ib")]
    fig = plot_sweep(mixed)
    titles = sorted(a.get_title() for a in fig.axes if a.get_visible() and a.axison)
    assert titles == ["resnet50, 100gb-ib", "resnet50, 10gbe", "vgg16, 10gbe"]
    _, ax = plt.subplots()
    with pytest.raises(ValueError, match=r"the records hold 3: resnet50, 10gbe; vgg16, 10gbe; resnet50, 100gb-ib"):
        plot_sweep(mixed, ax=ax)
    assert plot_sweep(mixed, model="vgg16", ax=ax) is ax.figure
    with pytest.raises(ValueError, match="no sweep record with numbers"):
        plot_sweep([record("dp", 4, None, status="ERROR")])


def test_save_sweep_png_and_svg(plt, tmp_path):
    from fusionopt.viz import save_sweep

    assert save_sweep(RECORDS, [tmp_path / "s.png", tmp_path / "s.svg"], metric="throughput") == [
        str(tmp_path / "s.png"), str(tmp_path / "s.svg")]
    assert (tmp_path / "s.png").read_bytes()[:8] == PNG_SIGNATURE
    assert ET.parse(tmp_path / "s.svg").getroot().tag.endswith("svg")
    with pytest.raises(TypeError, match="unknown option"):
        save_sweep(RECORDS, tmp_path / "s.png", colour="red")


def test_without_matplotlib_the_error_names_the_extra(monkeypatch):
    from fusionopt.viz import plot_sweep, plot_timeline

    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)          # import matplotlib -> ImportError
    problem = example_problem()
    with pytest.raises(ImportError, match=r"pip install 'fusionopt\[plot\]'"):
        plot_timeline(Plan.from_groups(problem.profile, [[2, 1, 0]]), problem)
    with pytest.raises(ImportError, match=r"pip install 'fusionopt\[plot\]'"):
        plot_sweep(RECORDS)


# ====================================================================== command line
def run(capsys, *argv) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_cli_plot_timeline_writes_both_files(plt, capsys, tmp_path):
    profile_path = tmp_path / "profile.json"
    example_profile().write(profile_path)
    png, svg = tmp_path / "t.png", tmp_path / "t.svg"
    status, out, err = run(capsys, "plot", "timeline", "--profile", profile_path, "--alpha", "0.003",
                           "--beta", "1e-9", "--method", "dp", "--output", png, "--output", svg)
    assert (status, err) == (0, "")
    assert out.splitlines() == ["dp: T = 17.000000 ms, exposed 8.000000 ms, 2 messages",
                                f"wrote {png}", f"wrote {svg}"]
    assert png.read_bytes().startswith(PNG_SIGNATURE)
    assert ET.parse(svg).getroot().tag.endswith("svg")


def test_cli_plot_timeline_of_a_plan_file(plt, capsys, tmp_path):
    profile_path = tmp_path / "profile.json"
    example_profile().write(profile_path)
    plan_path = tmp_path / "plan.json"
    Plan.from_groups(example_profile(), [[2, 1], [0]]).write(plan_path)
    status, out, _ = run(capsys, "plot", "timeline", "--profile", profile_path, "--alpha", "0.003", "--beta",
                         "1e-9", "--plan", plan_path, "--output", tmp_path / "t.png")
    assert status == 0
    assert out.splitlines()[0] == f"{plan_path}: T = 19.000000 ms, exposed 10.000000 ms, 2 messages"


@pytest.mark.parametrize("argv, message", [
    (["--output", "t.jpg"], "t.jpg: unknown image format .jpg: write .png or .svg"),
    ([], "the following arguments are required: --output"),
    (["--output", "t.png", "--method", "nope"], "nope"),
    (["--output", "t.png", "--plan", "missing.json", "--method", "dp"], "give --method (with --option) or --plan"),
])
def test_cli_plot_timeline_bad_input_exits_2_with_one_line(plt, capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    example_profile().write(tmp_path / "profile.json")
    status, out, err = run(capsys, "plot", "timeline", "--profile", "profile.json", "--alpha", "0.003",
                           "--beta", "1e-9", *argv)
    assert status == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and message in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["profile.json"]


def test_cli_plot_help_lists_both(capsys):
    status, out, _ = run(capsys, "plot", "--help")
    assert status == 0
    assert "timeline" in out and "sweep" in out
    status, _, err = run(capsys, "plot")
    assert status == 2 and "PLOT" in err


def test_cli_plot_sweep_reads_results(plt, capsys, tmp_path):
    sweep = pytest.importorskip("fusionopt.sweep")
    results = tmp_path / "sweep.jsonl"
    sweep.run_sweep(sweep.cells(["alexnet"], [4, 8], ["10gbe"], ["wfbp", "dp"]), results, jobs=1, progress=False)
    records = sweep.read_results(results)
    png, svg = tmp_path / "s.png", tmp_path / "s.svg"
    status, out, err = run(capsys, "plot", "sweep", results, "--metric", "throughput", "--output", png, "--output", svg)
    assert (status, err) == (0, "")
    assert out.splitlines() == [f"wrote {png}", f"wrote {svg}"]
    assert png.read_bytes().startswith(PNG_SIGNATURE)
    assert ET.parse(svg).getroot().tag.endswith("svg")
    # The results file is the command's input: an --output onto it is refused, and named as given.
    before = results.read_bytes()
    status, out, err = run(capsys, "plot", "sweep", results, "--output", results)
    assert status == 2 and f"--output {results} is the results file itself" in err and results.read_bytes() == before
    # An argument that cannot be a file name (a title longer than a name may be) is no input.
    status, out, err = run(capsys, "plot", "sweep", results, "--title", "A very long title " * 20, "--output", png)
    assert (status, err) == (0, "")
    series = sweep_series(records, "throughput")
    assert sorted(series) == ["dp", "wfbp"]
    assert series["dp"][0].tolist() == [4, 8]

    # An ERROR record (written by hand, as a sweep writes one) is skipped with a note.
    error = dict(records[0], workers=16, status="ERROR", iteration_time=None, scaling_efficiency=None,
                 throughput=None, lower_bound=None, messages=None, error="ValueError: example")
    with results.open("a") as handle:
        handle.write(json.dumps(error) + "\n")
    status, out, _ = run(capsys, "plot", "sweep", results, "--output", png)
    assert status == 0
    assert out.splitlines()[0] == "skipped 1 record with status ERROR (no numbers)"

    status, _, err = run(capsys, "plot", "sweep", results, "--model", "vgg16", "--output", png)
    assert status == 2
    assert err.strip() == "fusionopt: error: no sweep record has model 'vgg16': the records hold 'alexnet'"
    status, _, err = run(capsys, "plot", "sweep", tmp_path / "missing.jsonl", "--output", png)
    assert status == 2 and len(err.strip().splitlines()) == 1


def test_message_labels_say_when_the_framework_posted_them():
    from fusionopt.viz import timeline_bars

    profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    problem = Problem(profile, AlphaBeta(3e-3, 1e-9))
    result = solve(problem, "horovod", cycle_time=3e-3)      # ticks at 3 and 6 ms
    labels = [b.label for b in timeline_bars(result, problem) if b.kind == "message"]
    assert labels == ["m0: t1-t2, posted at 3 ms", "m1: t0, posted at 6 ms"]


def test_many_panels_keep_the_title_clear_and_log_y_is_logarithmic(plt):
    from fusionopt.viz import plot_sweep

    # 6 models x 4 networks: the first row's titles ran into the figure's title.
    records = [{"model": f"model{i}", "network": f"net{j}", "method": "dp", "workers": p, "status": "OPTIMAL",
                "scaling_efficiency": e, "iteration_time": t}
               for i in range(6) for j in range(4) for p, e, t in ((4, 0.9, 0.1), (8, 0.8, 0.2))]
    fig = plot_sweep(records)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    title = fig._suptitle.get_window_extent(renderer)
    top_row = [a.title.get_window_extent(renderer) for a in fig.axes[:4]]
    assert all(t.y1 < title.y0 for t in top_row)            # the first row's titles sit below it
    plt.close(fig)
    few = [r for r in records if r["model"] == "model0" and r["network"] in ("net0", "net1")]
    logged = plot_sweep(few, metric="iteration_time", log_y=True)
    linear = plot_sweep(few, metric="iteration_time")
    assert len(logged.axes) == 2 and {a.get_yscale() for a in logged.axes} == {"log"}
    assert {a.get_yscale() for a in linear.axes} == {"linear"}
    for f in (logged, linear):
        plt.close(f)
