"""The simulator: the iteration time of a plan, every figure of MODEL.md section 4, and the compute stream."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fusionopt.model.plan import Plan
from fusionopt.model.problem import Problem
from fusionopt.model.ps import PSPlan


@dataclass(frozen=True, eq=False)
class Timeline:
    """The schedule of one training step under a plan. Times in seconds from the start of
    backward, sizes in bytes; per-message arrays follow channel order, per-tensor arrays
    forward order.

    Attributes
    ----------
    iteration_time : float
        ``T``, the steady-state period of a training step.
    exposed : float
        ``T - (B + F + U + W)``: communication not hidden behind compute.
    compute_time : float
        ``B + F + U + W``.
    message_ready, message_start, message_end : ndarray
        ``R_k``, ``start_k`` and ``end_k`` of each message.
    message_bytes : ndarray of int64
        ``S_k``.
    reduced : ndarray
        ``C_i``: when the last chunk of tensor ``i`` is reduced.
    forward_start : ndarray
        ``phi_i``: when the next step's forward of tensor ``i`` starts (after its update).
    busy : float
        Time the channel is busy, ``sum_k c(S_k)``.

    Parameter server (``problem.ps``, :func:`~fusionopt.model.ps_timing.simulate_ps`): the
    ``message_*`` arrays and ``busy`` describe the push channel, ``reduced`` holds when the
    last pull of each tensor ends, and these are set (``None`` and 0 otherwise):

    pull_ready, pull_start, pull_end : ndarray
        Gate, start and end of each pull message, pull channel order.
    pull_bytes : ndarray of int64
        Size of each pull message.
    server_updated : ndarray
        When the servers finish updating each push message's bytes.
    compute_overhead : float
        Seconds of partitioned-compute overhead (``delta`` per piece) on the compute
        stream; it counts in ``exposed``, since ``compute_time`` is the profile's ``B + F + U + W``.
    """

    sync: str
    iteration_time: float
    compute_time: float
    message_ready: np.ndarray
    message_start: np.ndarray
    message_end: np.ndarray
    message_bytes: np.ndarray
    reduced: np.ndarray
    forward_start: np.ndarray
    pull_ready: np.ndarray | None = None
    pull_start: np.ndarray | None = None
    pull_end: np.ndarray | None = None
    pull_bytes: np.ndarray | None = None
    server_updated: np.ndarray | None = None
    compute_overhead: float = 0.0

    @property
    def exposed(self) -> float:
        return self.iteration_time - self.compute_time

    @property
    def busy(self) -> float:
        return float(np.sum(self.message_end - self.message_start))

    @property
    def idle(self) -> float:
        """Time within ``[0, T]`` the channel is not busy."""
        return self.iteration_time - self.busy

    @property
    def pull_busy(self) -> float:
        """Time the pull channel is busy (0 without a parameter server)."""
        return 0.0 if self.pull_end is None else float(np.sum(self.pull_end - self.pull_start))

    @property
    def communication_end(self) -> float:
        """``E = max_i C_i``: the end of the last message (the last pull, on a parameter server)."""
        if self.pull_end is not None:
            return float(self.pull_end.max())
        return float(self.message_end.max())

    @property
    def num_messages(self) -> int:
        """Messages on the channel (pushes and pulls together, on a parameter server)."""
        pulls = 0 if self.pull_bytes is None else len(self.pull_bytes)
        return len(self.message_bytes) + pulls

    def scaling_efficiency(self) -> float:
        """``(B + F + U + W) / T`` (MODEL.md section 4)."""
        return self.compute_time / self.iteration_time

    def throughput(self, workers: int, batch: int) -> float:
        """Samples per second of ``workers`` replicas with per-worker ``batch``: ``P m / T``."""
        return workers * batch / self.iteration_time

    def __repr__(self) -> str:
        return (
            f"Timeline(T={self.iteration_time:.6g} s, exposed={self.exposed:.6g} s, "
            f"messages={self.num_messages}, sync={self.sync!r})"
        )


@dataclass(frozen=True)
class ComputePiece:
    """One task of the compute stream, as the general simulator ran it.

    Attributes
    ----------
    kind : str
        ``"backward"``, ``"pack"`` (packing a fused message on the compute stream),
        ``"update"`` (the optimiser step of a tensor), ``"forward"`` (the next step's), or a
        step part the profile has (``"post_backward"``, ``"update_lump"``,
        ``"host_overhead"``; MODEL.md section 4).
    tensor : int
        The tensor, forward index from 0. For ``"pack"``: the tensor whose backward made the
        message ready (its smallest forward index); for a step part: -1.
    start, end : float
        Seconds from the start of the backward: when the task begins computing (it is next
        on the stream and every message it waits for has ended) and when its work is done.
        With contention ``end - start`` exceeds the work by the slowed part.
    message : int or None
        ``"pack"``: the message packed (channel order). On a parameter server with
        partitioned compute, a backward piece's push message or a forward piece's pull
        message (its chunk's); ``None`` for a task of a whole tensor.
    """

    kind: str
    tensor: int
    start: float
    end: float
    message: int | None = None

    @property
    def duration(self) -> float:
        """``end - start`` in seconds."""
        return self.end - self.start


def compute_pieces(problem: Problem, plan: Plan | PSPlan, *, validate: bool = True) -> list[ComputePiece]:
    """The compute stream of ``plan`` on ``problem``, task by task, in stream order.

    The general simulators record the pieces as they run them: the event simulator
    (:func:`~fusionopt.model.events.simulate_events`, which covers the plain model and every
    all-reduce extension) for a :class:`~fusionopt.model.plan.Plan`, and
    :func:`~fusionopt.model.ps_timing.simulate_ps` for a parameter-server problem. The
    stream is the backward of tensors ``n-1 .. 0`` (on a parameter server with partitioned
    compute, one piece per push chunk), each followed by the packing of the fused messages
    it makes ready when packing runs on the compute stream, then the updates and forwards
    of the next step (MODEL.md sections 4 and 6), and the profile's step parts where they
    run. Every task is listed, zero-length ones included (a step part only when the profile
    has it); a gap between one piece's ``end`` and the next one's ``start`` is the stream
    waiting for communication. The last ``end`` is the iteration time ``T`` and each
    tensor's first forward piece starts at its ``forward_start``, as :func:`simulate` gives
    them (the plain model's recursion to rounding).

    Parameters
    ----------
    validate : bool
        Check first that the plan sends every byte exactly once.

    Returns
    -------
    list of ComputePiece
        Times in seconds from the start of the backward.

    Examples
    --------
    MODEL.md section 5, ``alpha = 3 ms``, groups ``{t3}, {t2, t1}``: the backward runs
    t3 0 -> 1, t2 1 -> 3, t1 3 -> 6 ms; the second message ends at 14 ms, so the updates
    (of zero seconds) and the forwards wait until then: forwards 14 -> 15 -> 16 -> 17 ms.

    >>> from fusionopt.model.cost import AlphaBeta
    >>> from fusionopt.model.profile import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(alpha=3e-3, beta=1e-9))
    >>> pieces = compute_pieces(problem, Plan.from_groups(profile, [[2], [1, 0]]))
    >>> for p in pieces:
    ...     print(p.kind, p.tensor, round(p.start * 1e3, 9), round(p.end * 1e3, 9))
    backward 2 0.0 1.0
    backward 1 1.0 3.0
    backward 0 3.0 6.0
    update 0 14.0 14.0
    update 1 14.0 14.0
    update 2 14.0 14.0
    forward 0 14.0 15.0
    forward 1 15.0 16.0
    forward 2 16.0 17.0
    """
    pieces: list[ComputePiece] = []
    if problem.ps is not None or not isinstance(plan, Plan):
        from fusionopt.model.ps_timing import simulate_ps

        simulate_ps(problem, plan, validate=validate, pieces=pieces)
        return pieces
    if validate:
        plan.validate(problem.profile)
    from fusionopt.model.events import simulate_events

    simulate_events(problem, plan, pieces=pieces)
    return pieces


def simulate(problem: Problem, plan: Plan | PSPlan, *, validate: bool = True) -> Timeline:
    """Simulate ``plan`` on ``problem`` (MODEL.md sections 3 and 4).

    Messages run one at a time in plan order: ``start_k = max(R_k, Q_k, end_{k-1})``,
    ``end_k = start_k + c(S_k)``, with ``Q_k`` the message's release time (0 unless the
    plan gives one). Tensor ``i`` is reduced at ``C_i = max end_k`` over the
    messages carrying it; the next forward then starts after a barrier on every ``C_i`` or
    tensor by tensor (``problem.sync``). A problem with extensions on (copy cost,
    contention, several channels) is simulated event by event instead
    (:mod:`fusionopt.model.events`); a parameter-server problem (``problem.ps``) takes a
    :class:`~fusionopt.model.ps.PSPlan` and is simulated by
    :func:`~fusionopt.model.ps_timing.simulate_ps`.

    Parameters
    ----------
    validate : bool
        Check first that the plan sends every byte exactly once (``Plan.validate``).

    Examples
    --------
    MODEL.md section 5, ``alpha = 3 ms``: the groups ``{t3}, {t2, t1}`` give 17 ms.

    >>> from fusionopt.model.cost import AlphaBeta
    >>> from fusionopt.model.profile import Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(alpha=3e-3, beta=1e-9))
    >>> t = simulate(problem, Plan.from_groups(profile, [[2], [1, 0]]))
    >>> round(t.iteration_time * 1e3, 9), round(t.exposed * 1e3, 9)
    (17.0, 8.0)
    >>> (t.message_end * 1e3).round(9).tolist()
    [6.0, 14.0]
    """
    if problem.ps is not None or not isinstance(plan, Plan):
        from fusionopt.model.ps_timing import simulate_ps

        return simulate_ps(problem, plan, validate=validate)
    profile = problem.profile
    if validate:
        plan.validate(profile)
    if problem.extensions:
        from fusionopt.model.events import simulate_events

        return simulate_events(problem, plan)
    ready_times = profile.ready_times
    n_messages = len(plan.messages)
    ready = np.empty(n_messages)
    for k, message in enumerate(plan.messages):
        ready[k] = max(ready_times[c.tensor] for c in message.chunks)
    durations = problem.cost(plan.message_bytes)
    release = plan.release

    start = np.empty(n_messages)
    end = np.empty(n_messages)
    channel_free = -np.inf
    for k in range(n_messages):
        start[k] = max(ready[k], release[k], channel_free)
        end[k] = channel_free = start[k] + durations[k]

    reduced = reduction_times(plan, end, profile.n)
    forward, update = profile.forward, profile.update
    B = profile.B
    phi = np.empty(profile.n)
    if problem.sync == "barrier":
        # Once every gradient is reduced: the framework's post-backward work, the optimiser
        # (its lump and per-tensor updates), then the forward.
        clock = max(B, float(end.max())) + profile.post_backward + profile.update_lump + profile.U
        for i in range(profile.n):
            phi[i] = clock
            clock += forward[i]
    else:
        # Each tensor is updated and run forward as soon as its own gradient is reduced.
        clock = B
        for i in range(profile.n):
            clock = max(clock, reduced[i]) + update[i]
            phi[i] = clock
            clock += forward[i]
    # The host's share of the step follows the forward (MODEL.md section 4).
    iteration_time = float(phi[-1] + forward[-1]) + profile.host_overhead
    return build_timeline(problem, plan, iteration_time, ready, start, end, reduced, phi)


def reduction_times(plan: Plan, end: np.ndarray, n: int) -> np.ndarray:
    """``C_i``: the end of the last message carrying a chunk of tensor ``i``, in seconds."""
    reduced = np.full(n, -np.inf)
    for k, message in enumerate(plan.messages):
        for c in message.chunks:
            if end[k] > reduced[c.tensor]:
                reduced[c.tensor] = end[k]
    return reduced


def build_timeline(problem: Problem, plan: Plan, iteration_time: float, ready: np.ndarray, start: np.ndarray,
                   end: np.ndarray, reduced: np.ndarray, forward_start: np.ndarray) -> Timeline:
    """A read-only :class:`Timeline` from a simulation's per-message and per-tensor times."""
    sizes = plan.message_bytes
    for array in (ready, start, end, sizes, reduced, forward_start):
        array.setflags(write=False)
    return Timeline(
        sync=problem.sync,
        iteration_time=iteration_time,
        compute_time=problem.profile.compute_time,
        message_ready=ready,
        message_start=start,
        message_end=end,
        message_bytes=sizes,
        reduced=reduced,
        forward_start=forward_start,
    )
