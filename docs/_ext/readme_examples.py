"""A Sphinx extension: the README's Python examples as the manual's gallery page.

At each build it writes ``examples.md`` beside the other pages: every ```` ```python ````
block of the README, in order, under the README heading it stands in, so the gallery is the
README's own code and cannot drift from it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

PAGE = "examples.md"
FENCE = re.compile(r"^```python\n(.*?)^```", re.M | re.S)
HEADING = re.compile(r"^(#{2,3}) (.+)$", re.M)


def examples(readme: str) -> list[tuple[str, str]]:
    """``(heading, code)`` for each Python block of ``readme``, in order."""
    found = []
    for block in FENCE.finditer(readme):
        headings = HEADING.findall(readme, 0, block.start())
        found.append((headings[-1][1] if headings else "Example", block.group(1)))
    return found


def page(readme: str) -> str:
    """The gallery page in Markdown."""
    lines = ["# Examples", "", "The Python examples of the README, each under the README section it belongs to.", ""]
    for k, (heading, code) in enumerate(examples(readme), start=1):
        lines += [f"## {k}. {heading}", "", "```python", code.rstrip("\n"), "```", ""]
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
