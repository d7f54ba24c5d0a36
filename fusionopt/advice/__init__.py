"""Settings for the frameworks a researcher trains with, judged by the schedule each framework
builds from them: DDP's and Horovod's (:func:`ddp_settings`, :func:`horovod_settings`), FSDP2's, DeepSpeed
ZeRO-3's and ZeRO-2's and Megatron-LM's (:func:`fsdp2_advice`, :func:`zero3_settings`,
:func:`zero2_settings`). Above the solvers:
the advice solves problems with them."""

from fusionopt.advice._allreduce import (
    MIN_GAIN, DDPSettings, HorovodSettings, ddp_settings, gains_enough, horovod_settings,
)
from fusionopt.advice._sharded import (
    FSDP2_MIN_BACKWARD_PREFETCH, FSDP2_MIN_FORWARD_PREFETCH, ZERO3_GRID, OverMemoryCap, fsdp2_advice, fsdp2_atoms,
    fsdp2_least_forward_prefetch, fsdp2_plan_of, fsdp2_settings, unit_modules, zero2_settings, zero3_settings,
)

__all__ = [
    "DDPSettings", "FSDP2_MIN_BACKWARD_PREFETCH", "FSDP2_MIN_FORWARD_PREFETCH", "HorovodSettings", "MIN_GAIN",
    "OverMemoryCap", "ZERO3_GRID", "ddp_settings", "fsdp2_advice", "fsdp2_atoms", "fsdp2_least_forward_prefetch",
    "fsdp2_plan_of", "fsdp2_settings",
    "gains_enough", "horovod_settings", "unit_modules", "zero2_settings", "zero3_settings",
]
