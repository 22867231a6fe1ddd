"""The training level's loaders for real, through ``dlsuite run``: one loader per framework
environment on a reduced dataset (96 JPEGs of 6 classes, made on first use in the data dir,
each packed format by its framework's writer inside the worker), cold and warm, every check
passing; a corrupt JPEG in a user's folder counted, not a crash; the quiet check's storage
readings of the task's data in the record, with a real competing reader flagged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from suite import cli
from suite.datasets import make as M
from suite.results import noisy
from tests.unit.test_quiet_storage import Competitor

SMALL = {"images": 96, "classes": 6, "batch": 16}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("training-data")


def run(tmp: Path, data_dir: Path, framework: str, sizes: list[dict[str, Any]],
        *more: str, benchmark: str = "loader") -> list[dict[str, Any]]:  # fmt: skip
    conf = tmp / "c.toml"
    rows = ", ".join("{" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in s.items()) + "}"
                     for s in sizes)  # fmt: skip
    conf.write_text(f"[training.{benchmark}]\nsizes = [{rows}]\n")
    out = tmp / f"run-{framework}"
    code = cli.main(["run", "--level", "training", "--framework", framework, "--config",
                     str(conf), "--out", str(out), "--data-dir", str(data_dir),
                     "--benchmark", benchmark, *more])  # fmt: skip
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert code == 0, [(r["status"], r.get("reason")) for r in records]
    return records


def assert_all_ok(records: list[dict[str, Any]]) -> None:
    for r in records:
        assert r["status"] == "ok", r.get("reason")
        failed = [c for c in r["correctness"]["checks"] if not c["passed"]]
        assert not failed, failed
        assert r["pipeline"]["dataset"]["samples"] == SMALL["images"]
        names = {m["name"] for m in r["metrics"]}
        assert {"throughput", "read_rate", "time_to_first_batch", "pipeline_cpu_cores",
                "storage_read", "feeding_capacity"} <= names  # fmt: skip
        assert r["pipeline"]["feeding"][0]["accelerator"] == "H100"
        # storage_read is the dataset's bytes, not the modules fresh loader workers re-read
        cache = r["pipeline"]["cache"]
        read = next(m for m in r["metrics"] if m["name"] == "storage_read")["value"]
        assert read == pytest.approx(cache["dataset_read_bytes"] / 1e6)
        assert read <= cache["read_bytes_from_storage"] / 1e6
        quiet = r["telemetry"]["quiet"]
        assert quiet["readings"]["storage"]["paths"], "the quiet check read the data's storage"
        # one epoch's interval is judged against the pipeline's target: a wide one is noisy
        m = r["measurement"]
        assert m["target_ci_rel"] == 0.25 and m["ci_rel_width"] is not None
        assert (noisy(r) is not None) == (m["ci_rel_width"] > 0.25)


@pytest.mark.pytorch
def test_pytorch_folder_and_webdataset_cold_and_warm(tmp_path: Path, data_dir: Path) -> None:
    recs = run(tmp_path, data_dir, "pytorch", [
        {"format": "folder", "workers": 2, "cache": "cold", **SMALL},
        {"format": "webdataset", "workers": 1, "cache": "warm", **SMALL},
    ])  # fmt: skip
    assert_all_ok(recs)
    cold = recs[0]["pipeline"]["cache"]
    assert cold["eviction"]["verified"] and cold["share_from_storage"] > 0.8
    assert recs[1]["pipeline"]["cache"]["share_from_storage"] < 0.05


@pytest.mark.tensorflow
def test_tensorflow_tf_data_over_tfrecord(tmp_path: Path, data_dir: Path) -> None:
    assert_all_ok(run(tmp_path, data_dir, "tensorflow",
                      [{"format": "tfrecord", "workers": 2, "cache": "cold", **SMALL}]))  # fmt: skip


@pytest.mark.mxnet
def test_mxnet_image_record_iter_declares_its_padding(tmp_path: Path, data_dir: Path) -> None:
    recs = run(tmp_path, data_dir, "mxnet",
               [{"format": "recordio", "workers": 1, "cache": "cold", **SMALL}])  # fmt: skip
    assert_all_ok(recs)
    once = next(
        c for c in recs[0]["correctness"]["checks"] if c["name"] == "exactly_once_per_epoch"
    )
    # 96 samples in batches of 16: no padding; the check still saw every id once per epoch
    assert once["detail"]["expected"] == 96


@pytest.mark.slow
def test_jax_grain_over_the_folder(tmp_path: Path, data_dir: Path) -> None:
    assert_all_ok(run(tmp_path, data_dir, "jax",
                      [{"format": "folder", "workers": 1, "cache": "warm", **SMALL}]))  # fmt: skip


@pytest.mark.pytorch
def test_a_corrupt_jpeg_is_counted_not_a_crash(tmp_path: Path, data_dir: Path) -> None:
    ds = M.make_imagefolder(data_dir, "quick", classes=SMALL["classes"], images=SMALL["images"])
    user = tmp_path / "mine"
    shutil.copytree(ds.folder, user)
    victim = sorted(user.rglob("*.JPEG"))[5]
    victim.write_bytes(victim.read_bytes()[:300])  # truncated mid-scan
    recs = run(tmp_path, data_dir, "pytorch",  # batch 8: the 96 images give 10 batches or more
               [{"format": "folder", "workers": 1, "cache": "warm", "batch": 8}],
               "--data", str(user))  # fmt: skip
    r = recs[0]
    assert r["status"] == "ok" and r["correctness"]["passed"]
    assert r["pipeline"]["corrupt"]["count"] == 1
    assert r["pipeline"]["corrupt"]["files"] == [str(victim.relative_to(user))]
    assert r["benchmark"]["params"]["data"] == str(user)


@pytest.mark.pytorch
def test_pytorch_feeds_a_resnet_end_to_end_and_the_report_shows_both(
    tmp_path: Path, data_dir: Path
) -> None:
    feed_dir, load_dir = tmp_path / "feed", tmp_path / "load"
    feed_dir.mkdir()
    load_dir.mkdir()
    recs = run(
        feed_dir, data_dir, "pytorch",
        [{"format": "folder", "workers": 1, "network": "resnet18", "width": 4, "steps": 3,
          "warmup": 1, **SMALL}],
        benchmark="feed",
    )  # fmt: skip
    r = recs[0]
    assert r["status"] == "ok" and r["correctness"]["passed"]
    e2e = r["end_to_end"]
    assert 0.0 <= e2e["input_bound_share"] <= 1.0 and e2e["step_s_fed"] > 0
    assert e2e["resolution"] == 224
    run(load_dir, data_dir, "pytorch",
        [{"format": "folder", "workers": w, "cache": "warm", **SMALL} for w in (0, 1)])  # fmt: skip
    assert cli.main(["report", str(feed_dir / "run-pytorch"), str(load_dir / "run-pytorch"),
                     "--format", "md", "--out", str(tmp_path / "rep")]) == 0  # fmt: skip
    md = (tmp_path / "rep" / "report.md").read_text()
    section = md.split("## Training level: the input pipeline", 1)[1].split("\n## ", 1)[0]
    assert "### Loaders" in section and "### Feeding capacity" in section
    assert "this machine: pytorch resnet18" in section  # the run's own training rate
    assert "### End to end" in section and "training_loader_workers" in section


@pytest.mark.pytorch
def test_a_competing_reader_is_in_the_records_storage_findings(tmp_path: Path,
                                                               data_dir: Path) -> None:  # fmt: skip
    blob = data_dir / "competitor.bin"
    with blob.open("wb") as fh:
        fh.write(b"\0" * (64 << 20))
    proc = Competitor(blob, "read")
    try:
        recs = run(tmp_path, data_dir, "pytorch",
                   [{"format": "folder", "workers": 1, "cache": "warm", **SMALL}])  # fmt: skip
    finally:
        proc.stop()
    quiet = recs[0]["telemetry"]["quiet"]
    found = [f for f in quiet["findings"] if f["check"] == "storage_device_busy" and f["busy"]]
    assert found, quiet["findings"]
    assert proc.pid in {p["pid"] for p in found[0]["evidence"]["processes"]}


@pytest.mark.pytorch
def test_two_ranks_read_their_shards_exactly_once_together(tmp_path: Path,
                                                           data_dir: Path) -> None:  # fmt: skip
    recs = run(tmp_path, data_dir, "pytorch",
               [{"format": "folder", "workers": 1, "cache": "warm", **SMALL}],
               "--world-size", "2")  # fmt: skip
    r = recs[0]
    assert r["status"] == "ok" and r["world_size"] == 2 and r["correctness"]["passed"]
    names = {c["name"] for c in r["correctness"]["checks"]}
    assert {"rank0.exactly_once_across_ranks", "rank1.exactly_once_in_this_rank"} <= names
    ranks = r["pipeline"]["ranks"]
    assert set(ranks["per_rank_rate"]) == {"0", "1"}
    assert ranks["aggregate_rate"] == pytest.approx(sum(ranks["per_rank_rate"].values()))


@pytest.mark.pytorch
def test_two_cold_ranks_evict_before_either_reads(tmp_path: Path, data_dir: Path) -> None:
    """Every rank of a cold task evicts, then waits for the others before its clock starts:
    no rank's eviction drops what another has read (each reads its half once, not more)."""
    recs = run(tmp_path, data_dir, "pytorch",
               [{"format": "folder", "workers": 1, "cache": "cold", **SMALL}],
               "--world-size", "2")  # fmt: skip
    r = recs[0]
    assert r["status"] == "ok" and r["correctness"]["passed"], r["correctness"]
    eviction = r["pipeline"]["cache"]["eviction"]
    assert eviction["verified"]
    assert eviction["ranks_evicted"]["ranks"] == [0, 1] and not eviction["ranks_evicted"]["missing"]
    # both ranks on this node: their cold read is judged together, by rank 0
    names = {c["name"] for c in r["correctness"]["checks"]}
    assert "rank0.cold_read_from_storage_across_ranks" in names, names
    assert not any(n.endswith(".cold_read_from_storage") for n in names), names
    # the files the ranks met through are gone once the task is done
    left = [p.name for p in (tmp_path / "run-pytorch" / "tasks").iterdir()
            if ".evicted.rank" in p.name or ".ids.rank" in p.name]  # fmt: skip
    assert left == [], left
