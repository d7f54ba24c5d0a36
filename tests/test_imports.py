"""The package's import graph: no circles, and the model imports nothing above it.

Every ``import`` and ``from ... import`` of a ``fusionopt`` module counts, at module level or
inside a function: an import inside a function that dodges a circle at run time is still a
circle in the design.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fusionopt"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports(path: Path, known: set[str]) -> set[str]:
    """The fusionopt modules ``path`` imports: ``from pkg import name`` is the submodule
    ``pkg.name`` where there is one, else the package itself."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module in known:
            for a in node.names:
                found.add(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module)
    return found


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imports(path, known) - {name} for name, path in found.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_circle_finder_finds_a_circle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(edges) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_imports_inside_functions(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from fusionopt.model import _simulator\n    import fusionopt.cost\n")
    assert imports(source, {"fusionopt.model", "fusionopt.model._simulator", "fusionopt.cost"}) == {
        "fusionopt.model._simulator", "fusionopt.cost"}


def test_no_import_circles():
    edges = graph()
    assert {"fusionopt.cli", "fusionopt.model._simulator", "fusionopt.solvers.exact._cpsat",
            "fusionopt.zoo._bert"} <= set(edges)
    assert circles(edges) == []


def test_the_model_imports_nothing_above_it():
    above = {name: sorted(w for w in targets if not w.startswith("fusionopt.model"))
             for name, targets in graph().items() if name.startswith("fusionopt.model")}
    assert {name: targets for name, targets in above.items() if targets} == {}


SOLVERS_ABOVE = {"fusionopt.solvers._registry", "fusionopt.solvers._comparison", "fusionopt.solvers",
                 "fusionopt.advice", "fusionopt.advice._allreduce", "fusionopt.advice._sharded"}
"""The dispatcher, the comparison and the advice: above the solvers."""


def test_the_solvers_stand_in_the_folders_of_their_families():
    # Every registered method is defined in the folder of its family.
    from fusionopt.solvers import catalogue

    folder = {"framework baseline": "baselines", "paper": "papers", "search": "searches", "exact": "exact"}
    import inspect

    misplaced = {m.name: inspect.unwrap(m.function).__module__ for m in catalogue()
                 if inspect.unwrap(m.function).__module__.split(".")[2] != folder[m.family]}
    assert misplaced == {}


def test_no_solver_climbs_to_the_dispatcher():
    # Solvers register themselves in the catalogue and take warm starts from
    # fusionopt.solvers._warm; none imports the dispatcher (registry), the comparison or the
    # advice, at module level or inside a function.
    edges = graph()
    solvers = [name for name in edges if name.startswith("fusionopt.solvers.") and name not in SOLVERS_ABOVE]
    assert len(solvers) > 25
    assert {name: sorted(edges[name] & SOLVERS_ABOVE) for name in solvers if edges[name] & SOLVERS_ABOVE} == {}


def test_methods_are_registered_by_function_not_by_module_path():
    # The dispatcher imports the solver modules it loads; no import by a string.
    for name, path in modules().items():
        if name.startswith("fusionopt.solvers"):
            text = path.read_text()
            assert "import_module" not in text and "__import__" not in text, name


def test_the_package_map_names_what_exists():
    # fusionopt/__init__.py's map by task names each thing at its documented path: every one
    # of them resolves.
    import importlib
    import re

    import fusionopt

    named = re.findall(r"``(fusionopt(?:\.[A-Za-z_][A-Za-z0-9_]*)+)``", fusionopt.__doc__)
    assert len(named) > 25
    missing = []
    for dotted in named:
        module, _, name = dotted.rpartition(".")
        try:
            found = hasattr(importlib.import_module(module), name)
        except ImportError:
            found = False
        if not found:
            try:
                importlib.import_module(dotted)
                found = True
            except ImportError:
                pass
        if not found:
            missing.append(dotted)
    assert missing == []
