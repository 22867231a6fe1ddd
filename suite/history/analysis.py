"""What the history store answers: the regression check of a run against the same tasks' last N
runs (``dlsuite history check``, with ``dlsuite compare``'s own rule) and the figures' trends
(``dlsuite history trend|plot`` and the report's History section).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.compare import (
    CheckFlip,
    MetricDiff,
    Outcome,
    compare_runs,
    peak_lines,
    with_derived_ci,
)
from suite.errors import ConfigError
from suite.history.store import (
    MEMORY,
    SETUP_FIELDS,
    HistoryStore,
    RunInfo,
    StoredRecord,
    run_entries,
)
from suite.report.load import RESULTS_FILE, Run, base_identity, device_identity, load_run

# -- the regression check over the last N runs ------------------------------------------------


@dataclass
class FigureVerdict:
    """One figure of the checked run against the same task's last N runs."""

    target: StoredRecord
    metric: str
    unit: str
    higher_is_better: bool
    new: dict[str, Any]
    against: list[tuple[RunInfo, MetricDiff]]  # newest baseline first
    verdict: str  # regressed | improved | unchanged | busy
    #: what the figure was measured with that differs from its newest judging baseline
    #: (:func:`differences`): a change there can move a figure on an unchanged machine
    changes: list[str] = field(default_factory=list)


@dataclass
class HistoryCheck(Outcome):
    target: RunInfo
    last: int
    tolerance: float
    any_host: bool
    figures: list[FigureVerdict] = field(default_factory=list)
    newly_failing_checks: list[tuple[RunInfo, CheckFlip]] = field(default_factory=list)
    status_regressions: list[tuple[RunInfo, dict[str, Any], dict[str, Any]]] = field(
        default_factory=list
    )
    no_history: list[StoredRecord] = field(default_factory=list)
    unit_mismatches: list[str] = field(default_factory=list)
    #: shares of a peak not compared against the newest baseline: its peak differs (compare's
    #: rule), how many records each reason concerns, and the peaks' sources
    peak_counts: dict[str, int] = field(default_factory=dict)
    peak_sources: dict[str, None] = field(default_factory=dict)

    @property
    def peak_changes(self) -> list[str]:
        return peak_lines(self.peak_counts, self.peak_sources)

    def verdicts(self) -> Iterator[str]:
        return (f.verdict for f in self.figures)


def check_run(
    store: HistoryStore,
    target: RunInfo,
    targets: Sequence[StoredRecord],
    *,
    last: int = 5,
    tolerance: float = 0.05,
    any_host: bool = False,
    include_busy: bool = False,
) -> HistoryCheck:
    """Every record of ``target`` against the same task's records in its last ``last`` runs
    on the same host, with ``dlsuite compare``'s own rule (:func:`suite.compare.compare_runs`)
    against each of them:

    * a figure is **regressed** when it regressed (worse by more than the tolerance, the 95%
      CIs not overlapping) against *every* one of those runs where the task was ok — a change
      beyond the noise of its recent history, not beyond one lucky run; **improved** likewise;
      else unchanged; a comparison with a record measured busy (compare's "busy") does not
      count against the others, and a figure with no other is busy;
    * a correctness check that passed in the newest of those runs and fails now, and a record
      ok there and failed/timeout/oom now, are flagged as ``dlsuite compare`` flags them.
    """
    out = HistoryCheck(target=target, last=last, tolerance=tolerance, any_host=any_host)
    for t in targets:
        base = store.baseline(t, last, any_host)
        if not base:
            out.no_history.append(t)
            continue
        new_run = _as_run(target, [t.rec])
        per_metric: dict[str, list[tuple[RunInfo, MetricDiff]]] = {}
        base_of = {b.run.run_id: b for b in base}
        for i, b in enumerate(base):
            cmp = compare_runs(_as_run(b.run, [b.rec]), new_run, tolerance, include_busy)
            for d in cmp.metrics:
                per_metric.setdefault(d.name, []).append((b.run, d))
            if i == 0:  # correctness and status: against the newest run, as compare does
                out.newly_failing_checks += [(b.run, f) for f in cmp.newly_failing_checks]
                out.status_regressions += [(b.run, x, y) for x, y in cmp.status_regressions]
                out.unit_mismatches += cmp.unit_mismatches
                for what, count in cmp.peak_counts.items():
                    out.peak_counts[what] = out.peak_counts.get(what, 0) + count
                out.peak_sources.update(cmp.peak_sources)
        for m in t.rec.get("metrics") or []:
            against = per_metric.get(m["name"])
            if not against:
                continue
            verdicts = {d.verdict for _, d in against} - {"busy"} or {"busy"}
            verdict = verdicts.pop() if len(verdicts) == 1 else "unchanged"
            new_m, _ = with_derived_ci(t.rec, m)
            judging = [r for r, d in against if d.verdict != "busy"] or [against[0][0]]
            out.figures.append(
                FigureVerdict(t, m["name"], m["unit"], bool(m["higher_is_better"]), new_m,
                              against, verdict, differences(base_of[judging[0].run_id], t))
            )  # fmt: skip
    return out


def differences(base: StoredRecord, new: StoredRecord) -> list[str]:
    """What ``new`` was measured with that differs from ``base``, one item each: the framework
    version, the device's driver, the suite's version and commit, and the record's setup
    (:func:`suite.history.store.record_setup`: backend, image, cores, threads, CUDA...), e.g.
    ``pytorch: 2.12.0 → 2.13.0``. The task, device and host are the same by construction. A
    setup the store does not know (a run directory gone before its upgrade) is not compared."""
    out: list[str] = []
    fw = new.rec["framework"]["name"]
    pairs = [
        (fw, base.rec["framework"].get("version"), new.rec["framework"].get("version")),
        ("driver", (base.rec.get("device") or {}).get("driver"),
         (new.rec.get("device") or {}).get("driver")),
    ]  # fmt: skip
    for label, a, b in pairs:
        if a != b and (a is not None or b is not None):
            out.append(f"{label}: {a or '?'} → {b or '?'}")

    def suite(run: RunInfo, digits: int | None) -> str:
        commit = f"@{run.git_commit[:digits]}" if run.git_commit else ""
        return f"{run.suite_version or '?'}{commit}{'+dirty' if run.git_dirty else ''}"

    if suite(base.run, None) != suite(new.run, None):
        short = 10 if suite(base.run, 10) != suite(new.run, 10) else None
        out.append(f"dlsuite: {suite(base.run, short)} → {suite(new.run, short)}")
    if base.setup and new.setup:
        for label, _ in SETUP_FIELDS:
            a, b = base.setup.get(label), new.setup.get(label)
            if label == "OMP_NUM_THREADS":  # not set is a setting: all cores
                a, b = a or "unset", b or "unset"
            elif a is None or b is None:
                continue  # not recorded on one side (another framework's or suite's record)
            if a != b:
                if label == "image digest":  # a digest is told apart by its first 12 digits
                    a, b = (d.removeprefix("sha256:")[:12] for d in (a, b))
                out.append(f"{label}: {a} → {b}")
    return out


def _as_run(info: RunInfo, records: list[dict[str, Any]]) -> Run:
    path = Path(info.run_dir)
    return Run(path=path, results=path / RESULTS_FILE, records=records, label=info.run_id)


def entry_for_check(run_dir: Path) -> tuple[RunInfo, list[StoredRecord]]:
    """A run directory not (or not yet) in the store, as the check reads it: the same rows a
    store would hold, through an in-memory store (so a stored run and a directory give the
    same answer)."""
    run = load_run(Path(run_dir))
    entries = run_entries(run.path, run.records, run.manifest)
    if len(entries) != 1:
        raise ConfigError(
            f"{run.results}: holds records of {len(entries)} runs "
            f"({', '.join(e.info.run_id for e in entries)}); check one run at a time"
        )
    with HistoryStore(MEMORY, journal_mode="memory") as mem:
        mem.add(entries[0])
        return entries[0].info, mem.records(run_id=entries[0].info.run_id)


# -- trends ------------------------------------------------------------------------------------


@dataclass
class TrendPoint:
    run: RunInfo
    record: dict[str, Any]
    metric: dict[str, Any]  # with a CI derived from its source metric where it has none
    setup: dict[str, str] = field(default_factory=dict)  # the stored record's setup

    @property
    def stored(self) -> StoredRecord:
        return StoredRecord(0, self.run, str(self.record.get("host")), self.record, self.setup)

    @property
    def value(self) -> float:
        return float(self.metric.get("median", self.metric["value"]))


@dataclass
class Trend:
    """One figure (task identity x metric, on one host) over the runs that measured it."""

    host: str
    key: tuple[Any, ...]
    metric: str
    unit: str
    higher_is_better: bool
    points: list[TrendPoint]
    #: the task's records that did not run (failed, timeout, oom, skipped) in runs from the
    #: first point's on, oldest first: they have no value, but a figure whose newest run
    #: failed must not read as if that run never happened
    not_ok: list[StoredRecord] = field(default_factory=list)

    @property
    def record(self) -> dict[str, Any]:
        return self.points[-1].record

    @property
    def newer_not_ok(self) -> list[StoredRecord]:
        """The not-ok records of runs after the newest point's run."""
        last = _run_order(self.points[-1].run)
        return [s for s in self.not_ok if _run_order(s.run) > last]


def _run_order(run: RunInfo) -> tuple[str, str]:
    """The store's order of runs: start time, then run id."""
    return run.started_at, run.run_id


def figure_key(host: str, rec: dict[str, Any]) -> tuple[Any, ...]:
    """The task identity of ``dlsuite compare`` plus the host: one trend per key and metric."""
    return (host, *base_identity(rec), device_identity(rec))


def params_match(params: dict[str, Any], wanted: dict[str, str]) -> bool:
    """Whether every ``key=value`` of ``wanted`` is in ``params`` (values compared as text, or
    as JSON for lists and objects)."""
    for key, text in wanted.items():
        if key not in params:
            return False
        value = params[key]
        if str(value) != text and json.dumps(value, sort_keys=True) != text:
            return False
    return True


def trends(
    stored: Sequence[StoredRecord],
    *,
    metrics: Sequence[str] | None = None,
    params: dict[str, str] | None = None,
    last: int | None = None,
) -> list[Trend]:
    """Group ok records into figure trends (oldest run first; the last ``last`` runs)."""
    groups: dict[tuple[Any, ...], Trend] = {}
    not_ok: list[StoredRecord] = []
    for s in stored:
        if params and not params_match(s.rec["benchmark"]["params"], params):
            continue
        if s.rec["status"] != "ok":
            not_ok.append(s)
            continue
        key = figure_key(s.host, s.rec)
        seen: set[str] = set()
        for m in s.rec.get("metrics") or []:
            if (metrics and m["name"] not in metrics) or m["name"] in seen:
                continue
            seen.add(m["name"])
            tr = groups.setdefault(
                (*key, m["name"], m["unit"]),
                Trend(s.host, key, m["name"], m["unit"], bool(m["higher_is_better"]), []),
            )
            if tr.points and tr.points[-1].run.run_id == s.run.run_id:
                continue  # one point per run (its first record of the task)
            tr.points.append(TrendPoint(s.run, s.rec, with_derived_ci(s.rec, m)[0], s.setup))
    out = list(groups.values())
    if last:
        for tr in out:
            tr.points = tr.points[-last:]
    for s in not_ok:
        *task, dev = figure_key(s.host, s.rec)
        for tr in out:
            # a record that failed before its device was known matches any device, as in compare
            if tr.key[:-1] == tuple(task) and dev in (None, tr.key[-1]):
                if _run_order(s.run) >= _run_order(tr.points[0].run) and not any(
                    p.run.run_id == s.run.run_id for p in tr.points
                ):
                    tr.not_ok.append(s)
    return out
