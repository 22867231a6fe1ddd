"""The history with real runs: `dlsuite run` (NumPy adapter, quick GEMM) appends each run at
its end, two runs ending together both land, `history trend` shows each figure over three
runs, an injected slowdown (3x or more: past every run's noise) is flagged by `history check`,
a store rebuilt from the run directories answers the same, and a corrupt store costs a warning,
never a record."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from suite.results import ResultsFile, validate_file
from tests import synthetic as S
from tests.helpers import FAST_MEASURE, ROOT, cli, records

pytestmark = pytest.mark.numpy

RUN = ["run", "--level", "operator", "--framework", "numpy", "--quick", "--benchmark", "gemm",
       "--dtype", "fp32"]  # fmt: skip


def _env(store: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "DLSUITE_HISTORY": str(store)}


def _start(store: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "suite", *args], cwd=ROOT, env=_env(store), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def _json(store: Path, *args: str) -> Any:
    out = cli("history", *args, "--json", env={"DLSUITE_HISTORY": str(store)})
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def _injected_slowdown(run_dir: Path, dest: Path, factor: float) -> Path:
    """A copy of a real run whose every timing is ``factor`` x slower (rates / factor), as a
    later run with a run id of its own."""
    recs = [
        S.scaled(r, factor) if r["status"] == "ok" else copy.deepcopy(r) for r in records(run_dir)
    ]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    later = "2999-01-01T00:00:00.000+00:00"  # after every real run
    manifest.update(run_id="injected3x", created_at=later, updated_at=later)
    dest.mkdir()
    results = ResultsFile(dest / "results.jsonl")
    for r in recs:
        r.update(run_id="injected3x", started_at=later)
        results.append(r)
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


def _is_busy(rec: dict[str, Any]) -> bool:
    from suite.summary import busy_findings

    return bool(busy_findings(rec))


def test_runs_append_trend_check_rebuild(tmp_path: Path) -> None:
    store = tmp_path / "history.sqlite"
    steady = tmp_path / "steady.toml"  # a 1 s budget: CIs narrow enough to resolve 3x
    steady.write_text("[measure]\ntime_budget_s = 1.0\nwarmup_s = 0.1\n")
    runs = [tmp_path / f"r{i}" for i in (1, 2, 3)]

    first = cli(*RUN, "--config", str(steady), "--out", str(runs[0]), "--no-history",
                env={"DLSUITE_HISTORY": str(store)})  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert not store.exists() and "history:" not in first.stdout

    # two runs started together, so they end at about the same moment: both land
    procs = [_start(store, *RUN, "--config", str(steady), "--out", str(d)) for d in runs[1:]]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert "history: run" in out and "added in" in out, out
    imported = cli("history", "import", str(runs[0]), env={"DLSUITE_HISTORY": str(store)})
    assert imported.returncode == 0 and "1 run(s) added" in imported.stdout, imported.stderr

    listed = _json(store, "list")["runs"]
    assert sorted(r["run_dir"] for r in listed) == sorted(str(d.resolve()) for d in runs)
    assert len({r["host"] for r in listed}) == 1
    assert all(r["counts"]["ok"] == 1 and r["frameworks"].get("numpy") for r in listed)

    trends = _json(store, "trend")
    assert {t["metric"] for t in trends} == {"time", "flop_rate", "bandwidth", "percent_of_peak"}
    order = [r["run_id"] for r in listed]  # oldest first
    for t in trends:
        assert (t["benchmark"], t["dtype"], t["framework"]) == ("gemm", "fp32", "numpy")
        assert [p["run_id"] for p in t["points"]] == order
        assert all(p["value"] > 0 and p["correctness_passed"] for p in t["points"])
    table = cli("history", "trend", env={"DLSUITE_HISTORY": str(store)})
    assert table.returncode == 0 and "4 figures" in table.stdout

    # The slowest of the three runs made slower, beyond the noise of every one of them: at
    # least 3x, and twice what takes its 95% CI clear of every run's (on a loaded CI machine
    # a 1 s run's CI once reached past 3x its neighbour's, and the check rightly said
    # "unchanged": overlapping CIs are no resolved difference).
    def time_metric(d: Path) -> dict[str, Any]:
        rec = next(r for r in records(d) if r["status"] == "ok")
        return dict(next(m for m in rec["metrics"] if m["name"] == "time"))

    times = {d: time_metric(d) for d in runs}
    slowest = max(runs, key=lambda d: float(times[d]["median"]))
    clear = max(max(t["ci95"]) for t in times.values()) / min(times[slowest]["ci95"])
    factor = max(3.0, 2.0 * clear)
    injected = _injected_slowdown(slowest, tmp_path / "injected", factor)
    assert (
        cli("history", "import", str(injected), env={"DLSUITE_HISTORY": str(store)}).returncode == 0
    )
    # --include-busy: the two runs started together each see the other as other load, so
    # their records may be busy, which the check leaves unjudged by default (below)
    check = cli("history", "check", "--include-busy", env={"DLSUITE_HISTORY": str(store)})
    cis = [t["ci95"] for t in times.values()]
    assert check.returncode == 1, (factor, cis, check.stdout + check.stderr)
    assert "REGRESSION" in check.stdout
    doc = _json(store, "check", "--include-busy")
    assert doc["run_id"] == "injected3x" and doc["failed"]
    time_fig = next(f for f in doc["figures"] if f["metric"] == "time")
    assert time_fig["verdict"] == "regressed" and len(time_fig["against"]) == 3
    # by default a comparison with a busy record is busy: the verdict follows the records
    busy = {d.name for d in runs if any(_is_busy(r) for r in records(d))}
    plain = next(f for f in _json(store, "check")["figures"] if f["metric"] == "time")
    verdicts = {a["run_id"]: a["verdict"] for a in plain["against"]}
    injected_busy = any(_is_busy(r) for r in records(injected))
    for d in runs:
        run_id = next(r["run_id"] for r in records(d))
        assert (verdicts[run_id] == "busy") == (injected_busy or d.name in busy), verdicts

    # the same questions to a store rebuilt from the run directories
    rebuilt = tmp_path / "rebuilt.sqlite"
    res = cli("history", "rebuild", "--history", str(rebuilt), *map(str, [*runs, injected]))
    assert res.returncode == 0, res.stderr
    for q in (["list"], ["trend"], ["check"], ["check", "--run", order[1]]):
        a, b = _json(store, *q), _json(rebuilt, *q)
        if q == ["list"]:
            a.pop("store"), b.pop("store")
        assert a == b, q


def test_a_corrupt_store_costs_a_warning_not_a_record(tmp_path: Path) -> None:
    store = tmp_path / "history.sqlite"
    garbage = b"\x00garbage, not a SQLite file\xff" * 100
    store.write_bytes(garbage)
    out = tmp_path / "run"
    res = cli(
        *RUN, "--config", str(FAST_MEASURE), "--out", str(out), env={"DLSUITE_HISTORY": str(store)}
    )
    assert res.returncode == 0, res.stderr
    warning = [ln for ln in res.stderr.splitlines() if "not added to the history" in ln]
    assert len(warning) == 1, res.stderr
    assert "dlsuite history rebuild" in warning[0] and "dlsuite history import" in warning[0]
    assert validate_file(out / "results.jsonl") == 1 and records(out)[0]["status"] == "ok"
    assert store.read_bytes() == garbage  # untouched, for whoever wants to look at it
    again = cli("history", "list", env={"DLSUITE_HISTORY": str(store)})
    assert again.returncode == 2 and "dlsuite history rebuild" in again.stderr
