"""CUDA streams for the stream runner: emulated compute as spin kernels or as GEMMs.

:class:`CudaStreams` gives :mod:`fusionopt.executor._streams` a rank's two streams on its GPU:
a compute stream created here and the communication stream of its
:class:`~fusionopt.executor._nccl.NcclCommunicator`. Emulated compute runs in one of two
modes:

* ``"spin"``: a one-thread kernel that spins on the GPU's global nanosecond timer for the
  requested time. Durations are exact and do not compete with NCCL for the GPU's SMs, so
  the runner's measurement isolates scheduling and communication.
* ``"gemm"``: half-precision square matrix products on the compute stream, their number
  chosen from a calibration of one product's time on an idle GPU (the remainder of a
  duration shorter than one product is spun). They occupy the SMs as a real backward does,
  so NCCL's kernels and the products slow each other down: the measured ``T`` then shows
  the contention that the plain model leaves out, and the calibration is reported with the
  measurement. :mod:`fusionopt.executor._contention` measures that contention both ways on
  these streams (``fusionopt calibrate --contention``).

This module imports without CuPy; building :class:`CudaStreams` needs it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusionopt.executor._streams import Streams

# Side of the square fp16 matrices of the GEMM mode: large enough that one product keeps an
# H100-class GPU busy for tens of microseconds (above its launch cost), small enough that
# durations are resolved finely.
GEMM_SIDE = 2048
_CALIBRATION_PRODUCTS = 50


class CudaStreams(Streams):
    """The compute and communication streams of one :class:`NcclCommunicator` rank."""

    def __init__(self, comm: Any, mode: str = "spin") -> None:
        if mode not in ("spin", "gemm"):
            raise ValueError(f"unknown GPU compute mode {mode!r}: choose spin or gemm")
        self.comm, self.mode = comm, mode
        cupy = comm.group.cupy
        self.cupy = cupy
        with cupy.cuda.Device(comm.device_id):
            self.compute = cupy.cuda.Stream(non_blocking=True)
            self.communication = comm.stream
            self._spin = comm.group.hold_kernel(comm.device_id)
            self.gemm_seconds = float("nan")
            if mode == "gemm":
                side = GEMM_SIDE
                self._a = cupy.ones((side, side), dtype=cupy.float16)
                self._b = cupy.ones((side, side), dtype=cupy.float16)
                self._c = cupy.empty((side, side), dtype=cupy.float16)
                self.gemm_seconds = self._calibrate()

    def _product(self) -> None:
        self.cupy.matmul(self._a, self._b, out=self._c)

    def _calibrate(self) -> float:
        """Seconds of one product on an otherwise idle GPU (median of batches)."""
        cupy = self.cupy
        with self.compute:
            for _ in range(5):
                self._product()
            times = []
            for _ in range(5):
                start = self.compute.record()
                for _ in range(_CALIBRATION_PRODUCTS):
                    self._product()
                end = self.compute.record()
                end.synchronize()
                times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3 / _CALIBRATION_PRODUCTS)
        return float(np.median(times))

    def record(self, stream: Any) -> Any:
        return stream.record()

    def wait(self, stream: Any, event: Any) -> None:
        stream.wait_event(event)

    def work(self, stream: Any, seconds: float) -> None:
        if seconds <= 0:
            return
        with stream:
            if self.mode == "gemm":
                products = int(seconds // self.gemm_seconds)
                for _ in range(products):
                    self._product()
                seconds -= products * self.gemm_seconds
            if seconds > 0:
                self._spin((1,), (1,), (np.uint64(round(seconds * 1e9)),))

    def spin(self, stream: Any, seconds: float) -> None:
        """Hold ``stream`` for ``seconds`` with the one-thread spin kernel, whatever the mode:
        the device stays busy, its SMs nearly free, while the host queues what follows."""
        if seconds > 0:
            with stream:
                self._spin((1,), (1,), (np.uint64(round(seconds * 1e9)),))

    def elapsed(self, start: Any, end: Any) -> float:
        return self.cupy.cuda.get_elapsed_time(start, end) / 1e3

    def done(self, event: Any) -> bool:
        return bool(event.done)

    def on_communication(self) -> Any:
        return self.communication     # a CuPy stream is a context that makes it current

    def describe(self) -> str:
        if self.mode == "spin":
            return "compute spin: spin kernels of exact durations"
        return (f"compute gemm: fp16 GEMMs {GEMM_SIDE}x{GEMM_SIDE}, {1e6 * self.gemm_seconds:.1f} us each on an idle "
                "GPU (contention with NCCL included)")


__all__ = ["CudaStreams", "GEMM_SIDE"]
