"""The packed formats, each written by its own framework's writer in its environment and then
read back independently of the writer's own check: TFRecord by ``tf.data`` in the TensorFlow
environment, RecordIO by ``mx.recordio`` in the MXNet environment, WebDataset shards by
Python's ``tarfile`` (no framework at all). Every record once, its bytes identical to the
source JPEG, its label the folder's."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from suite import envs
from suite.datasets import formats as F
from suite.datasets import layout as L
from suite.datasets import make as M
from suite.errors import ConfigError
from tests.helpers import ROOT


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> M.Dataset:
    root = tmp_path_factory.mktemp("formats")
    return M.make_imagefolder(root, "quick", seed=11, classes=5, images=60, workers=2)


def source_truth(ds: M.Dataset) -> dict[str, tuple[str, int]]:
    """base name -> (sha256 of the JPEG, label), from the folder itself."""
    out = {}
    for rel, label in M.file_list(ds):
        data = (ds.folder / rel).read_bytes()
        out[Path(rel).name] = (hashlib.sha256(data).hexdigest(), label)
    return out


def run_in(framework: str, code: str) -> list[list[object]]:
    env = envs.ensure(framework)
    proc = subprocess.run(
        [str(env.python), "-c", code],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows: list[list[object]] = json.loads(proc.stdout.strip().splitlines()[-1])
    return rows


def check_rows(rows: list[list[object]], truth: dict[str, tuple[str, int]]) -> None:
    names = [str(r[0]) for r in rows]
    assert sorted(names) == sorted(truth), "every image exactly once"
    for name, digest, label in rows:
        assert (digest, label) == truth[str(name)], name


def check_entry(ds: M.Dataset, fmt: str, records: int) -> dict[str, object]:
    entry: dict[str, object] = ds.manifest["formats"][fmt]
    assert entry["records"] == records and entry["read_back"]["passed"]  # type: ignore[index]
    on_disk = M.scan_sizes(ds.path / fmt)
    assert entry["bytes"] == sum(n for _, n in on_disk) and entry["digest"] == M.list_digest(
        on_disk
    )
    assert not list(ds.path.glob(f".{fmt}*")), "no temporary directory or plan left"
    return entry


@pytest.mark.tensorflow
def test_tfrecord_written_by_tensorflow_reads_back_identical(dataset: M.Dataset) -> None:
    ds = F.add_format(dataset, "tfrecord")
    entry = check_entry(ds, "tfrecord", 60)
    assert entry["shards"] == F.MIN_SHARDS
    assert "tensorflow" in entry["writer"]  # type: ignore[operator]
    shards = sorted(str(p) for p in (ds.path / "tfrecord").iterdir())
    assert Path(shards[0]).name == "train-00000-of-00008"
    code = f"""
import hashlib, json, tensorflow as tf
spec = {{"image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/filename": tf.io.FixedLenFeature([], tf.string)}}
rows = []
for r in tf.data.TFRecordDataset({shards!r}):
    ex = tf.io.parse_single_example(r, spec)
    rows.append([ex["image/filename"].numpy().decode(),
                 hashlib.sha256(ex["image/encoded"].numpy()).hexdigest(),
                 int(ex["image/class/label"].numpy())])
print(json.dumps(rows))
"""
    check_rows(run_in("tensorflow", code), source_truth(ds))
    found = L.detect(ds.path / "tfrecord")
    assert found.layout == "tfrecord" and len(found.files) == 8
    again = F.add_format(ds, "tfrecord")
    assert again.reused


@pytest.mark.mxnet
def test_recordio_written_by_mxnet_reads_back_identical(dataset: M.Dataset) -> None:
    ds = F.add_format(dataset, "recordio")
    check_entry(ds, "recordio", 60)
    rec = ds.path / "recordio" / "train.rec"
    lst = (ds.path / "recordio" / "train.lst").read_text().splitlines()
    by_index = {int(line.split("\t")[0]): Path(line.split("\t")[2]).name for line in lst}
    code = f"""
import hashlib, json, mxnet as mx
r = mx.recordio.MXIndexedRecordIO({str(rec.with_suffix(".idx"))!r}, {str(rec)!r}, "r")
rows = []
for k in r.keys:
    header, data = mx.recordio.unpack(r.read_idx(k))
    rows.append([int(header.id), hashlib.sha256(data).hexdigest(), int(header.label)])
print(json.dumps(rows))
"""
    rows = [[by_index[int(str(i))], d, lab] for i, d, lab in run_in("mxnet", code)]
    check_rows(rows, source_truth(ds))
    found = L.detect(ds.path / "recordio")
    assert found.layout == "recordio" and found.samples == 60


@pytest.mark.pytorch
def test_webdataset_shards_read_back_identical_and_a_changed_shard_is_refused(
    dataset: M.Dataset,
) -> None:
    ds = F.add_format(dataset, "webdataset")
    entry = check_entry(ds, "webdataset", 60)
    assert entry["writer"]["torch_imported"] in (True, False)  # type: ignore[index]
    rows, labels = {}, {}
    for shard in sorted((ds.path / "webdataset").iterdir()):
        with tarfile.open(shard) as t:
            for m in t:
                data = t.extractfile(m).read()  # type: ignore[union-attr]
                key, ext = m.name.split(".", 1)
                if ext == "jpg":
                    rows[key] = hashlib.sha256(data).hexdigest()
                elif ext == "cls":
                    labels[key] = int(data)
    check_rows([[k + ".JPEG", rows[k], labels[k]] for k in rows], source_truth(ds))
    # the same seeded order in every format: shard 0 starts with the same images
    if "tfrecord" in ds.manifest["formats"]:
        assert ds.manifest["formats"]["tfrecord"]["order"] == entry["order"]
    victim = sorted((ds.path / "webdataset").iterdir())[0]
    with victim.open("ab") as fh:
        fh.write(b"\0" * 512)
    with pytest.raises(ConfigError, match="differ from the manifest.*--force --format webdataset"):
        F.add_format(ds, "webdataset")
    rewritten = F.add_format(ds, "webdataset", force=True)
    assert rewritten.manifest["formats"]["webdataset"]["digest"] == entry["digest"]
