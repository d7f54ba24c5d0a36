"""The roofline ESTIMATE of a layer's compute time (``compute="roofline"``).

Each layer's forward takes ``flops * batch / (peak_flops * efficiency)`` seconds of a
:class:`~fusionopt.zoo.Device`, its backward twice that. It is not a measurement:
on one H100 (fp32, batch 32) the ``h100`` preset's backward times are 3.7x (VGG-16) to 196x
(MobileNet-v2) shorter than measured, about 11x for the median model, since small and
memory-bound layers run far below any fixed fraction of the peak and layers without
parameters are not counted at all.

Examples
--------
>>> from fusionopt.zoo._devices import PRESETS
>>> from fusionopt.zoo import Architecture, linear
>>> arch = Architecture("tiny", (linear("fc", 1000, 1000),), "one linear layer", "a 1000-vector")
>>> forward, backward = roofline_layer_times(arch, PRESETS["v100"], batch=10)
>>> forward.tolist(), backward.tolist()   # 2e7 FLOPs at 125e12 * 0.4 FLOP/s
([4e-07], [8e-07])
"""

from __future__ import annotations

import numpy as np

from fusionopt.zoo._devices import Device
from fusionopt.zoo._layers import Architecture


def roofline_layer_times(arch: Architecture, device: Device, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """Forward and backward seconds of each layer of ``arch`` at ``batch`` samples."""
    throughput = device.peak_flops * device.efficiency  # FLOP/s
    forward = np.array([layer.flops * batch / throughput for layer in arch.layers])
    return forward, 2.0 * forward
