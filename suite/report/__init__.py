"""``dlsuite report RUN_DIR [RUN_DIR ...]``: one Markdown and/or self-contained HTML report.

The report is built from the runs' validated records (``results.jsonl``), their manifests and,
where present, ``telemetry/<task_id>.jsonl`` timelines. Importing this package is light: the
plotting module imports matplotlib (Agg) only when a report is rendered.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from suite.errors import ConfigError
from suite.report.bounds import Projected
from suite.report.document import PLOTS_DIR, Document, Section, render_html, render_markdown
from suite.report.load import Run, load_run, load_runs
from suite.report.sections import SECTION_TITLES

__all__ = [
    "FORMATS",
    "NOTHING_TITLE",
    "SECTION_TITLES",
    "Run",
    "build_document",
    "load_run",
    "load_runs",
    "report_main",
]

FORMATS = ("md", "html", "both")
#: a section the caller adds after the standard ones (e.g. the history's trends): it gets the
#: runs and the figure namer, so the report package imports nothing of the caller's
SectionMaker = Callable[[list[Run], Callable[[str], str]], Section]


def _figure_namer() -> Callable[[str], str]:
    """Unique, file-system-safe figure names in order of creation."""
    used: set[str] = set()

    def name(stem: str) -> str:
        safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in stem).strip("_")[:80]
        candidate, i = f"{len(used) + 1:02d}-{safe}", 1
        while candidate in used:
            i += 1
            candidate = f"{len(used) + 1:02d}-{safe}-{i}"
        used.add(candidate)
        return candidate

    return name


#: the title of the closing section that lists, one line each, the sections with nothing to show
NOTHING_TITLE = "Sections with nothing to show"


def is_empty(section: Section) -> bool:
    """A section that only says, in one line, that the runs hold nothing for it."""
    return (
        len(section.blocks) == 1
        and isinstance(section.blocks[0], str)
        and section.blocks[0].startswith(("No ", "Every record is ok"))
    )


def order_sections(sections: list[Section]) -> list[Section]:
    """By level (operator, network, training, distributed, projection), then what the levels
    share, checks and provenance (SECTION_TITLES); a section the suite does not list (the
    history's trends) before the shared ones. The sections with nothing to show become one
    line each in a last section."""
    rank = {t: i for i, t in enumerate(SECTION_TITLES)}
    shared = rank["Utilisation and power timelines"]
    ordered = sorted(enumerate(sections), key=lambda p: (rank.get(p[1].title, shared - 0.5), p[0]))
    shown = [s for _, s in ordered if not is_empty(s)]
    empty = [s for _, s in ordered if is_empty(s)]
    if empty:
        shown.append(
            Section(
                NOTHING_TITLE,
                [f"{s.title}: {s.blocks[0]}" for s in empty],
            )
        )
    return shown


def incomplete_runs_note(runs: list[Run]) -> list[str]:
    """One line before the Findings when a run has planned tasks without a record (stopped,
    killed or still running): every statement below rests only on what was recorded."""
    parts = [
        f"{r.label} ({r.state}): {len(r.unrecorded)} of {len(r.planned)} planned tasks"
        for r in runs
        if r.unrecorded
    ]
    if not parts:
        return []
    still = any(r.runner_alive and r.unrecorded for r in runs)
    return [
        "**Incomplete runs**: "
        + "; ".join(parts)
        + " have no record and are not in this report (listed under Runs"
        + (", with the `--resume` command that runs them" if not still else "")
        + ")."
        + (" A run still going: report again when it has ended." if still else "")
    ]


def build_document(
    runs: list[Run], extra: Sequence[SectionMaker] = (), projected: Projected | None = None
) -> Document:
    """The whole report as data: the Findings first, then the sections by level, the
    ``extra`` ones in their places (order_sections), and what has nothing to show last.
    ``projected`` (a hook of the projection package, above this one) gives the projection's
    terms per data-parallel record to the bounds and the findings."""
    from suite import __version__
    from suite.report import sections as sec
    from suite.report.bounds import bounds_section
    from suite.report.decompose import decomposition_section
    from suite.report.findings import findings_section
    from suite.report.optimizers import optimizer_section
    from suite.report.training import training_section

    fig = _figure_namer()
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    n = sum(len(r.records) for r in runs)
    if projected is not None:  # fitted once, read by the bounds and the findings
        hook, held = projected, {}

        def projected(runs: list[Run]) -> dict[str, dict[str, Any]]:
            if "rows" not in held:
                held["rows"] = hook(runs)
            return held["rows"]

    sections = [
        findings_section(runs, fig, projected),
        sec.roofline_section(runs, fig),
        sec.comparison_section(runs, fig),
        decomposition_section(runs, fig),
        sec.agreement_section(runs, fig),
        training_section(runs, fig),
        optimizer_section(runs, fig),
        bounds_section(runs, fig, projected),
        sec.distributed_section(runs, fig),
        sec.strategies_section(runs, fig),
        sec.telemetry_section(runs, fig),
        sec.summary_section(runs),
        sec.correctness_section(runs),
        sec.failures_section(runs),
        sec.runs_section(runs),
        sec.environment_section(runs),
    ]
    sections += [make(runs, fig) for make in extra]
    return Document(
        title="dlsuite report: " + ", ".join(r.label for r in runs),
        intro=[
            f"Generated {now} by dlsuite {__version__} from {len(runs)} run(s), {n} records. "
            "Times are medians with distribution-free 95% confidence intervals of the median; "
            "the schema of every record is schemas/result.schema.json. The Findings come "
            "first, then the levels (operator, network, training, distributed, projection), "
            "then what they share, the checks and the provenance.",
            *incomplete_runs_note(runs),
        ],
        sections=order_sections(sections),
    )


#: how each format's report begins (its first line; the HTML's title): what says dlsuite wrote it
_REPORT_MARKS = {"report.md": "# dlsuite report", "report.html": "<title>dlsuite report"}


def stale_reports(dest: Path, fmt: str) -> list[Path]:
    """The reports in ``dest`` that an earlier ``dlsuite report`` wrote in the format(s)
    ``fmt`` does not write now, so the folder would show two reports of different runs or
    times: ``report.md`` (and its ``report_plots/``) under ``--format html``, ``report.html``
    under ``--format md``. Only a file that begins as dlsuite's reports begin counts."""
    names = {"md": ["report.html"], "html": ["report.md"]}.get(fmt, [])
    out: list[Path] = []
    for name in names:
        path = dest / name
        try:
            with path.open(encoding="utf-8", errors="replace") as fh:
                head = fh.read(4096)
        except OSError:
            continue
        mark = _REPORT_MARKS[name]
        if (head.startswith(mark) if name == "report.md" else mark in head) and path.is_file():
            out.append(path)
            if name == "report.md" and (dest / PLOTS_DIR).is_dir():
                out.append(dest / PLOTS_DIR)
    return out


def report_main(
    run_dirs: list[Path],
    fmt: str,
    out: Path | None,
    extra: Sequence[SectionMaker] = (),
    projected: Projected | None = None,
    removed: list[Path] | None = None,
) -> list[Path]:
    """Write ``report.md`` (plots as PNG files in ``report_plots/``) and/or ``report.html``.

    ``run_dirs``: run directories (or ``results.jsonl`` files); ``fmt``: ``md``, ``html`` or
    ``both``; ``out``: the output directory (default: the first run's directory).
    Returns the report files written. A folder holds one report: an earlier report of the
    format not written now (``report.md`` with its plots, or ``report.html``) is removed where
    dlsuite wrote it (:func:`stale_reports`; a file of that name it did not write stays), and
    added to ``removed``. Raises ConfigError (one line) for a missing directory, a missing or
    empty ``results.jsonl``, an invalid record or an unknown format.
    """
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    runs = load_runs([Path(p) for p in run_dirs])
    dest = Path(out) if out is not None else runs[0].path
    if dest.exists() and not dest.is_dir():
        raise ConfigError(f"--out {dest}: exists and is not a directory; give a directory")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {dest}: cannot create it ({exc.strerror})") from None
    doc = build_document(runs, extra, projected)
    written: list[Path] = []
    try:
        if fmt in ("md", "both"):
            from suite.report.document import write_plot_files

            write_plot_files(doc, dest / PLOTS_DIR)
            md = dest / "report.md"
            md.write_text(render_markdown(doc), encoding="utf-8")
            written.append(md)
        if fmt in ("html", "both"):
            page = dest / "report.html"
            page.write_text(render_html(doc), encoding="utf-8")
            written.append(page)
        stale_list = stale_reports(dest, fmt)
        # the plots the earlier report.md shows are its own; other files there are the user's
        shown = {
            name
            for path in stale_list
            if path.name == "report.md"
            for name in re.findall(
                rf"{PLOTS_DIR}/([^)\s\"'/]+\.png)",
                path.read_text(encoding="utf-8", errors="replace"),
            )
        }
        for stale in stale_list:
            if stale.is_dir():
                for png in stale.glob("*.png"):
                    if png.name in shown:
                        png.unlink()
                try:
                    stale.rmdir()
                except OSError:  # a file of the user's in it: it stays, and so does the folder
                    continue
            else:
                stale.unlink()
            if removed is not None:
                removed.append(stale)
    except OSError as exc:
        raise ConfigError(f"cannot write the report into {dest} ({exc}); pass --out DIR") from None
    return written
