"""Two-way contention against the GPU runs: the stored GEMM run's plans predicted again with compute
slowed ``kappa`` times while a message is in flight and messages slowed ``mu`` times while the
compute stream computes (MODEL.md section 6), the factors fitted leaving one model out.

The measured times are those of ``validation/hardware/run.py --backend nccl --emulate-network
100gb-ib --workers 8 --compute gemm`` (``results/nccl-gpu-gemm.json``: GEMMs on the compute
stream, NCCL and the emulated link's hold kernel on the communication stream, one GPU); the
same run with spin compute (``results/nccl-gpu-spin.json``) is the control without contention.
Each plan is built again as that script built it (the zoo's roofline profile on the run's
device and batch, compute scaled by the stored time scale, the stored cost, the method's plan
on that problem, release times dropped), and its prediction without contention must equal the
stored one before anything else is done.

The factors are fitted on one model's rows and predict the other's (leave one model out):
every error reported is of a prediction made without the rows it is compared with. The fit
minimises the mean |measured - predicted| / predicted over the rows, on a grid (``kappa`` 1
to 2, ``mu`` 1 to 64) refined by Nelder-Mead. The factors fitted on every row are reported
too (in-sample, no error is claimed from them), and those fitted on the spin run, which
should be near 1. With ``--calibration FILE`` (``fusionopt calibrate --contention``'s output)
the GEMM run is also predicted with the measured factors, fitting nothing.

Later GEMM runs (``--check``; by default the two the GPU command measured again on
2026-11-27, ``results/gpu-2026-11-27/run2/`` and ``run3/nccl-gpu-gemm.json``) are predicted with
the factors fitted here, fitting nothing on them: those fitted on every stored row, for each
model those fitted on the other model's stored rows, and the calibration's. The calibration by
default is the one the GPU command measured in ``run3`` (``contention-calibration-gpu.json``).
Each run's excess (measured minus predicted without contention) is also set beside its plans'
message counts: a rate slows a plan by its overlapped message time, a cost per packed tensor by
about the same for every plan of a model.

Writes ``results/contention-gpu.{json,md}``.

    python validation/hardware/contention.py
    python validation/hardware/contention.py --gemm OUT/nccl-gpu-gemm.json --spin OUT/nccl-gpu-spin.json \\
        --calibration OUT/contention-calibration-gpu.json --output-dir OUT
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scipy.optimize import minimize  # noqa: E402

from fusionopt import zoo  # noqa: E402
from fusionopt.executor import read_contention, scale_compute  # noqa: E402
from fusionopt.model import Problem, simulate  # noqa: E402
from fusionopt.reporting import read_json_document  # noqa: E402
from fusionopt.cost import cost_from_dict  # noqa: E402
from fusionopt.reporting import changed_options, markdown_table, subset_location, write_result  # noqa: E402
from fusionopt.solvers import solve  # noqa: E402
from validation.hardware.run import ranking  # noqa: E402

RESULTS = ROOT / "validation" / "results"
# The GEMM runs measured again by the GPU command on 2026-11-27, after the stored one was fitted,
# and the contention the GPU command's calibration measured.
CHECKS = tuple(RESULTS / "gpu-2026-11-27" / run / "nccl-gpu-gemm.json" for run in ("run2", "run3"))
CALIBRATION = RESULTS / "gpu-2026-11-27" / "run3" / "contention-calibration-gpu.json"
KAPPAS = np.round(np.arange(1.0, 2.0001, 0.05), 2)
MUS = np.geomspace(1.0, 64.0, 25)
TARGET = 0.10
NEAR = 0.005            # mean |error| this close to the least counts as as good a fit


class Case:
    """One stored row: its plan rebuilt, measured ``T`` and the problem it was predicted on."""

    def __init__(self, row: dict[str, Any], scaled: Any, cost: Any) -> None:
        self.row, self.scaled, self.cost = row, scaled, cost
        self.zoo_compute = ""            # zoo.profile's compute= the profile was rebuilt with
        self.model, self.method, self.sync = row["model"], row["method"], row["sync"]
        self.plan = solve(Problem(scaled, cost, sync=self.sync), self.method).plan.without_release()
        self.measured = float(row["measured_time"])

    def predict(self, kappa: float = 1.0, mu: float = 1.0) -> float:
        problem = Problem(self.scaled, self.cost, sync=self.sync, contention=kappa, comm_contention=mu)
        return simulate(problem, self.plan, validate=False).iteration_time

    def error(self, predicted: float) -> float:
        """``(measured - predicted) / predicted``, as the stored runs report it."""
        return (self.measured - predicted) / predicted


def rebuild(document: dict[str, Any], label: str) -> list[Case]:
    """The stored run's plans, built again; each plain prediction checked against the stored one.

    The zoo's compute the run's profiles had is ``zoo_compute`` where the run says it; the runs
    before that field are tried with the roofline (the zoo's compute until 2026-11-27) and the
    calibrated compute, and the one that rebuilds every row is kept."""
    said = document.get("zoo_compute")
    failures = []
    for compute in [said] if said else ["roofline", "calibrated"]:
        try:
            return _rebuild(document, label, compute)
        except ValueError as exc:
            failures.append(str(exc))
    raise SystemExit(failures[0] if said else f"{failures[0]}; with the calibrated compute: {failures[1]}")


def _rebuild(document: dict[str, Any], label: str, compute: str) -> list[Case]:
    cases = []
    profiles = {}
    for row in document["results"]:
        model = row["model"]
        if model not in profiles:
            profiles[model] = zoo.profile(model, device=document["device"], batch=document["batch"], compute=compute)
        cost = cost_from_dict(document["cost"][model])
        case = Case(row, scale_compute(profiles[model], row["time_scale"]), cost)
        case.zoo_compute = compute
        rebuilt, stored = case.predict(), float(row["predicted_time"])
        if case.plan.num_messages != row["messages"] or not math.isclose(rebuilt, stored, rel_tol=1e-9):
            raise ValueError(f"{label}: {model} {case.method}: the rebuilt plan ({case.plan.num_messages} messages, "
                             f"{1e3 * rebuilt:.6f} ms) is not the stored one ({row['messages']} messages, "
                             f"{1e3 * stored:.6f} ms): the zoo or the method changed since the run")
        cases.append(case)
    return cases


def mean_abs_error(cases: list[Case], kappa: float, mu: float) -> float:
    return float(np.mean([abs(c.error(c.predict(kappa, mu))) for c in cases]))


def fit(cases: list[Case]) -> dict[str, Any]:
    """``kappa`` and ``mu`` minimising the mean |error| over ``cases`` (module docstring), and
    ``near``: the grid's pairs whose mean |error| is within ``NEAR`` of the least (the runs
    tell them apart no better: a message that ends before the next is ready delays the
    compute by ``(1 - 1/kappa) mu`` times its own time, whatever each factor is)."""
    grid = [(mean_abs_error(cases, k, m), float(k), float(m)) for k in KAPPAS for m in MUS]
    least, kappa, mu = min(grid)

    def loss(x: np.ndarray) -> float:
        return mean_abs_error(cases, max(1.0, x[0]), max(1.0, math.exp(x[1])))

    best = minimize(loss, [kappa, math.log(mu)], method="Nelder-Mead",
                    options={"xatol": 1e-4, "fatol": 1e-7, "maxiter": 400})
    kappa, mu = max(1.0, float(best.x[0])), max(1.0, math.exp(float(best.x[1])))
    return {"kappa": kappa, "mu": mu, "mean_abs_error": mean_abs_error(cases, kappa, mu),
            "near": [(k, m) for loss, k, m in grid if loss <= least + NEAR]}


def prediction_rows(cases: list[Case], kappa: float, mu: float, fitted_on: str) -> list[dict[str, Any]]:
    rows = []
    for c in cases:
        predicted = c.predict(kappa, mu)
        rows.append({"model": c.model, "method": c.method, "sync": c.sync, "messages": c.plan.num_messages,
                     "measured_time": c.measured, "plain_predicted_time": float(c.row["predicted_time"]),
                     "plain_error": c.error(float(c.row["predicted_time"])), "predicted_time": predicted,
                     "relative_error": c.error(predicted), "kappa": kappa, "mu": mu, "fitted_on": fitted_on,
                     "iteration_times": c.row["iteration_times"], "host_queue": c.row.get("host_queue")})
    return rows


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    models = list(dict.fromkeys(r["model"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    orders = {m: ranking([r for r in rows if r["model"] == m]) for m in models}
    median = statistics.median(abs(r["relative_error"]) for r in rows)
    return {"median_abs_relative_error": median,
            "median_abs_relative_error_by_method": {m: statistics.median(abs(r["relative_error"]) for r in rows
                                                                         if r["method"] == m) for m in methods},
            "ranking": orders,
            "target": {"median_abs_relative_error_at_most": TARGET, "met_error": median <= TARGET,
                       "rankings_equal": all(o["equal"] for o in orders.values()),
                       "rankings_agree_beyond_ties": all(o["agree_beyond_ties"] for o in orders.values())}}


def check_rows(check: dict[str, Any], every: dict[str, Any], folds: list[dict[str, Any]],
               calibrated: tuple[float, float] | None = None) -> dict[str, Any]:
    """A later GEMM run, fitted on by nothing, predicted with the stored run's factors: those
    fitted on every stored row, for each model those fitted on the other model's stored rows
    (new run and new model both), and the ``calibrated`` (kappa, mu) where given."""
    cases = rebuild(check, "checked run")
    rows = prediction_rows(cases, every["kappa"], every["mu"], "every stored row")
    crossed = []
    for fold in folds:
        crossed += prediction_rows([c for c in cases if c.model in fold["predicts"]], fold["kappa"], fold["mu"],
                                   fold["fitted_on"])
    checked = {"date": check["date"], "gpu": check["hardware"].get("gpu"), "versions": check["versions"],
               "zoo_compute": cases[0].zoo_compute,
               "plain_median_abs_relative_error": statistics.median(abs(r["plain_error"]) for r in rows),
               "results": rows, "summary": summarise(rows),
               "other_model": {"results": crossed, "summary": summarise(crossed)}}
    if calibrated is not None:
        measured = prediction_rows(cases, *calibrated, "calibration")
        checked["calibrated"] = {"results": measured, "summary": summarise(measured)}
    return checked


def excess(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per model, over its barrier plans: the fewest and most messages and the least and most
    excess (measured minus predicted without contention), seconds. A slowdown per unit of
    overlapped message time grows with the messages' time; one per packed tensor does not."""
    found = []
    for model in dict.fromkeys(r["model"] for r in rows):
        barrier = [r for r in rows if r["model"] == model and r["sync"] == "barrier"]
        if not barrier:
            continue
        extra = [r["measured_time"] - r["plain_predicted_time"] for r in barrier]
        queued = [r["host_queue"] / r["measured_time"] for r in barrier if r.get("host_queue") is not None]
        found.append({"model": model, "plans": len(barrier),
                      "messages": [min(r["messages"] for r in barrier), max(r["messages"] for r in barrier)],
                      "excess": [min(extra), max(extra)],
                      "host_queue_share": [min(queued), max(queued)] if queued else None})
    return found


def evaluate(gemm: dict[str, Any], spin: dict[str, Any], calibration: str | None,
             checks: list[tuple[str, dict[str, Any]]] = ()) -> dict[str, Any]:
    """The fits and predictions; ``checks`` are later GEMM runs as (name shown, document)."""
    cases = rebuild(gemm, "gemm run")
    controls = rebuild(spin, "spin run")
    models = list(dict.fromkeys(c.model for c in cases))
    folds, held_out = [], []
    for model in models:
        training = [c for c in cases if c.model == model]
        fitted = fit(training)
        others = [c for c in cases if c.model != model]
        # How much the held-out error depends on which of the equally good pairs is taken.
        near = [statistics.median(abs(c.error(c.predict(k, m))) for c in others) for k, m in fitted["near"]]
        fitted["near"] = {"pairs": fitted["near"], "held_out_median_abs_error": [min(near), max(near)]}
        folds.append({"fitted_on": model, "predicts": sorted({c.model for c in others}), **fitted})
        held_out += prediction_rows(others, fitted["kappa"], fitted["mu"], model)
    stored_order = {(c.model, c.method): k for k, c in enumerate(cases)}
    held_out.sort(key=lambda r: stored_order[r["model"], r["method"]])
    every = fit(cases)
    spin_fit = fit(controls)
    for result in (every, spin_fit):
        result["near"] = {"pairs": result["near"]}
    document = {
        "schema": "fusionopt.validation.contention", "version": 1,
        "measured": {"run": "validation/hardware/run.py --backend nccl --emulate-network 100gb-ib --workers 8 "
                            f"--compute gemm --iterations {gemm['iterations']} --warmup {gemm['warmup']}",
                     "date": gemm["date"], "gpu": gemm["hardware"].get("gpu"), "versions": gemm["versions"],
                     "control": f"the same run with --compute spin ({spin['date'][:10]})"},
        "device": gemm["device"], "batch": gemm["batch"], "cost": gemm["cost"],
        "fit": {"loss": "mean |measured - predicted| / predicted over the fitted rows",
                "grid": {"kappa": KAPPAS.tolist(), "mu": MUS.tolist()}, "refined": "Nelder-Mead"},
        "plain": {"gemm_median_abs_relative_error": statistics.median(abs(r["plain_error"]) for r in held_out),
                  "spin_median_abs_relative_error": spin["summary"]["median_abs_relative_error"]},
        "folds": folds, "results": held_out, "summary": summarise(held_out),
        "all_rows": {**every, "note": "fitted on every row of the gemm run: in-sample, not an error"},
        "spin_control": {**spin_fit, "plain_mean_abs_error": mean_abs_error(controls, 1.0, 1.0),
                         "note": "fitted on the spin run, where compute does not compete for the SMs"},
    }
    measured = read_contention(calibration) if calibration is not None else None
    if measured is not None:
        rows = prediction_rows(cases, *measured, "calibration")
        document["calibrated"] = {"file": _shown(calibration), "kappa": measured[0], "mu": measured[1],
                                  "results": rows, "summary": summarise(rows)}
    document["checks"] = [{"file": name, **check_rows(check, every, folds, measured)} for name, check in checks]
    document["excess"] = [{"file": "validation/results/nccl-gpu-gemm.json", "models": excess(document["results"])}] + [
        {"file": c["file"], "models": excess(c["results"])} for c in document["checks"]]
    return document


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.2f}"


def _percent(fraction: float) -> str:
    return f"{100 * fraction:+.2f}%"


def _verdict(order: dict[str, Any]) -> str:
    return ("equal" if order["equal"] else f"agree beyond {100 * order['tie']:g}% ties" if order["agree_beyond_ties"]
            else "DIFFERENT")


def _pairs(pairs: list[list[float]]) -> str:
    kappas, mus = [p[0] for p in pairs], [p[1] for p in pairs]
    return (f"{len(pairs)} of {len(KAPPAS) * len(MUS)}: kappa {min(kappas):.2f} to {max(kappas):.2f}, "
            f"mu {min(mus):.2f} to {max(mus):.2f}")


def _disagreement(rows: list[dict[str, Any]], model: str, first: str, second: str) -> str:
    """A pair predicted in one order and measured in the other, with how far apart the
    measurements are and the spread of each one's timed steps."""
    a, b = (next(r for r in rows if r["model"] == model and r["method"] == m) for m in (first, second))
    gap = a["measured_time"] / b["measured_time"] - 1
    spread = "; ".join(f"{r['method']}'s steps {1e3 * min(r['iteration_times']):.2f} to "
                       f"{1e3 * max(r['iteration_times']):.2f} ms" for r in (a, b))
    return (f"  {first} predicted faster than {second} ({1e3 * a['predicted_time']:.2f} vs "
            f"{1e3 * b['predicted_time']:.2f} ms), measured {100 * gap:+.2f}% slower ({spread}).")


def markdown(document: dict[str, Any]) -> str:
    m, s = document["measured"], document["summary"]
    folds = document["folds"]
    lines = [
        "# Two-way contention against the GPU runs",
        "",
        f"Measured on one {m['gpu']} on {m['date'][:10]} by the stored GEMM run (`{m['run']}`; "
        f"`results/nccl-gpu-gemm.json`); {m['control']} is the control. Fitted and predicted here, on no GPU, "
        "by `validation/hardware/contention.py`: each plan rebuilt as the run built it (its prediction without "
        "contention equals the stored one), then predicted with compute slowed `kappa` times while a message "
        "is in flight and messages slowed `mu` times while the compute stream computes (MODEL.md section 6).",
        "",
        "Leave one model out: the factors are fitted on one model's five runs (least mean |error|) and predict "
        "the other model's; every error below is of a prediction whose factors never saw the run it is "
        "compared with.",
        "",
        *markdown_table(["fitted on", "kappa", "mu", "mean abs. error on its own runs", "predicts",
                         f"pairs as good (within {100 * NEAR:g} points)", "their held-out median abs. error"],
                        [[f["fitted_on"], f"{f['kappa']:.3f}", f"{f['mu']:.2f}", f"{100 * f['mean_abs_error']:.2f}%",
                          ", ".join(f["predicts"]), _pairs(f["near"]["pairs"]),
                          "{:.2f}% to {:.2f}%".format(*(100 * e for e in f["near"]["held_out_median_abs_error"]))]
                         for f in folds]),
        "",
        "Five runs of one model tell the two factors apart poorly: a message that ends before the next is "
        "ready delays the compute by (1 - 1/kappa) mu times its own time whatever each factor is, so many pairs "
        "fit about as well; the last two columns say which and what each predicts for the other model.",
        "",
        *markdown_table(["model", "method", "sync", "messages", "measured T (ms)", "predicted, no contention (ms)",
                         "error", "predicted, two-way (ms)", "error", "factors from"],
                        [[r["model"], r["method"], r["sync"], r["messages"], f"{1e3 * r['measured_time']:.2f}",
                          f"{1e3 * r['plain_predicted_time']:.2f}", f"{100 * r['plain_error']:+.2f}%",
                          f"{1e3 * r['predicted_time']:.2f}", f"{100 * r['relative_error']:+.2f}%", r["fitted_on"]]
                         for r in document["results"]]),
        "",
        f"Median |measured - predicted| / predicted: {100 * s['median_abs_relative_error']:.2f}% held out "
        f"(without contention {100 * document['plain']['gemm_median_abs_relative_error']:.2f}%); by method: "
        + ", ".join(f"{k} {100 * v:.2f}%" for k, v in s["median_abs_relative_error_by_method"].items()) + ".",
    ]
    for model, order in s["ranking"].items():
        lines.append(f"Ranking on {model}: predicted {' < '.join(order['predicted'])}; measured "
                     f"{' < '.join(order['measured'])}: {_verdict(order)}.")
        lines += [_disagreement(document["results"], model, a, b) for a, b in order["disagreements"]]
    target = s["target"]
    met = target["met_error"] and target["rankings_agree_beyond_ties"]
    lines += ["", f"Target (median |error| at most {100 * TARGET:g}% and the rankings agreeing): "
              + ("met." if met else "NOT met: " + "; ".join(
                  part for part, bad in (
                      (f"the median |error| is {100 * s['median_abs_relative_error']:.2f}%", not target["met_error"]),
                      ("the rankings disagree beyond 1% ties on "
                       + ", ".join(k for k, o in s["ranking"].items() if not o["agree_beyond_ties"]),
                       not target["rankings_agree_beyond_ties"])) if bad) + ".")]
    off = [r for r in document["results"] if abs(r["relative_error"]) > TARGET]
    if off:
        lines.append("Runs still off by more than " + f"{100 * TARGET:g}%: " + ", ".join(
            f"{r['model']} {r['method']} ({r['messages']} messages, {100 * r['relative_error']:+.2f}%)" for r in off)
            + ". A rate cannot express what the GEMMs add (section \"What the GEMMs add\" below: about the "
              "same excess for every barrier plan of a model, whatever its messages); the calibration's "
              "messages, one buffer each, are barely slowed by GEMMs.")
    every, spin = document["all_rows"], document["spin_control"]
    lines += ["", f"Fitted on all ten GEMM runs (in-sample, no error claimed): kappa {every['kappa']:.3f}, "
              f"mu {every['mu']:.2f}, mean |error| {100 * every['mean_abs_error']:.2f}%. Control, fitted on the spin "
              f"run (compute that leaves the SMs free): kappa {spin['kappa']:.3f}, mu {spin['mu']:.2f}, mean |error| "
              f"{100 * spin['mean_abs_error']:.2f}% against {100 * spin['plain_mean_abs_error']:.2f}% without "
              f"contention (median {100 * document['plain']['spin_median_abs_relative_error']:.2f}%)."]
    for c in document["checks"]:
        lines += ["", f"## A later GEMM run, predicted: `{c['file']}`", "",
                  f"`{c['file']}`: the same command run again on {c['date'][:10]} ({c['gpu']}), its profiles the "
                  f"zoo's {c['zoo_compute']} compute, so other compute times and time scales than the stored run's. "
                  "Nothing was fitted on it: its plans are predicted with the factors fitted above on the stored "
                  "run.", ""]
        header = ["model", "method", "measured T (ms)", "predicted, no contention (ms)", "error",
                  "predicted, factors of every stored row (ms)", "error", "predicted, factors of the other model (ms)",
                  "error"]
        other = {(r["model"], r["method"]): r for r in c["other_model"]["results"]}
        table = [[r["model"], r["method"], _ms(r["measured_time"]), _ms(r["plain_predicted_time"]),
                  _percent(r["plain_error"]), _ms(r["predicted_time"]), _percent(r["relative_error"]),
                  _ms(other[r["model"], r["method"]]["predicted_time"]),
                  _percent(other[r["model"], r["method"]]["relative_error"])] for r in c["results"]]
        lines += markdown_table(header, table)
        labelled = [("the factors of every stored row", c["summary"]),
                    ("the factors of the other model", c["other_model"]["summary"])]
        if "calibrated" in c:
            labelled.append(("the calibration's factors", c["calibrated"]["summary"]))
        for label, summary in labelled:
            lines += ["", f"With {label}: median |error| "
                      f"{100 * summary['median_abs_relative_error']:.2f}% (without contention "
                      f"{100 * c['plain_median_abs_relative_error']:.2f}%); rankings "
                      + ", ".join(f"{k} {_verdict(o)}" for k, o in summary["ranking"].items()) + "."]
    if "calibrated" in document:
        c = document["calibrated"]
        lines += ["", "## The calibration's factors", "",
                  f"`fusionopt calibrate --contention` on the GPU (`{c['file']}`: kappa {c['kappa']:.3f}, mu "
                  f"{c['mu']:.3f}), fitting nothing, predicts the stored GEMM run with median |error| "
                  f"{100 * c['summary']['median_abs_relative_error']:.2f}%; rankings "
                  + ", ".join(f"{k} {_verdict(o)}" for k, o in c["summary"]["ranking"].items()) + "."]
    lines += ["", "## What the GEMMs add", "",
              "Measured minus predicted without contention, over each model's barrier plans. A slowdown of "
              "the messages while compute runs (a rate, `mu`) adds in proportion to the message time that "
              "overlaps compute; a cost per packed tensor (every plan packs and unpacks each tensor once, each "
              "copy a kernel that may queue behind GEMMs for SMs) would add the same to every plan of a model. "
              "The calibration's messages are single buffers, packed from nothing. The host's queueing: its "
              "time to queue a step over the measured step (a run that records it): at 1 or more the step "
              "waited for the host's launches.", ""]
    lines += markdown_table(["run", "model", "barrier plans", "messages", "excess (ms)", "host's queueing / step"],
                            [[e["file"], m["model"], m["plans"], "{} to {}".format(*m["messages"]),
                              "{:.2f} to {:.2f}".format(*(1e3 * x for x in m["excess"])),
                              "-" if m.get("host_queue_share") is None
                              else "{:.2f} to {:.2f}".format(*m["host_queue_share"])]
                             for e in document["excess"] for m in e["models"]])
    return "\n".join(lines) + "\n"


def _shown(path: str) -> str:
    """A path as the result shows it: from the repository's root where it is inside it."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else resolved.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gemm", default=str(RESULTS / "nccl-gpu-gemm.json"), help="the GEMM run's result")
    parser.add_argument("--spin", default=str(RESULTS / "nccl-gpu-spin.json"), help="the spin run's result")
    parser.add_argument("--check", nargs="*", default=[str(c) for c in CHECKS if c.exists()], metavar="GEMM.json",
                        help="later GEMM runs to predict with the fitted factors, fitting nothing on them "
                             f"(default {', '.join(str(c.relative_to(ROOT)) for c in CHECKS)})")
    parser.add_argument("--calibration", default=str(CALIBRATION) if CALIBRATION.exists() else None,
                        metavar="CONTENTION.json",
                        help="also predict with these measured factors (fusionopt calibrate --contention; "
                             f"default {CALIBRATION.relative_to(ROOT)})")
    parser.add_argument("--output-dir", default=str(RESULTS))
    args = parser.parse_args(argv)
    changed = changed_options(parser, args, leave=("output_dir",))
    output = subset_location(args.output_dir, parser.get_default("output_dir"), changed, folder=True)
    gemm, spin = read_json_document(args.gemm), read_json_document(args.spin)
    for label, document, compute in (("--gemm", gemm, "gemm"), ("--spin", spin, "spin")):
        if document.get("schema") != "fusionopt.validation.hardware" or document.get("compute") != compute:
            parser.error(f"{label} {Path(getattr(args, label[2:])).name}: not a validation/hardware/run.py result "
                         f"with --compute {compute}")
    checks = []
    for path in args.check:
        check = read_json_document(path)
        if check.get("schema") != "fusionopt.validation.hardware" or check.get("compute") != "gemm":
            parser.error(f"--check {Path(path).name}: not a validation/hardware/run.py result with --compute gemm")
        checks.append((_shown(path), check))
    document = evaluate(gemm, spin, args.calibration, checks)
    write_result(output, "contention-gpu", document, markdown(document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
