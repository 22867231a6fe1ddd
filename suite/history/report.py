"""Trend plots from the history store: ``dlsuite history plot`` and the report's History section
(``dlsuite report RUN_DIR --trends`` or ``--history PATH``).

matplotlib is imported only when a plot is drawn (through suite/report/plots.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from suite.history import analysis
from suite.history import store as history_store
from suite.report.document import Figure, Heading, Section, Table
from suite.report.load import Run

SECTION_TITLE = "History"
MAX_SERIES = 8
MAX_PLOTS = 12
#: the metric a record's trend is drawn for in the report, first present wins
HEADLINE_METRICS = ("time", "step_time", "latency", "busbw", "throughput", "time_to_accuracy")


def _series_label(tr: analysis.Trend, hosts: int) -> str:
    from suite.report.plots import SEP
    from suite.summary import params_label

    rec = tr.record
    parts = [rec["benchmark"]["name"], params_label(rec), rec["dtype"], rec["framework"]["name"],
             str((rec.get("device") or {}).get("name", "?"))]  # fmt: skip
    if hosts > 1:
        parts.append(tr.host)
    return SEP.join(parts)


def run_axis(trs: Sequence[analysis.Trend]) -> list[history_store.RunInfo]:
    """The runs of these trends, oldest first: x = 1, 2, ... on the plot."""
    runs = {p.run.run_id: p.run for tr in trs for p in tr.points}
    return sorted(runs.values(), key=lambda r: (r.started_at, r.run_id))


def busy_runs(trs: Sequence[analysis.Trend]) -> set[str]:
    """The runs in which a point of these trends was measured while the machine was busy
    (the quiet check's verdict): drawn hollow, and said so in the table of the x axis."""
    from suite.summary import busy_findings

    return {p.run.run_id for tr in trs for p in tr.points if busy_findings(p.record)}


def axis_rows(trs: Sequence[analysis.Trend]) -> list[list[str]]:
    """The table of a plot's x axis: run number, start, run id, host, software and whether
    a point of that run was measured busy (drawn hollow)."""
    busy = busy_runs(trs)
    return [
        [str(i), r.started_at[:16].replace("T", " "), r.run_id, r.host, r.software,
         "busy (hollow)" if r.run_id in busy else ""]
        for i, r in enumerate(run_axis(trs), 1)
    ]  # fmt: skip


AXIS_COLUMNS = ["run", "started", "run id", "host", "software", "measured"]


def plotted(trs: Sequence[analysis.Trend]) -> list[analysis.Trend]:
    """The trends one plot draws: the MAX_SERIES with the most points (their runs are the x
    axis, :func:`run_axis`)."""
    return sorted(trs, key=lambda t: -len(t.points))[:MAX_SERIES]


def trend_png(trs: Sequence[analysis.Trend], *, title: str) -> tuple[bytes, int]:
    """One plot of several trends of one metric: median with its 95% CI (error bars) against
    the run number (oldest run 1); a point measured while the machine was busy is hollow (not
    judged by compare, check or the trends). Returns the PNG and how many trends were left out
    (over MAX_SERIES; the ones with the most points are drawn)."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure
    from matplotlib.ticker import MaxNLocator

    from suite.report.plots import set_title, split_common
    from suite.summary import busy_findings

    chosen = plotted(trs)
    axis = {r.run_id: i for i, r in enumerate(run_axis(chosen), 1)}
    scale, unit = (1e3, "ms") if chosen[0].unit == "s" else (1.0, chosen[0].unit)
    hosts = len({t.host for t in chosen})
    any_busy = False
    common, labels = split_common([_series_label(t, hosts) for t in chosen])
    fig = MplFigure(figsize=(8.0, 4.8 + 0.2 * len(chosen)), dpi=100, layout="constrained")
    canvas = FigureCanvasAgg(fig)
    ax = fig.subplots()
    for tr, label in zip(chosen, labels, strict=True):
        xs = [axis[p.run.run_id] for p in tr.points]
        ys = [p.value * scale for p in tr.points]
        cis = [p.metric.get("ci95") or (p.value, p.value) for p in tr.points]
        err = [[max(y - lo * scale, 0.0) for y, (lo, _) in zip(ys, cis, strict=True)],
               [max(hi * scale - y, 0.0) for y, (_, hi) in zip(ys, cis, strict=True)]]  # fmt: skip
        line = ax.errorbar(xs, ys, yerr=err, marker="o", ms=4, capsize=3, label=label)
        busy = [(x, y) for x, y, p in zip(xs, ys, tr.points, strict=True)
                if busy_findings(p.record)]  # fmt: skip
        if busy:
            ax.plot(*zip(*busy, strict=True), linestyle="none", marker="o", ms=8, mfc="white",
                    mec=line.lines[0].get_color(), mew=1.5)  # fmt: skip
            any_busy = True
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("run (oldest = 1; the table lists them)")
    arrow = "higher is better" if chosen[0].higher_is_better else "lower is better"
    ax.set_ylabel(f"{chosen[0].metric} [{unit}] ({arrow})")
    set_title(ax, f"{title}\n{common}" if common else title)
    if any_busy:  # one legend entry for the hollow points
        ax.plot([], [], linestyle="none", marker="o", ms=8, mfc="white", mec="0.3", mew=1.5,
                label="hollow: measured while the machine was busy (not judged)")  # fmt: skip
    ax.grid(alpha=0.3)
    fig.legend(fontsize=7, loc="outside lower center", ncols=1 if max(map(len, labels)) > 45 else 2)
    buf = io.BytesIO()
    canvas.print_png(buf)
    return buf.getvalue(), len(trs) - len(chosen)


def _headline(rec: dict[str, Any]) -> str | None:
    names = [m["name"] for m in rec.get("metrics") or []]
    return next((n for n in HEADLINE_METRICS if n in names), names[0] if names else None)


def section_maker(store_path: Path) -> Callable[[list[Run], Callable[[str], str]], Section]:
    """The History section for ``dlsuite report`` (``report_main``'s ``extra``)."""

    def make(runs: list[Run], figure_name: Callable[[str], str]) -> Section:
        return history_section(runs, store_path, figure_name)

    return make


def history_section(
    runs: list[Run], store_path: Path, figure_name: Callable[[str], str]
) -> Section:
    """Per benchmark of the report's runs, the trend of each figure's headline metric over
    the runs in the store on the same host, with a table of those runs."""
    from suite.compare import step_verdict
    from suite.report.sections import fmt_value

    s = Section(SECTION_TITLE)
    keys: dict[tuple[str, str], set[tuple[Any, ...]]] = {}
    hosts: set[str] = set()
    for run in runs:
        for rec in run.records:
            metric = _headline(rec) if rec["status"] == "ok" else None
            if metric is None:
                continue
            keys.setdefault((rec["benchmark"]["name"], metric), set()).add(
                analysis.figure_key(rec["host"], rec)
            )
            hosts.add(rec["host"])
    with history_store.HistoryStore(store_path, create=False) as store:
        stored_ids = {r.run_id for r in store.runs()}
        groups: list[tuple[str, str, list[analysis.Trend]]] = []
        for (bench, metric), wanted in keys.items():
            found = analysis.trends(
                store.records(benchmarks=[bench], hosts=sorted(hosts), metrics=[metric]),
                metrics=[metric],
                last=20,
            )
            trs = [t for t in found if t.key in wanted and len(t.points) >= 2]
            if trs:
                groups.append((bench, metric, trs))
    missing = sorted({r.manifest.get("run_id", "?") for r in runs if r.manifest} - stored_ids)
    s.add(
        f"Each figure of this report over the last 20 runs on the same host in the history "
        f"store {store_path} (median, 95% CI; x: the runs in time order, listed below each "
        "plot). Change: the newest run against the one before, with `dlsuite compare`'s rule "
        "at 5%. `dlsuite history check` flags changes against the last N runs."
    )
    if missing:
        s.add(f"Not in the store (not drawn): run(s) {', '.join(missing)}.")
    not_ok = sorted({r["benchmark"]["name"] for run in runs for r in run.records
                     if r["status"] != "ok"})  # fmt: skip
    if not_ok:
        s.add(
            "Records that did not run (failed, timeout, oom, skipped) have no figure and no "
            f"trend here; `dlsuite history show --benchmark {','.join(not_ok)}` lists every run "
            "of their tasks, these included."
        )
    if not groups:
        s.add(
            "No figure measured in these runs (status ok) has two or more runs in the store "
            "yet: no trend to draw."
        )
        return s
    if len(groups) > MAX_PLOTS:
        s.add(f"Showing {MAX_PLOTS} of {len(groups)} benchmark metrics.")
    for bench, metric, trs in groups[:MAX_PLOTS]:
        s.add(Heading(f"{bench}: {metric}"))
        png, left_out = trend_png(trs, title=f"{bench}: {metric} over runs")
        s.add(Figure(figure_name(f"history-{bench}-{metric}"), png, alt=f"{bench} {metric} trend"))
        if left_out:
            s.add(f"{left_out} more figure(s) of {bench} are in the table only.")
        rows = []
        for tr in trs:
            prev, last = tr.points[-2], tr.points[-1]
            verdict, change = step_verdict(
                prev.record, prev.metric, last.record, last.metric, 0.05, tr.higher_is_better
            )
            rows.append(
                [_series_label(tr, len(hosts)), str(len(tr.points)), fmt_value(tr.points[0].metric),
                 fmt_value(last.metric), f"{change:+.1%} {verdict}"]
            )  # fmt: skip
        s.add(Table(["figure", "runs", "first", "newest", "change"], rows))
        # the plot's x axis, not the runs of every figure
        s.add(Table(AXIS_COLUMNS, axis_rows(plotted(trs)), caption="the runs on the x axis"))
    return s
