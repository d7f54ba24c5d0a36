"""A CUDA kernel that holds a stream for a number of nanoseconds, on the GPU's own clock.

One thread spins on the ``%globaltimer`` register (nanoseconds) until the time has passed:
the stream is busy for exactly that long while the GPU's SMs stay nearly free, and the host
does not wait. The executor's NCCL runner holds its messages and emulates its compute with
it (:mod:`fusionopt.executor._nccl`, :mod:`fusionopt.executor._cuda_streams`); the emulated
link of real ``torch.distributed`` jobs holds their collectives on a CUDA stream with it
(:mod:`fusionopt.integrations._emulated_link`). Compiled by CuPy (NVRTC) on first use per
device; this module imports without CuPy.
"""

from __future__ import annotations

from typing import Any

HOLD_SOURCE = r"""
extern "C" __global__ void fusionopt_hold(unsigned long long nanoseconds) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < nanoseconds);
}
"""
HOLD_NAME = "fusionopt_hold"


def hold_kernel(cupy: Any, device: int) -> Any:
    """The hold kernel compiled for ``device`` (a CuPy ``RawKernel``): launch it as
    ``kernel((1,), (1,), (numpy.uint64(nanoseconds),))`` on the current CuPy stream."""
    with cupy.cuda.Device(device):
        return cupy.RawKernel(HOLD_SOURCE, HOLD_NAME)


__all__ = ["HOLD_NAME", "HOLD_SOURCE", "hold_kernel"]
