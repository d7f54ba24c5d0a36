"""The ``mpi`` backend: one process per rank, mpi4py over the MPI library of the ``mpi`` extra.

:func:`launch` starts ``mpiexec -n N python -m fusionopt.executor JOB.json`` with the
``mpiexec`` that sits beside the running interpreter (the ``mpich`` wheel installs it in the
environment's ``bin``), waits for it with a time limit and reads rank 0's result. Inside the
ranks, :class:`MPICommunicator` wraps ``COMM_WORLD``: ``Allreduce`` in place with ``SUM``
on unsigned integer buffers (``Reduce_scatter_block`` with ``SUM`` and ``Allgather`` for the
sharded patterns), ``Ibarrier`` polled against the timeout between steps.

MPI collectives cannot be cancelled: a collective that outlives the timeout is caught by
the plan runner's watchdog, the rank writes its error and calls ``MPI_Abort``, which ends
every rank; :func:`launch` then raises that error.

``mpiexec`` runs in a session of its own (so that a terminal's Ctrl-C reaches this process
alone, and it decides); whatever ends :func:`launch` early (a ``KeyboardInterrupt``, a
SIGTERM, the launch's time limit, any other exception) stops the whole job before it
propagates: ``mpiexec``'s process group, then any rank process still running the job.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from fusionopt.executor._communicator import Communicator, missing_extra, shard_words
from fusionopt.executor._errors import CollectiveTimeout, error_from_document
from fusionopt.model._io import read_json_document, write_json_atomic

# Environment variables by which MPI launchers tell a process its world size.
_WORLD_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS")


def import_mpi() -> Any:
    """``mpi4py.MPI``, or an ImportError naming the ``mpi`` extra."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise missing_extra("mpi", "mpi4py and an MPI library", exc) from None
    return MPI


def mpiexec() -> Path:
    """The ``mpiexec`` beside the running interpreter, or an ImportError naming the extra."""
    candidate = Path(sys.executable).parent / "mpiexec"
    if not candidate.exists():
        raise missing_extra("mpi", "mpiexec next to the Python interpreter "
                                   f"({candidate.name} not found in the interpreter's folder)")
    return candidate


def inside_mpi_world() -> bool:
    """True when this process was started by an MPI launcher with more than one rank."""
    for name in _WORLD_SIZE_VARIABLES:
        try:
            if int(os.environ.get(name, "1")) > 1:
                return True
        except ValueError:
            continue
    return False


class MPICommunicator(Communicator):
    """This process's rank of ``COMM_WORLD`` (or of ``comm``)."""

    name = "mpi"

    def __init__(self, comm: Any = None) -> None:
        self._MPI = import_mpi()
        self._comm = comm if comm is not None else self._MPI.COMM_WORLD
        self._channels: dict[int, MPICommunicator] = {0: self}

    def channel(self, index: int) -> "MPICommunicator":
        """A duplicate of the communicator (``Dup``, collective over the ranks) per channel."""
        if index not in self._channels:
            if self._MPI.Query_thread() < self._MPI.THREAD_MULTIPLE:
                raise ValueError("this MPI runs collectives from one thread at a time (no MPI_THREAD_MULTIPLE), "
                                 f"and the plan runs {index + 1} channels at once: use the local backend")
            self._channels[index] = MPICommunicator(self._comm.Dup())
        return self._channels[index]

    @property
    def rank(self) -> int:
        return self._comm.Get_rank()

    @property
    def size(self) -> int:
        return self._comm.Get_size()

    def allreduce(self, buffer: Any, *, timeout: float, tag: tuple[int, int] | None = None) -> None:
        if self.size > 1:
            self._comm.Allreduce(self._MPI.IN_PLACE, buffer, op=self._MPI.SUM)

    def reduce_scatter(self, send: Any, recv: Any, *, timeout: float, tag: tuple[int, int] | None = None) -> None:
        shard_words(send, recv, self.size, "reduce-scatter")
        if self.size > 1:
            self._comm.Reduce_scatter_block(send, recv, op=self._MPI.SUM)
        else:
            recv[:] = send

    def all_gather(self, send: Any, recv: Any, *, timeout: float, tag: tuple[int, int] | None = None) -> None:
        shard_words(recv, send, self.size, "all-gather")
        if self.size > 1:
            self._comm.Allgather(send, recv)
        else:
            recv[:] = send

    def _poll(self, request: Any, timeout: float, what: str) -> None:
        deadline = time.perf_counter() + timeout
        while not request.Test():
            if time.perf_counter() > deadline:
                raise CollectiveTimeout(f"{what} did not complete within {timeout:g} s on rank {self.rank}")
            time.sleep(1e-4)

    def barrier(self, *, timeout: float) -> None:
        self._poll(self._comm.Ibarrier(), timeout, "barrier")

    def allgather(self, value: Any, *, timeout: float) -> list[Any]:
        self.barrier(timeout=timeout)
        return self._comm.allgather(value)

    def abort(self, reason: str) -> None:
        self._comm.Abort(3)

    def describe(self) -> str:
        version = self._MPI.Get_library_version().splitlines()[0].strip()
        return f"mpi, {self.size} processes ({version})"


def launch(document: dict[str, Any], ranks: int, *, limit: float) -> dict[str, Any]:
    """Run a job document on ``ranks`` MPI processes; return rank 0's result document.

    ``limit`` bounds the whole launch in seconds (the job's own timeouts should fire first);
    past it the job is stopped and :class:`CollectiveTimeout` raised. A ``KeyboardInterrupt``
    or a SIGTERM (raised here as ``SystemExit(143)``) stops the job too, then propagates:
    no process of the job outlives the launch.
    """
    import_mpi()
    executable = mpiexec()
    with tempfile.TemporaryDirectory(prefix="fusionopt-mpi-") as folder:
        job_path, result_path = Path(folder, "job.json"), Path(folder, "result.json")
        write_json_atomic(job_path, document)
        command = [str(executable), "-n", str(ranks), sys.executable, "-m", "fusionopt.executor",
                   str(job_path), "--output", str(result_path)]
        with _sigterm_raises():
            process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       start_new_session=True)
            try:
                out, err = process.communicate(timeout=limit)
            except subprocess.TimeoutExpired:
                _stop_job(process, str(job_path))
                raise CollectiveTimeout(f"mpiexec with {ranks} ranks did not finish within {limit:g} s "
                                        "(killed)") from None
            except BaseException:
                _stop_job(process, str(job_path))
                raise
            _reap(str(job_path), grace=2.0)
        if result_path.exists():
            return read_json_document(result_path)
        errors = sorted(Path(folder).glob("error-rank*.json"))
        documents = [json.loads(p.read_text()) for p in errors]
        primary = [d for d in documents if not d.get("secondary")] or documents
        if primary:
            first = min(primary, key=lambda d: d.get("rank", 0))
            raise error_from_document(first)
        tail = " ".join((err or out or "").strip().splitlines()[-3:])
        raise RuntimeError(f"mpiexec with {ranks} ranks exited with status {process.returncode} "
                           f"and no result: {tail or 'no output'}")


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While the block runs, SIGTERM raises ``SystemExit(143)`` in the main thread.

    Python's default is to die at once, and the job, in a session of its own, would run on.
    A handler someone else installed is left in place (its exception stops the job as well).
    """
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _stop_job(process: subprocess.Popen, marker: str) -> None:
    """End ``mpiexec`` and every rank of its job: SIGTERM to its process group (``mpiexec``
    passes it to the ranks), SIGKILL after 2 s; then any process whose command line still
    names ``marker`` (the job file: the ranks, which MPICH starts in sessions of their own).
    A second Ctrl-C or SIGTERM while it waits skips to SIGKILL; the clean-up still ends."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=2.0)
            break
        except (subprocess.TimeoutExpired, KeyboardInterrupt, SystemExit):
            continue
    for pid in _processes_naming(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


def _reap(marker: str, *, grace: float) -> None:
    """After ``mpiexec`` has ended: wait up to ``grace`` seconds for the ranks still naming
    ``marker`` (MPICH starts them in sessions of their own, and an aborted job's ranks may
    still be writing their error files), then SIGKILL any left, so that none outlives the
    launch or writes into its folder while it is removed."""
    deadline = time.monotonic() + grace
    while _processes_naming(marker) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pid in _processes_naming(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _processes_naming(marker: str) -> list[int]:
    """Processes of this user whose command line holds ``marker`` (Linux ``/proc``; none elsewhere)."""
    found = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    wanted = marker.encode()
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if wanted in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found
