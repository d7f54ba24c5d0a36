"""The fit behind :data:`fusionopt.zoo.calibrated.H100`: the rule's constants from the H100's
plain training steps (``fusionopt/zoo/measured/h100-steps.json``).

Three fits, in this order, each on the stored cases:

1. the optimiser step, ``update_lump = u_tensor * tensors + 4 * parameters / u_bandwidth``:
   linear least squares on the update parts ``profile_model`` measured in the fp32 cases;
2. the fp32 rule: the three floor rates and ``c``, by least squares on ``log(predicted /
   measured)`` of the fp32 plain steps of the models measured at batch 32 (a model the H100
   did not profile, e.g. ``gpt2-medium``, is left out: its step checks the reference rule);
3. the bf16 speedup of each family, solved exactly from that family's bf16 plain step.

Examples
--------
>>> cases = load_steps()
>>> len(cases), sorted({case.precision for case in cases})
(14, ['bf16', 'fp32'])
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from fusionopt.zoo.calibrated import (
    BACKWARD_WORK,
    FAMILY,
    H100,
    MEASURED_BATCH,
    RATE_OF_KIND,
    Calibration,
    Architecture,
    architecture,
    capped_work,
    is_measured,
    layer_times,
    measured_layer_times,
    update_time,
    work_arrays,
)
from fusionopt.zoo._measured import MEASURED_DIR

__all__ = ["STEPS_FILE", "StepCase", "fit_h100", "fit_update", "load_steps", "predicted_step"]

STEPS_FILE = MEASURED_DIR / "h100-steps.json"


@dataclass(frozen=True)
class StepCase:
    """One measured plain step: ``model`` at ``batch`` samples in ``precision``; ``step``
    (the median) and ``update_lump`` in seconds."""

    model: str
    batch: int
    precision: str
    step: float
    update_lump: float


def load_steps(path: str | Path | None = None) -> list[StepCase]:
    """The plain steps stored in ``path`` (default :data:`STEPS_FILE`)."""
    doc = json.loads(Path(STEPS_FILE if path is None else path).read_text())
    return [StepCase(c["model"], int(c["batch"]), c["precision"], float(c["step_median"]), float(c["update_lump"]))
            for c in doc["cases"]]


def predicted_step(case: StepCase, calibration: Calibration) -> float:
    """The rule's one-worker step for ``case``, seconds."""
    arch = _architecture(case.model)
    forward, backward = layer_times(case.model, arch, case.batch, case.precision, calibration)
    return float(forward.sum() + backward.sum() + update_time(arch, calibration))


@lru_cache(maxsize=None)
def _architecture(model: str) -> Architecture:
    return architecture(model)


def _with(calibration: Calibration, **changes: object) -> Calibration:
    fields = {**calibration.__dict__, **changes}
    return Calibration(**fields)


def fit_update(cases: list[StepCase]) -> tuple[float, float]:
    """``(u_tensor, u_bandwidth)``: seconds per tensor and parameter bytes per second."""
    rows = [(len(_architecture(c.model).tensors), 4.0 * _architecture(c.model).parameters, c.update_lump)
            for c in cases if c.precision == "fp32"]
    matrix = np.array([[n, size] for n, size, _ in rows])
    target = np.array([u for _, _, u in rows])
    (per_tensor, per_byte), *_ = np.linalg.lstsq(matrix, target, rcond=None)
    return float(per_tensor), float(1.0 / per_byte)


def fit_h100(cases: list[StepCase] | None = None) -> Calibration:
    """The constants of :data:`~fusionopt.zoo.calibrated.H100`, unrounded, fitted to ``cases``
    (default: the stored steps)."""
    cases = load_steps() if cases is None else cases
    per_tensor, bandwidth = fit_update(cases)
    base = _with(H100, update_per_tensor=per_tensor, update_bandwidth=bandwidth, bf16_speedup={})
    fp32 = [c for c in cases if c.precision == "fp32" and is_measured(c.model, _architecture(c.model))]

    def unpack(x: np.ndarray) -> Calibration:
        rates = {"conv": math.exp(x[0]), "memory": math.exp(x[1]), "linear": math.exp(x[2])}
        return _with(base, floor_rates=rates, layer_cost=float(x[3]) * 1e-6)

    # What does not depend on the fitted constants, once per case.
    fixed = []
    for case in fp32:
        arch = _architecture(case.model)
        forward, backward = measured_layer_times(case.model, arch)
        works, _ = work_arrays(arch, base)
        classes = [RATE_OF_KIND[layer.kind] for layer in arch.layers]
        fixed.append((case, arch, forward, backward, works, classes, update_time(arch, base)))

    def residuals(x: np.ndarray) -> list[float]:
        calibration = unpack(x)
        c = calibration.layer_cost
        out = []
        for case, arch, forward, backward, works, classes, update in fixed:
            rates = np.array([calibration.floor_rates[k] if k else math.inf for k in classes])
            proportional = (capped_work(forward, works, rates, c, 1.0).sum()
                            + capped_work(backward, works, rates, c, BACKWARD_WORK).sum())
            step = 2 * len(arch.layers) * c + proportional * case.batch / MEASURED_BATCH + update
            out.append(math.log(step / case.step))
        return out

    start = np.array([math.log(3e12), math.log(1e11), math.log(3e13), 20.0])
    lower = np.array([math.log(1e11), math.log(1e9), math.log(1e12), 0.0])
    upper = np.array([math.log(1e15), math.log(1e13), math.log(1e14), 200.0])
    fitted = unpack(least_squares(residuals, start, bounds=(lower, upper), xtol=1e-12, ftol=1e-12).x)
    speedups: dict[str, float] = {}
    for case in cases:
        if case.precision != "bf16":
            continue
        arch = _architecture(case.model)
        forward, backward = layer_times(case.model, arch, MEASURED_BATCH, "fp32", fitted)
        c = fitted.layer_cost
        proportional = float((forward - c).sum() + (backward - c).sum()) * case.batch / MEASURED_BATCH
        fixed = 2 * len(arch.layers) * c + update_time(arch, fitted)
        speedups[FAMILY[case.model]] = proportional / (case.step - fixed)
    return _with(fitted, bf16_speedup=speedups)
