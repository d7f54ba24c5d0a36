"""Measured profiles shipped with the zoo: PyTorch timings of real training steps.

Each file in the ``measured/`` folder beside this module is a profile JSON written by
``validation/profiles/run.py`` (through :func:`fusionopt.integrations.profile_model`),
named ``<model>-<hardware>-b<batch>.json``; its ``metadata`` records the hardware, the
torch version, the batch, the number of steps and the date. Unlike :func:`fusionopt.zoo.profile`
(a roofline estimate), these are measurements, of one machine.

Examples
--------
>>> measured_profiles("a-folder-that-does-not-exist")
{}
>>> measured_profile("resnet50", hardware="tpu-v9", batch=32)
Traceback (most recent call last):
...
ValueError: no measured profile of 'resnet50' on 'tpu-v9' with batch 32; measured: ...
"""

from __future__ import annotations

import re
from pathlib import Path

from fusionopt.model._cost import check_count
from fusionopt.model._profile import Profile

MEASURED_DIR = Path(__file__).with_name("measured")
_NAME = re.compile(r"^(?P<model>.+)-(?P<hardware>[^-]+)-b(?P<batch>\d+)\.json$")


def measured_profiles(directory: str | Path | None = None) -> dict[tuple[str, str, int], Path]:
    """The measured profiles available: ``(model, hardware, batch) -> path``.

    ``directory`` defaults to the zoo's own ``measured/`` folder; files whose names do not
    follow ``<model>-<hardware>-b<batch>.json`` are ignored.
    """
    folder = MEASURED_DIR if directory is None else Path(directory)
    found: dict[tuple[str, str, int], Path] = {}
    if folder.is_dir():
        for path in sorted(folder.glob("*.json")):
            match = _NAME.match(path.name)
            if match:
                found[(match["model"], match["hardware"], int(match["batch"]))] = path
    return found


def measured_profile(model: str, *, hardware: str, batch: int, directory: str | Path | None = None) -> Profile:
    """The measured profile of ``model`` on ``hardware`` with ``batch`` samples per step.

    Raises
    ------
    ValueError
        When no such profile was measured; the message lists those that were.
    """
    found = measured_profiles(directory)
    for label, name in (("model", model), ("hardware", hardware)):
        if not isinstance(name, str):
            raise ValueError(f"{label} must be a name, got {name!r}")
    batch = check_count("batch", batch)
    key = (model.strip().lower(), hardware.strip().lower(), int(batch))
    if key not in found:
        listing = ", ".join(f"{m} on {h} (batch {b})" for m, h, b in found) or "none yet"
        raise ValueError(f"no measured profile of {model!r} on {hardware!r} with batch {batch}; measured: {listing}")
    return Profile.read(found[key])


__all__ = ["MEASURED_DIR", "measured_profile", "measured_profiles"]
