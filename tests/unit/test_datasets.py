"""suite/datasets: the seeded image set made for real (a reduced count), its manifest and
reuse, the space check and a disk that fills, the layouts of ``--data`` detected and refused,
storage facts and page-cache eviction checked against the kernel's own counters."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from suite.datasets import layout as L
from suite.datasets import make as M
from suite.datasets import storage as S
from suite.datasets import synth
from suite.datasets.location import DATA_DIR_VAR, resolve_data_dir
from suite.errors import ConfigError
from tests.helpers import cli

SMALL = {"classes": 4, "images": 48}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> M.Dataset:
    root = tmp_path_factory.mktemp("data")
    return M.make_imagefolder(root, "quick", seed=3, workers=2, **SMALL)


# -- the generator -----------------------------------------------------------------------------
def test_an_image_is_a_pure_function_of_seed_and_index() -> None:
    bank = synth.NoiseBank(1, 512)
    a = synth.render(bank, 1, 7, 2, 200, 150)
    b = synth.render(synth.NoiseBank(1, 512), 1, 7, 2, 200, 150)
    c = synth.render(bank, 1, 8, 2, 200, 150)
    assert a.shape == (150, 200, 3) and a.dtype == np.uint8
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    # neither flat nor noise: a spread of values, and neighbouring pixels correlated
    lum = a.mean(axis=2)
    assert lum.std() > 15
    assert np.corrcoef(lum[:, :-1].ravel(), lum[:, 1:].ravel())[0, 1] > 0.8


def test_pixel_sizes_follow_imagenet_mostly_500x375() -> None:
    sizes = [synth.image_size(np.random.default_rng([0, i])) for i in range(4000)]
    share = sum(s == (500, 375) for s in sizes) / len(sizes)
    assert 0.35 < share < 0.45
    assert 0.1 < sum(h > w for w, h in sizes) / len(sizes) < 0.3  # some portrait
    assert min(min(s) for s in sizes) >= 32 and max(max(s) for s in sizes) <= 1400


# -- making, the manifest, reuse ---------------------------------------------------------------
def test_the_made_folder_is_imagefolder_with_a_complete_manifest(small: M.Dataset) -> None:
    m = small.manifest
    classes = sorted(p.name for p in small.folder.iterdir())
    assert classes == [f"n{c:08d}" for c in range(4)]
    files = sorted(small.folder.rglob("*.JPEG"))
    assert len(files) == 48 and m["images"] == 48 and m["classes"] == 4
    assert all(f.read_bytes()[:2] == b"\xff\xd8" for f in files)
    j = m["jpeg"]
    assert j["count"] == 48 and j["total_bytes"] == sum(f.stat().st_size for f in files)
    assert j["min_bytes"] <= j["median_bytes"] <= j["max_bytes"]
    assert m["digest"] == M.list_digest(M.scan_sizes(small.folder))
    assert m["formats"]["folder"]["files"] == 48
    assert m["making"]["workers"] == 2 and m["making"]["images_per_s"] > 0
    assert m["generator"]["jpeg_quality"] == 90 and m["params"]["seed"] == 3
    assert not list(small.path.parent.glob(".*.tmp-*"))  # no temporary directory left
    # the labels are the sorted folder names' positions
    assert M.file_list(small)[5] == ("n00000001/n00000001_1.JPEG", 1)


def test_the_bytes_do_not_depend_on_the_number_of_processes(
    small: M.Dataset, tmp_path: Path
) -> None:
    one = M.make_imagefolder(tmp_path, "quick", seed=3, workers=1, **SMALL)
    assert one.manifest["digest"] == small.manifest["digest"]
    a, b = one.folder / "n00000002/n00000002_3.JPEG", small.folder / "n00000002/n00000002_3.JPEG"
    assert a.read_bytes() == b.read_bytes()


def test_a_second_make_reuses_it_and_a_changed_file_is_refused(tmp_path: Path) -> None:
    first = M.make_imagefolder(tmp_path, "quick", seed=5, classes=2, images=6, workers=1)
    again = M.make_imagefolder(tmp_path, "quick", seed=5, classes=2, images=6, workers=1)
    assert again.reused and not first.reused and again.path == first.path
    victim = next(first.folder.rglob("*.JPEG"))
    victim.write_bytes(victim.read_bytes()[:-10])
    with pytest.raises(ConfigError, match="changed after it was made.*--force"):
        M.make_imagefolder(tmp_path, "quick", seed=5, classes=2, images=6, workers=1)
    remade = M.make_imagefolder(tmp_path, "quick", seed=5, classes=2, images=6, workers=1,
                                force=True)  # fmt: skip
    assert remade.manifest["digest"] == first.manifest["digest"]
    other = M.make_imagefolder(tmp_path, "quick", seed=6, classes=2, images=6, workers=1)
    assert other.path != first.path  # another seed is another dataset


def test_bad_parameters_are_one_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--size 'huge'"):
        M.params_for("huge")
    with pytest.raises(ConfigError, match="at least one image per class"):
        M.params_for("quick", classes=10, images=5)
    with pytest.raises(ConfigError, match="--seed"):
        M.params_for("quick", seed=-1)


def test_not_enough_space_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    free = M.free_bytes(tmp_path)
    with pytest.raises(ConfigError) as err:
        M.check_space(tmp_path / "data", free + 1, "the full dataset")
    msg = str(err.value)
    assert str(tmp_path / "data") in msg and f"({free + 1} bytes)" in msg and "\n" not in msg


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.root
def test_a_data_dir_too_small_exits_2_naming_the_path_and_the_bytes(small_disk: Path) -> None:
    proc = cli("data", "make", "--data-dir", str(small_disk / "d"), "--images", "200")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(small_disk / "d") in lines[0] and "bytes" in lines[0]
    assert not any((small_disk / "d").iterdir()) if (small_disk / "d").exists() else True


@pytest.mark.root
def test_a_disk_that_fills_while_making_leaves_nothing_that_looks_complete(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the estimate says it fits (it does not): the real tmpfs fills part way
    monkeypatch.setattr(M, "ESTIMATE_BYTES_PER_IMAGE", 1)
    monkeypatch.setattr(M, "SPACE_MARGIN_BYTES", 0)
    with pytest.raises(ConfigError, match="filled while making.*nothing was kept"):
        M.make_imagefolder(small_disk, "quick", classes=4, images=120, workers=2)
    assert [p.name for p in small_disk.iterdir() if not p.name.endswith(".lock")] == []
    assert M.free_bytes(small_disk) > 2_500_000  # the partial files were removed


# -- the data directory setting ----------------------------------------------------------------
def test_the_data_dir_precedence() -> None:
    env = {DATA_DIR_VAR: "/e"}
    assert resolve_data_dir("/f", config_value="/c", site_value="/s", env=env).path == Path("/f")
    got = resolve_data_dir(None, config_value="/c", site_value="/s", env=env)
    assert got.path == Path("/e") and got.source == DATA_DIR_VAR
    assert resolve_data_dir(None, config_value="/c", site_value="/s", env={}).path == Path("/c")
    assert resolve_data_dir(None, site_value="/s", env={}).source == "the site profile's data_dir"
    assert resolve_data_dir(None, env={}).source == "the default"
    with pytest.raises(ConfigError, match="control character"):
        resolve_data_dir("/a\nb", env={})


def test_the_site_profile_and_config_file_carry_data_dir(tmp_path: Path) -> None:
    from suite.cli.data import from_settings

    site = tmp_path / "s.toml"
    site.write_text('scheduler = "slurm"\ndata_dir = "/lustre/data"\n[partitions.p]\nnodes = 1\n')
    assert from_settings(None, site=str(site)).path == Path("/lustre/data")
    conf = tmp_path / "c.toml"
    conf.write_text('[run]\ndata_dir = "/gpfs/d"\n')
    assert from_settings(None, config_file=str(conf), site=str(site)).path == Path("/gpfs/d")


# -- the CLI -----------------------------------------------------------------------------------
def test_data_make_and_info_through_the_cli(tmp_path: Path) -> None:
    proc = cli("data", "make", "--data-dir", str(tmp_path), "--images", "12", "--classes", "3",
               "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert doc["images"] == 12 and Path(doc["path"]).parent == tmp_path
    info = cli("data", "info", doc["path"], "--scan", "--json")
    assert info.returncode == 0, info.stderr
    got = json.loads(info.stdout)
    assert got["layout"] == "suite" and got["samples"] == 12 and got["classes"] == 3
    assert got["scan"]["checked"] == 12 and got["scan"]["corrupt"] == 0
    assert got["storage"]["fs_type"] and got["digest"] and 0 <= got["page_cache"]["resident_share"]
    env = {DATA_DIR_VAR: str(tmp_path)}
    again = cli("data", "make", "--images", "12", "--classes", "3", env=env)
    assert again.returncode == 0 and "reusing" in again.stderr, again.stderr


def test_bad_input_to_data_exits_2_with_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "f"
    afile.write_text("x")
    for args in (
        ("data", "make", "--data-dir", str(afile / "sub")),
        ("data", "make", "--images", "1", "--classes", "2", "--data-dir", str(tmp_path)),
        ("data", "make", "--format", "parquet", "--data-dir", str(tmp_path)),
        ("data", "info", str(_jpeg(tmp_path / "ok" / "n1" / "a.jpg").parents[1]), "--scan", "-5"),
        ("data", "info", str(tmp_path / "missing")),
    ):
        proc = cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    # `data info PATH`: the error names the path, not the --data flag its user did not type
    assert f"error: {tmp_path / 'missing'}: no such file" in proc.stderr, proc.stderr


def test_data_no_framework_of_the_run_reads_is_refused_up_front(small: M.Dataset) -> None:
    """An ImageFolder with --framework tensorflow planned its tasks and ended "0 ok, 4 skipped"
    with exit 0; it is one line naming who reads it now. A run where one framework reads it
    plans as before (the other's tasks skip, naming the reader)."""
    base = ("run", "--level", "training", "--data", str(small.folder), "--quick", "--dry-run")
    proc = cli(*base, "--framework", "tensorflow")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "read by jax, mxnet, pytorch (folder); --framework tensorflow reads none" in proc.stderr
    assert "run with --framework tensorflow,pytorch," in proc.stderr
    assert cli(*base, "--framework", "tensorflow,pytorch").returncode == 0


# -- layouts -----------------------------------------------------------------------------------
def test_crc32c_and_tfrecord_frames() -> None:
    assert L.crc32c(b"123456789") == 0xE3069283  # the standard check value


def tfrecord_frame(payload: bytes) -> bytes:
    n = struct.pack("<Q", len(payload))
    return (n + struct.pack("<I", L.masked_crc32c(n)) + payload
            + struct.pack("<I", L.masked_crc32c(payload)))  # fmt: skip


def _jpeg(path: Path) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (10, 200, 30)).save(path, "JPEG")
    return path


def test_each_layout_is_detected(tmp_path: Path, small: M.Dataset) -> None:
    folder = L.detect(small.folder)
    assert (
        folder.layout == "imagefolder" and folder.samples == 48 and len(folder.classes or []) == 4
    )
    suite = L.detect(small.path)
    assert suite.layout == "suite" and list(suite.formats) == ["folder"]

    tfr = tmp_path / "tfr"
    tfr.mkdir()
    (tfr / "train-00000-of-00002").write_bytes(tfrecord_frame(b"x" * 10) * 3)
    (tfr / "train-00001-of-00002").write_bytes(tfrecord_frame(b"y"))
    (tfr / "README.txt").write_text("side files are fine")
    got = L.detect(tfr)
    assert got.layout == "tfrecord" and len(got.files) == 2
    assert L.detect(tfr / "train-00001-of-00002").layout == "tfrecord"

    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "train.rec").write_bytes(struct.pack("<I", L.RECORDIO_MAGIC) + b"\0" * 12)
    (rec / "train.idx").write_text("0\t0\n1\t16\n")
    got = L.detect(rec)
    assert got.layout == "recordio" and got.samples == 2

    wds = tmp_path / "wds"
    wds.mkdir()
    src = _jpeg(tmp_path / "a.jpg")
    with tarfile.open(wds / "train-000000.tar", "w") as t:
        t.add(src, arcname="k0.jpg")
        info = tarfile.TarInfo("k0.cls")
        info.size = 1
        import io

        t.addfile(info, io.BytesIO(b"3"))
    assert L.detect(wds).layout == "webdataset"


@pytest.mark.parametrize(
    "setup, message",
    [
        ("empty", "empty"),
        ("images_at_top", "no class folders"),
        ("splits", "folders of folders.*point --data at one split"),
        ("mixed", "mixed layouts"),
        ("empty_class", "hold no images"),
        ("two_recs", "2 .rec files"),
        ("unknown", "no dataset layout recognised"),
        ("missing", "no such file"),
        ("bad_tar", "WebDataset"),
    ],
)
def test_unusable_layouts_are_one_line_naming_the_path_and_the_fix(
    tmp_path: Path, setup: str, message: str
) -> None:
    d = tmp_path / "d"
    d.mkdir()
    if setup == "images_at_top":
        _jpeg(d / "a.jpg")
    elif setup == "splits":
        _jpeg(d / "train" / "n1" / "a.jpg")
        _jpeg(d / "val" / "n1" / "b.jpg")
    elif setup == "mixed":
        _jpeg(d / "n1" / "a.jpg")
        (d / "train-00000-of-00001").write_bytes(tfrecord_frame(b"x"))
    elif setup == "empty_class":
        _jpeg(d / "n1" / "a.jpg")
        (d / "n2").mkdir()
    elif setup == "two_recs":
        for n in ("train.rec", "val.rec"):
            (d / n).write_bytes(struct.pack("<I", L.RECORDIO_MAGIC))
    elif setup == "unknown":
        (d / "data.bin").write_bytes(b"\x00\x01" * 10)
    elif setup == "missing":
        d = d / "nope"
    elif setup == "bad_tar":
        with tarfile.open(d / "s.tar", "w") as t:
            info = tarfile.TarInfo("noextension")
            t.addfile(info)
    with pytest.raises(ConfigError, match=message) as err:
        L.detect(d)
    assert str(err.value).startswith("--data ") and "\n" not in str(err.value)


def test_an_unreadable_directory_is_a_config_error() -> None:
    """Detected by another user where the tests run as root (root reads anything): ``nobody``,
    with an interpreter and a checkout it can reach (tests/helpers.py ``nobody_python``)."""
    from tests.helpers import NOBODY, ROOT, nobody_python

    python, checkout = nobody_python() if os.geteuid() == 0 else (sys.executable, ROOT)
    base = Path("/tmp") / f"dlsuite-unreadable-{os.getpid()}"
    base.mkdir(mode=0o755)
    secret = base / "secret"
    try:
        _jpeg(secret / "n1" / "a.jpg")
        secret.chmod(0o000)
        code = f"from suite.datasets.layout import detect; detect({str(secret)!r})"
        as_nobody = {"user": NOBODY, "group": NOBODY} if os.geteuid() == 0 else {}
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd="/",
                              env={**os.environ, "PYTHONPATH": str(checkout)},
                              **as_nobody)  # type: ignore[call-overload]  # fmt: skip
        assert proc.returncode != 0, proc.stdout
        assert "cannot read it (permission denied)" in proc.stderr, proc.stderr[-1500:]
    finally:
        secret.chmod(0o755)
        shutil.rmtree(base)


def test_a_corrupt_jpeg_is_found_by_the_scan_not_by_detection(tmp_path: Path) -> None:
    good = _jpeg(tmp_path / "d" / "n1" / "a.jpg")
    bad = tmp_path / "d" / "n1" / "b.jpg"
    bad.write_bytes(good.read_bytes()[:40])  # truncated
    (tmp_path / "d" / "n1" / "c.jpg").write_bytes(b"not a jpeg at all")
    found = L.detect(tmp_path / "d")  # no error: loaders count corrupt files
    assert found.samples == 3
    scan = L.scan_jpegs(found.files)
    assert scan["checked"] == 3 and scan["corrupt"] == 2
    assert {Path(b["path"]).name for b in scan["corrupt_files"]} == {"b.jpg", "c.jpg"}
    assert L.scan_jpegs(found.files, sample=1)["sampled"] is True


# -- storage facts and the page cache ----------------------------------------------------------
def test_mountinfo_parsing_with_escapes() -> None:
    text = (
        "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
        "99 27 0:50 / /mnt/my\\040data rw - nfs4 srv:/export rw,vers=4.2\n"
        "100 27 0:51 / /mnt rw - tmpfs tmpfs rw\n"
    )
    mounts = S.parse_mountinfo(text)
    assert mounts[1].mount_point == "/mnt/my data" and mounts[1].fs_type == "nfs4"
    assert S.mount_of("/mnt/my data/x", mounts).fs_type == "nfs4"
    assert S.mount_of("/mnt/other", mounts).fs_type == "tmpfs"
    assert S.mount_of("/usr/lib", mounts).fs_type == "ext4"


def test_storage_facts_match_findmnt(tmp_path: Path) -> None:
    facts = S.storage_facts(tmp_path)
    out = subprocess.run(["findmnt", "-n", "-o", "TARGET,FSTYPE", "-T", str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
    assert [facts["mount_point"], facts["fs_type"]] == out
    if facts["block_device"] is not None:
        assert facts["disk"] in S.diskstats()


def test_eviction_is_verified_by_mincore_and_by_the_bytes_read(tmp_path: Path) -> None:
    f = tmp_path / "blob"
    f.write_bytes(os.urandom(8 << 20))
    S.read_files([f])  # warm
    res, total = S.resident_bytes([f])
    assert res == total == 8 << 20
    facts = S.storage_facts(f)
    result = S.evict([str(f)])
    if result["verified"]:
        assert result["resident_after"] <= 0.01 * total
        cold = S.read_files([f], facts["disk"])
        assert cold["read_bytes_from_storage"] >= 0.9 * total  # the kernel's own count
        warm = S.read_files([f], facts["disk"])
        assert warm["read_bytes_from_storage"] == 0
    else:  # said plainly, never a warm read called cold
        assert result["reason"] and facts["fs_type"] in S.MEMORY_FS | {"overlay"}


def test_a_memory_file_system_cannot_be_evicted_and_says_so() -> None:
    shm = Path("/dev/shm")
    if S.storage_facts(shm)["fs_type"] != "tmpfs":
        pytest.fail("/dev/shm is not a tmpfs here: this test needs one")
    f = shm / f"dlsuite-evict-{os.getpid()}"
    try:
        f.write_bytes(b"x" * (1 << 20))
        result = S.evict([str(f)])
        assert result["verified"] is False and "tmpfs keeps files in memory" in result["reason"]
    finally:
        f.unlink(missing_ok=True)


def test_the_host_side_of_datasets_imports_no_framework_nor_webdataset(tmp_path: Path) -> None:
    """webdataset imports torch where torch is installed: only the writer subprocess may."""
    import sys

    from tests.helpers import ROOT

    code = (
        "import sys\n"
        "import suite.cli, suite.cli.data, suite.datasets.make, suite.datasets.formats\n"
        "import suite.datasets.layout, suite.datasets.storage, suite.datasets.location\n"
        "import suite.telemetry.storage, suite.telemetry.quiet\n"
        "from suite.datasets import formats, make\n"
        f"ds = make.make_imagefolder({str(tmp_path)!r}, 'quick', classes=2, images=4, workers=1)\n"
        "formats.shard_plan(ds, 'webdataset', ds.path / 'x')\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'tensorflow', 'jax', 'mxnet', 'keras', 'webdataset')]\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
