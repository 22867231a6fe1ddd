"""benchmarks/ holds two kinds, each with its registry: the validation scripts
(benchmarks/validation/, `make validate`) and the studies (benchmarks/studies/, `make study`).
Every module is in its registry, and the page each names exists and names the script back, so
a reader of the page finds the command and a reader of the script finds the page."""

from __future__ import annotations

import pytest

from benchmarks.studies import STUDIES
from benchmarks.validation import HELPERS, VALIDATIONS
from tests.helpers import ROOT


def _modules(kind: str) -> set[str]:
    return {p.stem for p in (ROOT / "benchmarks" / kind).glob("*.py")} - {"__init__", "__main__"}


def test_every_module_is_registered() -> None:
    assert _modules("validation") == set(VALIDATIONS) | set(HELPERS)
    assert _modules("studies") == set(STUDIES)
    assert {p.name for p in (ROOT / "benchmarks").glob("*.py")} == {"__init__.py"}


@pytest.mark.parametrize(
    "kind,name,doc",
    [("validation", n, v.doc) for n, v in VALIDATIONS.items()]
    + [("studies", n, s.doc) for n, s in STUDIES.items()],
    ids=lambda x: str(x),
)
def test_each_names_a_page_that_names_it_back(kind: str, name: str, doc: str) -> None:
    page = ROOT / doc
    assert page.is_file(), doc
    text = page.read_text()
    assert f"benchmarks/{kind}/{name}.py" in text or f"benchmarks.{kind}.{name}" in text, (
        f"{doc} does not name benchmarks/{kind}/{name}.py"
    )
