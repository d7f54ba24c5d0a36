"""How much host memory a run's ranks allocate, checked before any of it is.

Every rank holds each tensor's gradient, the pattern its check compares against, the fused
message buffer, (sharded plans) its shard stores and (messages through PowerSGD) the
factors: :func:`rank_bytes` counts them from the plan's layout, as the runners allocate them. :func:`check_host_memory` refuses a run whose
ranks on this host would need more than the memory available now, in one line, instead of
failing part way with an allocation error.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from fusionopt.executor._job import Job
from fusionopt.executor._powersgd import PowerSGDMessages
from fusionopt.executor._programs import build_program, wire_collectives, wire_encodings
from fusionopt.executor._shard_data import ShardData
from fusionopt.executor._shards import ShardLayout
from fusionopt.model._cost import check_count
from fusionopt.model._wire import compressed_collectives

MEMINFO = Path("/proc/meminfo")


def rank_bytes(job: Job, size: int, *, word_sizes: tuple[int, ...] = (8, 4, 2, 1)) -> int:
    """Bytes one rank of ``size`` allocates to run ``job`` (its buffers; the interpreter aside).

    >>> from fusionopt.cost import AlphaBeta

    >>> from fusionopt.model import Plan, Problem, Profile
    >>> profile = Profile.from_arrays([4096, 1024, 2048], [1e-3] * 3, [3e-3, 2e-3, 1e-3])
    >>> job = Job(Problem(profile, AlphaBeta(1e-4, 1e-9)), Plan.from_groups(profile, [[2], [1, 0]]))
    >>> rank_bytes(job, 2)      # gradients and patterns 2 x 7168, scratch 4096, fused 5120
    23552
    """
    size = check_count("size", size)
    given, word_sizes = word_sizes, tuple(word_sizes) if isinstance(word_sizes, (tuple, list)) else ()
    if not word_sizes or any(isinstance(w, bool) or w not in (8, 4, 2, 1) for w in word_sizes):
        raise ValueError(f"word_sizes must be word sizes in bytes among 8, 4, 2 and 1, got {given!r}")
    problem = job.scaled_problem()
    program = build_program(problem, job.plan)
    layout = ShardLayout(job.problem.profile, wire_collectives(program), size=size, word_sizes=word_sizes,
                         encodings=wire_encodings(problem, program))
    words = ShardData.words(layout, unpack=program.gathers_to_tensors, channels=program.channels)
    compressed = compressed_collectives(problem, program)
    if any(compressed):
        words += PowerSGDMessages(layout, problem.compressor, compressed, size=size, xp=np,
                                  allocate=lambda count, dtype: np.empty(count, dtype)).words()
    return int(words) * layout.word_bytes


def available_memory() -> int | None:
    """Bytes of memory this host can give now without swapping (``MemAvailable`` of
    ``/proc/meminfo``; else the free pages); None where neither is known."""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def size_words(nbytes: float) -> str:
    """``nbytes`` in the largest binary unit it fills.

    >>> size_words(512), size_words(3 * 2**30), size_words(2.5 * 2**50)
    ('512 B', '3 GiB', '2.5 PiB')
    """
    for unit, scale in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.4g} {unit}"
    return f"{nbytes:.4g} B"


def check_host_memory(job: Job, ranks: int, *, available: int | None = None) -> int:
    """Refuse (``MemoryError``, one line) a run whose ``ranks`` ranks on this host need more
    than ``available`` bytes (default: :func:`available_memory`); returns the bytes needed."""
    ranks = check_count("ranks", ranks)
    if available is not None and (isinstance(available, bool) or not isinstance(available, (int, float))
                                  or not 0 <= available <= math.inf):
        raise ValueError(f"available must be a number of bytes >= 0, got {available!r}")
    per_rank = rank_bytes(job, ranks)
    needed = ranks * per_rank
    if available is None:
        available = available_memory()
    if available is not None and needed > available:
        raise MemoryError(
            f"the run needs {size_words(needed)} ({needed} B) of memory on this host: {ranks} rank"
            f"{'s' * (ranks != 1)} x {size_words(per_rank)} (the gradients, their check patterns and the "
            f"message buffers), and {size_words(available)} is available; run a smaller profile or fewer ranks")
    return needed


__all__ = ["available_memory", "check_host_memory", "rank_bytes", "size_words"]
