"""docs/adding-a-framework.md against the code it describes, so the guide cannot go stale: its
table of the conformance kit names every test of the kit and nothing else, it states no count
of the kit's tests (the kit prints its own: tests/conformance/conftest.py), and every file of
the repository it names exists. (tests/integration/test_adding_a_framework.py runs its minimal
adapter through the kit.)"""

from __future__ import annotations

import ast
import re

from tests.helpers import ROOT

GUIDE = ROOT / "docs" / "adding-a-framework.md"
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
