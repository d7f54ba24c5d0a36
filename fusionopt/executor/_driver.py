"""``run(problem, plan, backend=...)``: run a plan with real collectives, measure, compare, check."""

from __future__ import annotations

from typing import Sequence

from fusionopt.executor._communicator import check_backend
from fusionopt.executor._errors import CorrectnessError
from fusionopt.executor._footprint import check_host_memory, size_words
from fusionopt.executor._job import Fault, Job
from fusionopt.executor._measurement import Measurement, assemble
from fusionopt.executor._mpi import inside_mpi_world
from fusionopt.executor._programs import build_program
from fusionopt.model._cost import check_flag
from fusionopt.model._encoding import wire_link
from fusionopt.model._decoupled_plan import DecoupledPlan
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._ps_plan import PSPlan
from fusionopt.model._sharded_plan import ShardedPlan
from fusionopt.model._simulator import simulate


def run(problem: Problem, plan: Plan | DecoupledPlan | ShardedPlan | PSPlan, backend: str = "local", *, ranks: int | None = None, iterations: int = 10,
        warmup: int = 2, time_scale: float = 1.0, timeout: float = 60.0, verify: bool = True,
        validate: bool = True, raise_on_error: bool = True, emulate_link: bool = False,
        compute: str = "host", fault: Fault | None = None) -> Measurement:
    """Run ``plan`` on ``problem`` through a communication backend and measure it.

    Every rank emulates the compute of ``problem.profile`` (scaled by ``time_scale``),
    sends the plan's messages in plan order on a communication thread (pack, all-reduce,
    unpack) and runs the next forward per ``problem.sync``; see :mod:`fusionopt.executor._runner`.
    After every step every byte of every tensor is checked against its exact sum.

    A decoupled problem (``Problem(profile, pattern=...)``, MODEL.md 8.1) runs a
    :class:`~fusionopt.model.DecoupledPlan`: reduce-scatters and all-gathers in the
    plan's channel order; a fully sharded one (``pattern=FullySharded(...)``, 8.2) a
    :class:`~fusionopt.model.ShardedPlan`: each unit's all-gathers and
    reduce-scatters at the model's issue points (:mod:`fusionopt.executor._runner`); a
    parameter server (``pattern=ParameterServer(...)``, section 6) a
    :class:`~fusionopt.model.PSPlan`: its pushes and its pulls on two channels at once,
    each pull after the servers' update of the pushes it reads, every rank a server of its
    shard (:mod:`fusionopt.executor._programs`; ``pull_*`` then hold the pulls).
    Each rank's reduce-scatter shards are checked against their exact sums and every
    gathered word against the shard it came from; ``message_*`` then follow the channel
    (both kinds, in the order of ``predicted.message_kind``) and ``collectives`` lists what ran.

    An all-reduce, fully sharded or decoupled problem whose cost has encodings (MODEL.md section 2.2:
    :class:`~fusionopt.cost.Encoded`, :class:`~fusionopt.cost.Cheapest`, ``exact_tensors``)
    sends each collective in the encoding the model prices it in, as narrowed words (half of
    each for fp16 and bf16; :mod:`fusionopt.executor._layout`): the bytes on the wire and the
    casts' passes are real, the rounding is not, and the check compares every kept bit.
    ``encodings`` of the measurement names each collective's. An all-reduce problem with a
    ``compressor`` (torch's PowerSGD hook, section 2.4) sends each message the model prices
    through it as the hook sends a bucket (:mod:`fusionopt.executor._powersgd`), named
    ``"powersgd"`` in ``encodings`` and ``collectives``.

    Parameters
    ----------
    problem : Problem
        Plain model (with exact tensors or torch's PowerSGD hook as a choice per message),
        decoupled, fully sharded or parameter server (no other extension). Its cost model
        gives the prediction.
    plan : Plan, DecoupledPlan, ShardedPlan or PSPlan
    backend : {"local", "mpi", "nccl"}
        ``local``: ranks are threads of this process (no dependencies). ``mpi``: one process
        per rank under the ``mpiexec`` beside this interpreter (extra ``mpi``); called inside
        an MPI job of several processes, it runs on that job's ranks instead. ``nccl``: one
        GPU per rank through CuPy (extra ``gpu``).
    ranks : int, optional
        Number of ranks; default 2 (1 with ``emulate_link``). Inside an MPI job of several
        processes the job's own ranks are used.
    iterations, warmup : int
        Timed steps, and untimed steps run first.
    time_scale : float
        Emulated compute runs ``time_scale`` times the profile's seconds (``0``: none).
    timeout : float
        Seconds a collective may take before the run fails naming the message.
    verify : bool
        Check every byte after every step (default on).
    validate : bool
        Check the plan with :meth:`Plan.validate` first (off only to show that the data
        check catches a plan that misses or repeats bytes).
    raise_on_error : bool
        Raise :class:`CorrectnessError` when the check fails (default); otherwise return the
        measurement with ``correct`` false.
    emulate_link : bool
        ``nccl`` on one GPU: hold the stream for ``c(S)`` per message (labelled emulated); an
        encoded message for its link's time of the bytes it sends, its casts run for real.
    compute : {"host", "spin", "gemm"}
        ``host`` (default): compute emulated by host sleeps (:mod:`fusionopt.executor._runner`).
        ``nccl`` only: the whole step queued on a compute and a communication stream
        (:mod:`fusionopt.executor._streams`), compute as spin kernels of exact durations
        (``spin``) or as GEMMs that compete with NCCL for the GPU (``gemm``).
    fault : Fault, optional
        Break one rank on purpose (tests of the checks).

    Returns
    -------
    Measurement
        Per-step measured ``T``, per-message start and end, the prediction of
        :func:`~fusionopt.model.simulate` and the verdict.

    Raises
    ------
    ValueError
        The plan does not fit the problem, or (fully sharded, with a ``memory_cap``) its peak
        of unsharded bytes is over the cap: the simulator calls it infeasible, so it is not run.
        Or the backend cannot run the plan's channels at once (``nccl`` runs one).
    MemoryError
        The ranks on this host (``local``, or ``mpi`` launched here) would need more memory
        than is available (checked before anything is allocated; the message gives both).
    ImportError
        The backend's extra is not installed (the message names it).
    PlanMismatchError
        Ranks hold different plans or settings (checked before the first step).
    CollectiveTimeout
        A message's all-reduce took longer than ``timeout`` (the message is named).
    CorrectnessError
        A byte differed from its exact sum (tensor and byte range named).

    Examples
    --------
    MODEL.md section 5 with ``alpha = 3 ms``, on two thread ranks, compute 10x faster. The
    prediction: t3 is ready at 0.1 ms and its 2 MB message runs to 5.1 ms, the 5 MB message of
    t2 and t1 from 5.1 to 13.1 ms, then the 0.3 ms forward. (The threads' real all-reduce is
    far faster than this cost model says, so the measured time is well below.)

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Plan, Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(alpha=3e-3, beta=1e-9))
    >>> m = run(problem, Plan.from_groups(profile, [[2], [1, 0]]), ranks=2, iterations=2,
    ...         warmup=1, time_scale=0.1)
    >>> m.correct, m.iteration_times.shape, round(m.predicted_time * 1e3, 6)
    (True, (2,), 13.4)
    """
    backend = check_backend(backend)
    if not isinstance(problem, Problem):
        raise ValueError(f"problem must be a Problem, got {type(problem).__name__}")
    validate, raise_on_error = check_flag("validate", validate), check_flag("raise_on_error", raise_on_error)
    emulate_link = check_flag("emulate_link", emulate_link)
    if not isinstance(plan, problem.pattern.plan_type):
        raise ValueError(f"plan must be a {problem.pattern.plan_type.__name__} for {problem.pattern.article()} "
                         f"{problem.pattern.words} problem, got {type(plan).__name__}")
    if fault is not None and not isinstance(fault, Fault):
        raise ValueError(f"fault must be a Fault or None, got {fault!r}")
    if validate:
        plan.validate(problem.profile)
    if emulate_link and backend != "nccl":
        raise ValueError(f"emulate_link applies to the nccl backend only, not {backend!r}")
    if ranks is None:
        ranks = 1 if emulate_link else 2
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks must be an integer >= 1, got {ranks!r}")
    job = Job(problem, plan, iterations=iterations, warmup=warmup, time_scale=time_scale, timeout=timeout,
              verify=verify, fault=fault, emulate_link=emulate_link, backend=backend, compute=compute)
    if fault is not None and fault.rank >= ranks and backend != "mpi":
        raise ValueError(f"fault on rank {fault.rank}, but the run has {ranks} ranks")
    _check_memory_cap(problem, plan)
    if backend == "nccl" and build_program(job.scaled_problem(), plan).channels > 1:
        raise ValueError(f"the nccl backend runs one channel per rank, and {problem.pattern.article()} "
                         f"{problem.pattern.words} plan runs two at once: use the local or mpi backend")
    if backend != "nccl":                   # the nccl backend's buffers are on its GPUs
        check_host_memory(job, 1 if backend == "mpi" and inside_mpi_world() else ranks)
    if backend == "local":
        measurement = run_local([job] * ranks)
    elif backend == "mpi":
        measurement = _run_mpi(job, ranks)
    else:
        measurement = _run_nccl(job, ranks)
    if raise_on_error and not measurement.correct:
        more = f" (and {len(measurement.errors) - 1} more)" if len(measurement.errors) > 1 else ""
        raise CorrectnessError(f"reduced gradients are wrong: {measurement.errors[0]}{more}", measurement)
    return measurement


def _check_memory_cap(problem: Problem, plan: Plan | DecoupledPlan | ShardedPlan) -> None:
    """A fully sharded plan over the problem's memory cap is refused, as the simulator judges it."""
    cap = problem.pattern.memory_cap
    if cap is None:
        return
    peak = simulate(problem, plan, validate=False).peak_memory
    if peak > cap:
        raise ValueError(f"the plan's peak of {size_words(peak)} ({peak} B) of unsharded parameters and gradients "
                         f"is over the memory cap of {size_words(cap)} ({cap:.0f} B): the simulator calls it "
                         "infeasible; leave the cap out to run it anyway")


def run_local(jobs: Sequence[Job]) -> Measurement:
    """Run ``jobs[r]`` on thread rank ``r`` of a local group (normally the same job)."""
    from fusionopt.executor._local import LocalGroup, run_threads
    from fusionopt.executor._ranks import run_rank
    from fusionopt.executor._runner import fast_thread_switching

    group = LocalGroup(len(jobs))
    comms = group.communicators()
    with fast_thread_switching():
        records = run_threads([lambda c=c, j=j: run_rank(c, j) for c, j in zip(comms, jobs)], group)
    return assemble(jobs[0], records, backend="local", description=comms[0].describe())


def _launch_limit(job: Job) -> float:
    """A backstop for a whole MPI launch: the collectives' own timeouts should fire first."""
    predicted = job.scaled_problem()
    step = simulate(predicted, job.plan, validate=False).iteration_time
    return 60.0 + 2 * job.timeout + 10.0 * job.steps * step


def _run_mpi(job: Job, ranks: int) -> Measurement:
    from fusionopt.executor._mpi import MPICommunicator, inside_mpi_world, launch

    if inside_mpi_world():
        from fusionopt.executor._ranks import run_rank

        comm = MPICommunicator()
        record = run_rank(comm, job)
        records = comm.allgather(record, timeout=job.timeout)
        return assemble(job, records, backend="mpi", description=comm.describe())
    result = launch(job.to_dict(), ranks, limit=_launch_limit(job))
    return assemble(job, result["records"], backend="mpi", description=result["description"])


def _run_nccl(job: Job, ranks: int) -> Measurement:
    from fusionopt.executor._local import run_threads
    from fusionopt.executor._nccl import NcclGroup
    from fusionopt.executor._ranks import run_rank
    from fusionopt.executor._runner import fast_thread_switching

    if not job.emulate_link:
        group = NcclGroup(ranks)
    else:
        # A message's wire bytes are held for the link's time; its encoding's casts run for real.
        group = NcclGroup(ranks, link_costs={name: wire_link(cost)
                                             for name, cost in job.problem.pattern.collectives.items()})
    comms = group.communicators()
    description = comms[0].describe()
    try:
        if job.compute == "host":
            with fast_thread_switching():
                records = run_threads([lambda c=c: run_rank(c, job) for c in comms], group.host)
        else:
            from fusionopt.executor._cuda_streams import CudaStreams
            from fusionopt.executor._streams import run_stream_rank

            def rank(comm):
                comm.bind_thread()
                streams = CudaStreams(comm, job.compute)
                return run_stream_rank(comm, streams, job), streams.describe()

            results = run_threads([lambda c=c: rank(c) for c in comms], group.host)
            records = [record for record, _ in results]
            description = f"{description}; {results[0][1]}"
    finally:
        group.close()
    return assemble(job, records, backend="nccl", description=description, emulated=job.emulate_link)


__all__ = ["run", "run_local"]
