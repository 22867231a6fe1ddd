"""The adapter registry. A framework is a package ``suite/adapters/<framework>/`` whose
``__init__`` names its adapter class(es) in ``ADAPTERS`` (``{"name": "module:Class"}``) and
imports no framework; the registry finds the packages itself, so adding a framework needs no
line outside its folder. Third-party packages add theirs through the ``dlsuite.adapters``
entry-point group. Nothing here imports a framework."""

from __future__ import annotations

import importlib
import pkgutil

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


ADAPTERS: Registry[type[Adapter]] = Registry(
    "framework",
    entry_point_group="dlsuite.adapters",
    discover=discover_packages,
    reserved=RESERVED_NAMES,
)


def adapter_class(name: str) -> type[Adapter]:
    return ADAPTERS.load(name)


__all__ = ["ADAPTERS", "Adapter", "DeviceInfo", "adapter_class"]
