"""The adapter registry. A framework is a package ``suite/adapters/<framework>/`` whose
``__init__`` names its adapter class(es) in ``ADAPTERS`` (``{"name": "module:Class"}``) and
imports no framework; the registry finds the packages itself, so adding a framework needs no
line outside its folder. Third-party packages add theirs through the ``dlsuite.adapters``
entry-point group. Nothing here imports a framework."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from suite.adapters.base import RESERVED_NAMES, Adapter, DeviceInfo
from suite.registry import Registry


def discover_packages() -> dict[str, str]:
    """``name -> "module:Class"`` from every adapter package here (its ``ADAPTERS``)."""
    found: dict[str, str] = {}
    for info in pkgutil.iter_modules(__path__):
        if not info.ispkg:
            continue
        package = importlib.import_module(f"{__name__}.{info.name}")
        for name, target in getattr(package, "ADAPTERS", {}).items():
            found.setdefault(name, target)
    return found


def unregistered_packages() -> str:
    """The folders here that register nothing, as the end of the unknown-framework error: a
    package without an ``ADAPTERS`` mapping, a folder without an ``__init__.py`` ("" when
    none). Discovery skips them without a word, so the error is where a contributor looks."""
    found = []
    for folder in sorted(f for root in __path__ for f in Path(root).iterdir()):
        if not folder.is_dir() or folder.name.startswith(("_", ".")):
            continue
        where = f"suite/adapters/{folder.name}/"
        if not (folder / "__init__.py").is_file():
            if any(folder.glob("*.py")):
                found.append(f"{where} has no __init__.py (it needs one with an ADAPTERS mapping)")
            continue
        package = importlib.import_module(f"{__name__}.{folder.name}")
        if not getattr(package, "ADAPTERS", None):
            found.append(
                f"{where} has no ADAPTERS mapping (its __init__.py needs ADAPTERS = "
                f'{{"{folder.name}": "suite.adapters.{folder.name}.adapter:<Class>"}})'
            )
    return "; ".join(found)


ADAPTERS: Registry[type[Adapter]] = Registry(
    "framework",
    entry_point_group="dlsuite.adapters",
    discover=discover_packages,
    reserved=RESERVED_NAMES,
    unknown_hint=unregistered_packages,
)


def adapter_class(name: str) -> type[Adapter]:
    return ADAPTERS.load(name)


__all__ = ["ADAPTERS", "Adapter", "DeviceInfo", "adapter_class"]
