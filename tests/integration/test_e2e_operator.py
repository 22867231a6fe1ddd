"""`dlsuite run --level operator --framework pytorch --quick` for real, end to end."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import FAST_MEASURE, cli, records

BENCHMARKS = {"gemm", "conv2d", "norm", "softmax", "gelu", "attention"}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    out = tmp_path_factory.mktemp("run") / "quick"
    proc = cli(
        "run",
        "--level",
        "operator",
        "--framework",
        "pytorch",
        "--quick",
        "--device",
        "cpu",
        "--config",
        str(FAST_MEASURE),
        "--out",
        str(out),
    )
    return out, proc


@pytest.mark.pytorch
@pytest.mark.slow
def test_quick_run_writes_valid_passing_records(quick_run: tuple[Path, Any]) -> None:
    out, proc = quick_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = records(out)
    assert {r["benchmark"]["name"] for r in recs} == BENCHMARKS
    # every benchmark at every default dtype; conv2d forward+backward, norm batch+layer
    per = Counter(r["benchmark"]["name"] for r in recs)
    assert per["conv2d"] == 6 and per["norm"] == 6 and per["gemm"] == 3
    assert len({r["task_id"] for r in recs}) == len(recs)
    for r in recs:
        assert r["status"] == "ok", (r["task_id"], r.get("reason"))
        assert r["correctness"]["passed"], r["correctness"]
        names = {m["name"] for m in r["metrics"]}
        assert {"time", "flop_rate", "bandwidth", "percent_of_peak"} <= names
        t = next(m for m in r["metrics"] if m["name"] == "time")
        assert 0 < t["min"] <= t["median"] <= t["max"] and t["n"] >= 3
        assert t["ci95"][0] <= t["median"] <= t["ci95"][1]
        assert r["device"]["kind"] == "cpu" and r["device"]["peak_source"]
        assert r["framework"]["name"] == "pytorch" and r["framework"]["version"].startswith("2.")
        assert r["provenance"]["versions"]["torch"]
        assert r["measurement"]["stop_reason"] in ("ci_target_met", "time_budget", "max_samples")
    # conv2d backward carries its finite-difference gradient checks
    bwd = [
        r
        for r in recs
        if r["benchmark"]["name"] == "conv2d"
        and r["benchmark"]["params"]["direction"] == "backward"
    ]
    assert bwd and all(
        any("central_fd" in c["name"] for c in r["correctness"]["checks"]) for r in bwd
    )


@pytest.mark.pytorch
@pytest.mark.slow
def test_quick_run_validates_and_summarises(quick_run: tuple[Path, Any]) -> None:
    out, proc = quick_run
    v = cli("validate", str(out / "results.jsonl"))
    assert v.returncode == 0 and "records valid" in v.stdout, v.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["state"] == "finished" and manifest["counts"] == {"ok": 24}
    assert len(manifest["tasks"]) == 24
    # the summary table names every benchmark and the correctness verdicts
    for name in BENCHMARKS:
        assert name in proc.stdout
    assert "24 ok, 0 skipped, 0 failed" in proc.stdout


@pytest.mark.pytorch
def test_unsupported_dtype_is_skipped_not_failed(tmp_path: Path) -> None:
    proc = cli(
        "run",
        "--quick",
        "--device",
        "cpu",
        "--benchmark",
        "gemm",
        "--dtype",
        "tf32",
        "--out",
        str(tmp_path / "r"),
    )
    assert proc.returncode == 0, proc.stderr
    (rec,) = records(tmp_path / "r")
    assert rec["status"] == "skipped" and "tf32" in rec["reason"]
    assert cli("validate", str(tmp_path / "r")).returncode == 0


def test_validate_names_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "results.jsonl"
    bad.write_text(json.dumps({"schema_version": "1", "status": "ok"}) + "\n")
    proc = cli("validate", str(bad))
    assert proc.returncode == 2
    assert f"{bad}:1:" in proc.stderr and "Traceback" not in proc.stderr
