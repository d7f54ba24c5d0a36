"""Loading the project's scripts (``validation/``, ``papers/``, ``benchmarks/``) in tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(script: str) -> ModuleType:
    """The script at ``script`` (a path from the checkout's root) as a module, loaded once and
    registered before it runs (dataclasses look their module up by name)."""
    spec = importlib.util.spec_from_file_location(script.replace("/", "_").removesuffix(".py"), ROOT / script)
    module = sys.modules.get(spec.name)
    if module is None:
        module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module
