"""What each framework documents about its optimizers, and what it implements: one
``optimizers.toml`` in each framework's own folder (``suite/adapters/<framework>/``, or a
third-party adapter's package), found here and checked against the rules' vocabulary. A new
framework adds its file next to its adapter; nothing outside its folder names it.

An :class:`Entry` is one framework's optimizer (``pytorch.adamw``). Its *documented* flags are
those its documentation states (with the basis: a formula, words, or a cited paper); its
*observed* flags are the implementation's full variant (read in the installed source and
measured by ``benchmarks/studies/optimizer_differences.py``). A benchmark checks a framework's run
against :meth:`Entry.documented_rule` (the documentation, completed with the observed flags
where it is silent) and reports which variant it follows; an entry whose documented and
observed flags disagree (:meth:`Entry.mismatches`) is a framework that differs from its own
documentation.

The file holds one table per suite optimizer, ``[<framework>.<optimizer>]`` (optimizers
sgd, momentum, nesterov, adam, adamw, amsgrad, rmsprop, adagrad, lamb, lars), with the fields:

* ``api``: the framework's call, with its argument names; ``family``: the rule family (sgd,
  adam, rmsprop, adagrad, lamb, lars);
* ``hyper``: suite hyperparameter -> the framework's argument; ``fixed``: suite
  hyperparameters this optimizer name implies (e.g. momentum > 0); ``defaults``: the
  framework's defaults, in suite hyperparameter names;
* ``documented``: variant flags the documentation states; ``basis``: per documented flag,
  "formula" (the docs write the update), "text" (the docs say it in words) or "reference" (the
  docs point at a paper, whose rule is meant);
* ``observed``: the implementation's variant, every flag: read in the installed source and
  measured by benchmarks/studies/optimizer_differences.py (docs/studies/optimizer-differences.md);
* ``reduction``: how the trust-ratio rules' norms are summed, "pairwise" or "sequential";
* ``doc``, ``quote``: where the documentation is (rendered page; the quote is from the
  installed package's docstring of the version the file names) and what it says; ``note``:
  anything else a user moving a recipe should know;
* ``unsupported``: the framework has no such optimizer: why, and what a user would do instead.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from suite.errors import ConfigError
from suite.optimizers.rules import FAMILIES, REDUCTIONS, Rule, make

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: the file each framework's folder holds
FILENAME = "optimizers.toml"
#: the in-tree frameworks' folders
ADAPTERS_DIR = Path(__file__).resolve().parents[1] / "adapters"
#: third-party adapters' group (suite/adapters/__init__.py registers through the same one)
ENTRY_POINT_GROUP = "dlsuite.adapters"
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


def _check_entry(e: Entry, path: Path) -> None:
    where = f"{path.name} [{e.framework}.{e.optimizer}]"
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


def sources() -> dict[str, Path]:
    """framework -> its ``optimizers.toml``: each folder of suite/adapters/ that has one, and
    each third-party adapter's package (the ``dlsuite.adapters`` entry points, keyed by their
    names) that has one. Reads files and package metadata only: no adapter module and no
    framework is imported (and not suite.adapters either: it imports this package)."""
    found = {path.parent.name: path for path in sorted(ADAPTERS_DIR.glob(f"*/{FILENAME}"))}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        package = ep.value.partition(":")[0].rpartition(".")[0]
        spec = importlib.util.find_spec(package) if package else None
        for folder in (spec.submodule_search_locations or []) if spec else []:
            path = Path(folder) / FILENAME
            if path.is_file():
                found.setdefault(ep.name, path)
    return found


@cache
def load(*paths: Path) -> dict[tuple[str, str], Entry]:
    """Every entry of the frameworks' ``optimizers.toml`` files (``paths``; default: every
    framework's, :func:`sources`), keyed by (framework, optimizer), checked."""
    known = sources()
    out: dict[tuple[str, str], Entry] = {}
    for path in paths or tuple(known.values()):
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
        for framework, table in doc.items():
            if framework not in known:
                raise ConfigError(
                    f"{path}: unknown framework {framework!r} (a framework's table lives in "
                    f"its own folder's {FILENAME}: {', '.join(sorted(known))})"
                )
            for optimizer, fields in table.items():
                if optimizer not in OPTIMIZERS:
                    raise ConfigError(f"{path.name}: unknown optimizer {framework}.{optimizer}")
                if (framework, optimizer) in out:
                    raise ConfigError(f"{path}: {framework}.{optimizer} is in a second file")
                entry = Entry(framework=framework, optimizer=optimizer, **fields)
                _check_entry(entry, path)
                out[(framework, optimizer)] = entry
    return out


def frameworks() -> tuple[str, ...]:
    """The frameworks whose folders record what their optimizers document, in load order."""
    return tuple(dict.fromkeys(f for f, _o in load()))


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
        raise ConfigError(
            f"{framework}.{optimizer}: no entry in any {FILENAME} (the framework's folder, "
            f"suite/adapters/{framework}/{FILENAME}, records what its documentation states)"
        ) from None
