"""A communication pattern: how a step moves its gradients and parameters, and the rules
that judge its plans.

A :class:`~fusionopt.model.Problem` holds one pattern object. Five are built in:

=================================================  =================  =========================================================
pattern                                            ``name``           plan type
=================================================  =================  =========================================================
:class:`~fusionopt.model.AllReduce`      ``all-reduce``     :class:`~fusionopt.model.Plan`
:class:`~fusionopt.model.ParameterServer`       ``ps``             :class:`~fusionopt.model.PSPlan`
:class:`~fusionopt.model.Decoupled`      ``decoupled``      :class:`~fusionopt.model.DecoupledPlan`
:class:`~fusionopt.model.FullySharded`     ``fully-sharded``  :class:`~fusionopt.model.ShardedPlan`
:class:`~fusionopt.model.HSDP`                ``hsdp``           :class:`~fusionopt.model.ShardedPlan`
=================================================  =================  =========================================================

Each owns what differs between patterns, so that nothing outside a pattern asks which one
a problem has:

* :attr:`Pattern.plan_type`, whose ``read``, ``write`` and ``to_dict`` are the plan's JSON;
* :meth:`Pattern.channel_cost`: the problem's ``cost`` (the all-reduce's, the push channel's,
  or the all-reduce that a reduce-scatter and an all-gather make);
* :meth:`Pattern.check`: its refusals (the sync modes, extensions and step parts its step
  has no place for), each one line naming the culprit;
* :meth:`Pattern.simulate`: the timing of a plan (MODEL.md sections 3 to 8), with the
  compute stream's pieces when asked;
* :meth:`Pattern.lower_bound`: a proven lower bound in seconds on ``T`` of every plan;
* :meth:`Pattern.program`: the step program that both the simulator and the executor run,
  where the pattern has one (``None``: the executor runs the plan's messages itself).

A new pattern subclasses :class:`Pattern` with those, and is known by its ``name`` from the
moment its class is defined.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

__all__ = ["Pattern"]

# The steps MODEL.md states, whose step-part rules fit_step_parts knows.
STEPS = ("all-reduce", "ps", "decoupled", "fully-sharded")


class Pattern(ABC):
    """The base of every communication pattern (see the module's table).

    Attributes
    ----------
    name : str
        The pattern's name (``"all-reduce"``, ``"ps"``, ...): what a solver's needs name.
    words : str
        The pattern in words, for messages (``"parameter-server"``).
    subject : str
        The pattern as the subject of a refusal (``"the parameter server"``).
    plan_type : type
        The plans it judges.
    extension : str or None
        Its name in :attr:`~fusionopt.model.Problem.extensions` (``None``: the plain
        model's all-reduce, which is no extension).
    memory_cap : float or None
        Bytes a plan may hold whole at once (None: no cap); fully sharded problems have one.
    """

    name: ClassVar[str]
    words: ClassVar[str]
    subject: ClassVar[str]
    plan_type: ClassVar[type]
    extension: ClassVar[str | None] = None
    memory_cap: float | None = None
    _by_name: ClassVar[dict[str, type["Pattern"]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            Pattern._by_name[cls.name] = cls

    def is_a(self, name: str) -> bool:
        """Whether this pattern is the one called ``name`` or a kind of it (HSDP is a kind of
        fully sharded pattern, so the fully sharded methods take it)."""
        return isinstance(self, Pattern.named(name))

    @property
    def step(self) -> str:
        """The name of the step this pattern runs, for the step-part rules
        (:func:`~fusionopt.model.fit_step_parts`): its own name, or that of the
        pattern it is a kind of."""
        return next(c.name for c in type(self).__mro__ if "name" in c.__dict__ and c.name in STEPS)

    # ------------------------------------------------------------------ the catalogue
    @staticmethod
    def named(name: str) -> type["Pattern"]:
        """The pattern class called ``name``; one line naming the known ones otherwise."""
        try:
            return Pattern._by_name[name]
        except KeyError:
            raise ValueError(f"unknown pattern {name!r}: choose one of {', '.join(Pattern._by_name)}") from None

    @staticmethod
    def names() -> tuple[str, ...]:
        """The names of the known patterns, in the order they were defined."""
        return tuple(Pattern._by_name)

    @staticmethod
    def of_cost(cost: Any) -> "Pattern":
        """The all-reduce on ``cost``: what ``Problem(profile, cost)`` means."""
        return Pattern.named("all-reduce")(cost)

    @classmethod
    def spelling(cls) -> str:
        """How a problem of this pattern is written, for messages."""
        return f"Problem(profile, pattern={cls.__name__}(...))"

    @classmethod
    def article(cls) -> str:
        """``"a"`` or ``"an"`` before :attr:`words`."""
        return "an" if cls.words[0] in "aeiou" else "a"

    # ------------------------------------------------------------------ what each pattern says
    @property
    @abstractmethod
    def collectives(self) -> dict[str, Any]:
        """Its collectives by name (``"all_reduce"``, ``"reduce_scatter"``, ``"push"``, ...),
        each with its :class:`~fusionopt.cost.CommCost`."""

    @property
    def costs(self) -> tuple[Any, ...]:
        """Its communication costs, each a :class:`~fusionopt.cost.CommCost`."""
        return tuple(self.collectives.values())

    @abstractmethod
    def channel_cost(self, given: Any) -> Any:
        """The problem's ``cost`` from the one the user ``given`` (None: left out)."""

    def check(self, problem: Any) -> None:
        """Raise a one-line ``ValueError`` if ``problem``'s options do not fit this pattern."""

    def simulate(self, problem: Any, plan: Any, *, validate: bool = True, pieces: list | None = None) -> Any:
        """The :class:`~fusionopt.model.Timeline` of ``plan`` on ``problem``; with
        ``pieces`` a list, the compute stream's pieces are appended to it."""
        self.require_plan(plan)
        return self._simulate(problem, plan, validate=validate, pieces=pieces)

    @abstractmethod
    def _simulate(self, problem: Any, plan: Any, *, validate: bool, pieces: list | None) -> Any:
        """:meth:`simulate` once the plan is known to be this pattern's."""

    @abstractmethod
    def lower_bound(self, problem: Any, space: str = "any") -> float:
        """A proven lower bound in seconds on ``T`` of every plan of ``problem`` (of the
        plans of ``space``, ``"any"`` or ``"fusion"``, where the pattern tells them apart)."""

    def plan_in_space(self, problem: Any, plan: Any, space: str) -> bool:
        """Whether ``plan`` is one of the plans of ``space`` (every plan, unless the pattern
        tells fusion plans apart)."""
        return True

    def program(self, problem: Any, plan: Any) -> Any:
        """The step program of ``plan`` on ``problem`` that the executor runs, or ``None``
        where the executor runs the plan's messages itself."""
        return None

    def with_message_overhead(self, seconds: float, per_byte: float = 0.0) -> "Pattern":
        """The same pattern with ``seconds + per_byte * S`` more on every message of ``S``
        bytes of each of its collectives (a framework's own cost per message)."""
        raise ValueError(f"a reducer's overhead applies to all-reduce and fully sharded problems, not to "
                         f"{self.article()} {self.words} problem")

    def to_dict(self) -> dict[str, Any]:
        """The pattern as a JSON-ready mapping (read back by the class's ``from_dict``)."""
        raise ValueError(f"{self.article()} {self.words} pattern has no JSON form")

    def without_cap(self) -> "Pattern":
        """The same pattern without a memory cap."""
        return self

    # ------------------------------------------------------------------ shared checks
    def require_plan(self, plan: Any) -> None:
        """Raise a one-line ``ValueError`` unless ``plan`` is a plan of this pattern."""
        if isinstance(plan, self.plan_type):
            return
        hint = ""
        for other in Pattern._by_name.values():
            if other is not type(self) and other.extension is not None and isinstance(plan, other.plan_type):
                hint = f"; a {other.plan_type.__name__} is for {other.spelling()}"
                break
        raise ValueError(f"{self.article()} {self.words} problem takes a {self.plan_type.__name__}, "
                         f"got {type(plan).__name__}{hint}")

    def refuse_options(self, problem: Any, *, allowing: tuple[str, ...] = ()) -> None:
        """Raise a one-line ``ValueError`` if ``problem`` has one of the all-reduce extensions
        (copy cost, per-message compute, contention, several channels) that this pattern's
        step has no place for, other than those ``allowing`` names."""
        others = {"copy_cost": problem.copy_cost != 0.0, "message_compute": problem.message_compute != 0.0,
                  "message_compute_per_byte": problem.message_compute_per_byte != 0.0,
                  "contention": problem.contention != 1.0, "comm_contention": problem.comm_contention != 1.0,
                  "channels": problem.channels != 1}
        for option, on in others.items():
            if on and option not in allowing:
                raise ValueError(f"{self.subject} does not combine with {option} "
                                 f"({option}={getattr(problem, option)!r}); leave one of them out")


def require_pattern(problem: Any, name: str, what: str) -> None:
    """Raise a one-line ``ValueError`` unless ``problem`` is a problem of the pattern called
    ``name``: ``what`` needs one."""
    wanted = Pattern.named(name)
    if not isinstance(getattr(problem, "pattern", None), Pattern):
        raise ValueError(f"problem must be a Problem, got {type(problem).__name__}")
    if not isinstance(problem.pattern, wanted):
        raise ValueError(f"{what} needs {wanted.article()} {wanted.words} problem: {wanted.spelling()}")
