"""The manual (docs/: the MODEL and methods pages, the README's examples, the API reference)
builds with Sphinx with warnings as errors, as CI builds it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_manual_builds_without_a_warning(tmp_path):
    for module in ("sphinx", "numpydoc", "myst_parser", "furo"):
        pytest.importorskip(module)
    # Built from a copy, so that the pages it generates (the API's, the examples') land there.
    shutil.copytree(ROOT / "docs", tmp_path / "docs", ignore=shutil.ignore_patterns("_api", "_build", "examples.md"))
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    html = tmp_path / "html"
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-j", "auto", "-b", "html",
                           str(tmp_path / "docs"), str(html)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    examples = (html / "examples.html").read_text(encoding="utf-8")
    assert "bucket_cap_mb" in examples and "profile_model" in examples       # the README's first examples
    # Each example was run: the first prints its plan's T, groups and status; the one that
    # starts a process group says it needs a launcher instead.
    assert "Printed (ran in" in examples and "[[2], [1, 0]] OPTIMAL" in examples
    assert "Not run at this build: it starts a process group" in examples
    assert (html / "MODEL.html").exists() and (html / "methods.html").exists()
    pattern = (html / "_api" / "fusionopt.model.html").read_text(encoding="utf-8")
    assert "HSDP" in pattern and "require_plan" in pattern


def test_an_example_that_fails_stops_the_build_naming_it():
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        import readme_examples
    finally:
        sys.path.pop(0)
    readme = "## Broken\n\n```python\nprint('before')\n1 / 0\n```\n"
    with pytest.raises(RuntimeError, match=r"README example 1 \(Broken\) failed: ZeroDivisionError"):
        readme_examples.page(readme)
    assert readme_examples.why_not_run("import no_such_module_here\n") == (
        "it needs no_such_module_here, which is not installed where this manual was built")
    printed = readme_examples.page("## Fine\n\n```python\nprint(6 * 7)\n```\n")
    assert "```text\n42\n```" in printed
