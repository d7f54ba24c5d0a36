"""The zoo's calibrated compute against the measurements it stands for; no GPU needed.

* **Steps**: for every plain training step stored in ``fusionopt/zoo/measured/h100-steps.json``
  (one H100, fp32 and bf16), the zoo's one-worker step (``solve(Problem(zoo.profile(...,
  optimizer="sgd"), AlphaBeta(0, 0)), "wfbp").iteration_time``: forward, backward and the
  SGD update, as the plain step runs them) against
  the measured median, and the same with the rule refitted without that case (leave one
  out: how well it predicts a step it was not fitted to). The roofline estimate's step is
  shown beside them.
* **Profiles**: for each model profiled on the H100 at batch 32, the measured forward and
  backward (``fusionopt/zoo/measured/<model>-h100-b32.json``, taken with hooks, which add
  host time on small layers) against the zoo's at batch 32 and the roofline's backward.
* **Fit**: the rule's constants refitted from the stored data beside those the zoo uses.
* **Devices**: each published figure, the factor it gives and the zoo's resulting step.

Writes ``validation/results/zoo-compute.{json,md}``.

    python validation/zoo/run.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fusionopt.model import Problem  # noqa: E402

from fusionopt.solvers import solve  # noqa: E402

from fusionopt import zoo  # noqa: E402
from fusionopt.cost import AlphaBeta  # noqa: E402
from fusionopt.reporting import read_json_document, command_line, markdown_table, write_result  # noqa: E402
from fusionopt.zoo import calibrated, fitting, published  # noqa: E402

OUT = ROOT / "validation" / "results"
# The whole-step checks the GPU command ran on 2026-11-27, after the zoo's constants were fitted.
LATER = (OUT / "gpu-2026-11-27" / "run1" / "step-gpu.partial.json",
         OUT / "gpu-2026-11-27" / "run2" / "step-gpu.subset.partial.json",
         OUT / "gpu-2026-11-27" / "run3" / "step-gpu.partial.json",
         OUT / "gpu-2026-11-27" / "run3" / "rest" / "step-gpu.subset.partial.json")


def one_worker_step(profile: Any) -> float:
    """The profile's step on one worker (a free network), seconds."""
    return float(solve(Problem(profile, AlphaBeta(0.0, 0.0)), "wfbp").iteration_time)


def steps_table(cases: list[fitting.StepCase]) -> list[dict[str, Any]]:
    """One row per stored plain step: measured, zoo, leave-one-out and roofline steps."""
    fp32 = [c for c in cases if c.precision == "fp32"]
    rows = []
    for case in cases:
        profile = zoo.profile(case.model, device="h100", batch=case.batch, precision=case.precision,
                              optimizer="sgd")
        zoo_step = one_worker_step(profile)
        left = [c for c in cases if c is not case]
        held_out = None
        if case in fp32 and len(left) > 0:
            held_out = fitting.predicted_step(case, fitting.fit_h100(left))
        roofline = one_worker_step(zoo.profile(case.model, device="h100", batch=case.batch, compute="roofline"))
        rows.append({
            "model": case.model, "batch": case.batch, "precision": case.precision,
            "measured": case.step, "zoo": zoo_step, "error": zoo_step / case.step - 1.0,
            "left_out": held_out, "left_out_error": None if held_out is None else held_out / case.step - 1.0,
            "roofline": roofline, "layer_times": profile.metadata["layer_times"],
        })
    return rows


def later_steps_table(paths: list[Path]) -> list[dict[str, Any]]:
    """The plain steps of later whole-step checks (``validation/step/run.py`` result files),
    which no constant of the zoo was fitted on, against the zoo's one-worker step."""
    rows = []
    for path in paths:
        for case in read_json_document(path)["cases"]:
            if "measured" not in case:
                continue
            profile = zoo.profile(case["model"], device="h100", batch=case["batch"], precision=case["precision"],
                                  optimizer="sgd")
            measured, predicted = float(case["measured"]["median"]), one_worker_step(profile)
            rows.append({"model": case["model"], "batch": case["batch"], "precision": case["precision"],
                         "measured": measured, "zoo": predicted, "error": predicted / measured - 1.0,
                         "source": str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT)
                         else path.name})
    return rows


def profiles_table() -> list[dict[str, Any]]:
    """One row per model profiled at batch 32: measured F and B against the zoo's."""
    rows = []
    for model, hardware, batch in sorted(zoo.measured_profiles()):
        if hardware != calibrated.MEASURED_HARDWARE or batch != calibrated.MEASURED_BATCH:
            continue
        measured = zoo.measured_profile(model, hardware=hardware, batch=batch)
        ours = zoo.profile(model, device=hardware, batch=batch)
        roofline = zoo.profile(model, device=hardware, batch=batch, compute="roofline")
        rows.append({"model": model, "measured_F": measured.F, "measured_B": measured.B,
                     "zoo_F": ours.F, "zoo_B": ours.B, "roofline_B": roofline.B})
    return rows


def fit_table() -> list[dict[str, Any]]:
    """The constants in use beside those refitted from the stored data."""
    stored, refit = calibrated.H100, fitting.fit_h100()
    rows = [{"constant": "layer_cost c (s)", "zoo": stored.layer_cost, "refit": refit.layer_cost}]
    for key in ("conv", "memory", "linear"):
        unit = "elements/s" if key == "memory" else "FLOP/s"
        rows.append({"constant": f"floor rate {key} ({unit})", "zoo": stored.floor_rates[key],
                     "refit": refit.floor_rates[key]})
    rows.append({"constant": "update per tensor (s)", "zoo": stored.update_per_tensor,
                 "refit": refit.update_per_tensor})
    rows.append({"constant": "update bandwidth (B/s)", "zoo": stored.update_bandwidth,
                 "refit": refit.update_bandwidth})
    for family in sorted(stored.bf16_speedup):
        rows.append({"constant": f"bf16 speedup {family}", "zoo": stored.bf16_speedup[family],
                     "refit": refit.bf16_speedup.get(family)})
    return rows


def devices_table() -> list[dict[str, Any]]:
    """One row per published figure: its step, the H100 rule's step, the factor."""
    rows = []
    for (device, workload, precision), fig in sorted(published.FIGURES.items()):
        factor, _ = published.device_factor(device, fig.model, precision)
        rows.append({"device": device, "workload": workload, "precision": precision, "model": fig.model,
                     "batch": fig.batch, "throughput": fig.throughput, "published_step": fig.step,
                     "h100_fp32_step": fig.step / factor, "factor": factor, "derived": fig.derived,
                     "source": fig.source})
    return rows


def _ms(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds * 1e3:.1f}"


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value * 100:+.1f}%"


def markdown(document: dict[str, Any]) -> str:
    steps = document["steps"]
    worst = max(abs(r["error"]) for r in steps)
    fp32_loo = [abs(r["left_out_error"]) for r in steps if r["left_out_error"] is not None]
    lines = [
        "# The zoo's calibrated compute against measured steps",
        "",
        f"`{document['command']}`. Measured: one H100 80GB HBM3, torch 2.11.0+cu130, 2026-11-27 "
        "(`fusionopt/zoo/measured/`). Zoo: `zoo.profile(model, device='h100', batch, precision, optimizer='sgd')`, its "
        "one-worker step (`wfbp` on a free network: forward, backward, SGD update). Left out: the fp32 "
        "rule refitted without that case. Roofline: `compute='roofline'`.",
        "",
        f"Largest |error| of the zoo's step: {worst * 100:.1f}% over {len(steps)} steps; left out, fp32: "
        f"{max(fp32_loo) * 100:.1f}%. The three bf16 cases each fix their family's speedup, so their "
        "error is 0 but for the rounding of the stored speedups: they check nothing.",
        "",
    ]
    lines += markdown_table(
        ["model", "batch", "precision", "measured ms", "zoo ms", "error", "left out ms", "left-out error",
         "roofline ms", "layer times"],
        [[r["model"], r["batch"], r["precision"], _ms(r["measured"]), _ms(r["zoo"]), _pct(r["error"]),
          _ms(r["left_out"]), _pct(r["left_out_error"]), _ms(r["roofline"]), r["layer_times"]] for r in steps])
    later = document.get("later_steps") or []
    if later:
        errors = sorted(abs(r["error"]) for r in later)
        lines += ["", "## Held out: steps measured later", "",
                  "Plain steps measured after the fit by the GPU command's whole-step check (one H100 80GB HBM3, "
                  "2026-11-27; files below), with the zoo's constants as they are: nothing here was fitted on "
                  f"them. Largest |error| {100 * errors[-1]:.1f}%, median {100 * statistics.median(errors):.1f}%, "
                  f"{sum(e <= 0.15 for e in errors)} of {len(errors)} within 15%; fp32 largest "
                  f"{100 * max(abs(r['error']) for r in later if r['precision'] == 'fp32'):.1f}%, bf16 largest "
                  f"{100 * max(abs(r['error']) for r in later if r['precision'] == 'bf16'):.1f}%.", ""]
        lines += markdown_table(["model", "batch", "precision", "measured ms", "zoo ms", "error", "measured by"],
                                [[r["model"], r["batch"], r["precision"], _ms(r["measured"]), _ms(r["zoo"]),
                                  _pct(r["error"]), f"`{r['source']}`"] for r in later])
    lines += ["", "## Batch 32 profiles: measured with hooks against the zoo", "",
              "The measured times include the hooks' host time (small layers at batch 32); the zoo caps "
              "each layer at its work's time at its kind's floor rate.", ""]
    lines += markdown_table(
        ["model", "measured F ms", "zoo F ms", "measured B ms", "zoo B ms", "roofline B ms",
         "measured B / roofline B"],
        [[r["model"], _ms(r["measured_F"]), _ms(r["zoo_F"]), _ms(r["measured_B"]), _ms(r["zoo_B"]),
          _ms(r["roofline_B"]), f"{r['measured_B'] / r['roofline_B']:.1f}"] for r in document["profiles"]])
    lines += ["", "## The fit", ""]
    lines += markdown_table(["constant", "zoo", "refit from the stored data"],
                            [[r["constant"], f"{r['zoo']:.4g}", "" if r["refit"] is None else f"{r['refit']:.4g}"]
                             for r in document["fit"]])
    lines += ["", "## Other devices: published figures", ""]
    lines += markdown_table(
        ["device", "workload", "precision", "model", "batch", "samples/s", "published step ms",
         "H100 fp32 rule ms", "factor", "derived"],
        [[r["device"], r["workload"], r["precision"], r["model"], r["batch"], f"{r['throughput']:.1f}",
          _ms(r["published_step"]), _ms(r["h100_fp32_step"]), f"{r['factor']:.2f}", r["derived"] or "published"]
         for r in document["devices"]])
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(OUT), help="folder of the result (default validation/results)")
    parser.add_argument("--later", nargs="*", default=[str(p) for p in LATER if p.exists()], metavar="STEP.json",
                        help="whole-step results measured after the fit (default: those of the GPU command's "
                             "2026-11-27 runs)")
    args = parser.parse_args(argv)
    cases = fitting.load_steps()
    document = {
        "command": command_line("validation/zoo/run.py", sys.argv[1:] if argv is None else argv, args.out),
        "steps": steps_table(cases),
        "later_steps": later_steps_table([Path(p) for p in args.later]),
        "profiles": profiles_table(),
        "fit": fit_table(),
        "devices": devices_table(),
    }
    write_result(args.out, "zoo-compute", document, markdown(document))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
