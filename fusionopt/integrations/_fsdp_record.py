"""Record the collectives a real PyTorch FSDP2 job issues: their kind, size and order.

Checked against torch 2.13.0 (CPU, gloo). There, ``torch/distributed/fsdp/_fully_shard/
_fsdp_collectives.py`` issues every all-gather through ``dist.all_gather_single`` (called
by ``DefaultAllGather``, looked up on the ``torch.distributed`` module at call time) and
every reduce-scatter through ``dist.reduce_scatter_single`` (``DefaultReduceScatter``);
torch releases before those names existed called ``dist.all_gather_into_tensor`` and
``dist.reduce_scatter_tensor``. :class:`CollectiveRecorder` wraps whichever of these exist
on ``torch.distributed`` and records each call once (a call made from inside another wrapped
call, e.g. a deprecated alias forwarding to the new name, is not counted again):

* ``kind``: ``"all_gather"`` or ``"reduce_scatter"`` (:data:`KIND_CODES` maps them to
  :mod:`fusionopt.model._sharded_timing`'s ``message_kind``: 1 and 0);
* ``bytes``: the unsharded size, the all-gather's output or the reduce-scatter's input,
  which is what fusionopt prices (MODEL.md section 8.2). FSDP2 pads each parameter's dim 0
  to a multiple of the world size (:func:`padded_bytes`), so with odd dims a message is
  a little larger than the sum of its parameters' sizes;
* ``shard_bytes``: the other side, the sharded size (``bytes`` / world size).

:func:`record_fsdp2_collectives` runs a whole job: ``ranks`` processes on one host on a gloo
process group (CPU), each building a model, applying ``fully_shard`` to each of its blocks
(:func:`fsdp2_blocks`: the modules :func:`fusionopt.model.block_of` names) and
then to the model (the root), and running ``steps`` training steps (SGD: ``zero_grad``,
forward, the sum of the output as the loss, backward, ``optimizer.step()``), recording the
collectives of each step in issue order. Issue order is the order the ranks' Python code
calls the collectives in; with the CPU running ahead of an accelerator that is also the
order they enter the process group's one communicator.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import numbers
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from fusionopt.integrations._ddp_record import free_port, join_gloo
from fusionopt.integrations._rank_processes import leave_rank
from fusionopt.integrations._torch import require_torch
from fusionopt.model._cost import check_count
from fusionopt.integrations._torch_import import TORCH_DTYPES
from fusionopt.model._io import write_text_atomic
from fusionopt.model._names import block_of

__all__ = ["Collective", "CollectiveRecorder", "KIND_CODES", "padded_bytes", "fsdp2_blocks", "tiny_transformer",
           "record_fsdp2_collectives", "FSDPJob"]

#: fusionopt's ``message_kind`` codes (:mod:`fusionopt.model._sharded_timing`).
KIND_CODES = {"reduce_scatter": 0, "all_gather": 1}

# torch.distributed function name -> (kind, its unsharded tensor argument, its sharded one).
_WRAPPED = {
    "all_gather_single": ("all_gather", "output_tensor", "input_tensor"),
    "all_gather_into_tensor": ("all_gather", "output_tensor", "input_tensor"),
    "reduce_scatter_single": ("reduce_scatter", "input", "output"),
    "reduce_scatter_tensor": ("reduce_scatter", "input", "output"),
}


@dataclass(frozen=True)
class Collective:
    """One collective as issued: ``kind`` (``"all_gather"`` or ``"reduce_scatter"``),
    ``bytes`` (unsharded) and ``shard_bytes`` (this rank's part)."""

    kind: str
    bytes: int
    shard_bytes: int

    @property
    def code(self) -> int:
        """fusionopt's ``message_kind``: 0 reduce-scatter, 1 all-gather."""
        return KIND_CODES[self.kind]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "bytes": self.bytes, "shard_bytes": self.shard_bytes}


def _nbytes(tensor: Any) -> int:
    return int(tensor.numel()) * int(tensor.element_size())


class CollectiveRecorder:
    """A context manager that records the all-gathers and reduce-scatters issued through
    ``torch.distributed`` while it is active (module docstring), step by step.

    >>> recorder = CollectiveRecorder()          # doctest: +SKIP
    >>> with recorder:                           # doctest: +SKIP
    ...     for _ in range(2):
    ...         recorder.next_step()
    ...         train_step()
    >>> recorder.steps[1][0].kind                # doctest: +SKIP
    'all_gather'
    """

    def __init__(self) -> None:
        self.steps: list[list[Collective]] = [[]]
        self._saved: dict[str, Callable[..., Any]] = {}
        self._inside = threading.local()
        self._stepped = False

    @property
    def collectives(self) -> list[Collective]:
        """Every collective recorded, all steps together, in issue order."""
        return [c for step in self.steps for c in step]

    def next_step(self) -> None:
        """Start a new step. The first call, before anything was recorded, starts the first."""
        if self._stepped or self.steps[-1]:
            self.steps.append([])
        self._stepped = True

    def _wrap(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        kind, unsharded, sharded = _WRAPPED[name]
        signature = inspect.signature(function)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(self._inside, "depth", 0)
            if depth == 0:
                bound = signature.bind(*args, **kwargs).arguments
                self.steps[-1].append(Collective(kind, _nbytes(bound[unsharded]), _nbytes(bound[sharded])))
            self._inside.depth = depth + 1
            try:
                return function(*args, **kwargs)
            finally:
                self._inside.depth = depth

        wrapper.__wrapped__ = function  # type: ignore[attr-defined]
        return wrapper

    def __enter__(self) -> "CollectiveRecorder":
        import torch.distributed as dist

        if self._saved:
            raise RuntimeError("this CollectiveRecorder is already active")
        for name in _WRAPPED:
            function = getattr(dist, name, None)
            if function is not None:
                self._saved[name] = function
                setattr(dist, name, self._wrap(name, function))
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch.distributed as dist

        for name, function in self._saved.items():
            setattr(dist, name, function)
        self._saved.clear()


def padded_bytes(shape: Sequence[int], element_size: int, world_size: int) -> int:
    """A parameter's bytes in FSDP2's messages: dim 0 padded up to a multiple of the world
    size (``_get_dim0_padded_size``).

    >>> padded_bytes((5, 3), 4, 2), padded_bytes((6,), 4, 4), padded_bytes((), 4, 2)
    (72, 32, 8)
    """
    element_size, world_size = check_count("element_size", element_size), check_count("world_size", world_size)
    shape = shape if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__") else tuple(shape)
    if not isinstance(shape, tuple) or any(isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 0
                                           for d in shape):
        raise ValueError(f"shape must be a tuple of dimensions (integers >= 0), got {shape!r}")
    dims = [int(d) for d in shape] or [1]
    dims[0] = -(-dims[0] // world_size) * world_size
    total = 1
    for d in dims:
        total *= d
    return total * int(element_size)


def fsdp2_blocks(model: Any) -> list[tuple[str, Any]]:
    """The modules ``fully_shard`` goes on before the root, in registration order: the
    blocks :func:`fusionopt.model.block_of` names (``"layers.1"``, ``"h.3"``), each the
    block of the tensors inside it."""
    return [(name, module) for name, module in model.named_modules()
            if name and block_of(f"{name}.weight") == name]


def tiny_transformer(vocab: int = 32, dim: int = 16, hidden: Sequence[int] = (32, 48, 64)) -> Any:
    """A small transformer-shaped model: ``embed`` (an ``nn.Embedding``), ``layers`` (an
    ``nn.ModuleList`` of residual MLP blocks ``fc1``, ``fc2``, one per entry of ``hidden``,
    its inner width, so the blocks differ in size), ``norm`` (a LayerNorm) and ``head``.
    It takes a 1-D tensor of token indices and returns ``(tokens, vocab)`` logits. Every dim
    0 is even for even arguments, so FSDP2 pads nothing on 2 ranks."""
    torch = require_torch()
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, inner: int) -> None:
            super().__init__()
            self.fc1 = nn.Linear(dim, inner)
            self.fc2 = nn.Linear(inner, dim)

        def forward(self, x: Any) -> Any:
            return x + self.fc2(torch.relu(self.fc1(x)))

    class TinyTransformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, dim)
            self.layers = nn.ModuleList(Block(h) for h in hidden)
            self.norm = nn.LayerNorm(dim)
            self.head = nn.Linear(dim, vocab)

        def forward(self, tokens: Any) -> Any:
            x = self.embed(tokens)
            for block in self.layers:
                x = block(x)
            return self.head(self.norm(x))

    return TinyTransformer()


def _tiny_input(torch: Any, model: Any) -> Any:
    return torch.randint(0, model.embed.num_embeddings, (64,))


@dataclass(frozen=True)
class FSDPJob:
    """What :func:`record_fsdp2_collectives` found, per rank: ``steps[r][s]`` the collectives
    rank ``r`` issued in step ``s``; ``parameters`` the model's ``(name, shape, element
    size)`` in registration order; ``blocks`` the modules wrapped before the root."""

    steps: list[list[list[Collective]]]
    parameters: list[tuple[str, tuple[int, ...], int]]
    blocks: list[str]
    world_size: int


def _rank(rank: int, ranks: int, port: int, folder: str, factory: Callable[[], Any],
          make_input: Callable[[Any, Any], Any], steps: int, threads: int, seed: int,
          block_names: Sequence[str] | None, dtypes: tuple[str | None, str | None] = (None, None)) -> None:
    torch = require_torch()
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    join_gloo(rank, ranks, port, threads)
    try:
        torch.manual_seed(seed)
        model = factory()
        parameters = [(name, list(p.shape), p.element_size()) for name, p in model.named_parameters()]
        if block_names is None:
            blocks = fsdp2_blocks(model)
        else:
            blocks = [(name, model.get_submodule(name)) for name in block_names]
        options = {}
        if dtypes != (None, None):
            from torch.distributed.fsdp import MixedPrecisionPolicy

            param_dtype, reduce_dtype = (None if d is None else getattr(torch, TORCH_DTYPES[d]) for d in dtypes)
            options["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
        for _, block in blocks:
            fully_shard(block, **options)
        fully_shard(model, **options)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = make_input(torch, model)
        recorder = CollectiveRecorder()
        with recorder:
            for _ in range(steps):
                recorder.next_step()
                optimizer.zero_grad()
                model(x).sum().backward()
                optimizer.step()
        document = {"rank": rank, "world_size": ranks, "parameters": parameters, "blocks": [n for n, _ in blocks],
                    "steps": [[c.to_dict() for c in step] for step in recorder.steps]}
        write_text_atomic(Path(folder, f"rank{rank}.json"), json.dumps(document))
        dist.barrier()
    except BaseException:
        dist.destroy_process_group()
        raise
    leave_rank()            # every rank has written its record and passed the barrier


def record_fsdp2_collectives(factory: Callable[[], Any] = tiny_transformer, *, make_input: Callable[[Any, Any], Any]
                             = _tiny_input, blocks: Sequence[str] | None = None, ranks: int = 2, steps: int = 2,
                             threads: int = 1, seed: int = 0, folder: str | Path | None = None,
                             param_dtype: str | None = None, reduce_dtype: str | None = None) -> FSDPJob:
    """Run a ``ranks``-process gloo FSDP2 job (module docstring) and return what each rank
    issued. ``factory()`` builds the model and ``make_input(torch, model)`` one batch; both
    must be importable module-level functions (the ranks are spawned processes).
    ``blocks``: the qualified names of the modules to wrap before the root, in order (a
    plan's unit names, e.g. ``fsdp2_plan(profile).names`` less ``"(root)"``); by default
    :func:`fsdp2_blocks`.
    ``folder``: where the ranks write their records (a temporary folder by default).
    ``param_dtype``, ``reduce_dtype``: ``"fp32"``, ``"fp16"`` or ``"bf16"``, FSDP2's
    ``MixedPrecisionPolicy`` on every ``fully_shard`` call (None, None: no policy)."""
    require_torch()
    import tempfile

    import torch.multiprocessing as mp

    for label, value in (("param_dtype", param_dtype), ("reduce_dtype", reduce_dtype)):
        if value is not None and value not in TORCH_DTYPES:
            raise ValueError(f"{label} must be one of {', '.join(TORCH_DTYPES)} or None, got {value!r}")
    for label, value, least in (("ranks", ranks, 1), ("steps", steps, 1), ("threads", threads, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{label} must be a whole number >= {least}, got {value!r}")
    with contextlib.ExitStack() as stack:
        where = Path(folder) if folder is not None else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        where.mkdir(parents=True, exist_ok=True)
        names = None if blocks is None else [str(name) for name in blocks]
        for attempt in (1, 2):
            try:
                mp.spawn(_rank, args=(ranks, free_port(), str(where), factory, make_input, steps, threads, seed, names,
                                      (param_dtype, reduce_dtype)), nprocs=ranks, join=True)
                break
            except mp.ProcessExitedException:
                # A rank killed by a signal: gloo aborts when its rendezvous port is taken between
                # free_port() choosing it and the ranks binding it. Once more on a fresh port.
                if attempt == 2:
                    raise
        documents = [json.loads((where / f"rank{r}.json").read_text()) for r in range(ranks)]
    first = documents[0]
    return FSDPJob(steps=[[[Collective(**c) for c in step] for step in d["steps"]] for d in documents],
                   parameters=[(name, tuple(shape), size) for name, shape, size in first["parameters"]],
                   blocks=list(first["blocks"]), world_size=ranks)
