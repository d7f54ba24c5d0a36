"""Small helpers for the scripts that write results as Markdown (papers/, validation/).

>>> markdown_table(("method", "T (ms)"), [("wfbp", 14.0), ("dp", 14.0)])
['| method | T (ms) |', '|---|---|', '| wfbp | 14.0 |', '| dp | 14.0 |']
>>> command_line("papers/x/reproduce.py", ["--quick", "--out", "results"], "results")
'python papers/x/reproduce.py --quick --out results'

A script's stored result is what its reference arguments produce; a run with other arguments
(a subset, a smoke run, another budget) writes into a ``subset`` folder beside it
(:func:`changed_options`, :func:`subset_location`), and an interrupted run writes what
finished to ``STEM.interrupted.md`` (:class:`Progress`), so the stored result is never
replaced by less.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import sys
from typing import Any, Iterable, Mapping, Sequence

from fusionopt.model._cost import check_flag
from fusionopt.model._io import read_json_document, write_bytes_atomic, write_json_atomic, write_text_atomic

__all__ = [
    "SAFEGUARD_SECONDS", "SUBSET", "Progress", "changed_options", "command_line", "counts", "fraction",
    "interrupted_path", "markdown_table", "nonnegative_float", "nonnegative_int", "positive_float", "positive_int",
    "pyplot", "read_json_document", "reproduction_parser", "save_png", "subset_location", "write_bytes_atomic",
    "write_json_atomic", "write_result", "write_text_atomic",
]

# The wall-clock limit the scripts give a search that stops on a deterministic budget (CP-SAT's
# work units, HiGHS's nodes, layerwise-opt's kicks): a safeguard far beyond what the budget takes.
SAFEGUARD_SECONDS = 600.0
# The folder beside a stored result where a run with other arguments writes its files.
SUBSET = "subset"


def changed_options(parser: argparse.ArgumentParser, args: argparse.Namespace, *,
                    reference: Mapping[str, Any] | None = None, leave: Iterable[str] = ()) -> list[str]:
    """The options of ``args`` whose values differ from those of the run that made the stored
    result, as the command line spells them: that run's arguments are the parser's defaults
    updated with ``reference`` (by destination). Options in ``leave`` (destinations that only
    say where to write) are not compared.

    >>> parser = argparse.ArgumentParser()
    >>> _ = parser.add_argument("--steps", type=int, default=30)
    >>> _ = parser.add_argument("--out", default="results")
    >>> changed_options(parser, parser.parse_args(["--steps", "30", "--out", "x"]), leave=["out"])
    []
    >>> changed_options(parser, parser.parse_args(["--steps", "5"]))
    ['--steps']
    >>> changed_options(parser, parser.parse_args([]), reference={"steps": 10})
    ['--steps']
    """
    made_by = {dest: parser.get_default(dest) for dest in vars(args)}
    made_by.update(reference or {})
    skipped = set(leave)
    return [f"--{dest.replace('_', '-')}" for dest, value in vars(args).items()
            if dest not in skipped and value != made_by.get(dest)]


def subset_location(path: str | os.PathLike, stored: str | os.PathLike, changed: Sequence[str], *,
                    folder: bool = False, stream: Any = None) -> str:
    """Where a run writes ``path``, a result file (or with ``folder=True`` a folder of result
    files): ``path`` itself, unless the run's options ``changed`` from the stored result's
    (:func:`changed_options`) and ``path`` is the stored result's own location ``stored``;
    then the same file in a ``subset`` folder beside it (a folder: its ``subset`` folder),
    said in one line on ``stream`` (default stderr). The stored result is left as it was.

    >>> import io as _io; err = _io.StringIO()
    >>> subset_location("results/exact.md", "results/exact.md", ["--quick"], stream=err)
    'results/subset/exact.md'
    >>> print(err.getvalue(), end="")
    --quick: not the stored result's arguments: writing results/subset/exact.md (results/exact.md is left as it was)
    >>> subset_location("results", "results", ["--steps"], folder=True, stream=err)
    'results/subset'
    >>> subset_location("mine/exact.md", "results/exact.md", ["--quick"]), subset_location("results", "results", [])
    ('mine/exact.md', 'results')
    """
    folder = check_flag("folder", folder)
    if isinstance(changed, (str, bytes)):
        raise ValueError(f"changed must be a sequence of option names, got the string {changed!r}")
    where = os.fspath(path)
    if not changed or os.path.abspath(where) != os.path.abspath(os.fspath(stored)):
        return where
    if folder:
        target = os.path.join(where, SUBSET)
    else:
        head, name = os.path.split(where)
        target = os.path.join(head, SUBSET, name)
    print(f"{', '.join(changed)}: not the stored result's arguments: writing {target} ({where} is left as it was)",
          file=stream or sys.stderr)
    return target


def _bounded(kind: type, low: float, inclusive: bool, what: str, below: float = math.inf):
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what}, got {text!r}") from None
        if not math.isfinite(value) or value < low or (value == low and not inclusive) or value >= below:
            raise argparse.ArgumentTypeError(f"{what}, got {text!r}")
        return value
    parse.__name__ = what
    return parse


positive_int = _bounded(int, 0, False, "must be a whole number >= 1")
"""An ``argparse`` type: a whole number >= 1 (steps, batch, workers), else one error line.

>>> positive_int("3")
3
"""
nonnegative_int = _bounded(int, 0, True, "must be a whole number >= 0")
"""An ``argparse`` type: a whole number >= 0 (warm-up steps)."""
positive_float = _bounded(float, 0.0, False, "must be a positive, finite number")
"""An ``argparse`` type: a positive, finite number (budgets, scales, seconds)."""
nonnegative_float = _bounded(float, 0.0, True, "must be a finite number >= 0")
"""An ``argparse`` type: a finite number >= 0."""
fraction = _bounded(float, 0.0, True, "takes a fraction in [0, 1) (0.05 for 5%)", below=1.0)
"""An ``argparse`` type: a fraction in ``[0, 1)`` (``--min-gain``).

>>> fraction("0.05")
0.05
"""


def counts(at_least: int, each: str):
    """An ``argparse`` type: whole numbers ``>= at_least`` separated by commas (``--workers
    8,64``), as a list in the order given; else one error line, ``each`` saying what one is
    for.

    >>> counts(2, "workers a job")("8,64")
    [8, 64]
    >>> counts(2, "ranks a run")("1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: at least 2 ranks a run, got '1'
    """
    def parse(text: str) -> list[int]:
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"whole numbers separated by commas, got {text!r}") from None
        if not values or min(values) < at_least:
            raise argparse.ArgumentTypeError(f"at least {at_least} {each}, got {text!r}")
        return values
    parse.__name__ = f"comma-separated whole numbers >= {at_least}"
    return parse


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
    if not str(name).lower().endswith(".png"):
        raise ValueError(f"{name}: save_png writes PNG: give a .png file name")
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
    """The lines of a Markdown table; each row holds at most a cell per column of ``header``
    (a shorter row's last cells are left empty)."""
    if isinstance(header, (str, bytes)):
        raise ValueError(f"header must be a sequence of column names, got the string {header!r}")
    rows = [list(row) for row in rows]
    odd = next((k for k, row in enumerate(rows) if len(row) > len(header)), None)
    if odd is not None:
        raise ValueError(f"row {odd} of the table has {len(rows[odd])} cells for {len(header)} columns: {rows[odd]!r}")
    rows = [row + [""] * (len(header) - len(row)) for row in rows]
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


class Progress:
    """A line on stderr per finished step of a long script, with the time so far and an
    estimate of the rest of the stage; and, when the user interrupts (Ctrl-C), the lines so far
    written to ``log`` (atomically) instead of a traceback, leaving the full result files as they
    were. Use it around the whole run and return :attr:`exit_code`::

        with Progress(out / "RESULTS.interrupted.md") as progress:
            progress.stage("the grid", total=len(cells))
            for cell in cells:
                ...
                progress.step(f"{cell}: T = ...")
            write_result(...)
        return progress.exit_code

    The estimate assumes the stage's remaining steps take as long as its finished ones did on
    average (``clock`` returns seconds; a test passes its own). A script whose result is also a
    JSON document hands the document of what finished so far to :meth:`keep`; an interruption
    writes it beside the log, as ``STEM.interrupted.json``.

    >>> ticks = iter([0.0, 0.0, 2.0])
    >>> import io as _io; err = _io.StringIO()
    >>> with Progress(None, clock=lambda: next(ticks), stream=err) as p:
    ...     p.stage("grid", total=3)
    ...     p.step("a")
    >>> err.getvalue()
    'grid 1/3, 2 s, about 4 s left: a\\n'
    """

    def __init__(self, log: str | os.PathLike | None, *, clock: Any = None, stream: Any = None):
        import time
        self.log = None if log is None else os.fspath(log)
        self._clock = clock or time.perf_counter
        self._stream = stream
        self.lines: list[str] = []
        self.interrupted = False
        self.kept: Any = None
        self._stage, self._total, self._done = "", None, 0

    def __enter__(self) -> "Progress":
        self._started = self._stage_started = self._clock()
        return self

    def stage(self, name: str, total: int | None = None) -> None:
        """Begin a stage of ``total`` steps (None: not known beforehand)."""
        self._stage, self._total, self._done = name, total, 0
        self._stage_started = self._clock()
        self.lines.append(f"## {name}")

    def step(self, line: str) -> None:
        """One step of the stage is done: print ``line`` with the stage's count and times."""
        self._done += 1
        now = self._clock()
        count = f"{self._done}/{self._total}" if self._total else f"{self._done}"
        where = f"{self._stage} {count}, {now - self._started:.0f} s" if self._stage else f"{now - self._started:.0f} s"
        if self._total and self._done < self._total:
            left = (now - self._stage_started) / self._done * (self._total - self._done)
            where += f", about {left:.0f} s left"
        self.lines.append(line)
        print(f"{where}: {line}", file=self._stream or sys.stderr, flush=True)

    def keep(self, document: Any) -> None:
        """Hold ``document`` (JSON-able: the result of the steps finished so far) for an
        interruption to write; each call replaces the last."""
        self.kept = document

    @property
    def exit_code(self) -> int:
        """0, or 130 (the shell's code for Ctrl-C) when the run was interrupted."""
        return 130 if self.interrupted else 0

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        if kind is not KeyboardInterrupt:
            return False
        self.interrupted = True
        stream = self._stream or sys.stderr
        elapsed = self._clock() - self._started
        if self.log is None or not any(not line.startswith("## ") for line in self.lines):
            print(f"interrupted after {elapsed:.0f} s, nothing finished: nothing written", file=stream)
            return True
        where = f" during {self._stage} ({self._done} of {self._total or '?'} steps done)" if self._stage else ""
        text = "\n".join([f"# Interrupted after {elapsed:.0f} s{where}", "",
                          "The steps finished before the interruption, as the run printed them. The full "
                          "result files were left as they were.", "", *self.lines, ""])
        write_text_atomic(self.log, text, make_folder=True)
        written = self.log
        if self.kept is not None:
            document = os.path.splitext(self.log)[0] + ".json"
            write_json_atomic(document, self.kept)
            written += f" and {document}"
        print(f"interrupted after {elapsed:.0f} s: the finished steps are in {written}", file=stream)
        return True


def interrupted_path(result: str | os.PathLike) -> str:
    """Where :class:`Progress` writes an interrupted run's lines: beside ``result``, as
    ``STEM.interrupted.md``.

    >>> interrupted_path("validation/results/ps.md")
    'validation/results/ps.interrupted.md'
    """
    head, name = os.path.split(os.fspath(result))
    return os.path.join(head, name.split(".")[0] + ".interrupted.md")
