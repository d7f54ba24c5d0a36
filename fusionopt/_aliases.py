"""The module paths of the previous release, kept as deprecated aliases for one release.

Every module but the public faces (the packages and :mod:`fusionopt.cost`,
:mod:`fusionopt.reporting`, :mod:`fusionopt.checks`) is private now: ``fusionopt.model.cost``
became ``fusionopt.model._cost``, whose public names :mod:`fusionopt.cost` gives. An import of an
old path still finds the module, with a ``DeprecationWarning`` that names the face to import
from instead.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings

# The faces that give a private module's names where it is not its own package.
_FACE_OF = {"fusionopt.model._cost": "fusionopt.cost", "fusionopt.model._collectives": "fusionopt.cost",
            "fusionopt.model._cost_files": "fusionopt.cost", "fusionopt.model._encoding": "fusionopt.cost",
            "fusionopt.model._overhead": "fusionopt.cost", "fusionopt.model._io": "fusionopt.reporting"}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``fusionopt.X.name`` as the private ``fusionopt.X._name``, warning."""

    def find_spec(self, fullname, path=None, target=None):
        parent, _, name = fullname.rpartition(".")
        if not parent.startswith("fusionopt") or not name or name.startswith("_"):
            return None
        loaded = sys.modules.get(parent)
        if loaded is not None and not isinstance(getattr(loaded, name, sys), type(sys)):
            return None             # the face's own name (``fusionopt.executor.calibrate``), not a module
        private = f"{parent}._{name}"
        try:
            found = importlib.util.find_spec(private)
        except (ImportError, ValueError):
            return None
        if found is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, origin=private)

    def create_module(self, spec):
        private = spec.origin
        face = _FACE_OF.get(private, private.rpartition(".")[0])
        warnings.warn(f"{spec.name} is deprecated and will be removed: it is private now ({private}); "
                      f"import its public names from {face}", DeprecationWarning, stacklevel=2)
        return importlib.import_module(private)

    def exec_module(self, module):
        """The private module ran when it was imported."""


def install() -> None:
    """Put the alias finder last on ``sys.meta_path`` (once): real modules are found first."""
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.append(_Alias())
