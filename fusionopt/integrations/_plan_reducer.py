"""Train with a plan: a gradient reducer for ``torch.distributed`` that sends a fusionopt
:class:`~fusionopt.model.Plan`'s messages, in place of ``DistributedDataParallel``.

Each rank wraps its replica of the model::

    reducer = PlanReducer(model, plan, profile)            # after init_process_group
    for x, y in data:
        loss_fn(model(x), y).backward()                     # returns with averaged gradients
        optimizer.step(); optimizer.zero_grad()

How a step runs (MODEL.md sections 3 and 4, as in the simulator):

* A hook on each parameter (``register_post_accumulate_grad_hook``) fires when its gradient
  is accumulated. Once every chunk of a message is ready, the hook copies the chunks (byte
  ranges of gradients, in whole elements) into the message's flat buffer.
* One communication thread all-reduces the messages **in plan order, one at a time**: message
  ``k`` starts when it is packed, past its release time (seconds from the first gradient of
  the step) and after message ``k - 1`` has ended. The sum is divided by the world size.
* ``sync="barrier"`` (DDP's rule): the end of the backward waits for every message (a callback
  queued on the autograd engine, as DDP's reducer does) and unpacks the averages into each
  ``.grad``; ``loss.backward()`` returns with the gradients DDP would give, and the training
  loop is unchanged.
* ``sync="layerwise"`` (P3, ByteScheduler, US-Byte): the backward returns at once. In the next
  forward, each module's forward pre-hook waits only for the messages holding its
  parameters, unpacks them and runs the optimiser update of those parameters (a per-module
  optimiser built by ``optimizer(params)``), then clears their gradients. The training loop
  calls neither ``optimizer.step()`` nor ``zero_grad()``; :meth:`PlanReducer.flush` applies
  the last step's updates (before evaluating or saving).

Before the first step every rank checks that all hold the same plan, profile and sync (a
hash, gathered); a collective that outlives ``timeout`` stops the rank with one line naming
the message. ``link`` (a cost model, e.g. ``network("10gbe", 64)``) emulates a slower link:
each message holds the channel until ``c(S)`` after its start, when its real all-reduce ends
sooner; :attr:`PlanReducer.emulated_link` says so, and results must say "emulated link".

``encodings`` (one per message: ``"fp32"``, ``"fp16"`` or ``"bf16"``; MODEL.md section 2.2,
e.g. ``problem.message_encodings(plan.message_bytes, [m.tensors for m in plan.messages])``)
sends each message as torch's compress hooks send a bucket (``fp16_compress_hook``,
``bf16_compress_hook``): its fp32 buffer cast to the encoding and divided by the world size,
all-reduced in it, and copied back; an emulated link then holds it for ``c`` of the bytes it
sent. Each averaged element is what DDP with that hook gives, bit for bit.

Checked on torch 2.13 with gloo on CPU (the tests: gradients equal DDP's after every step, on
convolution, normalisation, LSTM, linear and embedding models). The NCCL path (packing and
all-reduce on a side CUDA stream ordered by events) follows the same code and has not yet
run on a GPU here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import threading
import time
from datetime import timedelta
from typing import Any, Callable

from fusionopt.integrations._torch_import import TORCH_DTYPES, require_torch
from fusionopt.integrations._wire_hook import WIRE_ENCODINGS
from fusionopt.model._cost import CommCost
from fusionopt.model._plan import Plan
from fusionopt.model._profile import Profile

SYNC_MODES = ("barrier", "layerwise")


class _Message:
    """One message: its pieces ``(parameter, first element, end element, buffer offset)``."""

    __slots__ = ("index", "pieces", "buffer", "nbytes", "tensors", "packed", "done", "consumed", "left", "event",
                 "release", "ready_at", "start_at", "end_at", "encoding", "wire")

    def __init__(self, index: int, pieces: list[tuple[int, int, int, int]], buffer: Any, nbytes: int,
                 release: float, encoding: str = "fp32", wire: Any = None) -> None:
        self.index, self.pieces, self.buffer, self.nbytes, self.release = index, pieces, buffer, nbytes, release
        self.encoding, self.wire = encoding, wire      # wire: the torch dtype it travels in (None: as it is)
        self.tensors = sorted({p for p, _, _, _ in pieces})
        self.packed = self.done = False
        self.consumed = True
        self.left: set[int] = set()       # layerwise: tensors whose update has not run yet
        self.event = None
        self.ready_at = self.start_at = self.end_at = math.nan


class PlanReducer:
    """Average gradients over a process group by a fusionopt plan (module docstring).

    Parameters
    ----------
    module : torch.nn.Module
        This rank's replica (the same parameters on every rank; broadcast them first, as
        DDP does, when they do not start equal).
    plan : Plan
        Messages over the profile's tensors (fusion or partition plan, any order, release
        times honoured).
    profile : Profile
        The profile the plan was made for: its tensors must be the module's trainable
        parameters by name, with their sizes in bytes (the first mismatch is named).
    sync : {"barrier", "layerwise"}
        When the update runs (module docstring).
    optimizer : callable, optional
        ``sync="layerwise"`` only, and required there: ``optimizer(params)`` returns a
        ``torch.optim.Optimizer`` over ``params`` (e.g. ``lambda ps: torch.optim.SGD(ps, lr=0.1)``);
        one is built per module that owns parameters. Element-wise optimisers (SGD, Adam,
        ...) then update as one optimiser over the whole model would.
    process_group : optional
        The group to average over; default a new group of every rank (``new_group()``), the
        reducer's own: its thread's collectives then never interleave with other
        collectives of the training loop (another model's DDP, a metric's all-reduce), which
        ranks could order differently while messages are in flight.
    timeout : float
        Seconds a message may take before the rank stops (``TimeoutError`` naming it).
    link : CommCost, optional
        Emulate a link of this cost (module docstring).
    encodings : sequence of str, optional
        Each message's encoding on the wire, ``"fp32"``, ``"fp16"`` or ``"bf16"`` (module
        docstring); default every message as it is.
    """

    def __init__(self, module: Any, plan: Plan, profile: Profile, *, sync: str = "barrier",
                 optimizer: Callable[[list[Any]], Any] | None = None, process_group: Any = None,
                 timeout: float = 300.0, link: CommCost | None = None, encodings: Any = None) -> None:
        torch = require_torch()
        import torch.distributed as dist

        self._torch, self._dist = torch, dist
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("PlanReducer needs an initialised torch.distributed process group "
                             "(torch.distributed.init_process_group)")
        if sync not in SYNC_MODES:
            raise ValueError(f"unknown sync {sync!r}: choose 'barrier' or 'layerwise'")
        if not isinstance(plan, Plan):
            raise ValueError(f"plan must be a fusionopt Plan, got {type(plan).__name__}")
        if not isinstance(profile, Profile):
            raise ValueError(f"profile must be a fusionopt Profile, got {type(profile).__name__}")
        if sync == "layerwise" and optimizer is None:
            raise ValueError("sync='layerwise' runs each module's update in its forward pre-hook: give "
                             "optimizer=lambda params: torch.optim.SGD(params, ...) (a factory)")
        if sync == "barrier" and optimizer is not None:
            raise ValueError("optimizer= is for sync='layerwise'; with sync='barrier' step your own optimiser "
                             "after loss.backward()")
        if link is not None and not isinstance(link, CommCost):
            raise ValueError(f"link must be a fusionopt cost model (CommCost), got {type(link).__name__}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.module, self.plan, self.profile, self.sync = module, plan, profile, sync
        self.group = dist.new_group() if process_group is None else process_group
        self.timeout, self.link = float(timeout), link
        self.world = dist.get_world_size(process_group)
        self.rank = dist.get_rank(process_group)
        self.params = match_parameters(module, profile)
        plan.validate(profile)
        self.encodings = _check_encodings(encodings, plan)
        self.messages = self._layout()
        self.carriers: list[list[int]] = [[] for _ in self.params]
        for message in self.messages:
            for p in message.tensors:
                self.carriers[p].append(message.index)
        self._check_same_plan()

        self._lock = threading.Condition()
        self._error: BaseException | None = None
        self._step_open = False
        self._generation = 0
        self._layout_version = 0                  # bumped by switch(): the communication thread re-reads the plan
        self._completed: tuple[int, Plan, list[dict[str, float]]] | None = None
        self._origin = 0.0
        self._pending = [0] * len(self.messages)
        self._device = self.params[0].device
        self._cuda = self._device.type == "cuda"
        self._stream = torch.cuda.Stream(self._device) if self._cuda else None
        self._closed = False
        self._optimizers: list[tuple[list[int], list[int], Any, Any]] = []
        if sync == "layerwise":
            self._build_optimizers(optimizer)     # checked before any hook is installed
        self._handles = [p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(self.params)]
        for own, needed, step, module in self._optimizers:
            self._handles.append(module.register_forward_pre_hook(self._update_hook(own, needed, step)))
        self._thread = threading.Thread(target=self._communicate, name="fusionopt-plan-reducer", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ set-up
    def _layout(self) -> list[_Message]:
        torch = self._torch
        messages = []
        for k, message in enumerate(self.plan.messages):
            dtypes = {self.params[c.tensor].dtype for c in message.chunks}
            if len(dtypes) > 1:
                raise ValueError(f"message {k} mixes dtypes ({', '.join(sorted(map(str, dtypes)))}): "
                                 "a message is one flat buffer of one dtype")
            pieces, offset = [], 0
            for c in message.chunks:
                element = self.params[c.tensor].element_size()
                if c.lo % element or c.hi % element:
                    raise ValueError(f"message {k}: bytes [{c.lo}, {c.hi}) of {self.profile.names[c.tensor]!r} "
                                     f"cut its {element}-byte elements")
                lo, hi = c.lo // element, c.hi // element
                pieces.append((c.tensor, lo, hi, offset))
                offset += hi - lo
            param = self.params[message.chunks[0].tensor]
            buffer = torch.empty(offset, dtype=param.dtype, device=param.device)
            encoding = self.encodings[k]
            if encoding != "fp32" and param.dtype != torch.float32:
                raise ValueError(f"message {k} holds {param.dtype} gradients: {encoding} casts fp32 ones "
                                 "(send it in fp32)")
            wire = None if encoding == "fp32" else getattr(torch, TORCH_DTYPES[encoding])
            messages.append(_Message(k, pieces, buffer, message.nbytes, float(message.release), encoding, wire))
        return messages

    def _fingerprint(self) -> str:
        doc = {"names": list(self.profile.names), "sizes": [int(s) for s in self.profile.sizes], "sync": self.sync,
               "messages": [[[c.tensor, c.lo, c.hi] for c in m.chunks] + [m.release] for m in self.plan.messages],
               "encodings": list(self.encodings)}
        return hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:16]

    def _check_same_plan(self) -> None:
        mine = self._fingerprint()
        every: list[Any] = [None] * self.world
        self._dist.all_gather_object(every, mine, group=self.group)
        odd = [r for r, h in enumerate(every) if h != every[0]]
        if odd:
            raise ValueError(f"ranks hold different plans: rank {odd[0]} differs from rank 0 (plan, profile and "
                             f"sync hash {every[odd[0]]} against {every[0]}); give every rank the same plan")

    def _build_optimizers(self, factory: Callable[[list[Any]], Any]) -> None:
        index = {id(p): i for i, p in enumerate(self.params)}
        for module in self.module.modules():
            own = [index[id(p)] for p in module.parameters(recurse=False) if id(p) in index]
            if not own:
                continue
            optimizer = factory([self.params[i] for i in own])
            if not isinstance(optimizer, self._torch.optim.Optimizer):
                raise ValueError(f"optimizer(params) must return a torch.optim.Optimizer, got {type(optimizer).__name__}")
            needed = sorted({k for i in own for k in self.carriers[i]})
            self._optimizers.append((own, needed, optimizer, module))

    # ------------------------------------------------------------------ backward
    def _hook(self, i: int) -> Callable[[Any], None]:
        def hook(param: Any) -> None:
            if self._closed:
                return
            if not self._step_open:
                self._open_step()
            for k in self.carriers[i]:
                self._pending[k] -= 1
                if self._pending[k] == 0:
                    self._pack(self.messages[k])
        return hook

    def _open_step(self) -> None:
        stale = [m for m in self.messages if not m.consumed]
        if stale:
            names = sorted({self.profile.names[p] for m in stale for p in m.tensors})
            raise RuntimeError(f"the last step's reduced gradients of {', '.join(map(repr, names[:3]))} were never "
                               "applied: under sync='layerwise' their module's forward must run (a module call) "
                               "before the next backward")
        with self._lock:
            self._raise_pending()
            self._origin = time.perf_counter()
            self._pending = [len(m.tensors) for m in self.messages]
            for m in self.messages:
                m.packed = m.done = False
                m.consumed = self.sync == "barrier"
                m.left = set(m.tensors)
                m.ready_at = m.start_at = m.end_at = math.nan
            self._step_open = True
            self._generation += 1
        if self.sync == "barrier":
            self._torch.autograd.Variable._execution_engine.queue_callback(self._finish_backward)

    def _pack(self, message: _Message) -> None:
        torch = self._torch
        context = torch.cuda.stream(torch.cuda.current_stream(self._device)) if self._cuda else contextlib.nullcontext()
        with torch.no_grad(), context:
            for p, lo, hi, offset in message.pieces:
                grad = self.params[p].grad
                if grad is None:
                    raise RuntimeError(f"parameter {self.profile.names[p]!r} has no gradient in its hook")
                message.buffer[offset: offset + hi - lo].copy_(grad.reshape(-1)[lo:hi])
            if self._cuda:
                message.event = torch.cuda.Event()
                message.event.record()
        with self._lock:
            message.ready_at = time.perf_counter() - self._origin
            message.packed = True
            self._lock.notify_all()

    def _finish_backward(self) -> None:
        self.wait_all()
        for message in self.messages:
            self._unpack(message, message.tensors)
            message.consumed = True

    # ------------------------------------------------------------------ communication
    def _communicate(self) -> None:
        torch, dist = self._torch, self._dist
        generation = 0
        while True:
            generation += 1
            with self._lock:
                messages, version = self.messages, self._layout_version
            for message in messages:
                with self._lock:
                    while not ((self._generation == generation and message.packed) or self._closed
                               or self._layout_version != version):
                        self._lock.wait()
                    if self._closed:
                        return
                    if self._layout_version != version:   # switched between steps: this generation's plan is new
                        break
                    origin = self._origin
                try:
                    delay = origin + message.release - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                    start = time.perf_counter()
                    context = torch.cuda.stream(self._stream) if self._cuda else contextlib.nullcontext()
                    with context:
                        if self._cuda:
                            self._stream.wait_event(message.event)
                        if message.wire is None:
                            sent = message.buffer
                        else:                  # as torch's compress hooks: cast, divide, all-reduce, copy back
                            sent = message.buffer.to(message.wire).div_(self.world)
                        work = dist.all_reduce(sent, group=self.group, async_op=True)
                        if not work.wait(timedelta(seconds=self.timeout)):
                            raise TimeoutError("timed out")
                        if message.wire is None:
                            message.buffer.div_(self.world)
                        else:
                            message.buffer.copy_(sent)
                        if self._cuda:
                            message.event = torch.cuda.Event()
                            message.event.record()
                            message.event.synchronize()
                    if self.link is not None:
                        wire_bytes = sent.numel() * sent.element_size()
                        hold = start + float(self.link(wire_bytes)) - time.perf_counter()
                        if hold > 0:
                            time.sleep(hold)
                    end = time.perf_counter()
                except BaseException as exc:  # noqa: BLE001 - handed to the training thread
                    text = " ".join(str(exc).split()) or type(exc).__name__
                    error = TimeoutError(
                        f"rank {self.rank}: message {message.index} of {len(self.messages)} ({message.nbytes} B) "
                        f"did not complete within {self.timeout:g} s: {text}")
                    with self._lock:
                        self._error = error
                        self._closed = True
                        self._lock.notify_all()
                    return
                with self._lock:
                    message.start_at, message.end_at = start - origin, end - origin
                    message.done = True
                    if message is self.messages[-1]:
                        self._step_open = False       # the next gradient opens the next step
                        self._completed = (generation, self.plan, self.message_times())
                    self._lock.notify_all()
            else:
                continue
            generation -= 1                           # the switched plan runs this generation

    def _raise_pending(self) -> None:
        if self._error is not None:
            raise self._error

    def wait_all(self) -> None:
        """Block until every message of the step has been reduced (raises a rank's error)."""
        self._wait(self.messages)

    def _wait(self, messages: list[_Message]) -> None:
        deadline = time.perf_counter() + self.timeout * (len(messages) + 1)
        with self._lock:
            while not all(m.done for m in messages):
                self._raise_pending()
                if self._closed:
                    raise RuntimeError("the reducer is closed")
                left = deadline - time.perf_counter()
                if left <= 0:
                    late = next(m for m in messages if not m.done)
                    raise TimeoutError(f"rank {self.rank}: message {late.index} of {len(self.messages)} "
                                       f"({late.nbytes} B) did not complete within {self.timeout:g} s"
                                       + ("" if late.packed else ": its gradients were never all ready"))
                self._lock.wait(timeout=min(left, 0.5))
            self._raise_pending()

    def _unpack(self, message: _Message, tensors: Any) -> None:
        """Copy the averages of ``tensors``' chunks from the message's buffer into ``.grad``."""
        torch = self._torch
        with torch.no_grad():
            for p, lo, hi, offset in message.pieces:
                if p not in tensors:
                    continue
                param = self.params[p]
                if param.grad is None:
                    param.grad = torch.zeros_like(param)
                param.grad.reshape(-1)[lo:hi].copy_(message.buffer[offset: offset + hi - lo])

    # ------------------------------------------------------------------ layerwise updates
    def _update_hook(self, own: list[int], needed: list[int], optimizer: Any) -> Callable[..., None]:
        def hook(module: Any, inputs: Any) -> None:
            if self._closed:
                return
            self._update(own, needed, optimizer)
        return hook

    def _update(self, own: list[int], needed: list[int], optimizer: Any) -> None:
        """Wait for the messages holding ``own``'s chunks, unpack those chunks, step the
        module's optimiser and clear the gradients; a message is consumed once every tensor
        in it has been updated."""
        mine = set(own)
        waiting = [self.messages[k] for k in needed if mine & self.messages[k].left]
        if not waiting:
            return
        self._wait(waiting)
        for message in waiting:
            self._unpack(message, mine)
        optimizer.step()
        for i in own:
            self.params[i].grad = None
        for message in waiting:
            message.left -= mine
            message.consumed = not message.left

    def switch(self, plan: Plan, *, encodings: Any = None) -> None:
        """Reduce by ``plan`` from the next step on, each message in ``encodings``' (default
        every message in fp32, as for a new reducer; a reducer that sends some message
        encoded needs them given, so that none is dropped without a word).

        Between steps only: after ``loss.backward()`` has returned (and, under
        ``sync="layerwise"``, after :meth:`flush`), when every message of the step is reduced
        and applied; a call inside a step is refused in one line, before anything changes.
        Every rank must switch at the same step to the same plan (checked with a gathered
        hash, as the first plan is; ranks that disagree keep the plan they had). No gradient
        is lost or sent twice: the next step's hooks fill the new plan's messages."""
        if not isinstance(plan, Plan):
            raise ValueError(f"plan must be a fusionopt Plan, got {type(plan).__name__}")
        with self._lock:
            self._raise_pending()
            if self._closed:
                raise RuntimeError("the reducer is closed")
            if self._step_open or not all(m.consumed for m in self.messages):
                raise ValueError("switch(plan) between steps only: this step's messages are not all reduced and "
                                 "applied yet (call it after loss.backward() returns"
                                 + (" and after flush()" if self.sync == "layerwise" else "") + ")")
        plan.validate(self.profile)
        if encodings is None and any(e != "fp32" for e in self.encodings):
            raise ValueError(f"this reducer sends messages in {sorted(set(self.encodings) - {'fp32'})[0]}: give "
                             "switch(plan, encodings=[...]), one per message of the new plan")
        previous = self.plan, self.encodings
        self.plan, self.encodings = plan, _check_encodings(encodings, plan)
        try:
            messages = self._layout()
            self._check_same_plan()
        except BaseException:
            self.plan, self.encodings = previous
            raise
        carriers: list[list[int]] = [[] for _ in self.params]
        for message in messages:
            for p in message.tensors:
                carriers[p].append(message.index)
        with self._lock:
            self.messages, self.carriers = messages, carriers
            self._pending = [0] * len(messages)
            for own, needed, _, _ in self._optimizers:     # the forward pre-hooks hold these lists
                needed[:] = sorted({k for i in own for k in carriers[i]})
            self._layout_version += 1
            self._lock.notify_all()

    def flush(self) -> None:
        """``sync="layerwise"``: run every update the last step left pending (before evaluating,
        saving or stopping); a no-op under barrier sync."""
        for own, needed, optimizer, _ in self._optimizers:
            self._update(own, needed, optimizer)

    # ------------------------------------------------------------------ results
    @property
    def emulated_link(self) -> bool:
        """True when messages are held for ``link``'s cost: say "emulated link" with results."""
        return self.link is not None

    def message_times(self) -> list[dict[str, float]]:
        """The last step's messages in plan order: ``ready``, ``start`` and ``end`` in seconds
        from the step's first gradient, ``bytes`` and the ``encoding`` it travelled in."""
        return [{"ready": m.ready_at, "start": m.start_at, "end": m.end_at, "bytes": m.nbytes,
                 "encoding": m.encoding} for m in self.messages]

    def completed_times(self) -> tuple[int, Plan, list[dict[str, float]]] | None:
        """The last step whose messages have all been reduced: its number (from 1), the plan
        it ran and its messages' times as :meth:`message_times` gives them; None before the
        first. Under
        ``sync="layerwise"`` right after ``loss.backward()`` returns it may be the step
        before, whose messages the next forward has waited for."""
        with self._lock:
            return self._completed

    def close(self) -> None:
        """Remove the hooks and stop the communication thread."""
        for handle in self._handles:
            handle.remove()
        with self._lock:
            self._closed = True
            self._lock.notify_all()
        self._thread.join(timeout=5.0)

    def __enter__(self) -> "PlanReducer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _check_encodings(encodings: Any, plan: Plan) -> tuple[str, ...]:
    """``encodings`` as one name per message of ``plan`` (None: every message in fp32); one
    line naming what is wrong otherwise."""
    if encodings is None:
        return ("fp32",) * plan.num_messages
    if isinstance(encodings, str):
        raise ValueError(f"encodings must list one encoding per message, got the string {encodings!r}")
    names = tuple(encodings)
    if len(names) != plan.num_messages:
        raise ValueError(f"encodings must list one encoding per message: the plan has {plan.num_messages} "
                         f"messages and {len(names)} encodings were given")
    for k, name in enumerate(names):
        if name not in WIRE_ENCODINGS:
            raise ValueError(f"message {k}: unknown encoding {name!r}: choose one of {', '.join(WIRE_ENCODINGS)}")
    return names


def match_parameters(module: Any, profile: Profile, subject: str = "the plan") -> list[Any]:
    """The module's trainable parameters in the profile's order, checked by name and size
    (a mismatch says ``subject`` is for another model)."""
    named = dict((nm, p) for nm, p in module.named_parameters() if p.requires_grad)
    for nm in profile.names:
        if nm not in named:
            raise ValueError(f"profile tensor {nm!r} is not a trainable parameter of the module "
                             f"({type(module).__name__}); {subject} is for another model")
    extra = [nm for nm in named if nm not in set(profile.names)]
    if extra:
        raise ValueError(f"the module's trainable parameter {extra[0]!r} is not in the profile: "
                         f"{subject} is for another model")
    params = []
    for nm, size in zip(profile.names, profile.sizes):
        p = named[nm]
        held = p.numel() * p.element_size()
        if held != int(size):
            raise ValueError(f"tensor {nm!r}: the profile says {int(size)} bytes, the module's parameter holds {held}")
        params.append(p)
    return params
