"""Every relative link in every Markdown file of the repository resolves: to a file or folder
that exists, and where it names an anchor (`page.md#a-heading`, `#a-heading`) to a heading of
that page. Links to other sites (`https:`, `mailto:` ...) are not followed."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from urllib.parse import unquote

from tests.helpers import ROOT

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
#: an inline link or image, `[text](target "title")` (one level of brackets inside the text)
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
#: a link reference definition, `[id]: target`
DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
#: a link or image in HTML written inside Markdown
HTML = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)=\"([^\"]*)\"", re.IGNORECASE)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def markdown_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.md"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout  # fmt: skip
    names = sorted({n for n in listed.decode().split("\0") if n})
    return [ROOT / n for n in names if (ROOT / n).is_file()]


def outside_fences(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks."""
    fence = ""
    for number, line in enumerate(text.splitlines(), 1):
        opened = FENCE.match(line)
        if fence:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = ""
            continue
        if opened:
            fence = opened.group(1)
            continue
        yield number, line


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every link outside code blocks and code spans."""
    found = []
    for number, line in outside_fences(text):
        line = CODE_SPAN.sub("", line)
        targets = [m.group(1) for m in [*INLINE.finditer(line), *HTML.finditer(line)]]
        if m := DEFINITION.match(line):
            targets.append(m.group(1))
        found += [(number, t.strip("<>")) for t in targets]
    return found


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for _, line in outside_fences(path.read_text(encoding="utf-8")):
        if m := re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
        out.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", line))
    return frozenset(out)


def broken(path: Path) -> list[str]:
    out = []
    for number, target in links(path.read_text(encoding="utf-8")):
        if not target or SCHEME.match(target) or target.startswith("/"):
            continue
        where, _, anchor = target.partition("#")
        dest = (path.parent / unquote(where)).resolve() if where else path
        name = f"{path.relative_to(ROOT)}:{number}: {target}"
        if not dest.exists():
            out.append(f"{name} (no such file)")
        elif anchor and dest.suffix == ".md" and unquote(anchor).lower() not in anchors(dest):
            out.append(f"{name} (no heading with that anchor in {dest.relative_to(ROOT)})")
        elif ROOT not in (dest, *dest.parents):
            out.append(f"{name} (outside the repository)")
    return out


def test_the_link_reader_finds_links_and_skips_code() -> None:
    text = (
        'See [a](a.md#x), ![p](plots/p.png) and [b [c]](<b c.md> "t"), <a href="h.md">h</a>.\n'
        "`[not](code.md)` and [web](https://example.org/x.md)\n"
        "[id]: defined.md\n"
        "```\n[in](fence.md)\n```\n"
    )
    assert [t for _, t in links(text)] == [
        "a.md#x", "plots/p.png", "b c.md", "h.md", "https://example.org/x.md", "defined.md",
    ]  # fmt: skip
    assert slug("The `loader` benchmark: end to end") == "the-loader-benchmark-end-to-end"
    assert slug("A user's dataset (`--data PATH`)") == "a-users-dataset---data-path"
    register = "3. Register it: the package's `__init__.py`"
    assert slug(register) == "3-register-it-the-packages-__init__py"


def test_every_relative_link_in_the_markdown_files_resolves() -> None:
    files = markdown_files()
    assert ROOT / "README.md" in files and ROOT / "docs" / "README.md" in files
    found = [problem for path in files for problem in broken(path)]
    assert not found, "links that lead nowhere:\n" + "\n".join(found)
