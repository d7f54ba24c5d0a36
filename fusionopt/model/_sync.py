"""What follows the communication: the forward under each sync rule (MODEL.md section 4).

Written once, in the order of operations every simulator and fast path uses, so that they
all give the same floating-point ``T``:

* ``sync="layerwise"``: from the end of the backward ``B``, tensor ``i`` is updated once its
  own gradient is reduced (at ``C_i``) and the forward before it has run, then runs forward:
  ``phi_i = max(phi_(i-1) + f_(i-1), C_i) + u_i`` with ``phi_(-1) + f_(-1) = B``; the step ends
  at ``phi_(n-1) + f_(n-1) + W`` (under layerwise sync ``W`` is the host's share alone);
* ``sync="barrier"``: once every gradient is reduced and the backward has ended, the
  framework's post-backward work, the optimiser (its lump and per-tensor updates), then the
  forward back to back; the host's share after it.
"""

from __future__ import annotations

import numpy as np

from fusionopt.model._fifo import fifo_ends
from fusionopt.model._profile import Profile


def layerwise_forward(profile: Profile, reduced: np.ndarray, backward_end: float | None = None
                      ) -> tuple[np.ndarray, float]:
    """``(phi, T)``: each tensor's forward start and the step's end, seconds, under layerwise
    sync, given each tensor's reduction time ``reduced`` (seconds, forward order) and when the
    compute stream is free after the backward (default ``B``; later when packing runs on it).

    >>> p = Profile.from_arrays([8, 8], [1.0, 2.0], [3.0, 1.0], update=[0.5, 0.5])
    >>> phi, T = layerwise_forward(p, np.array([6.0, 4.5]))
    >>> phi.tolist(), T
    ([6.5, 8.0], 10.0)
    """
    # The compute stream as one FIFO queue: tensor i's update waits for C_i, its forward
    # for nothing more (available at -inf), each after the task before it.
    n = profile.n
    available = np.full(2 * n, -np.inf)
    available[0::2] = np.asarray(reduced, dtype=np.float64)
    durations = np.empty(2 * n)
    durations[0::2], durations[1::2] = profile.update, profile.forward
    clock = profile.B if backward_end is None else float(backward_end)
    ends = fifo_ends(available, durations, free_at=clock)
    return ends[0::2].copy(), float(ends[-1]) + profile.host_overhead


def barrier_forward(profile: Profile, channel_end: float) -> tuple[np.ndarray, float]:
    """``(phi, T)`` under barrier sync, given when the last message ends (seconds).

    >>> p = Profile.from_arrays([8, 8], [1.0, 2.0], [3.0, 1.0], update=[0.5, 0.5])
    >>> phi, T = barrier_forward(p, 6.0)
    >>> phi.tolist(), T
    ([7.0, 8.0], 10.0)
    """
    clock = max(profile.B, float(channel_end)) + profile.post_backward + profile.update_lump + profile.U
    phi = np.cumsum(np.concatenate(([clock], profile.forward[:-1])))
    return phi, float(phi[-1] + profile.forward[-1]) + profile.host_overhead
