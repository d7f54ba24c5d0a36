"""What the paper reproductions share: methods solved on one problem, their outcomes, the
formats of their numbers, and the run that writes ``RESULTS.md``.

A reproduction (``papers/<paper>/reproduce.py``) is a :class:`Study`: it parses the common
command line, runs its stages with a progress line each, and writes its report and plots
atomically, leaving the stored report untouched when interrupted. What it computes and how
it reads the paper is its own.

>>> fmt_ms(0.01234), fmt_ms(0.5), fmt_ms(float("nan"))
('12.34', '500.0', '-')
>>> fmt_ms(0.01234, digits=2), fmt_ms(0.5, digits=2)
('12.340', '500.00')
>>> fmt_gain(1.94), fmt_gain(1.05), fmt_gain(0.9999)
('+94%', '+5.0%', '-0%')
"""

from __future__ import annotations

import datetime
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple, Sequence

import fusionopt
from fusionopt.model._io import write_bytes_atomic
from fusionopt.model._problem import Problem
from fusionopt.reporting import (Progress, changed_options, command_line, interrupted_path, reproduction_parser,
                                 subset_location)
from fusionopt.solvers._registry import solve
from fusionopt.solvers._result import Result

class MethodSpec(NamedTuple):
    """A method under the key a study reports it by, with its options (a plain
    ``(key, method, options)`` tuple is one too)."""

    key: str
    method: str
    options: dict


@dataclass
class Outcome:
    """One method's result on one problem, as a report reads it (times in seconds).

    ``error`` is the one-line refusal of a method allowed to refuse the problem (then ``T``
    is NaN); ``result`` keeps the full :class:`~fusionopt.solvers.Result`.
    """

    T: float = math.nan
    messages: int = 0
    status: str = ""
    seconds: float = 0.0
    exposed: float = math.nan
    lower_bound: float | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    result: Result | None = None

    @classmethod
    def of(cls, result: Result) -> "Outcome":
        return cls(T=result.iteration_time, messages=result.num_messages, status=str(result.status),
                   seconds=result.solve_seconds,
                   exposed=result.timeline.exposed if result.timeline is not None else math.nan,
                   lower_bound=result.lower_bound, stats=dict(result.stats), result=result)


def solve_methods(problem: Problem, specs: Iterable[MethodSpec], *, may_refuse: Sequence[str] = ()
                  ) -> dict[str, Outcome]:
    """Each method of ``specs`` on ``problem``, by key. A method named in ``may_refuse`` that
    refuses the problem (``ValueError``) gives an :class:`Outcome` with its ``error``; any
    other refusal is raised."""
    if isinstance(may_refuse, (str, bytes)):
        raise ValueError(f"may_refuse must be a sequence of method names, got the string {may_refuse!r}")
    out: dict[str, Outcome] = {}
    for key, method, options in specs:
        if key in out:
            raise ValueError(f"method key {key!r} is given twice: each outcome needs a key of its own")
        try:
            out[key] = Outcome.of(solve(problem, method, **options))
        except ValueError as exc:
            if method not in may_refuse:
                raise
            out[key] = Outcome(error=f"{type(exc).__name__}: {exc}")
    return out


def ratio(a: float, b: float) -> float:
    """``a / b``, NaN where ``b`` is not positive."""
    return a / b if b > 0 else math.nan


def fmt_ms(t: float, digits: int = 1) -> str:
    """Seconds as milliseconds: ``digits`` decimals from 100 ms up, one more below; "-" for NaN."""
    if t != t:
        return "-"
    return f"{1e3 * t:.{digits}f}" if t >= 0.1 else f"{1e3 * t:.{digits + 1}f}"


def compute_source(profiles: dict[str, Any], *others: dict[str, Any]) -> str:
    """Where the zoo's calibrated times of ``profiles`` (label -> profile) come from, read from their
    metadata: the H100 measurements, each model's layer times and, off the H100, the published
    throughput that scales them; ``others`` (the same models on other devices) add their figures."""
    first = next(iter(profiles.values())).metadata
    layers = []
    for label, p in profiles.items():
        source = p.metadata["layer_times"]
        layers.append(f"{label} measured" if source.startswith("measured: ")
                      else f"{label} from {source.split(' (')[0].removeprefix('work at ')}")
    text = f"{first['source'].removeprefix('calibrated: ')}; layer times: {', '.join(layers)}"
    figures: dict[tuple, list[str]] = {}
    for group in (profiles, *others):
        for label, p in group.items():
            fig = p.metadata.get("device_figure")
            if fig is not None:
                figures.setdefault((p.metadata["device"], *sorted(fig.items())), []).append(label)
    for (device, *items), labels in figures.items():
        fig = dict(items)
        text += (f"; on the {device.upper()} every time x {fig['factor']:.2f} for {', '.join(labels)}: "
                 f"{fig['model']} at batch {fig['batch']}, {fig['throughput']:g} samples/s {fig['precision']} "
                 f"({fig['source']}" + (f"; derived: {fig['derived']}" if fig["derived"] else "") + ")")
    return text


def fmt_gain(x: float) -> str:
    """A ratio of times as a signed percentage: 1.94 -> '+94%', 1.05 -> '+5.0%'; "-" for NaN
    (no ratio, as :func:`ratio` gives where the base is not positive)."""
    if x != x:
        return "-"
    v = 100 * (x - 1)
    if abs(v) < 0.05:
        return "+0%" if v >= 0 else "-0%"
    return f"{v:+.0f}%" if abs(v) >= 10 else f"{v:+.1f}%"


class Study:
    """One run of a reproduction: its arguments, progress, clock and report.

    ``with Study(__doc__, script, out, quick_help) as study:`` parses the command line
    (:func:`~fusionopt.reporting.reproduction_parser`; add options to ``study.parser``
    before calling :meth:`parse`), reports each stage (``study.progress``), and
    :meth:`write` puts ``RESULTS.md`` in place atomically. On Ctrl-C the finished steps go to
    ``RESULTS.interrupted.md`` and the stored report is left as it was; the script returns
    ``study.exit_code``. The stored report is what the default arguments produce in the
    default folder ``out``: a run there with other arguments (``--quick``, another budget)
    writes its report and plots into ``out/subset`` instead.
    """

    def __init__(self, doc: str, script: str, out: str, quick: str) -> None:
        self.script = script
        self.stored = out
        self.parser = reproduction_parser(doc, out, quick)
        self.args: Any = None
        self.argv: list[str] = []
        self.started = time.perf_counter()
        self.progress: Progress | None = None

    def parse(self, argv: Sequence[str] | None = None) -> Any:
        """The parsed arguments (the output folder is made when the study starts, so a
        refused command line leaves nothing behind); ``out`` is the ``subset`` folder where
        the arguments are not the stored report's and would write over it."""
        self.argv = list(sys.argv[1:] if argv is None else argv)
        self.args = self.parser.parse_args(self.argv)
        changed = changed_options(self.parser, self.args, leave=("out",))
        self.args.out = subset_location(self.args.out, self.stored, changed, folder=True)
        self.started = time.perf_counter()
        return self.args

    def __enter__(self) -> "Study":
        if self.args is None:
            raise RuntimeError("Study.parse() must run before the study starts")
        os.makedirs(self.args.out, exist_ok=True)
        self.progress = Progress(interrupted_path(self.report_path))
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> bool:
        assert self.progress is not None
        return bool(self.progress.__exit__(*exc))

    @property
    def exit_code(self) -> int:
        return 0 if self.progress is None else self.progress.exit_code

    @property
    def report_path(self) -> str:
        return os.path.join(self.args.out, "RESULTS.md")

    @property
    def elapsed(self) -> float:
        """Seconds since the arguments were parsed (a timing)."""
        return time.perf_counter() - self.started

    def produced_by(self, sources: str) -> str:
        """The report's first line: the command, the date, the package version, the run time
        (a timing) and the machine's cores, then where the paper's own numbers come from."""
        return (f"Produced by `{command_line(self.script, self.argv, self.args.out)}` on "
                f"{datetime.date.today().isoformat()} with fusionopt {fusionopt.__version__} in "
                f"{self.elapsed:.1f} s ({os.cpu_count()} cores). Every number below comes from that run; {sources}.")

    def write(self, text: str, plots: Sequence[str] = ()) -> None:
        """Write ``text`` as ``RESULTS.md`` (atomically) and say what was written."""
        write_bytes_atomic(self.report_path, (text.rstrip("\n") + "\n").encode())
        print(f"wrote RESULTS.md and {len(plots)} plot(s) in {self.elapsed:.1f} s")
