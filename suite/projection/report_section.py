"""The report's projection section: each network and strategy's measured points and the
projected curve (``dlsuite project``'s model fitted to the same runs) with its band."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from suite.errors import ConfigError
from suite.projection.render import case_key, dominant_text, efficiency_text
from suite.report.document import Figure, Heading, Section, Table
from suite.report.load import Run

TITLE = "Projection to other rank counts"
#: rank counts the curve is drawn at (the measured ones are added)
CURVE_RANKS = [1, 2, 4, 8, 16, 32, 64]
MAX_PLOTS = 12


def projection_section(runs: list[Run], figure_name: Callable[[str], str]) -> Section:
    s = Section(TITLE)
    from suite.projection.project import Settings, project

    try:
        # a report describes the runs it is given, busy or not: each row fitted to records the
        # quiet check called busy says so (the command line refuses them without --accept-busy)
        doc = project(runs, Settings(ranks=list(CURVE_RANKS), accept_busy=True))
    except (ConfigError, ValueError) as exc:  # the report goes on without this section
        s.add(f"No projection: {exc}")
        return s
    rows = [r for r in doc["projections"] if "step_s" in r]
    cannot = sorted({f"{r['case']}: {r['cannot_fit']}" for r in doc["projections"]
                     if "cannot_fit" in r})  # fmt: skip
    if not rows:
        why = [doc["nothing_to_project"]] if doc.get("nothing_to_project") else []
        s.add(
            "No projection: "
            + ("; ".join(why + cannot + doc["skipped_cases"]) or "nothing to project")
        )
        return s
    s.add(
        "The model of `dlsuite project` (docs/guide/projection.md) fitted to these runs: alpha-beta "
        "links from the collective sweeps, compute per step at one rank, the hidden share of "
        "the exchange and each strategy's overhead from its records; every rank count on one "
        "node as here. The band is every source the model knows (compute, the collective fit, "
        "the calibration); hollow markers are oversubscribed (more rank threads than cores), "
        "where the model is known to break. Filled dots: measured throughput."
        + (
            " Fitted to records the quiet check called busy: see each row."
            if any(r.get("busy") for r in rows)
            else ""
        )
    )
    for line in cannot:
        s.add(f"Cannot fit {line}")
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(
            f"{r['network']} · {r['benchmark']} · {r['framework']} {r['backend']}", []
        ).append(r)
    for gi, (name, items) in enumerate(groups.items()):
        s.add(Heading(name))
        table = Table(
            ["case", "ranks", "samples/s (band)", "efficiency (band)", "dominant", "measured (error)", ""],
            [
                [
                    r["case"], str(r["ranks"]),
                    f"{r['throughput']:.4g} ({r['throughput_band'][0]:.4g}–{r['throughput_band'][1]:.4g})",
                    efficiency_text(r), dominant_text(r),
                    _measured(r), "oversubscribed" if r.get("oversubscribed") else "",
                ]
                for r in items
            ],
        )  # fmt: skip
        s.add(table)
        if gi < MAX_PLOTS:
            s.add(
                Figure(figure_name(f"projection-{name}"), _plot(items, name), f"projection: {name}")
            )
    if doc["links"]:
        s.add(
            "Links fitted: "
            + "; ".join(
                f"{lf['framework']} {lf['backend']} {lf['op']} ({lf['scope']}, ranks "
                f"{','.join(map(str, lf['world_sizes']))}): best {lf['best_algorithm'] or 'not decidable'}"
                for lf in doc["links"]
                if lf["op"] == "allreduce"
            )
        )
    return s


def _measured(r: dict[str, Any]) -> str:
    m = r.get("measured")
    if not m:
        return ""
    how = "fitted" if m["in_fit"] else "held out"
    if m.get("throughput_difference") is not None:  # a what-if row: no error of the model
        return f"{m['throughput']:.4g} ({how}; a what-if {100 * m['throughput_difference']:+.0f}% apart)"
    return f"{m['throughput']:.4g} ({100 * m['throughput_error']:+.0f}%, {how})"


def _plot(items: list[dict[str, Any]], title: str) -> bytes:
    from suite.report import plots

    fig, (ax,) = plots._figure(8.0, 4.8)
    by_case: dict[str, list[dict[str, Any]]] = {}
    for r in items:
        by_case.setdefault(r["case"], []).append(r)
    _, short = plots.split_common(list(by_case))
    for i, ((case, rs), label) in enumerate(zip(by_case.items(), short, strict=True)):
        rs = sorted(rs, key=lambda r: r["ranks"])
        x = [r["ranks"] for r in rs]
        color = f"C{i % 10}"
        ax.plot(x, [r["throughput"] for r in rs], color=color, lw=1.5, label=label or case)
        ax.fill_between(x, [r["throughput_band"][0] for r in rs],
                        [r["throughput_band"][1] for r in rs], color=color, alpha=0.15)  # fmt: skip
        for r in rs:
            ax.plot([r["ranks"]], [r["throughput"]], marker="o", ms=4, color=color,
                    mfc="none" if r.get("oversubscribed") else color)  # fmt: skip
            m = r.get("measured")
            if m:
                ax.plot([r["ranks"]], [m["throughput"]], marker="D", ms=6, color=color, mec="black")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("ranks")
    ax.set_ylabel("samples/s (global)")
    plots.set_title(ax, f"projected throughput, band and measured points\n{title}", fontsize=9)
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=6, loc="best")
    return plots._png(fig)


def dominant_terms(runs: list[Run]) -> dict[str, dict[str, Any]]:
    """The report's bounds and findings hook (suite/report/bounds.py): for each record the
    projection was fitted to, its case's projected step at the largest rank count drawn
    (``compute_s``, ``exposed_s``, ``overhead_s``, ``ranks``, ``step_s``). Empty where the
    runs give no projection. Fitted as the report's projection section fits (busy records
    too: ``busy`` then says so), so the two never disagree on what was projected."""
    from suite.projection.project import Settings, project

    try:
        doc = project(runs, Settings(ranks=list(CURVE_RANKS), accept_busy=True))
    except (ConfigError, ValueError):
        return {}
    largest: dict[str, dict[str, Any]] = {}
    for row in doc["projections"]:
        if "not_possible" in row or "compute_s" not in row:
            continue
        key = case_key(row)
        held = largest.get(key)
        if held is None or row["ranks"] > held["ranks"]:
            largest[key] = row
    out: dict[str, dict[str, Any]] = {}
    for row in largest.values():
        keep = {k: row.get(k) for k in ("compute_s", "exposed_s", "overhead_s", "ranks", "step_s",
                                         "busy")}  # fmt: skip
        for rid in row.get("fitted_from", []):
            out[rid] = keep
    return out
