"""The nccl backend: imports cleanly without CuPy, names the gpu extra, runs where a GPU is."""

from __future__ import annotations

import importlib
import sys

import pytest
from types import SimpleNamespace

from executor_helpers import small_problem
from fusionopt.executor import run
from fusionopt.model import Plan


def test_the_module_imports_without_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    import fusionopt.executor._nccl as nccl

    importlib.reload(nccl)
    assert nccl.NcclCommunicator.word_sizes == (8, 4, 1)     # NCCL has no 16-bit integers


def test_selecting_nccl_without_cupy_names_the_gpu_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    problem = small_problem()
    with pytest.raises(ImportError, match=r"the nccl backend needs CuPy with NCCL .*pip install 'fusionopt\[gpu\]'"):
        run(problem, Plan.per_tensor(problem.profile), "nccl", ranks=1, emulate_link=True)


def _one_gpu():
    cupy = pytest.importorskip("cupy", reason="the gpu extra (CuPy) is not installed")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - no driver, no device
        pytest.skip(f"no usable GPU: {exc}")
    if count < 1:
        pytest.skip("no GPU")
    return count


def test_emulated_link_on_one_gpu_is_correct_and_labelled():
    _one_gpu()
    problem = small_problem()
    plan = Plan.from_groups(problem.profile, [[2], [1, 0]])
    m = run(problem, plan, "nccl", ranks=1, emulate_link=True, iterations=3, warmup=1, time_scale=1.0)
    assert m.correct and m.emulated and "EMULATED" in m.description
    # Each message holds the stream for at least c(S).
    durations = m.message_end - m.message_start
    assert (durations >= problem.cost(plan.message_bytes) * 0.999).all()


@pytest.mark.parametrize("compute", ["spin", "gemm"])
@pytest.mark.parametrize("sync", ["barrier", "layerwise"])
def test_queued_steps_on_one_gpu_are_correct(compute, sync):
    _one_gpu()
    problem = small_problem(sync)
    plan = Plan.from_groups(problem.profile, [[2], [1, 0]])
    m = run(problem, plan, "nccl", ranks=1, emulate_link=True, compute=compute, iterations=3, warmup=1)
    assert m.correct and m.emulated and compute in m.description
    durations = m.message_end - m.message_start
    assert (durations >= problem.cost(plan.message_bytes) * 0.999).all()
    # The forward waits for the reductions: phi_i >= C_i of every tensor, in every step.
    assert (m.forward_start >= m.reduced - 1e-6).all()


def test_real_nccl_on_two_gpus():
    if _one_gpu() < 2:
        pytest.skip("needs two GPUs")
    problem = small_problem(sync="layerwise")
    m = run(problem, Plan.per_tensor(problem.profile), "nccl", ranks=2, iterations=2, warmup=1)
    assert m.correct and not m.emulated


# ---------------------------------------------------------------------- without a GPU
@pytest.mark.parametrize("mode, words", [("spin", "spin kernels"), ("gemm", "fp16 GEMMs 2048x2048, 12.5 us")])
def test_the_description_names_the_compute_mode(mode, words):
    # A measurement's description starts with the mode the user chose (the GPU tests look for it).
    from fusionopt.executor import CudaStreams

    streams = SimpleNamespace(mode=mode, gemm_seconds=12.5e-6)
    assert CudaStreams.describe(streams).startswith(f"compute {mode}: {words}")


def test_device_compute_needs_the_nccl_backend():
    problem = small_problem()
    plan = Plan.per_tensor(problem.profile)
    with pytest.raises(ValueError, match=r"compute='spin' queues device work: it needs the nccl backend, not 'local'"):
        run(problem, plan, "local", compute="spin")
    with pytest.raises(ValueError, match=r"unknown compute mode 'cuda': choose one of host, spin, gemm"):
        run(problem, plan, "local", compute="cuda")


def test_cuda_streams_import_without_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    import fusionopt.executor._cuda_streams as cuda_streams

    importlib.reload(cuda_streams)
    with pytest.raises(ValueError, match="unknown GPU compute mode 'host': choose spin or gemm"):
        cuda_streams.CudaStreams(None, "host")


def fake_cupy():
    """A stand-in for CuPy built on numpy: streams finish at once, events read the host clock,
    the hold kernel sleeps on the host, a one-rank NCCL all-reduce leaves the buffer as it is.
    It checks the backend's control flow and calls, not CUDA."""
    import time
    import types

    import numpy as np

    class Array(np.ndarray):
        @property
        def data(self):
            return types.SimpleNamespace(ptr=self.__array_interface__["data"][0])

    class Device:
        def __init__(self, index=0):
            self.index = index

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def use(self):
            return None

    class Stream:
        def __init__(self, non_blocking=False):
            self.ptr, self.done = 0, True

        def use(self):
            return self

    class Event:
        def record(self, stream=None):
            self.time = time.perf_counter()

        def synchronize(self):
            return None

    class Communicator:
        calls = []

        @staticmethod
        def initAll(devices):
            return [Communicator() for _ in devices]

        def allReduce(self, send, recv, count, datatype, op, stream):
            Communicator.calls.append((count, datatype, op))

        def destroy(self):
            return None

        def abort(self):
            return None

    def hold(source, name):
        def launch(grid, block, args):
            time.sleep(int(args[0]) / 1e9)
        return launch

    cupy = types.ModuleType("cupy")
    cuda = types.ModuleType("cupy.cuda")
    nccl = types.ModuleType("cupy.cuda.nccl")
    cupy.cuda = cuda
    cuda.nccl = nccl
    cupy.empty = lambda n, dtype: np.empty(n, dtype=dtype).view(Array)
    for name in ("arange", "multiply", "array_equal", "argmax", "argmin"):
        setattr(cupy, name, getattr(np, name))
    cupy.RawKernel = hold
    cuda.Device, cuda.Stream, cuda.Event = Device, Stream, Event
    cuda.get_elapsed_time = lambda start, end: (end.time - start.time) * 1e3
    cuda.runtime = types.SimpleNamespace(getDeviceCount=lambda: 1,
                                         getDeviceProperties=lambda i: {"name": b"Fake GPU"})
    nccl.available = True
    nccl.NCCL_SUM, nccl.NCCL_UINT8, nccl.NCCL_UINT32, nccl.NCCL_UINT64 = 0, 1, 3, 5
    nccl.NcclCommunicator = Communicator
    nccl.get_version = lambda: 22005
    return cupy, cuda, nccl


def test_emulated_link_control_flow_on_a_fake_cupy(monkeypatch):
    cupy, cuda, nccl = fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", nccl)
    problem = small_problem()
    plan = Plan.from_groups(problem.profile, [[2], [1, 0]])
    m = run(problem, plan, "nccl", emulate_link=True, iterations=2, warmup=1, time_scale=0.0)
    assert m.correct and m.emulated and m.backend == "nccl" and m.ranks == 1
    assert m.description == "nccl, 1 GPU(s) (Fake GPU, NCCL 22005), EMULATED link (one GPU holds its stream for c(S))"
    durations = m.message_end - m.message_start
    assert (durations >= problem.cost(plan.message_bytes)).all()
    # Two messages per step, three steps, summed as 64-bit unsigned integers.
    assert nccl.NcclCommunicator.calls == [(256, 5, 0), (640, 5, 0)] * 3
    with pytest.raises(RuntimeError, match="the nccl backend needs 2 GPU"):
        run(problem, plan, "nccl", ranks=2)
    with pytest.raises(ValueError, match="an emulated link runs on one GPU: ranks must be 1, got 2"):
        run(problem, plan, "nccl", ranks=2, emulate_link=True)


def test_a_message_through_the_powersgd_hook_on_one_gpu():
    # Two linear layers in one message through the hook at rank 2: its three all-reduces
    # (384, 768 and 1536 B) each hold the stream for their c(S), so the message lasts at least
    # c(U) + c(P) + c(Q) = 3 x 10 us + 2688 B x 1 us; the products run on the GPU in the
    # integers modulo 2**32, checked element for element.
    _one_gpu()
    from fusionopt.cost import AlphaBeta, PowerSGD
    from fusionopt.model import Problem, Profile

    profile = Profile.from_arrays([64 * 128 * 4, 64 * 4, 32 * 64 * 4, 32 * 4], [1e-4] * 4, [1e-4] * 4,
                                  ["w1", "b1", "w2", "b2"], shapes=[(64, 128), (64,), (32, 64), (32,)])
    problem = Problem(profile, AlphaBeta(1e-5, 1e-6), compressor=PowerSGD(rank=2))
    plan = Plan.from_groups(profile, [[3, 2, 1, 0]])
    m = run(problem, plan, "nccl", ranks=1, emulate_link=True, iterations=2, warmup=1, time_scale=0.0)
    assert m.correct and m.encodings == ("powersgd",) and m.collectives == (("powersgd", 2688, 2688),)
    assert ((m.message_end - m.message_start) >= (3e-5 + 2688e-6) * 0.999).all()
