"""Apply ``fusionopt advise`` to a real model: PyTorch DDP or FSDP2 built as the advice says,
or as the framework's defaults, so the two can be measured side by side.

::

    fusionopt advise --profile mine.json --network 10gbe --workers 64 --json > advice.json
    ddp = apply_advice(model, "advice.json", framework="ddp")        # after init_process_group

    fusionopt advise --profile mine.json --pattern fsdp --json > fsdp.json
    model = apply_advice(model, "fsdp.json", framework="fsdp2")

* :func:`apply_advice`, ``"ddp"``: ``DistributedDataParallel(model, **advice["ddp"]["arguments"])``
  (``bucket_cap_mb_list`` reproducing the plan's buckets, or ``bucket_cap_mb``, or nothing
  where torch's default layout is as fast). ``"fsdp2"``: ``fully_shard`` on each advised
  unit, innermost first and the model (the root, ``""``) last, with its
  ``reshard_after_forward``, then the advised ``set_modules_to_forward_prefetch`` /
  ``set_modules_to_backward_prefetch`` lists. Where the advice sends buckets in encodings
  (``wire``, and the tensors kept exact, ``exact_names``) or some through torch's
  ``powerSGD_hook`` (``compressor``, ``through_names``), DDP gets
  :func:`~fusionopt.integrations.wire_comm_hook` with them (on ``link`` where given); where
  it sends every bucket through that hook (``powersgd``), torch's hook with its
  ``PowerSGDState`` (:func:`~fusionopt.integrations.powersgd_comm_hook` on ``link``).
* :func:`apply_defaults`: what the advice is compared with: ``DistributedDataParallel`` with
  torch's default arguments; FSDP2 as fusionopt models its defaults
  (:func:`fusionopt.solvers.baselines._fsdp2.fsdp2`): ``fully_shard`` on each block
  (:func:`fusionopt.integrations.fsdp2_blocks`), then on the model, every
  other argument left at torch's default.

Both take ``link``, an :class:`~fusionopt.integrations.EmulatedLink`: DDP's
buckets, or FSDP2's all-gathers and reduce-scatters, are then held on it (results measured
so must say "emulated link").

An advice names no parameters, so what can be compared with the model is: the number of
trainable parameter tensors (the DDP buckets' tensor indices, the FSDP2 plan's last bound),
the advised unit modules (each must be a module of the model), and the number of tensors
each FSDP2 unit holds. Bad input gets one ``ValueError`` line naming it. Checked against
torch 2.13.0 (CPU, gloo).
"""

from __future__ import annotations

import inspect
import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Mapping

from fusionopt.integrations._torch_import import require_torch
from fusionopt.integrations._emulated_link import EmulatedLink, ddp_comm_hook, emulate_fsdp2
from fusionopt.integrations._powersgd_link import powersgd_comm_hook
from fusionopt.integrations._wire_hook import wire_comm_hook
from fusionopt.integrations._fsdp_record import fsdp2_blocks
from fusionopt.solvers.baselines._ddp import bucket_caps

FRAMEWORKS = ("ddp", "fsdp2")
DDP_ARGUMENTS = ("bucket_cap_mb_list", "bucket_cap_mb", "find_unused_parameters", "static_graph")
"""The ``DistributedDataParallel`` arguments an advice may set."""
_LAYOUT = ("bucket_cap_mb", "bucket_cap_mb_list")

# The top-level keys of each `fusionopt advise --json` document, by the --pattern that prints it.
_PATTERN_SECTIONS = {"allreduce": ("ddp", "horovod"), "fsdp": ("fsdp2", "zero3"), "zero2": ("zero2", "megatron")}
_PATTERN_OF = {"ddp": "allreduce", "fsdp2": "fsdp"}
_ROOT = "(root)"


def read_advice(advice: Mapping[str, Any] | str | os.PathLike) -> dict[str, Any]:
    """The document ``fusionopt advise --json`` prints, given as that dict or the path of a
    file holding it; ``ValueError`` naming the file where it is none."""
    where = "the advice"
    if isinstance(advice, (str, os.PathLike)):
        path = Path(advice)
        where = f"advice file {str(path)!r}"
        try:
            text = path.read_text()
        except OSError as exc:
            raise ValueError(f"{where}: {exc.strerror or exc}") from None
        try:
            advice = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where} is not JSON ({exc.msg}, line {exc.lineno}): give what "
                             "`fusionopt advise --json` prints") from None
    if not isinstance(advice, Mapping):
        raise ValueError(f"{where} is not a `fusionopt advise --json` document (a JSON object), "
                         f"got {type(advice).__name__}")
    if not any(key in advice for keys in _PATTERN_SECTIONS.values() for key in keys):
        keys = ", ".join(map(repr, list(advice)[:4])) or "none"
        raise ValueError(f"{where} is not a `fusionopt advise --json` document: no 'ddp' or 'fsdp2' section "
                         f"(its keys: {keys})")
    return dict(advice)


def _section(document: Mapping[str, Any], framework: str) -> dict[str, Any]:
    """The framework's section of an advice; ``ValueError`` naming the --pattern to rerun with."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}: choose 'ddp' or 'fsdp2'")
    section = document.get(framework)
    if section is None:
        unmet = document.get("over_memory_cap", {}).get(framework)
        if unmet:
            raise ValueError(f"the advice has no {framework} setting: none fits its memory cap ({unmet})")
        made_by = next((p for p, keys in _PATTERN_SECTIONS.items() if any(k in document for k in keys)), None)
        flag = "" if _PATTERN_OF[framework] == "allreduce" else f" --pattern {_PATTERN_OF[framework]}"
        raise ValueError(f"the advice has no {framework} section (it is `fusionopt advise --pattern {made_by}`'s): "
                         f"rerun `fusionopt advise{flag} --json` for {framework}")
    if not isinstance(section, Mapping):
        raise ValueError(f"the advice's {framework} section is not a JSON object")
    needed = ("arguments", "buckets") if framework == "ddp" else \
        ("units", "reshard_after_forward", "forward_prefetch", "backward_prefetch", "plan")
    missing = [key for key in needed if key not in section]
    if missing:
        raise ValueError(f"the advice's {framework} section has no {missing[0]!r}: give what "
                         "`fusionopt advise --json` prints")
    return dict(section)


def _trainable(model: Any) -> list[tuple[str, Any]]:
    return [(name, p) for name, p in model.named_parameters() if p.requires_grad]


def _check_link(link: Any) -> None:
    if link is not None and not isinstance(link, EmulatedLink):
        raise ValueError(f"link must be an EmulatedLink (fusionopt.integrations._emulated_link), "
                         f"got {type(link).__name__}")


def _check_distributed(dist: Any) -> None:
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError("DDP and FSDP2 need an initialised torch.distributed process group "
                         "(torch.distributed.init_process_group)")


def _powersgd_state(doc: Any, process_group: Any) -> Any:
    """torch's ``PowerSGDState`` of an advice's PowerSGD (``"powersgd"`` or ``"compressor"``)."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    if not isinstance(doc, Mapping):
        raise ValueError("the advice's PowerSGD hook is not a JSON object: give what `fusionopt advise --json` prints")
    kinds = {"rank": "an integer >= 1", "min_compression_rate": "a number >= 0", "start_iter": "an integer >= 0",
             "use_error_feedback": "true or false", "warm_start": "true or false"}
    for key, kind in kinds.items():
        if key not in doc:
            raise ValueError(f"the advice's PowerSGD hook has no {key!r}: give what `fusionopt advise --json` prints")
        value = doc[key]
        good = {"an integer >= 1": isinstance(value, int) and not isinstance(value, bool) and value >= 1,
                "an integer >= 0": isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                "a number >= 0": _number(value) and value >= 0,
                "true or false": isinstance(value, bool)}[kind]
        if not good:
            raise ValueError(f"the advice's PowerSGD {key} must be {kind}, got {value!r}")
    return psgd.PowerSGDState(process_group=process_group, matrix_approximation_rank=doc["rank"],
                              min_compression_rate=float(doc["min_compression_rate"]),
                              start_powerSGD_iter=doc["start_iter"], use_error_feedback=doc["use_error_feedback"],
                              warm_start=doc["warm_start"])


def _number(value: Any) -> bool:
    """Whether ``value`` is a finite JSON number (not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _bucket_groups(section: Mapping[str, Any], link: EmulatedLink | None, process_group: Any) -> list[Any]:
    """On a link, one process group of the same ranks per advised bucket for the buckets
    through ``powerSGD_hook`` (:mod:`fusionopt.integrations._powersgd_link`); none without."""
    if link is None:
        return []
    import torch.distributed as dist

    ranks = None if process_group is None else dist.get_process_group_ranks(process_group)
    return [dist.new_group(ranks=ranks) for _ in section["buckets"]]


def _hook_parameters(model: Any, section: Mapping[str, Any]) -> tuple[list[Any], list[Any]]:
    """The parameters the advice keeps exact (``exact_names``) and sends through
    ``powerSGD_hook`` (``through_names``), each name checked against the model."""
    parameters = dict(_trainable(model))
    found = []
    for says, key in (("keeps {!r} exact", "exact_names"), ("sends {!r} through powerSGD_hook", "through_names")):
        names = list(section.get(key) or [])
        missing = [name for name in names if name not in parameters]
        if missing:
            raise ValueError(f"the advice {says.format(missing[0])}, which is no trainable parameter of the model")
        found.append([parameters[name] for name in names])
    return found[0], found[1]


def _advised_hook(section: Mapping[str, Any], exact: list[Any], through: list[Any], link: EmulatedLink | None,
                  process_group: Any) -> tuple[Any, Any]:
    """The advice's comm hook and the state to register it with: torch's ``powerSGD_hook``
    where the advice sends every bucket through it (``"powersgd"``); where it sends buckets
    in encodings (``wire``, the ``exact`` parameters in fp32) or the ``through`` parameters'
    buckets through the hook (``compressor``), :func:`~fusionopt.integrations.wire_comm_hook`;
    (None, None) where it registers none."""
    if section.get("powersgd") is not None:
        state = _powersgd_state(section["powersgd"], process_group)
        return powersgd_comm_hook(state, link, _bucket_groups(section, link, process_group)), state
    wire = section.get("wire")
    if section.get("hook") is None or (wire is None and not through):
        return None, None
    state = _powersgd_state(section.get("compressor"), process_group) if through else None
    hook = wire_comm_hook([tuple(step) for step in (wire or [(0, "fp32")])], exact=exact, link=link, powersgd=state,
                          through=through, groups=_bucket_groups(section, link, process_group) if through else ())
    return hook, process_group


def _ddp(model: Any, arguments: Mapping[str, Any], link: EmulatedLink | None, process_group: Any,
         options: Mapping[str, Any], *, advised: bool, hook: Callable[[], tuple[Any, Any]] | None = None) -> Any:
    """DDP with ``arguments`` and ``options``; ``advised``: the arguments are an advice's, which
    decides the bucket layout (no cap in ``options`` then); ``hook``: makes the advice's comm
    hook and its state (:func:`_advised_hook`) once the arguments are checked."""
    torch = require_torch()
    import torch.distributed as dist

    accepted = inspect.signature(torch.nn.parallel.DistributedDataParallel.__init__).parameters
    for key in arguments:
        if key not in accepted:
            raise ValueError(f"torch {torch.__version__}'s DistributedDataParallel has no {key}= argument, which "
                             f"the advice sets: use a torch that has it (fusionopt checked 2.13)")
    if "process_group" in options:
        raise ValueError("process_group= goes to apply_advice or apply_defaults itself, not among DDP's arguments")
    for key in options:
        if key in arguments or (advised and key in _LAYOUT):
            raise ValueError(f"{key}= overrides the advice's bucket layout: edit the advice, or build "
                             "DistributedDataParallel yourself")
    _check_distributed(dist)
    comm_hook, state = (None, None) if hook is None else hook()
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=process_group, **arguments, **options)
    if comm_hook is not None:
        ddp.register_comm_hook(state, comm_hook)
    elif link is not None:
        ddp.register_comm_hook(process_group, ddp_comm_hook(link))
    return ddp


def _check_ddp_model(model: Any, section: Mapping[str, Any]) -> dict[str, Any]:
    """The advice's DDP arguments, after checking them and the model against the advice."""
    arguments = section["arguments"]
    if not isinstance(arguments, Mapping):
        raise ValueError("the advice's ddp arguments are not a JSON object")
    unknown = [key for key in arguments if key not in DDP_ARGUMENTS]
    if unknown:
        raise ValueError(f"the advice's ddp arguments hold {unknown[0]!r}, which fusionopt does not advise "
                         f"(it advises {', '.join(DDP_ARGUMENTS)})")
    try:
        bucket_caps(arguments.get("bucket_cap_mb"), arguments.get("bucket_cap_mb_list"))
    except ValueError as exc:
        raise ValueError(f"the advice's ddp arguments: {exc}") from None
    for key, value in arguments.items():
        if key not in _LAYOUT and not isinstance(value, bool):
            raise ValueError(f"the advice's ddp {key} must be true or false, got {value!r}")
    buckets = section["buckets"]
    indices = [i for b in buckets for i in b] if isinstance(buckets, list) and all(
        isinstance(b, list) and b for b in buckets) else None
    if indices is None or not all(isinstance(i, int) and not isinstance(i, bool) for i in indices):
        raise ValueError(f"the advice's ddp buckets must be lists of parameter indices (integers), got {buckets!r}")
    advised = sorted({i for bucket in buckets for i in bucket})
    mine = len(_trainable(model))
    if advised != list(range(len(advised))) or len(advised) != mine:
        raise ValueError(f"the advice is for a model of {len(advised)} trainable parameter tensors; this model has "
                         f"{mine}: advise on this model's profile")
    return dict(arguments)


def _unit_tensors(model: Any, modules: list[str]) -> int:
    """How many trainable tensors lie under ``modules``."""
    return sum(1 for name, _ in _trainable(model) if any(name.startswith(m + ".") for m in modules))


def _check_fsdp2_model(model: Any, section: Mapping[str, Any]) -> tuple[list[list[str]], list[bool]]:
    """The advice's units and flags, after checking them and the model against the advice."""
    units, reshard = section["units"], section["reshard_after_forward"]
    if (not isinstance(units, list) or not units or not isinstance(reshard, list) or len(reshard) != len(units)
            or not all(isinstance(u, list) and u and all(isinstance(m, str) for m in u) for u in units)
            or not all(isinstance(r, bool) for r in reshard)):
        raise ValueError("the advice's fsdp2 units and reshard_after_forward are not lists of module names and flags "
                         "of one length: give what `fusionopt advise --pattern fsdp --json` prints")
    if units[-1] != [""]:
        raise ValueError("the advice's last fsdp2 unit is not the model itself ([\"\"]): give what "
                         "`fusionopt advise --pattern fsdp --json` prints")
    modules = dict(model.named_modules())
    named = [m for unit in units for m in unit] + [t for lists in (section["forward_prefetch"],
                                                               section["backward_prefetch"])
                                                  for key, targets in lists.items() for t in [key, *targets]]
    for name in named:
        if name not in modules:
            raise ValueError(f"the advice's fsdp2 unit {name!r} is not a module of this model: advise on this "
                             "model's profile")
    plan = section["plan"]
    bounds, labels = list(plan.get("bounds", [])), list(plan.get("names", []))
    mine = len(_trainable(model))
    if not bounds or bounds[-1] != mine:
        raise ValueError(f"the advice is for a model of {bounds[-1] if bounds else '?'} trainable parameter tensors; "
                         f"this model has {mine}: advise on this model's profile")
    for label, first, stop in zip(labels, bounds, bounds[1:]):
        if label != _ROOT and _unit_tensors(model, label.split(",")) != stop - first:
            raise ValueError(f"the advice's fsdp2 unit {label!r} holds {stop - first} parameter tensors; in this model "
                             f"it holds {_unit_tensors(model, label.split(','))}: advise on this model's profile")
    return [list(u) for u in units], [bool(r) for r in reshard]


def _mesh(process_group: Any, model: Any) -> Any:
    if process_group is None:
        return None
    from torch.distributed.device_mesh import DeviceMesh

    device = next(model.parameters()).device.type
    return DeviceMesh.from_group(process_group, device)


def _fsdp2(model: Any, section: Mapping[str, Any], link: EmulatedLink | None, process_group: Any,
           options: Mapping[str, Any]) -> Any:
    require_torch()
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule, fully_shard

    units, reshard = _check_fsdp2_model(model, section)
    for key in ("reshard_after_forward", "mesh"):
        if key in options:
            raise ValueError(f"{key}= is set by {'the advice' if key == 'reshard_after_forward' else 'process_group'}"
                             ": give it once")
    separate = bool(section.get("separate_reduce_scatter_group", False))
    if separate and not hasattr(FSDPModule, "set_separate_reduce_scatter_group"):
        raise ValueError(f"torch {torch.__version__}'s FSDP2 has no set_separate_reduce_scatter_group, which the "
                         "advice sets: use a torch that has it (fusionopt checked 2.13)")
    _check_distributed(dist)
    mesh = _mesh(process_group, model)
    get = model.get_submodule
    # Innermost first: a unit inside another must be wrapped before it; the root last.
    calls = sorted(zip(units, reshard), key=lambda call: -min(m.count(".") + 1 if m else 0 for m in call[0]))
    for modules, flag in calls:
        target = get(modules[0]) if len(modules) == 1 else [get(m) for m in modules]
        fully_shard(target, mesh=mesh, reshard_after_forward=flag, **options)
    for lists, setter in ((section["forward_prefetch"], "set_modules_to_forward_prefetch"),
                          (section["backward_prefetch"], "set_modules_to_backward_prefetch")):
        for unit, targets in lists.items():
            getattr(get(unit), setter)([get(t) for t in targets])
    if separate:
        model.set_separate_reduce_scatter_group(True)
    if link is not None:
        emulate_fsdp2(model, link)
    return model


def apply_advice(model: Any, advice: Mapping[str, Any] | str | os.PathLike, *, framework: str = "ddp",
                 link: EmulatedLink | None = None, process_group: Any = None, **kwargs: Any) -> Any:
    """``model`` under ``framework`` (``"ddp"`` or ``"fsdp2"``) as ``advice`` says (module
    docstring). ``advice``: what ``fusionopt advise --json`` prints, as a dict or a file path.

    Returns the ``DistributedDataParallel`` wrapper (``"ddp"``) or ``model`` itself, its
    units wrapped in place (``"fsdp2"``). ``link``: hold the communication on an
    :class:`~fusionopt.integrations.EmulatedLink`. ``process_group``: DDP's
    group, or FSDP2's (as a one-dimensional device mesh); the default group by default.
    ``kwargs`` go to ``DistributedDataParallel`` or to every ``fully_shard`` call; one that
    the advice sets is refused. Needs an initialised ``torch.distributed`` process group.

    >>> apply_advice(None, {"fsdp2": {}}, framework="ddp")
    Traceback (most recent call last):
    ...
    ValueError: the advice has no ddp section (it is `fusionopt advise --pattern fsdp`'s): rerun `fusionopt advise --json` for ddp
    """
    document = read_advice(advice)
    section = _section(document, framework)
    _check_link(link)
    if framework == "ddp":
        arguments = _check_ddp_model(model, section)
        exact, through = _hook_parameters(model, section)
        return _ddp(model, arguments, link, process_group, kwargs, advised=True,
                    hook=lambda: _advised_hook(section, exact, through, link, process_group))
    return _fsdp2(model, section, link, process_group, kwargs)


def apply_defaults(model: Any, framework: str, *, link: EmulatedLink | None = None, process_group: Any = None,
                   **kwargs: Any) -> Any:
    """``model`` under ``framework``'s defaults, the setting an advice is compared with (module
    docstring): ``DistributedDataParallel(model, **kwargs)``, or ``fully_shard`` on each block
    and then on ``model`` (returned, wrapped in place). ``link``, ``process_group`` and
    ``kwargs`` as for :func:`apply_advice`."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"unknown framework {framework!r}: choose 'ddp' or 'fsdp2'")
    _check_link(link)
    if framework == "ddp":
        return _ddp(model, {}, link, process_group, kwargs, advised=False)
    require_torch()
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    if "mesh" in kwargs:
        raise ValueError("mesh= is set by process_group: give it once")
    _check_distributed(dist)
    mesh = _mesh(process_group, model)
    for _, block in fsdp2_blocks(model):
        fully_shard(block, mesh=mesh, **kwargs)
    fully_shard(model, mesh=mesh, **kwargs)
    if link is not None:
        emulate_fsdp2(model, link)
    return model


__all__ = ["DDP_ARGUMENTS", "FRAMEWORKS", "apply_advice", "apply_defaults", "read_advice"]
