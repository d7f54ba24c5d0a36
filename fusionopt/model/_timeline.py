"""The records a simulation builds: the :class:`Timeline` of a step (every figure of MODEL.md
section 4) and the :class:`ComputePiece` s of its compute stream, with the helpers the
engines share to build them. The simulator that fills them is :mod:`fusionopt.model._simulator`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from fusionopt.model._decoupled_plan import ALL_GATHER, KINDS, REDUCE_SCATTER
from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem


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

    Parameter server (:class:`~fusionopt.model.ParameterServer`, :func:`~fusionopt.model.simulate_ps`): the
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

    Decoupled all-reduce (:class:`~fusionopt.model.Decoupled`,
    :func:`~fusionopt.model.simulate_decoupled`): the ``message_*`` arrays
    hold both kinds in channel order, ``reduced`` is when each tensor's last reduce-scatter
    ends, and these are set:

    message_kind : ndarray of int8
        0 for a reduce-scatter message, 1 for an all-gather.
    updated : ndarray
        ``v_i``: when tensor ``i``'s sharded update ends.
    gathered : ndarray
        ``A_i``: when tensor ``i``'s last all-gather ends.

    Fully sharded (:class:`~fusionopt.model.FullySharded`,
    :func:`~fusionopt.model.simulate_sharded`): times from the start of the
    step's forward; ``message_*`` hold every collective in issue order with
    ``message_ready`` its issue time and ``message_kind`` as above, ``gathered`` the end of
    each tensor's forward all-gather, ``reduced`` of its reduce-scatter, and:

    message_unit : ndarray of int64
        The unit each collective carries.
    peak_memory : int
        ``M_peak``: the most bytes of unsharded parameters and gradients whole at once.
    memory_time, memory_bytes : ndarray
        The bytes whole from ``memory_time[k]`` until ``memory_time[k + 1]`` (seconds, bytes).
    memory_account : tuple or callable
        Where those three come from: ``(memory_time, memory_bytes, peak_memory)``, or a
        function of no argument that gives them, called when one of them is first read (a
        search that never asks for memory never pays for the account); None without one.
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
    message_kind: np.ndarray | None = None
    updated: np.ndarray | None = None
    gathered: np.ndarray | None = None
    message_unit: np.ndarray | None = None
    memory_account: tuple | Callable[[], tuple] | None = field(default=None, repr=False)

    def _memory(self) -> tuple | None:
        account = self.memory_account
        if callable(account):                            # computed once, when first asked
            account = account()
            object.__setattr__(self, "memory_account", account)
        return account

    @property
    def memory_time(self) -> np.ndarray | None:
        account = self._memory()
        return None if account is None else account[0]

    @property
    def memory_bytes(self) -> np.ndarray | None:
        account = self._memory()
        return None if account is None else account[1]

    @property
    def peak_memory(self) -> int | None:
        account = self._memory()
        return None if account is None else account[2]

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

    def message_collectives(self, reduce_with: str = "reduce_scatter") -> tuple[str, ...]:
        """The collective each message is, channel order: ``"reduce-scatter"`` or
        ``"all-gather"`` by ``message_kind`` (decoupled and fully sharded steps),
        ``"push"`` on a parameter server's push channel, else ``"all-reduce"``. A decoupled
        plan that reduces its gradients with all-reduces (``reduce_with="all_reduce"``, the
        plan's attribute) names those ``"all-reduce"``.

        >>> t = Timeline("barrier", 1.0, 1.0, *([np.zeros(3)] * 4), np.zeros(0), np.zeros(0),
        ...              message_kind=np.array([0, 1, 0]))
        >>> t.message_collectives(), t.message_collectives("all_reduce")[:2]
        (('reduce-scatter', 'all-gather', 'reduce-scatter'), ('all-reduce', 'all-gather'))
        """
        if self.message_kind is None:
            return ("push" if self.pull_bytes is not None else "all-reduce",) * len(self.message_bytes)
        gradient = "all-reduce" if reduce_with == "all_reduce" else KINDS[REDUCE_SCATTER]
        return tuple(gradient if kind == REDUCE_SCATTER else KINDS[ALL_GATHER] for kind in self.message_kind.tolist())

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


def read_only(values, dtype=np.float64) -> np.ndarray:
    """A new read-only array of ``values``: how a timeline holds what an engine computed."""
    array = np.array(values, dtype=dtype)
    array.setflags(write=False)
    return array


def reduction_times(plan: Plan, end: np.ndarray, n: int) -> np.ndarray:
    """``C_i``: the end of the last message carrying a chunk of tensor ``i``, in seconds."""
    reduced = np.full(n, -np.inf)
    np.maximum.at(reduced, plan.tensor, np.asarray(end, dtype=np.float64)[plan.chunk_message])
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
