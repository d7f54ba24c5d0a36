"""Small helpers for the scripts that write results as Markdown (papers/, validation/).

>>> markdown_table(("method", "T (ms)"), [("wfbp", 14.0), ("dp", 14.0)])
['| method | T (ms) |', '|---|---|', '| wfbp | 14.0 |', '| dp | 14.0 |']
>>> command_line("papers/x/reproduce.py", ["--quick", "--out", "results"], "results")
'python papers/x/reproduce.py --quick --out results'
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Iterable, Sequence


def markdown_table(header: Sequence[Any], rows: Iterable[Sequence[Any]]) -> list[str]:
    """The lines of a Markdown table."""
    lines = ["| " + " | ".join(str(h) for h in header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def command_line(script: str, argv: Sequence[str], out: str) -> str:
    """``python SCRIPT ARGV`` as run, with the output folder ``out`` written relative to the
    working directory when it lies inside it, else as ``<output folder>`` (no paths of the
    machine in a result file)."""
    parts = ["python", script]
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("--out", "-o"):
            skip = True
            parts += ["--out", _relative(out)]
        elif a.startswith("--out="):
            parts.append("--out=" + _relative(out))
        else:
            parts.append(a)
    return " ".join(parts)


def _relative(out: str) -> str:
    rel = os.path.relpath(os.path.abspath(out), os.getcwd())
    return rel if not rel.startswith("..") and not os.path.isabs(rel) else "<output folder>"


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and os.replace."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=os.path.basename(path), dir=folder)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)   # mkstemp makes 0600; give the usual file mode
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
