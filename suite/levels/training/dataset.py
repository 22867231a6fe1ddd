"""The dataset a training-level task reads: found (``--data``) or made on first use (the
suite's seeded set, cached by its parameters in the data dir), and its catalogue: every
sample's id, label, key and file, which the loaders report against.

Made in the worker, i.e. in the task's framework environment: the folder with NumPy and
Pillow, a packed format with its framework's own writer run by this interpreter
(suite/datasets/formats.py). Imports no framework.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.adapters.data_words import LoaderSpec
from suite.datasets import layout as L
from suite.datasets import make as M
from suite.errors import ConfigError

#: the dataset fields of a task's parameters (the suite's set by size, or a user's path)
DATASET_KEYS = ("dataset", "images", "classes", "data")


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
            decode=decode,
        )  # fmt: skip

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
        if self.made_s is not None:
            out["made_s"] = self.made_s
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
           say: Any = None) -> TaskData:  # fmt: skip
    """The task's dataset in format ``fmt``: the user's (``params['data']``, detected and
    checked) or the suite's, made here when missing."""
    if params.get("data"):
        return _user(Path(params["data"]), fmt)
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


def _user(path: Path, fmt: str) -> TaskData:
    """A user's dataset (``--data``): its layout must be ``fmt``'s (one line otherwise)."""
    found = L.detect(path)
    if found.layout == "suite":
        if fmt not in found.formats:
            have = ", ".join(found.formats)
            raise ConfigError(
                f"--data {path}: this suite dataset has no {fmt} copy (it has: {have}); run "
                f"`dlsuite data make --format {fmt}` with its size, or choose format = one of those"
            )
        manifest = found.manifest or {}
        ds = M.Dataset(path, manifest)
        root = path.parent
        params = {"dataset": manifest["params"]["size"].split("-")[0],
                  "images": manifest["images"], "classes": manifest["classes"]}  # fmt: skip
        data = ensure(params, fmt, str(root), int(manifest["params"]["seed"]))
        data.origin = "the user's (--data), a suite dataset"
        del ds
        return data
    layout = {"imagefolder": "folder"}.get(found.layout, found.layout)
    if layout != fmt:
        raise ConfigError(
            f"--data {path}: holds a {found.layout} dataset, the task reads {fmt}; "
            f"set format = {layout} (or give a {fmt} dataset)"
        )
    if fmt != "folder":
        raise ConfigError(
            f"--data {path}: a user's {fmt} dataset carries no list of its samples to check "
            "exactly-once delivery against in this version; give its ImageFolder copy (or a "
            "suite dataset: `dlsuite data make --format " + fmt + "`)"
        )
    classes = sorted(found.classes or [])
    cls_index = {c: i for i, c in enumerate(classes)}
    files = sorted(found.files)
    relpaths = [os.path.relpath(f, path) for f in files]
    labels = [cls_index[Path(r).parts[0]] for r in relpaths]
    keys = [r for r in relpaths]  # stems may repeat across classes in a user's folder
    return TaskData(
        path=path, format=fmt, format_path=path, files=[str(f) for f in files],
        bytes=found.bytes, catalogue=Catalogue(relpaths, labels, keys, len(classes)),
        origin="the user's (--data)", digest=L.content_digest(files, path), folder=path,
    )  # fmt: skip


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
