"""Every name the scripts outside the package (benchmarks/, the ReFrame test library ReFrame loads by path) import from the suite
exists: a move inside the suite (the architecture rebuild took ``suite.levels.network.run.
execute`` away) must not leave a benchmark that fails only when someone runs it. Reads the
scripts' syntax trees and imports the suite's own modules (never a DL framework)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from tests.helpers import ROOT

SCRIPTS = sorted(
    [*(ROOT / "benchmarks").glob("*.py"), ROOT / "suite" / "reframe" / "dlsuite_checks.py"]
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
