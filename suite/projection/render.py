"""Rich tables of a projection document (``project.project``) and of the published check."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from suite.projection.units import fmt_bandwidth, fmt_latency, fmt_seconds


def _pct(v: float | None) -> str:
    return "" if v is None else f"{100 * v:.0f}%"


def _band_s(row: dict[str, Any]) -> str:
    lo, hi = row["step_s_band"]
    return f"{fmt_seconds(row['step_s'])} ({fmt_seconds(lo)}–{fmt_seconds(hi)})"


def _band_eff(row: dict[str, Any]) -> str:
    lo, hi = row["scaling_efficiency_band"]
    return f"{100 * row['scaling_efficiency']:.0f}% ({100 * lo:.0f}–{100 * hi:.0f})"


def measured_text(row: dict[str, Any]) -> str:
    m = row.get("measured")
    if not m:
        return ""
    tag = "fitted" if m["in_fit"] else "held out"
    return f"{m['throughput']:.4g}/s, {100 * m['throughput_error']:+.0f}% ({tag})"


def projection_table(doc: dict[str, Any], show_all: bool = False) -> Table:
    t = Table(
        title="dlsuite project: step time, throughput and scaling efficiency "
        "(band: the fits' residuals; measured: predicted vs measured throughput)",
        show_lines=False,
    )
    for col in ("network · what", "ranks", "nodes", "algorithm", "step time (band)",
                "samples/s", "efficiency (band)", "exposed exchange", "hidden", "overhead",
                "measured (error)", "note"):  # fmt: skip
        t.add_column(col, overflow="fold")
    last = None
    for row in doc["projections"]:
        if "not_possible" in row and not show_all:
            continue
        label = row["case"] if row["case"] != last else ""
        last = row["case"]
        if "not_possible" in row:
            t.add_row(label, str(row["ranks"]), str(row["nodes"]), "", "", "", "", "", "", "",
                      "", f"not projected: {row['not_possible']}")  # fmt: skip
            continue
        t.add_row(
            label, str(row["ranks"]), str(row["nodes"]), row["algorithm"], _band_s(row),
            f"{row['throughput']:.4g}", _band_eff(row), fmt_seconds(row["exposed_s"]),
            _pct(row["hidden_share"]), fmt_seconds(row["overhead_s"]), measured_text(row),
            row.get("note", ""),
        )  # fmt: skip
    return t


def links_table(doc: dict[str, Any]) -> Table:
    t = Table(title="links fitted from the collective sweeps (alpha-beta, per algorithm)")
    for col in ("framework", "backend", "where", "collective", "world sizes", "points",
                "ring: latency, bandwidth (rms)", "halving-doubling (rms)", "tree (rms)", "best"):  # fmt: skip
        t.add_column(col, overflow="fold")
    for lf in doc["links"]:
        cells = []
        for alg in ("ring", "halving-doubling", "tree"):
            a = lf["algorithms"][alg]
            cells.append(
                f"{fmt_latency(a['latency_s'])}, {fmt_bandwidth(a['bandwidth_bytes_per_s'])} "
                f"({100 * a['rms_rel_residual']:.0f}%)"
            )
        t.add_row(
            lf["framework"], lf["backend"], lf["scope"], lf["op"],
            ",".join(map(str, lf["world_sizes"])), str(lf["points"]), *cells,
            lf["best_algorithm"] or "one world size: cannot tell",
        )  # fmt: skip
    return t


def measured_table(doc: dict[str, Any]) -> Table | None:
    """Predicted against measured where the runs (or --check runs) hold the same layout."""
    rows = [r for r in doc["projections"] if r.get("measured")]
    coll = doc.get("collective_checks") or []
    if not rows and not coll:
        return None
    t = Table(title="predicted vs measured (held out: not fitted to)")
    for col in ("network · what", "ranks", "nodes", "predicted samples/s", "measured",
                "error", "fitted or held out", "oversubscribed"):  # fmt: skip
        t.add_column(col, overflow="fold")
    for r in rows:
        m = r["measured"]
        t.add_row(
            r["case"], str(r["ranks"]), str(r["nodes"]), f"{r['throughput']:.4g}",
            f"{m['throughput']:.4g}", f"{100 * m['throughput_error']:+.1f}%",
            "fitted" if m["in_fit"] else "held out", "yes" if r.get("oversubscribed") else "",
        )  # fmt: skip
    for c in coll:
        errs = ", ".join(f"{alg} {100 * v['error']:+.0f}%" for alg, v in c["predicted"].items())
        t.add_row(
            f"allreduce {int(c['message_bytes'])} B ({c['backend']})", str(c["ranks"]),
            "1" if c["scope"] == "intra" else "2+", errs, fmt_seconds(c["measured_s"]),
            f"closest: {c['closest']}", "held out", "",
        )  # fmt: skip
    return t


def published_table(items: list[Any]) -> Table:
    t = Table(title="published scaling results against the projection from their stated inputs "
              "(efficiency in %; target: within 10 points)")  # fmt: skip
    for col in ("result", "network", "GPUs (from)", "published", "projected", "error (points)",
                "no overlap", "full overlap", "other algorithms", "latency x0.1 / x5"):  # fmt: skip
        t.add_column(col, overflow="fold")
    for p in items:
        v = p.variants
        setup = p.inputs["setup"]
        algs = ", ".join(
            f"{a} {v[a]:.0f}"
            for a in ("ring", "halving-doubling", "tree")
            if a != setup["algorithm"]
        )
        t.add_row(
            p.id, p.network, f"{p.ranks} (from {p.baseline_ranks})", f"{p.published:.0f}",
            f"{p.projected:.1f}", f"{p.error_points:+.1f}" + ("" if p.within else " (outside)"),
            f"{v['overlap none']:.0f}", f"{v['overlap full']:.0f}", algs,
            f"{v['latency x0.1']:.0f} / {v['latency x5']:.0f}",
        )  # fmt: skip
    return t
