"""The index of a user's packed dataset: every sample's place in its format, its key and its
label, read from the files as they are, with no sample list of the suite's and no framework.

* **TFRecord** (TensorFlow's ImageNet layout, ``build_imagenet_data.py``): each shard is a
  run of frames ``uint64 length, uint32 masked CRC-32C(length), data, uint32 CRC(data)``; the
  data is a ``tf.train.Example``. The index walks the frames (checking each length's CRC)
  and reads ``image/class/label`` (int64) and where ``image/encoded`` is from the Example's
  protobuf wire format, seeking past the image bytes (a few hundred bytes read per record).
  A sample's key is its shard and the frame's byte offset; its id within a shard is the
  record's ordinal, which is what ``tf.data`` can say (``TFRecordDataset.enumerate()``).
* **RecordIO** (im2rec: ``.rec`` with its ``.idx``): the ``.idx`` lists ``key<TAB>offset``;
  at each offset a record ``uint32 magic, uint32 cflag<<29 | length`` starts, whose data begins
  with im2rec's ``IRHeader`` (``uint32 flag, float32 label, uint64 id, uint64 id2``, then
  ``flag`` more float32 labels when ``flag > 0``). The key is the header's id (im2rec writes
  its ``.lst`` index there, and ``ImageRecordIter`` looks labels up by it). The whole
  ``.rec`` is walked frame by frame as well, so an ``.idx`` that does not match its ``.rec``
  is one error (:class:`IndexMismatch`), not a silently partial epoch.
* **WebDataset** (``.tar`` shards): members ``<key>.<ext>`` grouped by key, in tar order; an
  image (``jpg``, ``jpeg``, ``png``, ``webp``) and a label (``cls``: an integer;
  ``txt``: an integer or a class name; ``json``: ``label``/``cls``/``class``). The key is the
  shard and the member's key.

Labels are stored as they are in the files; the **label base** is detected from them (a 0
anywhere means 0-based; TensorFlow's ImageNet scripts write 1..1000 and keep 0 for
"background") and may be overridden by the user (``--label-base``).

Indexes are cached in the data dir (``indexes/``) under a digest of the shards' paths, sizes
and modification times, so a 1.28M-record dataset is walked once. Host side: the standard
library and NumPy.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from suite.datasets.layout import drop_stale, masked_crc32c, path_tag
from suite.errors import ConfigError

RECORDIO_MAGIC = 0xCED7230A
IMAGE_EXTS = ("jpg", "jpeg", "png", "webp")
LABEL_EXTS = ("cls", "txt", "json")
#: bump when what an index holds changes (a cached index of another version is rebuilt)
INDEX_VERSION = 2  # 2: RecordIO records of several labels refused


class IndexMismatch(ConfigError):
    """A packed dataset whose index does not match its shards (``.idx`` against ``.rec``)."""


def _fail(path: Path | str, what: str) -> ConfigError:
    return ConfigError(f"--data {path}: {what}")


@dataclass
class PackedIndex:
    """One row per sample, in stored order (shard by shard, record by record)."""

    layout: str
    root: str
    #: the data files (shards; RecordIO: the one .rec)
    files: list[str]
    shard: np.ndarray  # int32: index into files
    ordinal: np.ndarray  # int64: the record's number within its shard
    offset: np.ndarray  # int64: the frame's (TFRecord, RecordIO) or image member's (tar) offset
    length: np.ndarray  # int64: the frame's data length (TFRecord), record bytes, image bytes
    label: np.ndarray  # int64: the label as stored
    keys: list[str]
    #: RecordIO: each record's header id (what ImageRecordIter looks its labels up by)
    record_id: np.ndarray | None = None
    #: WebDataset: class names where labels were text, sorted (label = position)
    label_names: list[str] | None = None
    #: TFRecord: where image/encoded sits (absolute offset in the file, bytes)
    image_offset: np.ndarray | None = None
    image_length: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def samples(self) -> int:
        return int(self.label.size)

    def shard_counts(self) -> list[int]:
        return np.bincount(self.shard, minlength=len(self.files)).astype(int).tolist()

    def detected_label_base(self) -> int:
        """0 when a 0 is among the labels, else 1 (a 0 anywhere means 0-based)."""
        return 0 if self.label.size == 0 or int(self.label.min()) <= 0 else 1

    def classes(self) -> int:
        return int(np.unique(self.label).size)

    def image_bytes(self, i: int) -> bytes:
        """Sample ``i``'s encoded image, read from its file."""
        path = self.files[int(self.shard[i])]
        with open(path, "rb") as fh:
            if self.layout == "tfrecord":
                assert self.image_offset is not None and self.image_length is not None
                fh.seek(int(self.image_offset[i]))
                return fh.read(int(self.image_length[i]))
            if self.layout == "recordio":
                data = read_recordio(fh, int(self.offset[i]))
                return split_irheader(data)[3]
            fh.seek(int(self.offset[i]))
            return fh.read(int(self.length[i]))

    def to_arrays(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "shard": self.shard, "ordinal": self.ordinal, "offset": self.offset,
            "length": self.length, "label": self.label,
            "keys": np.asarray([k.encode("utf-8", "surrogateescape") for k in self.keys],
                               dtype=object),
        }  # fmt: skip
        for name in ("record_id", "image_offset", "image_length"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


# -- TFRecord ------------------------------------------------------------------------------


def tfrecord_frames(fh: BinaryIO, path: str) -> Iterator[tuple[int, int]]:
    """(frame offset, data length) of every record, checking each length's CRC; a shard that
    ends inside a record is one error naming the shard and the byte."""
    size = os.fstat(fh.fileno()).st_size
    pos = 0
    while pos < size:
        fh.seek(pos)
        head = fh.read(12)
        if len(head) < 12:
            raise _fail(path, f"truncated at byte {pos} (a TFRecord frame header needs 12 "
                              f"bytes, {len(head)} are left); rewrite the shard")  # fmt: skip
        (length,) = struct.unpack("<Q", head[:8])
        (crc,) = struct.unpack("<I", head[8:12])
        if masked_crc32c(head[:8]) != crc:
            raise _fail(path, f"not a TFRecord frame at byte {pos} (the length's CRC-32C does "
                              "not match); the shard is corrupt or not a TFRecord file")  # fmt: skip
        end = pos + 12 + length + 4
        if end > size:
            raise _fail(path, f"truncated: the record at byte {pos} needs {length} bytes, the "
                              f"file ends {end - size} bytes short; rewrite the shard")  # fmt: skip
        yield pos, length
        pos = end


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


class _Reader:
    """A window of a file read in small pieces with seeks past what is not wanted."""

    def __init__(self, fh: BinaryIO, start: int, end: int) -> None:
        self.fh, self.pos, self.end = fh, start, end
        fh.seek(start)

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.fh.read(1)
            if not b:
                raise EOFError
            self.pos += 1
            result |= (b[0] & 0x7F) << shift
            if not b[0] & 0x80:
                return result
            shift += 7

    def tag(self) -> tuple[int, int]:
        """A field's key: its number and wire type."""
        key = self.varint()
        return key >> 3, key & 7

    def read(self, n: int) -> bytes:
        data = self.fh.read(n)
        if len(data) < n:
            raise EOFError
        self.pos += n
        return data

    def skip(self, n: int) -> None:
        self.pos += n
        self.fh.seek(self.pos)

    def goto(self, pos: int) -> None:
        self.pos = pos
        self.fh.seek(pos)


def _skip_field(r: _Reader, wire: int) -> None:
    if wire == 0:
        r.varint()
    elif wire == 1:
        r.skip(8)
    elif wire == 2:
        r.skip(r.varint())
    elif wire == 5:
        r.skip(4)
    else:
        raise ValueError(f"protobuf wire type {wire} is not used by tf.train.Example")


def _feature(r: _Reader, end: int, key: str, small: set[str]) -> Any:
    """A ``tf.train.Feature`` ending at ``end``: ('bytes', [values] or (offset, length) of the
    first for a large one), ('int64', [values]), ('float', [values])."""
    values: list[Any] = []
    kind = "none"
    while r.pos < end:
        field_no, wire = r.tag()
        if wire != 2:
            _skip_field(r, wire)
            continue
        n = r.varint()
        inner_end = r.pos + n
        kind = {1: "bytes", 2: "float", 3: "int64"}.get(field_no, "none")
        while r.pos < inner_end:
            f, w = r.tag()
            if f != 1:
                _skip_field(r, w)
                continue
            if kind == "bytes" and w == 2:
                m = r.varint()
                if key in small:
                    values.append(r.read(m))
                else:
                    values.append((r.pos, m))
                    r.skip(m)
            elif kind == "int64" and w == 2:  # packed
                buf = r.read(r.varint())
                i = 0
                while i < len(buf):
                    v, i = _varint(buf, i)
                    values.append(v - (1 << 64) if v >= 1 << 63 else v)
            elif kind == "int64" and w == 0:
                v = r.varint()
                values.append(v - (1 << 64) if v >= 1 << 63 else v)
            elif kind == "float" and w == 2:
                buf = r.read(r.varint())
                values += list(struct.unpack(f"<{len(buf) // 4}f", buf))
            elif kind == "float" and w == 5:
                values.append(struct.unpack("<f", r.read(4))[0])
            else:
                _skip_field(r, w)
        r.goto(inner_end)
    return kind, values


def parse_example(fh: BinaryIO, start: int, length: int, small: set[str]) -> dict[str, Any]:
    """The features of the ``tf.train.Example`` at ``[start, start + length)`` of ``fh``:
    name -> (kind, values); bytes features not in ``small`` as (offset, length) pairs,
    skipped over, not read."""
    r = _Reader(fh, start, start + length)
    out: dict[str, Any] = {}
    while r.pos < r.end:
        tag = r.varint()
        if tag != 0x0A:  # Example.features (field 1, length-delimited)
            _skip_field(r, tag & 7)
            continue
        n = r.varint()
        feats_end = r.pos + n
        while r.pos < feats_end:
            t = r.varint()
            if t != 0x0A:  # Features.feature: map entries (field 1)
                _skip_field(r, t & 7)
                continue
            n = r.varint()
            entry_end = r.pos + n
            key = None
            value_at: tuple[int, int] | None = None
            while r.pos < entry_end:
                et = r.varint()
                if et == 0x0A:
                    key = r.read(r.varint()).decode("utf-8", "replace")
                elif et == 0x12:
                    n = r.varint()
                    value_at = (r.pos, n)
                    if key is not None:
                        break
                    r.skip(n)
                else:
                    _skip_field(r, et & 7)
            if key is not None and value_at is not None:
                r.goto(value_at[0])
                out[key] = _feature(r, value_at[0] + value_at[1], key, small)
            r.goto(entry_end)
        r.goto(feats_end)
    return out


LABEL_FEATURE = "image/class/label"
IMAGE_FEATURE = "image/encoded"


def index_tfrecord(root: Path, files: list[Path], progress: Progress | None = None) -> PackedIndex:
    shard, ordinal, offset, length, label, keys, img_off, img_len = [], [], [], [], [], [], [], []
    done = 0
    for s, f in enumerate(files):
        with open(f, "rb", buffering=16384) as fh:
            for n, (pos, size) in enumerate(tfrecord_frames(fh, str(f))):
                try:
                    ex = parse_example(fh, pos + 12, size, {"image/filename"})
                except (EOFError, IndexError, ValueError) as exc:
                    raise _fail(f, f"the record at byte {pos} is not a tf.train.Example "
                                   f"({type(exc).__name__}); the suite reads TensorFlow's "
                                   "ImageNet layout") from None  # fmt: skip
                lab = ex.get(LABEL_FEATURE)
                enc = ex.get(IMAGE_FEATURE)
                if not lab or lab[0] != "int64" or not lab[1]:
                    raise _fail(f, f"the record at byte {pos} has no int64 {LABEL_FEATURE} "
                                   f"(features: {', '.join(sorted(ex)) or 'none'}); the suite "
                                   "reads TensorFlow's ImageNet layout (image/encoded, "
                                   "image/class/label)")  # fmt: skip
                if not enc or enc[0] != "bytes" or not enc[1]:
                    raise _fail(f, f"the record at byte {pos} has no {IMAGE_FEATURE} bytes; the "
                                   "suite reads TensorFlow's ImageNet layout")  # fmt: skip
                shard.append(s)
                ordinal.append(n)
                offset.append(pos)
                length.append(size)
                label.append(int(lab[1][0]))
                keys.append(f"{f.name}@{pos}")
                img_off.append(enc[1][0][0])
                img_len.append(enc[1][0][1])
                done += 1
                if progress and done % 4096 == 0:
                    progress("indexing TFRecord", done, 0)
    return PackedIndex(
        "tfrecord", str(root), [str(f) for f in files], np.asarray(shard, np.int32),
        np.asarray(ordinal, np.int64), np.asarray(offset, np.int64),
        np.asarray(length, np.int64), np.asarray(label, np.int64), keys,
        image_offset=np.asarray(img_off, np.int64), image_length=np.asarray(img_len, np.int64),
    )  # fmt: skip


# -- RecordIO ------------------------------------------------------------------------------

LENGTH_MASK = (1 << 29) - 1
IRHEADER = struct.Struct("<IfQQ")


def _frame_head(fh: BinaryIO, pos: int) -> tuple[int, int]:
    """(cflag, data length) of the RecordIO frame at ``pos`` (``fh`` left after its header)."""
    fh.seek(pos)
    head = fh.read(8)
    if len(head) < 8:
        raise EOFError(f"a frame header at byte {pos} needs 8 bytes, {len(head)} are left")
    magic, lrec = struct.unpack("<II", head)
    if magic != RECORDIO_MAGIC:
        raise ValueError(f"no RecordIO magic number at byte {pos}")
    return lrec >> 29, lrec & LENGTH_MASK


def read_recordio(fh: BinaryIO, offset: int) -> bytes:
    """The record starting at ``offset``: its parts joined (a record whose data held the magic
    number at a 4-byte boundary was written in parts, cflag 1, 2 ... 3, the magic between)."""
    parts: list[bytes] = []
    pos = offset
    while True:
        cflag, n = _frame_head(fh, pos)
        data = fh.read(n)
        if len(data) < n:
            raise EOFError(f"RecordIO record at {offset} ends early")
        pos += 8 + n + (4 - n % 4) % 4
        parts.append(data)
        if cflag in (0, 3):
            return struct.pack("<I", RECORDIO_MAGIC).join(parts)
        if cflag == 2 and len(parts) == 1:
            raise ValueError(f"the record at byte {offset} is the middle of a split record")


def split_irheader(data: bytes) -> tuple[int, list[float], int, bytes]:
    """im2rec's ``IRHeader`` (flag, labels, id) and the image bytes after it."""
    flag, label, rid, _id2 = IRHEADER.unpack_from(data, 0)
    rest = data[IRHEADER.size :]
    if flag > 0:
        labels = list(struct.unpack_from(f"<{flag}f", rest, 0))
        rest = rest[4 * flag :]
    else:
        labels = [label]
    return flag, labels, rid, rest


def _record_head(fh: BinaryIO, offset: int) -> tuple[int, list[float], int]:
    """(the record's data bytes, its labels, its IRHeader id), reading only its header: a
    record in one part (nearly all) is not read further; one written in parts is joined."""
    cflag, n = _frame_head(fh, offset)
    if cflag != 0:
        data = read_recordio(fh, offset)
        _flag, labels, rid, _image = split_irheader(data)
        return len(data), labels, rid
    head = fh.read(IRHEADER.size)
    if len(head) < IRHEADER.size:
        raise EOFError(f"RecordIO record at {offset} ends early")
    flag, label, rid, _id2 = IRHEADER.unpack_from(head, 0)
    labels = [label]
    if flag > 0:
        extra = fh.read(4 * flag)
        if len(extra) < 4 * flag:
            raise EOFError(f"RecordIO record at {offset} ends early")
        labels = list(struct.unpack(f"<{flag}f", extra))
    return n, labels, rid


def recordio_frames(fh: BinaryIO) -> Iterator[int]:
    """The byte offset of every record's start in a ``.rec`` (walking the frames)."""
    size = os.fstat(fh.fileno()).st_size
    pos = 0
    while pos < size:
        cflag, n = _frame_head(fh, pos)
        if cflag in (0, 1):
            yield pos
        pos += 8 + n + (4 - n % 4) % 4
        if pos > size:
            raise EOFError(f"the frame at byte {pos - 8 - n} runs past the end of the file")


def read_idx(idx: Path) -> list[tuple[str, int]]:
    out = []
    with open(idx, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2 or not parts[1].isdigit():
                raise IndexMismatch(f"--data {idx}: line {lineno} is not '<key><TAB><offset>' "
                                    "(MXIndexedRecordIO's index); make it again with im2rec")  # fmt: skip
            out.append((parts[0], int(parts[1])))
    return out


def index_recordio(rec: Path, progress: Progress | None = None) -> PackedIndex:
    idx = rec.with_suffix(".idx")
    if not idx.is_file():
        raise _fail(rec, f"no {idx.name} beside it: the suite reads RecordIO with its index "
                         "(im2rec writes both; `im2rec.py --pack-label` or MXIndexedRecordIO)")  # fmt: skip
    entries = read_idx(idx)
    with open(rec, "rb", buffering=16384) as fh:
        try:
            starts = list(recordio_frames(fh))
        except (EOFError, ValueError) as exc:
            raise _fail(rec, f"{exc}; the .rec is truncated or not RecordIO") from None
        size = os.fstat(fh.fileno()).st_size
        listed = sorted(o for _, o in entries)
        if listed != starts:
            beyond = [o for o in listed if o >= size]
            stray = sorted(set(listed) - set(starts))
            unlisted = len(set(starts) - set(listed))
            what = (f"{len(beyond)} offset(s) past the end of {rec.name} ({size} bytes)" if beyond
                    else f"{len(stray)} offset(s) that are no record's start (e.g. {stray[0]})"
                    if stray else f"{unlisted} record(s) of the .rec it does not list")  # fmt: skip
            raise IndexMismatch(
                f"--data {idx}: does not match {rec.name}: {len(entries)} entries, "
                f"{len(starts)} records, {what}; make the index again (im2rec, or "
                "MXIndexedRecordIO) or give the .rec it was written with"
            )
        rid, label, offset, length, keys = [], [], [], [], []
        for n, off in enumerate(starts):
            try:
                size_of, labels, hid = _record_head(fh, off)
            except (EOFError, ValueError, struct.error) as exc:
                raise _fail(
                    rec, f"the record at byte {off} is not an im2rec record ({exc})"
                ) from None
            if len(labels) > 1:
                # a detection set's header width, or a multi-label set's first label, is not
                # a class: taken as one, every record would have been "class 2"
                shown = ", ".join(f"{v:g}" for v in labels[:6]) + (", ..." if len(labels) > 6
                                                                   else "")  # fmt: skip
                raise _fail(rec, f"the record at byte {off} carries {len(labels)} labels "
                                 f"({shown}: im2rec --pack-label, a detection or multi-label "
                                 "set); the suite reads classification records of one label "
                                 "each (im2rec without --pack-label)")  # fmt: skip
            lab = labels[0]
            if lab != int(lab):
                raise _fail(rec, f"the record at byte {off} has label {lab}, not a class index; "
                                 "the suite reads classification records (im2rec)")  # fmt: skip
            rid.append(hid)
            label.append(int(lab))
            offset.append(off)
            length.append(size_of)
            keys.append(str(hid))
            if progress and n % 4096 == 0:
                progress("indexing RecordIO", n, len(entries))
    if len(set(rid)) != len(rid):
        raise IndexMismatch(f"--data {rec}: {len(rid) - len(set(rid))} records share an id in "
                            "their IRHeader; ImageRecordIter identifies samples by it: make the "
                            ".rec again with im2rec")  # fmt: skip
    n = len(rid)
    return PackedIndex(
        "recordio", str(rec.parent), [str(rec)], np.zeros(n, np.int32), np.arange(n),
        np.asarray(offset, np.int64), np.asarray(length, np.int64), np.asarray(label, np.int64),
        keys, record_id=np.asarray(rid, np.int64),
    )  # fmt: skip


# -- WebDataset ----------------------------------------------------------------------------


def split_key(name: str) -> tuple[str, str]:
    """WebDataset's rule: the key is the path up to the first dot of the base name, the
    extension what follows it (lower-cased)."""
    d, _, base = name.rpartition("/")
    stem, _, ext = base.partition(".")
    return (f"{d}/{stem}" if d else stem), ext.lower()


def parse_label(ext: str, data: bytes) -> int | str:
    """A WebDataset label member: ``cls`` an integer; ``txt`` an integer or a class name;
    ``json`` an object with ``label``, ``cls`` or ``class`` (or a bare integer)."""
    text = data.decode("utf-8", "replace").strip()
    if ext == "json":
        doc = json.loads(text)
        if isinstance(doc, dict):
            for k in ("label", "cls", "class"):
                if k in doc:
                    doc = doc[k]
                    break
        if isinstance(doc, bool) or not isinstance(doc, (int, str)):
            raise ValueError(f"no integer label in {text[:60]!r}")
        return doc if isinstance(doc, int) else (int(doc) if doc.lstrip("-").isdigit() else doc)
    if text.lstrip("-").isdigit():
        return int(text)
    if ext == "cls":
        raise ValueError(f".cls holds {text[:40]!r}, not an integer")
    return text


def _tar_samples(tf: tarfile.TarFile) -> Iterator[tuple[str, dict[str, Any], list[str]]]:
    """(key, {ext: label bytes, or (data offset, size) of an image}, the members' names) of
    each sample, in tar order (consecutive members with one key, as WebDataset groups them)."""
    current: str | None = None
    sample: dict[str, Any] = {}
    members: list[str] = []
    for m in tf:
        if not m.isfile():
            continue
        key, ext = split_key(m.name)
        if key != current:
            if current is not None:
                yield current, sample, members
            current, sample, members = key, {}, []
        members.append(m.name)
        if ext in LABEL_EXTS:
            fobj = tf.extractfile(m)
            sample[ext] = fobj.read() if fobj is not None else b""
        elif ext in IMAGE_EXTS:
            sample[ext] = (m.offset_data, m.size)
    if current is not None:
        yield current, sample, members


def _missing_member(key: str, img: str | None, members: list[str], first: bool = False) -> str:
    """Why a WebDataset sample is refused: what it lacks, the members it has and, where a
    member's name has dots before its extension, WebDataset's rule and the renaming."""
    miss = "image (.jpg/.jpeg/.png/.webp)" if img is None else "label (.cls/.txt/.json)"
    shown = ", ".join(members[:4]) + (f" and {len(members) - 4} more" if len(members) > 4 else "")
    said = f"sample {key!r} has no {miss} member (its members: {shown or 'none'})"
    dotted = [m for m in members if "." in split_key(m)[1]]
    if not dotted and first and img is not None and "/" in key:
        folder = key.rpartition("/")[0]
        return (f"{said}; WebDataset samples are <key>.jpg with <key>.cls, and a folder in the "
                f"tar ({folder}/) is no label: a tar of class folders is an ImageFolder packed, "
                "so extract it (tar -xf) and give --data the directory")  # fmt: skip
    if not dotted:
        return said + "; WebDataset samples are <key>.jpg with <key>.cls"
    d, _, base = dotted[0].rpartition("/")
    stem, _, last = base.rpartition(".")
    fixed = (f"{d}/" if d else "") + stem.replace(".", "_") + "." + last
    its_key, its_ext = split_key(dotted[0])
    return (f"{said}: WebDataset's key ends at the first dot of the file name, so "
            f"{base} is key {its_key.rpartition('/')[2]!r} with extension {its_ext!r}; "
            f"rename the members without dots before the extension (e.g. {fixed})")  # fmt: skip


def index_webdataset(
    root: Path, files: list[Path], progress: Progress | None = None
) -> PackedIndex:
    shard, ordinal, offset, length, keys = [], [], [], [], []
    raw: list[int | str] = []
    for s, f in enumerate(files):
        try:
            tf = tarfile.open(f, "r:*")
        except (OSError, tarfile.TarError) as exc:
            if os.path.getsize(f) == 0:
                raise _fail(f, "an empty file (0 bytes), not a tar: a shard whose writing "
                               "stopped? write it again or remove it") from None  # fmt: skip
            # tarfile's "could not be opened" lists one line per compression it tried
            lines = [line.strip().lstrip("- ") for line in str(exc).splitlines()] or [""]
            why = lines[0].rstrip(":") + (": " + "; ".join(lines[1:]) if lines[1:] else "")
            raise _fail(f, f"not a readable tar ({why})") from None
        with tf:
            try:
                for n, (key, sample, members) in enumerate(_tar_samples(tf)):
                    img = next((e for e in IMAGE_EXTS if e in sample), None)
                    lab = next((e for e in LABEL_EXTS if e in sample), None)
                    if img is None or lab is None:
                        # no label yet in any shard, and the key in a folder: a packed
                        # ImageFolder, whose folders are its labels
                        raise _fail(f, _missing_member(key, img, members, first=not raw))
                    try:
                        value = parse_label(lab, sample[lab])
                    except ValueError as exc:
                        raise _fail(f, f"sample {key!r}: its .{lab} label: {exc}") from None
                    shard.append(s)
                    ordinal.append(n)
                    offset.append(sample[img][0])
                    length.append(sample[img][1])
                    raw.append(value)
                    keys.append(f"{f.name}/{key}")
                    if progress and len(keys) % 8192 == 0:
                        progress("indexing WebDataset", len(keys), 0)
            except tarfile.TarError as exc:
                raise _fail(f, f"a broken tar ({exc}); rewrite the shard") from None
    names = None
    if any(isinstance(v, str) for v in raw):
        if not all(isinstance(v, str) for v in raw):
            raise _fail(root, "its labels mix integers and class names; use one kind")
        names = sorted(set(map(str, raw)))
        pos = {c: i for i, c in enumerate(names)}
        labels = [pos[str(v)] for v in raw]
    else:
        labels = [int(v) for v in raw]
    notes = []
    if any(str(f).endswith((".gz", ".tgz")) for f in files):
        notes.append("compressed tars: the pixel check decompresses to reach an image")
    return PackedIndex(
        "webdataset", str(root), [str(f) for f in files], np.asarray(shard, np.int32),
        np.asarray(ordinal, np.int64), np.asarray(offset, np.int64),
        np.asarray(length, np.int64), np.asarray(labels, np.int64), keys, label_names=names,
        notes=notes,
    )  # fmt: skip


# -- building and caching ------------------------------------------------------------------

Progress = Callable[[str, int, int], None]


def files_digest(files: list[Path]) -> str:
    """sha256 of each data file's real path, size and modification time: what decides the
    index (a rewritten shard is a new index)."""
    h = hashlib.sha256(f"v{INDEX_VERSION}\n".encode())
    for f in files:
        st = os.stat(f)
        h.update(f"{os.path.realpath(f)}\t{st.st_size}\t{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def build(
    layout: str, root: Path, files: list[Path], progress: Progress | None = None
) -> PackedIndex:
    if layout == "tfrecord":
        return index_tfrecord(root, files, progress)
    if layout == "recordio":
        return index_recordio(files[0], progress)
    if layout == "webdataset":
        return index_webdataset(root, files, progress)
    raise ValueError(f"no packed index for the {layout} layout")


def load_or_build(layout: str, root: Path, files: list[Path], cache_dir: Path | None,
                  progress: Progress | None = None) -> tuple[PackedIndex, str]:  # fmt: skip
    """The index of these shards, from the cache in ``cache_dir`` when it holds one for them
    (the same paths, sizes and modification times), else walked and cached; and where it
    came from."""
    digest = files_digest(files)
    cached = cache_dir / f"{layout}-{path_tag(root)}-{digest[:24]}.npz" if cache_dir else None
    if cached is not None and cached.is_file():
        try:
            return _load(cached, layout, root, files), f"cached ({cached})"
        except (OSError, ValueError, KeyError):
            pass
    index = build(layout, root, files, progress)
    if cached is not None:
        try:
            _save(cached, index)
            return index, f"walked and cached ({cached})"
        except (OSError, ValueError):
            pass
    return index, "walked (not cached: the data dir is not writable)"


def _save(path: Path, index: PackedIndex) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"layout": index.layout, "root": index.root, "files": index.files,
            "label_names": index.label_names, "notes": index.notes, "version": INDEX_VERSION}  # fmt: skip
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    arrays = index.to_arrays()
    keys = arrays.pop("keys")
    if any(b"\n" in k for k in keys):
        raise ValueError("a key holds a newline: not cached")
    blob = b"\n".join(keys)
    with open(tmp, "wb") as fh:
        np.savez(fh, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8),
                 keys=np.frombuffer(blob, np.uint8), **arrays)  # fmt: skip
    os.replace(tmp, path)
    drop_stale(path)


def _load(path: Path, layout: str, root: Path, files: list[Path]) -> PackedIndex:
    with np.load(path, allow_pickle=False) as z:
        meta = json.loads(bytes(z["meta"]).decode())
        if meta.get("version") != INDEX_VERSION or meta["files"] != [str(f) for f in files]:
            raise ValueError("another index")
        raw = bytes(z["keys"])
        keys = [k.decode("utf-8", "surrogateescape") for k in raw.split(b"\n")] if raw else []
        opt = {k: z[k] for k in ("record_id", "image_offset", "image_length") if k in z.files}
        return PackedIndex(
            layout, str(root), meta["files"], z["shard"], z["ordinal"], z["offset"],
            z["length"], z["label"], keys, label_names=meta.get("label_names"),
            notes=meta.get("notes") or [], **opt,
        )  # fmt: skip


def reader_of(layout: str) -> Callable[[PackedIndex, int], bytes]:
    """How to read sample ``i``'s image bytes (compressed tars go through tarfile)."""

    def read(index: PackedIndex, i: int) -> bytes:
        f = index.files[int(index.shard[i])]
        if layout == "webdataset" and f.endswith((".gz", ".tgz")):
            key = index.keys[i].split("/", 1)[1]
            with tarfile.open(f, "r:*") as tf:
                for m in tf:
                    k, ext = split_key(m.name)
                    if k == key and ext in IMAGE_EXTS:
                        fobj = tf.extractfile(m)
                        return fobj.read() if fobj is not None else b""
            return b""
        return index.image_bytes(i)

    return read
