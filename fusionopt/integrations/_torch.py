"""Measure a :class:`~fusionopt.model.Profile` from a PyTorch model.

:func:`profile_model` runs training steps of a ``torch.nn.Module`` on CPU or CUDA and times
each trainable parameter tensor's forward and backward (MODEL.md section 1). It needs
PyTorch 2.1 or later (``pip install 'fusionopt[torch]'``); torch is imported only when the
function is called.

How the times are taken
-----------------------
* **Forward order** is the order in which the parameters are first used: one untimed step
  runs under a ``torch.overrides.TorchFunctionMode`` that notes the first torch call taking
  each parameter as an argument; reading its metadata (``dtype``, ``shape``, ``size()``, ...)
  is not a use. A parameter that no call takes directly (one computed
  inside a custom extension, say) is placed where its owning module is first called.
  Tensors of one call keep their registration order (``weight`` before ``bias``).
* **Backward**: a ``register_post_accumulate_grad_hook`` on each parameter stamps the
  moment its gradient is accumulated (ready for communication). Ready times, in seconds
  from the start of ``loss.backward()``, become backward times by the rule of
  :mod:`fusionopt.integrations._attribution`: each tensor gets the gap from the ready
  event before it (the first from the start of the backward), and if autograd did not
  finish the gradients in reverse forward order, a tensor counts as ready once every
  tensor after it is (never earlier than measured), and no earlier than the tensors of its
  own module whose hooks fired before it (so an LSTM layer's four gradients tie, in the
  order autograd gave them). The measured ready order is kept in
  ``metadata["ready_order"]``; the profile's :attr:`~fusionopt.model.Profile.ready_order`
  is the hooks' order (of the first, untimed step) among tensors whose ready times tie (a
  layer's weight and bias: a convolution's weight comes first) and the order of the ready
  times elsewhere. Registration order (``named_parameters()``), dtypes and shapes are kept
  too.
* **Forward**: forward pre- and post-hooks on every module that owns trainable parameters
  directly time each call. By default (``forward="span"``) a call's time is its span to the
  next such call's start (the last one's to the start of the backward), so parameter-free
  modules and functions (activations, pooling, the loss) count for the layer before them and
  ``F`` is the measured forward, as the Kineto reader measures it; ``forward="exclusive"``
  takes a call's time less that of the hooked modules called inside it, leaving the rest out
  of ``F``. The time goes to the module's last parameter in forward order (MODEL.md: a layer
  puts its time on one tensor); ``metadata["forward_step_s"]`` holds the measured forward
  and loss together.
* Each time is the median over ``steps`` timed steps, after ``warmup`` untimed ones. CPU
  steps are timed with ``time.perf_counter``; CUDA steps with ``torch.cuda.Event`` s recorded
  in the hooks and read after ``torch.cuda.synchronize``, so the times are when the GPU did
  the work.
* Gradients are set to ``None`` before each step (as ``optimizer.zero_grad()`` does), so
  every step's gradient accumulation is the first. The optimiser update is not measured:
  update times are 0.

Frozen parameters (``requires_grad=False``) are left out. A trainable parameter that gets no
gradient (not used by the forward, or not reaching the loss) is an error naming it, as in
DDP without ``find_unused_parameters``: freeze it, or profile a model that uses it. Tied
parameters (one tensor under two names) count once, under the name ``named_parameters()``
gives first.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import math
import platform
import time
from typing import Any, Callable, Mapping

import numpy as np

from fusionopt.integrations import _attribution
from fusionopt.integrations._torch_import import require_torch
from fusionopt.model._profile import STEP_PARTS, Profile



def _count(label: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{label} must be an integer >= {minimum}, got {value!r}")
    return int(value)


# Torch calls that read a tensor's metadata, not its values: a parameter whose ``dtype`` a
# module checks before computing (``nn.MultiheadAttention`` reads ``in_proj_bias.dtype``
# first) is not used there. ``__get__`` is every attribute read (``dtype``, ``shape``, ...).
_METADATA_CALLS = frozenset({
    "__get__", "size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset",
    "element_size", "is_contiguous", "is_floating_point", "is_complex", "get_device",
    "data_ptr", "__len__", "__hash__", "__format__", "__repr__",
})


def _leaves(value: Any) -> list[Any]:
    """The non-container leaves of nested tuples, lists and dicts."""
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _leaves(item)]
    if isinstance(value, Mapping):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    return [value]


def _to_device(value: Any, torch: Any, device: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, tuple):
        return tuple(_to_device(v, torch, device) for v in value)
    if isinstance(value, list):
        return [_to_device(v, torch, device) for v in value]
    if isinstance(value, Mapping):
        return {k: _to_device(v, torch, device) for k, v in value.items()}
    return value


def _batch_size(inputs: Any, torch: Any) -> int | None:
    """The leading dimension shared by every input tensor of rank >= 1, if there is one."""
    leads = {int(t.shape[0]) for t in _leaves(inputs) if isinstance(t, torch.Tensor) and t.dim() >= 1}
    return leads.pop() if len(leads) == 1 else None


def default_loss(output: Any, torch: Any) -> Any:
    """The loss of a model's ``output`` when the user gives none: the sum of every floating
    tensor in it that requires a gradient."""
    parts = [t for t in _leaves(output)
             if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
    if not parts:
        raise ValueError("the model's output holds no floating-point tensor that requires grad: pass loss_fn")
    loss = parts[0].sum()
    for t in parts[1:]:
        loss = loss + t.sum()
    return loss


class _CpuClock:
    """Marks are ``time.perf_counter`` readings."""

    label = "time.perf_counter"

    def mark(self) -> float:
        return time.perf_counter()

    def sync(self) -> None:
        pass

    @staticmethod
    def seconds(origin: float, mark: float) -> float:
        return mark - origin


class _CudaClock:
    """Marks are CUDA events recorded on the current stream; read after a synchronize."""

    label = "torch.cuda.Event"

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch = torch
        self.device = device

    def mark(self) -> Any:
        event = self.torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def sync(self) -> None:
        self.torch.cuda.synchronize(self.device)

    @staticmethod
    def seconds(origin: Any, mark: Any) -> float:
        return origin.elapsed_time(mark) / 1e3   # milliseconds


def _step_parts(*, period: float, forward: float, backward: float, update_lump: float) -> dict[str, float]:
    """One timed step's parts in seconds, by the rule of the trace reader (no framework, no
    communication: nothing is exposed, nothing copied after the backward)."""
    host = max(0.0, period - forward - backward - update_lump)
    return {"period": period, "forward": forward, "backward": backward, "exposed": 0.0, "post_backward": 0.0,
            "update_lump": update_lump, "host_overhead": host}


def _phases(clock: Any, opened: Any, start: Any, backward_start: Any, end: Any, closed: Any) -> dict[str, float]:
    """A step's phases from its five marks, in seconds: the period, the forward with the loss,
    the backward, and the optimiser (``zero_grad`` before the forward, ``step`` after)."""
    return {"period": clock.seconds(opened, closed), "forward": clock.seconds(start, backward_start),
            "backward": clock.seconds(backward_start, end),
            "update_lump": clock.seconds(opened, start) + clock.seconds(end, closed)}


def profile_model(
    model: Any,
    example_inputs: Any,
    *,
    loss_fn: Callable[[Any], Any] | None = None,
    steps: int = 10,
    warmup: int = 3,
    device: Any = None,
    batch: int | None = None,
    name: str = "",
    forward: str = "span",
    optimizer: Any = None,
    reconcile: bool = True,
) -> Profile:
    """Measure the per-parameter forward and backward times of a PyTorch model, and the
    parts of its training step that belong to no parameter.

    Parameters
    ----------
    model : torch.nn.Module
        The model, in the mode it should be measured in (``model.train()`` for training).
        With ``device`` it is moved there (``Module.to`` moves it in place).
    example_inputs : Tensor, tuple or dict
        One batch: a tensor, a tuple or list of positional arguments, or a dict of keyword
        arguments for ``model``; tensors in it are moved to the device.
    loss_fn : callable, optional
        ``loss_fn(output) -> scalar tensor``; default: the sum of every floating-point
        tensor in the output that requires grad.
    steps : int
        Timed steps (``>= 1``); each time is the median over them.
    warmup : int
        Untimed steps before them (``>= 0``), after the one untimed step that finds the
        forward order and checks that every parameter gets a gradient.
    device : str or torch.device, optional
        ``"cpu"`` or a CUDA device; default: where the model's first trainable parameter is.
    batch : int, optional
        Batch size for the metadata; default: the leading dimension shared by every input
        tensor, when they share one.
    name : str
        The profile's name; default: the model's class name.
    forward : {"span", "exclusive"}
        A module call's forward time: its span to the next parameter-owning call's start (the
        last one's to the start of the loss's backward), so parameter-free modules and
        functions count for the layer before them and ``F`` is the measured forward with the
        loss (default); or its own duration less that of the calls nested in it.
    optimizer : torch.optim.Optimizer, optional
        The training job's optimiser over the model's parameters: each step then runs
        ``optimizer.zero_grad()`` before the forward and ``optimizer.step()`` after the
        backward, and their time is the profile's ``update_lump`` (the parameters and the
        optimiser's state are restored afterwards). Without it the update lump is 0.
    reconcile : bool
        Reconcile the hooked steps with the plain step (default). The hooks cost host time
        at every module call and every gradient; where the host, not the device, bounds the
        step (small layers, small batches, mixed precision on a fast GPU), the hooked steps
        run longer than the training step they measure. So ``steps`` more steps run after the
        hooked ones with no hook, timed at their phase boundaries only (the same five marks:
        step start, forward start, backward start, backward end, step end). The per-tensor
        forward times are then scaled by the plain forward's wall time over the hooked one's,
        the backward times by the plain backward's over the hooked one's, ``update_lump`` is
        the plain steps' optimiser time and ``host_overhead`` the rest of the plain step, so
        the profile's one-worker step is the plain step's median period while each tensor
        keeps its share of where the time goes. ``metadata["reconciled"]`` records both
        periods and the two scales; ``metadata["step_hooked"]`` the hooked steps' parts.
        ``False`` keeps the hooked times as measured.

    Returns
    -------
    Profile
        Trainable parameters in forward order: sizes ``numel * element_size`` bytes, forward
        and backward times in seconds, update times 0; the step parts as
        :func:`~fusionopt.integrations.profile_from_trace` measures them:
        ``update_lump`` (the optimiser, above), ``post_backward`` 0 (one process: no
        framework copies gradients back) and ``host_overhead`` (the step less the forward
        from the first layer's call to the backward, the backward to its last gradient, and
        the update lump: the call before the first layer, autograd's finish), each the median
        over the timed steps; ``metadata["step"]`` keeps them with the steps' ``periods``.
        ``dtype_bytes`` is the greatest
        common divisor of the parameters' element sizes. ``metadata`` holds ``source``,
        ``device``, ``device_name``, ``torch``, ``batch``, ``date`` (UTC), ``steps``,
        ``warmup``, ``timer``, ``ready_order`` (names in the order their gradients became
        ready, medians over the timed steps), ``ready_order_is_reverse_forward``,
        ``forward_step_s`` and ``backward_step_s`` (median wall time of the forward with
        the loss, and of the backward, in seconds).

    Raises
    ------
    ImportError
        Without PyTorch 2.1 or later.
    ValueError
        No trainable parameter; a trainable parameter that gets no gradient (named); a loss
        that is not a single number; a bad ``steps``, ``warmup`` or ``device``.

    Examples
    --------
    >>> import torch                                                       # doctest: +SKIP
    >>> from fusionopt.integrations import profile_model             # doctest: +SKIP
    >>> model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
    ...                             torch.nn.Linear(512, 10))              # doctest: +SKIP
    >>> p = profile_model(model, torch.randn(32, 256), steps=5)            # doctest: +SKIP
    >>> p.names, p.sizes.tolist()                                          # doctest: +SKIP
    (('0.weight', '0.bias', '2.weight', '2.bias'), [524288, 2048, 20480, 40])
    >>> [p.names[i] for i in p.ready_order]                                # doctest: +SKIP
    ['2.bias', '2.weight', '0.bias', '0.weight']
    """
    torch = require_torch()
    steps = _count("steps", steps, 1)
    if forward not in ("span", "exclusive"):
        raise ValueError(f"unknown forward attribution {forward!r}: choose 'span' or 'exclusive'")
    attribution = forward
    warmup = _count("warmup", warmup, 0)
    if batch is not None:
        batch = _count("batch", batch, 1)
    if not isinstance(name, str):
        raise ValueError(f"name must be a string, got {name!r}")
    if not isinstance(reconcile, bool):
        raise ValueError(f"reconcile must be True or False, got {reconcile!r}")
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    named = [(nm, p) for nm, p in model.named_parameters() if p.requires_grad]
    if not named:
        raise ValueError(f"model {type(model).__name__} has no trainable parameter (requires_grad=True)")

    if device is None:
        target = named[0][1].device
    else:
        try:
            target = torch.device(device)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"device {device!r} is not a torch device: {exc}") from None
    if target.type not in ("cpu", "cuda"):
        raise ValueError(f"device {str(target)!r}: profile_model times CPU and CUDA devices only")
    if target.type == "cuda" and target.index is None:
        target = torch.device("cuda", torch.cuda.current_device())
    if device is not None:
        model.to(target)
    clock: Any = _CudaClock(torch, target) if target.type == "cuda" else _CpuClock()
    named = [(nm, p) for nm, p in model.named_parameters() if p.requires_grad]   # after .to()
    stray = [nm for nm, p in named if p.device != target]
    if stray:
        raise ValueError(f"parameters not on {target}: {', '.join(map(repr, stray))}")

    args = _to_device(example_inputs, torch, target)
    if isinstance(args, Mapping):
        call_args, call_kwargs = (), dict(args)
    elif isinstance(args, (tuple, list)):
        call_args, call_kwargs = tuple(args), {}
    else:
        call_args, call_kwargs = (args,), {}

    params = [p for _, p in named]
    index = {id(p): k for k, p in enumerate(params)}
    owners: list[tuple[Any, list[int]]] = []
    for module in model.modules():
        own = [index[id(p)] for p in module.parameters(recurse=False) if id(p) in index]
        if own:
            owners.append((module, own))

    state: dict[str, Any] = {"phase": None, "calls": [], "stack": [], "ready": [], "first_call": {}}
    first_use: dict[int, int] = {}

    class _FirstUse(torch.overrides.TorchFunctionMode):
        """Notes, per parameter, the number of the first torch call that takes it."""

        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            kwargs = kwargs or {}
            if getattr(func, "__name__", None) in _METADATA_CALLS:
                return func(*args, **kwargs)      # reads dtype, shape, ...: not a use
            for leaf in _leaves((args, kwargs)):
                k = index.get(id(leaf))
                if k is not None and k not in first_use:
                    first_use[k] = self.calls
            self.calls += 1
            return func(*args, **kwargs)

    mode_box: dict[str, Any] = {"mode": None}

    def pre_hook(unit: int) -> Callable[..., None]:
        def hook(module: Any, inputs: Any) -> None:
            if state["phase"] != "forward":
                return
            mode = mode_box["mode"]
            if mode is not None:
                state["first_call"].setdefault(unit, mode.calls)
            parent = state["stack"][-1] if state["stack"] else None
            state["calls"].append([unit, clock.mark(), None, parent])
            state["stack"].append(len(state["calls"]) - 1)
        return hook

    def post_hook(module: Any, inputs: Any, output: Any) -> None:
        if state["phase"] != "forward" or not state["stack"]:
            return
        state["calls"][state["stack"].pop()][2] = clock.mark()

    def grad_hook(k: int) -> Callable[[Any], None]:
        def hook(param: Any) -> None:
            if state["phase"] == "backward":
                state["ready"].append((k, clock.mark()))
        return hook

    def run_step(mode: Any = None) -> tuple[Any, Any, Any, Any, Any]:
        for p in params:
            p.grad = None
        state.update(phase="forward", calls=[], stack=[], ready=[])
        opened = clock.mark()
        if optimizer is not None:
            optimizer.zero_grad()
        start = clock.mark()
        with mode if mode is not None else contextlib.nullcontext():
            mode_box["mode"] = mode
            try:
                output = model(*call_args, **call_kwargs)
            finally:
                mode_box["mode"] = None
        loss = default_loss(output, torch) if loss_fn is None else loss_fn(output)
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise ValueError(f"the loss must be a tensor holding one number, got {type(loss).__name__}"
                             + (f" of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor) else ""))
        state["phase"] = "backward"
        backward_start = clock.mark()
        loss.backward()
        end = clock.mark()
        state["phase"] = None
        if optimizer is not None:
            optimizer.step()
        closed = clock.mark()
        clock.sync()
        return opened, start, backward_start, end, closed

    saved_grads = [p.grad for p in params]
    if optimizer is not None:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise ValueError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        saved_values = [p.detach().clone() for p in params]
        saved_state = copy.deepcopy(optimizer.state_dict())
    handles = []
    try:
        for unit, (module, _) in enumerate(owners):
            handles.append(module.register_forward_pre_hook(pre_hook(unit)))
            handles.append(module.register_forward_hook(post_hook))
        for k, p in enumerate(params):
            handles.append(p.register_post_accumulate_grad_hook(grad_hook(k)))

        # Untimed step: forward order and unused parameters.
        run_step(_FirstUse())
        hook_sequence = {k: j for j, (k, _) in enumerate(state["ready"])}
        got = {k for k, _ in state["ready"]}
        missing = [named[k][0] for k in range(len(params)) if k not in got]
        if missing:
            raise ValueError(
                f"parameters that got no gradient (not used in the forward, or not reaching the loss): "
                f"{', '.join(map(repr, missing))}; freeze them (requires_grad_(False)) or use them"
            )

        for _ in range(warmup):
            run_step()
        ready_rows, forward_rows, forward_walls, backward_walls, parts_rows = [], [], [], [], []
        for _ in range(steps):
            opened, start, backward_start, end, closed = run_step()
            ready = np.zeros(len(params))
            for k, mark in state["ready"]:
                ready[k] = clock.seconds(backward_start, mark)
            ready_rows.append(ready)
            calls = [c for c in state["calls"] if c[2] is not None]
            first_call = min((clock.seconds(opened, c[1]) for c in calls), default=clock.seconds(opened, start))
            lump = clock.seconds(opened, start) + clock.seconds(end, closed) if optimizer is not None else 0.0
            parts_rows.append(_step_parts(period=clock.seconds(opened, closed),
                                          forward=clock.seconds(opened, backward_start) - first_call,
                                          backward=float(ready.max()), update_lump=lump))
            if attribution == "span":
                spans = [(clock.seconds(start, c[1]), clock.seconds(start, c[2])) for c in calls]
                own = _attribution.span_times(spans, clock.seconds(start, backward_start))
            else:
                spans = [(0.0, clock.seconds(c[1], c[2])) for c in calls]
                kept = {id(c): j for j, c in enumerate(calls)}
                parents = [kept.get(id(state["calls"][c[3]])) if c[3] is not None else None for c in calls]
                own = _attribution.exclusive_times(spans, parents)
            per_unit = np.zeros(len(owners))
            for c, t in zip(calls, own):
                per_unit[c[0]] += t
            forward_rows.append(per_unit)
            forward_walls.append(clock.seconds(start, backward_start))
            backward_walls.append(clock.seconds(backward_start, end))
        plain_rows = []
        if reconcile:
            for handle in handles:
                handle.remove()
            for _ in range(steps):
                plain_rows.append(_phases(clock, *run_step()))
    finally:
        state["phase"] = None
        for handle in handles:
            handle.remove()
        for p, g in zip(params, saved_grads):
            p.grad = g
        if optimizer is not None:
            with torch.no_grad():
                for p, value in zip(params, saved_values):
                    p.copy_(value)
            optimizer.load_state_dict(saved_state)

    # Forward order: first use; else the owning module's first call; ties by registration.
    fallback: dict[int, int] = {}
    for unit, (_, own) in enumerate(owners):
        if unit in state["first_call"]:
            for k in own:
                fallback[k] = min(fallback.get(k, math.inf), state["first_call"][unit])
    def order_key(k: int) -> tuple[float, int]:
        return (first_use.get(k, fallback.get(k, math.inf)), k)
    order = sorted(range(len(params)), key=order_key)
    position = {k: i for i, k in enumerate(order)}

    ready_matrix = np.array(ready_rows)[:, order]
    unit_of = [0] * len(params)
    for unit, (_, own) in enumerate(owners):
        for k in own:
            unit_of[position[k]] = unit
    sequence = sorted(range(len(params)), key=lambda i: hook_sequence[order[i]])
    _, backward = _attribution.step_backward(ready_matrix, sequence, unit_of)
    unit_times = np.median(np.array(forward_rows), axis=0)
    forward = _attribution.forward_times(
        len(params), [[position[k] for k in own] for _, own in owners], unit_times,
    )
    step: dict[str, Any] = {key: float(np.median([row[key] for row in parts_rows])) for key in parts_rows[0]}
    step["periods"] = [row["period"] for row in parts_rows]
    reconciled: dict[str, float] | None = None
    if plain_rows:
        plain = {key: float(np.median([row[key] for row in plain_rows])) for key in plain_rows[0]}
        hooked_forward, hooked_backward = float(np.median(forward_walls)), float(np.median(backward_walls))
        forward_scale = plain["forward"] / hooked_forward if hooked_forward > 0 else 1.0
        backward_scale = plain["backward"] / hooked_backward if hooked_backward > 0 else 1.0
        forward = forward * forward_scale
        backward = backward * backward_scale
        hooked_step = step
        step = _step_parts(period=plain["period"], forward=float(forward.sum()), backward=float(backward.sum()),
                           update_lump=plain["update_lump"] if optimizer is not None else 0.0)
        step["periods"] = [row["period"] for row in plain_rows]
        reconciled = {"plain_period_s": plain["period"], "hooked_period_s": hooked_step["period"],
                      "plain_forward_s": plain["forward"], "plain_backward_s": plain["backward"],
                      "forward_scale": forward_scale, "backward_scale": backward_scale}
    raw_ready = np.median(ready_matrix, axis=0)
    ready_seq = _attribution.ready_order(raw_ready)
    names = [named[k][0] for k in order]
    elem_sizes = {p.element_size() for p in params}

    if target.type == "cuda":
        device_name = torch.cuda.get_device_name(target)
    else:
        device_name = platform.processor() or platform.machine()
    metadata = {
        "source": "fusionopt.integrations.profile_model",
        "device": str(target),
        "device_name": device_name,
        "torch": str(torch.__version__),
        "batch": batch if batch is not None else _batch_size(example_inputs, torch),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "steps": steps,
        "warmup": warmup,
        "timer": clock.label,
        "forward_attribution": attribution,
        "dtypes": sorted({str(p.dtype).removeprefix("torch.") for p in params}),
        "ready_order": [names[i] for i in ready_seq],
        "ready_order_is_reverse_forward": _attribution.is_reverse_forward(ready_seq),
        "forward_step_s": float(np.median(forward_walls)),
        "backward_step_s": float(np.median(backward_walls)),
        "step": step,
    }
    if reconciled is not None:
        metadata["reconciled"] = reconciled
        metadata["step_hooked"] = hooked_step
    profile = Profile.from_arrays(
        [params[k].numel() * params[k].element_size() for k in order],
        forward, backward, names,
        name=name or type(model).__name__,
        dtype_bytes=math.gcd(*elem_sizes),
        metadata=metadata,
        registration_order=[nm for nm, _ in named],
        dtypes=[str(params[k].dtype).removeprefix("torch.") for k in order],
        shapes=[tuple(int(d) for d in params[k].shape) for k in order],
        **{part: step[part] for part in STEP_PARTS},
    )
    # The ready order: as the hooks fired, kept where the corrected ready times tie (a
    # layer's weight and bias) and sorted by them elsewhere.
    ready_times = profile.ready_times
    return profile.with_orders(ready_order=sorted(
        range(len(order)), key=lambda i: (float(ready_times[i]), hook_sequence[order[i]])))
