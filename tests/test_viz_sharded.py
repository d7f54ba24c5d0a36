"""Timelines of the sharded patterns (MODEL.md section 8): the collectives of a decoupled or a
fully sharded step on their channel(s), labelled and coloured by kind, and a fully sharded
step's memory under the chart.

Hand-worked numbers come from MODEL.md section 5's profile (4, 1, 2 MB; forward 1 ms each;
backward 3, 2, 1 ms) with every collective costing 1 ms + 1 ns/B.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from fusionopt.solvers import solve

from fusionopt import zoo
from fusionopt.cli import main
from fusionopt.cost import AlphaBeta
from fusionopt.model import Problem, Profile, simulate, Decoupled, DecoupledPlan, FullySharded, ShardedPlan
from fusionopt.viz import memory_steps, timeline_bars, ROW_COLORS

HALF = AlphaBeta(1e-3, 1e-9)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def example_profile(**step) -> Profile:
    return Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3], **step)


def sharded(profile: Profile | None = None, **options) -> Problem:
    return Problem(profile or example_profile(), pattern=FullySharded(HALF, HALF, **options))


def decoupled(sync: str = "layerwise") -> Problem:
    return Problem(example_profile(), pattern=Decoupled(HALF, HALF), sync=sync)


def ms(values) -> list[float]:
    return [round(1e3 * v, 9) for v in values]


# ====================================================================== bars (no matplotlib)
def test_one_unit_bars_are_the_worked_check():
    # MODEL.md 8.2: all-gather 0-8, forward 8-11, second all-gather 11-19, backward 19-25,
    # reduce-scatter 25-33 ms.
    bars = timeline_bars(ShardedPlan([0, 3]), sharded())
    comm = [b for b in bars if b.row == "channel"]
    assert [(b.kind, b.label) for b in comm] == [("all-gather", "AG u0: t0-t2"),
                                                 ("all-gather", "AG u0 (backward): t0-t2"),
                                                 ("reduce-scatter", "RS u0: t0-t2")]
    assert [(ms([b.start])[0], ms([b.end])[0]) for b in comm] == [(0.0, 8.0), (11.0, 19.0), (25.0, 33.0)]
    compute = [b for b in bars if b.row == "compute" and b.kind in ("forward", "backward")]
    assert (ms([compute[0].start])[0], ms([compute[-1].end])[0]) == (8.0, 25.0)
    waits = [(b.start, b.end) for b in bars if b.kind == "exposed"]
    assert ms(w for w, _ in waits) == [0.0, 11.0, 25.0] and ms(e for _, e in waits) == [8.0, 19.0, 33.0]


def test_decoupled_bars_name_each_message_by_kind_and_index():
    # simulate_decoupled's example: reduce-scatters 1-4, 4-6, 6-11 ms, one all-gather 11-19 ms.
    problem = decoupled()
    plan = DecoupledPlan.from_groups(problem.profile, [[2], [1], [0]], [[0, 1, 2]])
    comm = [b for b in timeline_bars(plan, problem) if b.row == "channel"]
    assert [b.label for b in comm] == ["RS0: t2", "RS1: t1", "RS2: t0", "AG0: t0-t2"]
    assert ms(b.end for b in comm) == [4.0, 6.0, 11.0, 19.0]
    # Gradients reduced by all-reduces (c_RS + c_AG = 2 ms + 2 ns/B): 1-7, 7-11, 11-21, gather 21-29.
    reduced = DecoupledPlan.from_groups(problem.profile, [[2], [1], [0]], [[0, 1, 2]], reduce_with="all_reduce")
    comm = [b for b in timeline_bars(reduced, problem) if b.row == "channel"]
    assert [b.kind for b in comm] == ["all-reduce"] * 3 + ["all-gather"]
    assert ms(b.end for b in comm) == [7.0, 11.0, 21.0, 29.0]


def test_two_channels_put_each_kind_on_its_own_row():
    problem = sharded(channels="two")
    result = solve(problem, "sharded-wfbp")
    bars = timeline_bars(result, problem)
    kinds = result.timeline.message_collectives()
    assert sorted({b.row for b in bars}) == ["all-gather channel", "compute", "reduce-scatter channel"]
    for kind in ("all-gather", "reduce-scatter"):
        on_row = [b for b in bars if b.row == f"{kind} channel"]
        assert len(on_row) == kinds.count(kind) > 0 and {b.kind for b in on_row} == {kind}
        # First in, first out on its own channel: no two of a row overlap.
        spans = sorted((b.start, b.end) for b in on_row)
        assert all(end <= start + 1e-15 for (_, end), (start, _) in zip(spans, spans[1:]))


def test_bars_refuse_a_plan_of_another_pattern():
    problem = sharded()
    with pytest.raises(ValueError, match="^timeline_bars: a fully sharded problem needs a ShardedPlan, got DecoupledPlan$"):
        timeline_bars(simulate(decoupled(), DecoupledPlan.from_groups(example_profile(), [[2], [1], [0]], [[0, 1, 2]])),
                      problem, plan=DecoupledPlan.from_groups(example_profile(), [[2], [1], [0]], [[0, 1, 2]]))
    with pytest.raises(ValueError, match="they do not belong together"):
        timeline_bars(simulate(problem, ShardedPlan([0, 3])), problem, plan=ShardedPlan([0, 1, 3]))


def test_memory_steps_end_at_T_and_peak_at_peak_memory():
    problem = sharded(memory_cap=12e6)
    plan = ShardedPlan([0, 1, 2, 3], [False, True, False])
    timeline = simulate(problem, plan)
    times, nbytes = memory_steps(plan, problem)
    assert times[0] == 0.0 and times[-1] == timeline.iteration_time and np.all(np.diff(times) >= 0)
    assert nbytes.max() == timeline.peak_memory and nbytes[-1] == 0
    with pytest.raises(ValueError, match="memory_steps needs a fully sharded problem"):
        memory_steps(DecoupledPlan.from_groups(example_profile(), [[2], [1], [0]], [[0, 1, 2]]), decoupled())


def test_step_parts_get_their_own_bars():
    # update_lump and host_overhead run after the optimiser on a fully sharded step.
    profile = example_profile(update_lump=2e-3, host_overhead=1e-3)
    result = solve(sharded(profile), "sharded-wfbp")
    bars = timeline_bars(result, sharded(profile))
    parts = [(b.kind, round(1e3 * b.duration, 9)) for b in bars if b.kind in ("update_lump", "host_overhead")]
    assert parts == [("update_lump", 2.0), ("host_overhead", 1.0)]
    assert max(b.end for b in bars) == pytest.approx(result.iteration_time, rel=1e-12)


# ====================================================================== drawing (matplotlib)
@pytest.fixture
def plt():
    pytest.importorskip("matplotlib")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    yield plt
    plt.close("all")


def drawn_kinds(ax) -> dict[str, dict[str, int]]:
    """Per row, the number of rectangles drawn in each collective kind's colours."""
    from matplotlib.colors import to_hex

    colours = {to_hex(c): kind for kind in ("all-gather", "reduce-scatter", "all-reduce") for c in ROW_COLORS[kind]}
    ticks = {round(float(t), 6): label.get_text() for t, label in zip(ax.get_yticks(), ax.get_yticklabels())}
    out: dict[str, dict[str, int]] = {}
    for collection in ax.collections:
        kind = colours.get(to_hex(collection.get_facecolor()[0]))
        if kind is None:
            continue
        for path in collection.get_paths():
            row = ticks[round(float(path.vertices[:, 1].min() + path.vertices[:, 1].max()) / 2, 6)]
            out.setdefault(row, {}).setdefault(kind, 0)
            out[row][kind] += 1
    return out


@pytest.mark.parametrize("channels", ["one", "two"])
def test_fully_sharded_chart_and_memory_to_png_and_svg(plt, tmp_path, channels):
    from fusionopt.viz import plot_timeline, save_timeline

    profile = zoo.profile("resnet18", device="v100", batch=64)
    fully = FullySharded.from_network("25gbe", 8, memory_cap=60e6, channels=channels)
    problem = Problem(profile, pattern=fully)
    result = solve(problem, "fsdp2")
    kinds = result.timeline.message_collectives()
    written = save_timeline(result, problem, [tmp_path / "t.png", tmp_path / "t.svg"])
    assert (tmp_path / "t.png").read_bytes().startswith(PNG_SIGNATURE)
    assert ET.parse(tmp_path / "t.svg").getroot().tag.endswith("svg") and len(written) == 2

    fig = plot_timeline(result, problem)
    gantt, memory = fig.axes
    drawn = drawn_kinds(gantt)
    if channels == "two":
        assert [t.get_text() for t in gantt.get_yticklabels()] == ["compute", "all-gather channel",
                                                                    "reduce-scatter channel"]
        assert drawn == {"all-gather channel": {"all-gather": kinds.count("all-gather")},
                         "reduce-scatter channel": {"reduce-scatter": kinds.count("reduce-scatter")}}
    else:
        assert [t.get_text() for t in gantt.get_yticklabels()] == ["compute", "channel"]
        assert drawn == {"channel": {"all-gather": kinds.count("all-gather"),
                                     "reduce-scatter": kinds.count("reduce-scatter")}}
    # The memory line is the simulation's step function: its top is the peak, in MiB.
    line = next(l for l in memory.lines if l.get_label() == "unsharded parameters and gradients")
    assert float(np.max(line.get_ydata())) * 2**20 == result.timeline.peak_memory
    assert float(np.max(line.get_xdata())) == pytest.approx(1e3 * result.iteration_time, rel=1e-12)
    cap = next(l for l in memory.lines if l.get_label().startswith("memory cap"))
    assert cap.get_ydata()[0] * 2**20 == pytest.approx(60e6, rel=1e-12)
    legend = [t.get_text() for t in gantt.get_legend().get_texts()]
    assert {"all-gather", "reduce-scatter", "forward", "backward"} <= set(legend)
    assert memory.get_xlabel() == "time from the start of the forward (ms)"
    assert f"{len(kinds)} collectives ({kinds.count('all-gather')} all-gathers, " in gantt.get_title()


def test_step_parts_are_drawn_and_named(plt):
    from fusionopt.viz import plot_timeline

    # An all-reduce step with every step part: each is a bar of its own colour and legend entry.
    profile = example_profile(update_lump=2e-3, post_backward=1e-3, host_overhead=5e-3)
    problem = Problem(profile, AlphaBeta(1e-3, 1e-9))
    fig = plot_timeline(solve(problem, "wfbp"), problem)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert {"post-backward work", "optimiser (not per tensor)", "host overhead"} <= set(legend)
    parts = [b for b in timeline_bars(solve(problem, "wfbp"), problem) if b.tensor == -1]
    assert sorted((b.kind, round(1e3 * b.duration, 9)) for b in parts) == [
        ("host_overhead", 5.0), ("post_backward", 1.0), ("update_lump", 2.0)]


def test_decoupled_chart_has_no_memory_panel(plt):
    from fusionopt.viz import plot_timeline

    problem = decoupled()
    plan = DecoupledPlan.from_groups(problem.profile, [[2], [1], [0]], [[0], [1], [2]])
    fig = plot_timeline(plan, problem)
    assert len(fig.axes) == 1
    assert drawn_kinds(fig.axes[0]) == {"channel": {"reduce-scatter": 3, "all-gather": 3}}
    assert fig.axes[0].get_title() == ("T = 22 ms, exposed 13 ms, 6 collectives (3 all-gathers, 3 reduce-scatters), "
                                       "layerwise sync")


# ====================================================================== the command line
def run(capsys, *argv) -> tuple[int, str, str]:
    status = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_cli_plot_timeline_fully_sharded_on_two_channels(plt, capsys, tmp_path):
    profile_path = tmp_path / "profile.json"
    example_profile().write(profile_path)
    png, svg = tmp_path / "t.png", tmp_path / "t.svg"
    status, out, err = run(capsys, "plot", "timeline", "--profile", profile_path, "--alpha", "0.001", "--beta",
                           "1e-9", "--fully-sharded", "--channels", "2", "--method", "sharded-wfbp",
                           "--output", png, "--output", svg)
    assert (status, err) == (0, "")
    timeline = solve(Problem(example_profile(), pattern=FullySharded(HALF, HALF, channels="two")),
                     "sharded-wfbp").timeline
    kinds = timeline.message_collectives()
    assert out.splitlines()[0] == (f"sharded-wfbp: T = {1e3 * timeline.iteration_time:.6f} ms, exposed "
                                   f"{1e3 * timeline.exposed:.6f} ms, {len(kinds)} collectives "
                                   f"({kinds.count('all-gather')} all-gathers, {kinds.count('reduce-scatter')} "
                                   f"reduce-scatters), peak memory {timeline.peak_memory / 2**20:.3f} MiB")
    assert png.read_bytes().startswith(PNG_SIGNATURE) and ET.parse(svg).getroot().tag.endswith("svg")


def test_cli_plot_timeline_of_a_decoupled_plan_file(plt, capsys, tmp_path):
    profile_path, plan_path = tmp_path / "profile.json", tmp_path / "plan.json"
    example_profile().write(profile_path)
    DecoupledPlan.from_groups(example_profile(), [[2], [1], [0]], [[0, 1, 2]]).write(plan_path)
    status, out, err = run(capsys, "plot", "timeline", "--profile", profile_path, "--alpha", "0.001", "--beta",
                           "1e-9", "--decoupled", "--sync", "layerwise", "--plan", plan_path,
                           "--output", tmp_path / "t.png")
    assert (status, err) == (0, "")
    assert out.splitlines()[0] == (f"{plan_path}: T = 22.000000 ms, exposed 13.000000 ms, 4 collectives "
                                   "(1 all-gather, 3 reduce-scatters)")
    # Without --method or --plan, a decoupled problem draws decoupled-dp's plan.
    status, out, _ = run(capsys, "plot", "timeline", "--profile", profile_path, "--alpha", "0.001", "--beta",
                         "1e-9", "--decoupled", "--output", tmp_path / "d.png")
    assert status == 0 and out.startswith("decoupled-dp: T = ")
    assert json.loads(plan_path.read_text())["schema"] == "fusionopt.decoupledplan"     # the input is untouched
