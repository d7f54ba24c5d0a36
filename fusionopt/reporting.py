"""Small helpers for the scripts that write results as Markdown (papers/, validation/).

>>> markdown_table(("method", "T (ms)"), [("wfbp", 14.0), ("dp", 14.0)])
['| method | T (ms) |', '|---|---|', '| wfbp | 14.0 |', '| dp | 14.0 |']
>>> command_line("papers/x/reproduce.py", ["--quick", "--out", "results"], "results")
'python papers/x/reproduce.py --quick --out results'
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from typing import Any, Iterable, Sequence

from fusionopt.model._io import write_bytes_atomic, write_json_atomic, write_text_atomic


def reproduction_parser(doc: str, out: str, quick: str) -> argparse.ArgumentParser:
    """The command line every paper reproduction starts from: ``--out`` (default ``out``) and
    ``--quick`` (help text ``quick``); the description is ``doc``'s first paragraph.

    >>> reproduction_parser("Reproduce X.\\n\\nMore.", "here", "a small grid").parse_args(["--quick"])
    Namespace(out='here', quick=True)
    """
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", "-o", default=out, help="output folder (default: this script's folder)")
    parser.add_argument("--quick", action="store_true", help=quick)
    return parser


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend, or None (saying so on stderr) where
    matplotlib is not installed, so that a script writes its tables without its plots."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: plots skipped (pip install matplotlib to get them)", file=sys.stderr)
        return None
    return plt


def save_png(plt: Any, fig: Any, out_dir: str, name: str, dpi: int = 110) -> str:
    """Write ``fig`` as ``out_dir/name`` (PNG, atomically), close it and return ``name``."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    write_bytes_atomic(os.path.join(out_dir, name), buf.getvalue())
    return name


def write_result(folder: str | os.PathLike, stem: str, document: Any, table: str) -> None:
    """Write a validation result as ``folder/stem.json`` (``document``) and ``folder/stem.md``
    (``table``), each atomically, making ``folder`` if needed; then print the table.

    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as d:
    ...     write_result(pathlib.Path(d) / "out", "x", {"T": 1.5}, "| T |")
    ...     sorted(p.name for p in (pathlib.Path(d) / "out").iterdir())
    <BLANKLINE>
    | T |
    ['x.json', 'x.md']
    """
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    write_json_atomic(os.path.join(folder, f"{stem}.json"), document)
    write_text_atomic(os.path.join(folder, f"{stem}.md"), table)
    print()
    print(table)


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
