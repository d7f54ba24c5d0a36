"""Small problems for the executor tests (MODEL.md section 5's worked example, shrunk)."""

from __future__ import annotations

from fusionopt.cost import AlphaBeta
from fusionopt.model import Chunk, Message, Plan, Problem, Profile

# The worked example's shape with kilobyte tensors: 4, 1 and 2 KiB, backward 3, 2, 1 ms.
SIZES = [4096, 1024, 2048]


def small_profile(sizes=SIZES, *, forward=1e-3, update=0.0) -> Profile:
    n = len(sizes)
    backward = [1e-3 * (n - i) for i in range(n)]
    return Profile.from_arrays(sizes, [forward] * n, backward, update=[update] * n)


def small_problem(sync: str = "barrier", **kwargs) -> Problem:
    return Problem(small_profile(**kwargs), AlphaBeta(alpha=1e-4, beta=1e-9), sync=sync)


def plan_of(*messages) -> Plan:
    """A plan from chunk triples, bypassing validation: ``plan_of([(0, 0, 8)], ...)``."""
    return Plan(tuple(Message(tuple(Chunk(*c) for c in m)) for m in messages))


def require_mpiexec() -> None:
    """Skip the test unless the mpi extra (mpi4py) and the mpiexec beside this interpreter are there."""
    import pytest

    pytest.importorskip("mpi4py", reason="the mpi extra (mpi4py, mpich) is not installed")
    from fusionopt.executor import mpiexec

    try:
        mpiexec()
    except ImportError as exc:
        pytest.skip(str(exc))


def spy_collectives(monkeypatch) -> list:
    """Every all-reduce, reduce-scatter and all-gather rank 0 posts on the local backend from
    now on, as ``(kind, dtype's bytes, bytes)``."""
    from fusionopt.executor import LocalGroup

    kind = type(LocalGroup(1).communicators()[0])
    record = []

    def spy(name):
        original = getattr(kind, name)

        def call(self, buffer, *args, **kwargs):
            if self.rank == 0:
                record.append((name, buffer.dtype.itemsize, int(buffer.nbytes)))
            return original(self, buffer, *args, **kwargs)
        monkeypatch.setattr(kind, name, call)

    for name in ("allreduce", "reduce_scatter", "all_gather"):
        spy(name)
    return record
