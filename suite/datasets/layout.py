"""``--data PATH``: a user's dataset, its layout detected and checked before anything runs.

Layouts (what each framework's users keep ImageNet in):

* ``imagefolder``: one folder per class holding images, in subfolders too (torchvision's
  ``ImageFolder``, which walks each class folder; a real ImageNet ``train/`` folder as it
  is). Labels are the sorted folder names' positions.
* ``tfrecord``: files of ``tf.train.Example`` records (``train-00000-of-01024``, any name):
  recognised by content, the first record's length and its masked CRC-32C.
* ``recordio``: MXNet's ``.rec`` (with its ``.idx`` index and ``.lst`` list, im2rec's
  layout), recognised by RecordIO's magic number.
* ``webdataset``: ``.tar`` shards whose members are ``<key>.<ext>`` samples.
* ``suite``: a directory the suite made (``manifest.json``, :mod:`suite.datasets.make`),
  holding one or more of the above.

What is wrong is one :class:`~suite.errors.ConfigError` naming the path and the fix: a path
that does not exist or cannot be read, nothing in it, images without class folders, a split
level too high (``train/`` and ``val/``), several layouts mixed in one directory, empty class
folders, several ``.rec`` files. A corrupt JPEG is *not* a layout error: loaders count it
(and :func:`scan_jpegs` finds them, all or a sample, on request).

Host side: the standard library and Pillow; no framework.
"""

from __future__ import annotations

import os
import stat
import struct
import tarfile
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from suite.errors import ConfigError

IMAGE_EXTS = {".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp"}
#: files a dataset directory may hold beside its data (labels, READMEs, im2rec's lists)
SIDE_EXTS = {".txt", ".json", ".md", ".csv", ".lst", ".yaml", ".yml", ".xml", ".sha256"}
RECORDIO_MAGIC = 0xCED7230A
LAYOUTS = ("imagefolder", "tfrecord", "recordio", "webdataset", "suite")
#: the loader format each readable layout is (suite/adapters/data_words.py: DATA_FORMATS)
LAYOUT_FORMAT = {"imagefolder": "folder", "tfrecord": "tfrecord", "recordio": "recordio",
                 "webdataset": "webdataset"}  # fmt: skip
#: datasets the suite recognises but no loader of this version reads: (layout, what it is,
#: how it is recognised); a run on one is one line naming it (exit 2), ``data info`` says so
OTHER_FORMATS = {
    "lmdb": "an LMDB database (data.mdb; Caffe's and many PyTorch datasets' store)",
    "hdf5": "an HDF5 file",
    "parquet": "Parquet files",
    "array_record": "ArrayRecord files (Grain's format)",
    "ffcv": "an FFCV .beton file",
}


class JoinedPaths(Sequence[Path]):
    """``root / relpath`` for each relpath, made when asked for: an ImageFolder of 1.28M files
    is listed as strings (a ``Path`` each would cost more than the listing)."""

    def __init__(self, root: Path, relpaths: list[str]) -> None:
        self.root, self.relpaths = root, relpaths
        self._base = str(root).rstrip("/") + "/"

    def __len__(self) -> int:
        return len(self.relpaths)

    @overload
    def __getitem__(self, i: int) -> Path: ...
    @overload
    def __getitem__(self, i: slice) -> list[Path]: ...
    def __getitem__(self, i: int | slice) -> Path | list[Path]:
        if isinstance(i, slice):
            return [Path(self._base + r) for r in self.relpaths[i]]
        return Path(self._base + self.relpaths[i])

    def strings(self) -> list[str]:
        """Every path as a string (cheap: no ``Path`` objects)."""
        base = self._base
        return [base + r for r in self.relpaths]


class DataLayoutError(ConfigError):
    """A ``--data`` path the suite cannot use as it is; the message names the fix."""


@dataclass
class DetectedDataset:
    """A dataset as found on disk."""

    path: Path
    layout: str
    #: the data files: images (imagefolder: :class:`JoinedPaths`) or shards/record files
    files: Sequence[Path]
    bytes: int
    classes: list[str] | None = None
    #: samples, where known without reading the data (images, RecordIO index entries)
    samples: int | None = None
    notes: list[str] = field(default_factory=list)
    #: for ``suite``: the manifest's formats, each detected in turn
    formats: dict[str, DetectedDataset] = field(default_factory=dict)
    manifest: dict[str, Any] | None = None
    #: imagefolder, found while listing (so neither a digest nor the catalogue needs a second
    #: pass): each file's path under the dataset, its bytes and its class's position
    relpaths: list[str] | None = None
    sizes: list[int] | None = None
    labels: list[int] | None = None
    #: imagefolder: listed now, or the listing cached in the data dir (:func:`folder_key`),
    #: and the digest of its names and sizes where it was computed with the cache
    listing: str | None = None
    digest: str | None = None

    @property
    def format(self) -> str:
        """The loader format of this layout (``folder``, ``tfrecord`` ...; a suite dataset's
        first; a format no loader reads: its layout's name)."""
        if self.layout == "suite":
            return next(iter(self.formats))
        return LAYOUT_FORMAT.get(self.layout, self.layout)

    def held_formats(self) -> list[str]:
        """The loader formats this dataset holds (a suite dataset: each made copy)."""
        if self.layout == "suite":
            return list(self.formats)
        return [self.format]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": str(self.path),
            "layout": self.layout,
            "files": len(self.files),
            "bytes": self.bytes,
            "classes": len(self.classes) if self.classes is not None else None,
            "samples": self.samples,
            "notes": list(self.notes),
        }
        if self.formats:
            out["formats"] = {k: v.to_dict() for k, v in self.formats.items()}
        return out


def _fail(path: Path | str, what: str) -> DataLayoutError:
    return DataLayoutError(f"--data {path}: {what}")


_CRC32C_TABLE: list[int] = []


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as TFRecord frames use; table-driven, for a few bytes."""
    if not _CRC32C_TABLE:
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _CRC32C_TABLE.append(c)
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC32C_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _head(path: Path, n: int) -> bytes:
    """The file's first ``n`` bytes (fewer for a shorter file, none for an unreadable one)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError:
        return b""


def is_tfrecord(path: Path) -> bool:
    """The file starts with a TFRecord frame: a length and its masked CRC-32C."""
    head = _head(path, 12)
    if len(head) < 12:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    (crc,) = struct.unpack("<I", head[8:12])
    return masked_crc32c(head[:8]) == crc and 0 < length < (1 << 40)


def is_gzip_tfrecord(path: Path) -> bool:
    """The file is gzip-compressed (its magic number) and starts, decompressed, with a
    TFRecord frame: what ``TFRecordWriter`` writes with ``compression_type="GZIP"``."""
    if _head(path, 2) != b"\x1f\x8b":
        return False
    import gzip
    import zlib

    try:
        with gzip.open(path, "rb") as fh:
            head = fh.read(12)
    except (OSError, EOFError, zlib.error):
        return False
    if len(head) < 12:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    return masked_crc32c(head[:8]) == struct.unpack("<I", head[8:12])[0] and 0 < length < (1 << 40)


def _gzip_refused(p: Path, files: list[str]) -> DataLayoutError:
    return _fail(p, f"{len(files)} file(s) look like gzip-compressed TFRecords ({', '.join(files[:3])}); "
                    "the suite's TFRecord loader reads them uncompressed (no compression_type): "
                    "decompress them (gunzip -k FILE) and point --data at the result")  # fmt: skip


def is_recordio(path: Path) -> bool:
    head = _head(path, 4)
    return len(head) == 4 and struct.unpack("<I", head)[0] == RECORDIO_MAGIC


def is_webdataset_tar(path: Path) -> tuple[bool, str]:
    """(whether the tar's first members are ``<key>.<ext>`` files, why not)."""
    try:
        with tarfile.open(path, "r:*") as tf:
            members = []
            for m in tf:
                if m.isfile():
                    members.append(m.name)
                if len(members) >= 4:
                    break
    except (OSError, tarfile.TarError) as exc:
        return False, f"not a readable tar ({exc})"
    if not members:
        return False, "a tar with no files"
    for name in members:
        base = name.rsplit("/", 1)[-1]
        if "." not in base.lstrip("."):
            return False, f"member {name!r} has no extension (WebDataset keys are <key>.<ext>)"
    return True, ""


def _kind(entry: os.DirEntry[str]) -> str:
    """What a top-level file is: image, tar, rec, idx, tfrecord, side, or other."""
    name = entry.name.lower()
    ext = os.path.splitext(name)[1]
    if ext in IMAGE_EXTS:
        return "image"
    if name.endswith((".tar", ".tar.gz", ".tgz")):
        return "tar"
    if ext == ".rec":
        return "rec"
    if ext == ".idx":
        return "idx"
    if ext in SIDE_EXTS or name.startswith(("readme", "license")):
        return "side"
    other = _other_format(Path(entry.path))
    if other:
        return other
    if is_gzip_tfrecord(Path(entry.path)):
        return "gzip_tfrecord"
    if is_tfrecord(Path(entry.path)) or ".tfrecord" in name:
        return "tfrecord"
    if is_recordio(Path(entry.path)):
        return "rec"
    return "other"


def _other_format(path: Path) -> str:
    """Which of :data:`OTHER_FORMATS` a file is ("" for none): by name, then magic number."""
    name = path.name.lower()
    if name in ("data.mdb", "lock.mdb"):
        return "lmdb"
    if name.endswith(".array_record") or ".array_record-" in name:
        return "array_record"
    if name.endswith(".beton"):
        return "ffcv"
    head = _head(path, 8)
    if head == b"\x89HDF\r\n\x1a\n":
        return "hdf5"
    if head[:4] == b"PAR1":
        return "parquet"
    return ""


def _is_image_name(name: str) -> bool:
    return "." + name.rpartition(".")[2].lower() in IMAGE_EXTS


def _left_out(names: Iterable[str]) -> Counter[str]:
    """The extensions of files an ImageFolder leaves out (not images by their name), counted;
    ``(none)`` for a name without one."""
    out: Counter[str] = Counter()
    for n in names:
        if not _is_image_name(n):
            ext = n.rpartition(".")[2].lower() if "." in n else ""
            out["." + ext if ext else "(none)"] += 1
    return out


def _list_class(path: Path) -> tuple[list[str], list[int], int, list[str], Counter[str]]:
    """A class folder's image files (their paths under it, their bytes), how many of them are
    at its top, its subfolders (paths under it) and the extensions of the files left out
    (:func:`_left_out`, hidden ones not counted). Images in subfolders belong to the class,
    as torchvision's ``ImageFolder`` finds them (``make_dataset``: ``os.walk`` with
    ``followlinks=True``, sorted). The top is listed through the folder's descriptor, so each
    ``stat`` is an ``fstatat`` relative to it (no walk of the whole path per file: half the
    time of ``os.stat(path)`` for 64,000 files here); a folder without subfolders (ImageNet's)
    costs nothing more."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except PermissionError:
        raise _fail(path, "cannot read it (permission denied); give read access or another "
                          "path") from None  # fmt: skip
    except OSError as exc:
        raise _fail(path, f"cannot read it ({exc.strerror}); check the path and the file "
                          "system") from None  # fmt: skip
    try:
        with os.scandir(fd) as it:
            every = list(it)
        entries = sorted((e for e in every if not e.name.startswith(".")), key=lambda e: e.name)
        names = [e.name for e in entries if _is_image_name(e.name) and e.is_file()]
        sizes = [os.stat(n, dir_fd=fd).st_size for n in names]
        # every folder is walked, one named like an image (``photos.jpg/``) too, as os.walk does
        subs = [e.name for e in entries if e.is_dir()]
        left = _left_out(e.name for e in entries if e.is_file())
        dangling = sum(1 for e in entries if _is_image_name(e.name) and _dangling(e))
        if dangling:
            left[DANGLING] += dangling
        hidden = sum(1 for e in every if e.name.startswith(".") and _is_image_name(e.name))
        if hidden:
            left[HIDDEN] += hidden
    except PermissionError:
        raise _fail(path, "cannot read it (permission denied); give read access or another "
                          "path") from None  # fmt: skip
    finally:
        os.close(fd)
    if not subs:
        return names, sizes, len(names), [], left
    walked, walked_sizes, folders, walked_left = _walk_class(path)
    return walked, walked_sizes, len(names), folders, walked_left


#: the key of :func:`_left_out`'s counter under which links that lead nowhere are counted
#: (an extension key starts with a dot, or is ``(none)``)
DANGLING = "(dangling link)"
#: ... and hidden files named as images (macOS's ``._IMG_1.jpg``), which the suite leaves out
HIDDEN = "(hidden image name)"


def _dangling(e: os.DirEntry[str]) -> bool:
    """A link named as an image whose target does not exist (torchvision lists it by its name
    and fails when it opens it; the suite leaves it out and says so)."""
    if not e.is_symlink():
        return False
    try:
        e.stat()  # follows the link (relative to the listed folder's descriptor, if listed so)
    except OSError:
        return True
    return False


def _walk_error(exc: OSError) -> None:
    raise _fail(exc.filename, f"cannot read it ({exc.strerror}); give read access or another "
                              "path")  # fmt: skip


def _walk(path: Path) -> list[tuple[str, list[str], list[str]]]:
    """``os.walk(path, followlinks=True)`` as torchvision's ``make_dataset`` walks a class
    folder, hidden names left out as at the top, a folder reached twice through links walked
    once; each folder's (path, subfolders, files)."""
    seen: set[str] = set()
    out = []
    top = os.path.realpath(path)
    for root, dirs, files in os.walk(path, followlinks=True, onerror=_walk_error):
        real = os.path.realpath(root)
        if top.startswith(real.rstrip("/") + "/"):
            # a link up to a folder above the class folder (the dataset, or beyond it): its
            # other classes would be walked into this one, and os.walk (torchvision's) never
            # ends on it
            raise _fail(root, f"a link to {real}, a folder above the class folder {path}: "
                              "walked as ImageFolder walks (os.walk following links) it "
                              "loops, taking other classes' images into this one; remove "
                              "the link or point it at a folder of this class's images")  # fmt: skip
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        out.append((root, dirs, files))
    return out


def _walk_class(path: Path) -> tuple[list[str], list[int], list[str], Counter[str]]:
    """Every image under ``path`` in torchvision's order (the walk's folders sorted, each
    folder's names sorted): paths under ``path`` and bytes; the folders under it; and the
    extensions of the files left out (:func:`_left_out`)."""
    names: list[str] = []
    sizes: list[int] = []
    folders: list[str] = []
    left: Counter[str] = Counter()
    top = str(path)
    for root, _dirs, files in sorted(_walk(path)):
        rel = os.path.relpath(root, top)
        prefix = "" if rel == "." else rel + "/"
        if prefix:
            folders.append(rel)
        visible = [f for f in files if not f.startswith(".")]
        hidden = sum(1 for f in files if f.startswith(".") and _is_image_name(f))
        if hidden:
            left[HIDDEN] += hidden
        # a stat for the names that are not images only (the images are stat-ed below)
        left += _left_out(f for f in visible if not _is_image_name(f)
                          and os.path.isfile(os.path.join(root, f)))  # fmt: skip
        for f in sorted(f for f in visible if _is_image_name(f)):
            try:
                st = os.stat(os.path.join(root, f))
            except OSError:
                left[DANGLING] += 1  # torchvision lists it and fails to open it: noted
                continue
            if stat.S_ISREG(st.st_mode):
                names.append(prefix + f)
                sizes.append(st.st_size)
    return names, sizes, folders, left


def _listdir(path: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name)
    except PermissionError:
        raise _fail(
            path, "cannot read it (permission denied); give read access or another path"
        ) from None
    except OSError as exc:
        raise _fail(
            path, f"cannot read it ({exc.strerror}); check the path and the file system"
        ) from None


def detect(path: str | Path, cache_dir: Path | None = None) -> DetectedDataset:
    """The dataset at ``path`` (a directory or a single shard file); DataLayoutError when the
    suite cannot use it (see the module). ``cache_dir``: where an ImageFolder's listing is
    kept and found again (:func:`folder_key`), so the worker does not list 1.28M files the
    host listed while planning."""
    p = Path(path)
    if not p.exists():
        raise _fail(p, "no such file or directory; give a dataset's directory (ImageFolder, "
                       "TFRecord, RecordIO or WebDataset shards) or `dlsuite data make` one")  # fmt: skip
    if p.is_file():
        return _detect_file(p)
    if not os.access(p, os.R_OK | os.X_OK):
        raise _fail(p, "cannot read it (permission denied); give read access or another path")
    if (p / "manifest.json").is_file():
        suite = _detect_suite(p)
        if suite is not None:
            return suite
    entries = _listdir(p)
    dirs = [e for e in entries if e.is_dir()]
    files = [e for e in entries if e.is_file()]
    kinds: dict[str, list[os.DirEntry[str]]] = {}
    for e in files:
        kinds.setdefault(_kind(e), []).append(e)
    packed = {k: v for k, v in kinds.items()
              if k in ("tar", "rec", "tfrecord", "gzip_tfrecord", *OTHER_FORMATS)}  # fmt: skip
    if not dirs and not files:
        raise _fail(p, "empty; give a directory holding the dataset (or make one with "
                       "`dlsuite data make`)")  # fmt: skip
    if dirs:
        folder = _detect_imagefolder(p, dirs, quiet_if_no_images=bool(packed),
                                     cache_dir=cache_dir)  # fmt: skip
        if folder is not None:
            if packed or kinds.get("image"):
                others = ", ".join(f"{len(v)} {k} file(s)" for k, v in {**packed, **(
                    {"image": kinds["image"]} if kinds.get("image") else {})}.items())  # fmt: skip
                raise _fail(p, f"mixed layouts: {len(folder.classes or [])} class folders and "
                               f"{others} at the top; point --data at one layout's directory")  # fmt: skip
            if len(folder.classes or []) == 1:
                _one_class(p, folder, kinds.get("side", []))
            hidden = sorted(n for n in os.listdir(p) if n.startswith(".") and (p / n).is_dir())
            if hidden:
                folder.notes.append(
                    f"{len(hidden)} hidden folder(s) ({', '.join(hidden[:3])}) left out, as hidden "
                    "names are; torchvision's ImageFolder would take each as a class (and "
                    "refuse one without images)"
                )
            return folder
    if kinds.get("image"):
        raise _fail(p, f"{len(kinds['image'])} images but no class folders; ImageFolder needs "
                       "one folder per class (PATH/<class>/<image>): move them into class folders")  # fmt: skip
    if "gzip_tfrecord" in packed:
        raise _gzip_refused(p, [e.name for e in packed["gzip_tfrecord"]])
    if len(packed) > 1:
        desc = ", ".join(f"{len(v)} {k}" for k, v in packed.items())
        raise _fail(p, f"mixed layouts ({desc} files); keep one format per directory and "
                       "point --data at it")  # fmt: skip
    for other in OTHER_FORMATS:
        if other in packed:
            found = [Path(e.path) for e in packed[other]]
            return DetectedDataset(p, other, found, sum(f.stat().st_size for f in found),
                                   notes=[OTHER_FORMATS[other]])  # fmt: skip
    if "tfrecord" in packed:
        # a 0-byte file is a TFRecord file of no records (TensorFlow reads it so): one named
        # like ImageNet's shards (train-00007-of-01024) is a shard, not left out unsaid
        beside = kinds.get("other", [])
        empty = [e for e in beside if not e.name.startswith("_") and e.stat().st_size == 0]
        shards = sorted(packed["tfrecord"] + empty, key=lambda e: e.name)
        left = [e.name for e in beside if e not in empty]
        return _tfrecords(p, [Path(e.path) for e in shards], left)
    if "tar" in packed:
        return _webdataset(p, [Path(e.path) for e in packed["tar"]])
    if "rec" in packed:
        recs = [Path(e.path) for e in packed["rec"]]
        if len(recs) > 1:
            raise _fail(p, f"{len(recs)} .rec files ({', '.join(r.name for r in recs[:4])}); "
                           "point --data at one of them")  # fmt: skip
        return _recordio(recs[0])
    if kinds.get("other"):
        names = ", ".join(e.name for e in kinds["other"][:3])
        raise _fail(p, f"no dataset layout recognised (files such as {names}); the suite reads "
                       "ImageFolder, TFRecord, RecordIO (.rec) or WebDataset (.tar) datasets")  # fmt: skip
    raise _fail(p, "holds no images or shards; give the directory of a dataset")


#: files beside a lone class folder that hold labels ImageFolder would not read
LABEL_FILE_EXTS = (".csv", ".txt", ".json")


def one_class_note(label: str) -> str:
    """The note of a dataset whose samples are all one class (``data info``, the run's plan)."""
    return (f"1 class ({label}): every sample has the same label, so a classifier has nothing "
            "to learn; is that the dataset you meant?")  # fmt: skip


def _one_class(p: Path, folder: DetectedDataset, side: list[os.DirEntry[str]]) -> None:
    """An ImageFolder of one class folder: with a labels file beside it (``images/`` and
    ``labels.csv``), one error, as ImageFolder would train on it as one class; otherwise a
    note."""
    cls = (folder.classes or ["?"])[0]
    labels = [e.name for e in side if e.name.lower().endswith(LABEL_FILE_EXTS)
              and not e.name.lower().startswith(("readme", "license"))]  # fmt: skip
    if labels:
        raise _fail(p, f"one class folder ({cls}/) and {labels[0]} beside it: ImageFolder "
                       f"labels come from class folders, so {labels[0]} is not read and every "
                       f"image would be class 0; move the images into one folder per class "
                       f"({p}/<class>/<image>, the classes {labels[0]} gives)")  # fmt: skip
    folder.notes.append(one_class_note(f"the folder {cls}/, as ImageFolder reads it"))


LISTING_VERSION = 6  # 2: images in subfolders of class folders; 3: the files left out;
# 4: dangling links counted, folders named like images walked; 5: hidden image names counted;
# 6: split folders with a stray image at their top refused (a listing cached before took them)


def folder_key(p: Path, dirs: list[os.DirEntry[str]]) -> str:
    """What an ImageFolder's listing depends on, cheaply: the folder's and each class folder's
    real path, modification time (which changes when an entry is added, removed or renamed),
    mode and owner, and the reader's uid (whom permissions apply to). A file rewritten in place
    changes none of them: its listed size stays until its folder changes."""
    import hashlib

    h = hashlib.sha256(f"v{LISTING_VERSION}\t{os.getuid()}\t{os.path.realpath(p)}\n".encode())
    for e in [None, *dirs]:
        st = os.stat(p) if e is None else e.stat()
        name = "." if e is None else e.name
        h.update(f"{name}\t{st.st_mtime_ns}\t{st.st_mode}\t{st.st_uid}\t{st.st_gid}\n".encode())
    return h.hexdigest()[:24]


def path_tag(p: Path) -> str:
    """A short tag of a dataset's real path: the cached listings and indexes of one dataset
    share it, so a new one replaces the old ones (:func:`drop_stale`)."""
    import hashlib

    return hashlib.sha256(os.path.realpath(p).encode()).hexdigest()[:12]


def drop_stale(kept: Path) -> None:
    """Remove the other cached files of ``kept``'s dataset (``<kind>-<path tag>-*.npz``): a
    dataset that changed leaves no stale 50 MB listing behind."""
    kind, tag = kept.name.split("-")[:2]
    for other in kept.parent.glob(f"{kind}-{tag}-*.npz"):
        if other != kept:
            other.unlink(missing_ok=True)


def folders_key(p: Path, folders: list[str]) -> str:
    """The modification time, mode and owner of each folder inside the class folders (paths
    under ``p``): a cached listing of images in subfolders holds while these are unchanged
    (a folder added or removed inside a class folder changes its parent's time)."""
    import hashlib

    h = hashlib.sha256()
    for rel in folders:
        st = os.stat(p / rel)
        h.update(f"{rel}\t{st.st_mtime_ns}\t{st.st_mode}\t{st.st_uid}\t{st.st_gid}\n".encode())
    return h.hexdigest()


def _load_listing(
    path: Path, p: Path
) -> tuple[list[str], list[str], list[int], list[int], str, Counter[str]] | None:
    import numpy as np

    def text(z: Any, key: str) -> list[str]:
        raw = bytes(z[key]).decode("utf-8", "surrogateescape")
        return raw.split("\n") if raw else []

    try:
        with np.load(path, allow_pickle=False) as z:
            classes, rel, folders = text(z, "classes"), text(z, "relpaths"), text(z, "folders")
            if folders and folders_key(p, folders) != bytes(z["folders_key"]).decode():
                return None  # a folder inside a class folder changed: list again
            digest = bytes(z["digest"]).decode()
            left = Counter({k: int(v) for k, _, v in (line.partition("\t")
                                                      for line in text(z, "left_out"))})  # fmt: skip
            return classes, rel, z["sizes"].tolist(), z["labels"].tolist(), digest, left
    except (OSError, ValueError, KeyError):
        return None


def _save_listing(path: Path, p: Path, classes: list[str], relpaths: list[str], sizes: list[int],
                  labels: list[int], folders: list[str], left: Counter[str]) -> str | None:  # fmt: skip
    """Write the listing with its digest (names and sizes) and the folders inside the class
    folders (:func:`folders_key`); the digest, or None when it could not be cached."""
    import numpy as np

    from suite.datasets.make import list_digest

    if (
        any("\n" in r for r in relpaths)
        or any("\n" in c for c in classes)
        or any("\n" in k or "\t" in k for k in left)
    ):
        return None  # a name holding a newline: not cached

    def blob(lines: list[str]) -> Any:
        return np.frombuffer("\n".join(lines).encode("utf-8", "surrogateescape"), np.uint8)

    digest = list_digest(list(zip(relpaths, sizes, strict=True)))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            np.savez(
                fh, classes=blob(classes), relpaths=blob(relpaths),
                sizes=np.asarray(sizes, np.int64), labels=np.asarray(labels, np.int32),
                digest=np.frombuffer(digest.encode(), np.uint8), folders=blob(folders),
                left_out=blob([f"{k}\t{v}" for k, v in left.items()]),
                folders_key=np.frombuffer(folders_key(p, folders).encode(), np.uint8),
            )  # fmt: skip
        os.replace(tmp, path)
        drop_stale(path)
    except OSError:
        return None  # an unwritable data dir: the next run lists again
    return digest


#: folder names that are a dataset's splits, not its classes
SPLIT_NAMES = frozenset({"train", "training", "val", "valid", "validation", "test", "testing",
                         "dev", "eval"})  # fmt: skip


def _detect_imagefolder(
    p: Path, dirs: list[os.DirEntry[str]], quiet_if_no_images: bool,
    cache_dir: Path | None = None,
) -> DetectedDataset | None:  # fmt: skip
    cached = None
    if cache_dir is not None:
        cached = cache_dir / f"imagefolder-{path_tag(p)}-{folder_key(p, dirs)}.npz"
        found = _load_listing(cached, p) if cached.is_file() else None
        if found is not None:
            names, rels, nbytes, labs, known, was_left = found
            return DetectedDataset(
                p, "imagefolder", JoinedPaths(p, rels), sum(nbytes), classes=names,
                samples=len(rels), relpaths=rels, sizes=nbytes, labels=labs, digest=known,
                listing=f"cached ({cached}: the folders unchanged since it was listed)",
                notes=left_out_notes(was_left) + class_order_notes(names),
            )  # fmt: skip
    top = os.path.realpath(p).rstrip("/") + "/"
    for d in dirs:
        if d.is_symlink() and top.startswith(os.path.realpath(d.path).rstrip("/") + "/"):
            raise _fail(d.path, f"a link to {os.path.realpath(d.path)}, the dataset's own folder "
                                "or one above it: as a class folder it would hold every other "
                                "class's images (and os.walk, torchvision's, loops on it); "
                                "remove the link")  # fmt: skip
    listed = [(d, *_list_class(Path(d.path))) for d in dirs]
    # images at the top of no folder: a split level (train/, val/), not classes whose images
    # are all in subfolders (torchvision would take train and val as two classes)
    split_level = not any(direct for _d, _n, _b, direct, _f, _l in listed)
    # train/ and val/ whose images are in their class folders are splits even where a stray
    # image sits at a split's top (it made them two classes, "train" and "val")
    splits = [d.name for d, names, _b, direct, _f, _l in listed
              if d.name.lower() in SPLIT_NAMES and len(names) > direct]  # fmt: skip
    if len(splits) >= 2 and not split_level:
        raise _fail(p, f"holds split folders ({', '.join(splits[:4])}) whose images are in "
                       f"folders inside them: point --data at one split, e.g. {p / splits[0]}")  # fmt: skip
    classes: list[str] = []
    relpaths: list[str] = []
    sizes: list[int] = []
    labels: list[int] = []
    folders: list[str] = []
    empty: list[str] = []
    nested: list[str] = []
    left: Counter[str] = Counter()
    for d, names, nbytes, _direct, subs, class_left in listed:
        left += class_left
        if names and not split_level:
            label = len(classes)
            classes.append(d.name)
            prefix = d.name + "/"
            relpaths += [prefix + n for n in names]
            sizes += nbytes
            labels += [label] * len(names)
            folders += [prefix + f for f in subs]
        elif names:
            nested.append(d.name)
        else:
            empty.append(d.name)
    if not classes:
        if quiet_if_no_images:
            return None
        made = [n for n in nested if (p / n / "manifest.json").is_file()]
        if made:  # the data dir itself: datasets side by side, not one
            raise _fail(p, f"a data dir of {len(made)} dataset(s) `dlsuite data make` made "
                           f"({', '.join(made[:2])}{' ...' if len(made) > 2 else ''}): point "
                           f"--data at one of them, e.g. {p / made[0]}")  # fmt: skip
        if nested:
            raise _fail(p, f"holds folders of folders ({', '.join(nested[:4])}): point --data at "
                           f"one split, e.g. {p / nested[0]}")  # fmt: skip
        packed = _packed_folders(dirs[:64])
        if packed:  # train/ and validation/ of shards: splits of a packed dataset, not classes
            shown = ", ".join(f"{name}/ ({kind})" for name, kind in packed[:3])
            raise _fail(p, f"its folders hold shards, not class folders of images ({shown}): "
                           f"point --data at one of them, e.g. {p / packed[0][0]}")  # fmt: skip
        raise _fail(p, f"{len(dirs)} folder(s) but no images in them; give a directory whose "
                       "folders hold the images of one class each")  # fmt: skip
    if empty:
        raise _fail(p, f"{len(empty)} class folder(s) hold no images ({', '.join(empty[:4])}); "
                       "ImageFolder loaders refuse empty classes: remove them or add their images")  # fmt: skip
    listing = "listed"
    digest: str | None = None
    if cached is not None:
        digest = _save_listing(cached, p, classes, relpaths, sizes, labels, folders, left)
        listing = f"listed and cached ({cached})" if digest else "listed (not cached)"
    return DetectedDataset(p, "imagefolder", JoinedPaths(p, relpaths), sum(sizes),
                           classes=classes, samples=len(relpaths), relpaths=relpaths,
                           sizes=sizes, labels=labels, listing=listing, digest=digest,
                           notes=left_out_notes(left) + class_order_notes(classes))  # fmt: skip


def class_order_notes(classes: list[str]) -> list[str]:
    """The note of class folders named by numbers whose text order (torchvision's: labels are
    the sorted names' positions) is not their numeric order, so folder ``10`` is label 2 of
    ``0..10``. The labels stay torchvision's; the note says so and how to make them agree."""
    if len(classes) < 2 or not all(c.isascii() and c.isdigit() for c in classes):
        return []
    numeric = sorted(classes, key=lambda c: (int(c), c))
    if numeric == classes:
        return []
    i = next(i for i, (a, b) in enumerate(zip(classes, numeric, strict=True)) if a != b)
    width = max(len(c) for c in classes)
    return [f"the class folders are numbers, sorted as text as torchvision's ImageFolder sorts "
            f"them: folder {classes[i]}/ is label {i} (not {numeric.index(classes[i])}, its "
            f"place by number), labels follow {', '.join(classes[:4])}, ...; to have labels in "
            f"numeric order, rename the folders with leading zeros "
            f"({', '.join(c.zfill(width) for c in numeric[:2])}, ..., "
            f"{numeric[-1].zfill(width)})"]  # fmt: skip


def _packed_folders(dirs: list[os.DirEntry[str]]) -> list[tuple[str, str]]:
    """The folders among ``dirs`` whose top holds a packed format's files, and which."""
    named = {"tfrecord": "TFRecord", "gzip_tfrecord": "TFRecord", "tar": "WebDataset .tar",
             "rec": "RecordIO .rec"}  # fmt: skip
    out = []
    for d in dirs:
        try:
            with os.scandir(d.path) as it:
                kinds = {_kind(e) for e in it if not e.name.startswith(".") and e.is_file()}
        except OSError:
            continue
        found = [named[k] for k in named if k in kinds]
        if found:
            out.append((d.name, found[0]))
    return out


def left_out_notes(left: Counter[str]) -> list[str]:
    """The note of the files in class folders that are not images by their name: left out, as
    torchvision's ``ImageFolder`` leaves them out (its ``IMG_EXTENSIONS``), so the samples
    counted are fewer than the files a user counts; none when there are none."""
    left = Counter(left)
    dangling = left.pop(DANGLING, 0)
    hidden = left.pop(HIDDEN, 0)
    out = []
    if hidden:
        out.append(f"{hidden} hidden file(s) named as images in the class folders (such as "
                   "macOS's ._IMG_1.jpg) are left out, as hidden names are; torchvision's "
                   "ImageFolder would list them as samples")  # fmt: skip
    if dangling:
        out.append(f"{dangling} link(s) named as images in the class folders lead nowhere (their "
                   "targets are missing) and are left out; torchvision's ImageFolder would list "
                   "them and fail to open them: remove the links or restore their targets")  # fmt: skip
    if not left:
        return out
    n = sum(left.values())
    kinds = ", ".join(f"{ext} x{k}" for ext, k in left.most_common(4))
    more = f" and {len(left) - 4} more kinds" if len(left) > 4 else ""
    return [*out, f"{n} file(s) in the class folders are not images by their name ({kinds}{more}) "
                  f"and are left out, as ImageFolder leaves them out; images are named "
                  f"{', '.join(sorted(IMAGE_EXTS))}"]  # fmt: skip


def _tfrecords(p: Path, files: list[Path], left: list[str] | None = None) -> DetectedDataset:
    """TFRecord shards; ``left``: the files beside them that are neither shards nor side files
    (no TFRecord frame at their start), named in a note, as none is read."""
    total = sum(f.stat().st_size for f in files)
    notes = []
    if left:
        notes.append(f"{len(left)} file(s) beside the shards not read, as no TFRecord record "
                     f"starts them ({', '.join(left[:3])}{', ...' if len(left) > 3 else ''}): "
                     "a shard whose start is damaged would be one; check them")  # fmt: skip
    return DetectedDataset(p, "tfrecord", files, total, notes=notes)


def empty_shard_notes(files: list[str], counts: list[int]) -> list[str]:
    """The note of TFRecord or WebDataset shards that hold no samples (a TFRecord file of 0
    bytes, a tar of no members: the loaders read them as none), one line for them all. A
    0-byte ``.tar`` is no tar and is refused (:func:`suite.datasets.packed.index_webdataset`),
    as WebDataset's reader fails on it."""
    empty = [Path(f).name for f, n in zip(files, counts, strict=True) if n == 0]
    if not empty:
        return []
    verb = "holds" if len(empty) == 1 else "hold"
    return [f"{len(empty)} of {len(files)} shards {verb} no samples ({', '.join(empty[:3])}"
            f"{', ...' if len(empty) > 3 else ''}): the loaders read them as none; was a "
            "shard's writing stopped? write it again, or remove it"]  # fmt: skip


def _webdataset(p: Path, files: list[Path]) -> DetectedDataset:
    ok, why = is_webdataset_tar(files[0])
    if not ok:
        raise _fail(files[0], f"{why}; WebDataset shards are tars of <key>.<ext> members")
    total = sum(f.stat().st_size for f in files)
    return DetectedDataset(p, "webdataset", files, total)


def _recordio(rec: Path) -> DetectedDataset:
    if rec.stat().st_size == 0:  # as an empty .tar is named (packed.index_webdataset)
        raise _fail(rec, "an empty file (0 bytes), not a RecordIO file: a file whose writing "
                         "stopped? write it again or remove it")  # fmt: skip
    if not is_recordio(rec):
        raise _fail(rec, "not an MXNet RecordIO file (no RecordIO magic number at its start); "
                         "make it with im2rec or `dlsuite data make --format recordio`")  # fmt: skip
    idx = rec.with_suffix(".idx")
    notes, samples = [], None
    files = [rec]
    if idx.is_file():
        files.append(idx)
        with open(idx, "rb") as fh:
            samples = sum(1 for line in fh if line.strip())
    else:
        notes.append(f"no {idx.name} beside it: ImageRecordIter reads it, random access does not")
    return DetectedDataset(rec.parent, "recordio", files, rec.stat().st_size, samples=samples,
                           notes=notes)  # fmt: skip


def _detect_file(p: Path) -> DetectedDataset:
    if not os.access(p, os.R_OK):
        raise _fail(p, "cannot read it (permission denied); give read access or another path")
    name = p.name.lower()
    if name.endswith((".tar", ".tar.gz", ".tgz")):
        return _webdataset(p, [p])
    if name.endswith(".rec") or is_recordio(p):
        return _recordio(p)
    if name.endswith(".idx") and p.with_suffix(".rec").is_file():
        return _recordio(p.with_suffix(".rec"))
    if is_tfrecord(p):
        return _tfrecords(p, [p])
    if is_gzip_tfrecord(p):
        raise _gzip_refused(p.parent, [p.name])
    other = _other_format(p)
    if other:
        return DetectedDataset(p.parent, other, [p], p.stat().st_size, notes=[OTHER_FORMATS[other]])
    raise _fail(p, "not a dataset the suite reads (a TFRecord file, a RecordIO .rec or a "
                   "WebDataset .tar); or give the dataset's directory")  # fmt: skip


def _detect_suite(p: Path) -> DetectedDataset | None:
    import json

    remake = ("make it again (`dlsuite data make` with its parameters and --force), or, for a "
              "dataset of your own, move manifest.json out of its directory")  # fmt: skip
    try:
        manifest = json.loads((p / "manifest.json").read_text(encoding="utf-8"))
    except OSError:
        return None
    except ValueError as exc:
        # not another layout's file to pass over: a suite dataset's manifest, edited or cut off
        raise _fail(p / "manifest.json", f"not valid JSON ({exc}); a suite dataset's manifest "
                                         f"is written whole, last: {remake}") from None  # fmt: skip
    if not isinstance(manifest, dict) or not str(manifest.get("format", "")).startswith(
        "dlsuite-dataset/"
    ):
        return None
    formats: dict[str, DetectedDataset] = {}
    entries = manifest.get("formats", {})
    if not isinstance(entries, dict) or not all(
        isinstance(e, dict) and isinstance(e.get("path"), str) for e in entries.values()
    ):
        raise _fail(p / "manifest.json", f"its formats are not as `dlsuite data make` writes "
                                         f"them (each with a path); {remake}")  # fmt: skip
    for fmt, entry in entries.items():
        sub = p / entry["path"]
        if not sub.exists():
            raise _fail(p, f"its manifest lists the {fmt} format at {sub}, which is missing; "
                           "remove the directory and make the dataset again")  # fmt: skip
        formats[fmt] = detect(sub)
    if not formats:
        raise _fail(p, "a suite dataset whose manifest lists no formats; make it again")
    first = formats.get("folder") or next(iter(formats.values()))
    return DetectedDataset(
        p, "suite", first.files, sum(f.bytes for f in formats.values()),
        classes=first.classes, samples=manifest.get("images"), formats=formats,
        manifest=manifest,
    )  # fmt: skip


# -- corrupt images ------------------------------------------------------------------------


def decode_error(exc: BaseException, where: str) -> str:
    """Why an image did not decode, for the scan's list: Pillow's "cannot identify image file"
    as "not an image Pillow can read", and never an in-memory buffer's address in place of
    the file (``<_io.BytesIO object at 0x...>``)."""
    import re

    from PIL import UnidentifiedImageError

    if isinstance(exc, UnidentifiedImageError):
        return "not an image Pillow can read (no image format recognised in its bytes)"
    text = re.sub(r"<_io\.BytesIO object at 0x[0-9a-fA-F]+>", where, str(exc))
    return f"{type(exc).__name__}: {text}"[:300]


#: how often a scan reports its progress (files)
SCAN_PROGRESS_EVERY = 64


def scan_jpegs(
    files: Sequence[Path], sample: int | None = None, seed: int = 0, decode: bool = True,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Open (and with ``decode``, fully decode) images, all or a seeded ``sample`` of them;
    the corrupt ones are listed, never raised. A loader counts them too; this finds them
    before a run, on request. ``progress(what, done, total)`` is told as it goes."""
    import random

    from PIL import Image

    chosen = list(files)
    if sample is not None and sample < len(chosen):
        chosen = random.Random(seed).sample(chosen, sample)
    bad: list[dict[str, str]] = []
    for n, f in enumerate(chosen):
        if progress and n % SCAN_PROGRESS_EVERY == 0:
            progress("decoding images", n, len(chosen))
        try:
            with open(f, "rb") as fh:
                head = fh.read(4)
            # a .JPEG that is a PNG (ImageNet holds one) decodes: not corrupt
            if f.suffix.lower() in (".jpg", ".jpeg") and head[:2] != b"\xff\xd8":
                if head != b"\x89PNG":
                    raise OSError("no JPEG start-of-image marker")
            with Image.open(f) as im:
                if decode:
                    im.load()
                else:
                    im.verify()
        except Exception as exc:  # noqa: BLE001 - every failure to decode is a corrupt file
            bad.append({"path": str(f), "error": decode_error(exc, str(f))})
    if progress:
        progress("decoding images", len(chosen), len(chosen))
    return {
        "checked": len(chosen),
        "of": len(files),
        "sampled": len(chosen) < len(files),
        "decoded": decode,
        "corrupt": len(bad),
        "corrupt_files": bad[:100],
    }


#: the image formats TensorFlow's ``tf.io.decode_image`` reads (its loader's decoder), by the
#: magic numbers it dispatches on; Pillow reads more (TIFF, PPM ...)
TF_IMAGE_FORMATS = ("JPEG", "PNG", "GIF", "BMP", "WebP")


def tensorflow_decodes(data: bytes) -> bool:
    """Whether ``data`` starts as an image ``tf.io.decode_image`` reads (JPEG, PNG, GIF, BMP,
    WebP): checked by the scan of a TFRecord dataset, as TensorFlow fails a task on any other."""
    return (
        data[:3] == b"\xff\xd8\xff"
        or data[:4] in (b"\x89PNG", b"GIF8")
        or data[:2] == b"BM"
        or (data[:4] == b"RIFF" and data[8:12] == b"WEBP")
    )


def content_digest(files: Sequence[Path], root: Path) -> str:
    """sha256 of ``relpath<TAB>bytes`` lines of ``files`` (the suite's dataset digest)."""
    from suite.datasets.make import list_digest

    return list_digest([(os.path.relpath(f, root), f.stat().st_size) for f in files])
