"""``dlsuite compare BASE NEW [--tolerance 5%]``: what got slower, faster or wrong between runs.

Records are matched by *task identity* — benchmark level, name and parameters, framework,
dtype, device kind and name, world size and rank — not by ``task_id``, which hashes the
*requested* device (``auto`` and ``cpu`` give different ids for the same measurement). A record
whose device is unknown (it failed before the device was set up) matches on the rest; one of a
task that did not finish matches each record its task covers (a collective's sweep: each
size). ``--across device,framework`` leaves those fields out, to compare two machines or two
frameworks; where one field alone keeps records apart, the output says which.

For every metric both records carry, in the metric's direction (``higher_is_better``):

* **regressed** — NEW is worse than BASE by more than the tolerance (for positive figures a
  factor either way: 5% is NEW/BASE above 1.05 or below 1/1.05, so a time and the rate made
  from it agree) *and* the 95% confidence intervals of the two medians do not overlap
  (metrics without a CI: the tolerance alone);
* **improved** — the same, the other way;
* **unchanged** — otherwise;
* **busy** — either record was measured on a machine the quiet-machine check found busy
  (``telemetry.quiet``): other load may have made a difference or hidden one, so it is not
  judged and does not fail the comparison (``--include-busy`` judges it).

``percent_of_peak`` is recorded without a CI but is ``100 * flop_rate / peak``: it is given
flop_rate's CI, mapped, so its verdict agrees with flop_rate's (DERIVED_FROM). A % of peak is
compared only where both records divided by the same peak (``work.peak_tflops``,
``work.peak_bandwidth_gbps``): between a peak of 0.208 and one of 0.523 TFLOP/s (the suite
measured the CPU's clock from 2026-12) every record's % of peak fell 60% with its time
unchanged, and compare called 24 records regressed. Such a pair is listed ("not compared (a
share of another peak)", with both peaks and their sources), not judged; its time and rate are.

Exit code 1 on any regression, on any correctness check that passed in BASE and fails in NEW,
and on any record ok in BASE but failed/timeout/oom in NEW; 0 otherwise; bad input raises
ConfigError (exit code 2 in the CLI).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from suite.errors import ConfigError
from suite.report.load import (
    Run,
    base_identity,
    device_identity,
    distinct_runs,
    load_run,
    one_record_a_task,
)
from suite.summary import (
    busy_findings,
    ci_text,
    figure_cells,
    figure_table,
    fmt_seconds,
    params_label,
)

BAD_STATUSES = ("failed", "timeout", "oom")
# Metrics recorded without a CI that are a fixed linear map of a sampled metric of the same
# record (percent_of_peak = 100 * flop_rate / peak): their CI is the source's CI mapped.
DERIVED_FROM = {"percent_of_peak": "flop_rate"}
#: metrics that are a share of a peak, and the ``work`` field holding the peak they divide by
PEAK_OF = {"percent_of_peak": "peak_tflops", "percent_of_peak_bandwidth": "peak_bandwidth_gbps"}
VERDICTS = ("regressed", "improved", "unchanged", "busy")


def parse_tolerance(text: str | float) -> float:
    """``"5%"`` → 0.05, ``"0.05"`` → 0.05. A bare number must be a fraction below 1."""
    raw = str(text).strip()
    try:
        if raw.endswith("%"):
            value = float(raw[:-1]) / 100
        else:
            value = float(raw)
            if value >= 1:
                raise ConfigError(
                    f"--tolerance {raw}: a bare number is a fraction (0.05 = 5%); "
                    f"write {raw}% for {raw} percent"
                )
    except ValueError:
        raise ConfigError(
            f"--tolerance {raw!r}: not a number; write a percentage (5%) or a fraction (0.05)"
        ) from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"--tolerance {raw}: must be a non-negative percentage such as 5%")
    return value


# -- identity and matching ---------------------------------------------------------------------


#: identity fields ``--across`` may leave out of the matching: another machine's run (device),
#: another framework's (framework)
ACROSS = ("device", "framework")
_FIELDS = ("level", "benchmark", "params", "framework", "dtype", "world size", "rank")


def _key(rec: dict[str, Any], across: Collection[str] = ()) -> tuple[Any, ...]:
    """:func:`base_identity` without the fields in ``across``."""
    return tuple(
        None if name in across else part
        for name, part in zip(_FIELDS, base_identity(rec), strict=True)
    )


def _same_device(a: dict[str, Any], b: dict[str, Any], across: Collection[str] = ()) -> bool:
    """Devices that pair: the same, either unknown, or any two ``--across device``."""
    da, db = device_identity(a), device_identity(b)
    return "device" in across or da is None or db is None or da == db


def match_records(
    base: list[dict[str, Any]], new: list[dict[str, Any]], across: Collection[str] = ()
) -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Pairs (base, new) of the same task, then the records only in BASE and only in NEW.

    Same device first; a record with an unknown device pairs with any device. Repeated
    identities pair in order (the first BASE record with the first NEW one). ``across``
    (of :data:`ACROSS`): identity fields left out, so that the runs of two machines or two
    frameworks pair.
    """
    pool: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for rec in base:
        pool.setdefault(_key(rec, across), []).append(rec)
    pairs: list[tuple[dict[str, Any], dict[str, Any]]] = []
    only_new: list[dict[str, Any]] = []
    for rec in new:
        cands = pool.get(_key(rec, across), [])
        dev, fw = device_identity(rec), rec["framework"]["name"]
        # the same framework and device first (also --across one: a run of both frameworks
        # pairs PyTorch with PyTorch), then any the identity lets pair, in BASE's order
        pick = min(
            (c for c in cands if _same_device(rec, c, across)),
            key=lambda c: (c["framework"]["name"] != fw, device_identity(c) != dev),
            default=None,
        )
        if pick is None:
            only_new.append(rec)
            continue
        cands.remove(pick)
        pairs.append((pick, rec))
    matched = {id(b) for b, _ in pairs}
    only_base = [r for r in base if id(r) not in matched]
    # A task that did not finish wrote one record with the task's parameters where a finished
    # one writes a record per point (a collective's sweep: one per message size). Paired with
    # each point it covers, a sweep that failed in NEW is a failed record of every size, not
    # one record "only in NEW" beside five "only in BASE" and "no regression".
    for unfinished, others, flip in ((only_new, only_base, False), (only_base, only_new, True)):
        for rec in [r for r in unfinished if r["status"] != "ok"]:
            covered = [o for o in others if _covers(rec, o, across)]
            if not covered:
                continue
            unfinished.remove(rec)
            for o in covered:
                others.remove(o)
                pairs.append((rec, o) if flip else (o, rec))
    return pairs, only_base, only_new


def _covers(
    task_rec: dict[str, Any], point_rec: dict[str, Any], across: Collection[str] = ()
) -> bool:
    """Whether ``point_rec`` is one of the records the task of ``task_rec`` (a record with the
    task's own parameters) writes when it finishes: the same identity but the parameters, a
    compatible device, and the benchmark's word (:meth:`suite.benchmark.Benchmark.covers`)."""
    from suite.levels import task_covers

    t, p = _key(task_rec, across), _key(point_rec, across)
    if t[:2] != p[:2] or t[3:] != p[3:] or not _same_device(task_rec, point_rec, across):
        return False
    return task_covers(task_rec["benchmark"], point_rec["benchmark"]["params"])


# -- verdicts ----------------------------------------------------------------------------------


@dataclass
class MetricDiff:
    base_rec: dict[str, Any]
    new_rec: dict[str, Any]
    name: str
    unit: str
    higher_is_better: bool
    base: dict[str, Any]
    new: dict[str, Any]
    change: float  # (new - base) / |base|; ±inf when base is 0
    verdict: str
    used_ci: bool
    ci_derived: bool = False  # CI mapped from the metric it derives from (DERIVED_FROM)


@dataclass
class CheckFlip:
    base_rec: dict[str, Any]
    new_rec: dict[str, Any]
    name: str
    base_check: dict[str, Any] | None
    new_check: dict[str, Any] | None


class Outcome:
    """What ``dlsuite compare`` and ``dlsuite history check`` decide the same way: how many
    figures got each verdict, and whether the CLI exits 1 (a regressed figure, a check that
    newly fails, a record no longer ok)."""

    newly_failing_checks: Sequence[Any]
    status_regressions: Sequence[Any]

    def verdicts(self) -> Iterator[str]:
        """Every compared figure's verdict: regressed, improved, unchanged or busy."""
        raise NotImplementedError

    def count(self, verdict: str) -> int:
        return sum(v == verdict for v in self.verdicts())

    @property
    def failed(self) -> bool:
        """True when the CLI must exit 1."""
        return bool(self.count("regressed") or self.newly_failing_checks or self.status_regressions)

    def verdict_markup(self) -> str:
        """The last line's verdict: REGRESSION, no regression, or, where no figure was judged
        (every one busy, nothing paired, a history's first run), that none was found and none
        was ruled out."""
        if self.failed:
            return "[red bold]REGRESSION[/]"
        if any(self.count(v) for v in ("regressed", "improved", "unchanged")):
            return "[green]no regression[/]"
        return "[yellow]nothing judged: no regression found, none ruled out[/]"


@dataclass
class Comparison(Outcome):
    tolerance: float
    metrics: list[MetricDiff] = field(default_factory=list)
    newly_failing_checks: list[CheckFlip] = field(default_factory=list)
    fixed_checks: list[CheckFlip] = field(default_factory=list)
    status_regressions: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    status_changes: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    only_base: list[dict[str, Any]] = field(default_factory=list)
    only_new: list[dict[str, Any]] = field(default_factory=list)
    pairs: int = 0
    unit_mismatches: list[str] = field(default_factory=list)
    #: metrics and correctness checks a BASE record carries and its NEW record does not
    #: (compared by nothing, so named: a failing check removed by hand passed unsaid)
    dropped: list[str] = field(default_factory=list)
    across: tuple[str, ...] = ()
    #: shares of a peak not compared because the two records' peaks differ (PEAK_OF): how
    #: many records each reason (:func:`peak_change`) concerns
    peak_counts: dict[str, int] = field(default_factory=dict)
    #: the two records' peak sources where they differ (:func:`peak_sources`), each once
    peak_sources: dict[str, None] = field(default_factory=dict)

    @property
    def peak_changes(self) -> list[str]:
        return peak_lines(self.peak_counts, self.peak_sources)

    def verdicts(self) -> Iterator[str]:
        return (d.verdict for d in self.metrics)


def _value(m: dict[str, Any]) -> float:
    return float(m.get("median", m["value"]))


def metric_verdict(
    base: dict[str, Any], new: dict[str, Any], tolerance: float, higher_is_better: bool
) -> tuple[str, float, bool]:
    """(verdict, relative change, whether CIs were used) for one metric of two records."""
    b, n = _value(base), _value(new)
    if b == n:
        return "unchanged", 0.0, "ci95" in base and "ci95" in new
    change = (n - b) / abs(b) if b else math.copysign(math.inf, n - b)
    gain = change if higher_is_better else -change  # > 0: NEW is better
    used_ci = "ci95" in base and "ci95" in new
    # positive figures: the tolerance is a factor either way (5%: NEW's time over 1.05x
    # BASE's, or its rate under BASE's / 1.05), so a time and the rate computed from it get
    # one verdict (a time 5.2% longer regressed while its rate, 4.9% lower, was unchanged)
    beyond = max(n / b, b / n) - 1 if b > 0 and n > 0 else abs(gain)
    if beyond <= tolerance:
        return "unchanged", change, used_ci
    if used_ci:
        (b_lo, b_hi), (n_lo, n_hi) = sorted(base["ci95"]), sorted(new["ci95"])
        if n_lo <= b_hi and b_lo <= n_hi:  # intervals overlap: not a resolved difference
            return "unchanged", change, used_ci
    return ("improved" if gain > 0 else "regressed"), change, used_ci


def judged(verdict: str, *records: dict[str, Any], include_busy: bool = False) -> str:
    """``verdict``, or "busy" where one of the records was measured while the quiet check
    found other load (whatever the verdict: that load may make a change or hide one)."""
    if not include_busy and any(busy_findings(r) for r in records):
        return "busy"
    return verdict


def with_derived_ci(rec: dict[str, Any], m: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """``m`` with a CI mapped from the metric it is derived from (DERIVED_FROM), when it has
    none of its own; the flag says whether one was added."""
    src_name = DERIVED_FROM.get(m["name"])
    if "ci95" in m or src_name is None:
        return m, False
    src = next((x for x in rec.get("metrics") or [] if x["name"] == src_name), None)
    if src is None or "ci95" not in src or not _value(src):
        return m, False
    ratio = float(m["value"]) / _value(src)
    return {**m, "ci95": sorted(x * ratio for x in src["ci95"])}, True


def _peak_text(value: Any, unit: str) -> str:
    return "not recorded" if value is None else f"{float(value):.4g} {unit}"


def peak_change(b: dict[str, Any], n: dict[str, Any], metric: str) -> str | None:
    """Why ``metric`` of the pair is not compared, where it is a share of a peak (PEAK_OF) and
    the two records divided by different peaks (beyond 0.1%: a settling measurement's last
    digits) or one peak is not recorded: "percent_of_peak, fp32: the peak changed from 0.2083
    TFLOP/s to 0.5228 TFLOP/s" (:func:`peak_sources` says why). None where it is compared."""
    key = PEAK_OF.get(metric)
    if key is None:
        return None
    pb, pn = ((r.get("work") or {}).get(key) for r in (b, n))
    if pb is not None and pn is not None and math.isclose(float(pb), float(pn), rel_tol=1e-3):
        return None
    if pb is None and pn is None:
        return None
    unit = "TFLOP/s" if key == "peak_tflops" else "GB/s"
    if pb is None or pn is None:  # a record the history store kept before it kept peaks
        return (
            f"{metric}, {n['dtype']}: a peak not recorded (BASE {_peak_text(pb, unit)}, NEW "
            f"{_peak_text(pn, unit)}: a run the history store kept before it kept peaks, its "
            "directory gone), so not known to be the same"
        )
    return (
        f"{metric}, {n['dtype']}: the peak changed from {_peak_text(pb, unit)} to "
        f"{_peak_text(pn, unit)}"
    )


def peak_lines(counts: dict[str, int], sources: dict[str, None]) -> list[str]:
    """The lines that name the shares of a peak not compared: each reason with how many
    records it concerns, then each pair of peak sources once."""
    return [
        f"{what} ({count} record{'s' if count != 1 else ''})" for what, count in counts.items()
    ] + list(sources)


def peak_sources(b: dict[str, Any], n: dict[str, Any]) -> str | None:
    """The two records' ``device.peak_source`` where they differ: why the peak changed."""
    src_b, src_n = ((r.get("device") or {}).get("peak_source") for r in (b, n))
    return None if src_b == src_n else f"BASE's peak: {src_b}; NEW's: {src_n}"


def compare_runs(
    base: Run,
    new: Run,
    tolerance: float,
    include_busy: bool = False,
    across: Collection[str] = (),
) -> Comparison:
    """Every matched record's metrics, correctness checks and status, BASE against NEW; a
    comparison where either record was measured busy is "busy", unless ``include_busy``;
    ``across``: identity fields left out of the matching (:func:`match_records`)."""
    out = Comparison(tolerance=tolerance, across=tuple(across))
    pairs, out.only_base, out.only_new = match_records(base.records, new.records, across)
    out.pairs = len(pairs)
    for b, n in pairs:
        if b["status"] != n["status"]:
            if b["status"] == "ok" and n["status"] in BAD_STATUSES:
                out.status_regressions.append((b, n))
            else:
                out.status_changes.append((b, n))
        if b["status"] != "ok" or n["status"] != "ok":
            continue
        new_metrics = {m["name"]: m for m in n.get("metrics") or []}
        gone = [
            f"metric {m['name']}" for m in b.get("metrics") or [] if m["name"] not in new_metrics
        ]
        new_names = {c["name"] for c in n["correctness"]["checks"]}
        gone += [
            f"check {c['name']}" for c in b["correctness"]["checks"] if c["name"] not in new_names
        ]
        if gone:
            out.dropped.append(f"{_what(b)} {b['framework']['name']}: {', '.join(gone)}")
        for bm in b.get("metrics") or []:
            nm = new_metrics.get(bm["name"])
            if nm is None:
                continue
            if nm["unit"] != bm["unit"]:
                out.unit_mismatches.append(
                    f"{_what(b)}: {bm['name']} in {bm['unit']} (BASE) vs {nm['unit']} (NEW)"
                )
                continue
            if (changed := peak_change(b, n, bm["name"])) is not None:
                out.peak_counts[changed] = out.peak_counts.get(changed, 0) + 1
                if (why := peak_sources(b, n)) is not None:
                    out.peak_sources.setdefault(why)
                continue
            (bm2, derived_b), (nm2, derived_n) = with_derived_ci(b, bm), with_derived_ci(n, nm)
            verdict, change, used_ci = metric_verdict(bm2, nm2, tolerance, bm["higher_is_better"])
            verdict = judged(verdict, b, n, include_busy=include_busy)
            out.metrics.append(
                MetricDiff(
                    base_rec=b,
                    new_rec=n,
                    name=bm["name"],
                    unit=bm["unit"],
                    higher_is_better=bm["higher_is_better"],
                    base=bm2,
                    new=nm2,
                    change=change,
                    verdict=verdict,
                    used_ci=used_ci,
                    ci_derived=derived_b or derived_n,
                )
            )
        base_checks = {c["name"]: c for c in b["correctness"]["checks"]}
        new_checks = {c["name"]: c for c in n["correctness"]["checks"]}
        for name in dict.fromkeys([*base_checks, *new_checks]):
            bc, nc = base_checks.get(name), new_checks.get(name)
            if bc is not None and nc is not None:
                if bc["passed"] and not nc["passed"]:
                    out.newly_failing_checks.append(CheckFlip(b, n, name, bc, nc))
                elif not bc["passed"] and nc["passed"]:
                    out.fixed_checks.append(CheckFlip(b, n, name, bc, nc))
            elif nc is not None and not nc["passed"]:  # a new check that fails
                out.newly_failing_checks.append(CheckFlip(b, n, name, None, nc))
    return out


# -- printing ----------------------------------------------------------------------------------


def _what(rec: dict[str, Any]) -> str:
    return f"{rec['benchmark']['name']} {params_label(rec)} {rec['dtype']}"


def _fmt(m: dict[str, Any]) -> str:
    v = _value(m)
    text = fmt_seconds(v) if m["unit"] == "s" else f"{v:.4g} {m['unit']}"
    if "ci95" in m and v:
        lo, hi = m["ci95"]
        text += f" {ci_text(v, lo, hi)}"
    return text


def _fmt_check(c: dict[str, Any] | None) -> str:
    if c is None:
        return "absent"
    err = "NaN/Inf" if c["error"] is None else f"{c['error']:.2e}"
    return f"{'pass' if c['passed'] else 'FAIL'} {err} (tol {c['tolerance']:.0e})"


#: how each verdict is shown (compare's table, the history's check and trends)
#: a trend's step between records whose share of a peak divides by different peaks: not judged
ANOTHER_PEAK = "another peak"
VERDICT_STYLE = {"regressed": "red bold", "improved": "green", "unchanged": "dim", "busy": "yellow",
                 ANOTHER_PEAK: "yellow"}  # fmt: skip


def step_verdict(
    prev_rec: dict[str, Any],
    prev: dict[str, Any],
    rec: dict[str, Any],
    metric: dict[str, Any],
    tolerance: float,
    higher_is_better: bool,
) -> tuple[str, float]:
    """(verdict, relative change) of one figure from ``prev_rec`` to ``rec``, as compare
    judges it: busy where either was measured busy, :data:`ANOTHER_PEAK` where it is a share of
    a peak and the two peaks differ (the change is shown, not judged)."""
    verdict, change, _ = metric_verdict(prev, metric, tolerance, higher_is_better)
    if peak_change(prev_rec, rec, str(metric.get("name"))) is not None:
        return ANOTHER_PEAK, change
    return judged(verdict, prev_rec, rec), change


def not_judged(busy: int) -> str:
    """The summary line's clause for the figures left unjudged (``busy``); "" when none."""
    if not busy:
        return ""
    return (
        f", [yellow]{busy} not judged[/] (measured while the machine was busy: rerun on a "
        "quiet machine, or --include-busy)"
    )


def print_comparison(cmp: Comparison, base: Run, new: Run, console: Console) -> None:
    t = figure_table(
        f"dlsuite compare {base.results} → {new.results} (tolerance {cmp.tolerance:.1%}"
        + "".join(f", across {name}" for name in cmp.across)
        + ")",
        ("BASE", "NEW", "change"),
    )
    for d in cmp.metrics:
        arrow = "↑" if d.higher_is_better else "↓"
        t.add_row(
            *_named(d.base_rec, d.new_rec),
            f"{d.name} {arrow}"
            + (
                f" (CI from {DERIVED_FROM[d.name]})"
                if d.ci_derived and d.used_ci
                else ""
                if d.used_ci
                else " (no CI)"
            ),
            _fmt(d.base),
            _fmt(d.new),
            f"{d.change:+.1%}" if math.isfinite(d.change) else "n/a",
            f"[{VERDICT_STYLE[d.verdict]}]{d.verdict}[/]",
        )
    console.print(t)
    if cmp.newly_failing_checks:
        ct = Table(
            title="correctness checks that passed in BASE and fail in NEW", header_style="bold"
        )
        for col in ("record", "check", "BASE", "NEW"):
            ct.add_column(col, overflow="fold")
        for f in cmp.newly_failing_checks:
            ct.add_row(
                Text(_what(f.new_rec)), Text(f.name),
                Text(_fmt_check(f.base_check)), Text(_fmt_check(f.new_check)),
            )  # fmt: skip
        console.print(ct)
    for b, n in cmp.status_regressions:
        err = (n.get("error") or {}).get("type", "")
        why = (n.get("reason") or "").strip().splitlines()[:1]
        console.print(
            f"[red bold]status regression[/]: {escape(_what(b))} {b['framework']['name']}: "
            f"ok in BASE, {n['status']} in NEW ({escape(err)}{': ' + escape(why[0]) if why else ''})"
        )
    for b, n in cmp.status_changes:
        point = b if b["status"] == "ok" else n  # a sweep that did not finish: name the size
        console.print(
            f"[yellow]status change[/]: {escape(_what(point))}: {b['status']} → {n['status']}"
        )
    for f in cmp.fixed_checks:
        console.print(f"[green]check fixed[/]: {escape(_what(f.new_rec))}: {f.name} now passes")
    for note in cmp.unit_mismatches:
        console.print(f"[yellow]not compared (units differ)[/]: {escape(note)}")
    for note in cmp.peak_changes:
        console.print(f"[yellow]not compared (a share of another peak)[/]: {escape(note)}")
    for note in cmp.dropped:
        console.print(f"[yellow]not in NEW, not compared[/]: {escape(note)}")
    for label, recs in (("only in BASE", cmp.only_base), ("only in NEW", cmp.only_new)):
        if recs:
            shown = escape(", ".join(f"{_what(r)} {r['framework']['name']}" for r in recs[:10]))
            more = f" and {len(recs) - 10} more" if len(recs) > 10 else ""
            console.print(f"[yellow]{len(recs)} record(s) {label}[/]: {shown}{more}")
    for note in apart(cmp.only_base, cmp.only_new, cmp.across):
        console.print(f"[yellow]not paired[/]: {escape(note)}")
    for run in (base, new):
        if run.unrecorded:  # a stopped or running run: what is "only in" the other may be this
            console.print(
                f"[yellow]{run.label} is incomplete[/] ({escape(run.state)}): "
                f"{len(run.unrecorded)} of its {len(run.planned)} planned tasks have no record, "
                "so they were not compared (`dlsuite report` lists them)"
            )
    if cmp.pairs == 0:
        same = ", ".join(
            f
            for f in ("benchmark", "params", "framework", "dtype", "device", "world size")
            if f not in cmp.across
        )
        console.print(
            f"[red bold]no record of NEW matches one of BASE (same {same}): nothing was "
            "compared[/] (exit code 2: a gate that compared nothing has not passed; runs of "
            "another machine or framework pair with --across device or --across framework)"
        )
    verdict = cmp.verdict_markup()
    console.print(
        f"{cmp.pairs} matched records, {len(cmp.metrics)} metrics: "
        f"[red]{cmp.count('regressed')} regressed[/]{_in_records(cmp, 'regressed')}, "
        f"[green]{cmp.count('improved')} improved[/]{_in_records(cmp, 'improved')}, "
        f"{cmp.count('unchanged')} unchanged{not_judged(cmp.count('busy'))}"
        f"; {len(cmp.newly_failing_checks)} correctness "
        f"check(s) newly failing, {len(cmp.status_regressions)} record(s) newly failed. "
        f"{verdict}"
    )


def _named(b: dict[str, Any], n: dict[str, Any]) -> list[Text]:
    """The cells naming a pair's figure; a framework or device that differs (``--across``)
    reads "BASE → NEW"."""
    cells = figure_cells(b, n.get("device") or {})
    if b["framework"]["name"] != n["framework"]["name"]:
        cells[3] = Text(f"{b['framework']['name']} → {n['framework']['name']}")
    b_dev, n_dev = (r.get("device") or {} for r in (b, n))
    if b_dev and n_dev and b_dev.get("name") != n_dev.get("name"):
        cells[4] = Text(f"{b_dev.get('name', '?')} → {n_dev.get('name', '?')}")
    return cells


#: identity fields that keep two records of one task apart, and how each is shown
_APART: dict[str, Callable[[dict[str, Any]], str]] = {
    "device": lambda r: " ".join(device_identity(r) or ("unknown",)),
    "framework": lambda r: str(r["framework"]["name"]),
    "dtype": lambda r: str(r["dtype"]),
    "world size": lambda r: str(r["world_size"]),
}


def apart(
    only_base: list[dict[str, Any]], only_new: list[dict[str, Any]], across: Collection[str] = ()
) -> list[str]:
    """Why records of BASE and NEW did not pair where one field alone keeps them apart: per
    field, how many NEW records differ from a BASE record in it alone, and the values."""
    notes = []
    for name, shown in _APART.items():
        if name in across:
            continue
        left_out = (*across, name)

        def key(rec: dict[str, Any], left_out: tuple[str, ...] = left_out) -> tuple[Any, ...]:
            dev = None if "device" in left_out else device_identity(rec)
            return (*_key(rec, left_out), dev)

        base_values: dict[tuple[Any, ...], set[str]] = {}
        for rec in only_base:
            base_values.setdefault(key(rec), set()).add(shown(rec))
        count, was, now = 0, set[str](), set[str]()
        for rec in only_new:
            if key(rec) in base_values:
                count, now = count + 1, now | {shown(rec)}
                was |= base_values[key(rec)]
        if count:
            hint = f"; --across {name} pairs them" if name in ACROSS else ""
            notes.append(
                f"{count} record(s) of NEW differ from one of BASE only in the {name} "
                f"(BASE: {', '.join(sorted(was))}; NEW: {', '.join(sorted(now))}){hint}"
            )
    return notes


def _in_records(cmp: Comparison, verdict: str) -> str:
    """ " (in 18 records)": a record's time, FLOP rate, bandwidth and % of peak are one
    measurement, so its metrics move together."""
    n = len({id(d.new_rec) for d in cmp.metrics if d.verdict == verdict})
    return f" (in {n} record{'s' if n != 1 else ''})" if n else ""


def compare_main(
    base: Path,
    new: Path,
    tolerance: float,
    console: Console,
    include_busy: bool = False,
    across: Collection[str] = (),
) -> int:
    """Compare two runs (directories or results.jsonl files) and print the verdicts.

    Returns 1 on any regression, newly failing correctness check or record that was ok in
    BASE and failed/timed out/ran out of memory in NEW; 2 when no record paired (nothing was
    compared: used as a gate, a 0 there would pass runs of another machine, framework or
    benchmark unchecked); 0 otherwise. Raises ConfigError for bad input (missing run, invalid
    record, negative tolerance).
    """
    if not math.isfinite(tolerance) or tolerance < 0:
        raise ConfigError(f"--tolerance {tolerance}: must be a non-negative fraction (0.05 = 5%)")
    distinct_runs(
        [base, new], "compare BASE with another run (a run compared with itself has no "
        "difference to judge and would pass whatever it holds)",
    )  # fmt: skip
    base_run, new_run = load_run(Path(base)), load_run(Path(new))
    base_run.label, new_run.label = "BASE", "NEW"
    for side, run in (("BASE", base_run), ("NEW", new_run)):
        one_record_a_task(side, run)
    cmp = compare_runs(base_run, new_run, tolerance, include_busy, across)
    print_comparison(cmp, base_run, new_run, console)
    if cmp.pairs == 0:
        return 2
    return 1 if cmp.failed else 0
