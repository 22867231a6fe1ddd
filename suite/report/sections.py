"""The report's sections, built from runs as plain data (tables, text, PNG figures).

Every section is always present; when the runs hold nothing for it, it says so in one line.
Plots are capped (one per benchmark family or device, at most ``MAX_PLOTS`` per section, at
most ``MAX_GROUPS`` configurations and ``MAX_SERIES`` series per plot) and say when capped;
the tables next to them are complete.

Contracts for data not produced yet by the suite (coded against these, tested with synthetic
records):

* **distributed records** — ``benchmark.level == "distributed"``; collectives carry metrics
  ``busbw`` and ``algbw`` (unit ``GB/s``, nccl-tests' formulas) and their message size in
  ``benchmark.params`` under one of :data:`MESSAGE_SIZE_KEYS` (bytes); training carries
  ``scaling_efficiency`` (unit ``%``, or a ratio where 1 is ideal) at several ``world_size``.
  Where a task writes one record per rank, rank 0 (or a rank-less record) is plotted.
* **telemetry timelines** — ``RUN_DIR/telemetry/<task_id>-rank<r>.jsonl`` (written by the
  worker, ``suite/telemetry``; ``<task_id>.jsonl`` is read too), one JSON object a line: GPU
  samples ``{"t": seconds, "gpu": index, "util": percent, "power_w": watts, ...}`` and host
  samples ``{"t", "kind": "host", "cpu_util_pct", "proc_cpu_pct", "rss_mb"}``.
* **memory-bandwidth peak** — ``device.peak_bandwidth_gbps`` (or ``work.peak_bandwidth_gbps``)
  in GB/s; without it the roofline draws only the compute roofs and says so.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import suite.report.plots as plots
from suite.report.document import Figure, Heading, Section, Table
from suite.report.load import Run, device_name, metric
from suite.results import noisy
from suite.summary import (
    above_ideal,
    above_ideal_note,
    busy_findings,
    busy_note,
    ci_text,
    corrupt_note,
    fmt_seconds,
    noisy_label,
    not_applied_note,
    over_peak_note,
    params_label,
    peak_cell,
    steady_label,
)
from suite.telemetry import trapezoid

SECTION_TITLES = (
    "Findings",  # suite/report/findings.py
    # operator level
    "Operator roofline",
    "Framework and run comparison",
    # network level
    "A step taken apart",  # suite/report/decompose.py
    "Cross-framework agreement",
    # training level
    "Training level: the input pipeline",  # suite/report/training.py
    "Training: optimizers",  # suite/report/optimizers.py
    "What bounds training",  # suite/report/bounds.py
    # distributed level
    "Distributed: collectives and scaling",
    "Distributed strategies",
    # projection
    "Projection to other rank counts",  # suite/projection/report_section.py (dlsuite report)
    # what every level shares, then checks and provenance
    "Utilisation and power timelines",
    "Summary",
    "Correctness checks",
    "Skipped and failed records",
    "Runs",
    "Environment and provenance",
)

MAX_PLOTS = 12  # per section
MAX_GROUPS = 16  # configurations (x positions) per bar chart
MAX_SERIES = 8  # bars per configuration / lines per plot
MAX_ROOF_POINTS = 400
MAX_TIMELINES = 12  # per report
MESSAGE_SIZE_KEYS = ("message_bytes", "size_bytes", "bytes", "size")
BAD_STATUSES = ("failed", "timeout", "oom")

RunRecord = tuple[Run, dict[str, Any]]


# -- small formatting helpers ------------------------------------------------------------------


def _records(runs: list[Run], status: str | None = "ok") -> Iterator[RunRecord]:
    for run in runs:
        for rec in run.records:
            if status is None or rec["status"] == status:
                yield run, rec


def estimate(m: dict[str, Any]) -> plots.Estimate:
    """(median, ci_low, ci_high) of a metric; the CI collapses to the value when absent."""
    v = float(m.get("median", m["value"]))
    lo, hi = m.get("ci95") or (v, v)
    return v, float(lo), float(hi)


def fmt_value(m: dict[str, Any]) -> str:
    """A metric's headline value in its unit, with the CI half-width in % when known."""
    v, lo, hi = estimate(m)
    text = fmt_seconds(v) if m["unit"] == "s" else f"{v:.4g} {m['unit']}"
    if "ci95" in m and v:
        text += f" {ci_text(v, lo, hi)}"
    return text


def _ms(e: plots.Estimate) -> plots.Estimate:
    return e[0] * 1e3, e[1] * 1e3, e[2] * 1e3


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def headline_time(rec: dict[str, Any]) -> dict[str, Any] | None:
    """The record's timed metric: ``time`` if present, else the first sampled metric in s."""
    tm = metric(rec, "time")
    if tm is not None and "median" in tm:
        return tm
    return next((m for m in rec.get("metrics") or [] if m["unit"] == "s" and "median" in m), None)


def correctness_text(rec: dict[str, Any]) -> str:
    """The summary table's correctness cell as text (``summary.correctness_cell``): the worst
    numerical check (``pass 3.0e-07≤1e-05``), a failed timer check after it, a declared
    failure's label; the report and the terminal say the same, the report naming a failed
    check (``FAIL gemm.max_rel_error 3.0e-02>1e-03``)."""
    from suite.summary import correctness_cell

    return correctness_cell(rec, named=True).plain


def config_label(rec: dict[str, Any]) -> str:
    return f"{params_label(rec)} {rec['dtype']}"


def series_label(run: Run, rec: dict[str, Any]) -> str:
    """Run directory name, framework and device: what tells two bars of one config apart."""
    return plots.SEP.join([run.label, rec["framework"]["name"], device_name(rec)])


def _one_line(text: str | None, limit: int = 200) -> str:
    if not text:
        return ""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _capped(what: str, shown: int, total: int, where: str) -> str:
    return f"Capped: showing {shown} of {total} {what}; {where}."


def _rank0(rec: dict[str, Any]) -> bool:
    return rec.get("rank") in (None, 0)


# -- sections ----------------------------------------------------------------------------------


def runs_section(runs: list[Run]) -> Section:
    s = Section("Runs")
    rows = []
    for run in runs:
        recs = run.records
        count = {
            st: sum(r["status"] == st for r in recs) for st in ("ok", "skipped", *BAD_STATUSES)
        }
        wrong = sum(r["status"] == "ok" and not r["correctness"]["passed"] for r in recs)
        man = run.manifest or {}
        rows.append(
            [
                run.label,
                str(run.path),
                ", ".join(sorted({r["run_id"] for r in recs})),
                str(man.get("created_at", "-")),
                run.state,
                str(len(run.planned)) if run.planned else "-",
                str(len(run.unrecorded)) if run.planned else "-",
                str(len(recs)),
                *(str(count[k]) for k in ("ok", "skipped", *BAD_STATUSES)),
                str(wrong),
            ]
        )
    s.add(
        Table(
            [
                "run",
                "directory",
                "run id",
                "created",
                "state",
                "planned tasks",
                "tasks without a record",
                "records",
                "ok",
                "skipped",
                "failed",
                "timeout",
                "oom",
                "correctness failures",
            ],
            rows,
        )
    )
    for run in runs:
        if run.unrecorded:
            s.add(unrecorded_note(run))
        s.add(*run.notes)
    return s


MAX_UNRECORDED_LISTED = 12


def unrecorded_note(run: Run) -> str:
    """What a stopped (or still running) run has not measured, and the command that runs it."""
    missing, planned = run.unrecorded, run.planned
    listed = ", ".join(missing[:MAX_UNRECORDED_LISTED])
    if len(missing) > MAX_UNRECORDED_LISTED:
        listed += f" and {len(missing) - MAX_UNRECORDED_LISTED} more"
    head = f"{run.label}: {len(missing)} of its {len(planned)} planned tasks have no record "
    if run.runner_alive:
        return head + f"yet (a dlsuite run holds the directory now): {listed}."
    argv = [str(a) for a in (run.manifest or {}).get("argv") or []]
    if argv[:1] == ["run"]:
        # the run's own flags, with --out where the directory is now (it may have been moved)
        flags: list[str] = []
        rest = iter(argv[1:])
        for arg in rest:
            if arg == "--out":
                next(rest, None)
            elif not arg.startswith("--out=") and arg != "--resume":
                flags.append(arg)
        resume = "`dlsuite " + shlex.join(["run", *flags, "--out", str(run.path), "--resume"])
        resume += "`"
    else:
        resume = f"`dlsuite run --resume --out {shlex.quote(str(run.path))}` with the run's flags"
    return (
        head + f"(state: {run.state}), so this report does not show them: {listed}. {resume} "
        "runs them and keeps what is recorded."
    )


#: the columns that name a record in a report table, and :func:`_record_cells` its cells
RECORD_COLUMNS = ("benchmark", "params", "dtype", "framework")


def _record_cells(rec: dict[str, Any]) -> list[str]:
    return [rec["benchmark"]["name"], params_label(rec), rec["dtype"], rec["framework"]["name"]]


def summary_section(runs: list[Run]) -> Section:
    s = Section("Summary")
    s.add(
        "One row per record. median: time per call (or per step) with the half-width of its "
        "distribution-free 95% CI; rate: TFLOP/s (or samples/s); correctness: the worst check "
        "as error against tolerance. **noisy**: the time budget or the sample cap stopped it "
        "before the CI of the median was as narrow as its target (the width is given; "
        "`--retry-noisy N` measures such records again)."
    )
    for run in runs:
        rows = []
        for rec in run.records:
            width = noisy(rec)
            row = [
                *_record_cells(rec),
                (rec["status"] if width is None else f"ok, noisy: CI {noisy_label(rec, width)}")
                + ((", busy" if width is None else "; busy") if busy_findings(rec) else ""),
            ]
            tm = headline_time(rec)
            if tm is None:
                rows.append(row + ["-"] * 5 + [_one_line(rec.get("reason"), 120) or "-"])
                continue
            v, lo, hi = estimate(tm)
            fr, tp = metric(rec, "flop_rate"), metric(rec, "throughput")
            pk, bw = metric(rec, "percent_of_peak"), metric(rec, "bandwidth")
            rate = (f"{fr['value']:.3f}" if fr else
                    f"{tp['value']:.1f} samples/s{steady_label(rec)}" if tp else "-")  # fmt: skip
            rows.append(
                row
                + [
                    fmt_seconds(v) if tm["name"] == "time" else f"{fmt_seconds(v)} ({tm['name']})",
                    ci_text(v, lo, hi).removeprefix("±"),
                    rate,
                    peak_cell(pk["value"]) if pk else "-",
                    f"{bw['value']:.1f}" if bw else "-",
                    correctness_text(rec),
                ]
            )
        s.add(Heading(f"Run {run.label}"))
        s.add(
            Table(
                [
                    *RECORD_COLUMNS,
                    "status",
                    "median",
                    "±CI95",
                    "TFLOP/s",
                    "% peak",
                    "GB/s",
                    "correctness (worst err/tol)",
                ],
                rows,
            )
        )
        for note in (over_peak_note(run.records), above_ideal_note(run.records),
                     busy_note(run.records), corrupt_note(run.records),
                     not_applied_note(run.records), retry_note(run)):  # fmt: skip
            if note:
                s.add(note)
    return s


def retry_note(run: Run) -> str | None:
    """Which records are a later attempt (``--resume`` after a failure, ``--retry-noisy``) and
    what the attempt before them was: a task that timed out once and then passed is not the
    same finding as one that passed at once, and the earlier records are kept aside."""
    seen: dict[str, dict[str, Any]] = {}
    for rec in run.records:
        if rec.get("retry") and rec["task_id"] not in seen:
            seen[rec["task_id"]] = rec
    if not seen:
        return None
    items = []
    for rec in seen.values():
        retry = rec["retry"]
        before = retry["previous_status"]
        if retry.get("previous_reason"):
            before += f" ({_one_line(retry['previous_reason'], 120)})"
        items.append(
            f"{rec['benchmark']['name']} {config_label(rec)} {rec['framework']['name']}: "
            f"attempt {retry['attempt']}, the one before {before}"
        )
    return (
        f"retried: {len(seen)} task(s) were measured again (`--resume` or `--retry-noisy`); "
        f"the table shows the newest attempt, the earlier records are in "
        f"{run.path / 'superseded.jsonl'}: " + "; ".join(items)
    )


def comparison_title(level: str, name: str, metrics: list[str]) -> str:
    """A comparison plot's title: time, step_time and latency are per call (a step, a batch);
    time_to_accuracy is a whole training run to the target, not a call."""
    per_call = "" if set(metrics) == {"time_to_accuracy"} else " per call"
    return f"{level}/{name}: {', '.join(metrics)}{per_call} (median, 95% CI)"


def comparison_section(runs: list[Run], figure_name: Callable[[str], str]) -> Section:
    """One grouped bar chart per benchmark family: configurations × (run, framework, device)."""
    s = Section("Framework and run comparison")
    families: dict[tuple[str, str], list[RunRecord]] = {}
    for run, rec in _records(runs):
        if rec["benchmark"]["level"] == "distributed" or headline_time(rec) is None:
            continue
        families.setdefault((rec["benchmark"]["level"], rec["benchmark"]["name"]), []).append(
            (run, rec)
        )
    if not families:
        s.add("No ok operator or network records with a timed metric: nothing to compare.")
        return s
    s.add(
        "Time per call (for time_to_accuracy: per training run to the target), median with "
        "its 95% CI (error bars), one bar per run · framework · "
        "device; log scale. Below each plot the same numbers, with each series' time relative "
        "to the first series of the row (lower is faster). Distributed records are in their "
        "own section."
    )
    if len(families) > MAX_PLOTS:
        s.add(_capped("benchmark families", MAX_PLOTS, len(families), "the Summary has all"))
    for (level, name), items in list(families.items())[:MAX_PLOTS]:
        configs: dict[str, int] = {}
        series: dict[str, int] = {}
        cells: dict[tuple[int, int], dict[str, Any]] = {}
        wrong: set[tuple[int, int]] = set()  # ok records whose correctness check failed
        duplicates = 0
        for run, rec in items:
            gi = configs.setdefault(config_label(rec), len(configs))
            si = series.setdefault(series_label(run, rec), len(series))
            if (si, gi) in cells:
                duplicates += 1
                continue
            tm = headline_time(rec)
            assert tm is not None
            cells[(si, gi)] = tm
            if not rec["correctness"]["passed"]:
                wrong.add((si, gi))
        s.add(Heading(f"{level}/{name}"))
        if len(series) == 1:
            s.add("One series only: add runs (or frameworks) to compare side by side.")
        # capped: the configurations most series measured (those compare something), in
        # their order; then the series with a value among them (no empty slot per group)
        shared = {
            gi: sum((si, gi) in cells for si in range(len(series))) for gi in range(len(configs))
        }
        shown_groups = sorted(sorted(shared, key=lambda gi: -shared[gi])[:MAX_GROUPS])
        with_values = [si for si in range(len(series))
                       if any((si, gi) in cells for gi in shown_groups)]  # fmt: skip
        shown_series = with_values[:MAX_SERIES]
        names_of = list(series)
        groups = [list(configs)[gi] for gi in shown_groups]
        series_names = [names_of[si] for si in shown_series]
        notes = []
        if len(configs) > MAX_GROUPS:
            notes.append(_capped("configurations", MAX_GROUPS, len(configs),
                                 "those measured by the most series; the table has all"))  # fmt: skip
        if len(with_values) > MAX_SERIES:
            notes.append(_capped("series", MAX_SERIES, len(with_values), "the table has all"))
        absent = [names_of[si] for si in range(len(series)) if si not in with_values]
        if absent:
            notes.append(
                f"Not in the plot (no value among the configurations plotted; the table has "
                f"theirs): {', '.join(absent)}."
            )
        if duplicates:
            notes.append(
                f"{duplicates} record(s) repeat a configuration of the same series; the first is used."
            )
        row_of = {gi: i for i, gi in enumerate(shown_groups)}
        col_of = {si: i for i, si in enumerate(shown_series)}
        values = {
            (col_of[si], row_of[gi]): _ms(estimate(m))
            for (si, gi), m in cells.items()
            if si in col_of and gi in row_of
        }
        unit_names = sorted({m["name"] for m in cells.values()})
        png = plots.bar_chart(
            groups,
            series_names,
            values,
            title=comparison_title(level, name, unit_names),
            ylabel="ms (log scale)",
            flagged=frozenset(
                (col_of[si], row_of[gi]) for si, gi in wrong if si in col_of and gi in row_of
            ),
        )
        s.add(
            Figure(
                figure_name(f"compare-{level}-{name}"),
                png,
                alt=f"{level}/{name} time per configuration and series",
            )
        )
        s.add(*notes)
        rows = []
        for cfg, gi in configs.items():
            row = [cfg]
            first: float | None = None
            for si in range(len(series)):
                m = cells.get((si, gi))
                if m is None:
                    row.append("-")
                    continue
                v = estimate(m)[0]
                first = v if first is None else first
                cell = f"{fmt_value(m)} ({v / first:.2f}×)" if first else fmt_value(m)
                row.append(cell + (" FAIL: wrong result" if (si, gi) in wrong else ""))
            rows.append(row)
        s.add(Table(["configuration", *series], rows))
        if wrong:
            s.add(
                f"FAIL: wrong result: {len(wrong)} value(s) from records whose correctness "
                "check failed (the Correctness checks section has the detail): how fast a "
                "wrong answer came is no comparison."
            )
    return s


def _peak_bandwidth_gbps(rec: dict[str, Any]) -> float | None:
    for block in (rec.get("device") or {}, rec.get("work") or {}):
        v = block.get("peak_bandwidth_gbps")
        if isinstance(v, int | float) and v > 0:
            return float(v)
    device = rec.get("device") or {}
    if device.get("kind") == "gpu" and isinstance(device.get("name"), str):
        # a record from before the adapters wrote it: the declared bandwidth by name
        from suite.devices import declared_gpu_bandwidth

        return declared_gpu_bandwidth(device["name"])
    return None


def roofline_section(runs: list[Run], figure_name: Callable[[str], str]) -> Section:
    """Achieved FLOP/s against arithmetic intensity, one log-log plot per device."""
    s = Section("Operator roofline")
    devices: dict[tuple[str, str], list[RunRecord]] = {}
    for run, rec in _records(runs):
        work = rec.get("work") or {}
        if rec["benchmark"]["level"] != "operator" or not rec.get("device"):
            continue
        if not (work.get("flops") or 0) > 0 or not (work.get("bytes") or 0) > 0:
            continue
        if headline_time(rec) is None and metric(rec, "flop_rate") is None:
            continue
        devices.setdefault((rec["device"]["kind"], rec["device"]["name"]), []).append((run, rec))
    if not devices:
        s.add("No ok operator records with FLOP and byte counts (record['work']): no roofline.")
        return s
    s.add(
        "Each point is one record: achieved FLOP/s (median) against arithmetic intensity "
        "(FLOP per minimum byte moved, record['work']). Horizontal lines are the device's "
        "compute peak per dtype (record['work']['peak_tflops']); the sloped part of the roof "
        "is drawn only where a memory-bandwidth peak is known. Norm, softmax and GELU FLOP "
        "counts are nominal conventions (docs/reference/methodology.md)."
    )
    if len(devices) > MAX_PLOTS:
        s.add(_capped("devices", MAX_PLOTS, len(devices), "the table has all"))
    for di, ((kind, name), items) in enumerate(devices.items()):
        points, rows, above = [], [], 0
        peaks: dict[str, set[float]] = {}
        bandwidths: set[float] = set()
        for run, rec in items:
            work = rec["work"]
            intensity = work.get("arithmetic_intensity") or work["flops"] / work["bytes"]
            fr = metric(rec, "flop_rate")
            if fr is not None and fr["unit"] == "TFLOP/s":
                achieved = float(fr["value"]) * 1e12
            else:
                tm = headline_time(rec)
                assert tm is not None
                achieved = work["flops"] / estimate(tm)[0]
            if work.get("peak_tflops"):
                peaks.setdefault(rec["dtype"], set()).add(float(work["peak_tflops"]))
            bw = _peak_bandwidth_gbps(rec)
            if bw:
                bandwidths.add(bw)
            points.append(
                plots.RoofPoint(rec["benchmark"]["name"], rec["dtype"], intensity, achieved)
            )
            roof = (
                min(max(peaks[rec["dtype"]]) * 1e12, (bw or math.inf) * 1e9 * intensity)
                if rec["dtype"] in peaks
                else None
            )
            above += bool(roof and achieved > roof)
            rows.append(
                [
                    run.label,
                    rec["benchmark"]["name"],
                    params_label(rec),
                    rec["dtype"],
                    rec["framework"]["name"],
                    f"{intensity:.3g}",
                    f"{achieved / 1e12:.4g}",
                    (f"{100 * achieved / roof:.1f}%{'*' if achieved > roof else ''}"
                     if roof else "-")
                    + ("" if rec["correctness"]["passed"] else " FAIL: wrong result"),
                ]
            )  # fmt: skip
        if di >= MAX_PLOTS:
            s.add(Heading(f"{kind} {name}"), Table(_ROOF_HEADERS, rows))
            continue
        compute = {dt: max(v) * 1e12 for dt, v in sorted(peaks.items())}
        bandwidth = max(bandwidths) * 1e9 if bandwidths else None
        shown = points[:MAX_ROOF_POINTS]
        png = plots.roofline(
            shown, compute, bandwidth, title=f"roofline: {name} ({kind}), {len(shown)} records"
        )
        s.add(Heading(f"{kind} {name}"))
        s.add(Figure(figure_name(f"roofline-{kind}-{name}"), png, alt=f"roofline of {name}"))
        if len(points) > MAX_ROOF_POINTS:
            s.add(_capped("points", MAX_ROOF_POINTS, len(points), "the table has all"))
        if bandwidth is None:
            s.add(
                f"No memory-bandwidth peak is known for {name} (the records carry no "
                "device.peak_bandwidth_gbps), so only the compute roof is drawn: memory-bound "
                "operators (low intensity) sit far below it for that reason, not necessarily "
                "because they are slow."
            )
        if not compute:
            s.add(f"No compute peak is known for {name}: no roof is drawn.")
        for dt, vals in peaks.items():
            if len(vals) > 1:
                s.add(
                    f"{dt}: records disagree on the peak ({', '.join(f'{v:.4g}' for v in sorted(vals))}"
                    " TFLOP/s); the highest is drawn."
                )
        sources = sorted({str(r["device"].get("peak_source", "")) for _, r in items} - {""})
        if sources:
            s.add("Peak source: " + " | ".join(sources))
        bw_sources = sorted(
            {str(r["device"].get("peak_bandwidth_source", "")) for _, r in items} - {""}
        )
        if bw_sources:
            s.add("Bandwidth source: " + " | ".join(bw_sources))
        s.add(Table(_ROOF_HEADERS, rows))
        if above:
            s.add(
                f"* {above} record(s) above their roof: a roof is not a bound it cannot pass "
                "where the compute peak is an estimate below what ran (a CPU's clock as the "
                "machine reports it; turbo runs faster: the peak source above), or where the "
                "operator's data fit in a cache, faster than the memory bandwidth drawn. Give "
                "the peak as [device] peak_tflops in a config file where it is known."
            )
    return s


_ROOF_HEADERS = [
    "run",
    "benchmark",
    "params",
    "dtype",
    "framework",
    "FLOP/byte",
    "achieved TFLOP/s",
    "% of roof",
]


def message_bytes(rec: dict[str, Any]) -> float | None:
    """The message size of a collective record, in bytes (see MESSAGE_SIZE_KEYS)."""
    params = rec["benchmark"]["params"]
    for key in MESSAGE_SIZE_KEYS:
        v = params.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool) and v > 0:
            return float(v)
    return None


def _without_world_size(rec: dict[str, Any]) -> str:
    params = {
        k: v
        for k, v in rec["benchmark"]["params"].items()
        if k not in ("world_size", "ranks", "nodes")
    }
    return " ".join(f"{k}={v}" for k, v in sorted(params.items())) or "-"


def distributed_section(runs: list[Run], figure_name: Callable[[str], str]) -> Section:
    s = Section("Distributed: collectives and scaling")
    dist = [
        (run, rec)
        for run, rec in _records(runs)
        if rec["benchmark"]["level"] == "distributed" and _rank0(rec)
    ]
    not_ok = sum(
        rec["benchmark"]["level"] == "distributed" and rec["status"] != "ok"
        for _, rec in _records(runs, None)
    )
    if not dist:
        s.add(
            "No distributed records in these runs (level 'distributed'): no collective "
            "bandwidth or scaling plots."
            + (
                f" {not_ok} distributed record(s) did not run: see Skipped and failed."
                if not_ok
                else ""
            )
        )
        return s
    s.add(
        "Rank 0's record of each task (or the rank-less one). busbw and algbw follow "
        "nccl-tests' definitions; error bars are 95% CIs of the median."
        + (
            f" {not_ok} distributed record(s) did not run: see Skipped and failed."
            if not_ok
            else ""
        )
    )
    # collective bandwidth
    s.add(Heading("Collective bus bandwidth vs message size"))
    colls: dict[str, list[RunRecord]] = {}
    no_size = 0
    for run, rec in dist:
        if metric(rec, "busbw") is None:
            continue
        if message_bytes(rec) is None:
            no_size += 1
            continue
        colls.setdefault(rec["benchmark"]["name"], []).append((run, rec))
    if not colls:
        s.add("No collective records (metric 'busbw') among the distributed records.")
    if no_size:
        s.add(
            f"{no_size} busbw record(s) name no message size (params "
            f"{'/'.join(MESSAGE_SIZE_KEYS)}) and are left out."
        )
    if len(colls) > MAX_PLOTS:
        s.add(_capped("collectives", MAX_PLOTS, len(colls), "the tables have all"))
    for ci, (name, items) in enumerate(colls.items()):
        lines: dict[str, list[tuple[float, plots.Estimate]]] = {}
        rows = []
        for run, rec in items:
            size = message_bytes(rec)
            assert size is not None
            label = plots.SEP.join(
                [
                    run.label,
                    rec["framework"]["name"],
                    device_name(rec),
                    f"{rec['world_size']} ranks",
                    rec["dtype"],
                ]
            )
            bus = metric(rec, "busbw")
            assert bus is not None
            lines.setdefault(label, []).append((size, estimate(bus)))
            alg, tm = metric(rec, "algbw"), headline_time(rec)
            rows.append(
                [
                    label,
                    fmt_bytes(size),
                    fmt_value(bus),
                    fmt_value(alg) if alg else "-",
                    fmt_value(tm) if tm else "-",
                    correctness_text(rec),
                ]
            )
        s.add(Heading(f"{name}"))
        if ci < MAX_PLOTS:
            shown = dict(list(lines.items())[:MAX_SERIES])
            png = plots.xy_lines(
                shown,
                title=f"{name}: bus bandwidth vs message size",
                xlabel="message size (bytes, log2)",
                ylabel="busbw (GB/s)",
            )
            s.add(Figure(figure_name(f"busbw-{name}"), png, alt=f"{name} busbw vs size"))
            if len(lines) > MAX_SERIES:
                s.add(_capped("series", MAX_SERIES, len(lines), "the table has all"))
        s.add(Table(["series", "size", "busbw", "algbw", "time", "correctness"], rows))
    # scaling efficiency
    s.add(Heading("Scaling efficiency vs world size"))
    scal: dict[str, list[RunRecord]] = {}
    for run, rec in dist:
        if metric(rec, "scaling_efficiency") is not None:
            scal.setdefault(rec["benchmark"]["name"], []).append((run, rec))
    if not scal:
        s.add("No scaling records (metric 'scaling_efficiency') among the distributed records.")
    if len(scal) > MAX_PLOTS:
        s.add(_capped("benchmarks", MAX_PLOTS, len(scal), "the tables have all"))
    for bi, (name, items) in enumerate(scal.items()):
        eff_lines: dict[str, list[tuple[float, plots.Estimate]]] = {}
        units: set[str] = set()
        rows = []
        for run, rec in items:
            eff = metric(rec, "scaling_efficiency")
            assert eff is not None
            units.add(eff["unit"])
            label = plots.SEP.join(
                [run.label, rec["framework"]["name"], _without_world_size(rec), rec["dtype"]]
            )
            eff_lines.setdefault(label, []).append((float(rec["world_size"]), estimate(eff)))
            tp = metric(rec, "throughput")
            rows.append(
                [
                    label,
                    str(rec["world_size"]),
                    fmt_value(eff) + ("*" if above_ideal(rec) else ""),
                    fmt_value(tp) if tp else "-",
                    correctness_text(rec),
                ]
            )
        unit = units.pop() if len(units) == 1 else "mixed units"
        s.add(Heading(f"{name}"))
        if bi < MAX_PLOTS:
            png = plots.xy_lines(
                dict(list(eff_lines.items())[:MAX_SERIES]),
                title=f"{name}: scaling efficiency vs world size",
                xlabel="world size (ranks, log2)",
                ylabel=f"scaling efficiency ({unit})",
                ideal=100.0 if unit == "%" else 1.0 if unit != "mixed units" else None,
            )
            s.add(Figure(figure_name(f"scaling-{name}"), png, alt=f"{name} scaling efficiency"))
            if len(eff_lines) > MAX_SERIES:
                s.add(_capped("series", MAX_SERIES, len(eff_lines), "the table has all"))
        s.add(Table(["series", "world size", "efficiency", "throughput", "correctness"], rows))
        for run in {r.label: r for r, _ in items}.values():  # each run once
            if note := above_ideal_note(run.records):
                s.add(note)
    return s


def _strategy_network(rec: dict[str, Any]) -> str:
    """A strategies record's network, batch and digits settings: what its strategies share."""
    p = rec["benchmark"]["params"]
    arch = " ".join(
        f"{k}={v}"
        for k, v in sorted(p.items())
        if k not in ("network", "batch", "lr", "strategy", "options", "digits")
    )
    d = p.get("digits") or {}
    digits = f"digits to {d.get('target_accuracy', 0):.0%} in {d.get('epochs', '?')} epochs"
    return f"{p['network']} {arch} global batch {p['batch']}; {digits}".replace("  ", " ")


def _strategy_label(rec: dict[str, Any]) -> str:
    p = rec["benchmark"]["params"]
    opts = ",".join(f"{k}={v}" for k, v in (p.get("options") or {}).items())
    return f"{p['strategy']}{f' ({opts})' if opts else ''}"


def _wrapped(text: str, width: int = 90) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width)[:2])


def _ratio_text(v: Any) -> str:
    return f"{v:.2f}x" if isinstance(v, int | float) and math.isfinite(v) else "-"


def strategies_section(runs: list[Run], figure_name: Callable[[str], str]) -> Section:
    """Each strategy's throughput, bytes per step and statistical cost (digits), against the
    synchronous allreduce record of the same run (``strategy.vs_baseline``, added by the
    host); one plot of throughput against the accuracy cost and one of bytes per step per
    network; throughput against world size where the runs hold several."""
    s = Section("Distributed strategies")
    recs = [
        (run, rec)
        for run, rec in _records(runs)
        if rec["benchmark"]["name"] == "strategies" and rec.get("strategy") and _rank0(rec)
    ]
    not_run = [
        (run, rec)
        for run, rec in _records(runs, None)
        if rec["benchmark"]["name"] == "strategies" and rec["status"] != "ok" and _rank0(rec)
    ]
    if not recs and not not_run:
        s.add(
            "No strategies records in these runs (dlsuite run --level distributed --benchmark "
            "strategies): no strategy comparison."
        )
        return s
    s.add(
        "Each strategy mapped to the framework's own mechanism (column 'mechanism'; "
        "docs/reference/strategies.md). Throughput is the global batch over the median step time; bytes "
        "per step are what one rank sends, computed from the strategy's definition (and, where "
        "the framework writes with write(2), the bytes its process wrote); the statistical "
        "cost is measured on scikit-learn's digits: steps and training time to the target test "
        "accuracy, the accuracy after the fixed budget, and the distance of the weights from "
        "one process trained on the same global batches. 'vs allreduce' divides by the "
        "synchronous allreduce record of the same framework, network and world size in the "
        "same run."
    )
    groups: dict[str, list[RunRecord]] = {}
    for run, rec in recs:
        groups.setdefault(_strategy_network(rec), []).append((run, rec))
    if len(groups) > MAX_PLOTS:
        s.add(_capped("networks", MAX_PLOTS, len(groups), "the tables have all"))
    for gi, (network, items) in enumerate(groups.items()):
        s.add(Heading(network))
        rows = []
        points: list[plots.ScatterPoint] = []
        frameworks = list(dict.fromkeys(rec["framework"]["name"] for _, rec in items))
        names = list(dict.fromkeys(_strategy_label(rec) for _, rec in items))
        byte_bars: dict[tuple[int, int], plots.Estimate] = {}
        scaling: dict[str, list[tuple[float, plots.Estimate]]] = {}
        unreached = 0
        for run, rec in items:
            sec = rec["strategy"]
            vs = sec.get("vs_baseline") or {}
            baseline = sec["name"] == "allreduce"
            tp, tta = metric(rec, "throughput"), metric(rec, "time_to_accuracy")
            steps, final = metric(rec, "steps_to_target"), metric(rec, "final_accuracy")
            dist, share = metric(rec, "distance_from_sync"), metric(rec, "comm_share")
            sent, ratio = metric(rec, "bytes_per_step"), metric(rec, "compression_ratio")
            written = (sec.get("bytes_per_step") or {}).get("written_by_process")
            fw = rec["framework"]["name"]
            who = plots.SEP.join([run.label, fw]) if len(runs) > 1 else fw
            rows.append([
                who, _strategy_label(rec), _one_line(sec.get("mechanism"), 90),
                str(rec["world_size"]),
                fmt_value(tp) if tp else "-",
                "1 (baseline)" if baseline else _ratio_text(vs.get("throughput_ratio")),
                fmt_bytes(sent["value"]) if sent else "-",
                fmt_bytes(written) if isinstance(written, int | float) else "-",
                f"{ratio['value']:.3g}x" if ratio else "-",
                f"{share['value']:.0f}%" if share else "-",
                f"{steps['value']:.0f}" if steps else "not reached",
                fmt_seconds(tta["value"]) if tta else "-",
                "1 (baseline)" if baseline else _ratio_text(vs.get("time_to_accuracy_ratio")),
                f"{final['value']:.3f}" if final else "-",
                f"{dist['value']:.2g}" if dist else "-",
                correctness_text(rec),
            ])  # fmt: skip
            y = 1.0 if baseline else vs.get("time_to_accuracy_ratio")
            if tp and isinstance(y, int | float):
                points.append(plots.ScatterPoint(_strategy_label(rec), fw, tp["value"], float(y)))
            elif tp:
                unreached += 1
            if sent:
                key = (frameworks.index(fw), names.index(_strategy_label(rec)))
                v = float(sent["value"])
                byte_bars[key] = (v, v, v)
            if tp:
                label = plots.SEP.join([run.label, fw, _strategy_label(rec)])
                scaling.setdefault(label, []).append((float(rec["world_size"]), estimate(tp)))
        if gi < MAX_PLOTS and points:
            png = plots.scatter(
                points,
                title="throughput against the accuracy cost\n" + _wrapped(network),
                xlabel="throughput (samples/s, log)",
                ylabel="time to target accuracy / allreduce's",
                hline=1.0,
            )
            s.add(Figure(figure_name(f"strategies-cost-{network}"), png, alt="throughput vs cost"))
        if unreached:
            s.add(
                f"{unreached} record(s) are not in the plot: the target accuracy was not "
                "reached, or the run holds no allreduce baseline to divide by."
            )
        if gi < MAX_PLOTS and byte_bars and any(v[0] > 0 for v in byte_bars.values()):
            png = plots.bar_chart(
                names, frameworks, byte_bars,
                title="bytes one rank sends per step\n" + _wrapped(network), ylabel="bytes per step",
            )  # fmt: skip
            s.add(Figure(figure_name(f"strategies-bytes-{network}"), png, alt="bytes per step"))
        if gi < MAX_PLOTS and len({w for pts in scaling.values() for w, _ in pts}) > 1:
            png = plots.xy_lines(
                dict(list(scaling.items())[:MAX_SERIES]),
                title="throughput against world size\n" + _wrapped(network),
                xlabel="world size (ranks, log2)",
                ylabel="throughput (samples/s)",
            )
            s.add(Figure(figure_name(f"strategies-scaling-{network}"), png, alt="scaling"))
            if len(scaling) > MAX_SERIES:
                s.add(_capped("series", MAX_SERIES, len(scaling), "the table has all"))
        s.add(
            Table(
                ["framework", "strategy", "mechanism", "ranks", "throughput", "vs allreduce",
                 "bytes/step", "written/step", "compression", "comm share", "steps to target",
                 "time to target", "vs allreduce", "final accuracy", "distance from sync",
                 "correctness"],
                rows,
            )
        )  # fmt: skip
    if not_run:
        s.add(Heading("Strategies not run"))
        s.add(
            "A strategy a framework cannot run is skipped with the reason its adapter declares "
            "(docs/reference/strategies.md); failures are in 'Skipped and failed records' too."
        )
        s.add(
            Table(
                ["framework", "strategy", "status", "reason"],
                [
                    [rec["framework"]["name"], _strategy_label(rec), rec["status"],
                     _one_line(rec.get("reason"), 300)]
                    for _, rec in not_run
                ],
            )
        )  # fmt: skip
    return s


def read_series(
    path: Path,
) -> tuple[dict[int, list[dict[str, Any]]], list[dict[str, Any]], int]:
    """A telemetry file: GPU samples by GPU index, host samples, and the unusable lines.

    Lines with ``"kind": "host"`` are host samples (``cpu_util_pct``, ``proc_cpu_pct``,
    ``rss_mb``); every other line is a GPU sample (``gpu`` index, ``util``, ``power_w``, ...).
    """
    per_gpu: dict[int, list[dict[str, Any]]] = {}
    host: list[dict[str, Any]] = []
    bad = 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except ValueError:
                bad += 1
                continue
            t = doc.get("t") if isinstance(doc, dict) else None
            if not isinstance(t, int | float) or isinstance(t, bool) or not math.isfinite(t):
                bad += 1
                continue
            if doc.get("kind") == "host":
                host.append(doc)
                continue
            gpu = doc.get("gpu", 0)
            per_gpu.setdefault(gpu if isinstance(gpu, int) else 0, []).append(doc)
    for samples in [*per_gpu.values(), host]:
        samples.sort(key=lambda d: d["t"])
    return per_gpu, host, bad


def _mean(values: list[Any]) -> str:
    xs = [v for v in values if plots.is_finite_number(v)]
    return f"{sum(xs) / len(xs):.1f}" if xs else "-"


#: NVML's energy counter advanced in steps of about this many seconds on an H100 (stop 13)
ENERGY_COUNTER_STEP_S = 0.1


def _timeline_stats(
    per_gpu: dict[int, list[dict[str, Any]]],
    host: list[dict[str, Any]],
    rec: dict[str, Any] | None,
) -> list[str]:
    samples = [d for v in per_gpu.values() for d in v] or host
    ts = [d["t"] for d in samples]
    utils = [d.get("util") for d in samples]
    curves = [plots.power_points(v) for v in per_gpu.values()]
    # the max from the counter's 0.5 s windows; NVML's lagging reading only where no counter
    counted = [w for pts, src in curves if src.startswith("energy counter") for _, w in pts]
    powers = counted or [w for pts, _ in curves for _, w in pts]
    tel = (rec or {}).get("telemetry") or {}
    gpu = tel.get("gpu") or {}
    region: Any = (tel.get("host") or {}).get("duration_s")
    # energy: the record's, from NVML's counter over the timed regions (uncertain by up to a
    # counter step at each end); else the integral of the power samples
    energy: Any = gpu.get("energy_j")
    bound = "-"
    if plots.is_finite_number(energy) and plots.is_finite_number(region) and region > 0:
        mean_power = f"{energy / region:.1f}"
        bound = f"±{100 * 2 * ENERGY_COUNTER_STEP_S / region:.0f}%"
        powers = counted  # the reading lags: under the counter's mean, its max misleads
    else:
        energy = sum(trapezoid(pts) for pts, _ in curves)
        mean_power = f"{sum(powers) / len(powers):.1f}" if powers else "-"
    return [
        str(len(per_gpu)),
        str(len(samples)),
        f"{max(ts) - min(ts):.2f}" if ts else "-",
        _mean(utils) if per_gpu else "-",
        mean_power if per_gpu else "-",
        f"{max(powers):.1f}" if powers else "-",
        f"{energy:.1f}" if per_gpu else "-",
        bound if per_gpu else "-",
        _mean([d.get("cpu_util_pct") for d in host]),
    ]


def _energy_per_item(rec: dict[str, Any] | None) -> str:
    """The record's energy metric (J/sample or J/call), from the worker's energy counter."""
    for name in ("energy_per_sample", "energy_per_call"):
        m = metric(rec, name) if rec else None
        if m is not None:
            return f"{m['value']:.4g} {m['unit']}"
    return "-"


_RANK_SUFFIX = re.compile(r"-rank(\d+)$")


def telemetry_section(runs: list[Run], figure_name: Callable[[str], str]) -> Section:
    s = Section("Utilisation and power timelines")
    files: list[tuple[Run, Path, dict[str, Any] | None, str]] = []
    for run in runs:
        if not run.telemetry_dir.is_dir():
            continue
        by_id = {r["task_id"]: r for r in run.records if _rank0(r)}
        order = {tid: i for i, tid in enumerate(by_id)}

        def task_of(p: Path) -> tuple[str, str]:
            m = _RANK_SUFFIX.search(p.stem)  # telemetry/<task_id>-rank<r>.jsonl (or <task_id>)
            return (p.stem[: m.start()], f" rank {m.group(1)}") if m else (p.stem, "")

        found = sorted(
            run.telemetry_dir.glob("*.jsonl"),
            key=lambda p: (order.get(task_of(p)[0], len(order)), p.name),
        )
        for p in found:
            rec = by_id.get(task_of(p)[0])
            several = rec is None or rec.get("world_size", 1) > 1
            files.append((run, p, rec, task_of(p)[1] if several else ""))
    if not files:
        s.add(
            "No telemetry timelines: no run directory holds telemetry/<task_id>-rank<r>.jsonl "
            "(the worker writes them for runs since telemetry was added)."
        )
        return s
    series = [(run, path, rec, rank, *read_series(path)) for run, path, rec, rank in files]
    with_gpu = [x for x in series if x[4]]
    s.add(
        "Samples taken during each task's timed region (`--telemetry-interval`, default 100 "
        "ms): GPU utilisation and power, one line per GPU, where the task ran on GPUs; host CPU "
        "utilisation (the whole machine and the worker process) otherwise. Power over time is "
        "the slope of NVML's energy counter over 0.5 s windows where a region is that long, "
        "else NVML's power reading, which on Hopper is a 1 s trailing average that lags a "
        "task's start. Utilisation is the polled reading, each the driver's latest sample "
        "(which may begin before the region); the records' summaries use the driver's own "
        "samples inside the region where NVML gives them. Energy (J) and mean power are the "
        "record's, from NVML's energy counter over the timed regions; the counter advanced in "
        f"steps of about {ENERGY_COUNTER_STEP_S * 1000:.0f} ms on an H100, so the energy of a "
        "region is uncertain by up to a step at each end (the step bound column; GPU regions "
        "last at least 2 s since stop 13). Energy per sample or call is the record's metric."
    )
    # Plots: GPU timelines first; host-only tasks are plotted when no GPU series exists.
    plotted = with_gpu if with_gpu else series
    if len(plotted) > MAX_TIMELINES:
        s.add(_capped("timelines", MAX_TIMELINES, len(plotted), "the table summarises all") +
              " The longest timelines (most samples) are the ones plotted.")  # fmt: skip

        def n_samples(x: Any) -> int:
            return sum(len(v) for v in x[4].values()) or len(x[5])

        longest = sorted(plotted, key=n_samples, reverse=True)[:MAX_TIMELINES]
        chosen = {id(x) for x in longest}
    else:
        chosen = {id(x) for x in plotted}
    rows = []
    bad_total = 0
    for item in series:
        run, path, rec, rank, per_gpu, host, bad = item
        bad_total += bad
        what = (
            f"{rec['benchmark']['name']} {params_label(rec)} {rec['dtype']} "
            f"{rec['framework']['name']}{rank}"
            if rec
            else path.stem
        )
        rows.append([run.label, what, *_timeline_stats(per_gpu, host, rec), _energy_per_item(rec)])
        if id(item) not in chosen or not (per_gpu or host):
            continue
        if per_gpu:
            png = plots.timeline(per_gpu, title=f"{run.label}: {what}")
        else:
            png = plots.host_timeline(host, title=f"{run.label}: {what} (host)")
        s.add(Figure(figure_name(f"telemetry-{path.stem}"), png, alt=f"telemetry of {what}"))
    if bad_total:
        s.add(f"{bad_total} unusable telemetry line(s) (not JSON or no numeric 't') were skipped.")
    s.add(
        Table(
            [
                "run",
                "task",
                "GPUs",
                "samples",
                "duration (s)",
                "mean util (%)",
                "mean power (W)",
                "max power (W)",
                "energy (J)",
                "energy step bound",
                "mean host CPU (%)",
                "energy per sample",
            ],
            rows,
        )
    )
    return s


def agreement_section(runs: list[Run], figure_name: Callable[[str], str]) -> Section:
    """The agreement matrices: per network, every framework pair (and each framework against
    onnxruntime): max relative error of the logits and of the first training update."""
    s = Section("Cross-framework agreement")
    # a failed matrix (an error that is not finite, written as null) is shown with its FAILs
    found = [
        (run, rec)
        for run, rec in _records(runs, status=None)
        if rec["benchmark"]["name"] == "agreement_matrix" and "agreement" in (rec.get("work") or {})
    ]
    if not found:
        s.add(
            "No agreement matrix: run `dlsuite run --level network --benchmark agreement` with "
            "two or more frameworks (e.g. `--framework pytorch,tensorflow,numpy`)."
        )
        return s
    s.add(
        "The same ONNX weights and batch in every framework (dropout removed). Each cell: max "
        "relative error of the logits / of the first SGD update; onnxruntime has logits only. "
        "A cell is marked FAIL when an error is over its tolerance "
        "(see suite/levels/network/agreement.py)."
    )
    panels = []
    for run, rec in found:
        m = rec["work"]["agreement"]
        names = m["frameworks"]
        tol = m["tolerance"]
        label = f"{run.label}: {params_label(rec)}"
        grid = [[float("nan")] * len(names) for _ in names]
        rows = []
        for i, a in enumerate(names):
            row = [a]
            for j, b in enumerate(names):
                pair = m["pairs"].get(f"{a}|{b}") or m["pairs"].get(f"{b}|{a}")
                if i == j or pair is None:
                    row.append("")
                    continue
                errs = {k: float("inf") if v is None else v for k, v in pair.items()}
                worst = max(errs[k] / tol[k] for k in ("logits", "update") if k in errs)
                grid[i][j] = worst
                cell = f"{errs['logits']:.1e}" + (
                    f" / {errs['update']:.1e}" if "update" in errs else ""
                )
                row.append(cell + ("" if worst <= 1 else " FAIL"))
            rows.append(row)
        missing = m.get("missing") or []
        caption = f"tolerances: logits {tol['logits']:.0e}, update {tol['update']:.0e}" + (
            f"; no result from {', '.join(missing)} (see its record)" if missing else ""
        )
        s.add(Heading(label), Table(["", *names], rows, caption))
        panels.append((params_label(rec), names, grid))
    if panels:
        s.add(
            Figure(
                figure_name("agreement"),
                plots.heatmaps(panels[:MAX_PLOTS], "error / tolerance (log scale; < 1 passes)"),
                "agreement matrices: worst error over tolerance per framework pair",
            )
        )
    return s


def _failed_with_detail(check: dict[str, Any]) -> str:
    """``FAIL`` and, where the check explains itself (``detail``), what it says: e.g. the first
    training step whose loss was not finite."""
    detail = check.get("detail") or {}
    said = ", ".join(f"{k} {v}" for k, v in detail.items() if v is not None)
    return f"FAIL ({said})" if said else "FAIL"


def correctness_section(runs: list[Run]) -> Section:
    s = Section("Correctness checks")
    rows = []
    n_rec = n_fail = 0
    for run, rec in _records(runs, None):
        corr = rec.get("correctness")
        if not corr:
            continue
        n_rec += 1
        for c in corr["checks"]:
            n_fail += not c["passed"]
            rows.append(
                [
                    run.label,
                    *_record_cells(rec),
                    c["name"],
                    "NaN/Inf" if c["error"] is None else f"{c['error']:.3e}",
                    f"{c['tolerance']:.1e}",
                    "pass" if c["passed"] else _failed_with_detail(c),
                ]
            )
    if not rows:
        s.add("No record carries correctness checks.")
        return s
    s.add(f"{len(rows)} checks in {n_rec} records: {n_fail} failed.")
    s.add(
        Table(
            [
                "run",
                *RECORD_COLUMNS,
                "check",
                "error",
                "tolerance",
                "result",
            ],
            rows,
        )
    )
    return s


def failures_section(runs: list[Run]) -> Section:
    s = Section("Skipped and failed records")
    rows = []
    for run, rec in _records(runs, None):
        if rec["status"] == "ok":
            continue
        err = rec.get("error") or {}
        rows.append(
            [
                run.label,
                *_record_cells(rec),
                rec["status"],
                _one_line(rec.get("reason")) or "-",
                f"{err.get('type', '')}: {_one_line(err.get('message'))}" if err else "-",
                str(err.get("log", "-")) if err else "-",
            ]
        )
    if not rows:
        s.add("Every record is ok: nothing was skipped or failed.")
        return s
    s.add(
        Table(
            [
                "run",
                *RECORD_COLUMNS,
                "status",
                "reason",
                "error",
                "log",
            ],
            rows,
        )
    )
    return s


def _distinct(values: Iterator[Any]) -> str:
    seen: list[str] = []
    for v in values:
        text = "-" if v is None or v == "" else str(v)
        if text not in seen:
            seen.append(text)
    known = [v for v in seen if v != "-"]
    return "; ".join(known) if known else "-"


def _versions(rec: dict[str, Any]) -> Iterator[str]:
    fw = rec["framework"]
    yield f"{fw['name']} {fw.get('version') or '?'} (adapter {fw.get('adapter_version', '?')})"


def _framework_cell(records: list[dict[str, Any]]) -> str:
    """The frameworks and versions a run's records carry. A record that never reached its
    framework (a timeout, a refused or skipped task) has no version: it adds nothing where
    another record of the same framework has one, and says why where none has."""
    known: dict[str, list[str]] = {}
    for rec in records:
        fw = rec["framework"]
        known.setdefault(fw["name"], [])
        if fw.get("version"):
            text = next(_versions(rec))
            if text not in known[fw["name"]]:
                known[fw["name"]].append(text)
    parts = [
        "; ".join(texts) if texts else f"{name} (version not recorded: no record of it ran)"
        for name, texts in known.items()
    ]
    return "; ".join(parts) if parts else "-"


_SCHEDULER_ROWS = ("scheduler", "Slurm jobs", "Slurm nodes")


def _scheduler(rec: dict[str, Any]) -> Iterator[str | None]:
    """Where a record ran: ``slurm`` with its cluster and partition (records of a job carry
    them, from SLURM_*), else nothing."""
    sched = rec.get("scheduler") or {}
    if not sched.get("kind"):
        yield None
        return
    where = ", ".join(
        f"{k} {sched[k]}" for k in ("cluster", "partition") if sched.get(k) is not None
    )
    yield f"{sched['kind']} ({where})" if where else str(sched["kind"])


def environment_section(runs: list[Run]) -> Section:
    s = Section("Environment and provenance")
    fields: list[tuple[str, Callable[[dict[str, Any]], Iterator[Any]]]] = [
        ("host", lambda r: iter([r["host"]])),
        (
            "device",
            lambda r: iter(
                [
                    f"{r['device']['kind']} {r['device']['name']} ×{r['device']['count']}"
                    if r.get("device")
                    else None
                ]
            ),
        ),
        ("driver", lambda r: iter([(r.get("device") or {}).get("driver")])),
        ("peak_source", lambda r: iter([(r.get("device") or {}).get("peak_source")])),
        ("framework", _versions),
        (
            "framework versions",
            lambda r: iter(
                [
                    " ".join(
                        f"{k}={v}"
                        for k, v in sorted((r["provenance"].get("versions") or {}).items())
                        if v is not None
                    )
                    or None
                ]
            ),
        ),
        (
            "backend",
            lambda r: iter(
                [
                    f"{r['backend']['kind']}"
                    + (f" {r['backend']['image']}" if r["backend"].get("image") else "")
                ]
            ),
        ),
        ("world size", lambda r: iter([r["world_size"]])),
        ("scheduler", _scheduler),
        ("Slurm jobs", lambda r: iter([(r.get("scheduler") or {}).get("array_job_id")])),
        ("Slurm nodes", lambda r: iter([(r.get("scheduler") or {}).get("nodelist")])),
        ("suite version", lambda r: iter([r["provenance"]["suite_version"]])),
        (
            "git commit",
            lambda r: iter(
                [
                    # a record without a commit (written by the host for a task that never
                    # ran) says nothing of the checkout: '-' unless every record is so
                    (
                        r["provenance"]["git_commit"]
                        + (" (dirty)" if r["provenance"].get("git_dirty") else "")
                    )
                    if r["provenance"].get("git_commit")
                    else None
                ]
            ),
        ),
        ("python", lambda r: iter([r["provenance"]["python"]])),
        ("numpy", lambda r: iter([r["provenance"].get("numpy")])),
        ("platform", lambda r: iter([r["provenance"].get("platform")])),
    ]
    rows = []
    for title, get in fields:
        if get is _versions:
            row = [title, *(_framework_cell(run.records) for run in runs)]
        else:
            row = [title, *(_distinct(v for r in run.records for v in get(r)) for run in runs)]
        if title in _SCHEDULER_ROWS and set(row[1:]) == {"-"}:
            continue  # runs on this machine: no scheduler to show
        rows.append(row)
    rows.append(
        [
            "command",
            *(
                "dlsuite " + shlex.join((run.manifest or {})["argv"])
                if (run.manifest or {}).get("argv")
                else "-"
                for run in runs
            ),
        ]
    )
    s.add(
        "Distinct values over each run's records (a record that failed before the device was "
        "known shows '-' for the device)."
    )
    s.add(Table(["", *(run.label for run in runs)], rows))
    return s
