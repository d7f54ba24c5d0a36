"""The traces of a distributed job, one per rank: found in a folder (:func:`documents_by_rank`,
:class:`JobTraces`), said in words (:func:`describe_ranks`) and read into one profile
(:func:`profile_from_traces`)."""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import numpy as np

from fusionopt.integrations import _attribution
from fusionopt.integrations._kineto import profile_from_trace
from fusionopt.integrations._kineto_events import JobTraces, Named, documents_by_rank
from fusionopt.model._profile import STEP_PARTS, Profile














def describe_ranks(ranks: Sequence[int]) -> str:
    """``"rank 1"``, ``"ranks 1, 3"``.

    >>> describe_ranks([1]), describe_ranks([1, 3])
    ('rank 1', 'ranks 1, 3')
    """
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def profile_from_traces(traces: Any, parameters: Any, **options: Any) -> Profile:
    """One profile from the traces of several ranks of one job: a folder of them, a list of
    files or a :class:`JobTraces`; ``options`` (``ready_order``, ``timeline``, ``name``,
    ``dtype_bytes``, ``forward``, ``statistic``) as for :func:`profile_from_trace`.

    In a folder, the traces are the files named ``*.pt.trace.json`` or ``*.pt.trace.json.gz``
    (as ``tensorboard_trace_handler`` writes one per rank) and any other ``*.json[.gz]``
    holding a ``traceEvents`` list; other files beside them (``parameters.csv``, a profile
    written there) are not traces. Each trace is read by :func:`profile_from_trace`; its
    rank is the trace's own (``distributedInfo.rank``, which torch writes under
    ``torch.distributed``) or else its position in the sorted list (:func:`documents_by_rank`:
    two files of one rank, or ranks that claim different world sizes, are refused). Ranks of
    the world without a trace are named in a warning: the profile is then the others'. The
    profile's ready
    times and forward times are the medians over the ranks, tensor by tensor (medians of
    non-increasing ready times stay non-increasing), and so are its step parts; its ready
    order is the lowest rank's where the medians tie. ``metadata``: ``ranks`` (rank -> file),
    ``steps`` (over all ranks), ``step`` (each part's median over the ranks, the periods of
    every rank's steps) and the per-rank figures of the lowest rank otherwise. With
    ``statistic="mean"`` every median over the ranks is a mean too.
    """
    job = documents_by_rank(traces)
    if job.missing_ranks:
        warnings.warn(f"{describe_ranks(job.missing_ranks)} of a world of {job.world_size} have no trace here: "
                      f"the profile is {describe_ranks(sorted(job))}'s", stacklevel=2)
    by_rank = {rank: (path, profile_from_trace(Named(str(path), doc), parameters, **options))
               for rank, (path, doc) in job.items()}
    pick = _attribution.STATISTICS[options.get("statistic", "median")]
    ranks = sorted(by_rank)
    first = by_rank[ranks[0]][1]
    ready = pick(np.array([by_rank[r][1].ready_times for r in ranks]), axis=0)
    forward = pick(np.array([by_rank[r][1].forward for r in ranks]), axis=0)
    steps = [by_rank[r][1].metadata["step"] for r in ranks]
    step: dict[str, Any] = {key: float(pick([st[key] for st in steps])) for key in steps[0] if key != "periods"}
    step["periods"] = [t for st in steps for t in st["periods"]]
    metadata = dict(first.metadata)
    metadata.update(source="fusionopt.integrations.profile_from_traces",
                    ranks={str(r): by_rank[r][0].name for r in ranks},
                    steps=sum(by_rank[r][1].metadata["steps"] for r in ranks), step=step)
    update = pick(np.array([by_rank[r][1].update for r in ranks]), axis=0)
    profile = Profile.from_arrays(first.sizes, forward, _attribution.backward_times(ready), first.names,
                                  update=update, name=first.name, dtype_bytes=first.dtype_bytes, metadata=metadata, dtypes=first.dtypes,
                                  **{part: step[part] for part in STEP_PARTS})
    position = {i: k for k, i in enumerate(first.ready_order)}
    ready_times = profile.ready_times
    return profile.with_orders(ready_order=sorted(range(profile.n),
                                                  key=lambda i: (float(ready_times[i]), position[i])))


__all__ = ["JobTraces", "documents_by_rank", "describe_ranks", "profile_from_traces"]
