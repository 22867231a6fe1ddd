"""The dataset a training-level task reads: found (``--data``) or made on first use (the
suite's seeded set, cached by its parameters in the data dir), and its catalogue: every
sample's id, label, key and file, which the loaders report against.

Made in the worker, i.e. in the task's framework environment: the folder with NumPy and
Pillow, a packed format with its framework's own writer run by this interpreter
(suite/datasets/formats.py). Imports no framework.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from suite.adapters.data_words import LoaderSpec
from suite.datasets import layout as L
from suite.datasets import make as M
from suite.errors import ConfigError

#: the dataset fields of a task's parameters (the suite's set by size, or a user's path)
DATASET_KEYS = ("dataset", "images", "classes", "data", "label_base")


@dataclass
class Catalogue:
    """Every sample of a dataset: id ``i`` has ``relpaths[i]`` (under the folder, where
    there is one), ``labels[i]`` and ``keys[i]`` (the file stem packed formats store)."""

    relpaths: list[str]
    labels: list[int]
    keys: list[str]
    classes: int

    def key_to_id(self) -> dict[str, int]:
        return {k: i for i, k in enumerate(self.keys)}


@dataclass
class TaskData:
    """The dataset of one task: where it is, its format's files, the catalogue, and how it
    came to be there (made by this task, reused, or the user's)."""

    path: Path
    format: str
    format_path: Path
    files: list[str]
    bytes: int
    catalogue: Catalogue
    origin: str
    digest: str
    made_s: float | None = None
    folder: Path | None = None
    index_file: str | None = None
    record_ids: dict[int, int] = field(default_factory=dict)
    manifest: dict[str, Any] | None = None
    #: the layout found (a user's dataset) and how its labels count (0- or 1-based)
    layout: str | None = None
    label_base: int = 0
    label_base_source: str = "the suite's labels are 0-based"
    #: a user's packed dataset: its index (every sample's place, key and label), and the
    #: index row of each sample id of this task
    index: Any = None
    rows: np.ndarray | None = None
    index_source: str | None = None
    #: TFRecord and WebDataset: the id of each file's first record (ids = base + ordinal)
    shard_bases: list[int] | None = None
    #: RecordIO: part p of m of the .rec (a subset), and this rank's part's record count
    rec_part: tuple[int, int] | None = None
    part_records: dict[int, int] | None = None
    label_names: list[str] | None = None
    #: a subset of the dataset (``images``): how it was chosen, of how many
    subset: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    #: seconds the worker took to find (or make) the dataset and build its catalogue
    prepare_s: float | None = None

    @property
    def samples(self) -> int:
        return len(self.catalogue.labels)

    @property
    def mean_sample_bytes(self) -> float:
        """Bytes of the format per sample (the JPEG plus the format's framing)."""
        return self.bytes / max(1, self.samples)

    def spec(self, *, workers: int, batch: int, transform: str, seed: int, rank: int = 0,
             world: int = 1, decode: str = "host") -> LoaderSpec:  # fmt: skip
        return LoaderSpec(
            format=self.format, root=str(self.format_path), files=list(self.files),
            labels=list(self.catalogue.labels), keys=list(self.catalogue.keys),
            workers=workers, batch=batch, transform=transform, seed=seed, rank=rank,
            world=world, index_file=self.index_file, record_ids=dict(self.record_ids),
            shard_bases=self.shard_bases, rec_part=self.rec_part,
            part_records=(self.part_records or {}).get(rank), label_names=self.label_names,
            decode=decode,
        )  # fmt: skip

    def image_bytes(self, sid: int) -> builtins.bytes:
        """Sample ``sid``'s encoded image as stored (the folder's file, or read from the
        packed format at the place its index gives)."""
        if self.index is not None and self.rows is not None:
            from suite.datasets.packed import reader_of

            return reader_of(self.index.layout)(self.index, int(self.rows[sid]))
        assert self.folder is not None
        with open(self.folder / self.catalogue.relpaths[sid], "rb") as fh:
            return fh.read()

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": str(self.path),
            "format": self.format,
            "format_path": str(self.format_path),
            "origin": self.origin,
            "samples": self.samples,
            "classes": self.catalogue.classes,
            "files": len(self.files),
            "bytes": self.bytes,
            "mean_sample_bytes": self.mean_sample_bytes,
            "digest": self.digest,
        }
        if self.layout is not None:
            out["layout"] = self.layout
            out["label_base"] = self.label_base
            out["label_base_source"] = self.label_base_source
        if self.index_source is not None:
            out["index"] = self.index_source
        if self.subset is not None:
            out["subset"] = self.subset
        if self.notes:
            out["notes"] = list(self.notes)
        if self.made_s is not None:
            out["made_s"] = self.made_s
        if self.prepare_s is not None:
            out["prepare_s"] = self.prepare_s
        if self.manifest is not None:
            out["name"] = self.manifest.get("name")
            out["jpeg"] = {k: self.manifest["jpeg"][k] for k in (
                "mean_bytes", "median_bytes", "mean_width", "mean_height")}  # fmt: skip
        return out


def suite_params(params: dict[str, Any], seed: int) -> M.DatasetParams:
    """The suite dataset a task's parameters name (``dataset`` quick/full, with ``images``
    and ``classes`` overriding its counts)."""
    return M.params_for(params["dataset"], seed=seed, classes=params.get("classes"),
                        images=params.get("images"))  # fmt: skip


def data_paths(params: dict[str, Any], data_dir: str | None, seed: int) -> list[str]:
    """The paths whose storage the quiet check reads before the task (host side too): the
    user's dataset, or the suite dataset's directory (or the data dir while it is not made)."""
    if params.get("data"):
        return [str(params["data"])]
    from suite.datasets.location import resolve_data_dir

    root = Path(data_dir) if data_dir else resolve_data_dir().path
    final = root / suite_params(params, seed).name
    p = final if final.exists() else M.existing_parent(root)
    return [str(p)]


def ensure(params: dict[str, Any], fmt: str, data_dir: str | None, seed: int,
           say: Any = None, world: int = 1) -> TaskData:  # fmt: skip
    """The task's dataset in format ``fmt``: the user's (``params['data']``, detected and
    checked) or the suite's, made here when missing."""
    if params.get("data"):
        return _user(Path(params["data"]), fmt, params, data_dir, seed, world)
    from suite.datasets import formats as F
    from suite.datasets.location import resolve_data_dir

    root = Path(data_dir) if data_dir else resolve_data_dir().path
    p = suite_params(params, seed)
    t0 = time.perf_counter()
    made_before = (root / p.name / M.MANIFEST).is_file()
    ds = M.make_imagefolder(root, params["dataset"], seed, params.get("classes"),
                            params.get("images"))  # fmt: skip
    had_format = fmt == "folder" or fmt in ds.manifest.get("formats", {})
    if fmt != "folder":
        with _one_process_env():
            ds = F.add_format(ds, fmt, python=sys.executable)
    made_s = None if (made_before and had_format) else time.perf_counter() - t0
    manifest = ds.manifest
    files_list = M.file_list(ds)
    relpaths = [r for r, _ in files_list]
    cat = Catalogue(relpaths, [lab for _, lab in files_list],
                    [Path(r).stem for r in relpaths], manifest["classes"])  # fmt: skip
    entry = manifest["formats"][fmt]
    fpath = ds.path / entry["path"]
    record_ids: dict[int, int] = {}
    index_file = None
    if fmt == "folder":
        files = [str(fpath / r) for r in relpaths]
    elif fmt == "recordio":
        files = [str(fpath / "train.rec")]
        index_file = str(fpath / "train.idx")
        record_ids = _lst_ids(fpath / "train.lst", {r: i for i, r in enumerate(relpaths)})
    else:
        files = sorted(str(f) for f in fpath.iterdir() if not f.name.startswith("."))
    origin = "made by this task" if made_s is not None else "reused (made earlier)"
    return TaskData(
        path=ds.path, format=fmt, format_path=fpath, files=files, bytes=entry["bytes"],
        catalogue=cat, origin=origin, digest=entry["digest"], made_s=made_s,
        folder=ds.folder, index_file=index_file, record_ids=record_ids, manifest=manifest,
    )  # fmt: skip


#: what a launcher exports to each rank: a format writer (a subprocess) is no rank of the task
#: (webdataset's reader refuses to run single-node with WORLD_SIZE=2 in its environment)
_RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
              "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")  # fmt: skip


@contextlib.contextmanager
def _one_process_env() -> Iterator[None]:
    saved = {k: os.environ.pop(k) for k in _RANK_VARS if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def _lst_ids(lst: Path, by_relpath: dict[str, int]) -> dict[int, int]:
    """im2rec's list (``index<TAB>label<TAB>relpath``): record index -> sample id."""
    out: dict[int, int] = {}
    for line in lst.read_text().splitlines():
        parts = line.split("\t")
        if len(parts) >= 3:
            rel = parts[-1]
            if rel not in by_relpath:
                by_relpath[rel] = len(by_relpath)
            out[int(parts[0])] = by_relpath[rel]
    return out


def _user(path: Path, fmt: str, params: dict[str, Any], data_dir: str | None,
          seed: int, world: int = 1) -> TaskData:  # fmt: skip
    """A user's dataset (``--data``), read as it is: its layout must be ``fmt``'s (planning
    makes it so; a guard here), a subset where ``params['images']`` asks for one."""
    found = L.detect(path, cache_dir=index_cache_dir(data_dir))
    if found.layout == "suite":
        if fmt not in found.formats:
            have = ", ".join(found.formats)
            raise ConfigError(
                f"--data {path}: this suite dataset has no {fmt} copy (it has: {have}); run "
                f"`dlsuite data make --format {fmt}` with its size, or choose format = one of those"
            )
        manifest = found.manifest or {}
        root = path.parent
        suite_p = {"dataset": manifest["params"]["size"].split("-")[0],
                   "images": manifest["images"], "classes": manifest["classes"]}  # fmt: skip
        data = ensure(suite_p, fmt, str(root), int(manifest["params"]["seed"]))
        data.origin = "the user's (--data), a suite dataset"
        return data
    if found.format != fmt:
        raise ConfigError(
            f"--data {path}: holds a {found.layout} dataset, the task reads {fmt}; "
            f"set format = {found.format} (or give a {fmt} dataset)"
        )
    if fmt == "folder":
        return _user_folder(path, found, params, seed)
    return _user_packed(path, found, params, data_dir, seed, world)


def _user_folder(path: Path, found: L.DetectedDataset, params: dict[str, Any],
                 seed: int) -> TaskData:  # fmt: skip
    """A user's ImageFolder: sample ids in the listing's order (class folders sorted, files
    sorted in each), labels the sorted class folders' positions. Built from the listing's
    strings, with no ``Path`` per file: 1.28M files take seconds."""
    assert found.relpaths is not None and found.sizes is not None and found.labels is not None
    relpaths_all, sizes, labels_all = found.relpaths, found.sizes, np.asarray(found.labels)
    digest = found.digest or M.list_digest(list(zip(relpaths_all, sizes, strict=True)))
    subset = None
    if params.get("images") and params["images"] < len(relpaths_all):
        chosen = stratified(labels_all, int(params["images"]), seed)
        relpaths = [relpaths_all[i] for i in chosen]
        labels = labels_all[chosen].tolist()
        nbytes = sum(sizes[i] for i in chosen)
        subset = {
            "images": int(params["images"]), "samples": int(chosen.size),
            "of": len(relpaths_all), "bytes": nbytes,
            "digest": M.list_digest([(relpaths_all[i], sizes[i]) for i in chosen]),
            "how": "stratified by class: each class's share of the dataset, the images drawn "
                   "seeded within each class, the rest never read",
            "classes_covered": int(np.unique(labels_all[chosen]).size),
        }  # fmt: skip
    else:
        relpaths, labels, nbytes = relpaths_all, labels_all.tolist(), found.bytes
        if params.get("images"):
            subset = whole_dataset(int(params["images"]), len(relpaths_all))
            subset.update(bytes=nbytes, digest=digest,
                          classes_covered=int(np.unique(labels_all).size))  # fmt: skip
    base = str(path).rstrip("/") + "/"
    return TaskData(
        path=path, format="folder", format_path=path, files=[base + r for r in relpaths],
        bytes=nbytes, catalogue=Catalogue(relpaths, labels, relpaths, len(found.classes or [])),
        origin="the user's (--data)", digest=digest, folder=path, layout="imagefolder",
        label_base=0, label_base_source="ImageFolder: the sorted class folders' positions",
        subset=subset, index_source=found.listing,
    )  # fmt: skip


def whole_dataset(asked: int, samples: int) -> dict[str, Any]:
    """The subset record of ``images`` that asked for all of the dataset or more: what was
    delivered, not the number asked (the params keep that)."""
    return {
        "images": asked, "samples": samples, "of": samples,
        "how": "all of it: the dataset holds fewer samples than asked" if asked > samples
        else "all of it: the number asked",
    }  # fmt: skip


def stratified(labels: np.ndarray, n: int, seed: int) -> np.ndarray:
    """``n`` sample ids drawn class by class in proportion to each class's share (largest
    remainders rounded up), seeded; sorted."""
    rng = np.random.default_rng([seed, 0x737562])  # "sub"
    classes, counts = np.unique(labels, return_counts=True)
    exact = counts * (n / labels.size)
    quota = np.floor(exact).astype(np.int64)
    short = n - int(quota.sum())
    if short > 0:
        quota[np.argsort(-(exact - quota), kind="stable")[:short]] += 1
    order = np.argsort(labels, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    picked = [
        rng.choice(order[s : s + c], size=int(q), replace=False)
        for s, c, q in zip(starts, counts, quota, strict=True)
        if q
    ]
    return np.sort(np.concatenate(picked)) if picked else np.zeros(0, np.int64)


def index_cache_dir(data_dir: str | None) -> Path | None:
    """Where the indexes of users' packed datasets are cached (the data dir's ``indexes/``)."""
    from suite.datasets.location import resolve_data_dir

    try:
        root = Path(data_dir) if data_dir else resolve_data_dir().path
    except ConfigError:
        return None
    return root / "indexes"


def packed_index(found: L.DetectedDataset, data_dir: str | None) -> tuple[Any, str]:
    from suite.datasets import packed

    files = [f for f in found.files if not str(f).endswith(".idx")]
    return packed.load_or_build(found.layout, found.path, files, index_cache_dir(data_dir))


def label_notes(index: Any, base: int) -> list[str]:
    """What a packed dataset's labels tell a user before a run (``data info``, the plan):
    one class; labels far sparser than their range (the feed benchmark trains
    ``max label - base + 1`` outputs, so synset numbers as labels make a classifier far
    larger than the classes held)."""
    if not index.samples:
        return []
    classes, top = index.classes(), int(index.label.max())
    if classes == 1:
        return [L.one_class_note(f"label {int(index.label[0])}")]
    outputs = top - base + 1
    if outputs > 2 * classes and outputs - classes >= 100:
        return [f"{classes:,} distinct labels, but they run up to {top:,} ({base}-based): the "
                f"feed benchmark's classifier has {outputs:,} outputs, one per label up to the "
                "largest; number the classes 0..N-1 (or 1..N) to train one of their size"]  # fmt: skip
    return []


def label_base_of(index: Any, given: int | None, path: Path | str) -> tuple[int, str]:
    """The label base: given (``--label-base``) or detected (a 0 anywhere means 0-based)."""
    detected = index.detected_label_base()
    lo = int(index.label.min()) if index.samples else 0
    if lo < 0:
        # a classifier's targets count from 0 (cross-entropy refuses -1: the feed task failed
        # with PyTorch's IndexError); -1 commonly marks an unlabelled sample
        neg = np.flatnonzero(index.label < 0)
        raise ConfigError(
            f"--data {path}: {neg.size} sample(s) have a negative label (the smallest {lo}, "
            f"e.g. {index.keys[int(neg[0])]}); labels count from 0 or 1 (a negative one often "
            "marks an unlabelled sample): drop those samples from the shards or relabel them"
        )
    if given is None:
        why = ("a 0 is among the labels" if detected == 0 else
               f"no 0 among the labels (the smallest is {lo}): 1-based, as TensorFlow's "
               "ImageNet scripts write them (0 kept for background)")  # fmt: skip
        return detected, f"detected: {why}"
    if given == 1 and lo < 1:
        raise ConfigError(
            f"--label-base 1: the dataset at {path} has label {lo}; labels counted from 1 "
            "have none below 1: drop --label-base (detected: 0-based) or give 0"
        )
    return given, "given (--label-base)"


def drawn_shards(counts: list[int], want: int | None, seed: int) -> list[int]:
    """The shards (positions, sorted) a subset of ``want`` samples of an unindexed format
    reads: whole shards drawn seeded until ``want`` is reached; every shard without one."""
    if not want or want >= sum(counts):
        return list(range(len(counts)))
    order = np.random.default_rng([seed, 0x737562]).permutation(len(counts))
    total, chosen = 0, []
    for s in order.tolist():
        chosen.append(s)
        total += counts[s]
        if total >= want:
            break
    return sorted(chosen)


def rank_samples(counts: list[int], want: int | None, seed: int, world: int) -> list[int]:
    """The samples each rank reads of an unindexed format's shards: each rank reads whole
    shards, every ``world``-th of those read from its rank on (``Dataset.shard``, WebDataset's
    node split)."""
    chosen = drawn_shards(counts, want, seed)
    return [sum(counts[s] for s in chosen[r::world]) for r in range(world)]


def _user_packed(path: Path, found: L.DetectedDataset, params: dict[str, Any],
                 data_dir: str | None, seed: int, world: int) -> TaskData:  # fmt: skip
    index, how = packed_index(found, data_dir)
    base, base_source = label_base_of(index, params.get("label_base"), path)
    n_all = index.samples
    want = params.get("images")
    counts = index.shard_counts()
    files_idx = list(range(len(index.files)))
    subset = None
    rec_part = None
    if found.layout == "recordio":
        m = 1 if not want or want >= n_all else max(1, n_all // int(want))
        p = int(np.random.default_rng([seed, 0x737562]).integers(0, m))
        parts = [recordio_part(n_all, p * world + r, m * world) for r in range(world)]
        rows = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        part_records = {r: int(parts[r].size) for r in range(world)}
        if want and want >= n_all:
            subset = whole_dataset(int(want), n_all)
        elif want and m == 1:  # more than half of the records: no part smaller than all
            subset = {
                "images": int(want), "samples": n_all, "of": n_all,
                "how": "all of it: ImageRecordIter reads whole parts of the .rec, and the "
                       f"smallest part that holds {int(want)} is the whole of its {n_all}",
            }  # fmt: skip
        if m > 1:
            rec_part = (p, m)
            subset = {
                "images": int(want or 0), "samples": int(rows.size), "of": n_all,
                "how": f"part {p} of {m} of the .rec (ImageRecordIter's part_index/num_parts "
                       "over its .idx: a contiguous run of ceil(records / parts) records); "
                       "ImageRecordIter reads whole parts, so the subset is not stratified",
            }  # fmt: skip
    else:
        chosen = files_idx
        if want and want < n_all:
            chosen = drawn_shards(counts, int(want), seed)
            total = sum(counts[s] for s in chosen)
            subset = {
                "images": int(want), "samples": total, "of": n_all,
                "how": f"{len(chosen)} whole shards of {len(index.files)}, drawn seeded: an "
                       f"unindexed {found.layout} is read shard by shard, so a subset is whole "
                       "shards (a random sample of the classes where the shards were shuffled "
                       "when written, as ImageNet's conversion scripts do)",
                "shards": [Path(index.files[s]).name for s in chosen],
            }  # fmt: skip
        elif want:
            subset = whole_dataset(int(want), n_all)
        rows = np.concatenate([np.flatnonzero(index.shard == s) for s in chosen])
        files_idx = chosen
        part_records = None
    labels = index.label[rows]
    keys = [index.keys[int(r)] for r in rows]
    classes = int(labels.max()) - base + 1 if labels.size else 0
    fmt = found.format
    record_ids: dict[int, int] = {}
    shard_bases = None
    if fmt == "recordio":
        assert index.record_id is not None
        record_ids = {int(index.record_id[r]): i for i, r in enumerate(rows)}
        files = [index.files[0]]
    else:
        files = [index.files[s] for s in files_idx]
        shard_bases = np.concatenate([[0], np.cumsum([counts[s] for s in files_idx])[:-1]]
                                     ).astype(int).tolist()  # fmt: skip
    shard_paths = [Path(f) for f in index.files]
    digest = M.list_digest([(f.name, f.stat().st_size) for f in shard_paths])
    read_bytes = (
        int(sum(os.stat(f).st_size for f in files))
        if fmt != "recordio"
        else int(index.length[rows].sum() + 8 * rows.size)
    )
    if subset is not None:
        subset["bytes"] = read_bytes
        subset["classes_covered"] = int(np.unique(labels).size)
    idx_file = str(Path(index.files[0]).with_suffix(".idx")) if fmt == "recordio" else None
    return TaskData(
        path=path, format=fmt, format_path=Path(index.root), files=files, bytes=read_bytes,
        catalogue=Catalogue(keys, labels.tolist(), keys, classes), origin="the user's (--data)",
        digest=digest, layout=found.layout, label_base=base, label_base_source=base_source,
        index=index, rows=rows, index_source=how, shard_bases=shard_bases,
        record_ids=record_ids, rec_part=rec_part, part_records=part_records,
        label_names=index.label_names, subset=subset, index_file=idx_file,
        notes=list(index.notes) + list(found.notes),
    )  # fmt: skip


def eviction_targets(data: TaskData) -> list[Any]:
    """What a cold epoch reads, to evict: the folder's (or subset's) files, the shards read,
    or a RecordIO part's byte range (``(path, offset, length)``) and its index."""
    if data.rec_part is not None and data.index is not None and data.rows is not None:
        starts = data.index.offset
        last = int(data.rows.max())
        lo = int(starts[data.rows.min()])
        hi = int(starts[last + 1]) if last + 1 < starts.size else os.stat(data.files[0]).st_size
        out: list[Any] = [(data.files[0], lo, hi - lo)]
    else:
        out = list(data.files)
    if data.index_file:
        out.append(data.index_file)
    return out


def recordio_part(records: int, part: int, parts: int) -> np.ndarray:
    """The index rows (in offset order) of the records ImageRecordIter reads as part ``part``
    of ``parts`` when it has the ``.idx`` (dmlc's IndexedRecordIOSplitter::ResetPartition:
    ``ceil(records / parts)`` records a part, the last one short)."""
    step = -(-records // parts)
    return np.arange(min(records, step * part), min(records, step * (part + 1)))


def check_space(tasks: list[Any], data_dir: str | None, seed: int) -> None:
    """Before a run: each suite dataset the training tasks will make (the folder, and each
    packed format a task's framework reads) fits in the data dir's free space; a ConfigError
    naming the path, the bytes needed and the bytes free otherwise (exit 2, nothing made).
    Host side: reads the adapters' declarations only."""
    from suite.adapters import ADAPTERS
    from suite.datasets.location import resolve_data_dir

    root = Path(data_dir) if data_dir else resolve_data_dir().path
    wanted: dict[str, tuple[M.DatasetParams, set[str]]] = {}
    for t in tasks:
        p = t.params
        if t.level != "training" or p.get("data") or "dataset" not in p or "format" not in p:
            continue
        try:
            cls = ADAPTERS.load(t.framework)
        except ConfigError:
            continue
        if "training" not in cls.levels or cls.loader_declined(p["format"]):
            continue  # skipped on the host: nothing made for it
        dp = suite_params(p, seed)
        wanted.setdefault(dp.name, (dp, set()))[1].add(p["format"])
    need = 0
    what = []
    for name, (dp, fmts) in wanted.items():
        final = root / name
        manifest = final / M.MANIFEST
        have: set[str] = set()
        if manifest.is_file():
            try:
                have = set(M.read_manifest(final).get("formats", {}))
            except ConfigError:
                have = set()
        missing = ({"folder"} | fmts) - have
        if missing:
            need += (M.estimate_bytes(dp) - M.SPACE_MARGIN_BYTES) * len(missing)
            what.append(f"{name} ({', '.join(sorted(missing))})")
    if need:
        M.check_space(root, need + M.SPACE_MARGIN_BYTES, "making " + "; ".join(what))


# -- planning (host side: reads the adapters' declarations, imports no framework) -------------


def readers_of(fmt: str) -> list[str]:
    """The registered adapters that run the training level and declare a loader for ``fmt``
    (read from their classes)."""
    from suite.adapters import ADAPTERS

    return ADAPTERS.names_where(
        lambda c: fmt in getattr(c, "loaders", {}) and "training" in getattr(c, "levels", ())
    )


def with_readers(reason: str, fmt: str) -> str:
    """A framework's reason for not reading ``fmt``, naming those that do."""
    names = readers_of(fmt)
    if not names:
        return reason
    return f"{reason}; {fmt} is read by: {', '.join(names)} (--framework {names[0]})"


@dataclass
class UserData:
    """What planning found at ``--data``: the layout, the loader formats it holds, samples,
    classes, bytes, the label base (packed formats), how its index was had."""

    path: str
    layout: str
    formats: list[str]
    samples: int | None
    classes: int | None
    bytes: int
    files: int
    label_base: int | None = None
    label_base_source: str | None = None
    index: str | None = None
    notes: list[str] = field(default_factory=list)
    #: TFRecord and WebDataset: the samples in each shard (ranks read whole shards)
    shard_samples: list[int] | None = None

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)

    def describe(self) -> str:
        """One phrase: 'the dataset at PATH (imagefolder: 328 samples, 10 classes, 12.3 MB)'."""
        parts = [f"{self.samples:,} samples" if self.samples is not None else None,
                 f"{self.classes:,} classes" if self.classes is not None else None,
                 M.human_bytes(self.bytes)]  # fmt: skip
        what = ", ".join(p for p in parts if p)
        return f"the dataset at {self.path} ({self.layout}: {what})"


def inspect_user_data(path: str, data_dir: str | None, label_base: int | None) -> UserData:
    """``--data PATH`` at planning: its layout detected and checked (one ConfigError for what
    cannot be used), a packed format's index walked (or taken from the cache: the worker reuses
    it), and a format no registered adapter reads refused."""
    found = L.detect(path, cache_dir=index_cache_dir(data_dir))
    formats = found.held_formats()
    for fmt in formats:
        if not readers_of(fmt):
            what = L.OTHER_FORMATS.get(found.layout, f"a {found.layout} dataset")
            readable = {f: readers_of(f) for f in L.LAYOUT_FORMAT.values()}
            have = "; ".join(f"{f} ({', '.join(r)})" for f, r in readable.items() if r)
            raise ConfigError(
                f"--data {path}: {what}, which no registered adapter reads; the loaders read: "
                f"{have}: convert it to one of those (e.g. an ImageFolder of its images)"
            )
    out = UserData(str(path), found.layout, formats, found.samples,
                   len(found.classes) if found.classes is not None else None, found.bytes,
                   len(found.files), notes=list(found.notes))  # fmt: skip
    if found.layout == "suite":
        out.label_base, out.label_base_source = 0, "a suite dataset: 0-based"
    elif found.layout == "imagefolder":
        out.label_base, out.label_base_source = (
            0,
            "ImageFolder: the sorted class folders' positions",
        )
        out.index = found.listing
    else:
        index, how = packed_index(found, data_dir)
        out.samples, out.classes, out.index = index.samples, index.classes(), how
        if found.layout in ("tfrecord", "webdataset"):
            out.shard_samples = index.shard_counts()
            out.notes += L.empty_shard_notes(index.files, out.shard_samples)
        out.label_base, out.label_base_source = label_base_of(index, label_base, path)
        out.notes += list(index.notes)
        out.notes += label_notes(index, out.label_base)
    if not out.samples:
        raise ConfigError(f"--data {path}: holds no samples; give a dataset with images in it")
    return out
