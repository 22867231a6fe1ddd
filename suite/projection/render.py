"""Rich tables of a projection document (``project.project``) and of the published check.

The projection's own table is compact (network, ranks, nodes, step time, efficiency with its
band, the term that dominates); every other figure is in ``--out`` JSON, the report, and the
tables ``--details`` prints.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from suite.projection.published import MAX_BAND_POINTS
from suite.projection.units import fmt_bandwidth, fmt_latency
from suite.summary import fmt_seconds

#: a fitted row's measured efficiency (against the measured one rank) is shown beside the
#: projected one (against the model's) where they are this far apart
MEASURED_APART = 0.05


def _add_row(t: Table, *cells: str) -> None:
    """A row of plain text: a reason or a label may hold brackets ("[network.inter_node]", a
    file "model[v2].onnx") that rich would read as markup and drop."""
    t.add_row(*(Text(c) for c in cells))


def efficiency_text(row: dict[str, Any]) -> str:
    """``93% (88–96)``; the band only where it is usable, else the reason; the cause of an
    efficiency above 100% beside it."""
    eff = f"{100 * row['scaling_efficiency']:.0f}%"
    lo = hi = None
    if row.get("band_usable"):
        lo, hi = row["scaling_efficiency_band"]
        eff += f" ({100 * lo:.0f}–{100 * hi:.0f})"
    else:
        eff += f" ({row.get('no_band', 'no usable band')})"
    if row.get("above_100"):
        eff += f"; above 100%: {row['above_100']}"
    seen = row.get("measured")
    err = (seen or {}).get("throughput_error")
    diff = (seen or {}).get("throughput_difference")
    if seen and diff is not None and diff > -1.0:
        # the row is on links given at the command line or in a profile, or on --bucket's: a
        # what-if beside a record measured on the run's own, compared with neither band nor model
        measured = row["scaling_efficiency"] / (1.0 + diff)
        eff += f"; measured {100 * measured:.0f}% {what_if_text(seen)}"
    elif seen and not seen.get("in_fit") and err is not None and err > -1.0:
        # a held-out measurement (--check) beside what was projected for it
        measured = row["scaling_efficiency"] / (1.0 + seen["throughput_error"])
        where = ("inside the band" if lo is not None and lo <= measured <= hi
                 else "outside the band" if lo is not None else "no band to hold it")  # fmt: skip
        eff += (f"; held out: measured {100 * measured:.0f}%, {where} (projected "
                f"{100 * seen['throughput_error']:+.0f}%)")  # fmt: skip
    if (seen and seen.get("in_fit") and seen.get("scaling_efficiency") is not None
            and diff is None):  # fmt: skip
        # fitted: the projection's efficiency is against the model's one rank, the run's table
        # against the measured one; where the two one-rank figures part, both are shown
        measured = seen["scaling_efficiency"]
        if abs(measured - row["scaling_efficiency"]) >= MEASURED_APART:
            apart = seen.get("one_rank_error")
            why = (f": the model's one rank is {100 * apart:+.0f}% from the measured one"
                   if apart is not None else "")  # fmt: skip
            eff += f"; measured {100 * measured:.0f}% against the measured one rank{why}"
    if row.get("busy"):
        eff += "; busy inputs"  # busy_rows_note says which and what load
    return eff


def _scopes(scopes: list[str]) -> str:
    return " and ".join(s.replace("_node", "-node") for s in scopes)


def what_if_text(measured: dict[str, Any]) -> str:
    """Where a what-if row and its record part: "on the run's own links, this row on the given
    intra-node link", "at the records' 25 MiB bucket, this row at --bucket's 1 MiB"."""
    parts = []
    if measured.get("links_given"):
        parts.append(
            f"on the run's own links, this row on the given {_scopes(measured['links_given'])} link"
        )
    if measured.get("bucket_given"):
        theirs = measured.get("records_bucket")
        parts.append(
            (f"at the records' {fmt_bytes(theirs)} bucket" if theirs else "at the records' bucket")
            + f", this row at --bucket's {fmt_bytes(measured['bucket_given'])}"
        )
    return "; ".join(parts)


def fmt_bytes(n: float) -> str:
    if n >= 2**20:
        return f"{n / 2**20:.4g} MiB"
    return f"{n / 2**10:.4g} KiB" if n >= 2**10 else f"{n:.0f} B"


def dominant_text(row: dict[str, Any]) -> str:
    name = {"exchange": "exchange (exposed)", "copies": "bucket copies"}.get(
        row["dominant"], row["dominant"]
    )
    text = f"{name} {100 * row['dominant_share']:.0f}%"
    if row.get("oversubscribed"):
        text += f"; oversubscribed (compute x{row['compute_stretch']:.2g})"
    return text


def case_key(row: dict[str, Any]) -> str:
    """A projection row's case with its device: a case names its framework, and runs of
    several machines can hold the same case on each."""
    return f"{row['case']} · {row['device']}"


def _span(values: list[int]) -> str:
    lo, hi = min(values), max(values)
    return str(lo) if lo == hi else f"{lo}–{hi}"


def projection_table(doc: dict[str, Any], show_all: bool = False) -> Table:
    """One row a case and layout; a case's rows that cannot be fitted for the same reason are
    one row naming their rank counts (the reason is the inputs', not the layout's)."""
    t = Table(
        title="dlsuite project: step time and scaling efficiency (band: every source the "
        "model knows, at most 20 points wide; the rest is in the --out JSON)",
        show_lines=False,
    )
    for col in ("network · what", "ranks", "nodes", "step time", "efficiency (band)",
                "dominant term"):  # fmt: skip
        t.add_column(col, overflow="fold")
    # the device is named only where the runs hold several
    devices = len({row["device"] for row in doc["projections"]}) > 1
    rows: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for row in doc["projections"]:
        key = (case_key(row), row["ranks"], row["nodes"])
        if key in seen or ("not_possible" in row and not show_all):
            continue
        seen.add(key)
        rows.append(row)
    unfit: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        if "cannot_fit" in row:
            unfit.setdefault((case_key(row), row["cannot_fit"]), []).append(row)
    last = None
    for row in rows:
        name = case_key(row) if devices else row["case"]
        label = name if name != last else ""
        last = name
        if "not_possible" in row:
            _add_row(t, label, str(row["ranks"]), str(row["nodes"]), "",
                      f"not projected: {row['not_possible']}", "")  # fmt: skip
        elif "cannot_fit" in row:
            group = unfit.pop((case_key(row), row["cannot_fit"]), None)
            if group is None:
                continue  # shown with the first row of its case that has the same reason
            _add_row(t, label, ", ".join(str(r["ranks"]) for r in group),
                      _span([r["nodes"] for r in group]), "",
                      f"cannot fit: {row['cannot_fit']}", "")  # fmt: skip
        else:
            _add_row(t,
                label, str(row["ranks"]), str(row["nodes"]), fmt_seconds(row["step_s"]),
                efficiency_text(row), dominant_text(row),
            )  # fmt: skip
    return t


def busy_rows_note(doc: dict[str, Any]) -> str | None:
    """Under the table, once: the rows marked "busy inputs" were fitted (``--accept-busy``)
    from records the quiet check called busy, and what it found."""
    busy = [r for r in doc["projections"] if r.get("busy") and "step_s" in r]
    if not busy:
        return None
    return (
        f"{len(busy)} row(s) marked busy inputs: {busy[0]['busy']}. Their figures rest on "
        "timings other work shared; measure again at a quiet time to trust them"
    )


def hidden_note(doc: dict[str, Any]) -> str | None:
    """What the table leaves out without ``--all``: the layouts that cannot be run at all (a
    global batch too small for the ranks, more pipeline stages than the network has cuts)."""
    hidden = [r for r in doc["projections"] if "not_possible" in r]
    if not hidden:
        return None
    first = hidden[0]
    return (
        f"{len(hidden)} layout(s) not shown because they cannot be run, e.g. {first['ranks']} "
        f"ranks of {first['case']}: {first['not_possible']} (--all lists them)"
    )


def oversubscribed_note(doc: dict[str, Any]) -> str | None:
    """Why rows say oversubscribed: on a CPU the model takes every node of the target to have
    the cores of the machine the records were measured on."""
    over = [r for r in doc["projections"] if r.get("oversubscribed") and "step_s" in r]
    if not over:
        return None
    first = over[0]
    return (
        f"{len(over)} row(s) oversubscribed, e.g. {first['ranks']} ranks of {first['case']}: "
        f"{first['note'].removeprefix('oversubscribed: ')}. On CPUs each node of the target is "
        "taken to have the cores of the machine the records were measured on; for GPUs at the "
        "target, pass --compute-from a run measured on one of them"
    )


def partial_node_note(doc: dict[str, Any]) -> str | None:
    """Rows whose ranks do not fill their nodes: the last node holds fewer, which the model does
    not price apart (every node is taken as a full one: ``collectives.Topology.local``)."""
    part = [r for r in doc["projections"] if "step_s" in r and r.get("ranks_per_node")
            and r["nodes"] > 1 and r["ranks"] % r["ranks_per_node"]]  # fmt: skip
    if not part:
        return None
    first = part[0]
    g, full = first["ranks_per_node"], first["ranks"] // first["ranks_per_node"]
    return (
        f"{len(part)} row(s) with ranks that are not a multiple of the {g} a node holds, e.g. "
        f"{first['ranks']} ranks: {full} full node(s) and one of {first['ranks'] - full * g}; "
        f"the model takes every node to hold {g} ranks, so the last node's fewer are not "
        "priced apart (its share of the node's links, its steps inside the node)"
    )


def published_partial_node_note(items: list[Any]) -> str | None:
    """``--published``: results whose GPUs (or baseline's) do not fill their nodes, which the
    model prices as full nodes, as :func:`partial_node_note` says of a run's rows."""
    part = []
    for p in items:
        g = int(p.inputs["setup"]["gpus_per_node"])
        part += [(p, n, g) for n in (p.ranks, p.baseline_ranks) if n > g and n % g]
    if not part:
        return None
    first, n, g = part[0]
    full = n // g
    return (
        f"{len({p.id for p, _, _ in part})} result(s) with GPUs that are not a multiple of the "
        f"{g} a node holds, e.g. {first.id}: {n} GPUs, {full} full node(s) and one of "
        f"{n - full * g}; the model takes every node to hold its gpus_per_node, so the last "
        "node's fewer are not priced apart (its share of the node's links, its steps inside the node)"
    )


def links_table(doc: dict[str, Any]) -> Table:
    t = Table(title="links fitted from the collective sweeps (alpha-beta, per algorithm)")
    for col in ("framework", "backend", "where", "collective", "world sizes", "points",
                "ring: latency, bandwidth (rms)", "halving-doubling (rms)", "tree (rms)", "best"):  # fmt: skip
        t.add_column(col, overflow="fold")
    for lf in doc["links"]:
        cells = []
        for alg in ("ring", "halving-doubling", "tree"):
            a = lf["algorithms"][alg]
            bound = " at a bound" if a.get("at_bound") else ""
            cells.append(
                f"{fmt_latency(a['latency_s'])}, {fmt_bandwidth(a['bandwidth_bytes_per_s'])} "
                f"({100 * a['rms_rel_residual']:.0f}%){bound}"
            )
        _add_row(t,
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
        diff = m.get("throughput_difference")
        _add_row(t,
            r["case"], str(r["ranks"]), str(r["nodes"]), f"{r['throughput']:.4g}",
            f"{m['throughput']:.4g}",
            f"{100 * m['throughput_error']:+.1f}%" if diff is None
            else f"none: a what-if ({100 * diff:+.1f}% apart)",
            ("fitted" if m["in_fit"] else "held out")
            + (f"; measured {what_if_text(m)}" if diff is not None else ""),
            "yes" if r.get("oversubscribed") else "",
        )  # fmt: skip
    for c in coll:
        errs = ", ".join(f"{alg} {100 * v['error']:+.0f}%" for alg, v in c["predicted"].items())
        _add_row(t,
            f"allreduce {int(c['message_bytes'])} B ({c['backend']})", str(c["ranks"]),
            "1" if c["scope"] == "intra" else "2+", errs, fmt_seconds(c["measured_s"]),
            f"closest: {c['closest']}", "held out", "",
        )  # fmt: skip
    return t


def published_table(items: list[Any]) -> Table:
    t = Table(title="published scaling results against the projection from their stated inputs "
              "(efficiency in %; target: within 10 points and inside a band at most 20 wide)")  # fmt: skip
    for col in ("result", "network", "GPUs (from)", "published", "projected (band)",
                "error (points)", "dominant term"):  # fmt: skip
        t.add_column(col, overflow="fold")
    for p in items:
        lo, hi = p.band
        if p.band_points > MAX_BAND_POINTS:
            inside = f" (no usable band: {p.band_points:.1f} points wide)"
        else:
            inside = "" if p.inside else " (outside the band)"
        _add_row(t,
            p.id, p.network, f"{p.ranks} (from {p.baseline_ranks})", f"{p.published:.1f}",
            f"{p.projected:.1f} ({lo:.1f}–{hi:.1f})",
            f"{p.error_points:+.1f}" + ("" if p.within else " (outside 10)") + inside,
            p.dominant,
        )  # fmt: skip
    return t
