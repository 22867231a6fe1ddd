"""A user's own dataset through ``dlsuite run --data``, as a user runs it:

* the command of docs/reference/training-level.md on an ImageFolder with ImageNet's quirks, made from
  scikit-learn's photographs (tests/quirky.py): exit 0, every planned record ok, the truncated
  and the empty file counted as corrupt, "the dataset at PATH" as the records' source;
* one tiny dataset of each packed format, written by its framework's own tool in its
  environment (tests/user_formats.py: TensorFlow's ImageNet TFRecord layout with labels from 1,
  MXNet's im2rec.py, webdataset's TarWriter) and read by the framework that owns the format,
  every check passing; a framework that cannot read a format skipped, naming the one that can;
* the bad datasets of planning: one line, exit 2, nothing run.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from suite import envs
from suite.levels.training.dataset import readers_of
from tests.helpers import NOBODY, ROOT, cli, nobody_python
from tests.integration.test_bad_input import assert_one_line_error
from tests.quirky import make_quirky_imagefolder


def records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]


def failed_checks(r: dict[str, Any]) -> list[Any]:
    return [(c["name"], c.get("detail")) for c in r["correctness"]["checks"] if not c["passed"]]


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An ImageFolder of 66 decodable photographs (3 classes x 20, two CMYK, two grayscale and
    a PNG among them), the source of the packed datasets."""
    root = tmp_path_factory.mktemp("clean") / "train"
    q = make_quirky_imagefolder(root, classes=3, per_class=20, seed=5)
    for rel in q.corrupt + q.stray:
        (root / rel).unlink()
    return root


def write(kind: str, framework: str | None, src: Path, out: Path) -> dict[str, Any]:
    """tests/user_formats.py in ``framework``'s environment (None: this interpreter)."""
    python = str(envs.ensure(framework).python) if framework else str(Path(sys.executable))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run([python, "-m", "tests.user_formats", kind, str(src), str(out)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    done: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return done


def run(data: Path, out: Path, framework: str, *more: str) -> subprocess.CompletedProcess[str]:
    return cli("run", "--level", "training", "--benchmark", "loader", "--data", str(data),
               "--framework", framework, "--out", str(out), "--data-dir", str(out.parent / "dd"),
               *more, timeout=1800)  # fmt: skip


def one_size(tmp: Path, **size: Any) -> str:
    conf = tmp / "size.toml"
    conf.write_text("[training.loader]\nsizes = [{"
                    + ", ".join(f"{k} = {json.dumps(v)}" for k, v in size.items()) + "}]\n")  # fmt: skip
    return str(conf)


# -- the documented command ----------------------------------------------------------------------


@pytest.mark.pytorch
def test_the_documented_command_on_an_imagefolder_with_imagenets_quirks(tmp_path: Path) -> None:
    q = make_quirky_imagefolder(tmp_path / "imagenet" / "train", classes=8, per_class=16)
    # the full size set is planned from what the dataset holds: its folder only, and a batch
    # that gives the window statistic its batches (256 would be one batch of 136 images)
    plan = run(q.root, tmp_path / "plan", "pytorch", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    lines = [ln for ln in plan.stdout.splitlines() if ln.startswith("training-loader")]
    assert len(lines) == 4 and all('"format": "folder"' in ln for ln in lines), plan.stdout
    assert all('"batch": 13' in ln for ln in lines), plan.stdout
    proc = run(q.root, tmp_path / "run", "pytorch", "--quick")
    recs = records(tmp_path / "run")
    assert proc.returncode == 0, [(r["status"], r.get("reason")) for r in recs]
    assert len(recs) == 4  # folder only: workers 1 and 2, cold and warm
    n = len(q.images)
    for r in recs:
        assert r["status"] == "ok" and not failed_checks(r), failed_checks(r)
        d = r["pipeline"]["dataset"]
        assert r["benchmark"]["source"].startswith(
            f"the dataset at {q.root} (imagefolder: {n} samples"
        )
        assert (d["path"], d["layout"], d["format"], d["samples"]) == (
            str(q.root), "imagefolder", "folder", n)  # fmt: skip
        assert d["classes"] == 8 and d["fs_type"] and d["mount_point"] and d["digest"]
        corrupt = r["pipeline"]["corrupt"]
        assert sorted(corrupt["files"]) == sorted(q.corrupt) and d["corrupt"] == 2
        assert r["benchmark"]["params"]["dataset"] is None  # the user's, no size of the suite's
    # CMYK, grayscale, PNG-named-.JPEG and the non-ASCII name were decoded, not corrupt
    assert not set(q.corrupt) & {f for k in ("cmyk", "grayscale", "png_named_jpeg",
                                             "non_ascii_name") for f in q.quirks[k]}  # fmt: skip


@pytest.mark.pytorch
def test_data_without_a_benchmark_plans_what_reads_it_and_a_subset_is_stratified(
    tmp_path: Path,
) -> None:
    q = make_quirky_imagefolder(tmp_path / "train", classes=4, per_class=40)
    proc = cli("run", "--level", "training", "--data", str(q.root), "--framework", "pytorch",
               "--quick", "--dry-run", "--out", str(tmp_path / "r"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    names = {ln.split()[1] for ln in proc.stdout.splitlines() if ln.startswith("training-")}
    assert names == {"loader", "feed"}, proc.stdout  # no optimizer: it reads no data
    conf = one_size(tmp_path, format="folder", workers=1, batch=8, cache="cold")
    proc = run(q.root, tmp_path / "sub", "pytorch", "--config", conf, "--images", "80")
    r = records(tmp_path / "sub")[0]
    assert proc.returncode == 0 and r["status"] == "ok" and not failed_checks(r), r.get("reason")
    sub = r["pipeline"]["dataset"]["subset"]
    assert (sub["samples"], sub["of"], sub["classes_covered"]) == (80, len(q.images), 4)
    assert "stratified" in sub["how"]
    ev = r["pipeline"]["cache"]["eviction"]
    assert ev["verified"] and ev["files"] == 80  # a cold epoch evicts only what it reads


# -- packed datasets, each read by its framework -----------------------------------------------


@pytest.mark.tensorflow
def test_tensorflows_imagenet_tfrecords_read_by_tf_data(tmp_path: Path, clean: Path) -> None:
    data = tmp_path / "tfrecords"
    done = write("tfrecord", "tensorflow", clean, data)
    assert done["labels"] == [1, 3] and done["cmyk_reencoded"] == 2 and done["pngs_reencoded"] == 1
    conf = one_size(tmp_path, format="tfrecord", workers=2, batch=6, cache="cold")
    proc = run(data, tmp_path / "run", "tensorflow,pytorch", "--config", conf)
    recs = {r["framework"]["name"]: r for r in records(tmp_path / "run")}
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = recs["tensorflow"]
    assert r["status"] == "ok" and not failed_checks(r), failed_checks(r)
    d = r["pipeline"]["dataset"]
    n = len(list(clean.rglob("*.JPEG")))
    assert (d["layout"], d["samples"], d["classes"], d["label_base"]) == ("tfrecord", n, 3, 1)
    assert "no 0 among the labels" in d["label_base_source"]
    assert "enumerate" in r["pipeline"]["loader"]["ids"]
    skipped = recs["pytorch"]
    assert skipped["status"] == "skipped" and "read by: tensorflow" in skipped["reason"]


@pytest.mark.mxnet
def test_im2rec_recordio_read_by_image_record_iter_a_part_of_it(tmp_path: Path,
                                                                 clean: Path) -> None:  # fmt: skip
    data = tmp_path / "rec"
    done = write("im2rec", "mxnet", clean, data)
    n = len(list(clean.rglob("*.JPEG")))
    assert done["files"] == ["train.idx", "train.lst", "train.rec"] and done["records"] == n
    conf = one_size(tmp_path, format="recordio", workers=1, batch=3, cache="cold")
    proc = run(data, tmp_path / "run", "mxnet", "--config", conf, "--images", str(n // 2))
    r = records(tmp_path / "run")[0]
    assert proc.returncode == 0 and r["status"] == "ok", r.get("reason")
    assert not failed_checks(r), failed_checks(r)
    d = r["pipeline"]["dataset"]
    assert d["layout"] == "recordio" and d["label_base"] == 0 and d["samples"] == n // 2
    assert d["subset"]["of"] == n and "part" in d["subset"]["how"]
    # the part's byte range of the .rec (in whole 2 MiB blocks: here the whole small file) and
    # the .idx (tests/unit/test_user_data.py evicts a range of a larger file)
    ev = r["pipeline"]["cache"]["eviction"]
    assert ev["verified"] and ev["files"] == 2


@pytest.mark.pytorch
def test_webdataset_shards_read_by_pytorch_by_their_tar_members(tmp_path: Path,
                                                                clean: Path) -> None:  # fmt: skip
    data = tmp_path / "wds"
    write("webdataset", None, clean, data)
    conf = one_size(tmp_path, format="webdataset", workers=2, batch=6, cache="warm")
    proc = run(data, tmp_path / "run", "pytorch,mxnet", "--config", conf)
    recs = {r["framework"]["name"]: r for r in records(tmp_path / "run")}
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = recs["pytorch"]
    assert r["status"] == "ok" and not failed_checks(r), failed_checks(r)
    assert r["pipeline"]["dataset"]["layout"] == "webdataset"
    n = len(list(clean.rglob("*.JPEG")))
    assert r["pipeline"]["dataset"]["samples"] == n
    assert recs["mxnet"]["status"] == "skipped" and "read by: pytorch" in recs["mxnet"]["reason"]
    info = cli("data", "info", str(data), "--json", "--data-dir", str(tmp_path / "dd"))
    got = json.loads(info.stdout)
    assert got["read_by"] == {"webdataset": ["pytorch"]} and got["samples"] == n
    assert "cached" in got["index"]  # the run's planning walked it once


# -- bad datasets: one line, exit 2, at planning -------------------------------------------------


def _plan(data: Path, tmp: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return cli("run", "--level", "training", "--data", str(data), "--framework", "pytorch",
               "--quick", "--out", str(tmp / "r"), "--data-dir", str(tmp / "dd"), *more)  # fmt: skip


@pytest.mark.parametrize(
    "case, needles",
    [
        ("mixed", ["mixed layouts", "point --data at one layout"]),
        ("no_classes", ["no class folders", "move them into class folders"]),
        ("format_no_adapter_reads", ["HDF5", "no registered adapter reads",
                                     f"folder ({', '.join(readers_of('folder'))})"]),
        ("format_not_held", ["--format webdataset", "holds folder, not webdataset"]),
        ("size_format_not_held", ["sizes[0]", "format = tfrecord", "set format = folder"]),
        ("size_batch_too_large", ["sizes[0]", "batch = 256 gives 0 of the 10 batches", "set batch = 1"]),
        ("label_base_with_a_zero", ["--label-base 1", "has label 0"]),
        ("idx_not_matching", ["train.idx", "does not match train.rec"]),
    ],
)  # fmt: skip
def test_bad_datasets_are_one_line_and_exit_2_at_planning(tmp_path: Path, case: str,
                                                          needles: list[str]) -> None:  # fmt: skip
    d = tmp_path / "data"
    more: list[str] = []
    if case in (
        "mixed",
        "no_classes",
        "format_not_held",
        "size_format_not_held",
        "size_batch_too_large",
    ):
        q = make_quirky_imagefolder(d, classes=2, per_class=2)
        if case == "mixed":
            shutil.copy(q.root / q.images[0], q.root / "stray.JPEG")
        elif case == "no_classes":
            for rel in q.images:
                shutil.move(str(q.root / rel), str(q.root / rel.replace("/", "_")))
            for c in q.classes:
                shutil.rmtree(q.root / c)
        elif case == "format_not_held":
            more = ["--format", "webdataset"]
        elif case == "size_batch_too_large":
            more = ["--config", one_size(tmp_path, format="folder", batch=256)]
        else:
            more = ["--config", one_size(tmp_path, format="tfrecord", workers=1)]
    elif case == "format_no_adapter_reads":
        d.mkdir()
        (d / "train.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(504))  # HDF5's signature
    elif case == "label_base_with_a_zero":
        from suite.datasets import packed

        d.mkdir()
        with tarfile.open(d / "train-000000.tar", "w") as t:
            for key, label in (("a", 0), ("b", 1)):
                for ext, data in (("jpg", b"\xff\xd8\xff"), ("cls", str(label).encode())):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
        assert packed.split_key("x/a.b.jpg") == ("x/a", "b.jpg")
        more = ["--label-base", "1"]
    elif case == "idx_not_matching":
        _recordio_with_a_stale_index(d, tmp_path)
    proc = _plan(d, tmp_path, *more)
    assert_one_line_error(proc, *needles)
    assert not (tmp_path / "r" / "results.jsonl").exists()


def _recordio_with_a_stale_index(d: Path, tmp: Path) -> None:
    """A .rec with its .idx from another (smaller) .rec: written by MXNet's own writer in its
    environment, then the first record's index line dropped."""
    code = (
        "import mxnet as mx, sys\n"
        "r = mx.recordio.MXIndexedRecordIO(sys.argv[1] + '/train.idx', sys.argv[1] + '/train.rec', 'w')\n"
        "for i in range(4):\n"
        "    r.write_idx(i, mx.recordio.pack(mx.recordio.IRHeader(0, float(i % 2), i, 0), b'\\xff\\xd8' * 50))\n"
        "r.close()\n"
    )  # fmt: skip
    d.mkdir()
    proc = subprocess.run([str(envs.ensure("mxnet").python), "-c", code, str(d)],
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = (d / "train.idx").read_text().splitlines()
    (d / "train.idx").write_text("\n".join(lines[1:]) + "\n")


@pytest.mark.root
def test_an_unreadable_class_folder_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """As a user who cannot read one class folder. The tests run as root, who reads anything,
    so the CLI runs as ``nobody``, with an interpreter and a checkout it can reach
    (tests/helpers.py ``nobody_python``)."""
    python, checkout = nobody_python()
    base = Path("/tmp") / f"dlsuite-unreadable-class-{os.getpid()}"
    try:
        q = make_quirky_imagefolder(base / "train", classes=3, per_class=2)
        (q.root / q.classes[1]).chmod(0o700)
        code = "import sys; from suite.cli import main; sys.exit(main(sys.argv[1:]))"
        proc = subprocess.run(
            [python, "-c", code, "run", "--level", "training", "--data", str(q.root),
             "--framework", "pytorch", "--quick", "--dry-run", "--data-dir", str(base / "dd")],
            capture_output=True, text=True, cwd="/", user=NOBODY, group=NOBODY,
            env={"PATH": os.environ.get("PATH", ""), "HOME": str(base),
                 "PYTHONPATH": str(checkout)},
        )  # fmt: skip
        assert_one_line_error(proc, str(q.root / q.classes[1]), "permission denied")
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.pytorch
def test_resume_on_a_dataset_that_changed_is_one_line_and_moves_nothing(tmp_path: Path) -> None:
    """A run over ``--data ds``; a class added to ds; ``--resume``: the run kept the first
    records and measured the rest (a batch lowered differently: new tasks) on the changed
    dataset, one run dir mixing 45 and 85 samples without a word. It is one line, exit 2,
    results.jsonl untouched; the dataset restored, the resume runs."""
    from PIL import Image

    ds = tmp_path / "ds"
    for c in range(3):
        (ds / f"c{c}").mkdir(parents=True)
        for i in range(12):
            Image.new("RGB", (24, 16), (c * 60, i * 9, 7)).save(ds / f"c{c}" / f"{i}.jpg")
    conf = one_size(tmp_path, format="folder", workers=1, batch=2, cache="warm")
    first = run(ds, tmp_path / "run", "pytorch", "--config", conf)
    assert first.returncode in (0, 1), first.stderr  # 1: a check may fail on a busy machine
    kept = (tmp_path / "run" / "results.jsonl").read_bytes()
    shutil.copytree(ds / "c0", ds / "c3")
    again = run(ds, tmp_path / "run", "pytorch", "--config", conf, "--resume")
    assert_one_line_error(again)
    assert "the dataset changed since this run measured it (then 36 samples" in again.stderr
    assert "now 48 samples" in again.stderr
    assert (tmp_path / "run" / "results.jsonl").read_bytes() == kept
    shutil.rmtree(ds / "c3")
    back = run(ds, tmp_path / "run", "pytorch", "--config", conf, "--resume")
    assert back.returncode in (0, 1) and "resume:" in back.stderr, back.stderr
