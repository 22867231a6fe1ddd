"""An independent recomputation of the report's Findings from their records (used by
tests/unit/test_findings.py on synthetic runs and on the committed runs under docs/results/).

Written apart from suite/report/ on purpose: it reads each finding's record ids and basis and
recomputes every figure with its own arithmetic (medians and 95% CIs straight from the records'
metrics), so a finding the records do not support fails here."""

from __future__ import annotations

import math
from typing import Any

from suite.report.findings import Finding
from suite.report.intervals import fmt_ratio, fmt_share, fmt_time
from suite.report.load import Run

Triple = tuple[float, float, float]


def records_by_id(runs: list[Run]) -> dict[str, dict[str, Any]]:
    out = {}
    for run in runs:
        for rec in run.records:
            rank = rec.get("rank")
            suffix = f"#rank{rank}" if rank not in (None, 0) else ""
            out[f"{run.label}:{rec['task_id']}{suffix}"] = rec
    return out


def _metric(rec: dict[str, Any], name: str) -> Triple:
    m = next(m for m in rec["metrics"] if m["name"] == name)
    v = float(m["median"] if "median" in m else m["value"])
    lo, hi = m.get("ci95") or (v, v)
    return v, min(float(lo), v), max(float(hi), v)


def _timed(rec: dict[str, Any]) -> Triple:
    b = rec["benchmark"]
    name = (
        "time" if b["level"] == "operator" else ("latency" if b["name"] == "infer" else "step_time")
    )
    return _metric(rec, name)


def _gm(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def recompute(f: Finding, by_id: dict[str, dict[str, Any]]) -> dict[str, Triple]:
    """Every figure of ``f`` from its records: name -> (value, lo, hi)."""
    for rid in f.records:
        rec = by_id[rid]
        assert rec["status"] == "ok" and rec["correctness"]["passed"], rid
    if f.topic in ("fastest", "cpu-gpu"):
        vals, los, his = [], [], []
        for slow, fast in f.basis["pairs"]:
            a, b = _timed(by_id[slow]), _timed(by_id[fast])
            vals.append(a[0] / b[0])
            los.append(a[1] / b[2])
            his.append(a[2] / b[1])
        return {"ratio": (_gm(vals), _gm(los), _gm(his))}
    if f.topic == "scaling":
        n = f.basis["ranks"]
        a, b = (
            _metric(by_id[f.basis["n"]], "throughput"),
            _metric(by_id[f.basis["one"]], "throughput"),
        )
        return {"efficiency": (a[0] / (n * b[0]), a[1] / (n * b[2]), a[2] / (n * b[1]))}
    if f.topic == "step":
        step = _timed(by_id[f.basis["network"]])
        sums: dict[str, list[float]] = {}
        for term, items in f.basis["terms"].items():
            s = [0.0, 0.0, 0.0]
            for rid, count in items:
                t = _metric(by_id[rid], "time")
                s = [s[i] + count * t[i] for i in range(3)]
            sums[term] = s
        measured = [sum(s[i] for s in sums.values()) for i in range(3)]
        est = f.basis["estimated_s"]
        largest = max(sums.values(), key=lambda s: s[0])
        got = {
            "step": step,
            "largest": (largest[0], largest[1], largest[2]),
            "measured": (measured[0], measured[1], measured[2]),
            "estimated": (est, est, est),
            "remainder": (step[0] - measured[0] - est, step[1] - measured[2] - est,
                          step[2] - measured[1] - est),
        }  # fmt: skip
        if got["remainder"][1] > 0:  # the unexplained share: what the parts leave of the step
            got["unexplained"] = (1 - (measured[0] + est) / step[0],
                                  1 - (measured[2] + est) / step[1],
                                  1 - (measured[1] + est) / step[2])  # fmt: skip
        return got
    if f.topic == "bound":
        out: dict[str, Triple] = {}
        for name, ids in f.basis["terms"].items():
            if not ids:  # one rank: no exchange
                out[name] = (0.0, 0.0, 0.0)
                continue
            rec = by_id[ids[0]]
            b = rec["benchmark"]
            if name == "input":
                out[name] = _metric(rec, "input_wait")
            elif b["name"] == "data_parallel":
                step = _metric(rec, "step_time")
                nosync = rec["work"]["no_sync_step_s"]
                c = (nosync, nosync * step[1] / step[0], nosync * step[2] / step[0])
                if name == "compute":
                    out[name] = c
                else:
                    out[name] = (step[0] - c[0], step[1] - c[2], step[2] - c[1])
            elif b["name"] == "feed":
                out[name] = _metric(rec, "step_time_from_memory")
            else:
                out[name] = _metric(rec, "step_time")
        if "share" in f.figures:
            top = f.basis["verdict"]
            rest = [tuple(max(x, 0.0) for x in v) for n, v in out.items() if n != top]
            t = tuple(max(x, 0.0) for x in out[top])
            out["share"] = (t[0] / (t[0] + sum(r[0] for r in rest)),
                            t[1] / (t[1] + sum(r[2] for r in rest)),
                            t[2] / (t[2] + sum(r[1] for r in rest)))  # fmt: skip
        return out
    raise AssertionError(f"unknown topic {f.topic}")


def check(f: Finding, by_id: dict[str, dict[str, Any]], rel: float = 1e-9) -> None:
    """The finding's figures equal the recomputation, its text carries each, and what it
    says about a difference agrees with the intervals."""
    got = recompute(f, by_id)
    assert set(got) == set(f.figures), (f.topic, sorted(got), sorted(f.figures))
    for name, (v, lo, hi) in got.items():
        fig = f.figures[name]
        for a, b in ((fig.value, v), (fig.lo, lo), (fig.hi, hi)):
            assert math.isclose(a, b, rel_tol=rel, abs_tol=1e-15), (f.topic, name, a, b, f.text)
        if f.topic in ("fastest", "cpu-gpu"):
            assert fmt_ratio(fig) in f.text, (fmt_ratio(fig), f.text)
            assert ("no difference" in f.text) == (lo <= 1.0 <= hi), f.text
        elif name in ("efficiency", "share", "unexplained"):
            assert fmt_share(fig) in f.text, (fmt_share(fig), f.text)
        else:
            assert fmt_time(fig) in f.text, (name, fmt_time(fig), f.text)
    if f.topic == "step":
        r = got["remainder"]
        assert ("negative remainder" in f.text) == (r[2] < 0), f.text
    if f.topic == "bound" and "share" in got:
        top = f.basis["verdict"]
        others = [v for n, v in got.items() if n not in (top, "share")]
        assert all(got[top][1] > o[2] for o in others), f.text  # its interval above the rest
