"""A user's dataset on the host side, with no framework: the ImageFolder listing and its cache,
the stratified subset, ImageRecordIter's parts, the label base, WebDataset shards written with
Python's ``tarfile`` (as ``tar`` writes them) indexed by their members, the formats no adapter
reads, and evicting only a byte range. The packed formats written by their frameworks' own
tools are read in tests/integration/test_user_datasets.py."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest

from suite.datasets import layout as L
from suite.datasets import packed
from suite.datasets import storage as S
from suite.errors import ConfigError
from suite.levels.training import dataset as D
from tests.quirky import make_quirky_imagefolder
from tests.unit.test_datasets import tfrecord_frame


def test_an_imagefolders_listing_is_cached_until_a_folder_changes(tmp_path: Path) -> None:
    q = make_quirky_imagefolder(tmp_path / "train", classes=3, per_class=4)
    cache = tmp_path / "dd" / "indexes"
    first = L.detect(q.root, cache_dir=cache)
    assert first.listing and first.listing.startswith("listed and cached")
    again = L.detect(q.root, cache_dir=cache)
    assert again.listing and again.listing.startswith("cached")
    assert (again.relpaths, again.sizes, again.labels, again.classes, again.digest) == (
        first.relpaths, first.sizes, first.labels, first.classes, first.digest)  # fmt: skip
    assert again.digest == L.content_digest(list(first.files), q.root)
    assert list(again.files)[0] == q.root / first.relpaths[0]  # type: ignore[index]
    time.sleep(0.01)
    extra = q.root / q.classes[2] / "new.JPEG"
    extra.write_bytes((q.root / q.images[0]).read_bytes())  # a file added: its folder changed
    grown = L.detect(q.root, cache_dir=cache)
    assert grown.listing.startswith("listed") and grown.samples == first.samples + 1  # type: ignore[union-attr, operator]
    assert len(list(cache.glob("imagefolder-*.npz"))) == 1  # the stale listing went
    (q.root / q.classes[1]).chmod(0o750)  # permissions are part of the key
    assert L.detect(q.root, cache_dir=cache).listing.startswith("listed")  # type: ignore[union-attr]


def test_a_stratified_subset_keeps_each_classes_share() -> None:
    labels = np.repeat(np.arange(10), [100, 100, 100, 100, 100, 50, 50, 50, 50, 300])
    ids = D.stratified(labels, 100, seed=3)
    assert ids.size == 100 and np.unique(ids).size == 100 and np.all(np.diff(ids) > 0)
    per_class = np.bincount(labels[ids], minlength=10)
    assert per_class.tolist() == [10, 10, 10, 10, 10, 5, 5, 5, 5, 30]
    assert np.array_equal(ids, D.stratified(labels, 100, seed=3))
    assert not np.array_equal(ids, D.stratified(labels, 100, seed=4))


def test_image_record_iter_parts_cover_every_record_once() -> None:
    # dmlc's IndexedRecordIOSplitter: ceil(n / parts) records a part, the last one short
    for n, parts in ((54, 2), (54, 4), (10, 3), (7, 7), (5, 8)):
        rows = [D.recordio_part(n, p, parts) for p in range(parts)]
        assert sorted(np.concatenate(rows).tolist()) == list(range(n))
        assert rows[0].size == min(n, -(-n // parts))


def _index(labels: list[int]) -> packed.PackedIndex:
    n = len(labels)
    z = np.zeros(n, np.int64)
    return packed.PackedIndex("tfrecord", "/x", ["/x/a"], z.astype(np.int32), z, z, z,
                              np.asarray(labels), [str(i) for i in range(n)])  # fmt: skip


def test_the_label_base_is_detected_and_may_be_given() -> None:
    assert D.label_base_of(_index([1, 2, 1000]), None, "/d")[0] == 1
    assert D.label_base_of(_index([0, 5]), None, "/d")[0] == 0
    assert D.label_base_of(_index([3, 4]), 0, "/d") == (0, "given (--label-base)")
    with pytest.raises(ConfigError, match="--label-base 1: the dataset at /d has label 0"):
        D.label_base_of(_index([0, 1]), 1, "/d")


def _tar(path: Path, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(path, "w") as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


def test_webdataset_shards_are_indexed_by_their_members(tmp_path: Path) -> None:
    d = tmp_path / "wds"
    d.mkdir()
    img = [bytes([i]) * (100 + i) for i in range(5)]
    _tar(d / "train-0.tar", [("dir/a.jpg", img[0]), ("dir/a.cls", b"1"),
                             ("b.jpeg", img[1]), ("b.cls", b" 0\n"),
                             ("c.png", img[2]), ("c.json", json.dumps({"label": 2}).encode())])  # fmt: skip
    _tar(d / "train-1.tar", [("d.jpg", img[3]), ("d.cls", b"2"), ("e.jpg", img[4]),
                             ("e.json", b"1"), ("e.meta.txt", b"ignored")])  # fmt: skip
    found = L.detect(d)
    ix, how = packed.load_or_build("webdataset", d, list(found.files), tmp_path / "cache")
    assert how.startswith("walked and cached")
    assert ix.keys == ["train-0.tar/dir/a", "train-0.tar/b", "train-0.tar/c",
                       "train-1.tar/d", "train-1.tar/e"]  # fmt: skip
    assert ix.label.tolist() == [1, 0, 2, 2, 1] and ix.shard_counts() == [3, 2]
    assert [ix.image_bytes(i) for i in range(5)] == img
    cached, how = packed.load_or_build("webdataset", d, list(found.files), tmp_path / "cache")
    assert how.startswith("cached") and cached.keys == ix.keys
    assert np.array_equal(cached.offset, ix.offset)
    # class names as labels (.txt): the sorted names' positions
    _tar(d / "train-1.tar", [("d.jpg", img[3]), ("d.txt", b"tench")])
    _tar(d / "train-0.tar", [("a.jpg", img[0]), ("a.txt", b"goldfish")])
    named = packed.build("webdataset", d, list(L.detect(d).files))
    assert named.label_names == ["goldfish", "tench"] and named.label.tolist() == [0, 1]


def test_broken_packed_datasets_are_one_line(tmp_path: Path) -> None:
    d = tmp_path / "wds"
    d.mkdir()
    _tar(d / "s.tar", [("a.jpg", b"\xff\xd8"), ("b.jpg", b"\xff\xd8"), ("b.cls", b"1")])
    with pytest.raises(ConfigError, match="sample 'a' has no label") as err:
        D.inspect_user_data(str(d), str(tmp_path / "dd"), None)
    assert "\n" not in str(err.value)
    t = tmp_path / "tfr"
    t.mkdir()
    (t / "train-00000-of-00001").write_bytes(tfrecord_frame(b"\x00" * 100)[:50])
    with pytest.raises(ConfigError, match="truncated: the record at byte 0 needs 100 bytes"):
        D.inspect_user_data(str(t), str(tmp_path / "dd"), None)
    (t / "train-00000-of-00001").write_bytes(tfrecord_frame(b"\x0a\x00"))  # no features
    with pytest.raises(ConfigError, match="has no int64 image/class/label"):
        D.inspect_user_data(str(t), str(tmp_path / "dd"), None)


@pytest.mark.parametrize(
    "name, data, layout",
    [
        ("data.mdb", b"\x00" * 64, "lmdb"),
        ("train.h5", b"\x89HDF\r\n\x1a\n" + bytes(56), "hdf5"),
        ("part-0.parquet", b"PAR1" + bytes(60), "parquet"),
        ("train.array_record-00000-of-00001", b"\x00" * 64, "array_record"),
        ("train.beton", b"\x00" * 64, "ffcv"),
    ],
)
def test_a_format_no_adapter_reads_is_named_at_planning(tmp_path: Path, name: str,
                                                       data: bytes, layout: str) -> None:  # fmt: skip
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / name).write_bytes(data)
    assert L.detect(tmp_path / "d").layout == layout
    assert D.readers_of(layout) == []
    with pytest.raises(ConfigError, match="which no registered adapter reads") as err:
        D.inspect_user_data(str(tmp_path / "d"), str(tmp_path / "dd"), None)
    folder = f"folder ({', '.join(D.readers_of('folder'))})"  # every registered folder reader
    assert folder in str(err.value) and "\n" not in str(err.value)


def test_a_cold_epoch_of_a_part_evicts_only_that_range(tmp_path: Path) -> None:
    mib = 1 << 20
    f = tmp_path / "train.rec"
    f.write_bytes(os.urandom(16 * mib))  # just written: large folios in the page cache
    f.read_bytes()
    before, total = S.resident_bytes([f])
    if before < total:
        pytest.fail("the file did not stay in the page cache after being read", pytrace=False)
    result = S.evict([(f, 5 * mib + 100, 3 * mib)])  # in whole 2 MiB blocks: 4 to 10 MiB
    assert result["verified"] and result["bytes"] == 6 * mib, result
    left, _ = S.resident_bytes([f])
    assert left == 10 * mib  # the rest of the file is still cached
    assert S.resident_bytes([(f, 4 * mib, 6 * mib)])[0] == 0


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""

    def varint(v: int) -> bytes:
        out = b""
        while v >= 0x80:
            out += bytes([v & 0x7F | 0x80])
            v >>= 7
        return out + bytes([v])

    return varint(number << 3 | 2) + varint(len(payload)) + payload


def tf_example(image: bytes, label: int) -> bytes:
    """A ``tf.train.Example`` with ``image/encoded`` and ``image/class/label`` (protobuf's wire
    format by hand: the host has no TensorFlow)."""
    feats = [(b"image/encoded", _field(1, _field(1, image))),  # bytes_list
             (b"image/class/label", _field(3, bytes([0x08, label])))]  # int64_list  # fmt: skip
    entries = b"".join(_field(1, _field(1, k) + _field(2, v)) for k, v in feats)
    return _field(1, entries)


def _encoded(fmt: str) -> bytes:
    from PIL import Image

    b = io.BytesIO()
    Image.new("RGB", (6, 5), (10, 200, 30)).save(b, fmt)
    return b.getvalue()


def test_tfrecord_scan_names_records_tensorflow_cannot_decode(tmp_path: Path) -> None:
    """PNG records pass the scan (TensorFlow's loader decodes them with decode_image); a TIFF,
    which Pillow reads and TensorFlow does not, is counted corrupt by shard and offset, so the
    scan finds what would fail the TensorFlow task."""
    from suite.cli.data import scan_packed

    d = tmp_path / "tfr"
    d.mkdir()
    frames = [tfrecord_frame(tf_example(_encoded(f), i)) for i, f in
              enumerate(("PNG", "JPEG", "WEBP", "BMP", "GIF", "TIFF"))]  # fmt: skip
    (d / "train-00000-of-00001").write_bytes(b"".join(frames))
    index = packed.build("tfrecord", d, list(L.detect(d).files))
    assert index.samples == 6
    scan = scan_packed(index)
    assert scan["checked"] == 6 and scan["corrupt"] == 1, scan
    bad = scan["corrupt_files"][0]
    assert bad["path"] == f"train-00000-of-00001@{sum(map(len, frames[:5]))}"
    assert "TIFF image, which TensorFlow's decode_image does not read" in bad["error"]


def _jpegs(folder: Path, n: int) -> None:
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.new("RGB", (16, 12), (i, 2, 3)).save(folder / f"{i}.jpg")


def test_one_class_folder_with_a_labels_file_is_refused_and_one_class_is_said(
    tmp_path: Path,
) -> None:
    """``ds/images/*.jpg`` with ``ds/labels.csv`` was read as a 1-class ImageFolder and trained
    on; it is one line saying the CSV is not read. One class without a labels file is a note
    in ``data info`` and in the run's plan output."""
    from tests.helpers import cli

    flat = tmp_path / "ds"
    _jpegs(flat / "images", 3)
    (flat / "labels.csv").write_text("file,label\n0.jpg,cat\n")
    with pytest.raises(ConfigError, match=r"one class folder \(images/\) and labels.csv beside "
                       "it: ImageFolder labels come from class folders, so labels.csv is not "
                       "read") as err:  # fmt: skip
        L.detect(flat, cache_dir=tmp_path / "cache")
    assert "\n" not in str(err.value) and "one folder per class" in str(err.value)
    proc = cli("data", "info", str(flat))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    one = tmp_path / "one"
    _jpegs(one / "a", 40)
    (one / "README.txt").write_text("a readme is not a labels file")
    found = L.detect(one)
    assert found.classes == ["a"] and any(n.startswith("1 class (") for n in found.notes)
    info = cli("data", "info", str(one), "--json")
    assert info.returncode == 0 and json.loads(info.stdout)["notes"][0].startswith("1 class")
    run = cli("run", "--level", "training", "--benchmark", "loader", "--framework", "pytorch",
              "--data", str(one), "--data-dir", str(tmp_path / "dd"), "--dry-run")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert f"--data {one}: 1 class (the folder a/" in " ".join(run.stdout.split()), run.stdout
    wds = tmp_path / "wds"  # a packed dataset of one label
    wds.mkdir()
    _tar(wds / "s.tar", [("a.jpg", b"\xff\xd8"), ("a.cls", b"3"), ("b.jpg", b"\xff\xd8"),
                         ("b.cls", b"3")])  # fmt: skip
    notes = D.inspect_user_data(str(wds), str(tmp_path / "dd"), None).notes
    assert any(n.startswith("1 class (label 3)") for n in notes), notes


def test_images_in_subfolders_of_a_class_folder_are_listed_as_torchvision_walks(
    tmp_path: Path,
) -> None:
    """``nested/a/sub/*.jpg`` were silently left out; torchvision's ImageFolder walks a class
    folder (os.walk, followlinks=True, sorted), and so does the listing every loader reads. A
    cached listing is listed again when a folder inside a class folder changes."""
    d = tmp_path / "nested"
    _jpegs(d / "a", 2)
    _jpegs(d / "a" / "sub", 2)
    _jpegs(d / "a" / "sub" / "deeper", 1)
    _jpegs(d / "b" / "only-sub", 1)  # a class whose images are all in a subfolder
    (tmp_path / "elsewhere").mkdir()
    _jpegs(tmp_path / "elsewhere" / "linked", 1)
    (d / "b" / "link").symlink_to(tmp_path / "elsewhere" / "linked")  # followed
    cache = tmp_path / "cache"
    found = L.detect(d, cache_dir=cache)
    assert found.classes == ["a", "b"]
    assert found.relpaths == ["a/0.jpg", "a/1.jpg", "a/sub/0.jpg", "a/sub/1.jpg",
                              "a/sub/deeper/0.jpg", "b/link/0.jpg", "b/only-sub/0.jpg"]  # fmt: skip
    assert found.labels == [0, 0, 0, 0, 0, 1, 1] and found.samples == 7
    assert L.detect(d, cache_dir=cache).listing.startswith("cached")  # type: ignore[union-attr]
    time.sleep(0.01)
    _jpegs(d / "a" / "sub" / "deeper2", 1)  # only a/sub's time changes, not a's
    again = L.detect(d, cache_dir=cache)
    assert again.listing.startswith("listed") and again.samples == 8  # type: ignore[union-attr]
    # no folder with images at its top: still a split level, not classes
    s = tmp_path / "splits"
    _jpegs(s / "train" / "n1", 1)
    _jpegs(s / "val" / "n1", 1)
    with pytest.raises(ConfigError, match="folders of folders"):
        L.detect(s)


def test_files_in_class_folders_that_are_not_images_are_counted_in_a_note(
    tmp_path: Path,
) -> None:
    """``data info`` said 4 samples for class folders holding 7 files: a README, a .gif and a
    file without an extension were left out (as torchvision leaves them out) without a word.
    They are counted by extension in a note, from a fresh listing and from the cached one;
    hidden files (.DS_Store) are not counted; a folder of images only has no note."""
    d = tmp_path / "ds"
    _jpegs(d / "a", 2)
    _jpegs(d / "b" / "sub", 2)
    (d / "a" / "README.txt").write_text("about class a")
    (d / "a" / ".DS_Store").write_bytes(b"\0")
    (d / "b" / "sub" / "anim.gif").write_bytes(b"GIF89a")
    (d / "b" / "LICENSE").write_text("x")
    cache = tmp_path / "cache"
    for found in (L.detect(d, cache_dir=cache), L.detect(d, cache_dir=cache)):
        assert found.samples == 4
        (note,) = [n for n in found.notes if "not images" in n]
        assert note.startswith("3 file(s) in the class folders are not images by their name")
        assert all(k in note for k in (".txt x1", ".gif x1", "(none) x1", ".jpg"))
    assert found.listing.startswith("cached")  # type: ignore[union-attr]
    clean = tmp_path / "clean"
    _jpegs(clean / "a", 1)
    _jpegs(clean / "b", 1)
    assert not [n for n in L.detect(clean).notes if "not images" in n]


def test_data_no_chosen_level_or_benchmark_reads_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--level operator --data PATH`` ran 24 operator tasks and exit 0, the dataset ignored;
    so did a training level whose chosen benchmarks are all of another level."""
    from suite import plan
    from suite.config import resolve

    _jpegs(tmp_path / "d" / "a", 2)
    _jpegs(tmp_path / "d" / "b", 2)
    base = {"data": str(tmp_path / "d"), "data_dir": str(tmp_path / "dd"),
            "frameworks": ["pytorch"]}  # fmt: skip
    with pytest.raises(ConfigError, match=r"--level operator reads no dataset .*run --level "
                       "training, or drop --data") as err:  # fmt: skip
        resolve({**base, "level": ["operator"]}, env={})
    assert str(err.value).startswith(f"--data {tmp_path / 'd'}: ") and "\n" not in str(err.value)
    # DLSUITE_DATA is standing: a run of another level leaves it unread, saying so
    cfg = resolve({"level": ["operator"]}, env={"DLSUITE_DATA": base["data"]})
    assert cfg.data is None and any("DLSUITE_DATA=" in n and "is not read" in n
                                    for n in cfg.plan_notes)  # fmt: skip
    with pytest.raises(ConfigError, match=r": the default level, operator, reads no dataset"):
        resolve(base, env={})
    cfg = resolve({**base, "level": ["training", "operator"], "benchmarks": ["gemm"]}, env={})
    with pytest.raises(ConfigError, match=r"no chosen benchmark reads a dataset \(gemm\)"):
        plan.build(cfg)
    # another plan note (CPU ranks beyond the cores) does not hide it
    import suite.cpuinfo

    monkeypatch.setattr(suite.cpuinfo, "usable_cores", lambda: 2)
    cfg = resolve({**base, "level": ["training", "distributed"], "benchmarks": ["allreduce"],
                   "world_size": 4, "device": "cpu"}, env={})  # fmt: skip
    with pytest.raises(ConfigError, match=r"no chosen benchmark reads a dataset \(allreduce\)"):
        plan.build(cfg)


def test_the_scan_shows_a_progress_bar_on_a_terminal_only(tmp_path: Path) -> None:
    """``data info --scan`` over thousands of files printed nothing for a minute: a rich bar on
    stderr now, where stderr is a terminal (``DLSUITE_PROGRESS=1`` stands for one here, as for
    the runner's bar); a pipe gets none, and stdout stays the JSON."""
    from tests.helpers import cli

    _jpegs(tmp_path / "d" / "a", 3)
    _jpegs(tmp_path / "d" / "b", 2)
    shown = cli("data", "info", str(tmp_path / "d"), "--scan", "--json",
                env={"DLSUITE_PROGRESS": "1"})  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "decoding images" in shown.stderr and "5/5" in shown.stderr, shown.stderr
    assert json.loads(shown.stdout)["scan"]["checked"] == 5
    piped = cli("data", "info", str(tmp_path / "d"), "--scan", "--json",
                env={"DLSUITE_PROGRESS": ""})  # fmt: skip
    assert piped.returncode == 0 and piped.stderr == "", piped.stderr


def test_images_beyond_the_dataset_are_said_and_the_delivered_count_recorded(
    tmp_path: Path,
) -> None:
    """``--images 5000`` of a 20-image dataset was silently all of it: the record's subset was
    null while its params said 5000. The plan says so in one note line and the record's
    ``pipeline.dataset.subset`` says what was delivered (folder and packed alike)."""
    from suite import plan
    from suite.config import resolve

    d = tmp_path / "d"
    _jpegs(d / "a", 10)
    _jpegs(d / "b", 10)
    cfg = resolve({"data": str(d), "data_dir": str(tmp_path / "dd"), "frameworks": ["pytorch"],
                   "level": ["training"], "benchmarks": ["loader"], "images": 5000}, env={})  # fmt: skip
    tasks = plan.build(cfg)
    notes = [n for n in cfg.plan_notes if n.startswith("--images 5000 is more than")]
    assert len(notes) == 1 and "all 20 are read" in notes[0], cfg.plan_notes
    assert all("all 20 read (5000 asked)" in t.source for t in tasks)
    folder = D._user(d, "folder", {"images": 5000}, str(tmp_path / "dd"), seed=0)
    assert folder.samples == 20
    assert folder.describe()["subset"] == {
        "images": 5000, "samples": 20, "of": 20, "bytes": folder.bytes, "digest": folder.digest,
        "how": "all of it: the dataset holds fewer samples than asked", "classes_covered": 2,
    }  # fmt: skip
    wds = tmp_path / "wds"
    wds.mkdir()
    _tar(wds / "s.tar", [("a.jpg", b"\xff\xd8"), ("a.cls", b"0"), ("b.jpg", b"\xff\xd8"),
                         ("b.cls", b"1")])  # fmt: skip
    shards = D._user(wds, "webdataset", {"images": 5000}, str(tmp_path / "dd"), seed=0)
    sub = shards.describe()["subset"]
    assert (sub["images"], sub["samples"], sub["of"], sub["classes_covered"]) == (5000, 2, 2, 2)


def test_a_webdataset_key_with_dots_names_the_members_and_the_rule(tmp_path: Path) -> None:
    """``sample.v1.0_1.jpg``/``.cls`` said "sample 'sample' has no image member (it has:
    none)": the message lists the members and says the key ends at the first dot."""
    d = tmp_path / "wds"
    d.mkdir()
    _tar(d / "s.tar", [("sample.v1.0_1.jpg", b"\xff\xd8"), ("sample.v1.0_1.cls", b"1")])
    with pytest.raises(ConfigError) as err:
        D.inspect_user_data(str(d), str(tmp_path / "dd"), None)
    said = str(err.value)
    assert "\n" not in said
    assert ("sample 'sample' has no image (.jpg/.jpeg/.png/.webp) member (its members: "
            "sample.v1.0_1.jpg, sample.v1.0_1.cls): WebDataset's key ends at the first dot of "
            "the file name, so sample.v1.0_1.jpg is key 'sample' with extension 'v1.0_1.jpg'; "
            "rename the members without dots before the extension (e.g. sample_v1_0_1.jpg)"
            ) in said, said  # fmt: skip


def test_gzip_compressed_tfrecords_are_one_line_saying_to_decompress(tmp_path: Path) -> None:
    """``*.gz`` TFRecord shards (TFRecordWriter with compression_type="GZIP") were "no dataset
    layout recognised"; a ``.tfrecord.gz`` failed on its first frame's CRC."""
    import gzip

    frame = tfrecord_frame(tf_example(_encoded("PNG"), 0))
    for names in (["train-00000-of-00002.gz", "train-00001-of-00002.gz"], ["data.tfrecord.gz"]):
        d = tmp_path / names[0].split(".")[0]
        d.mkdir()
        for n in names:
            (d / n).write_bytes(gzip.compress(frame))
        for target in (d, d / names[0]):
            with pytest.raises(ConfigError, match=r"look like gzip-compressed TFRecords .*"
                               r"decompress them \(gunzip -k FILE\)") as err:  # fmt: skip
                D.inspect_user_data(str(target), str(tmp_path / "dd"), None)
            assert "\n" not in str(err.value) and names[0] in str(err.value)


def test_the_scan_names_the_file_not_a_memory_address(tmp_path: Path) -> None:
    """A packed image Pillow cannot identify read "cannot identify image file <_io.BytesIO
    object at 0x7f54...>": the scan names the shard and the sample, and says what is wrong."""
    from suite.cli.data import scan_packed

    d = tmp_path / "wds"
    d.mkdir()
    _tar(d / "s.tar", [("a.jpg", b"GARBAGE!" * 8), ("a.cls", b"0"),
                       ("b.png", _encoded("PNG")), ("b.cls", b"1")])  # fmt: skip
    scan = scan_packed(packed.build("webdataset", d, list(L.detect(d).files)))
    assert scan["corrupt"] == 1, scan
    bad = scan["corrupt_files"][0]
    assert bad["path"] == "s.tar/a" and bad["file"] == str(d / "s.tar")
    assert bad["error"].startswith("not an image Pillow can read") and "0x" not in bad["error"]
    f = tmp_path / "folder" / "n1" / "x.png"
    f.parent.mkdir(parents=True)
    f.write_bytes(b"GARBAGE!" * 8)
    (got,) = L.scan_jpegs([f])["corrupt_files"]
    assert got == {"path": str(f), "error": got["error"]}
    assert got["error"].startswith("not an image Pillow can read")


def test_the_dataset_path_is_recorded_without_dot_dot(tmp_path: Path) -> None:
    """``--data ../data/messy`` from a clone was recorded as ``.../repo/../data/messy``."""
    from suite.config import resolve

    d = tmp_path / "data" / "messy"
    _jpegs(d / "a", 2)
    _jpegs(d / "b", 2)
    (tmp_path / "repo").mkdir()
    cfg = resolve({"data": str(tmp_path / "repo" / ".." / "data" / "messy"),
                   "data_dir": str(tmp_path / "dd"), "frameworks": ["pytorch"],
                   "level": ["training"], "benchmarks": ["loader"]}, env={})  # fmt: skip
    assert cfg.data == str(d.resolve())
    # ".." after a link is the link's target's parent, as the file system reads it
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "repo").mkdir()
    (tmp_path / "real" / "data").symlink_to(d.parent)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "repo").symlink_to(tmp_path / "real" / "repo")
    cfg = resolve({"data": str(tmp_path / "home" / "repo" / ".." / "data" / "messy"),
                   "data_dir": str(tmp_path / "dd"), "frameworks": ["pytorch"],
                   "level": ["training"], "benchmarks": ["loader"]}, env={})  # fmt: skip
    assert cfg.data == str(d.resolve())


def test_the_pixel_check_names_a_drawn_sample_it_could_not_compare() -> None:
    """A corrupt file drawn for the pixel check was dropped without a word (5 samples where
    the docs say six): its id is in the check's detail."""
    import io as _io

    import numpy as np
    from PIL import Image

    from suite.levels.training import pipeline as P

    buf = _io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(buf, format="JPEG")

    class Same:
        def decode(self, data: bytes) -> np.ndarray:
            return P.reference_decode(data)

    checks = P.pixel_check(Same(), [(3, buf.getvalue()), (7, b"not a jpeg")])  # type: ignore[arg-type]
    detail = checks[0].detail or {}
    assert [r["id"] for r in detail["samples"]] == [3] and detail["not_compared_corrupt"] == [7]
    assert checks[0].passed


def test_a_recordio_subset_of_more_than_half_is_recorded_as_all_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """600 of 1,000 records: ImageRecordIter reads whole parts, and the smallest part holding
    600 is the whole .rec; the record said "all of it: the number asked"."""
    import numpy as np

    from suite.datasets import layout as L
    from suite.datasets.packed import PackedIndex

    n = 1000
    index = PackedIndex("recordio", str(tmp_path), [str(tmp_path / "train.rec")],
                        np.zeros(n, np.int32), np.arange(n), np.arange(n) * 16,
                        np.full(n, 16), np.arange(n) % 10, [str(i) for i in range(n)],
                        record_id=np.arange(n))  # fmt: skip
    monkeypatch.setattr(D, "packed_index", lambda found, data_dir: (index, "test"))
    (tmp_path / "train.rec").write_bytes(b"\0" * 16 * n)
    found = L.DetectedDataset(tmp_path, "recordio", [tmp_path / "train.rec"], 16 * n, samples=n)
    got = D._user_packed(tmp_path, found, {"images": 600}, None, seed=0, world=1)
    sub = got.describe()["subset"]
    assert sub["samples"] == n and sub["how"].startswith("all of it: ImageRecordIter reads whole")
    got = D._user_packed(tmp_path, found, {"images": 300}, None, seed=0, world=1)
    assert got.describe()["subset"]["how"].startswith("part ")


def test_links_that_loop_or_lead_nowhere_are_said_not_silently_misread(tmp_path: Path) -> None:
    """``ds/a/up -> ..`` took classes b and c's images into class a as well (15 + 30 samples
    of "a", all of b's and c's counted twice): it is one line naming the link. A class folder
    linked to the dataset itself likewise. A link named as an image whose target is gone was
    left out without a word; it is counted in a note, from a fresh and a cached listing. A
    folder named like an image (``photos.jpg/``) is walked as os.walk walks it."""
    from tests.helpers import cli

    d = tmp_path / "loop"
    for c in ("a", "b", "c"):
        _jpegs(d / c, 3)
    (d / "a" / "up").symlink_to("..")
    with pytest.raises(ConfigError, match=r"a/up: a link to .*, a folder above the class "
                       r"folder .*a: walked as ImageFolder walks") as err:  # fmt: skip
        L.detect(d)
    assert "\n" not in str(err.value)
    proc = cli("data", "info", str(d))
    assert proc.returncode == 2 and "remove the link" in proc.stderr, proc.stderr
    (d / "a" / "up").unlink()
    (d / "a" / "far").symlink_to(tmp_path)  # above the dataset too
    with pytest.raises(ConfigError, match="a folder above the class folder"):
        L.detect(d)
    (d / "a" / "far").unlink()
    (d / "a" / "same").symlink_to(".")  # a loop inside the class: walked once, no new label
    assert L.detect(d).samples == 9
    (d / "self").symlink_to(".")
    with pytest.raises(ConfigError, match=r"self: a link to .*, the dataset's own folder"):
        L.detect(d)
    (d / "self").unlink()
    (d / "b" / "gone.jpg").symlink_to(tmp_path / "nowhere.jpg")
    (d / "b" / "there.jpg").symlink_to(d / "a" / "0.jpg")  # a link that leads somewhere: a sample
    (d / "c" / "deep").mkdir()
    (d / "c" / "deep" / "gone.png").symlink_to(tmp_path / "nowhere.png")
    _jpegs(d / "c" / "photos.jpg", 2)
    cache = tmp_path / "cache"
    for found in (L.detect(d, cache_dir=cache), L.detect(d, cache_dir=cache)):
        assert found.samples == 12 and found.labels.count(2) == 5  # type: ignore[union-attr]
        assert "b/there.jpg" in (found.relpaths or [])
        assert "c/photos.jpg/0.jpg" in (found.relpaths or [])
        (note,) = [n for n in found.notes if "lead nowhere" in n]
        assert note.startswith("2 link(s) named as images in the class folders lead nowhere")
        assert not [n for n in found.notes if "not images by their name" in n]
    assert found.listing.startswith("cached")  # type: ignore[union-attr]


def _png16(width: int = 48, height: int = 8) -> tuple[bytes, np.ndarray]:
    """A 16-bit grayscale PNG of a ramp over the whole 16-bit range, and its values."""
    import io as _io

    from PIL import Image

    ramp = np.linspace(0, 65535, width * height).astype(np.uint16).reshape(height, width)
    buf = _io.BytesIO()
    Image.fromarray(ramp).save(buf, format="PNG")
    return buf.getvalue(), ramp


def test_a_16_bit_png_is_read_by_its_high_byte_not_clipped_white() -> None:
    """A 16-bit grayscale PNG came out of PyTorch's and JAX's loaders (and the pixel check's
    reference) through Pillow's ``convert("RGB")``, which clips at 255: a ramp over the 16-bit
    range was 99.6% white, while TensorFlow and MXNet decode its high byte. The Pillow
    decoders now keep the high byte (the integration test checks TensorFlow's and MXNet's
    against the same reference); an 8-bit image decodes as before."""
    import io as _io

    from PIL import Image

    from suite.adapters.pytorch import data as PD
    from suite.levels.training import pipeline as P

    data, ramp = _png16()
    want = np.repeat((ramp >> 8).astype(np.uint8)[..., None], 3, axis=2)
    for got in (P.reference_decode(data), PD.decode(data)):
        assert got.dtype == np.uint8 and np.array_equal(got, want)
    assert float(np.mean(P.reference_decode(data) == 255)) < 0.01
    rgb = np.random.default_rng(1).integers(0, 256, (6, 7, 3), np.uint8)
    buf = _io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG")
    assert np.array_equal(P.reference_decode(buf.getvalue()), rgb)


def test_a_negative_label_is_one_line_at_planning_not_a_failed_feed_task(
    tmp_path: Path,
) -> None:
    """WebDataset shards whose ``.cls`` held -1 for some samples (unlabelled ones) were
    planned as 0-based; the loader ran and the feed task failed with PyTorch's "Target -1 is
    out of bounds". It is one line at planning naming a sample; labels from 0 still plan."""
    from tests.helpers import cli

    img = _encoded("JPEG")
    wds = tmp_path / "wds"
    wds.mkdir()
    _tar(wds / "s.tar", [("a.jpg", img), ("a.cls", b"0"), ("b.jpg", img), ("b.json",
                         b'{"label": -3}'), ("c.jpg", img), ("c.cls", b"1")])  # fmt: skip
    with pytest.raises(ConfigError, match=r"1 sample\(s\) have a negative label \(the smallest "
                       r"-3, e.g. s.tar/b\)"):  # fmt: skip
        D.inspect_user_data(str(wds), str(tmp_path / "dd"), None)
    run = cli("run", "--level", "training", "--framework", "pytorch", "--data", str(wds),
              "--data-dir", str(tmp_path / "dd"), "--quick", "--dry-run")  # fmt: skip
    assert run.returncode == 2 and "negative label" in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1
    _tar(wds / "s.tar", [("a.jpg", img), ("a.cls", b"0"), ("b.jpg", img), ("b.json",
                         b'{"label": 3}')])  # fmt: skip
    assert D.inspect_user_data(str(wds), str(tmp_path / "dd"), None).label_base == 0


def test_a_suite_datasets_broken_manifest_is_named_not_taken_for_a_split_level(
    tmp_path: Path,
) -> None:
    """A suite dataset whose manifest.json was cut off was detected as an ImageFolder and
    refused as "folders of folders (folder): point --data at one split"; a manifest whose
    formats lack their paths was a KeyError traceback. Each is one line naming the manifest
    and the fix; the manifest restored, the dataset is the suite's again."""
    from tests.helpers import cli

    d = tmp_path / "ds"
    _jpegs(d / "folder" / "n0", 2)
    _jpegs(d / "folder" / "n1", 2)
    good = {"format": "dlsuite-dataset/1", "images": 4, "formats": {"folder": {"path": "folder"}}}
    (d / "manifest.json").write_text(json.dumps(good)[:30])
    with pytest.raises(ConfigError, match=r"manifest.json: not valid JSON .*--force"):
        L.detect(d)
    proc = cli("data", "info", str(d))
    assert proc.returncode == 2 and "folders of folders" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    (d / "manifest.json").write_text(json.dumps({**good, "formats": {"folder": {"files": 4}}}))
    with pytest.raises(ConfigError, match="its formats are not as `dlsuite data make` writes"):
        L.detect(d)
    (d / "manifest.json").write_text(json.dumps(good))
    found = L.detect(d)
    assert found.layout == "suite" and found.samples == 4


def test_ranks_reading_whole_shards_are_planned_by_the_fewest_a_rank_reads(
    tmp_path: Path,
) -> None:
    """``--world-size 2`` over WebDataset shards was planned as if each rank read half the
    samples: one shard for two ranks left rank 1 an epoch of none, and the tasks failed
    ("an epoch of 0 batches ... give a smaller batch", at batch 1). Each rank reads whole
    shards (every world-th), so too few shards is one line at planning, and the batch is
    lowered for the rank that reads fewest."""
    from tests.helpers import cli

    assert D.rank_samples([30, 10, 10], None, 0, 2) == [40, 10]
    assert D.rank_samples([5], None, 0, 2) == [5, 0]
    assert sum(D.rank_samples([10] * 6, 25, 3, 2)) == 30  # three whole shards drawn
    img = _encoded("JPEG")
    wds = tmp_path / "wds"
    wds.mkdir()

    def shard(name: str, n: int) -> None:
        _tar(wds / name, [m for i in range(n) for m in ((f"{name[:2]}{i}.jpg", img),
                                                      (f"{name[:2]}{i}.cls", b"1"))])  # fmt: skip

    shard("s0.tar", 30)
    base = ["run", "--level", "training", "--framework", "pytorch", "--benchmark", "loader",
            "--data", str(wds), "--data-dir", str(tmp_path / "dd"), "--quick", "--dry-run"]  # fmt: skip
    one = cli(*base, "--world-size", "2")
    assert one.returncode == 2 and len(one.stderr.strip().splitlines()) == 1, one.stderr
    assert "its 1 shard(s) leave rank 1 none; split it into at least 2 shards" in one.stderr
    shard("s1.tar", 10)
    shard("s2.tar", 10)
    two = cli(*base, "--world-size", "2")
    assert two.returncode == 0, two.stderr
    said = " ".join(two.stdout.split())
    assert "batch 1: the size's" in said and "of its 10 samples per rank" in said, said


def test_labels_far_sparser_than_their_range_are_said_before_a_feed_trains_on_them(
    tmp_path: Path,
) -> None:
    """WebDataset labels 0, 5, 7 and 999999 (four classes) were planned without a word, and
    the feed benchmark trained a 1,000,000-way classifier (max label + 1 outputs) for 97 s
    here. ``data info`` and the plan say so; dense labels have no such note."""
    from tests.helpers import cli

    img = _encoded("JPEG")
    wds = tmp_path / "wds"
    wds.mkdir()
    labels = [0, 5, 999999, 7]
    _tar(wds / "s.tar", [m for i, lab in enumerate(labels) for m in (
        (f"k{i}.jpg", img), (f"k{i}.cls", str(lab).encode()))])  # fmt: skip
    notes = D.inspect_user_data(str(wds), str(tmp_path / "dd"), None).notes
    (note,) = [n for n in notes if "distinct labels" in n]
    assert note.startswith("4 distinct labels, but they run up to 999,999 (0-based): the feed "
                           "benchmark's classifier has 1,000,000 outputs")  # fmt: skip
    info = cli("data", "info", str(wds), "--data-dir", str(tmp_path / "dd"), "--json")
    assert info.returncode == 0 and note in json.loads(info.stdout)["notes"], info.stderr
    _tar(wds / "s.tar", [m for i, lab in enumerate([1, 2, 3, 4]) for m in (
        (f"k{i}.jpg", img), (f"k{i}.cls", str(lab).encode()))])  # fmt: skip
    assert not [n for n in D.inspect_user_data(str(wds), str(tmp_path / "dd"), None).notes
                if "distinct labels" in n]  # fmt: skip


def test_hidden_image_names_and_hidden_folders_left_out_are_said(tmp_path: Path) -> None:
    """macOS's ``._0.jpg`` beside ``0.jpg`` and a ``.ipynb_checkpoints/`` folder were left out
    without a word, where torchvision's ImageFolder lists the one as a sample and takes the
    other as a class: each is a note (from a fresh and a cached listing); .DS_Store is not."""
    d = tmp_path / "ds"
    _jpegs(d / "a", 2)
    _jpegs(d / "b" / "sub", 2)
    (d / "a" / "._0.jpg").write_bytes(b"\0\5\26\7")
    (d / "b" / "sub" / "._1.JPG").write_bytes(b"\0\5\26\7")
    (d / "a" / ".DS_Store").write_bytes(b"\0")
    (d / ".ipynb_checkpoints").mkdir()
    cache = tmp_path / "cache"
    for found in (L.detect(d, cache_dir=cache), L.detect(d, cache_dir=cache)):
        assert found.samples == 4 and found.classes == ["a", "b"]
        hidden_files, hidden_folders = found.notes
        assert hidden_files.startswith("2 hidden file(s) named as images in the class folders")
        assert hidden_folders.startswith("1 hidden folder(s) (.ipynb_checkpoints) left out")
    assert found.listing.startswith("cached")  # type: ignore[union-attr]
    clean = tmp_path / "clean"
    _jpegs(clean / "a", 1)
    _jpegs(clean / "b", 1)
    (clean / "a" / ".DS_Store").write_bytes(b"\0")
    assert L.detect(clean).notes == []


def _recordio(folder: Path, labels: list[list[float]]) -> None:
    """``train.rec`` + ``train.idx`` as MXIndexedRecordIO writes them (frames by hand: the host
    has no MXNet): each record an IRHeader (flag = the label count when several) and a JPEG."""
    import struct

    folder.mkdir(parents=True, exist_ok=True)
    img = _encoded("JPEG")
    rec, idx = bytearray(), []
    for i, labs in enumerate(labels):
        flag = len(labs) if len(labs) > 1 else 0
        head = struct.pack("<IfQQ", flag, labs[0] if flag == 0 else 0.0, i, 0)
        data = head + (struct.pack(f"<{flag}f", *labs) if flag else b"") + img
        idx.append(f"{i}\t{len(rec)}\n")
        rec += struct.pack("<II", L.RECORDIO_MAGIC, len(data)) + data
        rec += b"\0" * ((4 - len(data) % 4) % 4)
    (folder / "train.rec").write_bytes(bytes(rec))
    (folder / "train.idx").write_text("".join(idx))


def test_recordio_records_of_several_labels_are_one_line_not_class_of_the_first(
    tmp_path: Path,
) -> None:
    """A .rec written with ``im2rec --pack-label`` (a detection set: each header's labels
    start with the header width, 2) was read as a classification set whose every record was
    "class 2", the rest of its labels dropped without a word. It is one line naming the record
    and the labels; one label a record still plans."""
    multi = tmp_path / "multi"
    _recordio(multi, [[2.0, 5.0, float(i % 3), 0.1, 0.2, 0.5, 0.6] for i in range(6)])
    with pytest.raises(ConfigError, match=r"train.rec: the record at byte 0 carries 7 labels "
                       r"\(2, 5, 0, 0.1, 0.2, 0.5, ...: im2rec --pack-label"):  # fmt: skip
        D.inspect_user_data(str(multi), str(tmp_path / "dd"), None)
    one = tmp_path / "one"
    _recordio(one, [[float(i % 3)] for i in range(6)])
    found = D.inspect_user_data(str(one), str(tmp_path / "dd"), None)
    assert found.layout == "recordio" and found.samples == 6 and found.classes == 3


def test_a_tar_of_class_folders_is_told_to_be_extracted(tmp_path: Path) -> None:
    """``tar -cf data.tar cat dog`` (an ImageFolder packed) was refused as a WebDataset sample
    without a label and "samples are <key>.jpg with <key>.cls", as if the labels were to be
    written; the folders are the labels, so the line says to extract it."""
    img = _encoded("JPEG")
    t = tmp_path / "t"
    t.mkdir()
    _tar(t / "data.tar", [("cat/1.jpg", img), ("cat/2.jpg", img), ("dog/1.jpg", img)])
    with pytest.raises(ConfigError, match=r"a folder in the tar \(cat/\) is no label: a tar of "
                       r"class folders is an ImageFolder packed, so extract it"):  # fmt: skip
        D.inspect_user_data(str(t), str(tmp_path / "dd"), None)
    _tar(t / "data.tar", [("s/1.jpg", img), ("s/1.cls", b"0"), ("s/2.jpg", img)])
    with pytest.raises(ConfigError, match=r"sample 's/2' has no label") as err:
        D.inspect_user_data(str(t), str(tmp_path / "dd"), None)
    assert "extract it" not in str(err.value)  # a WebDataset missing one label: no hint


def test_an_empty_or_unreadable_tar_shard_is_one_line(tmp_path: Path) -> None:
    """A 0-byte ``.tar`` beside good shards (a writer that stopped) was refused with
    tarfile's five-line "could not be opened successfully" list; it is one line saying the
    file is empty, and a tar that is not one is one line too."""
    from tests.helpers import cli

    w = tmp_path / "w"
    w.mkdir()
    _tar(w / "a.tar", [("k.jpg", _encoded("JPEG")), ("k.cls", b"0")])
    (w / "b.tar").write_bytes(b"")
    proc = cli("data", "info", str(w), "--data-dir", str(tmp_path / "dd"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "b.tar: an empty file (0 bytes), not a tar" in proc.stderr
    (w / "b.tar").write_bytes(b"not a tar at all, " * 40)
    proc = cli("data", "info", str(w), "--data-dir", str(tmp_path / "dd"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "b.tar: not a readable tar (file could not be opened successfully: method" in proc.stderr


def test_split_folders_with_a_stray_image_are_still_a_split_level(tmp_path: Path) -> None:
    """``ds/train/<class>/`` and ``ds/val/<class>/`` with one stray ``ds/train/x.jpg`` were
    taken as an ImageFolder of two classes, "train" and "val" (the split check looked only
    for images at the folders' tops). They are refused naming a split; classes that happen to
    hold subfolders, or one folder named train, are still classes."""
    d = tmp_path / "ds"
    for split in ("train", "val"):
        _jpegs(d / split / "cat", 2)
        _jpegs(d / split / "dog", 2)
    _jpegs(d / "train", 1)  # the stray image
    cache = tmp_path / "cache"
    with pytest.raises(ConfigError, match=r"holds split folders \(train, val\) whose images are "
                       r"in folders inside them: point --data at one split, e.g. .*train"):  # fmt: skip
        L.detect(d, cache_dir=cache)
    with pytest.raises(ConfigError, match="holds split folders"):
        L.detect(d, cache_dir=cache)  # nothing cached that would take it
    ok = tmp_path / "classes"
    _jpegs(ok / "train", 2)  # a class named train, with its images at its top
    _jpegs(ok / "val", 2)
    _jpegs(ok / "cat", 1)
    _jpegs(ok / "cat" / "more", 1)
    assert L.detect(ok).classes == ["cat", "train", "val"]


def test_the_data_dir_itself_is_told_to_name_one_of_its_datasets(tmp_path: Path) -> None:
    """``--data`` at the data dir (where `data make` puts its datasets) said "holds folders of
    folders: point --data at one split"; it has no splits, so the line names a dataset."""
    dd = tmp_path / "dd"
    ds = dd / "imagenet-like-quick-custom-4x2-s0-abc"
    _jpegs(ds / "folder" / "n0", 2)
    _jpegs(ds / "folder" / "n1", 2)
    (ds / "manifest.json").write_text(json.dumps(
        {"format": "dlsuite-dataset/1", "images": 4, "formats": {"folder": {"path": "folder"}}}))  # fmt: skip
    (dd / "indexes").mkdir()
    with pytest.raises(ConfigError, match=r"a data dir of 1 dataset\(s\) `dlsuite data make` "
                       r"made \(imagenet-like-quick-custom-4x2-s0-abc\): point --data at one"):  # fmt: skip
        L.detect(dd)
    assert L.detect(ds).layout == "suite"


def test_data_info_gives_an_imagefolders_labels_as_it_does_a_packed_datasets(
    tmp_path: Path,
) -> None:
    """The docs say ``data info`` tells the labels' range and base; it did for packed formats
    only, an ImageFolder's had no labels row."""
    from tests.helpers import cli

    d = tmp_path / "ds"
    for c in ("b", "a", "c"):
        _jpegs(d / c, 2)
    info = cli("data", "info", str(d), "--data-dir", str(tmp_path / "dd"), "--json")
    doc = json.loads(info.stdout)
    assert (doc["labels"], doc["label_base"]) == ([0, 2], 0), info.stderr
    table = cli("data", "info", str(d), "--data-dir", str(tmp_path / "dd"))
    assert "0..2, 0-based (the sorted class folders' positions)" in table.stdout, table.stdout


def test_data_info_refuses_label_base_1_for_an_imagefolder_as_run_does(tmp_path: Path) -> None:
    """``data info ds --label-base 1`` on an ImageFolder printed its labels as 0-based,
    ignoring the flag, where ``run --label-base 1 --data ds`` is one line saying to drop it."""
    from tests.helpers import cli

    d = tmp_path / "ds"
    for c in ("a", "b"):
        _jpegs(d / c, 2)
    proc = cli("data", "info", str(d), "--label-base", "1", "--data-dir", str(tmp_path / "dd"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "is an ImageFolder, whose labels are its sorted class folders' positions from 0" in (
        proc.stderr)  # fmt: skip
    ok = cli("data", "info", str(d), "--label-base", "0", "--data-dir", str(tmp_path / "dd"))
    assert ok.returncode == 0, ok.stderr


def test_folders_of_shards_are_told_to_be_pointed_at_not_made_class_folders(
    tmp_path: Path,
) -> None:
    """``ds/train/*.tar`` and ``ds/validation/*.tar`` (a packed dataset's splits) were "2
    folder(s) but no images in them; give a directory whose folders hold the images of one
    class each", as if to unpack them into classes; the line names the shards and a split."""
    d = tmp_path / "ds"
    for split in ("train", "validation"):
        (d / split).mkdir(parents=True)
        _tar(d / split / "s-000.tar", [("k.jpg", _encoded("JPEG")), ("k.cls", b"0")])
    with pytest.raises(ConfigError, match=r"its folders hold shards, not class folders of images "
                       r"\(train/ \(WebDataset .tar\), validation/ \(WebDataset .tar\)\): point "
                       r"--data at one of them, e.g. .*train"):  # fmt: skip
        L.detect(d)
    assert L.detect(d / "train").layout == "webdataset"
    (tmp_path / "empty" / "a").mkdir(parents=True)
    with pytest.raises(ConfigError, match="1 folder.s. but no images in them"):
        L.detect(tmp_path / "empty")


def test_class_folders_numbered_out_of_text_order_are_labelled_as_torchvision_with_a_note(
    tmp_path: Path,
) -> None:
    """Class folders ``1`` to ``12`` are labelled by their names sorted as text, as
    torchvision's ImageFolder labels them (``10`` is label 1), and nothing said so; a note in
    ``data info`` and the plan names the first folder out of numeric order and the fix."""
    from tests.helpers import cli

    ds = tmp_path / "numbered"
    for c in range(1, 13):
        _jpegs(ds / str(c), 2)
    found = L.detect(ds, cache_dir=tmp_path / "cache")
    assert found.classes == ["1", "10", "11", "12", "2", "3", "4", "5", "6", "7", "8", "9"]
    assert found.labels is not None and found.relpaths is not None
    assert dict(zip(found.relpaths, found.labels, strict=True))["10/0.jpg"] == 1  # unchanged
    note = ("the class folders are numbers, sorted as text as torchvision's ImageFolder sorts "
            "them: folder 10/ is label 1 (not 9, its place by number), labels follow 1, 10, 11, "
            "12, ...; to have labels in numeric order, rename the folders with leading zeros "
            "(01, 02, ..., 12)")  # fmt: skip
    assert note in found.notes
    again = L.detect(ds, cache_dir=tmp_path / "cache")  # from the cached listing
    assert again.listing is not None and again.listing.startswith("cached") and note in again.notes
    info = cli("data", "info", str(ds), "--json")
    assert info.returncode == 0 and note in json.loads(info.stdout)["notes"], info.stderr
    run = cli("run", "--level", "training", "--benchmark", "loader", "--framework", "pytorch",
              "--data", str(ds), "--data-dir", str(tmp_path / "dd"), "--dry-run")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert f"--data {ds}: {note}" in " ".join(run.stdout.split()), run.stdout
    for names in (["00", "01", "10"], ["3", "7", "9"], ["a", "b10", "b2"]):
        other = tmp_path / "-".join(names)
        for c in names:
            _jpegs(other / c, 1)
        assert not any("numbers" in n for n in L.detect(other).notes), names


def test_shards_of_no_samples_are_a_note_for_tfrecord_and_webdataset_alike(
    tmp_path: Path,
) -> None:
    """An empty TFRecord shard was skipped without a word (one named like ImageNet's shards,
    ``train-00002-of-00003``, was not even counted among the files), while a 0-byte ``.tar`` is
    refused. A shard that holds no samples (a 0-byte TFRecord file, a tar of no members: what
    the loaders read as none) is counted and named in a note, in ``data info`` and the plan;
    a 0-byte ``.tar`` (no tar: WebDataset's reader fails on it) stays refused; a file beside
    TFRecord shards that no record starts is named as not read."""
    from tests.helpers import cli

    tfr = tmp_path / "tfr"
    tfr.mkdir()
    for s in range(2):
        frames = [tfrecord_frame(tf_example(_encoded("JPEG"), (s + i) % 3)) for i in range(7)]
        (tfr / f"train-{s:05d}-of-00003").write_bytes(b"".join(frames))
    (tfr / "train-00002-of-00003").write_bytes(b"")
    (tfr / "_SUCCESS").write_bytes(b"")  # a writer's marker, not a shard
    found = L.detect(tfr)
    assert [f.name for f in found.files] == [f"train-{s:05d}-of-00003" for s in range(3)]
    note = ("1 of 3 shards holds no samples (train-00002-of-00003): the loaders read them as "
            "none; was a shard's writing stopped? write it again, or remove it")  # fmt: skip
    info = cli("data", "info", str(tfr), "--json", "--data-dir", str(tmp_path / "dd"))
    assert info.returncode == 0, info.stderr
    got = json.loads(info.stdout)
    assert got["shards"] == 3 and got["samples"] == 14 and note in got["notes"], got
    assert not any("_SUCCESS" in n for n in got["notes"][1:]), got["notes"]
    run = cli("run", "--level", "training", "--benchmark", "loader", "--framework", "tensorflow",
              "--data", str(tfr), "--data-dir", str(tmp_path / "dd"), "--dry-run")  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert f"--data {tfr}: {note}" in " ".join(run.stdout.split()), run.stdout
    (tfr / "train-00001-of-00003").write_bytes(
        b"\0" * 4 + (tfr / "train-00000-of-00003").read_bytes()
    )
    damaged = L.detect(tfr)
    assert [f.name for f in damaged.files] == ["train-00000-of-00003", "train-00002-of-00003"]
    assert damaged.notes[0].startswith("2 file(s) beside the shards not read, as no TFRecord "
                                       "record starts them (_SUCCESS, train-00001-of-00003)")  # fmt: skip
    wds = tmp_path / "wds"
    wds.mkdir()
    _tar(wds / "a.tar", [m for i in range(3) for m in ((f"k{i}.jpg", _encoded("JPEG")),
                                                        (f"k{i}.cls", b"2"))])  # fmt: skip
    _tar(wds / "b.tar", [])
    _tar(wds / "c.tar", [("j.jpg", _encoded("JPEG")), ("j.cls", b"0")])
    notes = D.inspect_user_data(str(wds), str(tmp_path / "dd"), None).notes
    assert "1 of 3 shards holds no samples (b.tar): the loaders read them as none; was a " \
           "shard's writing stopped? write it again, or remove it" in notes, notes  # fmt: skip
    (wds / "b.tar").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"b.tar: an empty file \(0 bytes\), not a tar"):
        D.inspect_user_data(str(wds), str(tmp_path / "dd"), None)


def test_an_empty_rec_file_is_named_empty_as_an_empty_tar_is(tmp_path: Path) -> None:
    """A 0-byte ``train.rec`` read "not an MXNet RecordIO file (no RecordIO magic number at its
    start)"; it is named an empty file, with the fix an empty ``.tar`` gets."""
    d = tmp_path / "rec"
    d.mkdir()
    (d / "train.rec").write_bytes(b"")
    for path in (d, d / "train.rec"):
        with pytest.raises(ConfigError, match=r"train.rec: an empty file \(0 bytes\), not a "
                           "RecordIO file: a file whose writing stopped"):  # fmt: skip
            L.detect(path)
