"""The end-of-run table: one row per record, the numbers people look for first."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from suite.results import noisy

#: a failed check's detail key for an output its dtype does not determine (metrics.correctness)
NOT_DETERMINED = "not_determined"


def _metric(rec: dict[str, Any], name: str) -> dict[str, Any] | None:
    for m in rec.get("metrics") or []:
        if m["name"] == name:
            return m
    return None


def fmt_seconds(s: float) -> str:
    """A duration in s, ms, µs or ns with three significant digits (whole seconds from 1000 s,
    never an exponent; negative ones too: a remainder); the one formatter of times the summary,
    the report and the projection print."""
    r = float(f"{s:.3g}")  # the unit is chosen after rounding: 999.7 us is 1 ms, not 1e+03 us
    a = abs(r)
    if a >= 1000.0:
        return f"{s:.0f} s"
    if a >= 1.0:
        return f"{r:.3g} s"
    if a >= 1e-3:
        return f"{r * 1e3:.3g} ms"
    if a >= 1e-6 or a == 0:
        return f"{r * 1e6:.3g} µs"
    return f"{r * 1e9:.3g} ns"


def params_label(rec: dict[str, Any]) -> str:
    from suite.levels import load_benchmark

    p = rec["benchmark"]["params"]
    world = f" ×{rec['world_size']} ranks" if rec.get("world_size", 1) > 1 else ""
    try:
        name = rec["benchmark"]["name"]
        name = "agreement" if name == "agreement_matrix" else name  # the host's half of it
        label: str = load_benchmark(rec["benchmark"]["level"], name).label(p)
        return label + world
    except Exception:  # noqa: BLE001 - a record from another version: fall back to raw params
        return " ".join(f"{k}={v}" for k, v in p.items())


def ci_text(v: float, lo: float, hi: float) -> str:
    """A 95% CI relative to its median: "±1.2%" where it is about symmetric, else each side
    ("-96%/+812%": a median CI of 830 µs [37 µs, 7.57 ms] read ±454%, as though its low end
    were below zero)."""
    if not v:
        return "-"
    down, up = max(v - lo, 0.0) / abs(v), max(hi - v, 0.0) / abs(v)
    if max(down, up) <= 2 * min(down, up) or max(down, up) < 0.05:
        return f"±{(hi - lo) / 2 / abs(v) * 100:.1f}%"
    return f"-{_pct(down)}%/+{_pct(up)}%"


def _efficiency(percent: float) -> str:
    """A scaling efficiency: whole percents, two significant figures below 10 (JAX's CPU
    collectives gave 0.37%, which read "0%")."""
    return f"{percent:.0f}" if percent >= 9.5 else f"{percent:.2g}"


def _pct(share: float) -> str:
    """Three significant figures without an exponent: 95.5, 812, 1050, <0.01."""
    p = share * 100
    if p >= 100:
        return f"{p:.0f}"
    return f"{p:.3g}" if p >= 0.01 else "<0.01"


def framework_label(rec: dict[str, Any]) -> str:
    """ "jax 0.10.2": the framework a record measured and its version (a run of several
    frameworks gives each benchmark a row per framework)."""
    fw = rec.get("framework") or {}
    return " ".join(str(v) for v in (fw.get("name"), fw.get("version")) if v) or "-"


#: checks of the measurement, not of the numbers computed: is the timer honest
#: (suite/measure.py), did an epoch come from storage or from the page cache as its record
#: says (the training level). The summary leads with the worst *numerical* check and shows
#: these only when they fail (they stay in the record either way).
MEASUREMENT_CHECKS = (
    "timer_waits_for_the_device.",
    "cold_read_from_storage",
    "warm_read_from_cache",
)


#: the columns that name a figure in a table of figures (``dlsuite compare``, ``dlsuite
#: check-references``)
FIGURE_COLUMNS = ("benchmark", "params", "dtype", "framework", "device", "metric")


def figure_table(title: str, values: tuple[str, ...]) -> Table:
    """A table of figures: the columns that name one, ``values`` (right-aligned), a verdict."""
    t = Table(title=title, header_style="bold")
    for col in FIGURE_COLUMNS:
        t.add_column(col, justify="left", overflow="fold")
    for col in values:
        t.add_column(col, justify="right", overflow="fold")
    t.add_column("verdict", justify="left", overflow="fold")
    return t


def figure_cells(rec: dict[str, Any], device: dict[str, Any] | None = None) -> list[Text]:
    """The cells that name a record's figure, but the metric (a record's strings are Text, never
    markup); ``device``: the device section to name, if not the record's own."""
    dev = (rec.get("device") or {}) if device is None else device
    return [
        Text(rec["benchmark"]["name"]),
        Text(params_label(rec)),
        Text(rec["dtype"]),
        Text(rec["framework"]["name"]),
        Text(str(dev.get("name", "?"))),
    ]


def is_measurement_check(name: str) -> bool:
    """Whether a check (``rank<r>.`` prefix allowed) checks the measurement, not the numbers."""
    bare = name.split(".", 1)[1] if name.startswith("rank") and "." in name else name
    return bare.startswith(MEASUREMENT_CHECKS)


def _ratio(c: dict[str, Any]) -> float:
    return float("inf") if c["error"] is None else c["error"] / max(c["tolerance"], 1e-300)


def _err_tol(c: dict[str, Any]) -> str:
    err = "NaN/Inf" if c["error"] is None else f"{c['error']:.1e}"
    return f"{err}{'≤' if c['passed'] else '>'}{c['tolerance']:.0e}"


def correctness_cell(rec: dict[str, Any], named: bool = False) -> Text:
    """The worst numerical check as error against tolerance ("pass 3.1e-07≤1e-04"), then any
    failed check of the measurement ("; timer check FAIL 5.2e+01>4e+01"). A failure every one
    of whose failed checks is declared (a known framework bug, a documented difference of the
    framework from the paper or rule it cites) says so."""
    corr = rec.get("correctness")
    if not corr:
        return Text("-")
    numerical = [c for c in corr["checks"] if not is_measurement_check(c["name"])]
    measurement_failed = [
        c for c in corr["checks"] if is_measurement_check(c["name"]) and not c["passed"]
    ]
    lead = max(numerical or corr["checks"], key=_ratio)
    out = Text()
    if lead["passed"]:
        out.append("pass", "green")
    else:
        out.append("FAIL", "red bold")
    if named and not lead["passed"]:  # the report's wider column: which check failed
        out.append(f" {lead['name']}")
    out.append(f" {_err_tol(lead)}")
    if not lead["passed"]:
        out.append(declared_suffix(rec))
    for c in measurement_failed:
        if c is lead:
            continue
        what = "timer check" if "timer" in c["name"] else c["name"].split(".")[-1]
        out.append(f"; {what} ")
        out.append("FAIL", "red bold")
        out.append(f" {_err_tol(c)}{starved_suffix(c)}")
    return out


def starved_suffix(check: dict[str, Any]) -> str:
    """ " (starved: ...)" after a timer check that failed while the process was kept off the
    CPU through its best materialised reading (suite/measure.py: timer_check's
    ``cpu_wait_share``), which is no evidence against the timer; "" otherwise."""
    from suite.measure import TIMER_CHECK_STARVED_SHARE

    share = (check.get("detail") or {}).get("cpu_wait_share")
    if check["passed"] or share is None or share <= TIMER_CHECK_STARVED_SHARE:
        return ""
    return f" (starved: waited for a CPU {100 * share:.0f}% of its best reading; rerun on a quiet machine)"


def declared_suffix(rec: dict[str, Any]) -> str:
    """The words after a declared failure: " (known bug)", " (documented difference: WHAT)";
    "" when some failed check is not declared."""
    if not declared_known(rec):
        return ""
    labels: list[str] = []
    for c in (rec.get("correctness") or {}).get("checks", []):
        detail = c.get("detail") or {}
        if c["passed"]:
            continue
        label = (
            f"documented difference: {detail['documented_difference']}"
            if detail.get("documented_difference")
            else "not determined by its dtype"
            if detail.get(NOT_DETERMINED)
            else "known bug"
        )
        if label not in labels:
            labels.append(label)
    return f" ({'; '.join(labels)})"


def known_bugs(rec: dict[str, Any]) -> list[str]:
    """The framework bugs a record's failed checks name (``detail.known_bug``: the adapter
    declares them), when every failed check names one; else [] (a failure nobody explained)."""
    return _declared(rec, "known_bug")


def documented_differences(rec: dict[str, Any]) -> list[str]:
    """The documented differences a record's failed checks name (``detail.documented_difference``:
    the adapter declares them, with the upstream document that states them), when every failed
    check names one; else []."""
    return _declared(rec, "documented_difference")


def _declared(rec: dict[str, Any], key: str) -> list[str]:
    failed = [c for c in (rec.get("correctness") or {}).get("checks", []) if not c["passed"]]
    named = [(c.get("detail") or {}).get(key) for c in failed]
    return sorted({b for b in named if b}) if failed and all(named) else []


def declared_known(rec: dict[str, Any]) -> bool:
    """Whether every failed check of an ``ok`` record is declared: a known bug of the framework,
    a documented difference, or an output whose terms cancel beyond what its dtype determines
    (each failed check names one of them)."""
    failed = [c for c in (rec.get("correctness") or {}).get("checks", []) if not c["passed"]]
    return bool(failed) and all(
        (c.get("detail") or {}).get("known_bug")
        or (c.get("detail") or {}).get("documented_difference")
        or (c.get("detail") or {}).get(NOT_DETERMINED)
        for c in failed
    )


def busy_findings(rec: dict[str, Any]) -> list[str]:
    """The quiet-machine check's busy findings of an ok record (``telemetry.quiet``): what else
    ran on its cores, GPU or storage while it warmed up; [] when quiet or not checked."""
    quiet = (rec.get("telemetry") or {}).get("quiet") or {}
    if rec.get("status") != "ok" or quiet.get("quiet") is not False:
        return []
    return [str(f.get("message", f.get("check"))) for f in quiet.get("findings") or []
            if f.get("busy")]  # fmt: skip


def busy_note(records: list[dict[str, Any]]) -> str | None:
    """One line under the run's table when records were measured on a busy machine (their
    status says "busy"): the first finding, and what to do."""
    busy = [(r, found) for r in records if (found := busy_findings(r))]
    if not busy:
        return None
    rec, found = busy[0]
    return (
        f"busy: {len(busy)} record(s) measured while the machine was not quiet, e.g. "
        f"{rec['benchmark']['name']} ({framework_label(rec)}): {found[0]}. Their figures may be "
        "far from this machine's; rerun on a quiet machine, or with --require-quiet to refuse "
        "such tasks"
    )


def not_applied_note(records: list[dict[str, Any]]) -> str | None:
    """One line under the run's table when network records asked for an option their adapter
    does not apply (``work.options_not_applied``: ``compile`` with JAX or MXNet, a layout):
    their label says "compiled" or their parameters channels_last, and the row alone would
    not say that the run was the framework's usual one."""
    hit = [(r, o) for r in records if r.get("status") == "ok"
           and (o := (r.get("work") or {}).get("options_not_applied"))]  # fmt: skip
    if not hit:
        return None
    whys = list(dict.fromkeys(str(why) for _, o in hit for why in o.values()))
    shown = "; ".join(whys[:3]) + (f"; and {len(whys) - 3} more" if len(whys) > 3 else "")
    return (
        f"not applied: {len(hit)} network record(s) asked for an option their framework does "
        f"not apply, so they ran as it always does (work.options_not_applied): {shown}"
    )


def corrupt_note(records: list[dict[str, Any]]) -> str | None:
    """One line under the run's table when a loader delivered corrupt samples (each as a
    marked sample of zeros, ``pipeline.corrupt``): their rates and checks count them, and
    ``ok`` alone does not say so."""
    hit = [(r, c) for r in records if (c := (r.get("pipeline") or {}).get("corrupt") or {})
           and c.get("count")]  # fmt: skip
    if not hit:
        return None
    files = sorted({str(f) for _, c in hit for f in c.get("files") or []})
    shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    return (
        f"corrupt: {len(hit)} record(s) read samples their loader could not decode, delivered "
        f"as zeros and counted in the rate (pipeline.corrupt): {shown or 'see the records'}; "
        "`dlsuite data info PATH --scan` lists them all"
    )


def above_peak(percent: float) -> bool:
    """A % of peak the tables print above 100.0 (100.04 prints as 100.0: not marked)."""
    return round(percent, 1) > 100.0


def fmt_rate(value: float) -> str:
    """A rate in the table with three significant digits ("0.00089", "0.0107", "12.3",
    "790"): a fixed three decimals printed a 0.89 GFLOP/s batch norm as "0.000 TFLOP/s"."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def peak_cell(percent: float) -> str:
    """ "89.1", or "116.5*" above 100 (:func:`over_peak_note` says why)."""
    return f"{percent:.1f}{'*' if above_peak(percent) else ''}"


def over_peak_note(records: list[dict[str, Any]]) -> str | None:
    """Why a "% peak" above 100 (marked ``*``) is possible: the peak is the device's declared
    or estimated one, and a CPU's estimate takes the clock the machine reports (a VM's
    /proc/cpuinfo gives its base clock; the cores run faster under turbo). None when no record
    is above."""
    over = [
        (r, pk["value"])
        for r in records
        if r["status"] == "ok" and (pk := _metric(r, "percent_of_peak")) and above_peak(pk["value"])
    ]
    if not over:
        return None
    rec, value = max(over, key=lambda x: x[1])
    source = (rec.get("device") or {}).get("peak_source") or "not recorded"
    return (
        f"* {len(over)} record(s) above 100% of the peak (at most {value:.0f}%, "
        f"{rec['benchmark']['name']} {rec['dtype']}): the peak is below what ran, so it is "
        f"not this machine's ({source}), unless the record's FLOP count or timer is wrong "
        "(its correctness and timer checks say); give the peak as [device] peak_tflops in a "
        "config file (docs/guide/configuration.md)"
    )


def above_ideal(rec: dict[str, Any]) -> bool:
    """A scaling efficiency the tables print above 100 (N ranks faster than N x one rank)."""
    eff = _metric(rec, "scaling_efficiency")
    return bool(eff) and round(float(eff["value"])) > 100  # type: ignore[index]


def superlinear_cause(
    rec: dict[str, Any], records: list[dict[str, Any]], detail: bool = True
) -> str:
    """Why an efficiency above 100% was measured, as far as the records say: a busy machine
    under either record, a 1-rank baseline whose interval says it is no reference, a strong
    scaling run whose ranks each hold 1/N of the batch, or nothing the run shows."""
    base_id = (rec.get("work") or {}).get("scaling_baseline_task_id")
    base = next((r for r in records if r.get("task_id") == base_id), None)
    n = rec.get("world_size", 1)
    for who, r in (("the 1-rank baseline", base), (f"the {n}-rank record", rec)):
        if r is not None and (found := busy_findings(r)):
            what = f" ({found[0]})" if detail else ""
            return f"{who} was measured on a busy machine{what}"
    if base is not None and (tm := _metric(base, "throughput")) and tm.get("ci95"):
        lo, hi = tm["ci95"]
        if lo > 0 and hi / lo > 1.5:
            return (
                f"the 1-rank baseline's throughput interval spans x{hi / lo:.1f} "
                f"({lo:.3g}-{hi:.3g}): it is no reference; measure it again at a quiet time"
            )
    if (rec.get("benchmark") or {}).get("params", {}).get("scaling") == "strong":
        return (
            f"strong scaling: each rank runs 1/{n} of the baseline's batch, and a smaller "
            "working set can run faster per sample (caches); this run does not show which"
        )
    return (
        "not explained by this run: the 1-rank baseline ran slower than its share; "
        "measure it again at a quiet time"
    )


def above_ideal_note(records: list[dict[str, Any]]) -> str | None:
    """One line under a table with efficiencies above 100% (marked ``*``): how many, the
    largest and its cause (:func:`superlinear_cause`)."""
    over = [r for r in records if r.get("status") == "ok" and above_ideal(r)]
    if not over:
        return None
    top = max(over, key=lambda r: _metric(r, "scaling_efficiency")["value"])  # type: ignore[index]
    value = _metric(top, "scaling_efficiency")["value"]  # type: ignore[index]
    return (
        f"* {len(over)} record(s) above 100% scaling efficiency (at most {value:.0f}%, "
        f"{top['benchmark']['name']} {params_label(top)}): "
        f"{superlinear_cause(top, records)}"
    )


def run_exit_code(records: list[dict[str, Any]], strict: bool = False) -> int:
    """``dlsuite run``'s exit code: 1 when a record is failed, timeout or oom, or an ok record
    failed a correctness check that is not declared known (a known framework bug, a documented
    difference); 0 otherwise. ``strict``: every failed check counts."""
    if any(r["status"] in ("failed", "timeout", "oom") for r in records):
        return 1
    wrong = [r for r in records if r["status"] == "ok" and not r["correctness"]["passed"]]
    return 1 if any(strict or not declared_known(r) for r in wrong) else 0


def noisy_label(rec: dict[str, Any], width: float) -> str:
    """ "43% wide > 2%": a noisy record's CI of the median against its target (both relative
    to the median, full width)."""
    target = rec["measurement"]["target_ci_rel"]
    shown = "unknown" if width == float("inf") else f"{_pct(width)}%"
    return f"{shown} wide > {_pct(target)}%"


def steady_label(rec: dict[str, Any]) -> str:
    """An input pipeline whose epoch ran slower than its windows' median says so: " (epoch
    69.7)". The median of the windows' rates is robust to a slow window, but a pipeline's slow
    batches (a large image, a stall) are part of what it delivers; the steady rate of the
    whole epoch, which the feeding capacity uses, is then below the median's interval."""
    epoch = (rec.get("pipeline") or {}).get("epoch") or {}
    tp = _metric(rec, "throughput")
    steady = epoch.get("steady_rate")
    if not tp or not steady or not tp.get("ci95"):
        return ""
    lo = tp["ci95"][0]
    return f" (epoch {steady:.1f})" if steady < lo else ""


def ranks_label(rec: dict[str, Any]) -> str:
    """A loader read by several ranks: its headline is rank 0's (the record's metrics), so the
    rate says so, with the sum of every rank's steady rate beside it (``pipeline.ranks``):
    " (rank 0 of 2; 557.1 all ranks, steady)"."""
    ranks = (rec.get("pipeline") or {}).get("ranks") or {}
    world, total = ranks.get("world_size") or 1, ranks.get("aggregate_rate")
    if world < 2:
        return ""
    return f" (rank 0 of {world}" + (f"; {total:.1f} all ranks, steady)" if total else ")")


def feeding_label(rec: dict[str, Any]) -> str:
    """An input pipeline's feeding capacity (training level): " feeds 2×H100"; where it keeps
    not even one 90% busy, the share of one it feeds: " feeds 6% of one H100"."""
    feeding = (rec.get("pipeline") or {}).get("feeding") or []
    if not feeding:
        return ""
    f = feeding[0]
    n = f["accelerators"]
    if n == 0:
        return f" feeds {f['share_of_one']:.0%} of one {f['accelerator']}"
    return f" feeds {n}×{f['accelerator']}"


def short_reason(reason: str, limit: int = 120) -> str:
    """A skipped or failed record's reason for the table, at most ``limit`` characters. A
    reason ends with its fix after the last "; " (set master_weights = 'none' ...): the cut
    is taken from the middle, so the fix stays, and marked with an ellipsis."""
    if len(reason) <= limit:
        return reason
    head, sep, fix = reason.rpartition("; ")
    if sep and len(fix) <= limit // 2:
        return head[: limit - len(fix) - 3].rstrip() + "…; " + fix
    return reason[: limit - 1].rstrip() + "…"


def table(records: list[dict[str, Any]], title: str = "") -> Table:
    t = Table(title=title, show_lines=False, header_style="bold")
    for col, justify in (
        ("benchmark", "left"),
        ("framework", "left"),
        ("params", "left"),
        ("dtype", "left"),
        ("status", "left"),
        ("median", "right"),
        ("±CI95", "right"),
        ("rate", "right"),
        ("% peak", "right"),
        ("GB/s", "right"),
        ("correctness (worst err/tol)", "left"),
    ):
        t.add_column(col, justify="right" if justify == "right" else "left", overflow="fold")
    for rec in records:
        status = rec["status"]
        style = {"ok": "green", "skipped": "yellow"}.get(status, "red")
        # cells are Text, never markup: a record's strings (a framework's error message such as
        # "[/__w/.../pair.cc:537] Read error", a model path) are shown as they are
        cell = Text(status, style=style)
        width = noisy(rec)
        if width is not None:
            # the time budget or the sample cap stopped it before the median's CI met the target
            cell.append(" ")
            cell.append("noisy", style="yellow bold")
            cell.append(f": CI {noisy_label(rec, width)}")
        if busy_findings(rec):
            # after a noisy label, a separator: "CI 62.4% wide > 2% busy" read as "> 2% busy"
            cell.append("; " if width is not None else " ")
            cell.append("busy", style="yellow bold")
        row: list[Text] = [
            Text(rec["benchmark"]["name"]),
            Text(framework_label(rec)),
            Text(params_label(rec)),
            Text(rec["dtype"]),
            cell,
        ]
        tm = next((m for m in rec.get("metrics") or [] if m["unit"] == "s" and "median" in m), None)
        if tm is not None:
            lo, hi = tm["ci95"]
            fr, bw, pk = (
                _metric(rec, "flop_rate"),
                _metric(rec, "bandwidth"),
                _metric(rec, "percent_of_peak"),
            )
            tp, bus = _metric(rec, "throughput"), _metric(rec, "busbw")
            params_rate = _metric(rec, "parameter_rate")  # an optimizer step
            pk_bw = _metric(rec, "percent_of_peak_bandwidth")
            if fr:
                rate = f"{fmt_rate(fr['value'])} TFLOP/s"
            elif bus:
                rate = f"{bus['value']:.3g} GB/s busbw"
            elif tp:
                rate = f"{tp['value']:.1f} samples/s{steady_label(rec)}{ranks_label(rec)}"
            elif params_rate:
                rate = f"{params_rate['value']:.3g} Mparam/s"
            else:
                rate = "-"
            eff = _metric(rec, "scaling_efficiency")
            if eff:
                rate += f" ({_efficiency(eff['value'])}% eff.{'*' if above_ideal(rec) else ''})"
            rate += feeding_label(rec)
            head = fmt_seconds(tm["value"])
            if tm["name"] != "time":
                head = f"{head} ({tm['name'].replace('_', ' ')})"
            row += [
                Text(head),
                Text(ci_text(tm["median"], lo, hi).removeprefix("±")),
                Text(rate),
                Text(
                    peak_cell(pk["value"])
                    if pk
                    else f"{pk_bw['value']:.1f} (mem)"
                    if pk_bw
                    else "-"
                ),
                Text(fmt_rate(bw["value"]) if bw else "-"),
                correctness_cell(rec),
            ]
        else:
            # a record without a timing (agreement, its matrix): its checks are its result
            last = (
                correctness_cell(rec)
                if rec.get("status") == "ok" and rec.get("correctness")
                else Text(short_reason(rec.get("reason") or ""))
            )
            row += [Text("-")] * 5 + [last]
        t.add_row(*row)
    return t
