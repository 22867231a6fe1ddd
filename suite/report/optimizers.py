"""The report's optimizer section (the training level's ``optimizer`` records): step time
against parameter count per framework and implementation, what the step moves against the
measured memory bandwidth, and the table of rule differences the records show.

Reads only the records' ``optimizer`` section and metrics (suite/levels/training/optimizer.py
writes them); matplotlib is imported only when a plot is drawn.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import suite.report.plots as plots
from suite.report.document import Figure, Heading, Section, Table
from suite.report.load import Run, metric
from suite.report.sections import (
    MAX_PLOTS,
    MAX_SERIES,
    _capped,
    _records,
    correctness_text,
    estimate,
)
from suite.summary import fmt_seconds

TITLE = "Training: optimizers"  # its place: SECTION_TITLES

RunRecord = tuple[Run, dict[str, Any]]


def _is_optimizer(rec: dict[str, Any]) -> bool:
    return rec["benchmark"]["name"] == "optimizer" and bool(rec.get("optimizer"))


def _who(run: Run, rec: dict[str, Any], several_runs: bool) -> str:
    sec = rec["optimizer"]
    parts = [rec["framework"]["name"], sec["implementation"]]
    if several_runs:
        parts.insert(0, run.label)
    return plots.SEP.join(parts)


def _case(rec: dict[str, Any]) -> str:
    """The case a record measures, apart from its parameter set and implementation: the
    optimizer, the hyperparameters it was given, the schedule, the gradients, the dtype."""
    sec = rec["optimizer"]
    hyper = ", ".join(
        f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in sorted(sec["hyper"].items())
        if v not in (0, 0.0, False) or k == "lr"
    )
    extra = []
    if sec.get("lr_schedule", "constant") != "constant":
        extra.append(f"lr {sec['lr_schedule']}")
    mode = (sec.get("gradients") or {}).get("mode", "seeded")
    if mode != "seeded":
        extra.append(f"{mode} gradients")
    extra.append(rec["dtype"])
    return f"{sec['name']} ({hyper}; {', '.join(extra)})"


def _flags(name: str) -> dict[str, str]:
    inside = name.partition("[")[2].rstrip("]")
    return dict(kv.split("=", 1) for kv in inside.split(",") if "=" in kv)


def follows_text(sec: dict[str, Any]) -> str:
    """The flags on which every followed variant agrees, among those the candidates differ
    on (what this case separates); the verdict when none is followed."""
    followed = sec.get("follows") or []
    if not followed:
        return "**no known variant within the bound**"
    candidates = [_flags(v["variant"]) for v in sec.get("variants") or []]
    keys = sorted({k for c in candidates for k in c})
    separated = [k for k in keys if len({c.get(k) for c in candidates}) > 1]
    agreed = [_flags(f) for f in followed]
    shown = [
        f"{k}={agreed[0].get(k)}"
        for k in separated
        if len({a.get(k) for a in agreed}) == 1 and agreed[0].get(k) is not None
    ]
    if not shown:
        return (
            f"(no flag separated: {len(followed)} of {len(candidates)} variants within the bound)"
        )
    return ", ".join(shown)


def _ratio(x: Any) -> str:
    return f"{x:.2g}" if isinstance(x, int | float) and math.isfinite(x) else "inf"


def optimizer_section(runs: list[Run], figure_name: Callable[[str], str]) -> Section:
    """See the module docstring."""
    s = Section(TITLE)
    recs = [(run, rec) for run, rec in _records(runs) if _is_optimizer(rec)]
    skipped = [
        (run, rec)
        for run, rec in _records(runs, None)
        if rec["benchmark"]["name"] == "optimizer" and rec["status"] != "ok"
    ]
    if not recs and not skipped:
        s.add(
            "No optimizer records in these runs (dlsuite run --level training --benchmark "
            "optimizer): no optimizer comparison."
        )
        return s
    several = len(runs) > 1
    s.add(
        "Each framework's own optimizer (column 'implementation': PyTorch's for-loop, foreach "
        "and fused kernels, Keras eagerly, in a tf.function or with XLA, optax jitted, MXNet's "
        "Updater one tensor at a time or with its multi-tensor operators), stepped K times with "
        "the same gradients and checked after every step against a float64 reference of the "
        "rule its documentation states (suite/adapters/<framework>/optimizers.toml): the check's error "
        "is the worst ratio of the parameters' error to the rounding bound of K steps (<= 1 "
        "passes). Bytes per step are what the rule must read and write (parameters, gradients, "
        "state) once; % of memory bandwidth divides their rate by the device's measured "
        "bandwidth (a STREAM triad on CPUs): a parameter set that fits in the caches can exceed "
        "100%."
    )
    _speed(s, recs, several, figure_name)
    _differences(s, recs, several)
    failed = [(run, rec) for run, rec in recs if not rec["correctness"]["passed"]]
    if failed:
        s.add(Heading("Differs from its documentation"))
        rows = []
        for run, rec in failed:
            check = next(
                (c for c in rec["correctness"]["checks"] if not c["passed"]),
                rec["correctness"]["checks"][0],
            )
            detail = check.get("detail") or {}
            rows.append([
                _who(run, rec, several), _case(rec), _ratio(check.get("error")),
                str(detail.get("differs_from_documentation") or check["name"]),
            ])  # fmt: skip
        s.add(
            Table(
                ["framework · implementation", "case", "bound ratio", "what differs"],
                rows,
                caption="records whose parameters are outside the bound of the documented "
                "rule ('documented by reference': the documentation cites a paper for the rule)",
            )
        )
    if skipped:
        s.add(Heading("Not run"))
        s.add(
            Table(
                ["framework", "case", "status", "reason"],
                [
                    [
                        rec["framework"]["name"],
                        str(rec["benchmark"]["params"].get("optimizer")),
                        rec["status"],
                        str(rec.get("reason") or "")[:200],
                    ]
                    for _run, rec in skipped
                ],
            )
        )
    return s


def _speed(
    s: Section, recs: list[RunRecord], several: bool, figure_name: Callable[[str], str]
) -> None:
    rows = []
    by_optimizer: dict[str, dict[str, list[tuple[float, plots.Estimate]]]] = {}
    for run, rec in recs:
        sec = rec["optimizer"]
        tm = metric(rec, "time")
        rate, bw = metric(rec, "parameter_rate"), metric(rec, "bandwidth")
        pk = metric(rec, "percent_of_peak_bandwidth")
        state = sec.get("state") or {}
        count = sec["parameters"]["count"]
        rows.append([
            sec["name"], sec["parameters"]["set"], f"{count:,}", rec["dtype"],
            _who(run, rec, several),
            fmt_seconds(tm["value"]) if tm else "-",
            f"{rate['value']:.4g}" if rate else "-",
            f"{bw['value']:.3g}" if bw else "-",
            f"{pk['value']:.1f}%" if pk else "-",
            f"{state.get('bytes_per_param', 0):.3g} / {state.get('rule_bytes_per_param', '-')}",
            correctness_text(rec),
        ])  # fmt: skip
        if tm:
            key = f"{sec['name']} ({rec['dtype']})"
            points = by_optimizer.setdefault(key, {}).setdefault(_who(run, rec, several), [])
            if all(x != count for x, _ in points):  # one point per count: the first case
                points.append((float(count), estimate(tm)))
    s.add(Heading("Step time against parameter count"))
    s.add(
        Table(
            [
                "optimizer",
                "parameters",
                "count",
                "dtype",
                "framework · implementation",
                "step time",
                "Mparam/s",
                "GB/s",
                "% of memory bandwidth",
                "state bytes/param (measured / rule)",
                "correctness",
            ],
            rows,
        )  # fmt: skip
    )
    plotted = [(k, v) for k, v in by_optimizer.items() if any(len(p) > 1 for p in v.values())]
    # (a series holds one point per parameter count, so more than one point is a curve)
    if not plotted:
        s.add(
            "Every optimizer was measured at one parameter count only here: no step-time curve "
            "(the quick size set measures adamw at two counts, the full set sweeps 2^16..2^24)."
        )
        return
    if len(plotted) > MAX_PLOTS:
        s.add(_capped("optimizers", MAX_PLOTS, len(plotted), "the table has all"))
    for key, series in plotted[:MAX_PLOTS]:
        if len(series) > MAX_SERIES * 2:
            s.add(_capped("series", MAX_SERIES * 2, len(series), "the table has all"))
            series = dict(list(series.items())[: MAX_SERIES * 2])
        png = loglog_lines(series, title=f"{key}: step time", xlabel="parameters",
                           ylabel="median step time (s)")  # fmt: skip
        s.add(
            Figure(
                figure_name(f"optimizer-{key}"),
                png,
                alt=f"{key} step time against parameter count",
                caption="median step time with its 95% CI; one line per framework and "
                "implementation",
            )
        )


def _differences(s: Section, recs: list[RunRecord], several: bool) -> None:
    """One table per case on its smallest parameter set: which variant each framework
    follows and the update's relative error against every framework's implemented variant."""
    cases: dict[str, list[RunRecord]] = {}
    for run, rec in recs:
        cases.setdefault(_case(rec), []).append((run, rec))
    s.add(Heading("Rule differences"))
    s.add(
        "Per case, on its smallest parameter set: the flags of the variants each implementation "
        "follows (those the followed variants agree on, among those the frameworks' variants "
        "differ on: a flag this case cannot separate, such as weight decay at 0, may show), "
        "its bound ratio against the "
        "variant its documentation states, and the relative error of its whole update, "
        "||p - p_variant|| / ||p_variant - p_0||, against the variant each framework implements "
        "(the same nominal hyperparameters; docs/studies/optimizer-differences.md lists every "
        "difference with its documentation)."
    )
    for case, items in cases.items():
        smallest = min(rec["optimizer"]["parameters"]["count"] for _, rec in items)
        items = [
            (r, rec) for r, rec in items if rec["optimizer"]["parameters"]["count"] == smallest
        ]
        frameworks: list[str] = []
        for _, rec in items:
            for v in rec["optimizer"].get("variants") or []:
                for fw in v.get("implemented_by") or []:
                    if fw not in frameworks:
                        frameworks.append(fw)
        rows = []
        for run, rec in items:
            sec = rec["optimizer"]
            by_fw = {}
            for v in sec.get("variants") or []:
                for fw in v.get("implemented_by") or []:
                    by_fw[fw] = v.get("update_rel_error")
            check = rec["correctness"]["checks"][0]
            rows.append(
                [_who(run, rec, several), follows_text(sec), _ratio(check.get("error"))]
                + [_ratio(by_fw.get(fw)) if fw in by_fw else "-" for fw in frameworks]
            )
        params = items[0][1]["optimizer"]["parameters"]
        s.add(
            Table(
                [
                    "framework · implementation",
                    "follows (flags the variants within the bound agree on)",
                    "bound ratio vs documented",
                ]
                + [f"vs {fw}'s variant" for fw in frameworks],
                rows,
                caption=f"{case} on {params['set']} ({params['count']:,} parameters), "
                f"K = {items[0][1]['optimizer']['steps']}",
            )  # fmt: skip
        )


def loglog_lines(
    series: dict[str, list[tuple[float, plots.Estimate]]], *, title: str, xlabel: str, ylabel: str
) -> bytes:
    """Lines with 95% CI error bars on log-log axes: ``series[name] = [(x, (median, lo, hi))]``."""
    common, names = plots.split_common(list(series))
    if common:
        title = f"{title}\n{common}"
    fig, (ax,) = plots._figure(8.0, 4.8 + plots._legend_height(len(series)))
    for name, pts in zip(names, series.values(), strict=True):
        pts = sorted(pts)
        ax.errorbar(
            [p[0] for p in pts],
            [p[1][0] for p in pts],
            yerr=plots._yerr([p[1] for p in pts]),
            marker="o",
            ms=4,
            capsize=3,
            label=name,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    plots.set_title(ax, title)
    ax.grid(which="both", alpha=0.3)
    plots._legend(fig, names, fontsize=7)
    return plots._png(fig)
