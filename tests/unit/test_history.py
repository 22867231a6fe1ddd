"""The history store (suite/history/, `dlsuite history`): a real SQLite file, real run
directories of synthetic records (tests/synthetic.py), real concurrent processes.

The end-to-end variant with real `dlsuite run`s is tests/integration/test_history_runs.py."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import multiprocessing
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from suite.cli import main as cli_main
from suite.cli.history import spark
from suite.errors import ConfigError
from suite.history import ingest
from suite.history import store as history_store
from suite.report.load import load_run
from tests import synthetic as S
from tests.helpers import ROOT, cli

HOST = "node01"


def _records(factor: float = 1.0) -> list[dict[str, Any]]:
    recs = [
        S.operator_record("gemm", time_s=1.8e-4),
        S.operator_record("gemm", {"m": 512, "n": 512, "k": 512}, time_s=1.2e-3, flops=2 * 512**3),
        S.operator_record(
            "softmax", {"rows": 2048, "cols": 128}, time_s=1.0e-4, flops=5 * 2048 * 128
        ),
        S.skipped_record(),
    ]
    return [S.scaled(r, factor) if r["status"] == "ok" else r for r in recs]


def make_run(
    root: Path,
    run_id: str,
    day: int,
    factor: float = 1.0,
    *,
    records: list[dict[str, Any]] | None = None,
    host: str = HOST,
    torch: str = "2.13.0+cpu",
) -> Path:
    """A run directory as `dlsuite run` leaves it: results.jsonl and manifest.json, the
    records' times x ``factor``, started on 2026-01-``day``."""
    started = f"2026-01-{day:02d}T10:00:00.000+00:00"
    recs = copy.deepcopy(records if records is not None else _records(factor))
    for r in recs:
        r.update(run_id=run_id, host=host, started_at=started)
        r["framework"]["version"] = torch
    run_dir = S.write_run(root / run_id, recs)
    manifest = {
        "schema_version": "1", "run_id": run_id, "created_at": started,
        "updated_at": f"2026-01-{day:02d}T10:05:00.000+00:00", "suite_version": "0.1.0",
        "git_commit": f"{day:040x}", "host": host, "argv": ["run"], "config": {}, "tasks": [],
        "state": "finished",
    }  # fmt: skip
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return run_dir


def main(*args: str) -> subprocess.CompletedProcess[str]:
    """``dlsuite ARGS`` in this process (the real CLI entry point, its exit code and output);
    a few tests below run it as a subprocess instead (``cli``)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli_main(list(args))
        except SystemExit as exc:  # argparse's bad flags
            code = int(exc.code or 0)
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def hist(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return main("history", *args, "--history", str(store))


def jhist(store: Path, *args: str) -> Any:
    out = hist(store, *args, "--json")
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


@pytest.fixture()
def three(tmp_path: Path) -> list[Path]:
    """Three runs of the same tasks on one host, a little noise between them."""
    return [
        make_run(tmp_path / "runs", f"run{i}", day=i, factor=f)
        for i, f in ((1, 1.0), (2, 1.01), (3, 0.99))
    ]


def test_store_path_precedence(tmp_path: Path) -> None:
    env = {"DLSUITE_HISTORY": str(tmp_path / "env.sqlite"), "XDG_DATA_HOME": str(tmp_path)}
    assert (
        history_store.resolve_store_path(str(tmp_path / "flag.sqlite"), env)
        == tmp_path / "flag.sqlite"
    )
    assert history_store.resolve_store_path(None, env) == tmp_path / "env.sqlite"
    assert history_store.resolve_store_path(None, {"XDG_DATA_HOME": str(tmp_path)}) == (
        tmp_path / "dlsuite" / "history.sqlite"
    )
    assert history_store.resolve_store_path(None, {"HOME": "/x"}).name == "history.sqlite"
    with pytest.raises(ConfigError, match="is a directory"):
        history_store.resolve_store_path(str(tmp_path), {})


def test_import_is_idempotent_and_list_shows_runs(tmp_path: Path, three: list[Path]) -> None:
    store = tmp_path / "h.sqlite"
    first = hist(store, "import", *map(str, three))
    assert first.returncode == 0, first.stderr
    assert "3 run(s) added" in first.stdout
    again = hist(store, "import", str(tmp_path / "runs"))  # a folder of run directories
    assert again.returncode == 0, again.stderr
    assert "0 run(s) added, 0 replaced, 3 already there" in again.stdout
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 3
        assert db.execute("SELECT count(*) FROM records").fetchone()[0] == 12
        # 3 ok records x 4 metrics x 3 runs
        assert db.execute("SELECT count(*) FROM figures").fetchone()[0] == 36
        assert db.execute("SELECT count(*) FROM figure_history").fetchone()[0] == 36
    runs = jhist(store, "list")["runs"]
    assert [r["run_id"] for r in runs] == ["run1", "run2", "run3"]
    assert runs[0]["host"] == HOST and runs[0]["cpu_model"] == "AMD EPYC"
    assert runs[0]["frameworks"] == {"pytorch": "2.13.0+cpu"}
    assert runs[0]["counts"] == {"records": 4, "ok": 3, "skipped": 1, "failed": 0, "wrong": 0}
    text = hist(store, "list")
    assert text.returncode == 0 and "runs on node01" in text.stdout and "run3" in text.stdout


def test_resumed_run_replaces_its_rows(tmp_path: Path) -> None:
    store = tmp_path / "h.sqlite"
    run = make_run(tmp_path, "r1", 1, records=_records()[:2])
    with history_store.HistoryStore(store) as s:
        assert [a.action for a in s.add_run_dir(run)] == ["added"]
    (run / "results.jsonl").unlink()
    make_run(tmp_path, "r1", 1)  # the run, resumed, gained two records
    with history_store.HistoryStore(store) as s:
        assert [a.action for a in s.add_run_dir(run)] == ["replaced"]
        assert len(s.records(run_id="r1")) == 4
        assert [r.run_id for r in s.runs()] == ["r1"]


def test_trend_shows_each_figure_over_three_runs(tmp_path: Path, three: list[Path]) -> None:
    store = tmp_path / "h.sqlite"
    assert hist(store, "import", *map(str, three)).returncode == 0
    trends = jhist(store, "trend")
    # 3 ok tasks x 4 metrics, each with a point per run, oldest first
    assert len(trends) == 12
    for t in trends:
        assert [p["run_id"] for p in t["points"]] == ["run1", "run2", "run3"]
        assert t["last_verdict"] == "unchanged"
    gemm_time = [
        t for t in trends
        if t["benchmark"] == "gemm" and t["params"] == {"m": 256, "n": 256, "k": 256}
        and t["metric"] == "time"
    ]  # fmt: skip
    assert len(gemm_time) == 1
    values = [p["value"] for p in gemm_time[0]["points"]]
    assert values == pytest.approx([1.8e-4, 1.8e-4 * 1.01, 1.8e-4 * 0.99])
    text = hist(store, "trend", "--benchmark", "gemm", "--metric", "time")
    assert text.returncode == 0, text.stderr
    assert "2 figures" in text.stdout and spark(values) in text.stdout
    assert spark(values) == "▅█▁"  # 1.00, 1.01, 0.99
    show = hist(store, "show", "--benchmark", "softmax", "--metric", "time")
    assert show.returncode == 0, show.stderr
    assert all(f"run{i}" in show.stdout for i in (1, 2, 3)) and "2.13.0+cpu" in show.stdout
    only = jhist(store, "trend", "--param", "m=512", "--metric", "flop_rate")
    assert len(only) == 1 and only[0]["params"]["m"] == 512
    assert jhist(store, "trend", "--last", "2")[0]["points"][0]["run_id"] == "run2"


def test_check_flags_an_injected_3x_slowdown(tmp_path: Path, three: list[Path]) -> None:
    store = tmp_path / "h.sqlite"
    assert hist(store, "import", *map(str, three)).returncode == 0
    fine = make_run(tmp_path / "runs", "run4", day=4, factor=1.0)
    ok = hist(store, "check", "--run", str(fine))  # a directory not in the store
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "0 regressed" in ok.stdout and "no regression" in ok.stdout
    slow = make_run(tmp_path / "runs", "run5", day=5, factor=3.0)
    assert hist(store, "import", str(slow)).returncode == 0
    bad = hist(store, "check")  # the newest run in the store
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "REGRESSION" in bad.stdout and "run5" in bad.stdout
    doc = jhist(store, "check", "--last", "3")
    assert doc["run_id"] == "run5" and doc["failed"]
    # every figure of the 3 ok tasks, against each of the 3 earlier runs
    assert doc["counts"] == {"regressed": 12, "improved": 0, "unchanged": 0, "busy": 0}
    for f in doc["figures"]:
        assert [a["run_id"] for a in f["against"]] == ["run3", "run2", "run1"]
        assert {a["verdict"] for a in f["against"]} == {"regressed"}
    time_fig = next(f for f in doc["figures"] if f["metric"] == "time")
    assert time_fig["against"][0]["change"] == pytest.approx(3 / 0.99 - 1)
    # the skipped record has history but no figure; nothing lacks history
    assert doc["no_history"] == []
    # --last 1: only run3 is the baseline
    assert {len(f["against"]) for f in jhist(store, "check", "--last", "1")["figures"]} == {1}


def test_a_new_peak_is_not_a_regression_of_every_percent_of_peak(
    tmp_path: Path, three: list[Path]
) -> None:
    """The suite measured the CPU's clock from 2026-12: the same times divided by a peak 2.5x
    higher read 60% less of it. `check` judges the times and rates, names the new peak and
    exits 0; the trend's last step of % of peak is "another peak", not "regressed"."""
    store = tmp_path / "h.sqlite"
    recs = []
    for r in _records(1.0):
        if r["status"] == "ok":
            r = copy.deepcopy(r)
            r["work"]["peak_tflops"] *= 2.5
            r["device"]["peak_tflops"] = {k: v * 2.5 for k, v in r["device"]["peak_tflops"].items()}
            r["device"]["peak_source"] = "estimated: 2 cores x 4.08 GHz (measured)"
            for m in r["metrics"]:
                if m["name"] == "percent_of_peak":
                    m["value"] /= 2.5
        recs.append(r)
    new_peak = make_run(tmp_path / "runs", "run4", day=4, records=recs)
    assert hist(store, "import", *map(str, [*three, new_peak])).returncode == 0
    out = hist(store, "check")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 regressed" in out.stdout and "no regression" in out.stdout
    assert "not compared (a share of another peak): percent_of_peak, fp32" in out.stdout
    assert "the peak changed from 0.21 TFLOP/s to 0.525 TFLOP/s" in out.stdout
    doc = jhist(store, "check")
    assert {f["metric"] for f in doc["figures"]} == {"time", "flop_rate", "bandwidth"}
    trend = jhist(store, "trend", "--metric", "percent_of_peak")
    assert trend and {t["last_verdict"] for t in trend} == {"another peak"}
    text = hist(store, "trend", "--metric", "percent_of_peak")
    assert text.returncode == 0 and "another peak" in text.stdout, text.stdout


def test_check_shows_what_improved_without_all(tmp_path: Path, three: list[Path]) -> None:
    """A run 3x faster (a driver update): the last line counted "12 improved" and the table
    showed none of them unless --all; the figures that moved are shown both ways."""
    store = tmp_path / "h.sqlite"
    fast = make_run(tmp_path / "runs", "run4", day=4, factor=1 / 3)
    assert hist(store, "import", *map(str, [*three, fast])).returncode == 0
    out = hist(store, "check")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "12 improved" in out.stdout and "no regression" in out.stdout
    rows = [x for x in out.stdout.splitlines() if x.startswith("│") and "improved" in x]
    assert len(rows) == 12, out.stdout
    same = make_run(tmp_path / "runs", "run5", day=5, factor=1 / 3)
    assert hist(store, "import", str(same)).returncode == 0
    quiet = hist(store, "check")  # nothing moved: no row without --all, every row with it
    assert not [x for x in quiet.stdout.splitlines() if x.startswith("│")], quiet.stdout
    assert (
        len([x for x in hist(store, "check", "--all").stdout.splitlines() if "unchanged" in x])
        >= 12
    )


def test_check_wants_the_change_against_every_baseline(tmp_path: Path) -> None:
    """A figure regressed against every one of the last N runs is flagged; one that only
    differs from an older run (the slowdown landed earlier and was flagged then) is not."""
    root = tmp_path / "runs"
    store = tmp_path / "h.sqlite"
    dirs = [make_run(root, "a", 1, 1.0), make_run(root, "b", 2, 3.0), make_run(root, "c", 3, 3.0)]
    assert hist(store, "import", *map(str, dirs)).returncode == 0
    doc = jhist(store, "check")
    assert not doc["failed"] and doc["counts"]["regressed"] == 0
    assert all(
        [a["verdict"] for a in f["against"]] == ["unchanged", "regressed"] for f in doc["figures"]
    )
    assert jhist(store, "check", "--run", "b")["failed"]  # b: the run where it happened


def test_check_leaves_a_slowdown_measured_busy_unjudged(tmp_path: Path, three: list[Path]) -> None:
    """A run whose every record the quiet check found busy, 3x slower: its figures are busy,
    not regressed, and the check passes; --include-busy judges them."""
    store = tmp_path / "h.sqlite"
    recs = _records(3.0)
    S.mark_busy(*recs)
    busy = make_run(tmp_path / "runs", "run4", day=4, records=recs)
    assert hist(store, "import", *map(str, [*three, busy])).returncode == 0
    doc = jhist(store, "check")
    assert not doc["failed"] and {f["verdict"] for f in doc["figures"]} == {"busy"}
    assert doc["counts"] == {"regressed": 0, "improved": 0, "unchanged": 0, "busy": 12}
    out = hist(store, "check")
    assert out.returncode == 0 and "12 not judged" in out.stdout, out.stdout
    assert "nothing judged: no regression found, none ruled out" in out.stdout  # not "no regr..."
    assert hist(store, "check", "--include-busy").returncode == 1
    # trend's change to the previous run says busy too, not regressed
    assert {t["last_verdict"] for t in jhist(store, "trend")} == {"busy"}


def test_check_compares_the_same_host_only(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    store = tmp_path / "h.sqlite"
    other = make_run(root, "elsewhere", 1, 1.0, host="node02")
    slow = make_run(root, "slow", 2, 3.0)
    assert hist(store, "import", str(other), str(slow)).returncode == 0
    doc = jhist(store, "check")
    assert not doc["failed"] and len(doc["no_history"]) == 4
    assert jhist(store, "check", "--any-host")["failed"]
    assert jhist(store, "check", "--host", "node02")["run_id"] == "elsewhere"


def test_check_flags_correctness_and_status(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    store = tmp_path / "h.sqlite"
    base = _records()
    new = copy.deepcopy(base)
    new[0]["correctness"]["checks"][1].update(error=1.0, passed=False)
    new[0]["correctness"]["passed"] = False
    failed = S.failed_record("softmax", params={"rows": 2048, "cols": 128})
    failed["rank"] = 0
    new[2] = failed
    dirs = [make_run(root, "a", 1, records=base), make_run(root, "b", 2, records=new)]
    assert hist(store, "import", *map(str, dirs)).returncode == 0
    res = hist(store, "check")
    assert res.returncode == 1, res.stdout
    assert "correctness check newly failing" in res.stdout and "status regression" in res.stdout
    doc = jhist(store, "check")
    assert [c["check"] for c in doc["newly_failing_checks"]] == ["c.l2_rel_error_vs_fp64"]
    assert [s["status"] for s in doc["status_regressions"]] == ["failed"]


def test_rebuilt_store_gives_the_same_answers(tmp_path: Path, three: list[Path]) -> None:
    store = tmp_path / "h.sqlite"
    slow = make_run(tmp_path / "runs", "run4", day=4, factor=3.0)
    with history_store.HistoryStore(store) as s:  # appended one by one, as `dlsuite run` does
        for d in [*three, slow]:
            s.add_run_dir(d)
    answers = {q: jhist(store, *q.split()) for q in ("list", "trend", "check", "check --run run2")}
    answers["list"].pop("store")
    store.write_bytes(b"")  # lost
    rebuilt = hist(store, "rebuild", str(tmp_path / "runs"))
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "moved to" in rebuilt.stdout
    again = {q: jhist(store, *q.split()) for q in answers}
    again["list"].pop("store")
    assert again == answers
    assert answers["check"]["failed"] and not answers["check --run run2"]["failed"]
    moved = list(tmp_path.glob("h.sqlite.old-*"))
    assert len(moved) == 1 and moved[0].stat().st_size == 0  # set aside, not deleted
    assert hist(store, "rebuild", str(tmp_path / "runs")).returncode == 0  # at once again
    assert len(list(tmp_path.glob("h.sqlite.old-*"))) == 2


def test_corrupt_store_is_exit_2_naming_the_rebuild(tmp_path: Path, three: list[Path]) -> None:
    store = tmp_path / "h.sqlite"
    store.write_bytes(b"this is not SQLite at all \x00\xff" * 200)
    for args in (["list"], ["trend"], ["check"], ["import", str(three[0])]):
        res = cli("history", *args, "--history", str(store))  # the real command, its exit code
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
        assert "unreadable" in lines[0] and "dlsuite history rebuild --history" in lines[0]
    assert store.read_bytes().startswith(b"this is not SQLite")  # untouched
    with pytest.raises(history_store.HistoryStoreError, match="rebuild"):
        ingest.record_finished_run(store, three[0], load_run(three[0]).records)
    res = hist(store, "rebuild", *map(str, three))
    assert res.returncode == 0, res.stderr
    assert len(jhist(store, "list")["runs"]) == 3


def test_a_sqlite_file_that_is_not_a_store(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE customers (name TEXT)")
    res = hist(other, "list")
    assert res.returncode == 2 and "not a dlsuite history store" in res.stderr


def test_missing_store_and_bad_input(tmp_path: Path) -> None:
    res = hist(tmp_path / "none.sqlite", "trend")
    assert res.returncode == 2 and "no history store at" in res.stderr
    assert not (tmp_path / "none.sqlite").exists()  # reading never creates one
    store = tmp_path / "h.sqlite"
    assert hist(store, "import", str(make_run(tmp_path, "x", 1))).returncode == 0
    for args, words in (
        (["trend", "--param", "m"], "KEY=VALUE"),
        (["check", "--tolerance=-3%"], "--tolerance"),
        (["check", "--last", "0"], "--last"),
        (["check", "--run", "nosuchrun"], "neither a run id"),
        (["import", str(tmp_path / "nothing")], "no such run directory"),
    ):
        res = hist(store, *args)
        assert res.returncode == 2 and words in res.stderr, (args, res.stderr)


def test_a_failed_import_or_rebuild_leaves_the_store_as_it_was(
    tmp_path: Path, three: list[Path]
) -> None:
    store = tmp_path / "h.sqlite"
    res = hist(store, "import", str(tmp_path / "nothing"))
    assert res.returncode == 2 and "no such run directory" in res.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    res = hist(store, "import", str(empty))
    assert res.returncode == 2 and "no run directory" in res.stderr
    assert not store.exists()  # a mistyped path made no empty store ("holds no runs" later)
    assert hist(store, "import", *map(str, three)).returncode == 0
    bad = tmp_path / "bad" / "r1"
    bad.mkdir(parents=True)
    (bad / "results.jsonl").write_text('{"not": "a record"}\n')
    res = hist(store, "rebuild", str(bad.parent))  # nothing in it imports
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert lines[0].startswith("dlsuite: error: not imported: ") and len(lines) == 2
    assert f"no run imported, so the store {store} was left as it was" in lines[1]
    assert not list(tmp_path.glob("h.sqlite.old-*"))  # not moved aside for an empty one
    assert [r["run_id"] for r in jhist(store, "list")["runs"]] == ["run1", "run2", "run3"]


def test_a_killed_run_is_imported_with_a_note_saying_so(tmp_path: Path) -> None:
    run = make_run(tmp_path / "runs", "killed", day=1)
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "state": "running"}))
    with (run / "results.jsonl").open("a") as f:
        f.write('{"schema_version": "1", "run_id": "kil')  # the line SIGKILL cut short
    res = hist(tmp_path / "h.sqlite", "import", str(run))
    assert res.returncode == 0, res.stderr
    out = " ".join(res.stdout.split())
    assert "ignored a partial last line" in out
    assert "its manifest says running: the run was killed (or is still running)" in out
    assert f"dlsuite run --resume --out {run}" in out
    (listed,) = jhist(tmp_path / "h.sqlite", "list")["runs"]
    assert listed["state"] == "running" and listed["counts"]["ok"] == 3


def test_run_refuses_a_store_path_that_is_a_directory_before_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    argv = ["run", "--quick", "--framework", "numpy", "--benchmark", "gemm", "--dtype", "fp32",
            "--out", str(out)]  # fmt: skip
    res = main(*argv, "--history", str(tmp_path))
    assert res.returncode == 2 and not out.exists(), res.stderr  # nothing run, nothing lost
    assert f"--history {tmp_path}: is a directory" in res.stderr
    monkeypatch.setenv("DLSUITE_HISTORY", str(tmp_path))
    res = main(*argv)
    assert res.returncode == 2 and not out.exists(), res.stderr
    assert f"DLSUITE_HISTORY={tmp_path}: is a directory" in res.stderr


def test_quotes_in_params_and_filters_are_data(tmp_path: Path) -> None:
    tricky = 'it\'s a "model"; DROP TABLE runs; --'
    rec = S.operator_record("gemm", {"model": tricky, "m": 1})
    store = tmp_path / "h.sqlite"
    for i in (1, 2):
        assert (
            hist(store, "import", str(make_run(tmp_path, f"q{i}", i, records=[rec]))).returncode
            == 0
        )
    found = jhist(store, "trend", "--param", f"model={tricky}", "--metric", "time")
    assert len(found) == 1 and found[0]["params"]["model"] == tricky
    assert len(found[0]["points"]) == 2
    for flag in ("--benchmark", "--framework", "--host", "--dtype", "--metric"):
        assert jhist(store, "trend", flag, "x' OR '1'='1") == []
    level = hist(store, "trend", "--level", "x' OR '1'='1", "--json")  # not a level: refused
    assert level.returncode == 2 and "no such level" in level.stderr
    assert jhist(store, "trend", "--benchmark", "gemm'; DROP TABLE runs; --") == []
    assert [r["run_id"] for r in jhist(store, "list")["runs"]] == ["q1", "q2"]
    assert not jhist(store, "check", "--run", "q2")["failed"]
    res = hist(store, "check", "--run", "q1' OR run_id LIKE '%")
    assert res.returncode == 2 and "neither a run id" in res.stderr


def _append(store: str, run_dir: str, barrier: Any, mode: str) -> None:
    barrier.wait()  # every process opens and writes at the same moment
    with history_store.HistoryStore(Path(store), journal_mode=mode) as s:
        s.add_run_dir(Path(run_dir))


@pytest.mark.parametrize("mode", ["wal", "delete"])
def test_concurrent_appends_all_land(tmp_path: Path, mode: str) -> None:
    """Processes started together on a new store (so creating it races too), then again on
    the existing one: every run lands, whole."""
    ctx = multiprocessing.get_context("fork")
    store = tmp_path / "h.sqlite"
    n = 6
    for rnd in range(2):
        dirs = [make_run(tmp_path / "runs", f"r{rnd}-{i}", day=1 + i) for i in range(n)]
        barrier = ctx.Barrier(n)
        procs = [
            ctx.Process(target=_append, args=(str(store), str(d), barrier, mode)) for d in dirs
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        assert [p.exitcode for p in procs] == [0] * n
    with sqlite3.connect(store) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == mode
        assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 2 * n
        per_run = db.execute("SELECT count(*) FROM records GROUP BY run_id").fetchall()
        assert [c for (c,) in per_run] == [4] * (2 * n)


MOUNTINFO = """\
22 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
40 22 0:45 / /data rw,relatime shared:20 - nfs4 server:/data rw,vers=4.2
41 22 0:46 / /lustre/scratch rw - lustre 10.0.0.1@o2ib:/scratch rw
42 22 0:47 / /data/shared/local\\040disk rw - xfs /dev/sdb rw
"""


def test_journal_mode_follows_the_file_system() -> None:
    assert history_store.file_system_type(Path("/data/shared/x"), MOUNTINFO) == "nfs4"
    assert history_store.journal_mode_for(Path("/data/shared/x"), MOUNTINFO) == "delete"
    assert history_store.journal_mode_for(Path("/lustre/scratch/h"), MOUNTINFO) == "delete"
    assert history_store.journal_mode_for(Path("/data/shared/local disk/h"), MOUNTINFO) == "wal"
    assert history_store.journal_mode_for(Path("/tmp"), MOUNTINFO) == "wal"
    assert history_store.journal_mode_for(Path("/database"), MOUNTINFO) == "wal"


def test_plot_and_report_history_section(tmp_path: Path, three: list[Path]) -> None:
    store = tmp_path / "h.sqlite"
    assert hist(store, "import", *map(str, three)).returncode == 0
    png = tmp_path / "trend.png"
    res = hist(store, "plot", "--out", str(png), "--metric", "time")
    assert res.returncode == 0, res.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "3 figure(s)" in res.stdout
    many = hist(store, "plot", "--out", str(png))
    assert many.returncode == 2 and "add --metric" in many.stderr
    # a PNG written under another name (x.txt) opened as text in nothing: refused, no file
    txt = tmp_path / "trend.txt"
    named = hist(store, "plot", "--out", str(txt), "--metric", "time")
    assert named.returncode == 2 and "name the file with .png" in named.stderr, named.stderr
    assert len(named.stderr.strip().splitlines()) == 1 and not txt.exists()
    out = tmp_path / "report"
    rep = cli(
        "report", str(three[-1]), "--format", "md", "--out", str(out), "--history", str(store)
    )
    assert rep.returncode == 0, rep.stderr
    md = (out / "report.md").read_text()
    assert "## History" in md and "gemm: time" in md and "run1" in md
    assert any(p.name.endswith("history-gemm-time.png") for p in (out / "report_plots").iterdir())
    plain = main("report", str(three[-1]), "--format", "md", "--out", str(tmp_path / "plain"))
    assert (
        plain.returncode == 0 and "## History" not in (tmp_path / "plain" / "report.md").read_text()
    )


def test_show_names_a_setup_change_between_two_runs(tmp_path: Path) -> None:
    """`show` had columns for the suite, the framework and the driver, but a run with another
    thread count or in a container read as a plain change; the row says what changed."""
    root, store = tmp_path / "runs", tmp_path / "h.sqlite"
    later = _records(1.5)
    later[0]["device"]["torch_threads"] = 1
    later[0]["backend"] = {"kind": "docker", "image": "dlsuite/pytorch",
                           "image_digest": "sha256:" + "ab" * 32}  # fmt: skip
    first = _records()
    first[0]["device"]["torch_threads"] = 2
    runs = [make_run(root, "r1", 1, records=first), make_run(root, "r2", 2, records=later)]
    assert hist(store, "import", *map(str, runs)).returncode == 0
    out = hist(store, "show", "--benchmark", "gemm", "--param", "m=256", "--metric", "time")
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if line.startswith("│ 2 "))
    assert "backend: local → docker; torch threads: 2 → 1" in row, out.stdout
    first_row = next(line for line in out.stdout.splitlines() if line.startswith("│ 1 "))
    assert "→" not in first_row
    points = jhist(store, "trend", "--benchmark", "gemm", "--param", "m=256", "--metric", "time")
    assert [p["setup"]["torch threads"] for p in points[0]["points"]] == ["2", "1"]
    assert points[0]["points"][1]["setup"]["image digest"] == "sha256:" + "ab" * 32


def test_a_point_measured_busy_is_drawn_hollow_and_named(tmp_path: Path) -> None:
    """The plot and the report's History section drew a busy point as any other: a spike the
    check does not judge looked like a regression. It is hollow, and the table of the x axis
    says which runs were busy."""
    recs = _records(3.0)
    S.mark_busy(*recs)
    root = tmp_path / "runs"
    dirs = [make_run(root, "r1", 1), make_run(root, "r2", 2, records=recs), make_run(root, "r3", 3)]
    busy_store, quiet_store = tmp_path / "busy.sqlite", tmp_path / "quiet.sqlite"
    assert hist(busy_store, "import", *map(str, dirs)).returncode == 0
    quiet = make_run(tmp_path / "quiet", "r2", 2, 3.0)  # the same values, measured quiet
    assert hist(quiet_store, "import", str(dirs[0]), str(quiet), str(dirs[2])).returncode == 0
    pngs = []
    for store in (busy_store, quiet_store):
        png = tmp_path / f"{store.stem}.png"
        res = hist(store, "plot", "--out", str(png), "--metric", "time", "--benchmark", "softmax")
        assert res.returncode == 0, res.stderr
        rows = {line.split("│")[1].strip(): line for line in res.stdout.splitlines()
                if line.startswith("│")}  # fmt: skip
        busy = [run for run, line in rows.items() if "busy (hollow)" in line]
        assert busy == (["2"] if store == busy_store else []), res.stdout
        pngs.append(png.read_bytes())
    assert pngs[0] != pngs[1]  # the busy point is drawn otherwise
    out = tmp_path / "report"
    rep = main("report", str(dirs[-1]), "--format", "md", "--out", str(out), "--history",
               str(busy_store))  # fmt: skip
    assert rep.returncode == 0, rep.stderr
    md = (out / "report.md").read_text()
    assert "| 2 | 2026-01-02 10:00 | r2 | node01 |" in md and "busy (hollow)" in md, md


def test_a_filter_that_matches_nothing_says_which_and_what_the_store_has(
    tmp_path: Path, three: list[Path]
) -> None:
    """`--level operater` read 'no figure matches' with exit 0, as any typo in a filter did:
    an unknown level is bad input (exit 2), and a value the store never holds is named with
    the values it does hold."""
    store = tmp_path / "h.sqlite"
    assert hist(store, "import", *map(str, three)).returncode == 0
    bad = hist(store, "trend", "--level", "operater")
    assert bad.returncode == 2 and "--level operater: no such level; use some of: operator" in (
        bad.stderr
    ), bad.stderr
    typo = hist(store, "show", "--framework", "pytroch", "--metric", "tme")
    assert typo.returncode == 0
    assert (
        "--framework pytroch: the store has pytorch; --metric tme: the store has bandwidth, "
        "flop_rate, percent_of_peak, time" in typo.stdout
    ), typo.stdout
    plot = hist(store, "plot", "--out", str(tmp_path / "p.png"), "--benchmark", "gem")
    assert (
        plot.returncode == 2
        and "--benchmark gem: the store has attention, gemm, softmax" in plot.stderr
    )
    assert not (tmp_path / "p.png").exists()


def test_history_modules_stay_light() -> None:
    """The store and its CLI import no framework and no matplotlib (the plot does, lazily)."""
    code = (
        "import sys, suite.history.store, suite.history.ingest, suite.history.analysis\n"
        "import suite.history.report, suite.cli.history, suite.cli\n"
        "suite.cli.build_parser()\n"
        "bad = [m for m in ('torch', 'tensorflow', 'jax', 'mxnet', 'matplotlib') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr


def test_a_busy_baseline_that_matches_does_not_hide_a_regression(tmp_path: Path) -> None:
    """r1, r2 quiet at 1x, r3 busy at 3x, r4 quiet at 3x: against r3 the figure looks
    unchanged, but r3 was busy; it does not count, and r4 regressed against r1 and r2."""
    recs3 = _records(3.0)
    S.mark_busy(*recs3)
    root, store = tmp_path / "runs", tmp_path / "h.sqlite"
    dirs = [make_run(root, "r1", 1), make_run(root, "r2", 2),
            make_run(root, "r3", 3, records=recs3), make_run(root, "r4", 4, 3.0)]  # fmt: skip
    assert hist(store, "import", *map(str, dirs)).returncode == 0
    doc = jhist(store, "check")
    assert doc["run_id"] == "r4" and doc["failed"]
    assert doc["counts"]["regressed"] == 12
    for f in doc["figures"]:
        assert {a["run_id"]: a["verdict"] for a in f["against"]} == {
            "r3": "busy", "r2": "regressed", "r1": "regressed"}  # fmt: skip
    table = hist(store, "check").stdout
    assert "regressed vs 2 of 2 runs (1 busy)" in table and "+0.0%" not in table, table
    # against busy baselines only: none judged, said so ("0 runs (1 busy)" before)
    only = tmp_path / "h2.sqlite"
    assert hist(only, "import", str(dirs[2]), str(dirs[3])).returncode == 0
    table = hist(only, "check", "--all").stdout
    assert "1 busy run(s): none judged" in table and "0 runs" not in table, table


def test_a_store_of_schema_version_1_is_upgraded_in_place(tmp_path: Path) -> None:
    """Version 2 keeps each record's busy finding; a version-1 store (no such column) gets it
    when opened, its runs kept, each record's finding read back from its run directory."""
    import sqlite3

    store = tmp_path / "h.sqlite"
    recs = _records()
    S.mark_busy(recs[1])
    assert (
        hist(store, "import", str(make_run(tmp_path / "runs", "old", 1, records=recs))).returncode
        == 0
    )
    conn = sqlite3.connect(store)
    conn.execute("ALTER TABLE records DROP COLUMN busy")  # as version 1 made it
    conn.execute("ALTER TABLE records DROP COLUMN setup")
    conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with history_store.HistoryStore(store, create=False) as s:
        assert [r.run_id for r in s.runs()] == ["old"]
        assert len(s.records(run_id="old")) == 4
    conn = sqlite3.connect(store)
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("4",)
    assert "busy" in [c[1] for c in conn.execute("PRAGMA table_info(records)")]
    # the busy finding read back from the run's directory, for the record that had one
    busy = conn.execute("SELECT line, busy FROM records WHERE busy IS NOT NULL").fetchall()
    assert busy == [(1, S.BUSY_MESSAGE)]
    conn.close()


def test_a_store_of_schema_version_2_gets_each_records_setup(tmp_path: Path) -> None:
    """Version 3 keeps what each figure was measured with (backend, cores, threads...); a
    version-2 store gets it when opened, read back from the run directories still there."""
    store = tmp_path / "h.sqlite"
    recs = _records()
    recs[0]["device"]["torch_threads"] = 2
    kept = make_run(tmp_path / "runs", "kept", 1, records=recs)
    gone = make_run(tmp_path / "runs", "gone", 2)
    assert hist(store, "import", str(kept), str(gone)).returncode == 0
    conn = sqlite3.connect(store)
    conn.execute("ALTER TABLE records DROP COLUMN setup")  # as version 2 made it
    conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    for f in gone.iterdir():
        f.unlink()
    gone.rmdir()
    with history_store.HistoryStore(store, create=False) as s:
        first = s.records(run_id="kept")[0]
        assert first.setup == {"backend": "local", "cores": "2", "devices": "1",
                               "torch threads": "2", "peak": "0.21"}  # fmt: skip
        assert first.rec["work"] == {"peak_tflops": 0.21}  # carried back for compare
        assert all(r.setup == {} for r in s.records(run_id="gone"))  # not known: not made up
    conn = sqlite3.connect(store)
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("4",)
    conn.close()


def test_a_store_of_schema_version_3_gets_each_records_peak(tmp_path: Path) -> None:
    """Version 4 keeps the peak each % of peak divides by (compare does not judge a share of
    another peak); a version-3 store gets it when opened, from the run directories."""
    store = tmp_path / "h.sqlite"
    assert hist(store, "import", str(make_run(tmp_path / "runs", "r", 1))).returncode == 0
    conn = sqlite3.connect(store)
    conn.execute('UPDATE records SET setup = \'{"backend": "local"}\'')  # as version 3 kept it
    conn.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with history_store.HistoryStore(store, create=False) as s:
        ok = [r for r in s.records(run_id="r") if r.rec["status"] == "ok"]
        assert ok and all(r.setup["peak"] == "0.21" for r in ok)
        assert all(r.rec["work"] == {"peak_tflops": 0.21} for r in ok)
    conn = sqlite3.connect(store)
    assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == ("4",)
    conn.close()


def test_check_names_what_the_figure_was_measured_with_unlike_its_baseline(
    tmp_path: Path,
) -> None:
    """A run after a framework upgrade, 2x slower, one task with another thread count and one
    in a container: the check flags the regression (it is measured) and names, per figure,
    what changed against the newest baseline; it read 'regressed' alone, as if the machine
    had slowed down."""
    store, root = tmp_path / "h.sqlite", tmp_path / "runs"

    def recs(factor: float, threads: int) -> list[dict[str, Any]]:
        out = _records(factor)
        out[0]["device"]["torch_threads"] = threads
        return out

    runs = [make_run(root, f"r{d}", d, records=recs(f, 2), torch="2.12.0+cpu")
            for d, f in ((1, 1.0), (2, 1.01))]  # fmt: skip
    new = recs(2.0, 1)
    new[1]["backend"] = {"kind": "apptainer", "image": "pytorch.sif"}
    runs.append(make_run(root, "r3", 3, records=new))
    assert hist(store, "import", *map(str, runs)).returncode == 0
    out = jhist(store, "check", "--all")
    assert out["failed"] and out["counts"]["regressed"] == 12
    changes = {(f["benchmark"], f["params"].get("m"), f["metric"]): f["changes"]
               for f in out["figures"]}  # fmt: skip
    common = ["pytorch: 2.12.0+cpu → 2.13.0+cpu", f"dlsuite: 0.1.0@{2:040x} → 0.1.0@{3:040x}"]
    assert changes[("gemm", 256, "time")] == [*common, "torch threads: 2 → 1"]
    assert changes[("gemm", 512, "flop_rate")] == [*common, "backend: local → apptainer"]
    assert changes[("softmax", None, "time")] == common
    text = hist(store, "check")
    assert text.returncode == 1
    common_text = "; ".join(common)
    assert (
        f"measured with, unlike the newest baseline: {common_text}; torch threads: 2 → 1 (4 "
        "regressed or improved figure(s): gemm 256x256x256 fp32)" in text.stdout
    ), text.stdout
    assert f"baseline: {common_text} (4 regressed or improved figure(s): softmax" in text.stdout
    # the same framework and setup again: only the suite's commit differs
    assert hist(store, "import", str(make_run(root, "r4", 4, records=new))).returncode == 0
    again = jhist(store, "check", "--all")
    assert {tuple(f["changes"]) for f in again["figures"]} == {
        (f"dlsuite: 0.1.0@{3:040x} → 0.1.0@{4:040x}",)
    }
    assert again["counts"]["regressed"] == 0


def test_check_flags_a_collective_sweep_that_timed_out(tmp_path: Path) -> None:
    """`dlsuite history check` after a run whose allreduce sweep timed out: the sweep's one
    record carries the task's parameters (sizes [...]), which no earlier record has, so it read
    "no history" and the check passed; it is a status regression against the sizes it covers."""
    from suite.levels.distributed import arithmetic as A

    def point(size: int) -> dict[str, Any]:
        n = A.element_count("allreduce", size, 2)
        rec = S.collective_record(message_bytes=n * 4, world_size=2, rank=None)
        rec["benchmark"]["params"] = {
            "message_bytes": n * 4,
            "elements": n,
            "requested_bytes": size,
        }
        return rec

    sizes = [1024, 1 << 20]
    timeout = S.failed_record(
        "allreduce", status="timeout", level="distributed", params={"sizes": sizes},
        world_size=2,
    )  # fmt: skip
    root, store = tmp_path / "runs", tmp_path / "h.sqlite"
    dirs = [make_run(root, "a", 1, records=[point(s) for s in sizes]),
            make_run(root, "b", 2, records=[timeout])]  # fmt: skip
    assert hist(store, "import", *map(str, dirs)).returncode == 0
    res = hist(store, "check")
    assert res.returncode == 1, res.stdout
    doc = jhist(store, "check")
    assert [s["status"] for s in doc["status_regressions"]] == ["timeout"]
    assert not doc["no_history"]


def test_a_newest_run_that_timed_out_is_in_the_trend_and_show(tmp_path: Path) -> None:
    """The task timed out in the newest run: trend and show say so, not only the last value."""
    root, store = tmp_path / "runs", tmp_path / "h.sqlite"
    softmax = S.operator_record(
        "softmax", {"rows": 512, "cols": 64}, time_s=3e-5, flops=5 * 512 * 64
    )
    gemm = S.operator_record(
        "gemm", {"m": 96, "n": 80, "k": 64}, time_s=2.5e-5, flops=2 * 96 * 80 * 64
    )
    timeout = S.failed_record("gemm", status="timeout", params={"m": 96, "n": 80, "k": 64})
    timeout["rank"] = 0
    timeout["device"] = None  # it ended before the device was set up, as a real timeout does
    timeout["reason"] = "task exceeded its timeout of 3 s; the worker was terminated"
    dirs = [
        make_run(root, "mon", 1, records=[gemm, softmax]),
        make_run(root, "tue", 2, records=[S.scaled(gemm, 1.02), softmax]),
        make_run(root, "wed", 3, records=[timeout, softmax]),
    ]
    assert hist(store, "import", *map(str, dirs)).returncode == 0
    [trend] = jhist(store, "trend", "--benchmark", "gemm", "--metric", "time")
    assert [p["run_id"] for p in trend["points"]] == ["mon", "tue"]
    assert [(n["run_id"], n["status"]) for n in trend["not_ok"]] == [("wed", "timeout")]
    [other] = jhist(store, "trend", "--benchmark", "softmax", "--metric", "time")
    assert other["not_ok"] == []  # another task's timeout is not this one's
    text = hist(store, "trend", "--benchmark", "gemm", "--metric", "time").stdout
    assert "(then timeout in run wed)" in " ".join(text.split())
    show = hist(store, "show", "--benchmark", "gemm", "--metric", "time").stdout
    row = next(line for line in show.splitlines() if " wed " in line)
    assert row.split("│")[1].strip() == "3" and "timeout" in row
    # a window that starts after the timeout does not carry it
    assert jhist(store, "trend", "--benchmark", "softmax", "--last", "1")[0]["not_ok"] == []


def test_plot_names_the_runs_on_its_x_axis_as_the_report_does(tmp_path: Path) -> None:
    """The x axis is a run number; `history plot` prints which run each number is, and the
    report's table numbers the plotted runs, not those of figures left out of the plot."""
    from suite.history.report import MAX_SERIES

    root, store = tmp_path / "runs", tmp_path / "h.sqlite"
    shapes = [
        S.operator_record("gemm", {"m": 16 * (i + 1), "n": 8, "k": 8}, time_s=1e-6 * (i + 1))
        for i in range(MAX_SERIES + 1)
    ]
    kept, odd = shapes[:MAX_SERIES], shapes[MAX_SERIES]
    dirs = [
        make_run(root, "first", 1, records=[*kept, odd]),
        make_run(root, "only-odd", 2, records=[odd]),  # its one figure is left out of the plot
        make_run(root, "second", 3, records=kept),
        make_run(root, "third", 4, records=kept),
    ]
    assert hist(store, "import", *map(str, dirs)).returncode == 0
    res = hist(store, "plot", "--out", str(tmp_path / "t.png"), "--metric", "time")
    assert res.returncode == 0, res.stderr
    assert f"{MAX_SERIES} figure(s)" in res.stdout and "1 more figure(s) match" in res.stdout
    key = [line.split("│")[1:4] for line in res.stdout.splitlines() if line.startswith("│")]
    assert [(n.strip(), rid.strip()) for n, _, rid in key] == [
        ("1", "first"), ("2", "second"), ("3", "third")
    ]  # fmt: skip
    out = tmp_path / "rep"
    assert main("report", str(dirs[-1]), "--format", "md", "--out", str(out),
                "--history", str(store)).returncode == 0  # fmt: skip
    md = (out / "report.md").read_text()
    axis = md[md.index("the runs on the x axis") :]
    assert "| 2 | 2026-01-03 10:00 | second |" in axis and "only-odd" not in axis


def test_the_report_history_section_names_what_did_not_run(tmp_path: Path) -> None:
    """A run whose conv2d failed: the History section said only that no figure of the run had
    a trend, though conv2d had two runs in the store; it now says where those runs are."""
    root, store = tmp_path / "runs", tmp_path / "h.sqlite"
    conv = S.operator_record("conv2d", {"batch": 2, "in_channels": 3, "height": 9, "width": 9,
                                        "out_channels": 4, "kernel": 3, "stride": 1, "padding": 0,
                                        "direction": "forward"})  # fmt: skip
    broken = S.failed_record("conv2d", params=conv["benchmark"]["params"])
    dirs = [make_run(root, "r1", 1, records=[conv]), make_run(root, "r2", 2, records=[conv]),
            make_run(root, "r3", 3, records=[broken])]  # fmt: skip
    assert hist(store, "import", *map(str, dirs)).returncode == 0
    out = tmp_path / "rep"
    assert main("report", str(dirs[-1]), "--format", "md", "--out", str(out),
                "--history", str(store)).returncode == 0  # fmt: skip
    md = (out / "report.md").read_text()
    section = md[md.index("## History") :]
    assert "`dlsuite history show --benchmark conv2d` lists every run of their tasks" in section
    assert "No figure measured in these runs (status ok) has two or more runs" in section


def test_list_for_a_host_without_runs_says_which_hosts_have_some(tmp_path: Path) -> None:
    store = tmp_path / "h.sqlite"
    run = make_run(tmp_path / "runs", "gpu-node-run", 1, host="gn07")
    assert hist(store, "import", str(run)).returncode == 0
    res = hist(store, "list", "--host", "gn7")  # a typo of the node's name
    assert res.returncode == 0
    assert " ".join(res.stdout.split()) == (
        f"no runs on host gn7 in {store} (it holds runs of: gn07)"
    )


def test_check_of_a_run_that_did_not_finish_says_so(tmp_path: Path) -> None:
    root, store = tmp_path / "runs", tmp_path / "h.sqlite"
    gelu = S.operator_record("gelu", {"rows": 40, "cols": 40}, time_s=3e-6, flops=8 * 1600)
    first = make_run(root, "sun", 1, records=[gelu])
    cut = make_run(root, "mon", 2, records=[gelu])
    manifest = json.loads((cut / "manifest.json").read_text())
    manifest["state"] = "interrupted"
    (cut / "manifest.json").write_text(json.dumps(manifest))
    assert hist(store, "import", str(first), str(cut)).returncode == 0
    res = hist(store, "check")
    out = " ".join(res.stdout.split())
    assert res.returncode == 0, res.stdout
    assert "run mon did not finish (state interrupted): the tasks it has no record of" in out
    assert f"`dlsuite report {cut}` lists them" in out
    assert "did not finish" not in " ".join(hist(store, "check", "--run", "sun").stdout.split())
