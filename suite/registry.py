"""One registry per plug-in kind (adapters, backends, launchers, schedulers, levels), lazily
imported: each is the only list of its names.

Entries are ``"module:attribute"`` strings, imported on first use, so listing what exists
never imports a framework. An import error is kept and reported only when someone selects
that entry, naming what is missing (ReFrame's ``register_scheduler(..., error=err)`` idea).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib import metadata
from typing import Generic, TypeVar

from suite.errors import ConfigError, SuiteError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(
        self,
        kind: str,
        *,
        entry_point_group: str | None = None,
        discover: Callable[[], dict[str, str]] | None = None,
        error: Callable[[str], SuiteError] = ConfigError,
        reserved: dict[str, str] | None = None,
        unknown_hint: Callable[[], str] | None = None,
    ) -> None:
        """``discover`` (called once, on first use) returns more ``name -> "module:attr"``
        entries found without a list (the adapter packages); ``entry_point_group`` adds those
        installed packages declare. A name registered explicitly wins over both. ``reserved``
        (name -> what the suite means by it) are names no entry may take: one that does is
        listed, and loading it is an error saying why and to rename it. ``unknown_hint`` adds to
        the unknown-name error what ``discover`` found and could not register ("" for
        nothing)."""
        self.kind = kind
        self._targets: dict[str, str] = {}
        self._loaded: dict[str, T] = {}
        self._group = entry_point_group
        self._discover = discover
        self._scanned = False
        self._error = error
        self._reserved = dict(reserved or {})
        self._unknown_hint = unknown_hint

    def register(self, name: str, target: str) -> None:
        """Register ``name`` as ``"package.module:Attribute"`` (imported on first use)."""
        if ":" not in target:
            raise ValueError(f"{self.kind} target must be 'module:attribute', got {target!r}")
        self._targets[name] = target

    def _scan_entry_points(self) -> None:
        if self._scanned:
            return
        self._scanned = True
        if self._discover is not None:
            for name, target in self._discover().items():
                self._targets.setdefault(name, target)
        if self._group is not None:
            for ep in metadata.entry_points(group=self._group):
                self._targets.setdefault(ep.name, ep.value)

    def names(self) -> list[str]:
        self._scan_entry_points()
        return sorted(self._targets)

    def target(self, name: str) -> str:
        self._scan_entry_points()
        if name not in self._targets:
            known = ", ".join(self.names()) or "none"
            hint = self._unknown_hint() if self._unknown_hint is not None else ""
            raise self._error(
                f"unknown {self.kind} {name!r}; choose one of: {known}"
                + (f"; {hint}" if hint else "")
            )
        if name in self._reserved:
            raise self._error(
                f"{self.kind} name {name!r} ({self._targets[name]}) is reserved: "
                f"{self._reserved[name]}; give the {self.kind} another name"
            )
        return self._targets[name]

    def load(self, name: str) -> T:
        if name in self._loaded:
            return self._loaded[name]
        target = self.target(name)
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise self._error(
                f"{self.kind} {name!r} cannot be loaded: importing {module_name} failed "
                f"({exc}); install what it imports in this environment"
            ) from exc
        try:
            obj: T = getattr(module, attr)
        except AttributeError:
            raise self._error(
                f"{self.kind} {name!r}: {module_name} has no attribute {attr!r}"
            ) from None
        self._loaded[name] = obj
        return obj

    def names_where(self, test: Callable[[T], bool]) -> list[str]:
        """The names whose entry passes ``test``, each loaded to ask it. For messages that
        list the alternatives to a refused choice: an entry that does not load here is left
        out (it could not be chosen either)."""
        out = []
        for name in self.names():
            try:
                entry = self.load(name)
            except SuiteError:
                continue
            if test(entry):
                out.append(name)
        return out
