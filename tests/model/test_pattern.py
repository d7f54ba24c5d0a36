"""One pattern object per problem: Problem(profile, pattern=...), what each pattern owns, and
the deprecated keywords that still say it for one release."""

import warnings

import pytest

from fusionopt.executor import Job
from fusionopt.model import (
    AllReduce, Decoupled, DecoupledPlan, FullySharded, ParameterServer, Pattern, Plan, Problem, Profile, PSPlan,
    ShardedPlan, simulate,
)
from fusionopt.cost import AlphaBeta, with_overhead

PROFILE = Profile.from_arrays([4e6, 1e6, 2e6], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
HALF = AlphaBeta(1e-3, 1e-9)


def patterns() -> dict[str, tuple[Pattern, object]]:
    """Each built-in pattern with a plan of its own, on PROFILE."""
    return {
        "all-reduce": (AllReduce(AlphaBeta(3e-3, 1e-9)), Plan.from_groups(PROFILE, [[2], [1, 0]])),
        "ps": (ParameterServer(HALF, update_per_byte=1e-10), PSPlan.from_groups(PROFILE, [[2], [1, 0]], [[0, 1], [2]])),
        "decoupled": (Decoupled(HALF, HALF), DecoupledPlan.from_groups(PROFILE, [[2], [1, 0]], [[0, 1, 2]])),
        "fully-sharded": (FullySharded(HALF, HALF, blocking=True), ShardedPlan.from_units(PROFILE, [[0, 1], [2]])),
    }


def test_the_catalogue_names_the_four_patterns_and_their_plans():
    names = ("all-reduce", "ps", "decoupled", "fully-sharded")
    assert set(names) <= set(Pattern.names())
    assert [Pattern.named(n).plan_type for n in names] == [Plan, PSPlan, DecoupledPlan, ShardedPlan]
    with pytest.raises(ValueError, match="^unknown pattern 'pipeline': choose one of .*fully-sharded"):
        Pattern.named("pipeline")


def test_a_cost_alone_is_the_all_reduce_and_times_alike():
    cost = AlphaBeta(3e-3, 1e-9)
    short, spelled = Problem(PROFILE, cost), Problem(PROFILE, pattern=AllReduce(cost))
    plan = Plan.from_groups(PROFILE, [[2], [1, 0]])
    # MODEL.md section 5's worked example: 17 ms, either way.
    assert simulate(short, plan).iteration_time == simulate(spelled, plan).iteration_time == pytest.approx(17e-3)
    assert short.pattern.name == spelled.pattern.name == "all-reduce" and short.extensions == ()
    assert short.cost is cost and spelled.cost is cost
    with pytest.raises(ValueError, match="^cost AlphaBeta.* differs from the all-reduce's cost"):
        Problem(PROFILE, AlphaBeta(1e-3, 1e-9), pattern=AllReduce(cost))


@pytest.mark.parametrize("name", ["all-reduce", "ps", "decoupled", "fully-sharded"])
def test_each_pattern_owns_its_plan_type_bound_and_extension(name):
    pattern, plan = patterns()[name]
    problem = Problem(PROFILE, pattern=pattern)
    assert problem.pattern is pattern and pattern.name == name
    assert problem.extensions == (() if pattern.extension is None else (pattern.extension,))
    assert problem.cost is pattern.channel_cost(None) or problem.cost == pattern.channel_cost(None)
    t = simulate(problem, plan).iteration_time
    assert pattern.lower_bound(problem) <= t * (1 + 1e-12)
    for other, (_, foreign) in patterns().items():
        if other != name:
            with pytest.raises(ValueError, match=f"takes a {pattern.plan_type.__name__}|needs a PSPlan"):
                simulate(problem, foreign)


@pytest.mark.parametrize("keyword,name", [("ps", "ps"), ("decoupled", "decoupled"), ("fully_sharded", "fully-sharded")])
def test_the_old_keywords_warn_and_say_the_same_problem(keyword, name):
    pattern, plan = patterns()[name]
    with pytest.warns(DeprecationWarning, match=rf"^Problem\({keyword}=\.\.\.\) is deprecated"):
        old = Problem(PROFILE, **{keyword: pattern})
    assert old.pattern is pattern
    assert simulate(old, plan).iteration_time == simulate(Problem(PROFILE, pattern=pattern), plan).iteration_time
    with pytest.warns(DeprecationWarning, match=rf"^Problem\.{keyword} is deprecated"):
        assert getattr(old, keyword) is pattern
    with pytest.warns(DeprecationWarning):
        assert getattr(Problem(PROFILE, HALF), keyword) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Problem(PROFILE, pattern=pattern).pattern       # the new spelling says nothing


def test_the_old_keywords_refuse_in_one_line():
    ps, _ = patterns()["ps"]
    decoupled, _ = patterns()["decoupled"]
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="^ps must be a ParameterServer, got Decoupled$"):
        Problem(PROFILE, ps=decoupled)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="^decoupled does not combine with ps; "):
        Problem(PROFILE, ps=ps, decoupled=decoupled)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="^pattern and ps both say the pattern"):
        Problem(PROFILE, ps=ps, pattern=ps)


def test_refusals_belong_to_the_pattern():
    for name in ("ps", "decoupled", "fully-sharded"):
        pattern, _ = patterns()[name]
        with pytest.raises(ValueError, match=rf"^{pattern.subject} does not combine with contention \(contention=2.0\)"):
            Problem(PROFILE, pattern=pattern, contention=2.0)
    with pytest.raises(ValueError, match="^a fully sharded step has its own order"):
        Problem(PROFILE, pattern=patterns()["fully-sharded"][0], sync="layerwise")
    with pytest.raises(ValueError, match="^a reducer's overhead applies to all-reduce and fully sharded problems, "
                                         "not to a parameter-server problem$"):
        with_overhead(Problem(PROFILE, pattern=patterns()["ps"][0]), per_step=0.0, per_message=1e-4)


def test_a_message_overhead_adds_to_every_collective_of_the_pattern():
    sharded, plan = patterns()["fully-sharded"]
    problem = Problem(PROFILE, pattern=sharded)
    slower = with_overhead(problem, per_step=0.0, per_message=1e-4)
    # Blocking: every collective adds its 0.1 ms to the step; the plan has 2 units, so 2 gathers
    # before the forward, 1 re-gather of the resharded unit in the backward, 2 reduce-scatters.
    added = simulate(slower, plan).iteration_time - simulate(problem, plan).iteration_time
    assert added == pytest.approx(1e-4 * simulate(problem, plan).num_messages)
    assert slower.pattern.blocking and slower.pattern.reduce_scatter == AlphaBeta(1.1e-3, 1e-9)


@pytest.mark.parametrize("name", ["decoupled", "fully-sharded"])
def test_a_job_carries_its_pattern_whole(name):
    pattern, plan = patterns()[name]
    if name == "fully-sharded":
        pattern = FullySharded(HALF, AlphaBeta(2e-3, 1e-9), memory_cap=1e9)
    job = Job(Problem(PROFILE, pattern=pattern), plan)
    again = Job.from_dict(job.to_dict())
    assert again.problem.pattern == pattern and again.digests() == job.digests()
    key = pattern.extension
    with pytest.raises(ValueError, match=rf"^job\.{key}\.all_gather: expected a JSON object"):
        Job.from_dict({**job.to_dict(), key: {**pattern.to_dict(), "all_gather": 3}})


def test_a_pattern_must_say_what_it_owns():
    class Partial(Pattern):                       # no name of its own: not in the catalogue
        words, subject = "partial", "the partial pattern"

        def channel_cost(self, given):
            return given

    with pytest.raises(TypeError, match="abstract"):
        Partial()
    assert "partial" not in Pattern.names()
