"""A report as plain data (sections of paragraphs, tables and figures) and its two renderings.

Markdown references the plots as PNG files in a folder next to ``report.md``; HTML embeds them
as base64 ``data:`` URIs so ``report.html`` is one self-contained file.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from pathlib import Path

PLOTS_DIR = "report_plots"


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class Figure:
    name: str  # file stem, unique within a report
    png: bytes
    alt: str
    caption: str = ""


@dataclass
class Heading:
    text: str


Block = str | Table | Figure | Heading


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.title.lower()).strip("-")

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)


@dataclass
class Document:
    title: str
    intro: list[str]
    sections: list[Section]

    def figures(self) -> list[Figure]:
        return [b for s in self.sections for b in s.blocks if isinstance(b, Figure)]


# -- Markdown ----------------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_table(t: Table) -> str:
    lines = []
    if t.caption:
        lines += [f"*{t.caption}*", ""]
    lines.append("| " + " | ".join(_md_cell(h) for h in t.headers) + " |")
    lines.append("|" + "|".join(" --- " for _ in t.headers) + "|")
    for row in t.rows:
        lines.append("| " + " | ".join(_md_cell(c) for c in row) + " |")
    return "\n".join(lines)


def render_markdown(doc: Document, plots_dir: str = PLOTS_DIR) -> str:
    """Markdown text; figures are linked as ``plots_dir/<name>.png`` (written by the caller)."""
    out = [f"# {doc.title}", ""]
    out += [p + "\n" for p in doc.intro]
    out.append("Contents: " + " · ".join(f"[{s.title}](#{s.anchor})" for s in doc.sections))
    out.append("")
    for s in doc.sections:
        out += [f"## {s.title}", ""]
        for b in s.blocks:
            if isinstance(b, Heading):
                out += [f"### {b.text}", ""]
            elif isinstance(b, Table):
                out += [_md_table(b), ""]
            elif isinstance(b, Figure):
                out += [f"![{_md_cell(b.alt)}]({plots_dir}/{b.name}.png)", ""]
                if b.caption:
                    out += [f"*{b.caption}*", ""]
            else:
                out += [b, ""]
    return "\n".join(out).rstrip() + "\n"


def write_plot_files(doc: Document, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.png"):  # plots of an earlier report into the same folder
        stale.unlink()
    paths = []
    for fig in doc.figures():
        path = folder / f"{fig.name}.png"
        path.write_bytes(fig.png)
        paths.append(path)
    return paths


# -- HTML --------------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 1200px; padding: 0 1em; color: #222; line-height: 1.4; }
h1 { border-bottom: 2px solid #444; }
h2 { border-bottom: 1px solid #bbb; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
tr:nth-child(even) td { background: #fafafa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.pass { color: #1a7f37; } .fail { color: #cf222e; font-weight: bold; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
figcaption, .caption { font-size: 0.85em; color: #555; }
nav { font-size: 0.9em; }
"""

_NUMERIC = re.compile(r"^[-+]?[\d.,]+(e[-+]?\d+)?\s*(%|[a-zA-Zµ/]+)?$")


def _html_cell(text: str, tag: str) -> str:
    cls = ""
    low = text.lower()
    if tag == "td":
        if low in ("ok", "within", "unchanged", "improved") or low.startswith("pass"):
            cls = ' class="pass"'
        elif (
            low.startswith(("fail", "below", "above", "regressed"))
            or "FAIL:" in text
            or low
            in (
                "failed",
                "timeout",
                "oom",
            )
        ):
            cls = ' class="fail"'
        elif _NUMERIC.match(text.strip()):
            cls = ' class="num"'
    return f"<{tag}{cls}>{html.escape(text)}</{tag}>"


def _html_table(t: Table) -> str:
    parts = ["<table>"]
    if t.caption:
        parts.append(f"<caption class='caption'>{html.escape(t.caption)}</caption>")
    parts.append("<tr>" + "".join(_html_cell(h, "th") for h in t.headers) + "</tr>")
    for row in t.rows:
        parts.append("<tr>" + "".join(_html_cell(c, "td") for c in row) + "</tr>")
    parts.append("</table>")
    return "\n".join(parts)


_STRONG = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`([^`]+)`")


def _html_text(text: str) -> str:
    """A paragraph as HTML: escaped, with the Markdown the sections write (``**bold**``,
    `` `code` ``) rendered as such, not shown as asterisks and backticks."""
    escaped = html.escape(text)
    return _STRONG.sub(r"<strong>\1</strong>", _CODE.sub(r"<code>\1</code>", escaped))


def render_html(doc: Document) -> str:
    """One self-contained HTML page: inline CSS, plots as base64 PNG, no external resources."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(doc.title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(doc.title)}</h1>",
    ]
    out += [f"<p>{_html_text(p)}</p>" for p in doc.intro]
    out.append(
        "<nav>Contents: "
        + " · ".join(f'<a href="#{s.anchor}">{html.escape(s.title)}</a>' for s in doc.sections)
        + "</nav>"
    )
    for s in doc.sections:
        out.append(f'<h2 id="{s.anchor}">{html.escape(s.title)}</h2>')
        for b in s.blocks:
            if isinstance(b, Heading):
                out.append(f"<h3>{html.escape(b.text)}</h3>")
            elif isinstance(b, Table):
                out.append(_html_table(b))
            elif isinstance(b, Figure):
                data = base64.b64encode(b.png).decode("ascii")
                cap = f"<figcaption>{html.escape(b.caption)}</figcaption>" if b.caption else ""
                out.append(
                    f'<figure><img src="data:image/png;base64,{data}" '
                    f'alt="{html.escape(b.alt, quote=True)}">{cap}</figure>'
                )
            else:
                out.append(f"<p>{_html_text(b)}</p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
