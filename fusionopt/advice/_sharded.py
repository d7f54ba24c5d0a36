"""Settings for sharded data parallelism: FSDP2's ``fully_shard`` calls and prefetch lists
for a plan, and DeepSpeed's and Megatron-LM's sizes found on a grid, each judged by the
schedule the framework builds from them.

* :func:`fsdp2_settings`: FSDP2 calls that build a given fully sharded plan;
  :func:`fsdp2_advice`: those of the best plan FSDP2 can build (units over
  :func:`fsdp2_atoms`), or of FSDP2's defaults where they are at least as fast;
* :func:`zero3_settings`: DeepSpeed ZeRO-3's prefetch, reuse and reduce bucket sizes;
* :func:`zero2_settings`: DeepSpeed ZeRO-2's ``reduce_bucket_size`` and ``overlap_comm``,
  and Megatron-LM's ``bucket_size``, on a decoupled problem.

Every setting reported comes with the model's ``T`` (seconds) of what the framework runs
with it, and on a fully sharded problem its peak memory (bytes); a setting over the
problem's memory cap is never recommended, nor one the model predicts less than ``min_gain``
faster than the framework's defaults where they fit (then the advice is to leave the knobs
unset; :data:`fusionopt.advice.MIN_GAIN`). Where no setting tried
fits the cap, :class:`OverMemoryCap` says so.

:func:`fsdp2_settings` turns a :class:`~fusionopt.model.ShardedPlan` into what an
engineer types: the modules each ``fully_shard`` call wraps (the coarsest modules that lie
wholly in each unit, by the profile's tensor names), ``reshard_after_forward`` per call, and
the ``set_modules_to_forward_prefetch`` / ``set_modules_to_backward_prefetch`` lists that
give the plan's prefetch depths. The plan FSDP2 builds from those settings is read back from
them (:func:`fsdp2_plan_of`) and simulated: the ``T`` and peak memory reported are those of
exactly that setting.

FSDP2's prefetch, as read in torch 2.13.0 (``_fsdp_param_group.py``,
``FSDPParamGroup.wait_for_unshard``), with the CPU running ahead of the GPU:

* forward: each unit's copy-out makes the all-gather streams wait for the copy-out of the
  unit before, so without lists unit ``j``'s all-gather starts when unit ``j - 2``'s forward
  starts (depth 2); a list of ``k`` units on unit ``j`` issues unit ``j + k``'s all-gather
  after that same wait, at unit ``j - 1``'s forward start (depth ``k + 1``). Depths 0 and 1
  cannot be set.
* backward: each unit's copy-out makes the streams wait for it at once, so unit ``j``'s
  all-gather starts when unit ``j + 1``'s backward starts even without a list (depth 1); a
  list of ``k`` units on unit ``j`` gives depth ``k``. Depth 0 cannot be set.

On CPU (gloo; a problem with ``FullySharded(blocking=True)``) every all-gather is synchronous
on the training thread, so nothing runs ahead: without lists unit ``j``'s all-gather is
issued by its own pre-forward hook (depth 0), and a list of ``k`` units on unit ``j``
gathers them right after unit ``j``'s own (depth ``k``). The backward is as above.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from fusionopt.model._cost import check_flag
from fusionopt.model._names import module_of
from fusionopt.model._problem import Problem
from fusionopt.model._profile import Profile
from fusionopt.model._sharded_plan import ShardedPlan
from fusionopt.model._simulator import simulate
from fusionopt.advice._allreduce import MIN_GAIN, check_min_gain, gains_enough
from fusionopt.solvers.baselines._fsdp2 import fsdp2_forward_prefetch
from fusionopt.solvers._registry import solve
from fusionopt.solvers._result import Result, Status
from fusionopt.solvers._sharded_units import atom_bounds

ROOT = "(root)"
FSDP2_MIN_FORWARD_PREFETCH = fsdp2_forward_prefetch(blocking=False)   # with the CPU running ahead of the GPU
FSDP2_MIN_BACKWARD_PREFETCH = 1
TIE = 1e-9
"""Relative tolerance on ``T``: a setting within it of the defaults' is no faster than them."""


class OverMemoryCap(ValueError):
    """No setting of a framework's that was tried fits the problem's memory cap."""


def unit_modules(profile: Profile, first: int, stop: int) -> list[str]:
    """The coarsest modules whose tensors are exactly a run of tensors ``first`` to ``stop - 1``,
    in forward order, by the profile's dotted tensor names (a module is a name prefix ending
    at a dot; ``""`` is the whole model). A unit that splits one module's tensors has no
    such modules: ``ValueError`` naming the module.

    >>> p = Profile.from_arrays([4] * 5, [0] * 5, [1] * 5,
    ...                         names=["emb.weight", "h.0.fc.weight", "h.0.fc.bias", "h.1.fc.weight", "ln.weight"])
    >>> unit_modules(p, 1, 4), unit_modules(p, 1, 3), unit_modules(p, 0, 5)
    (['h'], ['h.0'], [''])
    """
    for label, value in (("first", first), ("stop", stop)):
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise ValueError(f"{label} must be a tensor index, got {value!r}")
    first, stop = int(first), int(stop)
    if not 0 <= first < stop <= profile.n:
        raise ValueError(f"a unit runs over tensors first to stop - 1 with 0 <= first < stop <= {profile.n}, got "
                         f"first {first}, stop {stop}")
    names = profile.names
    inside = set(range(first, stop))
    chosen: list[str] = []
    i = first
    while i < stop:
        parts = names[i].split(".")
        prefix = None
        for depth in range(len(parts)):                    # coarsest first: "" then "h", "h.0", ...
            candidate = ".".join(parts[:depth])
            members = [k for k, name in enumerate(names) if _within(name, candidate)]
            if members and set(members) <= inside and members[0] == i:
                prefix, i = candidate, members[-1] + 1
                break
        if prefix is None:
            module = ".".join(parts[:-1])
            raise ValueError(f"unit of tensors {first}..{stop - 1} splits module {module!r}: FSDP2 wraps whole "
                             "modules (plan over fsdp2_atoms)")
        chosen.append(prefix)
    return chosen


def _within(name: str, module: str) -> bool:
    return module == "" or name.startswith(module + ".")


def fsdp2_atoms(profile: Profile, atoms: str | Sequence[int] = "module") -> tuple[list[int], bool | None]:
    """Where the units of a plan FSDP2 can build may start, among ``atoms``
    (:func:`~fusionopt.solvers.atom_bounds`), and the ``root`` such a plan needs
    (``True``; ``None`` where a root may or may not be searched).

    ``fully_shard`` wraps whole modules, and a tensor belongs to the innermost wrapped module
    above it, to the model (the root, kept whole) where none is. A unit other than the root
    therefore holds, with each tensor, every tensor under the module that owns it
    (:func:`~fusionopt.model._names.module_of`): a module owning tensors beside submodules
    (``MultiheadAttention``'s ``in_proj_weight`` beside ``out_proj``) lies in one atom. A tensor
    of the model itself (a name without a dot) is the root's; so is one that lies with its
    module's tensors only if they are all the root's too. The root's tensors in the first half
    of the forward order go to its first part, the others to its last, each part an atom of
    its own. A module's own tensors beside its submodules at either end of the other units go
    to the root too where that gives more atoms (a vision transformer's
    ``encoder.pos_embedding``, which frees its layers to be units). Where the root must hold
    every tensor (a profile of names without dots), the one atom is the whole model.

    >>> names = ["class_token", "encoder.pos_embedding", "encoder.l0.attn.in_proj_weight",
    ...          "encoder.l0.attn.out_proj.weight", "encoder.l1.fc.weight", "head.weight"]
    >>> p = Profile.from_arrays([4] * 6, [0] * 6, [1] * 6, names=names)
    >>> atom_bounds(p, "module"), fsdp2_atoms(p, "module")
    ([0, 1, 2, 3, 4, 5, 6], ([0, 2, 4, 5, 6], True))
    >>> fsdp2_atoms(Profile.from_arrays([4] * 3, [0] * 3, [1] * 3), "module")           # t0, t1, t2
    ([0, 3], None)
    """
    names = list(profile.names)
    n = len(names)
    owner = [module_of(name) for name in names]
    first: dict[str, int] = {}                            # per module, its first and last tensor
    last: dict[str, int] = {}
    own: dict[str, int] = {}                              # per module, tensors it owns itself
    under: dict[str, int] = {}                            # per module, tensors under it
    for i, name in enumerate(names):
        parts = name.split(".")[:-1]
        for depth in range(1, len(parts) + 1):
            module = ".".join(parts[:depth])
            first.setdefault(module, i)
            last[module] = i
            under[module] = under.get(module, 0) + 1
        own[owner[i]] = own.get(owner[i], 0) + 1

    def beside_submodules(i: int) -> bool:
        return owner[i] != "" and under[owner[i]] > own[owner[i]]

    def settled(head: int, tail: int) -> tuple[int, int]:
        """The root's parts ``[0, head)`` and ``[tail, n)`` grown until every tensor between
        them lies with its module's tensors between them."""
        moved = True
        while moved and head < tail:
            moved = False
            for i in range(head, tail):
                module = owner[i]
                if module == "" or first[module] < head or last[module] >= tail:
                    head, tail = (i + 1, tail) if i < n - 1 - i else (head, i)
                    moved = True
                    break
        return head, tail

    def cuts(head: int, tail: int) -> list[int]:
        """The atom boundaries with the root's parts ``[0, head)`` and ``[tail, n)``."""
        blocked = [0] * (n + 1)                           # cuts inside a module a unit must hold whole
        for i in range(head, tail):
            blocked[first[owner[i]] + 1] += 1
            blocked[last[owner[i]] + 1] -= 1
        inside, depth = set(), 0
        for c in range(n):
            depth += blocked[c]
            if head < c < tail and depth == 0:
                inside.add(c)
        return sorted({0, n} | ({head, tail} - {0, n}) | (inside & allowed))

    allowed = set(atom_bounds(profile, atoms))
    # The root's parts: what it must hold, then a module's own tensors at either end, one at a
    # time, each kept where it adds atoms (an encoder's position embedding frees its layers;
    # an attention's input projection frees nothing).
    head, tail = settled(0, n)
    best = (cuts(head, tail) if head < tail else [0, n], head, tail)
    while head < tail and (beside_submodules(head) or beside_submodules(tail - 1)):
        head, tail = settled(*((head + 1, tail) if beside_submodules(head) else (head, tail - 1)))
        if head < tail and len(cuts(head, tail)) > len(best[0]):
            best = (cuts(head, tail), head, tail)
    bounds, head, tail = best
    root = True if head > 0 or tail < n else None
    if head >= tail or (root and len(bounds) < 4):        # a root needs two parts and a unit between
        return [0, n], None
    return bounds, root


@dataclass(frozen=True)
class FSDP2Settings:
    """FSDP2 settings for a plan and the model's figures for the schedule they build.

    ``units``: per ``fully_shard`` call, in the order to make them, the modules it wraps
    (one module: ``fully_shard(module)``; several: ``fully_shard([m1, m2])``); the last call
    is the model itself, the root, owning every tensor no other call wraps (``[""]``).
    ``reshard_after_forward``: per call. ``forward_prefetch`` / ``backward_prefetch``: per
    unit (its first module's name) the units to list in
    ``set_modules_to_forward_prefetch`` / ``set_modules_to_backward_prefetch`` (empty: leave
    FSDP2's default). ``iteration_time`` (seconds) and ``peak_memory`` (bytes): of the plan
    FSDP2 builds from these settings (:func:`fsdp2_plan_of`). ``separate_reduce_scatter_group``:
    the problem runs the reduce-scatters on a channel of their own
    (``FullySharded(..., channels="two")``), which FSDP2 builds with
    ``set_separate_reduce_scatter_group(True)`` on the root (torch 2.13 has it).
    """

    units: list[list[str]]
    reshard_after_forward: list[bool]
    forward_prefetch: dict[str, list[str]]
    backward_prefetch: dict[str, list[str]]
    iteration_time: float
    peak_memory: int
    plan: ShardedPlan
    separate_reduce_scatter_group: bool = False

    def code(self, model: str = "model") -> str:
        """The calls, as Python, on a model called ``model``."""
        def ref(name: str) -> str:
            return model if name == "" else f"{model}.get_submodule({name!r})"

        lines = []
        for modules, reshard in zip(self.units, self.reshard_after_forward):
            target = ref(modules[0]) if len(modules) == 1 else "[" + ", ".join(ref(m) for m in modules) + "]"
            lines.append(f"fully_shard({target}, reshard_after_forward={reshard})")
        for kind, lists in (("forward", self.forward_prefetch), ("backward", self.backward_prefetch)):
            for unit, targets in lists.items():
                lines.append(f"{ref(unit)}.set_modules_to_{kind}_prefetch([{', '.join(ref(t) for t in targets)}])")
        if self.separate_reduce_scatter_group:
            lines.append(f"{model}.set_separate_reduce_scatter_group(True)")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["plan"] = self.plan.to_dict()
        return doc


def fsdp2_least_forward_prefetch(problem: Problem) -> int:
    """The least forward prefetch depth FSDP2 can set on ``problem``: 2 with the CPU running
    ahead of the GPU, 0 where the collectives block the training thread (module docstring)."""
    return fsdp2_forward_prefetch(_fully_sharded(problem, "fsdp2_least_forward_prefetch").pattern.blocking)


def _fully_sharded(problem: Any, fn: str) -> Problem:
    """``problem``, a fully sharded :class:`Problem`; one line naming ``fn`` otherwise."""
    if not isinstance(problem, Problem):
        raise ValueError(f"{fn} takes a fully sharded Problem, got {type(problem).__name__}")
    if not problem.pattern.is_a("fully-sharded"):
        raise ValueError(f"{fn} takes a fully sharded problem, got {problem.pattern.article()} "
                         f"{problem.pattern.words} one")
    return problem


def fsdp2_settings(problem: Problem, plan: ShardedPlan) -> FSDP2Settings:
    """The FSDP2 settings that build ``plan`` (module docstring), with the ``T`` and peak
    memory of that schedule. The plan's units must be runs of whole modules, its forward
    prefetch at least 2 (0 where the collectives block: :func:`fsdp2_least_forward_prefetch`)
    and its backward prefetch at least 1 (FSDP2 can set no less); else ``ValueError`` saying
    what to change.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import FullySharded
    >>> p = Profile.from_arrays([4] * 5, [0.0] * 5, [1.0] * 5,
    ...                         names=["emb.weight", "h.0.fc.weight", "h.0.fc.bias", "h.1.fc.weight", "ln.weight"])
    >>> problem = Problem(p, pattern=FullySharded(AlphaBeta(0.1, 0.0), AlphaBeta(0.1, 0.0)))
    >>> plan = ShardedPlan([0, 1, 3, 4, 5], [False, False, True, False], forward_prefetch=3, root=True)
    >>> s = fsdp2_settings(problem, plan)
    >>> print(s.code())
    fully_shard(model.get_submodule('h.0'), reshard_after_forward=False)
    fully_shard(model.get_submodule('h.1'), reshard_after_forward=True)
    fully_shard(model, reshard_after_forward=False)
    model.set_modules_to_forward_prefetch([model.get_submodule('h.0'), model.get_submodule('h.1')])
    model.get_submodule('h.0').set_modules_to_forward_prefetch([model.get_submodule('h.1')])
    >>> s.plan.bounds.tolist(), s.plan.forward_prefetch, round(s.iteration_time, 9)
    ([0, 1, 3, 4, 5], 3, 5.4)
    """
    profile = _fully_sharded(problem, "fsdp2_settings").profile
    if not isinstance(plan, ShardedPlan):
        raise ValueError(f"plan must be a ShardedPlan, got {type(plan).__name__}")
    plan.validate(profile)
    blocking = problem.pattern.blocking
    least = fsdp2_least_forward_prefetch(problem)
    if plan.forward_prefetch < least or plan.backward_prefetch < FSDP2_MIN_BACKWARD_PREFETCH:
        where = "with its collectives blocking the training thread" if blocking else "when the CPU runs ahead"
        raise ValueError(f"the plan prefetches {plan.forward_prefetch} unit(s) ahead in the forward and "
                         f"{plan.backward_prefetch} in the backward; FSDP2 prefetches at least "
                         f"{least} and {FSDP2_MIN_BACKWARD_PREFETCH} {where} "
                         f"(plan with sharded-opt's min_forward_prefetch={least}, min_backward_prefetch=1)")
    bounds = plan.bounds.tolist()
    m = plan.num_units
    wrapped = [j for j in range(m) if not (plan.root and j in (0, m - 1))]
    units = [unit_modules(profile, bounds[j], bounds[j + 1]) for j in wrapped]
    reshard = [bool(plan.reshard[j]) for j in wrapped]
    if units and units[-1] == [""]:                       # one unit of everything: the root call itself
        units, reshard = [[""]], [bool(plan.reshard[0])]
    else:                                                 # the root call, owning what no other call wraps
        units.append([""])
        reshard.append(False)
    # Each unit's FSDP module: the root's parts are the model itself.
    key = {j: ("" if j not in wrapped else units[k][0]) for k, j in enumerate(wrapped)}
    key.update({j: "" for j in range(m) if j not in wrapped})
    forward: dict[str, list[str]] = {}
    if plan.forward_prefetch > least:
        length = plan.forward_prefetch - (0 if blocking else 1)   # a list of k units gives depth k (+ 1)
        for j in range(m - 1 if plan.root else m):
            targets = [key[t] for t in range(j + 1, min(j + length, m - 1) + 1) if t in wrapped]
            if targets:
                forward[key[j]] = targets
    backward: dict[str, list[str]] = {}
    if plan.backward_prefetch > FSDP2_MIN_BACKWARD_PREFETCH:
        for j in range(1 if plan.root else 0, m):
            targets = [key[t] for t in range(j - 1, max(j - plan.backward_prefetch, 0) - 1, -1) if t in wrapped]
            if targets:
                backward[key[j]] = targets
    built = fsdp2_plan_of(profile, units, reshard, forward, backward, blocking=blocking)
    timeline = simulate(problem, built)
    return FSDP2Settings(units, reshard, forward, backward, timeline.iteration_time, int(timeline.peak_memory), built,
                         separate_reduce_scatter_group=problem.pattern.channels == "two")


def _check_prefetch(units: Any, forward_prefetch: Any, backward_prefetch: Any) -> None:
    """Each call wraps a list of modules, none wrapped twice; each prefetch list is keyed by a
    unit (its first module's name) and lists units."""
    seen: dict[str, int] = {}
    for k, modules in enumerate(units):
        if isinstance(modules, (str, bytes)) or not isinstance(modules, (list, tuple)) or not modules:
            raise ValueError(f"fully_shard call {k} must wrap a list of module names, got {modules!r}")
        for module in modules:
            if module in seen:
                raise ValueError(f"module {module!r} is wrapped by fully_shard calls {seen[module]} and {k}")
            seen[module] = k
    names = {modules[0] for modules in units}
    for kind, lists in (("forward_prefetch", forward_prefetch), ("backward_prefetch", backward_prefetch)):
        if not isinstance(lists, Mapping):
            raise ValueError(f"{kind} must map a unit to the units it prefetches, got {lists!r}")
        for unit, targets in lists.items():
            if isinstance(targets, (str, bytes)) or not isinstance(targets, (list, tuple)):
                raise ValueError(f"{kind} of {unit!r} must be a list of units, got {targets!r}")
            odd = next((name for name in (unit, *targets) if name not in names), None)
            if odd is not None:
                raise ValueError(f"{kind} of {unit!r}: {odd!r} is no unit (a unit is named by its first module: "
                                 f"{', '.join(repr(n) for n in sorted(names))})")


def fsdp2_plan_of(profile: Profile, units: list[list[str]], reshard_after_forward: list[bool],
                  forward_prefetch: dict[str, list[str]], backward_prefetch: dict[str, list[str]], *,
                  blocking: bool = False) -> ShardedPlan:
    """The plan FSDP2 builds from settings (:class:`FSDP2Settings`' fields): each call's
    tensors form a unit (the root's, ``[""]`` last, the tensors no other call wraps); the
    forward depth is 2, or one more than the longest forward list (``blocking``, collectives
    that block the training thread: 0, or the longest forward list); the backward depth 1,
    or the longest backward list.
    """
    if len(reshard_after_forward) != len(units):
        raise ValueError(f"{len(units)} fully_shard calls but {len(reshard_after_forward)} reshard_after_forward "
                         "flags: give one per call")
    for k, flag in enumerate(reshard_after_forward):
        check_flag(f"reshard_after_forward of call {k}", flag)
    blocking = check_flag("blocking", blocking)
    _check_prefetch(units, forward_prefetch, backward_prefetch)
    owner = [-1] * profile.n
    root_call = None
    for k, modules in enumerate(units):
        if modules == [""]:
            root_call = k
            continue
        for module in modules:
            if not any(_within(name, module) for name in profile.names):
                raise ValueError(f"fully_shard call {k}: module {module!r} holds no tensor of the profile")
        for i, name in enumerate(profile.names):
            if any(_within(name, module) for module in modules):
                owner[i] = k
    bounds = [0] + [i for i in range(1, profile.n) if owner[i] != owner[i - 1]] + [profile.n]
    labels = [owner[b] for b in bounds[:-1]]
    has_root = labels[0] == -1 and labels[-1] == -1 and len(labels) >= 2
    root_reshard = root_call is not None and bool(reshard_after_forward[root_call])
    if has_root and root_reshard:
        raise ValueError("the root owns tensors before and after the other units and is resharded after the "
                         "forward; fusionopt models a root kept whole (MODEL.md section 8.2)")
    flags = [root_reshard if label == -1 else bool(reshard_after_forward[label]) for label in labels]
    ahead = 0 if blocking else 1
    d_f = max([fsdp2_forward_prefetch(blocking)] + [len(t) + ahead for t in forward_prefetch.values()])
    d_b = max([FSDP2_MIN_BACKWARD_PREFETCH] + [len(t) for t in backward_prefetch.values()])
    names = [ROOT if label == -1 else ",".join(units[label]) for label in labels]
    return ShardedPlan(bounds, flags, forward_prefetch=d_f, backward_prefetch=d_b, root=has_root, names=names)


@dataclass(frozen=True)
class FSDP2Advice:
    """The FSDP2 settings to use (:func:`fsdp2_advice`): ``settings``; ``defaults``: True when
    they are FSDP2's defaults (``fully_shard`` on each block, then on the model), the best
    plan searched being no faster within the cap; the defaults' ``T`` (seconds), peak memory
    (bytes) and whether they fit the cap; ``lower_bound`` (seconds) of the search's space,
    None when it found no plan within the cap; ``atoms``: what the units were made of
    (``"block"``, ``"module"``, ...)."""

    settings: FSDP2Settings
    defaults: bool
    default_iteration_time: float
    default_peak_memory: int
    default_feasible: bool
    lower_bound: float | None
    atoms: str

    def to_dict(self) -> dict[str, Any]:
        return {**self.settings.to_dict(), "defaults": self.defaults,
                "default_iteration_time": self.default_iteration_time,
                "default_peak_memory": self.default_peak_memory, "default_feasible": self.default_feasible,
                "lower_bound": self.lower_bound, "atoms": self.atoms}


def fsdp2_advice(problem: Problem, atoms: str | None = None, *, min_gain: float = MIN_GAIN) -> FSDP2Advice:
    """FSDP2's calls for the best plan ``sharded-opt`` finds over :func:`fsdp2_atoms` with
    the least prefetch depths FSDP2 can set, judged by the plan FSDP2 builds from them
    (:func:`fsdp2_settings`); FSDP2's defaults instead where they fit the memory cap and the
    plan is not at least ``min_gain`` faster (a fraction of the defaults' ``T``;
    :data:`fusionopt.advice.MIN_GAIN`). :class:`OverMemoryCap` where neither fits
    the cap.

    ``atoms``: ``"block"`` (units of whole blocks where the model has blocks), ``"module"``
    (any run of modules: a larger space, searched more slowly), or None: whole blocks, then
    modules where no plan of whole blocks fits the cap.

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import FullySharded
    >>> p = Profile.from_arrays([4e6] * 4, [1e-3] * 4, [2e-3] * 4, names=["a", "b", "c", "d"])
    >>> advice = fsdp2_advice(Problem(p, pattern=FullySharded(AlphaBeta(1e-3, 1e-9), AlphaBeta(1e-3, 1e-9))))
    >>> advice.settings.units, advice.defaults                  # names without dots: the root alone
    ([['']], True)
    """
    min_gain = check_min_gain(min_gain)
    if atoms is None:
        try:
            return fsdp2_advice(problem, "block", min_gain=min_gain)
        except OverMemoryCap:
            return fsdp2_advice(problem, "module", min_gain=min_gain)
    if atoms not in ("block", "module"):
        raise ValueError(f"atoms must be 'block', 'module' or None, got {atoms!r}")
    cap = problem.pattern.memory_cap
    default = solve(problem, "fsdp2")
    default_fits = default.status != Status.INFEASIBLE
    bounds, root = fsdp2_atoms(problem.profile, atoms)
    settings, lower_bound = None, None
    try:
        found = solve(problem, "sharded-opt", atoms=bounds,
                      min_forward_prefetch=fsdp2_least_forward_prefetch(problem),
                      min_backward_prefetch=FSDP2_MIN_BACKWARD_PREFETCH, root=root)
    except ValueError as exc:                             # its options are sound: only a cap stops it
        if cap is None:
            raise
        if not default_fits:
            raise OverMemoryCap(f"{exc} (units of whole {atoms}s); FSDP2's defaults peak at "
                                f"{default.timeline.peak_memory:.6g} B") from None
    else:
        settings, lower_bound = fsdp2_settings(problem, found.plan), found.lower_bound
        if cap is not None and settings.peak_memory > cap:
            settings = None                               # what FSDP2 builds from the plan needs more
    defaults = False
    if default_fits and (settings is None or not gains_enough(settings.iteration_time, default.iteration_time,
                                                               min_gain)):
        try:
            settings, defaults = fsdp2_settings(problem, default.plan), True
        except ValueError:                                # blocks FSDP2's calls cannot name: keep the plan
            pass
    if settings is None:
        raise OverMemoryCap(f"FSDP2: no plan searched fits the memory cap of {cap:.6g} B as FSDP2 builds it")
    return FSDP2Advice(settings, defaults, default.iteration_time, int(default.timeline.peak_memory), default_fits,
                       lower_bound, atoms)


@dataclass(frozen=True)
class GridSetting:
    """A framework's knobs found on a grid: ``options`` (the method's keyword options, in the
    framework's units), ``method`` (the fusionopt method that runs them), ``iteration_time``
    (seconds) and ``peak_memory`` (bytes; None where the pattern models no memory) of the
    best setting within the memory cap, and the same for the framework's defaults;
    ``tried``: how many settings were judged. ``unset``: True when the advice is to leave
    the grid's knobs unset, the defaults fitting the cap and no setting tried being at least
    ``min_gain`` faster (:func:`fusionopt.advice.gains_enough`); ``options`` then holds only the fixed
    ones (Megatron-LM's ``data_parallel_size``)."""

    method: str
    options: dict[str, Any]
    iteration_time: float
    peak_memory: int | None
    default_iteration_time: float
    default_peak_memory: int | None
    default_feasible: bool
    tried: int
    grid: dict[str, list[Any]] = field(default_factory=dict)
    unset: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


ZERO3_GRID = {
    "prefetch_bucket_size": [0, 5_000_000, 20_000_000, 50_000_000, 200_000_000],
    "max_live_parameters": [20_000_000, 100_000_000, 1_000_000_000],
    "max_reuse_distance": [0, 1_000_000_000],
    "reduce_bucket_size": [20_000_000, 100_000_000, 500_000_000],
}
"""DeepSpeed ZeRO-3 settings tried (elements); the defaults are 5e7, 1e9, 1e9 and 5e8."""

ZERO2_BUCKETS = [5_000_000, 20_000_000, 100_000_000, 500_000_000]
"""DeepSpeed ZeRO-2 ``reduce_bucket_size`` values tried (elements; default 5e8)."""

ZERO2_GRID = {"overlap_comm": [False, True], "reduce_bucket_size": ZERO2_BUCKETS}
"""DeepSpeed ZeRO-2 settings tried: every bucket size without ``overlap_comm`` (off by default
for stage 2), then with it; on a tie the first tried is kept, so ``overlap_comm`` is advised
only where it is faster than every setting without it."""

MEGATRON_BUCKETS = [1_000_000, 4_000_000, 10_000_000, 20_000_000, 40_000_000, 100_000_000]
"""Megatron-LM ``bucket_size`` values tried (parameters; default ``max(4e7, 1e6 x dp)``)."""


def _grid(problem: Problem, method: str, grid: dict[str, list[Any]], fixed: dict[str, Any] | None = None, *,
          min_gain: float = MIN_GAIN) -> GridSetting:
    """The fastest setting of ``grid`` within the memory cap (ties: the first, the grid's
    order), or ``method``'s defaults where they fit and it is not at least ``min_gain``
    faster; beside the defaults. :class:`OverMemoryCap` where neither fits."""
    min_gain = check_min_gain(min_gain)
    fixed = dict(fixed or {})
    default = solve(problem, method, **fixed)
    default_fits = default.status != Status.INFEASIBLE
    best: tuple[float, dict[str, Any], Result] | None = None
    least_peak = default.timeline.peak_memory
    keys = list(grid)
    tried = 0
    for values in _product([grid[k] for k in keys]):
        options = dict(zip(keys, values))
        result = solve(problem, method, **fixed, **options)
        tried += 1
        if result.status == Status.INFEASIBLE:
            least_peak = min(least_peak, result.timeline.peak_memory)
            continue
        if best is None or result.iteration_time < best[0] * (1 - TIE):
            best = (result.iteration_time, options, result)
    default_peak = None if default.timeline.peak_memory is None else int(default.timeline.peak_memory)
    if default_fits and (best is None or not gains_enough(best[0], default.iteration_time, min_gain)):
        return GridSetting(method, fixed, default.iteration_time, default_peak, default.iteration_time,
                           default_peak, True, tried, grid, unset=True)
    if best is None:
        cap = problem.pattern.memory_cap
        raise OverMemoryCap(f"{method}: no setting tried fits the memory cap of {cap:.6g} B; the least peak is "
                            f"{least_peak:.6g} B")
    _, options, result = best
    peak = None if result.timeline.peak_memory is None else int(result.timeline.peak_memory)
    return GridSetting(method, {**fixed, **options}, result.iteration_time, peak, default.iteration_time,
                       default_peak, default_fits, tried, grid)


def _product(lists: list[list[Any]]):
    if not lists:
        yield ()
        return
    for head in lists[0]:
        for rest in _product(lists[1:]):
            yield (head, *rest)


def zero3_settings(problem: Problem, *, min_gain: float = MIN_GAIN) -> GridSetting:
    """DeepSpeed ZeRO-3's ``stage3_prefetch_bucket_size``, ``stage3_max_reuse_distance`` and
    ``reduce_bucket_size`` (:data:`ZERO3_GRID`) judged with :func:`~fusionopt.solvers.baselines._zero3.zero3`:
    the fastest within the cap, or the defaults where they fit and it is not at least
    ``min_gain`` faster."""
    return _grid(problem, "zero3", ZERO3_GRID, min_gain=min_gain)


def zero2_settings(problem: Problem, *, data_parallel_size: int | None = None,
                   min_gain: float = MIN_GAIN) -> tuple[GridSetting, GridSetting]:
    """On a decoupled problem: DeepSpeed ZeRO-2's ``reduce_bucket_size`` and ``overlap_comm``
    (:data:`ZERO2_GRID`, judged with :func:`~fusionopt.solvers.baselines._zero2.zero2`, sync
    ``"barrier"``, its only mode) and Megatron-LM's ``bucket_size``
    (:data:`MEGATRON_BUCKETS`; ``megatron`` under barrier sync, ``megatron-overlap`` with
    ``overlap_param_gather`` under layerwise sync), each the fastest beside the defaults, or
    the defaults (``unset``) where none is at least ``min_gain`` faster: Megatron-LM's own
    ``max(4e7, 1e6 x dp)`` often is.
    The decoupled pattern models no memory: ``peak_memory`` is None. Under layerwise sync
    ZeRO-2 is not judged (None)."""
    fixed = {} if data_parallel_size is None else {"data_parallel_size": data_parallel_size}
    if not isinstance(problem, Problem):
        raise ValueError(f"zero2_settings takes a decoupled Problem, got {type(problem).__name__}")
    layerwise = problem.sync == "layerwise"
    zero2 = None if layerwise else _grid(problem, "zero2", ZERO2_GRID, min_gain=min_gain)
    megatron = _grid(problem, "megatron-overlap" if layerwise else "megatron", {"bucket_size": MEGATRON_BUCKETS}, fixed,
                     min_gain=min_gain)
    return zero2, megatron


__all__ = ["FSDP2Advice", "FSDP2Settings", "GridSetting", "OverMemoryCap", "fsdp2_advice", "fsdp2_atoms",
           "fsdp2_settings", "fsdp2_least_forward_prefetch", "fsdp2_plan_of", "unit_modules", "zero2_settings", "zero3_settings"]
