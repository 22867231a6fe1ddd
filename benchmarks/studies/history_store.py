"""How the history store (suite/history/) scales: a year of weekly runs, each with many
records, then the queries ``dlsuite history`` makes, and many processes appending at once.

    python -m benchmarks.studies.history_store [--runs 52] [--records 250] [--writers 12] [--dir DIR]

The runs are synthetic (tests/synthetic.py: operator records with 4 metrics and 2 correctness
checks, a skipped record every 10th) written as run directories, so the import reads and
validates them as ``dlsuite history import`` does. Prints the times and the store's size.
"""

from __future__ import annotations

import argparse
import copy
import json
import multiprocessing
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from suite.history import analysis, ingest
from suite.history import store as history_store
from tests import synthetic as S


def make_runs(root: Path, runs: int, per_run: int) -> list[Path]:
    template = [
        S.operator_record("gemm", {"m": 64 * (i + 1), "n": 256, "k": 256})
        if i % 10
        else S.skipped_record(params={"m": 64 * (i + 1)})
        for i in range(per_run)
    ]
    dirs = []
    for r in range(runs):
        started = f"2026-{1 + r // 28:02d}-{1 + r % 28:02d}T10:00:00.000+00:00"
        recs = []
        for t in template:
            rec = S.scaled(t, 1 + 0.003 * (r % 7)) if t["status"] == "ok" else copy.deepcopy(t)
            rec.update(run_id=f"run{r:03d}", started_at=started)
            recs.append(rec)
        d = root / f"run{r:03d}"
        d.mkdir(parents=True)
        (d / "results.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
        (d / "manifest.json").write_text(json.dumps({"run_id": f"run{r:03d}", "created_at": started,
                                                     "host": "node01", "state": "finished"}))  # fmt: skip
        dirs.append(d)
    return dirs


def _append(store: str, run_dir: str, barrier: Any) -> None:
    barrier.wait()
    with history_store.HistoryStore(Path(store)) as s:
        s.add_run_dir(Path(run_dir))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=52)
    ap.add_argument("--records", type=int, default=250)
    ap.add_argument("--writers", type=int, default=12)
    ap.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    args = ap.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="dlsuite-history-bench-"))
    try:
        dirs = make_runs(root / "runs", args.runs, args.records)
        store = root / "history.sqlite"
        t0 = time.perf_counter()
        with history_store.HistoryStore(store) as s:
            report = ingest.import_runs(s, dirs)
        t_import = time.perf_counter() - t0
        n_rec = sum(a.records for a in report.added)
        print(f"import: {len(dirs)} runs, {n_rec} records in {t_import:.1f} s "
              f"({t_import / len(dirs) * 1e3:.0f} ms per run, validation included); "
              f"store {store.stat().st_size / 1e6:.1f} MB")  # fmt: skip
        with history_store.HistoryStore(store, create=False) as s:
            t0 = time.perf_counter()
            trs = analysis.trends(
                s.records(benchmarks=["gemm"], metrics=["time"]), metrics=["time"], last=20
            )
            t_trend = time.perf_counter() - t0
            t0 = time.perf_counter()
            runs = s.runs()
            chk = analysis.check_run(s, runs[-1], s.records(run_id=runs[-1].run_id), last=5)
            t_check = time.perf_counter() - t0
            t0 = time.perf_counter()
            one = analysis.trends(s.records(benchmarks=["gemm"]), params={"m": "128"}, last=20)
            t_one = time.perf_counter() - t0
        print(f"trend of every gemm time figure ({len(trs)} figures): {t_trend:.2f} s; "
              f"one parameter set, every metric ({len(one)} figures): {t_one:.2f} s; "
              f"check of the newest run against its last 5 ({len(chk.figures)} figures): "
              f"{t_check:.2f} s")  # fmt: skip
        ctx = multiprocessing.get_context("fork")
        barrier = ctx.Barrier(args.writers)
        extra = make_runs(root / "more", args.writers, args.records)
        for i, d in enumerate(extra):  # new run ids
            text = (d / "results.jsonl").read_text().replace(d.name, f"w{i}")
            (d / "results.jsonl").write_text(text)
            (d / "manifest.json").write_text(json.dumps({"run_id": f"w{i}", "host": "node01"}))
        procs = [ctx.Process(target=_append, args=(str(store), str(d), barrier)) for d in extra]
        t0 = time.perf_counter()
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        t_conc = time.perf_counter() - t0
        with sqlite3.connect(store) as db:
            landed = db.execute("SELECT count(*) FROM runs WHERE run_id LIKE 'w%'").fetchone()[0]
            ok = db.execute("PRAGMA integrity_check").fetchone()[0]
        print(f"{args.writers} processes appending at once ({args.records} records each): "
              f"{landed} landed, exit codes {sorted({p.exitcode for p in procs})}, "
              f"{t_conc:.1f} s, integrity {ok}")  # fmt: skip
        return 0 if landed == args.writers and ok == "ok" else 1
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
