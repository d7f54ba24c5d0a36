#!/usr/bin/env python
"""Rebuild US-Byte's headline comparisons (Gao, Hu, Mashhadi, Jin, Xiao, Wu; IEEE TPDS 35(1), 2024) in simulation.

Run from the repository root::

    python papers/us_byte/reproduce.py            # about 3 minutes on 2 cores
    python papers/us_byte/reproduce.py --quick    # under 30 s: VGG-16 and ResNet-152 only, coarse sweeps

It writes ``RESULTS.md`` and PNG plots into the output folder (default: this script's
folder; a run with other arguments, ``--quick`` among them, writes into its ``subset/``
folder and leaves the stored files as they are), every file atomically (a temporary file, then ``os.replace``). The command
line, progress, Ctrl-C handling and the report's write are those every reproduction shares
(``fusionopt.experiments.Study``); on Ctrl-C the finished steps go to
``RESULTS.interrupted.md`` and the stored report is left as it was.

The claims (the abstract): US-Byte is up to 1.26x faster than
ByteScheduler and 1.56x faster than WFBP on two 8-node clusters, and up to 1.69x in a
128-GPU simulation. All problems use layerwise synchronisation (MODEL.md section 4).

What it does (see RESULTS.md for the numbers and the reasons they differ from the paper):

1. **8 nodes with US-Byte's fitted constants** (``network("usbyte", P)``, P = 2, 4, 8:
   ``T = a + b * parameters`` from the authors' code): iteration time of ``wfbp``, ``p3``,
   ``bytescheduler`` (defaults; the advised all-reduce preset), ``bytescheduler-tuned``,
   ``usbyte`` (priority search; forward priorities), the fusion optimum ``dp`` and
   ``layerwise-opt`` (fusionopt's own layerwise search), beside the fluid bound, the fluid
   bound with one latency, and the best bound every ``Result`` carries.
2. **128 GPUs** on ring all-reduce presets (``network("10gbe" | "25gbe" | "100gb-ib", 128)``,
   nominal link figures: US-Byte's constants exist for P <= 8 only), the same methods.
3. **Compute-scale sweeps.** Profiles are the zoo's calibrated V100 and the paper's GPUs and
   batch sizes are not all known, so every compute time is scaled by ``s`` (``s`` = 1: the
   zoo's V100 at our batches; K80, A100 and H100 at the same batches are single points of it)
   and the largest speedups of US-Byte over each baseline are located ("up to").
4. US-Byte's unit ``S_p`` (default 1M parameters; a unit larger than every tensor is refused).
5. A Gantt chart of the US-Byte and layerwise-opt timelines for one model.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import numpy as np

from fusionopt import zoo
from fusionopt.cost import network, network_link
from fusionopt.experiments import Outcome, Study, compute_source, fmt_ms, ratio, solve_methods
from fusionopt.model import Problem, best_bound, fluid_bound, fluid_latency_bound
from fusionopt.reporting import SAFEGUARD_SECONDS, markdown_table as table, pyplot, save_png

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = "papers/us_byte/reproduce.py"

# The abstract does not say over which baseline the
# 128-GPU figure is measured.
PAPER_OVER_BS = 1.26
PAPER_OVER_WFBP = 1.56
PAPER_128 = 1.69
# US-Byte's fitted constants, T = a + b * parameters [code], from the authors' code.
PAPER_FIT = {2: (556.6e-6, 0.352e-10), 4: (948.98e-6, 1.541e-10), 8: (1318.6e-6, 2.406e-10)}

# (zoo name, label, per-GPU batch). The batches are OUR choice: the paper's are not all known.
MODELS = (("vgg16", "VGG-16", 32), ("resnet152", "ResNet-152", 32), ("resnet50", "ResNet-50", 64),
          ("bert-base", "BERT-base", 32), ("googlenet", "GoogLeNet", 64))
MODELS_QUICK = ("vgg16", "resnet152")
DEVICE = "v100"                       # our choice; s = 1 of the sweeps
MARK_DEVICES = ("k80", "v100", "a100", "h100")
FITTED = "usbyte"
FITTED_WORKERS = (2, 4, 8)
FITTED_WORKERS_QUICK = (8,)
LARGE_P = 128
RING_NETWORKS = ("10gbe", "25gbe", "100gb-ib")
RING_NETWORKS_QUICK = ("25gbe",)
UNITS = (250_000, 1_000_000, 4_000_000, 16_000_000)
UNITS_QUICK = (1_000_000, 4_000_000)
GANTT_MODEL = "vgg16"
# (key, registered method, options, label). layerwise-opt's options are filled in at run time.
METHODS = (
    ("wfbp", "wfbp", {}, "WFBP"),
    ("p3", "p3", {}, "P3"),
    ("bs", "bytescheduler", {}, "BS default"),
    ("bs-advised", "bytescheduler", {"preset": "advised"}, "BS advised"),
    ("bs-tuned", "bytescheduler-tuned", {}, "BS tuned"),
    ("bs-unfused", "bytescheduler", {"fusion_threshold_bytes": 0, "cycle_time": 0, "credit_tuning": False},
     "BS unfused"),
    ("usbyte", "usbyte", {}, "US-Byte"),
    ("usbyte-fwd", "usbyte", {"priority": "forward"}, "US-Byte fwd prio"),
    ("dp", "dp", {}, "DP (fusion optimum)"),
    ("lwo", "layerwise-opt", {}, "layerwise-opt"),
)
LABEL = {key: label for key, _, _, label in METHODS}
# The baselines US-Byte is compared with (ByteScheduler in three settings).
REFS = ("wfbp", "bs", "bs-advised", "bs-tuned", "bs-unfused")
SWEEP_KEYS = ("wfbp", "bs", "bs-advised", "bs-tuned", "bs-unfused", "usbyte", "dp")

# The previous report's figures, on the zoo's roofline ESTIMATE (compute="roofline": each layer's FLOPs at 40%
# of the V100 preset's 125 TFLOP/s FP16 tensor-core peak; report of 2026-11-25, sweep s = 1/16 .. 64, 21 values):
# what "What changed" compares with. Per group of settings: US-Byte's largest speedup over each baseline at s = 1,
# on how many of its 15 instances it is slower than BS tuned, and its largest speedup over each on the sweep.
PREVIOUS = {
    "compute": {"vgg16": 59.41e-3, "resnet152": 44.39e-3, "resnet50": 31.58e-3, "bert-base": 42.93e-3,
                "googlenet": 11.56e-3},
    "fitted": {"at1": {"wfbp": 1.161, "bs": 0.985, "bs-advised": 0.985, "bs-tuned": 0.985, "bs-unfused": 3.056},
               "slower_than_tuned": 15,
               "sweep": {"wfbp": 1.316, "bs": 1.033, "bs-advised": 1.033, "bs-tuned": 1.033, "bs-unfused": 3.971}},
    "ring": {"at1": {"wfbp": 1.135, "bs": 0.908, "bs-advised": 0.921, "bs-tuned": 0.908, "bs-unfused": 2.439},
             "slower_than_tuned": 15,
             "sweep": {"wfbp": 1.316, "bs": 1.140, "bs-advised": 1.150, "bs-tuned": 1.127, "bs-unfused": 2.494}},
    "lwo_over_usbyte": (1.01, 4.63, 33.60),        # smallest, median, largest over the instances with every method
    "lwo_gap": (0.0018, 0.4399),                   # median, largest
}


# ----------------------------------------------------------------------------- helpers

@dataclass
class Instance:
    """All methods on one problem, with its bounds (seconds)."""

    problem: Problem
    res: dict[str, Outcome]
    fluid: float
    fluid_latency: float
    best_bound: float

    def T(self, key: str) -> float:
        return self.res[key].T

    def over(self, ref: str, key: str = "usbyte") -> float:
        """Speedup of ``key`` over ``ref``: T_ref / T_key."""
        return ratio(self.T(ref), self.T(key))


def specs(keys, lwo_options: dict):
    """The ``(key, method, options)`` of ``keys`` (in that order), layerwise-opt's options
    completed by ``lwo_options``."""
    by_key = {key: (method, options) for key, method, options, _ in METHODS}
    return [(key, by_key[key][0], dict(by_key[key][1], **lwo_options) if key == "lwo" else by_key[key][1])
            for key in keys]


def solve_instance(problem: Problem, keys, lwo_options: dict) -> Instance:
    # US-Byte refuses a unit larger than every tensor; any other refusal is raised.
    res = solve_methods(problem, specs(keys, lwo_options), may_refuse=("usbyte",))
    # The bound over all plans (fusion and partition); a fusion method's Result carries the
    # tighter bound of its own plan space instead.
    return Instance(problem, res, fluid_bound(problem), fluid_latency_bound(problem), best_bound(problem, "any"))


def fmt_s(s: float) -> str:
    return f"1/{1 / s:.3g}" if s < 1 else f"{s:.3g}"


# ----------------------------------------------------------------------------- experiments
def settings(workers, nets):
    """(setting key, network name, P, label): the fitted 8-node presets, then 128 GPUs."""
    out = [(f"{FITTED}-{P}", FITTED, P, f"US-Byte fit, P = {P}") for P in workers]
    out += [(f"{net}-{LARGE_P}", net, LARGE_P, f"{net} ring, P = {LARGE_P}") for net in nets]
    return out


def main_table(profiles, models, setting_list, lwo_options, progress):
    """Every method at s = 1 on every (model, setting)."""
    keys = [key for key, _, _, _ in METHODS]
    out = {}
    for model in models:
        for skey, net, P, _ in setting_list:
            inst = solve_instance(Problem(profiles[model], network(net, P), sync="layerwise"), keys, lwo_options)
            out[(model, skey)] = inst
            progress.step(f"{model} {skey}: US-Byte {fmt_ms(inst.T('usbyte'))} ms, layerwise-opt "
                          f"{fmt_ms(inst.T('lwo'))} ms, bound {fmt_ms(inst.best_bound)} ms")
    return out


def sweep(profiles, models, setting_list, grid, progress):
    """US-Byte and its baselines (no layerwise-opt) at every compute scale ``s`` in ``grid``."""
    data = {}
    for model in models:
        for skey, net, P, _ in setting_list:
            cost = network(net, P)
            cols: dict[str, list[float]] = {k: [] for k in SWEEP_KEYS + ("bound",)}
            for s in grid:
                inst = solve_instance(Problem(profiles[model].scaled(s), cost, sync="layerwise"), SWEEP_KEYS, {})
                for k in SWEEP_KEYS:
                    cols[k].append(inst.T(k))
                cols["bound"].append(inst.best_bound)
            data[(model, skey)] = {k: np.array(v) for k, v in cols.items()}
        progress.step(f"sweep {model}: {len(setting_list)} settings x {len(grid)} values of s")
    return data


def maxima(sweep_data, grid, keys):
    """Per baseline: (largest speedup of US-Byte over it, (model, setting, s)) over ``keys``."""
    out = {}
    for ref in REFS:
        best = (-1.0, None)
        for key in keys:
            d = sweep_data[key]
            sp = d[ref] / d["usbyte"]
            k = int(np.argmax(sp))
            if sp[k] > best[0]:
                best = (float(sp[k]), (key[0], key[1], float(grid[k])))
        out[ref] = best
    return out


def at_maxima(profiles, settings_by_key, found, lwo_options):
    """Every method, layerwise-opt included, at the instances where the maxima occur."""
    keys = [key for key, _, _, _ in METHODS]
    out = {}
    for _, where in found.values():
        if where is None or where in out:
            continue
        model, skey, s = where
        _, net, P, _ = settings_by_key[skey]
        out[where] = solve_instance(Problem(profiles[model].scaled(s), network(net, P), sync="layerwise"),
                                    keys, lwo_options)
    return out


def unit_study(profiles, models, units, P, progress):
    rows = {}
    cost = network(FITTED, P)
    for model in models:
        problem = Problem(profiles[model], cost, sync="layerwise")
        for unit in units:
            rows[(model, unit)] = solve_methods(
                problem, [(prio, "usbyte", {"unit_parameters": unit, "priority": prio}) for prio in ("search", "forward")],
                may_refuse=("usbyte",))
        progress.step(f"unit {model}: " + ", ".join(
            f"{unit}: {fmt_ms(rows[(model, unit)]['search'].T)} ms" if not rows[(model, unit)]["search"].error
            else f"{unit}: refused" for unit in units))
    return rows


# ----------------------------------------------------------------------------- plots
def plot_gantt(plt, out_dir, inst: Instance, label: str, title: str) -> str:
    """US-Byte above layerwise-opt on one time axis, each drawn by fusionopt.viz.plot_timeline
    with bars coloured by tensor."""
    from matplotlib.colors import Normalize

    from fusionopt.viz import plot_timeline

    profile = inst.problem.profile
    results = [(key, inst.res[key].result) for key in ("usbyte", "lwo")]
    xlim = (0.0, 1.02e3 * max(r.iteration_time for _, r in results))
    fig, axes = plt.subplots(2, 1, figsize=(13, 6.6), sharex=True)
    for ax, (key, r) in zip(axes, results):
        plot_timeline(r, inst.problem, ax=ax, color_by="tensor", xlim=xlim, legend=ax is axes[-1])
        ax.set_title(f"{LABEL[key]}: {r.num_messages} messages, T = {r.iteration_time * 1e3:.1f} ms "
                     f"(bound {inst.best_bound * 1e3:.1f} ms), exposed {r.timeline.exposed * 1e3:.1f} ms",
                     fontsize=10)
    axes[0].set_xlabel("")
    sm = plt.cm.ScalarMappable(norm=Normalize(0, max(profile.n - 1, 1)), cmap=plt.get_cmap("viridis"))
    cbar = fig.colorbar(sm, ax=list(axes), pad=0.01, fraction=0.03)
    cbar.set_label("tensor (forward index)")
    fig.suptitle(title, fontsize=11)
    return save_png(plt, fig, out_dir, f"gantt_{label}.png")


def plot_main(plt, out_dir, table_data, models, setting_list, labels) -> str:
    """T / best lower bound per method, one panel per setting (s = 1)."""
    from matplotlib.ticker import FuncFormatter

    keys = ("wfbp", "bs-advised", "bs-tuned", "usbyte", "dp", "lwo")
    colors = {"wfbp": "tab:blue", "bs-advised": "tab:orange", "bs-tuned": "tab:brown", "usbyte": "tab:red",
              "dp": "tab:gray", "lwo": "tab:green"}
    ncols = min(len(setting_list), 3)
    nrows = -(-len(setting_list) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.8 * nrows), squeeze=False)
    width = 0.8 / len(keys)
    x = np.arange(len(models))
    for idx, (skey, _, _, slabel) in enumerate(setting_list):
        ax = axes[idx // ncols][idx % ncols]
        for j, key in enumerate(keys):
            vals = [table_data[(m, skey)].T(key) / table_data[(m, skey)].best_bound for m in models]
            ax.bar(x + (j - (len(keys) - 1) / 2) * width, vals, width, color=colors[key], label=LABEL[key])
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if v < 10 and v % 1 == 0 else ""))
        ax.set_xticks(x)
        ax.set_xticklabels([labels[m] for m in models], fontsize=8, rotation=15)
        ax.set_title(slabel, fontsize=10)
        ax.grid(True, axis="y", which="both", alpha=0.3)
        if idx % ncols == 0:
            ax.set_ylabel("T / best lower bound (log)")
    for idx in range(len(setting_list), nrows * ncols):
        axes[idx // ncols][idx % ncols].axis("off")
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=len(keys), fontsize=8, frameon=False)
    fig.suptitle(f"Layerwise sync, calibrated {DEVICE.upper()} at our batches: iteration time over the "
                 "best lower bound (1 = provably optimal)", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return save_png(plt, fig, out_dir, "main.png")


def plot_sweep(plt, out_dir, sweep_data, grid, models, setting_list, labels, device_s) -> str:
    """Speedup of US-Byte over each baseline against the compute scale s."""
    from matplotlib.ticker import FuncFormatter

    colors = {"wfbp": "tab:blue", "bs": "tab:purple", "bs-advised": "tab:orange", "bs-tuned": "tab:brown",
              "bs-unfused": "tab:gray"}
    fig, axes = plt.subplots(len(setting_list), len(models), figsize=(3.6 * len(models), 2.9 * len(setting_list)),
                             squeeze=False, sharex=True)
    for r, (skey, net, P, slabel) in enumerate(setting_list):
        for c, model in enumerate(models):
            ax = axes[r][c]
            d = sweep_data[(model, skey)]
            for ref in REFS:
                ax.plot(grid, d[ref] / d["usbyte"], color=colors[ref], lw=1.5, label=f"US-Byte over {LABEL[ref]}")
            ax.plot(grid, d["usbyte"] / d["bound"], color="black", ls=":", lw=1.2,
                    label="US-Byte over the bound (headroom)")
            if net == FITTED:
                ax.axhline(PAPER_OVER_WFBP, color="tab:blue", ls="--", lw=0.8, label=f"paper {PAPER_OVER_WFBP}x (WFBP)")
                ax.axhline(PAPER_OVER_BS, color="tab:orange", ls="--", lw=0.8, label=f"paper {PAPER_OVER_BS}x (BS)")
            else:
                ax.axhline(PAPER_128, color="tab:red", ls="--", lw=0.8, label=f"paper {PAPER_128}x (128 GPUs)")
            for dev, s in device_s[model].items():
                if grid[0] <= s <= grid[-1]:
                    ax.axvline(s, color="gray", lw=0.6, alpha=0.6)
                    if r == 0:
                        ax.text(s, 1.0, dev.upper(), rotation=90, fontsize=6, color="gray", va="bottom")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
            ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if v < 4 and v * 10 % 5 == 0 else ""))
            ax.grid(True, which="both", alpha=0.25)
            if r == 0:
                ax.set_title(labels[model], fontsize=10)
            if c == 0:
                ax.set_ylabel(f"{slabel}\nspeedup (log)", fontsize=8)
            if r == len(setting_list) - 1:
                ax.set_xlabel(f"s = compute / calibrated {DEVICE.upper()}", fontsize=8)
    handles, names = [], []
    for ax in (axes[0][0], axes[-1][0]):
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in names:
                handles.append(h)
                names.append(n)
    fig.legend(handles, names, loc="lower center", ncol=4, fontsize=8, frameon=False, bbox_to_anchor=(0.5, -0.02))
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return save_png(plt, fig, out_dir, "sweep.png")


# ----------------------------------------------------------------------------- report
def where_text(where, settings_by_key, labels) -> str:
    model, skey, s = where
    return f"{labels[model]}, {settings_by_key[skey][3]}, s = {fmt_s(s)}"


def report(ctx) -> str:
    a = ctx["args"]
    labels = ctx["labels"]
    models = ctx["models"]
    sbk = ctx["settings_by_key"]
    fitted = [st for st in ctx["settings"] if st[1] == FITTED]
    ring = [st for st in ctx["settings"] if st[1] != FITTED]
    main = ctx["main"]
    L: list[str] = []
    L += ["# US-Byte (Gao, Hu, Mashhadi, Jin, Xiao, Wu; IEEE TPDS 35(1), 2024): headline comparisons in simulation", ""]
    L += [ctx["produced"], ""]
    L += [f"**The paper's claims** [abs]: US-Byte is up to **{PAPER_OVER_BS}x faster than ByteScheduler** and "
          f"**{PAPER_OVER_WFBP}x faster than WFBP** on two 8-node clusters, and up to **{PAPER_128}x** in a "
          "128-GPU simulation (the baseline of that figure is not stated in what we have). The paper's "
          "GPUs, per-GPU batch sizes, framework and its ByteScheduler settings are not all known to us; "
          "what is known from its code is the algorithm (docs/methods.md, section usbyte; implemented as `usbyte`) and "
          "its fitted all-reduce constants for 2, 4 and 8 workers. Which of the two clusters those "
          "constants were fitted on is not stated in what we have.", ""]

    # ---------------------------------------------------------------- setup
    L += ["## Setup", ""]
    rows = []
    for m in models:
        p = ctx["profiles"][m]
        rows.append((labels[m], ctx["batches"][m], p.n, f"{p.total_bytes / 4e6:.1f}M",
                     f"{int(p.sizes.max()) // p.dtype_bytes:,}", f"{1e3 * p.B:.2f}", f"{1e3 * p.F:.2f}"))
    L += table(("model", "batch / GPU (ours)", "tensors", "parameters", "largest tensor (parameters)",
                "B (ms)", "F (ms)"), rows)
    L += ["",
          f"* **Profiles** (`fusionopt.zoo.profile(name, device=\"{DEVICE}\", batch=...)`) are the zoo's "
          "**calibrated** compute (FP32), calibrated on "
          + compute_source({labels[m]: ctx["profiles"][m] for m in models})
          + ". Torchvision layouts (ResNet v1.5, VGG-16 without BatchNorm, GoogLeNet without aux heads) and "
          "HuggingFace BERT-base at sequence length 128; FP32 gradients (4 bytes per parameter); no "
          "optimiser time. The V100 and the batches are **our choice**. The zoo's other devices are the "
          "same H100 times scaled by one published-throughput factor per workload, so another device only "
          "multiplies a model's compute times by one factor `s`; the sweeps below cover that factor (at our "
          "batches: " + "; ".join(f"{labels[m]}: " + ", ".join(f"{d.upper()} s = {fmt_s(s)}"
                                                               for d, s in ctx["device_s"][m].items())
                                  for m in models) + "). Another batch changes the times per layer "
          "unequally (a fixed cost per layer plus work in proportion to the batch), which `s` does not cover.",
          "* **Synchronisation**: `sync=\"layerwise\"` everywhere (each tensor's update and next forward "
          "wait only for its own gradient, MODEL.md section 4). Speedup of A over B is T_B / T_A.",
          "* **8 nodes**: `network(\"usbyte\", P)`, US-Byte's fitted `T = a + b * parameters` [code], as "
          "`alpha = a`, `beta = b / 4` per byte:", ""]
    rows = []
    for _, _, P, _ in fitted:
        c = network(FITTED, P)
        pa, pb = PAPER_FIT[P]
        rows.append((P, f"{pa * 1e6:.2f}", f"{pb:.4g}", f"{c.alpha * 1e6:.2f}", f"{c.beta * 1e12:.2f}",
                     f"{1e3 * float(c(4e6)):.3f}"))
    L += table(("P", "a (us, paper)", "b (s/parameter, paper)", "alpha (us)", "beta (ps/B)",
                "cost of 1M parameters (ms)"), rows)
    if ring:
        L += ["", f"* **{LARGE_P} GPUs**: US-Byte's constants exist for P <= 8 only, so these use fusionopt's ring "
              "all-reduce presets `network(name, 128)`: alpha = 2(P-1) a, beta = 2(P-1)/P g, **nominal link "
              "figures, not fitted**. The paper's 128-GPU simulation settings are not known to us.", ""]
        rows = []
        for _, net, P, _ in ring:
            lat, g = network_link(net)
            c = network(net, P)
            rows.append((net, f"{1 / g / 1e9:.3g}", f"{lat * 1e6:.0f}", f"{c.alpha * 1e3:.3f}",
                         f"{c.beta * 1e12:.1f}", f"{1e3 * float(c(4e6)):.3f}"))
        L += table(("network", "link GB/s", "latency a (us)", f"alpha at P = {LARGE_P} (ms)",
                    f"beta at P = {LARGE_P} (ps/B)", "cost of 1M parameters (ms)"), rows)
    L += ["",
          "* **Methods** (`fusionopt.solvers.solve(problem, name, **options)`): **WFBP** (one message per tensor, "
          "backward order); **P3** (40,000-parameter slices, priority = forward index); **ByteScheduler** "
          "as its code runs on Horovod 0.16 (its deployment): partitions posted under the credit, Horovod "
          "fusing those pending at each 5 ms cycle tick up to 64 MiB, the credit tuned over 4M-64M "
          "parameters as its code does by default; in three settings: **BS default** (partition 1M, credit "
          "4M parameters), **BS advised** (`preset=\"advised\"`: 8M / 16M, its advice for all-reduce) and "
          "**BS tuned** (`bytescheduler-tuned`: a grid of partitions and credits, the best on each "
          "instance, standing in for its auto-tuner); and **BS unfused** (`fusion_threshold_bytes=0, "
          "cycle_time=0, credit_tuning=False`): the scheduler alone, every partition its own message the "
          "moment it is posted, which is what earlier versions of this report called BS default. "
          "Horovod's fusion merges many small tensors into one message, so BS default is much faster than "
          "BS unfused wherever per-message latency dominates, and every 'US-Byte over BS' ratio measured "
          "against the unfused scheduler overstated US-Byte's gain; **US-Byte** (`usbyte`, unit S_p = 1M parameters, its default here, with its "
          "priority search; **US-Byte fwd prio**: forward priorities, no search); **DP**, the exact fusion "
          "optimum (whole tensors in backward order; a barrier-sync method, optimal among fusion plans "
          "also under layerwise sync, MODEL.md section 7); **layerwise-opt**, fusionopt's own method: the "
          "best of the published schedulers and the DP improved by iterated local search over general "
          f"plans (`kicks={ctx['lwo_options']['kicks']}`, `rng={ctx['lwo_options']['rng']}`, a seeded budget "
          f"that decides where it stops, its time limit a {ctx['lwo_options']['time_limit']:g} s safeguard; a "
          "heuristic, no optimality claim; rerunning reproduces it exactly).",
          "* **Bounds** (MODEL.md section 7): the **fluid** bound (alpha = 0, preemptive, smallest index "
          "first), the fluid bound **with one latency** after the backward, and the **best bound** every "
          "`Result` carries (`lower_bound`; `gap` is measured against it). No plan of any method can beat "
          "the best bound; a method at the bound is optimal.", ""]

    # ---------------------------------------------------------------- result 1 and 2 tables
    def instance_rows(keys_models, setting):
        rows = []
        for m in keys_models:
            inst = main[(m, setting)]
            lw = inst.res["lwo"].result
            rows.append((labels[m], fmt_ms(inst.problem.profile.compute_time),
                         *(fmt_ms(inst.T(k)) for k, _, _, _ in METHODS),
                         fmt_ms(inst.fluid), fmt_ms(inst.fluid_latency), fmt_ms(inst.best_bound),
                         *(f"{inst.over(r):.3f}x" for r in REFS),
                         f"{inst.over('usbyte', 'lwo'):.2f}x", f"{100 * lw.gap:.2f}%", lw.stats["start"]))
        return rows

    header = ("model", "B + F", *(LABEL[k] for k, _, _, _ in METHODS), "fluid bound", "fluid + latency",
              "best bound", *(f"US-Byte over {LABEL[r]}" for r in REFS), "layerwise-opt over US-Byte",
              "layerwise-opt gap", "layerwise-opt start")

    def summary(setting_keys, paper) -> str:
        """US-Byte's largest and smallest speedups at s = 1 over the given settings."""
        parts = []
        for r in REFS:
            vals = [(main[(m, sk)].over(r), (m, sk)) for m in models for sk in setting_keys]
            (v, w), (v0, w0) = max(vals), min(vals)
            slower = sum(1 for x, _ in vals if x < 1 - 1e-12)
            parts.append(f"over {LABEL[r]} up to {v:.3f}x ({labels[w[0]]}, {sbk[w[1]][3]}), at least {v0:.3f}x "
                         f"({labels[w0[0]]}, {sbk[w0[1]][3]})" + (f", slower on {slower} of {len(vals)}" if slower else ""))
        prio = [main[(m, sk)].T("usbyte-fwd") / main[(m, sk)].T("usbyte") for m in models for sk in setting_keys]
        return ("Reading at s = 1: US-Byte's speedups are " + "; ".join(parts) + f" (paper: {paper}). "
                f"Its priority search gains up to {100 * (max(prio) - 1):.2f}% over forward priorities here.")

    L += ["## Result 1: 8 nodes and fewer, US-Byte's fitted constants, calibrated V100 (s = 1)", ""]
    L += ["T in ms. 'US-Byte over X' = T_X / T_US-Byte; 'layerwise-opt over US-Byte' = T_US-Byte / "
          "T_layerwise-opt; 'gap' = T_layerwise-opt / best bound - 1.", ""]
    for skey, _, P, slabel in fitted:
        L += [f"**{slabel}**", ""]
        L += table(header, instance_rows(models, skey))
        L += [""]
    L += [summary([sk for sk, _, _, _ in fitted],
                  f"up to {PAPER_OVER_WFBP}x over WFBP, {PAPER_OVER_BS}x over ByteScheduler"), ""]
    L += [fitted_reading(ctx, fitted), ""]

    if ring:
        L += [f"## Result 2: {LARGE_P} GPUs, ring all-reduce presets, calibrated V100 (s = 1)", ""]
        for skey, _, P, slabel in ring:
            L += [f"**{slabel}**", ""]
            L += table(header, instance_rows(models, skey))
            L += [""]
        L += [summary([sk for sk, _, _, _ in ring], f"up to {PAPER_128}x, baseline not stated"), ""]
    if "main.png" in ctx["plots"]:
        L += ["![T over the best lower bound](main.png)", "",
              "The plot: each method's T over the best lower bound at s = 1 (log scale; 1 = provably optimal).", ""]

    # ---------------------------------------------------------------- result 3: sweeps
    L += ["## Result 3: 'up to': the compute-scale sweeps", ""]
    grid = ctx["grid"]
    L += [f"Every compute time is multiplied by s from {fmt_s(grid[0])} to {fmt_s(grid[-1])} "
          f"({len(grid)} values, {a.per_octave} per octave), on every model and setting; "
          "layerwise-opt is not run on the sweep (time), but each maximum below is re-solved with every "
          "method, layerwise-opt included. US-Byte over each baseline, its largest value and where it occurs:", ""]
    rows = []
    for part, keys in (("2 to 8 nodes (fitted)", ctx["fitted_keys"]), (f"{LARGE_P} GPUs (ring)", ctx["ring_keys"])):
        if not keys:
            continue
        found = ctx["maxima"][part]
        for ref in REFS:
            v, w = found[ref]
            inst = ctx["at_max"][w]
            lw = inst.res["lwo"].result
            if part.startswith("2"):
                pv = PAPER_OVER_WFBP if ref == "wfbp" else PAPER_OVER_BS
            else:
                pv = PAPER_128
            rows.append((part, LABEL[ref], f"**{v:.3f}x**", f"{pv}x", where_text(w, sbk, labels),
                         fmt_ms(inst.T("usbyte")), fmt_ms(inst.T(ref)), fmt_ms(inst.T("lwo")),
                         fmt_ms(inst.best_bound), f"{inst.over('usbyte', 'lwo'):.2f}x", f"{100 * lw.gap:.2f}%"))
    L += table(("setting", "US-Byte over", "up to (ours)", "paper", "at (model, setting, s)", "T US-Byte (ms)",
                "T baseline (ms)", "T layerwise-opt (ms)", "best bound (ms)", "layerwise-opt over US-Byte",
                "layerwise-opt gap"), rows)
    L += ["", f"The {LARGE_P}-GPU rows set the paper's {PAPER_128}x beside every baseline, since we do not know "
          "which one it is measured against.", "", sweep_reading(ctx), ""]
    if "sweep.png" in ctx["plots"]:
        L += ["![speedups against the compute scale](sweep.png)", "",
              "The plot: US-Byte's speedup over each baseline against s (log-log), the paper's figures "
              "dashed, and the dotted 'headroom' T_US-Byte / best bound, the most any plan could gain over "
              "US-Byte. Grey verticals: the zoo devices at our batches.", ""]

    # ---------------------------------------------------------------- result 4: unit
    P8 = max(P for _, _, P, _ in fitted)
    L += [f"## Result 4: US-Byte's unit S_p and its priority search (US-Byte fit, P = {P8}, s = 1)", ""]
    L += ["US-Byte's README leaves S_p to Bayesian optimisation; fusionopt's default is ByteScheduler's 1M "
          "parameters. `usbyte` refuses a unit larger than every tensor (nothing would be cut): the table "
          "says 'refused' there (the `ValueError` was caught). T in ms, messages in brackets; 'search "
          "gain' is T_forward / T_search.", ""]
    rows = []
    refused = []
    for m in models:
        cells = [labels[m]]
        for unit in ctx["units"]:
            o = ctx["unit_rows"][(m, unit)]
            if o["search"].error:
                cells.append("refused")
                refused.append((labels[m], unit))
            else:
                cells.append(f"{fmt_ms(o['search'].T)} ({o['search'].messages}); "
                             f"gain {o['forward'].T / o['search'].T:.3f}x")
        rows.append(cells)
    L += table(("model", *(f"S_p = {u:,}" for u in ctx["units"])), rows)
    if refused:
        example = next(o["search"].error for o in ctx["unit_rows"].values() if o["search"].error)
        example = example.removeprefix("ValueError: ")      # the table's text says it was a ValueError
        L += ["", "Refused: " + ", ".join(f"{m} at {u:,}" for m, u in refused) + f". The message, e.g.: "
              f"\"{example}\"", ""]
    gains = [o["forward"].T / o["search"].T for o in ctx["unit_rows"].values() if not o["search"].error]
    spread = []
    for m in models:
        ts = [ctx["unit_rows"][(m, u)]["search"].T for u in ctx["units"] if not ctx["unit_rows"][(m, u)]["search"].error]
        if len(ts) > 1:
            spread.append(f"{labels[m]} {max(ts) / min(ts):.3f}x")
    L += ["", f"Reading: the priority search lowers T by at most {100 * (max(gains) - 1):.2f}% against forward "
          f"priorities across these {len(gains)} runs. Slowest over fastest accepted unit, per model: "
          + (", ".join(spread) if spread else "only one unit accepted") + ".", ""]

    # ---------------------------------------------------------------- gantt
    if ctx["gantt"]:
        name, inst, text = ctx["gantt"]
        L += ["## The two timelines", "", f"![Gantt chart]({name})", "", text, ""]

    # ---------------------------------------------------------------- where we stand
    L += ["## Where layerwise-opt and the bound stand", ""]
    L += [standing(ctx), ""]

    # ---------------------------------------------------------------- why
    L += what_changed(ctx)
    L += ["## Why our numbers differ from the paper's", ""]
    L += why(ctx)
    if not ctx["plots"]:
        L += ["Plots: not written (matplotlib not installed).", ""]
    return "\n".join(L)


def fitted_reading(ctx, fitted) -> str:
    """Per-message latency against compute at s = 1, P = 8 (the 'why' of the fitted results)."""
    main, labels = ctx["main"], ctx["labels"]
    skey, _, P, _ = fitted[-1]
    parts = []
    for m in ctx["models"]:
        inst = main[(m, skey)]
        p = inst.problem.profile
        alpha = inst.problem.cost.alpha
        parts.append(f"{labels[m]} {p.n} x {1e3 * alpha:.2f} ms = {1e3 * p.n * alpha:.0f} ms against "
                     f"B + F = {1e3 * p.compute_time:.0f} ms")
    return ("Why the per-tensor schedulers are far from the bound here: WFBP, P3, BS unfused and "
            "US-Byte never put two tensors in one message, so every tensor pays at least one fitted "
            f"latency a (P = {P}): " + "; ".join(parts) + ". The DP fuses tensors and layerwise-opt starts "
            "from it, so both pay a few latencies only; ByteScheduler on Horovod fuses what is pending at "
            "each cycle tick, and pays a wait for the tick instead.")


def what_changed(ctx) -> list[str]:
    """The previous report's figures (roofline V100) beside this run's (calibrated V100), and which of
    its conclusions hold."""
    labels, main, sw = ctx["labels"], ctx["main"], ctx["sweep"]
    groups = (("fitted", "2 to 8 nodes (fitted)", ctx["fitted_keys"]), ("ring", f"{LARGE_P} GPUs (ring)", ctx["ring_keys"]))
    rows = [(f"B + F of {labels[m]} (ms)", f"{1e3 * PREVIOUS['compute'][m]:.2f}",
             f"{1e3 * ctx['profiles'][m].compute_time:.2f}") for m in ctx["models"]]
    new_at1, new_sweep = {}, {}
    for group, name, keys in groups:
        if not keys:
            continue
        old = PREVIOUS[group]
        for ref in REFS:
            at1 = max(main[key].over(ref) for key in keys)
            up_to = max(float(np.max(sw[key][ref] / sw[key]["usbyte"])) for key in keys)
            new_at1[(group, ref)], new_sweep[(group, ref)] = at1, up_to
            rows.append((f"{name}: US-Byte over {LABEL[ref]}, up to at s = 1", f"{old['at1'][ref]:.3f}x", f"{at1:.3f}x"))
            rows.append((f"{name}: US-Byte over {LABEL[ref]}, up to on the sweep", f"{old['sweep'][ref]:.3f}x",
                         f"{up_to:.3f}x"))
        slower = sum(main[key].over("bs-tuned") < 1 - 1e-12 for key in keys)
        rows.append((f"{name}: instances at s = 1 where US-Byte is slower than BS tuned",
                     f"{old['slower_than_tuned']} of 15", f"{slower} of {len(keys)}"))
    insts = list(main.values()) + list(ctx["at_max"].values())
    over_us = [i.over("usbyte", "lwo") for i in insts]
    gaps = [i.res["lwo"].result.gap for i in insts]
    lo, med, hi = PREVIOUS["lwo_over_usbyte"]
    rows += [("layerwise-opt over US-Byte (smallest, median, largest)", f"{lo:.2f}x, {med:.2f}x, {hi:.2f}x",
              f"{min(over_us):.2f}x, {float(np.median(over_us)):.2f}x, {max(over_us):.2f}x"),
             ("layerwise-opt's gap to the best bound (median, largest)",
              f"{100 * PREVIOUS['lwo_gap'][0]:.2f}%, {100 * PREVIOUS['lwo_gap'][1]:.2f}%",
              f"{100 * float(np.median(gaps)):.2f}%, {100 * max(gaps):.2f}%")]
    slower_x = [ctx["profiles"][m].compute_time / PREVIOUS["compute"][m] for m in ctx["models"]]
    reached = [(paper, ref, group) for group, paper, ref in (("fitted", PAPER_OVER_WFBP, "wfbp"),
                                                             ("fitted", PAPER_OVER_BS, "bs-advised"),
                                                             ("ring", PAPER_128, "wfbp"), ("ring", PAPER_128, "bs-advised"))
               if (group, ref) in new_sweep and new_sweep[(group, ref)] >= paper]
    L = ["## What changed with measured compute", "",
         "The previous version of this report ran on the zoo's roofline ESTIMATE (each layer's FLOPs at 40% of "
         "the V100 preset's FP16 tensor-core peak, B = 2F); this one runs on the zoo's calibrated V100 (FP32, "
         f"above), whose steps are {min(slower_x):.1f}x to {max(slower_x):.1f}x as long. The sweep now runs "
         f"from s = {fmt_s(ctx['grid'][0])} to {fmt_s(ctx['grid'][-1])} (was 1/16 to 64), so that it reaches "
         "about the same compute per step in ms at its communication-bound end. Figures of the previous "
         "report against this run's:", ""]
    L += table(("figure", "roofline V100 (previous)", "calibrated V100 (this run)"), rows)
    L += ["",
          "* **Holds:** " + ("US-Byte reaches none of the paper's figures (1.56x over WFBP, 1.26x over "
                             "ByteScheduler, 1.69x at 128 GPUs) at s = 1 or anywhere on the sweep; "
                             if not reached else "")
          + "the schedulers that send each tensor on its own (WFBP, US-Byte, BS unfused) still pay one fitted "
          "latency per tensor, which decides T where a model has many tensors at P = 8, and layerwise-opt, "
          "which fuses, still stays at the bound on most instances.",
          "* **Moved:** with compute this much longer, the backward hides more of that latency at s = 1: "
          "US-Byte is slower than BS tuned on fewer instances (the rows 'slower than BS tuned'), its largest "
          "gains over WFBP at s = 1 grow (up to "
          + ", ".join(f"{new_at1[(g, 'wfbp')]:.3f}x" for g, _, keys in groups if keys)
          + "), and layerwise-opt's lead over US-Byte shrinks to a median of "
          f"{float(np.median(over_us)):.2f}x (was {med:.2f}x). On the sweep the largest gains over WFBP sit at "
          + " and ".join(f"s = {fmt_s(found[1][2])}" for found in (ctx["maxima"][name]["wfbp"] for _, name, keys in groups
                                                                   if keys))
          + " (was s = 5.66 and 8 of the roofline's scale), and US-Byte's largest gain over any ByteScheduler "
          "setting there is " + " and ".join(
              f"{max(new_sweep[(g, r)] for r in ('bs', 'bs-advised', 'bs-tuned')):.3f}x ({name})"
              for g, name, keys in groups if keys)
          + " (was " + " and ".join(f"{max(PREVIOUS[g]['sweep'][r] for r in ('bs', 'bs-advised', 'bs-tuned')):.3f}x"
                                    for g, _, keys in groups if keys) + ").", ""]
    return L


def sweep_reading(ctx) -> str:
    parts = []
    for part, keys, paper_list in (("2 to 8 nodes", ctx["fitted_keys"], ((PAPER_OVER_WFBP, "wfbp"),
                                                                      (PAPER_OVER_BS, "bs-advised"))),
                                   (f"{LARGE_P} GPUs", ctx["ring_keys"], ((PAPER_128, "wfbp"),
                                                                          (PAPER_128, "bs-advised")))):
        if not keys:
            continue
        for paper, ref in paper_list:
            hits = sum(1 for key in keys for v in ctx["sweep"][key][ref] / ctx["sweep"][key]["usbyte"]
                       if v >= paper)
            total = sum(len(ctx["grid"]) for _ in keys)
            parts.append(f"{part}: US-Byte reaches the paper's {paper}x over {LABEL[ref]} on {hits} of "
                         f"{total} swept instances")
    best = (-1.0, None, 0)
    for key, d in ctx["sweep"].items():
        h = d["usbyte"] / d["bound"]
        k = int(np.argmax(h))
        if h[k] > best[0]:
            best = (float(h[k]), key, k)
    h, (model, skey), k = best
    d = ctx["sweep"][(model, skey)]
    return ("Reading: " + "; ".join(parts) + f". The headroom T_US-Byte / best bound reaches {h:.2f}x on "
            f"the sweep ({where_text((model, skey, ctx['grid'][k]), ctx['settings_by_key'], ctx['labels'])}); "
            f"there WFBP is {d['wfbp'][k] / d['bound'][k]:.2f}x and BS tuned {d['bs-tuned'][k] / d['bound'][k]:.2f}x "
            f"the bound, BS unfused {d['bs-unfused'][k] / d['bound'][k]:.2f}x, and the fusion optimum DP "
            f"{d['dp'][k] / d['bound'][k]:.3f}x: what the per-tensor schedulers (WFBP, US-Byte, BS unfused) "
            "miss there is fusion of small tensors, which Horovod's cycle fusion gives ByteScheduler in part "
            "(what is pending at a tick) and the DP in full.")


def standing(ctx) -> str:
    insts = list(ctx["main"].values()) + list(ctx["at_max"].values())
    gaps = [i.res["lwo"].result.gap for i in insts]
    over_us = [i.over("usbyte", "lwo") for i in insts]
    over_dp = [i.over("dp", "lwo") for i in insts]
    starts: dict[str, int] = {}
    for i in insts:
        st = i.res["lwo"].result.stats["start"]
        starts[st] = starts.get(st, 0) + 1
    lat_vs_fluid = [i.fluid_latency / i.fluid - 1 for i in insts]
    best_is_fl = sum(1 for i in insts if abs(i.best_bound - i.fluid_latency) <= 1e-12 * i.best_bound)
    us_gap = [i.T("usbyte") / i.best_bound - 1 for i in insts]
    return (f"Over the {len(insts)} instances solved with every method (result 1, result 2 and the sweep "
            f"maxima): layerwise-opt is {min(over_us):.2f}x to {max(over_us):.2f}x faster than US-Byte "
            f"(median {np.median(over_us):.2f}x) and {min(over_dp):.3f}x to {max(over_dp):.3f}x faster than "
            f"the fusion optimum DP; its gap to the best bound is {100 * min(gaps):.2f}% to "
            f"{100 * max(gaps):.2f}% (median {100 * float(np.median(gaps)):.2f}%), where US-Byte's is "
            f"{100 * max(min(us_gap), 0.0) if min(us_gap) > -1e-9 else 100 * min(us_gap):.1f}% to "
            f"{100 * max(us_gap):.0f}%. Its search started from "
            + ", ".join(f"{k} ({v})" for k, v in sorted(starts.items(), key=lambda kv: -kv[1]))
            + f". The best bound equals the fluid bound with one latency on {best_is_fl} of {len(insts)} "
            f"instances; the latency term adds {100 * min(lat_vs_fluid):.2f}% to {100 * max(lat_vs_fluid):.2f}% "
            "to the plain fluid bound. Where the gap is small, layerwise-opt is provably near-optimal; "
            "where it is larger, the bound (which lets every message but one pay no latency) may be the "
            "loose side, and we cannot say which without an exact solver at this size.")


def latency_bound_text(ctx, P) -> str:
    """How close WFBP and ByteScheduler come to US-Byte where latency dominates (s = 1)."""
    parts = []
    for m in ctx["models"]:
        inst = ctx["main"][(m, f"{FITTED}-{P}")]
        floor = inst.problem.profile.n * inst.problem.cost.alpha
        if floor < inst.problem.profile.compute_time:
            continue
        parts.append(f"{ctx['labels'][m]} (n alpha = {1e3 * floor:.0f} ms > B + F): US-Byte over WFBP "
                     f"{inst.over('wfbp'):.3f}x, over BS tuned {inst.over('bs-tuned'):.3f}x, the DP over "
                     f"US-Byte {inst.over('usbyte', 'dp'):.1f}x")
    return "; ".join(parts) if parts else f"no model here has n alpha > B + F at P = {P}"


def why(ctx) -> list[str]:
    labels = ctx["labels"]
    P8 = max(P for _, net, P, _ in ctx["settings"] if net == FITTED)
    main = ctx["main"]
    rn = ctx["models"][1] if len(ctx["models"]) > 1 else ctx["models"][0]
    inst = main[(rn, f"{FITTED}-{P8}")]
    return [
        "* **Per-tensor latency.** US-Byte, like WFBP, P3 and ByteScheduler without Horovod's fusion, "
        "sends each tensor on its own (blocks never mix tensors), so a model with many small tensors pays the fitted intercept a "
        f"once per tensor at least: for {labels[rn]} at P = {P8}, {inst.problem.profile.n} tensors x "
        f"{1e3 * inst.problem.cost.alpha:.2f} ms. In our model that latency, not the block schedule, "
        "decides T wherever a model has many tensors: " + latency_bound_text(ctx, P8) + ". The fitted a is the intercept of a line through measured all-reduce "
        "times; if small messages cost less on the paper's clusters than the line says (a linear fit "
        "over large messages overstates them), WFBP and US-Byte are faster there and the ratios differ. "
        "The paper's frameworks may also group or skip small tensors (BatchNorm parameters) in ways our "
        "model does not; we do not know.",
        "* **Compute times.** Ours are the zoo's calibrated V100 (layer times measured on one H100 in "
        "torch, scaled by one published V100 throughput per workload) at batches we chose; the paper's "
        "GPUs, framework and batches are not all known to us. The speedups depend strongly on the compute / communication "
        "ratio (result 3), so a ratio near the paper's appearing at some s is not evidence that we "
        "rebuilt the paper's setting.",
        "* **ByteScheduler's settings.** Which partition and credit the paper's ByteScheduler used is "
        "not known to us (its auto-tuner, its defaults or a manual choice), nor whether Horovod's fusion "
        "was on (US-Byte's own runtime sets `HOROVOD_FUSION_THRESHOLD=0`). The settings above bracket "
        "it; US-Byte's speedup over ByteScheduler moves by a large factor between them, most of all "
        "between BS default (fused on Horovod) and BS unfused.",
        "* **128 GPUs.** The paper's 128-GPU figure comes from its own simulation, with settings we do "
        "not know; ours uses nominal ring all-reduce presets, not fitted constants.",
        "* **Our US-Byte is a reading of the authors' code** (docs/methods.md, section usbyte; the choices left open "
        "are documented in `fusionopt/solvers/papers/_usbyte.py`): gaps, block lengths, when phase 2 starts, "
        "and the promotion rule of the priority search. The unit S_p is 1M parameters unless result 4 "
        "says otherwise; the paper tuned it by Bayesian optimisation.",
        "* **Simulation, not measurement.** One FIFO channel with an affine cost, no contention between "
        "compute and communication, no framework or per-block scheduling overheads (MODEL.md sections "
        "1-4).",
        "",
    ]


# ----------------------------------------------------------------------------- main
def main(argv=None) -> int:
    study = Study(__doc__, SCRIPT, HERE, "VGG-16 and ResNet-152 only, P = 8 and 25GbE at 128, 1 sweep point per octave")
    parser = study.parser
    parser.add_argument("--per-octave", type=int, default=None,
                        help="sweep points per octave of s (default 2; 1 with --quick)")
    parser.add_argument("--octaves", type=int, nargs=2, default=(-8, 4), metavar=("LO", "HI"),
                        help="sweep s from 2**LO to 2**HI (default -8 4)")
    parser.add_argument("--kicks", type=int, default=None,
                        help="layerwise-opt's kicks per instance, its deterministic budget (default 200, its own "
                             "default; 20 with --quick); its time limit is set far out of the way")
    parser.add_argument("--rng", type=int, default=0, help="layerwise-opt's seed (default 0)")
    parser.add_argument("--gantt-model", default=GANTT_MODEL, help=f"model of the Gantt chart (default {GANTT_MODEL})")
    args = study.parse(argv)
    if args.per_octave is None:
        args.per_octave = 1 if args.quick else 2
    if args.kicks is None:
        args.kicks = 20 if args.quick else 200
    lo, hi = args.octaves
    if args.per_octave < 1 or lo >= hi or args.kicks < 0:
        parser.error("--per-octave must be >= 1, --octaves LO < HI, --kicks >= 0")
    models = MODELS_QUICK if args.quick else tuple(key for key, _, _ in MODELS)
    if args.gantt_model not in models:
        parser.error(f"--gantt-model must be one of {', '.join(models)}")

    labels = {key: label for key, label, _ in MODELS}
    batches = {key: batch for key, _, batch in MODELS}
    profiles = {m: zoo.profile(m, device=DEVICE, batch=batches[m]) for m in models}
    device_s = {m: {d: zoo.profile(m, device=d, batch=batches[m]).compute_time / profiles[m].compute_time
                    for d in MARK_DEVICES} for m in models}
    # A seeded kick budget, not a wall-clock limit: rerunning reproduces the figures anywhere
    # (the time limit is a safeguard only, far beyond what the kicks take).
    lwo_options = {"time_limit": SAFEGUARD_SECONDS, "kicks": args.kicks, "rng": args.rng}
    workers = FITTED_WORKERS_QUICK if args.quick else FITTED_WORKERS
    nets = RING_NETWORKS_QUICK if args.quick else RING_NETWORKS
    setting_list = settings(workers, nets)
    sbk = {st[0]: st for st in setting_list}

    with study:
        progress = study.progress
        progress.stage("results 1 and 2: every method at s = 1", total=len(models) * len(setting_list))
        main_data = main_table(profiles, models, setting_list, lwo_options, progress)

        grid = 2.0 ** np.linspace(lo, hi, (hi - lo) * args.per_octave + 1)
        progress.stage("result 3: compute-scale sweeps", total=len(models))
        sw = sweep(profiles, models, setting_list, grid, progress)
        fitted_keys = [(m, sk) for m in models for sk, net, _, _ in setting_list if net == FITTED]
        ring_keys = [(m, sk) for m in models for sk, net, _, _ in setting_list if net != FITTED]
        found = {"2 to 8 nodes (fitted)": maxima(sw, grid, fitted_keys)}
        if ring_keys:
            found[f"{LARGE_P} GPUs (ring)"] = maxima(sw, grid, ring_keys)
        at_max = {}
        for f in found.values():
            at_max.update(at_maxima(profiles, sbk, f, lwo_options))

        units = UNITS_QUICK if args.quick else UNITS
        progress.stage("result 4: US-Byte's unit", total=len(models))
        unit_rows = unit_study(profiles, models, units, max(workers), progress)

        plots = []
        gantt = None
        plt = pyplot()
        if plt is not None:
            plots.append(plot_main(plt, args.out, main_data, models, setting_list, labels))
            plots.append(plot_sweep(plt, args.out, sw, grid, models, setting_list, labels, device_s))
            gkey = (args.gantt_model, f"{FITTED}-{max(workers)}")
            inst = main_data[gkey]
            title = (f"{labels[args.gantt_model]}, calibrated {DEVICE.upper()}, batch {batches[args.gantt_model]}, "
                     f"US-Byte fit P = {max(workers)}, layerwise sync")
            name = plot_gantt(plt, args.out, inst, args.gantt_model, title)
            plots.append(name)
            gantt = (name, inst, gantt_reading(inst, labels[args.gantt_model], max(workers)))

        ctx = dict(args=args, produced=study.produced_by("the paper's numbers are quoted from its abstract and code"),
                   labels=labels, batches=batches, models=models,
                   profiles=profiles, device_s=device_s, lwo_options=lwo_options, settings=setting_list,
                   settings_by_key=sbk, main=main_data, grid=grid, sweep=sw, fitted_keys=fitted_keys,
                   ring_keys=ring_keys, maxima=found, at_max=at_max, units=units, unit_rows=unit_rows,
                   plots=plots, gantt=gantt)
        study.write(report(ctx), plots)
    return study.exit_code


def gantt_reading(inst: Instance, label: str, P: int) -> str:
    us, lw = inst.res["usbyte"].result, inst.res["lwo"].result
    p = inst.problem.profile

    def idle_before_B(tl) -> float:
        busy = np.clip(np.minimum(tl.message_end, p.B) - np.minimum(tl.message_start, p.B), 0, None).sum()
        first = float(p.ready_times.min())
        return p.B - first - float(busy)

    def first_forward_wait(tl) -> float:
        return float(tl.forward_start[0] - p.B)

    fused = sum(1 for m in lw.plan.messages if len(set(m.tensors)) > 1)
    cut = sum(1 for i in range(p.n) if sum(1 for m in lw.plan.messages for c in m.chunks if c.tensor == i) > 1)
    return (f"The chart: {label} at P = {P} with the fitted constants (s = 1), US-Byte above, layerwise-opt "
            "below; channel messages are coloured by their first tensor in forward order (hatched: several "
            "tensors fused), the compute row shows the backward (solid, from tensor n-1 down to 0), the "
            "next forward (light) and, cross-hatched in red, the time it waits for communication. US-Byte "
            f"sends {us.num_messages} blocks, T = {fmt_ms(us.iteration_time)} ms; "
            f"the channel idles {fmt_ms(idle_before_B(us.timeline))} ms between the first gradient and B, and "
            f"the forward of tensor 0 starts {fmt_ms(first_forward_wait(us.timeline))} ms after B. layerwise-opt "
            f"sends {lw.num_messages} messages ({fused} fusing several tensors; {cut} tensors cut into "
            f"several pieces), T = {fmt_ms(lw.iteration_time)} ms (bound {fmt_ms(inst.best_bound)} ms); its "
            f"channel idles {fmt_ms(idle_before_B(lw.timeline))} ms before B and tensor 0's forward starts "
            f"{fmt_ms(first_forward_wait(lw.timeline))} ms after B.")


if __name__ == "__main__":
    sys.exit(main())
