"""A Sphinx extension: the README's Python examples as the manual's gallery page, run.

At each build it writes ``examples.md`` beside the other pages: every ```` ```python ````
block of the README, in order, under the README heading it stands in, so the gallery is the
README's own code and cannot drift from it. Each block is run at the build, in a fresh
namespace and a scratch folder, and what it printed is shown under it; a block that cannot
run where the manual is built says why instead (a module that is not installed, or a
process group that only a launcher such as ``torchrun`` starts). A block that fails stops
the build with its error, so a README example that no longer runs is found when the manual
is built.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

PAGE = "examples.md"
FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
HEADING = re.compile(r"^(#{2,3}) (.+)$", re.M)
IMPORTS = re.compile(r"^\s*(?:import|from)\s+([A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*)", re.M)
# What only a launcher provides: the block runs under torchrun, not in the build.
LAUNCHED = ("init_process_group",)


def examples(readme: str) -> list[tuple[str, str]]:
    """``(heading, code)`` for each Python block of ``readme``, in order."""
    found = []
    for block in FENCE.finditer(readme):
        headings = HEADING.findall(readme, 0, block.start())
        found.append((headings[-1][1] if headings else "Example", block.group(1)))
    return found


def why_not_run(code: str) -> str | None:
    """Why ``code`` cannot run where the manual is built, or None."""
    for names in IMPORTS.findall(code):
        for name in names.split(","):
            top = name.strip().split(".")[0]
            if importlib.util.find_spec(top) is None:
                return f"it needs {top}, which is not installed where this manual was built"
    if any(word in code for word in LAUNCHED):
        return "it starts a process group: run it with a launcher (torchrun --nproc-per-node 2 train.py)"
    return None


def run_block(code: str, label: str) -> tuple[str, float]:
    """Run ``code`` in a fresh namespace inside a scratch folder; what it printed and its
    seconds. An error stops the build, naming the example."""
    printed = io.StringIO()
    here = os.getcwd()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="fusionopt-example-") as scratch:
        os.chdir(scratch)
        try:
            with contextlib.redirect_stdout(printed):
                exec(compile(code, label, "exec"), {"__name__": "__main__"})
        except Exception as exc:
            raise RuntimeError(f"{label} failed: {type(exc).__name__}: {exc}") from exc
        finally:
            os.chdir(here)
    return printed.getvalue(), time.perf_counter() - started


def page(readme: str, run: bool = True) -> str:
    """The gallery page in Markdown, each block run (``run``) with what it printed."""
    lines = ["# Examples", "",
             "The Python examples of the README, each under the README section it belongs to, each run when "
             "this manual was built: what it printed is shown under it (timings and measured figures are of "
             "the machine that built the manual).", ""]
    for k, (heading, code) in enumerate(examples(readme), start=1):
        lines += [f"## {k}. {heading}", "", "```python", code.rstrip("\n"), "```", ""]
        if not run:
            continue
        reason = why_not_run(code)
        if reason:
            lines += [f"Not run at this build: {reason}.", ""]
            continue
        printed, seconds = run_block(code, f"README example {k} ({heading})")
        lines += [f"Printed (ran in {seconds:.1f} s):", "", "```text", printed.rstrip("\n") or "(nothing)", "```", ""]
    return "\n".join(lines)


def write_page(app: Any) -> None:
    source = Path(app.srcdir)
    text = page((source.parent / "README.md").read_text(encoding="utf-8"))
    target = source / PAGE
    if not target.exists() or target.read_text(encoding="utf-8") != text:
        target.write_text(text, encoding="utf-8")


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", write_page)
    return {"parallel_read_safe": True}
