"""Independent checks of the simulator.

:func:`schedule_graph` builds a training step under a plan as a networkx DAG (one node per
backward, message, update and forward, weighted by its duration); its longest path is the
iteration time, computed by graph search instead of :func:`fusionopt.model.simulate`'s
recursion. The property tests compare the two on random problems and plans.
:func:`ps_schedule_graph` does the same for a parameter-server problem and its
:class:`~fusionopt.model.PSPlan`.
"""

from __future__ import annotations

import networkx as nx

from fusionopt.model._plan import Plan
from fusionopt.model._problem import Problem
from fusionopt.model._ps_plan import PSPlan

__all__ = ["longest_path_time", "ps_schedule_graph", "schedule_graph"]


def schedule_graph(problem: Problem, plan: Plan | PSPlan) -> nx.DiGraph:
    """The precedence graph of one step: edge ``u -> v`` weighs the duration of ``u``.

    A parameter-server problem gets :func:`ps_schedule_graph`.

    Nodes: ``("start",)``, ``("backward", i)``, ``("message", k)``, ``("step",)`` (barrier
    sync), ``("update", i)``, ``("forward", i)``, ``("host",)`` and ``("end",)``; durations
    in seconds.

    - backward runs ``n-1 .. 0`` in a chain from the start;
    - message ``k`` follows message ``k - 1`` and the backward of every tensor it carries;
    - ``barrier``: the step's post-backward work and update lump (``("step",)``) follow the
      backward and every message, the updates (a chain) follow it, and the forward chain
      follows the updates;
    - ``layerwise``: update ``i`` follows forward ``i - 1`` (the backward for ``i = 0``)
      and every message carrying tensor ``i``; forward ``i`` follows update ``i``;
    - the host's share (``("host",)``) follows the last forward and ends the step.
    """
    if problem.pattern.is_a("ps"):
        return ps_schedule_graph(problem, plan)
    problem.require_plain("the schedule DAG")
    plan.validate(problem.profile)
    profile = problem.profile
    n = profile.n
    message_costs = problem.cost(plan.message_bytes)
    graph = nx.DiGraph()

    def link(u: tuple, v: tuple, duration: float) -> None:
        graph.add_edge(u, v, weight=float(duration))

    start, end = ("start",), ("end",)
    previous, previous_duration = start, 0.0
    for i in range(n - 1, -1, -1):
        link(previous, ("backward", i), previous_duration)
        previous, previous_duration = ("backward", i), profile.backward[i]
    backward_done, backward_last = previous, previous_duration

    for k, message in enumerate(plan.messages):
        node = ("message", k)
        link(start, node, 0.0)
        if k:
            link(("message", k - 1), node, message_costs[k - 1])
        for c in message.chunks:
            link(("backward", c.tensor), node, profile.backward[c.tensor])

    carried_by: dict[int, list[int]] = {}
    for k, message in enumerate(plan.messages):
        for c in message.chunks:
            carried_by.setdefault(c.tensor, []).append(k)

    if problem.sync == "barrier":
        # The whole-step work (MODEL.md section 4) waits for every gradient, before the updates.
        whole = profile.post_backward + profile.update_lump
        link(backward_done, ("step",), backward_last)
        for k in range(len(plan.messages)):
            link(("message", k), ("step",), message_costs[k])
        link(("step",), ("update", 0), whole)
        for i in range(1, n):
            link(("update", i - 1), ("update", i), profile.update[i - 1])
        link(("update", n - 1), ("forward", 0), profile.update[n - 1])
        for i in range(1, n):
            link(("forward", i - 1), ("forward", i), profile.forward[i - 1])
    else:
        link(backward_done, ("update", 0), backward_last)
        for i in range(n):
            if i:
                link(("forward", i - 1), ("update", i), profile.forward[i - 1])
            for k in carried_by[i]:
                link(("message", k), ("update", i), message_costs[k])
            link(("update", i), ("forward", i), profile.update[i])
    link(("forward", n - 1), ("host",), profile.forward[n - 1])
    link(("host",), end, profile.host_overhead)
    return graph


def ps_schedule_graph(problem: Problem, plan: PSPlan) -> nx.DiGraph:
    """The precedence graph of one parameter-server step (the rules of
    :func:`~fusionopt.model.simulate_ps`); edge ``u -> v`` weighs the duration of ``u``.

    Nodes: ``("start",)``; ``("backward", i, p)``, the ``p``-th backward piece of tensor
    ``i`` (``p = 0`` only, when its backward is not split); ``("push", k)``; ``("server", k)``,
    the server update of push message ``k``; ``("pull", m)``; ``("update", i)`` and
    ``("forward", i, q)``, the worker's update and ``q``-th forward piece of tensor ``i``;
    ``("end",)``. Durations in seconds.

    - the backward pieces run in a chain from the start, tensors ``n-1 .. 0``, each tensor's
      pieces in push-plan order;
    - push ``k`` follows push ``k - 1`` and the piece of each of its chunks (every piece of a
      tensor that is not split); server update ``k`` follows push ``k``;
    - pull ``m`` follows pull ``m - 1`` and the server update of every push message sharing
      a byte with it;
    - ``barrier``: the updates and forwards (a chain) follow the last backward piece and every
      pull;
    - ``layerwise``: update ``i`` follows tensor ``i - 1``'s last forward piece (the backward
      for ``i = 0``) and the pull of its first forward piece's chunk (of every chunk, when the
      forward is not split); forward piece ``q`` follows update ``i`` or piece ``q - 1`` and
      the pull of its own chunk;
    - the step parts as in :func:`schedule_graph` (nodes ``("step",)`` and ``("host",)``).
    """
    from fusionopt.model._ps_timing import check_ps_inputs

    check_ps_inputs(problem, plan)
    plan.validate(problem.profile)
    profile, ps = problem.profile, problem.pattern
    n = profile.n
    sizes = profile.sizes
    split = ps.partition_compute
    push_cost = problem.cost(plan.push.message_bytes)
    server_cost = ps.server_update(plan.push.message_bytes)
    pull_cost = ps.pull(plan.pull.message_bytes)
    graph = nx.DiGraph()

    def link(u: tuple, v: tuple, duration: float) -> None:
        graph.add_edge(u, v, weight=float(duration))

    def by_tensor(channel: Plan) -> list[list[tuple[int, int, int]]]:
        pieces: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
        for k, message in enumerate(channel.messages):
            for c in message.chunks:
                pieces[c.tensor].append((k, c.lo, c.hi))
        return pieces

    start = ("start",)
    push_chunks = by_tensor(plan.push)
    previous, previous_duration = start, 0.0
    for i in range(n - 1, -1, -1):
        chunks = push_chunks[i]
        pieces = [(k, profile.backward[i] * (hi - lo) / sizes[i] + ps.delta) for k, lo, hi in chunks] \
            if split and len(chunks) > 1 else [(None, profile.backward[i])]
        for p, (k, duration) in enumerate(pieces):
            node = ("backward", i, p)
            link(previous, node, previous_duration)
            previous, previous_duration = node, duration
            targets = [k] if k is not None else [m for m, _, _ in chunks]
            for m in targets:
                link(node, ("push", m), duration)
    backward_done, backward_last = previous, previous_duration

    for k in range(plan.push.num_messages):
        link(start, ("push", k), 0.0)
        if k:
            link(("push", k - 1), ("push", k), push_cost[k - 1])
        link(("push", k), ("server", k), push_cost[k])
    for m, message in enumerate(plan.pull.messages):
        link(start, ("pull", m), 0.0)
        if m:
            link(("pull", m - 1), ("pull", m), pull_cost[m - 1])
        for c in message.chunks:
            for k, lo, hi in push_chunks[c.tensor]:
                if lo < c.hi and hi > c.lo:
                    link(("server", k), ("pull", m), server_cost[k])

    pull_chunks = by_tensor(plan.pull)
    if problem.sync == "barrier":
        link(backward_done, ("step",), backward_last)
        for m in range(plan.pull.num_messages):
            link(("pull", m), ("step",), pull_cost[m])
        link(("step",), ("update", 0), profile.post_backward + profile.update_lump)
        for i in range(1, n):
            link(("update", i - 1), ("update", i), profile.update[i - 1])
        link(("update", n - 1), ("forward", 0, 0), profile.update[n - 1])
        for i in range(1, n):
            link(("forward", i - 1, 0), ("forward", i, 0), profile.forward[i - 1])
        last, last_duration = ("forward", n - 1, 0), profile.forward[n - 1]
    else:
        last, last_duration = backward_done, backward_last
        for i in range(n):
            chunks = pull_chunks[i]
            link(last, ("update", i), last_duration)
            if split and len(chunks) > 1:
                pieces = [(m, profile.forward[i] * (hi - lo) / sizes[i] + ps.delta) for m, lo, hi in chunks]
                link(("pull", pieces[0][0]), ("update", i), pull_cost[pieces[0][0]])
            else:
                pieces = [(None, profile.forward[i])]
                for m, _, _ in chunks:
                    link(("pull", m), ("update", i), pull_cost[m])
            last, last_duration = ("update", i), profile.update[i]
            for q, (m, duration) in enumerate(pieces):
                node = ("forward", i, q)
                link(last, node, last_duration)
                if m is not None and q:
                    link(("pull", m), node, pull_cost[m])
                last, last_duration = node, duration
    link(last, ("host",), last_duration)
    link(("host",), ("end",), profile.host_overhead)
    return graph


def longest_path_time(problem: Problem, plan: Plan | PSPlan) -> float:
    """Iteration time as the longest path of :func:`schedule_graph`, in seconds.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Plan, Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(3e-3, 1e-9))
    >>> round(longest_path_time(problem, Plan.from_groups(profile, [[2], [1, 0]])) * 1e3, 9)
    17.0

    A parameter server, layer by layer (:func:`~fusionopt.model.simulate_ps`'s example):

    >>> from fusionopt.model import ParameterServer, PSPlan
    >>> ps_problem = Problem(profile, pattern=ParameterServer(AlphaBeta(1e-3, 1e-9)), sync="layerwise")
    >>> plan = PSPlan.from_groups(profile, push=[[2], [1], [0]], pull=[[0], [1], [2]])
    >>> round(longest_path_time(ps_problem, plan) * 1e3, 9)
    22.0
    """
    return float(nx.dag_longest_path_length(schedule_graph(problem, plan), weight="weight"))
