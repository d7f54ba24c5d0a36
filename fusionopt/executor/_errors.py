"""The executor's errors: each names the culprit (a message, a rank, a tensor's byte range)."""

from __future__ import annotations

from typing import Any


class CollectiveTimeout(TimeoutError):
    """A collective did not complete within the run's ``timeout``; the message names it."""


class PlanMismatchError(ValueError):
    """Ranks hold different plans (or run settings): found by a hash check before the first step."""


class GroupAborted(RuntimeError):
    """This rank stopped because another rank failed first (a secondary error)."""


class CorrectnessError(RuntimeError):
    """Reduced gradients differ from the exact sums: a chunk was lost, repeated or corrupted.

    ``measurement`` holds the run up to the failing step (``correct`` is false, ``errors``
    names every wrong byte range found).
    """

    def __init__(self, message: str, measurement: Any = None) -> None:
        super().__init__(message)
        self.measurement = measurement


ERROR_TYPES: dict[str, type[BaseException]] = {
    cls.__name__: cls
    for cls in (CollectiveTimeout, PlanMismatchError, GroupAborted, CorrectnessError,
                ValueError, TimeoutError, RuntimeError, ImportError, MemoryError)
}


def error_document(exc: BaseException, rank: int) -> dict[str, Any]:
    """A JSON-ready record of ``exc`` raised on ``rank`` (for per-rank processes)."""
    name = type(exc).__name__
    return {"type": name if name in ERROR_TYPES else "RuntimeError", "rank": rank,
            "message": str(exc) or name, "secondary": isinstance(exc, GroupAborted)}


def error_from_document(doc: dict[str, Any]) -> BaseException:
    """Rebuild the exception that :func:`error_document` recorded."""
    cls = ERROR_TYPES.get(str(doc.get("type")), RuntimeError)
    return cls(str(doc.get("message", "a rank failed")))
