"""``make_imagefolder``: the suite's seeded, ImageNet-like image set, made once and reused.

A dataset is a directory ``<data dir>/<name>/`` named by its parameters::

    manifest.json        parameters, seed, JPEG statistics, file-list digest, formats
    folder/              the ImageFolder layout: n00000000/n00000000_0.JPEG, ...
    webdataset/          train-000000.tar ...           (suite/datasets/formats.py)
    tfrecord/            train-00000-of-00008 ...
    recordio/            train.rec, train.idx, train.lst

The folder is made in a temporary directory beside the final one (``.<name>.tmp-<pid>``) and
renamed into place after its manifest is written and the file system synced, so a directory
with a manifest is complete: a full disk, Ctrl-C or a crash leaves only a temporary
directory, which the next make removes. A second make with the same parameters reuses the
directory after checking its file list against the manifest (names and sizes: one ``stat``
a file). A lock file keeps two processes from making the same dataset at once.

Images are rendered by :mod:`suite.datasets.synth` in a process pool (every usable core);
each image is a pure function of ``(seed, index)``, so the bytes do not depend on the number
of processes. Host side: NumPy and Pillow, no framework.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import multiprocessing
import os
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from suite.datasets import synth
from suite.errors import ConfigError

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "dlsuite-dataset/1"
FOLDER = "folder"
#: bump when the generator's output changes: a new version is a new dataset (a new name)
GENERATOR_VERSION = 1
#: the sizes `dlsuite data make --size` knows: (classes, images)
SIZES: dict[str, tuple[int, int]] = {"quick": (100, 2_000), "full": (1_000, 50_000)}
#: ImageNet train's figures the generator is tuned to (the issue's: mean ~110 KB per JPEG,
#: typical 500x375 px, quality ~90)
IMAGENET_REFERENCE = {
    "mean_bytes": 110_000,
    "typical_size": [500, 375],
    "jpeg_quality": 90,
    "source": "ILSVRC-2012 train: 1.28 M JPEGs, about 140 GB (mean ~110 KB); most common "
    "size 500x375",
}
#: bytes per image the space check plans for (over the mean, for the spread and the file
#: system's blocks) and the slack on top of the estimate
ESTIMATE_BYTES_PER_IMAGE = 130_000
SPACE_MARGIN_BYTES = 64 << 20
CHUNK = 32  # images per pool task: enough to amortise the round trip, small for progress


class DatasetError(ConfigError):
    """A dataset cannot be made or used; one line naming the path and the fix (exit 2)."""


@dataclass(frozen=True)
class DatasetParams:
    """What decides a dataset's content (and so its name)."""

    classes: int
    images: int
    seed: int = 0
    quality: int = synth.JPEG_QUALITY
    size: str = "custom"

    def check(self) -> None:
        if not 1 <= self.classes <= 100_000:
            raise ConfigError(f"--classes {self.classes}: give a number from 1 to 100000")
        if not self.classes <= self.images <= 10_000_000:
            raise ConfigError(
                f"--images {self.images}: give at least one image per class ({self.classes}) "
                "and at most 10000000"
            )
        if not 0 <= self.seed < 2**32:
            raise ConfigError(f"--seed {self.seed}: give an integer from 0 to {2**32 - 1}")
        if not 1 <= self.quality <= 100:
            raise ConfigError(f"--quality {self.quality}: give a JPEG quality from 1 to 100")

    def content(self) -> dict[str, Any]:
        """Everything that decides the bytes (``size`` is only a label)."""
        return {
            "classes": self.classes,
            "images": self.images,
            "seed": self.seed,
            "quality": self.quality,
            "generator_version": GENERATOR_VERSION,
        }

    @property
    def key(self) -> str:
        text = json.dumps(self.content(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    @property
    def name(self) -> str:
        return f"imagenet-like-{self.size}-{self.images}x{self.classes}-s{self.seed}-{self.key}"


def params_for(
    size: str = "quick",
    *,
    seed: int = 0,
    classes: int | None = None,
    images: int | None = None,
    quality: int = synth.JPEG_QUALITY,
) -> DatasetParams:
    """The parameters of a named size, with ``classes``/``images`` overriding its counts."""
    if size not in SIZES:
        raise ConfigError(f"--size {size!r}: use one of: {', '.join(SIZES)}")
    c, n = SIZES[size]
    custom = (classes is not None and classes != c) or (images is not None and images != n)
    p = DatasetParams(
        classes=classes if classes is not None else c,
        images=images if images is not None else n,
        seed=seed,
        quality=quality,
        size=f"{size}-custom" if custom else size,
    )
    p.check()
    return p


def class_name(cls: int) -> str:
    """A WordNet-like folder name; sorted names give the class indices (ImageFolder's rule)."""
    return f"n{cls:08d}"


def image_specs(p: DatasetParams) -> list[synth.ImageSpec]:
    """Every image: index ``i`` is class ``i % classes`` (classes as balanced as the count
    allows), numbered within its class; its pixel size drawn from ``(seed, i)``."""
    out = []
    for i in range(p.images):
        cls, j = i % p.classes, i // p.classes
        w, h = synth.image_size(np.random.default_rng([p.seed, i, 0x73697A65]))  # "size"
        name = class_name(cls)
        out.append(synth.ImageSpec(i, cls, w, h, f"{name}/{name}_{j}.JPEG"))
    return out


# -- the process pool ----------------------------------------------------------------------

_BANK: synth.NoiseBank | None = None


def _init_worker(seed: int, size: int) -> None:
    """Pool initializer where the bank was not inherited (a start method other than fork)."""
    global _BANK
    if _BANK is None or _BANK.size < size:
        _BANK = synth.NoiseBank(seed, size)


def _render_chunk(
    out_dir: str, seed: int, quality: int, specs: list[list[Any]]
) -> list[tuple[int, int]]:
    """Render and write ``specs``; (index, bytes) of each."""
    assert _BANK is not None
    done = []
    for index, cls, w, h, relpath in specs:
        data = synth.encode_jpeg(synth.render(_BANK, seed, index, cls, w, h), quality)
        with open(os.path.join(out_dir, relpath), "wb") as fh:
            fh.write(data)
        done.append((index, len(data)))
    return done


def _pool(workers: int, seed: int, bank_side: int) -> ProcessPoolExecutor:
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods:  # the children inherit the bank the parent made: made once
        return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    return ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(seed, bank_side))


def usable_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


# -- digests and statistics ----------------------------------------------------------------


def list_digest(entries: list[tuple[str, int]]) -> str:
    """sha256 of ``relpath<TAB>bytes`` lines, sorted by path: the file list and sizes."""
    h = hashlib.sha256()
    ordered = sorted(entries)
    for i in range(0, len(ordered), 65536):  # hashed in chunks: 1.28M lines in about a second
        h.update("".join(f"{rel}\t{size}\n" for rel, size in ordered[i : i + 65536]).encode())
    return h.hexdigest()


def scan_sizes(root: Path) -> list[tuple[str, int]]:
    """(relative path, bytes) of every regular file under ``root`` (hidden ones skipped)."""
    out = []
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for f in files:
            if f.startswith("."):
                continue
            full = os.path.join(dirpath, f)
            out.append((os.path.relpath(full, root), os.stat(full).st_size))
    return out


def jpeg_statistics(sizes: list[int], dims: list[tuple[int, int]]) -> dict[str, Any]:
    """What the manifest records of the JPEGs: bytes and pixel sizes."""
    b = np.asarray(sizes, dtype=np.float64)
    w = np.asarray([d[0] for d in dims], dtype=np.float64)
    h = np.asarray([d[1] for d in dims], dtype=np.float64)
    px = w * h
    shapes: dict[tuple[int, int], int] = {}
    for d in dims:
        shapes[d] = shapes.get(d, 0) + 1
    common = sorted(shapes.items(), key=lambda kv: -kv[1])[:6]
    return {
        "count": int(b.size),
        "total_bytes": int(b.sum()),
        "mean_bytes": float(b.mean()),
        "median_bytes": float(np.median(b)),
        "p5_bytes": float(np.percentile(b, 5)),
        "p95_bytes": float(np.percentile(b, 95)),
        "min_bytes": int(b.min()),
        "max_bytes": int(b.max()),
        "mean_width": float(w.mean()),
        "mean_height": float(h.mean()),
        "median_width": float(np.median(w)),
        "median_height": float(np.median(h)),
        "mean_pixels": float(px.mean()),
        "bits_per_pixel": float(8 * b.sum() / px.sum()),
        "common_sizes": [{"width": s[0], "height": s[1], "share": n / b.size} for s, n in common],
        "portrait_share": float(np.mean(h > w)),
    }


# -- making --------------------------------------------------------------------------------


@dataclass
class Dataset:
    """A made (or found) dataset: its directory and manifest."""

    path: Path
    manifest: dict[str, Any]
    reused: bool = False

    @property
    def folder(self) -> Path:
        return self.path / FOLDER

    def format_path(self, fmt: str) -> Path:
        return self.path / self.manifest["formats"][fmt]["path"]


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def existing_parent(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_space(where: Path, needed: int, what: str) -> None:
    """ConfigError naming the path and the bytes needed when ``where``'s file system has less
    free (for an unprivileged writer) than ``needed``."""
    probe = existing_parent(where)
    free = free_bytes(probe)
    if free < needed:
        raise DatasetError(
            f"data dir {where}: {what} needs about {human_bytes(needed)} ({needed} bytes) but "
            f"its file system has {human_bytes(free)} free; free some space or choose another "
            "--data-dir (DLSUITE_DATA_DIR)"
        )


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} TB"


def estimate_bytes(p: DatasetParams, formats: int = 1) -> int:
    """Bytes on disk the space check plans for: the folder and ``formats - 1`` packed copies."""
    scale = max(0.3, (p.quality / synth.JPEG_QUALITY) ** 3)  # a rough guard for other qualities
    return int(p.images * ESTIMATE_BYTES_PER_IMAGE * scale * formats) + SPACE_MARGIN_BYTES


@contextlib.contextmanager
def dataset_lock(root: Path, name: str) -> Iterator[None]:
    """An exclusive ``flock`` on ``<root>/.<name>.lock`` (released when the holder dies)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _remove_stale(root: Path, name: str) -> None:
    """Temporary directories of earlier makes of ``name`` (the lock is held: none is live)."""
    for p in root.glob(f".{name}.tmp-*"):
        shutil.rmtree(p, ignore_errors=True)


def read_manifest(path: Path) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = json.loads((path / MANIFEST).read_text())
    except OSError as exc:
        raise DatasetError(
            f"{path}: cannot read its {MANIFEST} ({exc.strerror}); remove the directory to make "
            "the dataset again"
        ) from None
    except ValueError as exc:
        raise DatasetError(
            f"{path / MANIFEST}: not valid JSON ({exc}); remove {path} to make the dataset again"
        ) from None
    return doc


def write_manifest(path: Path, doc: dict[str, Any]) -> None:
    """Atomically: a temporary file beside it, fsynced, renamed over it."""
    from suite.rundir import write_json_atomic

    write_json_atomic(path / MANIFEST, doc)


def verify_folder(ds_path: Path, manifest: dict[str, Any]) -> None:
    """The folder's files against the manifest's digest (names and sizes, a ``stat`` each);
    DatasetError naming what differs and the fix."""
    entry = manifest["formats"][FOLDER]
    found = scan_sizes(ds_path / entry["path"])
    if list_digest(found) == entry["digest"] and len(found) == entry["files"]:
        return
    raise DatasetError(
        f"{ds_path}: its folder holds {len(found)} files, the manifest lists {entry['files']} "
        "(or their sizes differ): the dataset was changed after it was made; remove the "
        "directory (or run `dlsuite data make --force`) to make it again"
    )


Progress = Callable[[str, int, int], None]


def rich_progress(tty_only: bool = False) -> tuple[Progress, Callable[[], None]]:
    """A rich progress bar for :func:`make_imagefolder`'s ``progress`` (and its closer), on
    stderr; with ``tty_only``, shown only where stderr is a terminal (or ``DLSUITE_PROGRESS=1``),
    as the runner's bar is."""
    import os

    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True)  # stdout stays for what the command prints
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        transient=False,
        console=console,
        disable=tty_only and not console.is_terminal and os.environ.get("DLSUITE_PROGRESS") != "1",
    )
    tasks: dict[str, Any] = {}

    def update(what: str, done: int, total: int) -> None:
        if not bar.live.is_started:
            bar.start()
        if what not in tasks:
            tasks[what] = bar.add_task(what, total=total)
        bar.update(tasks[what], completed=done, total=total)

    def close() -> None:
        if bar.live.is_started:
            bar.stop()

    return update, close


def make_imagefolder(
    root: Path,
    size: str = "quick",
    seed: int = 0,
    classes: int | None = None,
    images: int | None = None,
    *,
    quality: int = synth.JPEG_QUALITY,
    workers: int | None = None,
    progress: Progress | None = None,
    force: bool = False,
    extra_space: int = 0,
) -> Dataset:
    """The dataset of these parameters under ``root`` (the data dir), made if it is not there.

    A dataset already there is reused after :func:`verify_folder`; ``force`` makes it again.
    Before making, the free space is checked against :func:`estimate_bytes` (plus
    ``extra_space``: the packed formats the caller will add); a file system that fills while
    writing leaves nothing but a temporary directory, removed, and one DatasetError."""
    p = params_for(size, seed=seed, classes=classes, images=images, quality=quality)
    root = Path(root)
    final = root / p.name
    need = estimate_bytes(p) + extra_space
    what = f"the {p.size} dataset ({p.images} images)"
    if force or not (final / MANIFEST).is_file():
        check_space(root, need, what)  # before anything is created (again below, locked)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DatasetError(
            f"data dir {root}: cannot create it ({exc.strerror}); choose a writable --data-dir"
        ) from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise DatasetError(f"data dir {root}: not writable; choose a writable --data-dir")
    with dataset_lock(root, p.name):
        _remove_stale(root, p.name)
        if (final / MANIFEST).is_file() and not force:
            manifest = read_manifest(final)
            verify_folder(final, manifest)
            return Dataset(final, manifest, reused=True)
        check_space(root, need, what)
        tmp = root / f".{p.name}.tmp-{os.getpid()}"
        try:
            manifest = _make(p, tmp, workers or usable_workers(), progress)
            manifest["name"] = p.name
            write_manifest(tmp, manifest)
            os.sync()  # the files are on disk before the directory says it is complete
            if final.exists():  # --force: the old one goes only once the new one is whole
                old = root / f".{p.name}.tmp-old-{os.getpid()}"
                final.rename(old)
                tmp.rename(final)
                shutil.rmtree(old, ignore_errors=True)
            else:
                tmp.rename(final)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DatasetError(
                    f"data dir {root}: the file system filled while making {p.name} "
                    f"({exc.strerror}); nothing was kept; free about "
                    f"{human_bytes(estimate_bytes(p))} or choose another --data-dir"
                ) from None
            raise
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return Dataset(final, manifest)


def _make(p: DatasetParams, tmp: Path, workers: int, progress: Progress | None) -> dict[str, Any]:
    global _BANK
    t0 = time.perf_counter()
    specs = image_specs(p)
    (tmp / FOLDER).mkdir(parents=True)
    for c in range(p.classes):
        (tmp / FOLDER / class_name(c)).mkdir()
    side = synth.bank_size([(s.width, s.height) for s in specs])
    _BANK = synth.NoiseBank(p.seed, side)  # before the fork: every child inherits it
    t_bank = time.perf_counter() - t0
    sizes = [0] * p.images
    chunks = [[s.to_list() for s in specs[i : i + CHUNK]] for i in range(0, len(specs), CHUNK)]
    done = 0
    what = f"making {p.name}"
    # the progress bar's thread starts only after the pool has forked its processes
    if progress and workers == 1:
        progress(what, 0, p.images)
    folder = str(tmp / FOLDER)
    if workers == 1:
        for chunk in chunks:
            for index, n in _render_chunk(folder, p.seed, p.quality, chunk):
                sizes[index] = n
            done += len(chunk)
            if progress:
                progress(what, done, p.images)
    else:
        with _pool(workers, p.seed, side) as pool:
            pending: set[Future[list[tuple[int, int]]]] = {
                pool.submit(_render_chunk, folder, p.seed, p.quality, c) for c in chunks
            }
            try:
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_EXCEPTION, timeout=0.5)
                    for fut in finished:
                        for index, n in fut.result():  # a worker's OSError is raised here
                            sizes[index] = n
                            done += 1
                    if progress:
                        progress(what, done, p.images)
            except BaseException:
                for fut in pending:
                    fut.cancel()
                raise
    _BANK = None
    elapsed = time.perf_counter() - t0
    entries = [(s.relpath, sizes[s.index]) for s in specs]
    stats = jpeg_statistics(sizes, [(s.width, s.height) for s in specs])
    import PIL

    return {
        "format": MANIFEST_FORMAT,
        "params": {**asdict(p), "generator_version": GENERATOR_VERSION},
        "key": p.key,
        "layout": "imagefolder",
        "classes": p.classes,
        "images": p.images,
        "class_names": "n%08d for class 0 .. classes-1 (sorted folder names = labels)",
        "created_at": _now(),
        "generator": {
            "version": GENERATOR_VERSION,
            "module": "suite.datasets.synth",
            "detail_scale": synth.DETAIL_SCALE,
            "alphas": list(synth.ALPHAS),
            "jpeg_quality": p.quality,
            "chroma_subsampling": "4:2:0",
            "pillow": PIL.__version__,
            "libjpeg_turbo": _libjpeg_turbo_version(),
            "bank_side": side,
        },
        "making": {
            "workers": workers,
            "seconds": elapsed,
            "bank_seconds": t_bank,
            "images_per_s": p.images / elapsed if elapsed > 0 else None,
            "mb_per_s": stats["total_bytes"] / 1e6 / elapsed if elapsed > 0 else None,
        },
        "jpeg": stats,
        "imagenet_reference": IMAGENET_REFERENCE,
        "digest": list_digest(entries),
        "formats": {
            FOLDER: {
                "path": FOLDER,
                "layout": "imagefolder",
                "files": len(entries),
                "bytes": sum(n for _, n in entries),
                "digest": list_digest(entries),
            }
        },
    }


def _libjpeg_turbo_version() -> str | None:
    try:
        from PIL import features

        return features.version("libjpeg_turbo")
    except Exception:  # noqa: BLE001 - a provenance detail, never a failure
        return None


def _now() -> str:
    from suite.provenance import now_iso

    return now_iso()


def file_list(ds: Dataset) -> list[tuple[str, int]]:
    """Every image of the folder as ``(relative path, label)``, in index order."""
    p = DatasetParams(
        **{k: ds.manifest["params"][k] for k in ("classes", "images", "seed", "quality", "size")}
    )
    return [(s.relpath, s.cls) for s in image_specs(p)]
