"""The contributor's path (docs/guide/adding-a-framework.md) against the code it describes, so the
guide cannot go stale: its table of the conformance kit names every test of the kit and nothing
else, it states no count of the kit's tests (the kit prints its own:
tests/conformance/conftest.py), every file of the repository it names exists, and ``make
conformance`` builds nothing but the framework's environment. (tests/integration/
test_adding_a_framework.py runs the guide's minimal adapter through the kit.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.helpers import ROOT

GUIDE = ROOT / "docs" / "guide" / "adding-a-framework.md"
KIT = ROOT / "tests" / "conformance"


def kit_tests() -> set[str]:
    """Every test function of the kit's shared files (adapter-specific files excluded)."""
    names: set[str] = set()
    for path in KIT.glob("test_*.py"):
        if path.name.endswith("_specific.py"):
            continue
        tree = ast.parse(path.read_text())
        names |= {
            n.name
            for n in tree.body
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")
        }
    return names


def test_the_guides_table_names_every_test_of_the_kit() -> None:
    text = GUIDE.read_text()
    table = set(re.findall(r"^\| `(test_\w+)", text, re.M))
    kit = kit_tests()
    assert kit, "no kit tests found"
    assert not kit - table, f"kit tests the guide's table does not list: {sorted(kit - table)}"
    assert not table - kit, f"the guide lists tests the kit does not have: {sorted(table - kit)}"


def test_the_guide_states_no_count_of_the_kits_tests() -> None:
    """Counts come from the kit's own summary line; the one shown is marked as an example."""
    text = GUIDE.read_text()
    stated = re.findall(r"\b(\d+) tests\b|\*\*(\d+) tests\*\*", text)
    assert not stated, stated


def test_every_file_the_guide_names_exists() -> None:
    text = GUIDE.read_text()
    named = set(re.findall(r"`((?:suite|tests|containers|docs|benchmarks)/[\w./-]*\w)`", text))
    named |= set(re.findall(r"\]\(((?:\.\./)?[\w-]+\.md)", text))
    missing = sorted(
        p
        for p in named
        if "myfw" not in p and not (ROOT / p).exists() and not (GUIDE.parent / p).exists()
    )
    assert not missing, missing


def test_make_conformance_builds_only_the_frameworks_environment(tmp_path: Path) -> None:
    """``make conformance`` needs no .venv (no PyTorch): it builds the framework's own
    environment with suite/envs.py, which the plain ``python3`` runs from the checkout."""
    import subprocess

    proc = subprocess.run(
        ["make", "-n", "conformance", "FRAMEWORK=numpy", f"VENV={tmp_path / 'no-venv'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "-m suite.envs create" in proc.stdout, proc.stdout
    assert "pip install" not in proc.stdout and "no-venv" not in proc.stdout, proc.stdout


def test_make_conformance_names_the_environment_with_the_venvs_python() -> None:
    """An environment's name hashes the Python that makes it (suite/envs.py: env_hash), so
    ``make conformance`` makes it with .venv's interpreter where there is one: the kit then
    tests the environment ``dlsuite run`` uses, also where the system python3 is another
    release (it hashed with python3, and built and tested an environment no run used)."""
    import subprocess
    import sys

    if sys.prefix == sys.base_prefix:
        pytest.skip("the tests run outside a virtual environment: no .venv to name")
    proc = subprocess.run(
        ["make", "-n", "conformance", "FRAMEWORK=numpy", f"VENV={sys.prefix}"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f'"{ROOT}" {sys.prefix}/bin/python -m suite.envs create' in proc.stdout, proc.stdout


def test_the_environment_module_needs_only_the_standard_library() -> None:
    """What ``make conformance`` runs before any environment exists: suite/envs.py imported by
    an interpreter without its site-packages (``-S``) loads nothing outside the stdlib."""
    import subprocess
    import sys

    code = (
        "import sys, suite.envs\n"
        "third = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('numpy', 'rich', 'onnx', 'jsonschema', 'scipy', 'psutil'))\n"
        "assert not third, third\n"
        "print(suite.envs.env_for('numpy').name)"
    )
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=ROOT, capture_output=True, text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("numpy-"), proc.stdout


def test_the_unit_tests_command_names_the_target_whose_venv_has_pytest() -> None:
    """Step 5's unit-test command runs in ``.venv``: the guide names ``make venv`` (the dev
    extras: pytest, the Docker SDK, ReFrame) beside it, since ``make bench``'s ``.venv`` has
    the suite and PyTorch only."""
    text = " ".join(GUIDE.read_text().split())
    at = text.index("`.venv/bin/python -m pytest tests/unit -n 0` runs the unit tests")
    assert "`make venv`" in text[at : at + 400], text[at : at + 400]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^EXTRAS\s*\?= .*\bdev\b", makefile, re.M)  # make venv: the dev extras
    assert "$(call INSTALL,torch,--lazy-bytecode)" in makefile  # make bench: torch only
