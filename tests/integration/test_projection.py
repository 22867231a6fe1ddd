"""`dlsuite project` on a real run: a 2-rank quick distributed run (the allreduce sweep and the
MLP's data-parallel training, gloo on the CPU through torchrun) projected to 1, 2 and 4 ranks,
and the report drawing the projection section. About a minute on 2 cores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import FAST_MEASURE, cli, records

pytestmark = [pytest.mark.pytorch, pytest.mark.slow]


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("projection") / "run"
    proc = cli(
        "run", "--level", "distributed", "--framework", "pytorch", "--device", "cpu",
        "--quick", "--world-size", "2", "--benchmark", "allreduce,data_parallel",
        "--network", "mlp", "--config", str(FAST_MEASURE), "--out", str(out),
        timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def test_project_a_real_two_rank_run(two_rank_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "projection.json"
    proc = cli("project", str(two_rank_run), "--ranks", "1,2,4", "--out", str(out), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    recs = records(two_rank_run)
    sweep = [r for r in recs if r["benchmark"]["name"] == "allreduce"]
    assert len(sweep) == 5, sweep  # the quick sweep's five sizes
    ok = [r for r in sweep if r["status"] == "ok" and r["correctness"]["passed"]]
    (link,) = [lf for lf in doc["links"] if lf["op"] == "allreduce"]
    assert (link["framework"], link["backend"], link["scope"]) == ("pytorch", "gloo", "intra")
    assert link["world_sizes"] == [2] and link["points"] == len(ok), (link, doc["records_not_used"])
    ring = link["algorithms"]["ring"]
    assert ring["latency_s"] > 0 and ring["bandwidth_bytes_per_s"] > 0
    rows = [r for r in doc["projections"] if r["benchmark"] == "data_parallel"]
    trained = {r["benchmark"]["params"]["scaling"] for r in recs
               if r["benchmark"]["name"] == "data_parallel" and r["status"] == "ok"}  # fmt: skip
    assert trained == {"strong", "weak"}, [r.get("reason") for r in recs if r["status"] != "ok"]
    assert {r["scaling"] for r in rows} == trained
    for r in rows:
        assert r["network"].startswith("mlp")
        assert r["fitted_from"] and any("allreduce" in f for f in r["fitted_from"])
        lo, hi = r["step_s_band"]
        assert 0 < lo <= r["step_s"] <= hi
        if r["ranks"] == 2:
            # the 2-rank record is measured and fitted: the model reproduces it
            assert r["measured"]["in_fit"] is True, r
            assert abs(r["measured"]["throughput_error"]) < 0.01, r["model_error"]
        if r["ranks"] == 4:
            assert r["oversubscribed"] is True  # 4 single-thread ranks on 2 cores
            assert "measured" not in r
        assert r["model_error"]["collective_fit_rms"] is not None
    # the table prints the predicted-vs-measured error with the projection
    assert "predicted vs measured" in proc.stdout


def test_report_draws_the_projection(two_rank_run: Path, tmp_path: Path) -> None:
    proc = cli("report", str(two_rank_run), "--format", "md", "--out", str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    md = (tmp_path / "report.md").read_text()
    section = md.split("## Projection to other rank counts", 1)[1].split("\n## ", 1)[0]
    assert "mlp" in section and "data_parallel" in section
    assert "report_plots/" in section and "projection-" in section
