"""Every name the scripts outside the package (benchmarks/, the ReFrame test library ReFrame
loads by path) import from the suite exists and is public: a move inside the suite (the
architecture rebuild took ``suite.levels.network.run.execute`` away) must not leave a benchmark
that fails only when someone runs it, and a script leans on no private function a refactoring
may change. And no file of the repository puts a path on ``sys.path`` by hand, but where a tool
loads it by path (ReFrame's checks). Reads the scripts' syntax trees and imports the suite's own
modules (never a DL framework)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from tests.helpers import ROOT

SCRIPTS = sorted(
    [*(ROOT / "benchmarks").rglob("*.py"), ROOT / "suite" / "reframe" / "dlsuite_checks.py"]
)
OURS = ("suite", "metrics", "schemas")


def _imports(path: Path) -> list[tuple[int, str, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in OURS:
                out += [(node.lineno, node.module, a.name) for a in node.names]
    return out


def _framework_free(module: str) -> bool:
    """A module of an adapter package imports its framework: only its package is checked."""
    return not module.startswith("suite.adapters.") or module.count(".") < 3


def test_the_scripts_are_found() -> None:
    assert len(SCRIPTS) > 10 and any(_imports(p) for p in SCRIPTS)


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_suite_name_a_script_imports_exists(path: Path) -> None:
    missing = []
    for line, module, name in _imports(path):
        if not _framework_free(module):
            spec = importlib.util.find_spec(module.rsplit(".", 1)[0])
            assert spec is not None, (path.name, line, module)
            continue
        mod = importlib.import_module(module)
        if hasattr(mod, name):
            continue
        try:
            importlib.import_module(f"{module}.{name}")
        except ModuleNotFoundError:
            missing.append(f"{path.name}:{line}: from {module} import {name}")
    assert not missing, missing


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_name_a_script_reads_from_a_suite_module_exists(path: Path) -> None:
    """``from suite.levels.distributed import arithmetic as B`` then ``B.bus_factor``: the
    attribute exists (the functions moved out of ``distributed.benchmarks`` once, and the
    allreduce validation broke only when run)."""
    tree = ast.parse(path.read_text())
    aliases: dict[str, object] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in OURS and _framework_free(node.module):
                for a in node.names:
                    try:
                        aliases[a.asname or a.name] = importlib.import_module(
                            f"{node.module}.{a.name}"
                        )
                    except ModuleNotFoundError:
                        pass  # a name, not a module: the test above checks it
    missing = [f"{path.name}:{n.lineno}: {n.value.id}.{n.attr}"  # type: ignore[attr-defined]
               for n in ast.walk(tree)
               if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
               and n.value.id in aliases and not hasattr(aliases[n.value.id], n.attr)]  # fmt: skip
    assert not missing, missing


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_script_imports_a_private_name(path: Path) -> None:
    private = [f"{path.name}:{line}: from {module} import {name}"
               for line, module, name in _imports(path)
               if name.startswith("_") or any(p.startswith("_") for p in module.split("."))]  # fmt: skip
    assert not private, f"make the name public in the suite, or use a public path: {private}"


#: the one file that may put a path on sys.path: ReFrame loads it by path (reframe -c FILE),
#: outside any package, where dlsuite may not be installed
LOADED_BY_PATH = {"suite/reframe/dlsuite_checks.py"}


def test_nothing_puts_a_path_on_sys_path_by_hand() -> None:
    """Scripts run as modules (python -m benchmarks.validation.overhead) from the checkout or
    rely on the installed package; a subprocess gets PYTHONPATH."""
    needles = ["sys.path." + w for w in ("insert", "append", "extend", "[")]  # not this file's
    found = []
    for top in (
        "suite",
        "benchmarks",
        "tests",
        "cluster",
        "examples",
        "containers",
    ):
        for path in (ROOT / top).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            if rel in LOADED_BY_PATH:
                continue
            found += [f"{rel}:{i}" for i, ln in enumerate(path.read_text().splitlines(), 1)
                      if any(n in ln for n in needles)]  # fmt: skip
    assert not found, found
