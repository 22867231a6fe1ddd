"""`dlsuite project` on a real run: a 2-rank quick distributed run (the allreduce sweep and the
MLP's data-parallel training, gloo on the CPU through torchrun) projected to 1, 2 and 4 ranks,
and the report drawing the projection section. About a minute on 2 cores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import FAST_MEASURE, cli, export_torch_model, records

pytestmark = [pytest.mark.pytorch, pytest.mark.slow]

#: what a loaded machine may leave a case with instead of a projection: its one-rank record
#: slower than two ranks' compute, its one-rank records too noisy to give a compute, or a step
#: shorter than its compute measured at two ranks and the exchange the model gives it
UNDER_LOAD = ("1 rank slower than 2", "the one-rank compute is uncertain", "the step (")


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
    recs = records(two_rank_run)
    busy = any((r["telemetry"].get("quiet") or {}).get("quiet") is False for r in recs)
    proc = cli("project", str(two_rank_run), "--ranks", "1,2,4", "--out", str(out), timeout=300)
    # a CI machine is often busy: then every row says so and nothing is projected (exit 2)
    assert proc.returncode == (2 if busy else 0), proc.stdout[-3000:] + proc.stderr[-3000:]
    if busy:
        assert "quiet check called busy" in proc.stdout
    proc = cli("project", str(two_rank_run), "--ranks", "1,2,4", "--out", str(out),
               "--accept-busy", "--details", timeout=300)  # fmt: skip
    doc = json.loads(out.read_text())
    # under load the one-rank record can be slower than two ranks' compute, or too noisy to
    # fit: those rows say so and are not projected (exit 2 if none is); nothing else may stop a row
    cannot = [r["cannot_fit"] for r in doc["projections"] if "cannot_fit" in r]
    assert all(c.startswith(UNDER_LOAD) for c in cannot), cannot
    projected = [r for r in doc["projections"] if "step_s" in r]
    assert proc.returncode == (0 if projected else 2), proc.stdout[-3000:] + proc.stderr[-3000:]
    sweep = [r for r in recs if r["benchmark"]["name"] == "allreduce"]
    assert len(sweep) == 5, sweep  # the quick sweep's five sizes
    ok = [r for r in sweep if r["status"] == "ok" and r["correctness"]["passed"]]
    (link,) = [lf for lf in doc["links"] if lf["op"] == "allreduce"]
    assert (link["framework"], link["backend"], link["scope"]) == ("pytorch", "gloo", "intra")
    assert link["world_sizes"] == [2] and link["points"] == len(ok), (link, doc["records_not_used"])
    ring = link["algorithms"]["ring"]
    assert ring["latency_s"] > 0 and ring["bandwidth_bytes_per_s"] > 0
    rows = [r for r in doc["projections"] if r["benchmark"] == "data_parallel" and "step_s" in r]
    assert all(bool(r.get("busy")) == busy for r in rows)
    trained = {r["benchmark"]["params"]["scaling"] for r in recs
               if r["benchmark"]["name"] == "data_parallel" and r["status"] == "ok"}  # fmt: skip
    assert trained == {"strong", "weak"}, [r.get("reason") for r in recs if r["status"] != "ok"]
    assert {r["scaling"] for r in rows} | {
        r["scaling"] for r in doc["projections"] if "cannot_fit" in r
    } == trained
    for r in rows:
        assert r["network"].startswith("mlp")
        assert r["fitted_from"] and any("allreduce" in f for f in r["fitted_from"])
        lo, hi = r["step_s_band"]
        assert 0 < lo <= r["step_s"] <= hi
        assert r["overhead_s"] >= 0 and 0 < r["scaling_efficiency"] <= 1.0 + 1e-9
        if r["ranks"] == 2:
            # the 2-rank record is measured and fitted: the model reproduces it, to 1% or within
            # the noise the fit allowed it (its and the one-rank compute's intervals)
            assert r["measured"]["in_fit"] is True, r
            (fit,) = r["model_error"]["in_sample"]
            assert fit["record"] == r["measured"]["record"], (fit, r["measured"])
            assert abs(fit["error"]) <= max(0.01, fit["noise"]), r["model_error"]
            # the row's throughput error is the same miss, seen from the throughput (its median)
            err = r["measured"]["throughput_error"]
            assert err == pytest.approx(1.0 / (1.0 + fit["error"]) - 1.0, abs=0.01)
        if r["ranks"] == 4:
            assert r["oversubscribed"] is True  # 4 single-thread ranks on 2 cores
            assert "measured" not in r
        assert r["model_error"]["collective_fit_rms"] is not None
    # --details prints the predicted-vs-measured error beside the compact table
    if rows:
        assert "predicted vs measured" in proc.stdout


def test_report_draws_the_projection(two_rank_run: Path, tmp_path: Path) -> None:
    proc = cli("report", str(two_rank_run), "--format", "md", "--out", str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    md = (tmp_path / "report.md").read_text()
    if "## Projection to other rank counts" not in md:
        # nothing projected (a busy CI machine): the section is one line, with its reason, in
        # the report's last section ("Sections with nothing to show")
        line = next(ln for ln in md.splitlines() if "Projection to other rank counts: " in ln)
        assert "No projection: " in line, line
        assert any(why in line for why in ("busy", *UNDER_LOAD)), line
        return
    section = md.split("## Projection to other rank counts", 1)[1].split("\n## ", 1)[0]
    assert "mlp" in section and "data_parallel" in section
    # under load a case left without a projection (UNDER_LOAD) is said, not drawn; every other
    # case is drawn
    drawn = "report_plots/" in section and "projection-" in section
    assert drawn or any(why in section for why in UNDER_LOAD), section


def test_data_parallel_bucket_on_two_ranks(tmp_path: Path) -> None:
    """The data_parallel benchmark's bucket, for real: DDP over gloo on 2 ranks with 64 KiB
    buckets (the MLP's 104 KB of gradients in two messages) trains exactly as one process
    does, and the record carries its bucket; the projection reads it."""
    config = tmp_path / "bucket.toml"
    config.write_text(
        "[measure]\ntime_budget_s = 0.25\nwarmup_s = 0.05\n"
        "[distributed.data_parallel]\n"
        'sizes = [{ network = "mlp", scaling = "weak", batch = 24, bucket = 65536 }]\n',
        encoding="utf-8",
    )
    out = tmp_path / "run"
    proc = cli(
        "run", "--level", "distributed", "--framework", "pytorch", "--device", "cpu",
        "--world-size", "2", "--benchmark", "allreduce,data_parallel", "--quick",
        "--config", str(config), "--out", str(out), timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    dp = [r for r in records(out) if r["benchmark"]["name"] == "data_parallel"]
    two = next(r for r in dp if r["world_size"] == 2)
    assert two["status"] == "ok" and two["correctness"]["passed"], two.get("correctness")
    assert two["benchmark"]["params"]["bucket"] == 65536
    assert (
        two["work"]["bucket_bytes"] == 65536 and "bucket_cap_mb" in two["work"]["bucket_mechanism"]
    )
    doc_path = tmp_path / "p.json"
    cli("project", str(out), "--ranks", "2", "--accept-busy", "--out", str(doc_path), timeout=300)
    doc = json.loads(doc_path.read_text())
    row = next(r for r in doc["projections"] if r["ranks"] == 2 and r["bucket_bytes"] == 65536)
    assert "bucket 0.0625 MiB" in row["case"]
    if "step_s" in row:
        assert row["messages_per_step"] == 2


def test_a_users_model_trains_data_parallel_and_projects(tmp_path: Path) -> None:
    """A user's file (exported by torch.onnx, not the zoo's) through the distributed level: its
    data-parallel training at 1 and 2 ranks (the rate the ranks agreed by the range check, the
    single-process check on the global batch), then its projection with its gradient counted as
    the importer trains it."""
    from suite.levels.network.run import LR_CANDIDATES
    from suite.levels.network.workload import file_digest
    from suite.onnx.importer import ImportedGraph
    from suite.onnx.zoo import load_user_model

    path = tmp_path / "exported.onnx"
    export_torch_model(path)
    out = tmp_path / "run"
    proc = cli(
        "run", "--level", "distributed", "--framework", "pytorch", "--device", "cpu", "--quick",
        "--world-size", "2", "--benchmark", "allreduce,data_parallel", "--model", str(path),
        "--batch", "4", "--config", str(FAST_MEASURE), "--out", str(out), timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    dp = [r for r in records(out) if r["benchmark"]["name"] == "data_parallel"]
    assert sorted(r["world_size"] for r in dp) == [1, 2]
    for r in dp:
        assert r["status"] == "ok" and r["correctness"]["passed"], r.get("reason")
        assert r["benchmark"]["params"]["model"] == str(path.resolve())
        assert r["work"]["model_sha256"] == file_digest(str(path))
        check = r["work"]["lr_range_check"]
        assert check["chosen"] in LR_CANDIDATES and check["chosen"] <= check["this_rank_chose"]
    (two,) = [r for r in dp if r["world_size"] == 2]
    names = {c["name"] for c in two["correctness"]["checks"]}
    assert "rank1.weights_identical_across_ranks.max_rel_diff" in names
    # the exported model has no batch norm left (folded in inference mode): checked on itself
    assert "rank0.equals_single_process_on_global_batch[onnx].l2_rel_error" in names

    doc_path = tmp_path / "projection.json"
    proc = cli("project", str(out), "--ranks", "2,8", "--accept-busy", "--out", str(doc_path),
               timeout=300)  # fmt: skip
    doc = json.loads(doc_path.read_text())
    rows = [r for r in doc["projections"] if r["benchmark"] == "data_parallel"]
    assert rows and all(r["network"] == "exported.onnx" for r in rows), rows
    cannot = [r["cannot_fit"] for r in rows if "cannot_fit" in r]
    assert all(c.startswith(UNDER_LOAD) for c in cannot), cannot
    projected = [r for r in rows if "step_s" in r]
    assert proc.returncode == (0 if projected else 2), proc.stdout[-3000:] + proc.stderr[-3000:]
    trained = sum(v.size for v in ImportedGraph(load_user_model(str(path))).params.values())
    for r in projected:
        assert r["gradient_bytes"] == 4 * trained
        assert 0 < r["scaling_efficiency"] <= 1.0 + 1e-9
