"""The parameter list a Kineto trace is read with: names and gradient sizes in bytes, forward
order, from a CSV or JSON file (:func:`read_parameter_list`) or from a trace recorded with
shapes (:func:`parameters_from_trace`), and each gradient's place in the backward."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from fusionopt.integrations._kineto_events import (
    Event, JobTraces, Named, documents_by_rank, load_trace, ACCUMULATE_GRAD, ELEMENT_BYTES, EVALUATE_FUNCTION,
    STEP_PREFIX,
)
from fusionopt.model._io import read_csv_rows, read_json_document
from fusionopt.model._profile import Profile
from fusionopt.model._profile_csv import read_profile_csv




def checked_parameter_list(parameters: Any) -> tuple[list[str], list[int], list[str] | None]:
    """Names and byte sizes (forward order) and any ready order a profile carries."""
    carried = None
    if isinstance(parameters, (str, Path)):
        parameters = read_parameter_list(parameters)
    if isinstance(parameters, Profile):
        names, sizes = list(parameters.names), [int(s) for s in parameters.sizes]
        order = parameters.metadata.get("ready_order")
        if isinstance(order, list) and sorted(map(str, order)) == sorted(names):
            carried = [str(x) for x in order]
        elif not parameters.has_default_orders:
            carried = [names[i] for i in parameters.ready_order]
        return names, sizes, carried
    if hasattr(parameters, "named_parameters"):   # a torch.nn.Module, duck-typed
        pairs = [(nm, p.numel() * p.element_size()) for nm, p in parameters.named_parameters() if p.requires_grad]
    elif isinstance(parameters, Mapping):
        pairs = list(parameters.items())
    elif isinstance(parameters, (list, tuple)):
        pairs = []
        for k, item in enumerate(parameters):
            if not isinstance(item, (list, tuple)) or len(item) != 2:
                raise ValueError(f"parameters[{k}] must be a (name, size_bytes) pair, got {item!r}")
            pairs.append((item[0], item[1]))
    else:
        raise ValueError(
            "parameters must be a torch.nn.Module, a Profile, a dict of name -> size_bytes, a "
            f"list of (name, size_bytes) pairs or a file of them, got {type(parameters).__name__}"
        )
    if not pairs:
        raise ValueError("parameters is empty: give every trainable parameter, in forward order")
    names, sizes = [], []
    for nm, size in pairs:
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size <= 0:
            raise ValueError(f"parameter {nm!r}: size must be a positive whole number of bytes, got {size!r}")
        names.append(str(nm))
        sizes.append(int(size))
    seen: set[str] = set()
    for nm in names:
        if nm in seen:
            raise ValueError(f"parameter {nm!r}: name repeated")
        seen.add(nm)
    return names, sizes, carried


def ready_positions(names: list[str], ready_order: Sequence[str] | None) -> list[int]:
    """Forward index of the k-th parameter to become ready."""
    n = len(names)
    if ready_order is None:
        return list(range(n - 1, -1, -1))
    order = [str(x) for x in ready_order]
    index = {nm: i for i, nm in enumerate(names)}
    unknown = [nm for nm in order if nm not in index]
    if unknown:
        raise ValueError(f"ready_order names unknown parameters: {', '.join(map(repr, unknown))}")
    missing = [nm for nm in names if nm not in set(order)]
    if missing or len(order) != n:
        listed = ", ".join(map(repr, missing)) or "none"
        raise ValueError(f"ready_order must name each parameter once; missing: {listed}")
    return [index[nm] for nm in order]


# How far ahead of reverse forward order a gradient may arrive within its layer (an LSTM
# layer's four tensors), when the trace's shapes say which parameter it is.
MATCH_WINDOW = 4


def gradient_bytes(event: Event) -> int | None:
    """Bytes of the gradient an AccumulateGrad event holds, when the trace recorded shapes."""
    dims, types = event.args.get("Input Dims"), event.args.get("Input type")
    if isinstance(dims, list) and dims and isinstance(dims[0], list) and isinstance(types, list) and types:
        elem = ELEMENT_BYTES.get(types[0])
        if elem is not None:
            return math.prod(int(d) for d in dims[0]) * elem
    return None


def match_sizes(recorded: list[int | None], positions: list[int], sizes: list[int]) -> list[int]:
    """The parameter of each AccumulateGrad (time order): the first of the next
    ``MATCH_WINDOW`` parameters in reverse forward order whose size is the recorded
    gradient's (a convolution's weight arrives before its bias); the next one where the size
    is unknown or matches none (then the size check names the fault). Tensors of equal size
    within a layer (a norm's weight and bias) cannot be told apart: they keep reverse forward
    order unless ``ready_order`` is given.

    >>> match_sizes([864, 32, None], [2, 1, 0], [32, 864, 64])
    [1, 0, 2]
    """
    remaining = list(positions)
    matched = []
    for nbytes in recorded:
        pick = 0
        if nbytes is not None:
            pick = next((j for j, i in enumerate(remaining[:MATCH_WINDOW]) if sizes[i] == nbytes), 0)
        matched.append(remaining.pop(pick))
    return matched




def read_parameter_csv(path: str | Path) -> list[tuple[str, int]]:
    """A parameter list from a CSV file: a header with ``name`` and ``size_bytes`` columns
    (in any order, other columns ignored), then one row per trainable parameter in forward
    order; errors name the file and the line."""
    rows = read_csv_rows(path)
    header = [h.strip() for h in rows[0][1]] if rows else []
    if "name" not in header or "size_bytes" not in header:
        raise ValueError(f"{path}: a parameter list needs 'name' and 'size_bytes' columns, "
                         f"got {', '.join(header) or 'no header'}")
    at, pairs = (header.index("name"), header.index("size_bytes")), []
    for line, row in rows[1:]:
        try:
            pairs.append((row[at[0]].strip(), int(row[at[1]])))
        except (IndexError, ValueError):
            raise ValueError(f"{path}: line {line}: size_bytes must be a whole number of bytes") from None
    return pairs


def read_parameter_list(path: str | Path) -> Profile | list[tuple[str, int]]:
    """The parameter list in a file: a CSV with ``name`` and ``size_bytes`` columns
    (:func:`read_parameter_csv`) or a CSV profile (with ``forward_s``/``backward_s``
    columns); a JSON profile, a JSON list of ``[name, bytes]`` pairs or a JSON object of
    ``name: bytes``. What :func:`profile_from_trace` takes as ``parameters``, read from disk."""
    path = Path(path)
    if path.name.lower().endswith(".csv"):
        rows = read_csv_rows(path)
        header = [h.strip() for h in rows[0][1]] if rows else []
        if "forward_s" in header or "backward_s" in header:
            return read_profile_csv(path, name=path.stem)
        return read_parameter_csv(path)
    document = read_json_document(path)
    if isinstance(document, Mapping) and "tensors" in document:
        return Profile.read(path)
    if isinstance(document, Mapping):
        return dict(document)
    if isinstance(document, list):
        return [tuple(item) if isinstance(item, list) else item for item in document]
    raise ValueError(f"{path}: expected a profile, a list of [name, bytes] pairs or an object of name: bytes")


def parameters_from_trace(trace: Any) -> list[tuple[str, int]]:
    """The parameter list of a traced model from the trace alone, for traces taken with
    ``record_shapes=True`` and a ``schedule`` (one ``ProfilerStep`` per step): the gradient
    sizes the first step's AccumulateGrad events hold, in forward order (the reverse of the
    order they became ready), named ``param0, param1, ...``.

    Use it when the model's own parameter list is not at hand (a trace someone published);
    its profile then has the reverse of the trace's ready order as its forward order. A
    folder or list of a job's traces gives the lowest rank's list.
    """
    if isinstance(trace, JobTraces) or (not isinstance(trace, (Mapping, Named))
                                        and (not isinstance(trace, (str, Path)) or Path(trace).is_dir())):
        by_rank = documents_by_rank(trace)
        path, doc = by_rank[min(by_rank)]
        trace = Named(str(path), doc)
    source, events, _ = load_trace(trace)
    steps = sorted((e for e in events if e.name.startswith(STEP_PREFIX) and not e.cat.startswith("gpu")),
                   key=lambda e: e.ts)
    if not steps:
        raise ValueError(f"{source}: no ProfilerStep annotations: give the model's parameter list (names and bytes, "
                         "forward order) to read a trace without them")
    acc_name = ACCUMULATE_GRAD if any(e.name == ACCUMULATE_GRAD for e in events) else EVALUATE_FUNCTION + ACCUMULATE_GRAD
    first = steps[0]
    acc = sorted((e for e in events if e.name == acc_name and first.ts <= e.ts < first.end), key=lambda e: e.end)
    if not acc:
        raise ValueError(f"{source}: {first.name} holds no AccumulateGrad event: the trace holds no backward pass")
    sizes = [gradient_bytes(e) for e in acc]
    if any(size is None for size in sizes):
        raise ValueError(f"{source}: AccumulateGrad events without input shapes: record the trace with "
                         "record_shapes=True, or give the model's parameter list")
    return [(f"param{i}", int(size)) for i, size in enumerate(reversed(sizes))]


__all__ = ["MATCH_WINDOW", "read_parameter_csv", "read_parameter_list", "parameters_from_trace"]
