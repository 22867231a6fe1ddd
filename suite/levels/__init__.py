"""Levels: families of benchmarks. Each level package exposes ``BENCHMARKS`` (a Registry) and
``execute(task, adapter, device, timed_region)`` which the worker calls. No framework imported here."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from suite.errors import ConfigError

# Levels implemented so far; a level listed in PLANNED_LEVELS is a clear error, not an empty run.
LEVELS: dict[str, str] = {
    "operator": "suite.levels.operator",
    "network": "suite.levels.network",
    "distributed": "suite.levels.distributed",
}
PLANNED_LEVELS: tuple[str, ...] = ()


def level_module(level: str) -> ModuleType:
    if level not in LEVELS:
        if level in PLANNED_LEVELS:
            raise ConfigError(
                f"level {level!r} is not implemented in this version yet; "
                f"available: {', '.join(LEVELS)}"
            )
        raise ConfigError(f"unknown level {level!r}; choose one of: {', '.join(LEVELS)} or all")
    return importlib.import_module(LEVELS[level])


def level_execute(level: str) -> Any:
    """The level's ``execute(task, adapter, device, timed_region)``, from its ``execute``
    module. (Not an attribute of the level's package: importing the submodule
    ``<level>.execute`` sets the package's attribute ``execute`` to that module, so a
    function of that name in the package was the module from the second task of a worker
    session on.)"""
    level_module(level)  # an unknown level: one clear error
    return importlib.import_module(f"{LEVELS[level]}.execute").execute


def load_benchmark(level: str, name: str) -> Any:
    """An instance of the benchmark ``name`` of ``level``."""
    cls = level_module(level).BENCHMARKS.load(name)
    return cls()


def benchmark_names(level: str) -> list[str]:
    names: list[str] = level_module(level).BENCHMARKS.names()
    return names
