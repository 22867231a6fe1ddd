"""docs/ is grouped by kind, one folder each: guide/ (doing something with the suite),
reference/ (how the suite works), studies/ (figures measured, validation included), beside
results/ (the records behind the figures). docs/README.md, the index, lists every page under the
heading of its kind, and every page it links exists."""

from __future__ import annotations

import re

from tests.helpers import ROOT

DOCS = ROOT / "docs"
#: each folder of pages, and the heading of the index that lists them
KINDS = {"guide": "## Guide", "reference": "## Reference", "studies": "## Studies"}


def test_every_page_sits_in_the_folder_of_its_kind() -> None:
    loose = sorted(p.name for p in DOCS.glob("*.md"))
    assert loose == ["README.md"], f"move these into {', '.join(KINDS)}: {loose[1:]}"
    folders = sorted(p.name for p in DOCS.iterdir() if p.is_dir())
    assert folders == sorted([*KINDS, "results"]), folders
    for kind in KINDS:
        assert not [p for p in (DOCS / kind).iterdir() if p.suffix != ".md"], kind


def test_the_index_lists_every_page_under_its_kind_and_links_only_pages_that_exist() -> None:
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    sections = {s.partition("\n")[0]: s for s in re.split(r"^(?=## )", index, flags=re.M)}
    for kind, heading in KINDS.items():
        section = next((s for h, s in sections.items() if h.startswith(heading)), "")
        assert section, f"docs/README.md has no heading {heading!r}"
        linked = set(re.findall(r"\]\(([^)#]+)", section))
        pages = {f"{kind}/{p.name}" for p in (DOCS / kind).glob("*.md")}
        assert not pages - linked, f"list these under {heading!r}: {sorted(pages - linked)}"
    linked = set(re.findall(r"\]\(([^)#]+)", index))
    assert not [link for link in linked if not (DOCS / link).exists()], sorted(linked)
