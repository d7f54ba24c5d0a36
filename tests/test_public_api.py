"""The package's face: one public path per concept, private modules behind it, and callers
(the tests, validations, benchmarks and reproductions) that import only public names.

A public module is one whose dotted path has no component starting with ``_``. The faces
below are the only ones; each lists its names in ``__all__``, and no object is listed by two
faces. The previous release's paths still import, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import fusionopt

ROOT = Path(__file__).resolve().parent.parent

FACES = {
    "fusionopt", "fusionopt.advice", "fusionopt.checks", "fusionopt.cli", "fusionopt.cost", "fusionopt.executor",
    "fusionopt.experiments", "fusionopt.integrations", "fusionopt.model", "fusionopt.reporting", "fusionopt.solvers",
    "fusionopt.solvers.baselines", "fusionopt.solvers.exact", "fusionopt.solvers.papers", "fusionopt.solvers.searches",
    "fusionopt.viz", "fusionopt.zoo", "fusionopt.zoo.calibrated", "fusionopt.zoo.fitting", "fusionopt.zoo.published",
}
ENTRY_POINTS = {"fusionopt.__main__", "fusionopt.cli.__main__", "fusionopt.executor.__main__"}
DEPRECATED = {"fusionopt.sweep"}            # the old face of the experiments, for one release

# White-box tests that inject a fault into a private function, and so import its module.
WHITE_BOX = {
    "tests/solvers/test_interrupted_cpsat.py": "Ctrl-C injected into each CP-SAT encoder's search call",
    "tests/solvers/test_interrupted_searches.py": "Ctrl-C injected into the searches' evaluators and warm starts",
    "tests/executor/test_executor_nccl.py": "the NCCL backend's modules imported without CuPy and under a fake CuPy",
}


def all_modules() -> set[str]:
    found = {"fusionopt"}
    for info in pkgutil.walk_packages(fusionopt.__path__, "fusionopt."):
        found.add(info.name)
    return found


def test_the_public_modules_are_the_faces():
    public = {name for name in all_modules() if not any(part.startswith("_") for part in name.split("."))}
    assert public - ENTRY_POINTS - DEPRECATED == FACES
    assert len(all_modules()) > 150                   # the rest are private: most of the package


def test_each_face_lists_its_names_and_no_concept_has_two_faces():
    homes: dict[int, list[str]] = {}
    for face in sorted(FACES - {"fusionopt"}):
        module = importlib.import_module(face)
        assert module.__all__, face
        for name in module.__all__:
            assert not name.startswith("_"), f"{face}.{name}"
            obj = getattr(module, name)            # every listed name resolves
            if isinstance(obj, (type, type(len))) or callable(obj):
                homes.setdefault(id(obj), []).append(f"{face}.{name}")
    assert {paths[0]: paths for paths in homes.values() if len(paths) > 1} == {}
    # The cost models have their face apart from the model's.
    assert "AlphaBeta" in fusionopt.cost.__all__ and "AlphaBeta" not in fusionopt.model.__all__
    # The top level names its faces only; the quick start's names are one import away.
    assert set(fusionopt.__all__) - {"__version__"} == {face.split(".")[1] for face in FACES
                                                      if face.count(".") == 1 and "zoo." not in face}


def imported_private_names(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "fusionopt":
            if any(part.startswith("_") for part in node.module.split(".")):
                found.append(node.module)
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names
                      if a.name.split(".")[0] == "fusionopt" and any(p.startswith("_") for p in a.name.split("."))]
    return found


def test_callers_import_no_private_names():
    callers = [p for folder in ("tests", "validation", "benchmarks", "papers") for p in (ROOT / folder).rglob("*.py")
               if "results" not in p.parts]
    assert len(callers) > 150
    private = {}
    for path in callers:
        name = path.relative_to(ROOT).as_posix()
        found = imported_private_names(path)
        if found and name not in WHITE_BOX:
            private[name] = found
    assert private == {}
    # The white-box tests do import private modules: the list is kept exact.
    assert all(imported_private_names(ROOT / name) for name in WHITE_BOX)


def test_the_private_name_finder_sees_every_spelling(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from fusionopt.model import _fifo\nfrom fusionopt.model._fifo import fifo_ends\n"
                      "import fusionopt.executor._nccl as nccl\nfrom fusionopt.model import Plan\n")
    assert imported_private_names(source) == ["fusionopt.model._fifo", "fusionopt.model._fifo",
                                              "fusionopt.executor._nccl"]


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_the_previous_paths_import_with_a_deprecation_warning():
    # In a fresh interpreter, so that the aliases leave nothing behind in this one.
    done = run_python("import fusionopt.model.cost")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "DeprecationWarning: fusionopt.model.cost is deprecated and will be removed: it is private now "
        "(fusionopt.model._cost); import its public names from fusionopt.cost")
    done = subprocess.run([sys.executable, "-c", "import warnings; warnings.simplefilter('always')\n"
                           "from fusionopt.model.cost import AlphaBeta\nfrom fusionopt.cost import AlphaBeta as A\n"
                           "import fusionopt.sweep, fusionopt\nprint(AlphaBeta is A, fusionopt.sweep.run_sweep is "
                           "fusionopt.experiments.run_sweep, fusionopt.solve is fusionopt.solvers.solve)"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout == "True True True\n", done.stderr
    warned = [line for line in done.stderr.splitlines() if "DeprecationWarning" in line]
    assert len(warned) == 3 and "fusionopt.sweep is deprecated" in warned[1]
    assert "fusionopt.solve is deprecated and will be removed: use fusionopt.solvers.solve" in warned[2]


def test_an_alias_never_shadows_a_faces_own_name():
    # fusionopt.executor.calibrate is the face's function; its old module path is not aliased
    # over it, and a path that never existed is an ImportError as before.
    done = run_python("import fusionopt.executor as e\n"
                      "try:\n    import fusionopt.executor.calibrate\nexcept ImportError as x:\n    print(type(x).__name__)\n"
                      "print(callable(e.calibrate))\n"
                      "try:\n    import fusionopt.model.no_such_module\nexcept ImportError as x:\n    print(x)")
    assert done.stdout.splitlines() == ["ModuleNotFoundError", "True", "No module named 'fusionopt.model.no_such_module'"]


def test_the_top_level_loads_its_faces_when_asked():
    done = run_python("import sys, fusionopt\nprint('fusionopt.integrations' in sys.modules)\n"
                      "fusionopt.integrations.EmulatedLink\nprint('fusionopt.integrations' in sys.modules)\n"
                      "print(sorted(set(fusionopt.__all__) - set(dir(fusionopt))))")
    assert done.stdout.splitlines() == ["False", "True", "[]"], done.stderr
    with pytest.raises(AttributeError, match="module 'fusionopt' has no attribute 'no_such_name'"):
        fusionopt.no_such_name
