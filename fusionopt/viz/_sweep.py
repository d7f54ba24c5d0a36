"""A sweep's comparison plot: :func:`plot_sweep` draws :func:`~fusionopt.viz.sweep_series`
and :func:`save_sweep` writes it."""

from __future__ import annotations

import math
import os
from typing import Any, Iterable, Mapping, Sequence

from fusionopt.model._cost import check_flag
from fusionopt.viz._figures import image_paths, import_matplotlib, new_figure, write_figure
from fusionopt.viz._series import METRIC_LABELS, check_metric, is_error, method_series, panel_keys, select_records


def plot_sweep(records: Iterable[Mapping[str, Any]], *, metric: str = "scaling_efficiency", model: str | None = None,
               network: str | None = None, ax=None, title: str | None = None, log_y: bool = False):
    """Each method's metric against the number of workers, one line per method.

    The x axis is logarithmic in base 2 (the workers swept), each point a marker; every
    method keeps its colour and marker across panels. Records of several models or
    networks are drawn as small multiples, one panel per (model, network) pair (rows:
    models, columns: networks), sharing the y axis; ``model`` and ``network`` keep one of
    each. Records with status ``"ERROR"`` carry no numbers: they are left out and a note
    under the plot counts them.

    Parameters
    ----------
    records : iterable of dict
        Rows of a sweep (see :func:`sweep_series`).
    metric : {"scaling_efficiency", "throughput", "iteration_time"}
        The y axis: ``(B + F + U) / T``, the throughput in one worker's steps ``P (B + F + U) / T``
        (log scale, with the ideal ``P`` dotted), or ``T`` in ms.
    model, network : str, optional
        Keep only these.
    ax : matplotlib Axes, optional
        Draw into these axes; the records (after ``model`` and ``network``) must then hold
        one model and one network.
    title : str, optional
        The figure's title; default names the metric.
    log_y : bool
        A logarithmic y axis in every panel, so that a network of small values is not
        flattened by one of large values (the throughput's axis is always logarithmic).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ImportError
        Without matplotlib (``pip install 'fusionopt[plot]'``).
    ValueError
        No valid record, an unknown metric, model or network, or several panels for one ``ax``.

    Examples
    --------
    >>> import pytest; _ = pytest.importorskip("matplotlib")
    >>> import matplotlib.pyplot as plt
    >>> records = [{"model": m, "network": "10gbe", "method": "dp", "workers": p, "status": "OPTIMAL",
    ...             "scaling_efficiency": e}
    ...            for m in ("resnet50", "vgg16") for p, e in ((4, 0.9), (8, 0.8))]
    >>> fig = plot_sweep(records)
    >>> [a.get_title() for a in fig.axes]
    ['resnet50, 10gbe', 'vgg16, 10gbe']
    >>> plt.close(fig)
    """
    return _plot_sweep(records, metric=metric, model=model, network=network, ax=ax, title=title, managed=True,
                       log_y=log_y)


def _plot_sweep(records, *, metric, model, network, ax, title, managed, log_y=False):
    check_metric(metric)
    log_y = check_flag("log_y", log_y)
    chosen = select_records(records, model, network)
    panels = panel_keys(chosen)
    errors = [r for r in chosen if is_error(r)]
    if not panels or len(errors) == len(chosen):
        raise ValueError(f"no sweep record with numbers to plot ({len(errors)} with status ERROR)")
    if ax is not None and len(panels) > 1:
        choices = "; ".join(f"{m}, {n}" for m, n in panels)
        raise ValueError(f"one Axes draws one model and one network, the records hold {len(panels)}: {choices}; "
                         "choose with model= and network=, or leave ax out for one panel each")
    models = list(dict.fromkeys(m for m, _ in panels))
    networks = list(dict.fromkeys(n for _, n in panels))
    shared = metric != "iteration_time"          # fractions and throughputs compare across panels; times do not
    if ax is None:
        nrows, ncols = len(models), len(networks)
        fig = new_figure((1.2 + 4.2 * ncols, 1.0 + 3.1 * nrows), managed=managed)
        grid = fig.subplots(nrows, ncols, squeeze=False, sharey=shared)
        axes = {(m, n): grid[models.index(m)][networks.index(n)] for m, n in panels}
        for r in range(nrows):
            for c in range(ncols):
                if (models[r], networks[c]) not in axes:
                    grid[r][c].axis("off")
    else:
        import_matplotlib()
        fig = ax.figure
        axes = {panels[0]: ax}

    import matplotlib
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    series = {key: method_series([r for r in chosen if (str(r["model"]), str(r["network"])) == key], metric)
              for key in panels}
    # Colours and markers by name, so a method looks the same in every picture.
    labels = sorted({label for s in series.values() for label in s})
    colors = matplotlib.colormaps["tab10"].colors
    markers = "osD^vP*Xph<>"
    scale = 1e3 if metric == "iteration_time" else 1.0
    for key, panel_ax in axes.items():
        all_workers: set[int] = set()
        for label, (workers, values) in series[key].items():
            j = labels.index(label)
            panel_ax.plot(workers, values * scale, marker=markers[j % len(markers)], color=colors[j % len(colors)],
                          lw=1.4, ms=5, label=label)
            all_workers.update(workers.tolist())
        if metric == "throughput" and all_workers:
            ideal = sorted(all_workers)
            panel_ax.plot(ideal, ideal, color="gray", lw=0.8, ls=":", label="ideal (throughput = workers)")
            panel_ax.set_yscale("log", base=2)
            panel_ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        elif log_y:
            panel_ax.set_yscale("log")
        panel_ax.set_xscale("log", base=2)
        ticks = sorted(all_workers)
        panel_ax.xaxis.set_major_locator(FixedLocator(ticks))
        panel_ax.xaxis.set_minor_locator(NullLocator())
        panel_ax.set_xticklabels([str(w) for w in ticks], fontsize=8)
        panel_ax.set_xlabel("workers")
        panel_ax.grid(True, alpha=0.3)
        if len(axes) > 1 or ax is None:
            panel_ax.set_title(f"{key[0]}, {key[1]}", fontsize=10)
        if not shared or ax is not None or networks.index(key[1]) == 0:
            panel_ax.set_ylabel(METRIC_LABELS[metric][0])
    if metric == "scaling_efficiency" and not log_y:
        # From 0; up to 1 when the efficiencies come near it, else just above the largest.
        largest = max(float(v.max()) for s in series.values() for _, v in s.values())
        top = 1.05 if largest > 0.5 else largest * 1.15
        for panel_ax in axes.values():
            panel_ax.set_ylim(0, max(top, largest * 1.03))
            if top >= 1.0:
                panel_ax.axhline(1.0, color="gray", lw=0.8, ls=":")

    # The legend lists the lines top to bottom as they end (largest workers) in the first panel.
    def rank(label: str) -> tuple[int, float]:
        for s in series.values():
            if label in s:
                return 0, -float(s[label][1][-1])
        return 1, 0.0

    entries: dict[str, Any] = {}
    for panel_ax in axes.values():
        for h, n in zip(*panel_ax.get_legend_handles_labels()):
            entries.setdefault(n, h)
    names = sorted((n for n in entries if n in labels), key=rank) + [n for n in entries if n not in labels]
    handles = [entries[n] for n in names]
    if ax is None:
        ncol = len(names) if len(names) <= 7 else math.ceil(len(names) / 2)
        note = 0.2 if errors else 0.0                      # inches for the note on skipped records
        fig.legend(handles, names, loc="lower center", ncol=ncol, fontsize=8, frameon=False,
                   bbox_to_anchor=(0.5, note / fig.get_figheight()))
        legend_height = 0.1 + 0.22 * math.ceil(len(names) / ncol) + note
        fig.suptitle(title or METRIC_LABELS[metric][1], fontsize=11)
        # The panels stay below the title (0.3 in) and above the legend.
        fig.tight_layout(rect=(0, legend_height / fig.get_figheight(), 1, 1 - 0.3 / fig.get_figheight()))
    else:
        ax.legend(handles, names, fontsize=8)
        if title:
            ax.set_title(title, fontsize=10)
    if errors:
        shown = ", ".join(f"{r['method']} at {r['workers']}" for r in errors[:6])
        more = f" and {len(errors) - 6} more" if len(errors) > 6 else ""
        fig.text(0.01, 0.005, f"skipped {len(errors)} record{'s' if len(errors) != 1 else ''} with status ERROR: "
                 f"{shown}{more}", fontsize=7, color="gray", ha="left", va="bottom")
    return fig


def save_sweep(records: Iterable[Mapping[str, Any]], path: str | os.PathLike | Sequence[str | os.PathLike], *,
               dpi: float = 110, **options: Any) -> list[str]:
    """Draw :func:`plot_sweep` and write it to ``path`` (one path or several), ``.png`` or
    ``.svg`` by extension, atomically, like :func:`save_timeline`.

    Parameters
    ----------
    dpi : float
        Resolution of PNG files (dots per inch).
    **options
        Keyword arguments of :func:`plot_sweep` (``metric``, ``model``, ``network``, ``title``,
        ``log_y``).

    Returns
    -------
    list of str
        The paths written.

    Examples
    --------
    >>> save_sweep([], "sweep.pdf")
    Traceback (most recent call last):
    ...
    ValueError: sweep.pdf: unknown image format .pdf: write .png or .svg
    """
    paths = image_paths(path)
    if "ax" in options:
        raise ValueError("save_sweep draws its own figure; leave ax out")
    allowed = {"metric", "model", "network", "title", "log_y"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise TypeError(f"save_sweep got unknown option(s) {', '.join(unknown)}: use {', '.join(sorted(allowed))}")
    fig = _plot_sweep(records, metric=options.get("metric", "scaling_efficiency"), model=options.get("model"),
                      network=options.get("network"), ax=None, title=options.get("title"), managed=False,
                      log_y=bool(options.get("log_y", False)))
    try:
        return write_figure(fig, paths, dpi)
    finally:
        fig.clear()


__all__ = ["plot_sweep", "save_sweep"]
