"""The report's Findings: the few statements a reader acts on, each a sentence with its
figure(s), their intervals and the records they come from.

* **fastest framework per level** (operator: the geometric mean over the shapes every
  framework of a device and dtype ran; network: per network, batch and mode; training: the
  feed benchmark's fed step, naming each pipeline; distributed: the data-parallel step per
  world size), and by how much;
* **where a step's time goes** (:mod:`suite.report.decompose`);
* **what bounds training** (:mod:`suite.report.bounds`);
* **how it scales** (data-parallel throughput at N ranks over N x one rank's, same run);
* **CPU against GPU**, where the runs hold the same measurement on both.

A ratio whose interval contains 1 (an efficiency whose interval reaches 100%) is stated as no
difference. Every figure is recomputable from the records named in ``Finding.basis``
(tests/unit/test_findings.py does, with its own arithmetic); nothing is stated that the
records do not support.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from suite.report.bounds import Bound, Projected, bounds, fit_projection, fmt_term
from suite.report.decompose import (
    Decomposition,
    decompositions,
    group_title,
    machine_key,
    record_id,
    threads,
    usable,
)
from suite.report.document import Section, Table
from suite.report.intervals import Iv, fmt_ratio, fmt_share, fmt_time, geomean
from suite.report.load import Run, metric

TITLE = "Findings"
TOPICS = ("fastest", "step", "bound", "scaling", "cpu-gpu")
#: the timed metric of each (level, benchmark) a "fastest" finding compares (lower is better)
TIMED = {
    ("network", "train"): "step_time",
    ("network", "infer"): "latency",
    ("training", "feed"): "step_time",
    ("distributed", "data_parallel"): "step_time",
}
LEVEL_ORDER = ("operator", "network", "training", "distributed")
#: a feed record's fields that name its pipeline, not its training: compared across formats
PIPELINE_FIELDS = ("format", "workers", "decode", "data")


@dataclass
class Finding:
    """One statement: its text, its figures (name -> value with interval) and what they are
    computed from (``basis``: record ids and how, for a test to recompute them)."""

    topic: str
    level: str
    text: str
    figures: dict[str, Iv]
    records: list[str]
    basis: dict[str, Any] = field(default_factory=dict)


def _name(fw: str) -> str:
    return {"pytorch": "PyTorch", "tensorflow": "TensorFlow", "jax": "JAX", "mxnet": "MXNet",
            "numpy": "NumPy"}.get(fw, fw)  # fmt: skip


def _device(rec: dict[str, Any]) -> str:
    dev = rec.get("device") or {}
    return f"{dev.get('kind', '?').upper()} ({dev.get('name', '?')})"


def _timed(rec: dict[str, Any]) -> dict[str, Any] | None:
    b = rec["benchmark"]
    if b["level"] == "operator":
        return metric(rec, "time")
    name = TIMED.get((b["level"], b["name"]))
    return metric(rec, name) if name else None


def _timed_records(runs: list[Run]) -> Iterator[tuple[Run, dict[str, Any]]]:
    """Every usable record with a timed figure, and its run."""
    for run in runs:
        for rec in run.records:
            if usable(rec) and _timed(rec) is not None:
                yield run, rec


def _seconds(rec: dict[str, Any]) -> float:
    m = _timed(rec)
    return Iv.of_metric(m).value if m else float("inf")


def _params_key(params: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in params.items() if k != "lr"}, sort_keys=True, default=str)


def ratio_sentence(slow: str, fast: str, r: Iv, what: str) -> str:
    """``fast`` against ``slow``: faster by ``r``, or no difference when r's interval holds 1."""
    if r.lo <= 1.0 <= r.hi:
        return (f"no difference between {_name(fast)} and {_name(slow)} {what}: "
                f"{_name(slow)} takes {fmt_ratio(r)} {_name(fast)}'s time, within the intervals")  # fmt: skip
    return f"{_name(fast)} is faster than {_name(slow)} {what}: {_name(slow)} takes {fmt_ratio(r)} its time"


# -- fastest framework per level ------------------------------------------------------------------
def _pair(slow: dict[str, Any], fast: dict[str, Any]) -> Iv:
    a, b = _timed(slow), _timed(fast)
    assert a is not None and b is not None
    return Iv.of_metric(a).over(Iv.of_metric(b))


def fastest_findings(runs: list[Run]) -> list[Finding]:
    out: list[Finding] = []
    by: dict[tuple[Any, ...], dict[str, tuple[Run, dict[str, Any]]]] = {}
    candidates: dict[tuple[Any, ...], int] = {}  # records of one shape and framework, all runs
    for run, rec in _timed_records(runs):
        b = rec["benchmark"]
        if b["level"] != "operator" and (b["level"], b["name"]) not in TIMED:
            continue
        if b["level"] == "distributed" and rec.get("world_size", 1) < 2:
            continue
        if b["level"] == "operator":
            group: tuple[Any, ...] = ("operator", rec["dtype"], *machine_key(rec))
            shape = f"{b['name']}:{_params_key(b['params'])}"
        else:
            params = b["params"]
            if b["name"] == "feed":  # frameworks read different formats: each its fastest
                params = {k: v for k, v in params.items() if k not in PIPELINE_FIELDS}
            group = (b["level"], b["name"], _params_key(params), rec["dtype"],
                     rec.get("world_size", 1), *machine_key(rec))  # fmt: skip
            shape = ""
        slot = by.setdefault(group, {})
        key = f"{shape}|{rec['framework']['name']}"
        held = slot.get(key)
        candidates[(group, key)] = candidates.get((group, key), 0) + 1
        if held is None or _seconds(rec) < _seconds(held[1]):
            slot[key] = (run, rec)
    groups: dict[tuple[Any, ...], dict[str, dict[str, tuple[Run, dict[str, Any]]]]] = {}
    for group, items in by.items():
        for key, found in items.items():
            shape, fw = key.rsplit("|", 1)
            groups.setdefault(group, {}).setdefault(fw, {})[shape] = found
    for group, per_fw in groups.items():
        if len(per_fw) < 2:
            continue
        shared = set.intersection(*(set(v) for v in per_fw.values()))
        if not shared:
            continue
        shapes = sorted(shared)

        def score(fw: str, shapes: list[str] = shapes, per_fw: Any = per_fw) -> float:
            ref = next(iter(per_fw))
            return geomean([
                Iv.exact(Iv.of_metric(_timed(per_fw[fw][s][1]) or {}).value
                         / Iv.of_metric(_timed(per_fw[ref][s][1]) or {}).value) for s in shapes
            ]).value  # fmt: skip

        ranked = sorted(per_fw, key=score)
        fast = ranked[0]
        any_rec = per_fw[fast][shapes[0]][1]
        level = group[0]
        for slow in ranked[1:]:
            pairs = [(per_fw[slow][s], per_fw[fast][s]) for s in shapes]
            r = geomean([_pair(a[1], b[1]) for a, b in pairs])
            if level == "operator":
                what = (f"at the operator level ({len(shapes)} operator shapes both ran, "
                        f"{any_rec['dtype']}, {_device(any_rec)}; geometric mean)")  # fmt: skip
            else:
                from suite.summary import params_label

                what = f"at the {level} level ({any_rec['benchmark']['name']} {params_label(any_rec)}, {any_rec['dtype']}, {_device(any_rec)})"
                if level == "training":  # each framework's fastest pipeline of the runs
                    what += (f"; each through its own pipeline: {_name(slow)} "
                             f"{_pipeline(pairs[0][0][1])}, {_name(fast)} "
                             f"{_pipeline(pairs[0][1][1])}")  # fmt: skip
            used = {fw: sorted({threads(x[1]) for x in side}) for fw, side in
                    ((slow, [a for a, _ in pairs]), (fast, [b for _, b in pairs]))}  # fmt: skip
            # counts both frameworks recorded that differ (--threads set apart between their
            # runs): the comparison is of thread counts as much as of code. "default" (the
            # framework's own pool, e.g. XLA's) is not known to differ, and is not flagged
            known = all(n.isdigit() for side in used.values() for n in side)
            if known and used[slow] != used[fast]:
                what += "; on different CPU threads: " + ", ".join(
                    f"{_name(fw)} {'/'.join(n)}" for fw, n in used.items()
                )
            most = max(candidates[(group, f"{sh}|{fw}")] for sh in shapes for fw in (slow, fast))
            if most > 1:  # several runs measured it: the choice is not in the interval
                what += (f"; each framework's fastest record of up to {most} runs, a choice "
                         "the interval does not count")  # fmt: skip
            ids = [[record_id(*a), record_id(*b)] for a, b in pairs]
            out.append(Finding("fastest", level, ratio_sentence(slow, fast, r, what) + ".",
                               {"ratio": r}, [i for p in ids for i in p],
                               {"pairs": ids, "combine": "geomean of slow/fast"}))  # fmt: skip
    return sorted(out, key=lambda f: LEVEL_ORDER.index(f.level))


def _pipeline(rec: dict[str, Any]) -> str:
    p = rec["benchmark"]["params"]
    return f"{p.get('format')} with {p.get('workers')} worker(s)"


# -- where a step's time goes ---------------------------------------------------------------------
def step_findings(decs: Iterable[Decomposition]) -> list[Finding]:
    out = []
    for d in decs:
        if d.remainder is None:
            continue
        top = d.largest()
        r = d.remainder
        if r.hi < 0:
            rem = (f"a negative remainder of {fmt_time(r)}: the network runs its operators "
                   "faster than the operator level does (fusion, or its own layout or algorithms)")  # fmt: skip
        elif r.lo <= 0:
            rem = f"a remainder of {fmt_time(r)}, not distinguishable from zero"
        else:
            unexplained = d.remainder_share()
            assert unexplained is not None
            rem = f"a remainder of {fmt_time(r)} ({fmt_share(unexplained)} of the step) that no operator explains"
        est = d.estimated or Iv.exact(0.0)
        text = (
            f"{_name(d.framework)} {group_title(d)}: the step takes {fmt_time(d.step)}; its "
            f"largest part is {top.label} at {fmt_time(top.time)} ({fmt_share(d.share(top.time))}), "
            f"the measured operators sum to {fmt_time(d.measured)}, the operators without a "
            f"benchmark are estimated at {fmt_time(est)}, leaving {rem}."
        )
        terms: dict[str, list[list[Any]]] = {}
        for u in d.uses:
            if u.benchmark is None:
                continue
            for direction, rid in u.records.items():
                terms.setdefault(f"{u.kind}:{direction}", []).append([rid, u.count])
        figures = {"step": d.step, "largest": top.time, "measured": d.measured,
                   "estimated": est, "remainder": r}  # fmt: skip
        if r.lo > 0:  # stated as a share of the step
            figures["unexplained"] = d.remainder_share() or r
        out.append(Finding(
            "step", "network", text, figures,
            d.records,
            {"network": d.rid, "terms": terms, "largest": top.label, "estimated_s": est.value},
        ))  # fmt: skip
    return out


# -- what bounds training -------------------------------------------------------------------------
def bound_findings(found: Iterable[Bound]) -> list[Finding]:
    out = []
    for b in found:
        verdict, top = b.verdict()
        if b.total() is None:
            continue
        # one rank: no exchange, and nothing to state about it
        terms = {n: t for n, t in b.terms.items() if t is not None and (b.world > 1 or t.records)}
        figs = {name: t.seconds for name, t in terms.items()}
        parts = ", ".join(f"{n} {fmt_term(n, v)}" for n, v in figs.items())
        if b.world == 1:
            parts += "; one rank, no exchange"
        if top is not None:
            share = b.share(top)
            assert share is not None
            text = (f"{b.label()} is {verdict}: {top} takes {fmt_share(share)} of the step "
                    f"({parts}).")  # fmt: skip
            figs["share"] = share
        else:
            text = f"{b.label()}: {verdict} ({parts})."
        note = b.threads_note()
        if note:  # a share of a machine the terms' records shared differently
            text += f" The terms were {note}."
        slowed = b.slowdown_note()
        if slowed:
            text += f" {slowed}."
        if b.projected:
            busy = " (records the quiet check called busy)" if b.projected.get("busy") else ""
            text += (f" The projection fitted to the same records{busy} puts "
                     f"{_dominant(b.projected)} first at {b.projected.get('ranks')} ranks.")  # fmt: skip
        basis = {"terms": {n: t.records for n, t in terms.items()},
                 "sources": {n: t.source for n, t in terms.items()}, "verdict": top}  # fmt: skip
        out.append(Finding("bound", "training", text, figs, b.records, basis))
    return out


def _dominant(row: dict[str, Any]) -> str:
    from suite.report.bounds import PROJECTED_TERMS

    terms = {PROJECTED_TERMS[k]: float(row.get(k) or 0.0) for k in PROJECTED_TERMS}
    return max(terms, key=lambda k: terms[k])


# -- how it scales --------------------------------------------------------------------------------
def scaling_findings(runs: list[Run]) -> list[Finding]:
    from suite.summary import above_ideal, params_label, superlinear_cause

    by_id = {record_id(run, rec): (run, rec) for run in runs for rec in run.records}
    out = []
    for run in runs:
        for rec in run.records:
            b = rec["benchmark"]
            if not (usable(rec) and b["level"] == "distributed" and b["name"] == "data_parallel"
                    and rec.get("world_size", 1) > 1):  # fmt: skip
                continue
            base_id = (rec.get("work") or {}).get("scaling_baseline_task_id")
            base = by_id.get(f"{run.label}:{base_id}") if base_id else None
            if base is None or not usable(base[1]):
                continue
            n = int(rec["world_size"])
            tp_n, tp_1 = metric(rec, "throughput"), metric(base[1], "throughput")
            if tp_n is None or tp_1 is None:
                continue
            eff = Iv.of_metric(tp_n).over(Iv.of_metric(tp_1).scale(n))

            # the N-rank record's own label: one 1-rank baseline serves both scalings
            what = (f"{_name(rec['framework']['name'])} data-parallel "
                    f"{params_label({**rec, 'world_size': 1})} "
                    f"({b['params'].get('scaling')} scaling), {rec['dtype']}, {_device(rec)}")  # fmt: skip
            if eff.lo <= 1.0 <= eff.hi:
                text = (f"{what}: {n} ranks scale without a measurable loss, efficiency "
                        f"{fmt_share(eff)} (throughput at {n} ranks over {n} x one rank's).")  # fmt: skip
            else:
                text = (f"{what}: {n} ranks reach {fmt_share(eff)} of {n} x one rank's "
                        "throughput (the scaling efficiency).")  # fmt: skip
            if above_ideal(rec):  # above 100% only with its cause, as the tables mark it
                cause = superlinear_cause(rec, run.records, detail=False)  # the busy line follows
                text += f" Above 100% is not a speed-up the run shows: {cause}."
            ids = [record_id(run, rec), record_id(*base)]
            out.append(Finding("scaling", "distributed", text, {"efficiency": eff}, ids,
                               {"n": ids[0], "one": ids[1], "ranks": n}))  # fmt: skip
    return out


# -- CPU against GPU ------------------------------------------------------------------------------
def cpu_gpu_findings(runs: list[Run]) -> list[Finding]:
    by: dict[tuple[Any, ...], dict[str, tuple[Run, dict[str, Any]]]] = {}
    for run, rec in _timed_records(runs):
        b = rec["benchmark"]
        kind = (rec.get("device") or {}).get("kind")
        if kind not in ("cpu", "gpu"):
            continue
        key = (b["level"], b["name"], _params_key(b["params"]), rec["framework"]["name"],
               rec["dtype"], rec.get("world_size", 1))  # fmt: skip
        by.setdefault(key, {}).setdefault(kind, (run, rec))
    per_level: dict[tuple[str, str, str], list[tuple[Any, Any]]] = {}
    for key, kinds in by.items():
        if "cpu" in kinds and "gpu" in kinds:
            per_level.setdefault((key[0], key[3], key[4]), []).append((kinds["cpu"], kinds["gpu"]))
    out = []
    for (level, fw, dtype), pairs in per_level.items():
        r = geomean([_pair(c[1], g[1]) for c, g in pairs])
        cpu, gpu = _device(pairs[0][0][1]), _device(pairs[0][1][1])
        ids = [[record_id(*c), record_id(*g)] for c, g in pairs]
        if r.lo <= 1.0 <= r.hi:
            text = (f"{_name(fw)} {dtype}, {level} level: no difference between {gpu} and "
                    f"{cpu} within the intervals ({fmt_ratio(r)}, {len(pairs)} measurement(s)).")  # fmt: skip
        else:
            text = (f"{_name(fw)} {dtype}, {level} level: {cpu} takes {fmt_ratio(r)} the time "
                    f"of {gpu} (geometric mean over {len(pairs)} measurement(s) both ran).")  # fmt: skip
        out.append(Finding("cpu-gpu", level, text, {"ratio": r}, [i for p in ids for i in p],
                           {"pairs": ids, "combine": "geomean of cpu/gpu"}))  # fmt: skip
    return out


def findings(runs: list[Run], projected: dict[str, dict[str, Any]] | None = None) -> list[Finding]:
    """Every finding the runs support, in the section's order; one resting on records the
    quiet-machine check found busy says so (:func:`_say_busy`)."""
    decs = decompositions(runs)
    found = [
        *fastest_findings(runs),
        *step_findings(d for d in decs if d.mode == "train"),
        *step_findings(d for d in decs if d.mode == "infer"),
        *bound_findings(bounds(runs, projected)),
        *scaling_findings(runs),
        *cpu_gpu_findings(runs),
    ]
    return _say_busy(found, runs)


def _say_busy(found: list[Finding], runs: list[Run]) -> list[Finding]:
    """Each finding with records measured while the machine was busy ends saying so, with the
    first finding: other load shifts a median by more than its interval shows (a one-rank step
    of 57 ms beside another process, against 20 ms for the two-rank step, read 283% scaling),
    so the statement is about that load as much as about the frameworks."""
    from suite.summary import busy_findings

    by_id = {record_id(run, rec): rec for run in runs for rec in run.records}
    for f in found:
        busy = [(rid, b) for rid in f.records if (b := busy_findings(by_id.get(rid, {})))]
        if busy:
            f.text += (
                f" **Measured on a busy machine**: {len(busy)} of its {len(f.records)} records "
                f"({busy[0][0]}: {busy[0][1][0]}); rerun quiet before trusting it."
            )
            f.basis["busy_records"] = [rid for rid, _ in busy]
    return found


def findings_section(
    runs: list[Run], figure_name: Callable[[str], str], projected: Projected | None = None
) -> Section:
    s = Section(TITLE)
    rows, _ = fit_projection(projected, runs)  # findings go on without the projection
    found = findings(runs, rows)
    if not found:
        s.add(
            "No findings: they need two frameworks on the same measurement, a network step "
            "with its operators measured beside it, a feed or a data-parallel run (see "
            "docs/guide/explain.md for the command sequence)."
        )
        return s
    s.add(
        "Each statement with its figure and interval (95% CIs of medians, combined bound by "
        "bound); a ratio whose interval holds 1 is stated as no difference. The records "
        "behind each are listed below the statements; the sections that follow hold the "
        "detail. Other load can move a median far beyond its interval (two threads on two "
        "cores stall whenever another process takes one): a statement resting on records the "
        "quiet-machine check found busy says so."
    )
    for i, f in enumerate(found, start=1):
        s.add(f"{i}. {f.text}")
    s.add(Table(["#", "topic", "records"],
                [[str(i), f.topic, ", ".join(f.records)] for i, f in enumerate(found, start=1)],
                caption="the records behind each finding (run label : task id)"))  # fmt: skip
    return s
