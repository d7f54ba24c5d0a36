"""Accelerator presets for roofline compute-time estimates (``compute="roofline"``).

The calibrated compute, :func:`fusionopt.zoo.profile`'s default, knows the same four names
but not these figures: it takes measured steps (:mod:`fusionopt.zoo.calibrated`) and
published throughput (:mod:`fusionopt.zoo.published`).

Peak figures are dense (no structured sparsity) FP16/BF16 tensor-core throughput from
the NVIDIA datasheets, in FLOP/s:

* K80 (one of the board's two GK210 GPUs, as frameworks see it): 4.37 TFLOP/s FP32 at
  boost clock (the datasheet's 8.73 TFLOP/s is the whole board); no tensor cores. Used to
  reproduce papers measured on K80 clusters.
* V100 SXM2: 125 TFLOP/s (FP16 tensor core).
* A100 SXM (40/80 GB): 312 TFLOP/s (FP16/BF16 tensor core, dense).
* H100 SXM5: 989 TFLOP/s (BF16 tensor core, dense; the datasheet's 1,979 is with sparsity).

ASSUMPTION: every preset uses an efficiency factor of 0.4, i.e. training is taken to
sustain 40% of the tensor-core peak. This is a round, plausible figure for mixed
precision CNN/transformer training, not a measurement; real efficiency varies by layer
(small layers and normalisation are far below it), by batch size and by framework.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_EFFICIENCY = 0.4


@dataclass(frozen=True)
class Device:
    """An accelerator for roofline estimates: peak throughput and sustained fraction of it.

    Parameters
    ----------
    name : str
        Short name, e.g. ``"h100"``.
    peak_flops : float
        Peak throughput in FLOP/s (dense FP16/BF16 tensor core for the presets).
    efficiency : float
        Assumed fraction of the peak sustained by training, in ``(0, 1]``.
    description : str
        One line naming the part and the source of the peak figure.

    Examples
    --------
    >>> d = Device("toy", peak_flops=1e12, efficiency=0.5, description="a toy device")
    >>> d.sustained_flops
    500000000000.0
    >>> Device("bad", peak_flops=1e12, efficiency=1.5, description="")
    Traceback (most recent call last):
    ...
    ValueError: device 'bad': efficiency must be in (0, 1], got 1.5
    """

    name: str
    peak_flops: float
    efficiency: float
    description: str

    def __post_init__(self) -> None:
        if isinstance(self.peak_flops, bool) or not (
            isinstance(self.peak_flops, (int, float)) and math.isfinite(self.peak_flops) and self.peak_flops > 0
        ):
            raise ValueError(f"device {self.name!r}: peak_flops must be a finite number > 0, got {self.peak_flops!r}")
        if isinstance(self.efficiency, bool) or not (isinstance(self.efficiency, (int, float)) and 0 < self.efficiency <= 1):
            raise ValueError(f"device {self.name!r}: efficiency must be in (0, 1], got {self.efficiency!r}")

    @property
    def sustained_flops(self) -> float:
        """``peak_flops * efficiency``: the assumed achieved throughput in FLOP/s.

        Examples
        --------
        >>> PRESETS["v100"].sustained_flops
        50000000000000.0
        """
        return float(self.peak_flops * self.efficiency)


PRESETS: dict[str, Device] = {
    "k80": Device("k80", 4.37e12, DEFAULT_EFFICIENCY,
                  "NVIDIA Tesla K80, one of its two GK210 GPUs: 4.37 TFLOP/s FP32 at boost (datasheet: 8.73 per board)"),
    "v100": Device("v100", 125e12, DEFAULT_EFFICIENCY,
                   "NVIDIA V100 SXM2, 125 TFLOP/s FP16 tensor core (datasheet)"),
    "a100": Device("a100", 312e12, DEFAULT_EFFICIENCY,
                   "NVIDIA A100 SXM, 312 TFLOP/s dense FP16/BF16 tensor core (datasheet)"),
    "h100": Device("h100", 989e12, DEFAULT_EFFICIENCY,
                   "NVIDIA H100 SXM, 989 TFLOP/s dense BF16 tensor core (datasheet)"),
}
