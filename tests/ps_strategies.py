"""Hypothesis strategies for parameter-server problems and plans."""

from __future__ import annotations

from hypothesis import strategies as st

from strategies import costs, partition_plans, profiles

from fusionopt.model import Problem, Profile, ParameterServer, PSPlan, stream_offsets

small_seconds = st.one_of(st.just(0.0), st.floats(1e-7, 2e-3))


@st.composite
def parameter_servers(draw, partition: bool | None = None, cost=costs) -> ParameterServer:
    push = draw(cost)
    pull = draw(st.one_of(st.none(), cost))
    return ParameterServer(
        push, pull,
        update_per_byte=draw(st.one_of(st.just(0.0), st.floats(1e-13, 1e-7))),
        update_overhead=draw(small_seconds),
        partition_compute=draw(st.booleans()) if partition is None else partition,
        delta=draw(small_seconds),
    )


@st.composite
def ps_problems(draw, min_n: int = 1, max_n: int = 6, sync=None, partition: bool | None = None,
                cost=costs) -> Problem:
    profile = draw(profiles(min_n, max_n))
    chosen_sync = draw(st.sampled_from(["barrier", "layerwise"])) if sync is None else sync
    return Problem(profile, sync=chosen_sync, pattern=draw(parameter_servers(partition, cost)))


@st.composite
def ps_plans(draw, profile: Profile) -> PSPlan:
    """Any valid PS plan: independent random partition plans for the two channels."""
    return PSPlan(draw(partition_plans(profile)), draw(partition_plans(profile)))


@st.composite
def offsets(draw, profile: Profile, direction: str) -> list[int]:
    """Message boundaries of a byte stream: random bytes mixed with tensor boundaries."""
    total = profile.total_bytes
    if total < 2:
        return []
    boundaries = [int(x) for x in stream_offsets(profile, direction).tolist() if x > 0]
    anywhere = st.integers(1, total - 1)
    pick = st.one_of(anywhere, st.sampled_from(boundaries)) if boundaries else anywhere
    return sorted(set(draw(st.lists(pick, max_size=8))))
