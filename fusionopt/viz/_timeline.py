"""A plan's timeline as a Gantt chart: :func:`plot_timeline` draws :func:`~fusionopt.viz.timeline_bars`
(with the memory step function under a fully sharded step) and :func:`save_timeline` writes it."""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from fusionopt.model._cost import check_flag
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._ps_plan import PSPlan
from fusionopt.model._timeline import Timeline
from fusionopt.viz._bars import Bar, KIND_NAMES, channel_rows, memory_steps, resolve_source, timeline_bars
from fusionopt.viz._figures import image_paths, import_matplotlib, label_fits, new_figure, to_ms, write_figure


_KIND_COLORS = {
    "backward": "#4c72b0",
    "forward": "#55a868",
    "update": "#9a9a9a",
    "pack": "#dd8452",
    "post_backward": "#c8a2c8",
    "update_lump": "#6f6f6f",
    "host_overhead": "#d9c27a",
    "exposed": "#fbe3e3",
}


ROW_COLORS = {                      # two alternating shades, so neighbouring messages part
    "message": ("#8172b3", "#b7aee0"),
    "push": ("#8172b3", "#b7aee0"),
    "pull": ("#2a8fa8", "#86c8da"),
    "reduce-scatter": ("#8172b3", "#b7aee0"),
    "all-gather": ("#da8b2f", "#f2c48d"),
    "all-reduce": ("#937860", "#c9b29b"),
}


_MEMORY_COLOR = "#2a8fa8"


_EXPOSED_EDGE = "#c44e52"


def plot_timeline(source: Any, problem: Problem, *, plan: Plan | PSPlan | None = None, ax=None,
                  title: str | None = None, label_messages: bool = True, color_by: str = "kind",
                  legend: bool = True, xlim: tuple[float, float] | None = None,
                  figsize: tuple[float, float] | None = None):
    """A Gantt chart of one training step under a plan.

    One row for the compute stream (backward pieces from tensor ``n-1`` down to 0, then the
    next forward, at the times the sync rule gives them) and one row per channel (``push``
    and ``pull`` on a parameter server), each message a bar labelled with its index and the
    tensors it carries (``m3: t12-t17``; the number of tensors or the size when the bar is
    narrow; nothing when it is narrower still). The compute stream's waits for
    communication are cross-hatched in red; the exposed communication ``T - (B + F + U)``
    in ms is written on the widest of them (when it fits) and in the title. Dotted line:
    the end of the backward (``B``, or later when contention, packing or compute overheads
    stretch it); dashed: the iteration time ``T``. The x axis is in ms from the start of
    the backward. What is drawn is :func:`timeline_bars`.

    Parameters
    ----------
    source : Result, Plan, PSPlan or Timeline
        See :func:`timeline_bars`.
    problem : Problem
        The problem the plan is judged on.
    plan : Plan or PSPlan, optional
        The plan of a ``Timeline`` source.
    ax : matplotlib Axes, optional
        Draw into these axes (e.g. one panel of a comparison); default: a new figure.
    title : str, optional
        A first title line; the second always gives the method, ``T``, the exposed time and
        the number of messages.
    label_messages : bool
        Write the labels on the message bars that are wide enough.
    color_by : {"kind", "tensor"}
        Colour bars by what they are (backward, forward, message, ...), or by tensor
        (viridis over the forward index; a message by its first tensor, hatched when it
        fuses several; forward pieces lighter than backward ones).
    legend : bool
        Draw the legend (below the axes).
    xlim : (float, float), optional
        The x axis range in ms (to compare several plans on one scale); default 0 to
        ``1.02 T``.
    figsize : (float, float), optional
        Inches, for a new figure; default 11 wide and 0.6 per row plus 1.6 tall.

    Returns
    -------
    matplotlib.figure.Figure
        The figure drawn into (a new pyplot figure unless ``ax`` is given).

    Raises
    ------
    ImportError
        Without matplotlib (``pip install 'fusionopt[plot]'``).

    Examples
    --------
    >>> import pytest; _ = pytest.importorskip("matplotlib")
    >>> import matplotlib.pyplot as plt
    >>> from fusionopt.cost import AlphaBeta
    >>> from fusionopt.model import Plan, Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(3e-3, 1e-9))
    >>> fig = plot_timeline(Plan.from_groups(profile, [[2], [1, 0]]), problem)
    >>> [t.get_text() for t in fig.axes[0].get_yticklabels()]
    ['compute', 'channel']
    >>> plt.close(fig)
    """
    return _timeline_figure(source, problem, plan, ax=ax, managed=True, title=title, label_messages=label_messages,
                            color_by=color_by, legend=legend, xlim=xlim, figsize=figsize)


def _pair(label: str, given: Any, what: str, good: Any) -> tuple[float, float]:
    """Two finite numbers for which ``good`` holds, as floats; ``what`` says what they are
    when they are not."""
    try:
        first, second = given
        pair = (float(first), float(second))
        if any(isinstance(v, (bool, str, bytes)) for v in (first, second)) or not np.isfinite(pair).all():
            raise ValueError
    except (TypeError, ValueError):
        pair = None
    if pair is None or not good(*pair):
        raise ValueError(f"{label} must be {what}, got {given!r}")
    return pair


def _timeline_figure(source, problem, plan, *, ax, managed, title=None, label_messages=True, color_by="kind",
                     legend=True, xlim=None, figsize=None, fn="plot_timeline"):
    if color_by not in ("kind", "tensor"):
        raise ValueError(f"unknown color_by {color_by!r}: choose 'kind' or 'tensor'")
    label_messages, legend = check_flag("label_messages", label_messages), check_flag("legend", legend)
    if xlim is not None:
        xlim = _pair("xlim", xlim, "the start and end of the time axis in milliseconds, start < end",
                     lambda lo, hi: lo < hi)
    if figsize is not None:
        figsize = _pair("figsize", figsize, "the width and height in inches, each > 0", lambda w, h: min(w, h) > 0)
    timeline, plan, method = resolve_source(source, problem, plan, fn=fn)
    bars = timeline_bars(timeline, problem, plan=plan)
    rows = ["compute"] + channel_rows(problem)
    memory_ax = None
    if ax is None:
        gantt = 1.6 + 0.6 * len(rows)
        if problem.pattern.is_a("fully-sharded"):         # the memory step function under the chart
            fig = new_figure(figsize or (11.0, gantt + 2.2), managed=managed)
            ax, memory_ax = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [gantt - 1.0, 1.4],
                                                                          "hspace": 0.12})
        else:
            fig = new_figure(figsize or (11.0, gantt), managed=managed)
            ax = fig.add_subplot()
    else:
        import_matplotlib()
        fig = ax.figure
    _draw_timeline(ax, bars, rows, timeline, problem, method, title=title, label_messages=label_messages,
                   color_by=color_by, legend=legend, xlim=xlim, under=memory_ax)
    if memory_ax is not None:
        _draw_memory(memory_ax, *memory_steps(timeline, problem, plan=plan), timeline, problem)
    return fig


def _draw_memory(ax, times: np.ndarray, nbytes: np.ndarray, timeline: Timeline, problem: Problem) -> None:
    """The unsharded bytes over the step (MiB against ms), the peak marked, the cap dashed."""
    mib = nbytes / 2**20
    ax.step(1e3 * times, mib, where="post", color=_MEMORY_COLOR, lw=1.2, label="unsharded parameters and gradients")
    ax.fill_between(1e3 * times, mib, step="post", color=_MEMORY_COLOR, alpha=0.18, lw=0)
    peak = timeline.peak_memory / 2**20
    at = float(times[int(np.argmax(nbytes))])
    ax.plot([1e3 * at], [peak], marker="v", color=_MEMORY_COLOR, ms=5, ls="none")
    ax.annotate(f"peak {peak:.4g} MiB", (1e3 * at, peak), xytext=(4, 4), textcoords="offset points", fontsize=8,
                color=_MEMORY_COLOR)
    cap = problem.pattern.memory_cap
    top = peak
    if cap is not None:
        over = timeline.peak_memory > cap
        ax.axhline(cap / 2**20, color=_EXPOSED_EDGE, ls="--", lw=1.0,
                   label=f"memory cap {cap / 2**20:.4g} MiB{': over it' if over else ''}")
        top = max(top, cap / 2**20)
    ax.axvline(1e3 * timeline.iteration_time, color=_EXPOSED_EDGE, ls="--", lw=1.2)
    ax.set_ylim(0, top * 1.5 if top > 0 else 1.0)                 # room for the legend above the peak
    ax.set_ylabel("memory (MiB)", fontsize=9)
    ax.set_xlabel("time from the start of the forward (ms)")
    ax.grid(True, alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", fontsize=8, frameon=False, ncol=2)


def _draw_timeline(ax, bars: list[Bar], rows: list[str], timeline: Timeline, problem: Problem, method: str | None,
                   *, title, label_messages, color_by, legend, xlim, under=None) -> None:
    """The Gantt chart into ``ax``; ``under``: axes drawn below it (the memory), which the
    legend goes below and which carry the x axis' label."""
    from matplotlib.patches import Patch
    from matplotlib.lines import Line2D
    import matplotlib

    profile = problem.profile
    T = timeline.iteration_time
    # The backward ends at B, later with contention, packing on the compute stream or pieces' overheads.
    B = max((b.end for b in bars if b.kind in ("backward", "pack")), default=0.0)
    sharded = problem.pattern.is_a("fully-sharded")          # its step starts with the forward
    plain_backward = not sharded and abs(B - profile.B) <= 1e-9 * max(T, 1e-300)
    left, right = (0.0, 1e3 * T * 1.02) if xlim is None else (float(xlim[0]), float(xlim[1]))
    if not right > left:
        raise ValueError(f"xlim must be (left, right) in ms with left < right, got {xlim!r}")
    span = (right - left) / 1e3                                      # seconds across the axes
    y = {row: len(rows) - 1 - j for j, row in enumerate(rows)}       # first row on top
    height = 0.72
    cmap = matplotlib.colormaps["viridis"]
    top = max(profile.n - 1, 1)
    shade: dict[tuple[str, str], int] = {}
    present: dict[str, Any] = {}

    # Piece boundaries (thin white edges) only where a piece is wide enough to show them.
    fig_width = ax.figure.get_figwidth() * ax.get_position().width
    min_edged = 0.04 / fig_width * span
    for bar in bars:
        if bar.kind == "exposed":
            continue
        if bar.kind in ROW_COLORS:
            if color_by == "tensor":
                color = cmap(bar.tensor / top)
            else:
                parity = shade.get((bar.row, bar.kind), 0)
                shade[(bar.row, bar.kind)] = parity + 1
                color = ROW_COLORS[bar.kind][parity % 2]
            style = dict(facecolor=color, edgecolor="black", linewidth=0.4,
                         hatch="///" if color_by == "tensor" and bar.fused else None)
        else:
            edge = bar.duration >= min_edged
            if color_by == "tensor" and bar.kind in ("backward", "forward"):
                color = cmap(bar.tensor / top)
                style = dict(facecolor=color, edgecolor="white" if bar.kind == "backward" else "black",
                             linewidth=0.3 if edge else 0.0, alpha=1.0 if bar.kind == "backward" else 0.55)
            else:
                style = dict(facecolor=_KIND_COLORS[bar.kind], edgecolor="white", linewidth=0.3 if edge else 0.0)
        ax.broken_barh([(1e3 * bar.start, 1e3 * bar.duration)], (y[bar.row] - height / 2, height), **style)
        present.setdefault(bar.kind, style)

    exposed = [b for b in bars if b.kind == "exposed"]
    for bar in exposed:
        ax.broken_barh([(1e3 * bar.start, 1e3 * bar.duration)], (y["compute"] - height / 2, height),
                       facecolor=_KIND_COLORS["exposed"], edgecolor=_EXPOSED_EDGE, linewidth=0.8, hatch="xxx")

    ax.set_xlim(left, right)
    ax.set_ylim(-0.6, len(rows) - 0.2)
    ax.set_yticks([y[row] for row in rows])
    ax.set_yticklabels(rows)
    ax.axvline(1e3 * B, color="black", ls=":", lw=1)
    ax.axvline(1e3 * T, color=_EXPOSED_EDGE, ls="--", lw=1.2)
    b_text, t_text = ("B " if plain_backward else "backward ends "), f"T = {to_ms(T)} ms "
    if label_fits(t_text, fig_width * (T - B) / span / 1.15, 8):      # T's label, right of B, leaves room
        ax.text(1e3 * B, len(rows) - 0.45, b_text, ha="right", va="center", fontsize=8)
    ax.text(1e3 * T, len(rows) - 0.45, t_text, ha="right", va="center", fontsize=8, color=_EXPOSED_EDGE)
    if under is None:
        ax.set_xlabel(f"time from the start of the {'forward' if sharded else 'backward'} (ms)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_axisbelow(True)

    if exposed:
        widest = max(exposed, key=lambda b: b.duration)
        text = f"exposed {to_ms(timeline.exposed)} ms"
        if label_fits(text, fig_width * widest.duration / span / 1.15, 8):
            ax.text(1e3 * (widest.start + widest.end) / 2, y["compute"], text, ha="center", va="center",
                    fontsize=8, color=_EXPOSED_EDGE, fontweight="bold",
                    bbox=dict(facecolor="white", edgecolor="none", pad=1.0, alpha=0.85))

    if label_messages:
        # Axes width in inches per second of the x axis; a margin for the layout shrinking it.
        inches_per_second = fig_width / span / 1.15
        for bar in bars:
            if bar.kind not in ROW_COLORS:
                continue
            width = bar.duration * inches_per_second
            text = next((t for t in (bar.label, bar.short) if t and label_fits(t, width, 7)), None)
            if text is not None:
                ax.text(1e3 * (bar.start + bar.end) / 2, y[bar.row], text, ha="center", va="center", fontsize=7,
                        color="black", clip_on=True,
                        bbox=dict(facecolor="white", edgecolor="none", pad=0.6, alpha=0.7)
                        if color_by == "tensor" else None)

    n_messages = timeline.num_messages
    summary = f"{method + ': ' if method else ''}T = {to_ms(T)} ms, exposed {to_ms(timeline.exposed)} ms, "
    if timeline.message_kind is None:
        summary += f"{n_messages} message{'s' if n_messages != 1 else ''}, {problem.sync} sync"
    else:
        counts = {kind: sum(1 for b in bars if b.kind == kind) for kind in ("all-gather", "reduce-scatter", "all-reduce")}
        summary += f"{n_messages} collective{'s' if n_messages != 1 else ''} (" + ", ".join(
            f"{count} {kind}{'s' if count != 1 else ''}" for kind, count in counts.items() if count) + ")"
        summary += (f", peak memory {timeline.peak_memory / 2**20:.4g} MiB" if sharded
                    else f", {problem.sync} sync")
    ax.set_title(summary if title is None else f"{title}\n{summary}", fontsize=10)

    if legend:
        handles = []
        for kind in ("backward", "forward", "update", "pack", "post_backward", "update_lump", "host_overhead",
                     "message", "push", "pull", "all-gather", "reduce-scatter", "all-reduce"):
            if kind not in present:
                continue
            style = dict(present[kind])
            if color_by == "tensor":
                style["facecolor"] = "gray"
                style["hatch"] = None
            name = "forward" if kind == "forward" and sharded else KIND_NAMES[kind]     # the step's own
            handles.append(Patch(label=name, **style))
        if color_by == "tensor" and any(b.fused for b in bars):
            handles.append(Patch(facecolor="white", edgecolor="black", hatch="///", label="fused message"))
        handles.append(Patch(facecolor=_KIND_COLORS["exposed"], edgecolor=_EXPOSED_EDGE, hatch="xxx",
                             label="compute waits for communication"))
        handles.append(Line2D([], [], color="black", ls=":",
                              label="B: end of the backward" if plain_backward else "end of the backward"))
        handles.append(Line2D([], [], color=_EXPOSED_EDGE, ls="--", label="T: iteration time"))
        # Below the tick labels and the x label (of the axes under it): about 0.55 inch lower.
        box = ax.get_position()
        bottom = (under or ax).get_position().y0 - 0.55 / ax.figure.get_figheight()
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=((box.x0 + box.x1) / 2, bottom),
                  bbox_transform=ax.figure.transFigure, ncol=min(len(handles), 6), fontsize=8, frameon=False)


def save_timeline(source: Any, problem: Problem, path: str | os.PathLike | Sequence[str | os.PathLike], *,
                  dpi: float = 110, **options: Any) -> list[str]:
    """Draw :func:`plot_timeline` and write it to ``path`` (one path or several).

    The format follows each file's extension, ``.png`` or ``.svg`` (anything else is a
    ``ValueError`` naming the file, raised before drawing). Each file is written through a
    temporary file in its folder and ``os.replace``, so a reader never sees half an image.
    The figure is not kept: nothing is left open in pyplot.

    Parameters
    ----------
    dpi : float
        Resolution of PNG files (dots per inch).
    **options
        Keyword arguments of :func:`plot_timeline` (``plan``, ``title``, ``color_by``, ...).

    Returns
    -------
    list of str
        The paths written.

    Examples
    --------
    >>> save_timeline(None, None, "timeline.jpg")
    Traceback (most recent call last):
    ...
    ValueError: timeline.jpg: unknown image format .jpg: write .png or .svg
    """
    paths = image_paths(path)
    if "ax" in options:
        raise ValueError("save_timeline draws its own figure; leave ax out")
    allowed = {"plan", "title", "label_messages", "color_by", "legend", "xlim", "figsize"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise TypeError(f"save_timeline got unknown option(s) {', '.join(unknown)}: use {', '.join(sorted(allowed))}")
    plan = options.pop("plan", None)
    fig = _timeline_figure(source, problem, plan, ax=None, managed=False, fn="save_timeline", **options)
    try:
        return write_figure(fig, paths, dpi)
    finally:
        fig.clear()


__all__ = ["ROW_COLORS", "plot_timeline", "save_timeline"]
