"""docs/README.md, the index of the documentation, lists every page of docs/ under its kind
(guide, reference, studies and validation), and every page it links exists."""

from __future__ import annotations

import re

from tests.helpers import ROOT

DOCS = ROOT / "docs"


def test_the_index_lists_every_page_and_links_only_pages_that_exist() -> None:
    index = (DOCS / "README.md").read_text()
    linked = set(re.findall(r"\]\(([^)#]+)\)", index))
    pages = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    assert not pages - linked, f"add these to docs/README.md: {sorted(pages - linked)}"
    assert all((DOCS / link).exists() for link in linked), sorted(
        link for link in linked if not (DOCS / link).exists()
    )
    for heading in ("## Guide", "## Reference", "## Studies and validation"):
        assert heading in index
