"""What each framework documents about its optimizers, and what it implements:
``documented.toml`` next to this file, loaded and checked against the rules' vocabulary.

An :class:`Entry` is one framework's optimizer (``pytorch.adamw``). Its *documented* flags are
those its documentation states (with the basis: a formula, words, or a cited paper); its
*observed* flags are the implementation's full variant (read in the installed source and
measured by ``benchmarks/studies/optimizer_differences.py``). A benchmark checks a framework's run
against :meth:`Entry.documented_rule` (the documentation, completed with the observed flags
where it is silent) and reports which variant it follows; an entry whose documented and
observed flags disagree (:meth:`Entry.mismatches`) is a framework that differs from its own
documentation.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from suite.errors import ConfigError
from suite.optimizers.rules import FAMILIES, REDUCTIONS, Rule, make

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PATH = Path(__file__).with_name("documented.toml")
FRAMEWORKS = ("pytorch", "tensorflow", "jax", "mxnet")
#: the suite's optimizer names (the benchmark's ``optimizer`` parameter)
OPTIMIZERS = (
    "sgd",
    "momentum",
    "nesterov",
    "adam",
    "adamw",
    "amsgrad",
    "rmsprop",
    "adagrad",
    "lamb",
    "lars",
)
BASES = ("formula", "text", "reference")


@dataclass(frozen=True)
class Entry:
    framework: str
    optimizer: str
    family: str
    api: str = ""
    hyper: dict[str, str] = field(default_factory=dict)
    fixed: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    documented: dict[str, str] = field(default_factory=dict)
    basis: dict[str, str] = field(default_factory=dict)
    observed: dict[str, str] = field(default_factory=dict)
    reduction: str = "pairwise"
    doc: str = ""
    quote: str = ""
    note: str = ""
    unsupported: str = ""

    @property
    def supported(self) -> bool:
        return not self.unsupported

    def documented_variant(self) -> dict[str, str]:
        """The documented flags, completed with the observed ones where the docs are silent."""
        return {**self.observed, **self.documented}

    def mismatches(self) -> dict[str, tuple[str, str]]:
        """flag -> (documented, implemented) where the two differ."""
        return {
            k: (v, self.observed[k])
            for k, v in self.documented.items()
            if k in self.observed and self.observed[k] != v
        }

    def observed_rule(self, **hyper: Any) -> Rule:
        return make(self.family, self.observed, **hyper)

    def documented_rule(self, **hyper: Any) -> Rule:
        return make(self.family, self.documented_variant(), **hyper)


def _check_entry(e: Entry) -> None:
    where = f"{PATH.name} [{e.framework}.{e.optimizer}]"
    if e.family not in FAMILIES:
        raise ConfigError(f"{where}: family {e.family!r} is not one of {', '.join(FAMILIES)}")
    if e.unsupported:
        return
    cls = FAMILIES[e.family]
    for label, flags in (("documented", e.documented), ("observed", e.observed)):
        for key, value in flags.items():
            if key not in cls.variants or value not in cls.variants[key]:
                raise ConfigError(f"{where}: {label} {key} = {value!r} is not a {e.family} variant")
    missing = set(cls.variants) - set(e.observed)
    if missing:
        raise ConfigError(f"{where}: observed lacks {', '.join(sorted(missing))}")
    for key in e.basis:
        if key not in e.documented:
            raise ConfigError(f"{where}: basis {key} has no documented flag")
        if e.basis[key] not in BASES:
            raise ConfigError(f"{where}: basis {key} = {e.basis[key]!r}; use {', '.join(BASES)}")
    if set(e.documented) - set(e.basis):
        raise ConfigError(f"{where}: every documented flag needs a basis")
    for label, names in (("hyper", e.hyper), ("defaults", e.defaults), ("fixed", e.fixed)):
        for key in names:
            if key not in cls.defaults:
                raise ConfigError(f"{where}: {label} {key!r} is not a {e.family} hyperparameter")
    if e.reduction not in REDUCTIONS:
        raise ConfigError(f"{where}: reduction {e.reduction!r}")
    if not e.doc or not e.quote:
        raise ConfigError(f"{where}: needs doc and quote")


@cache
def load(path: Path = PATH) -> dict[tuple[str, str], Entry]:
    """Every entry of ``documented.toml``, keyed by (framework, optimizer), checked."""
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    out: dict[tuple[str, str], Entry] = {}
    for framework, table in doc.items():
        if framework not in FRAMEWORKS:
            raise ConfigError(f"{path.name}: unknown framework {framework!r}")
        for optimizer, fields in table.items():
            if optimizer not in OPTIMIZERS:
                raise ConfigError(f"{path.name}: unknown optimizer {framework}.{optimizer}")
            entry = Entry(framework=framework, optimizer=optimizer, **fields)
            _check_entry(entry)
            out[(framework, optimizer)] = entry
    return out


def entry(framework: str, optimizer: str) -> Entry:
    """The entry for ``framework``'s ``optimizer`` (ConfigError naming the known ones)."""
    entries = load()
    if optimizer not in OPTIMIZERS:
        raise ConfigError(
            f"optimizer {optimizer!r}: unknown; choose one of {', '.join(OPTIMIZERS)}"
        )
    try:
        return entries[(framework, optimizer)]
    except KeyError:
        raise ConfigError(f"{framework}.{optimizer}: no entry in {PATH.name}") from None
