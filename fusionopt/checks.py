"""Independent checks of the simulator.

:func:`schedule_graph` builds a training step under a plan as a networkx DAG (one node per
backward, message, update and forward, weighted by its duration); its longest path is the
iteration time, computed by graph search instead of :func:`fusionopt.model.simulate`'s
recursion. The property tests compare the two on random problems and plans.
"""

from __future__ import annotations

import networkx as nx

from fusionopt.model.plan import Plan
from fusionopt.model.problem import Problem


def schedule_graph(problem: Problem, plan: Plan) -> nx.DiGraph:
    """The precedence graph of one step: edge ``u -> v`` weighs the duration of ``u``.

    Nodes: ``("start",)``, ``("backward", i)``, ``("message", k)``, ``("update", i)``,
    ``("forward", i)`` and ``("end",)``; durations in seconds.

    - backward runs ``n-1 .. 0`` in a chain from the start;
    - message ``k`` follows message ``k - 1`` and the backward of every tensor it carries;
    - ``barrier``: the updates (a chain) follow the backward and every message, and the
      forward chain follows the updates;
    - ``layerwise``: update ``i`` follows forward ``i - 1`` (the backward for ``i = 0``)
      and every message carrying tensor ``i``; forward ``i`` follows update ``i``.
    """
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
        link(backward_done, ("update", 0), backward_last)
        for k in range(len(plan.messages)):
            link(("message", k), ("update", 0), message_costs[k])
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
    link(("forward", n - 1), end, profile.forward[n - 1])
    return graph


def longest_path_time(problem: Problem, plan: Plan) -> float:
    """Iteration time as the longest path of :func:`schedule_graph`, in seconds.

    >>> from fusionopt.model import AlphaBeta, Plan, Problem, Profile
    >>> profile = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> problem = Problem(profile, AlphaBeta(3e-3, 1e-9))
    >>> round(longest_path_time(problem, Plan.from_groups(profile, [[2], [1, 0]])) * 1e3, 9)
    17.0
    """
    return float(nx.dag_longest_path_length(schedule_graph(problem, plan), weight="weight"))
